// tests/pool/preload_program.h: what the pool's driver programs share
// (pool_preload.cpp, headroom_preload.cpp): the failure line, a check of
// a driver call that fails the subcommand, and the start on device 0's
// primary context. Each subcommand prints "ok ..." or "FAIL ..." and the
// case scripts (preload_cases.py, headroom_cases.py) read that.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>
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

// pagefast's regions and tagged sleep (interpose/pagefast.h), looked up
// in the process as a program does where the library may be absent.
struct RegionApi {
  int (*begin)(const char*, unsigned) = nullptr;
  int (*end)() = nullptr;
  const char* (*current)() = nullptr;
  int (*sleep_tag)(const char*, unsigned) = nullptr;
  int (*wake_tag)(const char*) = nullptr;
  int (*tag_asleep)(const char*) = nullptr;
  int (*asleep)() = nullptr;

  // false when the library does not export them all.
  bool load() {
    return find(&begin, "pagefast_region_begin") && find(&end, "pagefast_region_end") &&
           find(&current, "pagefast_region_current") && find(&sleep_tag, "pagefast_sleep_tag") &&
           find(&wake_tag, "pagefast_wake_tag") && find(&tag_asleep, "pagefast_tag_asleep") &&
           find(&asleep, "pagefast_asleep");
  }

 private:
  template <typename F>
  static bool find(F* fn, const char* name) {
    *fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
    return *fn != nullptr;
  }
};

// An allocation inside a region of `tag`: 0, or 1 after a FAIL line.
inline int alloc_in(RegionApi& api, const char* tag, unsigned flags, size_t bytes, CUdeviceptr* p) {
  if (api.begin(tag, flags) != 0) return fail("region begin");
  const CUresult r = cuMemAlloc_v2(p, bytes);
  api.end();
  if (r != CUDA_SUCCESS) return fail("allocation in a region");
  return 0;
}

inline int start() {
  CHECK_CU(cuInit(0));
  CUdevice device;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&g_context, device));
  CHECK_CU(cuCtxSetCurrent(g_context));
  return 0;
}

}  // namespace preload_program
