// tests/pool/own_vmm_preload.cpp: the program's own VMM memory that
// pagefast_sleep must report as resident (docs/POOL.md "Sleep and wake"),
// where the ledger of it (policy/own_vmm/ledger.h) has to see past a plain
// cuMemCreate:
//   other_device  the program's memory on device 1, where pagefast never
//                 allocated (no pool), beside a pool block on device 0;
//   import        a handle exported as a file descriptor, imported back
//                 and released once (the import still holds the memory),
//                 then mapped.
// Each sleeps with keep and expects the answer 1 and the bytes intact after
// wake, then releases everything and expects 0 with the devices free.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

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

// Sleep with the program's memory held: 1, and every byte back after wake.
int sleep_held(const char* name, CUdeviceptr pool_block, CUdeviceptr own) {
  auto sleep_fn = reinterpret_cast<SleepFn>(dlsym(RTLD_DEFAULT, "pagefast_sleep"));
  auto wake_fn = reinterpret_cast<WakeFn>(dlsym(RTLD_DEFAULT, "pagefast_wake"));
  if (!sleep_fn || !wake_fn) return fail("pagefast_sleep/wake not exported");
  const int answer = sleep_fn(PAGEFAST_SLEEP_KEEP);
  std::printf("%s: sleep answer %d\n", name, answer);
  if (answer != 1) return fail("the answer is not 1 with the program's own memory resident");
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
  if (sleep_held("other_device", pool_block, va)) return 1;
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
  if (sleep_held("import", pool_block, va)) return 1;
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

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: own_vmm_preload other_device|import");
  if (start()) return 1;
  const std::string c = argv[1];
  if (c == "other_device") return other_device();
  if (c == "import") return import_back();
  return fail("unknown case");
}
