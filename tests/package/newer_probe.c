/* tests/package/newer_probe.c: a program linked without compat/, so that
 * `python/backend/glibc_check.py --must-fail` shows that the check rejects
 * what it should: on glibc 2.34 and later dlopen and pthread_create (and
 * __libc_start_main) name GLIBC_2.34. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static void* run(void* arg) { return arg; }

int main(void) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, run, NULL) == 0) pthread_join(thread, NULL);
  void* handle = dlopen("libc.so.6", RTLD_NOW);
  printf("%p\n", handle);
  return 0;
}
