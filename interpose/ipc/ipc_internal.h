// interpose/ipc/ipc_internal.h: what the parts of CUDA IPC share
// (ipc.h is the API; docs/IPC.md the design). ipc.cpp owns the handle and
// the export registry with its holds; ipc_socket.cpp the socket;
// ipc_server.cpp the pagefast-ipc thread; ipc_background.cpp the
// background thread; ipc_peers.cpp who is at the other end of a
// connection and whether it still lives; ipc_import.cpp (with
// ipc_import_link.cpp and ipc_import_map.cpp) the importer's links and
// mappings.
#pragma once

#include <cuda.h>
#include <sys/un.h>

#include <cstdint>
#include <string>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_wire.h"
#include "interpose/real_driver.h"

namespace pagefast::ipc::detail {

// CUDA IPC's state in the process object (ipc_state.h).
inline State& ipc_state() { return pool::g_process.ipc; }

// ---- the handle (docs/IPC.md "The handle") --------------------------------------

constexpr char kMagic[8] = {'p', 'g', 'f', 's', 't', 'I', 'P', 'C'};
// 2: the checksum is a mix of 64-bit words (ipc_common.cpp), no longer
// FNV-1a of the bytes. A handle of another version is refused.
constexpr uint16_t kHandleVersion = 2;

// The 64 bytes of a pagefast IPC handle, little-endian as the hosts that
// run CUDA are. Untrusted when received: every field is checked before
// use, with arithmetic that cannot wrap.
struct Wire {
  char magic[8];
  uint16_t version;
  uint16_t flags;
  uint32_t device;      // the exporter's device ordinal
  uint32_t pid;         // the exporter, in its pid namespace
  uint32_t check;       // checksum(): every other byte, by 64-bit words
  uint64_t start_time;  // the exporter's start, clock ticks after boot
  uint64_t pidns;       // the inode of the exporter's pid namespace
  uint64_t export_id;
  uint64_t bytes;   // the block's size, as allocated
  uint64_t offset;  // the block's offset inside its first granule
};
static_assert(sizeof(Wire) == sizeof(CUipcMemHandle), "a pagefast handle fills a CUipcMemHandle exactly");

uint32_t checksum(const Wire& w);
// The handle of this process's export `export_id`, a block of `bytes` at
// `offset` in its first granule on `device`, its checksum set.
Wire make_handle(int device, uint64_t export_id, uint64_t bytes, uint64_t offset);

// ---- the reply to an open --------------------------------------------------------

// A block maps at most this many chunk segments (a stitch has at most 64
// pieces before growth; under pressure more: those are not exported).
constexpr int kMaxPieces = 128;
// How long an importer waits for the exporter's answer.
constexpr int kTimeoutMs = 2000;

struct ReplyPiece {
  uint64_t chunk_offset;  // bytes into the chunk whose descriptor comes in this position
  uint64_t bytes;
  uint64_t chunk_bytes;  // the whole chunk
  // The exporter's name for the chunk, never reused in that process: the
  // same id is the same physical memory (ipc_chunk_fds.cpp).
  uint64_t chunk_id;
};

struct Reply {
  wire::ReplyHeader header;
  ReplyPiece pieces[kMaxPieces];
};

// ---- who this process is, and the others ---------------------------------------------

struct Identity {
  int32_t pid = 0;
  uint64_t start_time = 0;
  uint64_t pidns = 0;
};
// Re-read after a fork changes the pid.
const Identity& self();

// PAGEFAST_IPC_DIR when set and usable (wire::usable_dir; one warning if
// not), else empty: the abstract namespace. Ignored in a secure-execution
// process (docs/SECURITY.md).
std::string ipc_dir();

// The exporter's socket address (ipc_wire.h) for this user.
bool socket_address(uint32_t pid, uint64_t start_time, uint64_t pidns, sockaddr_un* addr, socklen_t* len);

// /proc/<pid>/stat's state letter and start time (field 22). Only
// meaningful when proc_is_ours(). (ipc_peers.cpp, with the rest of this
// section.)
struct ProcStat {
  char state = 0;
  uint64_t start_ticks = 0;
};
// NoProcess: the file is not there (no such process); Unknown: it could
// not be read (out of descriptors, say), which proves nothing.
enum class ProcRead { Ok, NoProcess, Unknown };
ProcRead read_proc_stat(int32_t pid, ProcStat* out);
ProcRead read_stat_file(const char* path, ProcStat* out);
// The inode of /proc/<pid>/ns/pid; 0 if it cannot be read.
uint64_t pid_namespace_of(int32_t pid);
// Whether /proc shows this process's pid namespace (a container may mount
// another's): only then do pids read from SO_PEERCRED name its entries.
bool proc_is_ours();

// Whether the process `pid` (of this pid namespace) that started at
// `start_ticks` still runs: Gone only when no thread of it is left (or
// the pid is another process's now); a leader that exited while other
// threads run is Alive. Unknown when it cannot be told.
enum class Liveness { Alive, Gone, Unknown };
Liveness process_liveness(int32_t pid, uint64_t start_ticks);

bool send_all(int fd, const void* data, size_t bytes);
const char* error_name(CUresult r);
uint64_t now_ns();

// ---- the export registry (ipc.cpp), as the server thread uses it ---------------------

// Who holds an export. An importer the exporter can see (its pid in this
// pid namespace, its start time) holds until it closes or provably dies;
// one it cannot see (another pid namespace) holds through its connection,
// which `connection` then names.
struct HolderKey {
  uint64_t pid = 0, start_ticks = 0, pidns = 0;
  uint64_t connection = 0;
  bool identified() const { return pid != 0; }
  bool operator<(const HolderKey& o) const {
    if (pid != o.pid) return pid < o.pid;
    if (start_ticks != o.start_ticks) return start_ticks < o.start_ticks;
    if (pidns != o.pidns) return pidns < o.pidns;
    return connection < o.connection;
  }
};

struct ChunkLease;
// An open request: on success the reply has the pieces, leases[i] the
// descriptor of piece i's chunk (the caller sends them, then gives them
// back: return_chunk_fds) and `holder` one more hold; else the reply's
// status and reason say why, and nothing is leased. `leases` has room for
// kMaxPieces.
void open_export(const wire::Request& request, const HolderKey& holder, Reply* reply, ChunkLease* leases);
// One hold of `holder` ends (a close), or all of them (release-all, its
// death, the end of an unidentified holder's connection). A block the
// program freed meanwhile goes back to the pool once no one holds it.
void release(uint64_t export_id, const HolderKey& holder);
void release_holder(const HolderKey& holder);
// The identified holders with at least one hold (checked for death).
std::vector<HolderKey> identified_holders();
// Whether `holder` holds anything now.
bool holds_any(const HolderKey& holder);

// ---- the library's settings (ipc_settings.cpp) -------------------------------------

// Gives blocks back to the pool (set_free_held's function), on the caller's
// thread.
void hand_back_now(const std::vector<uint64_t>& addrs);
// The control functions set_control and set_tag_control gave (NULL if none).
Control control_handler();
TagControl tag_control_handler();

// ---- the chunks' descriptors (ipc_chunk_fds.cpp) ------------------------------------

// The exported descriptor of a chunk, lent until return_chunk_fds: it
// stays open that long even if the pool releases the chunk meanwhile (the
// last lease then closes it). `id` names the chunk to importers, never
// reused (a chunk released and a new one with the same handle value get
// different ids). Made by the driver's export at the chunk's first lease,
// with no lock held; a lease of a chunk being exported waits for it.
struct ChunkLease {
  int fd = -1;
  uint64_t id = 0;
  void* entry = nullptr;  // ipc_chunk_fds.cpp's record
};
CUresult lease_chunk_fd(const RealDriver* real, uint64_t chunk, ChunkLease* out);
void return_chunk_fds(ChunkLease* leases, size_t count);

// ---- who connects (ipc_peers.cpp) --------------------------------------------------

// The peer of a connection as SO_PEERCRED gave it (pid 0: a process in a
// pid namespace this one cannot see), for limits and warnings.
struct Peer {
  int32_t pid = 0;
  uint32_t uid = 0;
};

// The importing process of a new connection: identified by pid, start time
// and pid namespace when this process can see it alive; else the
// connection itself (`serial`) is the holder. false: not this user's.
bool identify(int fd, uint64_t serial, HolderKey* key, Peer* peer);
// Whether an identified holder may still run: false only when it is gone
// (or its pid is another process's, or in another pid namespace, now).
bool alive(const HolderKey& key);
// The peer as a warning names it: "process 1234", or "a process in another
// pid namespace (uid 1000)".
std::string describe(const Peer& peer);

// ---- the server (ipc_socket.cpp, ipc_server.cpp) -----------------------------------

// Starts the socket and the pagefast-ipc thread of this process once;
// false (with one warning per process) if it cannot.
bool start_server();

// ---- the background thread (ipc_background.cpp) -------------------------------------

struct ControlJob {
  int fd;
  uint32_t seq;
  uint16_t op;
  uint64_t arg;
  char tag[wire::kTagNameBytes];  // a tagged op's tag (wire::carries_tag), NUL-terminated
};

// Answers a control request (sleep, wake, status) on connection `fd`.
void reply_control(int fd, uint32_t seq, int answer);
// Answers kOpTagStatus on connection `fd`: every tag's state
// (pool::tag_figures, which never waits for a sleep or a wake).
void reply_tag_states(int fd, uint32_t seq);
// Hands a sleep or wake request (and its connection) to the background
// thread; false if too many are queued or it cannot start.
bool queue_control(const ControlJob& job);
// Blocks whose last hold ended after the program freed them: given back to
// the pool on the background thread (a free may wait for the pool's locks,
// which a sleep holds), never on the pagefast-ipc thread.
void free_held_blocks(const std::vector<uint64_t>& addrs);

}  // namespace pagefast::ipc::detail
