// interpose/ipc/ipc_server.h: the pagefast-ipc thread's state and limits,
// shared by ipc_server.cpp (the thread) and ipc_socket.cpp (which makes
// the socket and starts the thread). Internal to interpose/ipc/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "interpose/ipc/ipc_internal.h"

namespace pagefast::ipc::detail {

using wire::Request;

constexpr uint64_t kMsNs = 1000 * 1000;
// Connections: per importing process, for every process whose pid this
// one cannot see (other pid namespaces) together, and in all (a quarter
// of the descriptor limit, within these bounds): a client cannot push
// this process to its descriptor limit.
constexpr size_t kPeerConnections = 8;
constexpr size_t kUnseenConnections = 64;
constexpr size_t kFewestConnections = 16;
constexpr size_t kMostConnections = 256;
// A connection that sent nothing for this long is closed (an importer
// connects again when it needs to; its holds are not the connection's),
// whoever its peer is. One whose holds are bound to it (an importer this
// process cannot see, holding something) stays: those are bounded by
// kUnseenConnections. PAGEFAST_IPC_IDLE sets another limit (idle_limit).
constexpr uint64_t kIdleNs = 30000 * kMsNs;
// accept failing for want of resources (EMFILE ...): the listener rests,
// from this long, doubling, up to the last.
constexpr uint64_t kBackoffFirstNs = 50 * kMsNs;
constexpr uint64_t kBackoffLastNs = 2000 * kMsNs;
// A holder's death is looked for this often; soon after one of its
// connections ended (it may be exiting), from the first, doubling.
constexpr uint64_t kLivenessNs = 1000 * kMsNs;
constexpr uint64_t kLivenessFirstNs = 10 * kMsNs;
constexpr int kAcceptsPerRound = 32;
constexpr int kRequestsPerRound = 64;

struct Connection {
  int fd = -1;
  HolderKey holder;
  Peer peer;  // as SO_PEERCRED gave it, for the log
  uint64_t last_active_ns = 0;
  size_t got = 0;
  // Requests read and not yet served (a Request, and a TagName after it
  // for a tagged op): room for several, so that one read takes what came.
  unsigned char buf[8 * sizeof(Request) + sizeof(wire::TagName)];
};

struct Watch {
  uint64_t next_ns;
  uint64_t interval_ns;
};

struct Server {
  int listener = -1;
  std::vector<Connection> conns;
  size_t max_connections = kMostConnections;
  uint64_t idle_ns = kIdleNs;
  uint64_t next_serial = 1;
  uint64_t backoff_ns = 0;
  uint64_t listen_again_ns = 0;      // while resting after an accept error
  std::map<HolderKey, Watch> watch;  // identified holders: when to look for their death
  Reply* reply = nullptr;
  ChunkLease* leases = nullptr;  // kMaxPieces: the descriptors of the open being answered
  bool warned_peer = false, warned_total = false, warned_accept = false;
};

// The pagefast-ipc thread: serves the connections of `arg`, a Server.
void* server_main(void* arg);

}  // namespace pagefast::ipc::detail
