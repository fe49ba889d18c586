// tests/fakecuda/os.cpp: mmap/mprotect/memfd behind the contract in os.h.
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

namespace fake {
namespace os {
namespace {

constexpr int kReservedFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

void* as_ptr(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

// Trims an over-sized mapping [raw, raw+raw_bytes) down to an aligned
// [result, result+bytes).
uintptr_t trim_to_alignment(uintptr_t raw, size_t raw_bytes, size_t bytes, size_t alignment) {
  const uintptr_t aligned = (raw + alignment - 1) & ~(uintptr_t(alignment) - 1);
  if (aligned > raw) munmap(as_ptr(raw), aligned - raw);
  const uintptr_t end = aligned + bytes;
  const uintptr_t raw_end = raw + raw_bytes;
  if (raw_end > end) munmap(as_ptr(end), raw_end - end);
  return aligned;
}

}  // namespace

size_t page_bytes() {
  static const size_t bytes = [] {
    const long value = sysconf(_SC_PAGESIZE);
    return value > 0 ? size_t(value) : size_t(4096);
  }();
  return bytes;
}

uintptr_t reserve(size_t bytes, size_t alignment, uintptr_t hint) {
  if (bytes == 0) {
    errno = EINVAL;
    return 0;
  }
  if (alignment < page_bytes()) alignment = page_bytes();
  if (hint != 0 && hint % alignment == 0) {
    // NOREPLACE keeps the hint from clobbering an existing mapping; kernels
    // before 4.17 treat it as a plain hint, hence the address check.
    void* got = mmap(as_ptr(hint), bytes, PROT_NONE, kReservedFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != MAP_FAILED) {
      if (reinterpret_cast<uintptr_t>(got) == hint) return hint;
      munmap(got, bytes);
    }
  }
  if (alignment == page_bytes()) {
    void* got = mmap(nullptr, bytes, PROT_NONE, kReservedFlags, -1, 0);
    return got == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(got);
  }
  if (bytes > SIZE_MAX - alignment) {
    errno = ENOMEM;
    return 0;
  }
  const size_t raw_bytes = bytes + alignment;
  void* raw = mmap(nullptr, raw_bytes, PROT_NONE, kReservedFlags, -1, 0);
  if (raw == MAP_FAILED) return 0;
  return trim_to_alignment(reinterpret_cast<uintptr_t>(raw), raw_bytes, bytes, alignment);
}

bool release(uintptr_t addr, size_t bytes) { return munmap(as_ptr(addr), bytes) == 0; }

bool reset_to_reserved(uintptr_t addr, size_t bytes) {
  void* got = mmap(as_ptr(addr), bytes, PROT_NONE, kReservedFlags | MAP_FIXED, -1, 0);
  return got != MAP_FAILED;
}

bool map_file(uintptr_t addr, size_t bytes, int fd, uint64_t offset) {
  void* got = mmap(as_ptr(addr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, off_t(offset));
  return got != MAP_FAILED;
}

uintptr_t map_file_anywhere(size_t bytes, size_t alignment, int fd, uint64_t offset) {
  const uintptr_t addr = reserve(bytes, alignment, 0);
  if (addr == 0) return 0;
  void* got =
      mmap(as_ptr(addr), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off_t(offset));
  if (got == MAP_FAILED) {
    const int saved = errno;
    munmap(as_ptr(addr), bytes);
    errno = saved;
    return 0;
  }
  return addr;
}

bool protect(uintptr_t addr, size_t bytes, bool readable, bool writable) {
  int prot = PROT_NONE;
  if (readable) prot |= PROT_READ;
  if (writable) prot |= PROT_WRITE | PROT_READ;
  return mprotect(as_ptr(addr), bytes, prot) == 0;
}

int create_memory_file(const char* name) {
  // The syscall, not memfd_create(3): glibc before 2.27 lacks the wrapper.
  return int(syscall(SYS_memfd_create, name, MFD_CLOEXEC));
}

bool is_memory_file_link(const char* link_target, const char* name) {
  static const char kPrefix[] = "/memfd:";
  const size_t prefix_bytes = sizeof kPrefix - 1;
  const size_t name_bytes = strlen(name);
  if (strncmp(link_target, kPrefix, prefix_bytes) != 0) return false;
  if (strncmp(link_target + prefix_bytes, name, name_bytes) != 0) return false;
  // The kernel appends " (deleted)" to the name: a longer name is another file.
  const char after = link_target[prefix_bytes + name_bytes];
  return after == '\0' || after == ' ';
}

bool grow_file(int fd, uint64_t bytes) { return ftruncate(fd, off_t(bytes)) == 0; }

bool discard_file_range(int fd, uint64_t offset, uint64_t bytes) {
  return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(bytes)) ==
         0;
}

void* map_shared_path(const char* path, size_t bytes) {
  const int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (size_t(sb.st_size) < bytes && ftruncate(fd, off_t(bytes)) != 0)) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return nullptr;
  }
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  errno = saved;
  return memory == MAP_FAILED ? nullptr : memory;
}

}  // namespace os
}  // namespace fake
