// policy/pool_report.cpp: DevicePool::stats() and report() (the figures,
// each part's read without waiting), describe/layout/check, and the text
// of the memory report (policy/pool_report.h).
#include "policy/pool_report.h"

#include <cstdio>

#include "policy/format.h"

namespace pagefast::policy {

PoolStats DevicePool::stats() {
  // Try-locks only: stats are read at process exit too, when another
  // thread may be stopped anywhere (holding a lock). A part whose lock
  // stays busy repeats what it last read under it.
  PoolStats s;
  registry_.read_figures(&s);
  s.quarantined_bytes += quarantine_.shared_bytes();
  large_.read_figures(&s);
  s.idle_bytes = s.mapped_bytes > s.in_use_bytes ? s.mapped_bytes - s.in_use_bytes : 0;
  s.peak_in_use_bytes = registry_.peak_in_use_bytes();
  s.synchronizations = quarantine_.synchronizations();
  s.passthroughs = oom_.passthroughs();
  s.ooms = oom_.ooms();
  s.synchronization_ns = quarantine_.synchronization_ns();
  return s;
}

PoolReport DevicePool::report() {
  // Every lock is tried, never waited for: at exit a thread may have been
  // stopped while holding one. A busy part is reported as busy.
  PoolReport r;
  r.stats = stats();
  if (!large_.try_figures(&r)) r.arena_busy = true;
  // Blocks sitting in the threads' bins are free too, only not central.
  uint64_t in_bins[kClassCount] = {};
  if (!registry_.count_bins(in_bins)) r.caches_busy = true;
  if (!small_.occupancy(in_bins, r.classes, &r.class_count)) r.classes_busy = true;
  if (!oom_.try_read(&r.last_oom)) r.oom_busy = true;
  return r;
}

std::string DevicePool::layout() {
  return large_.locked([](const Arena& arena) { return arena.layout(); });
}

std::string DevicePool::describe() {
  return large_.locked([](const Arena& arena) { return arena.describe(); }) + small_.describe();
}

std::string DevicePool::check() { return large_.check(); }

double fragmentation(const PoolReport& r) {
  if (r.free_home.count() == 0) return 0.0;
  return 1.0 - double(r.largest_free_run.count()) / double(r.free_home.count());
}

namespace {

// One "  name   value" line; names padded to one column.
void line(std::string& out, const char* name, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-26s %s\n", name, value.c_str());
  out += buf;
}

std::string count(uint64_t n) { return std::to_string(n); }

// The size classes: one row per class with slabs.
void class_lines(std::string& out, const PoolReport& r) {
  out += "  size classes";
  out += r.classes_busy || r.caches_busy ? " (busy: some counts could not be read)\n" : "\n";
  if (r.class_count == 0) {
    out += "    none with slabs\n";
  } else {
    char buf[160];
    std::snprintf(buf, sizeof buf, "    %10s %8s %14s %12s\n", "block", "slabs", "blocks in use", "free blocks");
    out += buf;
    for (int i = 0; i < r.class_count; ++i) {
      const ClassOccupancy& c = r.classes[i];
      const std::string block = c.block_bytes >= kKiB && c.block_bytes % kKiB == 0
                                    ? std::to_string(c.block_bytes / kKiB) + " KiB"
                                    : std::to_string(c.block_bytes) + " B";
      std::snprintf(buf, sizeof buf, "    %10s %8llu %14llu %12llu\n", block.c_str(), (unsigned long long)c.slabs,
                    (unsigned long long)c.blocks_in_use, (unsigned long long)c.free_blocks);
      out += buf;
    }
  }
}

// The arena, its fragmentation and the largest block without growth.
void arena_lines(std::string& out, const PoolReport& r) {
  if (r.arena_busy) {
    out += "  arena                      busy (its lock was held; figures above are the lock-free ones)\n";
  } else {
    out += "  arena\n";
    line(out, "  chunks", count(r.chunks));
    line(out, "  mapped granules",
         count(r.mapped.count()) + " (" + format_bytes(r.mapped.bytes(), ByteStyle::Report) + ")");
    line(out, "  free granules",
         count(r.free_home.count()) + " in " + count(r.free_blocks) + " free blocks (" +
             format_bytes(r.free_home.bytes(), ByteStyle::Report) + ")");
    line(out, "  lent / free stitched", count(r.lent.count()) + " / " + count(r.free_stitched.count()) + " granules");
    char frag[32];
    std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * fragmentation(r));
    line(out, "fragmentation", std::string(frag) + " (1 - largest free run / free bytes)");
    // A stitch can map every free home granule together, so the largest
    // block without growing is the longer of the run and all free granules.
    if (r.free_home > r.largest_free_run)
      line(out, "largest block, no growth",
           format_bytes(r.free_home.bytes(), ByteStyle::Report) + " by stitching free granules (largest free run " +
               format_bytes(r.largest_free_run.bytes(), ByteStyle::Report) + ")");
    else
      line(out, "largest block, no growth",
           format_bytes(r.largest_free_run.bytes(), ByteStyle::Report) + " (the largest free run)");
  }
}

// The last out-of-memory answer.
void oom_lines(std::string& out, const PoolReport& r) {
  const OomRecord& o = r.last_oom;
  if (r.oom_busy) {
    line(out, "last out-of-memory", "busy (its record was being written)");
  } else if (o.count == 0) {
    line(out, "last out-of-memory", "none");
  } else {
    out += "  last out-of-memory (answer " + count(o.count) + ")\n";
    line(out, "  request",
         o.request_bytes ? format_bytes(o.request_bytes, ByteStyle::Report) + " (" + count(o.request_bytes) + " bytes)"
                         : std::string("unknown"));
    if (o.for_slab)
      line(out, "  needed", format_bytes(o.needed_bytes, ByteStyle::Report) + " for a new slab of its size class");
    line(out, "  limit", o.limit_bytes ? format_bytes(o.limit_bytes, ByteStyle::Report) : std::string("none"));
    line(out, "  idle released first", format_bytes(o.released_bytes, ByteStyle::Report));
    line(out, "  left (pool's view)",
         format_bytes(o.free_bytes, ByteStyle::Report) + " free in the pool" +
             (o.room_under_limit_bytes == kUnlimited
                  ? std::string(", growth not limited")
                  : ", " + format_bytes(o.room_under_limit_bytes, ByteStyle::Report) + " under the limit"));
    line(out, "  answer",
         o.forwarded ? "handed to the driver (no limit: it may have memory the pool has not)"
                     : "CUDA_ERROR_OUT_OF_MEMORY");
  }
}

}  // namespace

std::string report_text(int device, const PoolReport& r) {
  const PoolStats& s = r.stats;
  std::string out = "device " + std::to_string(device) + "\n";
  line(out, "reserved", format_bytes(s.reserved_bytes, ByteStyle::Report));
  line(out, "mapped", format_bytes(s.mapped_bytes, ByteStyle::Report));
  line(out, "in use", format_bytes(s.in_use_bytes, ByteStyle::Report));
  line(out, "idle", format_bytes(s.idle_bytes, ByteStyle::Report));
  line(out, "quarantined", format_bytes(s.quarantined_bytes, ByteStyle::Report));
  line(out, "cached", format_bytes(s.cached_bytes, ByteStyle::Report));
  line(out, "peak in use", format_bytes(s.peak_in_use_bytes, ByteStyle::Report));
  line(out, "hits", count(s.hits));
  line(out, "growths", count(s.growths));
  line(out, "stitches", count(s.stitches));
  line(out, "releases", count(s.releases));
  line(out, "synchronisations", count(s.synchronizations));
  line(out, "pass-throughs", count(s.passthroughs));
  line(out, "out-of-memory answers", count(s.ooms));

  class_lines(out, r);
  arena_lines(out, r);
  oom_lines(out, r);
  return out;
}

}  // namespace pagefast::policy
