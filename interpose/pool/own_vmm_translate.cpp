// interpose/pool/own_vmm_translate.cpp: the translation of the program's
// handle values once a handle slept, and the answers for a handle asleep
// (own_vmm.h, policy/own_vmm/ledger.h "Asleep", docs/OWN-VMM.md "Sleep and
// wake"). Each call takes the sleep mutex, so that no call on a handle
// runs while sleep or wake takes it apart or makes it again.
#include <cstring>
#include <string>
#include <vector>

#include "interpose/pool/own_vmm.h"
#include "interpose/pool/own_vmm_sleep.h"

namespace pagefast::pool::own_vmm {

static_assert(policy::own_vmm::kIllegalState == CUDA_ERROR_ILLEGAL_STATE, "the ledger's answer is the driver's");

std::mutex& sleep_mutex() {
  static std::mutex* mutex = new std::mutex();  // never destroyed: hooks run at exit
  return *mutex;
}

namespace {

// Out of host memory in the ledger: the call answers as the driver does
// when out of memory (its own call, if made, stands).
template <class Call>
CUresult guarded(Call call) {
  try {
    return call();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

// REQUIRES: sleep_mutex(). The driver's value of the program's `handle` in
// *driver (the same value when it never slept); false while it is asleep.
bool driver_value(CUmemGenericAllocationHandle handle, CUmemGenericAllocationHandle* driver) {
  uint64_t value = 0;
  const bool awake = ledger().to_driver(handle, &value);
  *driver = value;
  return awake;
}

// Under sleep_mutex(): awake(the driver's value) for a handle awake,
// asleep() for one asleep.
template <typename Awake, typename Asleep>
CUresult by_handle(CUmemGenericAllocationHandle handle, Awake awake, Asleep asleep) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    CUmemGenericAllocationHandle driver = 0;
    return driver_value(handle, &driver) ? awake(driver) : asleep();
  });
}
CUresult illegal_state() { return CUDA_ERROR_ILLEGAL_STATE; }

// The descriptors `desc` set over the record `access` (one descriptor per
// location, as the driver keeps one access per device): a location's flags
// replaced, PROT_NONE removing it.
void merge_access(std::string* access, const CUmemAccessDesc* desc, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    std::string merged;
    for (size_t at = 0; at + sizeof(CUmemAccessDesc) <= access->size(); at += sizeof(CUmemAccessDesc)) {
      CUmemAccessDesc old;
      std::memcpy(&old, access->data() + at, sizeof old);
      if (old.location.type == desc[i].location.type && old.location.id == desc[i].location.id) continue;
      merged.append(reinterpret_cast<const char*>(&old), sizeof old);
    }
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
      merged.append(reinterpret_cast<const char*>(&desc[i]), sizeof desc[i]);
    access->swap(merged);
  }
}

}  // namespace

void settle_translating() { g_process.vmm.translating.store(ledger().translates(), std::memory_order_relaxed); }

void prune_aliases(const uint64_t* driver, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t program = ledger().to_program(driver[i]);
    if (program == driver[i]) continue;  // no alias
    const policy::own_vmm::HandleFacts facts = ledger().facts(driver[i]);
    if (facts.refs == 0 && facts.maps == 0) ledger().drop_alias(program);
  }
  settle_translating();
}

CUresult translated_create(CUmemGenericAllocationHandle* handle, HandleCall call) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    const CUresult r = call(handle);
    if (r == CUDA_SUCCESS && handle) *handle = ledger().adopt(*handle);
    return r;
  });
}

CUresult translated_import(CUmemGenericAllocationHandle* handle, HandleCall call) {
  return translated_create(handle, call);
}

CUresult translated_retain(CUmemGenericAllocationHandle* handle, void* addr, HandleCall call) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    if (addr && ledger().overlaps_asleep(reinterpret_cast<uintptr_t>(addr), 1)) return CUDA_ERROR_ILLEGAL_STATE;
    const CUresult r = call(handle);
    if (r == CUDA_SUCCESS && handle) *handle = ledger().to_program(*handle);
    return r;
  });
}

CUresult translated_release(CUmemGenericAllocationHandle handle, HandleCall call) {
  const auto awake = [&](CUmemGenericAllocationHandle driver) {
    const CUresult r = call(&driver);
    const uint64_t released = driver;
    if (r == CUDA_SUCCESS) prune_aliases(&released, 1);
    return r;
  };
  return by_handle(handle, awake, [&] {
    bool gone = false;
    void* host = nullptr;
    const int r = ledger().release_asleep(handle, &gone, &host);
    if (gone) {
      free_host_copy(host);
      settle_translating();
    }
    return CUresult(r);
  });
}

CUresult translated_map(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle, HandleCall call) {
  const auto awake = [&](CUmemGenericAllocationHandle driver) {
    // The range a mapping asleep keeps: mapped, as the driver would say.
    if (ledger().overlaps_asleep(ptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
    return call(&driver);
  };
  return by_handle(handle, awake, illegal_state);
}

CUresult translated_unmap(CUdeviceptr ptr, size_t bytes, HandleCall call) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    std::vector<void*> gone;
    const int r = ledger().unmap_asleep(ptr, bytes, &gone);
    for (void* host : gone) free_host_copy(host);
    if (!gone.empty()) settle_translating();
    if (r >= 0) return CUresult(r);
    // The handles mapped there (read before: the call ends their mappings).
    const std::vector<uint64_t> mapped =
        ledger().aliases_empty() ? std::vector<uint64_t>() : ledger().mapped_in(ptr, bytes);
    CUmemGenericAllocationHandle none = 0;
    const CUresult result = call(&none);
    if (result == CUDA_SUCCESS) prune_aliases(mapped.data(), mapped.size());
    return result;
  });
}

CUresult translated_address_free(CUdeviceptr ptr, size_t bytes, HandleCall call) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    // Mappings asleep there: still mapped to the program, which must unmap first.
    if (ledger().overlaps_asleep(ptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
    CUmemGenericAllocationHandle none = 0;
    return call(&none);
  });
}

CUresult translated_set_access(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count,
                               HandleCall call) {
  return guarded([&]() -> CUresult {
    std::lock_guard<std::mutex> guard(sleep_mutex());
    // Mappings asleep: their records take the access, which wake sets.
    const bool valid = desc && count != 0;
    const int r = ledger().access_asleep(ptr, bytes, [&](std::string* access) {
      if (valid) merge_access(access, desc, count);
    });
    if (r < 0) {
      CUmemGenericAllocationHandle none = 0;
      return call(&none);
    }
    if (r != 0) return CUresult(r);  // not whole mappings asleep
    return valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult translated_export(CUmemGenericAllocationHandle handle, HandleCall call) {
  return by_handle(
      handle, [&](CUmemGenericAllocationHandle driver) { return call(&driver); }, illegal_state);
}

CUresult translated_bind(CUmemGenericAllocationHandle handle, HandleCall call) {
  return translated_export(handle, call);
}

CUresult translated_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle, HandleCall call) {
  return by_handle(
      handle, [&](CUmemGenericAllocationHandle driver) { return call(&driver); },
      [&] {
        std::string bytes;
        if (!prop || !ledger().asleep_properties(handle, &bytes) || bytes.size() != sizeof *prop)
          return CUDA_ERROR_INVALID_VALUE;
        std::memcpy(prop, bytes.data(), sizeof *prop);
        return CUDA_SUCCESS;
      });
}

}  // namespace pagefast::pool::own_vmm
