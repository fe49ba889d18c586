// tools/gpu/vmm_facts.cpp: what the driver answers, and what it costs, for
// one virtual range backed by many physical allocations (docs/DRIVER-FACTS.md
// "One range, many allocations"). pagefast's stitches and any growth in
// whole small chunks depend on these answers:
//  1. cuMemSetAccess once over a range made of N separately created
//     2 MiB allocations mapped side by side;
//  2. cuMemUnmap once over such a range;
//  3. cuMemMap of a prefix of an allocation (offset 0, a smaller size);
//  4. cuMemMap at a non-zero offset (the H200 refused it: DRIVER-FACTS);
// and the time of creating, mapping and opening 256 MiB as 128 such
// allocations against one;
//  5. whether VMM calls on a second thread run at their own speed while the
//     program's thread launches work or makes VMM calls of its own (what a
//     worker opening an expandable segment's next pages ahead of the
//     program would need: docs/OWN-VMM.md "What the first pass can
//     reach"), and what a page opened and never used costs;
//  6. what is left of a first pass when pages are opened ahead
//     (docs/OWN-VMM.md: with two workers the program hardly waits,
//     yet the seed loop's first pass stays 1.7x its second): the first
//     write to a freshly opened page against a write to the same page
//     again (the GPU's first touch of a new mapping), and this thread's
//     launch rate while one and while two workers open pages.
// Every answer is printed; contents are checked through cuMemsetD8/
// cuMemcpyDtoH over the whole range. No pagefast: run it plain. Exit 0
// unless a call that must succeed failed.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

const char* name_of(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define MUST(call)                                                                    \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      std::printf("error %s at %s:%d: %s\n", name_of(r_), __FILE__, __LINE__, #call); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CUmemAllocationProp prop_of(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

CUmemAccessDesc access_of(int device) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

// Writes a distinct byte per 2 MiB piece of [base, base + n * piece), reads
// all back; true when every byte is right.
bool contents_ok(CUdeviceptr base, size_t pieces, size_t piece) {
  for (size_t i = 0; i < pieces; ++i) MUST(cuMemsetD8(base + i * piece, (unsigned char)(i * 7 + 1), piece));
  std::vector<unsigned char> host(pieces * piece);
  MUST(cuMemcpyDtoH(host.data(), base, host.size()));
  for (size_t i = 0; i < pieces; ++i)
    for (size_t k = 0; k < piece; k += 4096)
      if (host[i * piece + k] != (unsigned char)(i * 7 + 1)) return false;
  return true;
}

// One 20 MiB page of an expandable segment: create, map at addr, open.
struct Page {
  CUmemGenericAllocationHandle handle = 0;
};

constexpr size_t kPageBytes = size_t(20) << 20;

double open_pages(CUdeviceptr base, int count, const CUmemAllocationProp& prop, const CUmemAccessDesc& access,
                  std::vector<Page>* pages) {
  const double t0 = now_us();
  for (int i = 0; i < count; ++i) {
    Page p;
    MUST(cuMemCreate(&p.handle, kPageBytes, &prop, 0));
    MUST(cuMemMap(base + i * kPageBytes, kPageBytes, 0, p.handle, 0));
    MUST(cuMemSetAccess(base + i * kPageBytes, kPageBytes, &access, 1));
    pages->push_back(p);
  }
  return (now_us() - t0) / count;
}

double close_pages(CUdeviceptr base, std::vector<Page>* pages) {
  const double t0 = now_us();
  for (size_t i = 0; i < pages->size(); ++i) {
    MUST(cuMemUnmap(base + i * kPageBytes, kPageBytes));
    MUST(cuMemRelease((*pages)[i].handle));
  }
  const double per = pages->empty() ? 0 : (now_us() - t0) / pages->size();
  pages->clear();
  return per;
}

// Launches small memsets on `stream` until stop; returns launches per ms.
double launch_until(CUstream stream, CUdeviceptr target, const std::atomic<bool>& stop) {
  uint64_t launches = 0;
  const double t0 = now_us();
  while (!stop.load(std::memory_order_relaxed)) {
    MUST(cuMemsetD8Async(target, (unsigned char)launches, 4096, stream));
    if (++launches % 256 == 0) MUST(cuStreamSynchronize(stream));
  }
  MUST(cuStreamSynchronize(stream));
  return launches / ((now_us() - t0) / 1000.0);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Sections 5 and 6: kRounds rounds over two reserved ranges of kPages pages
// (a, b), a stream and a small target for launches; given back when the
// section ends.
constexpr int kPages = 32, kRounds = 5;
struct TwoRanges {
  CUdeviceptr a = 0, b = 0, target = 0;
  CUstream stream = nullptr;
  std::vector<Page> pa, pb;
  TwoRanges() {
    MUST(cuMemAddressReserve(&a, kPages * kPageBytes, 0, 0, 0));
    MUST(cuMemAddressReserve(&b, kPages * kPageBytes, 0, 0, 0));
    MUST(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    MUST(cuMemAlloc(&target, 4096));
  }
  ~TwoRanges() {
    MUST(cuMemFree(target));
    MUST(cuStreamDestroy(stream));
    MUST(cuMemAddressFree(a, kPages * kPageBytes));
    MUST(cuMemAddressFree(b, kPages * kPageBytes));
  }
};

// This thread's launch rate with nothing else going on, over 50 ms.
double launch_for_50ms(CUstream stream, CUdeviceptr target) {
  std::atomic<bool> stop{false};
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
  });
  const double rate = launch_until(stream, target, stop);
  timer.join();
  return rate;
}

void threads_section(CUcontext ctx, const CUmemAllocationProp& prop, const CUmemAccessDesc& access) {
  TwoRanges r;
  const CUdeviceptr a = r.a, b = r.b;
  const CUstream stream = r.stream;
  const CUdeviceptr target = r.target;
  std::vector<Page>& pa = r.pa;
  std::vector<Page>& pb = r.pb;

  // Alone: pages opened and closed on this thread; launches alone.
  std::vector<double> alone_open, alone_close, alone_launch, worker_open, worker_close, busy_launch;
  std::vector<double> main_open_alone, main_open_busy, worker_open_vmm;
  for (int round = 0; round < kRounds; ++round) {
    alone_open.push_back(open_pages(a, kPages, prop, access, &pa));
    alone_close.push_back(close_pages(a, &pa));
    alone_launch.push_back(launch_for_50ms(stream, target));

    // A worker opens and closes pages while this thread launches.
    std::atomic<bool> done{false};
    double w_open = 0, w_close = 0;
    std::thread worker([&] {
      MUST(cuCtxSetCurrent(ctx));
      w_open = open_pages(a, kPages, prop, access, &pa);
      w_close = close_pages(a, &pa);
      done = true;
    });
    busy_launch.push_back(launch_until(stream, target, done));
    worker.join();
    worker_open.push_back(w_open);
    worker_close.push_back(w_close);

    // This thread opens pages of its own (range b) alone, then while the
    // worker opens others (range a): does the driver serialise them?
    main_open_alone.push_back(open_pages(b, kPages, prop, access, &pb));
    close_pages(b, &pb);
    std::atomic<bool> go{false};
    double w2 = 0;
    std::thread worker2([&] {
      MUST(cuCtxSetCurrent(ctx));
      while (!go.load()) {
      }
      w2 = open_pages(a, kPages, prop, access, &pa);
    });
    go = true;
    main_open_busy.push_back(open_pages(b, kPages, prop, access, &pb));
    worker2.join();
    worker_open_vmm.push_back(w2);
    close_pages(a, &pa);
    close_pages(b, &pb);
  }
  std::printf("VMM calls on a second thread (%d pages of 20 MiB, create + map + access; medians of %d rounds):\n",
              kPages, kRounds);
  std::printf("  this thread alone: open %.1f us/page, unmap + release %.1f us/page; launches alone %.0f /ms\n",
              median_of(alone_open), median_of(alone_close), median_of(alone_launch));
  std::printf(
      "  worker while this thread launches: open %.1f us/page, unmap + release %.1f us/page; "
      "launches meanwhile %.0f /ms\n",
      median_of(worker_open), median_of(worker_close), median_of(busy_launch));
  std::printf("  both threads opening pages at once: this thread %.1f us/page (alone %.1f), worker %.1f us/page\n",
              median_of(main_open_busy), median_of(main_open_alone), median_of(worker_open_vmm));
}

// 6: first touch, and launches beside two workers.
void first_pass_section(CUcontext ctx, const CUmemAllocationProp& prop, const CUmemAccessDesc& access) {
  TwoRanges r;
  const CUdeviceptr a = r.a, b = r.b;
  const CUstream stream = r.stream;
  const CUdeviceptr target = r.target;
  std::vector<Page>& pa = r.pa;
  std::vector<Page>& pb = r.pb;
  std::vector<double> first, again, one_worker, two_workers, alone;
  auto write_all = [&](CUdeviceptr base) {
    const double t0 = now_us();
    for (int i = 0; i < kPages; ++i) MUST(cuMemsetD8Async(base + i * kPageBytes, (unsigned char)i, kPageBytes, stream));
    MUST(cuStreamSynchronize(stream));
    return (now_us() - t0) / kPages;
  };
  for (int round = 0; round < kRounds; ++round) {
    open_pages(a, kPages, prop, access, &pa);
    first.push_back(write_all(a));
    again.push_back(write_all(a));
    close_pages(a, &pa);

    alone.push_back(launch_for_50ms(stream, target));
    for (int workers = 1; workers <= 2; ++workers) {
      std::atomic<int> left{workers};
      std::atomic<bool> done{false};
      std::vector<std::thread> ts;
      for (int w = 0; w < workers; ++w)
        ts.emplace_back([&, w] {
          MUST(cuCtxSetCurrent(ctx));
          std::vector<Page>& mine = w == 0 ? pa : pb;
          const CUdeviceptr base = w == 0 ? a : b;
          open_pages(base, kPages, prop, access, &mine);
          close_pages(base, &mine);
          if (left.fetch_sub(1) == 1) done = true;
        });
      (workers == 1 ? one_worker : two_workers).push_back(launch_until(stream, target, done));
      for (auto& t : ts) t.join();
    }
  }
  std::printf("What is left of a first pass (%d pages of 20 MiB; medians of %d rounds):\n", kPages, kRounds);
  std::printf("  memset of a freshly opened page %.1f us/page, of the same page again %.1f us/page\n", median_of(first),
              median_of(again));
  std::printf("  launches alone %.0f /ms, while one worker opens and closes pages %.0f /ms, while two %.0f /ms\n",
              median_of(alone), median_of(one_worker), median_of(two_workers));
}

}  // namespace

int main() {
  MUST(cuInit(0));
  CUdevice dev;
  MUST(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
  MUST(cuCtxSetCurrent(ctx));
  int driver = 0;
  MUST(cuDriverGetVersion(&driver));
  const CUmemAllocationProp prop = prop_of(0);
  const CUmemAccessDesc access = access_of(0);
  size_t gran = 0;
  MUST(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::printf("driver %d, granularity %zu\n", driver, gran);

  constexpr size_t kPieces = 128;
  const size_t piece = gran, total = kPieces * gran;
  CUdeviceptr va = 0;
  MUST(cuMemAddressReserve(&va, 4 * total, 0, 0, 0));

  // 1, 2: many allocations, one access call, one unmap call.
  std::vector<CUmemGenericAllocationHandle> handles(kPieces);
  double t0 = now_us();
  for (auto& h : handles) MUST(cuMemCreate(&h, piece, &prop, 0));
  double t1 = now_us();
  for (size_t i = 0; i < kPieces; ++i) MUST(cuMemMap(va + i * piece, piece, 0, handles[i], 0));
  double t2 = now_us();
  CUresult r = cuMemSetAccess(va, total, &access, 1);
  double t3 = now_us();
  std::printf("one cuMemSetAccess over %zu separate 2 MiB allocations: %s (%.0f us)\n", kPieces, name_of(r), t3 - t2);
  std::printf("  create %zu x 2 MiB: %.0f us; map %zu: %.0f us\n", kPieces, t1 - t0, kPieces, t2 - t1);
  const bool access_ok = r == CUDA_SUCCESS;
  if (!access_ok) {
    t2 = now_us();
    for (size_t i = 0; i < kPieces; ++i) MUST(cuMemSetAccess(va + i * piece, piece, &access, 1));
    t3 = now_us();
    std::printf("  %zu cuMemSetAccess calls instead: %.0f us\n", kPieces, t3 - t2);
  }
  std::printf("  contents through the whole range: %s\n", contents_ok(va, kPieces, piece) ? "ok" : "WRONG");
  t0 = now_us();
  r = cuMemUnmap(va, total);
  t1 = now_us();
  std::printf("one cuMemUnmap over %zu mappings: %s (%.0f us)\n", kPieces, name_of(r), t1 - t0);
  if (r != CUDA_SUCCESS) {
    t0 = now_us();
    for (size_t i = 0; i < kPieces; ++i) MUST(cuMemUnmap(va + i * piece, piece));
    t1 = now_us();
    std::printf("  %zu cuMemUnmap calls instead: %.0f us\n", kPieces, t1 - t0);
  }
  t0 = now_us();
  for (auto& h : handles) MUST(cuMemRelease(h));
  t1 = now_us();
  std::printf("release %zu x 2 MiB: %.0f us\n", kPieces, t1 - t0);

  // The same 256 MiB as one allocation, for comparison.
  CUmemGenericAllocationHandle big;
  t0 = now_us();
  MUST(cuMemCreate(&big, total, &prop, 0));
  MUST(cuMemMap(va, total, 0, big, 0));
  MUST(cuMemSetAccess(va, total, &access, 1));
  t1 = now_us();
  std::printf("one 256 MiB allocation: create + map + access %.0f us\n", t1 - t0);

  // 3: a prefix of an allocation; 4: at an offset.
  r = cuMemMap(va + total, 2 * piece, 0, big, 0);
  std::printf("cuMemMap of a 4 MiB prefix of a 256 MiB allocation: %s\n", name_of(r));
  if (r == CUDA_SUCCESS) MUST(cuMemUnmap(va + total, 2 * piece));
  r = cuMemMap(va + total, 2 * piece, 2 * piece, big, 0);
  std::printf("cuMemMap at a 4 MiB offset into it: %s\n", name_of(r));
  if (r == CUDA_SUCCESS) MUST(cuMemUnmap(va + total, 2 * piece));
  MUST(cuMemUnmap(va, total));
  MUST(cuMemRelease(big));
  MUST(cuMemAddressFree(va, 4 * total));

  // 5: a second thread.
  threads_section(ctx, prop, access);
  // 6: what is left of a first pass.
  first_pass_section(ctx, prop, access);
  std::printf("done\n");
  return 0;
}
