// tools/replay/simulate.cpp: pagefast-simulate, the pool's policy run on the
// CPU over a recorded trace (docs/TRACE.md "Simulating on the CPU"). The
// same DevicePool as in libpagefast.so, over the test provider with no
// backing memory (policy/fake_provider.h) and a clock that follows the
// trace's time stamps, so the memory the pool would hold, its syncs and
// growths come out of one run in a second, with no GPU. What it cannot
// show: time (every driver call costs nothing here) and whether device
// work still used a block (the syncs are counted, not waited for).
//
// Usage: pagefast-simulate TRACE [--conf "key:value,..."] [--device BYTES]
//                          [--timeline FILE.csv] [--json]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/clock.h"
#include "policy/config.h"
#include "policy/device_pool.h"
#include "policy/fake_provider.h"
#include "tools/replay/trace_reader.h"

using namespace pagefast;
using namespace pagefast::policy;

namespace {

const char kUsage[] =
    "usage: pagefast-simulate TRACE [--conf \"key:value,...\"] [--device BYTES] [--timeline FILE.csv] [--json]\n"
    "                         [--offset-maps] [--growths] [--layout]\n"
    "Runs pagefast's pool policy on the CPU over a PAGEFAST_TRACE file and reports the\n"
    "memory it would hold, against the program's own peak, with its syncs and growths.\n"
    "  --conf      PAGEFAST_CONF keys for the simulated pool (default: none)\n"
    "  --device    the device's memory (default 140G, an H200)\n"
    "  --timeline  a CSV of time, live and held bytes, one row per change of held memory\n"
    "  --json      one JSON object instead of the table\n"
    "  --offset-maps  let the pool map at chunk offsets (stitch); off by default, as on the H200\n"
    "  --growths   a line per growth of held memory: what the pool held then, and where (in use,\n"
    "              waiting for a sync, cached by threads, free in the arena), and the request\n"
    "              (on stderr with --json)\n"
    "  --layout    --growths, and after each growth the arena's runs block by block: F free,\n"
    "              U used, Q waiting for a sync, C cached by a thread, S slab, L lent; sizes in\n"
    "              2 MiB granules\n";

// The trace's clock: each record sets the time before it is played.
class TraceClock final : public Clock {
 public:
  uint64_t now_ns() override { return now_; }
  void set(uint64_t t) { now_ = FakeClock::kStartNs + t; }

 private:
  uint64_t now_ = FakeClock::kStartNs;
};

struct Env {
  const char* conf;
};

const char* lookup(const char* name, void* user) {
  const Env* env = static_cast<const Env*>(user);
  if (std::strcmp(name, "PAGEFAST_CONF") == 0) return env->conf;
  return nullptr;
}

struct Live {
  uint64_t sim_addr;
  uint64_t bytes;
};

}  // namespace

int main(int argc, char** argv) {
  std::string path, conf, timeline_path;
  uint64_t device_bytes = 140 * kGiB;
  bool json = false, offset_maps = false, growth_lines = false, layout_lines = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pagefast-simulate: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("pagefast-simulate %s\n", PAGEFAST_VERSION);
      return 0;
    } else if (a == "--conf") {
      conf = value();
    } else if (a == "--device") {
      if (!parse_bytes(value(), &device_bytes) || device_bytes < 64 * kMiB) {
        std::fprintf(stderr, "pagefast-simulate: --device takes a size of at least 64M (K/M/G/T)\n");
        return 2;
      }
    } else if (a == "--timeline") {
      timeline_path = value();
    } else if (a == "--offset-maps") {
      offset_maps = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--growths") {
      growth_lines = true;
    } else if (a == "--layout") {
      growth_lines = layout_lines = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "pagefast-simulate: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    } else if (path.empty()) {
      path = a;
    } else {
      std::fprintf(stderr, "pagefast-simulate: one trace at a time\n%s", kUsage);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }

  Env env{conf.c_str()};
  const Config config = parse_config(lookup, &env);
  if (!config.error.empty()) {
    std::fprintf(stderr, "pagefast-simulate: %s\n", config.error.c_str());
    return 2;
  }
  replay::Trace trace;
  std::string error;
  if (!replay::read_trace(path, &trace, &error)) {
    std::fprintf(stderr, "pagefast-simulate: %s\n", error.c_str());
    return 2;
  }
  std::vector<trace_format::Record>& records = trace.records;
  std::stable_sort(records.begin(), records.end(),
                   [](const trace_format::Record& a, const trace_format::Record& b) { return a.t_ns < b.t_ns; });

  FakeProvider provider(device_bytes, FakeProvider::Backing::None);
  // As the H200's driver: no map at an offset into a chunk, so no stitch
  // (docs/DRIVER-FACTS.md); --offset-maps lets the pool stitch.
  provider.set_offset_maps(offset_maps);
  TraceClock clock;
  std::unique_ptr<PageMap> page_map(new PageMap());
  PoolSettings settings;
  settings.config = config.pool;
  settings.device_total_bytes = device_bytes;
  // The device's limit and headroom, as the library's budget keeps them.
  DeviceBudget budget(config.pool.headroom_bytes, config.pool.limit_bytes);
  auto pool = std::make_unique<DevicePool>(provider, clock, *page_map, settings, budget, nullptr);
  pool->prewarm();

  std::map<uint32_t, ThreadCache*> caches;  // trace thread -> its cache
  auto cache_of = [&](uint32_t thread) -> ThreadCache* {
    auto it = caches.find(thread);
    if (it != caches.end()) return it->second;
    ThreadCache* c = pool->attach_thread();
    caches[thread] = c;
    return c;
  };
  std::unordered_map<uint64_t, Live> live;  // trace address -> simulated block
  uint64_t live_bytes = 0, peak_live = 0, peak_live_granules = 0, live_granules = 0;
  uint64_t peak_held = 0, held_at_end = 0, allocs = 0, frees = 0, skipped = 0, failed = 0;
  uint64_t t_end = records.empty() ? 0 : records.back().t_ns;
  const uint64_t interval = pool->footprint_interval_ns();
  uint64_t next_decay = interval;
  FILE* timeline = nullptr;
  if (!timeline_path.empty()) {
    timeline = std::fopen(timeline_path.c_str(), "w");
    if (!timeline) {
      std::fprintf(stderr, "pagefast-simulate: cannot write %s\n", timeline_path.c_str());
      return 2;
    }
    std::fprintf(timeline, "t_s,live_bytes,held_bytes\n");
  }
  uint64_t last_held = ~uint64_t(0);
  // request: the allocation being served, 0 for the service threads' steps.
  auto sample = [&](uint64_t t, uint64_t request = 0) {
    const uint64_t held = provider.used_bytes();
    if (held > peak_held) peak_held = held;
    if (growth_lines && last_held != ~uint64_t(0) && held > last_held) {
      const PoolStats s = pool->stats();
      const uint64_t waiting = s.quarantined_bytes, cached = s.cached_bytes;
      const uint64_t free_bytes = s.idle_bytes > waiting + cached ? s.idle_bytes - waiting - cached : 0;
      // How many runs the free memory lies in (after the growth, so with
      // what is left of the new chunk): many runs and a request no run
      // held is fragmentation.
      const PoolReport r = pool->report();
      // With --json, stdout is the JSON object's: the lines go to stderr.
      std::fprintf(json ? stderr : stdout,
                   "growth at %.3f s: held %llu MiB (+%llu), program %llu MiB, in use %llu, waiting %llu, cached %llu, "
                   "free %llu in %llu runs; request %llu MiB\n",
                   double(t) / 1e9, (unsigned long long)(held / kMiB), (unsigned long long)((held - last_held) / kMiB),
                   (unsigned long long)(live_bytes / kMiB), (unsigned long long)(s.in_use_bytes / kMiB),
                   (unsigned long long)(waiting / kMiB), (unsigned long long)(cached / kMiB),
                   (unsigned long long)(free_bytes / kMiB), (unsigned long long)r.free_blocks,
                   (unsigned long long)((request + kMiB - 1) / kMiB));
      if (layout_lines) std::fprintf(json ? stderr : stdout, "  layout %s\n", pool->layout().c_str());
    }
    if (timeline && held != last_held)
      std::fprintf(timeline, "%.6f,%llu,%llu\n", double(t) / 1e9, (unsigned long long)live_bytes,
                   (unsigned long long)held);
    last_held = held;
  };
  for (const trace_format::Record& r : records) {
    // The trim thread's steps that fall before this record.
    while (interval && next_decay <= r.t_ns) {
      clock.set(next_decay);
      pool->decay_step();
      sample(next_decay);
      next_decay += interval;
    }
    clock.set(r.t_ns);
    if (r.op == uint8_t(trace_format::Op::Alloc)) {
      if (r.result != 0 || !r.address || !r.bytes) {
        ++skipped;
        continue;
      }
      uint64_t addr = 0;
      if (pool->alloc(*cache_of(r.thread), r.bytes, &addr) != AllocStatus::Ok) {
        ++failed;
        continue;
      }
      ++allocs;
      live[r.address] = Live{addr, r.bytes};
      live_bytes += r.bytes;
      live_granules += granules_ceil(r.bytes).bytes();
      peak_live = std::max(peak_live, live_bytes);
      peak_live_granules = std::max(peak_live_granules, live_granules);
    } else if (r.op == uint8_t(trace_format::Op::Free)) {
      auto it = live.find(r.address);
      if (it == live.end()) {
        ++skipped;  // allocated before the trace began, or never by the pool
        continue;
      }
      Span* span = page_map->lookup(it->second.sim_addr);
      if (!span || pool->free(*cache_of(r.thread), span, it->second.sim_addr) != FreeStatus::Ok) {
        std::fprintf(stderr, "pagefast-simulate: the pool refused a free it should take (a bug)\n");
        return 1;
      }
      ++frees;
      live_bytes -= it->second.bytes;
      live_granules -= granules_ceil(it->second.bytes).bytes();
      live.erase(it);
    } else {
      continue;
    }
    sample(r.t_ns, r.op == uint8_t(trace_format::Op::Alloc) ? r.bytes : 0);
  }
  held_at_end = provider.used_bytes();
  const PoolStats s = pool->stats();
  const std::string problems = pool->check();
  if (timeline) std::fclose(timeline);
  const double seconds = double(t_end) / 1e9;
  const uint64_t creates = provider.calls(FakeProvider::Op::Create);
  const uint64_t maps = provider.calls(FakeProvider::Op::Map);
  const uint64_t unmaps = provider.calls(FakeProvider::Op::Unmap);
  const double ratio = peak_live ? double(peak_held) / double(peak_live) : 0;
  if (json) {
    std::printf(
        "{\"trace\": \"%s\", \"records\": %zu, \"seconds\": %.3f, \"allocs\": %llu, \"frees\": %llu, "
        "\"skipped\": %llu, \"failed\": %llu, \"threads\": %zu, \"peak_live_bytes\": %llu, "
        "\"peak_live_granule_bytes\": %llu, \"peak_held_bytes\": %llu, \"held_at_end_bytes\": %llu, "
        "\"held_vs_live\": %.4f, \"synchronizations\": %llu, "
        "\"growths\": %llu, \"releases\": %llu, \"stitches\": %llu, \"driver_creates\": %llu, "
        "\"driver_maps\": %llu, \"driver_unmaps\": %llu}\n",
        path.c_str(), records.size(), seconds, (unsigned long long)allocs, (unsigned long long)frees,
        (unsigned long long)skipped, (unsigned long long)failed, caches.size(), (unsigned long long)peak_live,
        (unsigned long long)peak_live_granules, (unsigned long long)peak_held, (unsigned long long)held_at_end, ratio,
        (unsigned long long)s.synchronizations, (unsigned long long)s.growths, (unsigned long long)s.releases,
        (unsigned long long)s.stitches, (unsigned long long)creates, (unsigned long long)maps,
        (unsigned long long)unmaps);
  } else {
    auto mib = [](uint64_t b) { return double(b) / double(kMiB); };
    std::printf("trace %s: %zu records over %.2f s, %zu threads, %llu allocations, %llu frees, %llu skipped\n",
                path.c_str(), records.size(), seconds, caches.size(), (unsigned long long)allocs,
                (unsigned long long)frees, (unsigned long long)skipped);
    std::printf(
        "program peak %.0f MiB (%.0f MiB in whole granules); pool peak held %.0f MiB (%.3fx), %.0f MiB at end\n",
        mib(peak_live), mib(peak_live_granules), mib(peak_held), ratio, mib(held_at_end));
    std::printf(
        "synchronizations %llu (%.0f/s), growths %llu, releases %llu, "
        "stitches %llu, failed %llu\n",
        (unsigned long long)s.synchronizations, seconds > 0 ? double(s.synchronizations) / seconds : 0.0,
        (unsigned long long)s.growths, (unsigned long long)s.releases, (unsigned long long)s.stitches,
        (unsigned long long)failed);
    // Each map is one physical allocation opened (the H200 maps whole
    // allocations only): its driver cost is per map (docs/DRIVER-FACTS.md).
    std::printf("driver calls: %llu creates, %llu maps, %llu unmaps\n", (unsigned long long)creates,
                (unsigned long long)maps, (unsigned long long)unmaps);
  }
  for (auto& c : caches) pool->detach_thread(c.second);
  if (!problems.empty()) {
    std::fprintf(stderr, "pagefast-simulate: pool check: %s\n", problems.c_str());
    return 1;
  }
  return 0;
}
