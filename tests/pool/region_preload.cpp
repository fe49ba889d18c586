// tests/pool/region_preload.cpp: regions and tagged sleep (docs/SLEEP.md)
// against the fake driver, with libpagefast.so preloaded. Subcommands
// (region_cases.py runs them):
//   tags    allocations in regions carry their tag (cuMemAlloc and
//           cuMemAllocPitch, with the driver's pitch); a tagged sleep
//           releases that tag's memory only, keeps or discards as the
//           region said or the call overrides, and leaves memory outside
//           any region and of other tags untouched; sleep() covers all;
//           the bad inputs: unknown tag, wake without sleep, freeing
//           asleep memory, an allocation in an asleep region (fails with
//           PAGEFAST_SLEEP_FAIL), a kernel launched on asleep memory, a
//           bad tag, nesting, a region open on another thread, an
//           exported block, a fork while asleep;
//   limits  the 31 (tag, policy) pairs (none empty) and the nesting depth;
//   refused a refused begin's matching end pops only it;
//   exit    a thread's exit closes its open regions;
//   partial two devices, one that cannot synchronise: a partial sleep;
//   self    a thread's allocation in its own asleep region fails at once;
//   waiter  ... also while another thread of the region waits for wake;
//   fork    a child forked during another thread's sleep answers at once;
//   reuse   the slots of empty tags go to new pairs once all are made;
//   reuse_race N  4 threads, 40 names, N regions each: slots change hands;
//   cycles N  N cycles of sleep/wake of mixed tags while 8 threads
//           allocate, write, check and free outside the regions: no byte
//           lost, no device or host memory leaked.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fakecuda.h"
#include "interpose/pagefast.h"
#include "preload_program.h"

using namespace preload_program;

namespace {

using Api = RegionApi;

constexpr size_t kMiB = 1u << 20;

// The memory outside any region (u) and of the other tag (w) is as it was.
struct Held {
  CUdeviceptr u, w, k, pitched;
  size_t pitch;
};

int pitch_case(Api& api, Held* h) {
  // The driver's pitch for the same request, asked outside any region.
  CUdeviceptr outside = 0;
  size_t driver_pitch = 0, pitch = 0;
  CHECK_CU(cuMemAllocPitch_v2(&outside, &driver_pitch, 1000, 64, 4));
  CHECK_CU(cuMemFree_v2(outside));
  if (api.begin("kv", 0) != 0) return fail("region begin");
  const CUresult r = cuMemAllocPitch_v2(&h->pitched, &pitch, 1000, 64, 4);
  const CUresult bad = cuMemAllocPitch_v2(&outside, &pitch, 1000, 64, 3);  // an element size the driver refuses
  api.end();
  CHECK_CU(r);
  if (bad == CUDA_SUCCESS) return fail("pitch: a bad element size was not the driver's answer");
  if (pitch != driver_pitch) return fail("pitch: not the driver's pitch inside a region");
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CHECK_CU(cuMemGetAddressRange_v2(&base, &bytes, h->pitched));
  if (base != h->pitched || bytes != pitch * 64) return fail("pitch: the range is not pitch * height");
  h->pitch = pitch;
  return 0;
}

int tagged_sleeps(Api& api, Held& h) {
  const size_t before = fakecuda_free_bytes(0);
  // kv discards: its memory goes; the rest stays.
  if (api.sleep_tag("kv", 0) != 0) return fail("sleep kv");
  if (api.tag_asleep("kv") != 1 || api.tag_asleep("weights") != 0) return fail("tag states after sleep kv");
  if (fakecuda_free_bytes(0) < before + 20 * kMiB) return fail("sleep kv: the driver did not get its memory");
  if (!words_intact(h.u, 4 * kMiB, 1) || !words_intact(h.w, 40 * kMiB, 2)) return fail("sleep kv touched other memory");
  // An allocation outside the region is served while kv sleeps.
  CUdeviceptr other = 0;
  CHECK_CU(cuMemAlloc_v2(&other, 3 * kMiB));
  CHECK_CU(cuMemFree_v2(other));
  // A kernel launched on asleep memory: the range is no device memory now
  // (a GPU faults); nothing else is written.
  if (fakecuda_launch_delayed_fill(0, h.k, kMiB, 0x66, 0) == CUDA_SUCCESS) {
    cuCtxSynchronize();
    if (fakecuda_violations() == 0) return fail("a kernel on asleep memory wrote somewhere");
  }
  if (!words_intact(h.u, 4 * kMiB, 1) || !words_intact(h.w, 40 * kMiB, 2))
    return fail("a kernel on asleep memory hit other memory");
  if (api.wake_tag("kv") != 0 || api.tag_asleep("kv") != 0) return fail("wake kv");
  std::memset(reinterpret_cast<void*>(h.k), 0x33, 20 * kMiB);  // usable again, same address
  std::memset(reinterpret_cast<void*>(h.pitched), 0x34, h.pitch * 64);
  // weights keeps (its region said so), also when the call does not say.
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep weights");
  if (!words_intact(h.u, 4 * kMiB, 1)) return fail("sleep weights touched memory outside");
  if (api.wake_tag("weights") != 0 || !words_intact(h.w, 40 * kMiB, 2)) return fail("weights lost its contents");
  // The call overrides: kv kept.
  fill_words(h.k, 20 * kMiB, 3);
  if (api.sleep_tag("kv", PAGEFAST_SLEEP_KEEP) != 0 || api.wake_tag("kv") != 0) return fail("sleep kv keep");
  if (!words_intact(h.k, 20 * kMiB, 3)) return fail("kv kept: contents lost");
  // Everything: every tag by its policy, and the memory outside as asked.
  if (api.sleep_tag(nullptr, PAGEFAST_SLEEP_KEEP) != 0) return fail("sleep everything");
  if (api.tag_asleep("kv") != 1 || api.tag_asleep("weights") != 1 || api.asleep() < 3) return fail("all asleep");
  if (api.wake_tag(nullptr) != 0 || api.asleep() != 0) return fail("wake everything");
  if (!words_intact(h.u, 4 * kMiB, 1) || !words_intact(h.w, 40 * kMiB, 2) || !words_intact(h.k, 20 * kMiB, 3))
    return fail("contents after sleep and wake of everything");
  return 0;
}

int bad_inputs(Api& api, Held& h) {
  if (api.sleep_tag("never", 0) != -2 || api.wake_tag("never") != -2 || api.tag_asleep("never") != -2)
    return fail("an unknown tag is not -2");
  if (api.wake_tag("kv") != 0) return fail("wake without sleep");
  // A tag whose regions hold nothing yet: nothing to do.
  if (api.begin("empty", 0) != 0 || api.end() != 0) return fail("an empty region");
  if (api.sleep_tag("empty", 0) != 0 || api.tag_asleep("empty") != 1 || api.wake_tag("empty") != 0 ||
      api.tag_asleep("empty") != 0)
    return fail("sleep and wake of a tag with no memory");
  if (api.begin("", 0) != -1 || api.begin("two words", 0) != -1 || api.begin(nullptr, 0) != -1)
    return fail("a bad tag was taken");
  for (int i = 0; i < 3; ++i)
    if (api.end() != 0) return fail("the end of a refused begin");
  if (api.end() != -1) return fail("end without a region");
  // Nesting: the innermost tags.
  if (api.begin("weights", PAGEFAST_REGION_KEEP) != 0 || api.begin("kv", 0) != 0) return fail("nested begin");
  if (!api.current() || std::strcmp(api.current(), "kv") != 0) return fail("innermost tag");
  api.end();
  if (!api.current() || std::strcmp(api.current(), "weights") != 0) return fail("outer tag after end");
  api.end();
  if (api.current() != nullptr) return fail("a tag outside any region");
  // An allocation in an asleep region fails with PAGEFAST_SLEEP_FAIL; a
  // free of asleep memory is served.
  CUdeviceptr extra = 0;
  if (alloc_in(api, "kv", 0, 2 * kMiB, &extra)) return 1;
  if (api.sleep_tag("kv", PAGEFAST_SLEEP_FAIL) != 0) return fail("sleep kv fail");
  CUdeviceptr refused = 0;
  if (api.begin("kv", 0) != 0) return fail("begin in an asleep region");
  const CUresult r = cuMemAlloc_v2(&refused, kMiB);
  api.end();
  if (r != CUDA_ERROR_OUT_OF_MEMORY) return fail("an allocation in an asleep region was served");
  CHECK_CU(cuMemFree_v2(extra));
  if (cuMemFree_v2(extra) != CUDA_ERROR_INVALID_VALUE) return fail("a double free of asleep memory");
  if (api.wake_tag("kv") != 0) return fail("wake after a free while asleep");
  (void)h;
  return 0;
}

// A region open on another thread while its tag sleeps: the sleep goes
// ahead, and that thread's allocation in it waits for wake.
int open_elsewhere(Api& api) {
  std::atomic<int> stage{0};
  std::atomic<int> got{0};
  std::thread t([&] {
    cuCtxSetCurrent(g_context);
    api.begin("kv", 0);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    CUdeviceptr p = 0;
    got = cuMemAlloc_v2(&p, kMiB) == CUDA_SUCCESS ? 1 : -1;
    if (p) cuMemFree_v2(p);
    api.end();
  });
  while (stage.load() != 1) std::this_thread::yield();
  if (api.sleep_tag("kv", 0) != 0) return fail("sleep with the region open elsewhere");
  stage = 2;
  const int before_wake = got.load();
  if (api.wake_tag("kv") != 0) return fail("wake with the region open elsewhere");
  t.join();
  if (before_wake != 0) return fail("the allocation in the asleep region did not wait");
  if (got.load() != 1) return fail("the waiting allocation failed");
  return 0;
}

// An exported block in a region: exported and never opened, it sleeps;
// after wake its handle is given again and the contents are back.
int exported(Api& api, Held& h) {
  CUipcMemHandle handle;
  if (cuIpcGetMemHandle(&handle, h.w) != CUDA_SUCCESS) {
    std::printf("exported: the pool cannot share here (skipped)\n");
    return 0;
  }
  if (api.sleep_tag("weights", 0) < 0 || api.wake_tag("weights") != 0) return fail("sleep of an exported block");
  if (!words_intact(h.w, 40 * kMiB, 2)) return fail("an exported block lost its contents");
  CHECK_CU(cuIpcGetMemHandle(&handle, h.w));
  return 0;
}

// A fork while asleep: the child forwards everything to the driver; its
// sleep calls answer -1 (no pool of its own); the parent wakes as before.
int fork_asleep(Api& api, Held& h) {
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep before fork");
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) _exit(api.wake_tag("weights") == -1 && api.sleep_tag("weights", 0) == -1 ? 0 : 1);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail("the forked child's answers");
  if (api.wake_tag("weights") != 0 || !words_intact(h.w, 40 * kMiB, 2)) return fail("wake after fork");
  return 0;
}

int tags_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  Held h{};
  CHECK_CU(cuMemAlloc_v2(&h.u, 4 * kMiB));
  fill_words(h.u, 4 * kMiB, 1);
  if (alloc_in(api, "weights", PAGEFAST_REGION_KEEP, 40 * kMiB, &h.w)) return 1;
  fill_words(h.w, 40 * kMiB, 2);
  if (alloc_in(api, "kv", 0, 20 * kMiB, &h.k)) return 1;
  std::memset(reinterpret_cast<void*>(h.k), 0x22, 20 * kMiB);
  if (pitch_case(api, &h)) return 1;
  if (tagged_sleeps(api, h) || bad_inputs(api, h) || open_elsewhere(api) || exported(api, h) || fork_asleep(api, h))
    return 1;
  CHECK_CU(cuMemFree_v2(h.u));
  CHECK_CU(cuMemFree_v2(h.w));
  CHECK_CU(cuMemFree_v2(h.k));
  CHECK_CU(cuMemFree_v2(h.pitched));
  std::printf("ok tags\n");
  return 0;
}

int limits_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  char name[80];
  std::memset(name, 'a', 64);
  name[64] = 0;
  if (api.begin(name, 0) != -1) return fail("a 64-character tag");
  api.end();
  name[63] = 0;
  if (api.begin(name, 0) != 0) return fail("a 63-character tag");
  api.end();
  for (int i = 0; i < 8; ++i) {
    std::snprintf(name, sizeof name, "deep%d", i);
    if (api.begin(name, 0) != 0) return fail("nesting under 8");
  }
  if (api.begin("deep8", 0) != -1) return fail("a ninth nested region");
  for (int i = 0; i < 9; ++i) api.end();
  if (api.current() != nullptr) return fail("the nested regions' ends");
  // 9 pairs made above; 22 more fill the 31. Each holds memory: no slot
  // is empty (an empty one would go to a new pair).
  CUdeviceptr held[31];
  int n_held = 0;
  for (int i = 0; i < 22; ++i) {
    std::snprintf(name, sizeof name, "t%d", i);
    if (api.begin(name, i & 1) != 0) return fail("a tag under the limit");
    api.end();
  }
  std::memset(name, 'a', 63);
  name[63] = 0;
  if (alloc_in(api, name, 0, 4096, &held[n_held++])) return 1;
  for (int i = 0; i < 8; ++i) {
    std::snprintf(name, sizeof name, "deep%d", i);
    if (alloc_in(api, name, 0, 4096, &held[n_held++])) return 1;
  }
  for (int i = 0; i < 22; ++i) {
    std::snprintf(name, sizeof name, "t%d", i);
    if (alloc_in(api, name, i & 1, 4096, &held[n_held++])) return 1;
  }
  if (api.begin("t3", 1) != 0) return fail("begin t3");
  if (api.begin("one-too-many", 0) != -1) return fail("a 32nd (tag, policy) pair");
  if (api.end() != 0 || !api.current() || std::strcmp(api.current(), "t3") != 0)
    return fail("the end of a refused 32nd pair closed the region around it");
  api.end();
  if (api.begin("t3", 1) != 0) return fail("a known pair after the limit");
  api.end();
  for (int i = 0; i < n_held; ++i) CHECK_CU(cuMemFree_v2(held[i]));
  std::printf("ok limits\n");
  return 0;
}

// A refused begin takes its matching end, which pops only it: the region
// open around it stays open, and tags meanwhile.
int refused_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  auto current_is = [&api](const char* tag) {
    const char* now = api.current();
    return tag ? now && std::strcmp(now, tag) == 0 : now == nullptr;
  };
  if (api.begin("outer", 0) != 0) return fail("begin outer");
  if (api.begin("two words", 0) != -1) return fail("a bad tag was taken");
  if (!current_is("outer")) return fail("a refused begin changed the tag");
  // An allocation meanwhile carries the outer tag: it sleeps with it.
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc_v2(&p, 2 * kMiB));
  if (api.end() != 0 || !current_is("outer")) return fail("the end of a refused begin closed the outer region");
  if (api.sleep_tag("outer", 0) != 0) return fail("sleep outer");
  unsigned char byte = 0;
  const bool asleep = cuMemcpyDtoH_v2(&byte, p, 1) != CUDA_SUCCESS;
  if (api.wake_tag("outer") != 0) return fail("wake outer");
  if (!asleep) return fail("the allocation after a refused begin did not carry the outer tag");
  if (api.end() != 0 || !current_is(nullptr)) return fail("the outer region's own end");
  if (api.end() != -1) return fail("an end with nothing open");
  CHECK_CU(cuMemFree_v2(p));
  // Too deep: refused begins nested at the full depth take their ends too.
  char name[32];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(name, sizeof name, "deep%d", i);
    if (api.begin(name, 0) != 0) return fail("nesting under 8");
  }
  for (int i = 0; i < 20; ++i)
    if (api.begin("deeper", 0) != -1) return fail("a ninth nested region");
  if (api.begin("bad name", 0) != -1) return fail("a bad tag at the full depth");
  for (int i = 0; i < 21; ++i)
    if (api.end() != 0 || !current_is("deep7")) return fail("the end of a refused begin closed deep7");
  for (int i = 7; i >= 0; --i) {
    std::snprintf(name, sizeof name, "deep%d", i);
    if (!current_is(name) || api.end() != 0) return fail("the nested regions' ends");
  }
  if (!current_is(nullptr) || api.end() != -1) return fail("nothing open at the end");
  // A refused begin outside any region: its end pops it and nothing else.
  if (api.begin("", 0) != -1 || api.begin("outer", 0) != 0) return fail("begin after a refused begin");
  if (api.end() != 0 || !current_is(nullptr) || api.end() != 0 || api.end() != -1)
    return fail("ends after a refused begin outside any region");
  std::printf("ok refused\n");
  return 0;
}

// A thread that exits with regions open closes them: a sleep of their tag
// then finds none open (region_cases.py reads the log's line of open
// regions: present for "held", whose thread waits, absent for "exited").
int exit_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  std::thread gone([&api] {
    cuCtxSetCurrent(g_context);
    api.begin("exited", 0);
    CUdeviceptr p = 0;
    cuMemAlloc_v2(&p, kMiB);
    api.begin("exited", PAGEFAST_REGION_KEEP);
    api.begin("bad name", 0);  // a refused begin's marker goes too
  });
  gone.join();
  std::atomic<int> stage{0};
  std::thread held([&api, &stage] {
    api.begin("held", 0);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    api.end();
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::printf("sleep held\n");
  std::fflush(stdout);
  const int held_answer = api.sleep_tag("held", 0);
  stage = 2;
  held.join();
  std::printf("sleep exited\n");
  std::fflush(stdout);
  if (held_answer != 0 || api.wake_tag("held") != 0) return fail("sleep and wake of held");
  if (api.sleep_tag("exited", 0) != 0 || api.wake_tag("exited") != 0) return fail("sleep and wake of exited");
  std::printf("ok exit\n");
  return 0;
}

// Two devices (FAKECUDA_DEVICES=2), a tag's memory on each, and one device
// that cannot be synchronised: the sleep is partial (1), the tag reads
// asleep, the other device's memory went back and the refused device's
// stays readable; wake brings the contents back. Both refusing: -1,
// nothing changed.
int partial_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  CUdevice second = 0;
  CUcontext contexts[2] = {g_context, nullptr};
  CHECK_CU(cuDeviceGet(&second, 1));
  CHECK_CU(cuDevicePrimaryCtxRetain(&contexts[1], second));
  CUdeviceptr p[2] = {0, 0};
  for (int d = 0; d < 2; ++d) {
    CHECK_CU(cuCtxSetCurrent(contexts[d]));
    if (alloc_in(api, "two", PAGEFAST_REGION_KEEP, 4 * kMiB, &p[d])) return 1;
    fill_words(p[d], 4 * kMiB, 5 + d);
  }
  CHECK_CU(cuCtxSetCurrent(g_context));
  for (int bad = 1; bad >= 0; --bad) {
    const int good = 1 - bad;
    const unsigned long long free_good = fakecuda_free_bytes(good);
    fakecuda_set_sync_error(bad, CUDA_ERROR_LAUNCH_FAILED);
    const int answer = api.sleep_tag("two", 0);
    fakecuda_set_sync_error(bad, CUDA_SUCCESS);
    if (answer != 1) {
      std::printf("device %d cannot synchronise: sleep answered %d\n", bad, answer);
      return fail("a partial sleep is not answered 1");
    }
    if (api.tag_asleep("two") != 1) return fail("a partial sleep left the tag awake");
    if (fakecuda_free_bytes(good) < free_good + 4 * kMiB) return fail("the device that synchronised kept the memory");
    if (!words_intact(p[bad], 4 * kMiB, 5 + bad)) return fail("the refused device's memory changed");
    if (api.wake_tag("two") != 0 || api.tag_asleep("two") != 0) return fail("wake after a partial sleep");
    if (!words_intact(p[good], 4 * kMiB, 5 + good)) return fail("the contents after a partial sleep and wake");
  }
  fakecuda_set_sync_error(0, CUDA_ERROR_LAUNCH_FAILED);
  fakecuda_set_sync_error(1, CUDA_ERROR_LAUNCH_FAILED);
  const int answer = api.sleep_tag("two", 0);
  fakecuda_set_sync_error(0, CUDA_SUCCESS);
  fakecuda_set_sync_error(1, CUDA_SUCCESS);
  if (answer != -1 || api.tag_asleep("two") != 0) return fail("every device refused: not -1 and awake");
  // A tag of two policies, the discard one empty: every device refusing the
  // keep one leaves nothing changed, and the tag awake.
  if (api.begin("two", 0) != 0 || api.end() != 0) return fail("two, discard");
  fakecuda_set_sync_error(0, CUDA_ERROR_LAUNCH_FAILED);
  fakecuda_set_sync_error(1, CUDA_ERROR_LAUNCH_FAILED);
  const int pair = api.sleep_tag("two", 0);
  fakecuda_set_sync_error(0, CUDA_SUCCESS);
  fakecuda_set_sync_error(1, CUDA_SUCCESS);
  if (pair != -1 || api.tag_asleep("two") != 0) return fail("refused beside an empty policy: not -1 and awake");
  if (!words_intact(p[0], 4 * kMiB, 5) || !words_intact(p[1], 4 * kMiB, 6))
    return fail("a refused sleep changed memory");
  for (int d = 0; d < 2; ++d) {
    CHECK_CU(cuCtxSetCurrent(contexts[d]));
    CHECK_CU(cuMemFree_v2(p[d]));
  }
  CHECK_CU(cuCtxSetCurrent(g_context));
  std::printf("ok partial\n");
  return 0;
}

// A thread that sleeps the tag of its own open region and then allocates
// in it fails at once (out of memory) instead of waiting for its own wake;
// another thread in the region waits for the wake as before. The same for
// a sleep of everything and an allocation outside any region.
int self_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  auto sleep_all = reinterpret_cast<int (*)(unsigned)>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  auto wake_all = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  if (!sleep_all || !wake_all) return fail("pagefast_sleep/wake not exported");
  std::atomic<int> stage{0}, got{0};
  std::thread other([&] {
    cuCtxSetCurrent(g_context);
    api.begin("mine", 0);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    CUdeviceptr q = 0;
    got = cuMemAlloc_v2(&q, 3 * kMiB) == CUDA_SUCCESS ? 1 : -1;  // waits for wake, or races it
    if (q) cuMemFree_v2(q);
    api.end();
  });
  if (api.begin("mine", 0) != 0) return fail("begin mine");
  CUdeviceptr p = 0, refused = 0;
  CHECK_CU(cuMemAlloc_v2(&p, 4 * kMiB));
  while (stage.load() != 1) std::this_thread::yield();
  if (api.sleep_tag("mine", 0) != 0) return fail("sleep of the thread's own region");
  stage = 2;
  const CUresult r = cuMemAlloc_v2(&refused, 8 * kMiB);
  const CUresult small = cuMemAlloc_v2(&refused, 1000);
  if (api.wake_tag("mine") != 0) return fail("wake mine");
  other.join();
  if (r != CUDA_ERROR_OUT_OF_MEMORY || small != CUDA_ERROR_OUT_OF_MEMORY)
    return fail("an allocation in the thread's own asleep region was not out of memory");
  if (got.load() != 1) return fail("the other thread's allocation did not wait for wake");
  CUdeviceptr q = 0;
  CHECK_CU(cuMemAlloc_v2(&q, 8 * kMiB));
  CHECK_CU(cuMemFree_v2(q));
  CHECK_CU(cuMemFree_v2(p));
  api.end();
  // Everything, from this thread, and an allocation outside any region.
  CUdeviceptr u = 0;
  CHECK_CU(cuMemAlloc_v2(&u, 4 * kMiB));
  if (sleep_all(0) < 0) return fail("sleep everything");
  const CUresult outside = cuMemAlloc_v2(&q, 8 * kMiB);
  if (wake_all() != 0) return fail("wake everything");
  if (outside != CUDA_ERROR_OUT_OF_MEMORY) return fail("an allocation after the thread's own sleep of everything");
  CHECK_CU(cuMemFree_v2(u));
  std::printf("ok self\n");
  return 0;
}

// Whether thread `tid` of this process is blocked (state S in /proc: in a
// wait, here the pool's wait for wake), read without any timer.
bool blocked(pid_t tid) {
  char path[64], line[256] = "";
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", int(tid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* paren = read ? std::strrchr(line, ')') : nullptr;
  return paren && paren[1] == ' ' && paren[2] == 'S';
}

// Another thread of the region waits for wake first; then the sleeping
// thread allocates in the region (out of memory at once) and frees a block
// of it (served): neither is held up behind the waiting thread.
int waiter_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  std::atomic<int> stage{0}, got{0};
  std::atomic<pid_t> tid{0};
  std::thread other([&] {
    cuCtxSetCurrent(g_context);
    api.begin("mine", 0);
    tid = pid_t(syscall(SYS_gettid));
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    CUdeviceptr q = 0;
    got = cuMemAlloc_v2(&q, 3 * kMiB) == CUDA_SUCCESS ? 1 : -1;  // waits for wake
    if (q) cuMemFree_v2(q);
    api.end();
  });
  CUdeviceptr p = 0, refused = 0;
  if (alloc_in(api, "mine", 0, 4 * kMiB, &p)) return 1;
  while (stage.load() != 1) std::this_thread::yield();
  if (api.sleep_tag("mine", 0) != 0) return fail("sleep mine");
  stage = 2;
  while (!blocked(tid.load()) && got.load() == 0) std::this_thread::yield();
  if (api.begin("mine", 0) != 0) return fail("begin mine");
  const CUresult r = cuMemAlloc_v2(&refused, 8 * kMiB);
  api.end();
  const CUresult freed = cuMemFree_v2(p);
  if (api.wake_tag("mine") != 0) return fail("wake mine");
  other.join();
  if (r != CUDA_ERROR_OUT_OF_MEMORY) return fail("the sleeping thread's allocation was not out of memory");
  if (freed != CUDA_SUCCESS) return fail("a free of asleep memory while another thread waits");
  if (got.load() != 1) return fail("the waiting thread's allocation failed");
  std::printf("ok waiter\n");
  return 0;
}

// A fork while another thread is inside a sleep (held in its sync by a
// gate kernel): the child's sleep and wake answer -1 at once, and its
// regions open and close; the parent's sleep then finishes.
int fork_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  CUdeviceptr p = 0;
  if (alloc_in(api, "forked", 0, 4 * kMiB, &p)) return 1;
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  int gate[2];
  if (pipe(gate) != 0) return fail("pipe");
  CHECK_CU(fakecuda_launch_gate(stream, gate[0]));
  std::atomic<int> answer{-9};
  std::thread sleeper([&] {
    cuCtxSetCurrent(g_context);
    answer = api.sleep_tag("forked", 0);
  });
  // The pool's gate closes before the sleep's sync, which waits for the
  // gate kernel: from then on the sleeper holds the sleep's lock.
  while (api.asleep() < 1) std::this_thread::yield();
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    const bool ok = api.sleep_tag("forked", 0) == -1 && api.wake_tag("forked") == -1 &&
                    api.sleep_tag(nullptr, 0) == -1 && api.begin("child", 0) == 0 && api.end() == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  const bool child_ok =
      child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const char byte = 1;
  if (write(gate[1], &byte, 1) != 1) return fail("write to the gate");
  sleeper.join();
  close(gate[0]);
  close(gate[1]);
  if (!child_ok) return fail("the child forked during a sleep did not answer -1");
  if (answer.load() != 0 || api.wake_tag("forked") != 0) return fail("the parent's sleep and wake");
  CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuMemFree_v2(p));
  std::printf("ok fork\n");
  return 0;
}

// The slots of empty tags go to new (name, policy) pairs once all 31 are
// made: not a tag with memory, asleep, or open on a thread; the reused
// slot's counters start again; 300 per-request tags in a row all open.
int reuse_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  auto stats_json = reinterpret_cast<size_t (*)(char*, size_t)>(dlsym(RTLD_DEFAULT, "pagefast_stats_json"));
  if (!stats_json) return fail("pagefast_stats_json not exported");
  char name[32];
  CUdeviceptr block[31];
  for (int i = 0; i < 31; ++i) {
    std::snprintf(name, sizeof name, "r%d", i);
    if (alloc_in(api, name, 0, kMiB, &block[i])) return 1;
  }
  for (int i = 0; i < 3; ++i)
    if (api.sleep_tag("r0", 0) != 0 || api.wake_tag("r0") != 0) return fail("cycles of r0");
  // Every slot holds memory: a new pair is refused (and its end pops it).
  if (api.begin("extra", 0) != -1 || api.end() != 0) return fail("a 32nd pair while no tag is empty");
  // r1 open on another thread, r2 asleep (its block freed while asleep),
  // r0 empty: only r0's slot may go.
  std::atomic<int> stage{0};
  std::thread holder([&] {
    api.begin("r1", 0);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    api.end();
  });
  struct Release {  // the holder ends its region and is joined on every return
    std::atomic<int>& stage;
    std::thread& thread;
    ~Release() {
      stage = 2;
      thread.join();
    }
  } release{stage, holder};
  while (stage.load() != 1) std::this_thread::yield();
  CHECK_CU(cuMemFree_v2(block[1]));
  if (api.sleep_tag("r2", 0) != 0) return fail("sleep r2");
  CHECK_CU(cuMemFree_v2(block[2]));
  if (api.begin("extra", 0) != -1 || api.end() != 0) return fail("a slot with a region open or asleep was reused");
  CHECK_CU(cuMemFree_v2(block[0]));
  if (api.begin("extra", PAGEFAST_REGION_KEEP) != 0) return fail("the empty tag's slot was not reused");
  if (!api.current() || std::strcmp(api.current(), "extra") != 0) return fail("the reused slot's name");
  CUdeviceptr e = 0;
  CHECK_CU(cuMemAlloc_v2(&e, 2 * kMiB));
  fill_words(e, 2 * kMiB, 77);
  api.end();
  if (api.tag_asleep("r0") != -2) return fail("the old tag of a reused slot is still known");
  if (api.tag_asleep("r2") != 1 || api.tag_asleep("extra") != 0) return fail("tag states after the reuse");
  if (api.sleep_tag("extra", 0) != 0 || api.wake_tag("extra") != 0) return fail("sleep and wake of extra");
  if (!words_intact(e, 2 * kMiB, 77)) return fail("extra (keep) lost its contents in the reused slot's pool");
  std::vector<char> doc(1 << 16);
  stats_json(doc.data(), doc.size());
  const char* at = std::strstr(doc.data(), "{\"name\": \"extra\"");
  if (!at || !std::strstr(at, "\"sleeps\": 1,") || std::strstr(at, "\"sleeps\": 1,") > std::strchr(at, '}'))
    return fail("the reused slot's counters did not start again");
  CHECK_CU(cuMemFree_v2(e));
  // Per-request tags: each empty once its request is done.
  for (int i = 0; i < 300; ++i) {
    std::snprintf(name, sizeof name, "req%d", i);
    CUdeviceptr p = 0;
    if (api.begin(name, 0) != 0) return fail("a per-request tag was refused");
    const CUresult r = cuMemAlloc_v2(&p, kMiB);
    api.end();
    CHECK_CU(r);
    if (api.sleep_tag(name, 0) != 0 || api.wake_tag(name) != 0) return fail("sleep and wake of a per-request tag");
    CHECK_CU(cuMemFree_v2(p));
  }
  if (api.wake_tag("r2") != 0) return fail("wake r2");
  for (int i = 3; i < 31; ++i) CHECK_CU(cuMemFree_v2(block[i]));
  std::printf("ok reuse\n");
  return 0;
}

// Threads open regions of 40 names over and over (more names than slots:
// slots change hands all the time), allocate, write and check in them: no
// begin is refused (at most 8 slots are busy at once), and a thread's
// region keeps its name while open.
int reuse_race_case(int rounds) {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(g_context);
      char name[32];
      for (int i = 0; i < rounds && !bad.load(); ++i) {
        std::snprintf(name, sizeof name, "n%d", (t * 7 + i * 3) % 40);
        if (api.begin(name, i & 1) != 0) {
          bad = 1;
          break;
        }
        CUdeviceptr p = 0;
        const size_t bytes = (i & 2) ? 4096 : 3 * kMiB / 2;
        if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) bad = 2;
        const char* now = api.current();
        if (!now || std::strcmp(now, name) != 0) bad = 3;
        if (p) {
          fill_words(p, bytes, uint64_t(t) << 32 | uint64_t(i));
          if (!words_intact(p, bytes, uint64_t(t) << 32 | uint64_t(i))) bad = 4;
        }
        api.tag_asleep(name);
        api.end();
        if (p) cuMemFree_v2(p);
      }
    });
  for (std::thread& t : threads) t.join();
  if (bad.load() == 1) return fail("a begin was refused while slots were empty");
  if (bad.load() == 2) return fail("an allocation in a reused slot failed");
  if (bad.load() == 3) return fail("a region's name changed while it was open");
  if (bad.load() == 4) return fail("memory of a reused slot lost bytes");
  if (fakecuda_violations()) return fail("the fake driver saw a violation");
  std::printf("ok reuse_race\n");
  return 0;
}

// Under a limit (PAGEFAST_CONF limit:64M) the device's pool and the
// regions' pools together stay under it, and idle memory of one goes to
// the other.
int limit_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  CUdeviceptr outside = 0, inside = 0;
  CHECK_CU(cuMemAlloc_v2(&outside, 40 * kMiB));
  if (api.begin("kv", 0) != 0) return fail("region begin");
  const CUresult over = cuMemAlloc_v2(&inside, 40 * kMiB);
  api.end();
  if (over != CUDA_ERROR_OUT_OF_MEMORY) return fail("a region's pool grew past the limit");
  CHECK_CU(cuMemFree_v2(outside));
  // The device's pool holds 40 MiB idle now: the region's growth makes room.
  if (alloc_in(api, "kv", 0, 40 * kMiB, &inside)) return 1;
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  if (total != 64 * kMiB || free_bytes > 24 * kMiB) return fail("cuMemGetInfo under the limit with a region");
  CHECK_CU(cuMemFree_v2(inside));
  std::printf("ok limit\n");
  return 0;
}

// The driver's own stream-ordered pool (cudaMallocAsync) cannot sleep: a
// sleep of everything names it and answers 1; once it holds nothing, 0.
int async_case() {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  auto sleep_all = reinterpret_cast<int (*)(unsigned)>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  auto wake_all = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  CUdeviceptr pooled = 0, ordered = 0;
  CHECK_CU(cuMemAlloc_v2(&pooled, 4 * kMiB));
  CHECK_CU(cuMemAllocAsync(&ordered, 8 * kMiB, nullptr));
  if (sleep_all(PAGEFAST_SLEEP_KEEP) != 1) return fail("sleep with stream-ordered memory is not 1");
  if (wake_all() != 0) return fail("wake");
  CHECK_CU(cuMemFreeAsync(ordered, nullptr));
  CHECK_CU(cuCtxSynchronize());
  if (sleep_all(PAGEFAST_SLEEP_KEEP) != 0) return fail("sleep once the driver's pool is empty is not 0");
  if (wake_all() != 0) return fail("wake");
  CHECK_CU(cuMemFree_v2(pooled));
  std::printf("ok async\n");
  return 0;
}

// Eight threads allocate, write, check and free outside any region while
// the main thread sleeps and wakes "kv" (discard) and "weights" (keep).
int cycles_case(int cycles) {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  CUdeviceptr w = 0, k = 0;
  if (alloc_in(api, "weights", PAGEFAST_REGION_KEEP, 3 * kMiB, &w) || alloc_in(api, "kv", 0, 2 * kMiB, &k)) return 1;
  fill_words(w, 3 * kMiB, 9);
  // One cycle first: copy threads' stacks stay cached by libc.
  if (api.sleep_tag("weights", 0) != 0 || api.wake_tag("weights") != 0) return fail("first cycle");
  auto trim = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "pagefast_pool_trim"));
  if (!trim || trim(0) != 0) return fail("trim");
  const unsigned long long free_before = fakecuda_free_bytes(0);
  const int host_allocs = fakecuda_call_count("cuMemHostAlloc"), host_frees = fakecuda_call_count("cuMemFreeHost");
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(g_context);
      for (uint64_t round = 0; !stop.load(); ++round) {
        CUdeviceptr p = 0;
        const size_t bytes = (t & 1) ? 4096 : 3 * kMiB / 2;
        if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
          bad.fetch_add(1);
          return;
        }
        fill_words(p, bytes, round * 8 + t);
        if (!words_intact(p, bytes, round * 8 + t)) bad.fetch_add(1);
        cuMemFree_v2(p);
      }
    });
  int failed = 0;
  for (int i = 0; i < cycles && !failed; ++i) {
    const char* tag = (i & 1) ? "weights" : "kv";
    if (api.sleep_tag(tag, 0) != 0 || api.wake_tag(tag) != 0) failed = 1;
    if (!words_intact(w, 3 * kMiB, 9)) failed = 2;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  if (failed == 1) return fail("a cycle failed");
  if (failed == 2) return fail("weights lost bytes over the cycles");
  if (bad.load()) return fail("a thread outside the regions lost bytes or an allocation");
  // What the threads used goes back: the device holds what it held before.
  if (trim(0) != 0 || fakecuda_free_bytes(0) != free_before) return fail("device memory leaked over the cycles");
  CHECK_CU(cuMemFree_v2(k));
  CHECK_CU(cuMemFree_v2(w));
  if (fakecuda_call_count("cuMemHostAlloc") - host_allocs != fakecuda_call_count("cuMemFreeHost") - host_frees)
    return fail("host memory leaked over the cycles");
  if (fakecuda_violations()) return fail("the fake driver saw a violation");
  std::printf("ok cycles %d\n", cycles);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: region_preload tags|limits|cycles N");
  if (start()) return 1;
  const std::string what = argv[1];
  if (what == "tags") return tags_case();
  if (what == "limits") return limits_case();
  if (what == "limit") return limit_case();
  if (what == "refused") return refused_case();
  if (what == "exit") return exit_case();
  if (what == "partial") return partial_case();
  if (what == "self") return self_case();
  if (what == "fork") return fork_case();
  if (what == "waiter") return waiter_case();
  if (what == "reuse") return reuse_case();
  if (what == "reuse_race") return reuse_race_case(argc > 2 ? std::atoi(argv[2]) : 500);
  if (what == "async") return async_case();
  if (what == "cycles") return cycles_case(argc > 2 ? std::atoi(argv[2]) : 100);
  return fail("unknown subcommand");
}
