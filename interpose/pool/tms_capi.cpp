// interpose/pool/tms_capi.cpp: torch_memory_saver's C entry points
// tms_pause and tms_resume (interpose/pagefast.h; docs/SLEEP.md "Coming
// from torch_memory_saver"), over the tags python/pagefast's drop-in makes
// for a torch_memory_saver tag T: "tms.<code>.<epoch>", the epoch a
// decimal number and the code T's UTF-8 bytes with A-Z a-z 0-9 _ kept and
// every other byte written as '-' and two lowercase hex digits, or, where
// that is longer than 40 characters, ':' and the 16 lowercase hex digits
// of the FNV-1a 64-bit hash of the bytes. Nothing here makes a CUDA call of
// its own: sleep and wake of each tag do.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "interpose/pagefast.h"
#include "interpose/pool/region.h"
#include "interpose/pool_api.h"

namespace {

constexpr size_t kMaxCode = 40;
constexpr char kStem[] = "tms.";

bool kept(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

// T's code (out: kMaxCode + 1 bytes at least).
void code_of(const char* tag, char* out) {
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;
  bool fits = true;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(tag); *p && fits; ++p) {
    const size_t need = kept(*p) ? 1 : 3;
    if (n + need > kMaxCode) {
      fits = false;
    } else if (need == 1) {
      out[n++] = static_cast<char>(*p);
    } else {
      out[n++] = '-';
      out[n++] = hex[*p >> 4];
      out[n++] = hex[*p & 15];
    }
  }
  out[n] = '\0';
  if (fits) return;
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(tag); *p; ++p) {
    h ^= *p;
    h *= 1099511628211ull;
  }
  std::snprintf(out, kMaxCode + 1, ":%016llx", static_cast<unsigned long long>(h));
}

// Whether `name` is an epoch of the code `code` (nullptr: of any code).
bool is_epoch(const char* name, const char* code) {
  if (std::strncmp(name, kStem, sizeof kStem - 1) != 0) return false;
  const char* rest = name + sizeof kStem - 1;
  const char* dot = std::strrchr(rest, '.');
  if (!dot || !dot[1]) return false;
  for (const char* p = dot + 1; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  const size_t length = static_cast<size_t>(dot - rest);
  if (code) return std::strlen(code) == length && std::strncmp(rest, code, length) == 0;
  return std::memchr(rest, '.', length) == nullptr;
}

// Sleeps (or wakes) each epoch of `tag` (nullptr: of every tag) that is
// awake (asleep). 0, or -1 when a sleep or wake was refused (the rest were
// still tried).
int each_epoch(const char* tag, bool sleep) {
  using pagefast::pool::region::kMaxNameBytes;
  using pagefast::pool::region::kMaxSlots;
  char code[kMaxCode + 1];
  if (tag) code_of(tag, code);
  // The names copied first: an empty tag's slot may change hands meanwhile.
  char names[kMaxSlots][kMaxNameBytes];
  int count = 0;
  const int slots = pagefast::pool::region::slot_count();
  for (int slot = 1; slot < slots && count < kMaxSlots; ++slot) {
    const char* name = nullptr;
    if (!pagefast::pool::region::slot_info(slot, &name, nullptr) || !name) continue;
    if (!is_epoch(name, tag ? code : nullptr)) continue;
    bool seen = false;  // a name's keep and discard slots are one tag
    for (int i = 0; i < count && !seen; ++i) seen = std::strcmp(names[i], name) == 0;
    if (!seen) std::snprintf(names[count++], kMaxNameBytes, "%s", name);
  }
  int answer = 0;
  for (int i = 0; i < count; ++i) {
    if (pagefast_tag_asleep(names[i]) != (sleep ? 0 : 1)) continue;  // unknown by now, or already so
    const int r = sleep ? pagefast_sleep_tag(names[i], PAGEFAST_SLEEP_FAIL) : pagefast_wake_tag(names[i]);
    if (r == -1) answer = -1;
  }
  return answer;
}

}  // namespace

namespace pagefast::pool {  // exported by interpose/capi.cpp
int tms_pause(const char* tag) { return each_epoch(tag, true); }
int tms_resume(const char* tag) { return each_epoch(tag, false); }
}  // namespace pagefast::pool
