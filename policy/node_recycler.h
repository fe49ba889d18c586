// policy/node_recycler.h: nodes for a node-based container (std::map,
// std::set, std::list) whose elements come and go, without a heap
// allocation per element. NodeRecycler carves nodes from batches (one heap
// allocation for kBatch nodes) and keeps a node given back on a free list
// for the next one: a container that has held N elements makes no heap
// allocation while it holds at most N again. Nothing goes back to the heap
// before the recycler is destroyed (after every container that uses it).
// Not thread-safe: the lock that guards the containers guards it.
// RecyclingAllocator<T> is the allocator a container is given.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace pagefast::policy {

class NodeRecycler {
 public:
  static constexpr size_t kBatch = 32;  // nodes per heap allocation

  NodeRecycler() = default;
  // Frees every batch: every node taken must be back, or its container
  // gone.
  ~NodeRecycler();
  NodeRecycler(const NodeRecycler&) = delete;
  NodeRecycler& operator=(const NodeRecycler&) = delete;

  // A node of `bytes`, aligned to `align`. The first call fixes the node
  // size; a larger or more aligned request is the heap's. Throws
  // std::bad_alloc.
  void* take(size_t bytes, size_t align);
  // A node taken with the same `bytes` and `align`.
  void give(void* node, size_t bytes, size_t align) noexcept;

  size_t batches() const { return batch_count_; }
  size_t free_nodes() const { return free_count_; }  // given back, not taken again
  size_t node_bytes() const { return slot_; }

 private:
  struct Free {
    Free* next;
  };
  struct alignas(std::max_align_t) Batch {
    Batch* next;
  };
  bool recycled(size_t bytes, size_t align) const { return bytes <= slot_ && align <= alignof(std::max_align_t); }

  size_t slot_ = 0;  // bytes per node; 0 until the first take
  Free* free_ = nullptr;
  Batch* batches_ = nullptr;
  unsigned char* carve_ = nullptr;  // the next node of the newest batch
  size_t left_ = 0;                 // nodes of it not carved yet
  size_t batch_count_ = 0;
  size_t free_count_ = 0;
};

template <typename T>
class RecyclingAllocator {
 public:
  using value_type = T;

  explicit RecyclingAllocator(NodeRecycler* recycler) noexcept : recycler_(recycler) {}
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>& other) noexcept : recycler_(other.recycler()) {}

  // One element (a node) from the recycler; an array from the heap.
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(recycler_->take(sizeof(T), alignof(T)));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1) {
      recycler_->give(p, sizeof(T), alignof(T));
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }

  NodeRecycler* recycler() const noexcept { return recycler_; }

 private:
  NodeRecycler* recycler_;
};

template <typename T, typename U>
bool operator==(const RecyclingAllocator<T>& a, const RecyclingAllocator<U>& b) noexcept {
  return a.recycler() == b.recycler();
}
template <typename T, typename U>
bool operator!=(const RecyclingAllocator<T>& a, const RecyclingAllocator<U>& b) noexcept {
  return !(a == b);
}

}  // namespace pagefast::policy
