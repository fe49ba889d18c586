// policy/tags.h: a tag's limits and a tag's figures, named once
// (docs/SLEEP.md). The limits hold the regions (interpose/pool/region.h),
// the wire's records (interpose/ipc/ipc_wire.h), the live segment's
// (interpose/live/segment.h), pagefast-ctl's check of --tag and, through
// the check of tests/tools/test_python_constants.py, the Python package
// (python/pagefast/_constants.py); each of those states its own sizes
// from these and checks them at compile time where a layout is fixed.
//
// The figures' table feeds every record of a tag's figures: the glue's
// (interpose/pool_api.h TagFigures), the outputs' (policy/pool_stats.h
// TagStats, and from it the JSON and Prometheus), the wire's
// (wire::TagState) and the live segment's (live::TagRecord); they copy
// each other with copy_tag_fields.
#pragma once

#include <cstddef>
#include <cstdint>

// The limits as numbers the preprocessor can spell in messages.
#define PAGEFAST_TAG_MAX_CHARS 63  // a tag's name, without its NUL
#define PAGEFAST_MAX_TAGS 31       // (name, policy) pairs a process holds at once
#define PAGEFAST_MAX_DEPTH 8       // regions open on one thread
#define PAGEFAST_TAG_TEXT_(x) #x
#define PAGEFAST_TAG_TEXT(x) PAGEFAST_TAG_TEXT_(x)
// What a tag may be, in words (the messages of region.cpp, pagefast-ctl
// and the Python package say it so).
#define PAGEFAST_TAG_RULE "1 to " PAGEFAST_TAG_TEXT(PAGEFAST_TAG_MAX_CHARS) " characters of A-Z a-z 0-9 _ . : -"

// X(name, meaning): one tag's figures over every device (the pool's and
// the program's own VMM memory). Bytes are the memory's: a sleep moves
// them from resident to asleep. Counters never go back. A new figure
// changes the wire's TagState (its size is checked: interpose/ipc/
// ipc_wire.h) and the live segment's layout (live::kVersion).
#define PAGEFAST_TAG_FIELDS(X)                                                   \
  X(resident_bytes, "device memory of the tag mapped now")                       \
  X(asleep_bytes, "device memory of the tag released by sleep")                  \
  X(kept_bytes, "of the asleep bytes, those whose contents wait in host memory") \
  X(in_use_bytes, "the pool's blocks of the tag handed out to the program")      \
  X(sleeps, "sleeps of the tag")                                                 \
  X(wakes, "wakes of the tag")

// A record's members from the table: PAGEFAST_TAG_FIELDS(PAGEFAST_TAG_MEMBER).
#define PAGEFAST_TAG_MEMBER(name, meaning) uint64_t name = 0;

namespace pagefast::policy {

constexpr int kTagMaxChars = PAGEFAST_TAG_MAX_CHARS;
constexpr size_t kTagNameBytes = kTagMaxChars + 1;  // a name with its NUL
constexpr int kMaxTags = PAGEFAST_MAX_TAGS;
constexpr int kTagSlots = kMaxTags + 1;  // the region slots: 0 (outside any region) and one per tag
constexpr int kMaxRegionDepth = PAGEFAST_MAX_DEPTH;
// The answer of the tagged C calls (pagefast_sleep_tag, pagefast_wake_tag,
// pagefast_tag_asleep) for a tag no region ever had.
constexpr int kUnknownTag = -2;
#define PF_TAG_COUNT(name, meaning) +1
constexpr int kTagFields = 0 PAGEFAST_TAG_FIELDS(PF_TAG_COUNT);
#undef PF_TAG_COUNT

// A character a tag's name may have: A-Z a-z 0-9 _ . : -
constexpr bool tag_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

// Whether `name` (NUL-terminated; NULL: no) is a tag: 1 to kTagMaxChars
// characters, each a tag_char.
constexpr bool good_tag(const char* name) {
  if (!name || !*name) return false;
  int n = 0;
  for (const char* c = name; *c; ++c)
    if (++n > kTagMaxChars || !tag_char(*c)) return false;
  return true;
}
static_assert(good_tag("kv_cache-1.2:a") && !good_tag("") && !good_tag("a b"), "the tag rule");

// Copies the table's figures between two records of a tag.
template <typename To, typename From>
void copy_tag_fields(To& to, const From& from) {
#define PF_TAG_COPY(name, meaning) to.name = from.name;
  PAGEFAST_TAG_FIELDS(PF_TAG_COPY)
#undef PF_TAG_COPY
}

}  // namespace pagefast::policy
