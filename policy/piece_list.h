// policy/piece_list.h: the physical memory behind one block, as CUDA IPC
// exports it (Arena::physical_pieces, DevicePool::export_of): one piece per
// chunk segment, in address order. A block within one or two chunks (every
// block but a stitch's) is listed without a heap allocation; a longer list
// spills to the heap (push_back may then throw std::bad_alloc).
#pragma once

#include <cstddef>
#include <vector>

#include "policy/provider.h"
#include "policy/units.h"

namespace pagefast::policy {

// A run of one chunk's physical memory.
struct PhysicalPiece {
  ChunkHandle chunk;
  Granules offset;  // into the chunk
  Granules granules;
  Granules chunk_granules;  // the whole chunk's size
};

class PieceList {
 public:
  static constexpr size_t kInline = 2;

  void clear() {
    count_ = 0;
    spill_.clear();
  }
  void push_back(const PhysicalPiece& piece) {
    if (count_ < kInline) {
      inline_[count_++] = piece;
      return;
    }
    if (count_ == kInline) spill_.assign(inline_, inline_ + kInline);
    spill_.push_back(piece);
    ++count_;
  }
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const PhysicalPiece* begin() const { return count_ > kInline ? spill_.data() : inline_; }
  const PhysicalPiece* end() const { return begin() + count_; }
  const PhysicalPiece& operator[](size_t i) const { return begin()[i]; }

 private:
  PhysicalPiece inline_[kInline] = {};
  size_t count_ = 0;
  std::vector<PhysicalPiece> spill_;  // all of them once more than kInline
};

}  // namespace pagefast::policy
