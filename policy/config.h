// policy/config.h: pagefast's configuration, parsed once from the
// environment (config.cpp). Every variable and PAGEFAST_CONF key, with its
// parser, default and meaning, is a row of the options table
// (policy/options.h); README.md's tables are generated from it. Pure C++:
// no CUDA.
//
// A bad key or value yields one message naming it and what is accepted
// (an unknown key: the nearest one too); the caller then runs as
// pass-through (Config::passthrough), or stops when Config::strict. Warnings
// only (Config::warning): a bad PAGEFAST_LOG (the level stays warn), a
// PAGEFAST_CONF key an earlier version had and this one removed (ignored:
// config.cpp kRemovedKeys), and a PAGEFAST_* variable that is no row of the
// table (Config::unknown; an error under PAGEFAST_STRICT=1).
#pragma once

#include <cstdint>
#include <string>

#include "policy/log_sink.h"
#include "policy/parsers.h"  // parse_bytes, parse_delay

namespace pagefast {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;
constexpr uint64_t kUnlimited = UINT64_MAX;

// headroom's default: what the driver and the CUDA libraries took on first
// use on the H200, outside any allocator (746 MiB: cuBLAS, cuDNN, cuSOLVER,
// cuFFT and a one-rank NCCL group; docs/POOL.md "Headroom"), and a margin.
constexpr uint64_t kDefaultHeadroomBytes = 1 * kGiB;

struct PoolConfig {
  bool enabled = true;                            // pool:on|off
  uint64_t chunk_bytes = 256 * kMiB;              // chunk_size: physical growth step
  uint64_t release_threshold_bytes = kUnlimited;  // release_threshold
  uint64_t limit_bytes = 0;                       // limit: 0 means none
  // headroom: device memory left really free for the driver and the CUDA
  // libraries while pagefast holds idle memory (policy/device_budget.h).
  uint64_t headroom_bytes = kDefaultHeadroomBytes;
  uint64_t prewarm_bytes = 0;  // prewarm
  uint64_t reserve_bytes = 0;  // reserve: VA per range, 0 = auto
  bool vmm_cache = true;       // vmm_cache: cache the program's own cuMemCreate handles
  int vmm_grow_ahead = 32;     // vmm_grow_ahead: pages grown ahead of a program's segment (0: none)
  // release_delay: idle memory unused this long decays to the driver
  // (policy/footprint.h); ~0 (off): never.
  uint64_t release_delay_ns = 5ull * 1000 * 1000 * 1000;
  // slack: freed memory may wait about the program's free rate times this
  // for a sync before the pool reuses it instead of growing
  // (policy/allowance.h); ~0 (off): the fixed allowance.
  uint64_t slack_ns = 10ull * 1000 * 1000;
  // big_chunks: a request larger than chunk_size grows a chunk of its own
  // size, kept apart from smaller blocks, and whole free ones are released
  // before another such growth (docs/POOL.md "Big chunks").
  bool big_chunks = true;
  // idle_share: before growing, the pool syncs and reuses what is idle
  // (waiting for a sync, or in thread caches) once that exceeds this
  // percent of what the pool holds (over 2 GiB on the H200); 0 (off): only
  // the allowance decides (docs/POOL.md "What is idle stays a share of
  // what is held").
  int idle_share = 15;
  // grow_ahead: while the program's memory grows, the pool maps its next
  // chunk on a service thread before it is needed, up to this percent
  // over the peak in use (policy/grow_ahead.h); 0 (off, the default: on
  // an H100 it made the seed loop's first pass slower and grew nothing
  // ahead, docs/BENCHMARKS.md "Growth ahead"): only on demand.
  int grow_ahead = 0;
  // keep_idle: the percent of the device's memory that its pools may keep
  // idle; a free that takes them over it gives the rest back to the driver
  // at once (policy/device_budget.h give_back_idle); 100: never at once.
  int keep_idle_percent = 10;
  // control: pagefast-ctl may reach the process (sleep/wake/status) over
  // the IPC socket, whose thread then starts with the first pool.
  bool control = true;
  // sleep_host_keep: the page-locked host memory of sleep with keep stays
  // page-locked between cycles (interpose/pool/host_memory.h).
  bool sleep_host_keep = true;
  // sleep_prelock: the percent of the host's memory that host memory
  // page-locked ahead of a keep region's sleep may take (0: none ahead).
  int sleep_prelock_percent = 25;
};

enum class NumaMode { Auto, Bind, Force, Off };

struct NumaConfig {
  NumaMode mode = NumaMode::Auto;  // numa:auto|bind|force|off
  int gpu = -1;                    // numa:gpu=<n>; -1 = from the local rank
};

struct Config {
  // PAGEFAST=0, or a configuration error: forward every call untouched.
  bool passthrough = false;
  // PAGEFAST_STRICT=1: a configuration error ends the process at load
  // (exit status 125) instead of running it as a pass-through.
  bool strict = false;
  PoolConfig pool;
  NumaConfig numa;
  LogLevel log_level = LogLevel::Warn;
  bool log_off = false;
  std::string log_file;         // PAGEFAST_LOG_FILE; empty = stderr
  std::string stats_path;       // PAGEFAST_STATS; "stderr", a path, empty = none
  bool report_at_exit = false;  // report:exit|off: the memory report at exit
  bool stats_on = true;         // stats:on|off: call counters and the live segment
  std::string live_dir;         // PAGEFAST_LIVE_DIR; empty = /dev/shm
  std::string report_path;      // PAGEFAST_REPORT; "stderr", a path, empty = stderr
  std::string trace_path;       // PAGEFAST_TRACE; a path (%p = pid), empty = no trace
  std::string conf_text;        // PAGEFAST_CONF as given, for the banner
  std::string error;            // the one message for a bad setting, if any
  std::string warning;  // settings that are ignored (PAGEFAST_LOG, removed keys), "; "-joined: warned, not fatal
  // PAGEFAST_* variables that are no row of the options table, named with
  // what was most likely meant: a warning (in `warning` too), or under
  // PAGEFAST_STRICT=1 the error. pagefast-run refuses them either way.
  std::string unknown;
};

// Reads the variables through `lookup` (getenv in production, a map in
// tests). Never fails: errors land in Config::error and set passthrough.
// `environment` (NAME=value strings, as environ; may be null) is where
// the names of Config::unknown are looked for.
using EnvLookup = const char* (*)(const char* name, void* user);
Config parse_config(EnvLookup lookup, void* user, const char* const* environment = nullptr);

// The message for variable `name` (PAGEFAST_...) that is no row of the
// table: the variable or PAGEFAST_CONF key nearest to it ("did you mean
// PAGEFAST_CONF=limit:?"), or every variable and key when none is near.
std::string unknown_variable_message(const std::string& name);

// What pagefast does in a process, as pagefast-stat, the stats document
// and python -m pagefast name it: active (the pool serves), off (chosen:
// PAGEFAST=0 or pool:off) or pass-through (a setting was refused: every
// call goes to the driver untouched).
enum class Mode { Active, Off, PassThrough };
Mode mode_of(const Config& config);
const char* mode_name(Mode mode);  // "active", "off", "pass-through"
// Why, in a few words ("" when active): the refused setting's message,
// "PAGEFAST=0" or "pool:off".
std::string mode_reason(const Config& config);

// A one-line description of the effective settings, for the info banner.
std::string describe(const Config& config);

// The keys of PAGEFAST_CONF with what each accepts: their rows of the
// options table (options.h), in its order.
struct ConfKeyInfo {
  const char* name;
  const char* accepts;
  const char* meaning;
};
const ConfKeyInfo* conf_keys(int* count);

}  // namespace pagefast
