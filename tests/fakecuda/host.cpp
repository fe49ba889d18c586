// tests/fakecuda/host.cpp: cuMemHostRegister / cuMemHostUnregister. Host
// memory registered in place is only remembered here (nothing to pin:
// copies are memcpy), so that a test sees what is registered
// (fakecuda_host_registered_bytes) and the fake answers as the driver
// does: a range overlapping one already registered is refused
// (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), and so is the unregistering
// of a pointer that no registration starts at
// (CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, also counted as a violation: a
// caller that frees what it never registered has lost track of its memory).
// A copy whose host side starts in a registration and runs past its end is
// refused (copy.cpp check_side).
#include <cstdint>
#include <map>
#include <mutex>

#include "api_list.h"
#include "fakecuda.h"
#include "state.h"

using namespace fake;

namespace {

std::mutex g_host_mutex;
std::map<uintptr_t, size_t>* g_registered = nullptr;  // start -> bytes; leaked at exit
unsigned long long g_registered_bytes = 0;

std::map<uintptr_t, size_t>& registered() {
  if (!g_registered) g_registered = new std::map<uintptr_t, size_t>;
  return *g_registered;
}

}  // namespace

CUresult impl::cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  (void)flags;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> guard(g_host_mutex);
  auto& table = registered();
  auto next = table.lower_bound(start);
  if (next != table.end() && next->first < start + bytes)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != table.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > start) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  table.emplace(start, bytes);
  g_registered_bytes += bytes;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemHostUnregister(void* p) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> guard(g_host_mutex);
  auto& table = registered();
  auto it = table.find(start);
  if (it == table.end()) {
    record_violation("cuMemHostUnregister of memory never registered", start, 0);
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  g_registered_bytes -= it->second;
  table.erase(it);
  return CUDA_SUCCESS;
}

bool fake::host_range_crosses_registration(uintptr_t addr, size_t bytes) {
  std::lock_guard<std::mutex> guard(g_host_mutex);
  if (!g_registered) return false;
  auto next = g_registered->upper_bound(addr);
  if (next == g_registered->begin()) return false;
  const auto& in = *std::prev(next);
  const uintptr_t end = in.first + in.second;
  return addr < end && addr + bytes > end;
}

extern "C" unsigned long long fakecuda_host_registered_bytes(void) {
  std::lock_guard<std::mutex> guard(g_host_mutex);
  return g_registered_bytes;
}
