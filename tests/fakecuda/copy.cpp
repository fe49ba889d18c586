// tests/fakecuda/copy.cpp: cuMemcpy* and cuMemsetD* (synchronous, async,
// per-thread variants share these implementations).
//
// An address inside a cuMemAlloc block or a VMM reservation is a device
// address and must be valid for the whole length (a live block, or mapped
// memory with the access the copy needs); anything else is a host address.
// So a copy into freed or inaccessible device memory answers
// CUDA_ERROR_INVALID_VALUE instead of faulting the test.
//
// Synchronous calls first wait for the work queued on the context's
// blocking streams, as the legacy default stream does (the _ptds variants:
// for their thread's per-thread default stream). Asynchronous ones run
// at once on an idle stream; behind queued work (a delayed "kernel") they are
// queued too and check their device memory again when they run: freed in
// between is a use-after-free violation. On a capturing stream they are
// captured: checked, not run.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "api_list.h"
#include "fakecuda.h"
#include "state.h"

using namespace fake;

namespace {

enum class Side { kDevice, kAny };

struct Range {
  uintptr_t addr = 0;
  bool device = false;
  std::vector<uint64_t> identity;
};

CUresult check_side(uintptr_t addr, size_t bytes, Side side, Access access, Range* out) {
  out->addr = addr;
  out->device = is_device_address(addr);
  if (out->device) return check_device_range(addr, bytes, access, -1, &out->identity);
  if (side == Side::kDevice || addr == 0) return CUDA_ERROR_INVALID_VALUE;
  // Host memory: a range that starts in one cuMemHostRegister registration
  // and runs past its end is refused, as the driver refused pagefast's
  // copies back across page-locked pieces on an H100 (docs/DRIVER-FACTS.md).
  if (host_range_crosses_registration(addr, bytes)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Still the memory it was when the operation was issued?
bool still_valid(const Range& range, size_t bytes, Access access) {
  if (!range.device) return true;
  std::vector<uint64_t> now;
  return check_device_range(range.addr, bytes, access, -1, &now) == CUDA_SUCCESS &&
         now == range.identity;
}

// Where a copy or memset is issued: an async one on its stream (and that
// stream's context), a synchronous one in the current context.
// REQUIRES: state().mu held.
CUresult issuing_context(bool async, CUstream stream_handle, Context** ctx, Stream** stream) {
  if (!async) return current_context(ctx);
  FAKE_TRY(resolve_stream(stream_handle, stream));
  *ctx = (*stream)->ctx;
  return CUDA_SUCCESS;
}

void fill(uintptr_t dst, const void* pattern, size_t element_bytes, size_t count) {
  unsigned char* out = reinterpret_cast<unsigned char*>(dst);
  if (element_bytes == 1) {
    memset(out, *static_cast<const unsigned char*>(pattern), count);
    return;
  }
  for (size_t i = 0; i < count; ++i) memcpy(out + i * element_bytes, pattern, element_bytes);
}

CUresult copy(uintptr_t dst, Side dst_side, uintptr_t src, Side src_side, size_t bytes,
              CUstream stream_handle, bool async) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  Stream* stream = nullptr;
  FAKE_TRY(issuing_context(async, stream_handle, &ctx, &stream));
  if (bytes == 0) return CUDA_SUCCESS;
  Range to, from;
  FAKE_TRY(check_side(dst, bytes, dst_side, Access::kWrite, &to));
  FAKE_TRY(check_side(src, bytes, src_side, Access::kRead, &from));
  if (!async) {
    wait_default_stream_idle(lock, ctx);
    // The wait dropped the lock: the memory may be gone by now.
    FAKE_TRY(check_side(dst, bytes, dst_side, Access::kWrite, &to));
    FAKE_TRY(check_side(src, bytes, src_side, Access::kRead, &from));
    memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
  }
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  if (captured) return CUDA_SUCCESS;
  if (!stream_pending(stream)) {
    memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
  }
  Op op;
  op.run = [to, from, bytes](Lock&) {
    if (!still_valid(to, bytes, Access::kWrite) || !still_valid(from, bytes, Access::kRead)) {
      record_violation("an asynchronous copy", to.device ? to.addr : from.addr, bytes);
      return;
    }
    memmove(reinterpret_cast<void*>(to.addr), reinterpret_cast<const void*>(from.addr), bytes);
  };
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

CUresult memset_elements(CUdeviceptr dst, const void* pattern, size_t element_bytes, size_t count,
                         CUstream stream_handle, bool async) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  Stream* stream = nullptr;
  FAKE_TRY(issuing_context(async, stream_handle, &ctx, &stream));
  if (count == 0) return CUDA_SUCCESS;
  if (uintptr_t(dst) % element_bytes != 0 || count > SIZE_MAX / element_bytes)
    return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = count * element_bytes;
  Range to;
  FAKE_TRY(check_side(uintptr_t(dst), bytes, Side::kDevice, Access::kWrite, &to));
  if (!async) {
    wait_default_stream_idle(lock, ctx);
    FAKE_TRY(check_side(uintptr_t(dst), bytes, Side::kDevice, Access::kWrite, &to));
    fill(uintptr_t(dst), pattern, element_bytes, count);
    return CUDA_SUCCESS;
  }
  bool captured = false;
  FAKE_TRY(capture_disposition(stream, &captured));
  if (captured) return CUDA_SUCCESS;
  if (!stream_pending(stream)) {
    fill(uintptr_t(dst), pattern, element_bytes, count);
    return CUDA_SUCCESS;
  }
  unsigned char value[4];
  memcpy(value, pattern, element_bytes);
  Op op;
  op.run = [to, bytes, element_bytes, count, value](Lock&) {
    if (!still_valid(to, bytes, Access::kWrite)) {
      record_violation("an asynchronous memset", to.addr, bytes);
      return;
    }
    fill(to.addr, value, element_bytes, count);
  };
  enqueue(lock, stream, std::move(op));
  return CUDA_SUCCESS;
}

uintptr_t host(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

// Page-locked host memory: ordinary heap memory serves (copies are
// synchronous memcpy here anyway).
CUresult impl::cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  (void)flags;
  if (!pp || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  *pp = std::malloc(bytes);
  return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult impl::cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, Side::kAny, src, Side::kAny, bytes, nullptr, false);
}
CUresult impl::cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(dst, Side::kDevice, host(src), Side::kAny, bytes, nullptr, false);
}
namespace {

std::atomic<int> g_copy_gate_fd{-1};      // fakecuda_copy_gate: the next copy to host waits
std::atomic<int> g_copy_gate_waiting{0};  // one waits now

// The copy gate, taken once (without the fake's lock): waits until a byte
// can be read from its descriptor.
void pass_copy_gate() {
  const int fd = g_copy_gate_fd.exchange(-1);
  if (fd < 0) return;
  g_copy_gate_waiting.store(1);
  char byte = 0;
  while (read(fd, &byte, 1) < 0 && errno == EINTR) {
  }
  g_copy_gate_waiting.store(0);
}

}  // namespace

int fakecuda_copy_gate(int fd) {
  if (fd < 0) return -1;
  g_copy_gate_fd.store(fd);
  return 0;
}

int fakecuda_copy_gate_waiting(void) { return g_copy_gate_waiting.load(); }

CUresult impl::cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  pass_copy_gate();
  return copy(host(dst), Side::kAny, src, Side::kDevice, bytes, nullptr, false);
}
CUresult impl::cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, Side::kDevice, src, Side::kDevice, bytes, nullptr, false);
}
CUresult impl::cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(dst, Side::kAny, src, Side::kAny, bytes, stream, true);
}
CUresult impl::cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                    CUstream stream) {
  return copy(dst, Side::kDevice, host(src), Side::kAny, bytes, stream, true);
}
CUresult impl::cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  pass_copy_gate();
  return copy(host(dst), Side::kAny, src, Side::kDevice, bytes, stream, true);
}
CUresult impl::cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                    CUstream stream) {
  return copy(dst, Side::kDevice, src, Side::kDevice, bytes, stream, true);
}

CUresult impl::cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return memset_elements(dst, &value, sizeof value, count, nullptr, false);
}
CUresult impl::cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count) {
  return memset_elements(dst, &value, sizeof value, count, nullptr, false);
}
CUresult impl::cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
  return memset_elements(dst, &value, sizeof value, count, nullptr, false);
}
CUresult impl::cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                               CUstream stream) {
  return memset_elements(dst, &value, sizeof value, count, stream, true);
}
CUresult impl::cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count,
                                CUstream stream) {
  return memset_elements(dst, &value, sizeof value, count, stream, true);
}
CUresult impl::cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count,
                                CUstream stream) {
  return memset_elements(dst, &value, sizeof value, count, stream, true);
}
