// policy/config.cpp: the Config read from the environment, through the
// options table (options.h): its names, parsers and messages.
#include "policy/config.h"

#include <cstring>

#include "policy/format.h"
#include "policy/options.h"
#include "policy/suggest.h"

namespace pagefast {
namespace {

static_assert(int(NumaMode::Auto) == 0 && int(NumaMode::Bind) == 1 && int(NumaMode::Force) == 2 &&
                  int(NumaMode::Off) == 3 && kNumaGpu == 4,
              "options.cpp's numa words are NumaMode's values");
static_assert(int(LogLevel::Error) == 0 && int(LogLevel::Debug) == 3 && kLogOff < 0,
              "options.cpp's level words are LogLevel's values");

// Stores a key's parsed value in its field.
void store(Config& c, Opt key, const Value& v) {
  switch (key) {
    case Opt::KeyPool: c.pool.enabled = v.choice != 0; break;
    case Opt::KeyChunkSize: c.pool.chunk_bytes = v.number; break;
    case Opt::KeyReleaseThreshold: c.pool.release_threshold_bytes = v.number; break;
    case Opt::KeyLimit: c.pool.limit_bytes = v.number; break;
    case Opt::KeyHeadroom: c.pool.headroom_bytes = v.number; break;
    case Opt::KeyPrewarm: c.pool.prewarm_bytes = v.number; break;
    case Opt::KeyReserve: c.pool.reserve_bytes = v.number; break;
    case Opt::KeyVmmCache: c.pool.vmm_cache = v.choice != 0; break;
    case Opt::KeyVmmGrowAhead: c.pool.vmm_grow_ahead = int(v.number); break;
    case Opt::KeyReleaseDelay: c.pool.release_delay_ns = v.number; break;
    case Opt::KeySlack: c.pool.slack_ns = v.number; break;
    case Opt::KeyBigChunks: c.pool.big_chunks = v.choice != 0; break;
    case Opt::KeyIdleShare: c.pool.idle_share = int(v.number); break;
    case Opt::KeyGrowAhead: c.pool.grow_ahead = int(v.number); break;
    case Opt::KeyKeepIdle: c.pool.keep_idle_percent = int(v.number); break;
    case Opt::KeyControl: c.pool.control = v.choice != 0; break;
    case Opt::KeySleepHostKeep: c.pool.sleep_host_keep = v.choice != 0; break;
    case Opt::KeySleepPrelock: c.pool.sleep_prelock_percent = int(v.number); break;
    case Opt::KeyNuma:
      if (v.choice == kNumaGpu) c.numa.gpu = v.arg;
      else c.numa.mode = NumaMode(v.choice);
      break;
    case Opt::KeyReport: c.report_at_exit = v.choice != 0; break;
    case Opt::KeyStats: c.stats_on = v.choice != 0; break;
    default: break;  // not a key
  }
}

// Keys that earlier versions accepted and this one no longer has. A
// configuration written for an earlier version that names one still runs
// with the pool, warned: each was an experiment that was off by default,
// so the behaviour the user had is the behaviour they get.
struct RemovedKey {
  const char* name;
  const char* why;
};
constexpr RemovedKey kRemovedKeys[] = {
    {"sync_ahead", "it gained no speed for more CPU time"},
    {"split_growth", "an experiment for drivers that map at an offset"},
};

const RemovedKey* find_removed_key(const std::string& key) {
  for (const RemovedKey& r : kRemovedKeys)
    if (key == r.name) return &r;
  return nullptr;
}

void warn(Config& c, const std::string& message) {
  if (!c.warning.empty()) c.warning += "; ";
  c.warning += message;
}

std::string accepted_keys() {
  std::string s;
  int count = 0;
  const OptionRow* rows = option_rows(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].scope != Scope::ConfKey) continue;
    if (!s.empty()) s += ", ";
    s += rows[i].name;
  }
  return s;
}

// "unknown key 'K'", with the key that was most likely meant when one is
// near (else the accepted keys): the one message the library logs and
// pagefast-run prints.
std::string unknown_key_message(const std::string& key) {
  const char* names[int(Opt::Count)];
  int count = 0, n = 0;
  const OptionRow* rows = option_rows(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].scope == Scope::ConfKey) names[n++] = rows[i].name;
  const std::string near = nearest_word(key, names, n);
  std::string message = option_name(Opt::Conf) + std::string(": unknown key '") + key + "'";
  if (!near.empty()) return message + ": did you mean " + near + "?";
  return message + " (accepted keys: " + accepted_keys() + ")";
}

constexpr char kPrefix[] = "PAGEFAST_";
constexpr size_t kPrefixLength = sizeof kPrefix - 1;

// Each PAGEFAST_* name of `environment` that is no row: one message each,
// "; "-joined.
std::string unknown_variables(const char* const* environment) {
  std::string out;
  for (const char* const* e = environment; e && *e; ++e) {
    const char* equals = std::strchr(*e, '=');
    if (!equals || std::strncmp(*e, kPrefix, kPrefixLength) != 0) continue;
    const std::string name(*e, size_t(equals - *e));
    if (find_variable(name.c_str())) continue;
    if (!out.empty()) out += "; ";
    out += unknown_variable_message(name);
  }
  return out;
}

void parse_conf(Config& c, const std::string& text) {
  const std::string conf = option_name(Opt::Conf);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const std::string key = trim(item.substr(0, colon));
    const OptionRow* found = find_conf_key(key);
    if (const RemovedKey* removed = found ? nullptr : find_removed_key(key)) {
      warn(c, conf + ": key '" + key + "' was removed (" + removed->why + "); ignored");
      continue;
    }
    if (!found) {
      c.error = unknown_key_message(key);
      return;
    }
    if (colon == std::string::npos) {
      c.error = conf + ": key '" + key + "' has no value (write " + key + ":<value>, accepted: " + found->accepts + ")";
      return;
    }
    const std::string value = trim(item.substr(colon + 1));
    Value v;
    if (!parse_value(found->index, value, &v)) {
      c.error = bad_value_message(found->index, value);
      return;
    }
    store(c, found->index, v);
  }
}

// A bad level is only a warning: the level stays warn.
void parse_log_level(Config& c, const std::string& given) {
  Value v;
  if (!parse_value(Opt::Log, given, &v)) {
    c.warning = bad_value_message(Opt::Log, given) + "; logging at warn";
    return;
  }
  if (v.choice == kLogOff) c.log_off = true;
  else c.log_level = LogLevel(v.choice);
}

}  // namespace

std::string unknown_variable_message(const std::string& name) {
  // The variables' names after the prefix, then the keys, all lower case:
  // PAGEFAST_LIMT is nearest to the key limit.
  std::string tails[int(Opt::Count)];
  const char* words[int(Opt::Count)];
  bool is_key[int(Opt::Count)];
  int count = 0, n = 0;
  const OptionRow* rows = option_rows(&count);
  for (int i = 0; i < count; ++i) {
    const std::string row_name = rows[i].name;
    if (rows[i].scope == Scope::Foreign || (rows[i].scope == Scope::Own && row_name.size() <= kPrefixLength)) continue;
    tails[n] = rows[i].scope == Scope::Own ? row_name.substr(kPrefixLength) : row_name;
    for (char& ch : tails[n]) ch = char(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    is_key[n] = rows[i].scope == Scope::ConfKey;
    words[n] = tails[n].c_str();
    ++n;
  }
  const std::string tail = name.size() > kPrefixLength ? name.substr(kPrefixLength) : std::string();
  const std::string near = nearest_word(tail, words, n);
  std::string message = name + ": not a variable pagefast reads";
  if (!near.empty()) {
    int i = 0;
    while (near != words[i]) ++i;  // the first: a variable before a key of the same name
    if (is_key[i]) return message + ": did you mean " + option_name(Opt::Conf) + "=" + near + ":?";
    std::string variable = std::string(kPrefix) + near;
    for (char& ch : variable) ch = char(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
    return message + ": did you mean " + variable + "?";
  }
  std::string variables;
  for (int i = 0; i < count; ++i)
    if (rows[i].scope == Scope::Own && rows[i].index != Opt::Said)
      variables += (variables.empty() ? "" : ", ") + std::string(rows[i].name);
  return message + " (its variables: " + variables + "; keys of " + option_name(Opt::Conf) + ": " + accepted_keys() +
         ")";
}

Config parse_config(EnvLookup lookup, void* user, const char* const* environment) {
  Config c;
  auto get = [&](Opt o) -> std::string {
    const char* v = lookup(option_name(o), user);
    return v ? std::string(v) : std::string();
  };
  // Read first, so that it covers every setting after it. Empty is unset;
  // blanks around a value do not count.
  const std::string strict = trim(get(Opt::Strict));
  if (!strict.empty()) {
    Value v;
    if (!parse_value(Opt::Strict, strict, &v)) c.error = bad_value_message(Opt::Strict, strict);
    else c.strict = v.choice != 0;
  }
  const char* enable = lookup(option_name(Opt::Pagefast), user);
  if (enable && *enable && c.error.empty()) {
    const std::string e = trim(enable);
    Value v;
    if (!parse_value(Opt::Pagefast, e, &v)) c.error = bad_value_message(Opt::Pagefast, e);
    else if (v.choice == 0) c.passthrough = true;
  }
  parse_log_level(c, trim(get(Opt::Log)));
  c.log_file = get(Opt::LogFile);
  c.stats_path = get(Opt::Stats);
  c.report_path = get(Opt::Report);
  c.live_dir = get(Opt::LiveDir);
  c.trace_path = get(Opt::Trace);
  c.conf_text = get(Opt::Conf);
  if (c.error.empty()) parse_conf(c, c.conf_text);
  c.unknown = unknown_variables(environment);
  if (!c.unknown.empty()) {
    if (c.strict && c.error.empty()) c.error = c.unknown;
    else warn(c, c.unknown + "; ignored");
  }
  if (!c.error.empty()) c.passthrough = true;
  return c;
}

Mode mode_of(const Config& c) {
  if (!c.error.empty()) return Mode::PassThrough;
  return c.passthrough || !c.pool.enabled ? Mode::Off : Mode::Active;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Active: return "active";
    case Mode::Off: return "off";
    case Mode::PassThrough: return "pass-through";
  }
  return "?";
}

std::string mode_reason(const Config& c) {
  if (!c.error.empty()) return c.error;
  if (c.passthrough) return std::string(option_name(Opt::Pagefast)) + "=0";
  return c.pool.enabled ? std::string() : std::string("pool:off");
}

std::string describe(const Config& c) {
  auto size = [](uint64_t b) -> std::string { return format_bytes(b, ByteStyle::Exact); };
  static const char* const kNuma[] = {"auto", "bind", "force", "off"};
  std::string s = c.passthrough ? "pass-through" : (c.pool.enabled ? "pool on" : "pool off (forwarding)");
  if (!c.passthrough && c.pool.enabled) {
    s += ", chunk_size " + size(c.pool.chunk_bytes);
    s += ", release_threshold " + size(c.pool.release_threshold_bytes);
    s += ", limit " + (c.pool.limit_bytes ? size(c.pool.limit_bytes) : std::string("none"));
    if (c.pool.headroom_bytes != kDefaultHeadroomBytes) s += ", headroom " + size(c.pool.headroom_bytes);
    if (c.pool.prewarm_bytes) s += ", prewarm " + size(c.pool.prewarm_bytes);
    if (!c.pool.vmm_cache) s += ", vmm_cache off";
    if (c.pool.vmm_grow_ahead) s += ", vmm_grow_ahead " + std::to_string(c.pool.vmm_grow_ahead);
    if (c.pool.slack_ns == ~uint64_t(0)) s += ", slack off";
    else if (c.pool.slack_ns != 10ull * 1000 * 1000) s += ", slack " + std::to_string(c.pool.slack_ns / 1000) + "us";
    if (!c.pool.big_chunks) s += ", big_chunks off";
    if (c.pool.idle_share) s += ", idle_share " + std::to_string(c.pool.idle_share) + "%";
    if (c.pool.grow_ahead != 10) s += ", grow_ahead " + std::to_string(c.pool.grow_ahead) + "%";
    if (c.pool.keep_idle_percent != 10) s += ", keep_idle " + std::to_string(c.pool.keep_idle_percent) + "%";
    if (!c.pool.sleep_host_keep) s += ", sleep_host_keep off";
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
  static ConfKeyInfo infos[int(Opt::Count)];
  int rows_count = 0, n = 0;
  const OptionRow* rows = option_rows(&rows_count);
  for (int i = 0; i < rows_count; ++i)
    if (rows[i].scope == Scope::ConfKey) infos[n++] = {rows[i].name, rows[i].accepts, rows[i].meaning};
  *count = n;
  return infos;
}

}  // namespace pagefast
