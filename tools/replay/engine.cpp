// tools/replay/engine.cpp: pagefast-replay-engine, replays one trace
// against ONE allocator in this process and prints one RESULT line
// (docs/TRACE.md "pagefast-replay"). tools/pagefast-replay runs it once per
// allocator and repeat, each in a fresh process.
//
//   pagefast-replay-engine --allocator cudaMalloc|cudaMallocAsync|pagefast
//                          [--device N] [--print-sequence] TRACE
//   pagefast-replay-engine --check TRACE   (no CUDA: validate, summarise)
//   pagefast-replay-engine --dump TRACE    (no CUDA: every record, file order)
//
// libcuda.so.1 is opened with dlopen at run time, so the same binary runs
// on the fake driver (tests) and on a GPU; "pagefast" expects
// libpagefast.so preloaded (its dlsym then hands out the hooks).
//
// Exit status: 0 done, 2 bad trace or usage, 3 the driver lacks what this
// allocator needs (skipped), 4 no GPU here (no driver, or it finds no
// device), 1 any other failure.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "interpose/pagefast.h"
#include "tools/replay/trace_reader.h"

namespace tf = pagefast::trace_format;
using pagefast::replay::Trace;

namespace {

constexpr int kBadTrace = 2;
constexpr int kUnsupported = 3;
constexpr int kNoGpu = 4;

[[noreturn]] void die(int status, const char* format, const std::string& detail) {
  std::fprintf(stderr, "pagefast-replay-engine: ");
  std::fprintf(stderr, format, detail.c_str());
  std::fprintf(stderr, "\n");
  std::exit(status);
}

// The driver functions used, with cuda.h's own prototypes.
struct Driver {
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain;
  decltype(&::cuCtxSetCurrent) ctx_set_current;
  decltype(&::cuCtxSynchronize) ctx_synchronize;
  decltype(&::cuMemAlloc_v2) mem_alloc;
  decltype(&::cuMemFree_v2) mem_free;
  decltype(&::cuMemGetInfo_v2) mem_get_info;
  decltype(&::cuStreamCreate) stream_create;
  decltype(&::cuStreamSynchronize) stream_synchronize;
  decltype(&::cuDeviceGetDefaultMemPool) default_mem_pool;
  decltype(&::cuMemPoolSetAttribute) pool_set_attribute;
  decltype(&::cuMemPoolGetAttribute) pool_get_attribute;
  decltype(&::cuMemAllocAsync) mem_alloc_async;
  decltype(&::cuMemFreeAsync) mem_free_async;
};

template <typename Fn>
void resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
}

Driver load_driver() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!handle) die(kNoGpu, "no GPU here: no CUDA driver (cannot open libcuda.so.1: %s)", dlerror());
  Driver d{};
  resolve(handle, "cuInit", &d.init);
  resolve(handle, "cuDeviceGet", &d.device_get);
  resolve(handle, "cuDevicePrimaryCtxRetain", &d.primary_ctx_retain);
  resolve(handle, "cuCtxSetCurrent", &d.ctx_set_current);
  resolve(handle, "cuCtxSynchronize", &d.ctx_synchronize);
  resolve(handle, "cuMemAlloc_v2", &d.mem_alloc);
  resolve(handle, "cuMemFree_v2", &d.mem_free);
  resolve(handle, "cuMemGetInfo_v2", &d.mem_get_info);
  resolve(handle, "cuStreamCreate", &d.stream_create);
  resolve(handle, "cuStreamSynchronize", &d.stream_synchronize);
  resolve(handle, "cuDeviceGetDefaultMemPool", &d.default_mem_pool);
  resolve(handle, "cuMemPoolSetAttribute", &d.pool_set_attribute);
  resolve(handle, "cuMemPoolGetAttribute", &d.pool_get_attribute);
  resolve(handle, "cuMemAllocAsync", &d.mem_alloc_async);
  resolve(handle, "cuMemFreeAsync", &d.mem_free_async);
  if (!d.init || !d.device_get || !d.primary_ctx_retain || !d.ctx_set_current || !d.mem_alloc || !d.mem_free ||
      !d.mem_get_info)
    die(1, "%s", "libcuda.so.1 lacks a basic entry point (cuInit, cuMemAlloc_v2, ...)");
  return d;
}

void check_cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(1, "%s", std::string(what) + " failed: CUresult " + std::to_string(int(r)));
}

enum class Allocator { CudaMalloc, CudaMallocAsync, Pagefast };

// One allocator behind alloc/free, and its figure for reserved memory.
struct Backend {
  Allocator kind;
  Driver* d;
  CUstream stream = nullptr;
  CUmemoryPool pool = nullptr;
  int device = 0;
  uint64_t baseline = 0;
  decltype(&::pagefast_pool_stats_get) pool_stats = nullptr;

  CUresult alloc(CUdeviceptr* p, size_t bytes) {
    if (kind == Allocator::CudaMallocAsync) return d->mem_alloc_async(p, bytes, stream);
    return d->mem_alloc(p, bytes);
  }
  CUresult free(CUdeviceptr p) {
    if (kind == Allocator::CudaMallocAsync) return d->mem_free_async(p, stream);
    return d->mem_free(p);
  }
  uint64_t used_bytes() {  // cudaMalloc: device memory in use, from the driver
    size_t free_bytes = 0, total_bytes = 0;
    if (d->mem_get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) return 0;
    return total_bytes - free_bytes;
  }
  uint64_t pagefast_mapped() {
    pagefast_pool_stats s{};
    return pool_stats(device, &s) == 0 ? s.mapped_bytes : 0;
  }
  uint64_t pagefast_passthroughs() {  // allocations the pool left to the driver: not in mapped_bytes
    pagefast_pool_stats s{};
    return pool_stats && pool_stats(device, &s) == 0 ? s.passthroughs : 0;
  }
};

struct Event {
  uint8_t op;
  uint64_t address;
  uint64_t bytes;
  uint16_t result;
};

struct Totals {
  uint64_t allocs = 0, frees = 0;      // calls issued
  uint64_t alloc_ns = 0, free_ns = 0;  // inside those calls
  uint64_t skipped_failed = 0;         // failed in the trace: not issued
  uint64_t skipped_unknown = 0;        // frees of addresses with no live replay allocation
  uint64_t replay_failed = 0;          // issued, and the replay's allocator said no
  uint64_t peak_live = 0, peak_reserved = 0;
  uint64_t sync_ns = 0;  // cudaMallocAsync: the final stream synchronisation
};

using Clock = std::chrono::steady_clock;
inline uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// One pass over the events. `sample`: read the reserved figure after each
// allocation (outside the timed calls). `print`: the --print-sequence lines.
Totals replay_pass(Backend& be, const std::vector<Event>& events, bool sample, bool print) {
  Totals t;
  struct Live {
    CUdeviceptr ptr;
    uint64_t bytes;
  };
  std::unordered_map<uint64_t, Live> live;
  live.reserve(1024);
  uint64_t live_bytes = 0;
  for (const Event& e : events) {
    const bool is_alloc = e.op == uint8_t(tf::Op::Alloc);
    bool issued = false;
    CUresult result = CUresult(e.result);
    if (e.result != CUDA_SUCCESS) {
      ++t.skipped_failed;
    } else if (is_alloc) {
      CUdeviceptr p = 0;
      const auto t0 = Clock::now();
      result = be.alloc(&p, size_t(e.bytes));
      t.alloc_ns += ns_between(t0, Clock::now());
      ++t.allocs;
      issued = true;
      if (result == CUDA_SUCCESS) {
        auto [it, fresh] = live.try_emplace(e.address, Live{p, e.bytes});
        if (!fresh) {  // the trace lost this address's free: drop the older block from the books
          live_bytes -= it->second.bytes;
          it->second = Live{p, e.bytes};
        }
        live_bytes += e.bytes;
        t.peak_live = std::max(t.peak_live, live_bytes);
        if (sample) {
          uint64_t reserved = be.kind == Allocator::Pagefast ? be.pagefast_mapped() : be.used_bytes();
          reserved = reserved > be.baseline ? reserved - be.baseline : 0;
          t.peak_reserved = std::max(t.peak_reserved, reserved);
        }
      } else {
        ++t.replay_failed;
      }
    } else if (e.address == 0) {
      // cuMemFree(0) touches nothing: replayed as it was.
      const auto t0 = Clock::now();
      result = be.free(0);
      t.free_ns += ns_between(t0, Clock::now());
      ++t.frees;
      issued = true;
    } else {
      auto it = live.find(e.address);
      if (it == live.end()) {
        ++t.skipped_unknown;
      } else {
        const auto t0 = Clock::now();
        result = be.free(it->second.ptr);
        t.free_ns += ns_between(t0, Clock::now());
        ++t.frees;
        issued = true;
        if (result != CUDA_SUCCESS) ++t.replay_failed;
        live_bytes -= it->second.bytes;
        live.erase(it);
      }
    }
    if (print)
      std::printf("%s %" PRIu64 " %d%s\n", is_alloc ? "alloc" : "free", is_alloc ? e.bytes : 0, int(result),
                  issued ? "" : " skipped");
  }
  // What the trace left allocated is freed untimed, so a second pass starts
  // from the same state.
  for (auto& [address, block] : live) be.free(block.ptr);
  if (be.kind == Allocator::CudaMallocAsync && be.d->stream_synchronize) {
    const auto t0 = Clock::now();
    be.d->stream_synchronize(be.stream);
    t.sync_ns = ns_between(t0, Clock::now());
  }
  return t;
}

std::vector<Event> events_of(const Trace& trace, uint64_t* lost_records, uint64_t* lost_markers) {
  std::vector<tf::Record> sorted(trace.records);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const tf::Record& a, const tf::Record& b) { return a.t_ns < b.t_ns; });
  std::vector<Event> events;
  events.reserve(sorted.size());
  for (const tf::Record& r : sorted) {
    if (r.op == uint8_t(tf::Op::Lost)) {
      *lost_records += r.bytes;
      ++*lost_markers;
      continue;
    }
    events.push_back(Event{r.op, r.address, r.op == uint8_t(tf::Op::Alloc) ? r.bytes : 0, r.result});
  }
  return events;
}

Trace load_or_die(const std::string& path) {
  Trace trace;
  std::string error;
  if (!pagefast::replay::read_trace(path, &trace, &error)) die(kBadTrace, "%s", error);
  return trace;
}

int check_trace(const std::string& path, bool dump) {
  const Trace trace = load_or_die(path);
  uint64_t counts[tf::kMaxOp + 1] = {0};
  uint64_t lost = 0;
  std::set<uint32_t> threads;
  for (const tf::Record& r : trace.records) {
    ++counts[r.op];
    if (r.op == uint8_t(tf::Op::Lost)) lost += r.bytes;
    threads.insert(r.thread);
    if (dump)
      std::printf("%" PRIu64 " thread=%u %s device=%u bytes=%" PRIu64 " address=0x%" PRIx64 " result=%u\n", r.t_ns,
                  r.thread, pagefast::replay::op_name(r.op), r.device, r.bytes, r.address, r.result);
  }
  std::printf("TRACE pid=%u records=%zu allocs=%" PRIu64 " frees=%" PRIu64 " lost_markers=%" PRIu64
              " lost_records=%" PRIu64 " threads=%zu\n",
              trace.header.pid, trace.records.size(), counts[1], counts[2], counts[3], lost, threads.size());
  return 0;
}

void usage(FILE* out = stderr) {
  std::fprintf(out,
               "usage: pagefast-replay-engine --allocator cudaMalloc|cudaMallocAsync|pagefast [--device N]\n"
               "                              [--print-sequence] TRACE\n"
               "       pagefast-replay-engine --check TRACE | --dump TRACE\n"
               "       pagefast-replay-engine --version\n"
               "Exit status: 0 done, 2 bad trace or usage, 3 the driver lacks what the allocator\n"
               "needs, 1 any other failure.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string allocator_name, path;
  bool print_sequence = false, check = false, dump = false;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--allocator" && i + 1 < argc) allocator_name = argv[++i];
    else if (arg == "--device" && i + 1 < argc) device = std::atoi(argv[++i]);
    else if (arg == "--print-sequence") print_sequence = true;
    else if (arg == "--check") check = true;
    else if (arg == "--dump") dump = true;
    else if (arg == "-h" || arg == "--help") return usage(stdout), 0;
    else if (arg == "--version") return std::printf("pagefast-replay-engine %s\n", PAGEFAST_VERSION), 0;
    else if (!arg.empty() && arg[0] != '-' && path.empty()) path = arg;
    else return usage(), kBadTrace;
  }
  if (path.empty()) return usage(), kBadTrace;
  if (check || dump) return check_trace(path, dump);

  Allocator kind;
  if (allocator_name == "cudaMalloc") kind = Allocator::CudaMalloc;
  else if (allocator_name == "cudaMallocAsync") kind = Allocator::CudaMallocAsync;
  else if (allocator_name == "pagefast") kind = Allocator::Pagefast;
  else return usage(), kBadTrace;

  // The trace first: a bad file is an error before any CUDA call.
  const Trace trace = load_or_die(path);
  uint64_t lost_records = 0, lost_markers = 0;
  const std::vector<Event> events = events_of(trace, &lost_records, &lost_markers);
  if (lost_records)
    std::fprintf(stderr, "pagefast-replay-engine: %s: the trace lost %" PRIu64 " records; the replay is approximate\n",
                 path.c_str(), lost_records);

  auto pool_stats =
      reinterpret_cast<decltype(&::pagefast_pool_stats_get)>(dlsym(RTLD_DEFAULT, "pagefast_pool_stats_get"));
  if (kind == Allocator::Pagefast && !pool_stats)
    die(1, "%s", "pagefast: libpagefast.so is not preloaded (LD_PRELOAD)");
  if (kind != Allocator::Pagefast && pool_stats)
    die(1, "%s", allocator_name + ": libpagefast.so is preloaded; run this allocator without it");

  Driver d = load_driver();
  Backend be{kind, &d};
  be.device = device;
  be.pool_stats = pool_stats;
  const CUresult init = d.init(0);
  if (init == CUDA_ERROR_NO_DEVICE || init == CUDA_ERROR_STUB_LIBRARY)
    die(kNoGpu, "no GPU here: cuInit answers CUresult %s", std::to_string(int(init)));
  check_cu(init, "cuInit");
  CUdevice dev;
  const CUresult got = d.device_get(&dev, device);
  if (got == CUDA_ERROR_INVALID_DEVICE)
    die(kNoGpu, "no GPU %s here (cuDeviceGet: no such device)", std::to_string(device));
  check_cu(got, "cuDeviceGet");
  CUcontext ctx;
  check_cu(d.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check_cu(d.ctx_set_current(ctx), "cuCtxSetCurrent");

  if (kind == Allocator::CudaMallocAsync) {
    if (!d.mem_alloc_async || !d.mem_free_async || !d.default_mem_pool || !d.pool_set_attribute ||
        !d.pool_get_attribute || !d.stream_create || !d.stream_synchronize)
      die(kUnsupported, "%s",
          "cudaMallocAsync: skipped: the driver lacks cuMemAllocAsync/cuMemFreeAsync or memory pools");
    CUresult r = d.default_mem_pool(&be.pool, dev);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
      die(kUnsupported, "%s", "cudaMallocAsync: skipped: no memory pools on this device");
    check_cu(r, "cuDeviceGetDefaultMemPool");
    cuuint64_t threshold = ~cuuint64_t(0), zero = 0;
    check_cu(d.pool_set_attribute(be.pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
             "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
    check_cu(d.pool_set_attribute(be.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero),
             "cuMemPoolSetAttribute(RESERVED_MEM_HIGH)");
    check_cu(d.stream_create(&be.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }

  Totals t;
  if (kind == Allocator::CudaMalloc) {
    // Timed pass without sampling; then an untimed pass that samples the
    // driver's used bytes after each allocation.
    t = replay_pass(be, events, false, print_sequence);
    if (d.ctx_synchronize) d.ctx_synchronize();
    be.baseline = be.used_bytes();
    t.peak_reserved = replay_pass(be, events, true, false).peak_reserved;
  } else if (kind == Allocator::Pagefast) {
    be.baseline = be.pagefast_mapped();
    t = replay_pass(be, events, true, print_sequence);
  } else {
    t = replay_pass(be, events, false, print_sequence);
    cuuint64_t high = 0;
    check_cu(d.pool_get_attribute(be.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high),
             "cuMemPoolGetAttribute(RESERVED_MEM_HIGH)");
    t.peak_reserved = high;
  }
  const uint64_t passthroughs = kind == Allocator::Pagefast ? be.pagefast_passthroughs() : 0;
  const double fragmentation = t.peak_reserved ? 1.0 - double(t.peak_live) / double(t.peak_reserved) : 0.0;
  std::printf("RESULT allocator=%s events=%zu allocs=%" PRIu64 " frees=%" PRIu64 " skipped_failed=%" PRIu64
              " skipped_unknown=%" PRIu64 " replay_failed=%" PRIu64 " lost_records=%" PRIu64 " alloc_ns=%" PRIu64
              " free_ns=%" PRIu64 " time_ns=%" PRIu64 " sync_ns=%" PRIu64 " peak_live_bytes=%" PRIu64
              " peak_reserved_bytes=%" PRIu64 " fragmentation=%.6f pool_passthroughs=%" PRIu64 "\n",
              allocator_name.c_str(), events.size(), t.allocs, t.frees, t.skipped_failed, t.skipped_unknown,
              t.replay_failed, lost_records, t.alloc_ns, t.free_ns, t.alloc_ns + t.free_ns, t.sync_ns, t.peak_live,
              t.peak_reserved, fragmentation, passthroughs);
  return 0;
}
