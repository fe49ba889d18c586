// policy/own_vmm/device_share.h: the own-VMM cache (cache.h) and one
// device's budget (policy/device_budget.h), each as the other sees it.
// A device's memory, when it is made, joins the cache (Cache::join): it
// gives the cache a view of its budget (BudgetView: how much the cache
// may keep on the device now) and gets the cache's holder of the device
// (DeviceShare), which it adds to its budget. From then on the budget
// asks the holder for the cache's bytes and has it release them, and the
// cache asks the view for its room: neither reaches the other by device
// ordinal through the glue.
//
// A device that no view joined has no bound (a cache alone, as the
// tests make it); the glue joins every device to a view of no room before
// the devices' own (interpose/pool/own_vmm.cpp).
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/device_budget.h"

namespace pagefast::policy::own_vmm {

class Cache;

// The device's budget as the cache sees it.
class BudgetView {
 public:
  virtual ~BudgetView() = default;
  // How many bytes the cache may hold on the device now (its own bound and
  // what the budget leaves `share`, the cache's holder of the device,
  // beside the device's other holders); UINT64_MAX for no bound. Called
  // under the cache's lock: takes no lock anyone holds while calling into
  // the cache (the budget's room_for takes none).
  virtual uint64_t room(const Holder& share) = 0;
};

// A budget that leaves the cache no room (a device whose budget could not
// be made keeps nothing).
class NoRoom final : public BudgetView {
 public:
  uint64_t room(const Holder&) override { return 0; }
};

// The cache's memory of one device, as a holder of that device's budget:
// all of it idle (released by the program, or made ahead and not taken).
class DeviceShare final : public Holder {
 public:
  DeviceShare() = default;
  DeviceShare(const DeviceShare&) = delete;
  DeviceShare& operator=(const DeviceShare&) = delete;

  uint64_t held_bytes() override;
  uint64_t idle_bytes() override { return held_bytes(); }
  // All idle: one reading for both.
  void figures(uint64_t* held, uint64_t* idle) override { *held = *idle = held_bytes(); }
  // Cached memory of the device back to the driver (Cache::trim).
  uint64_t release(uint64_t bytes) override;

  // The cache's: its room on the device (the view's; no view, no bound).
  uint64_t room() {
    BudgetView* view = view_.load(std::memory_order_acquire);
    return view ? view->room(*this) : UINT64_MAX;
  }

 private:
  friend class Cache;
  // Cache::join: the share of `device` in `cache`, its word the cache's
  // bytes of the device, and `view` its budget's.
  void join(Cache* cache, int device, const std::atomic<uint64_t>* word, BudgetView* view) {
    cache_ = cache;
    device_ = device;
    set_held_word(word, true);
    view_.store(view, std::memory_order_release);
  }

  Cache* cache_ = nullptr;
  int device_ = 0;
  std::atomic<BudgetView*> view_{nullptr};
};

}  // namespace pagefast::policy::own_vmm
