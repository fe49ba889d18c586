// tests/pool/headroom_preload.cpp: a CUDA driver program for the
// headroom and out-of-memory cases (docs/POOL.md "Headroom"), linked with
// the fake libcuda.so.1 and run by headroom_cases.py with and without
// LD_PRELOAD=libpagefast.so. Each subcommand prints one "ok ..." line, or
// "FAIL ..." and exits 1.
//
//   recover    fill the device through cuMemAlloc until out of memory, free
//              everything, then a module load, a cuMemAllocAsync and a
//              cuMemCreate each succeed (the driver needs what the pool
//              holds idle), and the pool still serves cuMemAlloc
//   lazy_kernel a module loaded before the fill gets its first function
//              after it: its kernels load then (lazy loading) and need the
//              memory the pool holds idle
//   headroom   after the same fill and free, the device's really free
//              memory comes back to at least HEADROOM bytes (argv[2])
//              while the pool keeps the rest idle
//   pressure   the pool holds idle memory; another "process" takes device
//              memory until less than HEADROOM is free: the pool gives
//              back what brings it to the headroom, and keeps the rest
//   async_then_alloc  75% of the device from cuMemAllocAsync, freed with
//              cuMemFreeAsync, then 30% through cuMemAlloc, before and
//              after the program's cuCtxSynchronize: prints both answers
//              (the driver alone refuses before, as its stream-ordered
//              pool keeps what was freed until a synchronization; pagefast
//              synchronizes before it refuses, so it serves both)
//              (argv[2] "pending": first the pool holds freed blocks that
//              wait for a synchronization of its own; same answers)
//   free_async a pool block freed with cuMemFreeAsync is freed (a second
//              free is INVALID_VALUE, an interior pointer too), and its
//              memory is reused only after the stream's earlier work
//   serve      a mix of sizes, each written and checked, freed and
//              allocated again: whatever the configuration, an allocation
//              that cuMemGetInfo leaves room for succeeds and holds its data
//   fill_mix   fills the device with a deterministic mix of sizes until
//              every size is refused, each size until refused or (argv[2]
//              "turns") one of each in turn; prints the bytes served before
//              the first refusal and in all (the sizes: argv[3...], or a
//              mix of 512 bytes to 64 MiB)
//   fill_small one 600 KiB block, 2 MiB blocks until refused, then 1000
//              bytes: served (the driver alone serves it from its own page)
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fakecuda.h"
#include "preload_program.h"

namespace {

using preload_program::fail;
using preload_program::g_context;
using preload_program::start;

constexpr size_t kMiB = size_t(1) << 20;

// cuMemAlloc in `piece`-byte blocks until the driver (or the pool) says
// out of memory; returns the blocks.
std::vector<CUdeviceptr> fill(size_t piece) {
  std::vector<CUdeviceptr> held;
  CUdeviceptr p = 0;
  while (cuMemAlloc_v2(&p, piece) == CUDA_SUCCESS) held.push_back(p);
  return held;
}

int fill_and_free(size_t* filled_bytes) {
  std::vector<CUdeviceptr> held = fill(64 * kMiB);
  std::vector<CUdeviceptr> small = fill(2 * kMiB);
  if (held.empty()) return fail("nothing could be allocated");
  *filled_bytes = held.size() * 64 * kMiB + small.size() * 2 * kMiB;
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree_v2(p));
  for (CUdeviceptr p : small) CHECK_CU(cuMemFree_v2(p));
  return 0;
}

// Polls until the device's really free memory is at least `bytes`: the
// pagefast-trim thread gives idle memory back in steps of 100 ms. The
// bound is a guard against a hang, not the thing checked.
bool wait_free_at_least(unsigned long long bytes) {
  for (int i = 0; i < 1200; ++i) {
    if (fakecuda_free_bytes(0) >= bytes) return true;
    usleep(50 * 1000);
  }
  return false;
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

int recover() {
  size_t filled = 0;
  if (fill_and_free(&filled)) return 1;
  // The driver's own memory: a module (FAKECUDA_MODULE_MEM), a
  // stream-ordered allocation, a handle of the program's own VMM.
  CUmodule module = nullptr;
  const char image[] = "a module";
  CHECK_CU(cuModuleLoadData(&module, image));
  CUdeviceptr async = 0;
  CHECK_CU(cuMemAllocAsync(&async, 256 * kMiB, nullptr));
  CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle handle = 0;
  CHECK_CU(cuMemCreate(&handle, 64 * kMiB, &prop, 0));
  // And the pool still serves the program.
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc_v2(&p, 64 * kMiB));
  CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuMemRelease(handle));
  CHECK_CU(cuMemFreeAsync(async, nullptr));
  CHECK_CU(cuModuleUnload(module));
  std::printf("ok recover filled %zu MiB\n", filled / kMiB);
  return 0;
}

int lazy_kernel() {
  CUmodule module = nullptr;
  const char image[] = "a module";
  CHECK_CU(cuModuleLoadData(&module, image));
  size_t filled = 0;
  if (fill_and_free(&filled)) return 1;
  CUfunction function = nullptr;
  CHECK_CU(cuModuleGetFunction(&function, module, "kernel"));
  CHECK_CU(cuModuleUnload(module));
  std::printf("ok lazy_kernel filled %zu MiB\n", filled / kMiB);
  return 0;
}

int headroom(unsigned long long headroom_bytes) {
  size_t filled = 0;
  if (fill_and_free(&filled)) return 1;
  if (!wait_free_at_least(headroom_bytes)) {
    std::printf("FAIL headroom: %llu MiB free, not %llu MiB\n", fakecuda_free_bytes(0) >> 20, headroom_bytes >> 20);
    return 1;
  }
  size_t free_seen = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_seen, &total));
  // What cuMemGetInfo reports free (the pool's idle memory counted) can
  // be had: the whole of it in one block.
  CUdeviceptr p = 0;
  const size_t whole = (free_seen - 64 * kMiB) & ~(2 * kMiB - 1);
  CHECK_CU(cuMemAlloc_v2(&p, whole));
  CHECK_CU(cuMemFree_v2(p));
  std::printf("ok headroom filled %zu MiB free %llu MiB reported %zu MiB\n", filled / kMiB,
              fakecuda_free_bytes(0) >> 20, free_seen / kMiB);
  return 0;
}

int pressure(unsigned long long headroom_bytes) {
  // 1 GiB in use, then idle.
  std::vector<CUdeviceptr> held;
  for (int i = 0; i < 16; ++i) {
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAlloc_v2(&p, 64 * kMiB));
    held.push_back(p);
  }
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree_v2(p));
  const unsigned long long free_before = fakecuda_free_bytes(0);
  if (free_before < headroom_bytes + 256 * kMiB) return fail("pressure: the device is too small for the case");
  // Another process takes all but half the headroom.
  const unsigned long long taken = free_before - headroom_bytes / 2;
  if (fakecuda_set_external_bytes(0, taken) != 0) return fail("pressure: external bytes refused");
  if (!wait_free_at_least(headroom_bytes)) {
    std::printf("FAIL pressure: %llu MiB free, not %llu MiB\n", fakecuda_free_bytes(0) >> 20, headroom_bytes >> 20);
    return 1;
  }
  const unsigned long long free_after = fakecuda_free_bytes(0);
  // Only the shortfall went back: the pool keeps the rest idle (counted
  // free by cuMemGetInfo, over what the device really has free).
  size_t reported = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&reported, &total));
  const unsigned long long kept = reported > free_after ? reported - free_after : 0;
  std::printf("pressure free %llu MiB kept idle %llu MiB\n", free_after >> 20, kept >> 20);
  if (kept < 512 * kMiB) return fail("pressure: the pool gave back more than the headroom needed");
  std::printf("ok pressure free %llu MiB (headroom %llu MiB)\n", free_after >> 20, headroom_bytes >> 20);
  fakecuda_set_external_bytes(0, 0);
  return 0;
}

int free_async() {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, 0));
  CUdeviceptr a = 0;
  CHECK_CU(cuMemAlloc_v2(&a, 4096));
  CHECK_CU(cuMemsetD8_v2(a, 0x11, 4096));
  // Work still queued on the stream when the block is freed: the block's
  // memory must not be handed out before it ran.
  int ok = 0;
  CHECK_CU(fakecuda_launch_delayed_check(stream, a, 4096, 0x11, 200, &ok));
  CHECK_CU(cuMemFreeAsync(a, stream));
  const CUresult again = cuMemFreeAsync(a, stream);
  CUdeviceptr b = 0;
  CHECK_CU(cuMemAlloc_v2(&b, 4096));
  const CUresult interior = cuMemFreeAsync(b + 256, stream);
  CHECK_CU(cuMemsetD8_v2(b, 0x22, 4096));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemFreeAsync(b, stream));
  CHECK_CU(cuMemFreeAsync(0, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuStreamDestroy_v2(stream));
  std::printf("free_async again %d interior %d kernel saw its data %d violations %llu\n", int(again), int(interior), ok,
              fakecuda_violations());
  if (again != CUDA_ERROR_INVALID_VALUE || interior != CUDA_ERROR_INVALID_VALUE) return fail("free_async answers");
  if (!ok || fakecuda_violations() != 0) return fail("free_async: reused before the stream's work ran");
  std::printf("ok free_async\n");
  return 0;
}

int async_then_alloc(bool pending) {
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  if (pending) {
    // Blocks of the pool's, freed and waiting for its synchronization:
    // its out-of-memory path then has a reason to synchronize.
    std::vector<CUdeviceptr> blocks;
    for (size_t bytes : {size_t(4096), 3 * kMiB, 32 * kMiB, 32 * kMiB}) {
      CUdeviceptr b = 0;
      CHECK_CU(cuMemAlloc_v2(&b, bytes));
      blocks.push_back(b);
    }
    for (CUdeviceptr b : blocks) CHECK_CU(cuMemFree_v2(b));
  }
  CUdeviceptr big = 0;
  // 75% rather than CuPy's 70%: the fake's context takes no memory.
  CHECK_CU(cuMemAllocAsync(&big, size_t(0.75 * double(total)), nullptr));
  CHECK_CU(cuMemFreeAsync(big, nullptr));
  const size_t rest = size_t(0.3 * double(total)) & ~(2 * kMiB - 1);
  CUdeviceptr p = 0;
  const CUresult before_sync = cuMemAlloc_v2(&p, rest);
  if (before_sync == CUDA_SUCCESS) CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuCtxSynchronize());
  const CUresult after_sync = cuMemAlloc_v2(&p, rest);
  if (after_sync == CUDA_SUCCESS) CHECK_CU(cuMemFree_v2(p));
  std::printf("async_then_alloc%s before the sync %d after %d\n", pending ? " pending" : "", int(before_sync),
              int(after_sync));
  if (after_sync != CUDA_SUCCESS) return fail("async_then_alloc: refused after the synchronization");
  std::printf("ok async_then_alloc\n");
  return 0;
}

// Every byte of [p, p + bytes) must be `value`.
bool holds(CUdeviceptr p, size_t bytes, unsigned char value) {
  const unsigned char* at = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (at[i] != value) return false;
  return true;
}

int serve() {
  const size_t sizes[] = {512, 4096, 100 * 1000, kMiB + 3, 3 * kMiB, 20 * kMiB, 64 * kMiB, 96 * kMiB};
  for (int round = 0; round < 2; ++round) {
    std::vector<std::pair<CUdeviceptr, size_t>> held;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
      size_t free_bytes = 0, total = 0;
      CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
      CUdeviceptr p = 0;
      const CUresult r = cuMemAlloc_v2(&p, sizes[i]);
      // Room for the block's granules and a slab beside: then it must fit.
      const size_t needed = ((sizes[i] + 2 * kMiB - 1) & ~(2 * kMiB - 1)) + 16 * kMiB;
      if (r == CUDA_ERROR_OUT_OF_MEMORY && needed > free_bytes) continue;
      if (r != CUDA_SUCCESS) {
        std::printf("FAIL serve: %zu bytes answered %d with %zu MiB reported free\n", sizes[i], int(r),
                    free_bytes / kMiB);
        return 1;
      }
      CHECK_CU(cuMemsetD8_v2(p, static_cast<unsigned char>(0x31 + i + round), sizes[i]));
      held.push_back({p, sizes[i]});
    }
    for (size_t i = 0; i < held.size(); ++i)
      if (!holds(held[i].first, held[i].second, static_cast<unsigned char>(0x31 + i + round)))
        return fail("serve: a block does not hold its data");
    for (const auto& b : held) CHECK_CU(cuMemFree_v2(b.first));
    std::printf("serve round %d: %zu blocks\n", round, held.size());
  }
  std::printf("ok serve\n");
  return 0;
}

// In turns (one of each size in turn, large to small, so that the device
// ends full of a mix) or in order (each size until refused, then the
// next); a size that is refused leaves the turn.
int fill_mix(bool in_turns, std::vector<size_t> sizes) {
  // Large and mid-size blocks, and small ones of exact size classes whose
  // slabs span several granules (so that rounding takes nothing).
  if (sizes.empty())
    sizes = {64 * kMiB, 20 * kMiB, 7 * kMiB, 3 * kMiB, kMiB, 917504, 589824, 294912, 229376, 98304, 12288, 4096, 512};
  const size_t count = sizes.size();
  std::vector<bool> refused(count, false);
  std::vector<CUdeviceptr> held;
  size_t served = 0, left = count;
  while (left) {
    for (size_t i = 0; i < count; ++i) {
      while (!refused[i]) {
        CUdeviceptr p = 0;
        const CUresult r = cuMemAlloc_v2(&p, sizes[i]);
        if (r == CUDA_SUCCESS) {
          held.push_back(p);
          served += sizes[i];
        } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
          refused[i] = true;
          --left;
          size_t free_bytes = 0, total = 0;
          CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
          if (left + 1 == count) std::printf("fill_mix first refusal after %zu bytes\n", served);
          std::printf("fill_mix %zu bytes refused at %zu MiB served, %zu MiB reported free\n", sizes[i], served / kMiB,
                      free_bytes / kMiB);
        } else {
          std::printf("FAIL fill_mix: %zu bytes answered %d\n", sizes[i], int(r));
          return 1;
        }
        if (in_turns) break;
      }
    }
  }
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree_v2(p));
  std::printf("fill_mix served %zu bytes in %zu blocks\n", served, held.size());
  std::printf("ok fill_mix\n");
  return 0;
}

// One block of 600 KiB, then 2 MiB blocks until refused, then a
// 1000-byte block, written and read back: the driver alone serves it from
// the page it sub-allocated for the first block, so pagefast must serve it
// too, from the free blocks beside its first one (which cuMemGetInfo
// reports free).
int fill_small() {
  CUdeviceptr first = 0, small = 0;
  CHECK_CU(cuMemAlloc_v2(&first, 600 * 1024));
  std::vector<CUdeviceptr> held;
  for (;;) {
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, 2 * kMiB);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
    CHECK_CU(r);
    held.push_back(p);
  }
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total));
  const CUresult r = cuMemAlloc_v2(&small, 1000);
  if (r != CUDA_SUCCESS) {
    std::printf("FAIL fill_small: 1000 bytes answered %d after %zu blocks of 2 MiB, %zu bytes reported free\n", int(r),
                held.size(), free_bytes);
    return 1;
  }
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CHECK_CU(cuMemGetAddressRange_v2(&base, &bytes, small));
  if (base != small || bytes != 1000) return fail("fill_small: the block's range is not what was asked for");
  CHECK_CU(cuMemsetD8_v2(small, 0x5a, 1000));
  if (!holds(small, 1000, 0x5a)) return fail("fill_small: the block does not hold its data");
  CHECK_CU(cuMemFree_v2(small));
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree_v2(p));
  CHECK_CU(cuMemFree_v2(first));
  std::printf("ok fill_small after %zu blocks of 2 MiB\n", held.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: headroom_preload <case> [headroom bytes]");
  if (start()) return 1;
  const std::string c = argv[1];
  const unsigned long long bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  if (c == "recover") return recover();
  if (c == "lazy_kernel") return lazy_kernel();
  if (c == "headroom") return headroom(bytes);
  if (c == "pressure") return pressure(bytes);
  if (c == "free_async") return free_async();
  if (c == "async_then_alloc") return async_then_alloc(argc > 2 && std::string(argv[2]) == "pending");
  if (c == "serve") return serve();
  if (c == "fill_small") return fill_small();
  if (c == "fill_mix") {
    std::vector<size_t> sizes;
    for (int i = 3; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
    return fill_mix(argc > 2 && std::string(argv[2]) == "turns", sizes);
  }
  return fail("unknown case");
}
