// interpose/ipc/ipc_socket.cpp: the exporter's socket (docs/IPC.md "The
// socket"): listening under the process's name, removing the socket file
// at exit, and starting the pagefast-ipc thread (ipc_server.cpp) on it.
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "interpose/ipc/ipc_internal.h"
#include "interpose/ipc/ipc_server.h"
#include "interpose/log.h"
#include "interpose/service_thread.h"
#include "policy/options.h"

namespace pagefast::ipc::detail {
namespace {

// ---- the socket ----------------------------------------------------------------------

// The socket's state (ipc_state.h State::Socket); the fork handler clears
// `serving`, `failed` and `path_owned` in a child (ipc_common.cpp).
State::Socket& sock() { return ipc_state().socket; }

// A forked child inherits this handler: only the process that made the
// socket file removes it, and only while it is still that file.
void remove_socket_file() {
  if (!sock().path[0] || !sock().path_owned.load(std::memory_order_relaxed)) return;
  struct stat st;
  if (::lstat(sock().path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == sock().inode) ::unlink(sock().path);
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
  if (sock().serving.load(std::memory_order_acquire)) return true;  // every get once it runs: one load
  std::lock_guard<std::mutex> guard(sock().mutex);
  if (sock().serving.load(std::memory_order_relaxed)) return true;
  if (sock().failed) return false;  // said so once already
  sock().failed = true;
  const Identity& me = self();
  const pid_t pid = me.pid;
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
  server->leases = new ChunkLease[kMaxPieces];
  const int err = start_service_thread(nullptr, &server_main, server, "pagefast-ipc");
  if (err != 0) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot start the exporter thread: {}", std::strerror(err));
    ::close(fd);
    if (addr.sun_path[0]) ::unlink(addr.sun_path);
    return false;
  }
  if (addr.sun_path[0]) {
    struct stat st;
    std::memcpy(sock().path, addr.sun_path, sizeof sock().path);
    sock().path_owned.store(true, std::memory_order_relaxed);
    sock().inode = ::lstat(addr.sun_path, &st) == 0 ? st.st_ino : 0;
    if (!sock().exit_registered) {
      sock().exit_registered = true;
      std::atexit(&remove_socket_file);
    }
  }
  sock().failed = false;
  sock().serving.store(true, std::memory_order_release);
  return true;
}

}  // namespace pagefast::ipc::detail
