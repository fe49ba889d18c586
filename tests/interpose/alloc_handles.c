/* tests/interpose/alloc_handles.c: the VMM handle queries on memory that
 * cuMemAlloc made. The driver hands out no allocation handle for it
 * (cuMemRetainAllocationHandle answers CUDA_ERROR_INVALID_VALUE and leaves
 * the handle alone), and the handles it made for itself are none of the
 * program's (cuMemGetAllocationPropertiesFromHandle of any handle value the
 * program was not given answers CUDA_ERROR_INVALID_VALUE). The fake driver
 * numbers handles from 0x1000, so a scan of that range finds any handle a
 * call hands out by mistake. cuMemGetAccess answers success with no flags
 * (docs/DRIVER-FACTS.md). Prints only what must be identical with and
 * without pagefast. */
#include <cuda.h>
#include <stdio.h>

#define UNTOUCHED 0x77ull

static void retain(const char* what, CUdeviceptr p) {
  CUmemGenericAllocationHandle handle = UNTOUCHED;
  const CUresult r = cuMemRetainAllocationHandle(&handle, (void*)p);
  printf("retain %s %d, handle %s\n", what, (int)r, handle == UNTOUCHED ? "untouched" : "written");
  CUmemAllocationProp prop;
  printf("properties of what retain left %d\n", (int)cuMemGetAllocationPropertiesFromHandle(&prop, handle));
  if (r == CUDA_SUCCESS) cuMemRelease(handle);
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  printf("init %d\n", (int)cuInit(0));
  cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev);
  cuCtxSetCurrent(ctx);
  CUdeviceptr big = 0, small = 0, freed = 0;
  printf("alloc big %d\n", (int)cuMemAlloc_v2(&big, 4u << 20));
  printf("alloc small %d\n", (int)cuMemAlloc_v2(&small, 100));
  printf("alloc freed %d\n", (int)cuMemAlloc_v2(&freed, 8u << 20));
  printf("free %d\n", (int)cuMemFree_v2(freed));
  retain("big", big);
  retain("inside big", big + 4096);
  retain("small", small);
  retain("freed", freed);
  int named = 0;
  for (CUmemGenericAllocationHandle h = 0x1000; h < 0x1100; ++h) {
    CUmemAllocationProp prop;
    if (cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS) ++named;
  }
  printf("handle values with properties %d\n", named);
  CUmemLocation where = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  unsigned long long flags = UNTOUCHED;
  const CUresult access = cuMemGetAccess(&flags, &where, big);
  printf("access of big %d, flags %llu\n", (int)access, flags);
  printf("free big %d\n", (int)cuMemFree_v2(big));
  printf("free small %d\n", (int)cuMemFree_v2(small));
  printf("done\n");
  return 0;
}
