// tools/gpu/peer_bench.cu: peer access over allocator memory.
// Needs two GPUs with peer access between them; with fewer it says so and
// exits 0 without a RESULT line. On devices 0 and 1: enables peer access
// both ways (cudaDeviceEnablePeerAccess, which pagefast turns into
// cuMemSetAccess grants on the pool's mappings), allocates 1 GiB on each
// with cudaMalloc (pagefast's pool when preloaded), then measures
//   copy   cudaMemcpyPeerAsync 0 -> 1, GB/s, median of 10
//   read   a kernel on device 1 summing device 0's buffer, GB/s, median of 10
// and checks both results (the copy's bytes and the kernel's sum).
#include <cuda_runtime.h>

#include "check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

__global__ void fill(uint32_t* data, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    data[i] = uint32_t(i * 2654435761u);
}

__global__ void sum(const uint32_t* data, size_t words, unsigned long long* out) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    acc += data[i];
  atomicAdd(out, acc);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int devices = 0;
  CK(cudaGetDeviceCount(&devices));
  int can01 = 0, can10 = 0;
  if (devices >= 2) {
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  }
  if (devices < 2 || !can01 || !can10) {
    std::printf("SKIP peer_bench: %d device(s), peer access 0->1 %d, 1->0 %d\n", devices, can01, can10);
    return 0;
  }
  const size_t bytes = 1ull << 30, words = bytes / 4;
  uint32_t *a, *b;
  unsigned long long* out;
  CK(cudaSetDevice(0));
  CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&a, bytes));
  fill<<<1024, 256>>>(a, words);
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(1));
  CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&out, sizeof *out));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Expected sum, computed on device 0 over its own memory.
  unsigned long long expected = 0;
  {
    CK(cudaSetDevice(0));
    unsigned long long* out0;
    CK(cudaMalloc(&out0, sizeof *out0));
    CK(cudaMemset(out0, 0, sizeof *out0));
    sum<<<1024, 256>>>(a, words, out0);
    CK(cudaMemcpy(&expected, out0, sizeof expected, cudaMemcpyDeviceToHost));
    CK(cudaFree(out0));
    CK(cudaSetDevice(1));
  }

  std::vector<double> copy_gbs, read_gbs;
  int bad = 0;
  for (int rep = 0; rep < 11; ++rep) {
    CK(cudaMemsetAsync(b, 0, bytes, s));
    CK(cudaEventRecord(e0, s));
    CK(cudaMemcpyPeerAsync(b, 1, a, 0, bytes, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep) copy_gbs.push_back(double(bytes) / (ms * 1e6));

    CK(cudaMemsetAsync(out, 0, sizeof *out, s));
    CK(cudaEventRecord(e0, s));
    sum<<<132 * 8, 256, 0, s>>>(a, words, out);  // device 1 reads device 0's memory
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    unsigned long long got = 0;
    CK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    if (got != expected) ++bad;
    if (rep) read_gbs.push_back(double(bytes) / (ms * 1e6));
  }
  // The copy's bytes: sum them on device 1 from its own buffer.
  CK(cudaMemset(out, 0, sizeof *out));
  sum<<<1024, 256>>>(b, words, out);
  unsigned long long copied = 0;
  CK(cudaMemcpy(&copied, out, sizeof copied, cudaMemcpyDeviceToHost));
  if (copied != expected) ++bad;
  std::printf("RESULT mode=peer bytes=%zu copy_gbs=%.2f read_gbs=%.2f bad=%d\n", bytes, median(copy_gbs),
              median(read_gbs), bad);
  return bad ? 1 : 0;
}
