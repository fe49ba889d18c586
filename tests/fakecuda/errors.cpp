// tests/fakecuda/errors.cpp: cuGetErrorName and cuGetErrorString over one
// table of every CUresult in CUDA 13.0's cuda.h. The strings follow the real
// driver's wording where it is known; both work before cuInit, as the real
// ones do, and answer CUDA_ERROR_INVALID_VALUE (with *str = NULL) for a code
// cuda.h does not define.
#include "api_list.h"

namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define FAKE_ERROR(code, text) {code, #code, text},
const ErrorText kErrors[] = {
    FAKE_ERROR(CUDA_SUCCESS, "no error")
    FAKE_ERROR(CUDA_ERROR_INVALID_VALUE, "invalid argument")
    FAKE_ERROR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
    FAKE_ERROR(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
    FAKE_ERROR(CUDA_ERROR_DEINITIALIZED, "driver shutting down")
    FAKE_ERROR(CUDA_ERROR_PROFILER_DISABLED,
               "profiler disabled while using external profiling tool")
    FAKE_ERROR(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized")
    FAKE_ERROR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")
    FAKE_ERROR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")
    FAKE_ERROR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")
    FAKE_ERROR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "API call requires a newer driver")
    FAKE_ERROR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable")
    FAKE_ERROR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")
    FAKE_ERROR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")
    FAKE_ERROR(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license")
    FAKE_ERROR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
    FAKE_ERROR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")
    FAKE_ERROR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")
    FAKE_ERROR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")
    FAKE_ERROR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed")
    FAKE_ERROR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")
    FAKE_ERROR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")
    FAKE_ERROR(CUDA_ERROR_NO_BINARY_FOR_GPU,
               "no kernel image is available for execution on the device")
    FAKE_ERROR(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired")
    FAKE_ERROR(CUDA_ERROR_NOT_MAPPED, "resource not mapped")
    FAKE_ERROR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array")
    FAKE_ERROR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer")
    FAKE_ERROR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered")
    FAKE_ERROR(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture")
    FAKE_ERROR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
               "exclusive-thread device already in use by a different thread")
    FAKE_ERROR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
               "peer access is not supported between these two devices")
    FAKE_ERROR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")
    FAKE_ERROR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context")
    FAKE_ERROR(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected")
    FAKE_ERROR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found")
    FAKE_ERROR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
               "the provided PTX was compiled with an unsupported toolchain.")
    FAKE_ERROR(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled")
    FAKE_ERROR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
               "the provided execution affinity is not supported")
    FAKE_ERROR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
               "the provided PTX contains unsupported call to cudaDeviceSynchronize")
    FAKE_ERROR(CUDA_ERROR_CONTAINED, "an exception occurred on the device that is now contained")
    FAKE_ERROR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")
    FAKE_ERROR(CUDA_ERROR_FILE_NOT_FOUND, "file not found")
    FAKE_ERROR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found")
    FAKE_ERROR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed")
    FAKE_ERROR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")
    FAKE_ERROR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
    FAKE_ERROR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")
    FAKE_ERROR(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy")
    FAKE_ERROR(CUDA_ERROR_NOT_FOUND, "named symbol not found")
    FAKE_ERROR(CUDA_ERROR_NOT_READY, "device not ready")
    FAKE_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")
    FAKE_ERROR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")
    FAKE_ERROR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")
    FAKE_ERROR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode")
    FAKE_ERROR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")
    FAKE_ERROR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")
    FAKE_ERROR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
               "cannot set while device is active in this process")
    FAKE_ERROR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")
    FAKE_ERROR(CUDA_ERROR_ASSERT, "device-side assert triggered")
    FAKE_ERROR(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted")
    FAKE_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
               "part or all of the requested memory range is already mapped")
    FAKE_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
               "pointer does not correspond to a registered memory region")
    FAKE_ERROR(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")
    FAKE_ERROR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")
    FAKE_ERROR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")
    FAKE_ERROR(CUDA_ERROR_INVALID_ADDRESS_SPACE,
               "operation not supported on global/shared address space")
    FAKE_ERROR(CUDA_ERROR_INVALID_PC, "invalid program counter")
    FAKE_ERROR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")
    FAKE_ERROR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch")
    FAKE_ERROR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed")
    FAKE_ERROR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")
    FAKE_ERROR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
    FAKE_ERROR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized")
    FAKE_ERROR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
               "system has unsupported display driver / cuda driver combination")
    FAKE_ERROR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
               "forward compatibility was attempted on non supported HW")
    FAKE_ERROR(CUDA_ERROR_MPS_CONNECTION_FAILED,
               "MPS client failed to connect to the MPS control daemon or the MPS server")
    FAKE_ERROR(CUDA_ERROR_MPS_RPC_FAILURE,
               "the remote procedural call between the MPS server and the MPS client failed")
    FAKE_ERROR(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client")
    FAKE_ERROR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources for MPS clients are exhausted")
    FAKE_ERROR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
               "the hardware resources for MPS device connections are exhausted")
    FAKE_ERROR(CUDA_ERROR_MPS_CLIENT_TERMINATED,
               "the MPS client has been terminated by the server")
    FAKE_ERROR(CUDA_ERROR_CDP_NOT_SUPPORTED,
               "is using CUDA Dynamic Parallelism, but the current configuration does not support it")
    FAKE_ERROR(CUDA_ERROR_CDP_VERSION_MISMATCH,
               "unsupported interaction between different versions of CUDA Dynamic Parallelism")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
               "operation not permitted when stream is capturing")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
               "operation failed due to a previous error during capture")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_MERGE,
               "operation would result in a merge of separate capture sequences")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
               "capture was not ended in the same stream as it began")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
               "dependency created on uncaptured work in another stream")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
               "operation would make the legacy stream depend on a capturing blocking stream")
    FAKE_ERROR(CUDA_ERROR_CAPTURED_EVENT,
               "operation not permitted on an event last recorded in a capturing stream")
    FAKE_ERROR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
               "attempt to terminate a thread-local capture sequence from another thread")
    FAKE_ERROR(CUDA_ERROR_TIMEOUT, "wait operation timed out")
    FAKE_ERROR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
               "the graph update was not performed because it included changes which violated "
               "constraints specific to instantiated graph update")
    FAKE_ERROR(CUDA_ERROR_EXTERNAL_DEVICE,
               "an async error has occurred in external entity outside of CUDA")
    FAKE_ERROR(CUDA_ERROR_INVALID_CLUSTER_SIZE,
               "a kernel launch error has occurred due to cluster misconfiguration")
    FAKE_ERROR(CUDA_ERROR_FUNCTION_NOT_LOADED,
               "the function handle is not loaded when calling an API that requires a loaded "
               "function")
    FAKE_ERROR(CUDA_ERROR_INVALID_RESOURCE_TYPE,
               "one or more resources passed in are not valid resource types for the operation")
    FAKE_ERROR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
               "one or more resources are insufficient or non-applicable for the operation")
    FAKE_ERROR(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence")
    FAKE_ERROR(CUDA_ERROR_UNKNOWN, "unknown error")
};
#undef FAKE_ERROR

const ErrorText* find(CUresult code) {
  for (const ErrorText& entry : kErrors)
    if (entry.code == code) return &entry;
  return nullptr;
}

}  // namespace

CUresult impl::cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* entry = find(error);
  *str = entry ? entry->name : nullptr;
  return entry ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult impl::cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* entry = find(error);
  *str = entry ? entry->text : nullptr;
  return entry ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
