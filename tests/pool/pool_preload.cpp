// tests/pool/pool_preload.cpp: a CUDA driver program for the pool's
// integration tests: linked with the fake libcuda.so.1, run by
// preload_cases.py with and without LD_PRELOAD=libpagefast.so. Each
// subcommand checks what it can itself and prints one "ok ..." line, or
// "FAIL ..." and exits 1. The pool's C API is looked up with dlsym, so the
// program also runs without pagefast.
//
//   reuse      freed memory is not reused while a delayed kernel may still
//              write it (data of the next owner survives)
//   capture    alloc/free during a stream capture never invalidates it
//   ipc        cuIpcGetMemHandle on pool memory: INVALID_VALUE
//   sizes      cuMemAlloc of sizes over the whole range (around every
//              power of two, and up to SIZE_MAX) while the pool holds idle
//              memory: prints every answer (compared with the driver's);
//              no block handed out overlaps a live one
//   fork       a forked child may touch the parent's pointers without crash
//   threads    blocks freed on other threads; threads exit; nothing leaks
//   meminfo    cuMemGetInfo counts idle pool memory as free (and the limit)
//   meminfo_devices  two devices: cuMemGetInfo answers for the current one
//   meminfo_threads  cuMemGetInfo on many threads while the pool grows and
//              the primary context is reset
//   capacity   N-byte blocks until out of memory, per size (prints counts)
//   faults     driver calls failing (fakecuda_set_fail) never break data
//   capi       pagefast_pool_stats_get / pagefast_pool_trim
//   sleep      pagefast_sleep/pagefast_wake: contents kept at the same
//              addresses (a delayed kernel's write included), allocations
//              failing or waiting while asleep, memory back to the driver,
//              driver faults in sleep and wake, 1000 cycles without leaks
//   sleep_own_vmm  the program's own cuMemCreate memory beside the pool's:
//              sleep answers 1 while it is resident, 0 once released
//   devices    two devices, a pool each, memory usable by its own device
//   peers      two devices: pools do not mix (also freed from the other
//              device's thread), and peer access enabled from device 1 to
//              device 0 reaches device 0's pool memory, mapped before and
//              after, stitched too, until it is disabled
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fakecuda.h"
#include "interpose/pagefast.h"
#include "preload_program.h"

namespace {

using preload_program::fail;
using preload_program::fill_words;
using preload_program::g_context;
using preload_program::start;
using preload_program::words_intact;

using StatsGet = int (*)(int, pagefast_pool_stats*);
using Trim = int (*)(int);

StatsGet stats_get() { return reinterpret_cast<StatsGet>(dlsym(RTLD_DEFAULT, "pagefast_pool_stats_get")); }
Trim trim_fn() { return reinterpret_cast<Trim>(dlsym(RTLD_DEFAULT, "pagefast_pool_trim")); }

bool all_bytes(CUdeviceptr p, size_t bytes, unsigned char value) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; i += (bytes > 65536 ? 4093 : 1))
    if (b[i] != value) return false;
  return b[bytes - 1] == value;
}

int reuse() {
  const size_t sizes[] = {4096, 100000, 3u << 20, 40u << 20};
  for (size_t bytes : sizes) {
    std::vector<CUdeviceptr> kept;
    for (int round = 0; round < 40; ++round) {
      CUdeviceptr p;
      CHECK_CU(cuMemAlloc_v2(&p, bytes));
      // A kernel that writes 0xAA into p a little later; then p is freed.
      CHECK_CU(fakecuda_launch_delayed_fill(0, p, bytes, 0xAA, 1));
      CHECK_CU(cuMemFree_v2(p));
      // The next owner writes its own data at once, from the host.
      CUdeviceptr q;
      CHECK_CU(cuMemAlloc_v2(&q, bytes));
      std::memset(reinterpret_cast<void*>(q), round & 0x7f, bytes);
      kept.push_back(q);
    }
    CHECK_CU(cuCtxSynchronize());
    for (size_t i = 0; i < kept.size(); ++i)
      if (!all_bytes(kept[i], bytes, (unsigned char)(i & 0x7f)))
        return fail("reuse: a delayed kernel wrote into the next owner's block");
    for (CUdeviceptr q : kept) CHECK_CU(cuMemFree_v2(q));
  }
  if (fakecuda_violations()) return fail("reuse: fake driver saw a use after free");
  std::printf("ok reuse\n");
  return 0;
}

// Captures on many threads at once, more than the hooks' capture entries
// (64) so that the list beyond them is used too: every capture ends well,
// and once all ended the pool synchronises again (the count of captures is
// back to zero, none was lost or ended twice).
int capture_threads() {
  constexpr int kThreads = 80, kRounds = 20;
  CUcontext context = nullptr;
  CHECK_CU(cuCtxGetCurrent(&context));
  std::atomic<int> failures{0};
  std::atomic<int> began{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(context) != CUDA_SUCCESS) return void(failures.fetch_add(1));
      CUstream stream;
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return void(failures.fetch_add(1));
      for (int round = 0; round < kRounds; ++round) {
        if (cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) {
          failures.fetch_add(1);
          continue;
        }
        // The first round waits until every thread captures: all at once.
        if (round == 0) {
          began.fetch_add(1);
          while (began.load() < kThreads) std::this_thread::yield();
        }
        // As PyTorch does: relaxed mode around allocator calls.
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        CUdeviceptr p = 0;
        if (cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS ||
            cuMemAlloc_v2(&p, 4096 + 512 * size_t(t)) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS ||
            cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
          failures.fetch_add(1);
        CUgraph graph = nullptr;
        if (cuStreamEndCapture(stream, &graph) != CUDA_SUCCESS) failures.fetch_add(1);
      }
    });
  for (std::thread& t : threads) t.join();
  if (failures.load()) return fail("capture: a capture on one of many threads failed");
  const bool pooled = dlsym(RTLD_DEFAULT, "pagefast_is_active") != nullptr;
  const int syncs_before = fakecuda_call_count("cuCtxSynchronize");
  for (int i = 0; i < 400; ++i) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, 4096));
    CHECK_CU(cuMemFree_v2(p));
  }
  const int syncs = fakecuda_call_count("cuCtxSynchronize") - syncs_before;
  if (pooled && syncs == 0)
    return fail("capture: no synchronisation after every capture ended (a capture left counted)");
  std::printf("ok capture threads %d x %d, syncs after %d\n", kThreads, kRounds, syncs);
  return 0;
}

// Synchronisations the pool made over a loop of pairs (relaxed mode
// around them, as PyTorch's allocator calls during a capture).
int syncs_over_pairs() {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS) return -1;
  const int before = fakecuda_call_count("cuCtxSynchronize");
  for (int i = 0; i < 400; ++i) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) return -1;
  }
  const int syncs = fakecuda_call_count("cuCtxSynchronize") - before;
  return cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS ? syncs : -1;
}

// The count of captures through calls that begin or end nothing: a begin
// the driver refuses, an end on the wrong thread (the stream still
// captures), an end of a stream that never captured, a second end. While
// a capture runs the pool never synchronises; once none runs, it does.
int capture_odd() {
  CUstream a, b, never;
  CHECK_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&never, CU_STREAM_NON_BLOCKING));
  CUgraph graph = nullptr;
  auto end_elsewhere = [&](CUstream stream) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread([&] {
      r = cuCtxSetCurrent(g_context);
      if (r == CUDA_SUCCESS) r = cuStreamEndCapture(stream, &graph);
    }).join();
    return r;
  };
  CHECK_CU(cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS)
    return fail("capture_odd: a second begin of a capturing stream succeeded");
  if (end_elsewhere(a) != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    return fail("capture_odd: an end on another thread was not refused");
  if (cuStreamEndCapture(never, &graph) == CUDA_SUCCESS) return fail("capture_odd: an end of no capture succeeded");
  if (syncs_over_pairs() != 0) return fail("capture_odd: a synchronisation while a capture ran (after refused calls)");
  CHECK_CU(cuStreamEndCapture(a, &graph));
  CHECK_CU(cuStreamBeginCapture_v2(b, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (cuStreamEndCapture(a, &graph) == CUDA_SUCCESS) return fail("capture_odd: a second end succeeded");
  if (syncs_over_pairs() != 0) return fail("capture_odd: a synchronisation while a capture ran (after a second end)");
  CHECK_CU(cuStreamEndCapture(b, &graph));
  CHECK_CU(cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  if (end_elsewhere(a) != CUDA_SUCCESS) return fail("capture_odd: a relaxed capture's end on another thread failed");
  const int syncs = syncs_over_pairs();
  const bool pooled = dlsym(RTLD_DEFAULT, "pagefast_is_active") != nullptr;
  if (syncs < 0 || (pooled && syncs == 0))
    return fail("capture_odd: no synchronisation once no capture ran (a capture left counted)");
  std::printf("ok capture_odd syncs after %d\n", syncs);
  return 0;
}

int capture() {
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  // As PyTorch does: relaxed mode around allocator calls during capture.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CHECK_CU(cuThreadExchangeStreamCaptureMode(&mode));
  // Relaxed mode lets the fake accept a sync from this thread; the count
  // shows whether the pool made one (it must not, during a capture).
  const int syncs_before = fakecuda_call_count("cuCtxSynchronize");
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 400; ++i) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, (i % 10 == 0) ? (5u << 20) : 4096));
    blocks.push_back(p);
    if (blocks.size() > 8) {
      CHECK_CU(cuMemFree_v2(blocks.front()));
      blocks.erase(blocks.begin());
    }
  }
  const int syncs_during = fakecuda_call_count("cuCtxSynchronize") - syncs_before;
  CHECK_CU(cuThreadExchangeStreamCaptureMode(&mode));
  if (syncs_during) return fail("capture: the pool synchronised during a capture");
  CUgraph graph = nullptr;
  const CUresult end = cuStreamEndCapture(stream, &graph);
  if (end != CUDA_SUCCESS) {
    std::printf("FAIL capture: end capture answered %d (invalidated by a synchronisation?)\n", int(end));
    return 1;
  }
  for (CUdeviceptr p : blocks) CHECK_CU(cuMemFree_v2(p));
  // After the capture the quarantine is retired again.
  for (int i = 0; i < 400; ++i) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, (i % 10 == 0) ? (5u << 20) : 4096));
    CHECK_CU(cuMemFree_v2(p));
  }
  std::printf("ok capture syncs after %d\n", fakecuda_call_count("cuCtxSynchronize") - syncs_before);
  if (capture_threads()) return 1;
  return capture_odd();
}

// Open descriptors of this process whose link names `target`.
int count_fds_to(const char* target) {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    char path[64], link[256];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t len = readlink(path, link, sizeof link - 1);
    if (len <= 0) continue;
    link[len] = 0;
    if (std::strstr(link, target)) ++n;
  }
  return n;
}

// The exporter's side: a 4 KiB block among others, its handle sent to a
// child (this program again, "ipc-child"), which opens it, checks and
// writes it; then the exporter frees it while the child still holds it,
// and the child sees the old bytes while the exporter re-uses the space.
int ipc() {
  CUdeviceptr before, p;
  CHECK_CU(cuMemAlloc_v2(&before, 4096));
  CHECK_CU(cuMemAlloc_v2(&p, 4096));
  std::memset(reinterpret_cast<void*>(p), 0x11, 4096);
  CUipcMemHandle handle, again;
  const CUresult first = cuIpcGetMemHandle(&handle, p);
  const CUresult second = cuIpcGetMemHandle(&again, p);
  int capable = -1;
  cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p);
  std::printf("ipc get %d %d same %d capable %d\n", int(first), int(second),
              std::memcmp(&handle, &again, sizeof handle) == 0 ? 1 : 0, capable);
  if (first != CUDA_SUCCESS) {
    CHECK_CU(cuMemFree_v2(p));
    std::printf("ok ipc\n");
    return 0;
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) return fail("ipc: pipe");
  const pid_t child = fork();
  if (child == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    execl("/proc/self/exe", "pool_preload", "ipc-child", (char*)nullptr);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  char step = 0;
  if (write(to_child[1], &handle, sizeof handle) != ssize_t(sizeof handle)) return fail("ipc: send handle");
  if (read(from_child[0], &step, 1) != 1 || step != 'w') return fail("ipc: the child did not open and write");
  if (!all_bytes(p, 4096, 0x22)) return fail("ipc: the child's writes are not in the exporter's block");
  CHECK_CU(cuMemFree_v2(p));
  const CUresult twice = cuMemFree_v2(p);
  // The freed block's memory must not come back while the child holds it.
  std::vector<CUdeviceptr> fresh(64);
  for (CUdeviceptr& q : fresh) {
    CHECK_CU(cuMemAlloc_v2(&q, 4096));
    std::memset(reinterpret_cast<void*>(q), 0x33, 4096);
  }
  step = 'f';
  if (write(to_child[1], &step, 1) != 1) return fail("ipc: tell the child");
  if (read(from_child[0], &step, 1) != 1 || step != 'c') return fail("ipc: the child saw its bytes change");
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("ipc: the child failed");
  for (CUdeviceptr q : fresh) CHECK_CU(cuMemFree_v2(q));
  CHECK_CU(cuMemFree_v2(before));
  // Once the pool releases its chunks, no exported descriptor of them may
  // stay open (it would keep the memory alive). The held block comes back
  // from the exporter thread a moment after the child closed it (a minute
  // at most: a hang guard).
  int exported = -1;
  if (Trim trim = trim_fn()) {
    for (int wait = 0; wait < 6000; ++wait) {
      CHECK_CU(cuCtxSynchronize());
      trim(0);
      exported = count_fds_to("memfd:fakecuda-shareable");
      if (exported == 0) break;
      usleep(10000);
    }
  }
  std::printf("ipc double free %d\nipc exported fds after trim %d\nok ipc\n", int(twice), exported);
  return 0;
}

int ipc_child() {
  CUipcMemHandle handle;
  if (read(0, &handle, sizeof handle) != ssize_t(sizeof handle)) return 2;
  CUdeviceptr p = 0;
  if (cuIpcOpenMemHandle_v2(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return 3;
  CUdeviceptr same = 0;
  if (cuIpcOpenMemHandle_v2(&same, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS || same != p) return 4;
  if (!all_bytes(p, 4096, 0x11)) return 5;
  std::memset(reinterpret_cast<void*>(p), 0x22, 4096);
  char step = 'w';
  if (write(1, &step, 1) != 1 || read(0, &step, 1) != 1 || step != 'f') return 6;
  if (!all_bytes(p, 4096, 0x22)) return 7;  // freed by the exporter, still ours
  if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS || cuIpcCloseMemHandle(p) != CUDA_SUCCESS) return 8;
  step = 'c';
  return write(1, &step, 1) == 1 ? 0 : 9;
}

struct Live {
  uint64_t addr;
  uint64_t bytes;
};

// [a, a + an) and [b, b + bn) share a byte; ends computed without wrapping.
bool overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
  const uint64_t a_last = an > ~uint64_t(0) - a ? ~uint64_t(0) : a + an - 1;
  const uint64_t b_last = bn > ~uint64_t(0) - b ? ~uint64_t(0) : b + bn - 1;
  return a <= b_last && b <= a_last;
}

int sizes() {
  // Idle pool memory first: the wrapped size was served from it.
  CUdeviceptr warm;
  CHECK_CU(cuMemAlloc_v2(&warm, 3u << 20));
  CHECK_CU(cuMemFree_v2(warm));
  CHECK_CU(cuCtxSynchronize());
  std::vector<Live> live;
  for (uint64_t bytes : {uint64_t(2) << 20, uint64_t(4096), uint64_t(3) << 20, uint64_t(1) << 20}) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, bytes));
    std::memset(reinterpret_cast<void*>(p), 0x5a, bytes);
    live.push_back({p, bytes});
  }
  std::vector<uint64_t> list;
  for (int k = 0; k < 64; ++k) {
    const uint64_t b = uint64_t(1) << k;
    for (uint64_t v : {b - 1, b, b + 1}) list.push_back(v);
  }
  const uint64_t top = ~uint64_t(0);
  for (uint64_t d : {uint64_t(0), uint64_t(1), uint64_t(2), (uint64_t(1) << 20), (uint64_t(2) << 20) - 2,
                     (uint64_t(2) << 20) - 1, uint64_t(2) << 20, (uint64_t(2) << 20) + 1, uint64_t(4) << 20})
    list.push_back(top - d);
  for (uint64_t bytes : list) {
    if (bytes == 0) continue;
    CUdeviceptr p = 0x1234;
    const CUresult r = cuMemAlloc_v2(&p, bytes);
    // The pointer after a failure is printed too: the driver sets it to 0.
    std::printf("size %llu -> %d%s\n", (unsigned long long)bytes, int(r),
                r == CUDA_SUCCESS ? "" : (p == 0 ? " ptr 0" : " ptr kept"));
    if (r != CUDA_SUCCESS) continue;
    for (const Live& l : live)
      if (overlaps(p, bytes, l.addr, l.bytes)) {
        std::printf("FAIL sizes: a %llu-byte block overlaps a live block\n", (unsigned long long)bytes);
        return 1;
      }
    // The next ordinary block must not land inside this one either.
    CUdeviceptr q;
    CHECK_CU(cuMemAlloc_v2(&q, 2u << 20));
    if (overlaps(p, bytes, q, 2u << 20)) {
      std::printf("FAIL sizes: a 2 MiB block overlaps the %llu-byte block\n", (unsigned long long)bytes);
      return 1;
    }
    CHECK_CU(cuMemFree_v2(q));
    CHECK_CU(cuMemFree_v2(p));
  }
  for (const Live& l : live) {
    if (!all_bytes(l.addr, l.bytes, 0x5a)) return fail("sizes: a live block changed");
    CHECK_CU(cuMemFree_v2(l.addr));
  }
  std::printf("ok sizes\n");
  return 0;
}

int fork_case() {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc_v2(&p, 4096));
  CUdeviceptr big;
  CHECK_CU(cuMemAlloc_v2(&big, 8u << 20));
  const pid_t child = fork();
  if (child == 0) {
    // Whatever the driver answers here, nothing may crash.
    cuMemFree_v2(p);
    CUdeviceptr q = 0;
    cuMemAlloc_v2(&q, 4096);
    size_t free_bytes = 0, total = 0;
    cuMemGetInfo_v2(&free_bytes, &total);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("fork: the child crashed");
  CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuMemFree_v2(big));
  std::printf("ok fork\n");
  return 0;
}

int threads() {
  constexpr int kThreads = 8, kBlocks = 2000;
  std::vector<std::vector<CUdeviceptr>> made(kThreads);
  std::vector<int> errors(kThreads, 0);
  auto run = [&](int t) {
    cuCtxSetCurrent(g_context);
    for (int i = 0; i < kBlocks; ++i) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, (i % 100 == 0) ? (3u << 20) : 64 + (i % 50) * 700) != CUDA_SUCCESS) ++errors[t];
      else made[t].push_back(p);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) pool.emplace_back(run, t);
  for (auto& th : pool) th.join();
  pool.clear();
  // Every thread frees what its neighbour allocated, then exits.
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      cuCtxSetCurrent(g_context);
      for (CUdeviceptr p : made[(t + 1) % kThreads])
        if (cuMemFree_v2(p) != CUDA_SUCCESS) ++errors[t];
    });
  for (auto& th : pool) th.join();
  for (int e : errors)
    if (e) return fail("threads: an allocation or free failed");
  if (StatsGet get = stats_get()) {
    pagefast_pool_stats s;
    if (get(0, &s) != 0) return fail("threads: no pool stats");
    if (s.in_use_bytes != 0) return fail("threads: in_use_bytes not 0 after every block was freed");
    if (s.cached_bytes != 0) return fail("threads: exited threads still hold cached blocks");
  }
  std::printf("ok threads\n");
  return 0;
}

int meminfo() {
  size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0, free2 = 0, total2 = 0;
  CHECK_CU(cuMemGetInfo_v2(&free0, &total0));
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc_v2(&p, 100u << 20));
  CHECK_CU(cuMemGetInfo_v2(&free1, &total1));
  CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuMemGetInfo_v2(&free2, &total2));
  std::printf("ok meminfo total %zu free0 %zu free1 %zu free2 %zu\n", total0, free0, free1, free2);
  if (free1 > free0 - (100u << 20) + (2u << 20)) return fail("meminfo: allocation not counted");
  if (free2 + (2u << 20) < free0) return fail("meminfo: idle pool memory not counted as free");
  return 0;
}

// cuMemGetInfo on many threads while the device's budget it answers from
// is found (the first calls race to make and keep it), while the pool
// grows and gives back (`pooled`; else no pool is made), and while the
// primary context is reset: every answer that succeeds is the budget's
// (total: the limit; free within it) or, once the device is retired, the
// driver's own; after the reset, every thread gets the driver's own (no
// answer from a retired device's budget).
int meminfo_threads(bool pooled) {
  constexpr int kThreads = 8;
  size_t free_now = 0, limit = 0, device_total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_now, &limit));  // the limit under limit:1G
  CHECK_CU(cuDeviceTotalMem_v2(&device_total, 0));
  std::atomic<int> phase{0}, done{0}, bad{0}, unadjusted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      if (cuCtxSetCurrent(g_context) != CUDA_SUCCESS) return void(bad.fetch_add(1));
      for (int n = 0; phase.load() < 2; ++n) {
        size_t free_bytes = 0, total = 0;
        if (cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS) continue;  // the context being reset
        if (total != limit && total != device_total) bad.fetch_add(1);
        if (free_bytes > total) bad.fetch_add(1);
      }
      done.fetch_add(1);
      while (phase.load() < 3) std::this_thread::yield();
      size_t free_bytes = 0, total = 0;
      if (cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS || total != device_total) unadjusted.fetch_add(1);
    });
  for (int i = 0; pooled && i < 200; ++i) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, (1u << 20) * size_t(1 + i % 8)));
    CHECK_CU(cuMemFree_v2(p));
  }
  if (!pooled) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the threads ask meanwhile
  phase.store(1);
  CUdevice device;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxReset(device));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));  // back, retired for the pool
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  phase.store(2);
  while (done.load() < kThreads) std::this_thread::yield();
  phase.store(3);
  for (std::thread& t : threads) t.join();
  std::printf("ok meminfo_threads total %zu device %zu\n", limit, device_total);
  if (bad.load()) return fail("meminfo_threads: an answer was neither the budget's nor the driver's");
  if (unadjusted.load()) return fail("meminfo_threads: after the reset, an answer was not the driver's own");
  return 0;
}

// Two devices: cuMemGetInfo answers for the current context's device
// (the pool's memory in use on device 0 is not device 1's).
int meminfo_devices() {
  CUcontext first = nullptr, second = nullptr;
  CHECK_CU(cuCtxGetCurrent(&first));
  CUdevice one;
  CHECK_CU(cuDeviceGet(&one, 1));
  CHECK_CU(cuDevicePrimaryCtxRetain(&second, one));
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc_v2(&p, 100u << 20));
  size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0;
  CHECK_CU(cuMemGetInfo_v2(&free0, &total0));
  CHECK_CU(cuCtxSetCurrent(second));
  CHECK_CU(cuMemGetInfo_v2(&free1, &total1));
  CHECK_CU(cuCtxSetCurrent(first));
  CHECK_CU(cuMemFree_v2(p));
  std::printf("ok meminfo_devices total0 %zu free0 %zu total1 %zu free1 %zu\n", total0, free0, total1, free1);
  return 0;
}

int capacity(const char* list) {
  std::string sizes = list;
  size_t pos = 0;
  while (pos < sizes.size()) {
    size_t comma = sizes.find(',', pos);
    if (comma == std::string::npos) comma = sizes.size();
    const size_t bytes = std::strtoull(sizes.substr(pos, comma - pos).c_str(), nullptr, 10);
    pos = comma + 1;
    std::vector<CUdeviceptr> blocks;
    CUdeviceptr p;
    while (cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS) blocks.push_back(p);
    std::printf("count %zu %zu\n", bytes, blocks.size());
    for (CUdeviceptr b : blocks) CHECK_CU(cuMemFree_v2(b));
  }
  std::printf("ok capacity\n");
  return 0;
}

int faults() {
  struct Live {
    CUdeviceptr p;
    size_t bytes;
    unsigned char v;
  };
  std::vector<Live> live;
  const char* plans[] = {"cuMemCreate:1",
                         "cuMemMap:1",
                         "cuMemSetAccess:1",
                         "cuMemAddressReserve:1",
                         "cuMemCreate:2,cuMemCreate:3,cuMemMap:2",
                         "cuCtxSynchronize:1"};
  int refused = 0;
  for (const char* plan : plans) {
    fakecuda_set_fail(plan);
    for (int i = 0; i < 60; ++i) {
      const size_t bytes = (i % 3 == 0) ? (size_t(1 + i % 7) << 20) * 5 : size_t(100 + i * 977);
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
        ++refused;
        continue;
      }
      const unsigned char v = (unsigned char)(i * 7 + 1);
      std::memset(reinterpret_cast<void*>(p), v, bytes);
      live.push_back({p, bytes, v});
      if (live.size() > 20) {
        if (!all_bytes(live.front().p, live.front().bytes, live.front().v)) return fail("faults: data changed");
        CHECK_CU(cuMemFree_v2(live.front().p));
        live.erase(live.begin());
      }
    }
  }
  fakecuda_set_fail(nullptr);
  for (const Live& l : live) {
    if (!all_bytes(l.p, l.bytes, l.v)) return fail("faults: data changed");
    CHECK_CU(cuMemFree_v2(l.p));
  }
  if (fakecuda_violations()) return fail("faults: fake driver saw a use after free");
  std::printf("ok faults refused %d\n", refused);
  return 0;
}

int capi() {
  StatsGet get = stats_get();
  Trim trim = trim_fn();
  if (!get || !trim) return fail("capi: pagefast_pool_* not exported");
  pagefast_pool_stats s;
  if (get(0, &s) != -1) return fail("capi: stats before any allocation");
  CUdeviceptr p, q;
  CHECK_CU(cuMemAlloc_v2(&p, 10u << 20));
  CHECK_CU(cuMemAlloc_v2(&q, 1000));
  CHECK_CU(cuMemFree_v2(p));
  if (get(0, &s) != 0 || s.mapped_bytes == 0 || s.growths == 0) return fail("capi: stats after allocating");
  if (get(7, &s) != -1 || trim(7) != -1) return fail("capi: a device without a pool");
  if (trim(0) != 0) return fail("capi: trim");
  if (get(0, &s) != 0) return fail("capi: stats after trim");
  // Only the chunk that holds q may stay.
  if (s.mapped_bytes > (256u << 20)) return fail("capi: trim kept idle chunks");
  CHECK_CU(cuMemFree_v2(q));
  if (trim(0) != 0 || get(0, &s) != 0 || s.mapped_bytes != 0) return fail("capi: trim after the last free");
  std::printf("ok capi releases %llu\n", (unsigned long long)s.releases);
  return 0;
}

using SleepFn = int (*)(unsigned);
using WakeFn = int (*)();

int count_fds() {
  int n = 0;
  char path[64];
  for (int fd = 0; fd < 4096; ++fd) {
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    n += access(path, F_OK) == 0 ? 1 : 0;
  }
  return n;
}

// Lines of /proc/self/maps: host memory mapped and not given back shows.
int count_maps() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0;
  for (int c; (c = std::fgetc(f)) != EOF;) n += c == '\n';
  std::fclose(f);
  return n;
}

// Whether PAGEFAST_CONF turns sleep_host_keep off for this run.
bool host_keep_off() {
  const char* conf = std::getenv("PAGEFAST_CONF");
  return conf && std::strstr(conf, "sleep_host_keep:off");
}

int sleep_case(int cycles) {
  const bool keep_host = !host_keep_off();
  SleepFn sleep_fn = reinterpret_cast<SleepFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  WakeFn wake_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  WakeFn asleep_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_asleep"));
  StatsGet get = stats_get();
  if (!sleep_fn || !wake_fn || !asleep_fn || !get) return fail("sleep: pagefast_sleep/wake not exported");
  if (sleep_fn(PAGEFAST_SLEEP_KEEP) != -1) return fail("sleep: answered without a pool");
  // 260 MiB: a chunk of its own (the default chunk is 256 MiB, and the
  // wake faults below want a second chunk), in more than one 32 MiB piece
  // of the copies and not a whole number of them.
  const size_t sizes[] = {1000, 70000, 3u << 20, 40u << 20, 260u << 20};
  std::vector<CUdeviceptr> blocks;
  for (size_t i = 0; i < 5; ++i) {
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, sizes[i]));
    if (i == 4) fill_words(p, sizes[i], 4);
    else std::memset(reinterpret_cast<void*>(p), int(0x10 + i), sizes[i]);
    blocks.push_back(p);
  }
  // A "kernel" still writing when sleep is asked: sleep waits for it.
  CHECK_CU(fakecuda_launch_delayed_fill(0, blocks[3], sizes[3], 0x77, 50));
  size_t free_before = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_before, &total));
  const int releases = fakecuda_call_count("cuMemRelease");
  if (sleep_fn(PAGEFAST_SLEEP_KEEP | PAGEFAST_SLEEP_FAIL) != 0) return fail("sleep: keep");
  if (asleep_fn() != 1) return fail("sleep: not asleep");
  pagefast_pool_stats s;
  if (get(0, &s) != 0 || s.mapped_bytes != 0) return fail("sleep: the pool still holds memory");
  if (fakecuda_call_count("cuMemRelease") <= releases) return fail("sleep: nothing released");
  size_t free_asleep = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_asleep, &total));
  if (free_asleep < free_before + (300u << 20)) return fail("sleep: the driver did not get the memory back");
  CUdeviceptr q = 0;
  if (cuMemAlloc_v2(&q, 3u << 20) != CUDA_ERROR_OUT_OF_MEMORY) return fail("sleep: allocation while asleep");
  if (cuMemAlloc_v2(&q, 1000) != CUDA_ERROR_OUT_OF_MEMORY) return fail("sleep: small allocation while asleep");
  if (wake_fn() != 0 || asleep_fn() != 0) return fail("sleep: wake");
  for (size_t i = 0; i < 4; ++i)
    if (!all_bytes(blocks[i], sizes[i], (unsigned char)(i == 3 ? 0x77 : 0x10 + i)))
      return fail("sleep: contents differ after wake");
  if (!words_intact(blocks[4], sizes[4], 4)) return fail("sleep: a piece of a copy came back at the wrong place");
  // The copies' host memory: page-locked and kept after wake, or given back.
  if (keep_host != (fakecuda_host_registered_bytes() >= (260u << 20)))
    return fail("sleep: the host memory is not page-locked and kept as sleep_host_keep says");
  if (fakecuda_call_count("cuMemHostAlloc") != 0) return fail("sleep: a staging buffer although all was page-locked");
  // Without keep, waiting: an allocation on another thread waits for wake.
  if (sleep_fn(0) != 0) return fail("sleep: without keep");
  std::atomic<int> got{0};
  std::thread waiter([&] {
    cuCtxSetCurrent(g_context);
    CUdeviceptr r = 0;
    got = cuMemAlloc_v2(&r, 3u << 20) == CUDA_SUCCESS ? 1 : -1;
    if (r) cuMemFree_v2(r);
  });
  usleep(100 * 1000);
  if (got.load() != 0) return fail("sleep: the allocation did not wait");
  // A free while asleep is served.
  CHECK_CU(cuMemFree_v2(blocks[0]));
  if (wake_fn() != 0) return fail("sleep: wake without keep");
  waiter.join();
  if (got.load() != 1) return fail("sleep: the waiting allocation failed");
  std::memset(reinterpret_cast<void*>(blocks[4]), 0x3C, sizes[4]);
  if (!all_bytes(blocks[4], sizes[4], 0x3C)) return fail("sleep: memory after wake unusable");
  // Driver faults: an unmap refused (that chunk stays resident), a release
  // refused, a copy piece refused (its chunk stays resident), the staging
  // buffer or stream of a copy thread refused (it copies without).
  std::memset(reinterpret_cast<void*>(blocks[3]), 0x42, sizes[3]);
  fill_words(blocks[4], sizes[4], 4);
  auto intact = [&] { return all_bytes(blocks[3], sizes[3], 0x42) && words_intact(blocks[4], sizes[4], 4); };
  // (The last: the first thread without staging buffer or stream, and a
  // synchronous copy of it refused.)
  // The rest after a trim (no page-locked host memory kept): page-locking
  // refused on the way, then the staging buffer of the first thread that
  // needs one and a stream, and then a synchronous copy of that thread.
  const char* faults[] = {
      "cuMemUnmap:1",           "cuMemRelease:1",
      "cuMemcpyDtoHAsync_v2:4", "cuStreamSynchronize:2",
      "cuMemHostRegister_v2:3", "cuMemHostRegister_v2:1,cuMemHostAlloc:1,cuStreamCreate:1,cuMemcpyDtoH_v2:2"};
  for (const char* f : faults) {
    if (std::strstr(f, "cuMemHostRegister") && trim_fn()(0) != 0) return fail("sleep: trim before a fault");
    fakecuda_set_fail(f);
    if (sleep_fn(PAGEFAST_SLEEP_KEEP) < 0) return fail("sleep: a driver fault made sleep fail");
    fakecuda_set_fail("");
    if (wake_fn() != 0) return fail("sleep: wake after a fault in sleep");
    if (!intact()) return fail((std::string("sleep: contents lost to a fault in sleep: ") + f).c_str());
  }
  // Create, map, access or a copy refused at wake: still asleep,
  // wake again.
  const char* wake_faults[] = {"cuMemCreate:1", "cuMemMap:2", "cuMemSetAccess:1", "cuMemcpyHtoDAsync_v2:2",
                               "cuStreamSynchronize:2"};
  for (const char* f : wake_faults) {
    // 1: a chunk whose unmap was refused above stays resident for good.
    if (sleep_fn(PAGEFAST_SLEEP_KEEP) < 0) return fail("sleep: before a wake fault");
    fakecuda_set_fail(f);
    if (wake_fn() != -1 || asleep_fn() != 1)
      return fail((std::string("sleep: a driver fault in wake went unnoticed: ") + f).c_str());
    fakecuda_set_fail("");
    if (wake_fn() != 0) return fail("sleep: wake again after a fault");
    if (!intact()) return fail((std::string("sleep: contents lost to a fault in wake: ") + f).c_str());
  }
  // A copy thread without staging buffer or stream copies all the same
  // (the sleep before: nothing page-locked, so that wake needs staging).
  const char* degraded[] = {"cuMemHostAlloc:1,cuStreamCreate:2",
                            "cuMemHostAlloc:1,cuMemHostAlloc:2,cuStreamCreate:1,cuStreamCreate:2"};
  for (const char* f : degraded) {
    if (trim_fn()(0) != 0) return fail("sleep: trim before a degraded wake");
    fakecuda_set_fail("cuMemHostRegister_v2:1");
    const int slept = sleep_fn(PAGEFAST_SLEEP_KEEP);
    fakecuda_set_fail("");
    if (slept < 0) return fail("sleep: before a degraded wake");
    fakecuda_set_fail(f);
    if (wake_fn() != 0) return fail("sleep: wake without a staging buffer or stream failed");
    fakecuda_set_fail("");
    if (!intact()) return fail((std::string("sleep: contents lost in a degraded wake: ") + f).c_str());
  }
  // Many cycles: no handle, host buffer or descriptor left behind. Only
  // small blocks stay, so that each cycle copies little.
  CHECK_CU(cuMemFree_v2(blocks[3]));
  CHECK_CU(cuMemFree_v2(blocks[4]));
  if (trim_fn()(0) != 0) return fail("sleep: trim");
  std::memset(reinterpret_cast<void*>(blocks[2]), 0x42, sizes[2]);
  // One cycle first: a copy thread's stack stays cached by libc.
  if (sleep_fn(PAGEFAST_SLEEP_KEEP) < 0 || wake_fn() != 0) return fail("sleep: a cycle failed");
  const int fds = count_fds(), maps = count_maps();
  const int creates = fakecuda_call_count("cuMemCreate"), released = fakecuda_call_count("cuMemRelease");
  const int host_allocs = fakecuda_call_count("cuMemHostAlloc"), host_frees = fakecuda_call_count("cuMemFreeHost");
  const int registers = fakecuda_call_count("cuMemHostRegister_v2");
  const int unregisters = fakecuda_call_count("cuMemHostUnregister");
  const unsigned long long registered = fakecuda_host_registered_bytes();
  for (int i = 0; i < cycles; ++i) {
    if (sleep_fn(PAGEFAST_SLEEP_KEEP) < 0 || wake_fn() != 0) return fail("sleep: a cycle failed");
  }
  // Kept: the same page-locked memory reused by every cycle, nothing new
  // locked. Not kept: locked at each sleep and given back at each wake.
  if (fakecuda_host_registered_bytes() != registered)
    return fail("sleep: page-locked host memory grew over the cycles");
  if (keep_host ? fakecuda_call_count("cuMemHostRegister_v2") != registers
                : fakecuda_call_count("cuMemHostRegister_v2") - registers !=
                      fakecuda_call_count("cuMemHostUnregister") - unregisters)
    return fail("sleep: page-locked host memory not reused (kept) or not given back (not kept)");
  if (keep_host && registered == 0) return fail("sleep: no page-locked host memory kept between cycles");
  if (fakecuda_call_count("cuMemCreate") - creates != fakecuda_call_count("cuMemRelease") - released)
    return fail("sleep: chunks leaked over the cycles");
  if (fakecuda_call_count("cuMemHostAlloc") - host_allocs != fakecuda_call_count("cuMemFreeHost") - host_frees)
    return fail("sleep: host buffers leaked over the cycles");
  if (count_fds() != fds) return fail("sleep: descriptors leaked over the cycles");
  if (count_maps() > maps + 2) return fail("sleep: host memory mappings leaked over the cycles");
  if (!all_bytes(blocks[2], sizes[2], 0x42)) return fail("sleep: contents lost over the cycles");
  for (size_t i = 1; i < 3; ++i) CHECK_CU(cuMemFree_v2(blocks[i]));
  // Trim gives the kept host memory back.
  if (trim_fn()(0) != 0 || fakecuda_host_registered_bytes() != 0) return fail("sleep: trim kept page-locked memory");
  if (fakecuda_violations()) return fail("sleep: the fake driver saw a violation");
  std::printf("ok sleep cycles %d creates %d\n", cycles, fakecuda_call_count("cuMemCreate") - creates);
  return 0;
}

// Put to sleep and woken from outside (pagefast-ctl): fills blocks, says
// "ready", and on each line of stdin reports whether its pool is asleep
// ("asleep N") or, on "check", whether the contents are the same.
int ctl_target() {
  WakeFn asleep_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_asleep"));
  if (!asleep_fn) return fail("ctl: pagefast_asleep not exported");
  const size_t sizes[] = {5000, 3u << 20, 90u << 20};
  CUdeviceptr blocks[3];
  for (int i = 0; i < 3; ++i) {
    CHECK_CU(cuMemAlloc_v2(&blocks[i], sizes[i]));
    std::memset(reinterpret_cast<void*>(blocks[i]), 0x61 + i, sizes[i]);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    if (std::strncmp(line, "check", 5) == 0) {
      for (int i = 0; i < 3; ++i)
        if (!all_bytes(blocks[i], sizes[i], (unsigned char)(0x61 + i))) return fail("ctl: contents differ");
      std::printf("ok ctl\n");
      return 0;
    }
    std::printf("asleep %d\n", asleep_fn());
    std::fflush(stdout);
  }
  return fail("ctl: no check asked");
}

int devices() {
  // Two devices: each context's allocations come from its own device's
  // pool, and that device's "kernels" may use them.
  CUdevice second;
  CHECK_CU(cuDeviceGet(&second, 1));
  CUcontext other;
  CHECK_CU(cuDevicePrimaryCtxRetain(&other, second));
  CUdeviceptr on0, on1;
  CHECK_CU(cuMemAlloc_v2(&on0, 3u << 20));
  CHECK_CU(cuCtxSetCurrent(other));
  CHECK_CU(cuMemAlloc_v2(&on1, 3u << 20));
  CHECK_CU(fakecuda_launch_delayed_fill(0, on1, 3u << 20, 0x5A, 1));
  CHECK_CU(cuCtxSynchronize());
  if (!all_bytes(on1, 3u << 20, 0x5A)) return fail("devices: device 1's kernel could not write its memory");
  int ordinal = -1;
  CHECK_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on1));
  if (ordinal != 1) return fail("devices: memory allocated under device 1 is not device 1's");
  CHECK_CU(cuMemFree_v2(on0));  // freed under the other device's context
  CHECK_CU(cuCtxSetCurrent(g_context));
  CHECK_CU(cuMemFree_v2(on1));
  if (StatsGet get = stats_get()) {
    pagefast_pool_stats s0, s1;
    if (get(0, &s0) != 0 || get(1, &s1) != 0) return fail("devices: a pool per device");
    if (s0.in_use_bytes || s1.in_use_bytes) return fail("devices: blocks still in use");
  }
  if (fakecuda_violations()) return fail("devices: fake driver saw a use after free");
  std::printf("ok devices\n");
  return 0;
}

// Device `device`'s access flags on the pool mapping that holds p, as the
// fake driver keeps them: cuMemGetAccess answers for pool memory as the
// driver does for cuMemAlloc memory (no flags), so it cannot tell.
unsigned long long access_of(CUdeviceptr p, int device) { return fakecuda_mapping_access(p, device); }

int ordinal_of(CUdeviceptr p) {
  int ordinal = -1;
  if (cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) return -2;
  return ordinal;
}

// A "kernel" on the current context's device (stream 0) reading p: 1 if it
// saw `value` everywhere, 0 if not, -1 if the launch was refused (the fake
// refuses memory the device may not access).
int kernel_reads(CUdeviceptr p, size_t bytes, unsigned char value) {
  int ok = -1;
  if (fakecuda_launch_delayed_check(0, p, bytes, value, 1, &ok) != CUDA_SUCCESS) return -1;
  if (cuCtxSynchronize() != CUDA_SUCCESS) return -1;
  return ok;
}

int peers() {
  constexpr size_t kMiB = 1u << 20;
  constexpr unsigned long long kRW = CU_MEM_ACCESS_FLAGS_PROT_READWRITE, kNone = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  StatsGet get = stats_get();
  Trim trim = trim_fn();
  const bool pooled = get != nullptr;
  CUcontext ctx0 = g_context, ctx1 = nullptr;
  CUdevice second;
  CHECK_CU(cuDeviceGet(&second, 1));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx1, second));

  // Device 0, first allocations (the first chunk): a stitch if pooled,
  // made from two holes of 2 MiB (run with chunk_size:8M).
  CUdeviceptr b[4], stitched;
  for (CUdeviceptr& p : b) CHECK_CU(cuMemAlloc_v2(&p, 2 * kMiB));
  CHECK_CU(cuMemFree_v2(b[0]));
  CHECK_CU(cuMemFree_v2(b[2]));
  pagefast_pool_stats s0{}, s1{};
  if (pooled && trim(0) != 0) return fail("peers: trim");
  CHECK_CU(cuMemAlloc_v2(&stitched, 4 * kMiB));
  const bool made_stitch = pooled && get(0, &s0) == 0 && s0.stitches == 1;
  CUdeviceptr before0, small0, moved;
  CHECK_CU(cuMemAlloc_v2(&before0, 3 * kMiB));
  CHECK_CU(cuMemAlloc_v2(&small0, 1000));
  CHECK_CU(cuMemAlloc_v2(&moved, 5 * kMiB));

  // Device 1, from its own context.
  CHECK_CU(cuCtxSetCurrent(ctx1));
  CUdeviceptr on1;
  CHECK_CU(cuMemAlloc_v2(&on1, 3 * kMiB));
  for (CUdeviceptr p : {b[1], b[3], stitched, before0, small0, moved})
    if (ordinal_of(p) != 0) return fail("peers: memory allocated under device 0 is not device 0's");
  if (ordinal_of(on1) != 1) return fail("peers: memory allocated under device 1 is not device 1's");

  // A free from a thread whose current context is device 1 returns device
  // 0's block to device 0's pool.
  uint64_t in_use0 = 0, in_use1 = 0;
  if (pooled) {
    if (get(0, &s0) != 0 || get(1, &s1) != 0) return fail("peers: a pool per device");
    in_use0 = s0.in_use_bytes;
    in_use1 = s1.in_use_bytes;
  }
  CUresult freed = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    if (cuCtxSetCurrent(ctx1) == CUDA_SUCCESS) freed = cuMemFree_v2(moved);
  }).join();
  CHECK_CU(freed);
  if (pooled) {
    if (get(0, &s0) != 0 || get(1, &s1) != 0) return fail("peers: stats");
    if (s0.in_use_bytes != in_use0 - 6 * kMiB || s1.in_use_bytes != in_use1)
      return fail("peers: a free under device 1 did not go back to device 0's pool");
  }

  // Before peer access: device 0's pool memory is device 0's only.
  if (pooled) {
    for (CUdeviceptr p : {b[1], before0, small0})
      if (access_of(p, 0) != kRW || access_of(p, 1) != kNone)
        return fail("peers: device 0's pool memory before peer access");
  }

  // Device 1 may access device 0's memory from here on.
  CHECK_CU(cuCtxEnablePeerAccess(ctx0, 0));
  CHECK_CU(cuCtxSetCurrent(ctx0));
  CUdeviceptr after0, big0;
  CHECK_CU(cuMemAlloc_v2(&after0, 3 * kMiB));
  CHECK_CU(cuMemAlloc_v2(&big0, 40 * kMiB));  // beyond every chunk so far: growth
  CHECK_CU(cuMemsetD8_v2(before0, 0x11, 3 * kMiB));
  CHECK_CU(cuMemsetD8_v2(after0, 0x22, 3 * kMiB));
  CHECK_CU(cuMemsetD8_v2(big0, 0x33, 40 * kMiB));
  CHECK_CU(cuMemsetD8_v2(stitched, 0x44, 4 * kMiB));
  if (pooled) {
    for (CUdeviceptr p : {b[1], b[3], before0, small0, after0, big0})
      if (access_of(p, 1) != kRW || access_of(p, 0) != kRW)
        return fail("peers: device 0's pool memory is not open to device 1 after cuCtxEnablePeerAccess");
    if (made_stitch && access_of(stitched, 1) != kRW)
      return fail("peers: a stitch of device 0's pool is not open to device 1");
    // Device 1's own pool is unaffected: still its own only.
    if (access_of(on1, 1) != kRW || access_of(on1, 0) != kNone) return fail("peers: device 1's pool changed");
  }
  // Device 1's kernels read device 0's memory, before and after the enable.
  CHECK_CU(cuCtxSetCurrent(ctx1));
  if (kernel_reads(before0, 3 * kMiB, 0x11) != 1 || kernel_reads(after0, 3 * kMiB, 0x22) != 1 ||
      kernel_reads(big0, 40 * kMiB, 0x33) != 1 || kernel_reads(stitched, 4 * kMiB, 0x44) != 1)
    return fail("peers: a kernel on device 1 could not read device 0's memory with peer access");
  if (fakecuda_violations()) return fail("peers: violations with peer access");

  // Disabled: device 1 has no access any more; its launch is refused.
  CHECK_CU(cuCtxDisablePeerAccess(ctx0));
  if (pooled) {
    for (CUdeviceptr p : {b[1], before0, small0, after0, big0})
      if (access_of(p, 1) != kNone || access_of(p, 0) != kRW)
        return fail("peers: device 1 keeps access to device 0's pool memory after cuCtxDisablePeerAccess");
    if (made_stitch && access_of(stitched, 1) != kNone)
      return fail("peers: device 1 keeps access to a stitch after cuCtxDisablePeerAccess");
  }
  if (kernel_reads(after0, 3 * kMiB, 0x22) != -1 || kernel_reads(before0, 3 * kMiB, 0x11) != -1)
    return fail("peers: a kernel on device 1 may read device 0's memory after disable");
  if (fakecuda_violations()) return fail("peers: violations after disable");

  // Enabling twice is the driver's error, and changes nothing.
  if (cuCtxDisablePeerAccess(ctx0) != CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) return fail("peers: disable twice");
  CHECK_CU(cuCtxEnablePeerAccess(ctx0, 0));
  if (cuCtxEnablePeerAccess(ctx0, 0) != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return fail("peers: enable twice");
  if (pooled && access_of(before0, 1) != kRW) return fail("peers: enabled again");
  CHECK_CU(cuCtxDisablePeerAccess(ctx0));

  // Frees under the other device's context, each to its own pool.
  for (CUdeviceptr p : {b[1], b[3], stitched, before0, small0, after0, big0}) CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuCtxSetCurrent(ctx0));
  CHECK_CU(cuMemFree_v2(on1));
  if (pooled) {
    if (get(0, &s0) != 0 || get(1, &s1) != 0) return fail("peers: stats at the end");
    if (s0.in_use_bytes || s1.in_use_bytes) return fail("peers: blocks still in use");
  }
  std::printf("ok peers stitch %d\n", made_stitch ? 1 : 0);
  return 0;
}

// The program's own VMM memory (cuMemCreate, mapped and opened by the
// program) next to pool memory: sleep with keep covers it too
// (docs/OWN-VMM.md "Sleep and wake"), so the answer is 0 and the device
// memory is free while asleep; the pool's and the program's bytes are the
// same after wake. Once the program has unmapped
// and released its handles, what pagefast keeps of them is idle memory:
// sleep gives it back with the pool's, and answers 0.
int sleep_own_vmm() {
  SleepFn sleep_fn = reinterpret_cast<SleepFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  WakeFn wake_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  if (!sleep_fn || !wake_fn) return fail("sleep_own_vmm: pagefast_sleep/wake not exported");
  constexpr size_t kBytes = 4u << 20;
  CUdeviceptr pool_block;
  CHECK_CU(cuMemAlloc_v2(&pool_block, kBytes));
  std::memset(reinterpret_cast<void*>(pool_block), 0x3c, kBytes);
  struct Own {
    CUmemGenericAllocationHandle handle;
    CUdeviceptr va;
    unsigned char v;
  };
  // One handle pagefast's cache tracks (no handle type), one it does not
  // (shareable through a file descriptor).
  const CUmemAllocationHandleType types[] = {CU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
  std::vector<Own> own;
  for (int i = 0; i < 2; ++i) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = types[i];
    Own o{0, 0, (unsigned char)(0x51 + i)};
    CHECK_CU(cuMemCreate(&o.handle, kBytes, &prop, 0));
    CHECK_CU(cuMemAddressReserve(&o.va, kBytes, 0, 0, 0));
    CHECK_CU(cuMemMap(o.va, kBytes, 0, o.handle, 0));
    CUmemAccessDesc desc = {};
    desc.location = prop.location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(o.va, kBytes, &desc, 1));
    std::memset(reinterpret_cast<void*>(o.va), o.v, kBytes);
    own.push_back(o);
  }
  const int answer = sleep_fn(PAGEFAST_SLEEP_KEEP);
  std::printf("own-vmm sleep answer %d\n", answer);
  if (answer != 0) return fail("sleep_own_vmm: the answer is not 0 with the program's own memory asleep");
  size_t free_held = 0, total_held = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_held, &total_held));
  if (fakecuda_free_bytes(0) != total_held) return fail("sleep_own_vmm: the program's own memory stayed taken");
  if (wake_fn() != 0) return fail("sleep_own_vmm: wake");
  if (!all_bytes(pool_block, kBytes, 0x3c)) return fail("sleep_own_vmm: pool bytes changed");
  for (const Own& o : own)
    if (!all_bytes(o.va, kBytes, o.v)) return fail("sleep_own_vmm: the program's own bytes changed");
  for (const Own& o : own) {
    CHECK_CU(cuMemUnmap(o.va, kBytes));
    CHECK_CU(cuMemRelease(o.handle));
    CHECK_CU(cuMemAddressFree(o.va, kBytes));
  }
  CHECK_CU(cuMemFree_v2(pool_block));
  const int again = sleep_fn(PAGEFAST_SLEEP_KEEP);
  const unsigned long long free_asleep = fakecuda_free_bytes(0);
  size_t free_now = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_now, &total));
  std::printf("own-vmm released: sleep answer %d, %llu of %zu bytes free asleep\n", again, free_asleep, total);
  if (again != 0) return fail("sleep_own_vmm: the answer is not 0 once the program released its memory");
  if (free_asleep != total) return fail("sleep_own_vmm: device memory stayed taken while asleep");
  if (wake_fn() != 0) return fail("sleep_own_vmm: second wake");
  std::printf("ok sleep_own_vmm\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: pool_preload <case> [args]");
  if (start()) return 1;
  const std::string c = argv[1];
  if (c == "reuse") return reuse();
  if (c == "capture") return capture();
  if (c == "ipc") return ipc();
  if (c == "ipc-child") return ipc_child();
  if (c == "sizes") return sizes();
  if (c == "fork") return fork_case();
  if (c == "threads") return threads();
  if (c == "meminfo") return meminfo();
  if (c == "meminfo_devices") return meminfo_devices();
  if (c == "meminfo_threads") return meminfo_threads(argc > 2 && std::string(argv[2]) == "pooled");
  if (c == "capacity") return capacity(argc > 2 ? argv[2] : "20971520");
  if (c == "faults") return faults();
  if (c == "capi") return capi();
  if (c == "ctl-target") return ctl_target();
  if (c == "sleep") return sleep_case(argc > 2 ? std::atoi(argv[2]) : 20);
  if (c == "sleep_own_vmm") return sleep_own_vmm();
  if (c == "devices") return devices();
  if (c == "peers") return peers();
  return fail("unknown case");
}
