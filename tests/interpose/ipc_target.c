/* tests/interpose/ipc_target.c: an exporting process that a test drives
 * line by line (ipc_safety_cases.py), so that the test can stop it, flood
 * it, squat its name, sleep it or fork it between any two steps. One
 * command a line on stdin, one answer a line on stdout:
 *
 *   alloc N BYTES BYTE   cuMemAlloc block N (0-31), filled: "ok"
 *   handle N             cuIpcGetMemHandle of block N: "handle HEX" or "error NAME"
 *   free N               cuMemFree of block N: "free NAME"
 *   addr N               block N's address: "addr HEX"
 *   fill N BYTE          every byte of block N: "ok"
 *   check N BYTE         whether every byte of block N is BYTE: "check 0|1"
 *   churn COUNT BYTES N  COUNT new blocks filled with 0x99 and kept (memory a
 *                        freed block would come back as): "churn ok|failed
 *                        overlapping K", K of them where block N was
 *   sleep FLAGS          pagefast_sleep(FLAGS): "sleep ANSWER"
 *   wake                 pagefast_wake(): "wake ANSWER"
 *   region TAG           pagefast_region_begin(TAG, 0): "region ANSWER"
 *   end                  pagefast_region_end(): "end ANSWER"
 *   sleep-tag TAG FLAGS  pagefast_sleep_tag(TAG, FLAGS): "sleep ANSWER"
 *   wake-tag TAG         pagefast_wake_tag(TAG): "wake ANSWER"
 *   vmm BYTES BYTE       the program's own VMM memory (cuMemCreate, cuMemAddressReserve,
 *                        cuMemMap, cuMemSetAccess on device 0), filled: "ok"
 *   vmm-check BYTE       whether every byte of it is BYTE: "check 0|1"
 *   device-free          the device memory really free on device 0: "free BYTES"
 *   copy-gate            the next copy to host waits until open-copy-gate: "ok"
 *   wait-copy            returns once a copy waits there: "copy waits"
 *   open-copy-gate       lets it go: "ok"
 *   gate                 a fake "kernel" holding the stream (and every sync,
 *                        sleep's included) until open-gate: "ok"
 *   open-gate            lets it finish: "ok"
 *   wait-asleep          returns once pagefast_asleep() is 1 (a sleep began):
 *                        "asleep 1"
 *   fork-exit            a forked child calls exit(0): "child exit=0"
 *   reset                cuDevicePrimaryCtxReset of device 0 (the driver frees
 *                        its memory), then its primary context again: "reset NAME"
 *   fds                  open descriptors (-1 if /proc/self/fd cannot be
 *                        opened): "fds N"
 *   hog / unhog          takes every free descriptor / gives them back
 *   get-threads T R S    threads meeting in cuIpcGetMemHandle: T threads get
 *                        the handles of the blocks made (each must be the
 *                        block's handle as the main thread got it first), T
 *                        threads R times make a block, get its handle twice
 *                        (the same, naming the block's size and offset) and
 *                        free it (every such export a new one), while the
 *                        main thread sleeps (keep) and wakes the pools S
 *                        times (a get or an alloc may fail only around a
 *                        sleep; at least S sleeps, more until the last
 *                        block is freed): "get-threads ok|failed GETS
 *                        WRONG sleeps SLEEPS refused-asleep FAILED_GETS
 *                        exports NEW_EXPORTS"
 *   quit
 * Started with cuInit and a context, before any allocation (no pool yet),
 * it prints "ready". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../fakecuda/fakecuda.h"
#include "ipc_common.h"

#define BLOCKS 32
#define MAX_THREADS 16

static CUdeviceptr g_block[BLOCKS];
static size_t g_bytes[BLOCKS];
static int g_gate[2] = {-1, -1};
static int g_hog[65536];
static int g_hogged;
static CUdeviceptr g_vmm;
static size_t g_vmm_bytes;
static int g_copy_gate[2] = {-1, -1};

static CUresult vmm_alloc(size_t bytes, unsigned char value) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult rc = cuMemCreate(&handle, bytes, &prop, 0);
  if (rc == CUDA_SUCCESS) rc = cuMemAddressReserve(&g_vmm, bytes, 0, 0, 0);
  if (rc == CUDA_SUCCESS) rc = cuMemMap(g_vmm, bytes, 0, handle, 0);
  if (rc == CUDA_SUCCESS) rc = cuMemSetAccess(g_vmm, bytes, &access, 1);
  if (rc == CUDA_SUCCESS) rc = cuMemsetD8(g_vmm, value, bytes);
  g_vmm_bytes = bytes;
  return rc;
}

static const char* name(CUresult rc) {
  const char* text = NULL;
  if (cuGetErrorName(rc, &text) != CUDA_SUCCESS || !text) return "unknown";
  return text;
}

static int api(const char* symbol, unsigned flags, int with_flags) {
  void* fn = dlsym(RTLD_DEFAULT, symbol);
  if (!fn) return -100;
  return with_flags ? ((int (*)(unsigned))fn)(flags) : ((int (*)(void))fn)();
}

static int tag_api(const char* symbol, const char* tag, unsigned flags, int with_flags) {
  void* fn = dlsym(RTLD_DEFAULT, symbol);
  if (!fn) return -100;
  return with_flags ? ((int (*)(const char*, unsigned))fn)(tag, flags) : ((int (*)(const char*))fn)(tag);
}

static CUcontext g_ctx;

/* get-threads: the blocks' handles as first got, the rounds, and the sleeps
 * (odd while one is under way). */
static CUipcMemHandle g_reference[BLOCKS];
static unsigned long long g_rounds;
static atomic_ullong g_sleep_epoch;
static atomic_ullong g_gets, g_wrong, g_stop, g_slept, g_cycling;
static unsigned long long g_ids[MAX_THREADS][4096];

/* Whether a failure seen between epochs e1 and e2 may be a sleep's. */
static int around_sleep(unsigned long long e1) { return (e1 & 1) || atomic_load(&g_sleep_epoch) != e1; }

static void* getter(void* arg) {
  (void)arg;
  cuCtxSetCurrent(g_ctx);
  while (!atomic_load(&g_stop)) {
    for (int n = 0; n < BLOCKS; ++n) {
      if (!g_block[n]) continue;
      const unsigned long long e1 = atomic_load(&g_sleep_epoch);
      CUipcMemHandle h;
      const CUresult rc = cuIpcGetMemHandle(&h, g_block[n]);
      atomic_fetch_add(&g_gets, 1);
      if (rc != CUDA_SUCCESS && around_sleep(e1)) atomic_fetch_add(&g_slept, 1);
      if (rc == CUDA_SUCCESS ? memcmp(&h, &g_reference[n], sizeof h) != 0 : !around_sleep(e1)) {
        fprintf(stderr, "get-threads: block %d answered %s%s\n", n, name(rc), rc ? "" : " with another handle");
        atomic_fetch_add(&g_wrong, 1);
      }
    }
  }
  return NULL;
}

static void* cycler(void* arg) {
  const int t = (int)(long)arg;
  static const size_t sizes[3] = {1000, 100000, 3 << 20};
  cuCtxSetCurrent(g_ctx);
  for (unsigned long long i = 0; i < g_rounds; ++i) {
    const size_t bytes = sizes[(i + t) % 3];
    const unsigned long long e1 = atomic_load(&g_sleep_epoch);
    CUdeviceptr d = 0;
    CUipcMemHandle h1, h2;
    CUresult rc = cuMemAlloc(&d, bytes);
    if (rc == CUDA_SUCCESS) rc = cuIpcGetMemHandle(&h1, d);
    if (rc == CUDA_SUCCESS) rc = cuIpcGetMemHandle(&h2, d);
    atomic_fetch_add(&g_gets, 2);
    unsigned long long fields[3] = {0, 0, 0}; /* export id, size, offset */
    if (rc == CUDA_SUCCESS) memcpy(fields, h1.reserved + 40, sizeof fields);
    if (rc == CUDA_SUCCESS
            ? memcmp(&h1, &h2, sizeof h1) != 0 || fields[1] != bytes || fields[2] != (d & ((2u << 20) - 1))
            : !around_sleep(e1)) {
      fprintf(stderr, "get-threads: a new block of %zu bytes answered %s\n", bytes, name(rc));
      atomic_fetch_add(&g_wrong, 1);
    }
    g_ids[t][i] = fields[0];
    if (d && cuMemFree(d) != CUDA_SUCCESS) atomic_fetch_add(&g_wrong, 1);
  }
  atomic_fetch_sub(&g_cycling, 1);
  return NULL;
}

/* The exports the cyclers made (every one a new id), or -1 if one came twice. */
static long ids_unique(int threads) {
  static unsigned long long all[MAX_THREADS * 4096];
  size_t count = 0;
  for (int t = 0; t < threads; ++t)
    for (unsigned long long i = 0; i < g_rounds; ++i)
      if (g_ids[t][i]) all[count++] = g_ids[t][i];
  for (size_t i = 0; i < count; ++i) /* few thousand: a sort is not needed */
    for (size_t j = i + 1; j < count; ++j)
      if (all[i] == all[j]) return -1;
  return (long)count;
}

static void get_threads(int threads, unsigned long long rounds, unsigned long long sleeps) {
  pthread_t getters[MAX_THREADS], cyclers[MAX_THREADS];
  int ok = threads > 0 && threads <= MAX_THREADS && rounds <= 4096;
  g_rounds = rounds;
  atomic_store(&g_gets, 0);
  atomic_store(&g_wrong, 0);
  atomic_store(&g_stop, 0);
  atomic_store(&g_slept, 0);
  atomic_store(&g_cycling, (unsigned long long)threads);
  for (int n = 0; ok && n < BLOCKS; ++n)
    if (g_block[n]) ok = cuIpcGetMemHandle(&g_reference[n], g_block[n]) == CUDA_SUCCESS;
  if (!ok) {
    printf("get-threads failed 0 0\n");
    return;
  }
  for (int t = 0; t < threads; ++t) {
    pthread_create(&getters[t], NULL, getter, NULL);
    pthread_create(&cyclers[t], NULL, cycler, (void*)(long)t);
  }
  unsigned long long s = 0;
  for (; s < sleeps || atomic_load(&g_cycling) > 0; ++s) { /* at least `sleeps`, until the cyclers are done */
    atomic_fetch_add(&g_sleep_epoch, 1);
    const int slept = api("pagefast_sleep", 1, 1);
    usleep(2000);
    const int woke = api("pagefast_wake", 0, 0);
    atomic_fetch_add(&g_sleep_epoch, 1);
    if (slept < 0 || woke != 0) {
      fprintf(stderr, "get-threads: sleep answered %d, wake %d\n", slept, woke);
      atomic_fetch_add(&g_wrong, 1);
    }
    usleep(2000);
  }
  for (int t = 0; t < threads; ++t) pthread_join(cyclers[t], NULL);
  atomic_store(&g_stop, 1);
  for (int t = 0; t < threads; ++t) pthread_join(getters[t], NULL);
  for (int n = 0; n < BLOCKS; ++n) { /* every block's handle as it was, the sleeps over */
    CUipcMemHandle h;
    if (g_block[n] && (cuIpcGetMemHandle(&h, g_block[n]) != CUDA_SUCCESS || memcmp(&h, &g_reference[n], sizeof h)))
      atomic_fetch_add(&g_wrong, 1);
  }
  const long exports = ids_unique(threads);
  if (exports < 0) {
    fprintf(stderr, "get-threads: an export id was given twice\n");
    atomic_fetch_add(&g_wrong, 1);
  }
  printf("get-threads %s %llu %llu sleeps %llu refused-asleep %llu exports %ld\n",
         atomic_load(&g_wrong) ? "failed" : "ok", atomic_load(&g_gets), atomic_load(&g_wrong), s, atomic_load(&g_slept),
         exports);
}

static int all_equal(int n, unsigned char value) {
  static unsigned char buffer[8 << 20];
  if (g_bytes[n] > sizeof buffer || cuMemcpyDtoH(buffer, g_block[n], g_bytes[n]) != CUDA_SUCCESS) return 0;
  for (size_t i = 0; i < g_bytes[n]; ++i)
    if (buffer[i] != value) return 0;
  return 1;
}

static void command(const char* line) {
  char verb[32] = "";
  unsigned long long a = 0, b = 0, c = 0;
  const int got = sscanf(line, "%31s %llu %llu %llx", verb, &a, &b, &c);
  const int n = (int)(a % BLOCKS);
  if (got < 1) {
    printf("error empty\n");
  } else if (!strcmp(verb, "alloc") && got == 4) {
    CUresult rc = cuMemAlloc(&g_block[n], (size_t)b);
    g_bytes[n] = (size_t)b;
    if (rc == CUDA_SUCCESS) rc = cuMemsetD8(g_block[n], (unsigned char)c, (size_t)b);
    printf(rc == CUDA_SUCCESS ? "ok\n" : "error %s\n", name(rc));
  } else if (!strcmp(verb, "handle")) {
    CUipcMemHandle handle;
    const CUresult rc = cuIpcGetMemHandle(&handle, g_block[n]);
    if (rc != CUDA_SUCCESS) {
      printf("error %s\n", name(rc));
    } else {
      printf("handle ");
      for (int i = 0; i < CU_IPC_HANDLE_SIZE; ++i) printf("%02x", (unsigned char)handle.reserved[i]);
      printf("\n");
    }
  } else if (!strcmp(verb, "free")) {
    printf("free %s\n", name(cuMemFree(g_block[n])));
  } else if (!strcmp(verb, "addr")) {
    printf("addr %llx\n", (unsigned long long)g_block[n]);
  } else if (!strcmp(verb, "fill")) {
    sscanf(line, "%31s %llu %llx", verb, &a, &b);
    const CUresult rc = cuMemsetD8(g_block[n], (unsigned char)b, g_bytes[n]);
    printf(rc == CUDA_SUCCESS ? "ok\n" : "error %s\n", name(rc));
  } else if (!strcmp(verb, "check")) {
    sscanf(line, "%31s %llu %llx", verb, &a, &b);
    printf("check %d\n", all_equal(n, (unsigned char)b));
  } else if (!strcmp(verb, "churn")) {
    /* c: the block whose range the new ones must not overlap (freed). */
    int ok = 1, overlaps = 0;
    sscanf(line, "%31s %llu %llu %llu", verb, &a, &b, &c);
    const CUdeviceptr old = g_block[c % BLOCKS];
    const size_t old_bytes = g_bytes[c % BLOCKS];
    for (unsigned long long i = 0; i < a; ++i) {
      CUdeviceptr d = 0;
      ok &= cuMemAlloc(&d, (size_t)b) == CUDA_SUCCESS && cuMemsetD8(d, 0x99, (size_t)b) == CUDA_SUCCESS;
      if (d && d < old + old_bytes && old < d + (size_t)b) ++overlaps;
    }
    printf("churn %s overlapping %d\n", ok ? "ok" : "failed", overlaps);
  } else if (!strcmp(verb, "sleep")) {
    printf("sleep %d\n", api("pagefast_sleep", (unsigned)a, 1));
  } else if (!strcmp(verb, "wake")) {
    printf("wake %d\n", api("pagefast_wake", 0, 0));
  } else if (!strcmp(verb, "region") || !strcmp(verb, "sleep-tag") || !strcmp(verb, "wake-tag")) {
    char tag[64] = "";
    unsigned flags = 0;
    sscanf(line, "%31s %63s %u", verb, tag, &flags);
    if (!strcmp(verb, "region")) printf("region %d\n", tag_api("pagefast_region_begin", tag, 0, 1));
    else if (!strcmp(verb, "sleep-tag")) printf("sleep %d\n", tag_api("pagefast_sleep_tag", tag, flags, 1));
    else printf("wake %d\n", tag_api("pagefast_wake_tag", tag, 0, 0));
  } else if (!strcmp(verb, "end")) {
    printf("end %d\n", api("pagefast_region_end", 0, 0));
  } else if (!strcmp(verb, "vmm") && got >= 3) {
    sscanf(line, "%31s %llu %llx", verb, &a, &b);
    const CUresult rc = vmm_alloc((size_t)a, (unsigned char)b);
    printf(rc == CUDA_SUCCESS ? "ok\n" : "error %s\n", name(rc));
  } else if (!strcmp(verb, "vmm-check")) {
    static unsigned char buffer[8 << 20];
    sscanf(line, "%31s %llx", verb, &a);
    int ok = g_vmm_bytes <= sizeof buffer && cuMemcpyDtoH(buffer, g_vmm, g_vmm_bytes) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < g_vmm_bytes; ++i) ok = buffer[i] == (unsigned char)a;
    printf("check %d\n", ok);
  } else if (!strcmp(verb, "device-free")) {
    printf("free %llu\n", fakecuda_free_bytes(0));
  } else if (!strcmp(verb, "copy-gate")) {
    printf(pipe(g_copy_gate) == 0 && fakecuda_copy_gate(g_copy_gate[0]) == 0 ? "ok\n" : "error gate\n");
  } else if (!strcmp(verb, "wait-copy")) {
    while (!fakecuda_copy_gate_waiting()) usleep(1000);
    printf("copy waits\n");
  } else if (!strcmp(verb, "open-copy-gate")) {
    printf(write(g_copy_gate[1], "g", 1) == 1 ? "ok\n" : "error write\n");
  } else if (!strcmp(verb, "gate")) {
    const CUresult rc = pipe(g_gate) == 0 ? fakecuda_launch_gate(0, g_gate[0]) : CUDA_ERROR_INVALID_VALUE;
    printf(rc == CUDA_SUCCESS ? "ok\n" : "error %s\n", name(rc));
  } else if (!strcmp(verb, "open-gate")) {
    printf(write(g_gate[1], "g", 1) == 1 ? "ok\n" : "error write\n");
  } else if (!strcmp(verb, "wait-asleep")) {
    while (api("pagefast_asleep", 0, 0) != 1) usleep(1000);
    printf("asleep 1\n");
  } else if (!strcmp(verb, "fork-exit")) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) exit(0); /* atexit handlers run, as in any child that exits */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    printf("child exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else if (!strcmp(verb, "reset")) {
    CUcontext ctx = NULL;
    CUresult rc = cuDevicePrimaryCtxReset(0);
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&ctx, 0);
    if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(ctx);
    printf("reset %s\n", name(rc));
  } else if (!strcmp(verb, "fds")) {
    printf("fds %d\n", ipc_open_fds());
  } else if (!strcmp(verb, "get-threads")) {
    sscanf(line, "%31s %llu %llu %llu", verb, &a, &b, &c);
    get_threads((int)a, b, c);
  } else if (!strcmp(verb, "hog")) {
    while (g_hogged < 65536) {
      const int fd = dup(0);
      if (fd < 0) break;
      g_hog[g_hogged++] = fd;
    }
    printf("hog %d\n", g_hogged);
  } else if (!strcmp(verb, "unhog")) {
    while (g_hogged > 0) close(g_hog[--g_hogged]);
    printf("ok\n");
  } else {
    printf("error unknown %s\n", verb);
  }
}

int main(void) {
  CUcontext ctx = NULL;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "ipc_target: no CUDA context\n");
    return 1;
  }
  g_ctx = ctx;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    if (!strncmp(line, "quit", 4)) break;
    command(line);
  }
  return 0;
}
