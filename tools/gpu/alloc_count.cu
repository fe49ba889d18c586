// tools/gpu/alloc_count.cu: a plain CUDA program for the GPU check. It
// makes a known number of cudaMalloc/cudaFree calls over a spread of sizes,
// fills and checks every buffer on the device, and prints its own counts,
// which tools/gpu-check compares with pagefast's stats. Built twice: with
// nvcc's default static runtime and with -cudart shared.
#include <cuda_runtime.h>

#include "check.cuh"

#include <cstdint>
#include <cstdio>
#include <vector>

__global__ void fill(uint32_t* p, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    p[i] = seed ^ uint32_t(i * 2654435761u);
}

__global__ void check(const uint32_t* p, size_t words, uint32_t seed, unsigned long long* bad) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    if (p[i] != (seed ^ uint32_t(i * 2654435761u))) atomicAdd(bad, 1ull);
}

int main() {
  const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 20 << 20, 64 << 20, 100, 7 << 20, 256 << 20};
  unsigned long long allocations = 0, frees = 0, bad_total = 0;
  unsigned long long* bad;
  CK(cudaMalloc(&bad, sizeof *bad));
  allocations++;
  std::vector<void*> live;
  for (int round = 0; round < 20; ++round) {
    for (size_t bytes : sizes) {
      void* p = nullptr;
      CK(cudaMalloc(&p, bytes));
      allocations++;
      const size_t words = bytes / 4;
      const uint32_t seed = uint32_t(round * 7919 + bytes);
      CK(cudaMemset(bad, 0, sizeof *bad));
      fill<<<256, 256>>>(static_cast<uint32_t*>(p), words, seed);
      check<<<256, 256>>>(static_cast<uint32_t*>(p), words, seed, bad);
      CK(cudaGetLastError());
      unsigned long long host_bad = 0;
      CK(cudaMemcpy(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost));
      bad_total += host_bad;
      if (round % 2) {
        CK(cudaFree(p));
        frees++;
      } else {
        live.push_back(p);
      }
    }
  }
  for (void* p : live) {
    CK(cudaFree(p));
    frees++;
  }
  CK(cudaFree(bad));
  frees++;
  std::printf("allocations %llu frees %llu bad_words %llu\n", allocations, frees, bad_total);
  return bad_total ? 1 : 0;
}
