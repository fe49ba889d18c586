// tests/config/options_test.cpp: the options table (policy/options.h) and
// the parsers behind it (policy/parsers.h): every row is well formed and
// parses its own default into the built-in configuration; each parser
// takes and refuses what it says; a bad value gives the one message.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "env.h"
#include "policy/config.h"
#include "policy/options.h"

using namespace pagefast;

namespace {

using test::Env;

// Every field a key or a non-path variable sets.
void check_same(const Config& a, const Config& b) {
  CHECK(a.passthrough == b.passthrough);
  CHECK(a.pool.enabled == b.pool.enabled);
  CHECK(a.pool.chunk_bytes == b.pool.chunk_bytes);
  CHECK(a.pool.release_threshold_bytes == b.pool.release_threshold_bytes);
  CHECK(a.pool.limit_bytes == b.pool.limit_bytes);
  CHECK(a.pool.prewarm_bytes == b.pool.prewarm_bytes);
  CHECK(a.pool.reserve_bytes == b.pool.reserve_bytes);
  CHECK(a.pool.vmm_cache == b.pool.vmm_cache);
  CHECK(a.pool.vmm_grow_ahead == b.pool.vmm_grow_ahead);
  CHECK(a.pool.idle_share == b.pool.idle_share);
  CHECK(a.pool.big_chunks == b.pool.big_chunks);
  CHECK(a.pool.release_delay_ns == b.pool.release_delay_ns);
  CHECK(a.pool.control == b.pool.control);
  CHECK(a.numa.mode == b.numa.mode);
  CHECK(a.numa.gpu == b.numa.gpu);
  CHECK(a.log_level == b.log_level);
  CHECK(a.log_off == b.log_off);
  CHECK(a.report_at_exit == b.report_at_exit);
  CHECK(a.stats_on == b.stats_on);
  CHECK(a.error == b.error);
  CHECK(a.warning == b.warning);
}

std::vector<const OptionRow*> all_rows() {
  int count = 0;
  const OptionRow* rows = option_rows(&count);
  std::vector<const OptionRow*> out;
  for (int i = 0; i < count; ++i) out.push_back(&rows[i]);
  return out;
}

}  // namespace

TEST_CASE("every row is where its index says, named once, with a one-line meaning") {
  const auto rows = all_rows();
  REQUIRE(rows.size() == size_t(Opt::Count));
  std::set<std::string> variables, keys;
  for (size_t i = 0; i < rows.size(); ++i) {
    const OptionRow& r = *rows[i];
    INFO(r.name);
    CHECK(int(r.index) == int(i));
    CHECK(&option(r.index) == &r);
    CHECK(std::strlen(r.name) > 0);
    CHECK(std::strlen(r.accepts) > 0);
    CHECK(std::strlen(r.meaning) > 0);
    CHECK(r.readers != 0);
    CHECK(r.parser != nullptr);
    for (const char* text : {r.name, r.accepts, r.default_value, r.meaning, r.notes})
      CHECK(std::strchr(text, '\n') == nullptr);
    if (r.scope == Scope::ConfKey) {
      CHECK(keys.insert(r.name).second);
      CHECK(find_conf_key(r.name) == &r);
      CHECK(find_variable(r.name) == nullptr);
      CHECK_FALSE(r.path);
    } else {
      CHECK(variables.insert(r.name).second);
      CHECK(find_variable(r.name) == &r);
      CHECK(std::string(r.name).rfind("PAGEFAST", 0) == (r.scope == Scope::Own ? 0u : std::string::npos));
    }
  }
  CHECK(find_variable("HOME") == nullptr);
  CHECK(find_conf_key("bogus") == nullptr);
  CHECK(std::string(option_name(Opt::IpcDir)) == "PAGEFAST_IPC_DIR");
  CHECK(std::string(option_name(Opt::KeyChunkSize)) == "chunk_size");
}

TEST_CASE("every row parses its default") {
  for (const OptionRow* r : all_rows()) {
    INFO(r->name);
    Value v;
    CHECK(parse_value(r->index, r->default_value, &v));
  }
}

TEST_CASE("a key set to its documented default leaves the built-in configuration as it is") {
  const Config builtin = Env().parse();
  for (const OptionRow* r : all_rows()) {
    if (r->scope != Scope::ConfKey) continue;
    INFO(r->name << ":" << r->default_value);
    Env env;
    env.vars[option_name(Opt::Conf)] = std::string(r->name) + ":" + r->default_value;
    check_same(env.parse(), builtin);
  }
  // And the variables that have a parser: PAGEFAST=1, PAGEFAST_LOG=warn.
  for (Opt o : {Opt::Pagefast, Opt::Log}) {
    INFO(option_name(o));
    Env env;
    env.vars[option_name(o)] = option(o).default_value;
    check_same(env.parse(), builtin);
  }
}

TEST_CASE("the path column: exactly the variables that name a file or directory") {
  const std::set<std::string> paths = {"PAGEFAST_LOG_FILE", "PAGEFAST_STATS",   "PAGEFAST_REPORT", "PAGEFAST_TRACE",
                                       "PAGEFAST_LIVE_DIR", "PAGEFAST_IPC_DIR", "PAGEFAST_SYSROOT"};
  for (const OptionRow* r : all_rows()) {
    INFO(r->name);
    const bool library_path = r->path;
    CHECK(library_path == (paths.count(r->name) == 1));
    if (r->scope == Scope::ConfKey) continue;
    CHECK(hidden_in_secure_execution(r->name, 1) == library_path);
    CHECK(hidden_in_secure_execution(r->index, 1) == library_path);
    CHECK_FALSE(hidden_in_secure_execution(r->name, 0));
    CHECK_FALSE(hidden_in_secure_execution(r->index, 0));
  }
  CHECK_FALSE(hidden_in_secure_execution("HOME", 1));
}

TEST_CASE("the one on/off parser") {
  bool on = false;
  for (const char* yes : {"on", "1", "true"}) {
    on = false;
    CHECK((parse_on_off(yes, &on) && on));
  }
  for (const char* no : {"off", "0", "false"}) {
    on = true;
    CHECK((parse_on_off(no, &on) && !on));
  }
  for (const char* bad : {"", "ON", "yes", "no", " on", "2", "onn", "of"}) {
    INFO(bad);
    CHECK_FALSE(parse_on_off(bad, &on));
  }
}

TEST_CASE("the one enum parser: exact words, any case on request, numbered words") {
  const Choice words[] = {{"auto", 0}, {"off", 3}, {"gpu=", 9, 4}};
  int value = -1, arg = -1;
  CHECK((parse_choice("off", words, 3, false, &value, &arg) && value == 3 && arg == -1));
  CHECK_FALSE(parse_choice("OFF", words, 3, false, &value, &arg));
  CHECK((parse_choice("OFF", words, 3, true, &value, &arg) && value == 3));
  CHECK((parse_choice("gpu=12", words, 3, false, &value, &arg) && value == 9 && arg == 12));
  CHECK((parse_choice("gpu=9999", words, 3, false, &value, &arg) && arg == 9999));
  for (const char* bad : {"", "gpu=", "gpu=x", "gpu=12345", "gpu=-1", "autox", "aut"}) {
    INFO(bad);
    CHECK_FALSE(parse_choice(bad, words, 3, false, &value, &arg));
  }
}

TEST_CASE("the one size parser under each rule") {
  uint64_t b = 0;
  const SizeRule any{};
  CHECK((parse_size("0", any, &b) && b == 0));
  CHECK((parse_size("3K", any, &b) && b == 3 * kKiB));
  CHECK_FALSE(parse_size("max", any, &b));
  const SizeRule with_max{0, UINT64_MAX, 1, true, true};
  CHECK((parse_size("max", with_max, &b) && b == kUnlimited));
  CHECK((parse_size("unlimited", with_max, &b) && b == kUnlimited));
  const SizeRule chunk{2 * kMiB, 1024 * kGiB, 2 * kMiB, false, false};
  CHECK((parse_size("2M", chunk, &b) && b == 2 * kMiB));
  CHECK((parse_size("1T", chunk, &b) && b == 1024 * kGiB));
  for (const char* bad : {"0", "1M", "3M", "1026G", "2T", "x"}) {
    INFO(bad);
    CHECK_FALSE(parse_size(bad, chunk, &b));
  }
  const SizeRule limit{2 * kMiB, UINT64_MAX, 1, true, false};
  CHECK((parse_size("0", limit, &b) && b == 0));
  CHECK_FALSE(parse_size("1M", limit, &b));
  CHECK((parse_size("3M", limit, &b) && b == 3 * kMiB));
}

TEST_CASE("the count parser: digits only, no more of them than the maximum has") {
  uint64_t n = 99;
  CHECK((parse_count("0", 32, &n) && n == 0));
  CHECK((parse_count("32", 32, &n) && n == 32));
  for (const char* bad : {"", "33", "032", "-1", "1x", " 1", "100"}) {
    INFO(bad);
    CHECK_FALSE(parse_count(bad, 32, &n));
  }
}

TEST_CASE("every key: a bad value gives the one message, naming key, value and what is accepted") {
  for (const OptionRow* r : all_rows()) {
    if (r->scope != Scope::ConfKey) continue;
    INFO(r->name);
    Env env;
    env.vars[option_name(Opt::Conf)] = std::string(r->name) + ":nonsense";
    const Config c = env.parse();
    CHECK(c.passthrough);
    CHECK(c.error == bad_value_message(r->index, "nonsense"));
    CHECK(c.error ==
          std::string("PAGEFAST_CONF: bad value 'nonsense' for key '") + r->name + "' (accepted: " + r->accepts + ")");
  }
}

TEST_CASE("the variables' messages, word for word") {
  Env env;
  env.vars["PAGEFAST"] = "maybe";
  CHECK(env.parse().error == "PAGEFAST: bad value 'maybe' (accepted: 1, on, true, 0, off, false)");
  env.vars.clear();
  env.vars["PAGEFAST_LOG"] = " Chatty ";
  const Config c = env.parse();
  CHECK(c.warning ==
        "PAGEFAST_LOG: bad value 'Chatty' (accepted: off, critical, error, warn, info, debug, trace); logging at warn");
  CHECK(c.error.empty());
  env.vars.clear();
  env.vars["PAGEFAST_CONF"] = "chunk_size";
  CHECK(env.parse().error ==
        "PAGEFAST_CONF: key 'chunk_size' has no value (write chunk_size:<value>, accepted: a size, 2M..1T, multiple "
        "of 2M (e.g. 256M))");
  env.vars["PAGEFAST_CONF"] = "bogus:1";
  CHECK(env.parse().error ==
        "PAGEFAST_CONF: unknown key 'bogus' (accepted keys: pool, chunk_size, release_threshold, limit, headroom, "
        "prewarm, "
        "reserve, vmm_cache, vmm_grow_ahead, release_delay, slack, big_chunks, idle_share, grow_ahead, keep_idle, "
        "control, "
        "sleep_host_keep, "
        "sleep_prelock, numa, "
        "report, "
        "stats)");
}

TEST_CASE("removed keys: warned by name and ignored, the rest of PAGEFAST_CONF still read") {
  Env env;
  env.vars["PAGEFAST_CONF"] = "sync_ahead:on, chunk_size:4M, split_growth:on";
  const Config c = env.parse();
  CHECK(c.error.empty());
  CHECK_FALSE(c.passthrough);
  CHECK(c.pool.chunk_bytes == (4ull << 20));
  CHECK(c.warning ==
        "PAGEFAST_CONF: key 'sync_ahead' was removed (it gained no speed for more CPU time); ignored; "
        "PAGEFAST_CONF: key 'split_growth' was removed (an experiment for drivers that map at an offset); ignored");
  // Neither is a key of the table any more.
  CHECK(find_conf_key("sync_ahead") == nullptr);
  CHECK(find_conf_key("split_growth") == nullptr);
}

TEST_CASE("PAGEFAST: empty is unset, blanks are trimmed, a blank value is refused") {
  Env env;
  env.vars["PAGEFAST"] = "";
  CHECK_FALSE(env.parse().passthrough);
  env.vars["PAGEFAST"] = " off ";
  CHECK(env.parse().passthrough);
  CHECK(env.parse().error.empty());
  env.vars["PAGEFAST"] = " ";
  CHECK(env.parse().error == "PAGEFAST: bad value '' (accepted: 1, on, true, 0, off, false)");
}

TEST_CASE("the conf key list of config.h is the table's keys, in its order") {
  int count = 0;
  const ConfKeyInfo* keys = conf_keys(&count);
  int n = 0;
  for (const OptionRow* r : all_rows()) {
    if (r->scope != Scope::ConfKey) continue;
    REQUIRE(n < count);
    CHECK(std::string(keys[n].name) == r->name);
    CHECK(std::string(keys[n].accepts) == r->accepts);
    ++n;
  }
  CHECK(n == count);
}
