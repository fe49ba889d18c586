// tools/gpu/check.cuh: the one error check of the GPU programs. Every CUDA
// call's result is checked; a failure prints the error and where, and
// exits with status 1 (METHOD.md: exit code 0 must mean something).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("error %s at %s:%d\n", cudaGetErrorName(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
