// tools/gpu/alloc_bench.cu: allocation latency on the GPU, for
// tools/bench-alloc. One process measures one allocator (the program's own
// cudaMalloc, which pagefast serves when preloaded, or cudaMallocAsync with a
// warm pool) in one mode and prints RESULT lines:
//   pairs   alloc+free pair latency per size, p50 and p99 (ns)
//   threads aggregate pairs/s with T threads at once (and with 1)
//   cold    16 GiB in 20 MiB requests in a fresh process (total ms)
//   vmm     a program managing VMM itself (PyTorch's expandable segments):
//           per round, cuMemCreate P pages of 20 MiB (POSIX fd handle type
//           requested), cuMemMap each at the segment's end, one
//           cuMemSetAccess, then cuMemUnmap + cuMemRelease each; p50 per
//           round (ns) and the first round alone (BENCH_PAGES, default 16)
//   apart   the alloc and the free timed apart (each call between two
//           clock reads), with what two clock reads back to back cost and
//           what the driver's cuCtxGetCurrent costs, p50 per size; and,
//           where the kernel lets a process count its own instructions
//           (perf_event_open), the user-space instructions of one pair (a
//           loop of 2N pairs less one of N, over N). API "driver" takes
//           cuMemAlloc_v2/cuMemFree_v2 through the runtime's door, as the
//           pool-hit pair of tools/bench/hit-instructions.
// BENCH_REPEATS=N: the number of pairs per size in every configuration
// (without it, plain cudaMalloc runs 300 and the rest 3000: compare like
// with like, e.g. pool:off against cudaMalloc, with the same N).
// BENCH_WARM_MS=T (pairs): each size is warmed for at least T ms besides
// its 20 pairs, so that the measured pairs are the steady state (pagefast's
// allowance follows the free rate, smoothed over 50 ms: a loop's rotation
// of big blocks is grown in its first milliseconds). The RESULT line also
// gives mean_ns, the measured loop's time per pair (the loop's cost, where
// p50 hides a sync every few pairs).
#include <cuda.h>
#include <cuda_runtime.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

static bool g_async = false;
static cudaStream_t g_stream = nullptr;

// mode "driver": cuMemAlloc_v2/cuMemFree_v2 themselves, taken through
// cudaGetDriverEntryPointByVersion (the door the runtime uses), so that the
// runtime's own share of a cudaMalloc+cudaFree pair can be told apart.
typedef int (*MemAllocFn)(unsigned long long*, size_t);
typedef int (*MemFreeFn)(unsigned long long);
typedef int (*CtxGetCurrentFn)(void**);
static MemAllocFn g_cu_alloc = nullptr;
static MemFreeFn g_cu_free = nullptr;

static void* driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !fn) {
    std::fprintf(stderr, "no driver entry point %s\n", name);
    std::exit(1);
  }
  return fn;
}

static inline void* alloc(size_t bytes) {
  void* p = nullptr;
  if (g_cu_alloc) {
    unsigned long long d = 0;
    if (g_cu_alloc(&d, bytes) != 0) {
      std::fprintf(stderr, "cuMemAlloc_v2 failed\n");
      std::exit(1);
    }
    return reinterpret_cast<void*>(d);
  }
  if (g_async) CK(cudaMallocAsync(&p, bytes, g_stream));
  else CK(cudaMalloc(&p, bytes));
  return p;
}
static inline void release(void* p) {
  if (g_cu_free) {
    if (g_cu_free(reinterpret_cast<unsigned long long>(p)) != 0) {
      std::fprintf(stderr, "cuMemFree_v2 failed\n");
      std::exit(1);
    }
    return;
  }
  if (g_async) CK(cudaFreeAsync(p, g_stream));
  else CK(cudaFree(p));
}

static double pct(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

static void pairs(const char* label, int repeats) {
  std::vector<size_t> sizes = {512,      4096,      65536,     1u << 20,   2u << 20,
                               4u << 20, 20u << 20, 64u << 20, 256u << 20, 1u << 30};
  // BENCH_SIZES=a,b,...: only these sizes (bytes), in this order.
  if (const char* only = std::getenv("BENCH_SIZES")) {
    sizes.clear();
    for (const char* c = only; *c;) {
      char* end = nullptr;
      sizes.push_back(std::strtoull(c, &end, 0));
      c = *end ? end + 1 : end;
    }
  }
  const char* warm_text = std::getenv("BENCH_WARM_MS");
  const int warm_ms = warm_text ? std::atoi(warm_text) : 0;
  for (size_t bytes : sizes) {
    const int n = bytes >= (256u << 20) ? std::max(20, repeats / 10) : repeats;
    for (int i = 0; i < 20; ++i) release(alloc(bytes));  // warm
    const auto warm_end = Clock::now() + std::chrono::milliseconds(warm_ms);
    while (warm_ms && Clock::now() < warm_end) release(alloc(bytes));
    std::vector<double> ns(n);
    const auto loop0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      void* p = alloc(bytes);
      release(p);
      ns[i] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    }
    const double mean = std::chrono::duration<double, std::nano>(Clock::now() - loop0).count() / n;
    std::printf(
        "RESULT alloc=%s mode=pairs bytes=%zu p50_ns=%.1f p99_ns=%.1f p10_ns=%.1f p25_ns=%.1f p75_ns=%.1f "
        "p90_ns=%.1f mean_ns=%.1f warm_ms=%d\n",
        label, bytes, pct(ns, 0.5), pct(ns, 0.99), pct(ns, 0.10), pct(ns, 0.25), pct(ns, 0.75), pct(ns, 0.90), mean,
        warm_ms);
  }
}

// The driver's VMM calls, taken as the runtime takes them (through
// cuGetProcAddress, which pagefast's third door answers).
typedef int (*MemCreateFn)(unsigned long long*, size_t, const CUmemAllocationProp*, unsigned long long);
typedef int (*MemReleaseFn)(unsigned long long);
typedef int (*MemMapFn)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
typedef int (*MemUnmapFn)(unsigned long long, size_t);
typedef int (*MemSetAccessFn)(unsigned long long, size_t, const CUmemAccessDesc*, size_t);
typedef int (*MemAddressReserveFn)(unsigned long long*, size_t, size_t, unsigned long long, unsigned long long);

#define CKD(call)                                                             \
  do {                                                                        \
    const int r_ = (call);                                                    \
    if (r_ != 0) {                                                            \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #call, r_, __LINE__); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

static void vmm_segments(const char* label) {
  auto create = reinterpret_cast<MemCreateFn>(driver_entry("cuMemCreate"));
  auto release_handle = reinterpret_cast<MemReleaseFn>(driver_entry("cuMemRelease"));
  auto map = reinterpret_cast<MemMapFn>(driver_entry("cuMemMap"));
  auto unmap = reinterpret_cast<MemUnmapFn>(driver_entry("cuMemUnmap"));
  auto set_access = reinterpret_cast<MemSetAccessFn>(driver_entry("cuMemSetAccess"));
  auto reserve = reinterpret_cast<MemAddressReserveFn>(driver_entry("cuMemAddressReserve"));
  const char* pages_env = std::getenv("BENCH_PAGES");
  const int pages = pages_env ? std::atoi(pages_env) : 16;
  const size_t page = 20u << 20;
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  unsigned long long base = 0;
  CKD(reserve(&base, size_t(pages) * page, 0, 0, 0));
  std::vector<unsigned long long> handles(static_cast<size_t>(pages));
  const int rounds = 50;
  std::vector<double> ns(rounds);
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < pages; ++i) CKD(create(&handles[size_t(i)], page, &prop, 0));
    for (int i = 0; i < pages; ++i) CKD(map(base + size_t(i) * page, page, 0, handles[size_t(i)], 0));
    CKD(set_access(base, size_t(pages) * page, &access, 1));
    for (int i = 0; i < pages; ++i) {
      CKD(unmap(base + size_t(i) * page, page));
      CKD(release_handle(handles[size_t(i)]));
    }
    ns[size_t(r)] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  const double first = ns[0];
  std::printf("RESULT alloc=%s mode=vmm pages=%d page_bytes=%zu first_round_ns=%.0f p50_round_ns=%.0f\n", label, pages,
              page, first, pct(ns, 0.5));
}

// A counter of this thread's user-space instructions; -1 where the kernel
// refuses (perf_event_paranoid, a container's filter).
static int instruction_counter() {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = PERF_COUNT_HW_INSTRUCTIONS;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return int(syscall(__NR_perf_event_open, &attr, 0, -1, -1, 0));
}

static long long instructions_of_pairs(int fd, size_t bytes, int n) {
  ioctl(fd, PERF_EVENT_IOC_RESET, 0);
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  for (int i = 0; i < n; ++i) release(alloc(bytes));
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  long long count = 0;
  if (read(fd, &count, sizeof count) != sizeof count) return -1;
  return count;
}

// What two clock reads back to back and the driver's cuCtxGetCurrent
// cost, p50 of n of each: the parts of a timed call that are not its own.
struct Overheads {
  double clock_p50_ns, ctx_get_current_p50_ns;
};
static Overheads overheads(int n) {
  std::vector<double> clock_ns(n), current_ns(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    clock_ns[i] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  auto get_current = reinterpret_cast<CtxGetCurrentFn>(driver_entry("cuCtxGetCurrent"));
  void* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    get_current(&ctx);
    current_ns[i] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  return Overheads{pct(clock_ns, 0.5), pct(current_ns, 0.5)};
}

// alloc() and release() through cuMemAlloc_v2/cuMemFree_v2 (see g_cu_alloc).
static void use_driver_entries() {
  g_cu_alloc = reinterpret_cast<MemAllocFn>(driver_entry("cuMemAlloc"));
  g_cu_free = reinterpret_cast<MemFreeFn>(driver_entry("cuMemFree"));
}

static void apart(const char* label, int repeats) {
  std::vector<size_t> sizes = {512, 65536, 4u << 20, 64u << 20, 256u << 20, 1u << 30};
  const Overheads overhead = overheads(repeats);
  const int fd = instruction_counter();
  for (size_t bytes : sizes) {
    const int n = bytes >= (256u << 20) ? std::max(200, repeats / 10) : repeats;
    const auto warm_end = Clock::now() + std::chrono::milliseconds(100);
    while (Clock::now() < warm_end) release(alloc(bytes));
    std::vector<double> alloc_ns(n), free_ns(n);
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      void* p = alloc(bytes);
      auto t1 = Clock::now();
      release(p);
      auto t2 = Clock::now();
      alloc_ns[i] = std::chrono::duration<double, std::nano>(t1 - t0).count();
      free_ns[i] = std::chrono::duration<double, std::nano>(t2 - t1).count();
    }
    double per_pair = -1;
    if (fd >= 0) {
      const long long one = instructions_of_pairs(fd, bytes, n), two = instructions_of_pairs(fd, bytes, 2 * n);
      if (one >= 0 && two >= 0) per_pair = double(two - one) / n;
    }
    std::printf(
        "RESULT alloc=%s mode=apart bytes=%zu alloc_p50_ns=%.1f free_p50_ns=%.1f alloc_p99_ns=%.1f "
        "free_p99_ns=%.1f clock_p50_ns=%.1f ctx_get_current_p50_ns=%.1f instructions_per_pair=%.1f\n",
        label, bytes, pct(alloc_ns, 0.5), pct(free_ns, 0.5), pct(alloc_ns, 0.99), pct(free_ns, 0.99),
        overhead.clock_p50_ns, overhead.ctx_get_current_p50_ns, per_pair);
  }
  if (fd >= 0) close(fd);
}

static double throughput(int threads, size_t bytes, int per_thread) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      CK(cudaSetDevice(0));
      for (int i = 0; i < 100; ++i) release(alloc(bytes));
      ready++;
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < per_thread; ++i) release(alloc(bytes));
    });
  while (ready.load() < threads) std::this_thread::yield();
  auto t0 = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return double(threads) * per_thread / s;
}

int main(int argc, char** argv) {
  std::string api = argc > 1 ? argv[1] : "cudaMalloc";
  std::string mode = argc > 2 ? argv[2] : "pairs";
  const char* label_env = std::getenv("BENCH_LABEL");
  std::string label = label_env ? label_env : api;
  g_async = api == "cudaMallocAsync";
  if (api == "driver") {
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    use_driver_entries();
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // context up before timing
  if (g_async) {
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t threshold = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  if (mode == "driver") {
    // The same pairs, through the driver API (see g_cu_alloc), and what the
    // clock and cuCtxGetCurrent cost alone, for the breakdown.
    use_driver_entries();
    const Overheads overhead = overheads(3000);
    std::printf("RESULT alloc=%s mode=overhead clock_p50_ns=%.1f ctx_get_current_p50_ns=%.1f\n", label.c_str(),
                overhead.clock_p50_ns, overhead.ctx_get_current_p50_ns);
    pairs(label.c_str(), 3000);
  } else if (mode == "apart") {
    const char* repeats = std::getenv("BENCH_REPEATS");
    apart(label.c_str(), repeats ? std::atoi(repeats) : 5000);
  } else if (mode == "pairs") {
    const char* repeats = std::getenv("BENCH_REPEATS");
    pairs(label.c_str(), repeats ? std::atoi(repeats) : api == "cudaMalloc" && !std::getenv("LD_PRELOAD") ? 300 : 3000);
  } else if (mode == "vmm") {
    vmm_segments(label.c_str());
  } else if (mode == "threads") {
    const int threads = argc > 3 ? std::atoi(argv[3]) : 16;
    const size_t bytes = 64 << 10;
    const int per = api == "cudaMalloc" && !std::getenv("LD_PRELOAD") ? 300 : 20000;
    const double one = throughput(1, bytes, per);
    const double many = throughput(threads, bytes, per);
    std::printf(
        "RESULT alloc=%s mode=threads threads=%d bytes=%zu one_pairs_per_s=%.0f many_pairs_per_s=%.0f scale=%.2f\n",
        label.c_str(), threads, bytes, one, many, many / one);
  } else if (mode == "cold") {
    const size_t request = 20u << 20, total = 16ull << 30;
    std::vector<void*> held;
    auto t0 = Clock::now();
    for (size_t done = 0; done < total; done += request) held.push_back(alloc(request));
    if (g_async) CK(cudaStreamSynchronize(g_stream));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (void* p : held) release(p);
    CK(cudaDeviceSynchronize());
    std::printf("RESULT alloc=%s mode=cold bytes=%zu requests=%zu total_ms=%.3f\n", label.c_str(), total, held.size(),
                ms);
  }
  if (g_async) CK(cudaStreamSynchronize(g_stream));
  return 0;
}
