/* compat/glibc_start.c: the part of the glibc 2.28 baseline that only
 * executables need (the tools; libpagefast.so links compat/glibc_compat.c
 * alone). See docs/PACKAGING.md.
 *
 * glibc 2.34's crt1.o calls __libc_start_main@GLIBC_2.34 with no init
 * function, leaving the program's constructors to that new version. The
 * old version, the only one glibc 2.28 has, runs just the init function it
 * is given, so the hidden __libc_start_main below hands it one that does
 * what the old crt1.o's __libc_csu_init did: _init, then .init_array.
 * Every glibc runs a given init function and nothing else (2.34 and later
 * keep that path for old programs). .preinit_array is run by the dynamic
 * loader and .fini_array by its exit handler in both, as before.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stddef.h>

#include "compat/glibc_base.h"

#if defined(__GLIBC__) && defined(PF_GLIBC_BASE)
#define PF_BASE PF_GLIBC_BASE
#define PF_HIDDEN __attribute__((visibility("hidden")))

typedef int (*pf_main_fn)(int, char**, char**);
typedef void (*pf_init_fn)(int, char**, char**);

extern pf_init_fn __init_array_start[] PF_HIDDEN;
extern pf_init_fn __init_array_end[] PF_HIDDEN;
extern void _init(void);

static void pf_run_init(int argc, char** argv, char** envp) {
  _init();
  const size_t count = (size_t)(__init_array_end - __init_array_start);
  for (size_t i = 0; i < count; ++i) __init_array_start[i](argc, argv, envp);
}

int pf_old_libc_start_main(pf_main_fn main_fn, int argc, char** argv, pf_init_fn init, void (*fini)(void),
                           void (*rtld_fini)(void), void* stack_end);
__asm__(".symver pf_old_libc_start_main,__libc_start_main@" PF_BASE);

PF_HIDDEN int __libc_start_main(pf_main_fn main_fn, int argc, char** argv, pf_init_fn init, void (*fini)(void),
                                void (*rtld_fini)(void), void* stack_end) {
  /* A crt1.o older than 2.34 passes its own __libc_csu_init: keep it. */
  return pf_old_libc_start_main(main_fn, argc, argv, init ? init : pf_run_init, fini, rtld_fini, stack_end);
}

/* dlsym: in libpagefast.so the dlsym door owns the name; here a plain
 * forwarder (the caller is this executable either way). */
void* pf_old_dlsym(void* handle, const char* name);
__asm__(".symver pf_old_dlsym,dlsym@" PF_BASE);
PF_HIDDEN void* dlsym(void* handle, const char* name) { return pf_old_dlsym(handle, name); }
#endif
