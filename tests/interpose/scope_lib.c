/* tests/interpose/scope_lib.c: a library dlopened RTLD_LOCAL that resolves
 * names relative to itself. glibc answers RTLD_NEXT and RTLD_DEFAULT from
 * the caller's place; an interposed dlsym that made the call from its own
 * library would answer differently (NULL here). */
#define _GNU_SOURCE
#include <dlfcn.h>

int shared_name(void) { return 1; }
int scope_private_fn(void) { return 7; }

int scope_default_finds_private(void) { return dlsym(RTLD_DEFAULT, "scope_private_fn") != 0; }

int scope_next_value(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "shared_name");
  return next ? next() : -1;
}
