// tools/ctl/pagefast-ctl.cpp: pagefast-ctl sleep --keep|--discard [--fail]
// PID | wake PID | status PID. Reaches a process running pagefast over its
// IPC socket (docs/IPC.md: the abstract name, or PAGEFAST_IPC_DIR, made of
// the uid, pid namespace, pid and start time) and asks its pools to sleep
// or wake (docs/POOL.md "Sleep and wake"). Both ends check who is at the
// other (SO_PEERCRED): the process answers only its own uid, and this tool
// takes an answer only from that process (uid and pid), never from
// another process holding its socket's name. Exit: 0 done, 1 the process
// answered a failure (or is busy), 2 usage, 3 not reachable (no pool yet,
// control:off, another uid, gone, or its name held by another process).
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose/ipc/ipc_wire.h"
#include "interpose/live/segment.h"
#include "interpose/pagefast.h"
#include "policy/options.h"

#ifndef PAGEFAST_VERSION
#define PAGEFAST_VERSION "unknown"
#endif

namespace {

using namespace pagefast::ipc::wire;  // the socket's name, the request, the reply (docs/IPC.md)

// Sleep with keep copies the whole pool to host memory: allow it minutes.
constexpr int kAnswerWaitMs = 600 * 1000;

const char kUsage[] =
    "usage: pagefast-ctl sleep --keep|--discard [--fail] PID\n"
    "       pagefast-ctl wake PID\n"
    "       pagefast-ctl status PID\n"
    "       pagefast-ctl --help | --version\n";

const char kHelp[] =
    "Sleep, wake or ask the state of the pagefast pools of a running process of\n"
    "this user (docs/POOL.md \"Sleep and wake\").\n"
    "\n"
    "  sleep --keep PID     give the pools' GPU memory back to the driver, its\n"
    "                       contents first copied to host memory: after wake every\n"
    "                       block holds what it held\n"
    "  sleep --discard PID  give the memory back without copying it: after wake\n"
    "                       the blocks are at the same addresses, their contents lost\n"
    "        --fail         while asleep, allocations fail (out of memory) instead of\n"
    "                       waiting for wake\n"
    "  wake PID             bring the memory back\n"
    "  status PID           how many of its pools are asleep\n"
    "\n"
    "Memory another process maps through CUDA IPC stays resident across a sleep;\n"
    "the answer then says so (docs/IPC.md).\n"
    "Exit status: 0 done, 1 the process answered a failure or is busy, 2 usage,\n"
    "3 not reachable (no pool yet, control:off, another user's, gone, or its socket\n"
    "held by another process).\n";

int usage(const char* why) {
  if (why) std::fprintf(stderr, "pagefast-ctl: %s\n", why);
  std::fputs(kUsage, stderr);
  return 2;
}

uint64_t pid_namespace(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
  struct stat st;
  return ::stat(path, &st) == 0 ? uint64_t(st.st_ino) : 0;
}

// PAGEFAST_IPC_DIR as the library decides it (ipc_wire.h): the directory,
// or the abstract namespace when it is not safe.
std::string socket_dir() {
  const char* dir = std::getenv(pagefast::option_name(pagefast::Opt::IpcDir));
  if (!dir || !*dir) return "";
  std::string why;
  if (usable_dir(dir, &why)) return dir;
  std::fprintf(stderr, "pagefast-ctl: %s=%s %s: looking in the abstract namespace, as the library does\n",
               pagefast::option_name(pagefast::Opt::IpcDir), dir, why.c_str());
  return "";
}

// Reads exactly `bytes`, waiting at most kAnswerWaitMs in all.
bool read_answer(int fd, void* dst, size_t bytes) {
  char* p = static_cast<char*>(dst);
  size_t have = 0;
  while (have < bytes) {
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, kAnswerWaitMs);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const ssize_t got = ::recv(fd, p + have, bytes - have, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    have += size_t(got);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("pagefast-ctl %s\n", PAGEFAST_VERSION);
    return 0;
  }
  if (argc < 3) return usage(nullptr);
  const std::string cmd = argv[1];
  uint16_t op;
  if (cmd == "sleep") op = kOpSleep;
  else if (cmd == "wake") op = kOpWake;
  else if (cmd == "status") op = kOpStatus;
  else return usage(("unknown command " + cmd).c_str());
  uint64_t flags = 0;
  bool keep = false, discard = false;
  for (int i = 2; i < argc - 1; ++i) {
    if (op == kOpSleep && std::strcmp(argv[i], "--keep") == 0) keep = true;
    else if (op == kOpSleep && std::strcmp(argv[i], "--discard") == 0) discard = true;
    else if (op == kOpSleep && std::strcmp(argv[i], "--fail") == 0) flags |= PAGEFAST_SLEEP_FAIL;
    else return usage((std::string("unknown option ") + argv[i] + " for " + cmd).c_str());
  }
  if (op == kOpSleep && keep == discard) {
    std::fprintf(stderr,
                 "pagefast-ctl: sleep needs exactly one of --keep or --discard:\n"
                 "  --keep     copies the GPU memory's contents to host memory first; after wake every\n"
                 "             block holds what it held (costs host memory and the copy's time)\n"
                 "  --discard  gives the memory back without copying; after wake the blocks are at the\n"
                 "             same addresses but their contents are lost\n");
    return 2;
  }
  if (keep) flags |= PAGEFAST_SLEEP_KEEP;
  char* end = nullptr;
  const long pid = std::strtol(argv[argc - 1], &end, 10);
  if (!end || *end || pid <= 0 || pid > long(INT32_MAX)) return usage("PID must be a process id");
  const uint64_t started = pagefast::live::process_start_ticks(uint64_t(pid)), pidns = pid_namespace(pid);
  if (!started || !pidns) {
    std::fprintf(stderr, "pagefast-ctl: no process %ld (or not this user's)\n", pid);
    return 3;
  }
  sockaddr_un addr;
  socklen_t len = 0;
  if (!socket_address(uint32_t(::geteuid()), pidns, uint64_t(pid), started, socket_dir(), &addr, &len)) return 3;
  const std::string name = address_text(addr, len);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    std::fprintf(stderr,
                 "pagefast-ctl: process %ld does not answer on %s (no pool yet, control:off, or not "
                 "pagefast)\n",
                 pid, name.c_str());
    return 3;
  }
  // The answer counts only from that process: anyone could have bound the
  // name first (pid and start time are public).
  uint32_t peer_uid = 0;
  int32_t peer_pid = 0;
  if (!peer_of(fd, &peer_uid, &peer_pid) || peer_uid != uint32_t(::geteuid()) || long(peer_pid) != pid ||
      pagefast::live::process_start_ticks(uint64_t(peer_pid)) != started) {
    std::fprintf(stderr,
                 "pagefast-ctl: the socket of process %ld, %s, is held by another process (uid %u, pid %d), "
                 "not by process %ld: not trusting it; nothing was asked\n",
                 pid, name.c_str(), unsigned(peer_uid), int(peer_pid), pid);
    ::close(fd);
    return 3;
  }
  const Request req{kRequestMagic, kVersion, op, flags, 1, 0, 0, 0};
  ReplyHeader reply{};
  const bool answered =
      ::send(fd, &req, sizeof req, MSG_NOSIGNAL) == ssize_t(sizeof req) && read_answer(fd, &reply, sizeof reply);
  ::close(fd);
  if (!answered || reply.magic != kReplyMagic || reply.seq != 1) {
    std::fprintf(stderr, "pagefast-ctl: no answer from process %ld (a different pagefast version?)\n", pid);
    return 3;
  }
  const int answer = int(int32_t(reply.status));
  if (answer == kControlBusy) {
    std::printf("%ld: busy: other sleep or wake requests are queued; try again\n", pid);
    return 1;
  }
  if (op == kOpStatus) {
    std::printf("%ld: %d pool(s) asleep\n", pid, answer);
    return answer < 0 ? 1 : 0;
  }
  const char* said = answer == 0   ? "done"
                     : answer == 1 ? "done, some memory stays resident (shared with another process through CUDA "
                                     "IPC, or refused by the driver: see its log)"
                                   : "failed";
  std::printf("%ld: %s %s\n", pid, cmd.c_str(), said);
  return answer < 0 ? 1 : 0;
}
