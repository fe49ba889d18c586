// tests/pool/own_vmm_preload.cpp: the program's own VMM memory that
// pagefast_sleep must report as resident (docs/POOL.md "Sleep and wake"),
// where the ledger of it (policy/own_vmm/ledger.h) has to see past a plain
// cuMemCreate:
//   other_device  the program's memory on device 1, where pagefast never
//                 allocated (no pool), beside a pool block on device 0;
//   import        a handle exported as a file descriptor, imported back
//                 and released once (the import still holds the memory),
//                 then mapped.
// Each sleeps with keep and expects the bytes intact after wake (the answer
// 0 for other_device: the memory slept; 1 for import: an imported handle
// stays resident), then releases everything and expects 0 with the devices
// free.
// Sleep and wake by tag of the program's own memory (docs/OWN-VMM.md
// "Sleep and wake"; own_vmm_sleep.cpp in this file, cases in
// own_vmm_sleep_cases.py): tagged, collide, asleep_calls, wake_fail,
// cycles, fork, resident, map_gap, released_mapped, multicast, pool_only,
// copy_threads, prelock, wake_overlap.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <sys/wait.h>
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

using SleepFn = int (*)(unsigned);
using WakeFn = int (*)();
constexpr size_t kBytes = 4u << 20;

bool all_bytes(CUdeviceptr p, size_t bytes, unsigned char v) {
  const unsigned char* c = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (c[i] != v) return false;
  return true;
}

CUmemAllocationProp prop_on(int device, CUmemAllocationHandleType types) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = types;
  return prop;
}

// Reserves, maps `handle` there, opens it to `device` and fills it with v.
int map_and_fill(CUmemGenericAllocationHandle handle, int device, unsigned char v, CUdeviceptr* va) {
  CHECK_CU(cuMemAddressReserve(va, kBytes, 0, 0, 0));
  CHECK_CU(cuMemMap(*va, kBytes, 0, handle, 0));
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(*va, kBytes, &desc, 1));
  std::memset(reinterpret_cast<void*>(*va), v, kBytes);
  return 0;
}

// Sleep with the program's memory held: `expect`, and every byte back after wake.
int sleep_held(const char* name, CUdeviceptr pool_block, CUdeviceptr own, int expect) {
  auto sleep_fn = reinterpret_cast<SleepFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  auto wake_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  if (!sleep_fn || !wake_fn) return fail("pagefast_sleep/wake not exported");
  const int answer = sleep_fn(PAGEFAST_SLEEP_KEEP);
  std::printf("%s: sleep answer %d\n", name, answer);
  if (answer != expect) return fail("the sleep answer");
  if (wake_fn() != 0) return fail("wake");
  if (!all_bytes(pool_block, kBytes, 0x3c) || !all_bytes(own, kBytes, 0x5a)) return fail("bytes changed");
  return 0;
}

// Sleep once everything went back: 0, and `devices` wholly free asleep.
int sleep_released(const char* name, int devices) {
  auto sleep_fn = reinterpret_cast<SleepFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  auto wake_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  const int answer = sleep_fn(PAGEFAST_SLEEP_KEEP);
  size_t free_now = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_now, &total));
  std::printf("%s released: sleep answer %d\n", name, answer);
  if (answer != 0) return fail("the answer is not 0 once the program released its memory");
  for (int d = 0; d < devices; ++d)
    if (fakecuda_free_bytes(d) != total) return fail("device memory stayed taken while asleep");
  if (wake_fn() != 0) return fail("second wake");
  return 0;
}

int other_device() {
  CUdeviceptr pool_block, va;
  CHECK_CU(cuMemAlloc_v2(&pool_block, kBytes));
  std::memset(reinterpret_cast<void*>(pool_block), 0x3c, kBytes);
  const CUmemAllocationProp prop = prop_on(1, CU_MEM_HANDLE_TYPE_NONE);
  CUmemGenericAllocationHandle handle;
  CHECK_CU(cuMemCreate(&handle, kBytes, &prop, 0));
  if (map_and_fill(handle, 1, 0x5a, &va)) return 1;
  if (sleep_held("other_device", pool_block, va, 0)) return 1;
  CHECK_CU(cuMemUnmap(va, kBytes));
  CHECK_CU(cuMemRelease(handle));
  CHECK_CU(cuMemAddressFree(va, kBytes));
  CHECK_CU(cuMemFree_v2(pool_block));
  if (sleep_released("other_device", 2)) return 1;
  std::printf("ok other_device\n");
  return 0;
}

int import_back() {
  CUdeviceptr pool_block, va;
  CHECK_CU(cuMemAlloc_v2(&pool_block, kBytes));
  std::memset(reinterpret_cast<void*>(pool_block), 0x3c, kBytes);
  const CUmemAllocationProp prop = prop_on(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle handle, imported;
  CHECK_CU(cuMemCreate(&handle, kBytes, &prop, 0));
  int fd = -1;
  CHECK_CU(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CHECK_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(uintptr_t(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  // The import holds the allocation: the creator's reference may go.
  CHECK_CU(cuMemRelease(handle));
  if (map_and_fill(imported, 0, 0x5a, &va)) return 1;
  if (sleep_held("import", pool_block, va, 1)) return 1;
  CHECK_CU(cuMemUnmap(va, kBytes));
  CHECK_CU(cuMemRelease(imported));
  CHECK_CU(cuMemAddressFree(va, kBytes));
  close(fd);
  CHECK_CU(cuMemFree_v2(pool_block));
  if (sleep_released("import", 1)) return 1;
  std::printf("ok import\n");
  return 0;
}

}  // namespace

// Sleep and wake by tag of the program's own memory.
namespace {

using SleepTagFn = int (*)(const char*, unsigned);
using WakeTagFn = int (*)(const char*);
using RegionBeginFn = int (*)(const char*, unsigned);
using RegionEndFn = int (*)();

struct Api {
  SleepTagFn sleep_tag = nullptr;
  WakeTagFn wake_tag = nullptr;
  RegionBeginFn begin = nullptr;
  RegionEndFn end = nullptr;
  bool load() {
    sleep_tag = reinterpret_cast<SleepTagFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep_tag"));
    wake_tag = reinterpret_cast<WakeTagFn>(dlsym(RTLD_DEFAULT, "pagefast_wake_tag"));
    begin = reinterpret_cast<RegionBeginFn>(dlsym(RTLD_DEFAULT, "pagefast_region_begin"));
    end = reinterpret_cast<RegionEndFn>(dlsym(RTLD_DEFAULT, "pagefast_region_end"));
    return sleep_tag && wake_tag && begin && end;
  }
};

// One handle of the program's, mapped in its own reservation.
struct Own {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
};

// Creates (in region `tag` when not null) and maps a handle, filled with v.
int make(Api& api, const char* tag, unsigned region_flags, CUmemAllocationHandleType types, unsigned char v, Own* own) {
  if (tag && api.begin(tag, region_flags) != 0) return fail("region begin");
  const CUmemAllocationProp prop = prop_on(0, types);
  CHECK_CU(cuMemCreate(&own->handle, kBytes, &prop, 0));
  if (tag && api.end() != 0) return fail("region end");
  return map_and_fill(own->handle, 0, v, &own->va);
}

int drop(const Own& own) {
  CHECK_CU(cuMemUnmap(own.va, kBytes));
  CHECK_CU(cuMemRelease(own.handle));
  CHECK_CU(cuMemAddressFree(own.va, kBytes));
  return 0;
}

size_t free_now() {
  size_t free_bytes = 0, total = 0;
  cuMemGetInfo_v2(&free_bytes, &total);
  return free_bytes;
}

// Every device byte free again, as the program sees it (what the own-VMM
// cache keeps idle counts as free), once it released everything.
int all_free() {
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  if (free_bytes != total) return fail("device memory stayed taken");
  return 0;
}

// The program's value works for every call that takes one.
int handle_works(const Own& own, bool exportable) {
  CUmemAllocationProp prop = {};
  CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&prop, own.handle));
  if (prop.location.id != 0 || prop.type != CU_MEM_ALLOCATION_TYPE_PINNED) return fail("properties");
  CUmemGenericAllocationHandle retained = 0;
  CHECK_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(own.va)));
  if (retained != own.handle) return fail("retain gives another value than the program's");
  CHECK_CU(cuMemRelease(retained));
  // Mapped a second time elsewhere, and unmapped.
  CUdeviceptr second = 0;
  CHECK_CU(cuMemAddressReserve(&second, kBytes, 0, 0, 0));
  CHECK_CU(cuMemMap(second, kBytes, 0, own.handle, 0));
  CHECK_CU(cuMemUnmap(second, kBytes));
  CHECK_CU(cuMemAddressFree(second, kBytes));
  if (exportable) {
    int fd = -1;
    CHECK_CU(cuMemExportToShareableHandle(&fd, own.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
  }
  return 0;
}

// Two tags (keep, discard) and untagged memory: a tagged sleep releases
// the tag's memory only; the calls on a handle asleep answer as documented;
// wake brings the kept bytes back and the program's values keep working.
int tagged(Api& api) {
  Own untagged, kept, discarded;
  if (make(api, nullptr, 0, CU_MEM_HANDLE_TYPE_NONE, 0x11, &untagged) ||
      make(api, "weights", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0x5a, &kept) ||
      make(api, "cache", 0, CU_MEM_HANDLE_TYPE_NONE, 0x77, &discarded))
    return 1;
  // The kept handle's second half also mapped elsewhere (at its offset),
  // and mapped a third time then unmapped (the own-VMM cache defers that
  // unmap: sleep must unmap it for real, or the memory stays).
  constexpr size_t kHalf = kBytes / 2;
  std::memset(reinterpret_cast<void*>(kept.va + kHalf), 0x5b, kHalf);
  CUdeviceptr half = 0, third = 0;
  CHECK_CU(cuMemAddressReserve(&half, kHalf, 0, 0, 0));
  CHECK_CU(cuMemMap(half, kHalf, kHalf, kept.handle, 0));
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  CHECK_CU(cuMemSetAccess(half, kHalf, &desc, 1));
  CHECK_CU(cuMemAddressReserve(&third, kBytes, 0, 0, 0));
  CHECK_CU(cuMemMap(third, kBytes, 0, kept.handle, 0));
  CHECK_CU(cuMemUnmap(third, kBytes));
  const size_t before = free_now();
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep of weights");
  if (free_now() != before + kBytes) return fail("free memory did not rise by the tag's bytes");
  CUmemAllocationProp prop = {};
  CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&prop, kept.handle));
  if (prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return fail("recorded properties");
  CUdeviceptr other = 0;
  CHECK_CU(cuMemAddressReserve(&other, kBytes, 0, 0, 0));
  if (cuMemMap(other, kBytes, 0, kept.handle, 0) != CUDA_ERROR_ILLEGAL_STATE) return fail("map while asleep");
  int fd = -1;
  if (cuMemExportToShareableHandle(&fd, kept.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
      CUDA_ERROR_ILLEGAL_STATE)
    return fail("export while asleep");
  CUmemGenericAllocationHandle h = 0;
  if (cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(kept.va)) != CUDA_ERROR_ILLEGAL_STATE)
    return fail("retain while asleep");
  if (cuMemAddressFree(kept.va, kBytes) != CUDA_ERROR_INVALID_VALUE) return fail("address free while mapped asleep");
  CHECK_CU(cuMemAddressFree(other, kBytes));
  if (fakecuda_mapping_access(kept.va, 0) != ~0ull) return fail("still mapped while asleep");
  if (!all_bytes(untagged.va, kBytes, 0x11) || !all_bytes(discarded.va, kBytes, 0x77))
    return fail("a tagged sleep touched other memory");
  if (api.sleep_tag("cache", 0) != 0) return fail("sleep of cache");
  if (free_now() != before + 2 * kBytes) return fail("free memory did not rise by the second tag's bytes");
  if (api.wake_tag("weights") != 0 || api.wake_tag("cache") != 0) return fail("wake");
  if (free_now() != before) return fail("free memory after wake");
  if (!all_bytes(kept.va, kHalf, 0x5a) || !all_bytes(kept.va + kHalf, kHalf, 0x5b) || !all_bytes(half, kHalf, 0x5b))
    return fail("kept bytes changed");
  if (fakecuda_mapping_access(half, 0) != CU_MEM_ACCESS_FLAGS_PROT_READ) return fail("the second mapping's access");
  CHECK_CU(cuMemUnmap(half, kHalf));
  CHECK_CU(cuMemAddressFree(half, kHalf));
  CHECK_CU(cuMemAddressFree(third, kBytes));
  std::memset(reinterpret_cast<void*>(discarded.va), 0x78, kBytes);  // open again, writable
  if (fakecuda_mapping_access(kept.va, 0) != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return fail("access after wake");
  if (handle_works(kept, true) || handle_works(discarded, false) || handle_works(untagged, false)) return 1;
  if (drop(untagged) || drop(kept) || drop(discarded) || all_free()) return 1;
  std::printf("ok tagged\n");
  return 0;
}

// The driver hands a slept handle's value to a new handle: the program
// gets a value of pagefast's own for it, and both work.
int collide(Api& api) {
  Own slept, fresh;
  if (make(api, "weights", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 0x5a, &slept)) return 1;
  if (api.sleep_tag("weights", 0) != 0) return fail("sleep");
  if (fakecuda_set_next_handle(slept.handle) != 0) return fail("the fake kept the slept handle");
  if (make(api, nullptr, 0, CU_MEM_HANDLE_TYPE_NONE, 0x33, &fresh)) return 1;
  if (fresh.handle == slept.handle) return fail("a new handle got a value the program holds");
  if (api.wake_tag("weights") != 0) return fail("wake");
  if (!all_bytes(slept.va, kBytes, 0x5a) || !all_bytes(fresh.va, kBytes, 0x33)) return fail("bytes");
  if (handle_works(slept, false) || handle_works(fresh, false)) return 1;
  if (drop(fresh) || drop(slept) || all_free()) return 1;
  std::printf("ok collide\n");
  return 0;
}

// Release and unmap while asleep are the program's: wake does not bring
// back what it let go; a retain taken before sleep is kept.
int asleep_calls(Api& api) {
  Own gone, retained;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 1, &gone) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 2, &retained))
    return 1;
  CUmemGenericAllocationHandle again = 0;
  CHECK_CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(retained.va)));
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  CHECK_CU(cuMemRelease(gone.handle));
  if (cuMemRelease(gone.handle) != CUDA_ERROR_INVALID_VALUE) return fail("a second release while asleep");
  CHECK_CU(cuMemUnmap(gone.va, kBytes));
  if (cuMemUnmap(gone.va, kBytes) != CUDA_ERROR_INVALID_VALUE) return fail("a second unmap");
  CHECK_CU(cuMemAddressFree(gone.va, kBytes));
  CHECK_CU(cuMemRelease(retained.handle));  // one of two references
  if (api.wake_tag("t") != 0) return fail("wake");
  if (free_now() != before + kBytes) return fail("wake brought back memory the program let go");
  if (!all_bytes(retained.va, kBytes, 2)) return fail("bytes");
  if (drop(retained) || all_free()) return 1;
  std::printf("ok asleep_calls\n");
  return 0;
}

// The driver refuses at wake: still asleep, nothing leaked; wake again works.
int wake_fail(Api& api) {
  Own a, b;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 3, &a) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 4, &b))
    return 1;
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  for (const char* plan : {"cuMemCreate:2", "cuMemMap:2", "cuMemcpyHtoDAsync_v2:2"}) {
    fakecuda_set_fail(plan);
    if (api.wake_tag("t") != -1) return fail(plan);
    if (free_now() != before + 2 * kBytes) return fail("a failed wake left memory taken");
    CUdeviceptr other = 0;
    CHECK_CU(cuMemAddressReserve(&other, kBytes, 0, 0, 0));
    if (cuMemMap(other, kBytes, 0, a.handle, 0) != CUDA_ERROR_ILLEGAL_STATE) return fail("not asleep after a failure");
    CHECK_CU(cuMemAddressFree(other, kBytes));
  }
  if (api.wake_tag("t") != 0) return fail("wake again");
  if (!all_bytes(a.va, kBytes, 3) || !all_bytes(b.va, kBytes, 4)) return fail("bytes");
  if (drop(a) || drop(b) || all_free()) return 1;
  std::printf("ok wake_fail\n");
  return 0;
}

// 200 rounds of sleep and wake: the bytes stay, nothing leaks (device
// memory, page-locked host memory, handles). No pool on the device: the
// copies go through a provider made for them.
int cycles(Api& api) {
  Own a, b;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 5, &a) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 6, &b))
    return 1;
  const size_t before = free_now();
  fakecuda_reset_counts();
  for (int i = 0; i < 200; ++i) {
    if (api.sleep_tag("t", 0) != 0) return fail("sleep");
    if (free_now() != before + 2 * kBytes) return fail("asleep: not released");
    if (api.wake_tag("t") != 0) return fail("wake");
    if (free_now() != before) return fail("awake: not made again");
    reinterpret_cast<unsigned char*>(a.va)[i] = 0x80;  // the program writes between rounds
  }
  for (int i = 0; i < 200; ++i)
    if (reinterpret_cast<unsigned char*>(a.va)[i] != 0x80) return fail("a write between rounds was lost");
  if (!all_bytes(a.va + 200, kBytes - 200, 5) || !all_bytes(b.va, kBytes, 6)) return fail("bytes");
  // The host copies: page-locked once per handle and kept between rounds
  // (sleep_host_keep), all given back by pagefast_pool_trim.
  if (fakecuda_call_count("cuMemHostAlloc") != 0 || fakecuda_call_count("cuMemHostRegister_v2") != 2)
    return fail("host copies: not page-locked once per handle and kept between rounds");
  auto trim = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "pagefast_pool_trim"));
  if (!trim) return fail("pagefast_pool_trim not exported");
  trim(0);
  if (fakecuda_call_count("cuMemHostUnregister") != 2) return fail("host copies: not all given back by the trim");
  if (fakecuda_call_count("cuMemCreate") != 400 || fakecuda_call_count("cuMemRelease") != 400)
    return fail("handles: not one made and released per handle and round");
  if (drop(a) || drop(b) || all_free()) return 1;
  std::printf("ok cycles\n");
  return 0;
}

// With a pool on the device, the program's own memory sleeps through the
// pool's copy threads and host memory: no host copy of the driver's
// (cuMemHostAlloc), the host memory page-locked on the first round only
// (sleep_host_keep, the default; with it off, every round), and a copy
// back the driver refuses leaves every handle asleep with its contents
// whole, so that the next wake brings every byte back.
int copy_threads(Api& api) {
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc_v2(&block, kBytes));  // the device's pool: its provider copies
  Own a, b;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 7, &a) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 8, &b))
    return 1;
  const char* conf = std::getenv("PAGEFAST_CONF");
  const bool host_keep = !conf || !std::strstr(conf, "sleep_host_keep:off");
  const size_t before = free_now();
  fakecuda_reset_counts();
  constexpr int kRounds = 3;
  for (int i = 0; i < kRounds; ++i) {
    if (api.sleep_tag("t", 0) != 0) return fail("sleep");
    if (free_now() != before + 2 * kBytes) return fail("asleep: not released");
    if (api.wake_tag("t") != 0) return fail("wake");
    if (free_now() != before) return fail("awake: not made again");
    reinterpret_cast<unsigned char*>(b.va)[i] = 0x81;  // the program writes between rounds
  }
  if (fakecuda_call_count("cuMemHostAlloc") != 0)
    return fail("host copies of the driver's (cuMemHostAlloc), not the pool's host memory");
  const long registered = fakecuda_call_count("cuMemHostRegister_v2");
  if (host_keep ? registered != 2 : registered != 2 * kRounds)
    return fail("host memory not page-locked once per handle (kept), or once per round (sleep_host_keep:off)");
  if (fakecuda_call_count("cuMemcpyDtoHAsync_v2") != 2 * kRounds)
    return fail("the contents did not go through the copy threads' streams");
  // A copy back refused: nothing wakes, the contents stay whole.
  if (api.sleep_tag("t", 0) != 0) return fail("sleep before the refused copy");
  fakecuda_set_fail("cuMemcpyHtoDAsync_v2:2");
  if (api.wake_tag("t") != -1) return fail("a wake whose copy back was refused did not answer -1");
  fakecuda_set_fail("");
  if (free_now() != before + 2 * kBytes) return fail("a failed wake left memory taken");
  if (api.wake_tag("t") != 0) return fail("wake again");
  for (int i = 0; i < kRounds; ++i)
    if (reinterpret_cast<unsigned char*>(b.va)[i] != 0x81) return fail("a write between rounds was lost");
  if (!all_bytes(a.va, kBytes, 7) || !all_bytes(b.va + kRounds, kBytes - kRounds, 8)) return fail("bytes");
  if (drop(a) || drop(b)) return 1;
  CHECK_CU(cuMemFree_v2(block));
  if (all_free()) return 1;
  std::printf("ok copy_threads\n");
  return 0;
}

// A keep region's own VMM memory on a device with no pool: the trim thread
// page-locks its host copies ahead, as it does a pool's live blocks, so
// that the first sleep page-locks nothing (with sleep_prelock:0 the sleep
// page-locks them itself).
int prelock(Api& api) {
  fakecuda_reset_counts();
  Own a, b;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 9, &a) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 10, &b))
    return 1;
  const char* conf = std::getenv("PAGEFAST_CONF");
  const bool ahead = !conf || !std::strstr(conf, "sleep_prelock:0");
  // The trim thread's rounds (100 ms apart; the layout must stand still
  // for one): waited for by its effect, 60 s at most.
  for (int i = 0; ahead && i < 600 && fakecuda_call_count("cuMemHostRegister_v2") < 2; ++i) usleep(100 * 1000);
  const long before = fakecuda_call_count("cuMemHostRegister_v2");
  if (ahead && before != 2) return fail("the host copies were not page-locked ahead");
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  const long during = fakecuda_call_count("cuMemHostRegister_v2") - before;
  if (ahead ? during != 0 : during != 2)
    return fail("the sleep page-locked host memory (ahead), or did not (none ahead)");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (!all_bytes(a.va, kBytes, 9) || !all_bytes(b.va, kBytes, 10)) return fail("bytes");
  if (drop(a) || drop(b) || all_free()) return 1;
  std::printf("ok prelock\n");
  return 0;
}

// A pool region's wake (chunk_size:2M: three blocks, three chunks) copies
// its first chunk while it makes the next: with the second chunk's
// cuMemCreate held, the first chunk's copy back goes (before, every chunk
// was made before any copy began, so none went while it was held).
int wake_overlap(Api& api) {
  constexpr int kChunks = 3;
  CUdeviceptr blocks[kChunks];
  if (api.begin("w", PAGEFAST_REGION_KEEP) != 0) return fail("region begin");
  for (int i = 0; i < kChunks; ++i) CHECK_CU(cuMemAlloc_v2(&blocks[i], 2u << 20));
  if (api.end() != 0) return fail("region end");
  for (int i = 0; i < kChunks; ++i) std::memset(reinterpret_cast<void*>(blocks[i]), 0x20 + i, 2u << 20);
  if (api.sleep_tag("w", 0) != 0) return fail("sleep");
  int fds[2];
  if (pipe(fds) != 0) return fail("pipe");
  fakecuda_reset_counts();
  fakecuda_create_gate(fds[0], 2);
  int woke = -9;
  std::thread waker([&] { woke = api.wake_tag("w"); });
  // Waited for by its effect: 60 s at most (it never comes without the overlap).
  for (int i = 0; i < 600 && fakecuda_call_count("cuMemcpyHtoDAsync_v2") < 1; ++i) usleep(100 * 1000);
  const bool overlapped = fakecuda_call_count("cuMemcpyHtoDAsync_v2") >= 1;
  if (write(fds[1], "x", 1) != 1) return fail("write");
  waker.join();
  close(fds[0]);
  close(fds[1]);
  if (!overlapped) return fail("no chunk was copied back while the next was made");
  if (woke != 0) return fail("wake");
  for (int i = 0; i < kChunks; ++i)
    if (!all_bytes(blocks[i], 2u << 20, 0x20 + i)) return fail("bytes");
  for (int i = 0; i < kChunks; ++i) CHECK_CU(cuMemFree_v2(blocks[i]));
  std::printf("ok wake_overlap\n");
  return 0;
}

// A forked child while asleep forwards everything and does not crash.
int fork_asleep(Api& api) {
  Own a;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 7, &a)) return 1;
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  const pid_t child = fork();
  if (child == 0) {
    CUmemAllocationProp prop = {};
    cuMemGetAllocationPropertiesFromHandle(&prop, a.handle);
    cuMemRelease(a.handle);
    cuMemUnmap(a.va, kBytes);
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail("the child");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (!all_bytes(a.va, kBytes, 7)) return fail("bytes");
  if (handle_works(a, false) || drop(a) || all_free()) return 1;
  std::printf("ok fork\n");
  return 0;
}

// What sleep leaves resident: an exported handle and one the program maps
// nowhere; the answer is 1 and the rest of the tag sleeps.
int resident(Api& api) {
  Own exported, slept;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 8, &exported) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 9, &slept))
    return 1;
  int fd = -1;
  CHECK_CU(cuMemExportToShareableHandle(&fd, exported.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (api.begin("t", PAGEFAST_REGION_KEEP) != 0) return fail("region begin");
  const CUmemAllocationProp prop = prop_on(0, CU_MEM_HANDLE_TYPE_NONE);
  CUmemGenericAllocationHandle unmapped = 0;
  CHECK_CU(cuMemCreate(&unmapped, kBytes, &prop, 0));
  if (api.end() != 0) return fail("region end");
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 1) return fail("the answer is not 1 with memory resident");
  if (free_now() != before + kBytes) return fail("not only the mapped, unshared handle slept");
  if (!all_bytes(exported.va, kBytes, 8)) return fail("the exported handle was touched");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (!all_bytes(slept.va, kBytes, 9)) return fail("bytes");
  CHECK_CU(cuMemRelease(unmapped));
  close(fd);
  if (drop(exported) || drop(slept) || all_free()) return 1;
  std::printf("ok resident\n");
  return 0;
}

// A sleep between the program's cuMemMap and its cuMemSetAccess (the
// mapping has no access yet): the handle sleeps, the set access succeeds
// (recorded), and wake opens the mapping with it.
int map_gap(Api& api) {
  if (api.begin("t", PAGEFAST_REGION_KEEP) != 0) return fail("region begin");
  const CUmemAllocationProp prop = prop_on(0, CU_MEM_HANDLE_TYPE_NONE);
  Own own;
  CHECK_CU(cuMemCreate(&own.handle, kBytes, &prop, 0));
  if (api.end() != 0) return fail("region end");
  CHECK_CU(cuMemAddressReserve(&own.va, kBytes, 0, 0, 0));
  CHECK_CU(cuMemMap(own.va, kBytes, 0, own.handle, 0));
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  if (free_now() != before + kBytes) return fail("the mapped handle did not sleep");
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = 0;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult set = cuMemSetAccess(own.va, kBytes, &desc, 1);
  if (set != CUDA_SUCCESS) return fail("cuMemSetAccess while the mapping sleeps");
  CUmemAccessDesc half = desc;
  if (cuMemSetAccess(own.va, kBytes / 2, &half, 1) != CUDA_ERROR_INVALID_VALUE)
    return fail("cuMemSetAccess over part of a mapping asleep");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (fakecuda_mapping_access(own.va, 0) != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return fail("no access after wake");
  std::memset(reinterpret_cast<void*>(own.va), 0x42, kBytes);
  if (!all_bytes(own.va, kBytes, 0x42)) return fail("bytes");
  if (drop(own) || all_free()) return 1;
  std::printf("ok map_gap\n");
  return 0;
}

// A handle the program released while it still maps it (the memory lives
// through the mapping): it sleeps as any other mapped handle, with the
// own-VMM cache on or off, and its last unmap after wake frees it.
int released_mapped(Api& api) {
  Own own;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 0x24, &own)) return 1;
  CHECK_CU(cuMemRelease(own.handle));
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 0) return fail("the sleep answer is not 0");
  if (free_now() != before + kBytes) return fail("the released, mapped handle stayed resident");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (free_now() != before) return fail("not made again");
  if (!all_bytes(own.va, kBytes, 0x24)) return fail("bytes");
  CHECK_CU(cuMemUnmap(own.va, kBytes));
  CHECK_CU(cuMemAddressFree(own.va, kBytes));
  if (all_free()) return 1;
  std::printf("ok released_mapped\n");
  return 0;
}

// Memory bound to a multicast object (cuMulticastBindMem, and
// cuMulticastBindAddr inside a mapping): sleep leaves it resident and
// names it (the answer 1) and sleeps the rest of the tag; a handle whose
// value the driver changed across a sleep binds by the program's value.
int multicast(Api& api) {
  CUmulticastObjectProp mc_prop = {};
  mc_prop.numDevices = 1;
  mc_prop.size = 2 * kBytes;
  CUmemGenericAllocationHandle mc = 0;
  CHECK_CU(cuMulticastCreate(&mc, &mc_prop));
  CHECK_CU(cuMulticastAddDevice(mc, 0));
  Own by_handle, by_addr, slept, fresh;
  if (make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 0x31, &by_handle) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 0x32, &by_addr) ||
      make(api, "t", PAGEFAST_REGION_KEEP, CU_MEM_HANDLE_TYPE_NONE, 0x33, &slept))
    return 1;
  CHECK_CU(cuMulticastBindMem(mc, 0, by_handle.handle, 0, kBytes, 0));
  CHECK_CU(cuMulticastBindAddr(mc, kBytes, by_addr.va + kBytes / 4, kBytes / 4, 0));
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 1) return fail("the answer is not 1 with bound memory resident");
  if (free_now() != before + kBytes) return fail("not only the unbound handle slept");
  if (!all_bytes(by_handle.va, kBytes, 0x31) || !all_bytes(by_addr.va, kBytes, 0x32))
    return fail("bound memory was touched");
  // The driver gives the slept handle's value to another: wake makes it
  // with a value of the driver's own.
  if (fakecuda_set_next_handle(slept.handle) != 0) return fail("the fake kept the slept handle");
  if (make(api, nullptr, 0, CU_MEM_HANDLE_TYPE_NONE, 0x34, &fresh)) return 1;
  if (api.wake_tag("t") != 0) return fail("wake");
  if (!all_bytes(slept.va, kBytes, 0x33)) return fail("bytes");
  if (cuMulticastBindMem(mc, kBytes, slept.handle, 0, kBytes, 0) != CUDA_SUCCESS)
    return fail("the program's value of a woken handle does not bind");
  const size_t all_bound = free_now();
  if (api.sleep_tag("t", 0) != 1) return fail("the answer is not 1 with every handle bound");
  if (free_now() != all_bound) return fail("bound memory slept");
  if (api.wake_tag("t") != 0) return fail("second wake");
  CHECK_CU(cuMulticastUnbind(mc, 0, 0, 2 * kBytes));
  if (drop(by_handle) || drop(by_addr) || drop(slept) || drop(fresh) || all_free()) return 1;
  std::printf("ok multicast\n");
  return 0;
}

// A pool-only region (PAGEFAST_REGION_POOL_ONLY, as pagefast's
// torch_memory_saver drop-in opens them): the pool's memory allocated
// inside carries the tag; a library's own cuMemCreate buffer made inside
// does not (the tag's sleep leaves it mapped, bytes and all), unless a
// plain region nested inside is the innermost at its creation.
int pool_only(Api& api) {
  if (api.begin("t", PAGEFAST_REGION_POOL_ONLY) != 0) return fail("region begin");
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc_v2(&block, kBytes));
  std::memset(reinterpret_cast<void*>(block), 0x21, kBytes);
  const CUmemAllocationProp prop = prop_on(0, CU_MEM_HANDLE_TYPE_NONE);
  Own library, nested, after;
  CHECK_CU(cuMemCreate(&library.handle, kBytes, &prop, 0));
  if (api.begin("t", 0) != 0) return fail("nested begin");
  CHECK_CU(cuMemCreate(&nested.handle, kBytes, &prop, 0));
  if (api.end() != 0) return fail("nested end");
  CHECK_CU(cuMemCreate(&after.handle, kBytes, &prop, 0));
  if (api.end() != 0) return fail("region end");
  if (map_and_fill(library.handle, 0, 0x44, &library.va) || map_and_fill(nested.handle, 0, 0x55, &nested.va) ||
      map_and_fill(after.handle, 0, 0x66, &after.va))
    return 1;
  const size_t before = free_now();
  if (api.sleep_tag("t", 0) != 0) return fail("sleep");
  if (fakecuda_mapping_access(nested.va, 0) != ~0ull) return fail("the nested plain region's handle stayed mapped");
  if (!all_bytes(library.va, kBytes, 0x44) || !all_bytes(after.va, kBytes, 0x66))
    return fail("a library's own buffer made in the pool-only region was taken by the sleep");
  if (free_now() < before + 2 * kBytes) return fail("the tag's pool memory and nested handle did not go");
  if (api.wake_tag("t") != 0) return fail("wake");
  if (!all_bytes(library.va, kBytes, 0x44) || !all_bytes(after.va, kBytes, 0x66)) return fail("bytes after wake");
  std::memset(reinterpret_cast<void*>(block), 0x22, kBytes);  // mapped again, writable
  std::memset(reinterpret_cast<void*>(nested.va), 0x56, kBytes);
  if (drop(library) || drop(nested) || drop(after)) return 1;
  CHECK_CU(cuMemFree_v2(block));
  std::printf("ok pool_only\n");
  return 0;
}

}  // namespace

int own_vmm_sleep_case(const std::string& name) {
  Api api;
  if (!api.load()) return fail("the tagged sleep API is not exported");
  if (name == "tagged") return tagged(api);
  if (name == "collide") return collide(api);
  if (name == "asleep_calls") return asleep_calls(api);
  if (name == "wake_fail") return wake_fail(api);
  if (name == "cycles") return cycles(api);
  if (name == "fork") return fork_asleep(api);
  if (name == "resident") return resident(api);
  if (name == "map_gap") return map_gap(api);
  if (name == "released_mapped") return released_mapped(api);
  if (name == "multicast") return multicast(api);
  if (name == "pool_only") return pool_only(api);
  if (name == "copy_threads") return copy_threads(api);
  if (name == "prelock") return prelock(api);
  if (name == "wake_overlap") return wake_overlap(api);
  return fail("unknown case");
}

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: own_vmm_preload other_device|import|<sleep case>");
  if (start()) return 1;
  const std::string c = argv[1];
  if (c == "other_device") return other_device();
  if (c == "import") return import_back();
  return own_vmm_sleep_case(c);
}
