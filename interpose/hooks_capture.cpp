// interpose/hooks_capture.cpp: the hooks of stream capture
// (cuStreamBeginCapture*, cuStreamEndCapture*): forwarded, and tracked so
// that the pool never synchronises while a graph is being captured
// (docs/POOL.md "Never during a capture"). A capture that pagefast counted
// (pool_api.h on_capture_begin) is listed by its stream, so that it ends
// once: at an end the driver accepted, or after which it says the stream
// no longer captures; an end of a stream that is not listed changes
// nothing.
//
// A hook's fast path calls nothing but the driver: the thread's call
// counter (counted_driver), the gate's count (one read-modify-write and a
// load), the stream taken into or out of the first entry (one
// compare-exchange). The rest is out of line: the other entries and the
// list, an end the driver refused, and a slow twin of each hook for the
// first call of a thread, pass-through and a driver not loaded yet.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/hooks.h"
#include "interpose/hooks_common.h"
#include "interpose/hooks_state.h"
#include "interpose/pool/process_state.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"

namespace pagefast::hook {
namespace {

// Streams being captured into a graph: kCaptureEntries entries, each taken
// and given back with one compare-exchange (a capture begun and ended is
// two of them, no lock); beyond them, rarely, a list under a spin lock. An
// entry holds a stream's handle plus one (0: free), and a stream is in at
// most one place.
State& state() { return pool::g_process.hook; }
std::vector<CUstream>& capturing() {  // REQUIRES: capture_lock
  State& st = state();
  if (!st.capturing) st.capturing = new std::vector<CUstream>();  // never destroyed: used at exit
  return *st.capturing;
}

uintptr_t entry_value(CUstream stream) { return reinterpret_cast<uintptr_t>(stream) + 1; }

// Lists `stream` in the first free entry, else in the list.
__attribute__((noinline)) void capture_listed_slow(CUstream stream) {
  for (int i = 0; i < kCaptureEntries; ++i) {
    uintptr_t free_entry = 0;
    if (state().capture_entry[i].load(std::memory_order_relaxed) == 0 &&
        state().capture_entry[i].compare_exchange_strong(free_entry, entry_value(stream), std::memory_order_acq_rel)) {
      int used = state().capture_entries_used.load(std::memory_order_relaxed);
      while (used < i + 1 && !state().capture_entries_used.compare_exchange_weak(used, i + 1, std::memory_order_release,
                                                                                 std::memory_order_relaxed)) {
      }
      return;
    }
  }
  std::lock_guard<CaptureLock> lock(state().capture_lock);
  capturing().push_back(stream);
  state().capture_overflow.fetch_add(1, std::memory_order_release);
}

// The first entry when it is free and known to the searches, else the way
// above.
inline void capture_listed(CUstream stream) {
  uintptr_t free_entry = 0;
  if (__builtin_expect(state().capture_entries_used.load(std::memory_order_relaxed) > 0, 1) &&
      state().capture_entry[0].load(std::memory_order_relaxed) == 0 &&
      state().capture_entry[0].compare_exchange_strong(free_entry, entry_value(stream), std::memory_order_acq_rel))
    return;
  capture_listed_slow(stream);
}

// Whether `stream` was listed (it is not any more): every entry ever taken,
// then the list.
__attribute__((noinline)) bool capture_unlisted_slow(CUstream stream) {
  const uintptr_t value = entry_value(stream);
  const int used = state().capture_entries_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    uintptr_t expected = value;
    if (state().capture_entry[i].load(std::memory_order_relaxed) == value &&
        state().capture_entry[i].compare_exchange_strong(expected, 0, std::memory_order_acq_rel))
      return true;
  }
  if (state().capture_overflow.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<CaptureLock> lock(state().capture_lock);
  std::vector<CUstream>& streams = capturing();
  auto it = std::find(streams.begin(), streams.end(), stream);
  if (it == streams.end()) return false;
  streams.erase(it);
  state().capture_overflow.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

// The first entry, else the way above.
inline bool capture_unlisted(CUstream stream) {
  uintptr_t expected = entry_value(stream);
  if (__builtin_expect(state().capture_entry[0].load(std::memory_order_relaxed) == expected, 1) &&
      state().capture_entry[0].compare_exchange_strong(expected, 0, std::memory_order_acq_rel))
    return true;
  return capture_unlisted_slow(stream);
}

// An end the driver refused: the capture is over unless the driver says
// the stream still captures (an end on the wrong thread, say).
__attribute__((noinline)) CUresult capture_end_refused(CUstream stream, CUresult result) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (driver::stream_is_capturing(real_driver(), stream, &status) == CUDA_SUCCESS &&
      status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return result;
  if (capture_unlisted(stream)) pool::on_capture_end();
  return result;
}

// A begin while pagefast is on: announced before the driver's call, so
// that no sync starts from then on and one running has finished; listed
// when the capture began, else the announcement is taken back.
template <typename Fn, typename... Rest>
__attribute__((always_inline)) inline CUresult counted_begin(Fn begin, CUstream stream, Rest... rest) {
  pool::on_capture_begin();
  const CUresult result = begin(stream, rest...);
  if (__builtin_expect(result == CUDA_SUCCESS, 1)) capture_listed(stream);
  else pool::on_capture_end();  // the capture never started
  return result;
}

// An end while pagefast is on.
template <typename Fn>
__attribute__((always_inline)) inline CUresult counted_end(Fn end, CUstream stream, CUgraph* graph) {
  const CUresult result = end(stream, graph);
  if (__builtin_expect(result != CUDA_SUCCESS, 0)) return capture_end_refused(stream, result);
  if (capture_unlisted(stream)) pool::on_capture_end();
  return CUDA_SUCCESS;
}

}  // namespace

PF_COUNTED_HOOK(cuStreamBeginCapture, (CUstream stream), (stream), counted_begin)
PF_COUNTED_HOOK(cuStreamBeginCapture_ptsz, (CUstream stream), (stream), counted_begin)
PF_COUNTED_HOOK(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode), (stream, mode), counted_begin)
PF_COUNTED_HOOK(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode), (stream, mode),
                counted_begin)
PF_COUNTED_HOOK(cuStreamBeginCaptureToGraph,
                (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                 size_t deps_count, CUstreamCaptureMode mode),
                (stream, graph, deps, edges, deps_count, mode), counted_begin)
PF_COUNTED_HOOK(cuStreamBeginCaptureToGraph_ptsz,
                (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                 size_t deps_count, CUstreamCaptureMode mode),
                (stream, graph, deps, edges, deps_count, mode), counted_begin)
PF_COUNTED_HOOK(cuStreamEndCapture, (CUstream stream, CUgraph* graph), (stream, graph), counted_end)
PF_COUNTED_HOOK(cuStreamEndCapture_ptsz, (CUstream stream, CUgraph* graph), (stream, graph), counted_end)

}  // namespace pagefast::hook
