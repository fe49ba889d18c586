/* tests/interpose/no_pidfd.c: preloaded before libpagefast.so into an
 * exporter, it takes pidfds away as an old kernel or a seccomp filter
 * does: syscall(SYS_pidfd_open, ...) answers ENOSYS and SO_PEERPIDFD
 * ENOPROTOOPT. The exporter must then tell a live importer from a dead one
 * by /proc/PID/task (ipc_peer_cases.py). Every other call goes through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SO_PEERPIDFD_OPT 77

typedef long (*syscall_fn)(long, ...);

long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
#ifdef SYS_pidfd_open
  if (number == SYS_pidfd_open) {
    errno = ENOSYS;
    return -1;
  }
#endif
  static syscall_fn real;
  if (!real) real = (syscall_fn)dlvsym(RTLD_NEXT, "syscall", "GLIBC_2.2.5");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  if (level == SOL_SOCKET && name == SO_PEERPIDFD_OPT) {
    errno = ENOPROTOOPT;
    return -1;
  }
  return (int)syscall(SYS_getsockopt, fd, level, name, value, len);
}
