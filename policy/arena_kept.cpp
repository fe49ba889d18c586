// policy/arena_kept.cpp: the kept contents of an asleep range read in
// place (ArenaSleep::read_kept, arena_sleep.h): what a sleep with keep copied
// to host memory, for a program that asks for its data while it sleeps
// (torch_memory_saver's get_cpu_backup, docs/SLEEP.md).
#include <cstring>

#include "policy/arena_sleep.h"

namespace pagefast::policy {

ArenaSleep::KeptRead ArenaSleep::read_kept(uint64_t addr, uint64_t bytes, void* out) const {
  char* to = static_cast<char*>(out);
  const uint64_t end = addr + bytes;
  // Each step copies the run of `at` that lies in one kept piece: first
  // through an undone stitch map to its chunk's home, then the piece.
  for (uint64_t at = addr; at < end;) {
    uint64_t home = at, limit = end;
    for (const SleepingMap& m : sleeping_maps_) {
      if (at < m.addr || at >= m.addr + m.granules.bytes()) continue;
      home = m.chunk_home_addr + m.chunk_offset.bytes() + (at - m.addr);
      if (m.addr + m.granules.bytes() < limit) limit = m.addr + m.granules.bytes();
      break;
    }
    auto it = chunks_.containing(home);
    if (it == chunks_.all().end()) return KeptRead::Missing;
    const auto& [chunk_home, chunk] = *it;
    if (!chunk.asleep) return KeptRead::Resident;
    const uint64_t offset = home - chunk_home;
    const KeptPiece* piece = nullptr;
    for (const KeptPiece& p : chunk.kept)
      if (p.host && offset >= p.offset.bytes() && offset < (p.offset + p.granules).bytes()) piece = &p;
    if (!piece) return KeptRead::Missing;
    if (piece->on_disk) return KeptRead::OnDisk;
    uint64_t n = (piece->offset + piece->granules).bytes() - offset;
    if (n > limit - at) n = limit - at;
    std::memcpy(to + (at - addr), static_cast<const char*>(piece->host) + (offset - piece->offset.bytes()), n);
    at += n;
  }
  return KeptRead::Copied;
}

}  // namespace pagefast::policy
