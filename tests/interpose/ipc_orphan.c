/* tests/interpose/ipc_orphan.c: an importer whose main thread exits
 * (pthread_exit) while another thread keeps using what it imported: its
 * leader then shows as a zombie in /proc/PID/stat although the process
 * runs (ipc_peer_cases.py, docs/IPC.md "Holds").
 *
 *   ipc_orphan HANDLE_HEX
 * main opens the handle (slot 0), prints "opened NAME", starts the worker
 * and calls pthread_exit. The worker reads one command a line on stdin and
 * answers one line on stdout:
 *   check S BYTE N   whether the first N bytes of slot S all are BYTE: "check 0|1"
 *   write S BYTE N   cuMemsetD8 of them, then cuCtxSynchronize: "write NAME"
 *   open S HEX       cuIpcOpenMemHandle into slot S (1-3): "open NAME"
 *   close S          cuIpcCloseMemHandle of slot S: "close NAME"
 *   quit             closes what is open and calls exit(0)
 * Hex bytes (BYTE) as in ipc_target. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_common.h"

#define SLOTS 4

static CUcontext g_ctx;
static CUdeviceptr g_slot[SLOTS];

static const char* name(CUresult rc) {
  const char* text = NULL;
  if (cuGetErrorName(rc, &text) != CUDA_SUCCESS || !text) return "unknown";
  return text;
}

static int parse_handle(const char* hex, CUipcMemHandle* handle) {
  if (strlen(hex) < 2 * CU_IPC_HANDLE_SIZE) return 0;
  for (int i = 0; i < CU_IPC_HANDLE_SIZE; ++i) {
    unsigned byte = 0;
    if (sscanf(hex + 2 * i, "%2x", &byte) != 1) return 0;
    handle->reserved[i] = (char)byte;
  }
  return 1;
}

static CUresult open_into(int slot, const char* hex) {
  CUipcMemHandle handle;
  if (!parse_handle(hex, &handle)) return CUDA_ERROR_INVALID_VALUE;
  return cuIpcOpenMemHandle(&g_slot[slot], handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

static int all_equal(int slot, unsigned char value, size_t bytes) {
  static unsigned char buffer[8 << 20];
  if (bytes > sizeof buffer || cuMemcpyDtoH(buffer, g_slot[slot], bytes) != CUDA_SUCCESS) return 0;
  for (size_t i = 0; i < bytes; ++i)
    if (buffer[i] != value) return 0;
  return 1;
}

static void* worker(void* arg) {
  (void)arg;
  if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) exit(5);
  char line[512];
  while (fgets(line, sizeof line, stdin)) {
    char verb[16] = "", text[300] = "";
    unsigned s = 0, byte = 0;
    unsigned long long bytes = 0;
    const int got = sscanf(line, "%15s %u %299s %llu", verb, &s, text, &bytes);
    const int slot = (int)(s % SLOTS);
    if (got >= 1 && !strcmp(verb, "quit")) break;
    if (got == 4 && !strcmp(verb, "check")) {
      sscanf(text, "%x", &byte);
      printf("check %d\n", all_equal(slot, (unsigned char)byte, (size_t)bytes));
    } else if (got == 4 && !strcmp(verb, "write")) {
      sscanf(text, "%x", &byte);
      CUresult rc = cuMemsetD8(g_slot[slot], (unsigned char)byte, (size_t)bytes);
      if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
      printf("write %s\n", name(rc));
    } else if (got >= 3 && !strcmp(verb, "open")) {
      printf("open %s\n", name(open_into(slot, text)));
    } else if (got >= 2 && !strcmp(verb, "close")) {
      printf("close %s\n", name(cuIpcCloseMemHandle(g_slot[slot])));
      g_slot[slot] = 0;
    } else {
      printf("error unknown %s\n", verb);
    }
  }
  for (int i = 0; i < SLOTS; ++i)
    if (g_slot[i]) cuIpcCloseMemHandle(g_slot[i]);
  exit(0);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2 || cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "ipc_orphan: no CUDA context (or no handle)\n");
    return 1;
  }
  printf("opened %s\n", name(open_into(0, argv[1])));
  pthread_t thread;
  if (pthread_create(&thread, NULL, worker, NULL) != 0) return 2;
  pthread_exit(NULL);
}
