/* tests/interpose/ipc_exporter.c: the exporting side of the IPC cases
 * (ipc_cases.py): a CUDA program, linked against libcuda.so.1, that shares
 * cuMemAlloc blocks with child processes (ipc_importer, started with fork +
 * exec) through cuIpcGetMemHandle, sending each handle as its raw 64 bytes
 * over a pipe (ipc_common.h), and checks what the children read and wrote.
 *
 *   ipc_exporter CASE IMPORTER [--importer-unset VAR]... [--importer-set VAR=VALUE]...
 *                [--importer-arg ARG]
 * CASE: share, capable, free, cycles, uid, dead (see each function). What it
 * prints holds no address, pid or time, so that runs with and without
 * pagefast can be compared line by line. Exit status 0, or 77 for a case
 * that cannot run here (uid when not root), or 1 on a setup failure. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ipc_common.h"

#define MIB ((size_t)1 << 20)

static const char* g_importer;
static const char* g_unset[8];
static int g_unset_count;
static char* g_set[8];
static int g_set_count;
static const char* g_importer_arg;

struct child {
  pid_t pid;
  int to;   /* its stdin */
  int from; /* its stdout */
};

static const char* name(CUresult rc) {
  const char* text = NULL;
  if (cuGetErrorName(rc, &text) != CUDA_SUCCESS || !text) return "unknown";
  return text;
}

static int spawn(struct child* c) {
  int to[2], from[2];
  /* Close-on-exec: a child must not hold its siblings' pipes open. */
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) return 0;
  fflush(NULL);
  c->pid = fork();
  if (c->pid < 0) return 0;
  if (c->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]);
    close(to[1]);
    close(from[0]);
    close(from[1]);
    for (int i = 0; i < g_unset_count; ++i) unsetenv(g_unset[i]);
    for (int i = 0; i < g_set_count; ++i) putenv(g_set[i]);
    char* argv[3] = {(char*)g_importer, (char*)g_importer_arg, NULL};
    execv(g_importer, argv);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  c->to = to[1];
  c->from = from[0];
  return 1;
}

/* One request; a dead child answers rc -1. */
static struct ipc_reply call(struct child* c, char op, const CUipcMemHandle* handle, uint64_t offset, uint64_t bytes,
                             unsigned char expect, unsigned char value) {
  struct ipc_request request;
  memset(&request, 0, sizeof request);
  request.op = (uint8_t)op;
  request.offset = offset;
  request.bytes = bytes;
  request.expect = expect;
  request.value = value;
  if (handle) request.handle = *handle;
  struct ipc_reply reply;
  memset(&reply, 0, sizeof reply);
  reply.rc = -1;
  if (!ipc_write_full(c->to, &request, sizeof request) || !ipc_read_full(c->from, &reply, sizeof reply)) {
    memset(&reply, 0, sizeof reply);
    reply.rc = -1;
  }
  return reply;
}

static const char* result_name(int32_t rc) { return rc == -1 ? "importer-died" : name((CUresult)rc); }

/* Ends the child; "exit=N" or "signal=N". */
static void finish(struct child* c, const char* label) {
  struct ipc_request request;
  memset(&request, 0, sizeof request);
  request.op = 'Q';
  ipc_write_full(c->to, &request, sizeof request);
  close(c->to);
  close(c->from);
  int status = 0;
  while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    printf("%s signal=%d\n", label, WTERMSIG(status));
  } else {
    printf("%s exit=%d\n", label, WEXITSTATUS(status));
  }
}

static int all_equal(CUdeviceptr ptr, size_t bytes, unsigned char value) {
  static unsigned char buffer[8 << 20];
  if (bytes > sizeof buffer || cuMemcpyDtoH(buffer, ptr, bytes) != CUDA_SUCCESS) return 0;
  for (size_t i = 0; i < bytes; ++i)
    if (buffer[i] != value) return 0;
  return 1;
}

static CUdeviceptr alloc_filled(size_t bytes, unsigned char value) {
  CUdeviceptr d = 0;
  if (cuMemAlloc(&d, bytes) != CUDA_SUCCESS || cuMemsetD8(d, value, bytes) != CUDA_SUCCESS) {
    fprintf(stderr, "ipc_exporter: cuMemAlloc/cuMemsetD8 of %zu bytes failed\n", bytes);
    exit(1);
  }
  return d;
}

/* Five small blocks, the third shared (not at offset 0 of anything), and a
 * 3 MiB one; three children each open both, check the pattern, write a
 * slice of their own and close; then the exporter checks every byte. */
static int case_share(void) {
  enum { kChildren = 3 };
  CUdeviceptr small[5];
  for (int i = 0; i < 5; ++i) small[i] = alloc_filled(1000, (unsigned char)(0x10 + i));
  const CUdeviceptr large = alloc_filled(3 * MIB, 0x60);
  CUipcMemHandle small_handle, large_handle;
  memset(&small_handle, 0, sizeof small_handle);
  memset(&large_handle, 0, sizeof large_handle);
  const CUresult small_rc = cuIpcGetMemHandle(&small_handle, small[2]);
  const CUresult large_rc = cuIpcGetMemHandle(&large_handle, large);
  printf("get small=%s large=%s\n", name(small_rc), name(large_rc));
  struct child children[kChildren];
  int small_written[kChildren] = {0}, large_written[kChildren] = {0};
  for (int k = 0; k < kChildren; ++k)
    if (!spawn(&children[k])) return 1;
  for (int k = 0; k < kChildren; ++k) {
    struct child* c = &children[k];
    struct ipc_reply r = call(c, 'O', &small_handle, 0, 0, 0, 0);
    printf("child %d small open=%s", k, result_name(r.rc));
    if (r.rc == CUDA_SUCCESS) {
      /* Its own slice, and the part no child writes. */
      printf(" read=%d", call(c, 'R', NULL, 100 * (uint64_t)k, 100, 0x12, 0).check &
                             call(c, 'R', NULL, 100 * kChildren, 1000 - 100 * kChildren, 0x12, 0).check);
      r = call(c, 'W', NULL, 100 * (uint64_t)k, 100, 0, (unsigned char)(0x80 + k));
      small_written[k] = r.rc == CUDA_SUCCESS;
      printf(" write=%s close=%s", result_name(r.rc), result_name(call(c, 'C', NULL, 0, 0, 0, 0).rc));
    }
    r = call(c, 'O', &large_handle, 0, 0, 0, 0);
    printf("\nchild %d large open=%s", k, result_name(r.rc));
    if (r.rc == CUDA_SUCCESS) {
      printf(" read=%d", call(c, 'R', NULL, MIB + 4096 * (uint64_t)k, 4096, 0x60, 0).check &
                             call(c, 'R', NULL, 0, MIB, 0x60, 0).check &
                             call(c, 'R', NULL, 2 * MIB, MIB, 0x60, 0).check);
      r = call(c, 'W', NULL, MIB + 4096 * (uint64_t)k, 4096, 0, (unsigned char)(0xa0 + k));
      large_written[k] = r.rc == CUDA_SUCCESS;
      printf(" write=%s close=%s", result_name(r.rc), result_name(call(c, 'C', NULL, 0, 0, 0, 0).rc));
    }
    printf("\n");
  }
  for (int k = 0; k < kChildren; ++k) {
    char label[32];
    snprintf(label, sizeof label, "child %d", k);
    finish(&children[k], label);
  }
  int ok = 1;
  for (int k = 0; k < kChildren; ++k) {
    ok &= all_equal(small[2] + 100 * (size_t)k, 100, small_written[k] ? (unsigned char)(0x80 + k) : 0x12);
    ok &= all_equal(large + MIB + 4096 * (size_t)k, 4096, large_written[k] ? (unsigned char)(0xa0 + k) : 0x60);
  }
  ok &= all_equal(small[2] + 100 * kChildren, 1000 - 100 * kChildren, 0x12);
  ok &= all_equal(large, MIB, 0x60);
  ok &= all_equal(large + MIB + 4096 * kChildren, 2 * MIB - 4096 * kChildren, 0x60);
  int neighbours = 1;
  for (int i = 0; i < 5; ++i)
    if (i != 2) neighbours &= all_equal(small[i], 1000, (unsigned char)(0x10 + i));
  printf("exporter sees the children's writes=%d neighbours untouched=%d\n", ok, neighbours);
  for (int i = 0; i < 5; ++i) cuMemFree(small[i]);
  cuMemFree(large);
  return 0;
}

static int case_capable(void) {
  const CUdeviceptr small = alloc_filled(1000, 1);
  const CUdeviceptr large = alloc_filled(3 * MIB, 1);
  int small_capable = -1, large_capable = -1;
  const CUresult a = cuPointerGetAttribute(&small_capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, small);
  const CUresult b = cuPointerGetAttribute(&large_capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, large);
  printf("legacy ipc capable small=%s:%d large=%s:%d\n", name(a), small_capable, name(b), large_capable);
  cuMemFree(small);
  cuMemFree(large);
  return 0;
}

/* The importers hold the blocks while the exporter frees them and writes
 * new allocations of the same sizes: the importers still read the old bytes. */
static int case_free(void) {
  CUdeviceptr small[5];
  for (int i = 0; i < 5; ++i) small[i] = alloc_filled(1000, (unsigned char)(0x10 + i));
  const CUdeviceptr large = alloc_filled(3 * MIB, 0x60);
  CUipcMemHandle small_handle, large_handle;
  memset(&small_handle, 0, sizeof small_handle);
  memset(&large_handle, 0, sizeof large_handle);
  printf("get small=%s large=%s\n", name(cuIpcGetMemHandle(&small_handle, small[2])),
         name(cuIpcGetMemHandle(&large_handle, large)));
  struct child s, l;
  if (!spawn(&s) || !spawn(&l)) return 1;
  printf("open small=%s large=%s\n", result_name(call(&s, 'O', &small_handle, 0, 0, 0, 0).rc),
         result_name(call(&l, 'O', &large_handle, 0, 0, 0, 0).rc));
  for (int i = 0; i < 5; ++i) cuMemFree(small[i]);
  printf("free large=%s\n", name(cuMemFree(large)));
  CUdeviceptr fresh[16];
  for (int i = 0; i < 16; ++i) fresh[i] = alloc_filled(i % 2 ? 3 * MIB : 1000, 0x99);
  printf("after free small old=%d large old=%d\n", call(&s, 'R', NULL, 0, 1000, 0x12, 0).check,
         call(&l, 'R', NULL, 0, 3 * MIB, 0x60, 0).check);
  printf("close small=%s large=%s\n", result_name(call(&s, 'C', NULL, 0, 0, 0, 0).rc),
         result_name(call(&l, 'C', NULL, 0, 0, 0, 0).rc));
  finish(&s, "small importer");
  finish(&l, "large importer");
  int untouched = 1;
  for (int i = 0; i < 16; ++i) untouched &= all_equal(fresh[i], i % 2 ? 3 * MIB : 1000, 0x99);
  printf("new allocations untouched=%d\n", untouched);
  for (int i = 0; i < 16; ++i) cuMemFree(fresh[i]);
  return 0;
}

/* N times: get a handle, the child opens, reads and closes it. Neither
 * process may end with more file descriptors than after the first cycle. */
static int case_cycles(int cycles) {
  const CUdeviceptr block = alloc_filled(64 * 1024, 0x3c);
  struct child c;
  if (!spawn(&c)) return 1;
  int failures = 0;
  int exporter_before = 0;
  uint64_t importer_before = 0;
  for (int i = 0; i <= cycles; ++i) {
    if (i == 1) {
      exporter_before = ipc_open_fds();
      importer_before = call(&c, 'F', NULL, 0, 0, 0, 0).value;
    }
    CUipcMemHandle handle;
    if (cuIpcGetMemHandle(&handle, block) != CUDA_SUCCESS) {
      ++failures;
      continue;
    }
    if (call(&c, 'O', &handle, 0, 0, 0, 0).rc != CUDA_SUCCESS) {
      ++failures;
      continue;
    }
    if (!call(&c, 'R', NULL, 0, 16, 0x3c, 0).check) ++failures;
    if (call(&c, 'C', NULL, 0, 0, 0, 0).rc != CUDA_SUCCESS) ++failures;
  }
  /* A connection the importer just closed may still be open on the
   * exporter's side for a moment (its thread sees the end asynchronously):
   * a leak is what stays. */
  int exporter_delta = ipc_open_fds() - exporter_before;
  for (int wait = 0; wait < 6000 && exporter_delta > 0; ++wait) { /* a minute: a hang guard */
    usleep(10000);
    exporter_delta = ipc_open_fds() - exporter_before;
  }
  /* Below zero: the first count caught such a connection still open. */
  if (exporter_delta < 0) exporter_delta = 0;
  const int64_t importer_delta = (int64_t)call(&c, 'F', NULL, 0, 0, 0, 0).value - (int64_t)importer_before;
  printf("cycles=%d failures=%d exporter fd delta=%d importer fd delta=%lld\n", cycles, failures, exporter_delta,
         (long long)importer_delta);
  finish(&c, "importer");
  cuMemFree(block);
  return 0;
}

/* An importer of another uid must be refused, quickly. */
static int case_uid(void) {
  if (geteuid() != 0) {
    printf("skip: not root, so the importer cannot switch to another uid\n");
    return 77;
  }
  const CUdeviceptr block = alloc_filled(4096, 0x42);
  CUipcMemHandle handle;
  printf("get=%s\n", name(cuIpcGetMemHandle(&handle, block)));
  g_importer_arg = "--as-nobody";
  struct child c;
  if (!spawn(&c)) return 1;
  const struct ipc_reply r = call(&c, 'O', &handle, 0, 0, 0, 0);
  printf("open as nobody=%s within 2 s=%d\n", result_name(r.rc), r.ms < 2000);
  finish(&c, "importer");
  cuMemFree(block);
  return 0;
}

/* Prints the handle of a filled 4 KiB block as hex and exits without
 * freeing it: ipc_cases.py opens it after this process is gone. */
static int case_dead(void) {
  const CUdeviceptr block = alloc_filled(4096, 0x5d);
  CUipcMemHandle handle;
  const CUresult rc = cuIpcGetMemHandle(&handle, block);
  printf("get=%s\nhandle=", name(rc));
  for (int i = 0; i < CU_IPC_HANDLE_SIZE; ++i) printf("%02x", (unsigned char)handle.reserved[i]);
  printf("\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: ipc_exporter CASE IMPORTER [options]\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a dead importer is a reported failure */
  g_importer = argv[2];
  for (int i = 3; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--importer-unset") == 0 && g_unset_count < 8) {
      g_unset[g_unset_count++] = argv[i + 1];
    } else if (strcmp(argv[i], "--importer-set") == 0 && g_set_count < 8) {
      g_set[g_set_count++] = argv[i + 1];
    } else if (strcmp(argv[i], "--importer-arg") == 0) {
      g_importer_arg = argv[i + 1];
    } else {
      fprintf(stderr, "ipc_exporter: unknown option %s\n", argv[i]);
      return 1;
    }
  }
  CUcontext ctx = NULL;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "ipc_exporter: no CUDA context\n");
    return 1;
  }
  const char* which = argv[1];
  int status = 1;
  if (strcmp(which, "share") == 0) status = case_share();
  else if (strcmp(which, "capable") == 0) status = case_capable();
  else if (strcmp(which, "free") == 0) status = case_free();
  else if (strcmp(which, "cycles") == 0) status = case_cycles(1000);
  else if (strcmp(which, "uid") == 0) status = case_uid();
  else if (strcmp(which, "dead") == 0) status = case_dead();
  else fprintf(stderr, "ipc_exporter: unknown case %s\n", which);
  fflush(stdout);
  return status;
}
