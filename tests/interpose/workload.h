/* tests/interpose/workload.h: one sequence of driver calls, run by each
 * door program through a table of function pointers that the program
 * filled in its own way (linked symbols, dlsym, or the cuGetProcAddress
 * chain). It prints only what must be identical with and without
 * pagefast (result codes and relations, never raw addresses), then the
 * number of calls it made of each function, for the runner to compare with
 * pagefast's stats. */
#ifndef PAGEFAST_TESTS_WORKLOAD_H
#define PAGEFAST_TESTS_WORKLOAD_H

#include <cuda.h>
#include <cudaTypedefs.h>

typedef struct {
  PFN_cuInit_v2000 cuInit;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
  PFN_cuMemAlloc_v3020 cuMemAlloc_v2;
  PFN_cuMemFree_v3020 cuMemFree_v2;
  PFN_cuMemAllocPitch_v3020 cuMemAllocPitch_v2;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo_v2;
  PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange_v2;
  PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute;
  PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD_v2;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH_v2;
  PFN_cuMemsetD8_v3020 cuMemsetD8_v2;
} workload_api;

/* Runs the sequence; returns 0 when every call could be made. */
int run_workload(const workload_api* api);

#endif
