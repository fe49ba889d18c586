/* tests/interpose/malloc_hook.c: a malloc interposer of the usual kind,
 * which finds the real malloc with dlsym(RTLD_NEXT) on its first call.
 * Stacked with pagefast, that dlsym lands in pagefast's override, from
 * inside malloc: it must neither recurse nor deadlock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

static void* (*real_malloc)(size_t);
static void (*real_free)(void*);
static void* (*real_calloc)(size_t, size_t);
static void* (*real_realloc)(void*, size_t);
static int resolving;
static char early[1 << 16];
static size_t early_used;

static void* early_alloc(size_t bytes) {
  bytes = (bytes + 15) & ~(size_t)15;
  if (early_used + bytes > sizeof early) return NULL;
  void* p = early + early_used;
  early_used += bytes;
  return p;
}

static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
  real_free = (void (*)(void*))dlsym(RTLD_NEXT, "free");
  real_calloc = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  real_realloc = (void* (*)(void*, size_t))dlsym(RTLD_NEXT, "realloc");
  resolving = 0;
}

static int is_early(void* p) { return (char*)p >= early && (char*)p < early + sizeof early; }

void* malloc(size_t bytes) {
  resolve();
  return real_malloc ? real_malloc(bytes) : early_alloc(bytes);
}
void free(void* p) {
  if (!p || is_early(p)) return;
  resolve();
  if (real_free) real_free(p);
}
void* calloc(size_t n, size_t bytes) {
  resolve();
  if (real_calloc) return real_calloc(n, bytes);
  void* p = early_alloc(n * bytes);
  if (p) memset(p, 0, n * bytes);
  return p;
}
void* realloc(void* p, size_t bytes) {
  resolve();
  if (p && is_early(p)) {
    void* q = malloc(bytes);
    if (q) memcpy(q, p, bytes);
    return q;
  }
  return real_realloc ? real_realloc(p, bytes) : early_alloc(bytes);
}
