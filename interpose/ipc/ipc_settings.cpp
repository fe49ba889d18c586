// interpose/ipc/ipc_settings.cpp: what the library tells CUDA IPC (ipc.h):
// which devices can share their memory, the function that gives held
// blocks back to the pool, and the control functions of pagefast-ctl's
// requests; and how the other parts read them (ipc_internal.h).
#include <atomic>
#include <cstdint>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/pool_api.h"

namespace pagefast::ipc {
namespace {

using namespace detail;

// What the library set (ipc_state.h State::Settings).
State::Settings& settings() { return ipc_state().settings; }

void free_held(const std::vector<uint64_t>& addrs) {
  FreeHeld free_fn = settings().free_held.load(std::memory_order_acquire);
  for (uint64_t addr : addrs)
    if (free_fn) free_fn(addr);
}

}  // namespace

namespace detail {

void hand_back_now(const std::vector<uint64_t>& addrs) { free_held(addrs); }

Control control_handler() { return settings().control.load(std::memory_order_acquire); }
TagControl tag_control_handler() { return settings().tag_control.load(std::memory_order_acquire); }

}  // namespace detail

void set_device_shareable(int device, bool shareable) {
  if (device >= 0 && device < pool::kMaxDevices)
    settings().shareable[device].store(shareable, std::memory_order_release);
}

bool device_shareable(int device) {
  return device >= 0 && device < pool::kMaxDevices && settings().shareable[device].load(std::memory_order_acquire);
}

void set_free_held(FreeHeld free_held) { settings().free_held.store(free_held, std::memory_order_release); }

void set_control(Control control) { settings().control.store(control, std::memory_order_release); }
void set_tag_control(TagControl control) { settings().tag_control.store(control, std::memory_order_release); }

bool start_control() { return start_server(); }

}  // namespace pagefast::ipc
