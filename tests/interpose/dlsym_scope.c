/* tests/interpose/dlsym_scope.c: names outside the table must resolve
 * exactly as without pagefast, including RTLD_NEXT and RTLD_DEFAULT. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int next_caller_value(void);
int scope_next_marker(void); /* keeps libscopenext in the search order */

static const char* origin(void* fn) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return "none";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

int main(int argc, char** argv) {
  const char* lib = argc > 1 ? argv[1] : "libscope.so";
  if (scope_next_marker()) return 1;
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  int (*def)(void) = (int (*)(void))dlsym(h, "scope_default_finds_private");
  int (*next)(void) = (int (*)(void))dlsym(h, "scope_next_value");
  printf("RTLD_DEFAULT from a local library finds its own symbol: %d\n", def ? def() : -1);
  printf("RTLD_NEXT from a local library: %d\n", next ? next() : -1);
  printf("RTLD_NEXT from a linked library: %d\n", next_caller_value());
  printf("RTLD_NEXT puts from main: %s\n", origin(dlsym(RTLD_NEXT, "puts")));
  printf("RTLD_DEFAULT getpid: %s\n", origin(dlsym(RTLD_DEFAULT, "getpid")));
  /* A table name while no driver is loaded: nothing, as without pagefast. */
  printf("table name, no driver: %s\n", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "found" : "NULL");
  printf("unknown: %s\n", dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") ? "found" : "NULL");
  const char* err = dlerror();
  printf("dlerror mentions name: %d\n", err && strstr(err, "no_such_symbol_anywhere") != NULL);
  return 0;
}
