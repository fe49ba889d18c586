// policy/node_recycler.cpp: NodeRecycler (node_recycler.h).
#include "policy/node_recycler.h"

#include <algorithm>

namespace pagefast::policy {

namespace {

constexpr size_t kMaxAlign = alignof(std::max_align_t);

void* heap_node(size_t bytes, size_t align) {
  return align > kMaxAlign ? ::operator new(bytes, std::align_val_t(align)) : ::operator new(bytes);
}

void heap_free(void* node, size_t align) noexcept {
  if (align > kMaxAlign) {
    ::operator delete(node, std::align_val_t(align));
    return;
  }
  ::operator delete(node);
}

}  // namespace

NodeRecycler::~NodeRecycler() {
  while (batches_) {
    Batch* next = batches_->next;
    ::operator delete(batches_);
    batches_ = next;
  }
}

void* NodeRecycler::take(size_t bytes, size_t align) {
  if (slot_ == 0) slot_ = (std::max(bytes, sizeof(Free)) + kMaxAlign - 1) / kMaxAlign * kMaxAlign;
  if (!recycled(bytes, align)) return heap_node(bytes, align);
  if (free_) {
    Free* node = free_;
    free_ = node->next;
    --free_count_;
    return node;
  }
  if (left_ == 0) {
    // The batch's header first (its size a multiple of kMaxAlign), then
    // its nodes, each slot_ bytes: every node aligned to kMaxAlign.
    Batch* batch = new (::operator new(sizeof(Batch) + kBatch * slot_)) Batch{batches_};
    batches_ = batch;
    ++batch_count_;
    carve_ = reinterpret_cast<unsigned char*>(batch + 1);
    left_ = kBatch;
  }
  void* node = carve_;
  carve_ += slot_;
  --left_;
  return node;
}

void NodeRecycler::give(void* node, size_t bytes, size_t align) noexcept {
  if (!node) return;
  if (!recycled(bytes, align)) {
    heap_free(node, align);
    return;
  }
  free_ = new (node) Free{free_};
  ++free_count_;
}

}  // namespace pagefast::policy
