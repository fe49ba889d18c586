// interpose/pool/own_vmm.cpp: interpose/pool/own_vmm.h over
// policy::own_vmm::Cache, with the real driver (through the seam,
// interpose/driver.h) as its Driver.
//
// Which cuMemCreate calls are cacheable: pinned device memory (any handle
// types, compression, RDMA flag: they are part of the key, compared byte
// for byte with the whole CUmemAllocationProp), flags 0, a device ordinal
// below 64. A cache hit needs an earlier identical request the driver
// accepted, so the driver's validation of size and properties stands.
#include "interpose/pool/own_vmm.h"

#include <cstddef>
#include <cstring>
#include <new>
#include <string>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/service_thread.h"
#include "policy/clock.h"
#include "policy/own_vmm/cache.h"

namespace pagefast::pool::own_vmm {

namespace {

static_assert(policy::own_vmm::kOk == CUDA_SUCCESS, "the cache's success code is the driver's");
static_assert(policy::own_vmm::kInvalidValue == CUDA_ERROR_INVALID_VALUE, "the cache's refusal is the driver's");
static_assert(offsetof(CUmemAccessDesc, flags) == sizeof(CUmemLocation), "a descriptor is its location, then flags");

// More descriptors than devices can exist is not a real call: forwarded.
constexpr size_t kMaxDescs = 4096;
using driver::kMissing;

}  // namespace

// The cache's driver: the seam's calls (own_vmm_state.h names it).
class SeamDriver final : public policy::own_vmm::Driver {
 public:
  int create(uint64_t bytes, const std::string& prop_bytes, uint64_t* handle) override {
    const RealDriver* real = real_driver();
    if (prop_bytes.size() != sizeof(CUmemAllocationProp)) return kMissing;
    CUmemAllocationProp prop;
    std::memcpy(&prop, prop_bytes.data(), sizeof prop);
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = driver::create(real, &h, bytes, &prop, 0);
    if (r == CUDA_SUCCESS) *handle = h;
    return r;
  }
  int release(uint64_t handle) override { return driver::release(real_driver(), handle); }
  int map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags) override {
    return driver::map(real_driver(), addr, bytes, offset, handle, flags);
  }
  int unmap(uint64_t addr, uint64_t bytes) override { return driver::unmap(real_driver(), addr, bytes); }
  int set_access(uint64_t addr, uint64_t bytes, const std::string& descs) override {
    const RealDriver* real = real_driver();
    const size_t count = descs.size() / sizeof(CUmemAccessDesc);
    return driver::set_access(real, addr, bytes,
                              count ? reinterpret_cast<const CUmemAccessDesc*>(descs.data()) : nullptr, count);
  }
  int address_free(uint64_t addr, uint64_t bytes) override { return driver::address_free(real_driver(), addr, bytes); }
  uint64_t current_context() override {
    const RealDriver* real = real_driver();
    CUcontext ctx = nullptr;
    driver::ctx_get_current(real, &ctx);
    return reinterpret_cast<uint64_t>(ctx);
  }
  void use_context(uint64_t context) override {
    const RealDriver* real = real_driver();
    if (context) driver::ctx_set_current(real, reinterpret_cast<CUcontext>(context));
  }
  bool wake_worker() override;
  uint64_t now_ns() override { return policy::monotonic_now_ns(); }
  // The room of a device whose memory has not joined the cache.
  policy::own_vmm::NoRoom no_room;
};

namespace {

// Growth ahead's worker (g_process.vmm.worker), one `pagefast-vmm` thread (policy/own_vmm/growth_ahead.h):
// started at the first job, never in a constructor; all signals blocked.
// One, not two: two threads opening pages at once slow each other (60 and
// 72 us a page against 38-45 alone, docs/DRIVER-FACTS.md), so the page the
// program waits for comes later; on the seed loop's first pass two workers
// made the program wait 2.0 ms in all against 0.5 ms with one, and the
// pass took 18.8 ms against 16.2 (docs/data/first-pass-workers-c375c26.txt). The page is a step under the exit stop of service_threads.cpp (enter_step):
// at exit the worker stops taking pages and the exit waits for the page
// it is making, so that no driver call of its overlaps the driver's
// teardown. A forked child never has it: the cache is off there
// (switch_off). The cache requires this: one worker (GrowthAhead::work_one).
constexpr uint64_t kWorkerIdleNs = 100ull * 1000 * 1000;
// A decay step releases at most this many handles (30-34 us each on the
// H200, under the cache's lock), as the pool's releases at most 8 chunks.
constexpr int kDecayHandlesPerStep = 8;

void* worker_main(void*) {
  while (true) {
    if (!enter_step()) break;
    bool worked = false;
    try {
      worked = g_process.vmm.on.load(std::memory_order_acquire) && g_process.vmm.cache->work_one();
    } catch (...) {
      // Out of host memory publishing a page: the program's next call
      // finds the same condition and gives the cache up.
    }
    leave_step();
    if (!worked) {
      try {
        g_process.vmm.cache->wait_for_work(kWorkerIdleNs);
      } catch (...) {
      }
    }
  }
  leave_step();
  return nullptr;
}

// An exception (out of host memory in a record) stops the cache for good:
// the driver gets the program's view back (abandon) and every later call
// is forwarded; one log line. The call that failed answers OUT_OF_MEMORY.
CUresult give_up() {
  bool expected = true;
  if (g_process.vmm.on.compare_exchange_strong(expected, false)) {
    try {
      g_process.vmm.cache->abandon();
    } catch (...) {
    }
    if (g_process.log)
      g_process.log(LogLevel::Warn,
                    "the own-VMM cache ran out of host memory and stopped; the program's VMM calls go to the driver");
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

template <class Call>
CUresult guarded(Call call) {
  try {
    return call();
  } catch (...) {
    return give_up();
  }
}

bool cacheable(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
               unsigned long long flags) {
  return handle && prop && bytes && flags == 0 && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
         prop->location.id < kMaxDevices;
}

}  // namespace

bool SeamDriver::wake_worker() {
  int state = g_process.vmm.worker.load(std::memory_order_acquire);
  if (state == 1) return !exit_stopping();
  if (state < 0) return false;
  // Under the cache's lock: one thread gets here at a time.
  register_exit_stop();
  if (start_service_thread(nullptr, &worker_main, nullptr, "pagefast-vmm") != 0) {
    g_process.vmm.worker.store(-1, std::memory_order_release);
    if (g_process.log)
      g_process.log(LogLevel::Warn,
                    "could not start the pagefast-vmm thread; growth ahead runs on the program's thread");
    return false;
  }
  g_process.vmm.worker.store(1, std::memory_order_release);
  return true;
}

void configure() {
  const PoolConfig& config = g_process.config;
  if (!config.enabled || !config.vmm_cache) return;
  g_process.vmm.driver = new (std::nothrow) SeamDriver();
  if (g_process.vmm.driver)
    g_process.vmm.cache = new (std::nothrow) policy::own_vmm::Cache(
        *g_process.vmm.driver, ledger(), sizeof(CUmemAccessDesc), sizeof(CUmemLocation), config.vmm_grow_ahead, true);
  if (!g_process.vmm.cache) return;
  // Until a device's memory joins with its budget's view, the cache keeps
  // nothing of that device (its budget could not be made: host out of
  // memory); the memory made before the cache joins now.
  for (int device = 0; device < kMaxDevices; ++device)
    g_process.vmm.cache->join(device, &g_process.vmm.driver->no_room);
  {
    std::lock_guard<std::mutex> guard(g_process.create_mutex);
    for (int device = 0; device < kMaxDevices; ++device)
      if (DeviceMemory* memory = device_memory(device)) memory->join_own_vmm();
  }
  g_process.vmm.on.store(true, std::memory_order_release);
}

policy::Holder* join(int device, policy::own_vmm::BudgetView* view) {
  return g_process.vmm.cache ? g_process.vmm.cache->join(device, view) : nullptr;
}

void switch_off() {
  g_process.vmm.on.store(false, std::memory_order_relaxed);
  g_process.vmm.translating.store(false, std::memory_order_relaxed);  // the sleep mutex may be held by a thread gone
}

// Sleep's (own_vmm_sleep.cpp). disown allocates nothing.
bool disown(CUmemGenericAllocationHandle handle) { return on() && g_process.vmm.cache->disown(handle); }
void note_foreign(CUdeviceptr ptr) {
  if (on()) guarded([&] { return g_process.vmm.cache->note_foreign(ptr), CUDA_SUCCESS; });
}

CUresult create(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
                unsigned long long flags) {
  const RealDriver* real = real_driver();
  if (!driver::has(real, &RealDriver::cuMemCreate)) return kMissing;
  const bool by_cache = cacheable(handle, bytes, prop, flags);
  const CUresult r = !by_cache ? driver::create(real, handle, bytes, prop, flags) : guarded([&] {
    const std::string key(reinterpret_cast<const char*>(prop), sizeof *prop);
    const int device = prop->location.id;
    uint64_t cached = 0;
    if (g_process.vmm.cache->take(bytes, key, &cached)) {
      *handle = cached;
      return CUDA_SUCCESS;
    }
    // Out of memory: the device's idle memory goes back (its budget), then
    // the neighbours', each time once more (interpose/pool_api.h).
    CUresult got = driver::create(real, handle, bytes, prop, flags);
    if (got == CUDA_ERROR_OUT_OF_MEMORY)
      got = retried_out_of_memory(device, got, [&] { return driver::create(real, handle, bytes, prop, flags); });
    if (got == CUDA_SUCCESS) g_process.vmm.cache->note_created(*handle, bytes, key, device);
    return got;
  });
  if (r == CUDA_SUCCESS) created(*handle, bytes, prop, by_cache);  // the cache noted what it took: the slot only
  return r;
}

CUresult release(CUmemGenericAllocationHandle handle) {
  const CUresult r = guarded([&] { return CUresult(g_process.vmm.cache->release(handle)); });
  // Cached: the trim thread lets it decay (a program that never calls
  // cuMemAlloc has no pool to start it); over keep_idle, it goes back now.
  start_trim_thread(g_process.config);
  if (r == CUDA_SUCCESS) give_back_idle();
  return r;
}

CUresult map(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags) {
  return guarded([&] { return CUresult(g_process.vmm.cache->map(ptr, bytes, offset, handle, flags)); });
}

CUresult unmap(CUdeviceptr ptr, size_t bytes) {
  return guarded([&] { return CUresult(g_process.vmm.cache->unmap(ptr, bytes)); });
}

CUresult set_access(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count) {
  if ((!desc && count) || count > kMaxDescs) {
    // Not a call the driver accepts: it answers, after the deferred
    // mappings there are gone (so it answers for what the program sees).
    g_process.vmm.cache->before_query(ptr);
    return driver::set_access(real_driver(), ptr, bytes, desc, count);
  }
  return guarded([&] {
    const std::string descs(reinterpret_cast<const char*>(desc), count * sizeof(CUmemAccessDesc));
    return CUresult(g_process.vmm.cache->set_access(ptr, bytes, descs));
  });
}

CUresult address_free(CUdeviceptr ptr, size_t bytes) {
  return guarded([&] { return CUresult(g_process.vmm.cache->address_free(ptr, bytes)); });
}

CUresult retain(CUmemGenericAllocationHandle* handle, void* addr) {
  uint64_t h = 0;
  bool answered = false;
  if (guarded([&] {
        answered = handle && g_process.vmm.cache->retain(reinterpret_cast<uint64_t>(addr), &h);
        return CUDA_SUCCESS;
      }) != CUDA_SUCCESS)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (answered) {
    *handle = h;  // the cache noted it
    return CUDA_SUCCESS;
  }
  const CUresult r = driver::retain_handle(real_driver(), handle, addr);
  if (r == CUDA_SUCCESS) retained(*handle);
  return r;
}

// The cache's answer to an export or a properties query of `handle` (*out;
// out of host memory: CUDA_ERROR_OUT_OF_MEMORY); false: the driver's.
static bool cache_answers(CUmemGenericAllocationHandle handle, bool exporting, CUresult* out) {
  int result = 0;
  bool answered = false;
  const CUresult r = guarded([&] {
    answered = g_process.vmm.cache->check_handle(handle, exporting, &result);
    return CUDA_SUCCESS;
  });
  *out = r != CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : CUresult(result);
  return r != CUDA_SUCCESS || answered;
}

CUresult export_handle(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags) {
  CUresult answer = CUDA_SUCCESS;
  if (!cache_answers(handle, true, &answer))
    answer = driver::export_handle(real_driver(), shareable, handle, type, flags);
  if (answer == CUDA_SUCCESS) exported(handle, shareable, type);
  return answer;
}

CUresult properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  CUresult answer = CUDA_SUCCESS;
  if (cache_answers(handle, false, &answer)) return answer;
  return driver::handle_properties(real_driver(), prop, handle);
}

bool take_range(CUdeviceptr* base, size_t bytes, size_t alignment, CUdeviceptr hint, unsigned long long flags) {
  // An alignment that is not a power of two is the driver's to refuse
  // (CUDA_ERROR_INVALID_VALUE), even where a kept range would fit it.
  if (alignment & (alignment - 1)) return false;
  uint64_t got = 0;
  bool taken = false;
  guarded([&] {
    taken = g_process.vmm.cache->take_range(bytes, alignment, hint, flags, &got);
    return CUDA_SUCCESS;
  });
  if (taken) *base = got;
  return taken;
}

void note_reserved(CUdeviceptr base, size_t bytes) {
  if (on())
    guarded([&] {
      g_process.vmm.cache->note_reserved(base, bytes);
      return CUDA_SUCCESS;
    });
}

void mark_shared(CUmemGenericAllocationHandle handle) {
  int ignored = 0;
  guarded([&] {
    g_process.vmm.cache->check_handle(handle, true, &ignored);
    return CUDA_SUCCESS;
  });
}

void on_device_reset(int device) {
  if (on()) g_process.vmm.cache->forget_device(device);  // allocates nothing
  ledger().forget_device(device);
}

void before_query(CUdeviceptr ptr) {
  if (on()) g_process.vmm.cache->before_query(ptr);
}

uint64_t decay_step() {
  if (!on() || g_process.config.release_delay_ns == policy::kNoReleaseDelay) return policy::kFootprintMaxStepNs;
  const uint64_t now = policy::monotonic_now_ns();
  const uint64_t floor =
      g_process.config.release_threshold_bytes == kUnlimited ? 0 : g_process.config.release_threshold_bytes;
  guarded([&] {
    g_process.vmm.cache->decay_step(now, g_process.config.release_delay_ns, floor, kDecayHandlesPerStep);
    return CUDA_SUCCESS;
  });
  return policy::footprint_step_ns(g_process.config.release_delay_ns);  // as the pools' steps
}

std::string stats_json() {
  if (!g_process.vmm.cache) return "null";
  const policy::own_vmm::CacheStats s = g_process.vmm.cache->stats();
  std::string out = "{";
  auto field = [&out](const char* name, uint64_t value) {
    if (out.size() > 1) out += ", ";
    out += "\"";
    out += name;
    out += "\": " + std::to_string(value);
  };
  field("cached_bytes", s.cached_bytes);
  field("create_hits", s.create_hits);
  field("create_misses", s.create_misses);
  field("deferred_unmaps", s.deferred_unmaps);
  field("revived_maps", s.revived_maps);
  field("access_skipped", s.access_skipped);
  field("real_unmaps", s.real_unmaps);
  field("trimmed_bytes", s.trimmed_bytes);
  field("prefetched", s.prefetched);
  field("ahead_waits", s.ahead_waits);
  field("ahead_wait_ns", s.ahead_wait_ns);
  field("ahead_cancelled", s.ahead_cancelled);
  field("ahead_misdirected", s.ahead_misdirected);
  field("ranges_kept", s.ranges_kept);
  field("ranges_reused", s.ranges_reused);
  field("decayed_bytes", s.decayed_bytes);
  return out + "}";
}

}  // namespace pagefast::pool::own_vmm
