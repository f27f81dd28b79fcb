/*
 * cuda_internal.h - the CUDA backend's private state and the helpers its
 * translation units (the .cu files of gpu/cuda/) share. C++ (nvcc) only; nothing here is
 * visible to C code.
 *
 * Layout on the device:
 *   - the hash table (cuda_table.cu): `capacity` slots (a power of two) of
 *     a 64-bit key and a 32-bit pool index, open addressing with linear
 *     probing from tsdf_key_hash(key) & (capacity - 1). A free slot holds
 *     TSDF_KEY_EMPTY; an erased key leaves CUDA_KEY_TOMB, which lookups
 *     probe past and inserts never take, until a rehash drops the
 *     tombstones (when they pass an eighth of the slots, or the load of
 *     keys and tombstones together passes max_load_factor);
 *   - the block pool (cuda_store.cu): `pool_cap` slots of a key
 *     (TSDF_KEY_EMPTY when the slot is free), a version, the geometry
 *     channel in the volume's layout (tsdf_voxel_layout.h) and, once the
 *     volume has colour, a colour channel; plus a stack of free slot
 *     indices. New blocks take free slots first (the top of the stack
 *     down), then slots from `used` on. The pool grows by copying into a
 *     larger one, in steps of a sixteenth or twice the largest frame's new
 *     blocks, whichever is more.
 *
 * Streams: every kernel and copy of a volume runs on `stream` (compute) or
 * `upload_stream` (host-to-device frame uploads), both created with
 * cudaStreamNonBlocking, never on the default stream. Events order the two.
 *
 * Threads: like the public API, one thread at a time per volume. The error
 * string of the last failed CUDA call is kept per thread.
 */
#ifndef TSDF_CUDA_INTERNAL_H
#define TSDF_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "tsdf_backend.h"
#include "tsdf_math.h"

/* Frames whose events tsdf_volume_get_timeline can report. */
#define CUDA_TIMELINE_RING 16

/* An erased key's slot: never a valid key (bit 63 is clear in those), never
 * TSDF_KEY_EMPTY. */
#define CUDA_KEY_TOMB 0xfffffffffffffffeull

/* Device counters, one small array read back with a single copy. */
enum {
    CUDA_CTR_UNIQUE = 0,       /* distinct candidate blocks of the frame */
    CUDA_CTR_MISSING = 1,      /* of those, not yet in the table */
    CUDA_CTR_SET_OVERFLOW = 2, /* candidates the per-frame set could not hold */
    CUDA_CTR_INSERT_FAIL = 3,  /* keys that found no slot in the table (must stay 0) */
    CUDA_CTR_AUX0 = 4,         /* per-operation scratch counters */
    CUDA_CTR_AUX1 = 5,
    CUDA_CTR_AUX2 = 6,
    CUDA_CTR_AUX3 = 7,
    CUDA_CTR_AUX4 = 8,
    CUDA_CTR_COUNT = 9,
};

/* The event slots of one frame's timeline. The update starts where the
 * allocation ends (one event for both); UPLOAD_END also orders the compute
 * stream after the upload, and ALLOC_END follows the insert kernel's
 * write of the counts (cuda_settle waits for it). Each record is a
 * microsecond of host time a frame. */
enum {
    CUDA_EV_UPLOAD_START = 0,
    CUDA_EV_UPLOAD_END,
    CUDA_EV_ALLOC_START,
    CUDA_EV_ALLOC_END,
    CUDA_EV_UPDATE_END,
    CUDA_EV_COUNT,
};

/* One half of the double-buffered frame staging: a pinned host copy of the
 * caller's images and their device copies. `consumed` is recorded on the
 * compute stream after the last kernel that reads d_depth/d_rgb, so the
 * host waits on it before it overwrites this half again. */
struct cuda_staging {
    void *h_depth;
    uint8_t *h_rgb;
    void *d_depth;
    uint8_t *d_rgb;
    size_t depth_cap; /* bytes of h_depth and d_depth */
    size_t rgb_cap;   /* bytes of h_rgb and d_rgb */
    /* Device only: the frame's usable depth per pixel (tsdf_depth_usable_m),
     * written by the collect kernel and read by the update. */
    float *d_usable;
    size_t usable_cap; /* bytes of d_usable */
    cudaEvent_t consumed;
    int used; /* consumed has been recorded at least once */
};

struct cuda_frame_events {
    uint64_t frame; /* 1-based index of the integrated frame */
    cudaEvent_t ev[CUDA_EV_COUNT];
    int recorded;
};

/* Parameters of one frame for the kernels, passed by value: depth / rgb of
 * f point at the device half of the frame's staging. */
struct frame_args {
    tsdf_frame f;
    float *usable; /* the staging half's d_usable */
    float T_cam_world[16];
    float trunc_m;
    float inv_block_size;
    float voxel_size;
    float max_weight;
    tsdf_quant quant;
};

/* Where the next new blocks go in the pool: the first `free_count` take
 * the free stack from the top down, the rest slots from `used` on. The
 * host keeps it exact between operations; kernels get it by value. */
struct cuda_alloc {
    const uint32_t *free_stack;
    uint32_t free_count;
    uint32_t used;
};

/* The pool slot of new block i of an insertion. */
__device__ __forceinline__ int32_t cuda_alloc_slot(const cuda_alloc &a, uint32_t i)
{
    return i < a.free_count ? (int32_t)a.free_stack[a.free_count - 1 - i]
                            : (int32_t)(a.used + (i - a.free_count));
}

/* The frame queued by the asynchronous path (no memory cap) whose counts
 * the host has not consumed yet (see cuda_integrate.cu). At most one. */
struct cuda_pending {
    int active;
    struct frame_args a;          /* to re-run it: its images stay in s */
    struct cuda_staging *s;       /* the staging half holding its images */
    struct cuda_frame_events *fe; /* its timeline slot */
    uint64_t version;             /* the version it writes */
    uint32_t room;                /* new blocks it was allowed (hard limit) */
    int color;
};

struct cuda_volume {
    tsdf_volume_params p;
    int device;
    cudaStream_t stream;
    cudaStream_t upload_stream;
    cudaEvent_t epoch;          /* t = 0 of the timeline */
    cudaEvent_t q_start, q_end; /* raycast / mesh timing */
    tsdf_quant quant;           /* of the s16 layout, from the truncation */
    size_t geom_block_bytes;    /* tsdf_layout_block_bytes(p.layout) */

    /* The hash table. */
    uint64_t *d_keys;
    int32_t *d_vals;
    uint32_t capacity;
    uint32_t tombstones; /* slots holding CUDA_KEY_TOMB */

    /* The block pool. */
    uint64_t *d_block_keys; /* TSDF_KEY_EMPTY: a free slot */
    uint64_t *d_block_versions;
    void *d_geom;
    uint8_t *d_rgb; /* NULL until the volume has colour */
    uint32_t *d_free;
    uint32_t free_count;
    uint32_t used;     /* slots handed out so far (live or free) */
    uint32_t pool_cap; /* slots allocated */
    uint32_t blocks;   /* live blocks */
    uint64_t erased_total;

    /* Per-frame scratch: a set of candidate keys, the list of distinct
     * candidates and the pool indices of the frame's blocks. */
    uint64_t *d_set_keys;
    uint32_t set_cap;     /* slots, a power of two */
    uint32_t *d_set_slot; /* slot of each distinct candidate, to clear the set */
    uint64_t *d_unique;
    int32_t *d_frame_blocks;
    uint64_t *d_missing;
    uint32_t *d_missing_src;
    uint32_t unique_cap; /* entries of d_unique, d_frame_blocks, d_missing... */

    uint32_t *d_counters;
    uint32_t *h_counters;  /* pinned and mapped */
    uint32_t *dh_counters; /* h_counters as the device addresses it */

    /* Raycast outputs and mesh scratch, kept between calls. */
    void *d_ray;
    size_t ray_cap;
#define CUDA_MESH_BUFFERS 14
/* The kept buffer of cuda_store_select's output (the mesh uses the
 * others). */
#define CUDA_KEPT_SELECT (CUDA_MESH_BUFFERS - 1)
    void *mesh_buf[CUDA_MESH_BUFFERS];
    size_t mesh_cap[CUDA_MESH_BUFFERS];
    /* Pinned host memory the mesh's arrays arrive in, with one copy. */
    void *h_mesh;
    size_t h_mesh_cap;

    struct cuda_staging staging[2];
    uint64_t frame_seq; /* frames handed to integrate, successful or not */

    /* The asynchronous frame path: the pending frame (its timeline's
     * ALLOC_END is recorded after its counts were written into
     * h_counters), the fixed grids of the insert / update kernels (which
     * read their counts on the device) and the most blocks one frame
     * added (pool headroom). */
    struct cuda_pending pend;
    unsigned insert_grid;
    unsigned update_grid;
    unsigned sm_count; /* the device's multiprocessors */
    uint64_t peak_missing;

    struct cuda_frame_events timeline[CUDA_TIMELINE_RING];
    uint64_t timeline_frames; /* frames recorded into the ring */

    /* Statistics owned by the backend. */
    uint64_t growth_events;
    uint64_t frames_integrated;
    uint64_t frames_rejected;
    uint64_t insert_failures;
    uint64_t version;
    double last_raycast_ms, last_mesh_ms;

    size_t mem_bytes;         /* device memory held */
    uint32_t test_fail_alloc; /* tsdf_cuda_test_fail_alloc: n > 0, the n-th next one fails */
    int sticky_error;         /* a kernel fault poisoned the context: every call fails */
};

/* ---- error mapping -------------------------------------------------------
 * cuda_check records a failed call (what, file:line and cudaGetErrorString)
 * in the thread's error string and returns TSDF_ECUDA; TSDF_OK otherwise. */
int cuda_check(cudaError_t err, const char *what, const char *file, int line);

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        int cuda_rc_ = cuda_check((call), #call, __FILE__, __LINE__);                              \
        if (cuda_rc_ != TSDF_OK)                                                                   \
            return cuda_rc_;                                                                       \
    } while (0)

/* After every launch: a bad configuration shows here, a fault later. */
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

/* ---- device memory, counted in mem_bytes ------------------------------- */
int cuda_dev_alloc(struct cuda_volume *v, void **ptr, size_t bytes);
void cuda_dev_free(struct cuda_volume *v, void *ptr, size_t bytes);
/* Kept device buffer `slot` (of mesh_buf) grown to at least `bytes`
 * (waiting for the compute stream first, as its old memory may be in use)
 * into *p; its contents are not kept when it grows. */
int cuda_kept_reserve(struct cuda_volume *v, int slot, size_t bytes, void **p);
/* Waits for both streams; a kernel fault makes the volume sticky-failed. */
int cuda_sync_all(struct cuda_volume *v);
/* Grows the per-frame scratch so that its set has at least set_cap slots. */
int cuda_scratch_reserve(struct cuda_volume *v, uint32_t set_cap);
/* The per-frame set's slots at creation, and again after a failed growth
 * freed it (set_cap 0): what a first frame needs on 7-Scenes at 1 cm
 * several times over. */
#define CUDA_SET_FIRST_SLOTS (1u << 16)

/* ---- the table (cuda_table.cu) ----------------------------------------- */
/* Bytes of one table slot. */
#define CUDA_SLOT_BYTES (sizeof(uint64_t) + sizeof(int32_t))

/* Allocates an empty table of `capacity` slots (keys set by a kernel). */
int cuda_table_alloc(struct cuda_volume *v, uint32_t capacity);
/* Frees the table (d_keys, d_vals). */
void cuda_table_free(struct cuda_volume *v);
/* The capacity the table needs for `keys` keys under max_load_factor,
 * doubling from the current one (never below it). */
uint64_t cuda_table_capacity_for(const struct cuda_volume *v, uint64_t keys);
/* Rehashes into a new table of new_cap slots (which may be the current
 * size: that drops the tombstones); synchronises. */
int cuda_table_rehash(struct cuda_volume *v, uint32_t new_cap);
/* Probe statistics over the table; synchronises. */
int cuda_probe_stats(struct cuda_volume *v, tsdf_volume_stats *out);
/* Block index of every key (d_keys_in, n) into d_idx_out (-1 if absent). */
int cuda_lookup(struct cuda_volume *v, const uint64_t *d_keys_in, uint32_t n, int32_t *d_idx_out);
/* Erases the present keys of d_keys_in[0 .. n) (distinct): their slots
 * become tombstones, their pool slots free. Reads back the count into
 * *erased; synchronises; rehashes when the tombstones call for it. */
int cuda_erase_keys(struct cuda_volume *v, const uint64_t *d_keys_in, uint32_t n, uint32_t *erased);

/* ---- the pool (cuda_store.cu) ------------------------------------------ */
/* Bytes of one pool slot: key, version, free-stack entry, channels. */
uint64_t cuda_block_bytes(const struct cuda_volume *v, int with_rgb);
/* The bytes of the content: table slots and pool slots. */
uint64_t cuda_content_bytes(const struct cuda_volume *v);
/* Where the next new blocks go (by value, for a kernel). */
cuda_alloc cuda_alloc_now(const struct cuda_volume *v);
/* Takes n new blocks out of the pool's host mirrors (after the kernel
 * that used cuda_alloc_now for them). */
void cuda_alloc_take(struct cuda_volume *v, uint32_t n);
/* Makes room for `more` new blocks (colour too when with_rgb): grows (or
 * rehashes) the table while blocks + tombstones + more would pass
 * max_load_factor, and the pool, with `headroom` spare slots when it must
 * grow. TSDF_ECAPACITY when the memory cap forbids it (nothing changed),
 * or TSDF_ECUDA. */
int cuda_reserve(struct cuda_volume *v, uint64_t more, int with_rgb, uint64_t headroom);
/* Gives the pool a colour channel of zeros (no-op when it has one). */
int cuda_enable_rgb(struct cuda_volume *v);
/* Inserts n distinct keys absent from the table (d_src on the device) as
 * new blocks of empty voxels at `version`; d_block_of (optional, n
 * entries, or through d_out_index) receives each key's pool index. Room
 * must have been reserved. Launch only, then the host mirrors take the n
 * blocks; the failure counter CUDA_CTR_INSERT_FAIL counts keys that found
 * no slot. */
int cuda_insert_new(struct cuda_volume *v, const uint64_t *d_src, uint32_t n, uint64_t version,
                    int32_t *d_block_of_out, const uint32_t *d_out_index);
/* The asynchronous insert of a frame's missing keys (d_missing, count
 * CUDA_CTR_MISSING on the device) as new blocks at v->version, on a fixed
 * grid. Does nothing on the device when the frame's set overflowed or its
 * missing count exceeds `room`. Launch only; the host mirrors are not
 * changed (cuda_settle takes the count once it is read back). */
int cuda_insert_frame(struct cuda_volume *v, uint32_t room);
/* Consumes the pending frame's counts, if any: waits for them, updates the
 * host mirrors, re-runs the frame synchronously when the device deferred
 * it, and grows the table / pool ahead of need. Returns the pending
 * frame's failure, if any (the frame is then counted as rejected). Every
 * entry point but integrate calls it first; integrate calls it after
 * queueing its own upload. */
int cuda_settle(struct cuda_volume *v);
/* The store operations of tsdf_backend_ops (select, read, write, erase,
 * find), on the host side of cuda_store.cu; each synchronises. */
int cuda_store_select(struct cuda_volume *v, const tsdf_block_select *q, uint64_t **keys,
                      size_t *n);
int cuda_store_read(struct cuda_volume *v, const uint64_t *keys, size_t n, tsdf_block_set *out);
int cuda_store_write(struct cuda_volume *v, const tsdf_block_set *in, int replace,
                     uint64_t version);
int cuda_store_erase(struct cuda_volume *v, const uint64_t *keys, size_t n, size_t *erased);
int cuda_store_find(struct cuda_volume *v, const uint64_t *keys, size_t n, uint8_t *present);
/* Drops every block: the table back to its initial capacity, the pool
 * emptied (kept allocated) and its colour channel freed. */
int cuda_store_clear(struct cuda_volume *v);
/* A device buffer of n uploaded keys (the caller frees it with
 * cuda_dev_free(v, p, n * 8)). */
int cuda_upload_keys(struct cuda_volume *v, const uint64_t *keys, size_t n, uint64_t **d_out);

/* ---- device-side lookup ----------------------------------------------- */
/* A read-only view of the table and the pool's channels for kernels that
 * only look up. */
struct cuda_table_view {
    const uint64_t *keys;
    const int32_t *vals;
    uint32_t mask;
    const void *geom;
    const uint8_t *rgb;
};

/* Plain (non-atomic) loads: lookups run in kernels that do not insert, so
 * the table is immutable for their whole duration and may be cached in L1.
 * A tombstone is probed past like any other key. */
__device__ __forceinline__ int32_t cuda_table_find(const cuda_table_view &t, uint64_t key)
{
    uint32_t s = (uint32_t)tsdf_key_hash(key) & t.mask;
    for (uint32_t probes = 0; probes <= t.mask; probes++) {
        uint64_t k = __ldg(&t.keys[s]);
        if (k == key)
            return __ldg(&t.vals[s]);
        if (k == TSDF_KEY_EMPTY)
            return -1;
        s = (s + 1) & t.mask;
    }
    return -1;
}

/* CAS insertion of (key, val) into a table of mask + 1 slots. Returns the
 * slot, or -1 when every slot was probed (the table is full). *existing is
 * set when the key was already there (its slot is returned and val is not
 * written). Only free slots are taken: a tombstone fails the CAS like any
 * other key and the probe goes on, so a key erased and inserted again
 * lands after its tombstone, where lookups still reach it. */
__device__ __forceinline__ int64_t cuda_dev_insert(uint64_t *keys, int32_t *vals, uint32_t mask,
                                                   uint64_t key, int32_t val, int *existing)
{
    uint32_t s = (uint32_t)tsdf_key_hash(key) & mask;
    *existing = 0;
    for (uint32_t probes = 0; probes <= mask; probes++) {
        unsigned long long old =
            atomicCAS((unsigned long long *)&keys[s], (unsigned long long)TSDF_KEY_EMPTY,
                      (unsigned long long)key);
        if (old == TSDF_KEY_EMPTY) {
            vals[s] = val;
            return s;
        }
        if (old == key) {
            *existing = 1;
            return s;
        }
        s = (s + 1) & mask;
    }
    return -1;
}

static inline cuda_table_view cuda_view(const struct cuda_volume *v)
{
    cuda_table_view t;
    t.keys = v->d_keys;
    t.vals = v->d_vals;
    t.mask = v->capacity - 1;
    t.geom = v->d_geom;
    t.rgb = v->d_rgb;
    return t;
}

static inline unsigned cuda_grid(uint64_t n, unsigned threads)
{
    uint64_t g = (n + threads - 1) / threads;
    return (unsigned)(g == 0 ? 1 : g);
}

/* ---- the operations (one file each) ------------------------------------ */
int cuda_integrate(struct cuda_volume *v, const tsdf_frame *f);
int cuda_raycast(struct cuda_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out);
int cuda_mesh(struct cuda_volume *v, const uint64_t *keys, size_t n, tsdf_mesh *out,
              uint64_t **tri_keys, uint64_t **meshed, size_t *n_meshed);
/* Fills the timeline fields of get_timeline; synchronises. */
int cuda_timeline(struct cuda_volume *v, tsdf_frame_timeline *out, size_t max, size_t *n);
/* Test hook: inserts raw keys like a frame's (cuda_integrate.cu). */
int cuda_insert_keys(struct cuda_volume *v, const uint64_t *d_keys, uint32_t n, uint32_t *added);

#endif /* TSDF_CUDA_INTERNAL_H */
