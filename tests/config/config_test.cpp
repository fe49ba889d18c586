// tests/config/config_test.cpp: the PAGEFAST / PAGEFAST_CONF parser.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "env.h"
#include "policy/config.h"
#include "policy/options.h"
#include "policy/summary.h"

using namespace pagefast;

namespace {

using test::Env;

Config with_conf(const std::string& conf) {
  Env env;
  env.vars["PAGEFAST_CONF"] = conf;
  return env.parse();
}

}  // namespace

TEST_CASE("sizes take K/M/G/T in binary units") {
  uint64_t b = 0;
  CHECK((parse_bytes("123", &b) && b == 123));
  CHECK((parse_bytes("64K", &b) && b == 64 * kKiB));
  CHECK((parse_bytes("2m", &b) && b == 2 * kMiB));
  CHECK((parse_bytes("1GiB", &b) && b == kGiB));
  CHECK((parse_bytes("3GB", &b) && b == 3 * kGiB));
  CHECK((parse_bytes("1T", &b) && b == 1024 * kGiB));
  CHECK_FALSE(parse_bytes("", &b));
  CHECK_FALSE(parse_bytes("G", &b));
  CHECK_FALSE(parse_bytes("-1", &b));
  CHECK_FALSE(parse_bytes("1.5G", &b));
  CHECK_FALSE(parse_bytes("12X", &b));
  CHECK_FALSE(parse_bytes("99999999999999999999", &b));
  CHECK_FALSE(parse_bytes("20000000000T", &b));
}

TEST_CASE("defaults: pool on, warn, nothing to report") {
  Env env;
  Config c = env.parse();
  CHECK_FALSE(c.passthrough);
  CHECK(c.error.empty());
  CHECK(c.pool.enabled);
  CHECK(c.pool.chunk_bytes == 256 * kMiB);
  CHECK(c.pool.release_threshold_bytes == kUnlimited);
  CHECK(c.pool.limit_bytes == 0);
  CHECK(c.numa.mode == NumaMode::Auto);
  CHECK(c.numa.gpu == -1);
  CHECK(c.log_level == LogLevel::Warn);
}

TEST_CASE("every key is read") {
  Config c =
      with_conf("pool:off,chunk_size:64M,release_threshold:8G,limit:40G,prewarm:1G,reserve:512G,numa:bind,numa:gpu=3");
  REQUIRE(c.error.empty());
  CHECK_FALSE(c.pool.enabled);
  CHECK(c.pool.chunk_bytes == 64 * kMiB);
  CHECK(c.pool.release_threshold_bytes == 8 * kGiB);
  CHECK(c.pool.limit_bytes == 40 * kGiB);
  CHECK(c.pool.prewarm_bytes == kGiB);
  CHECK(c.pool.reserve_bytes == 512 * kGiB);
  CHECK(c.numa.mode == NumaMode::Bind);
  CHECK(c.numa.gpu == 3);
  CHECK(with_conf("release_threshold:max").pool.release_threshold_bytes == kUnlimited);
  CHECK(with_conf(" chunk_size : 2M ,, ").pool.chunk_bytes == 2 * kMiB);
}

TEST_CASE("a bad key or value: one message naming it and what is accepted, then pass-through") {
  struct Case {
    const char* conf;
    const char* needle;
    const char* accepted;
  };
  const Case cases[] = {
      {"bogus:1", "unknown key 'bogus'", "chunk_size"},
      {"chunk_size:3M", "'chunk_size'", "multiple of 2M"},
      {"chunk_size:1K", "'chunk_size'", "2M..1T"},
      {"limit:lots", "'limit'", "a size"},
      {"numa:gpu=x", "'numa'", "gpu=<n>"},
      {"pool:maybe", "'pool'", "on|off"},
      {"prewarm", "has no value", "a size"},
      {"reserve:3M", "'reserve'", "multiple of 2M"},
      {"limit:1", "'limit'", "at least 2M"},
      {"limit:1M", "'limit'", "at least 2M"},
      {"report:sideways", "'report'", "exit|off"},
  };
  for (const Case& k : cases) {
    INFO(k.conf);
    Config c = with_conf(k.conf);
    CHECK(c.passthrough);
    CHECK(c.error.find(k.needle) != std::string::npos);
    CHECK(c.error.find(k.accepted) != std::string::npos);
    CHECK(c.error.find('\n') == std::string::npos);
  }
}

TEST_CASE("report: off by default, exit accepted, PAGEFAST_REPORT read") {
  Env env;
  CHECK_FALSE(env.parse().report_at_exit);
  CHECK(env.parse().report_path.empty());
  Config c = with_conf("report:exit");
  CHECK(c.error.empty());
  CHECK_FALSE(c.passthrough);
  CHECK(c.report_at_exit);
  CHECK_FALSE(with_conf("report:exit,report:off").report_at_exit);
  env.vars["PAGEFAST_REPORT"] = "/tmp/r-%p.txt";
  CHECK(env.parse().report_path == "/tmp/r-%p.txt");
  Config bad = with_conf("report:sideways");
  CHECK(bad.passthrough);
  CHECK(bad.error.find("'report'") != std::string::npos);
}

TEST_CASE("PAGEFAST_TRACE: empty by default, read as given") {
  Env env;
  CHECK(env.parse().trace_path.empty());
  env.vars["PAGEFAST_TRACE"] = "/tmp/t-%p.pftrace";
  Config c = env.parse();
  CHECK(c.trace_path == "/tmp/t-%p.pftrace");
  CHECK(c.error.empty());
}

TEST_CASE("PAGEFAST=0 is a pass-through; other values are an error") {
  Env env;
  env.vars["PAGEFAST"] = "0";
  Config c = env.parse();
  CHECK(c.passthrough);
  CHECK(c.error.empty());
  env.vars["PAGEFAST"] = "1";
  CHECK_FALSE(env.parse().passthrough);
  env.vars["PAGEFAST"] = "yes please";
  c = env.parse();
  CHECK(c.passthrough);
  CHECK(c.error.find("1, on, true, 0, off, false") != std::string::npos);
}

TEST_CASE("log levels") {
  Env env;
  env.vars["PAGEFAST_LOG"] = "debug";
  CHECK(env.parse().log_level == LogLevel::Debug);
  env.vars["PAGEFAST_LOG"] = "off";
  CHECK(env.parse().log_off);
  // spdlog's names too, any case.
  const std::pair<const char*, LogLevel> spdlog_names[] = {{"trace", LogLevel::Debug}, {"critical", LogLevel::Error},
                                                           {"err", LogLevel::Error},   {"warning", LogLevel::Warn},
                                                           {"INFO", LogLevel::Info},   {"Debug", LogLevel::Debug}};
  for (const auto& [name, level] : spdlog_names) {
    env.vars["PAGEFAST_LOG"] = name;
    const Config c = env.parse();
    CHECK(c.log_level == level);
    CHECK(c.warning.empty());
    CHECK(c.error.empty());
  }
  // A bad level is a warning: the pool stays on, the level stays warn.
  env.vars["PAGEFAST_LOG"] = "chatty";
  const Config c = env.parse();
  CHECK(c.warning.find("PAGEFAST_LOG") != std::string::npos);
  CHECK(c.warning.find("'chatty'") != std::string::npos);
  CHECK(c.error.empty());
  CHECK_FALSE(c.passthrough);
  CHECK(c.log_level == LogLevel::Warn);
  CHECK_FALSE(c.log_off);
}

TEST_CASE("sleep_host_keep: on by default, on/off accepted") {
  CHECK(with_conf("").pool.sleep_host_keep);
  CHECK_FALSE(with_conf("sleep_host_keep:off").pool.sleep_host_keep);
  CHECK(with_conf("sleep_host_keep:on").pool.sleep_host_keep);
  CHECK(with_conf("sleep_host_keep:maybe").passthrough);
}

TEST_CASE("vmm_grow_ahead: 32 by default, 0..32 accepted") {
  CHECK(with_conf("").pool.vmm_grow_ahead == 32);
  CHECK(with_conf("vmm_grow_ahead:0").pool.vmm_grow_ahead == 0);
  CHECK(with_conf("vmm_grow_ahead:32").pool.vmm_grow_ahead == 32);
  CHECK(with_conf("vmm_grow_ahead:4").pool.vmm_grow_ahead == 4);
  CHECK(with_conf("vmm_grow_ahead:33").passthrough);
  CHECK(with_conf("vmm_grow_ahead:-1").passthrough);
}

TEST_CASE("idle_share: 15 by default, 0..100 accepted, named in the description") {
  CHECK(with_conf("").pool.idle_share == 15);
  CHECK(with_conf("idle_share:0").pool.idle_share == 0);
  CHECK(with_conf("idle_share:15").pool.idle_share == 15);
  CHECK(with_conf("idle_share:100").pool.idle_share == 100);
  CHECK(with_conf("idle_share:101").passthrough);
  CHECK(with_conf("idle_share:15%").passthrough);
  CHECK(with_conf("idle_share:0.15").passthrough);
  const Config bad = with_conf("idle_share:101");
  CHECK(bad.error.find("idle_share") != std::string::npos);
  CHECK(bad.error.find("0..100") != std::string::npos);
  CHECK(describe(with_conf("idle_share:15")).find("idle_share 15%") != std::string::npos);
  CHECK(describe(with_conf("")).find("idle_share 15%") != std::string::npos);
  CHECK(describe(with_conf("idle_share:0")).find("idle_share") == std::string::npos);
}

TEST_CASE("big_chunks: on by default, off by key, named in the description when off") {
  CHECK(with_conf("").pool.big_chunks);
  CHECK(!with_conf("big_chunks:off").pool.big_chunks);
  CHECK(with_conf("big_chunks:on").pool.big_chunks);
  CHECK(with_conf("big_chunks:yes").passthrough);
  CHECK(with_conf("big_chunks:yes").error.find("big_chunks") != std::string::npos);
  CHECK(describe(with_conf("big_chunks:off")).find("big_chunks off") != std::string::npos);
  CHECK(describe(with_conf("")).find("big_chunks") == std::string::npos);
}

TEST_CASE("vmm_cache: on by default, off by key, a bad value is an error") {
  CHECK(with_conf("").pool.vmm_cache);
  CHECK_FALSE(with_conf("vmm_cache:off").pool.vmm_cache);
  CHECK(with_conf("vmm_cache:on").pool.vmm_cache);
  CHECK(describe(with_conf("vmm_cache:off")).find("vmm_cache off") != std::string::npos);
  CHECK(with_conf("vmm_cache:maybe").error.find("vmm_cache") != std::string::npos);
}

TEST_CASE("the key table documents every key") {
  int count = 0;
  const ConfKeyInfo* keys = conf_keys(&count);
  REQUIRE(count >= 7);
  for (int i = 0; i < count; ++i) {
    CHECK(std::string(keys[i].name).size() > 0);
    CHECK(std::string(keys[i].accepts).size() > 0);
    CHECK(std::string(keys[i].meaning).size() > 0);
  }
  CHECK(describe(with_conf("chunk_size:64M")).find("chunk_size 64M") != std::string::npos);
}

TEST_CASE("an unknown key names the nearest one, in the one message library and launcher print") {
  const Config c = with_conf("chunksize:256M");
  CHECK(c.passthrough);
  CHECK(c.error == "PAGEFAST_CONF: unknown key 'chunksize': did you mean chunk_size?");
  CHECK(with_conf("Slak:1ms").error.find("did you mean slack?") != std::string::npos);
  CHECK(with_conf("zzzzzz:1").error.find("did you mean") == std::string::npos);
}

TEST_CASE("a time needs a unit: a bare number other than 0 is refused, naming the units") {
  uint64_t ns = 1;
  CHECK((parse_delay("0", &ns) && ns == 0));
  CHECK((parse_delay("5s", &ns) && ns == 5000000000ull));
  CHECK((parse_delay("500us", &ns) && ns == 500000ull));
  CHECK((parse_delay("off", &ns) && ns == ~uint64_t(0)));
  CHECK_FALSE(parse_delay("5", &ns));
  CHECK_FALSE(parse_delay("10", &ns));
  const Config c = with_conf("slack:5");
  CHECK(c.passthrough);
  CHECK(c.error.find("bad value '5' for key 'slack' (accepted: a time with a unit: us, ms, s or m") !=
        std::string::npos);
  CHECK(with_conf("release_delay:0").error.empty());
}

TEST_CASE("PAGEFAST_STRICT and the mode: active, off or pass-through, with the reason") {
  Env env;
  env.vars["PAGEFAST_STRICT"] = "1";
  env.vars["PAGEFAST_CONF"] = "chunksize:1M";
  Config c = env.parse();
  CHECK(c.strict);
  CHECK(mode_of(c) == Mode::PassThrough);
  CHECK(mode_reason(c) == c.error);
  env.vars["PAGEFAST_STRICT"] = "perhaps";
  env.vars["PAGEFAST_CONF"] = "";
  c = env.parse();
  CHECK_FALSE(c.strict);
  CHECK(c.error.find("PAGEFAST_STRICT: bad value 'perhaps'") == 0);
  CHECK(std::string(mode_name(mode_of(with_conf("")))) == "active");
  CHECK(std::string(mode_name(mode_of(with_conf("pool:off")))) == "off");
  CHECK(mode_reason(with_conf("pool:off")) == "pool:off");
  Env zero;
  zero.vars["PAGEFAST"] = "0";
  CHECK(mode_of(zero.parse()) == Mode::Off);
  CHECK(mode_reason(zero.parse()) == "PAGEFAST=0");
}

TEST_CASE("the one-line summary: calls, the share from memory the pool already held (rounded down), driver time") {
  std::vector<policy::PoolStats> devices(2);
  devices[0].hits = 1998;
  devices[0].growth_ns = 3000000;
  devices[1].hits = 1;
  devices[1].release_ns = 2000000;
  CHECK(summary_line(2000, devices) ==
        "2000 allocation calls, 99.9% from memory the pool already held; 5.00 ms in the driver's memory calls "
        "(creating, mapping, "
        "unmapping, releasing)");
  devices[1].hits = 2;
  CHECK(summary_line(2000, devices).find(", 100% from memory") != std::string::npos);
  CHECK(summary_line(0, {}) == "no allocation call yet");
}

TEST_CASE("pool:off's summary says the calls were forwarded; a partial sleep says how many tags") {
  CHECK(forwarded_summary_line(3) ==
        "pool:off: 3 allocation calls, each forwarded to the driver (the pool is off and holds no memory)");
  CHECK(forwarded_summary_line(0) == "pool:off: no allocation call yet");
  CHECK(sleep_words(false, false, 0, 2) == "awake");
  CHECK(sleep_words(true, false, 2, 2) == "asleep");
  CHECK(sleep_words(true, true, 1, 2) == "partly asleep (1 of 2 tags)");
  CHECK(sleep_words(true, true, 2, 2) == "partly asleep (all 2 tags; the untagged memory awake)");
}

namespace {

// Parses `env` with its names as the environment whose PAGEFAST_* names are checked.
Config parse_with_names(Env& env) {
  std::vector<std::string> entries;
  for (const auto& [name, value] : env.vars) entries.push_back(name + "=" + value);
  std::vector<const char*> environment;
  for (const std::string& e : entries) environment.push_back(e.c_str());
  environment.push_back(nullptr);
  return parse_config(&Env::lookup, &env, environment.data());
}

}  // namespace

TEST_CASE("a PAGEFAST_* variable that is no setting is named, with the variable or key meant") {
  CHECK(unknown_variable_message("PAGEFAST_LIMIT") ==
        "PAGEFAST_LIMIT: not a variable pagefast reads: did you mean PAGEFAST_CONF=limit:?");
  CHECK(unknown_variable_message("PAGEFAST_LIMT").find("did you mean PAGEFAST_CONF=limit:?") != std::string::npos);
  CHECK(unknown_variable_message("PAGEFAST_CHUNKSIZE").find("did you mean PAGEFAST_CONF=chunk_size:?") !=
        std::string::npos);
  CHECK(unknown_variable_message("PAGEFAST_LOGFILE").find("did you mean PAGEFAST_LOG_FILE?") != std::string::npos);
  CHECK(unknown_variable_message("PAGEFAST_STAT").find("did you mean PAGEFAST_STATS?") != std::string::npos);
  // No suggestion: every variable and key, and not the library's own marker.
  const std::string none = unknown_variable_message("PAGEFAST_ZZZZZZZZ");
  CHECK(none.find("did you mean") == std::string::npos);
  CHECK(none.find("PAGEFAST_LIVE_DIR") != std::string::npos);
  CHECK(none.find("keys of PAGEFAST_CONF: pool, chunk_size") != std::string::npos);
  CHECK(none.find("PAGEFAST_SAID") == std::string::npos);

  Env env;
  env.vars["PAGEFAST_LIMIT"] = "1Q";
  Config c = parse_with_names(env);
  CHECK(c.error.empty());
  CHECK_FALSE(c.passthrough);
  CHECK(c.unknown == "PAGEFAST_LIMIT: not a variable pagefast reads: did you mean PAGEFAST_CONF=limit:?");
  CHECK(c.warning == c.unknown + "; ignored");
  // Without the environment's names nothing is checked (the tools that read only values).
  CHECK(env.parse().unknown.empty());
  env.vars["PAGEFAST_STRICT"] = "1";
  c = parse_with_names(env);
  CHECK(c.error == c.unknown);
  CHECK(c.passthrough);
  // Every variable of the table, and names that only start alike, pass.
  env.vars.clear();
  int count = 0;
  const OptionRow* rows = option_rows(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].scope != Scope::ConfKey) env.vars[rows[i].name] = "";
  env.vars["PAGEFASTER"] = "1";
  env.vars["MY_PAGEFAST_LIMIT"] = "1";
  c = parse_with_names(env);
  CHECK(c.unknown.empty());
}
