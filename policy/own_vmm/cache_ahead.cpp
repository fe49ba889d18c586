// policy/own_vmm/cache_ahead.cpp: where the own-VMM cache lets
// growth ahead go, and the pages it hands back
// (policy/own_vmm/growth_ahead.h says what and why).
#include <algorithm>
#include <vector>

#include "policy/own_vmm/cache.h"

namespace pagefast::policy::own_vmm {

uint64_t Cache::pages_ahead(uint64_t from, uint64_t page, int device, uint64_t want) {
  auto res = reservations_.upper_bound(from - 1);
  if (res == reservations_.begin()) return 0;
  --res;
  const uint64_t res_end = res->first + res->second;
  if (from < res->first || from >= res_end) return 0;
  uint64_t pages = want;
  if (pages > (res_end - from) / page) pages = (res_end - from) / page;
  const uint64_t room = room_on(device);
  const uint64_t held = cached_bytes_[device];
  if (room < held) return 0;
  if (pages > (room - held) / page) pages = (room - held) / page;
  // Only onto addresses the cache knows to be free of the program's maps
  // and of pages already queued.
  auto clash = maps_.lower_bound(from);
  if (clash != maps_.end() && clash->first < from + pages * page) pages = (clash->first - from) / page;
  return ahead_.clamp_to_jobs(from, page, pages);
}

void Cache::note_misdirected(uint64_t handle, uint64_t addr) {
  const Handle* h = tracked(handle);
  if (!h) return;
  auto made = noted_deferred(handle, *h);
  if (made == maps_.end() || made->first == addr || !made->second.ahead) return;
  made->second.ahead = false;  // counted once
  ++stats_.ahead_misdirected;
  const std::string& key = h->key;
  // Pages made ahead for this key miss more than they hit: growth ahead
  // stops for it. The pages already made and not taken stay cached (and
  // decay), but go last: in the order the program's pages first grew they
  // would stand between the two segments' own pages and hand each segment
  // the other's from then on.
  if (!ahead_.note_misdirected(key)) return;
  auto queue = free_.find(key);
  if (queue == free_.end()) return;
  std::vector<uint64_t> untaken;
  for (auto it = queue->second.begin(); it != queue->second.end();) {
    auto at = noted_deferred(it->second, *tracked(it->second));
    if (it->first.first != UINT64_MAX && at != maps_.end() && at->second.ahead) {
      untaken.push_back(it->second);
      it = queue->second.erase(it);
    } else {
      ++it;
    }
  }
  for (uint64_t h : untaken) queue->second.emplace(std::make_pair(UINT64_MAX, arrivals_++), h);
}

void Cache::maybe_prefetch(uint64_t addr, uint64_t end, const std::string& descs) {
  // The range must end with a live whole-handle mapping of a tracked,
  // unshared handle, inside one of the program's reservations.
  auto last = maps_.lower_bound(end);
  if (last == maps_.begin()) return;
  --last;
  const Mapping& m = last->second;
  if (last->first < addr || last->first + m.bytes != end || m.deferred || m.offset != 0) return;
  const Handle* h = tracked(m.handle);
  if (!h || h->shared) return;
  const HandleFacts facts = ledger_.facts_held(m.handle);
  if (facts.bytes != m.bytes) return;
  const uint64_t page = m.bytes;
  const std::string key = h->key;
  if (ahead_.off(key)) return;
  const int next = ahead_.batch(key);
  const uint64_t pages = pages_ahead(end, page, facts.device, uint64_t(next));
  if (pages == 0) return;
  ahead_.grow(end, page, pages, key, facts.device, descs);
}

void Cache::publish_ahead(const AheadPage& made) {
  const uint64_t at = made.at, page = made.bytes, handle = made.handle;
  const std::string& key = made.key;
  const int device = made.device;
  ledger_.made_held(handle, page, device);  // kept: its cache part is fresh
  Handle& rec = *tracked(handle);
  rec.key = key;
  rec.cached = true;
  rec.deferred_at = at;
  rec.deferred_maps = 1;
  Mapping& map = maps_[at];
  map = Mapping{};
  map.bytes = page;
  map.handle = handle;
  map.seq = made.seq;
  map.deferred = true;
  map.ahead = true;
  apply_access(map, made.descs);
  deferred_count_.fetch_add(1, std::memory_order_relaxed);
  cached_bytes_[device] += page;
  // A page finished after its key stopped growing ahead goes last, as the
  // untaken ones did then (note_misdirected).
  free_[key].emplace(std::make_pair(ahead_.off(key) ? UINT64_MAX : made.seq, arrivals_++), handle);
  ++stats_.prefetched;
}

void Cache::maybe_continue(uint64_t addr, const Mapping& m) {
  if (!ahead_.continues()) return;
  const Handle* h = tracked(m.handle);
  if (!h) return;
  const std::string key = h->key;
  if (ahead_.off(key)) return;
  // The pages ahead of this one not yet taken: made (published) or still
  // to be made by a live job of this key. The next batch goes after
  // them, queued behind that job, so that the worker never idles while
  // the program catches up with it.
  uint64_t at = addr + m.bytes, left = 0;
  for (bool more = true; more;) {
    more = false;
    for (auto it = maps_.find(at); it != maps_.end() && it->second.ahead && it->second.deferred; it = maps_.find(at)) {
      ++left;
      at += it->second.bytes;
      more = true;
    }
    if (ahead_.skip_queued(key, &at, &left)) more = true;
  }
  const int next = ahead_.batch(key);
  const uint64_t most = uint64_t(ahead_.prefetch_pages());
  if (left * 2 > uint64_t(next) || left >= most) return;
  if (!ahead_.has_descs(key)) return;
  // Never more than prefetch_pages ahead of the program.
  const uint64_t want = std::min<uint64_t>(uint64_t(next), most - left);
  const int device = ledger_.facts_held(m.handle).device;
  const uint64_t pages = pages_ahead(at, m.bytes, device, want);
  if (pages == 0) return;
  ahead_.queue_next(at, m.bytes, pages, key, device);
}

}  // namespace pagefast::policy::own_vmm
