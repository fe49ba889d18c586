// interpose/ipc/ipc_server.cpp: the pagefast-ipc thread of the exporter's
// socket (docs/IPC.md "The socket"), that serves opens, closes and status,
// and the limits on connections (who is at the other end of one, and
// whether it lives, is ipc_peers.cpp; making the socket is ipc_socket.cpp;
// what may block runs on the background thread of ipc_background.cpp).
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "interpose/ipc/ipc_internal.h"
#include "interpose/ipc/ipc_server.h"
#include "interpose/log.h"

namespace pagefast::ipc::detail {
namespace {

// ---- the pagefast-ipc thread ---------------------------------------------------------

void watch_soon(Server& s, const HolderKey& key, uint64_t now, uint64_t in_ns) {
  Watch& w = s.watch[key];
  w.interval_ns = in_ns;
  w.next_ns = now + in_ns;
}

// The connection ends. An identified importer keeps its holds (it may be
// exiting: looked at soon); an unidentified one's end with it.
void end_connection(Server& s, Connection& c, uint64_t now) {
  ::close(c.fd);
  c.fd = -1;
  if (!c.holder.identified()) {
    release_holder(c.holder);
  } else if (s.watch.count(c.holder)) {
    watch_soon(s, c.holder, now, kLivenessFirstNs);
  }
}

// Answers one open: the chunk descriptors of the export, with SCM_RIGHTS.
// false: the reply did not go out whole (the connection ends).
bool serve_open(Server& s, Connection& c, const Request& req, uint64_t now) {
  Reply& reply = *s.reply;
  ChunkLease* leases = s.leases;
  open_export(req, c.holder, &reply, leases);
  const uint32_t count = reply.header.status == CUDA_SUCCESS ? reply.header.piece_count : 0;
  const size_t bytes = sizeof(wire::ReplyHeader) + size_t(reply.header.piece_count) * sizeof(ReplyPiece);
  iovec iov{&reply, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
  if (count) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * count);
    for (uint32_t i = 0; i < count; ++i) std::memcpy(CMSG_DATA(cm) + i * sizeof(int), &leases[i].fd, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  // The importer has its own copies now (or none: the reply did not go).
  return_chunk_fds(leases, count);
  const bool ok = reply.header.status == CUDA_SUCCESS;
  if (sent != ssize_t(bytes)) {
    // The importer did not get it (gone, or not reading): the hold this
    // open took is not its.
    if (ok) release(req.arg, c.holder);
    return false;
  }
  if (ok && c.holder.identified() && !s.watch.count(c.holder)) watch_soon(s, c.holder, now, kLivenessNs);
  return true;
}

enum class Served { Keep, End, HandedOver };

Served serve(Server& s, Connection& c, const Request& req, const wire::TagName* tag, uint64_t now) {
  if (req.magic != wire::kRequestMagic || !wire::version_taken(req.version, req.op)) return Served::End;
  switch (req.op) {
    case wire::kOpOpen: return serve_open(s, c, req, now) ? Served::Keep : Served::End;
    case wire::kOpClose: release(req.arg, c.holder); return Served::Keep;
    case wire::kOpReleaseAll: release_holder(c.holder); return Served::Keep;
    case wire::kOpStatus: {
      // Reads a few flags: never blocks, answered here.
      Control control = control_handler();
      reply_control(c.fd, uint32_t(req.seq), control ? control(req.op, req.arg) : -1);
      return Served::Keep;
    }
    case wire::kOpTagStatus:
      // Reads what the last sleep or wake step left: never blocks.
      reply_tag_states(c.fd, uint32_t(req.seq));
      return Served::Keep;
    case wire::kOpSleep:
    case wire::kOpWake:
    case wire::kOpSleepTag:
    case wire::kOpWakeTag:
    case wire::kOpGiveBack: {
      // May take seconds: on the background thread, which answers and
      // closes the connection.
      ControlJob job{c.fd, uint32_t(req.seq), req.op, req.arg, {}};
      if (tag) {
        std::memcpy(job.tag, tag->name, sizeof job.tag);
        job.tag[sizeof job.tag - 1] = 0;
      }
      if (queue_control(job)) return Served::HandedOver;
      reply_control(c.fd, uint32_t(req.seq), wire::kControlBusy);
      return Served::Keep;
    }
    default: return Served::End;
  }
}

// The bytes of the request that starts at `at` (whole or not): a Request,
// and a TagName after it once its header says the op carries one.
size_t request_bytes(const unsigned char* at, size_t have) {
  if (have < sizeof(Request)) return sizeof(Request);
  Request req;
  std::memcpy(&req, at, sizeof req);
  return sizeof(Request) + (wire::carries_tag(req.op) ? sizeof(wire::TagName) : 0);
}

// Serves the whole requests in the connection's buffer (at most *budget);
// false when the connection ends. What is left of a request waits.
bool serve_buffered(Server& s, Connection& c, uint64_t now, int* budget) {
  size_t at = 0;
  bool keep = true;
  while (keep && *budget > 0) {
    const size_t need = request_bytes(c.buf + at, c.got - at);
    if (c.got - at < need) break;
    Request req;
    std::memcpy(&req, c.buf + at, sizeof req);
    wire::TagName tag;
    const bool tagged = need > sizeof req;
    if (tagged) std::memcpy(&tag, c.buf + at + sizeof req, sizeof tag);
    at += need;
    --*budget;
    switch (serve(s, c, req, tagged ? &tag : nullptr, now)) {
      case Served::Keep: break;
      case Served::End: keep = false; break;
      case Served::HandedOver:
        // The background thread owns the descriptor now. A connection
        // bound hold would not survive it (none is expected on a
        // pagefast-ctl connection).
        if (!c.holder.identified()) release_holder(c.holder);
        c.fd = -1;
        keep = false;
        break;
    }
  }
  std::memmove(c.buf, c.buf + at, c.got - at);
  c.got -= at;
  return keep;
}

// Reads and serves what a connection sent; false when it ends. A read that
// did not fill the buffer took all there was: no second read to learn it.
bool serve_connection(Server& s, Connection& c, short events, uint64_t now) {
  if (events & (POLLERR | POLLNVAL)) return false;
  int budget = kRequestsPerRound;
  while (budget > 0) {
    const size_t room = sizeof c.buf - c.got;
    const ssize_t got = ::recv(c.fd, c.buf + c.got, room, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (got <= 0) return false;
    c.last_active_ns = now;
    c.got += size_t(got);
    if (!serve_buffered(s, c, now, &budget)) return false;
    if (size_t(got) < room) return true;
  }
  return true;
}

// Whether holds end with this connection (an unidentified importer that
// holds something): such a connection is never closed for room or idleness.
bool bound_holds(const Connection& c) { return !c.holder.identified() && holds_any(c.holder); }

bool same_peer(const HolderKey& a, const HolderKey& b) {
  if (a.identified() != b.identified()) return false;
  return !a.identified() || (a.pid == b.pid && a.start_ticks == b.start_ticks && a.pidns == b.pidns);
}

void accept_new(Server& s, uint64_t now) {
  for (int round = 0; round < kAcceptsPerRound; ++round) {
    const int fd = ::accept4(s.listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      // Out of descriptors or memory (or worse): rest, never spin.
      s.backoff_ns = s.backoff_ns ? std::min(2 * s.backoff_ns, kBackoffLastNs) : kBackoffFirstNs;
      s.listen_again_ns = now + s.backoff_ns;
      if (!s.warned_accept) {
        s.warned_accept = true;
        log::write(LogLevel::Warn,
                   "CUDA IPC: accepting a connection failed ({}); listening again after a pause, "
                   "longer each time it fails (from {} ms up to {} ms)",
                   std::strerror(errno), kBackoffFirstNs / kMsNs, kBackoffLastNs / kMsNs);
      }
      return;
    }
    s.backoff_ns = 0;
    Connection c;
    c.fd = fd;
    c.last_active_ns = now;
    // Only this user's processes may have the memory.
    if (!identify(fd, s.next_serial++, &c.holder, &c.peer)) {
      ::close(fd);
      continue;
    }
    size_t same = 0;
    for (const Connection& o : s.conns) same += same_peer(o.holder, c.holder) ? 1 : 0;
    if (same >= (c.holder.identified() ? kPeerConnections : kUnseenConnections)) {
      if (!s.warned_peer) {
        s.warned_peer = true;
        if (c.holder.identified())
          log::write(LogLevel::Warn,
                     "CUDA IPC: {} has {} connections to this process's socket, the most one process may "
                     "have; its further connections are closed at once",
                     describe(c.peer), same);
        else
          log::write(LogLevel::Warn,
                     "CUDA IPC: {} asked for a connection to this process's socket past the {} that all "
                     "processes in other pid namespaces may have together; further ones are closed at once",
                     describe(c.peer), same);
      }
      ::close(fd);
      continue;
    }
    if (s.conns.size() >= s.max_connections) {
      // Room is made by closing the connection idle the longest whose
      // end drops no hold (an identified importer's holds are its own).
      size_t victim = s.conns.size();
      for (size_t i = 0; i < s.conns.size(); ++i)
        if (!bound_holds(s.conns[i]) &&
            (victim == s.conns.size() || s.conns[i].last_active_ns < s.conns[victim].last_active_ns))
          victim = i;
      if (!s.warned_total) {
        s.warned_total = true;
        log::write(LogLevel::Warn,
                   "CUDA IPC: {} connections to this process's socket, the most it keeps; the one "
                   "idle the longest is closed for each new one",
                   s.conns.size());
      }
      if (victim == s.conns.size()) {
        ::close(fd);
        continue;
      }
      end_connection(s, s.conns[victim], now);
      s.conns.erase(s.conns.begin() + long(victim));
    }
    s.conns.push_back(c);
  }
}

// Connections idle too long end, whoever their peer is, unless holds are
// bound to them (an unidentified importer that holds something).
void close_idle(Server& s, uint64_t now) {
  for (size_t i = s.conns.size(); i-- > 0;) {
    Connection& c = s.conns[i];
    if (now - c.last_active_ns < s.idle_ns || bound_holds(c)) continue;
    char byte;
    if (::recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0) continue;  // a request came meanwhile
    end_connection(s, c, now);
    s.conns.erase(s.conns.begin() + long(i));
  }
}

// Holders that provably died lose their holds.
void check_holders(Server& s, uint64_t now) {
  bool due = false;
  for (const auto& w : s.watch) due |= w.second.next_ns <= now;
  if (!due) return;
  const std::vector<HolderKey> holders = identified_holders();
  std::map<HolderKey, Watch> next;
  for (const HolderKey& key : holders) {
    auto w = s.watch.find(key);
    Watch watch = w != s.watch.end() ? w->second : Watch{now + kLivenessNs, kLivenessNs};
    if (watch.next_ns <= now) {
      if (!alive(key)) {
        release_holder(key);
        continue;
      }
      watch.interval_ns = std::min(2 * watch.interval_ns, kLivenessNs);
      watch.next_ns = now + watch.interval_ns;
    }
    next[key] = watch;
  }
  s.watch.swap(next);
}

int poll_timeout_ms(const Server& s, uint64_t now) {
  uint64_t until = UINT64_MAX;
  if (s.listen_again_ns > now) until = s.listen_again_ns;
  for (const auto& w : s.watch) until = std::min(until, w.second.next_ns);
  // A connection with bound holds has no idle end: those holds end only
  // through a request on it (activity) or its end.
  for (const Connection& c : s.conns)
    if (!bound_holds(c)) until = std::min(until, c.last_active_ns + s.idle_ns);
  if (until == UINT64_MAX) return -1;
  if (until <= now) return 0;
  return int(std::min<uint64_t>((until - now + kMsNs - 1) / kMsNs, 60000));
}

}  // namespace

void* server_main(void* arg) {
  Server& s = *static_cast<Server*>(arg);
  std::vector<pollfd> fds;
  for (;;) {
    uint64_t now = now_ns();
    const bool listening = now >= s.listen_again_ns;
    fds.clear();
    for (const Connection& c : s.conns) fds.push_back({c.fd, POLLIN, 0});
    if (listening) fds.push_back({s.listener, POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(s, now));
    if (n < 0 && errno != EINTR) {
      // Cannot happen with valid arguments; never spin on it either.
      timespec pause{0, long(kBackoffLastNs)};
      ::nanosleep(&pause, nullptr);
      continue;
    }
    now = now_ns();
    if (n > 0) {
      for (size_t i = s.conns.size(); i-- > 0;) {
        Connection& c = s.conns[i];
        const short ev = fds[i].revents;
        if (!ev) continue;
        if (!serve_connection(s, c, ev, now)) {
          if (c.fd >= 0) end_connection(s, c, now);
          s.conns.erase(s.conns.begin() + long(i));
        }
      }
      if (listening) {
        const short ev = fds.back().revents;
        if (ev & POLLIN) accept_new(s, now);
        else if (ev & (POLLERR | POLLNVAL)) s.listen_again_ns = now + kBackoffLastNs;
      }
    }
    close_idle(s, now);
    check_holders(s, now);
  }
}

}  // namespace pagefast::ipc::detail
