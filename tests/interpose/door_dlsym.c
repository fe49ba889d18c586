/* tests/interpose/door_dlsym.c: door 2, a program that dlopens
 * libcuda.so.1 and looks every function up by name with dlsym, as JAX and
 * CuPy do. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "workload.h"

int main(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  workload_api a;
#define LOOK(field, name) *(void**)&a.field = dlsym(h, name)
  LOOK(cuInit, "cuInit");
  LOOK(cuDeviceGet, "cuDeviceGet");
  LOOK(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOOK(cuCtxSetCurrent, "cuCtxSetCurrent");
  LOOK(cuCtxSynchronize, "cuCtxSynchronize");
  LOOK(cuMemAlloc_v2, "cuMemAlloc_v2");
  LOOK(cuMemFree_v2, "cuMemFree_v2");
  LOOK(cuMemAllocPitch_v2, "cuMemAllocPitch_v2");
  LOOK(cuMemGetInfo_v2, "cuMemGetInfo_v2");
  LOOK(cuMemGetAddressRange_v2, "cuMemGetAddressRange_v2");
  LOOK(cuPointerGetAttribute, "cuPointerGetAttribute");
  LOOK(cuPointerGetAttributes, "cuPointerGetAttributes");
  LOOK(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2");
  LOOK(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2");
  LOOK(cuMemsetD8_v2, "cuMemsetD8_v2");
  /* A name outside the table, and one nobody defines: the plain answers. */
  Dl_info info;
  void* init = dlsym(h, "cuInit");
  printf("cuInit from %s\n", init && dladdr(init, &info) && info.dli_fname ? "driver" : "nowhere");
  printf("missing name: %s\n", dlsym(h, "cuNoSuchFunction") ? "found" : "NULL");
  printf("dlerror set: %d\n", dlerror() != NULL);
  return run_workload(&a);
}
