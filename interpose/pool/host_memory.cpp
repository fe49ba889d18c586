// interpose/pool/host_memory.cpp: the sleep copies' host buffers (see
// host_memory.h).
#include "interpose/pool/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "interpose/driver.h"

namespace pagefast::pool {
namespace {

constexpr uint64_t kHostAlign = 2ull << 20;  // a huge page

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
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

HostMemory::Buffer* HostMemory::map_buffer(uint64_t bytes) {
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
  try {
    buffers_.push_back(buffer);
  } catch (...) {
    munmap(buffer->base, bytes);
    delete buffer;
    return nullptr;
  }
  buffer->in_use = true;
  return buffer;
}

void HostMemory::take(const uint64_t* bytes, uint64_t count, Buffer** out) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Idle buffers to the copies of their size first...
  for (uint64_t i = 0; i < count; ++i) {
    out[i] = nullptr;
    for (Buffer* b : buffers_)
      if (!b->in_use && b->bytes == bytes[i]) {
        b->in_use = true;
        out[i] = b;
        break;
      }
  }
  // ...then the idle ones left over go back, before fresh memory is
  // mapped and page-locked for the rest.
  release_idle_locked();
  for (uint64_t i = 0; i < count; ++i)
    if (!out[i]) out[i] = map_buffer(bytes[i]);
}

HostMemory::Buffer* HostMemory::find(const void* host) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (Buffer* b : buffers_)
    if (b->base == host) return b;
  return nullptr;
}

bool HostMemory::pin(Buffer& buffer, uint64_t index) {
  if (pinned(buffer, index)) return true;
  if (!driver::has(real_, &RealDriver::cuMemHostRegister_v2, &RealDriver::cuMemHostUnregister)) return false;
  const uint64_t bytes = piece_bytes(buffer, index);
  if (driver::host_register(real_, buffer.base + index * kPieceBytes, bytes, CU_MEMHOSTREGISTER_PORTABLE) !=
      CUDA_SUCCESS)
    return false;
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
  if (keep) return;
  unregister_pieces(buffer);
  madvise(buffer.base, buffer.bytes, MADV_DONTNEED);
}

void HostMemory::release(Buffer* buffer) {
  unregister_pieces(*buffer);
  munmap(buffer->base, buffer->bytes);
  delete buffer;
}

void HostMemory::give(Buffer& buffer, bool keep) {
  std::lock_guard<std::mutex> guard(mutex_);
  buffer.in_use = false;
  if (keep) return;
  auto it = std::find(buffers_.begin(), buffers_.end(), &buffer);
  if (it != buffers_.end()) buffers_.erase(it);
  release(&buffer);
}

uint64_t HostMemory::release_idle_locked() {
  uint64_t bytes = 0;
  auto idle = std::stable_partition(buffers_.begin(), buffers_.end(), [](Buffer* b) { return b->in_use; });
  for (auto it = idle; it != buffers_.end(); ++it) {
    bytes += (*it)->bytes;
    release(*it);
  }
  buffers_.erase(idle, buffers_.end());
  return bytes;
}

uint64_t HostMemory::release_idle() {
  std::lock_guard<std::mutex> guard(mutex_);
  return release_idle_locked();
}

HostMemory::Figures HostMemory::figures() {
  std::lock_guard<std::mutex> guard(mutex_);
  Figures f;
  for (const Buffer* b : buffers_) {
    f.mapped_bytes += b->bytes;
    if (!b->in_use) f.idle_bytes += b->bytes;
  }
  f.buffers = buffers_.size();
  f.pinned_bytes = pinned_bytes_.load(std::memory_order_relaxed);
  return f;
}

}  // namespace pagefast::pool
