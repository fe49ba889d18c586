// interpose/ipc/ipc.h: CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle /
// cuIpcCloseMemHandle) for pool blocks. docs/IPC.md has the handle layout,
// the socket protocol and the failure answers.
//
// A pool block is a piece of VMM memory, which the driver's legacy IPC
// refuses. So pagefast answers cuIpcGetMemHandle for its blocks with a
// handle of its own (64 bytes that say what they are), and the importing
// process, running pagefast too, asks the exporter for the physical chunks
// behind the block over a Unix-domain socket: file descriptors of the
// chunks (cuMemExportToShareableHandle, POSIX_FILE_DESCRIPTOR) travel with
// SCM_RIGHTS from a per-process exporter thread, started at the first
// export. The importer maps them into address space of its own.
//
// The exporter keeps a freed block that an importer still holds: its
// memory is not reused until the last importer closes it (or provably
// dies), as the driver keeps a cuMemAlloc block's memory alive until the
// last unmap. A hold belongs to the importing process (pid, start time,
// pid namespace, read with SO_PEERCRED and /proc), never to one request
// or one connection.
//
// ipc.cpp (handle, registry), ipc_server.cpp (socket, threads) and
// ipc_import.cpp (importer) are the VMM provider's IPC half; like every
// part, they reach the driver through the seam (interpose/driver.h).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "interpose/ipc/ipc_state.h"
#include "interpose/pool/process.h"
#include "policy/device_pool.h"

namespace pagefast::ipc {

// Exports that the program has not freed, or freed while held: while there
// are any, every pool free asks on_free first. The process object's
// (ipc_state.h State::Registry::exports), read by the pool's free path
// (interpose/pool/pool.cpp): one relaxed load.
inline int exports_live() { return pool::g_process.ipc.registry.exports.load(std::memory_order_relaxed); }

// cuIpcGetMemHandle for a live pool block of `pool` (span = its page-map
// entry): *result is CUDA_SUCCESS with the handle, or the error.
CUresult get_handle(policy::DevicePool* pool, policy::Span* span, CUdeviceptr dptr, CUipcMemHandle* handle);

// cuMemFree of a pool block while exports exist. true: answered here
// (*result): the block is exported and still held by an importer (kept
// until it closes), or it was freed that way already (a double free).
// false: free it as usual (any export of it is withdrawn).
bool on_free(CUdeviceptr dptr, CUresult* result);

// cuIpcOpenMemHandle(_v2): true when the handle is pagefast's (the answer
// is in *result); false for any other handle (the driver answers it).
bool try_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result);

// cuIpcCloseMemHandle: true when dptr is a pointer try_open handed out.
bool try_close(CUdeviceptr dptr, CUresult* result);

// Whether a pool block's memory can be shared (its device's chunks are
// created with POSIX file descriptor handles); set by the VMM provider.
// The fork handler's part (interpose/runtime.cpp), in the child: the
// process's own ids are read again at the next IPC call, and the socket,
// its threads and the importer's links are this process's own from their
// next use (ipc_state.h).
void after_fork_child();
void set_device_shareable(int device, bool shareable);
bool device_shareable(int device);

// Freed-while-held blocks are given back to their pool through this, from
// the exporter thread (set by interpose/pool/devices.cpp).
// (FreeHeld: ipc_state.h.)
void set_free_held(FreeHeld free_held);

// The pool releases a chunk: its exported descriptor, if any, is closed
// (the VMM provider's chunk_released event, pointed here by the device's
// owner, interpose/pool/device_memory.cpp, before cuMemRelease).
void forget_chunk(uint64_t chunk);

// Control requests from pagefast-ctl (sleep, wake, status) over the same
// socket: answered by `control` (op, argument); sleep and wake on a thread
// of their own, so that they never delay an open or a close. start_control
// starts the socket's thread (once; false with a warning if it cannot);
// interpose/pool/devices.cpp calls it when a pool is made (PAGEFAST_CONF
// control).
// (Control: ipc_state.h.)
void set_control(Control control);
// The tagged ones (wire::kOpSleepTag, kOpWakeTag: ipc_wire.h), answered by
// `control` (op, sleep's flags, the tag's name) on the same thread as
// sleep and wake; a tag no region opened answers wire::kControlNoTag.
// (TagControl: ipc_state.h.)
void set_tag_control(TagControl control);
bool start_control();

// The other pagefast processes of this user on the device with PCI bus id
// `bus_id` (docs/IPC.md "Neighbours") are asked, over their sockets, to
// give their idle memory back, until `bytes` went back (~0: all of them);
// each answers by TagControl with wire::kOpGiveBack. Blocks up to a few
// seconds per process that does not answer. Returns the bytes released.
uint64_t ask_neighbours(const char* bus_id, uint64_t bytes);

// Sleep of a pool of `device` (interpose/pool/sleep.cpp, docs/IPC.md
// "Sleep and wake"): begin_sleep(device, pool) answers the chunks of
// `pool` that importers map now, which must stay resident; the answer is
// passed to DevicePool::sleep in the same expression, and until it is
// destroyed (the sleep call is over) the pool counts as asleep, its gate
// closed or not. While a pool is asleep only its blocks that lie wholly in
// those chunks can be opened, and any other export of it reads its chunks
// again from the pool before its next open. Blocks of the device's other
// pools (other tags, memory outside any region) open as usual. end_sleep
// (no pool of the device asleep any more) forgets the kept chunks.
class SleepShare {
 public:
  SleepShare(SleepShare&& other) noexcept
      : device_(other.device_), pool_(other.pool_), chunks_(std::move(other.chunks_)) {
    other.pool_ = nullptr;
  }
  SleepShare(const SleepShare&) = delete;
  SleepShare& operator=(const SleepShare&) = delete;
  SleepShare& operator=(SleepShare&&) = delete;
  ~SleepShare();
  operator const std::vector<policy::ChunkHandle>&() const { return chunks_; }

 private:
  friend SleepShare begin_sleep(int device, const policy::DevicePool* pool);
  SleepShare(int device, const policy::DevicePool* pool) : device_(device), pool_(pool) {}
  int device_;
  const policy::DevicePool* pool_;
  std::vector<policy::ChunkHandle> chunks_;
};
SleepShare begin_sleep(int device, const policy::DevicePool* pool);
void end_sleep(int device);
// Blocks this process opened from other processes: they stay mapped across
// a sleep. Logs one warning with their count and bytes when there are any;
// returns the count.
uint64_t imports_across_sleep();

}  // namespace pagefast::ipc
