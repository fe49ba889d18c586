// tools/ctl/pagefast-ctl.cpp: pagefast-ctl sleep PID --keep|--discard
// [--fail] [--tag TAG] | wake PID [--tag TAG] | status PID [--tag TAG].
// Reaches a process running pagefast over its IPC socket (docs/IPC.md: the
// abstract name, or PAGEFAST_IPC_DIR, made of the uid, pid namespace, pid
// and start time) and asks its pools, or one tag's memory, to sleep or
// wake (docs/POOL.md "Sleep and wake", docs/SLEEP.md). Both ends check
// who is at the other (SO_PEERCRED): the process answers only its own uid,
// and this tool takes an answer only from that process (uid and pid),
// never from another process holding its socket's name. Exit: 0 done, 1
// the process answered a failure (or is busy), 2 usage, 3 not reachable
// (no pool yet, control:off, another uid, gone, its name held by another
// process, or a pagefast without tags asked about one), 4 no such tag
// (docs/OPERATIONS.md "Sleep and wake by tag").
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
#include <vector>

#include "interpose/ipc/ipc_wire.h"
#include "interpose/live/segment.h"
#include "interpose/pagefast.h"
#include "policy/config.h"
#include "policy/format.h"
#include "policy/options.h"
#include "policy/summary.h"

#ifndef PAGEFAST_VERSION
#define PAGEFAST_VERSION "unknown"
#endif

namespace {

using namespace pagefast::ipc::wire;  // the socket's name, the request, the reply (docs/IPC.md)

// Sleep with keep copies the whole pool to host memory: allow it minutes.
constexpr int kAnswerWaitMs = 600 * 1000;

// Exit status (kHelp, docs/OPERATIONS.md).
constexpr int kExitDone = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;
constexpr int kExitNoTag = 4;

const char kUsage[] =
    "usage: pagefast-ctl sleep PID --keep|--discard [--fail]\n"
    "       pagefast-ctl sleep PID --tag TAG [--keep|--discard] [--fail]\n"
    "       pagefast-ctl wake PID [--tag TAG]\n"
    "       pagefast-ctl status PID [--tag TAG]\n"
    "       pagefast-ctl --help | --version\n";

const char kHelp[] =
    "Sleep, wake or ask the state of the pagefast pools of a running process of\n"
    "this user (docs/POOL.md \"Sleep and wake\"), or of the memory of one tag of its\n"
    "regions (docs/SLEEP.md). PID may come anywhere after the command.\n"
    "\n"
    "  sleep PID --keep     give the pools' GPU memory back to the driver, its\n"
    "                       contents first copied to host memory: after wake every\n"
    "                       block holds what it held\n"
    "  sleep PID --discard  give the memory back without copying it: after wake\n"
    "                       the blocks are at the same addresses, their contents lost\n"
    "        --fail         while asleep, allocations fail (out of memory) instead of\n"
    "                       waiting for wake\n"
    "        --tag TAG      only the memory allocated in regions of TAG; without\n"
    "                       --keep or --discard, as those regions said\n"
    "  wake PID [--tag TAG] bring the memory back (of TAG only, with --tag)\n"
    "  status PID           awake, asleep or partly asleep (N of M tags), and each tag's state\n"
    "        --tag TAG      only that tag's\n"
    "\n"
    "Memory another process maps through CUDA IPC stays resident across a sleep;\n"
    "the answer then says so (docs/IPC.md).\n"
    "Exit status: 0 done, 1 the process answered a failure or is busy, 2 usage,\n"
    "3 not reachable (no pool yet, control:off, another user's, gone, its socket\n"
    "held by another process, or a pagefast without tags asked about one),\n"
    "4 the process has no such tag (no region of it was ever opened).\n"
    "Words (keep, discard, partly asleep): docs/GLOSSARY.md; sleep: docs/SLEEP.md.\n";

int usage(const char* why) {
  if (why) std::fprintf(stderr, "pagefast-ctl: %s\n", why);
  std::fputs(kUsage, stderr);
  return kExitUsage;
}

struct Command {
  uint16_t op = 0;
  std::string word;  // sleep, wake, status
  uint64_t flags = 0;
  bool keep = false, discard = false;
  bool tagged = false;
  std::string tag;
  long pid = 0;
};

// Reads the command line into *c; returns kExitDone or the exit status of
// a usage error (said on stderr).
int parse(int argc, char** argv, Command* c) {
  c->word = argv[1];
  if (c->word == "sleep") c->op = kOpSleep;
  else if (c->word == "wake") c->op = kOpWake;
  else if (c->word == "status") c->op = kOpStatus;
  else return usage(("unknown command " + c->word).c_str());
  const char* pid_text = nullptr;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (c->op == kOpSleep && a == "--keep") c->keep = true;
    else if (c->op == kOpSleep && a == "--discard") c->discard = true;
    else if (c->op == kOpSleep && a == "--fail") c->flags |= PAGEFAST_SLEEP_FAIL;
    else if (a == "--tag" && i + 1 < argc && !c->tagged) {
      c->tagged = true;
      c->tag = argv[++i];
    } else if (a.rfind("--tag=", 0) == 0 && !c->tagged) {
      c->tagged = true;
      c->tag = a.substr(6);
    } else if (a.rfind("-", 0) != 0 && !pid_text) pid_text = argv[i];
    else return usage(("unknown option " + a + " for " + c->word).c_str());
  }
  if (!pid_text) return usage("which process? give its PID");
  char* end = nullptr;
  c->pid = std::strtol(pid_text, &end, 10);
  if (!end || *end || c->pid <= 0 || c->pid > long(INT32_MAX)) return usage("PID must be a process id");
  if (c->tagged && !pagefast::policy::good_tag(c->tag.c_str()))
    return usage(("--tag: '" + c->tag + "' is no tag (" PAGEFAST_TAG_RULE ")").c_str());
  if (c->op == kOpSleep && (c->keep == c->discard) && !(c->tagged && !c->keep)) {
    std::fprintf(stderr,
                 "pagefast-ctl: sleep needs exactly one of --keep or --discard%s:\n"
                 "  --keep     copies the GPU memory's contents to host memory first; after wake every\n"
                 "             block holds what it held (costs host memory and the copy's time)\n"
                 "  --discard  gives the memory back without copying; after wake the blocks are at the\n"
                 "             same addresses but their contents are lost\n",
                 c->tagged ? " (or neither, with --tag: as the tag's regions said)" : "");
    return kExitUsage;
  }
  if (c->keep) c->flags |= PAGEFAST_SLEEP_KEEP;
  if (c->discard && c->tagged) c->flags |= PAGEFAST_SLEEP_DISCARD;
  if (c->tagged && c->op == kOpSleep) c->op = kOpSleepTag;
  if (c->tagged && c->op == kOpWake) c->op = kOpWakeTag;
  return kExitDone;
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

// Why the last request got no answer (said by no_answer).
enum class Silence { Closed, Foreign };
Silence g_silence = Silence::Closed;
uint64_t g_started = 0;  // the process's start time, when connected

// Why process `pid` has no control socket, from its live segment
// (docs/STATS.md), which says its state: off or pass-through has no pool
// to sleep; active without a socket is control:off.
std::string why_no_socket(long pid) {
  const char* dir = std::getenv(pagefast::option_name(pagefast::Opt::LiveDir));
  for (const pagefast::live::Listing& l : pagefast::live::list_segments(dir ? dir : "", uint64_t(::geteuid()), false)) {
    if (l.name.pid != uint64_t(pid) || l.status != pagefast::live::ReadStatus::Ok || l.stale) continue;
    const uint64_t mode = l.snapshot.mode;
    if (mode == uint64_t(pagefast::Mode::Active)) return "its pool is active: control:off";
    const char* word = pagefast::mode_name(mode <= uint64_t(pagefast::Mode::PassThrough) ? pagefast::Mode(mode)
                                                                                         : pagefast::Mode::PassThrough);
    return std::string("its live segment says ") + word + " (" + l.snapshot.reason + "): no pool to sleep or wake";
  }
  return "no live segment of it: no allocation yet, stats:off, or not pagefast";
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

// Connects to process `pid`'s socket and proves who answers; *fd on
// kExitDone, else the exit status (said on stderr).
int connect_to(long pid, int* fd_out) {
  const uint64_t started = pagefast::live::process_start_ticks(uint64_t(pid)), pidns = pid_namespace(pid);
  if (!started || !pidns) {
    std::fprintf(stderr, "pagefast-ctl: no process %ld (or not this user's)\n", pid);
    return kExitUnreachable;
  }
  sockaddr_un addr;
  socklen_t len = 0;
  if (!socket_address(uint32_t(::geteuid()), pidns, uint64_t(pid), started, socket_dir(), &addr, &len))
    return kExitUnreachable;
  const std::string name = address_text(addr, len);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    std::fprintf(stderr, "pagefast-ctl: process %ld does not answer on %s (%s)\n", pid, name.c_str(),
                 why_no_socket(pid).c_str());
    if (fd >= 0) ::close(fd);
    return kExitUnreachable;
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
    return kExitUnreachable;
  }
  *fd_out = fd;
  g_started = started;
  return kExitDone;
}

// Sends one request (with the tag for a tagged op) and reads the reply's
// header; false when no answer came whole.
bool ask(int fd, uint16_t op, uint64_t arg, uint64_t seq, const std::string& tag, ReplyHeader* reply) {
  g_silence = Silence::Closed;
  struct {
    Request req;
    TagName tag;
  } out{};
  out.req = Request{kRequestMagic, kControlVersion, op, arg, seq, 0, 0, 0};
  std::memcpy(out.tag.name, tag.data(), tag.size() < kTagNameBytes ? tag.size() : kTagNameBytes - 1);
  const size_t bytes = sizeof out.req + (carries_tag(op) ? sizeof out.tag : 0);
  if (::send(fd, &out, bytes, MSG_NOSIGNAL) != ssize_t(bytes) || !read_answer(fd, reply, sizeof *reply)) return false;
  if (reply->magic == kReplyMagic && reply->seq == uint32_t(seq)) return true;
  g_silence = Silence::Foreign;
  return false;
}

// Says why process `pid` gave no answer: it exited (killed during a
// sleep, say), it answered in another protocol (another pagefast
// version), or it closed the connection while running.
bool gone(long pid) {
  if (pagefast::live::process_start_ticks(uint64_t(pid)) != g_started) return true;
  char path[64], text[512] = {};
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  const size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = 0;
  const char* end = std::strrchr(text, ')');  // "pid (comm) S ...": the state after the name
  return !end || !end[1] || end[2] == 'Z' || end[2] == 'X';
}

int no_answer(long pid, const char* extra) {
  // A process that closed its socket by exiting may still be on its way
  // out: given up to 5 s to be gone before it counts as running.
  for (int i = 0; i < 500 && g_silence == Silence::Closed && !gone(pid); ++i) ::usleep(10000);
  if (gone(pid))
    std::fprintf(stderr, "pagefast-ctl: process %ld exited before it answered (killed, or it ended)\n", pid);
  else if (g_silence == Silence::Foreign)
    std::fprintf(stderr, "pagefast-ctl: process %ld answered in another protocol: a different pagefast version%s\n",
                 pid, extra);
  else
    std::fprintf(stderr,
                 "pagefast-ctl: process %ld closed the connection without an answer (a different pagefast "
                 "version%s?)\n",
                 pid, extra);
  return kExitUnreachable;
}

std::string bytes_text(uint64_t bytes) { return pagefast::format_bytes(bytes, pagefast::ByteStyle::Table); }

// status: the pools' line, then each tag's (of `only` alone when given).
// A pagefast without tags answers the pools' line only.
int status(int fd, const Command& c) {
  ReplyHeader reply{};
  if (!ask(fd, kOpStatus, 0, 1, "", &reply)) return no_answer(c.pid, "");
  const int pools = int(int32_t(reply.status));
  std::vector<TagState> tags;
  const bool told = ask(fd, kOpTagStatus, 0, 2, "", &reply) && reply.piece_count <= uint32_t(kMaxTagStates);
  const int untagged_awake = told && reply.reserved ? int(reply.reserved) - 1 : -1;  // -1: not said
  if (told) {
    tags.resize(reply.piece_count);
    if (!tags.empty() && !read_answer(fd, tags.data(), tags.size() * sizeof(TagState))) tags.clear();
  }
  if (!told && c.tagged) {
    std::fprintf(stderr, "pagefast-ctl: process %ld runs a pagefast without tags\n", c.pid);
    return kExitUnreachable;
  }
  // The process's sleep in words (docs/STATS.md "State words"); a tag's
  // sleep leaves the rest awake: partly asleep.
  int asleep_tags = 0;
  for (const TagState& t : tags) asleep_tags += t.flags & kTagAsleep ? 1 : 0;
  // Every tag asleep but the memory outside any region awake: partly too.
  const bool partly =
      asleep_tags > 0 && (asleep_tags < int(tags.size()) || (asleep_tags == int(tags.size()) && untagged_awake > 0));
  if (!c.tagged)
    std::printf("%ld: %s\n", c.pid, pagefast::sleep_words(pools > 0, partly, asleep_tags, int(tags.size())).c_str());
  int shown = 0;
  for (TagState& t : tags) {
    t.name[kTagNameBytes - 1] = 0;
    if (c.tagged && c.tag != t.name) continue;
    ++shown;
    std::printf("%ld: tag %s (%s): %s, resident %s, asleep %s, kept %s, in use %s\n", c.pid, t.name,
                t.flags & kTagKeep ? "keep" : "discard", t.flags & kTagAsleep ? "asleep" : "awake",
                bytes_text(t.resident_bytes).c_str(), bytes_text(t.asleep_bytes).c_str(),
                bytes_text(t.kept_bytes).c_str(), bytes_text(t.in_use_bytes).c_str());
  }
  if (c.tagged && !shown) {
    std::fprintf(stderr, "pagefast-ctl: process %ld has no tag %s (no region of it was ever opened)\n", c.pid,
                 c.tag.c_str());
    return kExitNoTag;
  }
  return pools < 0 ? kExitFailed : kExitDone;
}

// sleep or wake, of everything or of one tag.
int sleep_or_wake(int fd, const Command& c) {
  ReplyHeader reply{};
  if (!ask(fd, c.op, c.flags, 1, c.tag, &reply)) return no_answer(c.pid, c.tagged ? ", without tags" : "");
  const int answer = int(int32_t(reply.status));
  if (answer == kControlBusy) {
    std::printf("%ld: busy: other sleep or wake requests are queued; try again\n", c.pid);
    return kExitFailed;
  }
  if (answer == kControlNoTag) {
    std::fprintf(stderr, "pagefast-ctl: process %ld has no tag %s (no region of it was ever opened); nothing slept\n",
                 c.pid, c.tag.c_str());
    return kExitNoTag;
  }
  const char* said = answer == 0   ? "done"
                     : answer == 1 ? "done, some memory stays resident (shared with another process through CUDA "
                                     "IPC, or refused by the driver: see its log)"
                                   : "failed";
  if (c.tagged) std::printf("%ld: %s tag %s %s\n", c.pid, c.word.c_str(), c.tag.c_str(), said);
  else std::printf("%ld: %s %s\n", c.pid, c.word.c_str(), said);
  return answer < 0 ? kExitFailed : kExitDone;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(kHelp, stdout);
    return kExitDone;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("pagefast-ctl %s\n", PAGEFAST_VERSION);
    return kExitDone;
  }
  if (argc < 3) return usage(nullptr);
  Command c;
  if (const int bad = parse(argc, argv, &c)) return bad;
  int fd = -1;
  if (const int unreachable = connect_to(c.pid, &fd)) return unreachable;
  const int rc = c.op == kOpStatus ? status(fd, c) : sleep_or_wake(fd, c);
  ::close(fd);
  return rc;
}
