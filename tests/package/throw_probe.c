/* tests/package/throw_probe.c: libpagefast.so throws a C++ exception and
 * catches it inside itself (run with the library preloaded). This program
 * makes malloc fail for one call of pagefast_stats_json(): building the
 * document then throws std::bad_alloc (the exception object comes from
 * libstdc++'s emergency pool), and the library's catch answers 0. The
 * unwinder linked into the library finds its frames through compat/'s
 * _dl_find_object (docs/PACKAGING.md); if it could not, the program would
 * end in std::terminate. Exit 0 when the three answers are as expected. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

extern void* __libc_malloc(size_t bytes);

static volatile int g_fail_malloc = 0;

/* Interposes every malloc of the process, the library's operator new too. */
void* malloc(size_t bytes) { return g_fail_malloc ? NULL : __libc_malloc(bytes); }

typedef size_t (*StatsJsonFn)(char*, size_t);

int main(void) {
  StatsJsonFn stats_json = (StatsJsonFn)dlsym(RTLD_DEFAULT, "pagefast_stats_json");
  if (!stats_json) {
    printf("pagefast_stats_json not found: run with libpagefast.so preloaded\n");
    return 2;
  }
  size_t before = stats_json(NULL, 0);
  g_fail_malloc = 1;
  size_t failing = stats_json(NULL, 0);
  g_fail_malloc = 0;
  size_t after = stats_json(NULL, 0);
  printf("pagefast_stats_json: %zu bytes, %zu with malloc failing (caught inside), %zu after\n", before, failing,
         after);
  return before > 0 && failing == 0 && after > 0 ? 0 : 1;
}
