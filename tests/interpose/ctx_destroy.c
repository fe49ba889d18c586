/* tests/interpose/ctx_destroy.c: cuCtxDestroy of a context that still holds
 * cuMemAlloc blocks. The driver frees them with the context: a program that
 * creates a context, allocates and destroys it over and over never runs out
 * of memory, and a free of such a block afterwards is an error. Run on a
 * 1 GiB fake device, 50 rounds of 64 MiB; prints on stdout only what must be
 * identical with and without pagefast (stderr says whether a block was pool
 * memory). */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define POOL_BUFFER_IDS (0x5046ull << 48) /* pagefast's buffer ids start here */
#define ROUNDS 50
#define ROUND_BYTES (64u << 20)

static int pool_memory(CUdeviceptr p) {
  unsigned long long id = 0;
  return cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) == CUDA_SUCCESS && id >= POOL_BUFFER_IDS;
}

int main(void) {
  CUdevice dev;
  CUcontext ctx, primary;
  printf("init %d\n", (int)cuInit(0));
  cuDeviceGet(&dev, 0);
  int failed = -1, pooled = 0;
  for (int i = 0; i < ROUNDS; ++i) {
    CUdeviceptr p = 0;
    CUresult made = cuCtxCreate(&ctx, NULL, 0, dev);
    CUresult r = cuMemAlloc_v2(&p, ROUND_BYTES);
    if (r == CUDA_SUCCESS) {
      pooled += pool_memory(p);
      r = cuMemsetD8_v2(p, (unsigned char)i, ROUND_BYTES);
    }
    CUresult gone = cuCtxDestroy(ctx);
    if ((made != CUDA_SUCCESS || r != CUDA_SUCCESS || gone != CUDA_SUCCESS) && failed < 0) {
      failed = i;
      printf("round %d: create %d, alloc %d, destroy %d\n", i, (int)made, (int)r, (int)gone);
    }
  }
  printf("%d rounds, first failure %d\n", ROUNDS, failed);
  fprintf(stderr, "pool memory in %d rounds\n", pooled);

  /* Blocks of a destroyed context, freed afterwards: on a thread with no
     context, then with the primary context current. */
  CUdeviceptr big = 0, small = 0;
  cuCtxCreate(&ctx, NULL, 0, dev);
  printf("alloc big %d\n", (int)cuMemAlloc_v2(&big, 4u << 20));
  printf("alloc small %d\n", (int)cuMemAlloc_v2(&small, 100));
  printf("destroy %d\n", (int)cuCtxDestroy(ctx));
  printf("free big, no context %d\n", (int)cuMemFree_v2(big));
  printf("free small, no context %d\n", (int)cuMemFree_v2(small));
  cuDevicePrimaryCtxRetain(&primary, dev);
  cuCtxSetCurrent(primary);
  cuCtxCreate(&ctx, NULL, 0, dev); /* pushed over the primary context */
  printf("alloc big %d\n", (int)cuMemAlloc_v2(&big, 4u << 20));
  printf("alloc small %d\n", (int)cuMemAlloc_v2(&small, 100));
  printf("destroy %d\n", (int)cuCtxDestroy(ctx));
  printf("free big, primary current %d\n", (int)cuMemFree_v2(big));
  printf("free small, primary current %d\n", (int)cuMemFree_v2(small));

  /* Destroying one context leaves the blocks of another alone. */
  CUdeviceptr kept = 0, lost = 0;
  unsigned char back[16];
  printf("alloc kept %d\n", (int)cuMemAlloc_v2(&kept, 8u << 20));
  cuMemsetD8_v2(kept, 5, 8u << 20);
  cuCtxCreate(&ctx, NULL, 0, dev);
  printf("alloc lost %d\n", (int)cuMemAlloc_v2(&lost, 8u << 20));
  fprintf(stderr, "kept pool memory %d, lost pool memory %d\n", pool_memory(kept), pool_memory(lost));
  cuMemsetD8_v2(lost, 6, 8u << 20);
  printf("destroy %d\n", (int)cuCtxDestroy(ctx));
  for (int i = 0; i < 8; ++i) { /* the pool may hand the lost block out again */
    CUdeviceptr churn = 0;
    if (cuMemAlloc_v2(&churn, 8u << 20) != CUDA_SUCCESS) printf("churn %d failed\n", i);
    else cuMemsetD8_v2(churn, 7, 8u << 20);
  }
  memset(back, 0, sizeof back);
  cuMemcpyDtoH_v2(back, kept + 4096, sizeof back);
  printf("kept holds its data %d\n", back[0] == 5 && back[15] == 5);
  printf("free kept %d\n", (int)cuMemFree_v2(kept));
  printf("destroy the primary context %d\n", (int)cuCtxDestroy(primary));
  printf("done\n");
  return 0;
}
