// policy/free_bins.cpp: TLSF bin arithmetic and the intrusive bin lists.
#include "policy/free_bins.h"

namespace pagefast::policy {

int FreeBins::bin_of(Granules granules) {
  const uint64_t n = granules.count();
  if (n < kExactBins) return int(n);
  const int log = 63 - __builtin_clzll(n);
  const int clamped = log > kMaxLog ? kMaxLog : log;
  const int sub = int((n >> (clamped - kSubBits)) & ((1 << kSubBits) - 1));
  return int(kExactBins) + (clamped - 4) * (1 << kSubBits) + (log > kMaxLog ? (1 << kSubBits) - 1 : sub);
}

void FreeBins::insert(Block* block) {
  const int b = bin_of(block->granules());
  block->bin = b;
  block->list_prev = nullptr;
  block->list_next = head_[b];
  if (head_[b]) head_[b]->list_prev = block;
  head_[b] = block;
  nonempty_[b / 64] |= uint64_t(1) << (b % 64);
  total_ += block->granules();
  ++block_count_;
}

void FreeBins::remove(Block* block) {
  const int b = block->bin;
  if (block->list_prev) block->list_prev->list_next = block->list_next;
  else head_[b] = block->list_next;
  if (block->list_next) block->list_next->list_prev = block->list_prev;
  if (!head_[b]) nonempty_[b / 64] &= ~(uint64_t(1) << (b % 64));
  block->list_prev = block->list_next = nullptr;
  block->bin = -1;
  total_ -= block->granules();
  --block_count_;
}

int FreeBins::next_nonempty(int from) const {
  if (from >= kBinCount) return -1;
  int word = from / 64;
  uint64_t bits = nonempty_[word] & (~uint64_t(0) << (from % 64));
  while (true) {
    if (bits) return word * 64 + __builtin_ctzll(bits);
    if (++word >= kWords) return -1;
    bits = nonempty_[word];
  }
}

Block* FreeBins::find(Granules granules) const {
  const int b = bin_of(granules);
  Block* best = nullptr;
  int looked = 0;
  for (Block* block = head_[b]; block && looked < kScanLimit; block = block->list_next, ++looked) {
    if (block->granules() < granules) continue;
    if (block->granules() == granules) return block;
    if (!best || block->granules() < best->granules()) best = block;
  }
  if (best) return best;
  // Every block of a higher bin is longer than any length of bin b.
  const int higher = next_nonempty(b + 1);
  return higher < 0 ? nullptr : head_[higher];
}

}  // namespace pagefast::policy
