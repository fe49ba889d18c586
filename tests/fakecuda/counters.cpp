// tests/fakecuda/counters.cpp: call counters, the FAKECUDA_FAIL plan, the
// FAKECUDA_COUNTS file, and the fakecuda_call_count / fakecuda_reset_counts /
// fakecuda_set_fail extension functions.
#include "counters.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "fakecuda.h"

namespace fake {

const char* const kFnNames[FN_COUNT] = {
#define FAKECUDA_NAME_ROW(proc, since, symbol, ...) #symbol,
    FAKECUDA_API(FAKECUDA_NAME_ROW, FAKECUDA_NAME_ROW)
#undef FAKECUDA_NAME_ROW
};

namespace {

// Plain arrays of atomics: trivially destructible, so they outlive every
// static destructor, including the one that writes FAKECUDA_COUNTS.
std::atomic<unsigned long long> g_counts[FN_COUNT];
std::atomic<unsigned long long> g_totals[FN_COUNT];
// Calls made on the process's first thread (gettid() == getpid()): what
// the program's own thread paid, apart from pagefast's workers.
std::atomic<unsigned long long> g_main_counts[FN_COUNT];

// The plan is touched only when a failure is planned; the flag keeps the
// common path free of the lock.
std::atomic<bool> g_fail_active{false};
std::mutex& fail_mutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
std::vector<unsigned long long>* fail_plan() {
  static auto* plan = new std::vector<unsigned long long>[FN_COUNT];
  return plan;
}

// Parses "name:N,name:N" into the plan, N counted after `base_of(fn)` calls.
// Returns false if some entry was bad (the good ones are kept).
template <typename BaseOf>
bool parse_fail_spec(const char* spec, const char* origin, BaseOf base_of) {
  bool ok = true;
  std::vector<unsigned long long>* plan = fail_plan();
  for (const char* p = spec; p && *p;) {
    const char* comma = strchr(p, ',');
    std::string entry = comma ? std::string(p, size_t(comma - p)) : std::string(p);
    p = comma ? comma + 1 : nullptr;
    entry.erase(std::remove(entry.begin(), entry.end(), ' '), entry.end());
    if (entry.empty()) continue;
    const size_t colon = entry.rfind(':');
    const std::string name = colon == std::string::npos ? entry : entry.substr(0, colon);
    const int fn = fn_index(name.c_str());
    char* end = nullptr;
    const char* number = colon == std::string::npos ? "" : entry.c_str() + colon + 1;
    const unsigned long long nth = strtoull(number, &end, 10);
    if (fn < 0 || !*number || *end != '\0' || nth == 0) {
      warn("%s entry \"%s\" is not <exported cu* function>:<N >= 1>; ignored", origin,
           entry.c_str());
      ok = false;
      continue;
    }
    plan[fn].push_back(base_of(fn) + nth);
    g_fail_active.store(true, std::memory_order_release);
  }
  return ok;
}

void write_counts_file() {
  const char* path = getenv("FAKECUDA_COUNTS");
  if (!path || !*path) return;
  std::string json = "{";
  char line[160];
  for (int i = 0; i < FN_COUNT; ++i) {
    snprintf(line, sizeof line, "%s\n  \"%s\": %llu", i ? "," : "", kFnNames[i],
             g_counts[i].load(std::memory_order_relaxed));
    json += line;
  }
  for (int i = 0; i < FN_COUNT; ++i) {
    snprintf(line, sizeof line, ",\n  \"main_thread.%s\": %llu", kFnNames[i],
             g_main_counts[i].load(std::memory_order_relaxed));
    json += line;
  }
  json += "\n}\n";
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn("FAKECUDA_COUNTS: cannot open \"%s\" for writing", path);
    return;
  }
  size_t done = 0;
  while (done < json.size()) {
    const ssize_t wrote = write(fd, json.data() + done, json.size() - done);
    if (wrote <= 0) {
      warn("FAKECUDA_COUNTS: short write to \"%s\"", path);
      break;
    }
    done += size_t(wrote);
  }
  close(fd);
}

// Set once the fake's destructor ran. Libraries torn down after it (a
// preloaded pool releasing its memory) still call in; each such call
// rewrites the file so that it ends up complete.
std::atomic<bool> g_exited{false};

__attribute__((destructor)) void at_unload() {
  g_exited.store(true, std::memory_order_release);
  write_counts_file();
}

}  // namespace

int fn_index(const char* name) {
  if (!name) return -1;
  for (int i = 0; i < FN_COUNT; ++i)
    if (strcmp(kFnNames[i], name) == 0) return i;
  return -1;
}

bool enter(Fn fn) {
  g_counts[fn].fetch_add(1, std::memory_order_relaxed);
  if (syscall(SYS_gettid) == getpid()) g_main_counts[fn].fetch_add(1, std::memory_order_relaxed);
  const unsigned long long nth = g_totals[fn].fetch_add(1, std::memory_order_relaxed) + 1;
  if (g_exited.load(std::memory_order_acquire)) write_counts_file();
  if (!g_fail_active.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(fail_mutex());
  std::vector<unsigned long long>& targets = fail_plan()[fn];
  const auto it = std::find(targets.begin(), targets.end(), nth);
  if (it == targets.end()) return false;
  targets.erase(it);
  return true;
}

void install_fail_plan_from_env() {
  const char* spec = getenv("FAKECUDA_FAIL");
  if (!spec) return;
  std::lock_guard<std::mutex> lock(fail_mutex());
  parse_fail_spec(spec, "FAKECUDA_FAIL", [](int) { return 0ULL; });
}

}  // namespace fake

extern "C" {

int fakecuda_call_count(const char* function) {
  const int fn = fake::fn_index(function);
  if (fn < 0) return -1;
  return int(fake::g_counts[fn].load(std::memory_order_relaxed));
}

void fakecuda_reset_counts(void) {
  for (auto& count : fake::g_counts) count.store(0, std::memory_order_relaxed);
}

int fakecuda_set_fail(const char* spec) {
  std::lock_guard<std::mutex> lock(fake::fail_mutex());
  for (int i = 0; i < fake::FN_COUNT; ++i) fake::fail_plan()[i].clear();
  fake::g_fail_active.store(false, std::memory_order_release);
  const bool ok = fake::parse_fail_spec(spec, "fakecuda_set_fail", [](int fn) {
    return fake::g_totals[fn].load(std::memory_order_relaxed);
  });
  return ok ? 0 : -1;
}

}  // extern "C"
