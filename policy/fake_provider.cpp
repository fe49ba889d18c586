// policy/fake_provider.cpp: the emulated device behind FakeProvider. Host
// calls (mmap, mprotect, fallocate) stand in for cuMemMap, cuMemSetAccess
// and cuMemRelease; the bookkeeping enforces the VMM rules. Copies, host
// buffers and counters: fake_provider_host.cpp.
#include "policy/fake_provider.h"

#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

namespace pagefast::policy {
namespace {

constexpr uint64_t kPage = kGranuleBytes;
constexpr size_t kMaxLoggedViolations = 4096;  // bytes of violation text kept

void* reserve_host(uint64_t bytes) {
  // Over-reserve by one granule to align, then trim the excess.
  const uint64_t total = bytes + kPage;
  void* p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uint64_t start = uint64_t(p), aligned = (start + kPage - 1) & ~(kPage - 1);
  if (aligned > start) munmap(p, aligned - start);
  const uint64_t tail = start + total - (aligned + bytes);
  if (tail) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

FakeProvider::FakeProvider(uint64_t capacity_bytes, Backing backing)
    : capacity_bytes_(capacity_bytes / kPage * kPage), backing_(backing) {
  free_pages_[0] = capacity_bytes_ / kPage;
  free_page_count_ = capacity_bytes_ / kPage;
  if (backing_ == Backing::Host) {
    memfd_ = int(memfd_create("pagefast-fake-device", MFD_CLOEXEC));
    if (memfd_ < 0 || ftruncate(memfd_, off_t(capacity_bytes_)) != 0) violation("memfd for the fake device");
  }
}

FakeProvider::~FakeProvider() {
  for (const auto& [host, bytes] : host_buffers_) {
    if (backing_ == Backing::Host) munmap(host, bytes);
    else std::free(host);
  }
  for (const auto& [addr, bytes] : reservations_) munmap(reinterpret_cast<void*>(addr), bytes);
  if (memfd_ >= 0) close(memfd_);
}

void FakeProvider::violation(const std::string& what) {
  ++violations_;
  if (violation_log_.size() < kMaxLoggedViolations) violation_log_ += what + "\n";
}

bool FakeProvider::inject(Op op, ProviderStatus* status) {
  const uint64_t n = calls_[int(op)]++;
  Fault& f = faults_[int(op)];
  if (!f.armed || n < f.at || (!f.persistent && n != f.at)) return false;
  *status = f.status;
  return true;
}

void FakeProvider::fail(Op op, uint64_t nth, ProviderStatus status, bool persistent) {
  std::lock_guard<std::mutex> guard(mutex_);
  Fault& f = faults_[int(op)];
  f.armed = true;
  f.at = calls_[int(op)] + nth;
  f.persistent = persistent;
  f.status = status;
}

void FakeProvider::clear_faults() {
  std::lock_guard<std::mutex> guard(mutex_);
  for (Fault& f : faults_) f = Fault();
}

void FakeProvider::set_sync_allowed(bool allowed) {
  std::lock_guard<std::mutex> guard(mutex_);
  sync_allowed_ = allowed;
}

void FakeProvider::set_sync_fails(bool fails) {
  std::lock_guard<std::mutex> guard(mutex_);
  sync_fails_ = fails;
}

ProviderStatus FakeProvider::reserve_address(uint64_t bytes, uint64_t* base_addr) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Reserve, &status)) return status;
  if (bytes == 0 || bytes % kPage) violation("reserve of a size that is not whole granules");
  void* p = reserve_host(bytes);
  if (!p) return ProviderStatus::OutOfMemory;
  *base_addr = uint64_t(p);
  reservations_[*base_addr] = bytes;
  return ProviderStatus::Ok;
}

bool FakeProvider::take_pages(uint64_t pages, std::vector<PageRun>* runs) {
  if (pages > free_page_count_) return false;
  uint64_t missing = pages;
  for (auto it = free_pages_.begin(); missing && it != free_pages_.end();) {
    const uint64_t take = it->second < missing ? it->second : missing;
    runs->push_back(PageRun{it->first, take});
    missing -= take;
    if (take == it->second) {
      it = free_pages_.erase(it);
    } else {
      const uint64_t rest_page = it->first + take, rest = it->second - take;
      it = free_pages_.erase(it);
      free_pages_[rest_page] = rest;
    }
  }
  free_page_count_ -= pages;
  return true;
}

void FakeProvider::give_pages(const std::vector<PageRun>& runs) {
  for (const PageRun& r : runs) {
    uint64_t page = r.page, count = r.pages;
    free_page_count_ += count;
    if (memfd_ >= 0)
      fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(page * kPage), off_t(count * kPage));
    auto next = free_pages_.lower_bound(page);
    if (next != free_pages_.end() && next->first == page + count) {
      count += next->second;
      next = free_pages_.erase(next);
    }
    if (next != free_pages_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == page) {
        prev->second += count;
        continue;
      }
    }
    free_pages_[page] = count;
  }
}

ProviderStatus FakeProvider::create_chunk(Granules granules, ChunkHandle* chunk) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Create, &status)) return status;
  if (granules.count() == 0) {
    violation("create of zero granules");
    return ProviderStatus::Failed;
  }
  // take_pages() counts pass-through (take_direct) memory as used too.
  Chunk c;
  if (!take_pages(granules.count(), &c.runs)) return ProviderStatus::OutOfMemory;
  c.granules = granules.count();
  chunk->value = next_chunk_++;
  chunks_[chunk->value] = std::move(c);
  return ProviderStatus::Ok;
}

bool FakeProvider::release_chunk(ChunkHandle chunk) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Release, &status)) return false;
  auto it = chunks_.find(chunk.value);
  if (it == chunks_.end()) {
    violation("release of an unknown chunk");
    return false;
  }
  if (it->second.maps) violation("release of a chunk that is still mapped");
  give_pages(it->second.runs);
  chunks_.erase(it);
  return true;
}

bool FakeProvider::inside_reservation(uint64_t addr, uint64_t bytes) const {
  auto it = reservations_.upper_bound(addr);
  if (it == reservations_.begin()) return false;
  --it;
  return addr >= it->first && addr + bytes <= it->first + it->second;
}

bool FakeProvider::range_unmapped(uint64_t addr, uint64_t bytes) const {
  auto it = maps_.lower_bound(addr);
  if (it != maps_.end() && it->first < addr + bytes) return false;
  if (it != maps_.begin()) {
    --it;
    if (it->first + it->second.granules * kPage > addr) return false;
  }
  return true;
}

void FakeProvider::host_map(uint64_t addr, const Chunk& chunk, uint64_t offset_granules, uint64_t granules) {
  // Walk the chunk's page runs; map the part of each inside the window.
  uint64_t run_start = 0;  // chunk offset of the run, in pages
  for (const PageRun& r : chunk.runs) {
    const uint64_t lo = run_start > offset_granules ? run_start : offset_granules;
    const uint64_t hi_run = run_start + r.pages, hi_window = offset_granules + granules;
    const uint64_t hi = hi_run < hi_window ? hi_run : hi_window;
    if (lo < hi) {
      void* at = reinterpret_cast<void*>(addr + (lo - offset_granules) * kPage);
      void* p = mmap(at, (hi - lo) * kPage, PROT_NONE, MAP_SHARED | MAP_FIXED, memfd_,
                     off_t((r.page + (lo - run_start)) * kPage));
      if (p == MAP_FAILED) violation("host mmap of fake device memory failed");
    }
    run_start = hi_run;
  }
}

void FakeProvider::host_protect(uint64_t addr, uint64_t bytes, bool accessible) {
  if (mprotect(reinterpret_cast<void*>(addr), bytes, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    violation("host mprotect failed");
}

void FakeProvider::set_offset_maps(bool allowed) {
  std::lock_guard<std::mutex> guard(mutex_);
  offset_maps_ = allowed;
}

bool FakeProvider::maps_at_offset() {
  std::lock_guard<std::mutex> guard(mutex_);
  return offset_maps_;
}

ProviderStatus FakeProvider::map(uint64_t addr, ChunkHandle chunk, Granules offset, Granules granules) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Map, &status)) return status;
  auto it = chunks_.find(chunk.value);
  const uint64_t bytes = granules.bytes();
  if (it == chunks_.end()) {
    violation("map of an unknown chunk");
    return ProviderStatus::Failed;
  }
  if (!offset_maps_ && (offset.count() != 0 || granules.count() != it->second.granules)) {
    // The pool asked although maps_at_offset() said no (a map at an offset,
    // or of a part of a chunk: the H200 refuses both): a wasted driver call.
    violation("map of part of a chunk on a provider that maps whole chunks only");
    return ProviderStatus::Failed;
  }
  if (addr % kPage || granules.count() == 0 || offset.count() + granules.count() > it->second.granules) {
    violation("map outside the chunk or misaligned");
    return ProviderStatus::Failed;
  }
  if (!inside_reservation(addr, bytes)) {
    violation("map outside a reservation");
    return ProviderStatus::Failed;
  }
  if (!range_unmapped(addr, bytes)) {
    violation("map over a mapped range");
    return ProviderStatus::Failed;
  }
  if (backing_ == Backing::Host) host_map(addr, it->second, offset.count(), granules.count());
  maps_[addr] = Mapping{chunk.value, offset.count(), granules.count(), false};
  ++it->second.maps;
  return ProviderStatus::Ok;
}

bool FakeProvider::unmap(uint64_t addr, Granules granules) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Unmap, &status)) return false;
  auto it = maps_.find(addr);
  if (it == maps_.end() || it->second.granules != granules.count()) {
    violation("unmap that is not exactly one map");
    return false;
  }
  if (backing_ == Backing::Host) {
    void* p = mmap(reinterpret_cast<void*>(addr), granules.bytes(), PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) violation("host unmap failed");
  }
  --chunks_[it->second.chunk].maps;
  maps_.erase(it);
  return true;
}

ProviderStatus FakeProvider::set_access(uint64_t addr, Granules granules, const AccessSet& access) {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::SetAccess, &status)) return status;
  // The whole range must be covered by maps, back to back.
  uint64_t cursor = addr;
  const uint64_t end = addr + granules.bytes();
  while (cursor < end) {
    auto it = maps_.find(cursor);
    if (it == maps_.end()) {
      violation("set_access over an unmapped range");
      return ProviderStatus::Failed;
    }
    it->second.accessible = true;
    it->second.peers = (it->second.peers & ~access.revoked) | access.peers;
    cursor += it->second.granules * kPage;
  }
  if (cursor != end) violation("set_access ends inside a map");
  if (backing_ == Backing::Host) host_protect(addr, granules.bytes(), true);
  return ProviderStatus::Ok;
}

SyncStatus FakeProvider::synchronize() {
  std::lock_guard<std::mutex> guard(mutex_);
  ProviderStatus status;
  if (inject(Op::Sync, &status)) return SyncStatus::Failed;
  if (!sync_allowed_) return SyncStatus::NotAllowed;
  if (sync_fails_) return SyncStatus::Failed;
  // All work launched before this call has finished.
  busy_.clear();
  return SyncStatus::Done;
}

bool FakeProvider::range_open(uint64_t addr, uint64_t bytes) const {
  uint64_t cursor = addr;
  const uint64_t end = addr + bytes;
  while (cursor < end) {
    auto it = maps_.upper_bound(cursor);
    if (it == maps_.begin()) return false;
    --it;
    const uint64_t map_end = it->first + it->second.granules * kPage;
    if (cursor >= map_end || !it->second.accessible) return false;
    cursor = map_end;
  }
  return true;
}

}  // namespace pagefast::policy
