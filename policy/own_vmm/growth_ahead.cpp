// policy/own_vmm/growth_ahead.cpp: growth ahead's jobs and the
// worker's step (policy/own_vmm/growth_ahead.h says what and why).
#include "policy/own_vmm/growth_ahead.h"

#include <chrono>
#include <vector>

#include "policy/own_vmm/key.h"

namespace pagefast::policy::own_vmm {

int GrowthAhead::batch(const std::string& key) {
  int& next = next_batch_[key];
  if (next == 0) next = 2;
  return next;
}

void GrowthAhead::double_batch(const std::string& key) {
  int& next = next_batch_[key];
  if (next < prefetch_pages_) next = next * 2 > prefetch_pages_ ? prefetch_pages_ : next * 2;
}

bool GrowthAhead::note_misdirected(const std::string& key) {
  if (++misdirected_[key] < kMisdirectedLimit) return false;
  stop_jobs_of(key);
  jobs_cv_.notify_all();
  return true;
}

void GrowthAhead::stop_jobs_of(const std::string& key) {
  for (AheadJob& j : jobs_)
    if (j.key == key) j.stop = true;
  erase_finished_jobs();
}

void GrowthAhead::grow(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device,
                       const std::string& descs) {
  if (on_worker_ && queue(from, page, pages, key, device, descs)) {
    double_batch(key);
    return;
  }
  const std::string prop = prop_of(key);
  std::vector<uint64_t> made;
  for (uint64_t i = 0; i < pages; ++i) {
    uint64_t handle = 0;
    if (driver_.create(page, prop, &handle) != kOk) break;
    if (driver_.map(from + i * page, page, 0, handle, 0) != kOk) {
      driver_.release(handle);
      break;
    }
    made.push_back(handle);
  }
  if (!made.empty() && driver_.set_access(from, made.size() * page, descs) != kOk) {
    for (size_t i = 0; i < made.size(); ++i) {
      driver_.unmap(from + i * page, page);
      driver_.release(made[i]);
    }
    made.clear();
  }
  if (made.empty()) return;
  double_batch(key);
  const uint64_t seq = kAheadOrder + seq_;
  seq_ += made.size();
  for (size_t i = 0; i < made.size(); ++i)
    publish_(AheadPage{from + i * page, seq + i, page, made[i], key, device, descs});
}

bool GrowthAhead::queue_next(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device) {
  auto descs = descs_.find(key);
  if (descs == descs_.end() || !queue(from, page, pages, key, device, descs->second)) return false;
  double_batch(key);
  return true;
}

bool GrowthAhead::queue(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device,
                        const std::string& descs) {
  AheadJob job;
  job.start = from;
  job.page = page;
  job.pages = pages;
  job.key = key;
  job.descs = descs;
  job.device = device;
  job.context = driver_.current_context();
  job.seq_base = kAheadOrder + seq_;
  jobs_.push_back(std::move(job));
  jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
  descs_[key] = descs;
  if (!driver_.wake_worker()) {
    jobs_.pop_back();
    jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
    return false;
  }
  seq_ += pages;
  jobs_cv_.notify_all();
  return true;
}

uint64_t GrowthAhead::clamp_to_jobs(uint64_t from, uint64_t page, uint64_t pages) const {
  for (const AheadJob& j : jobs_) {
    const uint64_t lo = j.start, hi = j.start + j.pages * j.page;
    if (lo < from + pages * page && from < hi) pages = lo > from ? (lo - from) / page : 0;
  }
  return pages;
}

bool GrowthAhead::skip_queued(const std::string& key, uint64_t* at, uint64_t* left) const {
  bool moved = false;
  for (const AheadJob& j : jobs_) {
    const uint64_t end = j.start + j.pages * j.page;
    if (j.key == key && !j.stop && j.start <= *at && *at < end) {
      *left += (end - *at) / j.page;
      *at = end;
      moved = true;
    }
  }
  return moved;
}

void GrowthAhead::erase_finished_jobs() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const bool finished = !it->inflight && (it->stop || it->begun == it->pages);
    if (finished) {
      if (it->begun < it->pages) stats_.cancelled += it->pages - it->begun;
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  jobs_count_.store(jobs_.size(), std::memory_order_relaxed);
}

bool GrowthAhead::wait_a_second(std::unique_lock<std::mutex>& lock) {
  // wait_until on the system clock: a steady-clock wait would need
  // pthread_cond_clockwait (glibc 2.34; docs/PACKAGING.md's baseline is 2.28).
  return jobs_cv_.wait_until(lock, std::chrono::system_clock::now() + std::chrono::seconds(1)) !=
         std::cv_status::timeout;
}

void GrowthAhead::settle(std::unique_lock<std::mutex>& lock, uint64_t addr, uint64_t bytes) {
  if (!busy()) return;
  const uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
  Wait timer{*this};
  for (;;) {
    bool inflight = false;
    for (AheadJob& j : jobs_)
      if (j.pending_overlaps(addr, end)) {
        j.stop = true;
        inflight = inflight || j.inflight;
      }
    erase_finished_jobs();
    if (!inflight) {
      timer.end();
      return;
    }
    timer.begin();
    // The page in flight is a driver call or three away.
    jobs_cv_.wait(lock);
  }
}

bool GrowthAhead::work_one() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto job = jobs_.begin();
  while (job != jobs_.end() && (job->stop || job->begun == job->pages)) ++job;
  if (job == jobs_.end()) return false;
  const uint64_t index = job->begun;
  const uint64_t at = job->start + index * job->page;
  const uint64_t page = job->page;
  const std::string prop = prop_of(job->key);
  const std::string descs = job->descs;
  const uint64_t context = job->context;
  ++job->begun;
  job->inflight = true;
  lock.unlock();
  // The page's address is pending: no call of the program touches it
  // until the page is published (settle waits for it).
  driver_.use_context(context);
  uint64_t handle = 0;
  bool ok = driver_.create(page, prop, &handle) == kOk;
  bool mapped = ok && driver_.map(at, page, 0, handle, 0) == kOk;
  ok = mapped && driver_.set_access(at, page, descs) == kOk;
  if (!ok) {
    if (mapped) driver_.unmap(at, page);
    if (handle) driver_.release(handle);
  }
  lock.lock();
  job->inflight = false;
  if (ok) {
    publish_(AheadPage{at, job->seq_base + index, page, handle, job->key, job->device, job->descs});
    job->published = index + 1;
  } else {
    job->stop = true;  // the driver refused: the rest of the job is not tried
  }
  erase_finished_jobs();
  jobs_cv_.notify_all();
  return true;
}

bool GrowthAhead::wait_for_work(uint64_t timeout_ns) {
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

uint64_t GrowthAhead::pending_pages() {
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t n = 0;
  for (const AheadJob& j : jobs_)
    if (!j.stop) n += j.pages - j.begun;
  return n;
}

}  // namespace pagefast::policy::own_vmm
