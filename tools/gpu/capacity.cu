// tools/gpu/capacity.cu: how much a process can allocate. Fills the device
// with cudaMalloc requests of one size until out of memory, frees all, and
// fills again; prints both totals. Run with and without pagefast: the
// totals with it must be >= 99% of those without.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

static size_t fill(size_t request, std::vector<void*>& held) {
  size_t total = 0;
  for (;;) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, request);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, as a program that carries on would
      break;
    }
    if (e != cudaSuccess) {
      std::printf("error %s\n", cudaGetErrorName(e));
      std::exit(1);
    }
    held.push_back(p);
    total += request;
  }
  return total;
}

int main(int argc, char** argv) {
  const size_t request = (argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1024) << 20;  // MiB
  cudaFree(nullptr);
  std::vector<void*> held;
  const size_t first = fill(request, held);
  for (void* p : held) cudaFree(p);
  held.clear();
  const size_t second = fill(request, held);
  for (void* p : held) cudaFree(p);
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  std::printf("RESULT mode=capacity request_mib=%zu first_bytes=%zu second_bytes=%zu free_after=%zu total=%zu\n",
              request >> 20, first, second, free_bytes, total_bytes);
  return 0;
}
