// policy/blocks.h: the host-side records of pool memory: a Block is a run
// of whole granules (a large allocation, a slab's backing, a free range, a
// piece lent to a stitch, or a stitch); a Slab cuts a block into equal
// small blocks. Device memory cannot hold our links (the host cannot touch
// it), so every record lives here.
//
// Records are type-stable: they are recycled through MetaPool and never
// handed back to malloc, because the lock-free free path may read a stale
// page-map entry (see page_map.h) and must always find a valid object.
// Fields that lock-free readers look at are relaxed atomics; the rest
// change only under the device lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>
#include <vector>

#include "policy/page_map.h"
#include "policy/units.h"

namespace pagefast::policy {

// The glue's number for the context an allocation was made in, so that
// destroying the context gives its blocks back (DevicePool::blocks_of_context);
// 0: not tracked. Numbers are never reused within a process.
using ContextTag = uint16_t;
constexpr ContextTag kNoContextTag = 0;

enum class BlockState : uint8_t {
  Spare,        // in the MetaPool
  Free,         // in the arena's free bins (or the free-stitch list)
  Used,         // handed out to the program
  Quarantined,  // freed by the program; device work may still use it
  Cached,       // retired, held by a thread cache for reuse
  Lent,         // a home range whose physical memory a stitch maps now
  SlabBacking,  // cut into small blocks by a Slab
};

struct Slab;
struct StitchInfo;

struct Block : Span {
  Block() : Span{SpanKind::Block, nullptr} {}

  uint64_t addr() const { return addr_.load(std::memory_order_relaxed); }
  Granules granules() const { return Granules(granules_.load(std::memory_order_relaxed)); }
  uint64_t end_addr() const { return addr() + granules().bytes(); }
  void set_range(uint64_t addr, Granules granules) {
    addr_.store(addr, std::memory_order_relaxed);
    granules_.store(granules.count(), std::memory_order_relaxed);
  }
  BlockState load_state() const { return BlockState(state.load(std::memory_order_acquire)); }
  void store_state(BlockState s) { state.store(uint8_t(s), std::memory_order_release); }
  // The one transition the free path makes, atomically: it is what turns a
  // racing double free into exactly one success.
  bool quarantine_if_used() {
    uint8_t expected = uint8_t(BlockState::Used);
    return state.compare_exchange_strong(expected, uint8_t(BlockState::Quarantined), std::memory_order_acq_rel);
  }

  std::atomic<uint64_t> addr_{0};
  std::atomic<uint64_t> granules_{0};
  std::atomic<uint8_t> state{uint8_t(BlockState::Spare)};
  // 1 while CUDA IPC has an export of the live allocation
  // (DevicePool::mark_exported): its free is IPC's to decide first, so the
  // hit leaves it to the slow path (free_step's `exported_aside`).
  std::atomic<uint8_t> exported{0};
  // Of the live allocation, for cuMemGetAddressRange and BUFFER_ID.
  std::atomic<uint64_t> requested_bytes{0};
  std::atomic<uint64_t> buffer_id{0};
  // The context the live allocation was made in.
  std::atomic<ContextTag> context_tag{kNoContextTag};

  // Address neighbours in the same contiguous mapped run of home memory
  // (chunks mapped next to each other form one run). Device lock.
  Block* addr_prev = nullptr;
  Block* addr_next = nullptr;
  // Links of the free bin or list the block is on. Device lock.
  Block* list_prev = nullptr;
  Block* list_next = nullptr;
  int bin = -1;
  // In a chunk of its own, grown for a request over a chunk (big_chunks):
  // on the arena's big bins, never cut for smaller requests. Device lock.
  bool big = false;
  // Set on a stitched block: its pieces and maps. Device lock.
  StitchInfo* stitch = nullptr;
  // Set on a Lent piece: the stitch that maps it.
  Block* lent_to = nullptr;
  Slab* slab = nullptr;
};

// A stitch: fresh address space mapping the physical memory of free home
// pieces from several places (GMLake). Physical memory may be mapped at two
// addresses at once in VMM; the pieces' home addresses stay mapped and are
// simply not handed out while the stitch holds them.
struct StitchInfo {
  struct Map {
    uint64_t addr;
    Granules granules;
    uint64_t chunk_home_addr;  // the chunk whose memory it maps
    Granules chunk_offset;     // where in that chunk (wake maps it again)
  };
  std::vector<Block*> pieces;  // Lent home blocks, in stitch order
  std::vector<Map> maps;       // one per provider map() (per chunk segment)
};

// Per small block, written on the hot path by whoever allocates or frees it.
struct SlabBlockInfo {
  std::atomic<uint64_t> buffer_id{0};
  std::atomic<uint32_t> requested_bytes{0};
  std::atomic<uint8_t> live{0};                        // 1 while the program owns it
  std::atomic<uint8_t> exported{0};                    // as Block::exported
  std::atomic<ContextTag> context_tag{kNoContextTag};  // as Block::context_tag
};
// The export mark and the context tag fit the padding: a small block still
// costs 16 bytes.
static_assert(sizeof(SlabBlockInfo) == 16, "a small block's host record is 16 bytes");

struct Slab : Span {
  Slab() : Span{SpanKind::Slab, nullptr} {}

  uint64_t base_addr() const { return base_addr_.load(std::memory_order_relaxed); }

  std::atomic<uint64_t> base_addr_{0};
  std::atomic<uint8_t> active{0};  // 0 once handed back to the arena
  uint8_t class_index = 0;
  uint32_t block_bytes = 0;
  uint32_t block_count = 0;
  uint64_t block_inverse = 0;  // set_block_bytes: 2^64 / block_bytes, rounded up

  void set_block_bytes(uint32_t bytes) {
    block_bytes = bytes;
    block_inverse = ~uint64_t(0) / bytes + 1;
  }
  // offset / block_bytes, as a multiply and a shift where a divide costs
  // 10 to 40 cycles on the free's path: exact for every offset below 2^32
  // (a 64-bit reciprocal of a 32-bit divisor; Lemire, Kaser and Kurz,
  // "Faster Remainder by Direct Computation", 2019), and a slab spans at
  // most kMaxSlabGranules (size_classes.h). Past that the answer may be
  // wrong: every caller checks it against the offset (index * block_bytes
  // == offset, or the block's range).
  uint64_t block_index(uint64_t offset) const {
    return uint64_t((static_cast<unsigned __int128>(block_inverse) * offset) >> 64);
  }
  Block* backing = nullptr;       // the arena block cut by this slab
  SlabBlockInfo* info = nullptr;  // block_count entries

  // Central state, under the class lock: which blocks sit in the slab.
  uint64_t* free_bits = nullptr;
  uint32_t free_count = 0;
  Slab* list_prev = nullptr;
  Slab* list_next = nullptr;
  bool on_list = false;
  Slab* all_next = nullptr;  // every record of the class, for teardown
};

// The CUDA IPC export mark (Block::exported, SlabBlockInfo::exported) of
// the block of `span` that starts at `addr`; NULL for an address that
// starts none (DevicePool::mark_exported, exported).
inline std::atomic<uint8_t>* export_mark(const Span* span, uint64_t addr) {
  if (!span) return nullptr;
  if (span->kind == SpanKind::Slab) {
    const Slab* slab = static_cast<const Slab*>(span);
    const uint64_t base = slab->base_addr();
    if (addr < base) return nullptr;
    const uint64_t at = slab->block_index(addr - base);
    if (at >= slab->block_count || at * slab->block_bytes != addr - base) return nullptr;
    return &slab->info[at].exported;
  }
  Block* block = static_cast<Block*>(const_cast<Span*>(span));
  return block->addr() == addr ? &block->exported : nullptr;
}

// The arena block under a span: a block is its own, a slab's is the block
// it cuts (NULL for a slab not backed yet, or for no span).
inline Block* arena_block_of(Span* span) {
  return !span ? nullptr : span->kind == SpanKind::Slab ? static_cast<Slab*>(span)->backing : static_cast<Block*>(span);
}
inline const Block* arena_block_of(const Span* span) { return arena_block_of(const_cast<Span*>(span)); }

// A free list of records, refilled in batches of kRefill on slow paths,
// linked through the record's own list_next (no container that could
// throw). Not thread-safe: the owner's lock protects it.
template <typename T, int kRefill = 64>
class MetaPool {
 public:
  static constexpr int kBatch = kRefill;

  MetaPool() = default;
  MetaPool(const MetaPool&) = delete;
  MetaPool& operator=(const MetaPool&) = delete;
  // Production pools live as long as the process; this runs in tests.
  ~MetaPool() {
    while (Batch* b = batches_) {
      batches_ = b->next;
      delete b;
    }
  }

  // NULL only when the host is out of memory.
  T* take() {
    if (!spare_ && !refill()) return nullptr;
    T* t = spare_;
    spare_ = t->list_next;
    t->list_next = nullptr;
    --spare_count_;
    return t;
  }
  void give(T* t) {
    t->list_next = spare_;
    spare_ = t;
    ++spare_count_;
  }
  // Makes sure the next `count` take() calls succeed without allocating,
  // so that a multi-step change cannot fail half-way.
  bool reserve(int count) {
    while (spare_count_ < count)
      if (!refill()) return false;
    return true;
  }
  // Every record ever made, spare or not (for teardown in tests).
  template <typename Visit>
  void for_each_record(Visit visit) {
    for (Batch* b = batches_; b; b = b->next)
      for (T& t : b->records) visit(&t);
  }

 private:
  struct Batch {
    T records[kBatch];
    Batch* next = nullptr;
  };
  bool refill() {
    Batch* batch = new (std::nothrow) Batch();
    if (!batch) return false;
    batch->next = batches_;
    batches_ = batch;
    for (T& t : batch->records) give(&t);
    return true;
  }
  T* spare_ = nullptr;
  int spare_count_ = 0;
  Batch* batches_ = nullptr;
};

}  // namespace pagefast::policy
