// tools/gpu/stress.cu: the allocator under load on the GPU, checked on the
// device. T threads make random allocations (1 B .. 256 MiB, log-uniform),
// fill each block with a pattern by a kernel on their own non-blocking
// stream, hand some blocks to other threads, and free each block right
// after enqueueing a kernel that checks the pattern. The host never waits
// before cudaFree, so an allocator that reused memory while the check (or
// the fill) was still queued would be caught: the next fill overwrites it
// and the check counts bad words. Deterministic per thread (fixed seeds).
//   stress [operations] [threads]
#include <cuda_runtime.h>

#include "check.cuh"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

__device__ __forceinline__ unsigned char pattern(uint64_t seed, size_t i) {
  return (unsigned char)((seed * 0x9E3779B97F4A7C15ull + i * 0x632BE59BD9B4E019ull) >> 56);
}

__global__ void fill(unsigned char* p, size_t bytes, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < bytes; i += size_t(gridDim.x) * blockDim.x)
    p[i] = pattern(seed, i);
}

__global__ void check(const unsigned char* p, size_t bytes, uint64_t seed, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < bytes; i += size_t(gridDim.x) * blockDim.x)
    local += p[i] != pattern(seed, i);
  if (local) atomicAdd(bad, local);
}

struct Block {
  unsigned char* ptr;
  size_t bytes;
  uint64_t seed;
  cudaEvent_t filled;
};

static std::mutex g_mutex;
static std::deque<Block> g_handoff;

static unsigned blocks_for(size_t bytes) { return unsigned(std::min<size_t>(1024, (bytes + 65535) / 65536)); }

int main(int argc, char** argv) {
  const long operations = argc > 1 ? std::atol(argv[1]) : 200000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 8;
  CK(cudaFree(nullptr));
  std::atomic<unsigned long long> allocations{0}, handed{0};
  unsigned long long* bad;
  CK(cudaMallocManaged(&bad, sizeof *bad * threads));  // a few bytes, read at the end
  for (int t = 0; t < threads; ++t) bad[t] = 0;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      CK(cudaSetDevice(0));
      cudaStream_t stream;
      CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      std::mt19937_64 rng(1000 + t);
      std::vector<Block> live;
      auto release = [&](Block b) {
        CK(cudaStreamWaitEvent(stream, b.filled, 0));
        check<<<blocks_for(b.bytes), 256, 0, stream>>>(b.ptr, b.bytes, b.seed, &bad[t]);
        CK(cudaGetLastError());
        CK(cudaFree(b.ptr));  // at once: the check may still be queued
        CK(cudaEventDestroy(b.filled));
      };
      for (long op = 0; op < operations / threads; ++op) {
        const unsigned choice = unsigned(rng() % 8);
        if (live.size() < 16 && choice < 5) {
          const double lg = std::ldexp(1.0, 0) * double(rng() % 2801) / 100.0;  // 0 .. 28
          const size_t bytes = std::max<size_t>(1, size_t(std::exp2(lg)));
          Block b{nullptr, bytes, rng(), nullptr};
          CK(cudaMalloc(&b.ptr, bytes));
          allocations++;
          fill<<<blocks_for(bytes), 256, 0, stream>>>(b.ptr, bytes, b.seed);
          CK(cudaGetLastError());
          CK(cudaEventCreateWithFlags(&b.filled, cudaEventDisableTiming));
          CK(cudaEventRecord(b.filled, stream));
          live.push_back(b);
        } else if (!live.empty() && choice == 5) {
          std::lock_guard<std::mutex> lock(g_mutex);  // hand one to another thread
          g_handoff.push_back(live.back());
          live.pop_back();
          handed++;
        } else if (choice == 6) {
          Block b{};
          {
            std::lock_guard<std::mutex> lock(g_mutex);
            if (g_handoff.empty()) continue;
            b = g_handoff.front();
            g_handoff.pop_front();
          }
          release(b);
        } else if (!live.empty()) {
          const size_t i = rng() % live.size();
          Block b = live[i];
          live[i] = live.back();
          live.pop_back();
          release(b);
        }
      }
      for (Block& b : live) release(b);
      CK(cudaStreamSynchronize(stream));
      CK(cudaStreamDestroy(stream));
    });
  for (auto& th : pool) th.join();
  for (Block& b : g_handoff) {
    check<<<blocks_for(b.bytes), 256>>>(b.ptr, b.bytes, b.seed, &bad[0]);
    CK(cudaFree(b.ptr));
  }
  CK(cudaDeviceSynchronize());
  unsigned long long total_bad = 0;
  for (int t = 0; t < threads; ++t) total_bad += bad[t];
  std::printf("RESULT mode=stress operations=%ld threads=%d allocations=%llu handed=%llu bad_bytes=%llu\n", operations,
              threads, allocations.load(), handed.load(), total_bad);
  return total_bad ? 1 : 0;
}
