// tools/gpu/gather_bench.cu: kernel speed over allocator memory. Random
// 4-byte gathers over a 32 GiB cudaMalloc buffer (served by pagefast when
// it is preloaded); prints the median rate of 10 timed launches in G loads/s.
#include <cuda_runtime.h>

#include "check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

__global__ void init(uint32_t* data, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    data[i] = uint32_t(i);
}

__global__ void gather(const uint32_t* data, size_t words, uint64_t seed, size_t loads_per_thread,
                       unsigned long long* sink) {
  uint64_t x = seed ^ (blockIdx.x * uint64_t(blockDim.x) + threadIdx.x) * 0x9E3779B97F4A7C15ull;
  uint32_t acc = 0;
  for (size_t k = 0; k < loads_per_thread; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    acc += data[x % words];
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);
}

int main() {
  const size_t bytes = 32ull << 30, words = bytes / 4;
  uint32_t* data;
  CK(cudaMalloc(&data, bytes));
  unsigned long long* sink;
  CK(cudaMalloc(&sink, sizeof *sink));
  init<<<4096, 256>>>(data, words);
  CK(cudaDeviceSynchronize());
  const int blocks = 132 * 16, threads = 256;
  const size_t per = 256;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  gather<<<blocks, threads>>>(data, words, 1, per, sink);  // warm
  std::vector<double> rates;
  for (int r = 0; r < 10; ++r) {
    CK(cudaEventRecord(a));
    gather<<<blocks, threads>>>(data, words, 100 + r, per, sink);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    rates.push_back(double(blocks) * threads * per / (ms * 1e-3) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("RESULT mode=gather bytes=%zu gloads_per_s=%.3f\n", bytes, rates[rates.size() / 2]);
  CK(cudaFree(data));
  CK(cudaFree(sink));
  return 0;
}
