// tests/pool/across_processes.cpp: memory a program frees reaching another
// process on the same device (docs/POOL.md "Given back at once", docs/IPC.md
// "Neighbours"), against the fake driver with FAKECUDA_SHARED_MEM (one
// device's memory shared by the processes). across_cases.py runs it.
//
//   across_processes fill BYTES BLOCK   allocates BYTES in blocks of BLOCK
//                                       with cuMemAlloc, writes and checks
//                                       them, frees them all, prints
//                                       "freed", then waits for a line on
//                                       stdin and allocates BYTES again
//                                       (checked) before it exits
//   across_processes take BYTES BLOCK   allocates BYTES in blocks of BLOCK
//                                       at once, never retrying; prints
//                                       "ok took N" or "FAIL refused after
//                                       N bytes"
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "preload_program.h"

using namespace preload_program;

namespace {

int fill_once(size_t bytes, size_t block, uint64_t seed, std::vector<CUdeviceptr>* held) {
  for (size_t done = 0; done < bytes; done += block) {
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAlloc(&p, block));
    fill_words(p, block, seed + done);
    held->push_back(p);
  }
  size_t done = 0;
  for (CUdeviceptr p : *held) {
    if (!words_intact(p, block, seed + done)) return fail("a block's contents changed");
    done += block;
  }
  return 0;
}

int fill(size_t bytes, size_t block) {
  if (start() != 0) return 1;
  std::vector<CUdeviceptr> held;
  if (fill_once(bytes, block, 1, &held) != 0) return 1;
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree(p));
  held.clear();
  std::printf("freed\n");
  std::fflush(stdout);
  char line[64];
  if (!std::fgets(line, sizeof line, stdin)) return fail("no line on stdin");
  // Once the other process is done (it exited), this one can have it all
  // again: nothing of it was lost on the way.
  if (fill_once(bytes, block, 2, &held) != 0) return 1;
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree(p));
  std::printf("ok filled again\n");
  return 0;
}

int take(size_t bytes, size_t block) {
  if (start() != 0) return 1;
  std::vector<CUdeviceptr> held;
  for (size_t done = 0; done < bytes; done += block) {
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc(&p, block);
    if (r != CUDA_SUCCESS) {
      std::printf("FAIL refused after %zu bytes (%d)\n", done, int(r));
      return 1;
    }
    fill_words(p, block, 7 + done);
    held.push_back(p);
  }
  size_t done = 0;
  for (CUdeviceptr p : held) {
    if (!words_intact(p, block, 7 + done)) return fail("a block's contents changed");
    done += block;
    CHECK_CU(cuMemFree(p));
  }
  std::printf("ok took %zu\n", bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: across_processes fill|take BYTES BLOCK\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const size_t block = std::strtoull(argv[3], nullptr, 10);
  if (!bytes || !block) return 2;
  if (std::strcmp(argv[1], "fill") == 0) return fill(bytes, block);
  if (std::strcmp(argv[1], "take") == 0) return take(bytes, block);
  return 2;
}
