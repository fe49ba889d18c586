// policy/fake_provider_host.cpp: FakeProvider's copies between the
// emulated device and host memory (sleep and wake), its host buffers,
// device-work tracking (launch, assert_idle) and the counters tests read.
// The emulated mappings themselves are in fake_provider.cpp.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "policy/fake_provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::policy {
namespace {

constexpr uint64_t kPage = kGranuleBytes;

}  // namespace

void FakeProvider::set_copy_piece(uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  copy_piece_ = bytes;
}

void FakeProvider::drop_host(void* host, uint64_t bytes) {
  auto it = host_buffers_.find(host);
  if (it == host_buffers_.end() || it->second != bytes) {
    violation("host_free of a buffer never allocated, or of another size");
    return;
  }
  host_buffers_.erase(it);
  if (backing_ == Backing::Host) munmap(host, bytes);
  else std::free(host);
}

bool FakeProvider::copy_one(HostCopy& copy, bool to_host) {
  if (!range_open(copy.addr, copy.bytes)) {
    violation(to_host ? "copy from a range that is not mapped and open"
                      : "copy to a range that is not mapped and open");
    copy.status = ProviderStatus::Failed;
    return false;
  }
  const uint64_t piece = copy_piece_ ? copy_piece_ : copy.bytes;
  for (uint64_t done = 0; done < copy.bytes; done += piece) {
    if (inject(Op::Copy, &copy.status)) return false;
    const uint64_t n = copy.bytes - done < piece ? copy.bytes - done : piece;
    char* host = static_cast<char*>(copy.host) + done;
    char* device = reinterpret_cast<char*>(copy.addr + done);
    if (backing_ == Backing::Host) std::memcpy(to_host ? host : device, to_host ? device : host, n);
  }
  copy.status = ProviderStatus::Ok;
  return true;
}

void FakeProvider::copy_to_host(HostCopy* copies, uint64_t count) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (uint64_t i = 0; i < count; ++i) {
    HostCopy& copy = copies[i];
    copy.host = nullptr;
    if (inject(Op::HostAlloc, &copy.status)) continue;
    void* host = backing_ == Backing::Host
                     ? mmap(nullptr, copy.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                     : std::malloc(1);
    if (!host || host == MAP_FAILED) {
      copy.status = ProviderStatus::OutOfMemory;
      continue;
    }
    host_buffers_[host] = copy.bytes;
    ++host_buffers_made_;
    copy.host = host;
    if (!copy_one(copy, true)) {
      drop_host(host, copy.bytes);
      copy.host = nullptr;
    }
  }
}

void FakeProvider::copy_from_host(HostCopy* copies, uint64_t count) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (uint64_t i = 0; i < count; ++i) {
    HostCopy& copy = copies[i];
    if (!host_buffers_.count(copy.host)) {
      violation("copy from host memory never allocated");
      copy.status = ProviderStatus::Failed;
      continue;
    }
    // Held (kSleepHoldHost): a wake that copies all or none may undo it.
    if (copy_one(copy, false) && backing_ == Backing::Host && !(copy.mode & kSleepHoldHost))
      std::memset(copy.host, 0xDB, copy.bytes);
  }
}

void FakeProvider::host_free(void* host, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (host) drop_host(host, bytes);
}

uint64_t FakeProvider::live_host_buffers() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return host_buffers_.size();
}

uint64_t FakeProvider::host_buffers_made() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return host_buffers_made_;
}

void FakeProvider::launch(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t& end = busy_[addr];
  if (end < addr + bytes) end = addr + bytes;
}

void FakeProvider::assert_idle(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = busy_.lower_bound(addr);
  if (it != busy_.end() && it->first < addr + bytes) {
    violation("memory handed out while device work may use it");
    return;
  }
  if (it != busy_.begin() && std::prev(it)->second > addr) violation("memory handed out while device work may use it");
}

uint64_t FakeProvider::calls(Op op) const {
  std::lock_guard<std::mutex> guard(mutex_);
  return calls_[int(op)];
}

uint64_t FakeProvider::used_bytes() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return capacity_bytes_ - free_page_count_ * kPage;
}

bool FakeProvider::device_free_bytes(uint64_t* free_bytes) {
  if (!reports_free_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> guard(mutex_);
  *free_bytes = free_page_count_ * kPage;
  return true;
}

uint64_t FakeProvider::live_chunks() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return chunks_.size();
}

uint64_t FakeProvider::live_maps() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return maps_.size();
}

uint64_t FakeProvider::peers_at(uint64_t addr) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = maps_.upper_bound(addr);
  if (it == maps_.begin()) return 0;
  --it;
  if (addr >= it->first + it->second.granules * kPage || !it->second.accessible) return 0;
  return it->second.peers;
}

bool FakeProvider::physical_at(uint64_t addr, ChunkHandle* chunk, Granules* offset) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = maps_.upper_bound(addr);
  if (it == maps_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.granules * kPage) return false;
  chunk->value = it->second.chunk;
  *offset = Granules(it->second.offset_granules + (addr - it->first) / kPage);
  return true;
}

uint64_t FakeProvider::violations() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return violations_;
}

std::string FakeProvider::violation_log() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return violation_log_;
}

bool FakeProvider::take_direct(uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t pages = (bytes + kPage - 1) / kPage;
  if (pages > free_page_count_) return false;
  free_page_count_ -= pages;  // the fake driver's own allocations: counted, not placed
  direct_bytes_ += pages * kPage;
  return true;
}

void FakeProvider::give_direct(uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t pages = (bytes + kPage - 1) / kPage;
  free_page_count_ += pages;
  direct_bytes_ -= pages * kPage;
}

}  // namespace pagefast::policy
