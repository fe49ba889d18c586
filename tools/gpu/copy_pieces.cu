// tools/gpu/copy_pieces.cu: host-link copy rate by piece size and thread
// count, each way, between page-locked host memory and device memory: the
// shape that sleep's and wake's copy threads use (interpose/pool/
// host_copy.cpp: a thread per stream, one piece in flight per thread).
//
// usage: copy_pieces [GIB]       (default 8)
//        copy_pieces pin [GIB]   page-locking rate by thread count
// Prints one line per (direction, threads, piece MiB): GiB/s, the median
// of 3 rounds, and the one-stream 1 GiB cudaMemcpy of the same buffers.
// With `pin`: fresh anonymous memory (huge pages advised, populated for
// write, as interpose/pool/host_memory.cpp does) page-locked with
// cudaHostRegister in 32 MiB pieces by 1, 2, 4 and 8 threads, each round
// on memory never touched before: GiB/s, the median of 3 rounds.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CHECK(x)                                                    \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double run(char* host, char* dev, size_t bytes, bool to_host, int threads, size_t piece) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    bool inflight = false;
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i * piece >= bytes) break;
      const size_t n = std::min(piece, bytes - i * piece);
      if (inflight) CHECK(cudaStreamSynchronize(s));
      if (to_host) CHECK(cudaMemcpyAsync(host + i * piece, dev + i * piece, n, cudaMemcpyDeviceToHost, s));
      else CHECK(cudaMemcpyAsync(dev + i * piece, host + i * piece, n, cudaMemcpyHostToDevice, s));
      inflight = true;
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
  };
  const double t0 = now_s();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return double(bytes) / double(1ull << 30) / (now_s() - t0);
}

// Page-locks `bytes` of fresh memory in 32 MiB pieces on `threads`
// threads; returns GiB/s (the unregister and unmap are not timed).
static double pin_rate(size_t bytes, int threads) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(1);
  char* base = static_cast<char*>(p);
  madvise(base, bytes, MADV_HUGEPAGE);
  const size_t piece = 32ull << 20;
  std::atomic<size_t> next{0};
  auto work = [&] {
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i * piece >= bytes) break;
#ifdef MADV_POPULATE_WRITE
      madvise(base + i * piece, piece, MADV_POPULATE_WRITE);
#endif
      CHECK(cudaHostRegister(base + i * piece, piece, cudaHostRegisterPortable));
    }
  };
  const double t0 = now_s();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  const double rate = double(bytes) / double(1ull << 30) / (now_s() - t0);
  for (size_t off = 0; off < bytes; off += piece) CHECK(cudaHostUnregister(base + off));
  munmap(base, bytes);
  return rate;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "pin") == 0) {
    const size_t bytes = (argc > 2 ? size_t(std::atoi(argv[2])) : 8) << 30;
    CHECK(cudaFree(nullptr));
    for (int threads : {1, 2, 4, 8}) {
      std::vector<double> r;
      for (int k = 0; k < 3; ++k) r.push_back(pin_rate(bytes, threads));
      std::sort(r.begin(), r.end());
      std::printf("copy_pieces pin threads %d gibs %.1f\n", threads, r[1]);
    }
    return 0;
  }
  const size_t gib = argc > 1 ? size_t(std::atoi(argv[1])) : 8;
  const size_t bytes = gib << 30;
  char *host = nullptr, *dev = nullptr;
  CHECK(cudaMallocHost(&host, bytes));
  CHECK(cudaMalloc(&dev, bytes));
  CHECK(cudaMemset(dev, 1, bytes));
  std::memset(host, 2, bytes);
  for (int dir = 0; dir < 2; ++dir) {
    const bool to_host = dir == 0;
    const char* name = to_host ? "D2H" : "H2D";
    std::vector<double> base;
    for (int r = 0; r < 3; ++r) base.push_back(run(host, dev, bytes, to_host, 1, 1ull << 30));
    std::sort(base.begin(), base.end());
    std::printf("copy_pieces %s threads 1 piece_mib 1024 gibs %.1f (the one-stream reference)\n", name, base[1]);
    for (int threads : {2, 4, 8, 16})
      for (size_t mib : {32, 64, 128, 256}) {
        std::vector<double> r;
        for (int k = 0; k < 3; ++k) r.push_back(run(host, dev, bytes, to_host, threads, mib << 20));
        std::sort(r.begin(), r.end());
        std::printf("copy_pieces %s threads %d piece_mib %zu gibs %.1f (%.0f%% of one stream)\n", name, threads, mib,
                    r[1], 100.0 * r[1] / base[1]);
      }
  }
  return 0;
}
