// numa/bind_report.cpp: BindReport's two outputs, the log line and the
// stats JSON, from one set of fields, and make_report from a plan.
#include <cstdio>

#include "numa/bind_plan.h"
#include "numa/bind_session.h"
#include "numa/numa.h"
#include "policy/json.h"

namespace pagefast::numa {
namespace {

const char* action_name(BindAction action) {
  switch (action) {
    case BindAction::Bound: return "bound";
    case BindAction::Rebound: return "rebound";
    case BindAction::Unbound: return "unbound";
    case BindAction::Nothing: return "none";
    case BindAction::LeftAlone: return "left-alone";
    case BindAction::Failed: return "failed";
  }
  return "none";
}

std::string json_string(const std::string& text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string json_int(int value) { return value < 0 ? "null" : std::to_string(value); }
std::string json_text(const std::string& text) { return text.empty() ? "null" : json_string(text); }

// "rank 1 -> GPU 0000:41:00.0 -> node 1": as far as it is known.
std::string chain(const BindReport& r) {
  std::string out = r.who.empty() ? "" : r.who;
  if (!r.gpu.empty()) out += (out.empty() ? "GPU " : " -> GPU ") + r.gpu;
  if (r.node >= 0) out += " -> node " + std::to_string(r.node);
  return out;
}

}  // namespace

std::string BindReport::json() const {
  return std::string("{\"mode\":\"") + mode_name(mode) + "\",\"rank\":" + json_int(rank) +
         ",\"gpu\":" + json_text(gpu) + ",\"node\":" + json_int(node) + ",\"cpus\":" + json_text(cpus) +
         ",\"memory\":\"" + (memory.empty() ? "none" : memory) + "\",\"action\":\"" + action_name(action) +
         "\",\"reason\":" + json_string(reason) + "}";
}

std::string BindReport::line() const {
  const std::string memory_words = memory == "preferred" ? "memory preferred"
                                   : memory == "bind"    ? "memory bound"
                                                         : "memory untouched";
  switch (action) {
    case BindAction::Bound: return "numa: " + chain(*this) + ", cpus " + cpus + ", " + memory_words;
    case BindAction::Rebound:
      return "numa: rebound for the device in use: " + chain(*this) + ", cpus " + cpus + ", " + memory_words;
    case BindAction::Unbound: return "numa: " + reason + "; put back the affinity from before binding";
    case BindAction::Nothing:
      return "numa: " + reason + "; nothing to bind" + (gpu.empty() ? "" : " (GPU " + gpu + ")");
    case BindAction::LeftAlone: return "numa: " + reason + "; left alone (" + chain(*this) + ")";
    case BindAction::Failed: {
      const std::string where = chain(*this);
      return "numa: " + reason + "; left the process as it was" + (where.empty() ? "" : " (" + where + ")");
    }
  }
  return "numa: " + reason;
}

BindReport make_report(const BindPlan& plan, BindAction action) {
  BindReport r;
  r.mode = plan.mode;
  r.action = action;
  r.who = plan.who;
  r.rank = plan.rank;
  r.gpu = plan.gpu;
  r.node = plan.node;
  const bool applied = action == BindAction::Bound || action == BindAction::Rebound;
  r.cpus = applied ? plan.cpus.to_list() : "";
  r.memory = applied ? memory_name(plan.memory) : "none";
  r.reason = plan.reason;
  return r;
}

}  // namespace pagefast::numa
