// policy/pool_stats.h: the numbers one device's pool reports, named once
// in a field table from which the struct, the JSON object and the C API's
// copy (interpose/pool/pool_capi.cpp, checked field by field) are derived.
// One code path, two outputs (jemalloc's emitter). The figures of one tag
// are named so too (policy/tags.h); TagStats is their record for the
// stats document, the live segment and Prometheus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/tags.h"

namespace pagefast::policy {

// X(name, meaning)
#define PAGEFAST_POOL_STATS_FIELDS(X)                                                 \
  X(reserved_bytes, "virtual address space reserved")                                 \
  X(mapped_bytes, "physical memory created and mapped")                               \
  X(in_use_bytes, "handed out to the program (size classes and granules rounded up)") \
  X(idle_bytes, "mapped and not in use: free, cached, quarantined")                   \
  X(peak_in_use_bytes, "highest in_use_bytes seen (sampled on slow paths and reads)") \
  X(hits, "allocations served without growing")                                       \
  X(growths, "chunks created")                                                        \
  X(stitches, "stitched mappings made from scattered free memory")                    \
  X(releases, "chunks released to the driver")                                        \
  X(synchronizations, "cuCtxSynchronize calls made to retire the quarantine")         \
  X(passthroughs, "allocations handed to the real driver")                            \
  X(quarantined_bytes, "freed, waiting for a synchronisation")                        \
  X(cached_bytes, "retired blocks held by thread caches")                             \
  X(ooms, "requests the pool could not serve after releasing what it could")          \
  X(growth_ns, "time spent creating and mapping chunks")                              \
  X(synchronization_ns, "time spent in cuCtxSynchronize")                             \
  X(release_ns, "time spent unmapping and releasing")

// Fields after those: in the JSON only, not in the C API's struct (whose
// size is fixed: interpose/pagefast.h) nor in the live segment's layout.
#define PAGEFAST_POOL_STATS_JSON_FIELDS(X)                                                         \
  X(peak_mapped_bytes, "highest mapped_bytes: the most physical memory the pool held at once")     \
  X(headroom_releases, "growths that first released free chunks to keep the headroom")             \
  X(ahead_growths, "growths made ahead of need on the pagefast-grow thread (of growths)")          \
  X(headroom_relieved_bytes, "idle memory given back because free memory fell under the headroom") \
  X(oom_released_bytes, "idle memory given back after the driver answered a call out of memory")   \
  X(oom_retries, "driver calls retried after that")                                                \
  X(given_back_bytes, "idle memory given back at a free that took it over keep_idle")              \
  X(neighbour_released_bytes, "idle memory other pagefast processes on the device gave back when asked")

struct PoolStats {
#define PF_STATS_FIELD(name, meaning) uint64_t name = 0;
  PAGEFAST_POOL_STATS_FIELDS(PF_STATS_FIELD)
  PAGEFAST_POOL_STATS_JSON_FIELDS(PF_STATS_FIELD)
#undef PF_STATS_FIELD
};
#define PF_STATS_COUNT(name, meaning) +1
constexpr int kPoolStatsPublicFields = 0 PAGEFAST_POOL_STATS_FIELDS(PF_STATS_COUNT);
#undef PF_STATS_COUNT

// {"reserved_bytes": 1, ...} in table order. json_fields false: without
// PAGEFAST_POOL_STATS_JSON_FIELDS (figures read from the live segment,
// which does not carry them).
std::string stats_json_object(const PoolStats& stats, bool json_fields = true);

// A tag's figures as the outputs show them (the name copied: a reader of
// the live segment has no process to point into).
struct TagStats {
  std::string name;
  int slot = 0;         // 1..kMaxTags (policy/tags.h)
  bool keep = false;    // the regions' policy: "keep" or "discard"
  bool asleep = false;  // "asleep" or "awake"
  PAGEFAST_TAG_FIELDS(PAGEFAST_TAG_MEMBER)
};

// {"name": "kv", "slot": 1, "policy": "keep", "state": "asleep",
// "resident_bytes": 0, ...} in table order.
std::string tag_json_object(const TagStats& tag);
// [{...}, ...]: every tag, in slot order.
std::string tags_json_array(const std::vector<TagStats>& tags);

}  // namespace pagefast::policy
