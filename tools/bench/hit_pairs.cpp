// tools/bench/hit_pairs.cpp: a steady loop of cuMemAlloc_v2 + cuMemFree_v2
// pairs of one size, for counting the instructions of a pool hit with
// callgrind (tools/bench/hit-instructions). The driver is reached the way
// JAX and CuPy reach it, by dlopen("libcuda.so.1") and dlsym, so under
// LD_PRELOAD=libpagefast.so the pairs go through pagefast's doors and,
// with the fake driver (tests/fakecuda) on LD_LIBRARY_PATH, need no GPU.
//
// Usage: hit_pairs BYTES WARM_PAIRS MEASURED_PAIRS [CALLS]
// CALLS (default alloc): alloc, cuMemAlloc_v2 + cuMemFree_v2 (a pool hit);
// or one of the calls pagefast forwards to the driver, for the cost of the
// hook alone against the driver alone: async (cuMemAllocAsync +
// cuMemFreeAsync on stream 0, the driver's own pool), attribute
// (cuPointerGetAttribute of a driver block's memory type), range
// (cuMemGetAddressRange of a driver block), info (cuMemGetInfo), capture
// (cuStreamBeginCapture + cuStreamEndCapture on a stream of its own);
// or exported: alloc's pool-hit pairs while another block of the pool has
// a CUDA IPC handle (cuIpcGetMemHandle, made before the warm-up): the
// export's bookkeeping must not reach the other blocks' frees.
// Only measured_pairs() is meant to be counted
// (--toggle-collect=measured_pairs); the warm-up fills the pool and the
// thread's cache first, so every measured pair is a hit.
// On the fake driver (its fakecuda_call_count extension found), a second
// line gives the driver's memory calls made during the measured pairs
// (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
// cuMemGetInfo_v2, cuCtxSynchronize): a steady loop's driver calls per
// pair (tests/tools/hit_pairs_case.py, docs/POOL.md "Big blocks").
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using FreeFn = CUresult (*)(CUdeviceptr);
using AllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);
using AttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using RangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using InfoFn = CUresult (*)(size_t*, size_t*);
using StreamCreateFn = CUresult (*)(CUstream*, unsigned);
using BeginCaptureFn = CUresult (*)(CUstream, CUstreamCaptureMode);
using EndCaptureFn = CUresult (*)(CUstream, CUgraph*);
using GraphDestroyFn = CUresult (*)(CUgraph);

enum class Calls { Alloc, Async, Attribute, Range, Info, Capture, Exported };
Calls g_calls = Calls::Alloc;
AllocFn g_alloc = nullptr;
FreeFn g_free = nullptr;
AllocAsyncFn g_alloc_async = nullptr;
FreeAsyncFn g_free_async = nullptr;
AttributeFn g_attribute = nullptr;
RangeFn g_range = nullptr;
InfoFn g_info = nullptr;
BeginCaptureFn g_begin_capture = nullptr;
EndCaptureFn g_end_capture = nullptr;
GraphDestroyFn g_graph_destroy = nullptr;
CUdeviceptr g_block = 0;  // a driver block (pool:off never needed: the queries go to the driver's)
CUstream g_stream = nullptr;

// One forwarded call (or pair); false on a failed one.
inline bool forwarded(size_t bytes) {
  switch (g_calls) {
    case Calls::Async: {
      CUdeviceptr block = 0;
      return g_alloc_async(&block, bytes, nullptr) == CUDA_SUCCESS && g_free_async(block, nullptr) == CUDA_SUCCESS;
    }
    case Calls::Attribute: {
      unsigned type = 0;
      return g_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g_block) == CUDA_SUCCESS;
    }
    case Calls::Range: {
      CUdeviceptr base = 0;
      size_t size = 0;
      return g_range(&base, &size, g_block) == CUDA_SUCCESS;
    }
    case Calls::Info: {
      size_t free_bytes = 0, total = 0;
      return g_info(&free_bytes, &total) == CUDA_SUCCESS;
    }
    case Calls::Capture: {
      CUgraph graph = nullptr;
      const bool ok = g_begin_capture(g_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS &&
                      g_end_capture(g_stream, &graph) == CUDA_SUCCESS;
      if (graph && g_graph_destroy) g_graph_destroy(graph);
      return ok;
    }
    case Calls::Alloc:
    case Calls::Exported: break;
  }
  return false;
}

template <typename Fn>
Fn resolve(void* lib, const char* name) {
  void* symbol = dlsym(lib, name);
  if (symbol == nullptr) {
    std::fprintf(stderr, "hit_pairs: %s not found\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(symbol);
}

// Returns the number of failed calls.
inline long run_pairs(size_t bytes, long pairs) {
  long failures = 0;
  for (long i = 0; i < pairs; ++i) {
    if (g_calls != Calls::Alloc && g_calls != Calls::Exported) {
      failures += !forwarded(bytes);
      continue;
    }
    CUdeviceptr block = 0;
    failures += g_alloc(&block, bytes) != CUDA_SUCCESS;
    failures += g_free(block) != CUDA_SUCCESS;
  }
  return failures;
}

// Two copies of the loop under two names (noipa: never folded into one), so that callgrind's
// --toggle-collect=measured_pairs counts the measured pairs alone.
__attribute__((noipa)) long warm_pairs(size_t bytes, long pairs) { return run_pairs(bytes, pairs); }
__attribute__((noipa)) long measured_pairs(size_t bytes, long pairs) { return run_pairs(bytes, pairs); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(
        stderr,
        "usage: hit_pairs BYTES WARM_PAIRS MEASURED_PAIRS [alloc|async|attribute|range|info|capture|exported]\n");
    return 2;
  }
  const std::string calls = argc == 5 ? argv[4] : "alloc";
  const char* names[] = {"alloc", "async", "attribute", "range", "info", "capture", "exported"};
  bool known = false;
  for (int i = 0; i < 7; ++i)
    if (calls == names[i]) g_calls = Calls(i), known = true;
  if (!known) {
    std::fprintf(stderr, "hit_pairs: unknown calls %s\n", calls.c_str());
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const long warm = std::atol(argv[2]);
  const long measured = std::atol(argv[3]);

  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "hit_pairs: %s\n", dlerror());
    return 2;
  }
  auto init = resolve<CUresult (*)(unsigned)>(lib, "cuInit");
  auto device_get = resolve<CUresult (*)(CUdevice*, int)>(lib, "cuDeviceGet");
  auto retain = resolve<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = resolve<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  g_alloc = resolve<AllocFn>(lib, "cuMemAlloc_v2");
  g_free = resolve<FreeFn>(lib, "cuMemFree_v2");
  g_alloc_async = resolve<AllocAsyncFn>(lib, "cuMemAllocAsync");
  g_free_async = resolve<FreeAsyncFn>(lib, "cuMemFreeAsync");
  g_attribute = resolve<AttributeFn>(lib, "cuPointerGetAttribute");
  g_range = resolve<RangeFn>(lib, "cuMemGetAddressRange_v2");
  g_info = resolve<InfoFn>(lib, "cuMemGetInfo_v2");
  g_begin_capture = resolve<BeginCaptureFn>(lib, "cuStreamBeginCapture_v2");
  g_end_capture = resolve<EndCaptureFn>(lib, "cuStreamEndCapture");
  // Optional (the fake driver's graphs are tokens with nothing to free).
  g_graph_destroy = reinterpret_cast<GraphDestroyFn>(dlsym(lib, "cuGraphDestroy"));
  auto stream_create = resolve<StreamCreateFn>(lib, "cuStreamCreate");

  CUdevice device = 0;
  CUcontext context = nullptr;
  if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS || retain(&context, device) != CUDA_SUCCESS ||
      set_current(context) != CUDA_SUCCESS) {
    std::fprintf(stderr, "hit_pairs: no context on device 0\n");
    return 2;
  }
  // The queries' block is the driver's own: cuMemAllocAsync's pool (never
  // pagefast's, under or without it).
  const bool forwards = g_calls != Calls::Alloc && g_calls != Calls::Exported;
  if (forwards && (g_alloc_async(&g_block, bytes, nullptr) != CUDA_SUCCESS ||
                   stream_create(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)) {
    std::fprintf(stderr, "hit_pairs: no driver block or stream\n");
    return 2;
  }
  // The exported block: of another size than the pairs', live to the end.
  CUipcMemHandle handle;
  auto ipc_get = resolve<CUresult (*)(CUipcMemHandle*, CUdeviceptr)>(lib, "cuIpcGetMemHandle");
  if (g_calls == Calls::Exported &&
      (g_alloc(&g_block, bytes + 4096) != CUDA_SUCCESS || ipc_get(&handle, g_block) != CUDA_SUCCESS)) {
    std::fprintf(stderr, "hit_pairs: no exported block\n");
    return 2;
  }
  long failures = warm_pairs(bytes, warm);
  auto reset_counts = reinterpret_cast<void (*)()>(dlsym(lib, "fakecuda_reset_counts"));
  auto call_count = reinterpret_cast<int (*)(const char*)>(dlsym(lib, "fakecuda_call_count"));
  if (reset_counts && call_count) reset_counts();
  failures += measured_pairs(bytes, measured);
  std::printf("hit_pairs bytes=%zu warm=%ld measured=%ld failures=%ld\n", bytes, warm, measured, failures);
  if (reset_counts && call_count) {
    std::printf("driver_calls");
    for (const char* name : {"cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease",
                             "cuMemGetInfo_v2", "cuCtxSynchronize"})
      std::printf(" %s=%d", name, call_count(name));
    std::printf("\n");
  }
  return failures == 0 ? 0 : 1;
}
