// numa/device_select.cpp: the local rank, CUDA_VISIBLE_DEVICES and the
// choice of one device from them.
#include "numa/device_select.h"

#include <cctype>
#include <cstdlib>

namespace pagefast::numa {
namespace {

// A local rank is a count of processes on one machine; anything larger
// than this is a malformed value, not a rank.
constexpr long kMaxLocalRank = 1 << 20;

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool starts_with_nocase(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && lower(text.substr(0, prefix.size())) == lower(prefix);
}

// An environment value quoted in a log line: one line, bounded, printable.
std::string printable(const std::string& text) {
  constexpr size_t kMaxQuoted = 64;
  std::string out;
  for (char c : text.substr(0, kMaxQuoted)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return text.size() > kMaxQuoted ? out + "..." : out;
}

bool parse_small_uint(const std::string& text, long limit, long* value) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *value = std::atol(text.c_str());
  return *value <= limit;
}

// The GPU whose UUID starts with `prefix` (case-insensitive); -1 when none
// or more than one does (CUDA too wants a prefix that is unique).
int gpu_by_uuid_prefix(const Topology& topo, const std::string& prefix) {
  int found = -1;
  std::string want = lower(prefix);
  if (want.size() <= 4) return -1;  // "GPU-" alone names nothing
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    if (lower(topo.gpus[i].uuid).compare(0, want.size(), want) != 0) continue;
    if (found >= 0) return -1;
    found = static_cast<int>(i);
  }
  return found;
}

// Resolves one entry: true and *gpu set (maybe -1 for an unknown MIG
// parent) when it names a device, false when it names nothing.
bool resolve_token(const std::string& token, const Topology& topo, int* gpu) {
  long index = 0;
  if (parse_small_uint(token, 1 << 16, &index)) {
    if (index >= static_cast<long>(topo.gpus.size())) return false;
    *gpu = static_cast<int>(index);
    return true;
  }
  const bool names_uuid = starts_with_nocase(token, "GPU-") || starts_with_nocase(token, "MIG-GPU-");
  if (names_uuid && !topo.uuids_read) {
    // A device it is (CUDA would say whether); which one is not worth 0.4 ms here.
    *gpu = topo.gpus.size() == 1 ? 0 : -1;
    return true;
  }
  if (starts_with_nocase(token, "GPU-")) {
    *gpu = gpu_by_uuid_prefix(topo, token);
    return *gpu >= 0;
  }
  if (starts_with_nocase(token, "MIG-GPU-")) {
    std::string parent =
        token.substr(4, token.find('/') == std::string::npos ? std::string::npos : token.find('/') - 4);
    *gpu = gpu_by_uuid_prefix(topo, parent);
    return *gpu >= 0;
  }
  if (starts_with_nocase(token, "MIG-") && token.size() > 4) {
    for (const MigParent& m : topo.mig_parents) {
      if (lower(m.mig_uuid) == lower(token)) {
        *gpu = topo.find_gpu(m.gpu_bdf);
        return true;  // even if the parent is not in /proc: a device it is
      }
    }
    *gpu = topo.gpus.size() == 1 ? 0 : -1;
    return true;
  }
  return false;
}

}  // namespace

StartEnv read_start_env(EnvLookup lookup, void* user) {
  StartEnv env;
  for (Opt var : kLocalRankVars) {
    const char* value = lookup(option_name(var), user);
    if (value && *value) {
      env.rank_var = option_name(var);
      env.rank_text = value;
      break;
    }
  }
  if (const char* visible = lookup(option_name(Opt::CudaVisibleDevices), user)) {
    env.visible_set = true;
    env.visible_devices = visible;
  }
  if (const char* order = lookup(option_name(Opt::CudaDeviceOrder), user)) env.device_order = order;
  if (const char* bound = lookup(option_name(Opt::NumaBound), user)) env.bound_cpus = bound;
  return env;
}

bool visible_needs_uuids(const StartEnv& env) {
  if (!env.visible_set) return false;
  for (const std::string& token : split_visible(env.visible_devices))
    if (starts_with_nocase(token, "GPU-") || starts_with_nocase(token, "MIG-GPU-")) return true;
  return false;
}

std::vector<std::string> split_visible(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string token = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t b = token.find_first_not_of(" \t\n");
    size_t e = token.find_last_not_of(" \t\n");
    out.push_back(b == std::string::npos ? "" : token.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.size() == 1 && out[0].empty()) out.clear();  // "" lists nothing
  return out;
}

VisibleDevices resolve_visible(const StartEnv& env, const Topology& topo) {
  VisibleDevices visible;
  if (!env.visible_set) {
    for (size_t i = 0; i < topo.gpus.size(); ++i) visible.devices.push_back({std::to_string(i), static_cast<int>(i)});
    return visible;
  }
  std::vector<bool> listed(topo.gpus.size(), false);
  for (const std::string& token : split_visible(env.visible_devices)) {
    int gpu = -1;
    // MIG instances share a parent, and unread UUIDs all map to the one GPU.
    bool is_mig = starts_with_nocase(token, "MIG-") || (!topo.uuids_read && starts_with_nocase(token, "GPU-"));
    if (!resolve_token(token, topo, &gpu) || (!is_mig && gpu >= 0 && listed[static_cast<size_t>(gpu)])) {
      visible.stopped_at = token.empty() ? "(empty entry)" : token;
      break;
    }
    if (!is_mig && gpu >= 0) listed[static_cast<size_t>(gpu)] = true;
    visible.devices.push_back({token, gpu});
  }
  return visible;
}

DeviceChoice choose_device(const StartEnv& env, const Topology& topo, int gpu_override) {
  DeviceChoice choice;
  VisibleDevices visible = resolve_visible(env, topo);
  const long count = static_cast<long>(visible.devices.size());
  if (gpu_override >= 0) {
    choice.who = "numa:gpu=" + std::to_string(gpu_override);
  } else if (env.rank_var.empty()) {
    choice.rank = 0;
    choice.who = "rank 0";
  } else {
    long rank = 0;
    if (!parse_small_uint(env.rank_text, kMaxLocalRank, &rank)) {
      choice.status = ChoiceStatus::Invalid;
      choice.why = env.rank_var + "='" + printable(env.rank_text) + "' is not a local rank";
      return choice;
    }
    choice.rank = static_cast<int>(rank);
    choice.who = "rank " + std::to_string(rank);
  }
  if (count == 0) {
    choice.status = ChoiceStatus::NoGpu;
    if (env.visible_set) choice.why = "CUDA_VISIBLE_DEVICES='" + printable(env.visible_devices) + "' names no GPU here";
    else choice.why = topo.gpus.empty() ? "no NVIDIA GPU under /proc/driver/nvidia/gpus" : "no visible GPU";
    return choice;
  }
  if (gpu_override >= 0) {
    if (gpu_override >= count) {
      choice.status = ChoiceStatus::Invalid;
      choice.why = choice.who + " but only " + std::to_string(count) + " GPU(s) are visible";
      return choice;
    }
    choice.ordinal = gpu_override;
  } else if (count == 1) {
    choice.ordinal = 0;
    if (choice.rank > 0) choice.why = "the one visible GPU";
  } else {
    choice.ordinal = static_cast<int>(choice.rank % count);
    if (choice.rank >= count)
      choice.why = "rank " + std::to_string(choice.rank) + " wraps onto " + std::to_string(count) + " visible GPUs";
  }
  const VisibleDevice& device = visible.devices[static_cast<size_t>(choice.ordinal)];
  choice.gpu = device.gpu;
  if (device.gpu < 0) {
    choice.status = ChoiceStatus::ParentUnknown;
    choice.label = printable(device.token);
    choice.why = "the GPU holding " + choice.label + " is unknown without NVML";
    return choice;
  }
  choice.status = ChoiceStatus::Chosen;
  choice.label = topo.gpus[static_cast<size_t>(device.gpu)].bdf;
  return choice;
}

}  // namespace pagefast::numa
