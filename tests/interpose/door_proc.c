/* tests/interpose/door_proc.c: door 3, the chain the CUDA runtime walks.
 * dlsym gives only cuGetProcAddress_v2; it is asked for "cuGetProcAddress"
 * at the version given on the command line (11030: the v1 signature comes
 * back; 12000: v2), and that pointer resolves everything else. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "workload.h"

static int version;
static void* gpa;

static void* resolve(const char* name, int at_version) {
  void* fn = NULL;
  CUresult r;
  if (version < 12000) {
    r = ((PFN_cuGetProcAddress_v11030)gpa)(name, &fn, at_version, CU_GET_PROC_ADDRESS_DEFAULT);
  } else {
    CUdriverProcAddressQueryResult status;
    r = ((PFN_cuGetProcAddress_v12000)gpa)(name, &fn, at_version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  }
  return r == CUDA_SUCCESS ? fn : NULL;
}

int main(int argc, char** argv) {
  version = argc > 1 ? atoi(argv[1]) : 12000;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  PFN_cuGetProcAddress_v12000 first = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  CUdriverProcAddressQueryResult status;
  if (!first || first("cuGetProcAddress", &gpa, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
    printf("no cuGetProcAddress\n");
    return 1;
  }
  /* Asking the chain for itself again must give the same function. */
  printf("self-stable %d\n", resolve("cuGetProcAddress", version) == gpa);
  workload_api a;
#define LOOK(field, name) *(void**)&a.field = resolve(name, version)
  LOOK(cuInit, "cuInit");
  LOOK(cuDeviceGet, "cuDeviceGet");
  LOOK(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOOK(cuCtxSetCurrent, "cuCtxSetCurrent");
  LOOK(cuCtxSynchronize, "cuCtxSynchronize");
  LOOK(cuMemAlloc_v2, "cuMemAlloc");
  LOOK(cuMemFree_v2, "cuMemFree");
  LOOK(cuMemAllocPitch_v2, "cuMemAllocPitch");
  LOOK(cuMemGetInfo_v2, "cuMemGetInfo");
  LOOK(cuMemGetAddressRange_v2, "cuMemGetAddressRange");
  LOOK(cuPointerGetAttribute, "cuPointerGetAttribute");
  LOOK(cuPointerGetAttributes, "cuPointerGetAttributes");
  LOOK(cuMemcpyHtoD_v2, "cuMemcpyHtoD");
  LOOK(cuMemcpyDtoH_v2, "cuMemcpyDtoH");
  LOOK(cuMemsetD8_v2, "cuMemsetD8");
  printf("unknown name: %s\n", resolve("cuNoSuchFunction", version) ? "found" : "NULL");
  return run_workload(&a);
}
