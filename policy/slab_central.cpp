// policy/slab_central.cpp: bitmap pop/push of one size class's slabs.
#include "policy/slab_central.h"

#include <new>

namespace pagefast::policy {
namespace {

constexpr uint32_t kBitsPerWord = 64;
constexpr size_t kCacheLineBytes = 64;
uint32_t words_for(uint32_t blocks) { return (blocks + kBitsPerWord - 1) / kBitsPerWord; }
void free_info(SlabBlockInfo* info) {
  if (info) operator delete[](info, std::align_val_t(kCacheLineBytes));
}

}  // namespace

SlabCentral::~SlabCentral() {
  while (Slab* slab = all_records_) {
    all_records_ = slab->all_next;
    free_info(slab->info);
    delete[] slab->free_bits;
    delete slab;
  }
}

void SlabCentral::link(Slab* slab) {
  slab->list_prev = nullptr;
  slab->list_next = partial_;
  if (partial_) partial_->list_prev = slab;
  partial_ = slab;
  slab->on_list = true;
}

void SlabCentral::unlink(Slab* slab) {
  if (slab->list_prev) slab->list_prev->list_next = slab->list_next;
  else partial_ = slab->list_next;
  if (slab->list_next) slab->list_next->list_prev = slab->list_prev;
  slab->list_prev = slab->list_next = nullptr;
  slab->on_list = false;
}

int SlabCentral::pop(SmallEntry* out, int max) {
  std::lock_guard<std::mutex> guard(mutex_);
  int n = 0;
  while (n < max && partial_) {
    Slab* slab = partial_;
    if (empty(slab)) --empty_count_;
    const uint32_t words = words_for(slab->block_count);
    for (uint32_t w = 0; w < words && n < max; ++w) {
      uint64_t bits = slab->free_bits[w];
      while (bits && n < max) {
        const uint32_t bit = uint32_t(__builtin_ctzll(bits));
        bits &= bits - 1;
        slab->free_bits[w] &= ~(uint64_t(1) << bit);
        const uint32_t index = w * kBitsPerWord + bit;
        out[n++] = SmallEntry{slab, index};
        --slab->free_count;
      }
    }
    if (slab->free_count == 0) unlink(slab);
  }
  free_blocks_ -= uint64_t(n);
  return n;
}

int SlabCentral::push(const SmallEntry* blocks, int count, Slab** released) {
  std::lock_guard<std::mutex> guard(mutex_);
  int released_count = 0;
  for (int i = 0; i < count; ++i) {
    Slab* slab = blocks[i].slab;
    const uint32_t index = blocks[i].index;
    slab->free_bits[index / kBitsPerWord] |= uint64_t(1) << (index % kBitsPerWord);
    ++slab->free_count;
    ++free_blocks_;
    if (!slab->on_list) link(slab);
    if (!empty(slab)) continue;
    if (empty_count_ < kKeptEmptySlabs) {
      ++empty_count_;
      continue;
    }
    unlink(slab);
    --slab_count_;
    free_blocks_ -= slab->block_count;
    total_blocks_ -= slab->block_count;
    released[released_count++] = slab;
  }
  return released_count;
}

void SlabCentral::add(Slab* slab) {
  std::lock_guard<std::mutex> guard(mutex_);
  ++slab_count_;
  free_blocks_ += slab->block_count;
  total_blocks_ += slab->block_count;
  ++empty_count_;
  link(slab);
}

uint32_t SlabCentral::blocks_below_free_tail(const Slab* slab) const {
  for (uint32_t w = words_for(slab->block_count); w-- > 0;) {
    uint64_t taken = ~slab->free_bits[w];
    const uint32_t in_word = slab->block_count - w * kBitsPerWord;
    if (in_word < kBitsPerWord) taken &= (uint64_t(1) << in_word) - 1;
    if (taken) return w * kBitsPerWord + (kBitsPerWord - uint32_t(__builtin_clzll(taken)));
  }
  return 0;
}

void SlabCentral::cut(Slab* slab, uint32_t block_count) {
  const uint32_t removed = slab->block_count - block_count;
  for (uint32_t i = block_count; i < slab->block_count; ++i)
    slab->free_bits[i / kBitsPerWord] &= ~(uint64_t(1) << (i % kBitsPerWord));
  slab->block_count = block_count;
  slab->free_count -= removed;
  free_blocks_ -= removed;
  total_blocks_ -= removed;
}

int SlabCentral::take_empty(Slab** out, int max) {
  std::lock_guard<std::mutex> guard(mutex_);
  int n = 0;
  for (Slab* slab = partial_; slab && n < max;) {
    Slab* next = slab->list_next;
    if (empty(slab)) {
      unlink(slab);
      --empty_count_;
      --slab_count_;
      free_blocks_ -= slab->block_count;
      total_blocks_ -= slab->block_count;
      out[n++] = slab;
    }
    slab = next;
  }
  return n;
}

Slab* SlabCentral::take_record(DevicePool* pool) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (Slab* slab = spare_records_) {
      spare_records_ = slab->list_next;
      slab->list_next = nullptr;
      return slab;
    }
  }
  const SizeClass& c = kSizeClasses[class_index_];
  Slab* slab = new (std::nothrow) Slab();
  if (!slab) return nullptr;
  // Cache-line aligned: a batch of blocks moved to one thread then shares
  // no line of records with another thread's batch.
  slab->info = new (std::align_val_t(kCacheLineBytes), std::nothrow) SlabBlockInfo[c.blocks_per_slab];
  slab->free_bits = new (std::nothrow) uint64_t[words_for(c.blocks_per_slab)];
  if (!slab->info || !slab->free_bits) {
    free_info(slab->info);
    delete[] slab->free_bits;
    delete slab;
    return nullptr;
  }
  slab->pool = pool;
  slab->class_index = uint8_t(class_index_);
  slab->set_block_bytes(c.block_bytes);
  slab->block_count = c.blocks_per_slab;
  std::lock_guard<std::mutex> guard(mutex_);
  slab->all_next = all_records_;
  all_records_ = slab;
  return slab;
}

void SlabCentral::give_record(Slab* slab) {
  std::lock_guard<std::mutex> guard(mutex_);
  slab->list_next = spare_records_;
  spare_records_ = slab;
}

}  // namespace pagefast::policy
