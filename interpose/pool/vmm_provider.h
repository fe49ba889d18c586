// interpose/pool/vmm_provider.h: the policy's Provider over the CUDA
// driver's virtual memory management: the pool's only way to the cuMem*
// VMM functions (mimalloc's narrow OS layer: the policy never calls the
// driver). The program's own VMM memory (own_vmm*.cpp, hooks_own_vmm.cpp)
// and CUDA IPC (ipc_chunk_fds.cpp, ipc_import*.cpp) make VMM calls of
// their own; every one goes through the driver seam (interpose/driver.h).
//
// One per device. Physical chunks are pinned device memory of that device
// (cuMemCreate), marked GPUDirect-RDMA capable where the device supports
// it (as cuMemAlloc memory is, for NCCL/UCX registration); every range is
// opened read-write for that device only (cuMemSetAccess).
//
// synchronize() waits for every context that has used the pool on this
// device (cuCtxSynchronize, pushing a context that is not current), and
// refuses while any stream capture is active in the process: a sync then
// would invalidate the capture. The capture count and the count of syncs
// in flight form a handshake with on_capture_begin (the CaptureGate of
// interpose/pool_api.h): a capture that announces itself first waits for
// syncs already running.
//
// Sleep's copies (host_copy.cpp) run on a few short-lived copy threads
// with a context of this device made current, into host memory that stays
// page-locked between sleeps (host_memory.h); see docs/POOL.md "Sleep and
// wake".
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <string>

#include "interpose/pool/host_memory.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/config.h"
#include "policy/provider.h"

namespace pagefast::pool {

class VmmProvider final : public policy::Provider {
 public:
  // Contexts remembered per device; more than this many distinct contexts
  // using one device's pool is unusual (the primary context is the rule).
  static constexpr int kMaxContexts = 16;

  // What the provider tells its owner besides its answers: whether the
  // device's chunks can be shared with other processes (decided at the
  // probe, and withdrawn if the driver refuses shareable memory), and that
  // a chunk went back to the driver. Both may be NULL.
  struct Events {
    void (*shareable)(int device, bool shareable);
    void (*chunk_released)(uint64_t chunk);
  };

  // Probes the device. NULL, with the reason in *why, when the pool cannot
  // run there (no VMM, a granularity that does not divide 2 MiB, ...).
  // `log` (may be NULL) takes the one warning of a refused reservation;
  // `events` (may be NULL) outlives the provider.
  static VmmProvider* create(const RealDriver* real, CUdevice device, CaptureGate* gate, LogSink log,
                             const Events* events, std::string* why);

  uint64_t device_total_bytes() const { return total_bytes_; }
  // Remembers a context that allocates from or frees to this pool;
  // forgets one that was destroyed.
  void note_context(CUcontext context);
  void forget_context(CUcontext context);

  policy::ProviderStatus reserve_address(uint64_t bytes, uint64_t* base_addr) override;
  policy::ProviderStatus create_chunk(policy::Granules granules, policy::ChunkHandle* chunk) override;
  bool release_chunk(policy::ChunkHandle chunk) override;
  bool maps_at_offset() override;
  policy::ProviderStatus map(uint64_t addr, policy::ChunkHandle chunk, policy::Granules offset,
                             policy::Granules granules) override;
  bool unmap(uint64_t addr, policy::Granules granules) override;
  policy::ProviderStatus set_access(uint64_t addr, policy::Granules granules, const policy::AccessSet& access) override;
  policy::SyncStatus synchronize() override;
  // cuMemGetInfo in the pool's first context (pushed when not current).
  bool device_free_bytes(uint64_t* free_bytes) override;
  // Sleep with keep (host_copy.cpp): each chunk's copy straight into
  // page-locked host memory (host_memory.h), page-locked in pieces of
  // kCopyPieceBytes by a few copy threads (living for one batch, each with
  // a stream of its own, in a context of this device) while other pieces
  // copy; kept page-locked after wake for the next sleep unless
  // sleep_host_keep is off, or the copy's mode is kSleepHostRelease; those
  // of mode kSleepToDisk go to files instead (disk_copy.h).
  void copy_to_host(policy::HostCopy* copies, uint64_t count) override;
  void copy_from_host(policy::HostCopy* copies, uint64_t count) override;
  // The copy threads start on the first ranges while the calling thread
  // makes the next (preparer.prepare(i) in order; a piece waits for its
  // copy's range); copies to files: all made first.
  void copy_from_host_made(policy::HostCopy* copies, uint64_t count, policy::CopyPreparer& preparer) override;
  void host_free(void* host, uint64_t bytes) override;
  // Gives back the host memory kept page-locked between sleeps
  // (pagefast_pool_trim); returns the bytes. No driver call while none is kept.
  uint64_t release_host_memory();
  HostMemory::Figures host_memory_figures();
  // Page-locked ahead (HostMemory::prelock) in the copy context, pushed.
  // Also sets the bound that a sleep keeps other idle buffers under.
  uint64_t prelock(const uint64_t* bytes, uint64_t count, uint64_t budget, uint64_t bound);
  // The context copies run in: the first that used the pool, else the
  // calling thread's. NULL if there is none. (Own-VMM sleep copies in it too.)
  CUcontext copy_context();
  static constexpr uint64_t kCopyPieceBytes = HostMemory::kPieceBytes;
  static constexpr int kMaxCopyThreads = 16;

 private:
  // Host memory's copies (host_copy.cpp); split_copies (disk_copy.cpp)
  // sends those of mode kSleepToDisk to files and the others here.
  void copy_batch(policy::HostCopy* copies, uint64_t count, bool to_host, policy::CopyPreparer* preparer = nullptr);
  void split_copies(policy::HostCopy* copies, uint64_t count, bool to_host);
  VmmProvider(const RealDriver* real, CUdevice device, CaptureGate* gate, LogSink log, const Events* events);
  void tell_shareable(bool shareable) const;

  const RealDriver* const real_;
  const CUdevice device_;
  CaptureGate* const gate_;
  const LogSink log_;
  const Events* const events_;
  std::atomic<bool> reserve_warned_{false};
  static constexpr int kMapFailuresLogged = 8;
  std::atomic<int> map_failures_logged_{0};
  std::atomic<bool> offset_maps_{true};
  uint64_t total_bytes_ = 0;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  std::mutex contexts_mutex_;
  CUcontext contexts_[kMaxContexts] = {};
  int context_count_ = 0;
  HostMemory host_memory_{real_};
};

}  // namespace pagefast::pool
