// policy/own_vmm/handle_sleep.cpp: sleep and wake of the program's own VMM
// handles of one device over the provider (handle_sleep.h).
#include "policy/own_vmm/handle_sleep.h"

#include <new>
#include <utility>

#include "policy/sleep_gate.h"

namespace pagefast::policy::own_vmm {
namespace {

// A handle's host copy (the record's opaque `host`): one piece per mapping
// copied, in the provider's host memory.
struct KeptPiece {
  uint64_t addr = 0;  // the mapping it was copied through
  uint64_t bytes = 0;
  void* host = nullptr;
  unsigned mode = 0;
};
struct KeptCopy {
  Provider* provider = nullptr;
  std::vector<KeptPiece> pieces;
};

const KeptPiece* piece_at(const KeptCopy& kept, uint64_t addr) {
  for (const KeptPiece& p : kept.pieces)
    if (p.addr == addr) return &p;
  return nullptr;
}

}  // namespace

// A handle of the ledger's on its way to sleep: its record, and the
// reference retained to read it (a handle the program released while it
// still maps it).
struct HandleSleep::Going {
  SlotHandle h;  // the ledger's listing, completed for its record asleep
  uint64_t retained = 0;
};

struct HandleSleep::Made {
  const SlotHandle* asleep = nullptr;
  uint64_t handle = 0;
  size_t mapped = 0;
};

void HandleSleep::free_host(void* host) {
  KeptCopy* kept = static_cast<KeptCopy*>(host);
  if (!kept) return;
  for (const KeptPiece& p : kept->pieces)
    if (p.host) kept->provider->host_free(p.host, p.bytes);
  delete kept;
}

bool HandleSleep::prepare(const SlotHandle& s, int slot, Going* out, const char** why) {
  if (s.shared) return (*why = "exported or imported: another process may hold it"), false;
  if (s.multicast) return (*why = "bound to a multicast object: its memory cannot leave the device"), false;
  if (s.maps.empty()) return (*why = "mapped nowhere"), false;
  Going& g = *out;
  // A handle the program released while it still maps it (its references
  // none: the driver's value names nothing any more, the mappings hold the
  // memory): a reference retained at a mapping gives the properties, and
  // goes with the program's in finish().
  if (s.refs == 0 && !driver_.retain_at(s.maps.front().addr, &g.retained))
    return (*why = "the driver did not retain it at its mapping"), false;
  SlotHandle& h = g.h;
  if (!driver_.properties(g.retained ? g.retained : s.handle, &h.prop)) {
    if (g.retained) driver_.release(g.retained);
    return (*why = "the driver did not give its properties"), false;
  }
  h.handle = s.handle;
  h.program = ledger_.to_program(s.handle);
  h.slot = slot;
  h.device = s.device;
  h.refs = s.refs;
  h.bytes = s.bytes;
  h.maps = s.maps;
  for (SlotMapping& m : h.maps) m.access = driver_.access_of(m.addr);
  return true;
}

// Unmaps every mapping of `g`, then lets the driver's references go.
// false: it stays resident (`why`), mapped as it was.
bool HandleSleep::finish(Going& g, bool keep, const char** why) {
  SlotHandle& h = g.h;
  const auto stay = [&](const char* reason) {
    free_host(h.host);
    h.host = nullptr;
    if (g.retained) driver_.release(g.retained);
    *why = reason;
    return false;
  };
  if (keep && !h.host) return stay("its contents could not be copied to host memory");
  for (size_t i = 0; i < h.maps.size(); ++i) {
    if (driver_.unmap(h.maps[i].addr, h.maps[i].bytes)) continue;
    for (size_t j = 0; j < i; ++j) {
      const SlotMapping& m = h.maps[j];
      driver_.map(m.addr, m.bytes, m.offset, g.retained ? g.retained : h.handle);
      driver_.set_access(m.addr, m.bytes, m.access);
    }
    return stay("the driver refused to unmap it");
  }
  // The driver's references: the cache's one, or each of the program's
  // (and the one retained in prepare()).
  const int references = driver_.disown(h.handle) ? 1 : h.refs;
  for (int i = 0; i < references; ++i)
    if (!driver_.release(h.handle)) break;
  if (g.retained) driver_.release(g.retained);
  return true;
}

// The contents of every handle going, through its mappings a device reads,
// in one batch of the provider's copies; a handle whose every copy is done
// gets its KeptCopy.
void HandleSleep::copy_out(std::vector<Going>& going, unsigned mode) {
  std::vector<HostCopy> copies;
  std::vector<size_t> first;  // each handle's first copy
  for (const Going& g : going) {
    first.push_back(copies.size());
    for (const SlotMapping& m : g.h.maps)
      if (!m.access.empty()) copies.push_back(HostCopy{m.addr, m.bytes, nullptr, mode, ProviderStatus::Failed});
  }
  first.push_back(copies.size());
  if (!copies.empty()) provider_.copy_to_host(copies.data(), copies.size());
  for (size_t i = 0; i < going.size(); ++i) {
    KeptCopy* kept = new (std::nothrow) KeptCopy{&provider_, {}};
    bool ok = kept != nullptr;
    for (size_t c = first[i]; c < first[i + 1]; ++c) {
      const HostCopy& copy = copies[c];
      if (copy.status != ProviderStatus::Ok) {
        ok = false;
      } else if (kept) {
        kept->pieces.push_back(KeptPiece{copy.addr, copy.bytes, copy.host, mode});
      } else {
        provider_.host_free(copy.host, copy.bytes);
      }
    }
    if (ok) going[i].h.host = kept;
    else free_host(kept);
  }
}

HandleSleepAnswer HandleSleep::sleep(int device, int slot, unsigned keep_modes) {
  HandleSleepAnswer answer;
  std::vector<SlotHandle> handles = ledger_.program_handles(slot);
  std::vector<SlotHandle> mine;
  for (SlotHandle& s : handles)
    if (s.device == device) mine.push_back(std::move(s));
  if (mine.empty()) return answer;
  const auto resident = [&](uint64_t bytes, const char* why) {
    answer.resident_bytes += bytes;
    driver_.resident(slot, bytes, why);
  };
  // The program's work on the memory is done before it goes: the pool's
  // rule, every context that used the device.
  if (provider_.synchronize() != SyncStatus::Done) {
    for (const SlotHandle& s : mine)
      resident(s.bytes, "the device could not be synchronised: a stream capture, or a failed sync");
    answer.status = 1;
    return answer;
  }
  const bool keep = (keep_modes & kSleepKeep) != 0;
  std::vector<Going> going;
  going.reserve(mine.size());
  for (const SlotHandle& s : mine) {
    going.emplace_back();
    const char* why = "";
    if (prepare(s, slot, &going.back(), &why)) continue;
    going.pop_back();
    resident(s.bytes, why);
  }
  if (keep) copy_out(going, keep_modes & ~kSleepKeep);
  for (Going& g : going) {
    const char* why = "";
    if (!finish(g, keep, &why)) {
      resident(g.h.bytes, why);
      continue;
    }
    answer.slept_bytes += g.h.bytes;
    if (g.h.host) answer.kept_bytes += g.h.bytes;
    ledger_.slept(std::move(g.h));
  }
  answer.status = answer.resident_bytes ? 1 : 0;
  return answer;
}

void HandleSleep::unmake(const Made& m) {
  for (size_t i = 0; i < m.mapped; ++i) driver_.unmap(m.asleep->maps[i].addr, m.asleep->maps[i].bytes);
  driver_.release(m.handle);
}

// Makes `h` again where it was, with its access; false: nothing stays.
bool HandleSleep::make_again(const SlotHandle& h, Made* made) {
  made->asleep = &h;
  if (!driver_.create(h.bytes, h.prop, &made->handle)) return false;
  for (const SlotMapping& m : h.maps) {
    if (!driver_.map(m.addr, m.bytes, m.offset, made->handle)) break;
    ++made->mapped;
    if (!driver_.set_access(m.addr, m.bytes, m.access)) break;
  }
  const bool ok = made->mapped == h.maps.size();
  if (!ok) unmake(*made);
  return ok;
}

// The contents back through the mappings made again, in one batch of the
// provider's copies (the host copies held whole: kSleepHoldHost); a
// mapping no device may write is opened to the handle's device for its
// copy, and set as recorded after. false: some copy failed.
bool HandleSleep::copy_in(const std::vector<SlotHandle>& handles) {
  struct Planned {
    const SlotHandle* handle;
    const SlotMapping* mapping;
    bool opened;
  };
  std::vector<HostCopy> copies;
  std::vector<Planned> planned;
  bool ok = true;
  for (const SlotHandle& handle : handles) {
    const SlotHandle* h = &handle;
    const KeptCopy* kept = static_cast<const KeptCopy*>(h->host);
    if (!kept) continue;
    for (const SlotMapping& m : h->maps) {
      const KeptPiece* piece = m.access.empty() ? nullptr : piece_at(*kept, m.addr);
      if (!piece || piece->bytes != m.bytes) continue;
      const bool opened = !driver_.writable(m.access);
      if (opened && !driver_.set_access(m.addr, m.bytes, driver_.write_access(h->device))) {
        ok = false;
        continue;
      }
      copies.push_back(HostCopy{m.addr, m.bytes, piece->host, piece->mode | kSleepHoldHost, ProviderStatus::Failed});
      planned.push_back(Planned{h, &m, opened});
    }
  }
  if (!copies.empty()) provider_.copy_from_host(copies.data(), copies.size());
  for (size_t c = 0; c < copies.size(); ++c) {
    const Planned& p = planned[c];
    if (copies[c].status != ProviderStatus::Ok) ok = false;
    const SlotMapping& m = *p.mapping;
    if (p.opened && !driver_.set_access(m.addr, m.bytes, driver_.after_copy(m.access, p.handle->device))) ok = false;
  }
  return ok;
}

// The driver's references of a woken handle become the program's: none
// (it let it go while asleep: the mappings hold the memory) or each of
// its retains again.
void HandleSleep::settle_refs(const SlotHandle& h, uint64_t handle) {
  if (h.refs == 0) {
    driver_.release(handle);
    return;
  }
  // A handle the program unmapped everywhere while asleep has no address
  // to retain at: it holds the one reference (docs/OWN-VMM.md).
  for (int i = 1; i < h.refs && !h.maps.empty(); ++i) {
    uint64_t again = 0;
    driver_.retain_at(h.maps.front().addr, &again);
  }
}

bool HandleSleep::wake(int device, int slot) {
  std::vector<SlotHandle> asleep;
  for (SlotHandle& h : ledger_.asleep_handles(slot))
    if (h.device == device) asleep.push_back(std::move(h));
  std::vector<Made> made(asleep.size());
  for (size_t i = 0; i < asleep.size(); ++i) {
    if (make_again(asleep[i], &made[i])) continue;
    for (size_t j = 0; j < i; ++j) unmake(made[j]);
    driver_.wake_refused(slot, "the driver refused to make the program's own VMM memory again");
    return false;
  }
  // All or none: when a copy failed, nothing stays made and every handle
  // stays asleep with its host copy whole.
  if (!copy_in(asleep)) {
    for (const Made& m : made) unmake(m);
    driver_.wake_refused(slot, "the contents of the program's own VMM memory could not be copied back");
    return false;
  }
  for (size_t i = 0; i < asleep.size(); ++i) {
    const SlotHandle& h = asleep[i];
    settle_refs(h, made[i].handle);
    ledger_.woke(h.program, made[i].handle);  // its record awake, with its mappings
    for (const SlotMapping& m : h.maps) driver_.mapped_again(m.addr);
    free_host(h.host);
  }
  return true;
}

}  // namespace pagefast::policy::own_vmm
