/*
 * frame_pool.h - page-locked buffers for the images of queued frames.
 *
 * A frame's depth arrives inside its nng message, often at an odd offset
 * (msgpack puts a bin payload wherever the header before it ends), so the
 * decoding thread copies it to an aligned buffer (job_prepare_images); the
 * CUDA backend then copied it once more, into its page-locked staging
 * buffer, on the map's worker (0.063 ms for a 640x480 16-bit frame on the
 * H200 host, bench/RESULTS.md), and the colour image too. When the copy
 * the decoding thread makes lands in page-locked memory (tsdf_host_alloc)
 * the backend uploads from it directly: one copy of each image on the
 * host, and none on the worker.
 *
 * Page-locking is slow (cudaHostAlloc takes about a millisecond) and
 * page-locked memory is taken from the whole machine, so buffers are kept
 * and reused, and the pool holds at most limit_bytes of them, handed out
 * and kept together. Past the limit frame_pool_get says no and the caller
 * falls back to ordinary memory (or to the message in place): nothing
 * waits and no frame is refused for it; the fallbacks are counted.
 *
 * Buffers are sized in steps of FRAME_POOL_GRANULE, so the frames of one
 * camera share one size. A request gets the smallest kept buffer that fits
 * it; one that none fits gets a new one, and when the limit leaves no room
 * for that, kept buffers (none of which fit) are freed until it does,
 * unless even freeing them all would not make room.
 *
 * Ownership: frame_pool_create / frame_pool_destroy; every buffer must be
 * back (frame_pool_put) before destroy.
 * Threads: get and put are thread-safe (one mutex, never held across an
 * allocation or a free of page-locked memory).
 */
#ifndef TSDFD_FRAME_POOL_H
#define TSDFD_FRAME_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FRAME_POOL_GRANULE ((size_t)64 * 1024)

typedef struct frame_pool frame_pool;

typedef struct {
    uint64_t limit_bytes; /* the bound on out + kept */
    uint64_t bytes_out;   /* handed out now */
    uint64_t bytes_kept;  /* kept for reuse now */
    uint64_t gets;        /* buffers handed out (reused or new) */
    uint64_t allocations; /* of those, newly allocated */
    uint64_t fallbacks;   /* requests refused: the limit, or no memory */
    int page_locked;      /* 1 when its buffers are page-locked (a CUDA device is there) */
} frame_pool_stats;

/* A pool of at most limit_bytes (> 0). TSDF_EINVAL for 0 or a NULL out,
 * TSDF_ENOMEM. */
int frame_pool_create(uint64_t limit_bytes, frame_pool **out);
/* Frees the kept buffers and the pool; NULL is a no-op. Buffers still
 * out are a caller bug: they are leaked, not freed under the caller. */
void frame_pool_destroy(frame_pool *p);

/* A buffer of at least `bytes` (> 0) bytes, 64-byte aligned, or NULL when
 * the limit leaves no room or memory cannot be had (counted in
 * fallbacks). */
void *frame_pool_get(frame_pool *p, size_t bytes);
/* Gives back a buffer of frame_pool_get; NULL is a no-op. */
void frame_pool_put(frame_pool *p, void *buf);

void frame_pool_get_stats(frame_pool *p, frame_pool_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_FRAME_POOL_H */
