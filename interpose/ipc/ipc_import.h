// interpose/ipc/ipc_import.h: what the importer's parts share:
// ipc_import.cpp (opening and closing handles), ipc_import_state.cpp (the
// links to the exporters and the imports, under the importer's mutex),
// ipc_import_link.cpp (the connection to each exporter and the requests on
// it), ipc_import_chunks.cpp and ipc_import_map.cpp (the mappings of the
// chunks received). Internal to interpose/ipc/.
//
// Locks: the importer's mutex (import_mutex) guards the links, the imports
// and their index, and is held only for a few lookups at a time: never
// across a request to an exporter or a driver call. A link is talked on by
// one thread at a time (Link::busy, its owner), so that its requests and
// answers stay in order; a thread waits for that on import_cv. The chunk
// mappings have a mutex of their own (ipc_import_chunks.cpp), a leaf:
// taken under the importer's mutex only by a forked child's reset.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
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
  // Under the importer's mutex.
  uint64_t imports = 0;   // live imports through it
  uint64_t pending = 0;   // opens under way, counted before their request goes out
  uint64_t users = 0;     // threads that hold a pointer to it (opens and closes under way)
  bool busy = false;      // a thread talks on it: the fields below are that thread's
  uint64_t last_use = 0;  // when it was last used (a counter): the least recent idle link goes first
  // Its owner's (busy), or anyone's under the importer's mutex while not busy.
  int fd = -1;
  uint32_t next_seq = 1;
  // Opens given up on (no answer in time), by sequence number: their late
  // answers are read before the next request, and what they opened is
  // closed at once.
  std::map<uint32_t, uint64_t> abandoned;  // seq -> export id
};

enum class Exchange { Ok, Timeout, Broken };

// ---- the link (ipc_import_link.cpp), by its owner ----------------------------------------

// A connection to the exporter, checked; -1 if it is gone, not reachable
// in time, or someone else answers (one warning naming them). Receives
// wait at most kTimeoutMs (SO_RCVTIMEO).
int connect_to(const ExporterKey& key);
bool send_request(int fd, uint16_t op, uint64_t arg, uint32_t seq = 0);
// Reads exactly `bytes` into dst before `deadline` (now_ns()), with any
// descriptors that come along (added to *fds). Timeout only when nothing
// was read; anything else that stops it short is Broken.
Exchange read_exact(int fd, void* dst, size_t bytes, uint64_t deadline, std::vector<int>* fds, bool* truncated);
// Sends a close or release-all on the link, connecting again if the
// exporter closed it (the exporter must hear of it); false if it could not.
bool send_with_reconnect(Link& link, const ExporterKey& key, uint16_t op, uint64_t export_id);
// Reads the late answers already there; false if the link broke.
bool drain_late(Link& link);
// Sends an open and waits for its answer; answers to opens given up on
// earlier are settled on the way. On Timeout the open is noted as given up.
Exchange exchange_open(Link& link, const Wire& w, Reply* reply, std::vector<int>* fds, bool* truncated);

// ---- the links and imports (ipc_import_state.cpp) ----------------------------------------

std::mutex& import_mutex();
std::condition_variable& import_cv();  // a link freed, an open finished
// REQUIRES import_mutex. A forked child's first call drops what it
// inherited (its parent's links, imports and mappings: not its own).
void own_state();
// REQUIRES import_mutex. The link to `key` (made now if there is none),
// its users counted one more.
Link* use_link(const ExporterKey& key);
// REQUIRES import_mutex (held by `lock`): waits until no other thread
// talks on the link, then the caller does; and back.
void own_link(std::unique_lock<std::mutex>& lock, Link* link);
void free_link(Link* link);
// REQUIRES import_mutex (held by `lock`), the caller a user of `link`
// (its own counts already updated). Tells the exporter that this process
// closed `export_id` (0: nothing), or that it holds nothing of it any more
// (release-all) when nothing else is open or being opened through the
// link; the request goes out with the mutex released. Owns the link while
// it talks (`owned`: already) and gives it up, with its use; a link left
// idle stays for the next open (a few of them), one the exporter was not
// told about ends.
void leave_link(std::unique_lock<std::mutex>& lock, const ExporterKey& key, Link* link, uint64_t export_id, bool owned);

// One import: a pointer this process handed out.
struct Import {
  ExporterKey key;
  uint64_t export_id;
  CUdeviceptr va;
  size_t map_bytes;
  uint64_t refs;
  // A one-piece block is a pointer into its chunk's mapping
  // (ipc_import_chunks.cpp), kept while any block of the chunk is open;
  // a block of several pieces has a mapping of its own (ipc_import_map.cpp).
  bool in_chunk;
  ChunkKey chunk;
};
// REQUIRES import_mutex. The export `export_id` of `key` opened here: its
// pointer with one more reference (true), or false with this thread's
// claim to open it (another thread's open of it is waited for; one that
// failed leaves it to this one). claim_done ends the claim: the import
// made at `ptr` (`import` non-null; false if there is no memory to note
// it, and then it is not), or not.
bool open_again_or_claim(std::unique_lock<std::mutex>& lock, const ExporterKey& key, uint64_t export_id,
                         CUdeviceptr* pdptr);
bool claim_done(const ExporterKey& key, uint64_t export_id, CUdeviceptr ptr, const Import* import);
// REQUIRES import_mutex. The import at `ptr`, one reference less: false if
// there is none; *last when that was the last (the import is then out of
// the registry, in *out).
bool drop_import(CUdeviceptr ptr, bool* last, Import* out);
// REQUIRES import_mutex. Imports open now and their mapped bytes.
void import_totals(uint64_t* count, uint64_t* bytes);

// ---- the mappings (ipc_import_map.cpp) --------------------------------------------------

// Maps the exporter's chunks at fresh address space, opened for `device`.
// Whole chunks where they fit (a mapping at offset 0 of its handle, which
// every driver takes), else each piece at its offset. *lead_out is where
// the first piece starts in the mapping.
CUresult map_import(const Reply& reply, const std::vector<int>& fds, int device, CUdeviceptr* va_out, size_t* bytes_out,
                    uint64_t* lead_out, OpenTimes* times);

// ---- the chunk mappings (ipc_import_chunks.cpp), under their own mutex ----------------

// The mapping of a one-piece reply's chunk for `device`: the one already
// made for an open block of it (`fd` unused: no driver call), or the chunk
// imported from `fd`, mapped whole and opened now (with no lock held;
// another open of the chunk meanwhile waits for it). *chunk_va is where
// the chunk starts; the chunk counts one block more.
CUresult chunk_acquire(const ChunkKey& key, const ReplyPiece& piece, int fd, int device, CUdeviceptr* chunk_va,
                       OpenTimes* times);
// One block less on the chunk; the last unmaps it (the caller
// synchronised): true when this one did.
bool chunk_release(const ChunkKey& key);
// A forked child: forgets the parent's mappings (not its own to unmap).
void chunks_forget();
// Address space for a mapping, from the ranges kept or the driver; and
// back (kept for the next mapping of its size, a few of them).
CUresult reserve_range(size_t bytes, CUdeviceptr* va);
void unreserve_range(CUdeviceptr va, size_t bytes);

}  // namespace pagefast::ipc::detail
