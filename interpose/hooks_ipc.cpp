// interpose/hooks_ipc.cpp: the hooks of CUDA IPC: handles of pool blocks
// are pagefast's own (pool_api.h try_ipc_*), any other goes to the driver.
#include "interpose/hooks.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/hooks_common.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"
#include "interpose/trace.h"

namespace pagefast::hook {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (active(Entry::cuIpcGetMemHandle)) {
    CUresult result;
    if (pool::try_ipc_get_mem_handle(handle, dptr, &result)) return result;
  }
  PF_FORWARD(cuIpcGetMemHandle, (handle, dptr));
}

#define PF_IPC_OPEN(symbol)                                                        \
  CUresult symbol(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) { \
    if (active(Entry::symbol)) {                                                   \
      CUresult result;                                                             \
      if (pool::try_ipc_open(pdptr, handle, Flags, &result)) return result;        \
    }                                                                              \
    PF_FORWARD(symbol, (pdptr, handle, Flags));                                    \
  }
PF_IPC_OPEN(cuIpcOpenMemHandle)
PF_IPC_OPEN(cuIpcOpenMemHandle_v2)
#undef PF_IPC_OPEN

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (active(Entry::cuIpcCloseMemHandle)) {
    CUresult result;
    if (pool::try_ipc_close(dptr, &result)) return result;
  }
  PF_FORWARD(cuIpcCloseMemHandle, (dptr));
}

}  // namespace pagefast::hook
