/* interpose/pagefast.h: the public C API of libpagefast.so, for programs
 * that want to ask the shim something while it is preloaded into them.
 * Every function has the pagefast_ prefix; look them up with
 * dlsym(RTLD_DEFAULT, "pagefast_...") when the library may be absent.
 *
 * Pool stats and trim are per CUDA device ordinal. */
#ifndef PAGEFAST_PAGEFAST_H
#define PAGEFAST_PAGEFAST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". */
const char* pagefast_version(void);
/* 1 when the shim is active, 0 when it runs as a pure pass-through. */
int pagefast_is_active(void);
/* The stats document as JSON into buffer (always NUL-terminated when
 * buffer_bytes > 0); returns the bytes the whole document needs,
 * including the NUL, or 0 on failure. */
size_t pagefast_stats_json(char* buffer, size_t buffer_bytes);

/* The numbers of one device's pool, as in the "pool" object of the stats
 * document. Byte counts are of device memory. */
typedef struct pagefast_pool_stats {
  uint64_t reserved_bytes;     /* virtual address space reserved */
  uint64_t mapped_bytes;       /* physical memory created and mapped */
  uint64_t in_use_bytes;       /* handed out to the program (rounded up) */
  uint64_t idle_bytes;         /* mapped and not in use */
  uint64_t peak_in_use_bytes;  /* highest in_use_bytes seen */
  uint64_t hits;               /* allocations served without growing */
  uint64_t growths;            /* chunks created */
  uint64_t stitches;           /* stitched mappings made */
  uint64_t releases;           /* chunks released to the driver */
  uint64_t synchronizations;   /* cuCtxSynchronize calls made by the pool */
  uint64_t passthroughs;       /* allocations handed to the real driver */
  uint64_t quarantined_bytes;  /* freed, waiting for a synchronisation */
  uint64_t cached_bytes;       /* retired blocks held by thread caches */
  uint64_t ooms;               /* requests the pool could not serve */
  uint64_t growth_ns;          /* time spent creating and mapping chunks */
  uint64_t synchronization_ns; /* time spent synchronising */
  uint64_t release_ns;         /* time spent unmapping and releasing */
} pagefast_pool_stats;

/* Fills *out for the pool of CUDA device `device`. 0 on success, -1 when
 * that device has no pool (no allocation yet, pool off, not poolable). */
int pagefast_pool_stats_get(int device, pagefast_pool_stats* out);

/* Releases the idle memory of the device's pool to the driver now:
 * retires freed blocks (synchronising unless a stream capture is active),
 * empties thread caches, and releases every chunk left wholly free; also
 * gives back the page-locked host memory that sleep with keep holds
 * between cycles (PAGEFAST_CONF sleep_host_keep). Calls the CUDA driver; never call it from a destructor or atexit handler.
 * 0 on success, -1 when that device has no pool. */
int pagefast_pool_trim(int device);

/* Writes the human-readable memory report (docs/STATS.md "Memory report":
 * per device the pool's figures, size-class and arena occupancy,
 * fragmentation, the largest block allocatable without growing, and the
 * last out-of-memory answer) to standard error when path_or_null is NULL,
 * else to that path ("%p" = pid; created 0600, never through a symbolic
 * link, only a regular file of this user). Calls no CUDA function and
 * never waits for a lock held elsewhere. 0 on success, -1 on failure. */
int pagefast_report(const char* path_or_null);

/* Sleep and wake (docs/POOL.md "Sleep and wake"): pagefast_sleep
 * synchronises the device(s), releases every pool chunk and the program's
 * own cuMemCreate memory to the driver (with PAGEFAST_SLEEP_KEEP the
 * contents first go to page-locked host memory, kept for the next sleep
 * until pagefast_pool_trim) and keeps the virtual addresses reserved (and
 * the program's VMM handle values valid: docs/OWN-VMM.md); pagefast_wake maps
 * fresh memory at the same addresses with the same access and restores
 * kept contents. While asleep, pool allocations wait for wake (with
 * PAGEFAST_SLEEP_FAIL they answer CUDA_ERROR_OUT_OF_MEMORY); frees are
 * served. A kernel or copy that touches pool memory while asleep is the
 * program's error (it faults). Driver (pass-through) allocations are not
 * touched. Both call the CUDA driver: never from a destructor or atexit
 * handler, nor from a stream-capturing program.
 * pagefast_sleep: 0 asleep; 1 asleep but some device memory stayed
 * resident (chunks the driver refused to release or another process maps
 * through CUDA IPC, the program's own cuMemCreate memory that cannot sleep,
 * the driver's own stream-ordered pool (cudaMallocAsync); the log names
 * it, also a device whose pool could not sleep while another's did: a
 * partial sleep); -1 no pool, or a stream capture is active or the
 * device could not be synchronised (nothing changed: never once any
 * memory left a device).
 * pagefast_wake: 0 awake (also when not asleep); -1 no pool, or the driver
 * refused memory or a mapping: still asleep, call it again.
 * pagefast_asleep: how many pools are asleep. */
#define PAGEFAST_SLEEP_KEEP 1u
#define PAGEFAST_SLEEP_FAIL 2u
int pagefast_sleep(unsigned flags);
int pagefast_wake(void);
int pagefast_asleep(void);

/* Regions and tags (docs/SLEEP.md). pagefast_region_begin opens a region
 * on the calling thread: every allocation the thread makes until
 * pagefast_region_end carries `tag`, whatever the route (cuMemAlloc,
 * cuMemAllocPitch, cudaMalloc, and the program's own cuMemCreate), and a
 * sleep of that tag keeps its contents (PAGEFAST_REGION_KEEP) or discards
 * them. A tag is 1 to 63 characters of A-Z a-z 0-9 _ . : -; regions nest
 * up to 8 deep on a thread (the innermost tags); a process has at most 31
 * (tag, policy) pairs at once (a new pair takes over the slot of an empty
 * one: no region open, nothing allocated, not asleep). begin: 0, or -1 (a bad tag, too many, too deep; the
 * log says which); a refused begin still takes its end, which pops it only
 * (meanwhile the region around it tags). end: 0, or -1 when nothing is
 * open on this thread.
 * pagefast_region_current: the calling thread's innermost tag, or NULL;
 * the text stays valid while that region is open (an empty tag's slot may
 * go to another tag later: copy it to keep it).
 *
 * pagefast_sleep_tag / pagefast_wake_tag: as pagefast_sleep / pagefast_wake
 * for the memory of one tag (NULL: everything, tagged or not). The contents
 * are kept as the regions said, unless flags says PAGEFAST_SLEEP_KEEP or
 * PAGEFAST_SLEEP_DISCARD for all. Memory outside any region is untouched by
 * a tagged sleep. Answers as pagefast_sleep / pagefast_wake, and -2 for a
 * tag no region ever had. pagefast_tag_asleep: 1 asleep, 0 awake, -2
 * unknown. */
#define PAGEFAST_REGION_KEEP 1u
/* pagefast_region_begin: the tag goes to memory the pool serves (cuMemAlloc,
 * cuMemAllocPitch, cudaMalloc) only; the program's own cuMemCreate memory
 * made while the region is innermost stays untagged (a library's own
 * buffers, as NCCL makes them, are not taken by the tag's sleep). */
#define PAGEFAST_REGION_POOL_ONLY 2u
/* pagefast_region_begin: where a sleep of the region keeps the contents of
 * its pool memory (either implies PAGEFAST_REGION_KEEP; each makes a policy
 * of its own, a slot of the tag beside keep and discard). KEEP_DISK: in
 * files, one per live block, in the folder of pagefast_keep_disk_dir,
 * read back at wake and then deleted (and deleted at exit); no host
 * memory is held across the sleep. HOST_RELEASE: in host memory made at
 * sleep and given back at wake, none of it page-locked ahead or kept for
 * the next sleep (the process's resident memory grows by the kept bytes
 * while asleep, and only then). The program's own cuMemCreate memory of
 * such a region is kept in host memory as with KEEP. */
#define PAGEFAST_REGION_KEEP_DISK 8u
#define PAGEFAST_REGION_HOST_RELEASE 16u
/* pagefast_keep_disk_dir: the folder (NULL: /tmp) of the files that sleeps
 * of PAGEFAST_REGION_KEEP_DISK regions make from now on, and the bytes
 * each file is written and read in (0: 256 MiB; through a bounce buffer of
 * that size, page-locked for the copy only). 0, or -1 when the folder is
 * not one this process can write (nothing changed). */
int pagefast_keep_disk_dir(const char* dir, size_t chunk_bytes);
#define PAGEFAST_SLEEP_DISCARD 4u
int pagefast_region_begin(const char* tag, unsigned flags);
int pagefast_region_end(void);
const char* pagefast_region_current(void);
int pagefast_sleep_tag(const char* tag, unsigned flags);
int pagefast_wake_tag(const char* tag);
int pagefast_tag_asleep(const char* tag);

/* pagefast_kept_read: the contents of [device_ptr, device_ptr + bytes) of
 * pool memory while it sleeps with its contents kept, copied from the
 * host copy the sleep made into `out` (the range may span several chunks
 * and kept pieces). Calls no CUDA function; waits for a sleep or wake
 * under way. 0 copied; 1 some of the range is awake (read it on the
 * device; `out` may hold a part); -1 some of it sleeps without a kept copy
 * (discarded), or lies outside pool memory; -2 not pool memory (or no
 * pool); -3 some of it is kept in a file (PAGEFAST_REGION_KEEP_DISK), not
 * read. */
int pagefast_kept_read(const void* device_ptr, size_t bytes, void* out);

/* torch_memory_saver's C entry points, for programs written for it
 * (docs/SLEEP.md "Coming from torch_memory_saver"): tms_pause sleeps the
 * memory of a torch_memory_saver tag made by pagefast's Python drop-in
 * (NULL: of every such tag), each allocation kept or discarded as its
 * region said, and allocations of a paused tag fail instead of waiting;
 * tms_resume wakes it. Tags already so, and tags of pagefast regions not
 * made by the drop-in, are left as they are. 0, or -1 when a sleep or wake
 * was refused (the log says why; the others were still done). */
int tms_pause(const char* tag);
int tms_resume(const char* tag);

#ifdef __cplusplus
}
#endif

#endif /* PAGEFAST_PAGEFAST_H */
