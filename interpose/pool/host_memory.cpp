// interpose/pool/host_memory.cpp: the sleep copies' host buffers (see
// host_memory.h).
#include "interpose/pool/host_memory.h"

#include <sys/mman.h>

#include <new>
#include <vector>

#include "interpose/driver.h"

namespace pagefast::pool {
namespace {

constexpr uint64_t kHostAlign = 2ull << 20;  // a huge page
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux's value, for older headers
#endif

// Anonymous memory, 2 MiB-aligned so that transparent huge pages can back
// all of it (fewer pages for the driver to lock). Not MAP_NORESERVE: every
// byte is written, so the commit charge is the truth, and under strict
// overcommit the mmap then fails here (the chunk stays resident) rather
// than the OOM killer striking mid-copy.
void* map_aligned(uint64_t bytes) {
  const uint64_t total = bytes + kHostAlign;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uint64_t start = uint64_t(p), aligned = (start + kHostAlign - 1) & ~(kHostAlign - 1);
  if (aligned > start) munmap(p, aligned - start);
  const uint64_t tail = start + total - (aligned + bytes);
  if (tail) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: THP off is fine too
#endif
  // Not inherited by a forked child (whose pool is off anyway): the kernel
  // would otherwise copy every page-locked page into it at fork.
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_DONTFORK);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

HostMemory::Buffer* HostMemory::new_buffer(uint64_t bytes) {
  auto* buffer = new (std::nothrow) Buffer;
  if (!buffer) return nullptr;
  buffer->bytes = bytes;
  buffer->pieces = (bytes + kPieceBytes - 1) / kPieceBytes;
  buffer->pinned.reset(new (std::nothrow) std::atomic<bool>[buffer->pieces]);
  if (buffer->pinned) buffer->base = static_cast<char*>(map_aligned(bytes));
  if (!buffer->base) {
    delete buffer;
    return nullptr;
  }
  for (uint64_t i = 0; i < buffer->pieces; ++i) buffer->pinned[i].store(false, std::memory_order_relaxed);
  return buffer;
}

HostMemory::Buffer* HostMemory::map_buffer(uint64_t bytes) {
  Buffer* buffer = new_buffer(bytes);
  if (!buffer) return nullptr;
  try {
    by_base_.emplace(buffer->base, buffer);
  } catch (...) {
    munmap(buffer->base, bytes);
    delete buffer;
    return nullptr;
  }
  buffer->in_use = true;
  mapped_bytes_ += bytes;
  return buffer;
}

void HostMemory::take(const uint64_t* bytes, uint64_t count, Buffer** out) {
  std::vector<Buffer*> gone;
  take_locked(bytes, count, out, &gone);
  // Unregistered (driver calls) and unmapped with the lock let go.
  for (Buffer* buffer : gone) unmap_unlisted(buffer);
}

void HostMemory::take_locked(const uint64_t* bytes, uint64_t count, Buffer** out, std::vector<Buffer*>* gone) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Idle buffers to the copies of their size first...
  for (uint64_t i = 0; i < count; ++i) {
    out[i] = nullptr;
    auto it = idle_.find(bytes[i]);
    if (it == idle_.end()) continue;
    out[i] = it->second;
    out[i]->in_use = true;
    out[i]->ahead = false;
    idle_bytes_ -= bytes[i];
    idle_.erase(it);
  }
  // ...then the idle ones left over go back (as far as the bound of what
  // is page-locked ahead lets them stay), before fresh memory is mapped
  // and page-locked for the rest.
  uint64_t fresh = 0;
  for (uint64_t i = 0; i < count; ++i) fresh += out[i] ? 0 : bytes[i];
  release_idle_past_locked(fresh, gone);
  for (uint64_t i = 0; i < count; ++i)
    if (!out[i]) out[i] = map_buffer(bytes[i]);
}

HostMemory::Buffer* HostMemory::find(const void* host) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = by_base_.find(host);
  return it == by_base_.end() ? nullptr : it->second;
}

bool HostMemory::pin(Buffer& buffer, uint64_t index) {
  if (pinned(buffer, index)) return true;
  if (!driver::has(real_, &RealDriver::cuMemHostRegister_v2, &RealDriver::cuMemHostUnregister)) return false;
  const uint64_t bytes = piece_bytes(buffer, index);
  char* piece = buffer.base + index * kPieceBytes;
  // The pages faulted in (allocated and zeroed) here, by the kernel alone,
  // so that the driver's call only locks pages that are there: whatever
  // the driver serialises, the zeroing runs on every copy thread at once.
  // Linux 5.14 and later; older kernels answer EINVAL and the driver
  // faults them itself.
  madvise(piece, bytes, kPopulateWrite);
  if (driver::host_register(real_, piece, bytes, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) return false;
  buffer.pinned[index].store(true, std::memory_order_relaxed);
  pinned_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

void HostMemory::unregister_pieces(Buffer& buffer) {
  for (uint64_t i = 0; i < buffer.pieces; ++i) {
    if (!pinned(buffer, i)) continue;
    // A refusal leaves the piece registered: it is then leaked with the
    // mapping below (munmap of locked pages is the kernel's to sort out).
    driver::host_unregister(real_, buffer.base + i * kPieceBytes);
    buffer.pinned[i].store(false, std::memory_order_relaxed);
    pinned_bytes_.fetch_sub(piece_bytes(buffer, i), std::memory_order_relaxed);
  }
}

void HostMemory::done_copying(Buffer& buffer, bool keep) {
  if (keep && !buffer.transient) return;
  unregister_pieces(buffer);
  madvise(buffer.base, buffer.bytes, MADV_DONTNEED);
}

// REQUIRES: mutex_ held; `buffer` in neither by_base_ nor idle_ any more.
void HostMemory::drop_locked(Buffer* buffer, std::vector<Buffer*>* gone) {
  by_base_.erase(buffer->base);
  mapped_bytes_ -= buffer->bytes;
  try {
    gone->push_back(buffer);
  } catch (...) {  // no room for the list (host out of memory): now, under the lock
    unmap_unlisted(buffer);
  }
}

void HostMemory::give(Buffer& buffer, bool keep) {
  std::vector<Buffer*> gone;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    buffer.in_use = false;
    if (keep && !buffer.transient) {
      try {
        idle_.emplace(buffer.bytes, &buffer);
        idle_bytes_ += buffer.bytes;
        return;
      } catch (...) {  // no room to remember it idle: give it back
      }
    }
    drop_locked(&buffer, &gone);
  }
  for (Buffer* old : gone) unmap_unlisted(old);
}

uint64_t HostMemory::release_idle_locked(std::vector<Buffer*>* gone) {
  const uint64_t bytes = idle_bytes_;
  for (auto& entry : idle_) drop_locked(entry.second, gone);
  idle_.clear();
  idle_bytes_ = 0;
  return bytes;
}

void HostMemory::release_idle_past_locked(uint64_t fresh, std::vector<Buffer*>* gone) {
  if (!keep_bound_) {
    release_idle_locked(gone);
    return;
  }
  while (!idle_.empty() && mapped_bytes_ + fresh > keep_bound_) {
    auto it = idle_.begin();
    Buffer* buffer = it->second;
    idle_bytes_ -= buffer->bytes;
    idle_.erase(it);
    drop_locked(buffer, gone);
  }
}

void HostMemory::unmap_unlisted(Buffer* buffer) {
  unregister_pieces(*buffer);
  munmap(buffer->base, buffer->bytes);
  delete buffer;
}

uint64_t HostMemory::prelock(const uint64_t* bytes, uint64_t count, uint64_t budget, uint64_t bound) {
  std::vector<uint64_t> want;
  std::vector<Buffer*> stale;  // taken off the lists under the lock, given back after it
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    if (mapped_bytes_ != idle_bytes_) return 0;  // a sleep's or wake's copies hold buffers
    stale.reserve(idle_.size());
    std::unordered_map<uint64_t, uint64_t> wanted;  // sizes asked for, not yet matched
    for (uint64_t i = 0; i < count; ++i) ++wanted[bytes[i]];
    // Idle buffers match first; those made ahead that nothing matches now
    // were for an earlier layout of the regions: they go back.
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto w = wanted.find(it->first);
      if (w != wanted.end() && w->second > 0) {
        --w->second;
        ++it;
      } else if (it->second->ahead) {
        Buffer* old = it->second;
        idle_bytes_ -= old->bytes;
        mapped_bytes_ -= old->bytes;
        it = idle_.erase(it);
        by_base_.erase(old->base);
        stale.push_back(old);  // reserved: no throw
      } else {
        ++it;
      }
    }
    uint64_t planned = mapped_bytes_, made = 0;
    for (uint64_t i = 0; i < count; ++i) {
      auto w = wanted.find(bytes[i]);
      if (w == wanted.end() || w->second == 0) continue;  // an idle buffer is there
      --w->second;
      // A buffer larger than a round's budget goes alone in its round
      // (else a run over the budget would never be ready).
      if ((made && made + bytes[i] > budget) || planned + bytes[i] > bound) continue;
      want.push_back(bytes[i]);
      made += bytes[i];
      planned += bytes[i];
    }
  } catch (...) {
    // Out of host memory for the plan: nothing ahead (what was taken off
    // the lists still goes back).
    want.clear();
  }
  // The driver's unregister calls run without the lock.
  for (Buffer* old : stale) unmap_unlisted(old);
  uint64_t ready = 0;
  for (uint64_t size : want) {
    Buffer* buffer = new_buffer(size);
    if (!buffer) break;
    bool pinned_all = true;
    for (uint64_t p = 0; p < buffer->pieces && pinned_all; ++p) pinned_all = pin(*buffer, p);
    bool listed = false;
    if (pinned_all) {
      std::lock_guard<std::mutex> guard(mutex_);
      try {
        by_base_.emplace(buffer->base, buffer);
        listed = true;
        idle_.emplace(size, buffer);
        buffer->ahead = true;
        mapped_bytes_ += size;
        idle_bytes_ += size;
        ready += size;
      } catch (...) {
        if (listed) by_base_.erase(buffer->base);
        listed = false;
      }
    }
    if (!listed) {
      // The driver refused (or no host memory for the lists): nothing
      // ahead now; the sleep page-locks as it copies.
      unmap_unlisted(buffer);
      break;
    }
  }
  return ready;
}

uint64_t HostMemory::release_idle() {
  std::vector<Buffer*> gone;
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    bytes = release_idle_locked(&gone);
  }
  for (Buffer* old : gone) unmap_unlisted(old);
  return bytes;
}

HostMemory::Figures HostMemory::figures() {
  std::lock_guard<std::mutex> guard(mutex_);
  Figures f;
  f.mapped_bytes = mapped_bytes_;
  f.idle_bytes = idle_bytes_;
  f.buffers = by_base_.size();
  f.pinned_bytes = pinned_bytes_.load(std::memory_order_relaxed);
  return f;
}

}  // namespace pagefast::pool
