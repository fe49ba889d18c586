// interpose/hooks_context.cpp: the hooks of peer access, primary context
// reset and release, context destruction (the pool follows the driver's
// answer) and cuGetProcAddress (which hands out the hooks).
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

// Peer access: the driver decides; on success the owner's pool follows
// (VMM memory is not opened to a peer by the driver's peer access).
namespace {

// The device of the current context and of `peer`; false if either is
// unknown (the pool then does nothing: the driver's answer stands).
bool peer_devices(CUcontext peer, int* accessor, int* owner) {
  const RealDriver* real = real_driver();
  if (!driver::has_context_push(real)) return false;
  CUdevice mine = 0, theirs = 0;
  if (driver::ctx_get_device(real, &mine) != CUDA_SUCCESS) return false;
  if (driver::ctx_push(real, peer) != CUDA_SUCCESS) return false;
  const CUresult r = driver::ctx_get_device(real, &theirs);
  CUcontext popped = nullptr;
  driver::ctx_pop(real, &popped);
  if (r != CUDA_SUCCESS) return false;
  *accessor = int(mine);
  *owner = int(theirs);
  return true;
}

}  // namespace

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  const bool on = active(Entry::cuCtxEnablePeerAccess);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuCtxEnablePeerAccess, (peerContext, Flags));
  int accessor, owner;
  if (on && result == CUDA_SUCCESS && peer_devices(peerContext, &accessor, &owner))
    pool::on_peer_access_enabled(accessor, owner);
  return result;
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  const bool on = active(Entry::cuCtxDisablePeerAccess);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuCtxDisablePeerAccess, (peerContext));
  int accessor, owner;
  if (on && result == CUDA_SUCCESS && peer_devices(peerContext, &accessor, &owner))
    pool::on_peer_access_disabled(accessor, owner);
  return result;
}

// Primary context reset and release: forwarded; when the device's primary
// context is gone afterwards (a reset always, a release once no retain is
// left), so is its memory, and the pool steps aside.
static bool primary_gone(const RealDriver* real, CUdevice device, bool reset) {
  if (reset) return true;
  unsigned flags = 0;
  int still_active = 1;
  return driver::primary_ctx_state(real, device, &flags, &still_active) == CUDA_SUCCESS && !still_active;
}

#define PF_PRIMARY_END(symbol, reset)                                                                          \
  CUresult symbol(CUdevice device) {                                                                           \
    const bool on = active(Entry::symbol);                                                                     \
    const RealDriver* real = real_driver();                                                                    \
    if (!real || !real->symbol) return kMissing;                                                               \
    const CUresult result = real->symbol(device);                                                              \
    if (on && result == CUDA_SUCCESS && primary_gone(real, device, reset)) pool::on_device_reset(int(device)); \
    return result;                                                                                             \
  }
PF_PRIMARY_END(cuDevicePrimaryCtxReset, true)
PF_PRIMARY_END(cuDevicePrimaryCtxReset_v2, true)
PF_PRIMARY_END(cuDevicePrimaryCtxRelease, false)
PF_PRIMARY_END(cuDevicePrimaryCtxRelease_v2, false)
#undef PF_PRIMARY_END

// Context destruction: the driver frees the context's memory; the pool's
// blocks allocated in it go back to the pool once it did.
#define PF_CTX_DESTROY(symbol)                                                                            \
  CUresult symbol(CUcontext ctx) {                                                                        \
    const bool on = active(Entry::symbol);                                                                \
    const RealDriver* real = real_driver();                                                               \
    if (!real || !real->symbol) return kMissing;                                                          \
    const pool::ContextDestroy destroy = on ? pool::before_context_destroy(ctx) : pool::ContextDestroy{}; \
    const CUresult result = real->symbol(ctx);                                                            \
    if (on) pool::after_context_destroy(destroy, result == CUDA_SUCCESS);                                 \
    return result;                                                                                        \
  }
PF_CTX_DESTROY(cuCtxDestroy)
PF_CTX_DESTROY(cuCtxDestroy_v2)
#undef PF_CTX_DESTROY

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const bool on = active(Entry::cuGetProcAddress_v2);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cuda_version, flags, status));
  if (on && result == CUDA_SUCCESS && pfn && *pfn && symbol)
    if (void* replacement = proc_address_replacement(symbol, *pfn, cuda_version, flags)) *pfn = replacement;
  return result;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  const bool on = active(Entry::cuGetProcAddress);
  const RealDriver* real = real_driver();
  // A driver without the first variant answers through the second.
  const CUresult result = driver::has(real, &RealDriver::cuGetProcAddress)
                              ? PF_CALL_REAL(cuGetProcAddress, (symbol, pfn, cuda_version, flags))
                              : PF_CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cuda_version, flags, nullptr));
  if (on && result == CUDA_SUCCESS && pfn && *pfn && symbol)
    if (void* replacement = proc_address_replacement(symbol, *pfn, cuda_version, flags)) *pfn = replacement;
  return result;
}

}  // namespace pagefast::hook
