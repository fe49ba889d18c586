// interpose/runtime.cpp: start-up and exit of the shim.
//
// At load (constructor): read the configuration once, start the logger,
// bind NUMA (no CUDA call). At exit (destructor): flush the trace, write the stats document
// and the memory report (report:exit) with plain file I/O and call no driver function: the driver may already
// be shutting down, and a pool that is not released is reclaimed by the OS.
#include "interpose/runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "interpose/live/publisher.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/report.h"
#include "interpose/stats.h"
#include "interpose/trace.h"
#if PAGEFAST_HAVE_NUMA
#include "numa/numa.h"
#endif

namespace pagefast::runtime {

std::atomic<bool> g_ready{false};
bool g_passthrough = true;

namespace {

// The constructor below may run before this file's dynamic initialisers,
// so no global here has a constructor: state lives on the heap, made at
// first use, and is never destroyed (late calls at exit still read it).
struct State {
  Config config;
  bool numa_ran = false;  // the binding's report is numa::last_report()
};
State* g_state = nullptr;
std::recursive_mutex g_init_mutex;  // constant-initialised

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

}  // namespace

void init_slow() {
  // Recursive: a hook reached from inside init (a logger sink, say) must
  // not deadlock; it sees pass-through until init is complete.
  std::lock_guard<std::recursive_mutex> lock(g_init_mutex);
  static bool started = false;
  if (started) return;
  started = true;
  g_state = new State();
  Config& g_config = g_state->config;
  g_config = parse_config(&env_lookup, nullptr);
  log::init(g_config);
  if (!g_config.error.empty()) {
    log::write(LogLevel::Error, "{}; running as pass-through", g_config.error);
  } else if (!g_config.passthrough) {
#if PAGEFAST_HAVE_NUMA
    numa::bind_at_start(g_config.numa, log::sink());
    g_state->numa_ran = true;
#endif
    pool::configure(g_config.pool, log::sink());
  }
  stats::set_call_counting(g_config.stats_on);
  // Traced in every mode, pass-through included: the trace is the
  // program's calls, whoever answers them.
  trace::configure(g_config.trace_path);
  g_passthrough = g_config.passthrough;
  g_ready.store(true, std::memory_order_release);
}

const Config& config() {
  ensure_init();
  return g_state->config;
}

std::string numa_json() {
  ensure_init();
#if PAGEFAST_HAVE_NUMA
  // The latest word: check_device may have rebound after the first context.
  if (g_state->numa_ran) return numa::last_report().json();
#endif
  return "null";
}

bool on_first_alloc() {
  static std::atomic<bool> bannered{false};
  if (!bannered.exchange(true)) {
    log::write(LogLevel::Info, "active (pid {}, version {}): {}", getpid(), PAGEFAST_VERSION, describe(g_state->config));
    if (g_state->config.stats_on) live::start(g_state->config);
  }
#if PAGEFAST_HAVE_NUMA
  static std::atomic<bool> checked{false};
  if (checked.load()) return true;
  const RealDriver* real = real_driver();
  CUdevice device;
  char bus_id[32] = {0};
  // An allocation made with no current context (the driver refuses it)
  // leaves the check for a later one.
  if (!real || !real->cuCtxGetDevice || !real->cuDeviceGetPCIBusId) return true;
  if (real->cuCtxGetDevice(&device) != CUDA_SUCCESS) return false;
  if (checked.exchange(true)) return true;
  if (real->cuDeviceGetPCIBusId(bus_id, sizeof bus_id - 1, device) == CUDA_SUCCESS)
    numa::check_device(bus_id, g_state->config.numa, log::sink());
#endif
  return true;
}

namespace {

__attribute__((constructor)) void on_load() { init_slow(); }

__attribute__((destructor)) void on_unload() {
  if (!g_ready.load(std::memory_order_acquire)) return;
  live::stop_at_exit();
  trace::flush_at_exit();
  stats::write_if_requested();
  report::write_at_exit_if_requested();
}

}  // namespace
}  // namespace pagefast::runtime
