// tools/ctl/pagefast-ctl.cpp: pagefast-ctl sleep [--keep] [--fail] PID |
// wake PID | status PID. Reaches a process running pagefast over its IPC
// socket (docs/IPC.md: the abstract name, or PAGEFAST_IPC_DIR, made of the
// uid, pid namespace, pid and start time) and asks its pools to sleep or
// wake (docs/POOL.md "Sleep and wake"). The process answers only its own
// uid (SO_PEERCRED). Exit: 0 done, 1 the process answered a failure, 2
// usage, 3 not reachable (no pool yet, control:off, another uid, gone).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose/live/segment.h"
#include "interpose/pagefast.h"
#include "interpose/pool/ipc_wire.h"
#include "policy/options.h"

namespace {

using namespace pagefast::ipc::wire;  // the socket's name, the request, the reply (docs/IPC.md)

uint64_t pid_namespace(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
  struct stat st;
  return ::stat(path, &st) == 0 ? uint64_t(st.st_ino) : 0;
}

int usage() {
  std::fprintf(stderr, "usage: pagefast-ctl sleep [--keep] [--fail] PID | wake PID | status PID\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  uint16_t op;
  uint64_t flags = 0;
  if (cmd == "sleep") op = kOpSleep;
  else if (cmd == "wake") op = kOpWake;
  else if (cmd == "status") op = kOpStatus;
  else return usage();
  for (int i = 2; i < argc - 1; ++i) {
    if (op == kOpSleep && std::strcmp(argv[i], "--keep") == 0) flags |= PAGEFAST_SLEEP_KEEP;
    else if (op == kOpSleep && std::strcmp(argv[i], "--fail") == 0) flags |= PAGEFAST_SLEEP_FAIL;
    else return usage();
  }
  char* end = nullptr;
  const long pid = std::strtol(argv[argc - 1], &end, 10);
  if (!end || *end || pid <= 0) return usage();
  const uint64_t started = pagefast::live::process_start_ticks(uint64_t(pid)), pidns = pid_namespace(pid);
  if (!started || !pidns) {
    std::fprintf(stderr, "pagefast-ctl: no process %ld (or not this user's)\n", pid);
    return 3;
  }
  sockaddr_un addr;
  socklen_t len = 0;
  const char* dir = std::getenv(pagefast::option_name(pagefast::Opt::IpcDir));
  if (!socket_address(uint32_t(::geteuid()), pidns, uint64_t(pid), started, dir ? dir : "", &addr, &len)) return 3;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    std::fprintf(stderr, "pagefast-ctl: process %ld does not answer (no pool yet, control:off, or not pagefast)\n", pid);
    return 3;
  }
  // Sleep with keep copies the whole pool: allow it minutes.
  timeval tv{600, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const Request req{kRequestMagic, kVersion, op, flags, {0, 0}};
  ReplyHeader reply{};
  size_t got = 0;
  if (::send(fd, &req, sizeof req, MSG_NOSIGNAL) != ssize_t(sizeof req)) return 3;
  while (got < sizeof reply) {
    const ssize_t n = ::recv(fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got, 0);
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  if (got < sizeof reply || reply.magic != kReplyMagic) {
    std::fprintf(stderr, "pagefast-ctl: no answer from process %ld (another uid?)\n", pid);
    return 3;
  }
  const int answer = int(int32_t(reply.status));
  if (op == kOpStatus) {
    std::printf("%ld: %d pool(s) asleep\n", pid, answer);
    return answer < 0 ? 1 : 0;
  }
  std::printf("%ld: %s %s\n", pid, cmd.c_str(),
              answer == 0 ? "done" : answer == 1 ? "done, some chunks resident (see its log)" : "failed");
  return answer < 0 ? 1 : 0;
}
