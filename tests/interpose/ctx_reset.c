/* tests/interpose/ctx_reset.c: cudaDeviceReset in the middle of a program
 * (cuDevicePrimaryCtxReset). The driver frees the device's memory with the
 * context; pagefast must step aside for that device: later allocations
 * work and come from the driver, and nothing the retired pool held is
 * handed out again. Prints only what must be
 * identical with and without pagefast. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define POOL_BUFFER_IDS (0x5046ull << 48) /* pagefast's buffer ids start here */

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  printf("init %d\n", (int)cuInit(0));
  cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev);
  cuCtxSetCurrent(ctx);
  CUdeviceptr a = 0, small = 0, b = 0;
  printf("alloc a %d\n", (int)cuMemAlloc_v2(&a, 4u << 20));
  printf("alloc small %d\n", (int)cuMemAlloc_v2(&small, 100));
  printf("memset a %d\n", (int)cuMemsetD8_v2(a, 7, 4u << 20));
  printf("reset %d\n", (int)cuDevicePrimaryCtxReset_v2(dev));
  cuDevicePrimaryCtxRetain(&ctx, dev);
  printf("set current %d\n", (int)cuCtxSetCurrent(ctx));
  printf("alloc b %d\n", (int)cuMemAlloc_v2(&b, 4u << 20));
  unsigned char back[16];
  memset(back, 0, sizeof back);
  printf("memset b %d\n", (int)cuMemsetD8_v2(b, 9, 4u << 20));
  cuMemcpyDtoH_v2(back, b + 100, sizeof back);
  printf("b holds its data %d\n", back[0] == 9 && back[15] == 9);
  unsigned long long id = 0;
  cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
  printf("b is pool memory %d\n", id >= POOL_BUFFER_IDS);
  /* Pointers from before the reset are dead: freeing them is the program's
     bug, and their addresses may already be the driver's new blocks. */
  printf("free b %d\n", (int)cuMemFree_v2(b));
  for (int i = 0; i < 20; ++i) {
    CUdeviceptr c = 0;
    if (cuMemAlloc_v2(&c, 1u << 20) != CUDA_SUCCESS || cuMemFree_v2(c) != CUDA_SUCCESS) printf("churn %d failed\n", i);
  }
  printf("done\n");
  /* For tools/gpu-check: the program's own count of calls. */
  printf("made cuMemAlloc_v2=23 cuMemFree_v2=21\n");
  return 0;
}
