/* tests/fakecuda/fakecuda.h: the test-only extension API of the fake driver
 * (libcuda.so.1 built from tests/fakecuda/). Nothing here exists in the real
 * driver; tests that call it link the fake directly (fakecuda_dep) or look
 * the names up with dlsym on the fake's handle.
 *
 * The fake emulates devices in host memory: a CUdeviceptr is a host address
 * the test may read and write directly once the memory is accessible
 * (cuMemAlloc memory at once, VMM memory after cuMemSetAccess).
 * See tests/fakecuda/README.md for the emulated behaviour and its limits. */
#ifndef PAGEFAST_TESTS_FAKECUDA_H
#define PAGEFAST_TESTS_FAKECUDA_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKECUDA_API_EXPORT __attribute__((visibility("default")))

/* Calls of the exported driver function `function` (the exported name, e.g.
 * "cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds") since the process started or
 * since the last fakecuda_reset_counts(); -1 if the fake has no such
 * function. FAKECUDA_COUNTS=<path> writes the same counters at exit. */
FAKECUDA_API_EXPORT int fakecuda_call_count(const char* function);

/* Zeroes every counter fakecuda_call_count() reads. FAKECUDA_FAIL keeps its
 * own, never reset, count. */
FAKECUDA_API_EXPORT void fakecuda_reset_counts(void);

/* Replaces the failure plan, same syntax as FAKECUDA_FAIL
 * ("cuMemCreate:5,cuMemMap:2"), counting from now: "cuMemMap:1" fails the
 * next cuMemMap with CUDA_ERROR_OUT_OF_MEMORY. NULL or "" clears the plan.
 * Returns 0, or -1 if some entry was bad (it is skipped, the rest applies). */
FAKECUDA_API_EXPORT int fakecuda_set_fail(const char* spec);

/* An asynchronous "kernel" on `stream` (0 and CU_STREAM_LEGACY mean the
 * current context's legacy default stream, CU_STREAM_PER_THREAD the calling
 * thread's per-thread default stream): after the
 * work queued before it on that stream, it waits delay_ms and then sets
 * dst..dst+bytes to `value`. At the moment it writes it checks that the range
 * is still the same live device memory (the same cuMemAlloc allocation or
 * the same VMM mappings, readable and writable by the stream's device) as at
 * launch; if not, it writes nothing and counts a use-after-free violation
 * (fakecuda_violations), with one line on stderr. Until it has run it is
 * pending work: cuStreamQuery answers CUDA_ERROR_NOT_READY, and
 * cuStreamSynchronize, cuCtxSynchronize, cuEventRecord + cuEventSynchronize
 * and cuMemFree_v2 (which synchronizes, as the real one does) wait for it.
 * cuMemUnmap and cuMemRelease do not wait, as on a GPU.
 * Returns CUDA_ERROR_INVALID_VALUE if the range is not valid device memory
 * at launch; on a capturing stream the launch is captured, not run. */
FAKECUDA_API_EXPORT CUresult fakecuda_launch_delayed_fill(CUstream stream, CUdeviceptr dst,
                                                          size_t bytes, unsigned char value,
                                                          unsigned delay_ms);

/* Like fakecuda_launch_delayed_fill, but reads: when it runs it stores 1 in
 * *ok_out if every byte of src..src+bytes equals `expected`, else 0 (also 0,
 * and a violation, if the memory is no longer the same live memory).
 * *ok_out must stay valid until the stream has been synchronized. */
FAKECUDA_API_EXPORT CUresult fakecuda_launch_delayed_check(CUstream stream, CUdeviceptr src,
                                                           size_t bytes, unsigned char expected,
                                                           unsigned delay_ms, int* ok_out);

/* Device memory that other processes hold on device `ordinal` from now on
 * (replacing the last figure): cuMemGetInfo reports that much less free,
 * and cuMemAlloc, cuMemCreate and module loads fail sooner. Returns 0, or -1
 * for an ordinal the fake does not have (or before cuInit). */
FAKECUDA_API_EXPORT int fakecuda_set_external_bytes(int ordinal, unsigned long long bytes);

/* From now on cuCtxSynchronize with a context of device `ordinal` current
 * answers `error` at once (CUDA_SUCCESS: synchronises again): a device
 * that cannot be synchronised (a sticky error on a GPU). Returns 0, or -1
 * for an ordinal the fake does not have (or before cuInit). */
FAKECUDA_API_EXPORT int fakecuda_set_sync_error(int ordinal, CUresult error);

/* The device memory really free on device `ordinal` (what cuMemGetInfo
 * answers without pagefast, which adds its idle memory), from any thread,
 * no context needed; 0 for an ordinal the fake does not have. */
FAKECUDA_API_EXPORT unsigned long long fakecuda_free_bytes(int ordinal);

/* A "kernel" on `stream` that, after the work queued before it, waits until
 * a byte can be read from `fd` (it reads it) and does nothing else: a test
 * holds the stream busy, and everything that waits for it, until it writes
 * to the other end of a pipe. Returns CUDA_ERROR_INVALID_VALUE for fd < 0. */
FAKECUDA_API_EXPORT CUresult fakecuda_launch_gate(CUstream stream, int fd);

/* The next copy from device to host memory (cuMemcpyDtoH or
 * cuMemcpyDtoHAsync: a sleep's copy threads), before it copies, waits until a
 * byte can be read from `fd` (it reads it): a test holds a sleep inside its
 * copy until it writes to the other end of a pipe. Once: the gate is gone
 * after that copy. fakecuda_copy_gate_waiting answers 1 while a copy waits
 * there. From any thread, no context needed; -1 for fd < 0. */
FAKECUDA_API_EXPORT int fakecuda_copy_gate(int fd);
/* The nth cuMemCreate from now (1: the next), before it creates, waits
 * until a byte can be read from `fd` (it reads it): a test holds a wake
 * while it makes its second chunk. Once. -1 for fd < 0 or nth < 1. */
FAKECUDA_API_EXPORT int fakecuda_create_gate(int fd, int nth);
FAKECUDA_API_EXPORT int fakecuda_copy_gate_waiting(void);

/* Device `ordinal`'s access flags on the VMM mapping that holds `ptr`, as
 * the fake keeps them (what cuMemSetAccess set), whoever answers
 * cuMemGetAccess: ~0 where no mapping holds `ptr`. Lets a test see the
 * access of pagefast's pool mappings, which cuMemGetAccess answers as for
 * cuMemAlloc memory. From any thread, no context needed. */
FAKECUDA_API_EXPORT unsigned long long fakecuda_mapping_access(CUdeviceptr ptr, int ordinal);

/* Own-VMM sleep's cases (tests/pool/own_vmm_preload.cpp): the next
 * cuMemCreate or import of a new allocation hands out `value` as its
 * handle (then values go on from value + 1), as a driver that reuses a
 * released handle's value does. Returns -1 when `value` names a live
 * handle or before cuInit. */
FAKECUDA_API_EXPORT int fakecuda_set_next_handle(unsigned long long value);

/* Host memory registered with cuMemHostRegister and not unregistered yet,
 * in bytes, from any thread (tests/fakecuda/host.cpp). */
FAKECUDA_API_EXPORT unsigned long long fakecuda_host_registered_bytes(void);

/* Use-after-free violations seen by delayed kernels and asynchronous copies
 * since the process started. */
FAKECUDA_API_EXPORT unsigned long long fakecuda_violations(void);

#ifdef __cplusplus
}
#endif

#endif /* PAGEFAST_TESTS_FAKECUDA_H */
