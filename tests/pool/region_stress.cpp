// tests/pool/region_stress.cpp: tagged and untagged pools of one device
// meeting in its budget (docs/SLEEP.md, docs/DESIGN.md "Lock order"), on
// the fake driver with libpagefast.so preloaded. Subcommands
// (region_stress_cases.py runs them):
//   grow THREADS ROUNDS  threads in regions of several tags and threads
//           outside any region each fill the device (under a limit, or to
//           the driver's out-of-memory answer) with blocks of 1-12 MiB,
//           write and check each, and free them all, ROUNDS times: every
//           thread gets memory, no byte is wrong, and nothing hangs
//           (growth of one pool makes room in the others while they grow);
//   share   the idle memory of one tag serves another tag's growth and
//           the device's pool, and a wake: one budget across tags;
//   small   a tag's pool starts small: 20 tags of 1 MiB take a few MiB
//           each from the driver, and a keep sleep copies live bytes only;
//   prelock a region that keeps its contents has the host memory of its
//           next sleep page-locked ahead by the trim thread (waited for,
//           with a guard that fails only a hang): the sleep page-locks
//           nothing more, and the contents come back; a discarding region
//           gets none, nor one that keeps them in files or gives its host
//           memory back at wake (run with sleep_prelock:0 it expects none
//           at all); `prelock big`: one run larger than a round's step
//           (2 GiB) is page-locked ahead too, and copied back one
//           page-locked piece a copy (the fake driver, as the real one,
//           refuses a copy across two registrations).
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "fakecuda.h"
#include "interpose/pagefast.h"
#include "preload_program.h"

using namespace preload_program;

namespace {

constexpr size_t kMiB = size_t(1) << 20;

using Api = RegionApi;

// One thread's rounds: fill until the driver (or the limit) says no, check,
// free. Returns the blocks it got over all rounds, -1 on a wrong byte or
// an answer other than success or out of memory.
long fill_rounds(int index, int rounds) {
  cuCtxSetCurrent(g_context);
  long got = 0;
  std::vector<std::pair<CUdeviceptr, size_t>> held;
  uint64_t seed = uint64_t(index) << 32;
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < 64; ++i) {
      const size_t bytes = (1 + (index * 7 + i * 5 + round) % 12) * kMiB;
      CUdeviceptr p = 0;
      const CUresult r = cuMemAlloc_v2(&p, bytes);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
      if (r != CUDA_SUCCESS) return -1;
      fill_words(p, 64 * 1024, ++seed);
      held.emplace_back(p, bytes);
      ++got;
    }
    for (size_t i = 0; i < held.size(); ++i)
      if (!words_intact(held[i].first, 64 * 1024, seed - held.size() + 1 + i)) return -1;
    for (auto& [p, bytes] : held)
      if (cuMemFree_v2(p) != CUDA_SUCCESS) return -1;
    held.clear();
    std::this_thread::yield();
  }
  return got;
}

int grow(Api& api, int threads, int rounds) {
  std::vector<std::thread> workers;
  std::vector<long> got(threads, 0);
  const char* tags[] = {"kv", "weights", "graph"};
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      // Every other thread in a region, the tags taking turns.
      const bool tagged = t % 2 == 1;
      if (tagged && api.begin(tags[(t / 2) % 3], t % 4 == 1 ? PAGEFAST_REGION_KEEP : 0) != 0) {
        got[t] = -1;
        return;
      }
      got[t] = fill_rounds(t, rounds);
      if (tagged) api.end();
    });
  for (auto& w : workers) w.join();
  long total = 0;
  for (int t = 0; t < threads; ++t) {
    if (got[t] < 0) {
      std::printf("FAIL thread %d: a wrong byte or an unexpected answer\n", t);
      return 1;
    }
    total += got[t];
  }
  if (total == 0) return fail("no thread got any memory");
  std::printf("ok grow: %d threads, %d rounds, %ld blocks\n", threads, rounds, total);
  return 0;
}

CUresult try_alloc_in(Api& api, const char* tag, unsigned flags, size_t bytes, CUdeviceptr* p) {
  if (tag && api.begin(tag, flags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = cuMemAlloc_v2(p, bytes);
  if (tag) api.end();
  return r;
}

// Run under limit:64M: 64 MiB of tag B idle must serve tag C, the device's
// pool, and a kept tag's wake, with no pagefast_pool_trim.
int share(Api& api) {
  std::vector<CUdeviceptr> b;
  for (int i = 0; i < 8; ++i) {
    CUdeviceptr p = 0;
    CHECK_CU(try_alloc_in(api, "b", 0, 8 * kMiB, &p));
    b.push_back(p);
  }
  for (CUdeviceptr p : b) CHECK_CU(cuMemFree_v2(p));
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  if (total != 64 * kMiB || free_bytes != 64 * kMiB) return fail("cuMemGetInfo under the limit after the frees");
  // Tag C grows into what B holds idle.
  CUdeviceptr c = 0;
  CHECK_CU(try_alloc_in(api, "c", 0, 40 * kMiB, &c));
  CHECK_CU(cuMemFree_v2(c));
  // The device's pool too.
  CUdeviceptr u = 0;
  CHECK_CU(try_alloc_in(api, nullptr, 0, 48 * kMiB, &u));
  CHECK_CU(cuMemFree_v2(u));
  // A kept tag asleep, another tag takes everything idle; wake makes room.
  CUdeviceptr k = 0;
  CHECK_CU(try_alloc_in(api, "keep", PAGEFAST_REGION_KEEP, 24 * kMiB, &k));
  fill_words(k, 24 * kMiB, 77);
  if (api.sleep_tag("keep", 0) != 0) return fail("sleep keep");
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  if (free_bytes != 64 * kMiB) return fail("cuMemGetInfo counts asleep memory as used under the limit");
  CUdeviceptr d = 0;
  CHECK_CU(try_alloc_in(api, "d", 0, 56 * kMiB, &d));
  CHECK_CU(cuMemFree_v2(d));
  if (api.wake_tag("keep") != 0) return fail("wake of a kept tag while another tag holds the room idle");
  if (!words_intact(k, 24 * kMiB, 77)) return fail("the kept tag's contents after wake");
  CHECK_CU(cuMemFree_v2(k));
  std::printf("ok share\n");
  return 0;
}

// No limit, 16 GiB device: small tags take little; a keep sleep copies
// the live bytes.
int small(Api& api) {
  const size_t before = fakecuda_free_bytes(0);
  std::vector<CUdeviceptr> held;
  char tag[16];
  for (int i = 0; i < 20; ++i) {
    std::snprintf(tag, sizeof tag, "t%d", i);
    CUdeviceptr p = 0;
    CHECK_CU(try_alloc_in(api, tag, PAGEFAST_REGION_KEEP, kMiB, &p));
    held.push_back(p);
  }
  const size_t taken = before - fakecuda_free_bytes(0);
  // The device's pool's prewarm is counted in `before` once it exists:
  // what the 20 tags took is at most a few granules each.
  if (taken > 20 * 4 * kMiB) {
    std::printf("FAIL 20 tags of 1 MiB took %zu MiB from the driver\n", taken / kMiB);
    return 1;
  }
  fill_words(held[0], kMiB, 5);
  const size_t pinned_before = fakecuda_host_registered_bytes();
  if (api.sleep_tag("t0", 0) != 0) return fail("sleep t0");
  const size_t pinned = fakecuda_host_registered_bytes() - pinned_before;
  if (pinned > 2 * kMiB) {
    std::printf("FAIL a keep sleep of a 1 MiB tag holds %zu KiB of page-locked host memory\n", pinned / 1024);
    return 1;
  }
  if (api.wake_tag("t0") != 0 || !words_intact(held[0], kMiB, 5)) return fail("t0 after wake");
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree_v2(p));
  std::printf("ok small: 20 tags took %zu MiB, a keep sleep page-locked %zu KiB\n", taken / kMiB, pinned / 1024);
  return 0;
}

// Waits until `done()` or about 60 s have passed (a guard against a
// hang, not a measure: the trim thread works every 100 ms).
template <typename Done>
bool wait_for(Done done) {
  for (int i = 0; i < 6000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

int prelock(Api& api, bool expect) {
  CUdeviceptr kept = 0, kept2 = 0, dropped = 0;
  CHECK_CU(try_alloc_in(api, "weights", PAGEFAST_REGION_KEEP, 24 * kMiB, &kept));
  CHECK_CU(try_alloc_in(api, "weights", PAGEFAST_REGION_KEEP, 6 * kMiB, &kept2));
  CHECK_CU(try_alloc_in(api, "kv", 0, 16 * kMiB, &dropped));
  // Kept elsewhere than host memory kept between sleeps: none ahead.
  CUdeviceptr released = 0, on_disk = 0;
  CHECK_CU(try_alloc_in(api, "released", PAGEFAST_REGION_HOST_RELEASE, 10 * kMiB, &released));
  CHECK_CU(try_alloc_in(api, "on_disk", PAGEFAST_REGION_KEEP_DISK, 12 * kMiB, &on_disk));
  fill_words(kept, 24 * kMiB, 11);
  fill_words(kept2, 6 * kMiB, 12);
  const size_t live = 30 * kMiB;  // whole granules already
  if (expect && !wait_for([&] { return fakecuda_host_registered_bytes() >= live; }))
    return fail("the keep region's host memory was not page-locked ahead");
  if (!expect) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const size_t ahead = fakecuda_host_registered_bytes();
  if (expect && ahead != live) {
    std::printf("FAIL %zu MiB page-locked ahead for 30 MiB kept (another region's too?)\n", ahead / kMiB);
    return 1;
  }
  if (!expect && ahead != 0) return fail("page-locked ahead with sleep_prelock:0");
  const int registers = fakecuda_call_count("cuMemHostRegister_v2");
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep weights");
  if (expect && fakecuda_call_count("cuMemHostRegister_v2") != registers)
    return fail("the sleep page-locked memory although it was ready");
  if (api.sleep_tag("kv", 0) != 0 || api.wake_tag("kv") != 0) return fail("sleep and wake kv");
  if (api.wake_tag("weights") != 0) return fail("wake weights");
  if (!words_intact(kept, 24 * kMiB, 11) || !words_intact(kept2, 6 * kMiB, 12)) return fail("contents after wake");
  // The buffers stay for the next sleep (sleep_host_keep): still ready.
  if (expect && fakecuda_host_registered_bytes() != live) return fail("the buffers did not stay page-locked");
  CHECK_CU(cuMemFree_v2(kept));
  CHECK_CU(cuMemFree_v2(kept2));
  CHECK_CU(cuMemFree_v2(dropped));
  CHECK_CU(cuMemFree_v2(released));
  CHECK_CU(cuMemFree_v2(on_disk));
  std::printf("ok prelock: %zu MiB page-locked ahead\n", ahead / kMiB);
  return 0;
}

// A keep region whose one run is larger than a round of the trim thread
// page-locks (2 GiB): its buffer is still made ahead, alone in its round,
// and the sleep page-locks nothing more. Only the words written are
// touched on the fake card; the host buffer is populated whole.
int prelock_big(Api& api) {
  const size_t bytes = 2048 * kMiB + 64 * kMiB;
  CUdeviceptr kept = 0;
  CHECK_CU(try_alloc_in(api, "weights", PAGEFAST_REGION_KEEP, bytes, &kept));
  fill_words(kept, 1 * kMiB, 21);
  fill_words(kept + bytes - kMiB, 1 * kMiB, 22);
  if (!wait_for([&] { return fakecuda_host_registered_bytes() >= bytes; }))
    return fail("a run over a round's step was never page-locked ahead");
  const int registers = fakecuda_call_count("cuMemHostRegister_v2");
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep weights");
  if (fakecuda_call_count("cuMemHostRegister_v2") != registers)
    return fail("the sleep page-locked memory although it was ready");
  const int copies = fakecuda_call_count("cuMemcpyHtoDAsync_v2");
  if (api.wake_tag("weights") != 0) return fail("wake weights");
  // Page-locked in 32 MiB pieces, each registered on its own: the copy
  // back makes one copy a piece, 66, none across two registrations.
  if (const int back = fakecuda_call_count("cuMemcpyHtoDAsync_v2") - copies; back != 66) {
    std::printf("FAIL the copy back made %d copies for 2112 MiB page-locked (66 of 32 MiB expected)\n", back);
    return 1;
  }
  if (!words_intact(kept, 1 * kMiB, 21) || !words_intact(kept + bytes - kMiB, 1 * kMiB, 22))
    return fail("contents after wake");
  CHECK_CU(cuMemFree_v2(kept));
  std::printf("ok prelock: %zu MiB in one run page-locked ahead\n", size_t(bytes / kMiB));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: region_stress grow THREADS ROUNDS | share | small");
  if (start()) return 1;
  Api api{};
  if (!api.load()) return fail("the region C API is not exported");
  const std::string_view what = argv[1];
  if (what == "grow" && argc >= 4) return grow(api, std::atoi(argv[2]), std::atoi(argv[3]));
  if (what == "share") return share(api);
  if (what == "small") return small(api);
  if (what == "prelock" && argc >= 3 && std::string_view(argv[2]) == "big") return prelock_big(api);
  if (what == "prelock") return prelock(api, argc < 3 || std::string_view(argv[2]) != "none");
  return fail("unknown subcommand");
}
