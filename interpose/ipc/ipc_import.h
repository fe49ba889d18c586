// interpose/ipc/ipc_import.h: what the importer's parts share:
// ipc_import.cpp (opening and closing handles), ipc_import_link.cpp (the
// link to each exporter and the requests on it) and ipc_import_map.cpp
// (the mappings of the chunks received). Internal to interpose/ipc/.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "interpose/ipc/ipc_internal.h"

namespace pagefast::ipc::detail {

// Where an open's time goes, at PAGEFAST_LOG=debug (docs/IPC.md).
struct OpenTimes {
  uint64_t import_ns = 0, map_ns = 0, access_ns = 0;
};

struct ExporterKey {
  uint64_t pidns, start_time;
  uint32_t pid;
  bool operator<(const ExporterKey& o) const {
    if (pid != o.pid) return pid < o.pid;
    if (start_time != o.start_time) return start_time < o.start_time;
    return pidns < o.pidns;
  }
};

// A chunk as the importer maps it: whose, the exporter's id for it, and
// the device its mapping is opened for.
struct ChunkKey {
  ExporterKey exporter;
  uint64_t chunk_id;
  int device;
  bool operator<(const ChunkKey& o) const {
    if (chunk_id != o.chunk_id) return chunk_id < o.chunk_id;
    if (device != o.device) return device < o.device;
    return exporter < o.exporter;
  }
};

struct Link {
  int fd = -1;
  uint64_t imports = 0;   // live imports through it
  uint64_t last_use = 0;  // when it was last used (a counter): the least recent idle link goes first
  uint32_t next_seq = 1;
  // Opens given up on (no answer in time), by sequence number: their late
  // answers are read before the next request, and what they opened is
  // closed at once.
  std::map<uint32_t, uint64_t> abandoned;  // seq -> export id
};

enum class Exchange { Ok, Timeout, Broken };

// ---- the link (ipc_import_link.cpp) ----------------------------------------------------

// A connection to the exporter, checked; -1 if it is gone, not reachable
// in time, or someone else answers (one warning naming them).
int connect_to(const ExporterKey& key);
bool send_request(int fd, uint16_t op, uint64_t arg, uint32_t seq = 0);
// Reads exactly `bytes` into dst before `deadline` (now_ns()), with any
// descriptors that come along (added to *fds). Timeout only when nothing
// was read; anything else that stops it short is Broken.
Exchange read_exact(int fd, void* dst, size_t bytes, uint64_t deadline, std::vector<int>* fds, bool* truncated);
// Reads the late answers already there; false if the link broke.
bool drain_late(Link& link, Reply* reply);
// Sends an open and waits for its answer; answers to opens given up on
// earlier are settled on the way. On Timeout the open is noted as given up.
Exchange exchange_open(Link& link, const Wire& w, Reply* reply, std::vector<int>* fds, bool* truncated);

// ---- the mappings (ipc_import_map.cpp) --------------------------------------------------

// Maps the exporter's chunks at fresh address space, opened for `device`.
// Whole chunks where they fit (a mapping at offset 0 of its handle, which
// every driver takes), else each piece at its offset. *lead_out is where
// the first piece starts in the mapping.
CUresult map_import(const Reply& reply, const std::vector<int>& fds, int device, CUdeviceptr* va_out, size_t* bytes_out,
                    uint64_t* lead_out, OpenTimes* times);

// ---- the chunk mappings (ipc_import_chunks.cpp), under the importer's mutex -----------

// The mapping of a one-piece reply's chunk for `device`: the one already
// made for an open block of it (`fd` unused: no driver call), or the chunk
// imported from `fd`, mapped whole and opened now. *chunk_va is where the
// chunk starts; the chunk counts one block more.
CUresult chunk_acquire(const ChunkKey& key, const ReplyPiece& piece, int fd, int device, CUdeviceptr* chunk_va,
                       OpenTimes* times);
// One block less on the chunk; the last unmaps it (the caller synchronised).
void chunk_release(const ChunkKey& key);
// A forked child: forgets the parent's mappings (not its own to unmap).
void chunks_forget();
// Address space for a mapping, from the ranges kept or the driver; and
// back (kept for the next mapping of its size, a few of them).
CUresult reserve_range(size_t bytes, CUdeviceptr* va);
void unreserve_range(CUdeviceptr va, size_t bytes);

}  // namespace pagefast::ipc::detail
