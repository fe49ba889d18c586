/* tests/interpose/peer_hide.c: preloaded before libpagefast.so into an
 * exporter, it makes every peer look as a process in a pid namespace the
 * exporter cannot see: SO_PEERCRED answers pid 0 (what the kernel gives
 * across pid namespaces) with the peer's real uid, and SO_PEERPIDFD is
 * refused. So the rules for peers that cannot be identified are tested
 * without the privilege to make a pid namespace (ipc_peer_cases.py). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SO_PEERPIDFD_OPT 77

int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  if (level == SOL_SOCKET && name == SO_PEERPIDFD_OPT) {
    errno = ENOPROTOOPT;
    return -1;
  }
  const long rc = syscall(SYS_getsockopt, fd, level, name, value, len);
  if (rc == 0 && level == SOL_SOCKET && name == SO_PEERCRED && value && len && *len >= sizeof(struct ucred))
    ((struct ucred*)value)->pid = 0;
  return (int)rc;
}
