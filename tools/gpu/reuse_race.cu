// tools/gpu/reuse_race.cu: no reuse before completion. A long kernel on a
// non-blocking stream sums a buffer; the host frees the buffer at once and
// allocates the same size again, overwriting it from another stream. With
// cuMemFree's semantics the first kernel still sees the old contents: its
// sum must be right.
#include <cuda_runtime.h>

#include "check.cuh"

#include <cstdint>
#include <cstdio>

__global__ void slow_sum(const uint32_t* p, size_t words, int passes, unsigned long long* out) {
  unsigned long long acc = 0;
  for (int pass = 0; pass < passes; ++pass)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
      acc += p[i];
  atomicAdd(out, acc);
}

__global__ void overwrite(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    p[i] = 0xdeadbeefu;
}

__global__ void ones(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    p[i] = 1;
}

int main() {
  int failures = 0;
  const size_t sizes[] = {4096, 1 << 20, 4 << 20, 64 << 20};
  for (size_t bytes : sizes) {
    const size_t words = bytes / 4;
    const int passes = int((512ull << 20) / bytes) + 200;  // long enough to outlive the host's free
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    unsigned long long* out;
    CK(cudaMalloc(&out, sizeof *out));
    CK(cudaMemset(out, 0, sizeof *out));
    uint32_t* p;
    CK(cudaMalloc(&p, bytes));
    ones<<<128, 256, 0, a>>>(p, words);
    slow_sum<<<128, 256, 0, a>>>(p, words, passes, out);
    CK(cudaFree(p));  // while slow_sum still runs
    uint32_t* q;
    CK(cudaMalloc(&q, bytes));
    overwrite<<<128, 256, 0, b>>>(q, words);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    unsigned long long sum = 0;
    CK(cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost));
    const unsigned long long want = (unsigned long long)words * passes;
    const bool ok = sum == want;
    failures += !ok;
    std::printf("size %zu: %s (same address reused: %s)\n", bytes, ok ? "ok" : "WRONG SUM", p == q ? "yes" : "no");
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
  }
  std::printf("reuse_race %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
