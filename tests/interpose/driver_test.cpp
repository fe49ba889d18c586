// tests/interpose/driver_test.cpp: interpose/driver.{h,cpp}, the seam to
// the driver, on its own over a table of fake driver functions: with no
// driver or a driver lacking a function every call answers
// CUDA_ERROR_NOT_FOUND and calls nothing; otherwise each reaches its own
// function with the arguments as given and returns its answer untouched;
// has() and the named questions answer for exactly the functions they name.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "interpose/driver.h"

using namespace pagefast;

namespace {

// An answer no seam function makes up: it comes from the fake.
constexpr CUresult kAnswer = CUDA_ERROR_ILLEGAL_ADDRESS;
std::vector<std::string> g_called;

// Every function the seam calls, faked: it notes its name and answers kAnswer.
#define FAKE(field)                   \
  t.field = [](auto...) -> CUresult { \
    g_called.push_back(#field);       \
    return kAnswer;                   \
  }

RealDriver full_table() {
  RealDriver t;
  std::memset(&t, 0, sizeof t);
  FAKE(cuMemCreate);
  FAKE(cuMemRelease);
  FAKE(cuMemMap);
  FAKE(cuMemUnmap);
  FAKE(cuMemSetAccess);
  FAKE(cuMemAddressReserve);
  FAKE(cuMemAddressFree);
  FAKE(cuMemExportToShareableHandle);
  FAKE(cuMemImportFromShareableHandle);
  FAKE(cuMemRetainAllocationHandle);
  FAKE(cuMemGetAllocationPropertiesFromHandle);
  FAKE(cuMemGetAllocationGranularity);
  FAKE(cuCtxGetCurrent);
  FAKE(cuCtxGetDevice);
  FAKE(cuCtxSetCurrent);
  FAKE(cuCtxPushCurrent_v2);
  FAKE(cuCtxPopCurrent_v2);
  FAKE(cuCtxSynchronize);
  FAKE(cuDevicePrimaryCtxGetState);
  FAKE(cuDeviceGetAttribute);
  FAKE(cuDeviceTotalMem_v2);
  FAKE(cuDeviceGetPCIBusId);
  FAKE(cuMemGetInfo_v2);
  FAKE(cuGetErrorName);
  FAKE(cuStreamCreate);
  FAKE(cuStreamSynchronize);
  FAKE(cuStreamDestroy_v2);
  FAKE(cuStreamIsCapturing);
  FAKE(cuMemcpyDtoH_v2);
  FAKE(cuMemcpyHtoD_v2);
  FAKE(cuMemcpyDtoHAsync_v2);
  FAKE(cuMemcpyHtoDAsync_v2);
  FAKE(cuMemHostAlloc);
  FAKE(cuMemFreeHost);
  FAKE(cuMemHostRegister_v2);
  FAKE(cuMemHostUnregister);
  FAKE(cuMemGetAccess);
  FAKE(cuMemAllocPitch_v2);
  FAKE(cuMemFree_v2);
  FAKE(cuDeviceGetDefaultMemPool);
  FAKE(cuMemPoolGetAttribute);
  return t;
}
#undef FAKE

struct SeamCall {
  const char* function;  // the driver function it must reach
  std::function<CUresult(const RealDriver*)> call;
};

// Every seam function, with harmless arguments.
std::vector<SeamCall> seam_calls() {
  static CUmemGenericAllocationHandle handle;
  static CUmemAllocationProp prop;
  static CUmemAccessDesc desc;
  static CUdeviceptr ptr;
  static CUcontext context;
  static CUdevice device;
  static CUstream stream;
  static CUstreamCaptureStatus status;
  static size_t bytes, total;
  static unsigned int flags;
  static unsigned long long flags64;
  static CUmemLocation location;
  static CUmemoryPool mem_pool;
  static int value;
  static const char* name;
  static char text[16];
  static void* host;
  return {
      {"cuMemCreate", [](const RealDriver* r) { return driver::create(r, &handle, 1, &prop, 0); }},
      {"cuMemRelease", [](const RealDriver* r) { return driver::release(r, handle); }},
      {"cuMemMap", [](const RealDriver* r) { return driver::map(r, ptr, 1, 0, handle, 0); }},
      {"cuMemUnmap", [](const RealDriver* r) { return driver::unmap(r, ptr, 1); }},
      {"cuMemSetAccess", [](const RealDriver* r) { return driver::set_access(r, ptr, 1, &desc, 1); }},
      {"cuMemAddressReserve", [](const RealDriver* r) { return driver::address_reserve(r, &ptr, 1, 0, 0, 0); }},
      {"cuMemAddressFree", [](const RealDriver* r) { return driver::address_free(r, ptr, 1); }},
      {"cuMemExportToShareableHandle",
       [](const RealDriver* r) {
         return driver::export_handle(r, &value, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
       }},
      {"cuMemImportFromShareableHandle",
       [](const RealDriver* r) {
         return driver::import_handle(r, &handle, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
       }},
      {"cuMemRetainAllocationHandle", [](const RealDriver* r) { return driver::retain_handle(r, &handle, host); }},
      {"cuMemGetAllocationPropertiesFromHandle",
       [](const RealDriver* r) { return driver::handle_properties(r, &prop, handle); }},
      {"cuMemGetAllocationGranularity",
       [](const RealDriver* r) { return driver::granularity(r, &bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); }},
      {"cuCtxGetCurrent", [](const RealDriver* r) { return driver::ctx_get_current(r, &context); }},
      {"cuCtxGetDevice", [](const RealDriver* r) { return driver::ctx_get_device(r, &device); }},
      {"cuCtxSetCurrent", [](const RealDriver* r) { return driver::ctx_set_current(r, context); }},
      {"cuCtxPushCurrent_v2", [](const RealDriver* r) { return driver::ctx_push(r, context); }},
      {"cuCtxPopCurrent_v2", [](const RealDriver* r) { return driver::ctx_pop(r, &context); }},
      {"cuCtxSynchronize", [](const RealDriver* r) { return driver::ctx_synchronize(r); }},
      {"cuDevicePrimaryCtxGetState",
       [](const RealDriver* r) { return driver::primary_ctx_state(r, device, &flags, &value); }},
      {"cuDeviceGetAttribute",
       [](const RealDriver* r) {
         return driver::device_attribute(r, &value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
       }},
      {"cuDeviceTotalMem_v2", [](const RealDriver* r) { return driver::device_total_mem(r, &bytes, device); }},
      {"cuDeviceGetPCIBusId",
       [](const RealDriver* r) { return driver::device_pci_bus_id(r, text, sizeof text, device); }},
      {"cuMemGetInfo_v2", [](const RealDriver* r) { return driver::mem_get_info(r, &bytes, &total); }},
      {"cuGetErrorName", [](const RealDriver* r) { return driver::error_name(r, CUDA_ERROR_INVALID_VALUE, &name); }},
      {"cuStreamCreate", [](const RealDriver* r) { return driver::stream_create(r, &stream, 0); }},
      {"cuStreamSynchronize", [](const RealDriver* r) { return driver::stream_synchronize(r, stream); }},
      {"cuStreamDestroy_v2", [](const RealDriver* r) { return driver::stream_destroy(r, stream); }},
      {"cuStreamIsCapturing", [](const RealDriver* r) { return driver::stream_is_capturing(r, stream, &status); }},
      {"cuMemcpyDtoH_v2", [](const RealDriver* r) { return driver::copy_dtoh(r, text, ptr, 1); }},
      {"cuMemcpyHtoD_v2", [](const RealDriver* r) { return driver::copy_htod(r, ptr, text, 1); }},
      {"cuMemcpyDtoHAsync_v2", [](const RealDriver* r) { return driver::copy_dtoh_async(r, text, ptr, 1, stream); }},
      {"cuMemcpyHtoDAsync_v2", [](const RealDriver* r) { return driver::copy_htod_async(r, ptr, text, 1, stream); }},
      {"cuMemHostAlloc", [](const RealDriver* r) { return driver::host_alloc(r, &host, 1, 0); }},
      {"cuMemFreeHost", [](const RealDriver* r) { return driver::free_host(r, host); }},
      {"cuMemHostRegister_v2", [](const RealDriver* r) { return driver::host_register(r, text, 1, 0); }},
      {"cuMemHostUnregister", [](const RealDriver* r) { return driver::host_unregister(r, text); }},
      {"cuMemGetAccess", [](const RealDriver* r) { return driver::get_access(r, &flags64, &location, ptr); }},
      {"cuMemAllocPitch_v2", [](const RealDriver* r) { return driver::mem_alloc_pitch(r, &ptr, &bytes, 1, 1, 4); }},
      {"cuMemFree_v2", [](const RealDriver* r) { return driver::mem_free(r, ptr); }},
      {"cuDeviceGetDefaultMemPool", [](const RealDriver* r) { return driver::default_mem_pool(r, &mem_pool, device); }},
      {"cuMemPoolGetAttribute",
       [](const RealDriver* r) {
         return driver::mem_pool_attribute(r, mem_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &bytes);
       }},
  };
}

}  // namespace

TEST_CASE("with no driver, or one lacking the function, every call answers CUDA_ERROR_NOT_FOUND") {
  RealDriver empty;
  std::memset(&empty, 0, sizeof empty);
  for (const SeamCall& c : seam_calls()) {
    INFO(c.function);
    g_called.clear();
    CHECK(c.call(nullptr) == CUDA_ERROR_NOT_FOUND);
    CHECK(c.call(&empty) == CUDA_ERROR_NOT_FOUND);
    CHECK(g_called.empty());
  }
}

TEST_CASE("each call reaches its own driver function and returns its answer untouched") {
  const RealDriver full = full_table();
  for (const SeamCall& c : seam_calls()) {
    INFO(c.function);
    g_called.clear();
    CHECK(c.call(&full) == kAnswer);
    REQUIRE(g_called.size() == 1);
    CHECK(g_called[0] == c.function);
  }
}

TEST_CASE("each call asks for exactly the function it calls") {
  // With one function of the table gone and every other there, a call
  // stops reaching the driver for its own function and for no other.
  const RealDriver full = full_table();
  const size_t functions = offsetof(RealDriver, handle) / sizeof(void*);
  for (const SeamCall& c : seam_calls()) {
    INFO(c.function);
    int stopped_by = 0;
    for (size_t i = 0; i < functions; ++i) {
      RealDriver t = full;
      reinterpret_cast<void**>(&t)[i] = nullptr;
      g_called.clear();
      if (c.call(&t) == CUDA_ERROR_NOT_FOUND && g_called.empty()) ++stopped_by;
    }
    CHECK(stopped_by == 1);
  }
}

TEST_CASE("arguments reach the driver as given, and what it writes reaches the caller") {
  RealDriver t = full_table();
  static CUdeviceptr seen_ptr;
  static size_t seen_bytes, seen_offset;
  static CUmemGenericAllocationHandle seen_handle;
  static unsigned long long seen_flags;
  t.cuMemMap = [](CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
    seen_ptr = ptr, seen_bytes = bytes, seen_offset = offset, seen_handle = handle, seen_flags = flags;
    return CUDA_ERROR_OUT_OF_MEMORY;
  };
  CHECK(driver::map(&t, 0x7000, 2 << 20, 4096, 42, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(seen_ptr == 0x7000);
  CHECK(seen_bytes == size_t(2) << 20);
  CHECK(seen_offset == 4096);
  CHECK(seen_handle == 42);
  CHECK(seen_flags == 0);

  t.cuCtxGetCurrent = [](CUcontext* context) {
    *context = reinterpret_cast<CUcontext>(0x1234);
    return CUDA_SUCCESS;
  };
  CUcontext context = nullptr;
  CHECK(driver::ctx_get_current(&t, &context) == CUDA_SUCCESS);
  CHECK(context == reinterpret_cast<CUcontext>(0x1234));

  static CUstream seen_stream;
  static const void* seen_host;
  t.cuMemcpyHtoDAsync_v2 = [](CUdeviceptr device, const void* host, size_t bytes, CUstream stream) {
    seen_ptr = device, seen_host = host, seen_bytes = bytes, seen_stream = stream;
    return CUDA_SUCCESS;
  };
  const char data[4] = {1, 2, 3, 4};
  CHECK(driver::copy_htod_async(&t, 0x9000, data, sizeof data, reinterpret_cast<CUstream>(0x55)) == CUDA_SUCCESS);
  CHECK(seen_ptr == 0x9000);
  CHECK(seen_host == data);
  CHECK(seen_bytes == sizeof data);
  CHECK(seen_stream == reinterpret_cast<CUstream>(0x55));

  t.cuDevicePrimaryCtxGetState = [](CUdevice device, unsigned int* flags, int* active) {
    *flags = unsigned(device) + 1;
    *active = 0;
    return CUDA_SUCCESS;
  };
  unsigned int flags = 0;
  int active = 1;
  CHECK(driver::primary_ctx_state(&t, 6, &flags, &active) == CUDA_SUCCESS);
  CHECK(flags == 7);
  CHECK(active == 0);
}

TEST_CASE("has() and the named questions answer for the functions they name") {
  const RealDriver full = full_table();
  RealDriver empty;
  std::memset(&empty, 0, sizeof empty);
  CHECK(driver::has(&full, &RealDriver::cuMemCreate));
  CHECK(driver::has(&full, &RealDriver::cuMemCreate, &RealDriver::cuStreamCreate, &RealDriver::cuGetErrorName));
  CHECK_FALSE(driver::has(&empty, &RealDriver::cuMemCreate));
  CHECK_FALSE(driver::has(nullptr, &RealDriver::cuMemCreate));
  CHECK(driver::has(&empty));  // nothing asked for: a loaded driver has it
  CHECK_FALSE(driver::has(nullptr));
  CHECK(driver::has_vmm(&full));
  CHECK(driver::has_vmm_import(&full));
  CHECK(driver::has_context_push(&full));
  CHECK_FALSE(driver::has_vmm(nullptr));
  CHECK_FALSE(driver::has_vmm_import(nullptr));
  CHECK_FALSE(driver::has_context_push(nullptr));

  // Each function a question names, missing alone, turns it to false;
  // one it does not name leaves it true.
  auto without = [&](auto field, bool (*ask)(const RealDriver*)) {
    RealDriver t = full;
    t.*field = nullptr;
    return ask(&t);
  };
  CHECK_FALSE(without(&RealDriver::cuMemAddressReserve, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemCreate, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemMap, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemSetAccess, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemUnmap, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemRelease, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuMemGetAllocationGranularity, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuCtxSynchronize, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuDeviceGetAttribute, &driver::has_vmm));
  CHECK_FALSE(without(&RealDriver::cuDeviceTotalMem_v2, &driver::has_vmm));
  CHECK(without(&RealDriver::cuMemAddressFree, &driver::has_vmm));
  CHECK(without(&RealDriver::cuMemImportFromShareableHandle, &driver::has_vmm));

  CHECK_FALSE(without(&RealDriver::cuMemImportFromShareableHandle, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemAddressReserve, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemMap, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemSetAccess, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemUnmap, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemRelease, &driver::has_vmm_import));
  CHECK_FALSE(without(&RealDriver::cuMemAddressFree, &driver::has_vmm_import));
  CHECK(without(&RealDriver::cuMemCreate, &driver::has_vmm_import));

  CHECK_FALSE(without(&RealDriver::cuCtxPushCurrent_v2, &driver::has_context_push));
  CHECK_FALSE(without(&RealDriver::cuCtxPopCurrent_v2, &driver::has_context_push));
  CHECK(without(&RealDriver::cuCtxSetCurrent, &driver::has_context_push));
}
