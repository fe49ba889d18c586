// interpose/pool/devices.cpp: interpose/pool_api.h's per-device half over
// the process object (process.h) and each device's DeviceMemory
// (device_memory.h): making a device's memory and its pool, retiring it,
// the out-of-memory retry, the headroom, cuMemGetInfo, peer access and the
// stats. Every path that gives memory back goes through the device's
// budget; none reaches into a part directly.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "policy/pool_report.h"

namespace pagefast::pool {

static_assert(kMaxDevices <= policy::kMaxPeerDevices, "every pooled device must fit in a peer set");

Process g_process;

namespace {

constexpr size_t kLogLineBytes = 512;

// REQUIRES: create_mutex. The device's memory, made if there is none.
DeviceMemory* device_memory_locked(int device) {
  if (DeviceMemory* made = device_memory(device)) return made;
  auto* memory = new (std::nothrow) DeviceMemory(device, g_process.config);
  if (memory) g_process.devices[device].store(memory, std::memory_order_release);
  return memory;
}

// A block the program freed while an importer held it, given back by the
// exporter thread once the last importer closed (ipc.h). That thread has no
// cache of its own worth keeping: a temporary one takes the free and hands
// its quarantine on at once.
void free_held_block(CUdeviceptr dptr) {
  const uint64_t block = dptr;
  free_on_behalf(&block, 1);
}

// The calling thread's context's device; -1 when there is none.
int current_device() {
  const RealDriver* real = loaded_driver();
  CUdevice device = 0;
  if (driver::ctx_get_device(real, &device) != CUDA_SUCCESS) return -1;
  return device >= 0 && device < kMaxDevices ? int(device) : -1;
}

}  // namespace

void log_line(LogLevel level, const char* format, ...) {
  LogSink log = g_process.log;
  if (!log) return;
  char line[kLogLineBytes];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  log(level, line);
}

DeviceMemory* device_memory_made(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (DeviceMemory* made = device_memory(device)) return made;
  std::lock_guard<std::mutex> guard(g_process.create_mutex);
  return device_memory_locked(device);
}

policy::DevicePool* pool_made(const RealDriver* real, CUdevice device, DeviceMemory** memory) {
  DeviceMemory* m = device_memory(int(device));
  if (m && m->pool()) {
    *memory = m;
    return m->pool();
  }
  if (m && m->unpoolable()) return nullptr;
  policy::DevicePool* made = nullptr;
  {
    std::lock_guard<std::mutex> guard(g_process.create_mutex);
    m = device_memory_locked(int(device));
    if (!m) return nullptr;
    if (!g_process.clock) g_process.clock = new (std::nothrow) policy::MonotonicClock();
    if (!g_process.clock) return nullptr;
    made = m->make_pool_locked(real, device, *g_process.clock, g_process.peer_grants[device]);
    if (!made) return nullptr;
    start_trim_thread(g_process.config);
    if (g_process.config.control) ipc::start_control();
  }
  *memory = m;
  return made;
}

policy::DevicePool* pool_for_device(int device) {
  if (!active()) return nullptr;
  DeviceMemory* memory = device_memory(device);
  return memory ? memory->pool() : nullptr;
}

bool pool_live(const policy::DevicePool* pool) {
  if (!pool || !active()) return false;
  const DeviceMemory* memory = device_memory(pool->device());
  return memory && !retired_device(pool->device()) && memory->pool_at(pool->settings().slot) == pool;
}

void on_device_reset(int device) {
  if (device < 0 || device >= kMaxDevices || !active()) return;
  std::lock_guard<std::mutex> guard(g_process.create_mutex);
  if (g_process.retired[device].exchange(true)) return;
  if (device == 0) g_process.info_budget.store(nullptr, std::memory_order_release);
  own_vmm::on_device_reset(device);
  DeviceMemory* memory = device_memory_locked(device);
  // The old pool object stays (leaked on purpose): another thread may be
  // inside it right now, and its chunks may be gone with the context, so
  // nothing is unmapped or released through it.
  // Info, not a warning: the CUDA runtime's own teardown at exit may release
  // the primary context, and that is no news to the user.
  if (memory && memory->retire_locked())
    log_line(LogLevel::Info,
             "the primary context of device %d was reset or destroyed, and with it the device's memory: "
             "pagefast's pool of that device is retired and its allocations go to the driver from now on",
             device);
}

void configure(const PoolConfig& config, LogSink log) {
  g_process.config = config;
  g_process.log = log;
  if (!config.enabled) return;
  own_vmm::configure();
  ipc::set_free_held(&free_held_block);
  ipc::set_control(&control_op);
  ipc::set_tag_control(&tag_control_op);
  g_process.active.store(true, std::memory_order_release);
}

void after_fork_child() {
  g_process.active.store(false, std::memory_order_release);
  g_process.info_budget.store(nullptr, std::memory_order_release);
  own_vmm::switch_off();
  service_threads_after_fork_child();
}

bool reclaim_for_driver(int device) {
  if (!active()) return false;
  if (device == kCurrentDevice) device = current_device();
  else if (device < 0 || device >= kMaxDevices) return false;
  uint64_t released = 0;
  bool held = false;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (device >= 0 && d != device) continue;
    DeviceMemory* memory = d == device ? device_memory_made(d) : device_memory(d);
    if (!memory || retired_device(d)) continue;
    held = true;
    released += memory->reclaim();
  }
  if (released)
    log_line(LogLevel::Debug, "the driver answered out of memory: %s of idle memory given back, retrying once",
             human_bytes(released).c_str());
  // A retry also when nothing went back here: the pagefast-trim thread may
  // have given the same idle memory back between the refused call and this
  // reclaim (it keeps the headroom), and then the memory is free already.
  return held;
}

int give_back_for_neighbour(const char* bus_id) {
  if (!active() || !bus_id) return 0;
  uint64_t released = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceMemory* memory = device_memory(d);
    if (!memory || retired_device(d) || std::strcmp(memory->bus_id(), bus_id) != 0) continue;
    released += memory->give_back_for_neighbour();
  }
  if (released)
    log_line(LogLevel::Debug, "another process ran short on device %s: %s of idle memory given back", bus_id,
             human_bytes(released).c_str());
  const uint64_t mib = released >> 20;
  return int(mib > uint64_t(INT32_MAX) ? INT32_MAX : mib);
}

void give_back_idle() {
  if (!active()) return;
  policy::MonotonicClock clock;
  for (int d = 0; d < kMaxDevices; ++d)
    if (DeviceMemory* memory = device_memory(d); memory && !retired_device(d)) memory->budget().give_back_idle(clock);
}

uint64_t reclaim_from_neighbours(int device) {
  if (!active()) return 0;
  if (device == kCurrentDevice) device = current_device();
  if (device < 0 || device >= kMaxDevices) return 0;
  DeviceMemory* memory = device_memory_made(device);
  return memory && !retired_device(device) ? memory->budget().from_neighbours(policy::kAllIdle) : 0;
}

void relieve_for_managed(size_t bytes) {
  if (!active()) return;
  const int device = current_device();
  DeviceMemory* memory = device_memory(device);
  if (!memory || retired_device(device) || memory->budget().idle_bytes() == 0) return;
  const RealDriver* real = loaded_driver();
  size_t free_now = 0, total = 0;
  if (driver::mem_get_info(real, &free_now, &total) != CUDA_SUCCESS) return;
  memory->relieve_for_managed(bytes, free_now);
}

void relieve_headroom() {
  if (!active()) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceMemory* memory = device_memory(d);
    if (memory && memory->pool()) memory->relieve();
  }
}

namespace {

// The device whose memory cuMemGetInfo just answered for (it succeeded: a
// context is current): with one device shown by the driver, that device,
// without a call; else the driver's cuCtxGetDevice (which may lock); -1
// when it fails.
int info_device(const RealDriver* real) {
  int count = g_process.device_count.load(std::memory_order_relaxed);
  if (__builtin_expect(count == 0, 0) && driver::device_count(real, &count) == CUDA_SUCCESS && count > 0)
    g_process.device_count.store(count, std::memory_order_relaxed);
  if (count == 1) return 0;
  CUdevice device = 0;
  return driver::ctx_get_device(real, &device) == CUDA_SUCCESS ? int(device) : -1;
}

// mem_info's whole way after the driver's answer: the device asked for,
// its memory made, its holders asked. With one device shown, that
// device's budget becomes the one the next calls answer from at once.
__attribute__((noinline)) CUresult mem_info_asked(size_t* free_bytes, size_t* total_bytes) {
  if (!active()) return CUDA_SUCCESS;
  const int device = info_device(loaded_driver());
  // The device's budget answers (DeviceBudget::mem_info): its pools' and
  // the own-VMM cache's idle memory, and its limit, which holds before the
  // first allocation too.
  DeviceMemory* memory = device_memory(device);
  if (!memory) memory = device_memory_made(device);
  if (!memory || retired_device(device)) return CUDA_SUCCESS;
  if (device == 0 && g_process.device_count.load(std::memory_order_relaxed) == 1 &&
      g_process.info_budget.load(std::memory_order_relaxed) != &memory->budget()) {
    std::lock_guard<std::mutex> guard(g_process.create_mutex);
    if (active() && !retired_device(0)) g_process.info_budget.store(&memory->budget(), std::memory_order_release);
  }
  memory->budget().mem_info(free_bytes, total_bytes);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult mem_info(MemGetInfoFn call, size_t* free_bytes, size_t* total_bytes) {
  const CUresult result = call(free_bytes, total_bytes);
  if (result != CUDA_SUCCESS) return result;
  // The one device the driver shows, with no holder to ask
  // (DeviceBudget::mem_info_from_words): inline, no call.
  static_assert(std::is_same<size_t, uint64_t>::value, "cuMemGetInfo's figures are the budget's words");
  policy::DeviceBudget* budget = g_process.info_budget.load(std::memory_order_acquire);
  if (__builtin_expect(budget && budget->mem_info_from_words(free_bytes, total_bytes), 1)) return CUDA_SUCCESS;
  return mem_info_asked(free_bytes, total_bytes);
}

namespace {

void change_peer_access(int accessor, int owner, bool enabled) {
  if (!active()) return;
  if (accessor < 0 || accessor >= kMaxDevices || owner < 0 || owner >= kMaxDevices || accessor == owner) return;
  std::lock_guard<std::mutex> guard(g_process.create_mutex);
  int& grants = g_process.peer_grants[owner][accessor];
  if (enabled) {
    if (grants++ > 0) return;  // another context pair granted it already
  } else {
    if (grants == 0 || --grants > 0) return;  // still granted through another pair
  }
  DeviceMemory* memory = device_memory(owner);
  if (!memory) return;  // made later, with the grants
  int refused = 0;
  memory->each_pool([&refused, enabled, accessor](int, policy::DevicePool* pool) {
    refused += enabled ? pool->add_peer(accessor) : pool->remove_peer(accessor);
  });
  if (refused)
    log_line(LogLevel::Warn, "peer access: %d mapping(s) of device %d's pool refused to %s device %d; %s", refused,
             owner, enabled ? "open to" : "close to", accessor,
             enabled ? "peer copies and kernels on them may fault (run with PAGEFAST_CONF=pool:off if so)"
                     : "that device keeps access to them");
}

}  // namespace

void on_peer_access_enabled(int accessor, int owner) { change_peer_access(accessor, owner, true); }
void on_peer_access_disabled(int accessor, int owner) { change_peer_access(accessor, owner, false); }

bool stats_of(int device, policy::PoolStats* out) {
  if (!pool_for_device(device)) return false;
  *out = device_memory(device)->stats();
  return true;
}

std::string stats_json() {
  // A labelled list (docs/STATS.md): {"device": 0, <the pool fields>}.
  std::string text = "{\"devices\": [";
  bool first = true;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (!pool_for_device(d)) continue;
    const std::string fields = policy::stats_json_object(device_memory(d)->stats());  // "{...}"
    text += first ? "{\"device\": " : ", {\"device\": ";
    text += std::to_string(d) + (fields.size() > 2 ? ", " : "") + fields.substr(1);
    first = false;
  }
  return text + "]}";
}

std::string report_text() {
  std::string text;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (!pool_for_device(d)) continue;
    device_memory(d)->each_pool([&text, d](int slot, policy::DevicePool* pool) {
      // Each pool under its device's line, named as the user named it: the
      // tag and policy of a region's pool, and whether it sleeps (its in
      // use is then not mapped).
      std::string part = policy::report_text(d, pool->report());
      std::string words;
      const char* name = nullptr;
      bool keep = false;
      if (slot > 0 && region::slot_info(slot, &name, &keep) && name)
        words += std::string(", tag \"") + name + "\" (" + (keep ? "keep" : "discard") + ")";
      if (pool->asleep()) words += ", asleep: its blocks in use are not mapped";
      const size_t eol = part.find('\n');
      if (eol != std::string::npos) part.insert(eol, words);
      text += part;
    });
  }
  return text;
}

}  // namespace pagefast::pool
