/* tests/interpose/door_linked.c: door 1, a program linked against
 * libcuda.so.1 (here the fake driver), calling the driver by symbol. */
#include "workload.h"

int main(void) {
  workload_api a = {cuInit,
                    cuDeviceGet,
                    cuDevicePrimaryCtxRetain,
                    cuCtxSetCurrent,
                    cuCtxSynchronize,
                    cuMemAlloc_v2,
                    cuMemFree_v2,
                    cuMemAllocPitch_v2,
                    cuMemGetInfo_v2,
                    cuMemGetAddressRange_v2,
                    cuPointerGetAttribute,
                    cuPointerGetAttributes,
                    cuMemcpyHtoD_v2,
                    cuMemcpyDtoH_v2,
                    cuMemsetD8_v2};
  return run_workload(&a);
}
