// policy/config.cpp: the one table of PAGEFAST_CONF keys and the parser.
#include "policy/config.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "policy/format.h"

namespace pagefast {
namespace {

using Apply = bool (*)(Config&, const std::string& value);

struct ConfKey {
  ConfKeyInfo info;
  Apply apply;
};

bool apply_size(uint64_t* field, const std::string& value, bool allow_max) {
  if (allow_max && (value == "max" || value == "unlimited")) {
    *field = kUnlimited;
    return true;
  }
  return parse_bytes(value, field);
}

bool apply_numa(Config& c, const std::string& v) {
  if (v == "auto") c.numa.mode = NumaMode::Auto;
  else if (v == "bind") c.numa.mode = NumaMode::Bind;
  else if (v == "force") c.numa.mode = NumaMode::Force;
  else if (v == "off") c.numa.mode = NumaMode::Off;
  else if (v.rfind("gpu=", 0) == 0) {
    const std::string n = v.substr(4);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      return false;
    c.numa.gpu = std::atoi(n.c_str());
  } else {
    return false;
  }
  return true;
}

const ConfKey kKeys[] = {
    {{"pool", "on|off", "serve cuMemAlloc from the VMM pool (off: count and forward)"},
     [](Config& c, const std::string& v) {
       if (v == "on" || v == "1" || v == "true") c.pool.enabled = true;
       else if (v == "off" || v == "0" || v == "false") c.pool.enabled = false;
       else return false;
       return true;
     }},
    {{"chunk_size", "a size, 2M..1T, multiple of 2M (e.g. 256M)",
      "physical memory is created, mapped and opened for access in steps of this size"},
     [](Config& c, const std::string& v) {
       uint64_t b = 0;
       if (!parse_bytes(v, &b) || b < 2 * kMiB || b % (2 * kMiB) != 0 || b > 1024 * kGiB) return false;
       c.pool.chunk_bytes = b;
       return true;
     }},
    {{"release_threshold", "a size (e.g. 8G) or max",
      "idle memory kept beyond this is unmapped and released"},
     [](Config& c, const std::string& v) { return apply_size(&c.pool.release_threshold_bytes, v, true); }},
    {{"limit", "a size of at least 2M (e.g. 40G), 0 for none",
      "most device memory the pool may hold; cuMemGetInfo then reports it as total"},
     [](Config& c, const std::string& v) {
       // Below one 2 MiB granule the pool could hold nothing at all.
       uint64_t b = 0;
       if (!parse_bytes(v, &b) || (b != 0 && b < 2 * kMiB)) return false;
       c.pool.limit_bytes = b;
       return true;
     }},
    {{"prewarm", "a size (e.g. 4G)", "created and mapped at the first allocation on a device"},
     [](Config& c, const std::string& v) { return apply_size(&c.pool.prewarm_bytes, v, false); }},
    {{"reserve", "a size, multiple of 2M, or 0 for auto",
      "virtual address space reserved per range (auto: 2x the device's memory)"},
     [](Config& c, const std::string& v) {
       uint64_t b = 0;
       if (!parse_bytes(v, &b) || b % (2 * kMiB) != 0) return false;
       c.pool.reserve_bytes = b;
       return true;
     }},
    {{"vmm_cache", "on|off",
      "the program's own cuMemCreate/cuMemMap/cuMemSetAccess/cuMemUnmap/cuMemRelease served from a cache "
      "(docs/VMM-CLIENTS.md); off: counted and forwarded"},
     [](Config& c, const std::string& v) {
       if (v == "on" || v == "1" || v == "true") c.pool.vmm_cache = true;
       else if (v == "off" || v == "0" || v == "false") c.pool.vmm_cache = false;
       else return false;
       return true;
     }},
    {{"vmm_grow_ahead", "0..32 (pages)",
      "a program's VMM segment growing page by page gets up to this many next pages created, mapped and opened "
      "ahead, with one access call (docs/VMM-CLIENTS.md); 0: none"},
     [](Config& c, const std::string& v) {
       if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos) return false;
       const int n = std::atoi(v.c_str());
       if (n > 32) return false;
       c.pool.vmm_grow_ahead = n;
       return true;
     }},
    {{"release_delay", "a time (e.g. 5s, 500ms, 0) or off",
      "idle memory that stayed unused this long goes back to the driver, down to release_threshold (default 5s)"},
     [](Config& c, const std::string& v) { return parse_delay(v, &c.pool.release_delay_ns); }},
    {{"slack", "a time (e.g. 2ms, 500us, 0) or off",
      "memory held beyond what is in use is about the program's free rate times this (64M to 1/32 of the device): "
      "longer syncs less often, shorter holds less; off: a fixed 1/128 of the device per thread"},
     [](Config& c, const std::string& v) { return parse_delay(v, &c.pool.slack_ns); }},
    {{"control", "on|off",
      "on: pagefast-ctl sleep|wake|status PID reaches the process (same uid) over the IPC socket, served from the first pool on"},
     [](Config& c, const std::string& v) {
       if (v == "on" || v == "1" || v == "true") c.pool.control = true;
       else if (v == "off" || v == "0" || v == "false") c.pool.control = false;
       else return false;
       return true;
     }},
    {{"numa", "auto|bind|force|off|gpu=<n>",
      "NUMA binding at start: mode, or which GPU to bind for"},
     apply_numa},
    {{"report", "exit|off",
      "exit: write the memory report (docs/STATS.md) at exit, to PAGEFAST_REPORT or stderr"},
     [](Config& c, const std::string& v) {
       if (v == "exit") c.report_at_exit = true;
       else if (v == "off") c.report_at_exit = false;
       else return false;
       return true;
     }},
    {{"stats", "on|off",
      "on: count calls and publish live figures for pagefast-stat (a 0600 segment in /dev/shm, removed at exit)"},
     [](Config& c, const std::string& v) {
       if (v == "on" || v == "1" || v == "true") c.stats_on = true;
       else if (v == "off" || v == "0" || v == "false") c.stats_on = false;
       else return false;
       return true;
     }},
};

constexpr int kKeyCount = sizeof(kKeys) / sizeof(kKeys[0]);

std::string accepted_keys() {
  std::string s;
  for (const ConfKey& k : kKeys) {
    if (!s.empty()) s += ", ";
    s += k.info.name;
  }
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

void parse_conf(Config& c, const std::string& text) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const std::string key = trim(item.substr(0, colon));
    const ConfKey* found = nullptr;
    for (const ConfKey& k : kKeys)
      if (key == k.info.name) found = &k;
    if (!found) {
      c.error = "PAGEFAST_CONF: unknown key '" + key + "' (accepted keys: " + accepted_keys() + ")";
      return;
    }
    if (colon == std::string::npos) {
      c.error = std::string("PAGEFAST_CONF: key '") + key + "' has no value (write " + key + ":<value>, accepted: " +
                found->info.accepts + ")";
      return;
    }
    const std::string value = trim(item.substr(colon + 1));
    if (!found->apply(c, value)) {
      c.error = "PAGEFAST_CONF: bad value '" + value + "' for key '" + key + "' (accepted: " + found->info.accepts + ")";
      return;
    }
  }
}

// pagefast's names and spdlog's (trace, critical, err, warning), any case.
// pagefast has four levels: trace is debug, critical is error (its
// errors are its gravest lines).
void parse_log_level(Config& c, const std::string& given) {
  std::string level = given;
  for (char& ch : level) ch = char(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
  if (level.empty() || level == "warn" || level == "warning") c.log_level = LogLevel::Warn;
  else if (level == "off") c.log_off = true;
  else if (level == "error" || level == "err" || level == "critical") c.log_level = LogLevel::Error;
  else if (level == "info") c.log_level = LogLevel::Info;
  else if (level == "debug" || level == "trace") c.log_level = LogLevel::Debug;
  else
    c.warning = "PAGEFAST_LOG: bad value '" + given +
                "' (accepted: off, critical, error, warn, info, debug, trace); logging at warn";
}

}  // namespace

bool parse_bytes(const std::string& text, uint64_t* bytes) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t i = 0;
  uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return false;
    n = n * 10 + d;
  }
  std::string unit = text.substr(i);
  for (char& ch : unit) ch = char(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
  uint64_t mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = kKiB;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = kMiB;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = kGiB;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1024 * kGiB;
  else return false;
  if (mul != 1 && n > UINT64_MAX / mul) return false;
  *bytes = n * mul;
  return true;
}

bool parse_delay(const std::string& text, uint64_t* ns) {
  if (text == "off" || text == "never") {
    *ns = ~uint64_t(0);
    return true;
  }
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t i = 0;
  uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (n > 1000000000ull) return false;  // over 30 years in any unit
    n = n * 10 + uint64_t(text[i] - '0');
  }
  const std::string unit = text.substr(i);
  uint64_t mul;
  if (unit.empty() || unit == "s") mul = 1000ull * 1000 * 1000;
  else if (unit == "ms") mul = 1000ull * 1000;
  else if (unit == "us") mul = 1000ull;
  else if (unit == "m" || unit == "min") mul = 60ull * 1000 * 1000 * 1000;
  else return false;
  *ns = n * mul;
  return true;
}

Config parse_config(EnvLookup lookup, void* user) {
  Config c;
  auto get = [&](const char* name) -> std::string {
    const char* v = lookup(name, user);
    return v ? std::string(v) : std::string();
  };
  const char* enable = lookup("PAGEFAST", user);
  if (enable && *enable) {
    const std::string e = trim(enable);
    if (e == "0" || e == "off" || e == "false") c.passthrough = true;
    else if (!(e == "1" || e == "on" || e == "true"))
      c.error = "PAGEFAST: bad value '" + e + "' (accepted: 1, on, true, 0, off, false)";
  }
  parse_log_level(c, trim(get("PAGEFAST_LOG")));
  c.log_file = get("PAGEFAST_LOG_FILE");
  c.stats_path = get("PAGEFAST_STATS");
  c.report_path = get("PAGEFAST_REPORT");
  c.live_dir = get("PAGEFAST_LIVE_DIR");
  c.trace_path = get("PAGEFAST_TRACE");
  c.conf_text = get("PAGEFAST_CONF");
  if (c.error.empty()) parse_conf(c, c.conf_text);
  if (!c.error.empty()) c.passthrough = true;
  return c;
}

std::string describe(const Config& c) {
  auto size = [](uint64_t b) -> std::string { return format_bytes(b, ByteStyle::Exact); };
  static const char* const kNuma[] = {"auto", "bind", "force", "off"};
  std::string s = c.passthrough ? "pass-through" : (c.pool.enabled ? "pool on" : "pool off (forwarding)");
  if (!c.passthrough && c.pool.enabled) {
    s += ", chunk_size " + size(c.pool.chunk_bytes);
    s += ", release_threshold " + size(c.pool.release_threshold_bytes);
    s += ", limit " + (c.pool.limit_bytes ? size(c.pool.limit_bytes) : std::string("none"));
    if (c.pool.prewarm_bytes) s += ", prewarm " + size(c.pool.prewarm_bytes);
    if (!c.pool.vmm_cache) s += ", vmm_cache off";
    if (c.pool.vmm_grow_ahead) s += ", vmm_grow_ahead " + std::to_string(c.pool.vmm_grow_ahead);
    if (c.pool.slack_ns == ~uint64_t(0)) s += ", slack off";
    else if (c.pool.slack_ns != 2ull * 1000 * 1000) s += ", slack " + std::to_string(c.pool.slack_ns / 1000) + "us";
    if (c.pool.release_delay_ns == ~uint64_t(0)) s += ", release_delay off";
    else if (c.pool.release_delay_ns != 5ull * 1000 * 1000 * 1000)
      s += ", release_delay " + std::to_string(c.pool.release_delay_ns / 1000000) + "ms";
  }
  s += std::string(", numa ") + kNuma[int(c.numa.mode)];
  if (c.numa.gpu >= 0) s += " gpu=" + std::to_string(c.numa.gpu);
  if (!c.stats_on) s += ", stats off";
  return s;
}

const ConfKeyInfo* conf_keys(int* count) {
  static ConfKeyInfo infos[kKeyCount];
  for (int i = 0; i < kKeyCount; ++i) infos[i] = kKeys[i].info;
  *count = kKeyCount;
  return infos;
}

}  // namespace pagefast
