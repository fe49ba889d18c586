/* compat/glibc_compat.c: keeps every shipped binary on the glibc 2.28
 * baseline when it is built against a newer glibc (docs/PACKAGING.md).
 *
 * A binary built on glibc 2.36 names the newest version of each libc symbol
 * it uses: pthread_create@GLIBC_2.34, stat64@GLIBC_2.33, ... and the static
 * libstdc++/libgcc archives that libpagefast.so carries inside add
 * arc4random@GLIBC_2.36 (std::random_device), _dl_find_object@GLIBC_2.35
 * (the unwinder) and __libc_single_threaded@GLIBC_2.32. An older glibc then
 * refuses to load the binary.
 *
 * Every such symbol is defined here, hidden, so that both our own objects
 * and the archive members bind to this definition at link time, never to
 * libc's newest version. Each definition either forwards to the oldest
 * version of the same function (`.symver` to the architecture's base
 * version, present in every glibc since) or, where no old version exists,
 * is implemented here over interfaces glibc 2.28 has. Linked with
 * --whole-archive, before the C++ runtime archives are searched.
 *
 * Before glibc 2.34 the pthread and dl functions live in libpthread.so.0
 * and libdl.so.2, so the binaries also keep those two as DT_NEEDED (still
 * shipped as empty stubs by newer glibc); see compat/meson.build.
 *
 * python/backend/glibc_check.py (run by tests/package) fails the suite
 * when any shipped binary names a version newer than GLIBC_2.28, and
 * tests/package/compat_test.cpp checks
 * the replacements against glibc's own.
 */
#define _GNU_SOURCE 1
#undef _FILE_OFFSET_BITS /* stat64 below is the function itself */
#include <features.h>

#ifdef __GLIBC__ /* nothing to do for another C library */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compat/glibc_base.h"

#ifdef PF_GLIBC_BASE
#define PF_BASE PF_GLIBC_BASE
#if defined(__x86_64__)
#define PF_STAT_VER 1 /* _STAT_VER_LINUX */
#else
#define PF_STAT_VER 0 /* aarch64's _STAT_VER */
#endif
#endif

#define PF_HIDDEN __attribute__((visibility("hidden")))

/* GCC reads pthread_setspecific's access attribute as a read of *value and
 * warns in the forwarder, which only passes the pointer on. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#ifdef PF_BASE

/* PF_FORWARD(ret, name, version, (params), (args)): a hidden `name` that
 * calls `name@version`. */
#define PF_FORWARD(ret, name, version, params, args)               \
  ret pf_old_##name params;                                        \
  __asm__(".symver pf_old_" #name "," #name "@" version);          \
  PF_HIDDEN ret name params { return pf_old_##name args; }

/* libdl: moved into libc in 2.34 (new versions), in libdl.so.2 before. */
PF_FORWARD(void*, dlopen, PF_BASE, (const char* file, int mode), (file, mode))
PF_FORWARD(int, dlclose, PF_BASE, (void* handle), (handle))
PF_FORWARD(char*, dlerror, PF_BASE, (void), ())
PF_FORWARD(void*, dlvsym, PF_BASE, (void* handle, const char* name, const char* version), (handle, name, version))
PF_FORWARD(int, dladdr, PF_BASE, (const void* address, Dl_info* info), (address, info))
/* dlsym is left to each binary: libpagefast.so exports its own (the dlsym
 * door, interpose/dlsym_trampoline.S) and finds the real one with dlvsym
 * (interpose/loader.cpp); the tools get theirs from compat/glibc_start.c. */

/* libpthread: moved into libc in 2.34. */
PF_FORWARD(int, pthread_create, PF_BASE,
           (pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg),
           (thread, attr, start, arg))
PF_FORWARD(int, pthread_join, PF_BASE, (pthread_t thread, void** result), (thread, result))
PF_FORWARD(int, pthread_detach, PF_BASE, (pthread_t thread), (thread))
PF_FORWARD(int, pthread_timedjoin_np, PF_GLIBC_2_3_3,
           (pthread_t thread, void** result, const struct timespec* abstime), (thread, result, abstime))
PF_FORWARD(int, pthread_setname_np, PF_GLIBC_2_12, (pthread_t thread, const char* name), (thread, name))
PF_FORWARD(int, pthread_attr_setstacksize, PF_BASE, (pthread_attr_t* attr, size_t bytes), (attr, bytes))
PF_FORWARD(int, pthread_key_create, PF_BASE, (pthread_key_t* key, void (*destructor)(void*)), (key, destructor))
PF_FORWARD(int, __pthread_key_create, PF_BASE, (pthread_key_t* key, void (*destructor)(void*)), (key, destructor))
PF_FORWARD(int, pthread_key_delete, PF_BASE, (pthread_key_t key), (key))
PF_FORWARD(void*, pthread_getspecific, PF_BASE, (pthread_key_t key), (key))
PF_FORWARD(int, pthread_setspecific, PF_BASE, (pthread_key_t key, const void* value), (key, value))
PF_FORWARD(int, pthread_once, PF_BASE, (pthread_once_t* once, void (*init)(void)), (once, init))
PF_FORWARD(int, pthread_mutex_trylock, PF_BASE, (pthread_mutex_t* mutex), (mutex))
PF_FORWARD(int, pthread_sigmask, PF_BASE, (int how, const sigset_t* set, sigset_t* old), (how, set, old))

/* stat64 and friends became real functions in 2.33; before, the headers
 * turned them into __xstat64 calls, which every glibc still exports. */
int pf_old_xstat64(int ver, const char* path, struct stat64* buf);
int pf_old_fxstat64(int ver, int fd, struct stat64* buf);
int pf_old_lxstat64(int ver, const char* path, struct stat64* buf);
__asm__(".symver pf_old_xstat64,__xstat64@" PF_BASE);
__asm__(".symver pf_old_fxstat64,__fxstat64@" PF_BASE);
__asm__(".symver pf_old_lxstat64,__lxstat64@" PF_BASE);
PF_HIDDEN int stat64(const char* path, struct stat64* buf) { return pf_old_xstat64(PF_STAT_VER, path, buf); }
PF_HIDDEN int fstat64(int fd, struct stat64* buf) { return pf_old_fxstat64(PF_STAT_VER, fd, buf); }
PF_HIDDEN int lstat64(const char* path, struct stat64* buf) { return pf_old_lxstat64(PF_STAT_VER, path, buf); }

#endif /* PF_BASE */

/* libstdc++ (2.32+): tells whether shared_ptr and friends may skip atomic
 * operations. Always "no" here: correct everywhere, a few cycles slower. */
PF_HIDDEN char __libc_single_threaded = 0;

/* std::random_device's default source (2.36+): the kernel's random bytes
 * through getrandom(2), /dev/urandom where that system call is missing. */
PF_HIDDEN uint32_t arc4random(void) {
  uint32_t value = 0;
  unsigned char* out = (unsigned char*)&value;
  size_t have = 0;
#ifdef SYS_getrandom
  while (have < sizeof value) {
    long n = syscall(SYS_getrandom, out + have, sizeof value - have, 0);
    if (n > 0) {
      have += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
#endif
  if (have < sizeof value) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      while (have < sizeof value) {
        ssize_t n = read(fd, out + have, sizeof value - have);
        if (n > 0) {
          have += (size_t)n;
        } else if (!(n < 0 && errno == EINTR)) {
          break;
        }
      }
      close(fd);
    }
  }
  if (have < sizeof value) {
    /* No entropy source at all: still a value, never a crash. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    value ^= (uint32_t)now.tv_nsec * 2654435761u ^ (uint32_t)getpid();
  }
  return value;
}

#ifdef DLFO_STRUCT_HAS_EH_DBASE
/* The unwinder's object lookup (2.35+). libgcc uses it, when the headers
 * it was built against have it, instead of dl_iterate_phdr, with no
 * fallback: without a working one no C++ exception can be caught. Same
 * answer as glibc's, found with dl_iterate_phdr (2.2.5) the way older
 * libgcc did it: the loaded object whose PT_LOAD segments hold the address,
 * and its PT_GNU_EH_FRAME segment. */
struct pf_find {
  uintptr_t address;
  struct dl_find_object* result;
  int found;
};

static int pf_find_callback(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct pf_find* find = (struct pf_find*)data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  int inside = 0;
  const void* eh_frame = NULL;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD) {
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
      if (lo < start) start = lo;
      if (hi > end) end = hi;
      if (find->address >= lo && find->address < hi) inside = 1;
    } else if (ph->p_type == DLFO_EH_SEGMENT_TYPE) {
      eh_frame = (const void*)(info->dlpi_addr + ph->p_vaddr);
    }
  }
  if (!inside) return 0;
  memset(find->result, 0, sizeof *find->result);
  find->result->dlfo_map_start = (void*)start;
  find->result->dlfo_map_end = (void*)end;
  find->result->dlfo_eh_frame = (void*)eh_frame;
#if DLFO_STRUCT_HAS_EH_DBASE
  find->result->dlfo_eh_dbase = NULL;
#endif
  find->found = 1;
  return 1;
}

PF_HIDDEN int _dl_find_object(void* address, struct dl_find_object* result) {
  struct pf_find find = {(uintptr_t)address, result, 0};
  dl_iterate_phdr(pf_find_callback, &find);
  return find.found ? 0 : -1;
}
#endif /* DLFO_STRUCT_HAS_EH_DBASE */

#endif /* __GLIBC__ */
