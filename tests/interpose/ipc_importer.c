/* tests/interpose/ipc_importer.c: the importing side of the IPC cases
 * (ipc_cases.py): a CUDA program, linked against libcuda.so.1, that opens
 * the legacy IPC handles it is sent on stdin and answers on stdout
 * (protocol in ipc_common.h).
 *
 *   ipc_importer [--as-nobody]
 * Up to 8 pointers are open at once, one per request slot.
 * --as-nobody: switch to uid/gid 65534 before cuInit (needs root). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../fakecuda/fakecuda.h"
#include "ipc_common.h"

/* The handles kept for 'T', per slot. */
struct kept {
  int used;
  CUipcMemHandle handle;
  uint64_t bytes;
  uint8_t expect;
};
static struct kept g_kept[8];
static CUcontext g_ctx;

struct stress {
  pthread_t thread;
  uint64_t rounds;
  unsigned first; /* where its rounds start among the kept handles */
  int ok;
};

/* One thread of 'T': opens, reads and closes every kept handle, rounds
 * times, in an order of its own. */
static void* stress_main(void* arg) {
  struct stress* me = (struct stress*)arg;
  me->ok = cuCtxSetCurrent(g_ctx) == CUDA_SUCCESS;
  for (uint64_t r = 0; r < me->rounds && me->ok; ++r)
    for (int k = 0; k < 8 && me->ok; ++k) {
      const struct kept* h = &g_kept[(k + r + me->first) & 7];
      if (!h->used) continue;
      CUdeviceptr p = 0;
      if (cuIpcOpenMemHandle(&p, h->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) {
        me->ok = 0;
        break;
      }
      unsigned char* bytes = (unsigned char*)malloc(h->bytes);
      me->ok = bytes && cuMemcpyDtoH(bytes, p, h->bytes) == CUDA_SUCCESS;
      for (uint64_t i = 0; me->ok && i < h->bytes; ++i)
        if (bytes[i] != h->expect) me->ok = 0;
      free(bytes);
      if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) me->ok = 0;
    }
  return NULL;
}

static int stress_run(unsigned threads, uint64_t rounds) {
  struct stress all[16];
  if (threads == 0 || threads > 16) return 0;
  int ok = 1;
  unsigned started = 0;
  for (; started < threads; ++started) {
    all[started].rounds = rounds;
    all[started].first = started;
    all[started].ok = 0;
    if (pthread_create(&all[started].thread, NULL, stress_main, &all[started]) != 0) {
      ok = 0;
      break;
    }
  }
  for (unsigned i = 0; i < started; ++i) {
    pthread_join(all[i].thread, NULL);
    ok = ok && all[i].ok;
  }
  return ok;
}

/* 'U': thread A opens and closes kept handle 0 (its close is often this
 * process's last import of the exporter: a release-all goes out) while
 * thread B opens kept handle 1, reads it whole 64 times, checks its bytes
 * and closes it, until its open fails (the exporter freed it and it
 * is gone) or A has done its rounds. */
struct race {
  uint64_t rounds;
  int a_done, b_done; /* __atomic */
  int a_ok;
  uint64_t b_opens, b_wrong;
};

static void* race_a(void* arg) {
  struct race* r = (struct race*)arg;
  r->a_ok = cuCtxSetCurrent(g_ctx) == CUDA_SUCCESS;
  for (uint64_t i = 0; i < r->rounds && r->a_ok && !__atomic_load_n(&r->b_done, __ATOMIC_ACQUIRE); ++i) {
    CUdeviceptr p = 0;
    r->a_ok = cuIpcOpenMemHandle(&p, g_kept[0].handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS &&
              cuIpcCloseMemHandle(p) == CUDA_SUCCESS;
  }
  __atomic_store_n(&r->a_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void* race_b(void* arg) {
  struct race* r = (struct race*)arg;
  const struct kept* b = &g_kept[1];
  unsigned char* bytes = (unsigned char*)malloc(b->bytes);
  if (!bytes || cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) ++r->b_wrong;
  while (bytes && !__atomic_load_n(&r->a_done, __ATOMIC_ACQUIRE)) {
    CUdeviceptr p = 0;
    if (cuIpcOpenMemHandle(&p, b->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) break;
    ++r->b_opens;
    for (int k = 0; k < 64; ++k) {
      int right = cuMemcpyDtoH(bytes, p, b->bytes) == CUDA_SUCCESS;
      for (uint64_t i = 0; right && i < b->bytes; ++i) right = bytes[i] == b->expect;
      if (!right) ++r->b_wrong;
    }
    if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) ++r->b_wrong;
  }
  free(bytes);
  __atomic_store_n(&r->b_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int race_run(uint64_t rounds, uint64_t* b_opens) {
  struct race r;
  memset(&r, 0, sizeof r);
  r.rounds = rounds;
  pthread_t a, b;
  if (pthread_create(&a, NULL, race_a, &r) != 0) return 0;
  if (pthread_create(&b, NULL, race_b, &r) != 0) {
    __atomic_store_n(&r.b_done, 1, __ATOMIC_RELEASE);
    pthread_join(a, NULL);
    return 0;
  }
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  *b_opens = r.b_opens;
  return r.a_ok && r.b_wrong == 0;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--as-nobody") == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      perror("ipc_importer: setuid");
      return 3;
    }
  }
  CUresult ready = cuInit(0);
  CUcontext ctx = NULL;
  if (ready == CUDA_SUCCESS) ready = cuDevicePrimaryCtxRetain(&ctx, 0);
  if (ready == CUDA_SUCCESS) ready = cuCtxSetCurrent(ctx);
  g_ctx = ctx;
  CUdeviceptr ptrs[8] = {0};
  for (;;) {
    struct ipc_request request;
    if (!ipc_read_full(0, &request, sizeof request)) return 0;
    struct ipc_reply reply;
    memset(&reply, 0, sizeof reply);
    reply.rc = (int32_t)ready;
    CUdeviceptr* slot = &ptrs[request.slot & 7];
    const CUdeviceptr ptr = *slot;
    if (ready == CUDA_SUCCESS) {
      switch (request.op) {
        case 'O': {
          const uint64_t start = now_ms();
          CUdeviceptr got = 0;
          reply.rc = (int32_t)cuIpcOpenMemHandle(&got, request.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
          reply.ms = now_ms() - start;
          if (reply.rc == CUDA_SUCCESS) *slot = got;
          reply.value = got != 0;
          break;
        }
        case 'R': {
          static unsigned char bytes[8 << 20];
          if (request.bytes > sizeof bytes) {
            reply.rc = CUDA_ERROR_INVALID_VALUE;
            break;
          }
          reply.rc = (int32_t)cuMemcpyDtoH(bytes, ptr + request.offset, request.bytes);
          reply.check = reply.rc == CUDA_SUCCESS;
          for (uint64_t i = 0; reply.check && i < request.bytes; ++i)
            if (bytes[i] != request.expect) reply.check = 0;
          break;
        }
        case 'W':
          reply.rc = (int32_t)cuMemsetD8(ptr + request.offset, request.value, request.bytes);
          if (reply.rc == CUDA_SUCCESS) reply.rc = (int32_t)cuCtxSynchronize();
          break;
        case 'C': reply.rc = (int32_t)cuIpcCloseMemHandle(ptr); break;
        case 'A': {
          int capable = -1;
          reply.rc = (int32_t)cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr);
          reply.value = (uint64_t)(int64_t)capable;
          break;
        }
        case 'F':
          reply.rc = CUDA_SUCCESS;
          reply.value = (uint64_t)ipc_open_fds();
          break;
        case 'S':
        case 'K': {
          /* pagefast's C API, when it is there (interpose/pagefast.h). */
          typedef int (*sleep_fn)(unsigned);
          typedef int (*wake_fn)(void);
          static CUdeviceptr pool_block;
          reply.rc = CUDA_ERROR_INVALID_VALUE;
          void* sym = dlsym(RTLD_DEFAULT, request.op == 'S' ? "pagefast_sleep" : "pagefast_wake");
          if (!sym) break;
          if (!pool_block) cuMemAlloc(&pool_block, 4096);
          const int answer = request.op == 'S' ? ((sleep_fn)sym)(request.value) : ((wake_fn)sym)();
          reply.rc = CUDA_SUCCESS;
          reply.value = (uint64_t)(int64_t)answer;
          break;
        }
        case 'N': {
          char name[sizeof request.handle + 1];
          memcpy(name, &request.handle, sizeof request.handle);
          name[sizeof request.handle] = 0;
          reply.rc = CUDA_SUCCESS;
          reply.value = (uint64_t)fakecuda_call_count(name);
          break;
        }
        case 'H': {
          struct kept* k = &g_kept[request.slot & 7];
          k->used = 1;
          k->handle = request.handle;
          k->bytes = request.bytes;
          k->expect = request.expect;
          reply.rc = CUDA_SUCCESS;
          break;
        }
        case 'T':
          reply.rc = CUDA_SUCCESS;
          reply.check = stress_run(request.value, request.bytes);
          break;
        case 'U':
          reply.rc = CUDA_SUCCESS;
          reply.check = race_run(request.bytes, &reply.value);
          break;
        case 'Q': return 0;
        default: reply.rc = CUDA_ERROR_INVALID_VALUE;
      }
    } else if (request.op == 'Q') {
      return 0;
    }
    if (!ipc_write_full(1, &reply, sizeof reply)) return 4;
  }
}
