// tests/fakecuda/os.h: the fake driver's only door to the kernel's memory
// calls (mmap, mprotect, memfd). Nothing else in the fake calls them.
//
// Contract, for every function here:
//   - addresses are uintptr_t, sizes are bytes and must be multiples of
//     page_bytes() (the caller checks; the driver API has its own rules);
//   - failure is reported by the return value (0 / false / -1) with errno
//     set; nothing is printed and nothing is left half done;
//   - memory is committed only when touched: reservations are PROT_NONE and
//     MAP_NORESERVE, device memory is a sparse memfd. CI has 24 GiB of RAM
//     and tests allocate many GiB of fake device memory they never touch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fake {
namespace os {

size_t page_bytes();

// Reserves `bytes` of address space, inaccessible, aligned to `alignment`
// (a power of two). A non-zero `hint` that is aligned and free is used as
// the address; otherwise the kernel chooses. Returns 0 on failure.
uintptr_t reserve(size_t bytes, size_t alignment, uintptr_t hint);

// Gives the range back to the kernel (munmap).
bool release(uintptr_t addr, size_t bytes);

// Replaces whatever is mapped at the range with fresh inaccessible
// reserved memory, atomically (the range stays reserved).
bool reset_to_reserved(uintptr_t addr, size_t bytes);

// Maps `bytes` of file `fd` from `offset` at `addr`, shared, inaccessible,
// replacing the reservation there.
bool map_file(uintptr_t addr, size_t bytes, int fd, uint64_t offset);

// Maps `bytes` of file `fd` from `offset` (a page multiple), shared and
// read-write, at a new address aligned to `alignment`. Returns 0 on failure.
uintptr_t map_file_anywhere(size_t bytes, size_t alignment, int fd, uint64_t offset);

bool protect(uintptr_t addr, size_t bytes, bool readable, bool writable);

// A new anonymous memory file (memfd), close-on-exec; -1 on failure.
int create_memory_file(const char* name);

// The prefix of the link target of every memory file created with `name`
// ("/memfd:<name>"), as /proc/<pid>/fd shows it.
bool is_memory_file_link(const char* link_target, const char* name);

// Makes the file at least `bytes` long (sparse).
bool grow_file(int fd, uint64_t bytes);

// Frees the pages backing the file range (the range reads as zeros again).
bool discard_file_range(int fd, uint64_t offset, uint64_t bytes);

// Maps the first `bytes` of the file at `path` (made, or grown with
// zeros, as needed), shared and read-write. NULL on failure (errno set).
void* map_shared_path(const char* path, size_t bytes);

}  // namespace os
}  // namespace fake
