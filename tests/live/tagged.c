/* tests/live/tagged.c: allocates in two regions through the driver API
 * (tag "kv", which keeps its contents at sleep, and tag "scratch", which
 * discards them) and once outside any region, says "ready", then answers
 * lines on stdin, for the per-tag figures (cases.py "tags") and
 * pagefast-ctl --tag (tests/pool/preload_cases.py "ctl"):
 *   sleep TAG / wake TAG   pagefast_sleep_tag(TAG, 0) / pagefast_wake_tag: "answer N"
 *   asleep TAG             pagefast_tag_asleep: "asleep N"
 *   json                   the stats document on one line
 *   report PATH            pagefast_report(PATH): "answer N"
 *   check                  "ok" when the kept tag's blocks hold what they held
 *   go                     frees everything and exits ("done")
 * The pagefast functions come through dlsym: the library is preloaded. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*BeginFn)(const char*, unsigned);
typedef int (*EndFn)(void);
typedef int (*TagFn)(const char*);
typedef int (*SleepTagFn)(const char*, unsigned);
typedef size_t (*JsonFn)(char*, size_t);
typedef int (*ReportFn)(const char*);

#define KV_BYTES (24u << 20)
#define SCRATCH_BYTES (6u << 20)
#define OUTSIDE_BYTES (2u << 20)

static int filled(CUdeviceptr p, size_t bytes, unsigned char value) {
  const unsigned char* c = (const unsigned char*)(uintptr_t)p;
  for (size_t i = 0; i < bytes; ++i)
    if (c[i] != value) return 0;
  return 1;
}

int main(void) {
  BeginFn begin = (BeginFn)dlsym(RTLD_DEFAULT, "pagefast_region_begin");
  EndFn end = (EndFn)dlsym(RTLD_DEFAULT, "pagefast_region_end");
  SleepTagFn sleep_tag = (SleepTagFn)dlsym(RTLD_DEFAULT, "pagefast_sleep_tag");
  TagFn wake_tag = (TagFn)dlsym(RTLD_DEFAULT, "pagefast_wake_tag");
  TagFn tag_asleep = (TagFn)dlsym(RTLD_DEFAULT, "pagefast_tag_asleep");
  JsonFn stats_json = (JsonFn)dlsym(RTLD_DEFAULT, "pagefast_stats_json");
  ReportFn report = (ReportFn)dlsym(RTLD_DEFAULT, "pagefast_report");
  if (!begin || !end || !sleep_tag || !wake_tag || !tag_asleep || !stats_json || !report) {
    printf("no tags in this pagefast\n");
    return 1;
  }
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    printf("no device\n");
    return 1;
  }
  CUdeviceptr kv, scratch, outside;
  if (begin("kv", 1u /* PAGEFAST_REGION_KEEP */) != 0 || cuMemAlloc_v2(&kv, KV_BYTES) != CUDA_SUCCESS || end() != 0 ||
      begin("scratch", 0) != 0 || cuMemAlloc_v2(&scratch, SCRATCH_BYTES) != CUDA_SUCCESS || end() != 0 ||
      cuMemAlloc_v2(&outside, OUTSIDE_BYTES) != CUDA_SUCCESS) {
    printf("alloc failed\n");
    return 1;
  }
  memset((void*)(uintptr_t)kv, 0x4b, KV_BYTES);
  printf("ready\n");
  fflush(stdout);
  char line[128];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "sleep ", 6) == 0) {
      printf("answer %d\n", sleep_tag(line + 6, 0));
    } else if (strncmp(line, "wake ", 5) == 0) {
      printf("answer %d\n", wake_tag(line + 5));
    } else if (strncmp(line, "asleep ", 7) == 0) {
      printf("asleep %d\n", tag_asleep(line + 7));
    } else if (strcmp(line, "json") == 0) {
      /* Room to spare: the figures may grow between the two calls. */
      const size_t room = 2 * stats_json(NULL, 0);
      char* doc = room ? malloc(room) : NULL;
      if (!doc || stats_json(doc, room) > room) {
        printf("no json\n");
      } else {
        for (char* c = doc; *c; ++c)
          if (*c == '\n') *c = ' ';
        printf("%s\n", doc);
      }
      free(doc);
    } else if (strncmp(line, "report ", 7) == 0) {
      printf("answer %d\n", report(line + 7));
    } else if (strcmp(line, "check") == 0) {
      printf("%s\n", filled(kv, KV_BYTES, 0x4b) ? "ok" : "differs");
    } else if (strcmp(line, "go") == 0) {
      break;
    } else {
      printf("unknown %s\n", line);
    }
    fflush(stdout);
  }
  cuMemFree_v2(kv);
  cuMemFree_v2(scratch);
  cuMemFree_v2(outside);
  printf("done\n");
  return 0;
}
