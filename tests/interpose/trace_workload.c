/* tests/interpose/trace_workload.c: known cuMemAlloc/cuMemFree sequences
 * for the PAGEFAST_TRACE tests (trace_cases.py), linked against the fake
 * driver. Every call it makes is printed as "call alloc BYTES RESULT" or
 * "call free 0 RESULT", the same shape as pagefast-replay-engine
 * --print-sequence, so a test can compare the two.
 *
 *   trace_workload seq             one thread, edge cases included
 *   trace_workload threads T N     T threads x N alloc/free pairs
 *   trace_workload fork            calls before, in and after a fork child
 *
 * Each ends with "threads N writer W": the process's threads, and how many
 * of them are pagefast's trace writer. */
#include <cuda.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static CUcontext g_ctx;

static CUresult alloc_logged(CUdeviceptr* p, size_t bytes) {
  CUresult r = cuMemAlloc_v2(p, bytes);
  printf("call alloc %zu %d\n", bytes, (int)r);
  return r;
}

static CUresult free_logged(CUdeviceptr p) {
  CUresult r = cuMemFree_v2(p);
  printf("call free 0 %d\n", (int)r);
  return r;
}

static void count_threads(void) {
  int threads = 0, writers = 0;
  DIR* dir = opendir("/proc/self/task");
  struct dirent* e;
  while (dir && (e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    ++threads;
    char path[300], name[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f && fgets(name, sizeof name, f) && strncmp(name, "pagefast-trace", 14) == 0) ++writers;
    if (f) fclose(f);
  }
  if (dir) closedir(dir);
  printf("threads %d writer %d\n", threads, writers);
}

static void setup(void) {
  CUdevice dev;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS) {
    printf("setup failed\n");
    exit(1);
  }
}

static int run_seq(void) {
  CUdeviceptr d = 0;
  setup();
  alloc_logged(&d, 4096); /* no current context yet: the driver refuses */
  cuCtxSetCurrent(g_ctx);
  alloc_logged(&d, 0); /* CUDA_ERROR_INVALID_VALUE */
  {
    CUresult r = cuMemAlloc_v2(NULL, 64);
    printf("call alloc 64 %d\n", (int)r);
  }
  free_logged(0);
  alloc_logged(&d, (size_t)1 << 50); /* out of memory */
  static const size_t sizes[] = {1, 100, 512, 4096, 65536, 1 << 20, (1 << 20) + 1, 3 << 20, 20 << 20, 7, 96};
  enum { N = sizeof sizes / sizeof sizes[0] };
  CUdeviceptr p[N];
  for (int i = 0; i < N; ++i) alloc_logged(&p[i], sizes[i]);
  free_logged(p[3] + 512); /* interior: refused */
  free_logged((CUdeviceptr)0x10);
  for (int i = 0; i < N; i += 2) free_logged(p[i]);
  free_logged(p[0]); /* double free: refused */
  for (int i = 0; i < 6; ++i) {
    CUdeviceptr q;
    alloc_logged(&q, 1000 * (size_t)(i + 1));
    free_logged(q);
  }
  /* p[1], p[3], ... stay allocated to the end. */
  count_threads();
  return 0;
}

struct worker_arg {
  long pairs;
  long failures;
};

static void* worker(void* a) {
  struct worker_arg* w = a;
  cuCtxSetCurrent(g_ctx);
  for (long i = 0; i < w->pairs; ++i) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, 256 + (size_t)(i % 64) * 64) != CUDA_SUCCESS) {
      ++w->failures;
      continue;
    }
    if (cuMemFree_v2(p) != CUDA_SUCCESS) ++w->failures;
  }
  return NULL;
}

static int run_threads(int threads, long pairs) {
  setup();
  pthread_t t[64];
  struct worker_arg args[64];
  if (threads < 1 || threads > 64) return 2;
  for (int i = 0; i < threads; ++i) {
    args[i].pairs = pairs;
    args[i].failures = 0;
    pthread_create(&t[i], NULL, worker, &args[i]);
  }
  long failures = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(t[i], NULL);
    failures += args[i].failures;
  }
  printf("calls %ld failures %ld\n", 2 * pairs * threads, failures);
  count_threads();
  return 0;
}

static int run_fork(void) {
  CUdeviceptr p;
  setup();
  cuCtxSetCurrent(g_ctx);
  alloc_logged(&p, 1024);
  free_logged(p);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    /* The child's calls go to the driver as they may; none is traced. */
    CUdeviceptr q = 0;
    cuMemAlloc_v2(&q, 2048);
    cuMemFree_v2(q);
    exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  alloc_logged(&p, 4096);
  free_logged(p);
  count_threads();
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "seq") == 0) return run_seq();
  if (argc >= 4 && strcmp(argv[1], "threads") == 0) return run_threads(atoi(argv[2]), atol(argv[3]));
  if (argc >= 2 && strcmp(argv[1], "fork") == 0) return run_fork();
  fprintf(stderr, "usage: trace_workload seq | threads T N | fork\n");
  return 2;
}
