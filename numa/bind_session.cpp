// numa/bind_session.cpp: the process's one binding session: what was read
// and decided at start (kept for check_device and the stats), and the
// public entry points of numa.h over the real environment.
#include "numa/bind_session.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "numa/nvml_oracle.h"
#include "numa/topology.h"
#include "policy/options.h"

namespace pagefast::numa {
namespace {

struct Session {
  NumaConfig config;
  StartEnv env;
  Topology topo;
  CpuSet allowed_at_start;  // the affinity before pagefast touched it
  BindPlan plan;
  bool bound = false;    // the start (or a re-) binding is in force
  bool checked = false;  // check_device has run
  BindReport report;
};

// Heap-allocated and never destroyed: check_device may run from a thread
// during exit, after static destructors would have freed a static object.
std::mutex& session_mutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
Session*& session_slot() {
  static Session* session = nullptr;
  return session;
}

void emit(LogSink log, LogLevel level, const std::string& message) {
  if (log) log(level, message.c_str());
}

BindReport failed(BindPlan plan, std::string reason) {
  plan.reason = std::move(reason);
  return make_report(plan, BindAction::Failed);
}

BindAction action_for(Verdict verdict) {
  switch (verdict) {
    case Verdict::Bind: return BindAction::Bound;
    case Verdict::Narrowed: return BindAction::LeftAlone;
    case Verdict::Unusable: return BindAction::Failed;
    default: return BindAction::Nothing;
  }
}

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

}  // namespace

BindReport bind_at_start_with(const NumaConfig& config, LogSink log, const BindContext& ctx) {
  try {
    auto s = std::make_unique<Session>();
    s->config = config;
    s->env = read_start_env(ctx.lookup, ctx.user);
    PlanInputs in{config, s->env, {}, ""};
    if (config.mode == NumaMode::Off) {
      // Off reads nothing: no file, no affinity.
      s->plan = plan_binding(in, s->topo);
      s->report = make_report(s->plan, BindAction::Nothing);
    } else {
      s->topo = read_topology(*ctx.reader, visible_needs_uuids(s->env) ? GpuUuids::ReadIfMultiNode : GpuUuids::Skip);
      complete_with_oracle(&s->topo, s->env, ctx.oracle);
      if (!s->topo.problems.empty()) {
        std::string detail = "numa: topology:";
        for (const std::string& p : s->topo.problems) detail += " " + p + ";";
        emit(log, LogLevel::Debug, detail);
      }
      if (int err = ctx.ops->get_cpus(&s->allowed_at_start)) {
        s->report = failed(s->plan, std::string("cannot read the CPU affinity (") + std::strerror(err) + ")");
      } else {
        in.allowed = s->allowed_at_start;
        s->plan = plan_binding(in, s->topo);
        s->report = make_report(s->plan, action_for(s->plan.verdict));
        if (s->plan.verdict == Verdict::Bind) {
          ApplyResult applied = apply_plan(s->plan, s->allowed_at_start, true, *ctx.ops);
          s->bound = applied.ok;
          if (!applied.ok) s->report = failed(s->plan, applied.error);
        }
      }
    }
    emit(log, s->report.action == BindAction::Failed ? LogLevel::Warn : LogLevel::Info, s->report.line());
    BindReport out = s->report;
    std::lock_guard<std::mutex> lock(session_mutex());
    delete session_slot();
    session_slot() = s.release();
    return out;
  } catch (...) {
    // Out of memory at load: bind nothing, say nothing, let the program run.
    return BindReport{};
  }
}

void check_device_with(const char* pci_bus_id, const NumaConfig& config, LogSink log, AffinityOps& ops) {
  try {
    std::string bdf;
    if (!pci_bus_id || !normalize_bdf(pci_bus_id, &bdf)) {
      emit(log, LogLevel::Debug, std::string("numa: cannot read the bus id '") + (pci_bus_id ? pci_bus_id : "") + "'");
      return;
    }
    std::lock_guard<std::mutex> lock(session_mutex());
    Session* s = session_slot();
    if (!s || s->checked || config.mode == NumaMode::Off) return;
    s->checked = true;
    if (bdf == s->plan.gpu) {
      emit(log, LogLevel::Debug, "numa: the program uses GPU " + bdf + ", the one the binding at start was for");
      return;
    }
    // Info where nothing follows (a binding asked for explicitly is kept);
    // else debug: the decision for the device in use follows at info.
    const bool kept = config.mode != NumaMode::Auto || config.gpu >= 0;
    emit(log, kept ? LogLevel::Info : LogLevel::Debug,
         "numa: the program uses GPU " + bdf +
             (s->plan.gpu.empty() ? std::string(", and at start no GPU was known to bind for")
                                  : ", not " + s->plan.gpu + " that the binding at start was for"));
    if (kept) return;

    // Only an affinity that is still what pagefast left is ours to change.
    CpuSet now;
    const CpuSet& expected = s->bound ? s->plan.cpus : s->allowed_at_start;
    if (ops.get_cpus(&now) != 0 || now != expected) {
      emit(log, LogLevel::Info,
           "numa: the program uses GPU " + bdf + " and changed its CPU affinity since start (now CPUs " +
               now.to_list() + "); pagefast leaves it as the program set it");
      return;
    }
    PlanInputs in{config, s->env, s->allowed_at_start, bdf};
    BindPlan plan = plan_binding(in, s->topo);
    if (plan.verdict == Verdict::Bind) {
      ApplyResult applied = apply_plan(plan, now, true, ops);
      if (applied.ok) {
        s->plan = plan;
        s->bound = true;
        s->report = make_report(plan, BindAction::Rebound);
      } else {
        s->report = failed(plan, applied.error);
      }
    } else if (s->bound) {
      // The start binding was for another device; the one in use cannot
      // be placed, so no binding is better than a wrong one.
      ops.set_cpus(s->allowed_at_start, true);
      ops.set_memory(MemoryPolicy::None, -1);
      s->bound = false;
      plan.reason = "device in use " + bdf + ": " + plan.reason;
      s->plan = plan;
      s->report = make_report(plan, BindAction::Unbound);
    } else {
      s->plan = plan;  // nothing to undo; the stats should name the real device
      s->report = make_report(plan, action_for(plan.verdict));
    }
    emit(log, s->report.action == BindAction::Failed ? LogLevel::Warn : LogLevel::Info, s->report.line());
  } catch (...) {
  }
}

BindReport bind_at_start(const NumaConfig& config, LogSink log) {
  try {
    const char* root = std::getenv(option_name(Opt::Sysroot));
    RootedSysfsReader reader(root ? root : "");
    NvmlOracle nvml;  // loads nothing unless asked; shut down on return
    BindContext ctx;
    ctx.lookup = env_lookup;
    ctx.reader = &reader;
    ctx.oracle = reader.is_real_root() ? &nvml : nullptr;
    ctx.ops = &system_affinity_ops();
    return bind_at_start_with(config, log, ctx);
  } catch (...) {
    return BindReport{};
  }
}

void check_device(const char* pci_bus_id, const NumaConfig& config, LogSink log) {
  check_device_with(pci_bus_id, config, log, system_affinity_ops());
}

BindReport last_report() {
  std::lock_guard<std::mutex> lock(session_mutex());
  if (Session* s = session_slot()) return s->report;
  return BindReport{};
}

}  // namespace pagefast::numa
