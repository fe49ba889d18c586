// interpose/pool/ipc_wire.h: the wire of pagefast's per-process socket
// (docs/IPC.md), shared by the library's exporter thread (ipc.cpp) and
// pagefast-ctl: the socket's name, the request, the reply's header. No
// CUDA here: the tool includes it.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace pagefast::ipc::wire {

constexpr uint32_t kRequestMagic = 0x71524650;  // "PFRq"
constexpr uint32_t kReplyMagic = 0x72524650;    // "PFRr"
constexpr uint16_t kVersion = 1;
constexpr uint16_t kOpOpen = 1;
constexpr uint16_t kOpClose = 2;
// Control (pagefast-ctl, docs/POOL.md "Sleep and wake"): `arg` carries
// sleep's flags; the reply's status is the answer, with no pieces.
constexpr uint16_t kOpSleep = 3;
constexpr uint16_t kOpWake = 4;
constexpr uint16_t kOpStatus = 5;

struct Request {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint64_t arg;  // the export id of an open or a close; sleep's flags
  uint64_t reserved[2];
};

// Every reply starts so; an open's pieces follow (ipc.cpp).
struct ReplyHeader {
  uint32_t magic;
  uint32_t status;  // a CUresult, or a control answer as a signed number
  uint32_t piece_count;
  uint32_t reserved;
};

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

}  // namespace pagefast::ipc::wire
