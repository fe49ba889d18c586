// tests/pool/preload_program.h: what the pool's driver programs share
// (pool_preload.cpp, headroom_preload.cpp): the failure line, a check of
// a driver call that fails the subcommand, and the start on device 0's
// primary context. Each subcommand prints "ok ..." or "FAIL ..." and the
// case scripts (preload_cases.py, headroom_cases.py) read that.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>

namespace preload_program {

inline int fail(const char* what) {
  std::printf("FAIL %s\n", what);
  return 1;
}

// The primary context of device 0, current on the calling thread.
inline CUcontext g_context = nullptr;

// A pattern that differs at every 8-byte word and per seed, so that a
// piece of a copy put at the wrong offset (sleep's copies move in pieces)
// is seen. The memory is the fake driver's, readable from the host.
inline void fill_words(CUdeviceptr p, size_t bytes, uint64_t seed) {
  uint64_t* w = reinterpret_cast<uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
}

inline bool words_intact(CUdeviceptr p, size_t bytes, uint64_t seed) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i)
    if (w[i] != ((i + 1) * 0x9E3779B97F4A7C15ull ^ seed)) return false;
  return true;
}

}  // namespace preload_program

// Returns 1 from the calling function, after a line naming the call, its
// result and the line, when `call` answers anything but CUDA_SUCCESS.
#define CHECK_CU(call)                                                    \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    if (r_ != CUDA_SUCCESS) {                                             \
      std::printf("FAIL %s -> %d (line %d)\n", #call, int(r_), __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

namespace preload_program {

inline int start() {
  CHECK_CU(cuInit(0));
  CUdevice device;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&g_context, device));
  CHECK_CU(cuCtxSetCurrent(g_context));
  return 0;
}

}  // namespace preload_program
