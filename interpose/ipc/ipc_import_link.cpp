// interpose/ipc/ipc_import_link.cpp: the importer's link to each exporter
// (ipc_import.h): the connection, the check of who answers on it, and the
// requests with their sequence numbers and timeouts.
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"

namespace pagefast::ipc::detail {
namespace {

// Whether the process listening on fd is the exporter `key` names: this
// user's, and (where this process can see it) that pid, started then.
bool is_exporter(int fd, const ExporterKey& key, uint32_t* uid, int32_t* pid) {
  if (!wire::peer_of(fd, uid, pid) || *uid != uint32_t(::geteuid())) return false;
  const bool same_ns = key.pidns == self().pidns;
  if (*pid <= 0) return !same_ns;  // another pid namespace, out of sight: the uid is all there is
  if (same_ns && uint32_t(*pid) != key.pid) return false;
  if (!proc_is_ours()) return true;
  ProcStat st;
  if (read_proc_stat(*pid, &st) != ProcRead::Ok || st.start_ticks != key.start_time) return false;
  const uint64_t ns = pid_namespace_of(*pid);
  return ns == 0 || ns == key.pidns;
}

// Reads into dst until at least `min` bytes came (at most `max`), with any
// descriptors that come along (added to *fds), before `deadline`
// (now_ns()). `block`: the first read waits in recvmsg itself, up to the
// socket's receive timeout (kTimeoutMs, as the deadline was set just now);
// otherwise, and for what is left, poll waits. Timeout only when nothing
// was read; anything else that stops it short is Broken.
Exchange read_some(int fd, void* dst, size_t min, size_t max, size_t* have, uint64_t deadline, bool block,
                   std::vector<int>* fds, bool* truncated) {
  char* p = static_cast<char*>(dst);
  *have = 0;
  while (*have < min) {
    const uint64_t now = now_ns();
    if (now >= deadline) return *have ? Exchange::Broken : Exchange::Timeout;
    iovec iov{p + *have, max - *have};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
    if (got < 0 && errno == EINTR) {
      block = false;  // what is left of the deadline is waited for in poll
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (block) return *have ? Exchange::Broken : Exchange::Timeout;  // the receive timeout passed
      pollfd pfd{fd, POLLIN, 0};
      const int n = ::poll(&pfd, 1, int((deadline - now + 999999) / 1000000));
      if (n < 0 && errno != EINTR) return Exchange::Broken;
      continue;  // the deadline is checked above
    }
    block = false;
    for (cmsghdr* cm = got > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; cm; cm = CMSG_NXTHDR(&msg, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int one;
          std::memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof one);
          fds->push_back(one);
        }
      }
    if (got <= 0) return Exchange::Broken;
    if (msg.msg_flags & MSG_CTRUNC) *truncated = true;
    *have += size_t(got);
  }
  return Exchange::Ok;
}

// One reply: its header, its pieces and their descriptors. `alone`: no
// other answer can come before it on the link (none was given up on), so
// the header and a first piece are read at once: most answers in one
// read.
Exchange receive_reply(int fd, uint64_t deadline, bool block, bool alone, Reply* reply, std::vector<int>* fds,
                       bool* truncated) {
  std::memset(&reply->header, 0, sizeof reply->header);
  constexpr size_t kHeader = sizeof(wire::ReplyHeader);
  size_t have = 0;
  Exchange r = read_some(fd, reply, kHeader, alone ? kHeader + sizeof(ReplyPiece) : kHeader, &have, deadline, block,
                         fds, truncated);
  if (r != Exchange::Ok) return r;
  const uint32_t count = reply->header.piece_count;
  if (reply->header.magic != wire::kReplyMagic || count > uint32_t(kMaxPieces))
    return Exchange::Broken;  // not a reply of ours: nothing after it can be trusted
  const size_t whole = kHeader + size_t(count) * sizeof(ReplyPiece);
  if (have > whole) return Exchange::Broken;  // nothing follows an answer unasked
  if (have == whole) return Exchange::Ok;
  char* rest = reinterpret_cast<char*>(reply) + have;
  size_t more = 0;
  r = read_some(fd, rest, whole - have, whole - have, &more, deadline, false, fds, truncated);
  return r == Exchange::Timeout ? Exchange::Broken : r;
}

// A late answer to an open given up on: what it opened is closed again.
void settle_late(Link& link, const Reply& reply, std::vector<int>* fds) {
  for (int fd : *fds) ::close(fd);
  fds->clear();
  auto it = link.abandoned.find(reply.header.seq);
  if (it == link.abandoned.end()) return;
  if (reply.header.status == CUDA_SUCCESS) send_request(link.fd, wire::kOpClose, it->second);
  link.abandoned.erase(it);
}

}  // namespace

Exchange read_exact(int fd, void* dst, size_t bytes, uint64_t deadline, std::vector<int>* fds, bool* truncated) {
  size_t have = 0;
  return read_some(fd, dst, bytes, bytes, &have, deadline, false, fds, truncated);
}

// A connection to the exporter, checked; -1 if it is gone, not reachable
// in time, or someone else answers (one warning naming them).
int connect_to(const ExporterKey& key) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!socket_address(key.pid, key.start_time, key.pidns, &addr, &len)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // connect and send wait at most this long (a full backlog, a stopped
  // exporter whose buffer filled up).
  timeval tv{kTimeoutMs / 1000, (kTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  // An answer is waited for in recvmsg itself, that long (read_some).
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EAGAIN || errno == ETIMEDOUT)
      log::write(LogLevel::Warn,
                 "CUDA IPC: process {} did not accept a connection within {} ms (stopped?); the "
                 "open fails",
                 key.pid, kTimeoutMs);
    ::close(fd);
    return -1;
  }
  uint32_t uid = 0;
  int32_t pid = 0;
  if (!is_exporter(fd, key, &uid, &pid)) {
    if (!ipc_state().warned_impostor.exchange(true))
      log::write(LogLevel::Warn,
                 "CUDA IPC: the socket of process {}, {}, is held by another process (uid {}, pid {}), "
                 "not by the process the handle names: not trusting it; opens of that process's handles fail",
                 key.pid, wire::address_text(addr, len), uid, pid);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_request(int fd, uint16_t op, uint64_t arg, uint32_t seq) {
  const wire::Request req{wire::kRequestMagic, wire::kVersion, op, arg, seq, 0, 0, 0};
  return send_all(fd, &req, sizeof req);
}

// Reads the late answers already there; false if the link broke.
bool drain_late(Link& link) {
  std::unique_ptr<Reply> reply;
  while (!link.abandoned.empty()) {
    pollfd pfd{link.fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) return true;
    if (!reply) reply.reset(new Reply);
    std::vector<int> fds;
    bool truncated = false;
    // An answer goes out in one piece: once its first byte is here, the
    // rest follows at once.
    if (receive_reply(link.fd, now_ns() + uint64_t(kTimeoutMs) * 1000000, false, false, reply.get(), &fds,
                      &truncated) != Exchange::Ok) {
      for (int fd : fds) ::close(fd);
      return false;
    }
    settle_late(link, *reply, &fds);
  }
  return true;
}

bool send_with_reconnect(Link& link, const ExporterKey& key, uint16_t op, uint64_t export_id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (link.fd < 0) link.fd = connect_to(key);
    if (link.fd < 0) return false;  // gone: its holds went with it
    try {
      if (drain_late(link) && send_request(link.fd, op, export_id)) return true;
    } catch (...) {
      // out of memory for a late answer: the link is made again
    }
    ::close(link.fd);
    link.fd = -1;
    link.abandoned.clear();
  }
  return false;
}

// Sends an open and waits for its answer; answers to opens given up on
// earlier are settled on the way. On Timeout the open is noted as given up.
Exchange exchange_open(Link& link, const Wire& w, Reply* reply, std::vector<int>* fds, bool* truncated) {
  if (!drain_late(link)) return Exchange::Broken;
  const bool alone = link.abandoned.empty();
  uint32_t seq = link.next_seq++;
  if (seq == 0) seq = link.next_seq++;
  const wire::Request req{wire::kRequestMagic, wire::kVersion, wire::kOpOpen, w.export_id, seq, w.bytes,
                          uint32_t(w.offset),  w.device};
  if (!send_all(link.fd, &req, sizeof req)) return Exchange::Broken;
  const uint64_t deadline = now_ns() + uint64_t(kTimeoutMs) * 1000000;
  for (bool first = true;; first = false) {
    const Exchange r = receive_reply(link.fd, deadline, first, alone, reply, fds, truncated);
    if (r == Exchange::Timeout) link.abandoned[seq] = w.export_id;
    if (r != Exchange::Ok) return r;
    if (reply->header.seq == seq) return Exchange::Ok;
    settle_late(link, *reply, fds);
  }
}

}  // namespace pagefast::ipc::detail
