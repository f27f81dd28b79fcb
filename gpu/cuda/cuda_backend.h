/*
 * cuda_backend.h - C-callable extras of the CUDA backend beyond
 * tsdf_cuda_ops / tsdf_cuda_probe (tsdf_backend.h): the text of the last
 * CUDA failure for logs, the per-frame event timeline, and hooks that the
 * GPU tests use to drive the device hash table with raw keys.
 *
 * Every function here takes the backend's own handle (`impl`, the pointer
 * tsdf_cuda_ops.create returned), so tests can use them without the front
 * end. Threads: as tsdf_volume.h, one thread at a time per volume.
 * Only built when TSDF_HAVE_CUDA.
 */
#ifndef TSDF_CUDA_BACKEND_H
#define TSDF_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The last CUDA failure seen by this thread ("cudaMalloc(...) at
 * gpu/cuda_backend.cu:120: out of memory"), or "" if none. The string
 * belongs to the thread and stays valid until its next failure. */
const char *tsdf_cuda_last_error_string(void);

/* The last frames' CUDA event times in ms since the volume's epoch (an
 * event recorded at creation), oldest first: at most `max` entries into
 * out, *n receives how many. Waits for the frames' work to finish. */
int tsdf_cuda_timeline(void *impl, tsdf_frame_timeline *out, size_t max, size_t *n);

/* ---- test hooks (tests only) -------------------------------------------
 * Inserts n raw keys (duplicates and already present keys allowed) the way
 * integrate inserts a frame's blocks: the table grows first when needed;
 * TSDF_ECAPACITY when the cap forbids it. *inserted (optional) receives
 * how many new blocks were made. */
int tsdf_cuda_test_insert_keys(void *impl, const uint64_t *keys, size_t n, size_t *inserted);
/* Erases the keys of keys[0 .. n) that are present (duplicates allowed),
 * the way eviction does; *erased (optional) receives how many went. */
int tsdf_cuda_test_erase_keys(void *impl, const uint64_t *keys, size_t n, size_t *erased);
/* Looks up n keys; idx_out[i] is the key's block index or -1. */
int tsdf_cuda_test_find_keys(void *impl, const uint64_t *keys, size_t n, int32_t *idx_out);
/* Makes the volume's n-th next device allocation (n >= 1) fail as an
 * exhausted cudaMalloc would; 0 cancels. */
void tsdf_cuda_test_fail_alloc(void *impl, uint32_t n);
/* Keys whose insertion found no slot since creation (must be 0). */
uint64_t tsdf_cuda_test_insert_errors(void *impl);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_CUDA_BACKEND_H */
