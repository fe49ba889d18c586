// interpose/pool/own_vmm_sleep.cpp: sleep and wake of the program's own
// VMM memory by region slot (own_vmm.h, docs/OWN-VMM.md "Sleep and
// wake"), over the ledger (which handles, their mappings) and the book
// (policy/own_vmm/sleep_book.h: what slept, and the program's values).
//
// Sleep of a handle: its properties and each mapping's access are read
// from the driver; with keep its contents go to page-locked host memory
// through its mappings (the parts no mapping shows are not kept); each
// mapping is unmapped; the driver's references are released (one when the
// own-VMM cache tracked it: the cache keeps the program's retains to
// itself; else the program's). Stays resident, named in the log: a handle
// exported or imported (another process may hold its memory), one the
// program maps nowhere, and one whose copy or unmap the driver refused.
// Wake makes each handle of the slot again, all or none.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

using policy::own_vmm::AsleepHandle;
using policy::own_vmm::AsleepMapping;
using policy::own_vmm::SlotHandle;

// The context of `device` current on this thread for a scope: sleep and
// wake may run on a thread with none (pagefast-ctl's, on pagefast-ipc-bg),
// and the copies and the sync need one. Pushed when another (or none) is
// current, popped at the end.
class DeviceContext {
 public:
  DeviceContext(const RealDriver* real, int device) : real_(real) {
    DeviceMemory* memory = device_memory(device);
    const CUcontext want = memory && memory->provider() ? memory->provider()->copy_context() : nullptr;
    CUcontext current = nullptr;
    driver::ctx_get_current(real, &current);
    if (want && want != current && driver::has_context_push(real))
      pushed_ = driver::ctx_push(real, want) == CUDA_SUCCESS;
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  bool pushed() const { return pushed_; }
  ~DeviceContext() {
    CUcontext popped = nullptr;
    if (pushed_) driver::ctx_pop(real_, &popped);
  }

 private:
  const RealDriver* real_;
  bool pushed_ = false;
};

// The access of the mapping at `addr`, as descriptors to set again: one
// per device that has any (the driver answers CUDA_ERROR_INVALID_DEVICE
// past the last device).
std::string read_access(const RealDriver* real, CUdeviceptr addr) {
  std::string descs;
  for (int d = 0; d < kMaxDevices; ++d) {
    CUmemAccessDesc desc = {};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = d;
    unsigned long long flags = 0;
    if (driver::get_access(real, &flags, &desc.location, addr) != CUDA_SUCCESS) break;
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
    desc.flags = CUmemAccess_flags(flags);
    descs.append(reinterpret_cast<const char*>(&desc), sizeof desc);
  }
  return descs;
}

CUresult set_access(const RealDriver* real, const AsleepMapping& m) {
  if (m.access.empty()) return CUDA_SUCCESS;
  return driver::set_access(real, m.addr, m.bytes, reinterpret_cast<const CUmemAccessDesc*>(m.access.data()),
                            m.access.size() / sizeof(CUmemAccessDesc));
}

// The handle's contents through its open mappings into page-locked host
// memory; null when there is none to take them or a copy failed.
void* copy_out(const RealDriver* real, const AsleepHandle& h) {
  void* host = nullptr;
  if (driver::host_alloc(real, &host, h.bytes, 0) != CUDA_SUCCESS || !host) return nullptr;
  for (const AsleepMapping& m : h.maps) {
    if (m.access.empty()) continue;  // no device reads it: the program wrote nothing there through it
    if (driver::copy_dtoh(real, static_cast<char*>(host) + m.offset, m.addr, m.bytes) != CUDA_SUCCESS) {
      driver::free_host(real, host);
      return nullptr;
    }
  }
  return host;
}

// Unmaps every mapping of `h`; on a refusal maps back those done, and
// answers false (the handle stays as it was).
bool unmap_all(const RealDriver* real, const AsleepHandle& h, uint64_t driver_handle) {
  for (size_t i = 0; i < h.maps.size(); ++i) {
    if (driver::unmap(real, h.maps[i].addr, h.maps[i].bytes) == CUDA_SUCCESS) continue;
    for (size_t j = 0; j < i; ++j) {
      driver::map(real, h.maps[j].addr, h.maps[j].bytes, h.maps[j].offset, driver_handle, 0);
      set_access(real, h.maps[j]);
    }
    return false;
  }
  return true;
}

// Sleeps one handle of the ledger's; false: it stays resident (`why`).
bool sleep_one(const RealDriver* real, const SlotHandle& s, int slot, bool keep, AsleepHandle* out, const char** why) {
  if (s.shared) return (*why = "exported or imported: another process may hold it"), false;
  if (s.multicast) return (*why = "bound to a multicast object: its memory cannot leave the device"), false;
  if (s.maps.empty()) return (*why = "mapped nowhere"), false;
  CUmemAllocationProp prop = {};
  // A handle the program released while it still maps it (its references
  // none: the driver's value names nothing any more, the mappings hold the
  // memory): a reference retained at a mapping gives the properties, and
  // goes with the program's below.
  CUmemGenericAllocationHandle retained = 0;
  if (s.refs == 0 &&
      driver::retain_handle(real, &retained, reinterpret_cast<void*>(s.maps.front().addr)) != CUDA_SUCCESS)
    return (*why = "the driver did not retain it at its mapping"), false;
  const auto drop_retained = [&] {
    if (retained) driver::release(real, retained);
  };
  if (driver::handle_properties(real, &prop, retained ? retained : s.handle) != CUDA_SUCCESS) {
    drop_retained();
    return (*why = "the driver did not give its properties"), false;
  }
  AsleepHandle& h = *out;
  h.program = book().to_program(s.handle);
  h.slot = slot;
  h.device = s.device;
  h.refs = s.refs;
  h.bytes = s.bytes;
  h.prop.assign(reinterpret_cast<const char*>(&prop), sizeof prop);
  for (const policy::own_vmm::LedgerMapping& m : s.maps)
    h.maps.push_back(AsleepMapping{m.addr, m.bytes, m.offset, read_access(real, m.addr)});
  if (keep) {
    const DeviceContext context(real, s.device);
    if (!(h.host = copy_out(real, h))) {
      drop_retained();
      return (*why = "its contents could not be copied to host memory"), false;
    }
  }
  if (!unmap_all(real, h, retained ? retained : s.handle)) {
    free_host_copy(h.host);
    drop_retained();
    return (*why = "the driver refused to unmap it"), false;
  }
  // The driver's references: the cache's one, or each of the program's
  // (and the one retained above).
  const int references = disown(s.handle) ? 1 : s.refs;
  for (int i = 0; i < references; ++i)
    if (driver::release(real, s.handle) != CUDA_SUCCESS) break;
  drop_retained();
  ledger().forget(s.handle);
  return true;
}

bool writable(const std::string& access) {
  for (size_t at = 0; at + sizeof(CUmemAccessDesc) <= access.size(); at += sizeof(CUmemAccessDesc)) {
    CUmemAccessDesc desc;
    std::memcpy(&desc, access.data() + at, sizeof desc);
    if (desc.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return true;
  }
  return false;
}

// The contents of mapping `m` back from the host copy. A mapping no device
// may write is opened to the handle's device for the copy, then set to its
// access again (the handle's device closed when the record does not name it).
bool copy_in(const RealDriver* real, const AsleepHandle& h, const AsleepMapping& m) {
  const bool open = writable(m.access);
  CUmemAccessDesc own = {};
  own.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  own.location.id = h.device;
  own.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!open && driver::set_access(real, m.addr, m.bytes, &own, 1) != CUDA_SUCCESS) return false;
  const void* from = static_cast<const char*>(h.host) + m.offset;
  if (driver::copy_htod(real, m.addr, from, m.bytes) != CUDA_SUCCESS) return false;
  if (open) return true;
  AsleepMapping again = m;
  bool named = false;
  for (size_t at = 0; at + sizeof own <= m.access.size(); at += sizeof own) {
    CUmemAccessDesc desc;
    std::memcpy(&desc, m.access.data() + at, sizeof desc);
    named = named || desc.location.id == h.device;
  }
  own.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  if (!named) again.access.append(reinterpret_cast<const char*>(&own), sizeof own);
  return set_access(real, again) == CUDA_SUCCESS;
}

struct Made {
  const AsleepHandle* asleep = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  size_t mapped = 0;
};

void unmake(const RealDriver* real, const Made& m) {
  for (size_t i = 0; i < m.mapped; ++i) driver::unmap(real, m.asleep->maps[i].addr, m.asleep->maps[i].bytes);
  driver::release(real, m.handle);
}

// Makes `h` again where it was, with its access; false: nothing stays.
bool make_again(const RealDriver* real, const AsleepHandle& h, Made* made) {
  CUmemAllocationProp prop;
  std::memcpy(&prop, h.prop.data(), sizeof prop);
  made->asleep = &h;
  if (driver::create(real, &made->handle, h.bytes, &prop, 0) != CUDA_SUCCESS) return false;
  for (const AsleepMapping& m : h.maps) {
    if (driver::map(real, m.addr, m.bytes, m.offset, made->handle, 0) != CUDA_SUCCESS) break;
    ++made->mapped;
    if (set_access(real, m) != CUDA_SUCCESS) break;
  }
  bool ok = made->mapped == h.maps.size();
  for (size_t i = 0; ok && h.host && i < h.maps.size(); ++i)
    if (!h.maps[i].access.empty()) ok = copy_in(real, h, h.maps[i]);
  if (!ok) unmake(real, *made);
  return ok;
}

// The driver's references of a woken handle become the program's: none
// (it let it go while asleep: the mappings hold the memory) or each of
// its retains again.
void settle_refs(const RealDriver* real, const AsleepHandle& h, CUmemGenericAllocationHandle handle) {
  if (h.refs == 0) {
    driver::release(real, handle);
    return;
  }
  // A handle the program unmapped everywhere while asleep has no address
  // to retain at: it holds the one reference (docs/OWN-VMM.md).
  for (int i = 1; i < h.refs && !h.maps.empty(); ++i) {
    CUmemGenericAllocationHandle again = 0;
    driver::retain_handle(real, &again, reinterpret_cast<void*>(h.maps.front().addr));
  }
}

void sleep_handles(int slot, bool keep, SleepAnswer* out);

// Per slot, what the book holds asleep and of it kept in host memory, as
// the last change of the book left it: read without the book's lock.
struct SlotFigures {
  std::atomic<uint64_t> asleep{0};
  std::atomic<uint64_t> kept{0};
};
SlotFigures g_figures[region::kMaxSlots];

}  // namespace

void free_host_copy(void* host) {
  if (host) driver::free_host(real_driver(), host);
}

void mirror_figures() {
  for (int slot = 0; slot < region::kMaxSlots; ++slot) {
    uint64_t asleep = 0, kept = 0;
    book().slot_bytes(slot, &asleep, &kept);
    g_figures[slot].asleep.store(asleep, std::memory_order_relaxed);
    g_figures[slot].kept.store(kept, std::memory_order_relaxed);
  }
}

SleepAnswer sleep_slot(int slot, bool keep) {
  SleepAnswer answer;
  if (!active()) return answer;
  // The cache's idle handles (the program's no more) go first, with their
  // deferred mappings: then every handle of the slot left is the program's.
  for (int d = 0; d < kMaxDevices; ++d)
    if (on()) trim(d, UINT64_MAX);
  std::lock_guard<std::mutex> guard(book_mutex());
  try {
    sleep_handles(slot, keep, &answer);
  } catch (...) {
    // Out of host memory in a record: what slept so far stays asleep.
    log_line(LogLevel::Warn, "%s: out of host memory; the rest of the program's own VMM memory stays resident",
             slot_words(slot).c_str());
    answer.status = 1;
  }
  mirror_figures();
  return answer;
}

namespace {

// REQUIRES: book_mutex() held.
void sleep_handles(int slot, bool keep, SleepAnswer* out) {
  SleepAnswer& answer = *out;
  const RealDriver* real = real_driver();
  std::vector<SlotHandle> handles = ledger().program_handles(slot);
  if (handles.empty()) return;
  g_translating.store(true, std::memory_order_relaxed);
  // The program's work on the memory is done before the copy: the calling
  // thread's context, then each device's (when another) synchronised once.
  if (keep) driver::ctx_synchronize(real);
  bool synced[kMaxDevices] = {};
  for (const SlotHandle& s : handles) {
    if (!keep || s.device < 0 || s.device >= kMaxDevices || synced[s.device]) continue;
    synced[s.device] = true;
    const DeviceContext context(real, s.device);
    if (context.pushed()) driver::ctx_synchronize(real);
  }
  for (const SlotHandle& s : handles) {
    AsleepHandle h;
    const char* why = "";
    if (!sleep_one(real, s, slot, keep, &h, &why)) {
      answer.resident_bytes += s.bytes;
      log_line(LogLevel::Warn, "%s: %.1f MiB of the program's own VMM memory stay resident (%s)",
               slot_words(slot).c_str(), double(s.bytes) / double(1 << 20), why);
      continue;
    }
    answer.slept_bytes += h.bytes;
    if (h.host) answer.kept_bytes += h.bytes;
    book().put(std::move(h));
  }
  answer.status = answer.resident_bytes ? 1 : 0;
}

}  // namespace

int wake_slot(int slot) {
  if (!active()) return 0;
  std::lock_guard<std::mutex> guard(book_mutex());
  const RealDriver* real = real_driver();
  std::vector<const AsleepHandle*> asleep;
  std::vector<Made> made;
  try {
    asleep = book().slot_handles(slot);
    made.resize(asleep.size());
  } catch (...) {
    return -1;  // out of host memory before anything was made
  }
  for (size_t i = 0; i < asleep.size(); ++i) {
    const DeviceContext context(real, asleep[i]->device);
    if (make_again(real, *asleep[i], &made[i])) continue;
    for (size_t j = 0; j < i; ++j) unmake(real, made[j]);
    log_line(LogLevel::Warn, "%s: the driver refused to make the program's own VMM memory again; still asleep",
             slot_words(slot).c_str());
    return -1;
  }
  for (size_t i = 0; i < asleep.size(); ++i) {
    const AsleepHandle& h = *asleep[i];
    settle_refs(real, h, made[i].handle);
    ledger().restore(made[i].handle, h.bytes, h.device, h.slot, h.refs);
    for (const AsleepMapping& m : h.maps) {
      ledger().mapped(m.addr, m.bytes, made[i].handle, m.offset);
      if (on()) note_foreign(m.addr);
    }
    free_host_copy(h.host);
    book().woke(h.program, made[i].handle);  // `h` goes with it
  }
  mirror_figures();
  return 0;
}

SlotBytes slot_bytes(int slot) {
  SlotBytes bytes;
  if (!active() || slot < 0 || slot >= region::kMaxSlots) return bytes;
  // Never the book's lock: a sleep holds it across its copy.
  bytes.asleep = g_figures[slot].asleep.load(std::memory_order_relaxed);
  bytes.kept = g_figures[slot].kept.load(std::memory_order_relaxed);
  bytes.resident = ledger().slot_resident(slot);
  return bytes;
}

}  // namespace pagefast::pool::own_vmm
