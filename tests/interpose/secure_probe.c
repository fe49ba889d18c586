/* tests/interpose/secure_probe.c: run as a setuid-root copy by an
 * unprivileged user (file_cases.py secure_exec). LD_PRELOAD and
 * LD_LIBRARY_PATH do not reach a secure-execution process, so it loads the
 * fake driver and libpagefast.so itself, by absolute path (argv[1], argv[2]),
 * and allocates once through pagefast. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  printf("secure %lu euid %d uid %d\n", getauxval(AT_SECURE), (int)geteuid(), (int)getuid());
  void* driver = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  void* pagefast = driver ? dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL) : NULL;
  if (!pagefast) {
    printf("dlopen failed: %s\n", dlerror());
    return 3;
  }
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(driver, "cuInit");
  CUresult (*get)(CUdevice*, int) = (CUresult(*)(CUdevice*, int))dlsym(driver, "cuDeviceGet");
  CUresult (*retain)(CUcontext*, CUdevice) =
      (CUresult(*)(CUcontext*, CUdevice))dlsym(driver, "cuDevicePrimaryCtxRetain");
  CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))dlsym(driver, "cuCtxSetCurrent");
  CUresult (*alloc)(CUdeviceptr*, size_t) = (CUresult(*)(CUdeviceptr*, size_t))dlsym(pagefast, "cuMemAlloc_v2");
  if (!init || !get || !retain || !set || !alloc) return 4;
  CUdevice device;
  CUcontext context;
  if (init(0) || get(&device, 0) || retain(&context, device) || set(context)) return 5;
  CUdeviceptr p = 0;
  printf("alloc %d\n", (int)alloc(&p, 1 << 20));
  return 0;
}
