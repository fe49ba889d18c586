// tools/gpu/reliability.cpp: driver-API cases whose output must be the same
// with and without pagefast (tools/gpu/reliability-check runs each both
// ways and compares). Built against the real driver for the GPU machine and
// against the fake driver for the CPU test that keeps it working
// (tests/interpose/reliability_cases.py). Each subcommand prints only
// answers that do not depend on addresses or timing:
//   ctx_destroy ROUNDS PERCENT  a created context allocates PERCENT of the
//                               device, writes it and is destroyed, ROUNDS
//                               times; then a free of a pointer whose
//                               context is gone
//   handles                     what the VMM queries answer for memory that
//                               cuMemAlloc made
//   alloc                       blocks of three sizes written, read back and
//                               freed (the workload of the settings' cases)
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int fail(const char* what, CUresult result) {
  std::printf("FAIL %s -> %d\n", what, int(result));
  return 1;
}

CUresult make_current_primary(CUdevice device) {
  CUcontext primary = nullptr;
  CUresult result = cuDevicePrimaryCtxRetain(&primary, device);
  return result != CUDA_SUCCESS ? result : cuCtxSetCurrent(primary);
}

// Device 0's primary context, current on this thread.
CUresult primary_of_device0(CUdevice* device) {
  const CUresult result = cuDeviceGet(device, 0);
  return result != CUDA_SUCCESS ? result : make_current_primary(*device);
}

// A small block, one granule, and a block larger than a slab.
constexpr size_t kBlockBytes[] = {512, size_t(2) << 20, size_t(64) << 20};

// Each round's block must hold what was written to it, and every round must
// find the memory that the previous contexts took with them given back.
int ctx_destroy(int rounds, int percent) {
  CUdevice device = 0;
  CUresult result = cuDeviceGet(&device, 0);
  if (result != CUDA_SUCCESS) return fail("cuDeviceGet", result);
  size_t total_bytes = 0;
  if ((result = cuDeviceTotalMem(&total_bytes, device)) != CUDA_SUCCESS) return fail("cuDeviceTotalMem", result);
  const size_t bytes = total_bytes / 100 * size_t(percent);
  int served = 0;
  for (int round = 0; round < rounds; ++round) {
    CUcontext context = nullptr;
    if ((result = cuCtxCreate(&context, nullptr, 0, device)) != CUDA_SUCCESS) return fail("cuCtxCreate", result);
    CUdeviceptr block = 0;
    result = cuMemAlloc(&block, bytes);
    if (result == CUDA_SUCCESS) {
      const unsigned char pattern = static_cast<unsigned char>(round + 1);
      unsigned char back[4] = {};
      cuMemsetD8(block, pattern, bytes);
      cuMemcpyDtoH(back, block + bytes - sizeof back, sizeof back);
      if (back[0] != pattern || back[3] != pattern) std::printf("round %d: wrong contents\n", round);
      ++served;
    } else {
      std::printf("round %d: cuMemAlloc -> %d\n", round, int(result));
    }
    if ((result = cuCtxDestroy(context)) != CUDA_SUCCESS) return fail("cuCtxDestroy", result);
  }
  std::printf("ctx_destroy: %d of %d rounds served %d%% of the device\n", served, rounds, percent);

  // A pointer whose context was destroyed, freed from another context.
  CUcontext context = nullptr;
  if ((result = cuCtxCreate(&context, nullptr, 0, device)) != CUDA_SUCCESS) return fail("cuCtxCreate", result);
  CUdeviceptr gone = 0;
  if ((result = cuMemAlloc(&gone, 1 << 20)) != CUDA_SUCCESS) return fail("cuMemAlloc", result);
  cuCtxDestroy(context);
  if ((result = make_current_primary(device)) != CUDA_SUCCESS) return fail("primary context", result);
  std::printf("free after its context was destroyed: %d\n", int(cuMemFree(gone)));
  CUdeviceptr fresh = 0;
  std::printf("a new block in the primary context: %d\n", int(cuMemAlloc(&fresh, 1 << 20)));
  std::printf("its free: %d\n", int(cuMemFree(fresh)));
  return 0;
}

int handles() {
  CUdevice device = 0;
  CUresult result = primary_of_device0(&device);
  if (result != CUDA_SUCCESS) return fail("primary context", result);
  for (size_t bytes : kBlockBytes) {
    CUdeviceptr block = 0;
    if ((result = cuMemAlloc(&block, bytes)) != CUDA_SUCCESS) return fail("cuMemAlloc", result);
    CUmemGenericAllocationHandle handle = 0;
    result = cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(block));
    std::printf("%zu bytes: cuMemRetainAllocationHandle %d\n", bytes, int(result));
    if (result == CUDA_SUCCESS) {
      CUmemAllocationProp prop;
      std::memset(&prop, 0, sizeof prop);
      std::printf("%zu bytes: properties of that handle %d\n", bytes,
                  int(cuMemGetAllocationPropertiesFromHandle(&prop, handle)));
      cuMemRelease(handle);
    }
    CUmemLocation location;
    location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    location.id = int(device);
    unsigned long long flags = 0;
    result = cuMemGetAccess(&flags, &location, block);
    std::printf("%zu bytes: cuMemGetAccess %d flags %llu\n", bytes, int(result), result == CUDA_SUCCESS ? flags : 0);
    if ((result = cuMemFree(block)) != CUDA_SUCCESS) return fail("cuMemFree", result);
  }
  return 0;
}

int alloc() {
  CUdevice device = 0;
  CUresult result = primary_of_device0(&device);
  if (result != CUDA_SUCCESS) return fail("primary context", result);
  for (size_t bytes : kBlockBytes) {
    CUdeviceptr block = 0;
    if ((result = cuMemAlloc(&block, bytes)) != CUDA_SUCCESS) return fail("cuMemAlloc", result);
    unsigned char back[4] = {};
    cuMemsetD8(block, 0x5a, bytes);
    cuMemcpyDtoH(back, block + bytes - sizeof back, sizeof back);
    std::printf("%zu bytes: %s\n", bytes,
                back[0] == 0x5a && back[3] == 0x5a ? "written and read back" : "wrong contents");
    if ((result = cuMemFree(block)) != CUDA_SUCCESS) return fail("cuMemFree", result);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  CUresult result = cuInit(0);
  if (result != CUDA_SUCCESS) return fail("cuInit", result);
  int rc = 2;
  if (std::strcmp(mode, "ctx_destroy") == 0 && argc == 4) {
    rc = ctx_destroy(std::atoi(argv[2]), std::atoi(argv[3]));
  } else if (std::strcmp(mode, "handles") == 0) {
    rc = handles();
  } else if (std::strcmp(mode, "alloc") == 0) {
    rc = alloc();
  } else {
    std::fprintf(stderr, "usage: reliability ctx_destroy ROUNDS PERCENT | handles | alloc\n");
    return 2;
  }
  if (rc == 0) std::printf("ok %s\n", mode);
  return rc;
}
