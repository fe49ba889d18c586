// policy/options.cpp: the options table (options.h), its lookups, and the
// dispatch from a row to its parser (parsers.h).
//
// To add a variable or a key: an Opt in options.h, a row here (the
// static_asserts keep the order), its reader (config.cpp for a key), then
// tools/options/update-docs for docs/OPTIONS.md and pagefast-run --help (the test
// `options docs` fails until then).
#include "policy/options.h"

#include <cstring>

#include "policy/log_sink.h"

namespace pagefast {
namespace {

// ---- parsers --------------------------------------------------------------

constexpr Parser kOnOff{Kind::OnOff};
constexpr Parser kTime{Kind::Time};
constexpr Parser kKeys{Kind::Keys};
constexpr Parser kPath{Kind::Path};
constexpr Parser kDirectory{Kind::Directory};
constexpr Parser kText{Kind::Text};

constexpr uint64_t k2M = 2ull << 20;
// min, max, multiple, zero_ok, max_word
constexpr Parser kAnySize{Kind::Size, {0, UINT64_MAX, 1, true, false}};
constexpr Parser kSizeOrMax{Kind::Size, {0, UINT64_MAX, 1, true, true}};
// Below one 2 MiB granule the pool could hold nothing at all.
constexpr Parser kChunkSize{Kind::Size, {k2M, 1ull << 40, k2M, false, false}};
constexpr Parser kLimit{Kind::Size, {k2M, UINT64_MAX, 1, true, false}};
constexpr Parser kReserve{Kind::Size, {0, UINT64_MAX, k2M, true, false}};
constexpr Parser kGrowAhead{Kind::Count, {}, nullptr, 0, false, 32};
constexpr Parser kPercent{Kind::Count, {}, nullptr, 0, false, 100};

// pagefast's level names and spdlog's (trace, critical, err, warning), any
// case. pagefast has four levels: trace is debug, critical is error (its
// errors are its gravest lines). Empty is the default.
constexpr Choice kLevels[] = {
    {"", int(LogLevel::Warn)},          {"warn", int(LogLevel::Warn)},
    {"warning", int(LogLevel::Warn)},   {"off", kLogOff},
    {"error", int(LogLevel::Error)},    {"err", int(LogLevel::Error)},
    {"critical", int(LogLevel::Error)}, {"info", int(LogLevel::Info)},
    {"debug", int(LogLevel::Debug)},    {"trace", int(LogLevel::Debug)},
};
constexpr Parser kLevel{Kind::Choice, {}, kLevels, int(sizeof kLevels / sizeof kLevels[0]), true};

// NumaMode's values (config.h), and gpu=<n> beside them.
constexpr Choice kNumaWords[] = {{"auto", 0}, {"bind", 1}, {"force", 2}, {"off", 3}, {"gpu=", kNumaGpu, 4}};
constexpr Parser kNuma{Kind::Choice, {}, kNumaWords, int(sizeof kNumaWords / sizeof kNumaWords[0])};

constexpr Choice kReportWords[] = {{"exit", 1}, {"off", 0}};
constexpr Parser kReport{Kind::Choice, {}, kReportWords, 2};

// ---- the table ------------------------------------------------------------

constexpr uint8_t kLib = kReadByLibrary;
constexpr uint8_t kRun = kReadByLauncher;

constexpr OptionRow kRows[] = {
    // index, name, scope, parser, accepts, default ("" = unset), path, readers, meaning, notes
    {Opt::Pagefast, "PAGEFAST", Scope::Own, &kOnOff, "1, on, true, 0, off, false", "1", false, kLib | kRun,
     "`0`: the library stays loaded but is a pure pass-through, nothing counted",
     "`pagefast-run --if-enabled` preloads only when it is set and on"},
    {Opt::Conf, "PAGEFAST_CONF", Scope::Own, &kKeys, "key:value,...", "", false, kLib | kRun,
     "the keys below, in the style of `PYTORCH_CUDA_ALLOC_CONF`", ""},
    {Opt::Strict, "PAGEFAST_STRICT", Scope::Own, &kOnOff, "1, on, true, 0, off, false", "0", false, kLib | kRun,
     "`1`: a refused setting (a bad key or value above) ends the process at load with exit status 125 and the "
     "message, instead of running it with pagefast as a pass-through",
     "as `PYTORCH_CUDA_ALLOC_CONF` stops a job; `pagefast-run` refuses such a setting before the program starts "
     "either way"},
    {Opt::Log, "PAGEFAST_LOG", Scope::Own, &kLevel, "off, critical, error, warn, info, debug, trace", "warn", false,
     kLib, "log level; a bad value is one warning and the level stays `warn`",
     "spdlog's names too (`err`, `warning`; `critical` is `error`, `trace` is `debug`); each line starts "
     "`pagefast[PID rRANK HH:MM:SS.mmm]: LEVEL:` (no rank when no launcher set one). At `info` one line at the "
     "first allocation says that pagefast is active and how it is configured"},
    {Opt::LogFile, "PAGEFAST_LOG_FILE", Scope::Own, &kPath, "a path (%p, %r, %h)", "", true, kLib,
     "log there instead of stderr (appended)",
     "opened at load under the file rules of docs/SECURITY.md, stderr if refused"},
    {Opt::Stats, "PAGEFAST_STATS", Scope::Own, &kPath, "a path (%p, %r, %h) or stderr", "", true, kLib,
     "write the stats JSON there at exit (docs/STATS.md)",
     "not written by a process that made no CUDA call (a launcher). In every path variable `%p` is the pid, `%r` "
     "the local rank (the first of the launchers' variables below that is set; `0` when none is), `%h` the host "
     "name"},
    {Opt::Report, "PAGEFAST_REPORT", Scope::Own, &kPath, "a path (%p, %r, %h) or stderr", "stderr", true, kLib,
     "where `report:exit` writes the memory report (docs/STATS.md \"Memory report\")",
     "same file rules as `PAGEFAST_STATS`"},
    {Opt::Trace, "PAGEFAST_TRACE", Scope::Own, &kPath, "a path (%p, %r, %h)", "", true, kLib,
     "record every `cuMemAlloc`/`cuMemFree` into a binary trace for `pagefast-replay` (docs/TRACE.md)",
     "size, address, result, thread, device, time; read once at load, works in every mode"},
    {Opt::LiveDir, "PAGEFAST_LIVE_DIR", Scope::Own, &kDirectory, "a directory", "/dev/shm", true, kLib | kReadByStat,
     "where each process keeps its live-stats segment for `pagefast-stat`", ""},
    {Opt::IpcDir, "PAGEFAST_IPC_DIR", Scope::Own, &kDirectory, "a directory", "", true, kLib | kReadByCtl,
     "where a process sharing pool memory through CUDA IPC keeps its socket",
     "unset: in the abstract socket namespace; set it to a directory both processes see when they do not share a "
     "network namespace (docs/IPC.md); "
     "`pagefast-ctl` looks there too"},
    {Opt::IpcIdle, "PAGEFAST_IPC_IDLE", Scope::Own, &kTime, "a time above 0 (e.g. 30s, 200ms)", "30s", false, kLib,
     "a CUDA IPC connection that sent nothing for this long is closed, unless holds end with it (docs/IPC.md)",
     "the importer connects again when it needs to; tests set it short"},
    {Opt::Sysroot, "PAGEFAST_SYSROOT", Scope::Own, &kDirectory, "a directory", "", true, kLib | kRun,
     "root for every /proc and /sys path the NUMA binding reads (tests)",
     "in secure execution the binding is skipped when it is set"},
    {Opt::Library, "PAGEFAST_LIBRARY", Scope::Own, &kPath, "a path", "", false, kRun,
     "the `libpagefast.so` that `pagefast-run` preloads, instead of the one it finds", ""},
    {Opt::Commit, "PAGEFAST_COMMIT", Scope::Own, &kText, "a commit id", "", false, kReadByGpuScripts,
     "the commit the GPU scripts' reports name (unset: the checkout's `HEAD`; `unknown` in tools/bench/multi.py)",
     "set it on a GPU machine whose copy of the tree has no history"},
    {Opt::Said, "PAGEFAST_SAID", Scope::Own, &kText, "set by the library", "", false, kLib,
     "not for users: the library sets it in its own process once it has said a refused or ignored setting, so that "
     "the processes the program starts (a shim's helpers) do not say it again",
     "a digest of the message; a different setting is said again"},
    {Opt::NumaBound, "PAGEFAST_NUMA_BOUND", Scope::Own, &kText, "set by the library", "", false, kLib,
     "not for users: the CPUs the library bound its process to at start, inherited by the processes it starts, so "
     "that a child still on exactly those CPUs (a rank that torchrun started) binds for its own GPU instead of "
     "taking them for a narrowing of the user's (docs/NUMA.md rule 5)",
     "a CPU list"},

    {Opt::LocalRank, "LOCAL_RANK", Scope::Foreign, &kText, "a decimal number", "", false, kLib | kRun,
     "the local rank (torchrun, DeepSpeed, Accelerate): which GPU the NUMA binding is for, `%r`, the log prefix",
     "the first of these four that is set and not empty is the rank"},
    {Opt::SlurmLocalId, "SLURM_LOCALID", Scope::Foreign, &kText, "a decimal number", "", false, kLib | kRun,
     "the local rank under srun", ""},
    {Opt::OmpiLocalRank, "OMPI_COMM_WORLD_LOCAL_RANK", Scope::Foreign, &kText, "a decimal number", "", false,
     kLib | kRun, "the local rank under Open MPI", ""},
    {Opt::MpiLocalRankId, "MPI_LOCALRANKID", Scope::Foreign, &kText, "a decimal number", "", false, kLib | kRun,
     "the local rank under MPICH and Intel MPI", ""},
    {Opt::CudaVisibleDevices, "CUDA_VISIBLE_DEVICES", Scope::Foreign, &kText, "CUDA's device list", "", false,
     kLib | kRun, "the GPUs the process sees, read as CUDA reads it, for the NUMA binding (docs/NUMA.md)", ""},
    {Opt::CudaDeviceOrder, "CUDA_DEVICE_ORDER", Scope::Foreign, &kText, "CUDA's device order", "", false, kLib | kRun,
     "named in the NUMA report only: ordinals follow PCI bus order either way (docs/NUMA.md)", ""},
    {Opt::Columns, "COLUMNS", Scope::Foreign, &kText, "a decimal number", "", false, kReadByStat,
     "the width `pagefast-stat`'s table fits its COMMAND column to (else the terminal's; neither: not cut)", ""},

    {Opt::KeyPool, "pool", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "`off`: count and forward every call to the driver", ""},
    {Opt::KeyChunkSize, "chunk_size", Scope::ConfKey, &kChunkSize, "a size, 2M..1T, multiple of 2M (e.g. 256M)", "256M",
     false, kLib, "physical memory is created, mapped and opened for access in steps of this size", ""},
    {Opt::KeyReleaseThreshold, "release_threshold", Scope::ConfKey, &kSizeOrMax, "a size (e.g. 8G) or max", "max",
     false, kLib, "idle memory kept beyond this is unmapped and released",
     "also the floor of `release_delay`'s decay (`max`: no floor)"},
    {Opt::KeyLimit, "limit", Scope::ConfKey, &kLimit, "a size of at least 2M (e.g. 40G), 0 for none", "0", false, kLib,
     "the most device memory the pool may hold; `cuMemGetInfo` then reports it as total", ""},
    {Opt::KeyHeadroom, "headroom", Scope::ConfKey, &kAnySize, "a size (e.g. 1G), 0 for none", "1G", false, kLib,
     "while pagefast holds idle memory, the device keeps at least this much really free for the driver and the "
     "CUDA libraries (docs/POOL.md \"Headroom\")",
     "idle memory goes back when free memory falls under it; `0`: only out-of-memory answers give it back"},
    {Opt::KeyPrewarm, "prewarm", Scope::ConfKey, &kAnySize, "a size (e.g. 4G)", "0", false, kLib,
     "created and mapped at the first allocation on a device",
     "at most what the device has free less `headroom`, and the `limit` (one warning when capped)"},
    {Opt::KeyReserve, "reserve", Scope::ConfKey, &kReserve, "a size, multiple of 2M, or 0 for auto", "0", false, kLib,
     "virtual address space reserved per range (`0`: auto, 2x the device's memory)", ""},
    {Opt::KeyVmmCache, "vmm_cache", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "the program's own VMM calls served from a cache of the handles it released, and a range it freed with only "
     "those in it kept for its next reservation of that size; what stays unused for `release_delay` goes back "
     "(docs/OWN-VMM.md)",
     "`cuMemCreate`/`cuMemMap`/`cuMemSetAccess`/`cuMemUnmap`/`cuMemRelease`: PyTorch's expandable segments, JAX, "
     "vLLM; `off`: counted and forwarded. On only with the pool on"},
    {Opt::KeyVmmGrowAhead, "vmm_grow_ahead", Scope::ConfKey, &kGrowAhead, "0..32 (pages)", "32", false, kLib,
     "a program's VMM segment growing page by page gets up to this many next pages created, mapped and opened "
     "ahead by the `pagefast-vmm` thread (docs/OWN-VMM.md)",
     "pages made ahead are counted free in `cuMemGetInfo` and given back on out-of-memory and after "
     "`release_delay` unused; `0`: off"},
    {Opt::KeyReleaseDelay, "release_delay", Scope::ConfKey, &kTime,
     "a time with a unit: us, ms, s or m (e.g. 5s, 500ms), 0 or off", "5s", false, kLib,
     "idle memory unused this long goes back to the driver, by the `pagefast-trim` thread (docs/POOL.md "
     "\"Footprint\"); so do the VMM handles a program released and pagefast cached (docs/OWN-VMM.md)",
     "`0`: at the next step (10 ms); `off`: never"},
    {Opt::KeySlack, "slack", Scope::ConfKey, &kTime, "a time with a unit: us, ms, s or m (e.g. 10ms, 500us), 0 or off",
     "10ms", false, kLib,
     "memory held beyond what is in use is about the program's free rate times this, between 64M and 1/32 of "
     "the device (docs/POOL.md \"Footprint\")",
     "longer syncs less often, shorter holds less; `off`: a fixed allowance of 1/128 of the device per thread"},
    {Opt::KeyBigChunks, "big_chunks", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "`on`: a request larger than `chunk_size` grows a chunk of its own size, whose free runs serve only such "
     "requests (leaving at most an eighth unused); whole free ones are released before another such growth "
     "(docs/POOL.md \"Big chunks\")",
     "for programs whose large blocks change size (dynamic shapes); `off`: large requests share chunks with "
     "small ones (docs/BENCHMARKS.md)"},
    {Opt::KeyIdleShare, "idle_share", Scope::ConfKey, &kPercent, "0..100 (percent)", "15", false, kLib,
     "before the pool grows for a request under a chunk, it syncs and reuses its idle memory when that is more "
     "than this percent of what it holds (docs/POOL.md \"Footprint\")",
     "`0`: only `slack`'s allowance decides; lower holds less and syncs more (docs/BENCHMARKS.md)"},
    {Opt::KeyGrowAhead, "grow_ahead", Scope::ConfKey, &kPercent, "0..100 (percent)", "0", false, kLib,
     "while a program's memory grows, the pool maps its next chunk on the `pagefast-grow` thread before the "
     "program needs it, up to this percent over the most it has had in use (docs/POOL.md \"Growth ahead\")",
     "`0`: the pool grows only when a request finds no room, on the program's thread; not under a `limit`"},
    {Opt::KeyKeepIdle, "keep_idle", Scope::ConfKey, &kPercent, "0..100 (percent)", "10", false, kLib,
     "the percent of a device's memory that pagefast keeps idle (freed, for reuse at pool speed); a free that "
     "takes idle memory over it gives the rest back to the driver at once, so that memory a program frees or "
     "empties from its own cache (`torch.cuda.empty_cache()`) reaches other processes as without pagefast "
     "(docs/POOL.md \"Given back at once\")",
     "a program that takes the memory back within `release_delay` keeps it from then on; `100`: only "
     "`release_delay` and `headroom` give idle memory back"},
    {Opt::KeyControl, "control", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "`on`: `pagefast-ctl` (sleep, wake, status of a PID) reaches the process (same uid) over its IPC socket",
     "whose thread starts with the first pool"},
    {Opt::KeySleepHostKeep, "sleep_host_keep", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "`on`: the page-locked host memory that sleep with keep copied into stays page-locked after wake, for the "
     "next sleep to copy into at once; `pagefast_pool_trim` gives it back (docs/POOL.md \"Sleep and wake\")",
     "`off`: given back at each wake, and page-locked again at each sleep (slower)"},
    {Opt::KeySleepPrelock, "sleep_prelock", Scope::ConfKey, &kPercent, "0..100 (percent)", "25", false, kLib,
     "regions that keep their contents at sleep have page-locked host memory made ready for it in the "
     "background as they grow, so that even the first sleep copies at the speed of the link; at most this "
     "percent of the host's memory (docs/SLEEP.md \"Page-locked ahead\")",
     "`0`: none ahead (the first sleep page-locks as it copies, about 5 GiB/s)"},
    {Opt::KeyNuma, "numa", Scope::ConfKey, &kNuma, "auto|bind|force|off|gpu=<n>", "auto", false, kLib | kRun,
     "NUMA binding at start (docs/NUMA.md); `gpu=<n>` picks the GPU to bind for", ""},
    {Opt::KeyReport, "report", Scope::ConfKey, &kReport, "exit|off", "off", false, kLib,
     "`exit`: write the human-readable memory report at exit, to `PAGEFAST_REPORT` or stderr (docs/STATS.md "
     "\"Memory report\")",
     ""},
    {Opt::KeyStats, "stats", Scope::ConfKey, &kOnOff, "on|off", "on", false, kLib,
     "`on`: count calls and publish live figures for `pagefast-stat` (docs/STATS.md \"Live stats\")",
     "`off`: neither (doors are still counted, the pool's own figures still kept)"},
};

constexpr int kRowCount = int(sizeof kRows / sizeof kRows[0]);
static_assert(kRowCount == int(Opt::Count), "one row per Opt");

constexpr bool rows_in_order() {
  for (int i = 0; i < kRowCount; ++i)
    if (int(kRows[i].index) != i) return false;
  return true;
}
static_assert(rows_in_order(), "kRows[i].index == i: a row is where its Opt says");

}  // namespace

const OptionRow& option(Opt o) { return kRows[int(o)]; }

const OptionRow* option_rows(int* count) {
  *count = kRowCount;
  return kRows;
}

const OptionRow* find_variable(const char* name) {
  for (const OptionRow& row : kRows)
    if (row.scope != Scope::ConfKey && std::strcmp(row.name, name) == 0) return &row;
  return nullptr;
}

const OptionRow* find_conf_key(const std::string& key) {
  for (const OptionRow& row : kRows)
    if (row.scope == Scope::ConfKey && key == row.name) return &row;
  return nullptr;
}

bool hidden_in_secure_execution(Opt o, unsigned long at_secure) { return at_secure != 0 && option(o).path; }

bool hidden_in_secure_execution(const char* name, unsigned long at_secure) {
  if (at_secure == 0) return false;
  const OptionRow* row = find_variable(name);
  return row && row->path;
}

bool parse_value(Opt o, const std::string& text, Value* out) {
  const Parser& p = *option(o).parser;
  Value v;
  bool ok = true;
  switch (p.kind) {
    case Kind::OnOff: {
      bool on = false;
      ok = parse_on_off(text, &on);
      v.choice = on ? 1 : 0;
      break;
    }
    case Kind::Size: ok = parse_size(text, p.size, &v.number); break;
    case Kind::Time: ok = parse_delay(text, &v.number); break;
    case Kind::Count: ok = parse_count(text, p.max, &v.number); break;
    case Kind::Choice: ok = parse_choice(text, p.choices, p.choice_count, p.fold_case, &v.choice, &v.arg); break;
    case Kind::Keys:
    case Kind::Path:
    case Kind::Directory:
    case Kind::Text: break;
  }
  if (ok) *out = v;
  return ok;
}

std::string bad_value_message(Opt o, const std::string& value) {
  const OptionRow& row = option(o);
  if (row.scope == Scope::ConfKey)
    return std::string(option_name(Opt::Conf)) + ": bad value '" + value + "' for key '" + row.name +
           "' (accepted: " + row.accepts + ")";
  return std::string(row.name) + ": bad value '" + value + "' (accepted: " + row.accepts + ")";
}

}  // namespace pagefast
