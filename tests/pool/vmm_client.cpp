// tests/pool/vmm_client.cpp: a program that manages VMM itself, for the
// own-VMM cache's integration tests (vmm_client_cases.py): linked with
// the fake libcuda.so.1, run with and without LD_PRELOAD=libpagefast.so.
// It prints a transcript: one line per driver call with its result (never
// an address or a handle value), so that runs can be compared line by line.
//
//   segments R P   R rounds of an expandable segment (PyTorch's shape):
//                  create P 20 MiB pages (POSIX fd handle type requested),
//                  map each at the segment's end, one cuMemSetAccess, write
//                  and check a pattern, cuMemAlloc/cuMemFree blocks in
//                  between (data checked), unmap and release every page.
//                  Every failed call is printed and survived (fault runs).
//   grow R P       R rounds of a segment growing page by page (2 MiB
//                  pages, one access call each, PyTorch's seed loop), each
//                  page filled and checked, then shrunk to nothing.
//   empty R P [MS] R rounds of PyTorch's empty_cache on an expandable
//                  segment: reserve a range, grow P 2 MiB pages in it
//                  (create, map, open each), fill and check them, unmap and
//                  release every page, free the range; the next round
//                  reserves a range of the same size again. Then idle
//                  (release_delay's decay) until the fake driver has P
//                  pages and the range back, or MS milliseconds have
//                  passed (a hang guard; on the real driver, with no
//                  counters to read, MS milliseconds).
//   two R P        R rounds of two segments (two streams' expandable
//                  segments, FSDP's for instance) growing in turns, a 2 MiB
//                  page each (create, map at its end, open it, fill it),
//                  P pages each, then both checked and shrunk.
//   semantics      every VMM call's answer on live, released, unmapped and
//                  re-mapped handles and addresses (properties, retain,
//                  granularity, pointer attributes, access, address free,
//                  export). Built for the real driver (tools/gpu, with
//                  VMM_CLIENT_REAL_DRIVER), it leaves out the calls on
//                  released handles: the H200's driver crashes on a map or
//                  an export of one and answers property queries of one
//                  with stale success (docs/DRIVER-FACTS.md), where pagefast
//                  and the fake driver refuse them.
//   oom            with 512 MiB of device memory: released pages serve a
//                  400 MiB cuMemAlloc, and freed pool memory new pages.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

namespace {

constexpr size_t kPage = 20u << 20;
#ifdef VMM_CLIENT_REAL_DRIVER
constexpr bool kRealDriver = true;
#else
constexpr bool kRealDriver = false;
#endif
int g_corrupt = 0;

CUresult say(const char* what, CUresult r) {
  std::printf("%s %d\n", what, int(r));
  return r;
}

CUmemAllocationProp device_prop(bool posix_fd) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (posix_fd) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUmemAccessDesc rw_access() {
  CUmemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = 0;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

// Writes `value` over the range through the driver, reads it back; false
// if the write was refused (a failed call before it).
bool fill_and_check(const char* what, CUdeviceptr ptr, size_t bytes, unsigned value) {
  if (say(what, cuMemsetD32(ptr, value, bytes / 4)) != CUDA_SUCCESS) return false;
  std::vector<unsigned> back(4096);
  for (size_t at : {size_t(0), bytes / 2, bytes - back.size() * 4}) {
    if (cuMemcpyDtoH(back.data(), ptr + at, back.size() * 4) != CUDA_SUCCESS) {
      std::printf("CORRUPT %s: copy refused\n", what);
      ++g_corrupt;
      return true;
    }
    for (unsigned v : back)
      if (v != value) {
        std::printf("CORRUPT %s: %x != %x\n", what, v, value);
        ++g_corrupt;
        return true;
      }
  }
  return true;
}

// Reads the range back without writing: `value` must still be there.
void expect_value(const char* what, CUdeviceptr ptr, size_t bytes, unsigned value) {
  unsigned v = 0;
  for (size_t at : {size_t(0), bytes / 2, bytes - 4}) {
    if (say(what, cuMemcpyDtoH(&v, ptr + at, 4)) != CUDA_SUCCESS) return;
    if (v != value) {
      std::printf("CORRUPT %s: %x != %x\n", what, v, value);
      ++g_corrupt;
      return;
    }
  }
}

int segments(int rounds, int pages) {
  const CUmemAllocationProp prop = device_prop(true);
  const CUmemAccessDesc access = rw_access();
  CUdeviceptr base = 0;
  if (say("reserve", cuMemAddressReserve(&base, size_t(pages) * kPage, 0, 0, 0)) != CUDA_SUCCESS) return 0;
  std::vector<CUmemGenericAllocationHandle> handles(size_t(pages), 0);
  for (int round = 0; round < rounds; ++round) {
    int mapped = 0;
    for (int i = 0; i < pages; ++i) {
      if (say("create", cuMemCreate(&handles[size_t(i)], kPage, &prop, 0)) != CUDA_SUCCESS) break;
      if (say("map", cuMemMap(base + size_t(i) * kPage, kPage, 0, handles[size_t(i)], 0)) != CUDA_SUCCESS) {
        say("release", cuMemRelease(handles[size_t(i)]));
        break;
      }
      ++mapped;
    }
    // One access call for the grown range, as PyTorch does.
    const bool open =
        mapped > 0 && say("access", cuMemSetAccess(base, size_t(mapped) * kPage, &access, 1)) == CUDA_SUCCESS;
    CUdeviceptr block = 0;
    const bool have_block = say("alloc", cuMemAlloc(&block, 3u << 20)) == CUDA_SUCCESS;
    if (have_block) fill_and_check("block", block, 3u << 20, 0xb10c0000u + unsigned(round));
    if (open) fill_and_check("segment", base, size_t(mapped) * kPage, 0x5e600000u + unsigned(round));
    if (have_block) {
      fill_and_check("block again", block, 3u << 20, 0xb10c1000u + unsigned(round));
      say("free", cuMemFree(block));
    }
    for (int i = 0; i < mapped; ++i) {
      say("unmap", cuMemUnmap(base + size_t(i) * kPage, kPage));
      say("release", cuMemRelease(handles[size_t(i)]));
    }
  }
  say("address free", cuMemAddressFree(base, size_t(pages) * kPage));
  return 0;
}

// One round of a segment growing page by page at `base` (create, map at
// the end, open that page, fill it), then checked and shrunk to nothing.
// One page grown at `at` (create, map, open; a failed call undoes the
// page), then filled with `value` and checked. False if a call failed.
bool grow_page(CUdeviceptr at, size_t page, const CUmemAllocationProp& prop, const CUmemAccessDesc& access,
               CUmemGenericAllocationHandle* handle, unsigned value) {
  if (say("create", cuMemCreate(handle, page, &prop, 0)) != CUDA_SUCCESS) return false;
  if (say("map", cuMemMap(at, page, 0, *handle, 0)) != CUDA_SUCCESS) {
    say("release", cuMemRelease(*handle));
    return false;
  }
  if (say("access", cuMemSetAccess(at, page, &access, 1)) != CUDA_SUCCESS) {
    say("unmap", cuMemUnmap(at, page));
    say("release", cuMemRelease(*handle));
    return false;
  }
  fill_and_check("page", at, page, value);
  return true;
}

void grow_and_shrink(CUdeviceptr base, int pages, size_t page, const CUmemAllocationProp& prop,
                     const CUmemAccessDesc& access, std::vector<CUmemGenericAllocationHandle>& handles,
                     unsigned pattern) {
  int grown = 0;
  while (grown < pages &&
         grow_page(base + size_t(grown) * page, page, prop, access, &handles[size_t(grown)], pattern + unsigned(grown)))
    ++grown;
  for (int i = 0; i < grown; ++i) expect_value("page kept", base + size_t(i) * page, page, pattern + unsigned(i));
  for (int i = 0; i < grown; ++i) {
    say("unmap", cuMemUnmap(base + size_t(i) * page, page));
    say("release", cuMemRelease(handles[size_t(i)]));
  }
}

// PyTorch's seed loop on an expandable segment: grow page by page (create,
// map at the end, open that page), fill each page; shrink all; again.
int grow(int rounds, int pages) {
  const CUmemAllocationProp prop = device_prop(true);
  const CUmemAccessDesc access = rw_access();
  const size_t page = 2u << 20;
  CUdeviceptr base = 0;
  if (say("reserve", cuMemAddressReserve(&base, size_t(pages) * 4 * page, 0, 0, 0)) != CUDA_SUCCESS) return 0;
  std::vector<CUmemGenericAllocationHandle> handles(static_cast<size_t>(pages), 0);
  for (int round = 0; round < rounds; ++round)
    grow_and_shrink(base, pages, page, prop, access, handles, 0x9a000000u + unsigned(round * 4096));
  say("address free", cuMemAddressFree(base, size_t(pages) * 4 * page));
  return 0;
}

// Idles until the driver has `pages` pages and a range back (pagefast's
// pagefast-trim thread returns what the program released once
// release_delay passed), read from the fake driver's call counters; at
// most `idle_ms` milliseconds. The real driver has no such counters: it
// idles `idle_ms`.
void idle_until_released(int pages, int idle_ms) {
  using Count = int (*)(const char*);
  const auto count = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "fakecuda_call_count"));
  for (int waited_ms = 0; waited_ms < idle_ms; waited_ms += 10) {
    if (count && count("cuMemRelease") >= pages && count("cuMemUnmap") >= pages && count("cuMemAddressFree") >= 1)
      return;
    usleep(10 * 1000);
  }
}

// PyTorch's empty_cache on an expandable segment, round after round: a
// fresh reservation each round, grown and shrunk, then freed.
int empty(int rounds, int pages, int idle_ms) {
  const CUmemAllocationProp prop = device_prop(true);
  const CUmemAccessDesc access = rw_access();
  const size_t page = 2u << 20;
  std::vector<CUmemGenericAllocationHandle> handles(static_cast<size_t>(pages), 0);
  for (int round = 0; round < rounds; ++round) {
    CUdeviceptr base = 0;
    if (say("reserve", cuMemAddressReserve(&base, size_t(pages) * 2 * page, 0, 0, 0)) != CUDA_SUCCESS) return 0;
    grow_and_shrink(base, pages, page, prop, access, handles, 0xe0000000u + unsigned(round * 4096));
    say("address free", cuMemAddressFree(base, size_t(pages) * 2 * page));
  }
  idle_until_released(pages, idle_ms);
  return 0;
}

// Two segments of the same properties growing in turns: pages made ahead
// for one must not be handed to the other (each page meets its own
// address), and neither segment's data is touched by the other's growth.
int two(int rounds, int pages) {
  const CUmemAllocationProp prop = device_prop(true);
  const CUmemAccessDesc access = rw_access();
  const size_t page = 2u << 20;
  CUdeviceptr base[2] = {0, 0};
  for (CUdeviceptr& b : base)
    if (say("reserve", cuMemAddressReserve(&b, size_t(pages) * 4 * page, 0, 0, 0)) != CUDA_SUCCESS) return 0;
  std::vector<CUmemGenericAllocationHandle> handles[2] = {std::vector<CUmemGenericAllocationHandle>(size_t(pages), 0),
                                                          std::vector<CUmemGenericAllocationHandle>(size_t(pages), 0)};
  for (int round = 0; round < rounds; ++round) {
    auto value = [&](int s, int i) { return 0x7000000u + unsigned(round * 65536 + s * 4096 + i); };
    int grown[2] = {0, 0};
    for (int i = 0; i < pages; ++i)
      for (int s = 0; s < 2; ++s) {
        if (grown[s] != i) continue;  // that segment stopped at a failed call
        if (grow_page(base[s] + size_t(i) * page, page, prop, access, &handles[s][size_t(i)], value(s, i))) ++grown[s];
      }
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < grown[s]; ++i) expect_value("page kept", base[s] + size_t(i) * page, page, value(s, i));
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < grown[s]; ++i) {
        say("unmap", cuMemUnmap(base[s] + size_t(i) * page, page));
        say("release", cuMemRelease(handles[s][size_t(i)]));
      }
  }
  for (CUdeviceptr b : base) say("address free", cuMemAddressFree(b, size_t(pages) * 4 * page));
  return 0;
}

void attributes(const char* what, CUdeviceptr ptr) {
  int mapped = -1;
  CUdeviceptr start = 0;
  size_t bytes = 0;
  const CUresult r1 = cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, ptr);
  const CUresult r2 = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr);
  const CUresult r3 = cuPointerGetAttribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr);
  std::printf("%s attributes %d %d %d mapped %d at start %d size %zu\n", what, int(r1), int(r2), int(r3), mapped,
              int(start == ptr), bytes);
  unsigned long long flags = 99;
  CUmemLocation location;
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = 0;
  const CUresult r4 = cuMemGetAccess(&flags, &location, ptr);
  std::printf("%s access %d flags %llu\n", what, int(r4), r4 == CUDA_SUCCESS ? flags : 99ull);
  CUdeviceptr range_base = 0;
  size_t range_bytes = 0;
  std::printf("%s address range %d\n", what, int(cuMemGetAddressRange(&range_base, &range_bytes, ptr)));
}

void properties(const char* what, CUmemGenericAllocationHandle handle) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0x5a, sizeof prop);
  const CUresult r = cuMemGetAllocationPropertiesFromHandle(&prop, handle);
  std::printf("%s properties %d", what, int(r));
  if (r == CUDA_SUCCESS)
    std::printf(" type %d location %d/%d handle types %d", int(prop.type), int(prop.location.type), prop.location.id,
                int(prop.requestedHandleTypes));
  std::printf("\n");
}

int semantics() {
  const CUmemAllocationProp prop = device_prop(true);
  const CUmemAllocationProp plain = device_prop(false);
  const CUmemAccessDesc access = rw_access();
  CUmemAccessDesc read_only = access;
  read_only.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  size_t granularity = 0;
  say("granularity", cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::printf("granularity %zu\n", granularity);
  CUdeviceptr base = 0;
  say("reserve", cuMemAddressReserve(&base, 8 * kPage, 0, 0, 0));
  CUmemGenericAllocationHandle a = 0, b = 0, c = 0, again = 0;
  say("create a", cuMemCreate(&a, kPage, &prop, 0));
  say("create b", cuMemCreate(&b, 2 * kPage, &plain, 0));
  say("create bad size", cuMemCreate(&c, kPage + 4096, &prop, 0));
  say("create flags", cuMemCreate(&c, kPage, &prop, 1));
  properties("a", a);
  properties("b", b);
  say("map a", cuMemMap(base, kPage, 0, a, 0));
  attributes("a mapped, no access", base);
  say("access a", cuMemSetAccess(base, kPage, &access, 1));
  fill_and_check("a", base, kPage, 0xaaaa0001u);
  attributes("a mapped", base);
  say("retain at a", cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + 4096)));
  std::printf("retained is a %d\n", int(again == a));
  say("release retained", cuMemRelease(again));
  say("address free with a mapping", cuMemAddressFree(base, 8 * kPage));
  say("unmap wrong size", cuMemUnmap(base, 2 * kPage));
  say("unmap a", cuMemUnmap(base, kPage));
  attributes("a unmapped", base);
  say("retain at unmapped", cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base)));
  say("access unmapped", cuMemSetAccess(base, kPage, &access, 1));
  // Same handle, same place: the data is the handle's.
  say("map a again", cuMemMap(base, kPage, 0, a, 0));
  say("access a again", cuMemSetAccess(base, kPage, &access, 1));
  const bool filled = fill_and_check("a again", base, kPage, 0xaaaa0002u);
  // Unmapped and mapped again with no query between: the same memory.
  say("unmap a quietly", cuMemUnmap(base, kPage));
  const bool mapped = say("map a quietly", cuMemMap(base, kPage, 0, a, 0)) == CUDA_SUCCESS;
  say("access a quietly", cuMemSetAccess(base, kPage, &access, 1));
  if (filled && mapped) expect_value("a kept its data", base, kPage, 0xaaaa0002u);
  say("unmap a at an offset", cuMemUnmap(base, kPage));
  const bool offset_mapped = say("map a at an offset", cuMemMap(base, 2u << 20, 2u << 20, a, 0)) == CUDA_SUCCESS;
  say("access a at an offset", cuMemSetAccess(base, 2u << 20, &access, 1));
  if (filled && offset_mapped) expect_value("a at an offset", base, 2u << 20, 0xaaaa0002u);
  say("unmap a at an offset", cuMemUnmap(base, 2u << 20));
  say("map a once more", cuMemMap(base, kPage, 0, a, 0));
  say("access a read-only", cuMemSetAccess(base, kPage, &read_only, 1));
  attributes("a read-only", base);
  say("unmap a again", cuMemUnmap(base, kPage));
  // Another handle where a was.
  say("map b at a's place", cuMemMap(base, 2 * kPage, 0, b, 0));
  say("access b", cuMemSetAccess(base, 2 * kPage, &access, 1));
  fill_and_check("b", base, 2 * kPage, 0xbbbb0001u);
  say("map a over b", cuMemMap(base, kPage, 0, a, 0));
  say("unmap b", cuMemUnmap(base, 2 * kPage));
  // b released while mapped: it stays usable through its mapping.
  say("map b", cuMemMap(base + 2 * kPage, 2 * kPage, 0, b, 0));
  say("release b while mapped", cuMemRelease(b));
  if (!kRealDriver) properties("b released while mapped", b);
  say("access b after release", cuMemSetAccess(base + 2 * kPage, 2 * kPage, &access, 1));
  fill_and_check("b after release", base + 2 * kPage, 2 * kPage, 0xbbbb0002u);
  say("retain b through its mapping", cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + 2 * kPage)));
  std::printf("retained is b %d\n", int(again == b));
  properties("b retained", again);
  say("release b again", cuMemRelease(again));
  say("unmap b for good", cuMemUnmap(base + 2 * kPage, 2 * kPage));
  if (!kRealDriver) properties("b gone", b);
  say("release b gone", cuMemRelease(b));
  // a released: pagefast and the fake driver refuse it everywhere; the
  // real driver crashes on some of these calls (kRealDriver leaves them out).
  say("release a", cuMemRelease(a));
  say("release a twice", cuMemRelease(a));
  if (!kRealDriver) {
    properties("a released", a);
    say("map a released", cuMemMap(base, kPage, 0, a, 0));
  }
  // A new handle of a's size and properties (the cache may serve a's).
  say("create d", cuMemCreate(&c, kPage, &prop, 0));
  properties("d", c);
  say("map d at a's place", cuMemMap(base, kPage, 0, c, 0));
  attributes("d mapped, no access", base);
  say("access d", cuMemSetAccess(base, kPage, &access, 1));
  fill_and_check("d", base, kPage, 0xdddd0001u);
  say("map d at an offset", cuMemMap(base + 4 * kPage, 2u << 20, 2u << 20, c, 0));
  say("access d at an offset", cuMemSetAccess(base + 4 * kPage, 2u << 20, &access, 1));
  unsigned direct = 1, through_offset = 2;
  say("read d", cuMemcpyDtoH(&direct, base + (2u << 20), 4));
  say("read d at an offset", cuMemcpyDtoH(&through_offset, base + 4 * kPage, 4));
  std::printf("offset view agrees %d\n", int(direct == through_offset));
  say("unmap d at an offset", cuMemUnmap(base + 4 * kPage, 2u << 20));
  say("unmap d", cuMemUnmap(base, kPage));
  say("release d", cuMemRelease(c));
  // Exported: another process may hold the memory, so it is never reused.
  CUmemGenericAllocationHandle e = 0, f = 0;
  say("create e", cuMemCreate(&e, kPage, &prop, 0));
  say("map e", cuMemMap(base, kPage, 0, e, 0));
  say("access e", cuMemSetAccess(base, kPage, &access, 1));
  int fd = -1;
  say("export e", cuMemExportToShareableHandle(&fd, e, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (fd >= 0) close(fd);
  say("unmap e", cuMemUnmap(base, kPage));
  say("release e", cuMemRelease(e));
  if (!kRealDriver)
    say("export e released", cuMemExportToShareableHandle(&fd, e, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  say("create f", cuMemCreate(&f, kPage, &prop, 0));
  // The fake driver never reuses a value; the H200's gives e's value to the
  // next create once e is gone, so there the line says nothing.
  if (!kRealDriver) std::printf("f is e %d\n", int(f == e));
  say("release f", cuMemRelease(f));
  say("address free", cuMemAddressFree(base, 8 * kPage));
  say("address free twice", cuMemAddressFree(base, 8 * kPage));
  size_t free_bytes = 0, total_bytes = 0;
  say("mem info", cuMemGetInfo(&free_bytes, &total_bytes));
  std::printf("free == total %d\n", int(free_bytes == total_bytes));
  return 0;
}

// Device memory is shared: what the program released (cached by pagefast)
// serves cuMemAlloc, and the pool's idle memory serves cuMemCreate.
// Run with FAKECUDA_TOTAL_MEM=512M.
int oom() {
  const CUmemAllocationProp prop = device_prop(false);
  const CUmemAccessDesc access = rw_access();
  constexpr int kPages = 10;
  CUdeviceptr base = 0;
  say("reserve", cuMemAddressReserve(&base, kPages * kPage, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> handles(kPages, 0);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kPages; ++i) say("create", cuMemCreate(&handles[size_t(i)], kPage, &prop, 0));
    for (int i = 0; i < kPages; ++i) say("map", cuMemMap(base + size_t(i) * kPage, kPage, 0, handles[size_t(i)], 0));
    say("access", cuMemSetAccess(base, kPages * kPage, &access, 1));
    fill_and_check("pages", base, kPages * kPage, 0x00770000u + unsigned(round));
    for (int i = 0; i < kPages; ++i) {
      say("unmap", cuMemUnmap(base + size_t(i) * kPage, kPage));
      say("release", cuMemRelease(handles[size_t(i)]));
    }
    CUdeviceptr big = 0;
    if (say("alloc 400M", cuMemAlloc(&big, 400u << 20)) == CUDA_SUCCESS) {
      fill_and_check("big", big, 400u << 20, 0xb1900000u + unsigned(round));
      say("free 400M", cuMemFree(big));
    }
  }
  say("address free", cuMemAddressFree(base, kPages * kPage));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    std::printf("FAIL start\n");
    return 1;
  }
  int rc = 2;
  if (!std::strcmp(argv[1], "segments") && argc == 4) rc = segments(std::atoi(argv[2]), std::atoi(argv[3]));
  if (!std::strcmp(argv[1], "semantics")) rc = semantics();
  if (!std::strcmp(argv[1], "oom")) rc = oom();
  if (!std::strcmp(argv[1], "grow") && argc == 4) rc = grow(std::atoi(argv[2]), std::atoi(argv[3]));
  if (!std::strcmp(argv[1], "two") && argc == 4) rc = two(std::atoi(argv[2]), std::atoi(argv[3]));
  if (!std::strcmp(argv[1], "empty") && (argc == 4 || argc == 5))
    rc = empty(std::atoi(argv[2]), std::atoi(argv[3]), argc == 5 ? std::atoi(argv[4]) : 0);
  if (g_corrupt) rc = 1;
  std::printf("%s %s\n", rc == 0 ? "ok" : "FAIL", argv[1]);
  return rc;
}
