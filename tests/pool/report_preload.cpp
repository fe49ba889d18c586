// tests/pool/report_preload.cpp: a CUDA driver program for the memory
// report's integration cases (report_cases.py), linked with the fake
// libcuda.so.1 and run under LD_PRELOAD=libpagefast.so. It fills the pool
// with small and large blocks until CUDA_ERROR_OUT_OF_MEMORY (the limit
// comes from PAGEFAST_CONF), frees every other large block so free memory
// is scattered, and exits. With a path argument it also calls
// pagefast_report(path) and pagefast_report(NULL) mid-run, before exiting.
// Prints "ok report <bytes of the request that failed>" or "FAIL ...".
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <vector>

namespace {

// Not a multiple of the 2 MiB granule, so the report shows the request as
// made, not as rounded.
constexpr size_t kLargeBytes = 5u << 20;
constexpr size_t kSmallBytes = 1000;
constexpr int kSmallBlocks = 100;
constexpr int kMostLarge = 4096;  // far beyond any limit the cases set

int fail(const char* what) {
  std::printf("FAIL %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CUdevice device;
  CUcontext context;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS)
    return fail("no context");
  std::vector<CUdeviceptr> small(kSmallBlocks), large;
  for (CUdeviceptr& p : small)
    if (cuMemAlloc_v2(&p, kSmallBytes) != CUDA_SUCCESS) return fail("small allocation");
  CUresult last = CUDA_SUCCESS;
  while (int(large.size()) < kMostLarge) {
    CUdeviceptr p = 0;
    last = cuMemAlloc_v2(&p, kLargeBytes);
    if (last != CUDA_SUCCESS) break;
    large.push_back(p);
  }
  if (last != CUDA_ERROR_OUT_OF_MEMORY) return fail("never out of memory (is a limit set?)");
  for (size_t i = 0; i < large.size(); i += 2)
    if (cuMemFree_v2(large[i]) != CUDA_SUCCESS) return fail("free");
  for (int i = 0; i < kSmallBlocks; i += 3)
    if (cuMemFree_v2(small[i]) != CUDA_SUCCESS) return fail("small free");
  if (argc > 1) {
    using Report = int (*)(const char*);
    Report report = reinterpret_cast<Report>(dlsym(RTLD_DEFAULT, "pagefast_report"));
    if (!report) return fail("pagefast_report not exported");
    if (report(argv[1]) != 0) return fail("pagefast_report(path)");
    if (report(nullptr) != 0) return fail("pagefast_report(NULL)");
  }
  std::printf("ok report %zu\n", kLargeBytes);
  return 0;  // the rest is left allocated: the report at exit sees it
}
