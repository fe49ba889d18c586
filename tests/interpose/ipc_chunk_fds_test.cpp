// tests/interpose/ipc_chunk_fds_test.cpp: the exporter's descriptors of
// its chunks (interpose/ipc/ipc_chunk_fds.cpp) on their own, over a fake
// driver whose export makes a memfd named after the chunk and its
// generation (the driver may give a released handle's value to new
// memory): one export per chunk however often it is leased, the
// descriptor open for as long as it is leased, a released chunk's
// descriptor never lent again, nothing left open once every chunk went;
// threads leasing, sending and releasing at once.
#define CATCH_CONFIG_MAIN
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_internal.h"

using namespace pagefast;
using namespace pagefast::ipc;

// The process object that holds the descriptors' state (ipc_state.h): the
// library's is in interpose/pool/devices.cpp, not linked here.
pagefast::pool::Process pagefast::pool::g_process;

namespace {

constexpr int kChunks = 8;
std::atomic<int> g_generation[kChunks + 1];  // of each handle value 1..kChunks
std::atomic<int> g_export_calls[kChunks + 1];
std::atomic<int> g_exporting[kChunks + 1];  // exports under way, per handle
std::atomic<bool> g_slow{false};
// Chunk kGated's export waits at the gate until the test opens it.
constexpr int kGated = 5;
std::atomic<bool> g_gate_open{true}, g_at_gate{false};

CUresult fake_export(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType,
                     unsigned long long) {
  if (handle < 1 || handle > kChunks) return CUDA_ERROR_INVALID_VALUE;
  ++g_exporting[handle];
  const std::string name = "chunk-" + std::to_string(handle) + "-" + std::to_string(g_generation[handle].load());
  if (g_slow) std::this_thread::sleep_for(std::chrono::microseconds(200));  // the driver's export is slow
  if (handle == kGated) {
    g_at_gate = true;
    while (!g_gate_open) std::this_thread::yield();
  }
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  ++g_export_calls[handle];
  --g_exporting[handle];
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

RealDriver fake_driver() {
  RealDriver t;
  std::memset(&t, 0, sizeof t);
  t.cuMemExportToShareableHandle = fake_export;
  return t;
}

// The chunk and generation a descriptor was exported for; false if it is
// not open or not one of the fake's.
bool named(int fd, int* chunk, int* generation) {
  char path[64], target[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  return std::sscanf(target, "/memfd:chunk-%d-%d", chunk, generation) == 2;
}

int open_fds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir)) ++count;
    closedir(dir);
  }
  return count;
}

void forget_all() {
  for (int h = 1; h <= kChunks; ++h) forget_chunk(uint64_t(h));
}

}  // namespace

TEST_CASE("a chunk is exported once, lent as often as asked, and closed when the pool releases it", "[ipc]") {
  const RealDriver real = fake_driver();
  const int fds_before = open_fds();
  const int exports_before = g_export_calls[1];
  detail::ChunkLease a, b;
  REQUIRE(detail::lease_chunk_fd(&real, 1, &a) == CUDA_SUCCESS);
  REQUIRE(detail::lease_chunk_fd(&real, 1, &b) == CUDA_SUCCESS);
  CHECK(a.fd == b.fd);  // the descriptor itself: no copy per open
  CHECK(a.id == b.id);
  CHECK(g_export_calls[1] == exports_before + 1);
  detail::return_chunk_fds(&a, 1);
  // Released while b is still being sent: b's descriptor stays open.
  forget_chunk(1);
  int chunk = 0, generation = -1;
  CHECK(named(b.fd, &chunk, &generation));
  CHECK(chunk == 1);
  const uint64_t old_id = b.id;
  detail::return_chunk_fds(&b, 1);
  CHECK(open_fds() == fds_before);  // the last lease closed it
  ++g_generation[1];                // the driver reuses the handle's value
  detail::ChunkLease c;
  REQUIRE(detail::lease_chunk_fd(&real, 1, &c) == CUDA_SUCCESS);
  CHECK(named(c.fd, &chunk, &generation));
  CHECK(generation == g_generation[1]);
  CHECK(c.id != old_id);  // a new chunk, a new id
  CHECK(g_export_calls[1] == exports_before + 2);
  detail::return_chunk_fds(&c, 1);
  forget_all();
  CHECK(open_fds() == fds_before);
}

TEST_CASE("the release of a chunk being exported waits for the export, and the chunk is exported anew after it",
          "[ipc]") {
  const RealDriver real = fake_driver();
  const int fds_before = open_fds();
  const int exports_before = g_export_calls[kGated];
  g_gate_open = false;
  g_at_gate = false;
  detail::ChunkLease lease;
  std::thread exporter([&] { REQUIRE(detail::lease_chunk_fd(&real, kGated, &lease) == CUDA_SUCCESS); });
  while (!g_at_gate) std::this_thread::yield();
  std::atomic<bool> released{false};
  std::thread releaser([&] {
    forget_chunk(kGated);
    released = true;
  });
  // However long it is given, the release does not end before the export.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(released);
  g_gate_open = true;
  exporter.join();
  releaser.join();
  CHECK(released);
  int chunk = 0, generation = -1;
  CHECK(named(lease.fd, &chunk, &generation));  // lent: open until given back
  detail::return_chunk_fds(&lease, 1);
  CHECK(open_fds() == fds_before);
  detail::ChunkLease again;
  REQUIRE(detail::lease_chunk_fd(&real, kGated, &again) == CUDA_SUCCESS);
  CHECK(g_export_calls[kGated] == exports_before + 2);  // the released chunk's descriptor was not kept
  detail::return_chunk_fds(&again, 1);
  forget_all();
  CHECK(open_fds() == fds_before);
}

TEST_CASE("threads lease chunks while others are released: every lease is the chunk's current memory", "[ipc]") {
  // As in the library: a chunk is released only when no block of it is
  // held, and an open leases only chunks of a block it holds (a shared
  // lock per chunk stands for that hold).
  const RealDriver real = fake_driver();
  const int fds_before = open_fds();
  g_slow = true;
  std::shared_mutex held[kChunks + 1];
  std::atomic<int> wrong{0}, leased{0}, released{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 3000; ++i) {
        const int h = 1 + int(rng() % kChunks);
        std::shared_lock<std::shared_mutex> hold(held[h]);
        detail::ChunkLease lease;
        if (detail::lease_chunk_fd(&real, uint64_t(h), &lease) != CUDA_SUCCESS) {
          ++wrong;
          continue;
        }
        int chunk = 0, generation = -1;
        if (!named(lease.fd, &chunk, &generation) || chunk != h || generation != g_generation[h]) ++wrong;
        std::this_thread::yield();  // the send
        if (!named(lease.fd, &chunk, &generation)) ++wrong;
        detail::return_chunk_fds(&lease, 1);
        ++leased;
      }
    });
  threads.emplace_back([&] {
    std::mt19937 rng(99);
    while (!stop) {
      const int h = 1 + int(rng() % kChunks);
      std::unique_lock<std::shared_mutex> release(held[h]);
      forget_chunk(uint64_t(h));
      ++g_generation[h];
      ++released;
    }
  });
  for (int t = 0; t < 4; ++t) threads[size_t(t)].join();
  stop = true;
  threads.back().join();
  g_slow = false;
  CHECK(wrong == 0);
  CHECK(leased == 12000);
  CHECK(released > 0);
  forget_all();
  CHECK(open_fds() == fds_before);
}

TEST_CASE("leases and releases of the same chunks in any order: no descriptor closed while lent, none left", "[ipc]") {
  // Beyond what the library does (a held block keeps its chunk): the
  // release of a chunk whose export is under way waits for it, and one
  // whose descriptor is lent leaves the closing to the last lease.
  const RealDriver real = fake_driver();
  const int fds_before = open_fds();
  g_slow = true;
  std::atomic<int> bad{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 2000; ++i) {
        const int h = 1 + int(rng() % 3);
        detail::ChunkLease lease;
        if (detail::lease_chunk_fd(&real, uint64_t(h), &lease) != CUDA_SUCCESS) {
          ++bad;
          continue;
        }
        int chunk = 0, generation = -1;
        std::this_thread::yield();
        if (!named(lease.fd, &chunk, &generation) || chunk != h) ++bad;
        detail::return_chunk_fds(&lease, 1);
      }
    });
  threads.emplace_back([&] {
    std::mt19937 rng(7);
    while (!stop) forget_chunk(uint64_t(1 + rng() % 3));
  });
  for (int t = 0; t < 4; ++t) threads[size_t(t)].join();
  stop = true;
  threads.back().join();
  g_slow = false;
  CHECK(bad == 0);
  for (int h = 1; h <= kChunks; ++h) CHECK(g_exporting[h] == 0);
  forget_all();
  CHECK(open_fds() == fds_before);
}
