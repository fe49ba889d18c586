// tests/fakecuda/device.cpp: cuInit and the driver version, device queries
// (name, UUID, attributes, PCI identity, peers), primary contexts, created
// contexts, the per-thread context stack and peer access.
//
// Context lifetime as in the driver: a primary context is alive while it is
// retained; releasing it to zero, or resetting it, destroys what lives in it
// (cuMemAlloc blocks, streams) and leaves the same handle behind, dead, until
// it is retained again. Calls made with a dead context current answer
// CUDA_ERROR_CONTEXT_IS_DESTROYED. VMM objects belong to the device, not to a
// context, and survive all of this.
#include <cstdio>
#include <cstring>

#include "api_list.h"
#include "counters.h"
#include "fakecuda.h"
#include "state.h"

using namespace fake;

namespace {

void activate(Context* ctx) {
  ctx->alive = true;
  ctx->null_stream = new_stream(ctx, 0, 0, /*is_null=*/true);
}

Context* make_context(int device, unsigned flags) {
  Context* ctx = new Context;
  ctx->device = device;
  ctx->flags = flags;
  state().contexts.insert(ctx);
  activate(ctx);
  return ctx;
}

CUresult create_context(CUcontext* out, unsigned flags, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = make_context(dev, flags);
  context_stack().push_back(ctx);  // cuCtxCreate makes the new context current
  *out = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

// The UUID is fixed per ordinal so tests can predict it:
// fa4ec0da-0000-4000-8000-0000000000NN for device NN.
void fill_uuid(CUuuid* uuid, int dev) {
  static const unsigned char kPrefix[15] = {0xfa, 0x4e, 0xc0, 0xda, 0x00, 0x00, 0x40, 0x00,
                                            0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  memcpy(uuid->bytes, kPrefix, sizeof kPrefix);
  uuid->bytes[15] = char(dev);
}

CUresult get_uuid(CUuuid* uuid, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  fill_uuid(uuid, dev);
  return CUDA_SUCCESS;
}

// An H200-like device: compute capability 9.0, 132 SMs, VMM and UVA.
// Attributes not listed answer 0, as unsupported features do.
int attribute_value(CUdevice_attribute attribute, const Device& device) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return int(device.pci.bus);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return int(device.pci.device);
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return int(device.pci.domain);
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return device.ordinal;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      return state().config.posix_fd ? 1 : 0;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return CU_DEVICE_NUMA_CONFIG_NONE;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
    // As in the VM of docs/DRIVER-FACTS.md: the driver knows no host NUMA node.
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return -1;
    default: return 0;
  }
}

}  // namespace

CUresult impl::cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  Lock lock(st.mu);
  static bool config_read = false;
  if (!config_read) {
    // The environment is read once, here and not at load time: a library
    // preloaded before main may call in before the program set anything up.
    st.config = read_config();
    config_read = true;
    install_fail_plan_from_env();
  }
  if (st.initialized.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  if (st.config.devices == 0) return CUDA_ERROR_NO_DEVICE;
  st.devices.resize(size_t(st.config.devices));
  for (int i = 0; i < st.config.devices; ++i) {
    Device& device = st.devices[size_t(i)];
    device.ordinal = i;
    device.total_bytes = st.config.total_bytes;
    device.pci = st.config.pci[size_t(i)];
    device.primary = new Context;
    device.primary->device = i;
    device.primary->primary = true;
    st.contexts.insert(device.primary);
  }
  attach_shared_memory(st);
  st.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult impl::cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

// --- devices -------------------------------------------------------------------

CUresult impl::cuDeviceGet(CUdevice* device, int ordinal) {
  FAKE_REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetCount(int* count) {
  FAKE_REQUIRE_INIT();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = int(state().devices.size());
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetName(char* name, int len, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, size_t(len), "NVIDIA H200 (fakecuda)");
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return get_uuid(uuid, dev); }
CUresult impl::cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult impl::cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = size_t(state().devices[size_t(dev)].total_bytes);
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (int(attribute) <= 0 || int(attribute) >= int(CU_DEVICE_ATTRIBUTE_MAX))
    return CUDA_ERROR_INVALID_VALUE;
  *value = attribute_value(attribute, state().devices[size_t(dev)]);
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const PciAddress& pci = state().devices[size_t(dev)].pci;
  snprintf(bus_id, size_t(len), "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device, pci.function);
  return CUDA_SUCCESS;
}

CUresult impl::cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus_id) {
  FAKE_REQUIRE_INIT();
  if (!dev || !bus_id) return CUDA_ERROR_INVALID_VALUE;
  PciAddress wanted;
  if (!parse_pci(bus_id, strlen(bus_id), &wanted)) return CUDA_ERROR_INVALID_VALUE;
  for (const Device& device : state().devices) {
    const PciAddress& pci = device.pci;
    if (pci.domain == wanted.domain && pci.bus == wanted.bus && pci.device == wanted.device &&
        pci.function == wanted.function) {
      *dev = device.ordinal;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

CUresult impl::cuDeviceCanAccessPeer(int* can_access, CUdevice dev, CUdevice peer) {
  FAKE_REQUIRE_INIT();
  if (!can_access) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = dev != peer ? 1 : 0;  // a device is not its own peer
  return CUDA_SUCCESS;
}

// --- primary contexts ----------------------------------------------------------

CUresult impl::cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& device = state().devices[size_t(dev)];
  ++device.primary_refs;
  if (!device.primary->alive) {
    device.primary->flags = device.primary_flags;
    activate(device.primary);
  }
  *ctx = reinterpret_cast<CUcontext>(device.primary);
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& device = state().devices[size_t(dev)];
  if (device.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--device.primary_refs == 0 && device.primary->alive)
    destroy_context_resources(lock, device.primary);
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxRelease(CUdevice dev) {
  return impl::cuDevicePrimaryCtxRelease_v2(dev);
}

// Destroys the primary context's contents but keeps the references: those
// who retained it still release it, and the next retain brings it back.
CUresult impl::cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& device = state().devices[size_t(dev)];
  if (device.primary->alive) destroy_context_resources(lock, device.primary);
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxReset(CUdevice dev) {
  return impl::cuDevicePrimaryCtxReset_v2(dev);
}

CUresult impl::cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~unsigned(CU_CTX_FLAGS_MASK)) return CUDA_ERROR_INVALID_VALUE;
  Device& device = state().devices[size_t(dev)];
  device.primary_flags = flags;
  device.primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return impl::cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult impl::cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  FAKE_REQUIRE_INIT();
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const Device& device = state().devices[size_t(dev)];
  *flags = device.primary_flags;
  *active = device.primary->alive ? 1 : 0;
  return CUDA_SUCCESS;
}

// --- contexts ------------------------------------------------------------------

CUresult impl::cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return create_context(ctx, flags, dev);
}

// Execution affinity and CIG parameters are accepted and ignored.
CUresult impl::cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* affinity, int affinity_count,
                              unsigned int flags, CUdevice dev) {
  if (affinity_count < 0 || (affinity_count > 0 && !affinity)) return CUDA_ERROR_INVALID_VALUE;
  return create_context(ctx, flags, dev);
}

CUresult impl::cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                              CUdevice dev) {
  (void)params;
  return create_context(ctx, flags, dev);
}

CUresult impl::cuCtxDestroy_v2(CUcontext handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!known_context(handle)) return CUDA_ERROR_INVALID_CONTEXT;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (ctx->primary || !ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context_resources(lock, ctx);
  std::vector<Context*>& stack = context_stack();
  if (!stack.empty() && stack.back() == ctx) stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxGetCurrent(CUcontext* ctx) {
  FAKE_REQUIRE_INIT();
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Context*>& stack = context_stack();
  *ctx = stack.empty() ? nullptr : reinterpret_cast<CUcontext>(stack.back());
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxSetCurrent(CUcontext handle) {
  FAKE_REQUIRE_INIT();
  std::vector<Context*>& stack = context_stack();
  if (!handle) {
    // NULL pops, as the driver documents (a no-op on an empty stack).
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Lock lock(state().mu);
  if (!known_context(handle)) return CUDA_ERROR_INVALID_CONTEXT;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (stack.empty()) stack.push_back(ctx);
  else stack.back() = ctx;
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxPushCurrent_v2(CUcontext handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!handle || !known_context(handle)) return CUDA_ERROR_INVALID_CONTEXT;
  context_stack().push_back(reinterpret_cast<Context*>(handle));
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxPopCurrent_v2(CUcontext* ctx) {
  FAKE_REQUIRE_INIT();
  std::vector<Context*>& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx) *ctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxGetDevice(CUdevice* dev) {
  FAKE_REQUIRE_INIT();
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  *dev = ctx->device;
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxSynchronize(void) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  // Synchronizing with a stream that is being captured is what breaks a
  // capture on a GPU; the fake enforces it the same way.
  FAKE_TRY(check_capture_unsafe());
  if (const CUresult error = state().devices[size_t(ctx->device)].sync_error) return error;
  wait_streams_idle(lock, [ctx](const Stream* s) { return s->ctx == ctx; });
  release_retained(ctx->device);
  return CUDA_SUCCESS;
}

extern "C" int fakecuda_set_sync_error(int ordinal, CUresult error) {
  State& st = state();
  Lock lock(st.mu);
  if (ordinal < 0 || size_t(ordinal) >= st.devices.size()) return -1;
  st.devices[size_t(ordinal)].sync_error = error;
  return 0;
}

// --- peer access ---------------------------------------------------------------

CUresult impl::cuCtxEnablePeerAccess(CUcontext peer_handle, unsigned int flags) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!known_context(peer_handle)) return CUDA_ERROR_INVALID_CONTEXT;
  Context* peer = reinterpret_cast<Context*>(peer_handle);
  if (!peer->alive || peer == ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (peer->device == ctx->device) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (!ctx->peers.insert(peer).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxDisablePeerAccess(CUcontext peer_handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!known_context(peer_handle)) return CUDA_ERROR_INVALID_CONTEXT;
  Context* peer = reinterpret_cast<Context*>(peer_handle);
  if (!peer->alive) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->peers.erase(peer) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}
