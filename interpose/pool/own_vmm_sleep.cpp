// interpose/pool/own_vmm_sleep.cpp: sleep and wake of the program's own
// VMM memory of a device by region slot (own_vmm.h, docs/OWN-VMM.md
// "Sleep and wake"): the engine (policy/own_vmm/handle_sleep.h) over the
// ledger, the driver seam (SeamSleepDriver below) and the
// device's provider (own_vmm_copy.cpp), under the sleep mutex.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/own_vmm_sleep.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"

namespace pagefast::pool::own_vmm {
namespace {

// How a log line names the memory of `slot`: the tag the user gave, with
// its policy, or the memory outside any region (slot 0).
std::string slot_words(int slot) {
  const char* name = nullptr;
  bool keep = false;
  if (slot > 0 && region::slot_info(slot, &name, &keep) && name && *name)
    return std::string("tag \"") + name + "\" (" + (keep ? "keep" : "discard") + ")";
  return "the memory outside any region";
}

CUmemAccessDesc desc_at(const std::string& access, size_t at) {
  CUmemAccessDesc desc;
  std::memcpy(&desc, access.data() + at, sizeof desc);
  return desc;
}

CUmemAccessDesc device_desc(int device, CUmemAccess_flags flags) {
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

std::string as_bytes(const CUmemAccessDesc& desc) {
  return std::string(reinterpret_cast<const char*>(&desc), sizeof desc);
}

// The driver as the engine needs it, through the seam.
class SeamSleepDriver final : public policy::own_vmm::SleepDriver {
 public:
  explicit SeamSleepDriver(const RealDriver* real) : real_(real) {}
  bool properties(uint64_t handle, std::string* prop) override {
    CUmemAllocationProp p = {};
    if (driver::handle_properties(real_, &p, handle) != CUDA_SUCCESS) return false;
    prop->assign(reinterpret_cast<const char*>(&p), sizeof p);
    return true;
  }
  bool retain_at(uint64_t addr, uint64_t* handle) override {
    CUmemGenericAllocationHandle h = 0;
    const bool ok = driver::retain_handle(real_, &h, reinterpret_cast<void*>(addr)) == CUDA_SUCCESS;
    *handle = h;
    return ok;
  }
  // One descriptor per device that has any (the driver answers
  // CUDA_ERROR_INVALID_DEVICE past the last device).
  std::string access_of(uint64_t addr) override {
    std::string descs;
    for (int d = 0; d < kMaxDevices; ++d) {
      CUmemAccessDesc desc = device_desc(d, CU_MEM_ACCESS_FLAGS_PROT_NONE);
      unsigned long long flags = 0;
      if (driver::get_access(real_, &flags, &desc.location, addr) != CUDA_SUCCESS) break;
      if (flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
      desc.flags = CUmemAccess_flags(flags);
      descs += as_bytes(desc);
    }
    return descs;
  }
  bool create(uint64_t bytes, const std::string& prop, uint64_t* handle) override {
    CUmemAllocationProp p;
    std::memcpy(&p, prop.data(), sizeof p);
    CUmemGenericAllocationHandle h = 0;
    const bool ok = driver::create(real_, &h, bytes, &p, 0) == CUDA_SUCCESS;
    *handle = h;
    return ok;
  }
  bool release(uint64_t handle) override { return driver::release(real_, handle) == CUDA_SUCCESS; }
  bool map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle) override {
    return driver::map(real_, addr, bytes, offset, handle, 0) == CUDA_SUCCESS;
  }
  bool unmap(uint64_t addr, uint64_t bytes) override { return driver::unmap(real_, addr, bytes) == CUDA_SUCCESS; }
  bool set_access(uint64_t addr, uint64_t bytes, const std::string& access) override {
    if (access.empty()) return true;
    return driver::set_access(real_, addr, bytes, reinterpret_cast<const CUmemAccessDesc*>(access.data()),
                              access.size() / sizeof(CUmemAccessDesc)) == CUDA_SUCCESS;
  }
  bool writable(const std::string& access) override {
    for (size_t at = 0; at + sizeof(CUmemAccessDesc) <= access.size(); at += sizeof(CUmemAccessDesc))
      if (desc_at(access, at).flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return true;
    return false;
  }
  std::string write_access(int device) override {
    return as_bytes(device_desc(device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  }
  std::string after_copy(const std::string& access, int device) override {
    for (size_t at = 0; at + sizeof(CUmemAccessDesc) <= access.size(); at += sizeof(CUmemAccessDesc))
      if (desc_at(access, at).location.id == device) return access;
    return access + as_bytes(device_desc(device, CU_MEM_ACCESS_FLAGS_PROT_NONE));
  }
  bool disown(uint64_t handle) override { return own_vmm::disown(handle); }
  void mapped_again(uint64_t addr) override {
    if (on()) note_foreign(addr);
  }
  void resident(int slot, uint64_t bytes, const char* why) override {
    log_line(LogLevel::Warn, "%s: %.1f MiB of the program's own VMM memory stay resident (%s)",
             slot_words(slot).c_str(), double(bytes) / double(1 << 20), why);
  }
  void wake_refused(int slot, const char* why) override {
    log_line(LogLevel::Warn, "%s: %s; still asleep", slot_words(slot).c_str(), why);
  }

 private:
  const RealDriver* real_;
};

// REQUIRES: sleep_mutex() held. Whether `device` has handles of `slot` to
// sleep or to wake: a device with none is not asked for a provider or a
// context.
bool any_of(int device, int slot, bool asleep) {
  if (asleep) {
    for (const policy::own_vmm::SlotHandle& h : ledger().asleep_handles(slot))
      if (h.device == device) return true;
    return false;
  }
  for (const policy::own_vmm::SlotHandle& h : ledger().program_handles(slot))
    if (h.device == device) return true;
  return false;
}

}  // namespace

SleepAnswer sleep_device(DeviceMemory& memory, int slot, unsigned keep_modes) {
  SleepAnswer answer;
  if (!active()) return answer;
  const RealDriver* real = real_driver();
  std::lock_guard<std::mutex> guard(sleep_mutex());
  if (!any_of(memory.device(), slot, false)) return answer;
  // Before a handle leaves: the program's calls translate from here on.
  g_process.vmm.translating.store(true, std::memory_order_relaxed);
  try {
    const DeviceContext context(real, memory);
    SeamSleepDriver seam(real);
    policy::own_vmm::HandleSleep engine(ledger(), seam, copies_of(memory, real));
    const policy::own_vmm::HandleSleepAnswer part = engine.sleep(memory.device(), slot, keep_modes);
    answer = SleepAnswer{part.status, part.slept_bytes, part.kept_bytes, part.resident_bytes};
  } catch (...) {
    // Out of host memory in a record: what slept so far stays asleep.
    log_line(LogLevel::Warn, "%s: out of host memory; the rest of the program's own VMM memory stays resident",
             slot_words(slot).c_str());
    answer.status = 1;
  }
  settle_translating();
  return answer;
}

int wake_device(DeviceMemory& memory, int slot) {
  if (!active()) return 0;
  const RealDriver* real = real_driver();
  std::lock_guard<std::mutex> guard(sleep_mutex());
  bool woke = false;
  try {
    if (!any_of(memory.device(), slot, true)) return 0;
    const DeviceContext context(real, memory);
    SeamSleepDriver seam(real);
    policy::own_vmm::HandleSleep engine(ledger(), seam, copies_of(memory, real));
    woke = engine.wake(memory.device(), slot);
  } catch (...) {
    log_line(LogLevel::Warn, "%s: out of host memory; the program's own VMM memory is still asleep",
             slot_words(slot).c_str());
  }
  settle_translating();
  return woke ? 0 : -1;
}

SlotBytes slot_bytes(int slot) {
  SlotBytes bytes;
  if (!active() || slot < 0 || slot >= region::kMaxSlots) return bytes;
  // Never the sleep mutex (a sleep holds it across its copy): the ledger's
  // lock, which is not.
  ledger().slot_asleep(slot, &bytes.asleep, &bytes.kept);
  bytes.resident = ledger().slot_resident(slot);
  return bytes;
}

}  // namespace pagefast::pool::own_vmm
