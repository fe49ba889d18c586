// numa/nvml_oracle.h: GpuOracle answered by NVML (libnvidia-ml.so.1,
// installed with the driver). dlopen'ed on the first question, never at
// link time, and not at all when nothing asks: NVML's init costs tens of
// milliseconds, so it is reserved for multi-node machines whose sysfs
// cannot place the GPU. NVML is not CUDA: it creates no context.
#pragma once

#include "numa/gpu_oracle.h"

namespace pagefast::numa {

class NvmlOracle final : public GpuOracle {
 public:
  NvmlOracle() = default;
  ~NvmlOracle() override;  // nvmlShutdown when it was initialised
  NvmlOracle(const NvmlOracle&) = delete;
  NvmlOracle& operator=(const NvmlOracle&) = delete;

  int node_of(const std::string& bdf) override;
  bool mig_parent(const std::string& mig_uuid, std::string* bdf) override;

 private:
  bool ready();  // loads and initialises once; false when NVML is absent or fails
  struct Api;
  Api* api_ = nullptr;
  bool tried_ = false;
};

}  // namespace pagefast::numa
