/* tests/interpose/reserve_align.c: cuMemAddressReserve's answer to an
 * alignment that is not a power of two, when pagefast's own-VMM cache
 * holds a kept range of that size (docs/OWN-VMM.md "Kept ranges"): the
 * driver's CUDA_ERROR_INVALID_VALUE, never the kept range. The program
 * does what PyTorch's empty_cache does on an expandable segment (reserve,
 * grow page by page, shrink, free the range), then asks for a range of the
 * same size with an alignment that is not a power of two (one its kept
 * range meets), then 1 granule. cases.py
 * (reserve_alignment) compares its output with and without pagefast. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define PAGE ((size_t)2 << 20)
#define PAGES 12

static const char* name(CUresult rc) {
  const char* text = NULL;
  if (cuGetErrorName(rc, &text) != CUDA_SUCCESS || !text) return "unknown";
  return text;
}

int main(void) {
  CUcontext ctx = NULL;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "reserve_align: no CUDA context\n");
    return 1;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const size_t range = 2 * PAGES * PAGE;
  CUdeviceptr base = 0;
  printf("reserve=%s\n", name(cuMemAddressReserve(&base, range, 0, 0, 0)));
  CUmemGenericAllocationHandle handles[PAGES];
  int grown = 0;
  for (; grown < PAGES; ++grown) {
    const CUdeviceptr at = base + (size_t)grown * PAGE;
    if (cuMemCreate(&handles[grown], PAGE, &prop, 0) != CUDA_SUCCESS) break;
    if (cuMemMap(at, PAGE, 0, handles[grown], 0) != CUDA_SUCCESS ||
        cuMemSetAccess(at, PAGE, &access, 1) != CUDA_SUCCESS) {
      cuMemRelease(handles[grown]);
      break;
    }
  }
  printf("grown=%d\n", grown);
  for (int i = 0; i < grown; ++i) {
    cuMemUnmap(base + (size_t)i * PAGE, PAGE);
    cuMemRelease(handles[i]);
  }
  printf("address free=%s\n", name(cuMemAddressFree(base, range)));
  /* An alignment the kept range meets (its own address divides by it) but
   * that is not a power of two. */
  const size_t odd_alignment = (base & (base - 1)) ? (size_t)base : 3 * PAGE;
  CUdeviceptr again = 0;
  const CUresult odd = cuMemAddressReserve(&again, range, odd_alignment, 0, 0);
  printf("reserve alignment not a power of two=%s\n", name(odd));
  if (odd == CUDA_SUCCESS) cuMemAddressFree(again, range);
  again = 0;
  const CUresult even = cuMemAddressReserve(&again, range, PAGE, 0, 0);
  printf("reserve alignment 1 granule=%s aligned=%d\n", name(even), even == CUDA_SUCCESS && again % PAGE == 0);
  if (even == CUDA_SUCCESS) cuMemAddressFree(again, range);
  return 0;
}
