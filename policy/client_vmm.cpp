// policy/client_vmm.cpp: the client VMM cache (policy/client_vmm.h says
// what and why; docs/VMM-CLIENTS.md the residual differences).
#include "policy/client_vmm.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace pagefast::policy {

std::string ClientVmmCache::slot_of(uint64_t bytes, const std::string& prop) {
  std::string slot = prop;
  slot.append(reinterpret_cast<const char*>(&bytes), sizeof bytes);
  return slot;
}

bool ClientVmmCache::take(uint64_t bytes, const std::string& prop, uint64_t* handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::string key = slot_of(bytes, prop);
  auto slot = free_.find(key);
  // The worker is making the next page of these properties: it comes
  // sooner than one the driver would create here (and it is the page the
  // program will map next). A worker that does not deliver within a
  // second (it never should) is not waited for again: the job stops.
  AheadWait timer{*this};
  while (jobs_count_.load(std::memory_order_relaxed) != 0) {
    // The job's first page not yet published comes before the first cached
    // page of these properties in the order of growth: the program maps in
    // order.
    const uint64_t lowest =
        slot == free_.end() || slot->second.empty() ? UINT64_MAX : slot->second.begin()->first.first;
    bool wait = false;
    for (const AheadJob& j : jobs_)
      if (j.slot == key && !j.stop && (j.inflight || j.begun < j.pages) && j.first_unpublished_seq() < lowest)
        wait = true;
    if (!wait) break;
    timer.begin();
    // wait_until on the system clock: a steady-clock wait would need
    // pthread_cond_clockwait (glibc 2.34; docs/PACKAGING.md's baseline is 2.28).
    if (jobs_cv_.wait_until(lock, std::chrono::system_clock::now() + std::chrono::seconds(1)) ==
        std::cv_status::timeout) {
      for (AheadJob& j : jobs_)
        if (j.slot == key) j.stop = true;
      erase_finished_jobs();
      slot = free_.find(key);
      break;
    }
    slot = free_.find(key);
  }
  timer.end();
  if (slot == free_.end() || slot->second.empty()) {
    ++stats_.create_misses;
    return false;
  }
  // Lowest deferred address first: a segment grows from its start again,
  // so each handle meets its own deferred mapping.
  const uint64_t h = slot->second.begin()->second;
  slot->second.erase(slot->second.begin());
  Handle& rec = handles_[h];
  rec.cached = false;
  rec.cached_at_ns = 0;
  rec.refs = 1;
  cached_bytes_[rec.device] -= rec.bytes;
  ++stats_.create_hits;
  *handle = h;
  return true;
}

void ClientVmmCache::note_created(uint64_t handle, uint64_t bytes, const std::string& prop, int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  Handle& rec = handles_[handle];
  rec = Handle{};
  rec.bytes = bytes;
  rec.slot = slot_of(bytes, prop);
  rec.device = device;
  rec.refs = 1;
}

int ClientVmmCache::release(uint64_t handle) {
  std::unique_lock<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) {
    guard.unlock();
    return driver_.release(handle);
  }
  Handle& rec = it->second;
  if (rec.refs <= 0) return kClientInvalidValue;  // released already
  if (--rec.refs > 0 || rec.live_maps > 0) return kClientOk;
  return retire(handle);
}

int ClientVmmCache::retire(uint64_t handle) {
  Handle& rec = handles_[handle];
  if (!rec.shared) {
    const uint64_t room = driver_.cache_room(rec.device);
    uint64_t& held = cached_bytes_[rec.device];
    if (room >= held && room - held >= rec.bytes) {
      rec.cached = true;
      held += rec.bytes;
      // The order of its deferred mapping (the key take() orders by): the
      // one its last deferred unmap noted, checked; else a scan (a handle
      // mapped at two addresses, or a mapping flushed since).
      uint64_t order = UINT64_MAX;
      auto noted = noted_deferred(handle, rec);
      if (noted != maps_.end()) {
        order = noted->second.seq;
      } else if (rec.deferred_maps > 0) {
        for (auto& [addr, m] : maps_)
          if (m.handle == handle && m.deferred && m.seq < order) order = m.seq;
      }
      free_[rec.slot].emplace(std::make_pair(order, arrivals_++), handle);
      return kClientOk;
    }
  }
  return release_for_real(handle);
}

int ClientVmmCache::release_for_real(uint64_t handle) {
  flush_handle(handle);
  const int r = driver_.release(handle);
  // A refused release leaves a handle nobody can name again: forget it
  // (at worst its memory stays until exit, as the driver would keep it).
  handles_.erase(handle);
  return r;
}

bool ClientVmmCache::exact_cover(uint64_t addr, uint64_t bytes, std::vector<MapIt>* out) {
  out->clear();
  uint64_t at = addr;
  const uint64_t end = addr + bytes;
  if (bytes == 0 || end < addr) return false;
  for (auto it = maps_.find(addr); it != maps_.end() && at < end; ++it) {
    if (it->first != at || it->second.deferred) return false;
    out->push_back(it);
    at += it->second.bytes;
  }
  return at == end;
}

bool ClientVmmCache::flush_mapping(MapIt it) {
  if (driver_.unmap(it->first, it->second.bytes) != kClientOk) return false;
  deferred_count_.fetch_sub(1, std::memory_order_relaxed);
  auto h = handles_.find(it->second.handle);
  if (h != handles_.end()) --h->second.deferred_maps;
  ++stats_.real_unmaps;
  maps_.erase(it);
  return true;
}

bool ClientVmmCache::flush_overlap(uint64_t addr, uint64_t bytes) {
  if (deferred_count_.load(std::memory_order_relaxed) == 0) return true;
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  auto it = maps_.upper_bound(addr);
  if (it != maps_.begin()) --it;
  bool all = true;
  while (it != maps_.end() && it->first < end) {
    auto next = std::next(it);
    if (it->second.deferred && it->first + it->second.bytes > addr && !flush_mapping(it)) all = false;
    it = next;
  }
  return all;
}

ClientVmmCache::MapIt ClientVmmCache::noted_deferred(uint64_t handle, const Handle& rec) {
  auto it = maps_.find(rec.deferred_at);
  return it != maps_.end() && it->second.handle == handle && it->second.deferred ? it : maps_.end();
}

void ClientVmmCache::flush_handle(uint64_t handle) {
  // Its one deferred mapping, where its last deferred unmap noted it (a
  // trim of thousands of cached pages stays linear); else a scan.
  auto h = handles_.find(handle);
  if (h != handles_.end()) {
    if (h->second.deferred_maps == 0) return;
    auto noted = noted_deferred(handle, h->second);
    if (h->second.deferred_maps == 1 && noted != maps_.end()) {
      flush_mapping(noted);
      return;
    }
  }
  for (auto it = maps_.begin(); it != maps_.end();) {
    auto next = std::next(it);
    if (it->second.handle == handle && it->second.deferred) flush_mapping(it);
    it = next;
  }
}

void ClientVmmCache::flush_at(uint64_t addr) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock, addr, 1);
  flush_overlap(addr, 1);
}

int ClientVmmCache::map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto h = handles_.find(handle);
  const bool tracked = h != handles_.end();
  if (tracked && h->second.refs <= 0) return kClientInvalidValue;  // released by the program
  if (tracked && flags == 0) {
    auto it = maps_.find(addr);
    if (it != maps_.end() && it->second.deferred && it->second.handle == handle && it->second.bytes == bytes &&
        it->second.offset == offset) {
      it->second.deferred = false;
      // Its place in the order of growth is now (a page made ahead had a
      // place only among the pages made ahead with it).
      it->second.seq = ++map_seq_;
      deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      --h->second.deferred_maps;
      ++h->second.live_maps;
      ++stats_.revived_maps;
      if (it->second.ahead) {
        it->second.ahead = false;
        maybe_continue(addr, it->second);
      }
      return kClientOk;
    }
  }
  if (tracked && prefetch_pages_ > 0) note_misdirected(handle, addr);
  settle(lock, addr, bytes);
  // settle() may have waited, unlocked: the worker's pages went into
  // handles_ meanwhile, and an insert may rehash it.
  h = handles_.find(handle);
  if (tracked && h == handles_.end()) return driver_.map(addr, bytes, offset, handle, flags);
  flush_overlap(addr, bytes);
  // A cached handle taken back and mapped somewhere else than its deferred
  // mapping (a page made ahead for another segment, a page released in the
  // middle of a segment and taken for its end): the deferred mapping goes
  // first, so that the driver sees the handle mapped where the program
  // maps it and nowhere else. The H200 answered CUDA_ERROR_UNKNOWN to such
  // a map while the old mapping stayed (docs/DRIVER-FACTS.md), which
  // PyTorch raised as "CUDA driver error: unknown error".
  if (tracked && h->second.deferred_maps > 0) flush_handle(handle);
  const int r = driver_.map(addr, bytes, offset, handle, flags);
  if (r == kClientOk && !tracked) {
    auto res = reservations_.upper_bound(addr);
    if (res != reservations_.begin() && addr < std::prev(res)->first + std::prev(res)->second)
      foreign_.insert(std::prev(res)->first);
  }
  if (r == kClientOk && tracked) {
    Mapping m;
    m.bytes = bytes;
    m.offset = offset;
    m.handle = handle;
    m.seq = ++map_seq_;
    maps_[addr] = m;
    ++h->second.live_maps;
  }
  return r;
}

int ClientVmmCache::unmap(uint64_t addr, uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock, addr, bytes);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool deferrable = true;
    for (MapIt it : cover) deferrable = deferrable && !handles_[it->second.handle].shared;
    if (deferrable) {
      std::vector<uint64_t> orphans;  // retired after the loop: a release erases mappings
      for (MapIt it : cover) {
        it->second.deferred = true;
        deferred_count_.fetch_add(1, std::memory_order_relaxed);
        ++stats_.deferred_unmaps;
        Handle& rec = handles_[it->second.handle];
        rec.deferred_at = it->first;
        ++rec.deferred_maps;
        if (--rec.live_maps == 0 && rec.refs == 0) orphans.push_back(it->second.handle);
      }
      for (uint64_t handle : orphans) retire(handle);
      return kClientOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.unmap(addr, bytes);
  if (r != kClientOk) return r;
  const uint64_t end = addr + bytes;
  std::vector<uint64_t> orphans;
  for (auto it = maps_.lower_bound(addr); it != maps_.end() && it->first < end;) {
    auto next = std::next(it);
    if (!it->second.deferred) {
      Handle& rec = handles_[it->second.handle];
      if (--rec.live_maps == 0 && rec.refs == 0) orphans.push_back(it->second.handle);
      maps_.erase(it);
    }
    it = next;
  }
  for (uint64_t handle : orphans) retire(handle);
  return r;
}

bool ClientVmmCache::access_already(const Mapping& m, const std::string& descs) const {
  if (!m.access_known || descs.empty() || descs.size() % desc_bytes_ != 0) return false;
  for (size_t at = 0; at < descs.size(); at += desc_bytes_) {
    auto it = m.access.find(descs.substr(at, location_bytes_));
    if (it == m.access.end() || it->second != descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_))
      return false;
  }
  return true;
}

void ClientVmmCache::apply_access(Mapping& m, const std::string& descs) const {
  for (size_t at = 0; at + desc_bytes_ <= descs.size(); at += desc_bytes_)
    m.access[descs.substr(at, location_bytes_)] = descs.substr(at + location_bytes_, desc_bytes_ - location_bytes_);
}

int ClientVmmCache::set_access(uint64_t addr, uint64_t bytes, const std::string& descs) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock, addr, bytes);
  std::vector<MapIt> cover;
  if (exact_cover(addr, bytes, &cover)) {
    bool same = true;
    for (MapIt it : cover) same = same && access_already(it->second, descs);
    if (same) {
      ++stats_.access_skipped;
      return kClientOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.set_access(addr, bytes, descs);
  const uint64_t end = addr + bytes;
  auto it = maps_.upper_bound(addr);
  if (it != maps_.begin()) --it;
  for (; it != maps_.end() && it->first < end; ++it) {
    if (it->first + it->second.bytes <= addr || it->second.deferred) continue;
    // Known only while every call covered the whole mapping and succeeded.
    const bool whole = it->first >= addr && it->first + it->second.bytes <= end;
    if (r == kClientOk && whole) apply_access(it->second, descs);
    else it->second.access_known = false;
  }
  if (r == kClientOk && prefetch_pages_ > 0) maybe_prefetch(addr, end, descs);
  return r;
}

void ClientVmmCache::note_reserved(uint64_t base, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  reservations_[base] = bytes;
}

uint64_t ClientVmmCache::pages_ahead(uint64_t from, uint64_t page, int device, uint64_t want) {
  auto res = reservations_.upper_bound(from - 1);
  if (res == reservations_.begin()) return 0;
  --res;
  const uint64_t res_end = res->first + res->second;
  if (from < res->first || from >= res_end) return 0;
  uint64_t pages = want;
  if (pages > (res_end - from) / page) pages = (res_end - from) / page;
  const uint64_t room = driver_.cache_room(device);
  const uint64_t held = cached_bytes_[device];
  if (room < held) return 0;
  if (pages > (room - held) / page) pages = (room - held) / page;
  // Only onto addresses the cache knows to be free of the program's maps
  // and of pages already queued.
  auto clash = maps_.lower_bound(from);
  if (clash != maps_.end() && clash->first < from + pages * page) pages = (clash->first - from) / page;
  for (const AheadJob& j : jobs_) {
    const uint64_t lo = j.start, hi = j.start + j.pages * j.page;
    if (lo < from + pages * page && from < hi) pages = lo > from ? (lo - from) / page : 0;
  }
  return pages;
}

void ClientVmmCache::note_misdirected(uint64_t handle, uint64_t addr) {
  auto h = handles_.find(handle);
  if (h == handles_.end()) return;
  auto made = noted_deferred(handle, h->second);
  if (made == maps_.end() || made->first == addr || !made->second.ahead) return;
  made->second.ahead = false;  // counted once
  ++stats_.ahead_misdirected;
  const std::string& slot = h->second.slot;
  if (++misdirected_[slot] < kMisdirectedLimit) return;
  // Pages made ahead for this slot miss more than they hit: stop growing
  // ahead for it. The pages already made and not taken stay cached (and
  // decay), but go last: in the order the program's pages first grew they
  // would stand between the two segments' own pages and hand each segment
  // the other's from then on.
  for (AheadJob& j : jobs_)
    if (j.slot == slot) j.stop = true;
  erase_finished_jobs();
  jobs_cv_.notify_all();
  auto queue = free_.find(slot);
  if (queue == free_.end()) return;
  std::vector<uint64_t> untaken;
  for (auto it = queue->second.begin(); it != queue->second.end();) {
    auto at = noted_deferred(it->second, handles_[it->second]);
    if (it->first.first != UINT64_MAX && at != maps_.end() && at->second.ahead) {
      untaken.push_back(it->second);
      it = queue->second.erase(it);
    } else {
      ++it;
    }
  }
  for (uint64_t h : untaken) queue->second.emplace(std::make_pair(UINT64_MAX, arrivals_++), h);
}

void ClientVmmCache::maybe_prefetch(uint64_t addr, uint64_t end, const std::string& descs) {
  // The range must end with a live whole-handle mapping of a tracked,
  // unshared handle, inside one of the program's reservations.
  auto last = maps_.lower_bound(end);
  if (last == maps_.begin()) return;
  --last;
  const Mapping& m = last->second;
  if (last->first < addr || last->first + m.bytes != end || m.deferred || m.offset != 0) return;
  auto h = handles_.find(m.handle);
  if (h == handles_.end() || h->second.shared || h->second.bytes != m.bytes) return;
  const uint64_t page = m.bytes;
  const Handle proto = h->second;
  if (ahead_off(proto.slot)) return;
  int& next = batch_of(proto.slot);
  const uint64_t pages = pages_ahead(end, page, proto.device, uint64_t(next));
  if (pages == 0) return;
  if (ahead_on_worker_ && queue_ahead(end, page, pages, proto.slot, proto.device, descs)) {
    double_batch(next);
    return;
  }
  const std::string prop = proto.slot.substr(0, proto.slot.size() - sizeof(uint64_t));
  std::vector<uint64_t> made;
  for (uint64_t i = 0; i < pages; ++i) {
    uint64_t handle = 0;
    if (driver_.create(page, prop, &handle) != kClientOk) break;
    if (driver_.map(end + i * page, page, 0, handle, 0) != kClientOk) {
      driver_.release(handle);
      break;
    }
    made.push_back(handle);
  }
  if (!made.empty() && driver_.set_access(end, made.size() * page, descs) != kClientOk) {
    for (size_t i = 0; i < made.size(); ++i) {
      driver_.unmap(end + i * page, page);
      driver_.release(made[i]);
    }
    made.clear();
  }
  if (made.empty()) return;
  double_batch(next);
  const uint64_t seq = kAheadOrder + ahead_seq_;
  ahead_seq_ += made.size();
  for (size_t i = 0; i < made.size(); ++i)
    publish_ahead(end + i * page, seq + i, page, made[i], proto.slot, proto.device, descs);
}

void ClientVmmCache::publish_ahead(uint64_t at, uint64_t seq, uint64_t page, uint64_t handle, const std::string& slot,
                                   int device, const std::string& descs) {
  Handle& rec = handles_[handle];
  rec = Handle{};
  rec.bytes = page;
  rec.slot = slot;
  rec.device = device;
  rec.cached = true;
  rec.deferred_at = at;
  rec.deferred_maps = 1;
  Mapping& map = maps_[at];
  map = Mapping{};
  map.bytes = page;
  map.handle = handle;
  map.seq = seq;
  map.deferred = true;
  map.ahead = true;
  apply_access(map, descs);
  deferred_count_.fetch_add(1, std::memory_order_relaxed);
  cached_bytes_[device] += page;
  // A page finished after its slot stopped growing ahead goes last, as the
  // untaken ones did then (note_misdirected).
  free_[slot].emplace(std::make_pair(ahead_off(slot) ? UINT64_MAX : seq, arrivals_++), handle);
  ++stats_.prefetched;
}

bool ClientVmmCache::queue_ahead(uint64_t from, uint64_t page, uint64_t pages, const std::string& slot, int device,
                                 const std::string& descs) {
  AheadJob job;
  job.start = from;
  job.page = page;
  job.pages = pages;
  job.slot = slot;
  job.descs = descs;
  job.device = device;
  job.context = driver_.current_context();
  job.seq_base = kAheadOrder + ahead_seq_;
  jobs_.push_back(std::move(job));
  jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
  ahead_descs_[slot] = descs;
  if (!driver_.wake_worker()) {
    jobs_.pop_back();
    jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
    return false;
  }
  ahead_seq_ += pages;
  jobs_cv_.notify_all();
  return true;
}

void ClientVmmCache::maybe_continue(uint64_t addr, const Mapping& m) {
  if (!ahead_on_worker_ || prefetch_pages_ <= 0) return;
  auto h = handles_.find(m.handle);
  if (h == handles_.end()) return;
  const std::string slot = h->second.slot;
  if (ahead_off(slot)) return;
  // The pages ahead of this one not yet taken: made (published) or still
  // to be made by a live job of this slot. The next batch goes after
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
    for (const AheadJob& j : jobs_) {
      const uint64_t end = j.start + j.pages * j.page;
      if (j.slot == slot && !j.stop && j.start <= at && at < end) {
        left += (end - at) / j.page;
        at = end;
        more = true;
      }
    }
  }
  int& next = batch_of(slot);
  if (left * 2 > uint64_t(next) || left >= uint64_t(prefetch_pages_)) return;
  auto descs = ahead_descs_.find(slot);
  if (descs == ahead_descs_.end()) return;
  // Never more than prefetch_pages_ ahead of the program.
  const uint64_t want = std::min<uint64_t>(uint64_t(next), uint64_t(prefetch_pages_) - left);
  const uint64_t pages = pages_ahead(at, m.bytes, h->second.device, want);
  if (pages == 0) return;
  if (queue_ahead(at, m.bytes, pages, slot, h->second.device, descs->second)) double_batch(next);
}

int& ClientVmmCache::batch_of(const std::string& slot) {
  int& next = next_prefetch_[slot];
  if (next == 0) next = 2;
  return next;
}

void ClientVmmCache::double_batch(int& next) const {
  if (next < prefetch_pages_) next = next * 2 > prefetch_pages_ ? prefetch_pages_ : next * 2;
}

void ClientVmmCache::erase_finished_jobs() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const bool finished = !it->inflight && (it->stop || it->begun == it->pages);
    if (finished) {
      if (it->begun < it->pages) stats_.ahead_cancelled += it->pages - it->begun;
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
}

void ClientVmmCache::settle(std::unique_lock<std::mutex>& lock, uint64_t addr, uint64_t bytes) {
  if (jobs_count_.load(std::memory_order_relaxed) == 0) return;
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  AheadWait timer{*this};
  for (;;) {
    bool busy = false;
    for (AheadJob& j : jobs_)
      if (j.pending_overlaps(addr, end)) {
        j.stop = true;
        busy = busy || j.inflight;
      }
    erase_finished_jobs();
    if (!busy) {
      timer.end();
      return;
    }
    timer.begin();
    // The page in flight is a driver call or three away.
    jobs_cv_.wait(lock);
  }
}

void ClientVmmCache::settle_all(std::unique_lock<std::mutex>& lock) { settle(lock, 0, UINT64_MAX); }

bool ClientVmmCache::work_one() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto job = jobs_.begin();
  while (job != jobs_.end() && (job->stop || job->begun == job->pages)) ++job;
  if (job == jobs_.end()) return false;
  const uint64_t index = job->begun;
  const uint64_t at = job->start + index * job->page;
  const uint64_t page = job->page;
  const std::string prop = job->slot.substr(0, job->slot.size() - sizeof(uint64_t));
  const std::string descs = job->descs;
  const uint64_t context = job->context;
  ++job->begun;
  job->inflight = true;
  lock.unlock();
  // The page's address is pending: no call of the program touches it
  // until the page is published (settle waits for it).
  driver_.use_context(context);
  uint64_t handle = 0;
  bool ok = driver_.create(page, prop, &handle) == kClientOk;
  bool mapped = ok && driver_.map(at, page, 0, handle, 0) == kClientOk;
  ok = mapped && driver_.set_access(at, page, descs) == kClientOk;
  if (!ok) {
    if (mapped) driver_.unmap(at, page);
    if (handle) driver_.release(handle);
  }
  lock.lock();
  job->inflight = false;
  if (ok) {
    publish_ahead(at, job->seq_base + index, page, handle, job->slot, job->device, job->descs);
    job->published = index + 1;
  } else {
    job->stop = true;  // the driver refused: the rest of the job is not tried
  }
  erase_finished_jobs();
  jobs_cv_.notify_all();
  return true;
}

bool ClientVmmCache::wait_for_work(uint64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] {
    for (const AheadJob& j : jobs_)
      if (!j.stop && j.begun < j.pages) return true;
    return false;
  };
  if (ready()) return true;
  jobs_cv_.wait_until(lock, std::chrono::system_clock::now() + std::chrono::nanoseconds(timeout_ns));
  return ready();
}

uint64_t ClientVmmCache::pending_pages() {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t n = 0;
  for (const AheadJob& j : jobs_)
    if (!j.stop) n += j.pages - j.begun;
  return n;
}

int ClientVmmCache::address_free(uint64_t addr, uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock, addr, bytes);
  // A range the program freed already (kept here): the driver's answer
  // to a second free of it.
  for (auto& [base, kept] : kept_ranges_)
    if (base < addr + bytes && addr < base + kept) return kClientInvalidValue;
  // A whole reservation that holds only deferred mappings (the program
  // unmapped everything it mapped there, all of it tracked handles) is
  // kept with them: the program's next reservation of that size gets it
  // back (take_range), its pages still mapped and open. PyTorch's
  // empty_cache frees its segment's range and reserves one again.
  auto res = reservations_.find(addr);
  if (res != reservations_.end() && res->second == bytes && !foreign_.count(addr)) {
    bool deferred = false, live = false;
    for (auto it = maps_.lower_bound(addr); it != maps_.end() && it->first < addr + bytes; ++it)
      (it->second.deferred ? deferred : live) = true;
    if (deferred && !live) {
      kept_ranges_[addr] = bytes;
      reservations_.erase(res);
      ++stats_.ranges_kept;
      return kClientOk;
    }
  }
  flush_overlap(addr, bytes);
  const int r = driver_.address_free(addr, bytes);
  if (r == kClientOk) {
    reservations_.erase(addr);
    foreign_.erase(addr);
  }
  return r;
}

bool ClientVmmCache::take_range(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t flags, uint64_t* base) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (flags || kept_ranges_.empty()) return false;
  auto fits = [&](std::map<uint64_t, uint64_t>::iterator it) {
    return it->second == bytes && (!alignment || it->first % alignment == 0);
  };
  auto hand_out = [&](std::map<uint64_t, uint64_t>::iterator it) {
    *base = it->first;
    reservations_[it->first] = bytes;
    kept_ranges_.erase(it);
    ++stats_.ranges_reused;
    return true;
  };
  if (hint) {
    // The program asks for an address: a kept range there of this size is
    // it; one that only overlaps it is given back to the driver first, so
    // that the driver can honour the hint as it would have.
    auto it = kept_ranges_.find(hint);
    if (it != kept_ranges_.end() && fits(it)) return hand_out(it);
    const uint64_t end = hint + bytes < hint ? UINT64_MAX : hint + bytes;
    for (auto k = kept_ranges_.begin(); k != kept_ranges_.end();) {
      if (k->first < end && hint < k->first + k->second && flush_overlap(k->first, k->second)) {
        driver_.address_free(k->first, k->second);
        k = kept_ranges_.erase(k);
      } else {
        ++k;
      }
    }
    return false;
  }
  for (auto it = kept_ranges_.begin(); it != kept_ranges_.end(); ++it)
    if (fits(it)) return hand_out(it);
  return false;
}

void ClientVmmCache::free_empty_kept_ranges() {
  for (auto it = kept_ranges_.begin(); it != kept_ranges_.end();) {
    auto m = maps_.lower_bound(it->first);
    if (m != maps_.end() && m->first < it->first + it->second) {
      ++it;
      continue;
    }
    driver_.address_free(it->first, it->second);  // refused: the range stays reserved, unused
    it = kept_ranges_.erase(it);
  }
}

bool ClientVmmCache::retain(uint64_t addr, uint64_t* handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock, addr, 1);
  auto it = maps_.upper_bound(addr);
  if (it == maps_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.bytes) return false;
  if (it->second.deferred) {
    flush_mapping(it);  // the program unmapped it: the driver answers
    return false;
  }
  Handle& rec = handles_[it->second.handle];
  ++rec.refs;
  *handle = it->second.handle;
  return true;
}

bool ClientVmmCache::check_handle(uint64_t handle, bool exporting, int* result) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  if (it->second.refs <= 0) {
    *result = kClientInvalidValue;
    return true;
  }
  if (exporting && !it->second.shared) {
    it->second.shared = true;
    flush_handle(handle);
  }
  return false;
}

uint64_t ClientVmmCache::drop_cached(FreeQueue& queue, FreeQueue::iterator it) {
  const uint64_t h = it->second;
  queue.erase(it);
  Handle& rec = handles_[h];
  const uint64_t bytes = rec.bytes;
  cached_bytes_[rec.device] -= bytes;
  if (release_for_real(h) != kClientOk) return 0;
  stats_.trimmed_bytes += bytes;
  return bytes;
}

uint64_t ClientVmmCache::trim(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t freed = 0;
  for (auto& [slot, queue] : free_) {
    // Highest addresses first: the end of a segment is the last to grow back.
    while (!queue.empty() && freed < bytes) {
      const auto last = std::prev(queue.end());
      if (handles_[last->second].device != device) break;  // one slot is one device (the location is in the key)
      freed += drop_cached(queue, last);
    }
    if (freed >= bytes) break;
  }
  if (freed) free_empty_kept_ranges();
  return freed;
}

uint64_t ClientVmmCache::decay_step(uint64_t now_ns, uint64_t delay_ns, uint64_t floor_bytes, int max_handles) {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t total = 0;
  for (auto& [device, held] : cached_bytes_) total += held;
  if (total <= floor_bytes) return 0;
  // The oldest cached handles first, across slots; stamp the ones first
  // seen now. (Queues are not added to below: the pointers stay valid.)
  struct Aged {
    uint64_t at;
    FreeQueue* queue;
    FreeQueue::key_type key;
    bool operator<(const Aged& o) const { return at < o.at || (at == o.at && key < o.key); }
  };
  std::vector<Aged> old;
  for (auto& [slot, queue] : free_)
    for (auto& [key, h] : queue) {
      Handle& rec = handles_[h];
      if (rec.cached_at_ns == 0) rec.cached_at_ns = now_ns ? now_ns : 1;
      else if (now_ns >= rec.cached_at_ns + delay_ns) old.push_back({rec.cached_at_ns, &queue, key});
    }
  std::sort(old.begin(), old.end());
  uint64_t freed = 0;
  int released = 0;
  for (const Aged& a : old) {
    if (released >= max_handles || total - freed <= floor_bytes) break;
    auto it = a.queue->find(a.key);
    if (it == a.queue->end()) continue;
    const uint64_t got = drop_cached(*a.queue, it);
    ++released;
    freed += got;
    stats_.decayed_bytes += got;
  }
  if (released) free_empty_kept_ranges();
  return freed;
}

uint64_t ClientVmmCache::cached_bytes(int device) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = cached_bytes_.find(device);
  return it == cached_bytes_.end() ? 0 : it->second;
}

void ClientVmmCache::forget_device(int device) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle_all(lock);
  for (auto it = maps_.begin(); it != maps_.end();) {
    auto h = handles_.find(it->second.handle);
    if (h != handles_.end() && h->second.device == device) {
      if (it->second.deferred) deferred_count_.fetch_sub(1, std::memory_order_relaxed);
      it = maps_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [slot, queue] : free_)
    for (auto it = queue.begin(); it != queue.end();) {
      auto h = handles_.find(it->second);
      it = h != handles_.end() && h->second.device == device ? queue.erase(it) : std::next(it);
    }
  for (auto it = handles_.begin(); it != handles_.end();)
    it = it->second.device == device ? handles_.erase(it) : std::next(it);
  auto held = cached_bytes_.find(device);  // find, not []: nothing is allocated here
  if (held != cached_bytes_.end()) held->second = 0;
}

void ClientVmmCache::abandon() {
  std::unique_lock<std::mutex> lock(mutex_);
  settle_all(lock);
  for (auto& [addr, m] : maps_)
    if (m.deferred) driver_.unmap(addr, m.bytes);
  for (auto& [slot, queue] : free_)
    for (auto& [order, handle] : queue) driver_.release(handle);
  for (auto& [base, bytes] : kept_ranges_) driver_.address_free(base, bytes);
  kept_ranges_.clear();
  maps_.clear();
  free_.clear();
  handles_.clear();
  for (auto& [device, held] : cached_bytes_) held = 0;
  deferred_count_.store(0, std::memory_order_relaxed);
}

bool ClientVmmCache::deferred_counts_consistent() {
  std::lock_guard<std::mutex> guard(mutex_);
  std::unordered_map<uint64_t, int> seen;
  for (auto& [addr, m] : maps_)
    if (m.deferred) ++seen[m.handle];
  for (auto& [handle, rec] : handles_) {
    auto it = seen.find(handle);
    if (rec.deferred_maps != (it == seen.end() ? 0 : it->second)) return false;
  }
  return true;
}

ClientVmmStats ClientVmmCache::stats() {
  std::lock_guard<std::mutex> guard(mutex_);
  ClientVmmStats s = stats_;
  s.cached_bytes = 0;
  for (auto& [device, held] : cached_bytes_) s.cached_bytes += held;
  return s;
}

}  // namespace pagefast::policy
