/* tests/interpose/workload.c: the call sequence shared by the door tests. */
#include "workload.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long made_alloc, made_free, made_pitch, made_info, made_range, made_attr, made_attrs;

#define KEEP 24

int run_workload(const workload_api* a) {
  if (!a->cuInit || !a->cuMemAlloc_v2 || !a->cuMemFree_v2) {
    printf("missing entry points\n");
    return 1;
  }
  printf("cuInit %d\n", (int)a->cuInit(0));
  CUdevice dev;
  printf("cuDeviceGet %d\n", (int)a->cuDeviceGet(&dev, 0));

  /* No current context yet: the driver's answer, whoever answers. */
  CUdeviceptr d = 1;
  made_alloc++;
  printf("alloc without context: %d\n", (int)a->cuMemAlloc_v2(&d, 4096));

  CUcontext ctx;
  printf("retain %d\n", (int)a->cuDevicePrimaryCtxRetain(&ctx, dev));
  printf("set current %d\n", (int)a->cuCtxSetCurrent(ctx));

  /* Edge cases of cuMemAlloc/cuMemFree, as docs/DRIVER-FACTS.md lists them. */
  d = 12345;
  made_alloc++;
  CUresult r = a->cuMemAlloc_v2(&d, 0);
  printf("alloc 0: %d d=%llu\n", (int)r, (unsigned long long)d);
  made_alloc++;
  printf("alloc NULL: %d\n", (int)a->cuMemAlloc_v2(NULL, 64));
  made_free++;
  printf("free 0: %d\n", (int)a->cuMemFree_v2(0));
  made_alloc++;
  d = 0;
  printf("alloc huge: %d\n", (int)a->cuMemAlloc_v2(&d, (size_t)1 << 50));

  /* A spread of sizes, kept live together, written and read back. */
  static const size_t sizes[KEEP] = {
      1, 100,  100,     512,     513,      4096, 65536, 1 << 20, (1 << 20) + 1, 2 << 20, 3 << 20, 20 << 20,
      7, 4000, 1 << 16, 5 << 20, 64 << 20, 33,   255,   1024,    2047,          8 << 20, 96,      12 << 20};
  CUdeviceptr p[KEEP];
  unsigned long long ids[KEEP];
  int aligned = 1, ranges = 1, copies = 1;
  for (int i = 0; i < KEEP; ++i) {
    made_alloc++;
    r = a->cuMemAlloc_v2(&p[i], sizes[i]);
    if (r != CUDA_SUCCESS) {
      printf("alloc %zu failed: %d\n", sizes[i], (int)r);
      return 1;
    }
    /* The driver's promise is 512 bytes (docs/DRIVER-FACTS.md); the H200's driver did not
       align every allocation of 1 MiB or more to 2 MiB, so neither is asked. */
    if (p[i] % 512) aligned = 0;
    CUdeviceptr base = 0;
    size_t bytes = 0;
    made_range++;
    r = a->cuMemGetAddressRange_v2(&base, &bytes, p[i] + sizes[i] / 2);
    if (r != CUDA_SUCCESS || base != p[i] || bytes < sizes[i]) ranges = 0;
    made_attr++;
    if (a->cuPointerGetAttribute(&ids[i], CU_POINTER_ATTRIBUTE_BUFFER_ID, p[i]) != CUDA_SUCCESS) ranges = 0;
    unsigned char pattern[64], back[64];
    size_t n = sizes[i] < sizeof pattern ? sizes[i] : sizeof pattern;
    for (size_t k = 0; k < n; ++k) pattern[k] = (unsigned char)(i * 31 + k);
    if (a->cuMemcpyHtoD_v2(p[i] + sizes[i] - n, pattern, n) != CUDA_SUCCESS ||
        a->cuMemcpyDtoH_v2(back, p[i] + sizes[i] - n, n) != CUDA_SUCCESS || memcmp(pattern, back, n) != 0)
      copies = 0;
  }
  int distinct = 1;
  for (int i = 0; i < KEEP; ++i)
    for (int j = i + 1; j < KEEP; ++j)
      if (ids[i] == ids[j] || p[i] == p[j]) distinct = 0;
  printf("aligned %d ranges %d copies %d distinct %d\n", aligned, ranges, copies, distinct);

  /* The sizes themselves, as the driver states them: the differential test
     of RANGE_SIZE and cuMemGetAddressRange (requested or rounded). */
  printf("range sizes:");
  for (int i = 0; i < KEEP; ++i) {
    CUdeviceptr base = 0;
    size_t bytes = 0, attr_bytes = 0;
    made_range++;
    a->cuMemGetAddressRange_v2(&base, &bytes, p[i]);
    made_attr++;
    a->cuPointerGetAttribute(&attr_bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p[i]);
    printf(" %zu", bytes);
    if (attr_bytes != bytes) printf("(attribute %zu)", attr_bytes);
  }
  printf("\n");

  /* Several attributes at once, on one block. */
  CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  unsigned memtype = 0;
  CUdeviceptr start = 0;
  size_t range_bytes = 0;
  void* data[3] = {&memtype, &start, &range_bytes};
  made_attrs++;
  r = a->cuPointerGetAttributes(3, which, data, p[7] + 10);
  printf("attributes %d type %u start ok %d size ok %d\n", (int)r, memtype, start == p[7], range_bytes >= sizes[7]);

  size_t free_bytes = 0, total_bytes = 0;
  made_info += 3;
  printf("meminfo %d %d %d\n", (int)a->cuMemGetInfo_v2(&free_bytes, &total_bytes),
         (int)a->cuMemGetInfo_v2(NULL, &total_bytes), (int)a->cuMemGetInfo_v2(&free_bytes, NULL));
  printf("meminfo sane %d\n", free_bytes <= total_bytes && total_bytes > 0);

  /* Frees that the driver refuses. */
  made_free += 3;
  printf("free interior: %d\n", (int)a->cuMemFree_v2(p[9] + 512));
  int host_word = 0;
  printf("free host: %d\n", (int)a->cuMemFree_v2((CUdeviceptr)(uintptr_t)&host_word));
  printf("free random: %d\n", (int)a->cuMemFree_v2((CUdeviceptr)0x10));

  for (int i = 0; i < KEEP; ++i) {
    made_free++;
    r = a->cuMemFree_v2(p[i]);
    if (r != CUDA_SUCCESS) printf("free %d: %d\n", i, (int)r);
  }
  made_free++;
  printf("double free: %d\n", (int)a->cuMemFree_v2(p[3]));

  /* Buffer ids are never handed out again: the same sizes once more. */
  int ids_reused = 0;
  for (int i = 0; i < KEEP; ++i) {
    CUdeviceptr q = 0;
    unsigned long long id = 0;
    made_alloc++;
    if (a->cuMemAlloc_v2(&q, sizes[i]) != CUDA_SUCCESS) {
      printf("realloc %zu failed\n", sizes[i]);
      return 1;
    }
    made_attr++;
    a->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, q);
    for (int j = 0; j < KEEP; ++j)
      if (id == ids[j]) ids_reused = 1;
    made_free++;
    a->cuMemFree_v2(q);
  }
  printf("buffer ids reused %d\n", ids_reused);

  /* A free, an address query and an allocation on a thread with no current
     context: whatever the driver answers. */
  {
    CUdeviceptr q = 0, r2 = 0;
    made_alloc++;
    a->cuMemAlloc_v2(&q, 1u << 20);
    CUcontext saved = ctx;
    a->cuCtxSetCurrent(NULL);
    CUdeviceptr base = 0;
    size_t bytes = 0;
    made_range++;
    r = a->cuMemGetAddressRange_v2(&base, &bytes, q);
    printf("no context: range %d size ok %d", (int)r, r == CUDA_SUCCESS ? bytes == (1u << 20) : -1);
    made_alloc++;
    printf(" alloc %d", (int)a->cuMemAlloc_v2(&r2, 4096));
    made_free++;
    r = a->cuMemFree_v2(q);
    printf(" free %d\n", (int)r);
    a->cuCtxSetCurrent(saved);
    if (r != CUDA_SUCCESS) {
      made_free++;
      printf("free again with the context %d\n", (int)a->cuMemFree_v2(q));
    }
  }

  /* Reuse: the same sizes again, then a churn of pairs. */
  for (int round = 0; round < 50; ++round) {
    CUdeviceptr q;
    made_alloc++;
    if (a->cuMemAlloc_v2(&q, 4u << 20) != CUDA_SUCCESS) {
      printf("churn alloc failed\n");
      return 1;
    }
    a->cuMemsetD8_v2(q, (unsigned char)round, 4u << 20);
    unsigned char last = 0;
    a->cuMemcpyDtoH_v2(&last, q + (4u << 20) - 1, 1);
    if (last != (unsigned char)round) printf("churn data wrong at %d\n", round);
    made_free++;
    a->cuMemFree_v2(q);
  }

  /* Pitch allocations are the driver's own. */
  CUdeviceptr pitched;
  size_t pitch = 0;
  made_pitch++;
  r = a->cuMemAllocPitch_v2(&pitched, &pitch, 1000, 16, 4);
  printf("pitch %d pitch>=width %d\n", (int)r, pitch >= 1000);
  if (r == CUDA_SUCCESS) {
    made_free++;
    a->cuMemFree_v2(pitched);
  }
  printf("synchronize %d\n", (int)a->cuCtxSynchronize());
  /* The runner compares these with pagefast's stats. */
  printf(
      "made cuMemAlloc_v2=%llu cuMemFree_v2=%llu cuMemAllocPitch_v2=%llu cuMemGetInfo_v2=%llu "
      "cuMemGetAddressRange_v2=%llu cuPointerGetAttribute=%llu cuPointerGetAttributes=%llu\n",
      made_alloc, made_free, made_pitch, made_info, made_range, made_attr, made_attrs);
  return 0;
}
