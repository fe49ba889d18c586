// policy/free_bins.h: the free blocks of one arena, segregated by length
// (TLSF: exact bins for short runs, then 8 bins per power of two, and a
// bitmap of the non-empty ones). Insert and remove are O(1); find is O(1)
// plus a bounded scan of one bin. Intrusive (Block::list_prev/next), so it
// never allocates: the large-block path takes it under the device lock on
// every arena hit.
#pragma once

#include <cstdint>

#include "policy/blocks.h"

namespace pagefast::policy {

class FreeBins {
 public:
  static constexpr uint64_t kExactBins = 16;  // lengths 1..15 granules each have a bin
  static constexpr int kSubBits = 3;          // 8 bins per power of two above that
  static constexpr int kMaxLog = 47;          // 2^47 granules: far beyond any device
  static constexpr int kBinCount = int(kExactBins) + (kMaxLog - 4 + 1) * (1 << kSubBits);
  // Blocks looked at in the request's own bin before taking a larger bin:
  // bounds the time under the device lock.
  static constexpr int kScanLimit = 16;

  void insert(Block* block);
  void remove(Block* block);
  // A free block of at least `granules`, the tightest fit among those
  // looked at; NULL if none. Does not remove it.
  Block* find(Granules granules) const;

  Granules total() const { return total_; }
  uint64_t block_count() const { return block_count_; }
  bool empty() const { return block_count_ == 0; }

  // Visits free blocks from the largest bins down; stops when `visit`
  // returns false. `visit` must not change the bins.
  template <typename Visit>
  void for_each_largest_first(Visit visit) const {
    for (int b = kBinCount - 1; b >= 1; --b)
      for (Block* block = head_[b]; block; block = block->list_next)
        if (!visit(block)) return;
  }

  static int bin_of(Granules granules);

 private:
  int next_nonempty(int from) const;

  static constexpr int kWords = (kBinCount + 63) / 64;
  Block* head_[kBinCount] = {};
  uint64_t nonempty_[kWords] = {};
  Granules total_;
  uint64_t block_count_ = 0;
};

}  // namespace pagefast::policy
