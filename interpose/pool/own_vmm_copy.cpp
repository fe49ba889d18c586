// interpose/pool/own_vmm_copy.cpp: the contents of the program's own VMM
// memory out to host memory at a sleep with keep, and back at wake
// (docs/OWN-VMM.md "Sleep and wake"), through the same copy threads and
// host memory as the pool's chunks (host_copy.cpp, host_memory.h): one
// batch per device, each mapping a device reads one copy, the host memory
// page-locked once and kept for the next sleep (sleep_host_keep), or the
// region's own place (kSleepToDisk, kSleepHostRelease).
//
// A handle's copy (KeptCopy, the book's opaque `host`) is one piece per
// mapping copied. The provider is the device's pool's, or one made for
// these copies where no pool was made (DeviceMemory::copy_provider). A
// device with none (its memory record not made, or the provider refused:
// no VMM) copies the old way: page-locked host memory of the driver's,
// one synchronous copy per mapping, freed after wake.
#include <cstring>
#include <new>
#include <vector>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/own_vmm_sleep.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/real_driver.h"
#include "policy/provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::pool::own_vmm {
namespace {

using policy::HostCopy;
using policy::ProviderStatus;
using policy::own_vmm::AsleepHandle;
using policy::own_vmm::AsleepMapping;

struct KeptPiece {
  uint64_t addr = 0;  // the mapping it was copied through
  uint64_t bytes = 0;
  void* host = nullptr;  // the provider's host memory (or file token), or the driver's
  unsigned mode = 0;
};

struct KeptCopy {
  int device = 0;
  bool provider = true;  // the provider's copies; false: the driver's host memory
  std::vector<KeptPiece> pieces;
};

VmmProvider* provider_of(int device) {
  DeviceMemory* memory = device_memory_made(device);
  return memory ? memory->copy_provider(real_driver()) : nullptr;
}

const KeptPiece* piece_at(const KeptCopy& kept, uint64_t addr) {
  for (const KeptPiece& p : kept.pieces)
    if (p.addr == addr) return &p;
  return nullptr;
}

bool writable(const std::string& access) {
  for (size_t at = 0; at + sizeof(CUmemAccessDesc) <= access.size(); at += sizeof(CUmemAccessDesc)) {
    CUmemAccessDesc desc;
    std::memcpy(&desc, access.data() + at, sizeof desc);
    if (desc.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return true;
  }
  return false;
}

// The driver's way, one mapping at a time: false when a copy failed.
bool copy_out_driver(const RealDriver* real, const AsleepHandle& h, KeptCopy* kept) {
  for (const AsleepMapping& m : h.maps) {
    if (m.access.empty()) continue;  // no device reads it: the program wrote nothing there through it
    void* host = nullptr;
    if (driver::host_alloc(real, &host, m.bytes, 0) != CUDA_SUCCESS || !host) return false;
    kept->pieces.push_back(KeptPiece{m.addr, m.bytes, host, 0});
    if (driver::copy_dtoh(real, host, m.addr, m.bytes) != CUDA_SUCCESS) return false;
  }
  return true;
}

void free_kept(const RealDriver* real, KeptCopy* kept) {
  VmmProvider* provider = kept->provider ? provider_of(kept->device) : nullptr;
  for (const KeptPiece& p : kept->pieces) {
    if (!p.host) continue;
    if (provider) provider->host_free(p.host, p.bytes);
    else if (!kept->provider) driver::free_host(real, p.host);
  }
  delete kept;
}

// The copies of the handles of `device` in one batch of its provider;
// each handle whose every copy is done gets its KeptCopy.
void copy_out_device(VmmProvider* provider, int device, const std::vector<AsleepHandle*>& handles, unsigned mode) {
  std::vector<HostCopy> copies;
  std::vector<size_t> first;  // each handle's first copy
  for (AsleepHandle* h : handles) {
    first.push_back(copies.size());
    if (h->device != device) continue;
    for (const AsleepMapping& m : h->maps)
      if (!m.access.empty()) copies.push_back(HostCopy{m.addr, m.bytes, nullptr, mode, ProviderStatus::Failed});
  }
  first.push_back(copies.size());
  if (!copies.empty()) provider->copy_to_host(copies.data(), copies.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    AsleepHandle& h = *handles[i];
    if (h.device != device) continue;
    KeptCopy* kept = new (std::nothrow) KeptCopy{device, true, {}};
    bool ok = kept != nullptr;
    for (size_t c = first[i]; c < first[i + 1]; ++c) {
      const HostCopy& copy = copies[c];
      if (copy.status != ProviderStatus::Ok) {
        ok = false;
        continue;
      }
      if (kept) kept->pieces.push_back(KeptPiece{copy.addr, copy.bytes, copy.host, mode});
      else provider->host_free(copy.host, copy.bytes);
    }
    if (ok) {
      h.host = kept;
    } else if (kept) {
      free_kept(nullptr, kept);
    }
  }
}

}  // namespace

CUresult set_mapping_access(const RealDriver* real, const AsleepMapping& m) {
  if (m.access.empty()) return CUDA_SUCCESS;
  return driver::set_access(real, m.addr, m.bytes, reinterpret_cast<const CUmemAccessDesc*>(m.access.data()),
                            m.access.size() / sizeof(CUmemAccessDesc));
}

DeviceContext::DeviceContext(const RealDriver* real, int device) : real_(real) {
  VmmProvider* provider = provider_of(device);
  const CUcontext want = provider ? provider->copy_context() : nullptr;
  CUcontext current = nullptr;
  driver::ctx_get_current(real, &current);
  if (want && want != current && driver::has_context_push(real)) pushed_ = driver::ctx_push(real, want) == CUDA_SUCCESS;
}

DeviceContext::~DeviceContext() {
  CUcontext popped = nullptr;
  if (pushed_) driver::ctx_pop(real_, &popped);
}

void keep_sizes(int device, std::vector<uint64_t>* sizes) {
  if (!active()) return;
  for (int slot = 1; slot < region::slot_count(); ++slot) {
    if (region::slot_policy(slot) != region::kKeep) continue;
    for (const policy::own_vmm::SlotHandle& h : ledger().program_handles(slot)) {
      if (h.device != device || h.shared || h.multicast) continue;
      for (const policy::own_vmm::LedgerMapping& m : h.maps) sizes->push_back(m.bytes);
    }
  }
}

void free_host_copy(void* host) {
  if (host) free_kept(real_driver(), static_cast<KeptCopy*>(host));
}

void copy_out(const RealDriver* real, const std::vector<AsleepHandle*>& handles, unsigned mode) {
  bool seen[kMaxDevices] = {};
  for (AsleepHandle* h : handles) h->host = nullptr;
  for (AsleepHandle* h : handles) {
    if (h->device < 0 || h->device >= kMaxDevices || seen[h->device]) continue;
    seen[h->device] = true;
    if (VmmProvider* provider = provider_of(h->device)) {
      copy_out_device(provider, h->device, handles, mode);
      continue;
    }
    for (AsleepHandle* same : handles) {
      if (same->device != h->device) continue;
      const DeviceContext context(real, same->device);
      KeptCopy* kept = new (std::nothrow) KeptCopy{same->device, false, {}};
      if (kept && copy_out_driver(real, *same, kept)) same->host = kept;
      else if (kept) free_kept(real, kept);
    }
  }
}

// The access set for the copy back of a mapping no device may write: the
// handle's device may, for the copy (then set_mapping_access sets the record's).
bool open_for_copy(const RealDriver* real, const AsleepHandle& h, const AsleepMapping& m) {
  CUmemAccessDesc own = {};
  own.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  own.location.id = h.device;
  own.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return driver::set_access(real, m.addr, m.bytes, &own, 1) == CUDA_SUCCESS;
}

// The access of a mapping opened for its copy, as its record says (the
// handle's device closed when the record does not name it).
bool close_after_copy(const RealDriver* real, const AsleepHandle& h, const AsleepMapping& m) {
  AsleepMapping again = m;
  bool named = false;
  CUmemAccessDesc desc = {};
  for (size_t at = 0; at + sizeof desc <= m.access.size(); at += sizeof desc) {
    std::memcpy(&desc, m.access.data() + at, sizeof desc);
    named = named || desc.location.id == h.device;
  }
  if (!named) {
    CUmemAccessDesc none = {};
    none.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    none.location.id = h.device;
    none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    again.access.append(reinterpret_cast<const char*>(&none), sizeof none);
  }
  return set_mapping_access(real, again) == CUDA_SUCCESS;
}

void copy_in(const RealDriver* real, const std::vector<const AsleepHandle*>& handles, std::vector<char>* ok) {
  ok->assign(handles.size(), 1);
  struct Planned {
    size_t handle;
    const AsleepMapping* mapping;
    bool opened;
  };
  for (int device = 0; device < kMaxDevices; ++device) {
    std::vector<HostCopy> copies;
    std::vector<Planned> planned;
    for (size_t i = 0; i < handles.size(); ++i) {
      const AsleepHandle& h = *handles[i];
      const KeptCopy* kept = static_cast<const KeptCopy*>(h.host);
      if (h.device != device || !kept) continue;
      for (const AsleepMapping& m : h.maps) {
        const KeptPiece* piece = m.access.empty() ? nullptr : piece_at(*kept, m.addr);
        if (!piece || piece->bytes != m.bytes) continue;
        const bool opened = !writable(m.access);
        if (opened && !open_for_copy(real, h, m)) {
          (*ok)[i] = 0;
          continue;
        }
        if (kept->provider) {
          copies.push_back(
              HostCopy{m.addr, m.bytes, piece->host, piece->mode | policy::kSleepHoldHost, ProviderStatus::Failed});
          planned.push_back(Planned{i, &m, opened});
          continue;
        }
        const DeviceContext context(real, device);
        if (driver::copy_htod(real, m.addr, piece->host, m.bytes) != CUDA_SUCCESS) (*ok)[i] = 0;
        if (opened && !close_after_copy(real, h, m)) (*ok)[i] = 0;
      }
    }
    if (copies.empty()) continue;
    VmmProvider* provider = provider_of(device);
    if (provider) provider->copy_from_host(copies.data(), copies.size());
    for (size_t c = 0; c < copies.size(); ++c) {
      const Planned& p = planned[c];
      if (!provider || copies[c].status != ProviderStatus::Ok) (*ok)[p.handle] = 0;
      if (p.opened && !close_after_copy(real, *handles[p.handle], *p.mapping)) (*ok)[p.handle] = 0;
    }
  }
}

}  // namespace pagefast::pool::own_vmm
