// tests/fakecuda/stream.cpp: streams, events, stream capture and the
// delayed "kernels" of the test extension (fakecuda_launch_delayed_fill /
// _check, fakecuda_launch_gate, fakecuda_violations).
//
// Device work is synchronous except what the extension queues: a stream is
// busy while its queue (state.h, Stream::queue) holds work, and every wait
// below is a wait for queues to drain. Capture follows the driver's rules as
// far as the fake can see them: work on a capturing stream is captured, not
// run; synchronizing or querying a capturing stream, or a call that
// synchronizes the context while a global (or this thread's thread-local)
// capture is active, answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
// invalidates the capture, which cuStreamEndCapture then reports as
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
#include <cstring>

#include "api_list.h"
#include "fakecuda.h"
#include "state.h"

using namespace fake;

namespace {

// cuStreamEndCapture hands this out: a non-null graph nobody may look into.
struct DummyGraph {
  int unused;
} g_dummy_graph;

CUgraph dummy_graph() { return reinterpret_cast<CUgraph>(&g_dummy_graph); }

CUresult create_stream(CUstream* out, unsigned flags, int priority) {
  FAKE_REQUIRE_INIT();
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~unsigned(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  // The H200 range: 0 (lowest) to -5 (highest); others are clamped.
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  *out = reinterpret_cast<CUstream>(new_stream(ctx, flags, priority, false));
  return CUDA_SUCCESS;
}

// Synchronizing or querying a capturing stream breaks the capture.
CUresult refuse_if_capturing(Stream* stream) {
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    stream->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult begin_capture(CUstream handle, CUstreamCaptureMode mode) {
  FAKE_REQUIRE_INIT();
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  if (stream->is_null) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // not the legacy stream
  if (stream->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->capture_id = state().next_capture_id++;
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                      size_t* dep_count) {
  FAKE_REQUIRE_INIT();
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  *status = stream->capture;
  const bool active = stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id && active) *id = stream->capture_id;
  if (graph) *graph = active ? dummy_graph() : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (dep_count) *dep_count = 0;
  return CUDA_SUCCESS;
}

Event* as_event(CUevent handle) { return reinterpret_cast<Event*>(handle); }

void drop_event_ref(Event* event) {
  if (--event->op_refs == 0 && !event->alive) delete event;
}

CUresult record_event(CUevent handle, CUstream stream_handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!known_event(handle)) return CUDA_ERROR_INVALID_HANDLE;
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(stream_handle, &stream));
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  if (captured) return CUDA_SUCCESS;  // a graph node, not a record
  Event* event = as_event(handle);
  const uint64_t generation = ++event->generation;
  event->recorded = true;
  if (!stream_pending(stream)) {
    event->done = true;
    event->when = Clock::now();
    return CUDA_SUCCESS;
  }
  event->done = false;
  ++event->op_refs;
  Op op;
  op.run = [event, generation](Lock&) {
    if (event->generation == generation) {
      event->done = true;
      event->when = Clock::now();
    }
    drop_event_ref(event);
  };
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

CUresult elapsed(float* milliseconds, CUevent start_handle, CUevent end_handle) {
  FAKE_REQUIRE_INIT();
  if (!milliseconds) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  if (!known_event(start_handle) || !known_event(end_handle)) return CUDA_ERROR_INVALID_HANDLE;
  const Event* start = as_event(start_handle);
  const Event* end = as_event(end_handle);
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->done || !end->done) return CUDA_ERROR_NOT_READY;
  *milliseconds = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return CUDA_SUCCESS;
}

// A delayed kernel: validated now for the stream's device, run later by the
// stream's worker, which validates again and compares what it finds with
// what was there at launch.
CUresult launch(CUstream handle, CUdeviceptr addr, size_t bytes, unsigned delay_ms, Access access,
                std::function<void(Lock&, bool still_valid)> body) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  const int device = stream->ctx->device;
  std::vector<uint64_t> identity;
  FAKE_TRY(check_device_range(uintptr_t(addr), bytes, access, device, &identity));
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  if (captured) return CUDA_SUCCESS;
  Op op;
  op.delay_ms = delay_ms;
  op.run = [=](Lock& held) {
    std::vector<uint64_t> now;
    const bool valid =
        check_device_range(uintptr_t(addr), bytes, access, device, &now) == CUDA_SUCCESS &&
        now == identity;
    body(held, valid);
  };
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace

// --- streams ---------------------------------------------------------------------

CUresult impl::cuStreamCreate(CUstream* stream, unsigned int flags) {
  return create_stream(stream, flags, 0);
}

CUresult impl::cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return create_stream(stream, flags, priority);
}

// Queued work still runs after the stream is destroyed, as on a GPU.
CUresult impl::cuStreamDestroy_v2(CUstream handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Stream* stream = reinterpret_cast<Stream*>(handle);
  if (!state().streams.count(stream) || !stream->alive || stream->is_null)
    return CUDA_ERROR_INVALID_HANDLE;
  stream->alive = false;
  if (!stream->worker && !stream_pending(stream)) {
    state().streams.erase(stream);
    delete stream;
  }
  return CUDA_SUCCESS;
}

CUresult impl::cuStreamSynchronize(CUstream handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  FAKE_TRY(refuse_if_capturing(stream));
  if (stream->is_null) {
    wait_legacy_idle(lock, stream->ctx);
  } else {
    wait_streams_idle(lock, [stream](const Stream* s) { return s == stream; });
  }
  release_retained(stream->ctx ? stream->ctx->device : -1);
  return CUDA_SUCCESS;
}

CUresult impl::cuStreamQuery(CUstream handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  FAKE_TRY(refuse_if_capturing(stream));
  return stream_pending(stream) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult impl::cuStreamWaitEvent(CUstream stream_handle, CUevent event_handle, unsigned int flags) {
  FAKE_REQUIRE_INIT();
  if (flags & ~unsigned(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(stream_handle, &stream));
  if (!known_event(event_handle)) return CUDA_ERROR_INVALID_HANDLE;
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  Event* event = as_event(event_handle);
  if (captured || event->done) return CUDA_SUCCESS;
  const uint64_t generation = event->generation;
  ++event->op_refs;
  Op op;
  op.run = [event, generation](Lock& held) {
    state().cv.wait(held, [&] { return event->done || event->generation != generation; });
    drop_event_ref(event);
  };
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

// --- capture -----------------------------------------------------------------------

CUresult impl::cuStreamBeginCapture(CUstream stream) {
  return begin_capture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the v1 default
}

CUresult impl::cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(stream, mode);
}

// Capturing into an existing graph looks, from outside, like any capture.
CUresult impl::cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                           const CUgraphEdgeData* edges, size_t dep_count,
                                           CUstreamCaptureMode mode) {
  (void)edges;
  if (!graph || (dep_count > 0 && !deps)) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(stream, mode);
}

CUresult impl::cuStreamEndCapture(CUstream handle, CUgraph* graph) {
  FAKE_REQUIRE_INIT();
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (stream->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      stream->capture_thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  const bool invalidated = stream->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  stream->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  *graph = invalidated ? nullptr : dummy_graph();
  return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult impl::cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus* status) {
  FAKE_REQUIRE_INIT();
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  *status = stream->capture;
  return CUDA_SUCCESS;
}

CUresult impl::cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status,
                                      cuuint64_t* id) {
  return capture_info(stream, status, id, nullptr, nullptr, nullptr, nullptr);
}

CUresult impl::cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status,
                                         cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                         size_t* dep_count) {
  return capture_info(stream, status, id, graph, deps, nullptr, dep_count);
}

CUresult impl::cuStreamGetCaptureInfo_v3(CUstream stream, CUstreamCaptureStatus* status,
                                         cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                         const CUgraphEdgeData** edges, size_t* dep_count) {
  return capture_info(stream, status, id, graph, deps, edges, dep_count);
}

CUresult impl::cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKE_REQUIRE_INIT();
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  const CUstreamCaptureMode previous = thread_capture_mode();
  thread_capture_mode() = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

// --- events --------------------------------------------------------------------------

CUresult impl::cuEventCreate(CUevent* event, unsigned int flags) {
  FAKE_REQUIRE_INIT();
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  Event* created = new Event;
  created->flags = flags;
  state().events.insert(created);
  *event = reinterpret_cast<CUevent>(created);
  return CUDA_SUCCESS;
}

CUresult impl::cuEventRecord(CUevent event, CUstream stream) { return record_event(event, stream); }

CUresult impl::cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  if (flags & ~unsigned(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  return record_event(event, stream);
}

CUresult impl::cuEventQuery(CUevent handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!known_event(handle)) return CUDA_ERROR_INVALID_HANDLE;
  return as_event(handle)->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult impl::cuEventSynchronize(CUevent handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!known_event(handle)) return CUDA_ERROR_INVALID_HANDLE;
  Event* event = as_event(handle);
  ++event->op_refs;  // keeps it alive should another thread destroy it meanwhile
  state().cv.wait(lock, [event] { return event->done; });
  drop_event_ref(event);
  release_retained(-1);
  return CUDA_SUCCESS;
}

CUresult impl::cuEventDestroy_v2(CUevent handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!known_event(handle)) return CUDA_ERROR_INVALID_HANDLE;
  Event* event = as_event(handle);
  event->alive = false;
  state().events.erase(event);
  if (event->op_refs == 0) delete event;
  return CUDA_SUCCESS;
}

CUresult impl::cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  return elapsed(milliseconds, start, end);
}

CUresult impl::cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
  return elapsed(milliseconds, start, end);
}

// --- the test extension ------------------------------------------------------------

extern "C" {

CUresult fakecuda_launch_delayed_fill(CUstream stream, CUdeviceptr dst, size_t bytes,
                                      unsigned char value, unsigned delay_ms) {
  if (bytes == 0) return CUDA_SUCCESS;
  return launch(stream, dst, bytes, delay_ms, Access::kWrite,
                [dst, bytes, value](Lock&, bool still_valid) {
                  if (!still_valid) {
                    record_violation("a delayed fill", uintptr_t(dst), bytes);
                    return;
                  }
                  memset(reinterpret_cast<void*>(dst), value, bytes);
                });
}

CUresult fakecuda_launch_delayed_check(CUstream stream, CUdeviceptr src, size_t bytes,
                                       unsigned char expected, unsigned delay_ms, int* ok_out) {
  if (!ok_out) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) {
    *ok_out = 1;
    return CUDA_SUCCESS;
  }
  return launch(stream, src, bytes, delay_ms, Access::kRead,
                [src, bytes, expected, ok_out](Lock&, bool still_valid) {
                  if (!still_valid) {
                    record_violation("a delayed check", uintptr_t(src), bytes);
                    *ok_out = 0;
                    return;
                  }
                  const unsigned char* p = reinterpret_cast<const unsigned char*>(src);
                  int ok = 1;
                  for (size_t i = 0; i < bytes && ok; ++i) ok = p[i] == expected;
                  *ok_out = ok;
                });
}

CUresult fakecuda_launch_gate(CUstream handle, int fd) {
  FAKE_REQUIRE_INIT();
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  Stream* stream = nullptr;
  FAKE_TRY(resolve_stream(handle, &stream));
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  if (captured) return CUDA_SUCCESS;
  Op op;
  op.gate_fd = fd;
  op.run = [](Lock&) {};
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

unsigned long long fakecuda_violations(void) { return violation_count(); }

}  // extern "C"
