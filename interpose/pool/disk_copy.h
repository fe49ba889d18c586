// interpose/pool/disk_copy.h: kept contents in files (docs/SLEEP.md
// "Kept in files"): the copies of a sleep of a region opened with
// PAGEFAST_REGION_KEEP_DISK (HostCopy::mode kSleepToDisk) go each to a
// file of its own in the folder pagefast_keep_disk_dir set (default
// /tmp), written through a bounce buffer of the chunk size set there
// (default 256 MiB, page-locked for the copy only), read back at wake and
// deleted once read back (host_free). What sleeps in files holds no host
// memory across the sleep. At exit the files of what still sleeps are
// deleted (no driver call: the process's memory goes with it).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "interpose/real_driver.h"
#include "policy/provider.h"

namespace pagefast::pool::disk {

// Each copy of `copies` whose mode has kSleepToDisk: to a new file
// (to_host; copy.host: the file's token) or back from copy.host's file.
// The others are untouched. REQUIRES: `context` current on this thread
// (the caller pushes it).
void copy(const RealDriver* real, policy::HostCopy* copies, uint64_t count, bool to_host);
// Whether `host` is a file's token of copy(); drop() closes and deletes it.
bool owns(const void* host);
void drop(void* host);
// pagefast_keep_disk_dir: the folder (NULL: /tmp) and bounce chunk (0:
// 256 MiB) of the files made from now on. -1: not a folder this process
// can write.
int set_dir(const char* dir, uint64_t chunk_bytes);

}  // namespace pagefast::pool::disk
