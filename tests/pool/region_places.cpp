// tests/pool/region_places.cpp: where a region keeps its contents at
// sleep (interpose/pagefast.h PAGEFAST_REGION_KEEP_DISK and
// PAGEFAST_REGION_HOST_RELEASE, docs/SLEEP.md), on the fake driver with
// libpagefast.so preloaded. Subcommands (region_places_cases.py runs them):
//   disk DIR       a region kept in files: a sleep writes one file per live
//                  block in DIR and holds no page-locked host memory
//                  across it; pagefast_kept_read answers -3; wake restores
//                  every byte and deletes the files; three cycles make the
//                  same files' sizes; a block freed while asleep is
//                  restored with the rest and its file goes too; a folder
//                  that cannot be written is refused;
//   disk_exit DIR  sleeps a region kept in files and exits asleep (the
//                  case script finds DIR empty: deleted at exit);
//   release        a region that gives its host memory back: page-locked
//                  host memory grows by what it keeps at sleep and goes
//                  back at wake, while a plain keep region's stays for its
//                  next sleep; contents intact both ways.
#include <cuda.h>
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fakecuda.h"
#include "interpose/pagefast.h"
#include "preload_program.h"

using namespace preload_program;

namespace {

constexpr size_t kMiB = size_t(1) << 20;

struct Folder {
  size_t files = 0;
  size_t bytes = 0;
};

Folder look(const char* dir) {
  Folder f;
  DIR* d = opendir(dir);
  if (!d) return f;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    const std::string path = std::string(dir) + "/" + e->d_name;
    if (stat(path.c_str(), &st) != 0) continue;
    ++f.files;
    f.bytes += size_t(st.st_size);
  }
  closedir(d);
  return f;
}

template <typename F>
F find(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

using SetDir = int (*)(const char*, size_t);
using KeptRead = int (*)(const void*, size_t, void*);

int disk(RegionApi& api, const char* dir, bool exit_asleep) {
  const auto set_dir = find<SetDir>("pagefast_keep_disk_dir");
  const auto kept_read = find<KeptRead>("pagefast_kept_read");
  if (!set_dir || !kept_read) return fail("pagefast_keep_disk_dir or pagefast_kept_read not exported");
  if (set_dir("/nonexistent/pagefast-folder", 0) != -1) return fail("a folder that does not exist was taken");
  if (set_dir(dir, kMiB) != 0) return fail("pagefast_keep_disk_dir");
  const size_t sizes[] = {24 * kMiB, 6 * kMiB, 10 * kMiB};
  CUdeviceptr held[3] = {};
  for (int i = 0; i < 3; ++i) {
    if (alloc_in(api, "ondisk", PAGEFAST_REGION_KEEP_DISK, sizes[i], &held[i])) return 1;
    fill_words(held[i], sizes[i], 40 + i);
  }
  CUdeviceptr dropped = 0;
  if (alloc_in(api, "dropped", 0, 8 * kMiB, &dropped)) return 1;
  const size_t pinned = fakecuda_host_registered_bytes();
  Folder first{};
  for (int cycle = 0; cycle < 3; ++cycle) {
    if (api.sleep_tag("ondisk", 0) != 0 || api.sleep_tag("dropped", 0) != 0) return fail("sleep");
    const Folder now = look(dir);
    if (now.files < 3 || now.bytes < 40 * kMiB) {
      std::printf("FAIL cycle %d: %zu files of %zu MiB for 3 blocks of 40 MiB\n", cycle, now.files, now.bytes / kMiB);
      return 1;
    }
    if (cycle == 0) first = now;
    if (now.files != first.files || now.bytes != first.bytes) return fail("the files changed across cycles");
    if (fakecuda_host_registered_bytes() != pinned) return fail("page-locked host memory held across the sleep");
    char probe[64];
    if (kept_read(reinterpret_cast<void*>(held[1]), sizeof probe, probe) != -3) return fail("kept_read of a file");
    if (exit_asleep) {
      std::printf("ok disk_exit: asleep with %zu files\n", now.files);
      return 0;
    }
    if (cycle == 2) CHECK_CU(cuMemFree_v2(held[2]));  // freed while asleep
    if (api.wake_tag("ondisk") != 0 || api.wake_tag("dropped") != 0) return fail("wake");
    for (int i = 0; i < (cycle == 2 ? 2 : 3); ++i)
      if (!words_intact(held[i], sizes[i], 40 + i)) return fail("contents after wake");
    if (look(dir).files != 0) return fail("files left after wake");
  }
  CHECK_CU(cuMemFree_v2(held[0]));
  CHECK_CU(cuMemFree_v2(held[1]));
  CHECK_CU(cuMemFree_v2(dropped));
  std::printf("ok disk: %zu files of %zu MiB a sleep\n", first.files, first.bytes / kMiB);
  return 0;
}

int release(RegionApi& api) {
  CUdeviceptr released = 0, kept = 0;
  if (alloc_in(api, "released", PAGEFAST_REGION_HOST_RELEASE, 24 * kMiB, &released)) return 1;
  if (alloc_in(api, "kept", PAGEFAST_REGION_KEEP, 8 * kMiB, &kept)) return 1;
  fill_words(released, 24 * kMiB, 7);
  fill_words(kept, 8 * kMiB, 8);
  const size_t before = fakecuda_host_registered_bytes();
  for (int cycle = 0; cycle < 2; ++cycle) {
    if (api.sleep_tag("released", 0) != 0) return fail("sleep released");
    if (fakecuda_host_registered_bytes() < before + 24 * kMiB) return fail("the sleep kept less than 24 MiB");
    if (api.wake_tag("released") != 0 || !words_intact(released, 24 * kMiB, 7)) return fail("released after wake");
    if (fakecuda_host_registered_bytes() != before) return fail("host memory not given back at wake");
  }
  if (api.sleep_tag("kept", 0) != 0 || api.wake_tag("kept") != 0 || !words_intact(kept, 8 * kMiB, 8))
    return fail("kept");
  if (fakecuda_host_registered_bytes() < before + 8 * kMiB) return fail("a keep region's host memory went back");
  CHECK_CU(cuMemFree_v2(released));
  CHECK_CU(cuMemFree_v2(kept));
  std::printf("ok release\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: region_places disk DIR | disk_exit DIR | release");
  if (start()) return 1;
  RegionApi api{};
  if (!api.load()) return fail("the region C API is not exported");
  const std::string_view what = argv[1];
  if (what == "disk" && argc >= 3) return disk(api, argv[2], false);
  if (what == "disk_exit" && argc >= 3) return disk(api, argv[2], true);
  if (what == "release") return release(api);
  return fail("unknown subcommand");
}
