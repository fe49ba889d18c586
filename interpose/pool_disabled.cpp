// interpose/pool_disabled.cpp: pool_api.h with the pool switched off: every
// call is forwarded to the driver. Used when the build has no pool.
#include "interpose/pool_api.h"

namespace pagefast::pool {
void configure(const PoolConfig&, LogSink) {}
bool try_alloc(CUdeviceptr*, size_t, CUresult*) { return false; }
bool try_free(CUdeviceptr, CUresult*) { return false; }
bool try_address_range(CUdeviceptr*, size_t*, CUdeviceptr, CUresult*) { return false; }
void patch_pointer_attribute(void*, CUpointer_attribute, CUdeviceptr) {}
bool try_ipc_get_mem_handle(CUipcMemHandle*, CUdeviceptr, CUresult*) { return false; }
void adjust_mem_info(size_t*, size_t*) {}
void on_capture_begin() {}
void on_capture_end() {}
std::string stats_json() { return "{\"devices\": {}}"; }
}  // namespace pagefast::pool
