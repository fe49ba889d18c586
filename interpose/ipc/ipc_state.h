// interpose/ipc/ipc_state.h: CUDA IPC's process-wide state, one part per
// source of interpose/ipc/, held by the process object
// (interpose/pool/process.h, docs/DESIGN.md "Process state"). Constant-
// initialised and never destroyed: every member is an atomic, a mutex, a
// plain value or a pointer to what is made at the first need (a condition
// variable destroyed at exit while a thread waits on it would hang the
// exit). The containers' element types are declared here only; each part
// names them in its own source.
//
// A fork reaches this state through the process's one fork handler
// (interpose/runtime.cpp -> ipc::after_fork_child): the flags that say
// "this process runs it" are cleared there, so no part compares pids.
#pragma once

#include <cuda.h>
#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "interpose/pool_api.h"
#include "policy/node_recycler.h"

namespace pagefast::ipc {

// Freed-while-held blocks are given back to their pool through this, from
// the exporter thread (set by interpose/pool/devices.cpp).
using FreeHeld = void (*)(CUdeviceptr dptr);
// Control requests from pagefast-ctl (ipc.h set_control).
using Control = int (*)(uint16_t op, uint64_t arg);
// The tagged ones (ipc.h set_tag_control).
using TagControl = int (*)(uint16_t op, uint64_t flags, const char* tag);

namespace detail {
struct Export;
struct SleepState;
struct HolderKey;
struct ControlJob;
struct ChunkFd;
struct ChunkKey;
struct ChunkMap;
struct ExporterKey;
struct ExportKey;
struct Link;
struct Import;
struct RegistryNodes;

// The export registry's maps take their nodes from recyclers
// (policy/node_recycler.h, RegistryNodes in ipc_registry.h): a get, an
// open or a close in the steady state makes no heap allocation.
template <typename K, typename V>
using RecycledMap = std::map<K, V, std::less<K>, policy::RecyclingAllocator<std::pair<const K, V>>>;
using ExportMap = RecycledMap<uint64_t, Export>;    // export id -> export
using AddrMap = RecycledMap<uint64_t, uint64_t>;    // block base -> export id
using HoldMap = RecycledMap<uint64_t, uint64_t>;    // export id -> holds
using HolderMap = RecycledMap<HolderKey, HoldMap>;  // holder -> its holds
}  // namespace detail

struct State {
  // The export registry and its holds (ipc.cpp, ipc_registry.h): all
  // under `mutex` but `exports`.
  struct Registry {
    // Exports that the program has not freed, or freed while held (ipc.h
    // exports_live).
    std::atomic<int> exports{0};
    std::mutex mutex;
    detail::ExportMap* by_id = nullptr;
    detail::AddrMap* by_addr = nullptr;
    detail::HolderMap* holds = nullptr;
    detail::RegistryNodes* nodes = nullptr;  // the maps' nodes
    detail::SleepState* sleep = nullptr;     // per device
    uint64_t next_export_id = 1;
  } registry;

  // The pagefast-ipc-bg thread's queue (ipc_background.cpp), under `mutex`.
  struct Background {
    std::mutex mutex;
    std::condition_variable* cv = nullptr;
    std::deque<detail::ControlJob>* jobs = nullptr;
    std::vector<uint64_t>* frees = nullptr;
    size_t jobs_in_flight = 0;
    bool running = false;  // this process's thread runs (a forked child has none)
  } background;

  // One exported descriptor per chunk (ipc_chunk_fds.cpp), under `mutex`.
  struct ChunkFds {
    std::mutex mutex;
    std::condition_variable* done = nullptr;              // an export ended
    std::map<uint64_t, detail::ChunkFd*>* fds = nullptr;  // chunk handle -> its descriptor
    uint64_t next_id = 1;
  } chunk_fds;

  // The importer's mapped chunks (ipc_import_chunks.cpp), under `mutex`.
  struct ImportChunks {
    std::mutex mutex;
    std::condition_variable* cv = nullptr;  // a chunk's mapping made, or given up
    std::map<detail::ChunkKey, detail::ChunkMap>* chunks = nullptr;
    std::vector<std::pair<CUdeviceptr, size_t>>* spare = nullptr;
  } import_chunks;

  // The importer's links and imports (ipc_import_state.cpp), under `mutex`.
  struct Imports {
    std::mutex mutex;
    std::condition_variable* cv = nullptr;
    std::map<detail::ExporterKey, detail::Link>* links = nullptr;
    std::map<CUdeviceptr, detail::Import>* imports = nullptr;  // handed-out pointer -> import
    // (exporter, export id) -> its pointer; 0 while one thread opens it.
    std::map<detail::ExportKey, CUdeviceptr>* by_export = nullptr;
    // The links and imports are this process's: false until the first use
    // and in a forked child (the fork handler clears it), whose next use
    // forgets the parent's.
    bool owned = false;
    uint64_t link_clock = 0;
  } imports;

  // The exporter's socket (ipc_socket.cpp), under `mutex` but `serving`.
  struct Socket {
    std::mutex mutex;
    // This process's pagefast-ipc thread serves: read without the mutex by
    // every get once it runs.
    std::atomic<bool> serving{false};
    bool failed = false;  // this process could not listen (and said so once)
    // The socket file to remove at exit (empty for an abstract socket),
    // while this process (not a forked child) made it.
    char path[sizeof(sockaddr_un::sun_path)] = {};
    std::atomic<bool> path_owned{false};
    ino_t inode = 0;
    bool exit_registered = false;
  } socket;

  // What the library set (ipc_settings.cpp).
  struct Settings {
    std::atomic<bool> shareable[pool::kMaxDevices] = {};
    std::atomic<FreeHeld> free_held{nullptr};
    std::atomic<Control> control{nullptr};
    std::atomic<TagControl> tag_control{nullptr};
    // PAGEFAST_IPC_DIR, read once (ipc_common.cpp ipc_dir); NULL: none.
    std::once_flag dir_once;
    std::string* dir = nullptr;
  } settings;

  // The forks this process came out of (ipc_common.cpp self()).
  std::atomic<uint64_t> forks{0};
  // Warned once: a device's memory cannot be shared (ipc.cpp), an
  // export failed (ipc_open.cpp), an impostor answered (ipc_import_link.cpp).
  std::atomic<bool> warned_unshareable{false};
  std::atomic<bool> warned_export{false};
  std::atomic<bool> warned_impostor{false};
};

}  // namespace pagefast::ipc
