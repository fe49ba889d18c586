/* tests/live/hold.c: allocates a few blocks through the driver API, says
 * "ready", and holds them until a line arrives on stdin; then frees them
 * and exits. For the live-stats cases (cases.py): pagefast-stat reads the
 * process while it holds. */
#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    printf("no device\n");
    return 1;
  }
  static const size_t sizes[] = {100, 1u << 20, 64u << 20};
  CUdeviceptr p[3];
  for (int i = 0; i < 3; ++i)
    if (cuMemAlloc_v2(&p[i], sizes[i]) != CUDA_SUCCESS) {
      printf("alloc failed\n");
      return 1;
    }
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) line[0] = 0;
  for (int i = 0; i < 3; ++i) cuMemFree_v2(p[i]);
  printf("done\n");
  return 0;
}
