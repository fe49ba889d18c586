// interpose/ipc/ipc_wire.h: the wire of pagefast's per-process socket
// (docs/IPC.md), shared by the library (ipc_server.cpp, ipc_import.cpp)
// and pagefast-ctl: the socket's name and the rules for its directory, the
// request, the reply's header, and the check of who answers. No CUDA
// here: the tool includes it.
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "policy/tags.h"

namespace pagefast::ipc::wire {

constexpr uint32_t kRequestMagic = 0x71524650;  // "PFRq"
constexpr uint32_t kReplyMagic = 0x72524650;    // "PFRr"
// 2: requests carry a sequence number the reply echoes, and an open names
// the block's size, offset and device; holds belong to the importing
// process, not to its connection. 3: each piece of an open's reply names
// its chunk (an id the exporter never reuses), so that an importer maps a
// chunk once however many of its blocks it opens.
constexpr uint16_t kVersion = 3;
// Control requests (pagefast-ctl's, a neighbour's give-back) go with
// version 2, which every op but an open is still taken with: they reach
// processes of either version, and an older pagefast-ctl a newer process.
constexpr uint16_t kControlVersion = 2;
constexpr uint16_t kOpOpen = 1;
inline bool version_taken(uint16_t version, uint16_t op) {
  return version == kVersion || (version == kControlVersion && op != kOpOpen);
}
constexpr uint16_t kOpClose = 2;
// Control (pagefast-ctl, docs/POOL.md "Sleep and wake"): `arg` carries
// sleep's flags; the reply's status is the answer, with no pieces.
constexpr uint16_t kOpSleep = 3;
constexpr uint16_t kOpWake = 4;
constexpr uint16_t kOpStatus = 5;
// The importer holds nothing of this exporter any more: every hold it has
// here ends (also one taken by an open it gave up waiting for). No reply.
constexpr uint16_t kOpReleaseAll = 6;

// Control of one tag (docs/OPERATIONS.md "Sleep and wake by tag"), added
// within version 2: a request of version 2 with an op it does not know
// makes a server close the connection, which pagefast-ctl reports, so
// older processes keep answering older tools and say no to this. A sleep
// or wake of a tag is a Request followed by a TagName (that op's request
// is sizeof(Request) + sizeof(TagName) bytes); `arg` of a sleep carries
// PAGEFAST_SLEEP_KEEP, _FAIL and _DISCARD (interpose/pagefast.h; neither
// keep nor discard: as the tag's regions said). The reply's status is
// pagefast_sleep_tag's or pagefast_wake_tag's answer, kControlBusy or
// kControlNoTag, with no pieces.
constexpr uint16_t kOpSleepTag = 7;
constexpr uint16_t kOpWakeTag = 8;
// Every tag's state: no TagName; the reply's status and piece_count are
// the number of TagState records that follow the header (every tag, in
// slot order).
constexpr uint16_t kOpTagStatus = 9;
// Another pagefast process of the user ran short on a device (docs/IPC.md
// "Neighbours"): the idle memory held on it goes back to the driver. A
// Request (`arg`: the bytes wanted, ~0 for all) followed by a TagName that
// holds the device's PCI bus id as cuDeviceGetPCIBusId writes it. The
// reply's status is the MiB released (0 also when the device is not
// this process's), or kControlBusy.
constexpr uint16_t kOpGiveBack = 10;

// A control answer besides pagefast_sleep's and pagefast_wake's: other
// sleep or wake requests are queued already.
constexpr int kControlBusy = -2;
// The tag of a tagged sleep or wake was never opened by any region of the
// process (pagefast_sleep_tag's -2, which on the wire is kControlBusy's).
constexpr int kControlNoTag = -3;

constexpr size_t kTagNameBytes = policy::kTagNameBytes;  // with the NUL (policy/tags.h)
// A tag's name: NUL-terminated and NUL-padded (the reader terminates it
// at its last byte whatever came).
struct TagName {
  char name[kTagNameBytes];
};
static_assert(sizeof(TagName) == 64, "a tag's name is 64 bytes on the wire");

inline bool carries_tag(uint16_t op) { return op == kOpSleepTag || op == kOpWakeTag || op == kOpGiveBack; }

// One tag in a kOpTagStatus reply (pool_api.h TagFigures).
constexpr uint32_t kTagKeep = 1;    // the regions keep the contents at sleep
constexpr uint32_t kTagAsleep = 2;  // asleep now
struct TagState {
  char name[kTagNameBytes];
  uint32_t slot;
  uint32_t flags;                           // kTagKeep, kTagAsleep
  PAGEFAST_TAG_FIELDS(PAGEFAST_TAG_MEMBER)  // the figures, in the table's order (policy/tags.h)
};
static_assert(sizeof(TagState) == kTagNameBytes + 8 + policy::kTagFields * sizeof(uint64_t), "no padding");
static_assert(sizeof(TagState) == 120, "a tag's state is 120 bytes: a new figure is a new op");
// At most this many follow a reply: every tag (policy/tags.h).
constexpr int kMaxTagStates = policy::kMaxTags;

struct Request {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint64_t arg;     // the export id of an open or a close; sleep's flags
  uint64_t seq;     // echoed in the reply (its low 32 bits)
  uint64_t bytes;   // an open: the block's size, as the handle says
  uint32_t offset;  // an open: the block's offset in its first granule
  uint32_t device;  // an open: the exporter's device ordinal
};
static_assert(sizeof(Request) == 40, "the request is 40 bytes");

// Why an open was refused (the reply's `reason`), for the importer's log.
enum Reason : uint32_t {
  kReasonNone = 0,
  kReasonNoExport = 1,      // no such block exported (freed, or the handle does not match it)
  kReasonAsleep = 2,        // the exporter's pool is asleep and the block's memory with it
  kReasonExportFailed = 3,  // the driver refused to export the block's memory
};

// Every reply starts so; an open's pieces follow (ipc_internal.h).
struct ReplyHeader {
  uint32_t magic;
  uint32_t status;  // a CUresult, or a control answer as a signed number
  uint32_t piece_count;
  uint32_t seq;     // the request's, low 32 bits
  uint32_t reason;  // Reason, for a refused open
  // kOpTagStatus: 1 + the pools outside any region awake now (0: a
  // pagefast that does not say); else 0.
  uint32_t reserved;
};
static_assert(sizeof(ReplyHeader) == 24, "the reply header is 24 bytes");

// The exporter's socket: DIR/pagefast-ipc.<uid>.<pidns>.<pid>.<start>, or
// that name in the abstract namespace when `dir` is empty. false if it
// does not fit.
inline bool socket_address(uint32_t uid, uint64_t pidns, uint64_t pid, uint64_t start_ticks, const std::string& dir,
                           sockaddr_un* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  char name[96];
  std::snprintf(name, sizeof name, "pagefast-ipc.%u.%llu.%llu.%llu", unsigned(uid), (unsigned long long)pidns,
                (unsigned long long)pid, (unsigned long long)start_ticks);
  if (dir.empty()) {
    const size_t n = std::strlen(name);
    if (1 + n > sizeof addr->sun_path) return false;
    std::memcpy(addr->sun_path + 1, name, n);  // sun_path[0] = 0: abstract
    *len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
    return true;
  }
  const std::string path = dir + "/" + name;
  if (path.size() + 1 > sizeof addr->sun_path) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  *len = socklen_t(sizeof *addr);
  return true;
}

// The address as people read it: "@name" for the abstract namespace, else
// the path.
inline std::string address_text(const sockaddr_un& addr, socklen_t len) {
  if (addr.sun_path[0]) return addr.sun_path;
  const size_t n = len > offsetof(sockaddr_un, sun_path) + 1 ? len - offsetof(sockaddr_un, sun_path) - 1 : 0;
  return "@" + std::string(addr.sun_path + 1, n);
}

// PAGEFAST_IPC_DIR is used only if it is a directory owned by this
// (effective) user that no one else may write to: anyone who can create
// files there could put a socket of their own under an exporter's name.
// Otherwise *why says what is wrong, and the caller uses the abstract
// namespace (exporter, importer and pagefast-ctl decide alike).
inline bool usable_dir(const char* dir, std::string* why) {
  struct stat st;
  if (::stat(dir, &st) != 0) {
    *why = std::string("cannot be read (") + std::strerror(errno) + ")";
    return false;
  }
  char text[160];
  if (!S_ISDIR(st.st_mode)) {
    *why = "is not a directory";
  } else if (st.st_uid != ::geteuid()) {
    std::snprintf(text, sizeof text, "belongs to uid %u, not to this user (uid %u)", unsigned(st.st_uid),
                  unsigned(::geteuid()));
    *why = text;
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    std::snprintf(text, sizeof text, "may be written by others (mode %04o; chmod go-w it)",
                  unsigned(st.st_mode & 07777));
    *why = text;
  } else {
    return true;
  }
  return false;
}

// Who is at the other end of a connected socket (SO_PEERCRED; for the
// connecting side, the process that listens). false if unknown.
inline bool peer_of(int fd, uint32_t* uid, int32_t* pid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) return false;
  *uid = uint32_t(cred.uid);
  *pid = int32_t(cred.pid);
  return true;
}

}  // namespace pagefast::ipc::wire
