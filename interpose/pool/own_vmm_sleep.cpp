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

// Unmaps every mapping of `h`; on a refusal maps back those done, and
// answers false (the handle stays as it was).
bool unmap_all(const RealDriver* real, const AsleepHandle& h, uint64_t driver_handle) {
  for (size_t i = 0; i < h.maps.size(); ++i) {
    if (driver::unmap(real, h.maps[i].addr, h.maps[i].bytes) == CUDA_SUCCESS) continue;
    for (size_t j = 0; j < i; ++j) {
      driver::map(real, h.maps[j].addr, h.maps[j].bytes, h.maps[j].offset, driver_handle, 0);
      set_mapping_access(real, h.maps[j]);
    }
    return false;
  }
  return true;
}

// A handle of the ledger's on its way to sleep: its record, and the
// reference retained to read it (a handle the program released while it
// still maps it).
struct Going {
  SlotHandle s;
  AsleepHandle h;
  CUmemGenericAllocationHandle retained = 0;
};

void drop_retained(const RealDriver* real, const Going& g) {
  if (g.retained) driver::release(real, g.retained);
}

// The record of a handle about to sleep: its properties and each
// mapping's access. false: it stays resident (`why`).
bool prepare(const RealDriver* real, const SlotHandle& s, int slot, Going* out, const char** why) {
  if (s.shared) return (*why = "exported or imported: another process may hold it"), false;
  if (s.multicast) return (*why = "bound to a multicast object: its memory cannot leave the device"), false;
  if (s.maps.empty()) return (*why = "mapped nowhere"), false;
  Going& g = *out;
  g.s = s;
  CUmemAllocationProp prop = {};
  // A handle the program released while it still maps it (its references
  // none: the driver's value names nothing any more, the mappings hold the
  // memory): a reference retained at a mapping gives the properties, and
  // goes with the program's in finish().
  if (s.refs == 0 &&
      driver::retain_handle(real, &g.retained, reinterpret_cast<void*>(s.maps.front().addr)) != CUDA_SUCCESS)
    return (*why = "the driver did not retain it at its mapping"), false;
  if (driver::handle_properties(real, &prop, g.retained ? g.retained : s.handle) != CUDA_SUCCESS) {
    drop_retained(real, g);
    return (*why = "the driver did not give its properties"), false;
  }
  AsleepHandle& h = g.h;
  h.program = book().to_program(s.handle);
  h.slot = slot;
  h.device = s.device;
  h.refs = s.refs;
  h.bytes = s.bytes;
  h.prop.assign(reinterpret_cast<const char*>(&prop), sizeof prop);
  for (const policy::own_vmm::LedgerMapping& m : s.maps)
    h.maps.push_back(AsleepMapping{m.addr, m.bytes, m.offset, read_access(real, m.addr)});
  return true;
}

// After its contents went (keep), the handle leaves the device: unmapped,
// the driver's references released. false: it stays resident (`why`).
bool finish(const RealDriver* real, Going& g, bool keep, const char** why) {
  AsleepHandle& h = g.h;
  if (keep && !h.host) {
    drop_retained(real, g);
    return (*why = "its contents could not be copied to host memory"), false;
  }
  if (!unmap_all(real, h, g.retained ? g.retained : g.s.handle)) {
    free_host_copy(h.host);
    h.host = nullptr;
    drop_retained(real, g);
    return (*why = "the driver refused to unmap it"), false;
  }
  // The driver's references: the cache's one, or each of the program's
  // (and the one retained in prepare()).
  const int references = disown(g.s.handle) ? 1 : g.s.refs;
  for (int i = 0; i < references; ++i)
    if (driver::release(real, g.s.handle) != CUDA_SUCCESS) break;
  drop_retained(real, g);
  ledger().forget(g.s.handle);
  return true;
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

// Makes `h` again where it was, with its access (its contents come back
// after, with every handle's: copy_in); false: nothing stays.
bool make_again(const RealDriver* real, const AsleepHandle& h, Made* made) {
  CUmemAllocationProp prop;
  std::memcpy(&prop, h.prop.data(), sizeof prop);
  made->asleep = &h;
  if (driver::create(real, &made->handle, h.bytes, &prop, 0) != CUDA_SUCCESS) return false;
  for (const AsleepMapping& m : h.maps) {
    if (driver::map(real, m.addr, m.bytes, m.offset, made->handle, 0) != CUDA_SUCCESS) break;
    ++made->mapped;
    if (set_mapping_access(real, m) != CUDA_SUCCESS) break;
  }
  const bool ok = made->mapped == h.maps.size();
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

void sleep_handles(int slot, unsigned keep_modes, SleepAnswer* out);

// Per slot, what the book holds asleep and of it kept in host memory, as
// the last change of the book left it: read without the book's lock.
struct SlotFigures {
  std::atomic<uint64_t> asleep{0};
  std::atomic<uint64_t> kept{0};
};
SlotFigures g_figures[region::kMaxSlots];

}  // namespace

void mirror_figures() {
  settle_translating();
  for (int slot = 0; slot < region::kMaxSlots; ++slot) {
    uint64_t asleep = 0, kept = 0;
    book().slot_bytes(slot, &asleep, &kept);
    g_figures[slot].asleep.store(asleep, std::memory_order_relaxed);
    g_figures[slot].kept.store(kept, std::memory_order_relaxed);
  }
}

SleepAnswer sleep_slot(int slot, unsigned keep_modes) {
  SleepAnswer answer;
  if (!active()) return answer;
  // The cache's idle handles (the program's no more) go first, with their
  // deferred mappings: then every handle of the slot left is the program's.
  for (int d = 0; d < kMaxDevices; ++d)
    if (on()) trim(d, UINT64_MAX);
  std::lock_guard<std::mutex> guard(book_mutex());
  try {
    sleep_handles(slot, keep_modes, &answer);
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
void sleep_handles(int slot, unsigned keep_modes, SleepAnswer* out) {
  SleepAnswer& answer = *out;
  const bool keep = (keep_modes & policy::kSleepKeep) != 0;
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
  std::vector<Going> going;
  going.reserve(handles.size());
  const auto resident = [&](uint64_t bytes, const char* why) {
    answer.resident_bytes += bytes;
    log_line(LogLevel::Warn, "%s: %.1f MiB of the program's own VMM memory stay resident (%s)",
             slot_words(slot).c_str(), double(bytes) / double(1 << 20), why);
  };
  for (const SlotHandle& s : handles) {
    going.emplace_back();
    const char* why = "";
    if (prepare(real, s, slot, &going.back(), &why)) continue;
    going.pop_back();
    resident(s.bytes, why);
  }
  // The contents of them all in one batch per device, on the copy threads.
  if (keep) {
    std::vector<AsleepHandle*> records;
    records.reserve(going.size());
    for (Going& g : going) records.push_back(&g.h);
    copy_out(real, records, keep_modes & ~policy::kSleepKeep);
  }
  for (Going& g : going) {
    const char* why = "";
    if (!finish(real, g, keep, &why)) {
      resident(g.s.bytes, why);
      continue;
    }
    answer.slept_bytes += g.h.bytes;
    if (g.h.host) answer.kept_bytes += g.h.bytes;
    book().put(std::move(g.h));
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
  // The contents of them all, in one batch per device on the copy threads;
  // all or none: when one failed, nothing stays made and every handle
  // stays asleep with its host copy whole (kSleepHoldHost): call again.
  std::vector<char> copied;
  try {
    copy_in(real, asleep, &copied);
  } catch (...) {
    copied.assign(asleep.size(), 0);
  }
  for (size_t i = 0; i < asleep.size(); ++i) {
    if (copied[i]) continue;
    for (const Made& m : made) unmake(real, m);
    log_line(LogLevel::Warn, "%s: the contents of the program's own VMM memory could not be copied back; still asleep",
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
