/* tests/tools/fakenvml/fake_nvml.c: a test double of libnvidia-ml.so.1 for
 * tools/bench/nvml_peak.py, with the four calls it makes. One device; the
 * processes it reports are read on every query from the file named by
 * FAKE_NVML_FILE, one "pid bytes" line each ("pid -" for memory NVML
 * cannot see), so that a test moves a process's memory up and down while
 * the sampler polls. FAKE_NVML_FAIL=init makes nvmlInit_v2 refuse.
 * FAKE_NVML_READS names a file that gets one byte appended at the end of
 * every process query: a test waits for queries by its size, not by
 * sleeping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} ProcessInfo;

int nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_FAIL");
  return fail && strcmp(fail, "init") == 0 ? 1 : 0;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 1;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** handle) {
  if (index != 0) return 2;
  *handle = (void*)0x1;
  return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  (void)device;
  const char* path = getenv("FAKE_NVML_FILE");
  FILE* f = path ? fopen(path, "r") : NULL;
  unsigned int n = 0;
  char line[128];
  while (f && fgets(line, sizeof line, f)) {
    unsigned int pid;
    char bytes[64];
    if (sscanf(line, "%u %63s", &pid, bytes) != 2) continue;
    if (n < *count) {
      infos[n].pid = pid;
      infos[n].usedGpuMemory = bytes[0] == '-' ? ~0ULL : strtoull(bytes, NULL, 10);
      infos[n].gpuInstanceId = infos[n].computeInstanceId = ~0u;
    }
    ++n;
  }
  if (f) fclose(f);
  const char* reads = getenv("FAKE_NVML_READS");
  FILE* r = reads ? fopen(reads, "a") : NULL;
  if (r) {
    fputc('.', r);
    fclose(r);
  }
  const int too_small = n > *count;
  *count = n;
  return too_small ? 7 : 0;
}
