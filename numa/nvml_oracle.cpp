// numa/nvml_oracle.cpp: the few NVML entry points the oracle needs. Their
// prototypes are copied from nvml.h (CUDA 12/13), so numa/ needs no NVML
// header; each keeps its exact signature.
#include "numa/nvml_oracle.h"

#include <dlfcn.h>

#include <cstring>

namespace pagefast::numa {
namespace {

using nvmlReturn_t = int;  // an enum in nvml.h; NVML_SUCCESS is 0
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned int kAffinityScopeNode = 0;  // NVML_AFFINITY_SCOPE_NODE
// Words of node mask asked for: 1024 nodes, more than any machine has.
constexpr unsigned int kNodeMaskWords = 16;

// nvmlPciInfo_t, the _v3 layout.
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

}  // namespace

struct NvmlOracle::Api {
  nvmlReturn_t (*init)();                                     // nvmlInit_v2
  nvmlReturn_t (*shutdown)();                                 // nvmlShutdown
  nvmlReturn_t (*by_pci_bus_id)(const char*, nvmlDevice_t*);  // nvmlDeviceGetHandleByPciBusId_v2
  nvmlReturn_t (*memory_affinity)(nvmlDevice_t, unsigned int, unsigned long*, unsigned int);
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*);         // nvmlDeviceGetHandleByUUID
  nvmlReturn_t (*parent_of_mig)(nvmlDevice_t, nvmlDevice_t*);  // ...FromMigDeviceHandle
  nvmlReturn_t (*pci_info)(nvmlDevice_t, NvmlPciInfo*);        // nvmlDeviceGetPciInfo_v3
};

NvmlOracle::~NvmlOracle() {
  if (api_) api_->shutdown();
  delete api_;  // the library stays loaded: unloading NVML is not worth its risks
}

bool NvmlOracle::ready() {
  if (tried_) return api_ != nullptr;
  tried_ = true;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  Api api{};
  api.init = reinterpret_cast<decltype(api.init)>(::dlsym(lib, "nvmlInit_v2"));
  api.shutdown = reinterpret_cast<decltype(api.shutdown)>(::dlsym(lib, "nvmlShutdown"));
  api.by_pci_bus_id = reinterpret_cast<decltype(api.by_pci_bus_id)>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  api.memory_affinity = reinterpret_cast<decltype(api.memory_affinity)>(::dlsym(lib, "nvmlDeviceGetMemoryAffinity"));
  api.by_uuid = reinterpret_cast<decltype(api.by_uuid)>(::dlsym(lib, "nvmlDeviceGetHandleByUUID"));
  api.parent_of_mig =
      reinterpret_cast<decltype(api.parent_of_mig)>(::dlsym(lib, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"));
  api.pci_info = reinterpret_cast<decltype(api.pci_info)>(::dlsym(lib, "nvmlDeviceGetPciInfo_v3"));
  if (!api.init || !api.shutdown || api.init() != kNvmlSuccess) return false;
  api_ = new Api(api);
  return true;
}

int NvmlOracle::node_of(const std::string& bdf) {
  if (!ready() || !api_->by_pci_bus_id || !api_->memory_affinity) return -1;
  nvmlDevice_t device = nullptr;
  if (api_->by_pci_bus_id(bdf.c_str(), &device) != kNvmlSuccess) return -1;
  unsigned long mask[kNodeMaskWords] = {};
  if (api_->memory_affinity(device, kNodeMaskWords, mask, kAffinityScopeNode) != kNvmlSuccess) return -1;
  // One node, or no answer: a GPU "near" several nodes does not say where to bind.
  int node = -1;
  const int bits = static_cast<int>(8 * sizeof(unsigned long));
  for (unsigned int w = 0; w < kNodeMaskWords; ++w) {
    for (int b = 0; b < bits; ++b) {
      if (!((mask[w] >> b) & 1)) continue;
      if (node >= 0) return -1;
      node = static_cast<int>(w) * bits + b;
    }
  }
  return node;
}

bool NvmlOracle::mig_parent(const std::string& mig_uuid, std::string* bdf) {
  if (!ready() || !api_->by_uuid || !api_->parent_of_mig || !api_->pci_info) return false;
  nvmlDevice_t mig = nullptr, parent = nullptr;
  NvmlPciInfo info;
  std::memset(&info, 0, sizeof info);
  if (api_->by_uuid(mig_uuid.c_str(), &mig) != kNvmlSuccess || api_->parent_of_mig(mig, &parent) != kNvmlSuccess ||
      api_->pci_info(parent, &info) != kNvmlSuccess)
    return false;
  info.busId[sizeof info.busId - 1] = '\0';
  *bdf = info.busId;
  return true;
}

}  // namespace pagefast::numa
