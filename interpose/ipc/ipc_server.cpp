// interpose/ipc/ipc_server.cpp: the exporter's socket (docs/IPC.md "The
// socket"): listening under the process's name, the pagefast-ipc thread
// that serves opens, closes and status, the limits on connections (who is
// at the other end of one, and whether it lives, is ipc_peers.cpp), and
// the pagefast-ipc-bg thread that runs what may block
// (pagefast-ctl's sleep and wake, and giving freed blocks back to the
// pool) so that it never delays an open or a close.
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/service_thread.h"
#include "policy/options.h"

namespace pagefast::ipc::detail {
namespace {

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
// Sleep and wake requests queued or running on the background thread.
constexpr size_t kControlJobs = 4;

// ---- the background thread ---------------------------------------------------------

struct ControlJob {
  int fd;
  uint32_t seq;
  uint16_t op;
  uint64_t arg;
};

// Made at first use and never destroyed: a condition variable destroyed at
// exit while the thread waits on it would hang the exit.
std::mutex g_bg_mutex;
std::condition_variable* g_bg_cv = nullptr;
std::deque<ControlJob>* g_jobs = nullptr;
std::vector<uint64_t>* g_frees = nullptr;
size_t g_jobs_in_flight = 0;
pid_t g_bg_pid = 0;  // the process whose background thread runs; a forked child has none

void reply_control(int fd, uint32_t seq, int answer) {
  wire::ReplyHeader reply{wire::kReplyMagic, uint32_t(int32_t(answer)), 0, seq, 0, 0};
  ::send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void* bg_main(void*) {
  std::unique_lock<std::mutex> lock(g_bg_mutex);
  for (;;) {
    g_bg_cv->wait(lock, [] { return !g_frees->empty() || !g_jobs->empty(); });
    if (!g_frees->empty()) {
      std::vector<uint64_t> frees;
      frees.swap(*g_frees);
      lock.unlock();
      hand_back_now(frees);
      lock.lock();
      continue;
    }
    const ControlJob job = g_jobs->front();
    g_jobs->pop_front();
    lock.unlock();
    Control control = control_handler();
    reply_control(job.fd, job.seq, control ? control(job.op, job.arg) : -1);
    ::close(job.fd);
    lock.lock();
    --g_jobs_in_flight;
  }
}

// REQUIRES g_bg_mutex. Starts the thread once per process.
bool start_bg_locked() {
  const pid_t pid = ::getpid();
  if (g_bg_pid == pid) return true;
  if (!g_jobs) {
    g_bg_cv = new std::condition_variable();
    g_jobs = new std::deque<ControlJob>();
    g_frees = new std::vector<uint64_t>();
  }
  // A forked child inherits the parent's queue but not its thread.
  g_jobs->clear();
  g_frees->clear();
  g_jobs_in_flight = 0;
  if (start_service_thread(nullptr, &bg_main, nullptr, "pagefast-ipc-bg") != 0) return false;
  g_bg_pid = pid;
  return true;
}

// Hands a sleep or wake request (and its connection) to the background
// thread; false if too many are queued or it cannot start.
bool queue_control(const ControlJob& job) {
  std::lock_guard<std::mutex> guard(g_bg_mutex);
  if (g_jobs_in_flight >= kControlJobs || !start_bg_locked()) return false;
  try {
    g_jobs->push_back(job);
  } catch (...) {
    return false;
  }
  ++g_jobs_in_flight;
  g_bg_cv->notify_one();
  return true;
}

// ---- the pagefast-ipc thread ---------------------------------------------------------

struct Connection {
  int fd = -1;
  HolderKey holder;
  Peer peer;  // as SO_PEERCRED gave it, for the log
  uint64_t last_active_ns = 0;
  size_t got = 0;
  unsigned char buf[sizeof(Request)];
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
  bool warned_peer = false, warned_total = false, warned_accept = false;
};

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
  std::vector<int> fds;
  open_export(req, c.holder, &reply, &fds);
  const size_t bytes = sizeof(wire::ReplyHeader) + size_t(reply.header.piece_count) * sizeof(ReplyPiece);
  iovec iov{&reply, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
  if (!fds.empty()) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  for (int fd : fds) ::close(fd);
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

Served serve(Server& s, Connection& c, const Request& req, uint64_t now) {
  if (req.magic != wire::kRequestMagic || req.version != wire::kVersion) return Served::End;
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
    case wire::kOpSleep:
    case wire::kOpWake:
      // May take seconds: on the background thread, which answers and
      // closes the connection.
      if (queue_control(ControlJob{c.fd, uint32_t(req.seq), req.op, req.arg})) return Served::HandedOver;
      reply_control(c.fd, uint32_t(req.seq), wire::kControlBusy);
      return Served::Keep;
    default: return Served::End;
  }
}

// Reads and serves what a connection sent; false when it ends.
bool serve_connection(Server& s, Connection& c, short events, uint64_t now) {
  if (events & (POLLERR | POLLNVAL)) return false;
  for (int round = 0; round < kRequestsPerRound; ++round) {
    const ssize_t got = ::recv(c.fd, c.buf + c.got, sizeof c.buf - c.got, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (got <= 0) return false;
    c.last_active_ns = now;
    c.got += size_t(got);
    if (c.got < sizeof c.buf) continue;
    Request req;
    std::memcpy(&req, c.buf, sizeof req);
    c.got = 0;
    switch (serve(s, c, req, now)) {
      case Served::Keep: break;
      case Served::End: return false;
      case Served::HandedOver:
        // The background thread owns the descriptor now. A connection
        // bound hold would not survive it (none is expected on a
        // pagefast-ctl connection).
        if (!c.holder.identified()) release_holder(c.holder);
        c.fd = -1;
        return false;
    }
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

// ---- the socket ----------------------------------------------------------------------

std::mutex g_start_mutex;
pid_t g_server_pid = 0;  // the process whose pagefast-ipc thread serves
pid_t g_failed_pid = 0;  // the process that could not listen (and said so once)

// The socket file to remove at exit (empty for an abstract socket), and
// whose it is. Plain storage: no initialiser of ours may run after a hook
// already has.
char g_socket_path[sizeof(sockaddr_un::sun_path)];
pid_t g_socket_owner = 0;
ino_t g_socket_inode = 0;
bool g_exit_registered = false;

// A forked child inherits this handler: only the process that made the
// socket file removes it, and only while it is still that file.
void remove_socket_file() {
  if (!g_socket_path[0] || ::getpid() != g_socket_owner) return;
  struct stat st;
  if (::lstat(g_socket_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == g_socket_inode) ::unlink(g_socket_path);
}

// Who holds the name this process wanted: for the warning.
std::string holder_of(const sockaddr_un& addr, socklen_t len) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return "";
  std::string who;
  uint32_t uid = 0;
  int32_t pid = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0 && wire::peer_of(fd, &uid, &pid))
    who = ": it is held by another process (uid " + std::to_string(uid) + ", pid " + std::to_string(pid) + ")";
  else if (addr.sun_path[0]) who = ": a file of that name is in the way";
  ::close(fd);
  return who;
}

// PAGEFAST_IPC_IDLE, else kIdleNs; a bad value (or none above 0) warns once.
uint64_t idle_limit() {
  const char* v = std::getenv(option_name(Opt::IpcIdle));
  if (!v || !*v) return kIdleNs;
  Value parsed;
  if (parse_value(Opt::IpcIdle, v, &parsed) && parsed.number > 0 && parsed.number != ~uint64_t(0)) return parsed.number;
  log::write(LogLevel::Warn, "{}; idle CUDA IPC connections close after {} s", bad_value_message(Opt::IpcIdle, v),
             kIdleNs / (1000 * kMsNs));
  return kIdleNs;
}

size_t connection_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return kMostConnections;
  return std::max(kFewestConnections, std::min(kMostConnections, size_t(lim.rlim_cur / 4)));
}

}  // namespace

bool start_server() {
  std::lock_guard<std::mutex> guard(g_start_mutex);
  const pid_t pid = ::getpid();
  if (g_server_pid == pid) return true;
  if (g_failed_pid == pid) return false;  // said so once already
  g_failed_pid = pid;
  const Identity& me = self();
  sockaddr_un addr;
  socklen_t len = 0;
  if (!me.start_time || !socket_address(uint32_t(pid), me.start_time, me.pidns, &addr, &len)) {
    log::write(LogLevel::Warn,
               "CUDA IPC: no usable socket address (PAGEFAST_IPC_DIR too long?); pool memory "
               "cannot be shared by this process");
    return false;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    log::write(LogLevel::Warn, "CUDA IPC: no socket ({}); pool memory cannot be shared by this process",
               std::strerror(errno));
    return false;
  }
  const mode_t old_mask = ::umask(077);  // a socket file only this user can connect to
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0 || ::listen(fd, 64) != 0) {
    const int err = rc != 0 ? bind_errno : errno;
    log::write(LogLevel::Warn,
               "CUDA IPC: cannot listen on {} ({}{}); pool memory cannot be shared by this "
               "process, nor its pools reached by pagefast-ctl",
               wire::address_text(addr, len), std::strerror(err),
               err == EADDRINUSE ? holder_of(addr, len) : std::string());
    ::close(fd);
    return false;
  }
  Server* server = new Server();
  server->listener = fd;
  server->max_connections = connection_limit();
  server->idle_ns = idle_limit();
  server->reply = new Reply();
  const int err = start_service_thread(nullptr, &server_main, server, "pagefast-ipc");
  if (err != 0) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot start the exporter thread: {}", std::strerror(err));
    ::close(fd);
    if (addr.sun_path[0]) ::unlink(addr.sun_path);
    return false;
  }
  if (addr.sun_path[0]) {
    struct stat st;
    std::memcpy(g_socket_path, addr.sun_path, sizeof g_socket_path);
    g_socket_owner = pid;
    g_socket_inode = ::lstat(addr.sun_path, &st) == 0 ? st.st_ino : 0;
    if (!g_exit_registered) {
      g_exit_registered = true;
      std::atexit(&remove_socket_file);
    }
  }
  g_failed_pid = 0;
  g_server_pid = pid;
  return true;
}

void free_held_blocks(const std::vector<uint64_t>& addrs) {
  if (addrs.empty()) return;
  {
    std::lock_guard<std::mutex> guard(g_bg_mutex);
    if (start_bg_locked()) {
      try {
        g_frees->insert(g_frees->end(), addrs.begin(), addrs.end());
        g_bg_cv->notify_one();
        return;
      } catch (...) {
      }
    }
  }
  hand_back_now(addrs);  // no background thread: here, as a last resort
}

}  // namespace pagefast::ipc::detail
