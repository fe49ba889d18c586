// interpose/pool/contexts.cpp: the contexts pool blocks were allocated in
// (interpose/pool_api.h before/after_context_destroy). Each context that
// allocates from a pool gets a number (policy::ContextTag) at its thread's
// first allocation in it, kept with the thread's context memo, so the hot
// path stores it in the block without looking anything up. cuCtxDestroy
// frees the context's cuMemAlloc memory in the driver; here the pool's
// blocks of that context are freed as the program would have freed them.
//
// Numbers are never reused: a thread whose memo still names a destroyed
// context (the driver made another at the same address, and the thread's
// memo is re-checked only every kRevalidateEvery allocations) tags its
// blocks with a number no live context has, so at worst those blocks stay
// until the program frees them; no destroy ever frees another context's
// block. After 65535 numbers, or with ContextsState::kTracked contexts alive at
// once, a new context gets none: its blocks stay with the pool until freed
// (one info line).
#include <mutex>
#include <new>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"

namespace pagefast::pool {
namespace {

constexpr uint32_t kLastTag = 0xffff;
using Tracked = ContextsState::Tracked;

ContextsState& state() { return g_process.contexts; }

// REQUIRES: state().mutex. The index of `context`'s record, or -1.
int find_locked(CUcontext context) {
  for (int i = 0; i < state().count; ++i)
    if (state().tracked[i].context == context) return i;
  return -1;
}

void remove_locked(int index) { state().tracked[index] = state().tracked[--state().count]; }

}  // namespace

policy::ContextTag context_tag(CUcontext context, int device) {
  std::lock_guard<std::mutex> guard(state().mutex);
  const int found = find_locked(context);
  if (found >= 0 && state().tracked[found].device == device) return state().tracked[found].tag;
  // A record for another device: that context is gone (destroyed where no
  // hook saw it) and the driver made this one at its address.
  if (found >= 0) remove_locked(found);
  if (state().count == ContextsState::kTracked || state().next_tag > kLastTag) {
    if (!state().full_logged) {
      state().full_logged = true;
      log_line(LogLevel::Info,
               "too many CUDA contexts to follow: blocks allocated in a context made from now on stay with "
               "pagefast's pool when the context is destroyed, until the program frees them");
    }
    return policy::kNoContextTag;
  }
  const auto tag = policy::ContextTag(state().next_tag++);
  state().tracked[state().count++] = Tracked{context, device, tag};
  return tag;
}

ContextDestroy before_context_destroy(CUcontext context) {
  ContextDestroy destroy;
  destroy.context = context;
  if (!active() || !context) return destroy;
  std::lock_guard<std::mutex> guard(state().mutex);
  const int found = find_locked(context);
  if (found < 0) return destroy;
  destroy.device = state().tracked[found].device;
  destroy.tag = state().tracked[found].tag;
  remove_locked(found);
  return destroy;
}

void after_context_destroy(const ContextDestroy& destroy, bool destroyed) {
  if (!active() || !destroy.context) return;
  if (!destroyed) {
    // The driver refused (a primary context, an unknown handle): the
    // context lives on, and so does its record, unless it got a new one.
    std::lock_guard<std::mutex> guard(state().mutex);
    if (destroy.tag && find_locked(destroy.context) < 0 && state().count < ContextsState::kTracked)
      state().tracked[state().count++] = Tracked{destroy.context, destroy.device, policy::ContextTag(destroy.tag)};
    return;
  }
  forget_context(destroy.device, destroy.context);
  const DeviceMemory* memory = destroy.tag && pool_for_device(destroy.device) ? device_memory(destroy.device) : nullptr;
  if (!memory) return;
  // The driver synchronised the context before destroying it; the blocks
  // still go through the quarantine, as any free does. Every pool of the
  // device: its own and the regions'.
  std::vector<uint64_t> blocks;
  bool listed = true;
  memory->each_pool([&blocks, &listed, &destroy](int, policy::DevicePool* pool) {
    listed = pool->blocks_of_context(policy::ContextTag(destroy.tag), &blocks) && listed;
  });
  if (!listed) return;
  size_t kept = 0;
  for (uint64_t block : blocks) {
    CUresult ignored;
    // A block an IPC importer still maps is kept until it closes (ipc.h).
    if (ipc::exports_live() > 0 && ipc::on_free(block, &ignored)) continue;
    blocks[kept++] = block;
  }
  free_on_behalf(blocks.data(), kept);
  if (blocks.empty()) return;
  log_line(LogLevel::Debug, "a context of device %d was destroyed: %zu of its blocks went back to the pool",
           destroy.device, blocks.size());
}

}  // namespace pagefast::pool
