// tests/fakecuda/fakecuda_selftest.cpp: the fake driver's own tests, linked
// against it (fakecuda_dep). They pin what the rest of the test suite relies
// on: the error codes of docs/DRIVER-FACTS.md, VMM over mmap with direct CPU access,
// cuGetProcAddress variant selection (and that it hands out the fake's own
// functions even when the executable exports the same names), FAKECUDA_FAIL,
// capture invalidation, the delayed kernels and the call counters.
//
// Tests tagged [env] run in a second process with FAKECUDA_* set (see
// meson.build): the environment is read once, at cuInit.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fakecuda.h"

// The executable's own cuDriverGetVersion, exported (export_dynamic): a
// library without -Bsymbolic would hand this one out through its
// cuGetProcAddress, the way a preloaded libpagefast.so would be handed out.
extern "C" CUresult cuDriverGetVersion(int* version) {
  *version = 999;
  return CUDA_SUCCESS;
}

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;

#define CU_OK(expr) REQUIRE((expr) == CUDA_SUCCESS)

void* fake_handle() {
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return handle;
}

void* fake_symbol(const char* name) { return dlsym(fake_handle(), name); }

// cuInit plus the primary context of device 0, current on this thread.
CUcontext primary() {
  static CUcontext ctx = [] {
    REQUIRE(cuInit(0) == CUDA_SUCCESS);
    CUcontext c = nullptr;
    REQUIRE(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS);
    return c;
  }();
  CU_OK(cuCtxSetCurrent(ctx));
  return ctx;
}

size_t free_bytes() {
  size_t free = 0, total = 0;
  CU_OK(cuMemGetInfo(&free, &total));
  return free;
}

// Runs `body` in a child process; returns its wait status.
template <typename Body>
int in_child(Body body) {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

template <typename T>
T pointer_attribute(CUpointer_attribute attribute, CUdeviceptr ptr) {
  T value{};
  REQUIRE(cuPointerGetAttribute(&value, attribute, ptr) == CUDA_SUCCESS);
  return value;
}

unsigned char* host(CUdeviceptr ptr) { return reinterpret_cast<unsigned char*>(ptr); }

// A per-thread variant (_ptsz/_ptds), the way a program built for the
// per-thread default stream gets it.
template <typename Pfn>
Pfn per_thread_variant(const char* proc) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  REQUIRE(cuGetProcAddress_v2(proc, &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                              &status) == CUDA_SUCCESS);
  return reinterpret_cast<Pfn>(pfn);
}

}  // namespace

// Must stay the first test of the file: it sees the driver before cuInit.
TEST_CASE("before cuInit only the version, errors and entry points answer") {
  CUdeviceptr d = 0;
  REQUIRE(cuMemAlloc(&d, 1024) == CUDA_ERROR_NOT_INITIALIZED);
  int count = 0;
  REQUIRE(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
  const char* name = nullptr;
  CU_OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &name));
  REQUIRE(std::string(name) == "CUDA_ERROR_INVALID_VALUE");
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  CU_OK(cuGetProcAddress_v2("cuInit", &pfn, 12000, 0, &status));
  REQUIRE(pfn == fake_symbol("cuInit"));
}

TEST_CASE("devices look like one H200") {
  primary();
  REQUIRE(cuInit(1) == CUDA_ERROR_INVALID_VALUE);
  int count = 0;
  CU_OK(cuDeviceGetCount(&count));
  REQUIRE(count == 1);
  CUdevice dev = -1;
  CU_OK(cuDeviceGet(&dev, 0));
  REQUIRE(dev == 0);
  REQUIRE(cuDeviceGet(&dev, 1) == CUDA_ERROR_INVALID_DEVICE);
  int value = 0;
  CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  REQUIRE(value == 9);
  CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  REQUIRE(value == 1);
  CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
  REQUIRE(value == 1);
  CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
  REQUIRE(value == 6);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);
  size_t total = 0;
  CU_OK(cuDeviceTotalMem(&total, 0));
  REQUIRE(total == 16 * kGiB);
  char bus_id[32];
  CU_OK(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, 0));
  REQUIRE(std::string(bus_id) == "0000:06:00.0");
  CU_OK(cuDeviceGetByPCIBusId(&dev, "0000:06:00.0"));
  REQUIRE(dev == 0);
  CUuuid a, b;
  CU_OK(cuDeviceGetUuid(&a, 0));
  CU_OK(cuDeviceGetUuid_v2(&b, 0));
  REQUIRE(memcmp(a.bytes, b.bytes, 16) == 0);
  int can = -1;
  CU_OK(cuDeviceCanAccessPeer(&can, 0, 0));
  REQUIRE(can == 0);
  int version = 0;
  auto real_version =
      reinterpret_cast<PFN_cuDriverGetVersion_v2020>(fake_symbol("cuDriverGetVersion"));
  CU_OK(real_version(&version));
  REQUIRE(version == 13000);
}

TEST_CASE("contexts: stack, primary lifetime, errors") {
  primary();
  std::thread([] {
    CUdeviceptr d = 0;
    REQUIRE(cuMemAlloc(&d, 256) == CUDA_ERROR_INVALID_CONTEXT);
    CUcontext current = reinterpret_cast<CUcontext>(1);
    CU_OK(cuCtxGetCurrent(&current));
    REQUIRE(current == nullptr);
    REQUIRE(cuCtxPopCurrent(&current) == CUDA_ERROR_INVALID_CONTEXT);
    // A created context is pushed and owns its allocations.
    CUcontext mine = nullptr;
    CU_OK(cuCtxCreate(&mine, nullptr, 0, 0));  // cuCtxCreate_v4
    CU_OK(cuCtxGetCurrent(&current));
    REQUIRE(current == mine);
    CU_OK(cuMemAlloc(&d, 4 * kMiB));
    CU_OK(cuCtxDestroy(mine));
    CU_OK(cuCtxGetCurrent(&current));
    REQUIRE(current == nullptr);
    unsigned type = 0;
    REQUIRE(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) ==
            CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cuCtxDestroy(mine) == CUDA_ERROR_INVALID_CONTEXT);
    REQUIRE(cuCtxPushCurrent(nullptr) == CUDA_ERROR_INVALID_CONTEXT);
  }).join();
  // A second retain and release leave the (still retained) primary alive.
  CUcontext again = nullptr;
  CU_OK(cuDevicePrimaryCtxRetain(&again, 0));
  REQUIRE(again == primary());
  CU_OK(cuDevicePrimaryCtxRelease(0));
  unsigned flags = 0;
  int active = 0;
  CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  REQUIRE(active == 1);
  CUdevice dev = -1;
  CU_OK(cuCtxGetDevice(&dev));
  REQUIRE(dev == 0);
}

TEST_CASE("cuMemAlloc answers as docs/DRIVER-FACTS.md says the driver does") {
  primary();
  CUdeviceptr d = 0x1234;
  REQUIRE(cuMemAlloc(&d, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(d == 0);
  REQUIRE(cuMemAlloc(nullptr, 1024) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemAlloc(&d, 400 * kGiB) == CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemFree(0));
  size_t total = 0, free = 0;
  CU_OK(cuMemGetInfo(nullptr, &total));
  CU_OK(cuMemGetInfo(&free, nullptr));
  REQUIRE(total == 16 * kGiB);

  CUdeviceptr big = 0;
  CU_OK(cuMemAlloc(&big, kMiB));
  REQUIRE(big % (2 * kMiB) == 0);
  REQUIRE(free_bytes() == free - 2 * kMiB);
  CUdeviceptr small1 = 0, small2 = 0;
  CU_OK(cuMemAlloc(&small1, 100));
  CU_OK(cuMemAlloc(&small2, 100));
  REQUIRE(small1 % 512 == 0);
  REQUIRE(small2 - small1 == 512);

  CUdeviceptr base = 0;
  size_t bytes = 0;
  CU_OK(cuMemGetAddressRange(&base, &bytes, big + 12345));
  REQUIRE(base == big);
  REQUIRE(bytes == kMiB);
  REQUIRE(pointer_attribute<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, big + 7) == big);
  REQUIRE(pointer_attribute<size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, big + 7) == kMiB);
  REQUIRE(pointer_attribute<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, big) ==
          CU_MEMORYTYPE_DEVICE);
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, big) == 1);
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, big) == 0);
  REQUIRE(pointer_attribute<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, big) == primary());
  const auto id1 = pointer_attribute<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, small1);
  const auto id2 = pointer_attribute<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, small2);
  REQUIRE(id1 != id2);
  CUipcMemHandle ipc;
  CU_OK(cuIpcGetMemHandle(&ipc, big));
  REQUIRE(memcmp(ipc.reserved, "FAKEIPC2", 8) == 0);

  // Device memory is host memory the test can touch.
  host(big)[0] = 42;
  unsigned char back = 0;
  CU_OK(cuMemcpyDtoH(&back, big, 1));
  REQUIRE(back == 42);
  std::vector<unsigned char> pattern(4096, 0x5a), out(4096, 0);
  CU_OK(cuMemcpyHtoD(big, pattern.data(), pattern.size()));
  CU_OK(cuMemcpyDtoD(big + 8192, big, 4096));
  CU_OK(cuMemcpyDtoH(out.data(), big + 8192, 4096));
  REQUIRE(out == pattern);
  CU_OK(cuMemsetD32(big, 0xdeadbeef, 4));
  REQUIRE(reinterpret_cast<unsigned*>(big)[3] == 0xdeadbeef);
  REQUIRE(cuMemsetD32(big + 1, 0, 4) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemcpyHtoD(big + kMiB - 10, pattern.data(), 20) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(pattern.data()), 4) ==
          CUDA_ERROR_INVALID_VALUE);

  void* on_heap = std::malloc(64);
  REQUIRE(cuMemFree(big + 512) == CUDA_ERROR_INVALID_VALUE);  // interior
  REQUIRE(cuMemFree(reinterpret_cast<CUdeviceptr>(on_heap)) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFree(0x7654321000ULL) == CUDA_ERROR_INVALID_VALUE);  // random
  CU_OK(cuMemFree(big));
  REQUIRE(cuMemFree(big) == CUDA_ERROR_INVALID_VALUE);  // again
  REQUIRE(cuMemcpyHtoD(big, pattern.data(), 16) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree(small1));
  CU_OK(cuMemFree(small2));
  REQUIRE(free_bytes() == free);

  // Unknown pointers: an error one at a time, NULL values all at once.
  unsigned type = 0;
  REQUIRE(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                reinterpret_cast<CUdeviceptr>(on_heap)) ==
          CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned long long id = 77;
  int ordinal = 77;
  type = 77;
  void* data[3] = {&type, &id, &ordinal};
  CU_OK(cuPointerGetAttributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(on_heap)));
  REQUIRE(type == 0);
  REQUIRE(id == 0);
  REQUIRE(ordinal == CU_DEVICE_INVALID);
  REQUIRE(cuMemGetAddressRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(on_heap)) ==
          CUDA_ERROR_NOT_FOUND);
  std::free(on_heap);

  // Untouched memory costs nothing: 12 GiB of it on a CI box with 24.
  CUdeviceptr huge = 0;
  CU_OK(cuMemAlloc(&huge, 12 * kGiB));
  host(huge)[6 * kGiB] = 1;
  CU_OK(cuMemFree(huge));
  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  CU_OK(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4));
  REQUIRE(pitch == 1024);
  CU_OK(cuMemFree(pitched));
}

TEST_CASE("VMM: reserve, create, map, set access, touch, unmap, release") {
  primary();
  const CUmemAllocationProp prop = device_prop(0);
  size_t granularity = 0;
  CU_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  REQUIRE(granularity == 2 * kMiB);
  CU_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  REQUIRE(granularity == 2 * kMiB);
  const size_t free_before = free_bytes();

  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, 64 * kMiB, 0, 0, 0));
  REQUIRE(va % (2 * kMiB) == 0);
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  REQUIRE(cuMemCreate(&h, kMiB, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp bad = prop;
  bad.location.id = 5;
  REQUIRE(cuMemCreate(&h, 2 * kMiB, &bad, 0) == CUDA_ERROR_INVALID_DEVICE);
  bad = prop;
  bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  REQUIRE(cuMemCreate(&h, 2 * kMiB, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemCreate(&h, 4 * kMiB, &prop, 0));
  CU_OK(cuMemCreate(&h2, 2 * kMiB, &prop, 0));
  REQUIRE(free_bytes() == free_before - 6 * kMiB);

  REQUIRE(cuMemMap(va + 62 * kMiB, 4 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);  // spills out
  REQUIRE(cuMemMap(va + kMiB, 2 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);       // unaligned
  CU_OK(cuMemMap(va, 4 * kMiB, 0, h, 0));
  REQUIRE(cuMemMap(va + 2 * kMiB, 2 * kMiB, 0, h2, 0) == CUDA_ERROR_INVALID_VALUE);  // overlap
  CU_OK(cuMemMap(va + 4 * kMiB, 2 * kMiB, 0, h2, 0));

  // Mapped but not accessible: copies fail, the CPU faults.
  unsigned char byte = 1;
  REQUIRE(cuMemcpyHtoD(va, &byte, 1) == CUDA_ERROR_INVALID_VALUE);
  const int status = in_child([va] {
    signal(SIGSEGV, SIG_DFL);  // Catch2's handler would report the expected fault
    host(va)[0] = 1;
  });
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);

  const CUmemAccessDesc access = read_write(0);
  REQUIRE(cuMemSetAccess(va, 2 * kMiB, &access, 1) == CUDA_ERROR_INVALID_VALUE);  // part of one
  CU_OK(cuMemSetAccess(va, 6 * kMiB, &access, 1));  // two mappings at once
  memset(host(va), 0x7e, 6 * kMiB);
  std::vector<unsigned char> out(2 * kMiB);
  CU_OK(cuMemcpyDtoH(out.data(), va + 3 * kMiB, out.size()));  // across both mappings
  REQUIRE(out[0] == 0x7e);
  REQUIRE(out.back() == 0x7e);
  unsigned long long flags = 0;
  CU_OK(cuMemGetAccess(&flags, &access.location, va + 5 * kMiB));
  REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  REQUIRE(fakecuda_mapping_access(va + 5 * kMiB, 0) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  REQUIRE(fakecuda_mapping_access(va + 5 * kMiB, 7) == ~0ull);  // no such device
  // cuMemAlloc memory: success with no flags, as the driver answers; an
  // address that is neither: INVALID_VALUE.
  CUdeviceptr block = 0;
  CU_OK(cuMemAlloc(&block, kMiB));
  flags = 0x77;
  CU_OK(cuMemGetAccess(&flags, &access.location, block + 100));
  REQUIRE(flags == 0);
  REQUIRE(fakecuda_mapping_access(block, 0) == ~0ull);
  CU_OK(cuMemFree(block));
  REQUIRE(cuMemGetAccess(&flags, &access.location, block) == CUDA_ERROR_INVALID_VALUE);

  // Pointer identity: range = reservation, mapping and buffer id = cuMemMap.
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va) == 0);
  REQUIRE(pointer_attribute<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va) ==
          CU_MEMORYTYPE_DEVICE);
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_MAPPED, va) == 1);
  REQUIRE(pointer_attribute<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 5) == va);
  REQUIRE(pointer_attribute<size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 5) == 64 * kMiB);
  REQUIRE(pointer_attribute<CUdeviceptr>(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + 5 * kMiB) ==
          va + 4 * kMiB);
  REQUIRE(pointer_attribute<size_t>(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + 5) == 4 * kMiB);
  const auto id_a = pointer_attribute<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, va);
  REQUIRE(pointer_attribute<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, va + 3 * kMiB) ==
          id_a);
  REQUIRE(pointer_attribute<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, va + 4 * kMiB) !=
          id_a);
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CU_OK(cuMemGetAddressRange(&base, &bytes, va + 3 * kMiB));
  REQUIRE(base == va);
  REQUIRE(bytes == 4 * kMiB);
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_MAPPED, va + 8 * kMiB) == 0);
  CUipcMemHandle ipc;
  REQUIRE(cuIpcGetMemHandle(&ipc, va) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFree(va) == CUDA_ERROR_INVALID_VALUE);

  // The handle can go first; the memory stays while it is mapped.
  CUmemGenericAllocationHandle retained = 0;
  CU_OK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 4 * kMiB)));
  REQUIRE(retained == h2);
  CU_OK(cuMemRelease(h2));
  CUmemAllocationProp got{};
  CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h2));  // still referenced
  CU_OK(cuMemRelease(h2));
  REQUIRE(cuMemGetAllocationPropertiesFromHandle(&got, h2) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemRelease(h));
  REQUIRE(host(va + 5 * kMiB)[0] == 0x7e);
  REQUIRE(free_bytes() == free_before - 6 * kMiB);

  REQUIRE(cuMemAddressFree(va, 64 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // still mapped
  REQUIRE(cuMemUnmap(va, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);         // part of a mapping
  CU_OK(cuMemUnmap(va, 6 * kMiB));
  REQUIRE(pointer_attribute<int>(CU_POINTER_ATTRIBUTE_MAPPED, va) == 0);
  REQUIRE(free_bytes() == free_before);
  REQUIRE(cuMemAddressFree(va, 32 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // wrong size
  CU_OK(cuMemAddressFree(va, 64 * kMiB));

  // A free hint is honoured.
  CUdeviceptr again = 0;
  CU_OK(cuMemAddressReserve(&again, 8 * kMiB, 0, va, 0));
  REQUIRE(again == va);
  CU_OK(cuMemAddressFree(again, 8 * kMiB));

  // Address space is cheap: four times the device, as a pool may reserve.
  // (Not a terabyte: sanitizers leave too little address space for that.)
  CU_OK(cuMemAddressReserve(&again, 64 * kGiB, 0, 0, 0));
  CU_OK(cuMemAddressFree(again, 64 * kGiB));

  // Thousands of handles, 4 GiB, one file descriptor, no RAM until touched.
  const int count = 2048;
  CU_OK(cuMemAddressReserve(&va, count * 2 * kMiB, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> handles(count);
  for (int i = 0; i < count; ++i) {
    CU_OK(cuMemCreate(&handles[size_t(i)], 2 * kMiB, &prop, 0));
    CU_OK(cuMemMap(va + size_t(i) * 2 * kMiB, 2 * kMiB, 0, handles[size_t(i)], 0));
    CU_OK(cuMemRelease(handles[size_t(i)]));
  }
  CU_OK(cuMemSetAccess(va, count * 2 * kMiB, &access, 1));
  host(va)[count * 2 * kMiB - 1] = 9;
  CU_OK(cuMemUnmap(va, count * 2 * kMiB));
  CU_OK(cuMemAddressFree(va, count * 2 * kMiB));
  REQUIRE(free_bytes() == free_before);
}

TEST_CASE("cuGetProcAddress picks variants like the driver, and only its own") {
  primary();
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CU_OK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 12000, 0, &status));
  REQUIRE(status == CU_GET_PROC_ADDRESS_SUCCESS);
  REQUIRE(pfn == fake_symbol("cuMemAlloc_v2"));
  REQUIRE(pfn == reinterpret_cast<void*>(&cuMemAlloc_v2));
  REQUIRE(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  REQUIRE(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  REQUIRE(pfn == nullptr);
  REQUIRE(cuGetProcAddress_v2("cuNoSuchFunction", &pfn, 13000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  REQUIRE(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  REQUIRE(pfn == nullptr);

  CU_OK(cuGetProcAddress_v2("cuGetProcAddress", &pfn, 11080, 0, &status));
  REQUIRE(pfn == fake_symbol("cuGetProcAddress"));
  auto v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(pfn);
  CU_OK(cuGetProcAddress_v2("cuGetProcAddress", &pfn, 12000, 0, &status));
  REQUIRE(pfn == fake_symbol("cuGetProcAddress_v2"));
  CU_OK(v1("cuStreamBeginCapture", &pfn, 10000, 0));
  REQUIRE(pfn == fake_symbol("cuStreamBeginCapture"));
  CU_OK(v1("cuStreamBeginCapture", &pfn, 10010, 0));
  REQUIRE(pfn == fake_symbol("cuStreamBeginCapture_v2"));
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CU_OK(v1("cuStreamBeginCapture", &pfn, 12000, per_thread));
  REQUIRE(pfn == fake_symbol("cuStreamBeginCapture_v2_ptsz"));
  CU_OK(v1("cuMemcpyHtoD", &pfn, 12000, per_thread));
  REQUIRE(pfn == fake_symbol("cuMemcpyHtoD_v2_ptds"));
  CU_OK(v1("cuMemcpyHtoD", &pfn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
  REQUIRE(pfn == fake_symbol("cuMemcpyHtoD_v2"));
  CU_OK(v1("cuMemAlloc", &pfn, 12000, per_thread));  // no per-thread variant
  REQUIRE(pfn == fake_symbol("cuMemAlloc_v2"));
  CU_OK(v1("cuEventElapsedTime", &pfn, 12080, 0));
  REQUIRE(pfn == fake_symbol("cuEventElapsedTime_v2"));
  REQUIRE(v1("cuNoSuchFunction", &pfn, 12000, 0) == CUDA_ERROR_NOT_FOUND);
  REQUIRE(pfn == nullptr);

  // The executable exports its own cuDriverGetVersion; the fake's table
  // must still point at the fake's.
  CU_OK(cuGetProcAddress_v2("cuDriverGetVersion", &pfn, 12000, 0, &status));
  REQUIRE(pfn != reinterpret_cast<void*>(&cuDriverGetVersion));
  int version = 0;
  CU_OK(reinterpret_cast<PFN_cuDriverGetVersion_v2020>(pfn)(&version));
  REQUIRE(version == 13000);
  const void* table = &status;
  CUuuid id{};
  REQUIRE(cuGetExportTable(&table, &id) == CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("fakecuda_set_fail fails the Nth call and does nothing else") {
  primary();
  REQUIRE(fakecuda_set_fail("cuMemAlloc_v2:2,cuMemAddressReserve:1") == 0);
  CUdeviceptr a = 0, b = 0x1234, c = 0;
  CU_OK(cuMemAlloc(&a, 4096));
  REQUIRE(cuMemAlloc(&b, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE(b == 0x1234);
  CU_OK(cuMemAlloc(&c, 4096));
  CUdeviceptr va = 0;
  REQUIRE(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0));
  CU_OK(cuMemAddressFree(va, 2 * kMiB));
  CU_OK(cuMemFree(a));
  CU_OK(cuMemFree(c));
  REQUIRE(fakecuda_set_fail("cuNoSuchThing:1,cuMemMap:x") == -1);
  REQUIRE(fakecuda_set_fail(nullptr) == 0);
}

TEST_CASE("capture: a synchronizing call invalidates it, as on a GPU") {
  primary();
  CUstream s = nullptr;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  REQUIRE(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // not the legacy stream
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_ILLEGAL_STATE);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CU_OK(cuStreamIsCapturing(s, &status));
  REQUIRE(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  REQUIRE(cuCtxSynchronize() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_OK(cuStreamIsCapturing(s, &status));
  REQUIRE(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  REQUIRE(cuStreamEndCapture(s, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  REQUIRE(graph == nullptr);
  CU_OK(cuStreamIsCapturing(s, &status));
  REQUIRE(status == CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(cuCtxSynchronize());

  // A clean capture ends with a graph; captured work does not run.
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, 4096));
  CU_OK(cuMemsetD8(d, 0, 4096));
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuMemsetD8Async(d, 0xff, 4096, s));
  REQUIRE(cuMemFree(d) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // cudaFree breaks it too
  REQUIRE(cuStreamEndCapture(s, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuMemsetD8Async(d, 0xff, 4096, s));
  CU_OK(cuStreamEndCapture(s, &graph));
  REQUIRE(graph != nullptr);
  REQUIRE(host(d)[0] == 0);

  // Relaxed captures, and relaxed threads, may synchronize.
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamEndCapture(s, &graph));
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
  REQUIRE(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
  CU_OK(cuStreamEndCapture(s, &graph));

  // Thread-local captures concern their own thread only.
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::thread([ctx = primary()] {
    CU_OK(cuCtxSetCurrent(ctx));
    CU_OK(cuCtxSynchronize());
  }).join();
  REQUIRE(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  REQUIRE(cuStreamEndCapture(s, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU_OK(cuMemFree(d));
  CU_OK(cuStreamDestroy(s));

  // The per-thread default stream is a stream of its own, and capturable.
  CU_OK(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const auto is_capturing_ptsz =
      per_thread_variant<PFN_cuStreamIsCapturing_v10000_ptsz>("cuStreamIsCapturing");
  CU_OK(is_capturing_ptsz(nullptr, &status));  // 0 in a _ptsz function
  REQUIRE(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CU_OK(cuStreamIsCapturing(nullptr, &status));  // the legacy stream
  REQUIRE(status == CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(per_thread_variant<PFN_cuStreamEndCapture_v10000_ptsz>("cuStreamEndCapture")(nullptr,
                                                                                     &graph));
  REQUIRE(graph != nullptr);
}

TEST_CASE("delayed kernels are pending work and catch use after free") {
  primary();
  CUstream s = nullptr;
  CU_OK(cuStreamCreate(&s, 0));
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, kMiB));
  CU_OK(cuMemsetD8(d, 0, kMiB));
  CUevent start = nullptr, end = nullptr;
  CU_OK(cuEventCreate(&start, 0));
  CU_OK(cuEventCreate(&end, 0));
  CU_OK(cuEventRecord(start, s));
  CU_OK(fakecuda_launch_delayed_fill(s, d, kMiB, 0xab, 200));  // long: a loaded CI box
  CU_OK(cuEventRecord(end, s));
  REQUIRE(cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
  REQUIRE(cuEventQuery(end) == CUDA_ERROR_NOT_READY);
  float ms = 0;
  REQUIRE(cuEventElapsedTime(&ms, start, end) == CUDA_ERROR_NOT_READY);
  CU_OK(cuEventSynchronize(end));
  REQUIRE(host(d)[kMiB - 1] == 0xab);
  CU_OK(cuEventElapsedTime(&ms, start, end));
  REQUIRE(ms >= 150.0f);
  CU_OK(cuStreamQuery(s));

  // Work queued behind a kernel waits for it, in stream order.
  int ok = -1;
  CU_OK(fakecuda_launch_delayed_fill(s, d, 4096, 0x11, 30));
  CU_OK(fakecuda_launch_delayed_check(s, d, 4096, 0x11, 0, &ok));
  std::vector<unsigned char> out(4096);
  CU_OK(cuMemcpyDtoHAsync(out.data(), d, out.size(), s));
  CU_OK(cuStreamSynchronize(s));
  REQUIRE(ok == 1);
  REQUIRE(out[4095] == 0x11);
  CU_OK(fakecuda_launch_delayed_fill(s, d, 4096, 0x22, 30));
  CU_OK(cuCtxSynchronize());
  REQUIRE(host(d)[0] == 0x22);

  // Per-thread default stream work: pending there, and the legacy stream's
  // synchronous copies wait for it.
  CU_OK(fakecuda_launch_delayed_fill(CU_STREAM_PER_THREAD, d, 4096, 0x2f, 200));
  REQUIRE(per_thread_variant<PFN_cuStreamQuery_v7000_ptsz>("cuStreamQuery")(nullptr) ==
          CUDA_ERROR_NOT_READY);
  unsigned char first = 0;
  CU_OK(cuMemcpyDtoH(&first, d, 1));
  REQUIRE(first == 0x2f);

  // cuMemFree synchronizes, as the driver's does: no violation.
  const unsigned long long before = fakecuda_violations();
  const auto t0 = std::chrono::steady_clock::now();
  CU_OK(fakecuda_launch_delayed_fill(s, d, kMiB, 0x33, 50));
  CU_OK(cuMemFree(d));
  REQUIRE(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(40));
  REQUIRE(fakecuda_violations() == before);
  REQUIRE(fakecuda_launch_delayed_fill(s, d, 16, 0, 0) == CUDA_ERROR_INVALID_VALUE);

  // cuMemUnmap does not: the kernel finds its memory gone.
  const CUmemAllocationProp prop = device_prop(0);
  const CUmemAccessDesc access = read_write(0);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  CU_OK(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0));
  CU_OK(cuMemCreate(&h, 2 * kMiB, &prop, 0));
  CU_OK(cuMemMap(va, 2 * kMiB, 0, h, 0));
  CU_OK(cuMemSetAccess(va, 2 * kMiB, &access, 1));
  CU_OK(fakecuda_launch_delayed_fill(s, va, 2 * kMiB, 0x44, 200));
  CU_OK(cuMemUnmap(va, 2 * kMiB));
  // Mapped again at the same address: still not the memory it was launched on.
  CU_OK(cuMemMap(va, 2 * kMiB, 0, h, 0));
  CU_OK(cuMemSetAccess(va, 2 * kMiB, &access, 1));
  CU_OK(cuStreamSynchronize(s));
  REQUIRE(fakecuda_violations() == before + 1);
  REQUIRE(host(va)[0] != 0x44);
  CU_OK(cuMemUnmap(va, 2 * kMiB));
  CU_OK(cuMemRelease(h));
  CU_OK(cuMemAddressFree(va, 2 * kMiB));
  CU_OK(cuEventDestroy(start));
  CU_OK(cuEventDestroy(end));
  CU_OK(cuStreamDestroy(s));
}

TEST_CASE("call counters and the FAKECUDA_COUNTS file") {
  primary();
  fakecuda_reset_counts();
  int count = 0;
  CU_OK(cuDeviceGetCount(&count));
  CU_OK(cuDeviceGetCount(&count));
  REQUIRE(fakecuda_call_count("cuDeviceGetCount") == 2);
  REQUIRE(fakecuda_call_count("cuMemAlloc_v2") == 0);
  REQUIRE(fakecuda_call_count("cuNoSuchFunction") == -1);
  char path[] = "/tmp/fakecuda-counts-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  // The file is written at exit, hence a child process that exits.
  const int status = in_child([&path] {
    setenv("FAKECUDA_COUNTS", path, 1);
    fakecuda_reset_counts();
    const char* name = nullptr;
    for (int i = 0; i < 3; ++i) cuGetErrorName(CUDA_SUCCESS, &name);
    exit(0);
  });
  REQUIRE(WIFEXITED(status));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  REQUIRE(text.str().find("\"cuGetErrorName\": 3") != std::string::npos);
  REQUIRE(text.str().find("\"cuMemAlloc_v2\": 0") != std::string::npos);
  REQUIRE(text.str().front() == '{');
}

TEST_CASE("threads allocate, copy and free at once") {
  const CUcontext ctx = primary();
  const size_t free_before = free_bytes();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([ctx, t, &failures] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures;
      for (int i = 0; i < 100; ++i) {
        CUdeviceptr d = 0;
        const size_t bytes = size_t(1 + (i * 7919 + t) % 2000) * 1024;
        if (cuMemAlloc(&d, bytes) != CUDA_SUCCESS) {
          ++failures;
          continue;
        }
        if (cuMemsetD8(d, static_cast<unsigned char>(t), bytes) != CUDA_SUCCESS) ++failures;
        if (host(d)[bytes - 1] != static_cast<unsigned char>(t)) ++failures;
        if (cuMemFree(d) != CUDA_SUCCESS) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE(failures == 0);
  REQUIRE(free_bytes() == free_before);
}

// --- run with FAKECUDA_DEVICES=2 FAKECUDA_TOTAL_MEM=64M FAKECUDA_PCI_BUS_IDS
// and FAKECUDA_FAIL=cuMemCreate:2,cuMemMap:1,cuMemMap:3,cuMemAlloc_v2:1 --------

TEST_CASE("the environment configures devices, memory and failures", "[env]") {
  CU_OK(cuInit(0));
  int count = 0;
  CU_OK(cuDeviceGetCount(&count));
  REQUIRE(count == 2);
  char bus_id[32];
  CU_OK(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, 1));
  REQUIRE(std::string(bus_id) == "0000:c1:00.0");
  int bus = 0;
  CU_OK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
  REQUIRE(bus == 0x41);
  CUdevice dev = -1;
  CU_OK(cuDeviceGetByPCIBusId(&dev, "0000:C1:00.0"));
  REQUIRE(dev == 1);
  CUuuid u0, u1;
  CU_OK(cuDeviceGetUuid(&u0, 0));
  CU_OK(cuDeviceGetUuid(&u1, 1));
  REQUIRE(memcmp(u0.bytes, u1.bytes, 16) != 0);

  CUcontext c0 = nullptr, c1 = nullptr;
  CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
  CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
  CU_OK(cuCtxSetCurrent(c0));
  size_t free = 0, total = 0;
  CU_OK(cuMemGetInfo(&free, &total));
  REQUIRE(total == 64 * kMiB);

  CUdeviceptr d = 0;
  REQUIRE(cuMemAlloc(&d, 4096) == CUDA_ERROR_OUT_OF_MEMORY);  // cuMemAlloc_v2:1
  CU_OK(cuMemAlloc(&d, 32 * kMiB));
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  CU_OK(cuMemCreate(&h1, 16 * kMiB, &prop, 0));
  REQUIRE(cuMemCreate(&h2, 2 * kMiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);  // cuMemCreate:2
  CU_OK(cuMemCreate(&h2, 16 * kMiB, &prop, 0));
  CU_OK(cuMemGetInfo(&free, &total));
  REQUIRE(free == 0);  // cuMemAlloc and cuMemCreate share the total
  CUdeviceptr more = 0;
  REQUIRE(cuMemAlloc(&more, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
  CUmemGenericAllocationHandle h3 = 0;
  REQUIRE(cuMemCreate(&h3, 2 * kMiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);

  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, 32 * kMiB, 0, 0, 0));
  REQUIRE(cuMemMap(va, 16 * kMiB, 0, h1, 0) == CUDA_ERROR_OUT_OF_MEMORY);  // cuMemMap:1
  CU_OK(cuMemMap(va, 16 * kMiB, 0, h1, 0));
  REQUIRE(cuMemMap(va + 16 * kMiB, 16 * kMiB, 0, h2, 0) == CUDA_ERROR_OUT_OF_MEMORY);  // :3
  CU_OK(cuMemMap(va + 16 * kMiB, 16 * kMiB, 0, h2, 0));
  CU_OK(cuMemUnmap(va, 32 * kMiB));
  CU_OK(cuMemRelease(h1));
  CU_OK(cuMemRelease(h2));
  CU_OK(cuMemAddressFree(va, 32 * kMiB));
  CU_OK(cuMemFree(d));

  // Peer access between the two devices' contexts.
  int can = 0;
  CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
  REQUIRE(can == 1);
  CU_OK(cuCtxEnablePeerAccess(c1, 0));
  REQUIRE(cuCtxEnablePeerAccess(c1, 0) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  REQUIRE(cuCtxEnablePeerAccess(c0, 0) == CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(cuCtxDisablePeerAccess(c1));
  REQUIRE(cuCtxDisablePeerAccess(c1) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

  // VMM memory of device 0 that only device 1 may access.
  const CUmemAccessDesc for_1 = read_write(1);
  CU_OK(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0));
  CU_OK(cuMemCreate(&h1, 2 * kMiB, &prop, 0));
  CU_OK(cuMemMap(va, 2 * kMiB, 0, h1, 0));
  CU_OK(cuMemSetAccess(va, 2 * kMiB, &for_1, 1));
  REQUIRE(fakecuda_launch_delayed_fill(nullptr, va, 16, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuCtxSetCurrent(c1));
  CU_OK(fakecuda_launch_delayed_fill(nullptr, va, 16, 1, 0));
  CU_OK(cuCtxSynchronize());
  REQUIRE(host(va)[15] == 1);
  CU_OK(cuMemUnmap(va, 2 * kMiB));
  CU_OK(cuMemRelease(h1));
  CU_OK(cuMemAddressFree(va, 2 * kMiB));

  // Releasing the last reference destroys the primary context's contents.
  CU_OK(cuCtxSetCurrent(c0));
  CU_OK(cuMemAlloc(&d, 4096));
  CU_OK(cuDevicePrimaryCtxRelease(0));
  REQUIRE(cuMemAlloc(&d, 4096) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  unsigned type = 0;
  REQUIRE(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) ==
          CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
  CU_OK(cuMemAlloc(&d, 4096));
  CU_OK(cuMemFree(d));
}
