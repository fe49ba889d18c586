// interpose/stats.cpp: per-thread counter blocks and the stats document.
#include "interpose/stats.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "interpose/log.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool_api.h"
#include "interpose/thread_records.h"
#include "policy/json.h"

namespace pagefast::stats {
namespace detail {

// One block per live thread; only its owner writes, so a relaxed load and
// store replace an atomic read-modify-write.
struct alignas(64) Block {
  std::atomic<uint64_t> counter[kCounterCount];
  std::atomic<bool> owned;
  Block* next;
};

}  // namespace detail

namespace {

using detail::Block;

// The counters' state (stats_state.h), in the process object.
State& state() { return pool::g_process.stats; }

// Initial-exec: the library is preloaded (static TLS), and the hot path
// counts every call; global-dynamic TLS would cost a __tls_get_addr call.
__attribute__((tls_model("initial-exec"))) thread_local Block* t_block = nullptr;

void make_key() { pthread_key_create(&state().key, &ThreadRecords<Block>::release); }

// A reused block keeps its counts: they are the process's, summed over
// every block ever made.
Block* acquire_block() {
  return state().blocks.acquire([]() -> Block* {
    void* memory = std::calloc(1, sizeof(Block));
    if (!memory) return nullptr;
    Block* b = new (memory) Block();
    for (auto& c : b->counter) c.store(0, std::memory_order_relaxed);
    return b;
  });
}

inline void bump(int index) {
  Block* b = t_block;
  if (__builtin_expect(b == nullptr, 0)) {
    pthread_once(&state().key_once, make_key);
    b = acquire_block();
    if (!b) {
      state().overflow[index].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    t_block = b;
    pthread_setspecific(state().key, b);
  }
  auto& c = b->counter[index];
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

uint64_t sum(int index) {
  uint64_t total = state().overflow[index].load(std::memory_order_relaxed);
  for (Block* b = state().blocks.first(); b; b = b->next) total += b->counter[index].load(std::memory_order_relaxed);
  return total;
}

}  // namespace

namespace detail {
__thread std::atomic<uint64_t>* t_calls __attribute__((tls_model("initial-exec"))) = nullptr;

// The thread's first counted call (its block made), or any call with
// stats:off.
void count_call_slow(Entry entry) {
  if (__builtin_expect(state().count_calls, 1)) {
    bump(int(entry));
    if (t_block) t_calls = t_block->counter;  // the inline path from now on
  } else if (!state().uncounted_call.load(std::memory_order_relaxed)) {
    state().uncounted_call.store(true, std::memory_order_relaxed);
  }
}
}  // namespace detail

void set_call_counting(bool on) { state().count_calls = on; }
void count_door(Door door) { bump(kEntryCount + int(door)); }
uint64_t calls(Entry entry) { return sum(int(entry)); }
uint64_t doors(Door door) { return sum(kEntryCount + int(door)); }

bool any_activity() {
  if (state().uncounted_call.load(std::memory_order_relaxed)) return true;
  for (int i = 0; i < kCounterCount; ++i)
    if (sum(i)) return true;
  return false;
}

std::vector<policy::TagStats> tags() {
  pool::TagFigures figures[pool::region::kMaxSlots];
  const int count = pool::tag_figures(figures, pool::region::kMaxSlots);
  std::vector<policy::TagStats> out;
  for (int i = 0; i < count && i < pool::region::kMaxSlots; ++i) {
    const pool::TagFigures& f = figures[i];
    policy::TagStats t;
    t.name = f.name ? f.name : "";
    t.slot = f.slot;
    t.keep = f.keep;
    t.asleep = f.asleep;
    policy::copy_tag_fields(t, f);
    out.push_back(t);
  }
  return out;
}

std::string document(const Config& config, const std::string& numa_json) {
  std::string out = "{\n  \"schema\": 2,\n  \"pagefast\": {\"version\": \"" PAGEFAST_VERSION "\", \"pid\": ";
  out += std::to_string(getpid());
  // The state's word, as pagefast-stat, Prometheus, the banner and
  // pagefast-ctl say it (docs/STATS.md "State words").
  out += std::string(", \"mode\": \"") + mode_name(mode_of(config)) + "\", \"reason\": ";
  append_json_string(out, mode_reason(config));
  out += ", \"config\": ";
  append_json_string(out, describe(config));
  out += "},\n  \"calls\": {";
  for (int i = 0; i < kEntryCount; ++i) {
    out += i ? ", " : "";
    out += '"';
    out += kEntryInfo[i].symbol;
    out += "\": " + std::to_string(calls(Entry(i)));
  }
  out += "},\n  \"doors\": {\"symbol\": " + std::to_string(doors(Door::Symbol)) +
         ", \"dlsym\": " + std::to_string(doors(Door::Dlsym)) +
         ", \"proc_address\": " + std::to_string(doors(Door::ProcAddress)) + "},\n";
  out += "  \"pool\": " + pool::stats_json() + ",\n";
  out += "  \"tags\": " + policy::tags_json_array(tags()) + ",\n";
  out += "  \"vmm_clients\": " + pool::own_vmm::stats_json() + ",\n";
  out += "  \"numa\": " + numa_json + "\n}\n";
  return out;
}

}  // namespace pagefast::stats
