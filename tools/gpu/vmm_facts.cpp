// tools/gpu/vmm_facts.cpp: what the driver answers, and what it costs, for
// one virtual range backed by many physical allocations (docs/DRIVER-FACTS.md
// "One range, many allocations"). pagefast's stitches and any growth in
// whole small chunks depend on these answers:
//  1. cuMemSetAccess once over a range made of N separately created
//     2 MiB allocations mapped side by side;
//  2. cuMemUnmap once over such a range;
//  3. cuMemMap of a prefix of an allocation (offset 0, a smaller size);
//  4. cuMemMap at a non-zero offset (the H200 refused it: DRIVER-FACTS);
// and the time of creating, mapping and opening 256 MiB as 128 such
// allocations against one. Every answer is printed; contents are checked
// through cuMemsetD8/cuMemcpyDtoH over the whole range. No pagefast: run it
// plain. Exit 0 unless a call that must succeed failed.
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

const char* name_of(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define MUST(call)                                                                     \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                          \
      std::printf("error %s at %s:%d: %s\n", name_of(r_), __FILE__, __LINE__, #call); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CUmemAllocationProp prop_of(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

CUmemAccessDesc access_of(int device) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

// Writes a distinct byte per 2 MiB piece of [base, base + n * piece), reads
// all back; true when every byte is right.
bool contents_ok(CUdeviceptr base, size_t pieces, size_t piece) {
  for (size_t i = 0; i < pieces; ++i) MUST(cuMemsetD8(base + i * piece, (unsigned char)(i * 7 + 1), piece));
  std::vector<unsigned char> host(pieces * piece);
  MUST(cuMemcpyDtoH(host.data(), base, host.size()));
  for (size_t i = 0; i < pieces; ++i)
    for (size_t k = 0; k < piece; k += 4096)
      if (host[i * piece + k] != (unsigned char)(i * 7 + 1)) return false;
  return true;
}

}  // namespace

int main() {
  MUST(cuInit(0));
  CUdevice dev;
  MUST(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
  MUST(cuCtxSetCurrent(ctx));
  int driver = 0;
  MUST(cuDriverGetVersion(&driver));
  const CUmemAllocationProp prop = prop_of(0);
  const CUmemAccessDesc access = access_of(0);
  size_t gran = 0;
  MUST(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::printf("driver %d, granularity %zu\n", driver, gran);

  constexpr size_t kPieces = 128;
  const size_t piece = gran, total = kPieces * gran;
  CUdeviceptr va = 0;
  MUST(cuMemAddressReserve(&va, 4 * total, 0, 0, 0));

  // 1, 2: many allocations, one access call, one unmap call.
  std::vector<CUmemGenericAllocationHandle> handles(kPieces);
  double t0 = now_us();
  for (auto& h : handles) MUST(cuMemCreate(&h, piece, &prop, 0));
  double t1 = now_us();
  for (size_t i = 0; i < kPieces; ++i) MUST(cuMemMap(va + i * piece, piece, 0, handles[i], 0));
  double t2 = now_us();
  CUresult r = cuMemSetAccess(va, total, &access, 1);
  double t3 = now_us();
  std::printf("one cuMemSetAccess over %zu separate 2 MiB allocations: %s (%.0f us)\n", kPieces, name_of(r), t3 - t2);
  std::printf("  create %zu x 2 MiB: %.0f us; map %zu: %.0f us\n", kPieces, t1 - t0, kPieces, t2 - t1);
  const bool access_ok = r == CUDA_SUCCESS;
  if (!access_ok) {
    t2 = now_us();
    for (size_t i = 0; i < kPieces; ++i) MUST(cuMemSetAccess(va + i * piece, piece, &access, 1));
    t3 = now_us();
    std::printf("  %zu cuMemSetAccess calls instead: %.0f us\n", kPieces, t3 - t2);
  }
  std::printf("  contents through the whole range: %s\n", contents_ok(va, kPieces, piece) ? "ok" : "WRONG");
  t0 = now_us();
  r = cuMemUnmap(va, total);
  t1 = now_us();
  std::printf("one cuMemUnmap over %zu mappings: %s (%.0f us)\n", kPieces, name_of(r), t1 - t0);
  if (r != CUDA_SUCCESS) {
    t0 = now_us();
    for (size_t i = 0; i < kPieces; ++i) MUST(cuMemUnmap(va + i * piece, piece));
    t1 = now_us();
    std::printf("  %zu cuMemUnmap calls instead: %.0f us\n", kPieces, t1 - t0);
  }
  t0 = now_us();
  for (auto& h : handles) MUST(cuMemRelease(h));
  t1 = now_us();
  std::printf("release %zu x 2 MiB: %.0f us\n", kPieces, t1 - t0);

  // The same 256 MiB as one allocation, for comparison.
  CUmemGenericAllocationHandle big;
  t0 = now_us();
  MUST(cuMemCreate(&big, total, &prop, 0));
  MUST(cuMemMap(va, total, 0, big, 0));
  MUST(cuMemSetAccess(va, total, &access, 1));
  t1 = now_us();
  std::printf("one 256 MiB allocation: create + map + access %.0f us\n", t1 - t0);

  // 3: a prefix of an allocation; 4: at an offset.
  r = cuMemMap(va + total, 2 * piece, 0, big, 0);
  std::printf("cuMemMap of a 4 MiB prefix of a 256 MiB allocation: %s\n", name_of(r));
  if (r == CUDA_SUCCESS) MUST(cuMemUnmap(va + total, 2 * piece));
  r = cuMemMap(va + total, 2 * piece, 2 * piece, big, 0);
  std::printf("cuMemMap at a 4 MiB offset into it: %s\n", name_of(r));
  if (r == CUDA_SUCCESS) MUST(cuMemUnmap(va + total, 2 * piece));
  MUST(cuMemUnmap(va, total));
  MUST(cuMemRelease(big));
  MUST(cuMemAddressFree(va, 4 * total));
  std::printf("done\n");
  return 0;
}
