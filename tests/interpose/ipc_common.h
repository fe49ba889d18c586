/* tests/interpose/ipc_common.h: the pipe protocol between ipc_exporter and
 * ipc_importer (and ipc_cases.py, which speaks it too), and small helpers.
 *
 * The exporter writes one ipc_request at a time to the importer's stdin, the
 * CUipcMemHandle in it as its raw 64 bytes; the importer answers each with
 * one ipc_reply on its stdout. Both are fixed-size, native byte order
 * (struct formats below). */
#ifndef PAGEFAST_TESTS_IPC_COMMON_H
#define PAGEFAST_TESTS_IPC_COMMON_H

#include <cuda.h>
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

/* Ops:
 *   'O' cuIpcOpenMemHandle(handle) and keep the pointer; ms = time it took
 *   'R' read [ptr+offset, +bytes) with cuMemcpyDtoH: check = 1 if every byte
 *       equals `expect`
 *   'W' cuMemsetD8 [ptr+offset, +bytes) to `value`, then cuCtxSynchronize
 *   'C' cuIpcCloseMemHandle(ptr)
 *   'A' value = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE of ptr
 *   'F' value = open file descriptors of the importer
 *   'S' pagefast_sleep(value) (after one allocation, so that a pool exists):
 *       value = its answer (as int64); INVALID_VALUE without pagefast
 *   'K' pagefast_wake(): value = its answer
 *   'N' value = the fake driver's count of calls to the function named in
 *       `handle` (a NUL-terminated name; fakecuda_call_count)
 *   'H' keep `handle` in the slot for 'T', with its size (`bytes`) and the
 *       byte every one of them holds (`expect`)
 *   'T' `value` threads, each `bytes` rounds over every kept handle: open,
 *       read it whole, check its bytes, close; check = 1 if every open,
 *       read and close succeeded with the right bytes
 *   'U' two threads: A opens and closes kept handle 0 `bytes` times, B opens
 *       kept handle 1, reads and checks it whole a few times and closes it,
 *       until its open fails or A is done; check = 1 if every open of A
 *       and close succeeded and B never read a wrong byte; value = B's opens
 *   'Q' exit
 * The struct formats: "<BBBB4xQQ64s" and "<iiQQ" on x86-64. */
struct ipc_request {
  uint8_t op;
  uint8_t expect;
  uint8_t value;
  uint8_t slot; /* which opened pointer O, R, W, C and A use (0 to 7) */
  uint8_t pad[4];
  uint64_t offset;
  uint64_t bytes;
  CUipcMemHandle handle;
};

struct ipc_reply {
  int32_t rc; /* a CUresult */
  int32_t check;
  uint64_t value;
  uint64_t ms;
};

static inline int ipc_write_full(int fd, const void* data, size_t bytes) {
  const char* p = (const char*)data;
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n <= 0) return 0;
    p += n;
    bytes -= (size_t)n;
  }
  return 1;
}

static inline int ipc_read_full(int fd, void* data, size_t bytes) {
  char* p = (char*)data;
  while (bytes > 0) {
    const ssize_t n = read(fd, p, bytes);
    if (n <= 0) return 0;
    p += n;
    bytes -= (size_t)n;
  }
  return 1;
}

static inline int ipc_open_fds(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int count = 0;
  while (readdir(dir)) ++count;
  closedir(dir);
  return count;
}

#endif
