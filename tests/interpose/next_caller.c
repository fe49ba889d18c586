/* tests/interpose/next_caller.c: a library the test program links to,
 * ahead of scope_next.c's library in the search order. Its RTLD_NEXT
 * lookup must find the definition after it (2), not its own (1): the
 * answer that a dlsym made from libpagefast.so, which is earlier still in
 * the order, would give. */
#define _GNU_SOURCE
#include <dlfcn.h>

int shared_name(void) { return 1; }

int next_caller_value(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "shared_name");
  return next ? next() : -1;
}
