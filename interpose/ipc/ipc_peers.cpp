// interpose/ipc/ipc_peers.cpp: who is at the other end of a connection to
// the exporter's socket, and whether that process still lives
// (docs/IPC.md "Holds"): the /proc readers the IPC code shares, the
// identification of a connecting importer, the liveness check of a holder,
// and the words a warning uses for a peer.
//
// A process is dead only when it is gone: no thread of it runs any more.
// Its leader's state says nothing about that: a main thread that called
// pthread_exit shows as a zombie ('Z' in /proc/PID/stat) while the other
// threads still run and use what the process mapped. So the answer comes
// from a pidfd (its poll reports the exit of the whole thread group), or,
// where pidfd_open is not there (before Linux 5.3, or refused by a
// seccomp filter), from the states of the tasks under /proc/PID/task. A
// reused pid is told apart by the start time, read after the pidfd is
// open. When the answer cannot be read (out of descriptors), the process
// counts as alive: its holds stay until it can be told.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose/ipc/ipc_internal.h"

namespace pagefast::ipc::detail {
namespace {

// SO_PEERPIDFD (Linux 6.5): a pidfd of the process that connected, taken
// at connect time, so that no reuse of its pid can slip in before accept.
constexpr int kSoPeerPidfd = 77;

bool dead_state(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

// A pidfd of `pid`, or -1 with errno (ESRCH: no such process; anything
// else: the kernel cannot say this way).
int open_pidfd(int32_t pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, long(pid), 0L);
  if (fd >= 0) ::fcntl(int(fd), F_SETFD, FD_CLOEXEC);
  return int(fd);
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Whether the thread group a pidfd names has exited.
Liveness pidfd_liveness(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Liveness::Unknown;
  return n > 0 ? Liveness::Gone : Liveness::Alive;
}

// Whether any task of `pid` is not dead, by /proc/PID/task. A thread is
// made only by a live one: a second look that finds none either rules out
// one made while the first looked.
Liveness task_liveness(int32_t pid) {
  char dir_path[64];
  std::snprintf(dir_path, sizeof dir_path, "/proc/%d/task", int(pid));
  for (int look = 0; look < 2; ++look) {
    DIR* dir = ::opendir(dir_path);
    if (!dir) return errno == ENOENT || errno == ESRCH ? Liveness::Gone : Liveness::Unknown;
    bool live = false, unread = false;
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
      char stat_path[sizeof dir_path + sizeof entry->d_name + 8];
      std::snprintf(stat_path, sizeof stat_path, "%s/%s/stat", dir_path, entry->d_name);
      ProcStat st;
      const ProcRead r = read_stat_file(stat_path, &st);
      if (r == ProcRead::Unknown) unread = true;
      if (r == ProcRead::Ok && !dead_state(st.state)) live = true;
      if (live) break;
    }
    ::closedir(dir);
    if (live) return Liveness::Alive;
    if (unread) return Liveness::Unknown;
  }
  return Liveness::Gone;
}

// The start time of `pid`, and whether the process read is `pidfd`'s (or,
// without a pidfd, still has a live task): Alive with *start_ticks set, or
// Gone, or Unknown.
Liveness read_live_start(int32_t pid, int pidfd, uint64_t* start_ticks) {
  ProcStat st;
  const ProcRead r = read_proc_stat(pid, &st);
  if (r == ProcRead::NoProcess) return Liveness::Gone;
  if (r == ProcRead::Unknown || !st.start_ticks) return Liveness::Unknown;
  // Alive after the read: the pid was still the pidfd's process when its
  // stat was read (a pid is not reused while its process lives).
  const Liveness now = pidfd >= 0 ? pidfd_liveness(pidfd) : task_liveness(pid);
  if (now == Liveness::Alive) *start_ticks = st.start_ticks;
  return now;
}

}  // namespace

ProcRead read_stat_file(const char* path, ProcStat* out) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? ProcRead::NoProcess : ProcRead::Unknown;
  char line[1024];
  ssize_t got;
  do {
    got = ::read(fd, line, sizeof line - 1);
  } while (got < 0 && errno == EINTR);
  const int read_errno = errno;
  ::close(fd);
  // A process reaped between the open and the read reads as ESRCH.
  if (got < 0) return read_errno == ESRCH ? ProcRead::NoProcess : ProcRead::Unknown;
  if (got == 0) return ProcRead::NoProcess;
  line[got] = '\0';
  // The command (field 2) may hold spaces and parentheses: fields 3 on
  // follow the last ')'.
  const char* p = std::strrchr(line, ')');
  char state = 0;
  unsigned long long start = 0;
  if (!p || std::sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                        &state, &start) != 2)
    return ProcRead::Unknown;
  out->state = state;
  out->start_ticks = start;
  return ProcRead::Ok;
}

ProcRead read_proc_stat(int32_t pid, ProcStat* out) {
  if (pid <= 0) return ProcRead::NoProcess;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  return read_stat_file(path, out);
}

uint64_t pid_namespace_of(int32_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/ns/pid", int(pid));
  struct stat st;
  return ::stat(path, &st) == 0 ? uint64_t(st.st_ino) : 0;
}

bool proc_is_ours() {
  // Asked again after a fork (State::forks, counted by the fork handler).
  static thread_local uint64_t checked_forks = ~uint64_t(0);
  static thread_local bool ours = false;
  const uint64_t forks = ipc_state().forks.load(std::memory_order_relaxed);
  if (checked_forks != forks) {
    checked_forks = forks;
    const int32_t pid = int32_t(::getpid());
    char target[32] = {};
    const ssize_t n = ::readlink("/proc/self", target, sizeof target - 1);
    ours = n > 0 && std::strtol(target, nullptr, 10) == long(pid);
  }
  return ours;
}

Liveness process_liveness(int32_t pid, uint64_t start_ticks) {
  if (pid <= 0 || !start_ticks) return Liveness::Unknown;
  const int pidfd = open_pidfd(pid);
  if (pidfd < 0 && errno == ESRCH) return Liveness::Gone;
  uint64_t now_start = 0;
  Liveness answer = read_live_start(pid, pidfd, &now_start);
  if (answer == Liveness::Alive && now_start != start_ticks) answer = Liveness::Gone;  // the pid is another's now
  if (pidfd >= 0) ::close(pidfd);
  return answer;
}

bool identify(int fd, uint64_t serial, HolderKey* key, Peer* peer) {
  uint32_t uid = 0;
  int32_t pid = 0;
  if (!wire::peer_of(fd, &uid, &pid) || uid != uint32_t(::geteuid())) return false;
  peer->pid = pid;
  peer->uid = uid;
  *key = HolderKey{};
  key->connection = serial;
  if (pid <= 0 || !proc_is_ours()) return true;  // out of sight: its holds are the connection's
  int pidfd = -1;
  socklen_t len = sizeof pidfd;
  if (::getsockopt(fd, SOL_SOCKET, kSoPeerPidfd, &pidfd, &len) != 0 || len != sizeof pidfd) pidfd = -1;
  if (pidfd < 0) pidfd = open_pidfd(pid);
  uint64_t start = 0;
  // A peer already gone stays tied to its connection: whatever its pid
  // shows now may be another process, and its holds end with the
  // connection, which its death closed.
  const Liveness seen = (pidfd < 0 && errno == ESRCH) ? Liveness::Gone : read_live_start(pid, pidfd, &start);
  if (pidfd >= 0) ::close(pidfd);
  if (seen == Liveness::Alive) {
    key->pid = uint64_t(pid);
    key->start_ticks = start;
    key->pidns = pid_namespace_of(pid);
    key->connection = 0;
  }
  return true;
}

bool alive(const HolderKey& key) {
  if (process_liveness(int32_t(key.pid), key.start_ticks) == Liveness::Gone) return false;
  const uint64_t ns = key.pidns ? pid_namespace_of(int32_t(key.pid)) : 0;
  return ns == 0 || ns == key.pidns;
}

std::string describe(const Peer& peer) {
  if (peer.pid > 0) return "process " + std::to_string(peer.pid);
  return "a process in another pid namespace (uid " + std::to_string(peer.uid) + ")";
}

}  // namespace pagefast::ipc::detail
