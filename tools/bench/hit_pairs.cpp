// tools/bench/hit_pairs.cpp: a steady loop of cuMemAlloc_v2 + cuMemFree_v2
// pairs of one size, for counting the instructions of a pool hit with
// callgrind (tools/bench/hit-instructions). The driver is reached the way
// JAX and CuPy reach it, by dlopen("libcuda.so.1") and dlsym, so under
// LD_PRELOAD=libpagefast.so the pairs go through pagefast's doors and,
// with the fake driver (tests/fakecuda) on LD_LIBRARY_PATH, need no GPU.
//
// Usage: hit_pairs BYTES WARM_PAIRS MEASURED_PAIRS
// Only measured_pairs() is meant to be counted
// (--toggle-collect=measured_pairs); the warm-up fills the pool and the
// thread's cache first, so every measured pair is a hit.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace {

using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using FreeFn = CUresult (*)(CUdeviceptr);

AllocFn g_alloc = nullptr;
FreeFn g_free = nullptr;

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
  if (argc != 4) {
    std::fprintf(stderr, "usage: hit_pairs BYTES WARM_PAIRS MEASURED_PAIRS\n");
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

  CUdevice device = 0;
  CUcontext context = nullptr;
  if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS || retain(&context, device) != CUDA_SUCCESS ||
      set_current(context) != CUDA_SUCCESS) {
    std::fprintf(stderr, "hit_pairs: no context on device 0\n");
    return 2;
  }
  long failures = warm_pairs(bytes, warm);
  failures += measured_pairs(bytes, measured);
  std::printf("hit_pairs bytes=%zu warm=%ld measured=%ld failures=%ld\n", bytes, warm, measured, failures);
  return failures == 0 ? 0 : 1;
}
