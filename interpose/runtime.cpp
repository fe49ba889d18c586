// interpose/runtime.cpp: start-up and exit of the shim.
//
// At load (constructor): read the configuration once, start the logger,
// bind NUMA (no CUDA call). A refused setting is one error line and
// pass-through, or with PAGEFAST_STRICT=1 the end of the process (125); a
// refused or ignored setting is said once per job (said_before). At exit
// (destructor): flush the trace, write the stats document
// and the memory report (report:exit) with plain file I/O and call no driver function: the driver may already
// be shutting down, and a pool that is not released is reclaimed by the OS.
// In secure execution every path-valued variable reads as unset
// (files::ignored_in_secure_execution, docs/SECURITY.md).
#include "interpose/runtime.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/entries.h"
#include "interpose/files.h"
#include "interpose/ipc/ipc.h"
#include "interpose/live/publisher.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/report.h"
#include "interpose/stats.h"
#include "interpose/trace.h"
#include "numa/numa.h"
#include "policy/options.h"
#include "policy/summary.h"

namespace pagefast::runtime {

// The constructor below may run before this file's dynamic initialisers,
// so nothing here has a constructor: the configuration lives on the heap,
// made at first use, and is never destroyed (late calls at exit still
// read it).
struct Started {
  Config config;
  bool numa_ran = false;  // the binding's report is numa::last_report()
};

namespace {

// The environment as the configuration reads it.
struct EnvView {
  unsigned long at_secure;
  std::string ignored;  // the variables secure execution hid, for one warning
};

const char* env_lookup(const char* name, void* user) {
  auto* view = static_cast<EnvView*>(user);
  const char* value = std::getenv(name);
  if (value && files::ignored_in_secure_execution(name, view->at_secure)) {
    view->ignored += view->ignored.empty() ? name : std::string(", ") + name;
    return nullptr;
  }
  return value;
}

void write_stats_at_exit(const Config& config) {
  if (config.stats_path.empty()) return;
  try {
    std::string why;
    if (!files::write_text(config.stats_path, stats::document(config, numa_json()), &why))
      log::write(LogLevel::Warn, "PAGEFAST_STATS: {}; not written", why);
  } catch (...) {
  }
}

// The NUMA binding's lines of the start wait for the first allocation:
// a process that never uses CUDA (a shell, a pyenv shim, grep) says
// nothing at the default level, and a job says its binding once, from the
// process that uses the GPU. At debug level they are written at once.
// Fixed storage (State::held): the sink runs in the constructor.

void hold_numa_line(LogLevel level, const char* message) {
  if (log::enabled(LogLevel::Debug)) {
    log::emit(level, message);
    return;
  }
  const int i = state().held_count.load(std::memory_order_relaxed);
  if (i >= kHeldLines || !log::enabled(level)) return;
  state().held[i].level = level;
  std::snprintf(state().held[i].text, sizeof state().held[i].text, "%s", message);
  state().held_count.store(i + 1, std::memory_order_release);
}

void say_held_lines() {
  const int n = state().held_count.exchange(0, std::memory_order_acq_rel);
  for (int i = 0; i < n; ++i) log::emit(state().held[i].level, state().held[i].text);
}

// The one line of what pagefast did (policy/summary.h), at level info, by
// a process whose pool was on, or whose calls pool:off counted.
void say_summary_at_exit(const Config& config) {
  if (!log::enabled(LogLevel::Info) || !config.error.empty() || config.passthrough) return;
  try {
    if (!config.pool.enabled) {
      log::write(LogLevel::Info, "at exit: {}", forwarded_summary_line(stats::calls(Entry::cuMemAlloc_v2)));
      return;
    }
    std::vector<policy::PoolStats> devices;
    policy::PoolStats s;
    for (int d = 0; d < pool::kMaxDevices; ++d)
      if (pool::stats_of(d, &s)) devices.push_back(s);
    log::write(LogLevel::Info, "at exit: {}", summary_line(stats::calls(Entry::cuMemAlloc_v2), devices));
  } catch (...) {
  }
}

// The process's one fork handler, in the child: each part that runs a
// thread, owns a file or holds CUDA state switches itself off there (the
// child has the parent's memory, but none of its threads or contexts).
// Registered once, before any part starts; each part's handler does
// nothing where that part never started.
void after_fork_child() {
  ipc::after_fork_child();
  trace::after_fork_child();
  live::after_fork_child();
  pool::after_fork_child();
  pool::sleep_after_fork_child();
}

// The files and the folder the configuration names, checked at load: a
// stats file or report written at exit, or a trace opened at the first
// traced call, whose folder is missing is said now, when the job can still
// be fixed, and not tried again. The live folder is checked here only under
// PAGEFAST_STRICT=1 (the publisher says it otherwise); the log file is
// opened at load (log::init).
std::string check_files(Config& c) {
  std::string out, why;
  auto say = [&](Opt o, const std::string& what) {
    out += (out.empty() ? "" : "; ") + std::string(option_name(o)) + ": " + why + what;
  };
  auto check = [&](Opt o, std::string& path) {
    if (path.empty() || path == "stderr" || files::folder_writable(files::expand_path(path), &why)) return true;
    say(o, c.strict ? "" : "; not written");
    return false;
  };
  if (!check(Opt::Stats, c.stats_path)) c.stats_path.clear();
  if (c.report_at_exit && !check(Opt::Report, c.report_path)) c.report_at_exit = false;
  if (!check(Opt::Trace, c.trace_path)) c.trace_path.clear();
  if (c.strict && !c.live_dir.empty() && c.stats_on && !files::directory_writable(c.live_dir, &why))
    say(Opt::LiveDir, "");
  return out;
}

// Whether this process has one thread (/proc/self/task holds ".", ".."
// and it); false when that cannot be read.
bool single_threaded() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return false;
  int entries = 0;
  while (readdir(tasks)) ++entries;
  closedir(tasks);
  return entries == 3;
}

// A refused or ignored setting is said once per job: the process that
// says it leaves a digest of its messages in its environment
// (PAGEFAST_SAID), which the processes it starts inherit; one that finds
// the digest of its own messages there says them at debug level only. A
// different setting has a different digest and is said again.
bool said_before(const Config& config) {
  if (config.warning.empty() && config.error.empty()) return false;
  uint64_t digest = 1469598103934665603ull;  // FNV-1a
  for (const std::string* text : {&config.warning, &config.error})
    for (unsigned char ch : *text) digest = (digest ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  const char* name = option_name(Opt::Said);
  const char* before = std::getenv(name);
  if (before && std::strcmp(before, hex) == 0) return true;
  // setenv races a getenv on another thread: the marker is left only by a
  // process with one thread (preloaded, before main), not by a library
  // loaded later into a running program.
  if (single_threaded()) setenv(name, hex, 1);
  return false;
}

}  // namespace

void init_slow() {
  std::lock_guard<std::recursive_mutex> lock(state().init_mutex);
  if (state().init_begun) return;
  state().init_begun = true;
  pthread_atfork(nullptr, nullptr, &after_fork_child);
  state().started = new Started();
  Config& g_config = state().started->config;
  EnvView view{getauxval(AT_SECURE), {}};
  g_config = parse_config(&env_lookup, &view, environ);
  // numa/ reads PAGEFAST_SYSROOT itself: in secure execution the binding
  // does not run when it is set, rather than read a root the caller chose.
  const char* sysroot = option_name(Opt::Sysroot);
  const bool sysroot_hidden = hidden_in_secure_execution(Opt::Sysroot, view.at_secure) && std::getenv(sysroot);
  if (sysroot_hidden) view.ignored += view.ignored.empty() ? sysroot : std::string(", ") + sysroot;
  std::string bad_files = log::init(g_config);
  const std::string more = check_files(g_config);
  bad_files += (bad_files.empty() || more.empty() ? "" : "; ") + more;
  if (!bad_files.empty() && g_config.strict && g_config.error.empty()) {
    g_config.error = bad_files;
    g_config.passthrough = true;
  } else if (!bad_files.empty()) {
    g_config.warning += (g_config.warning.empty() ? "" : "; ") + bad_files;
  }
  if (!view.ignored.empty())
    log::write(LogLevel::Warn, "secure execution (setuid, setgid or file capabilities): {} ignored", view.ignored);
  const bool said = said_before(g_config);
  if (!g_config.warning.empty()) log::write(said ? LogLevel::Debug : LogLevel::Warn, "{}", g_config.warning);
  if (!g_config.error.empty() && g_config.strict) {
    log::write(LogLevel::Error, "{}; {}=1: stopping the program (exit status 125)", g_config.error,
               option_name(Opt::Strict));
    _exit(125);
  }
  if (!g_config.error.empty()) {
    log::write(said ? LogLevel::Debug : LogLevel::Error,
               "{}; pagefast is OFF in this process: running as pass-through (pagefast-run refuses this setting; "
               "{}=1 stops the program instead)",
               g_config.error, option_name(Opt::Strict));
  } else if (!g_config.passthrough) {
    if (!sysroot_hidden) {
      const numa::BindReport bound = numa::bind_at_start(g_config.numa, &hold_numa_line);
      state().started->numa_ran = true;
      // The processes this one starts inherit the affinity: they learn it
      // was pagefast's (docs/NUMA.md rule 5). A process with one thread
      // only: setenv races a getenv on another.
      if (bound.action == numa::BindAction::Bound && !bound.cpus.empty() && single_threaded())
        setenv(option_name(Opt::NumaBound), bound.cpus.c_str(), 1);
    }
    pool::configure(g_config.pool, log::sink());
  }
  stats::set_call_counting(g_config.stats_on);
  // Traced in every mode, pass-through included: the trace is the
  // program's calls, whoever answers them.
  trace::configure(g_config.trace_path);
  state().passthrough = g_config.passthrough;
  state().ready.store(true, std::memory_order_release);
}

const Config& config() {
  ensure_init();
  return state().started->config;
}

std::string numa_json() {
  ensure_init();
  // The latest word: check_device may have rebound after the first context.
  if (state().started->numa_ran) return numa::last_report().json();
  return "null";
}

void note_passthrough_entry() {
  if (state().passthrough_entered.exchange(true, std::memory_order_relaxed)) return;
  if (!state().started->config.error.empty() && state().started->config.stats_on)
    live::start_passthrough(state().started->config);
}

bool driver_entered() { return state().passthrough_entered.load(std::memory_order_relaxed) || stats::any_activity(); }

bool on_first_alloc() {
  if (!state().bannered.exchange(true)) {
    say_held_lines();
    // The state's word first (docs/STATS.md "State words"): "active", or
    // "off" for pool:off, whose calls reach here to be counted.
    log::write(LogLevel::Info, "{} (pid {}, version {}): {}", mode_name(mode_of(state().started->config)), getpid(),
               PAGEFAST_VERSION, describe(state().started->config));
    if (state().started->config.stats_on) live::start(state().started->config);
  }
  if (!state().started->numa_ran || state().numa_checked.load()) return true;
  const RealDriver* real = real_driver();
  CUdevice device;
  char bus_id[32] = {0};
  // An allocation made with no current context (the driver refuses it)
  // leaves the check for a later one.
  if (!driver::has(real, &RealDriver::cuCtxGetDevice, &RealDriver::cuDeviceGetPCIBusId)) return true;
  if (driver::ctx_get_device(real, &device) != CUDA_SUCCESS) return false;
  if (state().numa_checked.exchange(true)) return true;
  if (driver::device_pci_bus_id(real, bus_id, sizeof bus_id - 1, device) == CUDA_SUCCESS)
    numa::check_device(bus_id, state().started->config.numa, log::sink());
  return true;
}

namespace {

__attribute__((constructor)) void on_load() { init_slow(); }

__attribute__((destructor)) void on_unload() {
  if (!state().ready.load(std::memory_order_acquire)) return;
  live::stop_at_exit();
  trace::flush_at_exit();
  // As the trace: a process that never reached the driver through
  // pagefast (a launcher) leaves the files of the processes that did alone.
  if (!driver_entered()) return;
  say_summary_at_exit(state().started->config);
  write_stats_at_exit(state().started->config);
  report::write_at_exit_if_requested(state().started->config);
}

}  // namespace
}  // namespace pagefast::runtime
