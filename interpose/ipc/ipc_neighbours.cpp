// interpose/ipc/ipc_neighbours.cpp: asking the other pagefast processes on
// a device to give their idle memory back (docs/IPC.md "Neighbours").
// A process whose device ran short, with nothing idle of its own left,
// finds every socket of its user's pagefast processes (in PAGEFAST_IPC_DIR,
// or listed in /proc/net/unix for the abstract namespace), connects to
// each as the importer does (the same check of who answers) and sends a
// kOpGiveBack naming the device by its PCI bus id; each answers with the
// MiB it released. Nothing here is on a fast path: it runs only before an
// out-of-memory answer.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"

namespace pagefast::ipc {
namespace {

// How long one neighbour may take to answer: it synchronises its device
// first, which waits for the work queued there.
constexpr int kNeighbourTimeoutMs = 5000;

// "pagefast-ipc.<uid>.<pidns>.<pid>.<start>" of user `uid`.
bool parse_socket_name(const char* name, uint32_t uid, detail::ExporterKey* key) {
  unsigned u = 0;
  unsigned long long pidns = 0, pid = 0, start = 0;
  int end = 0;
  if (std::sscanf(name, "pagefast-ipc.%u.%llu.%llu.%llu%n", &u, &pidns, &pid, &start, &end) != 4) return false;
  if (name[end] != 0 || u != uid || pid == 0 || pid > 0x7fffffffull) return false;
  key->pidns = pidns;
  key->pid = uint32_t(pid);
  key->start_time = start;
  return true;
}

// Every pagefast socket of this user that this process can reach.
std::vector<detail::ExporterKey> sockets_of_user(uint32_t uid) {
  std::vector<detail::ExporterKey> out;
  detail::ExporterKey key;
  const std::string dir = detail::ipc_dir();
  if (!dir.empty()) {
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d))
        if (parse_socket_name(e->d_name, uid, &key)) out.push_back(key);
      closedir(d);
    }
    return out;
  }
  // The abstract namespace: /proc/net/unix lists the listening sockets of
  // this network namespace, the path last on each line, '@' first.
  FILE* f = std::fopen("/proc/net/unix", "re");
  if (!f) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    char* at = std::strstr(line, " @pagefast-ipc.");
    if (!at) continue;
    char* name = at + 2;
    name[std::strcspn(name, " \r\n")] = 0;
    if (parse_socket_name(name, uid, &key)) out.push_back(key);
  }
  std::fclose(f);
  return out;
}

// What one neighbour released, in bytes (0: nothing, or no answer).
uint64_t ask_one(const detail::ExporterKey& key, const char* bus_id, uint64_t bytes, uint32_t seq) {
  const int fd = detail::connect_to(key);
  if (fd < 0) return 0;
  struct {
    wire::Request req;
    wire::TagName device;
  } msg{};
  msg.req = wire::Request{wire::kRequestMagic, wire::kControlVersion, wire::kOpGiveBack, bytes, seq, 0, 0, 0};
  std::snprintf(msg.device.name, sizeof msg.device.name, "%s", bus_id);
  wire::ReplyHeader header{};
  std::vector<int> fds;  // a control reply carries none
  bool truncated = false;
  // The neighbour synchronises its device and releases: that may wait for
  // its queued work, so longer than an open may take.
  const uint64_t deadline = detail::now_ns() + uint64_t(kNeighbourTimeoutMs) * 1000 * 1000;
  const bool answered =
      detail::send_all(fd, &msg, sizeof msg) &&
      detail::read_exact(fd, &header, sizeof header, deadline, &fds, &truncated) == detail::Exchange::Ok &&
      header.magic == wire::kReplyMagic && header.seq == seq;
  for (int received : fds) ::close(received);
  ::close(fd);
  const int mib = answered ? int(header.status) : -1;
  return mib > 0 ? uint64_t(mib) << 20 : 0;
}

}  // namespace

uint64_t ask_neighbours(const char* bus_id, uint64_t bytes) {
  if (!bus_id || !*bus_id) return 0;
  const uint32_t uid = uint32_t(::geteuid());
  const detail::Identity& me = detail::self();
  uint64_t released = 0;
  int asked = 0;
  for (const detail::ExporterKey& key : sockets_of_user(uid)) {
    if (key.pid == uint32_t(me.pid) && key.pidns == me.pidns) continue;
    released += ask_one(key, bus_id, bytes, uint32_t(++asked));
    if (bytes != ~uint64_t(0) && released >= bytes) break;
  }
  if (asked)
    log::write(LogLevel::Debug, "device {} ran short: {} other pagefast process(es) asked, {} MiB given back", bus_id,
               asked, released >> 20);
  return released;
}

}  // namespace pagefast::ipc
