// interpose/pool/disk_copy.cpp: kept contents in files (disk_copy.h), and
// VmmProvider's copies for sleep with keep split by where they go: files
// here, host memory in host_copy.cpp.
#include "interpose/pool/disk_copy.h"

#include "interpose/pool_api.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "interpose/capi_export.h"
#include "interpose/driver.h"
#include "interpose/pool/vmm_provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::pool {
namespace disk {
namespace {

constexpr uint64_t kDefaultChunkBytes = 256ull << 20;

struct File {
  int fd = -1;
  uint64_t bytes = 0;
  char path[PATH_MAX] = "";
};

// Never destroyed (a copy may run while the process exits); the files
// that still hold contents are deleted at exit (delete_all).
struct Registry {
  std::mutex mutex;
  std::unordered_set<File*> files;
  std::string dir = "/tmp";
  uint64_t chunk_bytes = kDefaultChunkBytes;
  bool exit_hook = false;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void delete_all() {
  Registry& r = registry();
  std::lock_guard<std::mutex> guard(r.mutex);
  for (File* f : r.files) unlink(f->path);
}

// A new, empty file in the folder, listed; NULL when it cannot be made.
File* make_file(uint64_t bytes) {
  Registry& r = registry();
  File* f = new (std::nothrow) File;
  if (!f) return nullptr;
  f->bytes = bytes;
  try {
    std::lock_guard<std::mutex> guard(r.mutex);
    if (std::snprintf(f->path, sizeof f->path, "%s/pagefast-kept-XXXXXX", r.dir.c_str()) >= int(sizeof f->path))
      throw std::bad_alloc();
    f->fd = mkostemp(f->path, O_CLOEXEC);
    if (f->fd < 0) throw std::bad_alloc();
    r.files.insert(f);
    if (!r.exit_hook) r.exit_hook = std::atexit(&delete_all) == 0;
  } catch (...) {
    if (f->fd >= 0) {
      unlink(f->path);
      close(f->fd);
    }
    delete f;
    return nullptr;
  }
  return f;
}

bool write_at(int fd, const char* from, uint64_t bytes, uint64_t offset) {
  while (bytes) {
    const ssize_t n = pwrite(fd, from, bytes, off_t(offset));
    if (n <= 0) return false;
    from += n, bytes -= uint64_t(n), offset += uint64_t(n);
  }
  return true;
}

bool read_at(int fd, char* to, uint64_t bytes, uint64_t offset) {
  while (bytes) {
    const ssize_t n = pread(fd, to, bytes, off_t(offset));
    if (n <= 0) return false;
    to += n, bytes -= uint64_t(n), offset += uint64_t(n);
  }
  return true;
}

// One copy, chunk by chunk through `bounce`.
bool move(const RealDriver* real, const File& f, CUdeviceptr addr, char* bounce, uint64_t chunk, bool to_file) {
  for (uint64_t at = 0; at < f.bytes;) {
    const uint64_t n = f.bytes - at < chunk ? f.bytes - at : chunk;
    if (to_file) {
      if (driver::copy_dtoh(real, bounce, addr + at, n) != CUDA_SUCCESS || !write_at(f.fd, bounce, n, at)) return false;
    } else if (!read_at(f.fd, bounce, n, at) || driver::copy_htod(real, addr + at, bounce, n) != CUDA_SUCCESS) {
      return false;
    }
    at += n;
  }
  return true;
}

// The bounce buffer of one batch: page-locked by the driver, else
// pageable; freed after the batch.
struct Bounce {
  const RealDriver* real;
  char* base = nullptr;
  bool pinned = false;
  Bounce(const RealDriver* r, uint64_t bytes) : real(r) {
    void* p = nullptr;
    if (driver::has(real, &RealDriver::cuMemFreeHost) &&
        driver::host_alloc(real, &p, bytes, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS && p) {
      base = static_cast<char*>(p);
      pinned = true;
    } else {
      base = static_cast<char*>(std::malloc(bytes));
    }
  }
  ~Bounce() {
    if (pinned) driver::free_host(real, base);
    else std::free(base);
  }
};

}  // namespace

void copy(const RealDriver* real, policy::HostCopy* copies, uint64_t count, bool to_host) {
  uint64_t largest = 0, chunk = 0;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.mutex);
    chunk = r.chunk_bytes;
  }
  for (uint64_t i = 0; i < count; ++i)
    if ((copies[i].mode & policy::kSleepToDisk) && copies[i].bytes > largest) largest = copies[i].bytes;
  if (!largest) return;
  if (chunk > largest) chunk = largest;
  Bounce bounce(real, chunk);
  for (uint64_t i = 0; i < count; ++i) {
    policy::HostCopy& c = copies[i];
    if (!(c.mode & policy::kSleepToDisk)) continue;
    c.status = policy::ProviderStatus::Failed;
    if (!bounce.base) {
      c.status = policy::ProviderStatus::OutOfMemory;
      continue;
    }
    if (!to_host) {
      const File* f = owns(c.host) ? static_cast<const File*>(c.host) : nullptr;
      if (f && f->bytes == c.bytes && move(real, *f, c.addr, bounce.base, chunk, false))
        c.status = policy::ProviderStatus::Ok;
      continue;
    }
    c.host = nullptr;
    File* f = make_file(c.bytes);
    if (f && move(real, *f, c.addr, bounce.base, chunk, true)) {
      c.host = f;
      c.status = policy::ProviderStatus::Ok;
    } else if (f) {
      drop(f);  // a failed copy leaves nothing: the chunk stays resident
    }
  }
}

bool owns(const void* host) {
  Registry& r = registry();
  std::lock_guard<std::mutex> guard(r.mutex);
  return r.files.count(static_cast<File*>(const_cast<void*>(host))) != 0;
}

void drop(void* host) {
  File* f = static_cast<File*>(host);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.mutex);
    if (!r.files.erase(f)) return;
  }
  unlink(f->path);
  close(f->fd);
  delete f;
}

int set_dir(const char* dir, uint64_t chunk_bytes) {
  const char* folder = dir && *dir ? dir : "/tmp";
  if (access(folder, W_OK | X_OK) != 0) return -1;
  Registry& r = registry();
  try {
    std::lock_guard<std::mutex> guard(r.mutex);
    r.dir = folder;
    r.chunk_bytes = chunk_bytes ? chunk_bytes : kDefaultChunkBytes;
  } catch (...) {
    return -1;
  }
  return 0;
}

}  // namespace disk

namespace {

// Runs `fn` with `context` current on this thread (pushed when another
// is, and popped after). false when it could not be made current.
template <typename Fn>
bool in_context(const RealDriver* real, CUcontext context, Fn fn) {
  CUcontext current = nullptr;
  if (!context || !driver::has(real, &RealDriver::cuCtxGetCurrent)) return false;
  driver::ctx_get_current(real, &current);
  if (current == context) {
    fn();
    return true;
  }
  if (!driver::has_context_push(real) || driver::ctx_push(real, context) != CUDA_SUCCESS) return false;
  fn();
  CUcontext popped = nullptr;
  driver::ctx_pop(real, &popped);
  return true;
}

}  // namespace

void VmmProvider::split_copies(policy::HostCopy* copies, uint64_t count, bool to_host) {
  uint64_t files = 0;
  for (uint64_t i = 0; i < count; ++i) files += (copies[i].mode & policy::kSleepToDisk) ? 1 : 0;
  if (files == 0) return copy_batch(copies, count, to_host);
  if (!in_context(real_, copy_context(), [&] { disk::copy(real_, copies, count, to_host); })) {
    for (uint64_t i = 0; i < count; ++i)
      if (copies[i].mode & policy::kSleepToDisk) copies[i].status = policy::ProviderStatus::Failed;
  }
  if (files == count) return;
  // The others, host memory's, in one batch of their own.
  std::vector<policy::HostCopy> rest;
  try {
    rest.reserve(count - files);
  } catch (...) {
    return;  // each stays Failed: its chunk stays as it was
  }
  for (uint64_t i = 0; i < count; ++i)
    if (!(copies[i].mode & policy::kSleepToDisk)) rest.push_back(copies[i]);
  copy_batch(rest.data(), rest.size(), to_host);
  for (uint64_t i = 0, r = 0; i < count; ++i)
    if (!(copies[i].mode & policy::kSleepToDisk)) copies[i] = rest[r++];
}

void VmmProvider::copy_to_host(policy::HostCopy* copies, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    copies[i].host = nullptr;
    copies[i].status = policy::ProviderStatus::Failed;
  }
  split_copies(copies, count, true);
}

void VmmProvider::copy_from_host(policy::HostCopy* copies, uint64_t count) { split_copies(copies, count, false); }

void VmmProvider::copy_from_host_made(policy::HostCopy* copies, uint64_t count, policy::CopyPreparer& preparer) {
  for (uint64_t i = 0; i < count; ++i)
    if (copies[i].mode & policy::kSleepToDisk) return Provider::copy_from_host_made(copies, count, preparer);
  copy_batch(copies, count, false, &preparer);
}

int keep_disk_dir(const char* dir, size_t chunk_bytes) { return disk::set_dir(dir, chunk_bytes); }

}  // namespace pagefast::pool
