// tests/fakecuda/state.cpp: the state singleton, the per-thread context
// stack, address lookup and range validation, the stream worker threads and
// the capture rules declared in state.h.
#include "state.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "os.h"

namespace fake {

State& state() {
  static State* const instance = new State;
  return *instance;
}

bool valid_device(int ordinal) { return ordinal >= 0 && size_t(ordinal) < state().devices.size(); }

std::vector<Context*>& context_stack() {
  thread_local std::vector<Context*> stack;
  return stack;
}

CUstreamCaptureMode& thread_capture_mode() {
  // The driver's default for a thread that never exchanged its mode.
  thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

namespace {
thread_local bool t_per_thread_call = false;
}

PerThreadCall::PerThreadCall() : outer(!t_per_thread_call) { t_per_thread_call = true; }
PerThreadCall::~PerThreadCall() {
  if (outer) t_per_thread_call = false;
}
bool in_per_thread_call() { return t_per_thread_call; }

CUresult current_context(Context** out) {
  std::vector<Context*>& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* ctx = stack.back();
  if (!ctx->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = ctx;
  return CUDA_SUCCESS;
}

bool known_context(CUcontext handle) {
  return state().contexts.count(reinterpret_cast<Context*>(handle)) != 0;
}

CUresult resolve_stream(CUstream handle, Stream** out) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* ctx = nullptr;
    FAKE_TRY(current_context(&ctx));
    const bool per_thread =
        handle == CU_STREAM_PER_THREAD || (handle == nullptr && in_per_thread_call());
    if (!per_thread) {
      *out = ctx->null_stream;
      return CUDA_SUCCESS;
    }
    Stream*& stream = ctx->per_thread[std::this_thread::get_id()];
    if (!stream) stream = new_stream(ctx, 0, 0, /*is_null=*/false);
    *out = stream;
    return CUDA_SUCCESS;
  }
  Stream* stream = reinterpret_cast<Stream*>(handle);
  if (!state().streams.count(stream) || !stream->alive) return CUDA_ERROR_INVALID_HANDLE;
  *out = stream;
  return CUDA_SUCCESS;
}

Stream* new_stream(Context* ctx, unsigned flags, int priority, bool is_null) {
  Stream* stream = new Stream;
  stream->ctx = ctx;
  stream->flags = flags;
  stream->priority = priority;
  stream->is_null = is_null;
  state().streams.insert(stream);
  return stream;
}

bool known_event(CUevent handle) {
  Event* event = reinterpret_cast<Event*>(handle);
  return state().events.count(event) != 0 && event->alive;
}

void destroy_context_resources(Lock& lock, Context* ctx) {
  State& st = state();
  wait_streams_idle(lock, [ctx](const Stream* s) { return s->ctx == ctx; });
  ctx->alive = false;
  std::vector<Block*> doomed;
  for (auto& entry : st.blocks)
    if (entry.second->ctx == ctx) doomed.push_back(entry.second);
  for (Block* block : doomed) free_block(block);
  std::vector<Import*> closed;
  for (auto& entry : st.imports)
    if (entry.second->ctx == ctx) closed.push_back(entry.second);
  for (Import* import : closed) free_import(import);
  for (auto it = st.streams.begin(); it != st.streams.end();) {
    Stream* s = *it;
    if (s->ctx == ctx) {
      s->alive = false;
      if (!s->worker && !stream_pending(s)) {
        it = st.streams.erase(it);
        delete s;
        continue;
      }
    }
    ++it;
  }
  ctx->null_stream = nullptr;
  ctx->per_thread.clear();
  ctx->peers.clear();
  for (Context* other : st.contexts) other->peers.erase(ctx);
}

// --- address lookup --------------------------------------------------------

Block* find_block(uintptr_t addr) {
  auto& blocks = state().blocks;
  auto it = blocks.upper_bound(addr);
  if (it == blocks.begin()) return nullptr;
  --it;
  Block* block = it->second;
  return addr < block->base + block->bytes ? block : nullptr;
}

Reservation* find_reservation(uintptr_t addr) {
  auto& reservations = state().reservations;
  auto it = reservations.upper_bound(addr);
  if (it == reservations.begin()) return nullptr;
  --it;
  Reservation* reservation = it->second;
  return addr < reservation->base + reservation->bytes ? reservation : nullptr;
}

Mapping* find_mapping(Reservation* reservation, uintptr_t addr) {
  if (!reservation) return nullptr;
  auto it = reservation->mappings.upper_bound(addr);
  if (it == reservation->mappings.begin()) return nullptr;
  --it;
  Mapping& mapping = it->second;
  return addr < mapping.base + mapping.bytes ? &mapping : nullptr;
}

bool is_device_address(uintptr_t addr) {
  return find_block(addr) != nullptr || find_reservation(addr) != nullptr ||
         find_import(addr) != nullptr;
}

Import* find_import(uintptr_t addr) {
  auto& imports = state().imports;
  auto it = imports.upper_bound(addr);
  if (it == imports.begin()) return nullptr;
  --it;
  Import* import = it->second;
  return addr >= import->base && addr < import->base + import->bytes ? import : nullptr;
}

int physical_fd(const Physical& phys) {
  return phys.own_fd >= 0 ? phys.own_fd : state().devices[size_t(phys.device)].memory_fd;
}

// --- the device's memory file ----------------------------------------------------

bool allocate_file_range(Device& device, uint64_t bytes, uint64_t* offset) {
  if (device.memory_fd < 0) {
    device.memory_fd = os::create_memory_file("fakecuda-device-memory");
    if (device.memory_fd < 0) return false;
  }
  for (auto it = device.file_holes.begin(); it != device.file_holes.end(); ++it) {
    if (it->second < bytes) continue;
    *offset = it->first;
    const uint64_t rest = it->second - bytes;
    const uint64_t rest_offset = it->first + bytes;
    device.file_holes.erase(it);
    if (rest) device.file_holes[rest_offset] = rest;
    return true;
  }
  if (!os::grow_file(device.memory_fd, device.file_end + bytes)) return false;
  *offset = device.file_end;
  device.file_end += bytes;
  return true;
}

void free_file_range(Device& device, uint64_t offset, uint64_t bytes) {
  // Punching the hole is what gives the pages back; the range is reused.
  os::discard_file_range(device.memory_fd, offset, bytes);
  auto next = device.file_holes.lower_bound(offset);
  if (next != device.file_holes.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = device.file_holes.erase(next);
  }
  if (next != device.file_holes.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      bytes += previous->second;
      device.file_holes.erase(previous);
    }
  }
  device.file_holes[offset] = bytes;
}

namespace {

// Can work on `device` touch cuMemAlloc memory of `block`? Its own device,
// or a device with a context that enabled peer access to the block's.
bool block_reachable(const Block* block, int device) {
  if (device < 0 || device == block->device) return true;
  for (const Context* ctx : state().contexts)
    if (ctx->alive && ctx->device == device && ctx->peers.count(block->ctx)) return true;
  return false;
}

bool mapping_allows(const Mapping& mapping, Access access, int device) {
  const unsigned long long need =
      access == Access::kWrite ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  if (device >= 0) return (mapping.access[size_t(device)] & need) == need;
  for (unsigned long long flags : mapping.access)
    if ((flags & need) == need) return true;
  return false;
}

}  // namespace

CUresult check_device_range(uintptr_t addr, size_t bytes, Access access, int device,
                            std::vector<uint64_t>* identity) {
  if (identity) identity->clear();
  if (bytes == 0) bytes = 1;
  if (addr + bytes < addr) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t end = addr + bytes;
  if (Block* block = find_block(addr)) {
    if (end > block->base + block->bytes || !block_reachable(block, device))
      return CUDA_ERROR_INVALID_VALUE;
    if (identity) identity->push_back(block->buffer_id);
    return CUDA_SUCCESS;
  }
  if (Import* import = find_import(addr)) {
    if (end > import->base + import->bytes || (device >= 0 && device != import->device))
      return CUDA_ERROR_INVALID_VALUE;
    if (identity) identity->push_back(import->buffer_id);
    return CUDA_SUCCESS;
  }
  Reservation* reservation = find_reservation(addr);
  if (!reservation || end > reservation->base + reservation->bytes) return CUDA_ERROR_INVALID_VALUE;
  // Copies may run across adjacent mappings: the addresses are contiguous.
  auto it = reservation->mappings.upper_bound(addr);
  if (it == reservation->mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  for (uintptr_t cursor = addr; cursor < end; ++it) {
    if (it == reservation->mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    const Mapping& mapping = it->second;
    if (cursor < mapping.base || cursor >= mapping.base + mapping.bytes)
      return CUDA_ERROR_INVALID_VALUE;
    if (!mapping_allows(mapping, access, device)) return CUDA_ERROR_INVALID_VALUE;
    if (identity) identity->push_back(mapping.buffer_id);
    cursor = mapping.base + mapping.bytes;
  }
  return CUDA_SUCCESS;
}

// --- stream work ---------------------------------------------------------------

bool stream_pending(const Stream* stream) { return stream->running || !stream->queue.empty(); }

namespace {

// Runs `stream`'s queue to the end. REQUIRES: lock held on entry; it is
// dropped only around the delays.
void drain(Lock& lock, Stream* stream) {
  State& st = state();
  while (!stream->queue.empty()) {
    Op op = std::move(stream->queue.front());
    stream->queue.pop_front();
    stream->running = true;
    if (op.delay_ms != 0) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(op.delay_ms));
      lock.lock();
    }
    if (op.gate_fd >= 0) {
      lock.unlock();
      char byte;
      while (read(op.gate_fd, &byte, 1) < 0 && errno == EINTR) {
      }
      lock.lock();
    }
    op.run(lock);
    stream->running = false;
    st.cv.notify_all();
  }
}

void worker_main(Stream* stream) {
  State& st = state();
  Lock lock(st.mu);
  drain(lock, stream);
  stream->worker = false;
  if (!stream->alive) {
    // Destroyed while work was pending: the worker is the last user.
    st.streams.erase(stream);
    delete stream;
  }
  st.cv.notify_all();
}

}  // namespace

void enqueue(Lock& lock, Stream* stream, Op op) {
  stream->queue.push_back(std::move(op));
  if (stream->worker) return;
  stream->worker = true;
  try {
    std::thread(worker_main, stream).detach();
  } catch (...) {
    // No thread to be had: run the work now rather than never.
    drain(lock, stream);
    stream->worker = false;
  }
}

void wait_streams_idle(Lock& lock, const std::function<bool(const Stream*)>& which) {
  State& st = state();
  st.cv.wait(lock, [&] {
    for (const Stream* s : st.streams)
      if (which(s) && stream_pending(s)) return false;
    return true;
  });
}

void wait_legacy_idle(Lock& lock, Context* ctx) {
  wait_streams_idle(lock, [ctx](const Stream* s) {
    return s->ctx == ctx && (s->is_null || !(s->flags & CU_STREAM_NON_BLOCKING));
  });
}

void wait_default_stream_idle(Lock& lock, Context* ctx) {
  if (!in_per_thread_call()) {
    wait_legacy_idle(lock, ctx);
    return;
  }
  auto it = ctx->per_thread.find(std::this_thread::get_id());
  if (it == ctx->per_thread.end()) return;
  const Stream* own = it->second;
  wait_streams_idle(lock, [own](const Stream* s) { return s == own; });
}

CUresult check_capture_unsafe() {
  if (thread_capture_mode() == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const std::thread::id self = std::this_thread::get_id();
  bool prohibited = false;
  for (Stream* s : state().streams) {
    if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
    if (s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
        (s->capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && s->capture_thread == self)) {
      s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      prohibited = true;
    }
  }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult capture_disposition(Stream* stream, bool* captured) {
  *captured = stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  return CUDA_SUCCESS;
}

namespace {
std::atomic<unsigned long long> g_violations{0};
}

void record_violation(const char* what, uintptr_t addr, size_t bytes) {
  g_violations.fetch_add(1, std::memory_order_relaxed);
  warn("use after free: %s of %zu bytes at 0x%" PRIxPTR
       " ran when that memory was no longer what it was launched on",
       what, bytes, addr);
}

unsigned long long violation_count() { return g_violations.load(std::memory_order_relaxed); }

}  // namespace fake

// --- devices shared between processes (FAKECUDA_SHARED_MEM) ------------------------

namespace fake {

uint64_t device_used(const Device& device) {
  if (!device.shared_used) return device.used_bytes;
  const uint64_t all = device.shared_used->load(std::memory_order_acquire);
  return all > device.used_bytes ? all : device.used_bytes;
}

void charge(Device& device, uint64_t bytes) {
  device.used_bytes += bytes;
  if (device.shared_used) device.shared_used->fetch_add(bytes, std::memory_order_acq_rel);
}

void uncharge(Device& device, uint64_t bytes) {
  device.used_bytes -= bytes;
  if (device.shared_used) device.shared_used->fetch_sub(bytes, std::memory_order_acq_rel);
}

void attach_shared_memory(State& st) {
  const std::string& path = st.config.shared_mem;
  if (path.empty()) return;
  const size_t bytes = sizeof(std::atomic<uint64_t>) * size_t(kMaxDevices);
  void* memory = os::map_shared_path(path.c_str(), bytes);
  if (!memory) {
    warn("FAKECUDA_SHARED_MEM=\"%s\" cannot be mapped (%s); devices are not shared", path.c_str(),
         std::strerror(errno));
    return;
  }
  auto* counters = static_cast<std::atomic<uint64_t>*>(memory);
  for (Device& device : st.devices) {
    device.shared_used = &counters[device.ordinal];
    device.shared_used->fetch_add(device.used_bytes, std::memory_order_acq_rel);
  }
}

}  // namespace fake
