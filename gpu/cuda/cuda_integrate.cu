/*
 * cuda_integrate.cu - integrating one depth frame on the GPU.
 *
 * Per frame, all on the volume's streams:
 *   upload  (upload stream) the frame into one half of a device double
 *           buffer, so the upload of frame N+1 can run while the update of
 *           frame N is still on the compute stream: from the caller's
 *           images when they are page-locked (tsdf_host_alloc; integrate
 *           then returns once the copy has read them), else staged through
 *           the half's pinned host buffer;
 *   collect    one thread per pixel writes its usable depth (depth edges
 *           zeroed, as the CPU's own tsdf_depth_usable_from_m), walks the
 *           shared allocation band (tsdf_band_walk of tsdf_band.h, the
 *           CPU's own code) and puts
 *           every block key into a per-frame set (CAS); the thread that
 *           adds a key first lists it as distinct, looks it up in the table
 *           (read-only during this kernel) and lists it as missing if absent;
 *           the update kernel empties the set again for the next frame;
 *   insert     the missing keys (CAS) as new pool blocks;
 *   update     one thread per voxel of every block of the frame
 *           (tsdf_voxel_sample_cam on the usable depth and
 *           tsdf_integrate_sample, the CPU's own code), specialised per depth
 *           format and colour so the hot loop has no mode branches.
 * integrate returns after queueing the update; every later call on the
 * volume is ordered after it on the compute stream.
 *
 * Two paths decide how many blocks a frame may add.
 *
 * Synchronous (memory cap set, and every re-run): the host reads the counts
 * after collect (cudaStreamSynchronize), grows the table first if blocks +
 * missing would pass max_load (and the set if it overflowed), and a frame
 * that does not fit under the memory cap fails with TSDF_ECAPACITY before
 * anything changed, from its own integrate call.
 *
 * Asynchronous (no memory cap; no host wait in a frame): insert and update
 * run on fixed grids that stride over the counts in device memory; the
 * insert kernel writes the counts into mapped pinned memory (h_counters),
 * followed by the frame's ALLOC_END event, which nobody waits for yet. Both
 * kernels evaluate, on the same counters, the skip condition "the set
 * overflowed, or missing > room", where room is what is left under a HARD
 * limit computed on the host at launch from the exact host mirrors of the
 * pool and the table (hard_room: the free slots and the unused pool
 * slots, and no more than keeps keys and tombstones at most max(0.9,
 * max_load) * slots, slots - 1 and 2^31 - 1). A skipped frame writes
 * nothing but empties the set slots it listed. The frame is then
 * "pending": cuda_settle consumes it at the start of the next integrate
 * (after that call's upload is queued, so the upload still overlaps) or
 * of any other call, before anything else is queued:
 *   - it waits for that event and evaluates the same condition on the same
 *     counter values (nothing writes UNIQUE / MISSING / SET_OVERFLOW after
 *     collect), so host and device agree on whether the frame went in;
 *   - went in: the pool's mirrors take the missing blocks (the device put
 *     them where cuda_alloc_now said: the top of the free stack, then slots
 *     from `used` on, all < pool capacity), frames_integrated;
 *   - skipped: an overflowed set is cleared whole (it also holds keys it
 *     could not list), and the frame is RE-RUN through the synchronous
 *     path from its staging half, with its own version and timeline slot;
 *   - then growth ahead of need (grow_ahead): the table once keys and
 *     tombstones passed max_load * slots, the pool when less than twice the
 *     largest frame's new blocks is left.
 *
 * Why the re-run gives the same volume as integrating in order:
 *   - Nothing of the skipped frame N was written: k_insert_frame returns
 *     before inserting and k_update only clears set slots, so table, pool,
 *     versions and voxels are those after frame N-1.
 *   - Nothing after N is queued: settle runs before frame N+1's kernels
 *     (integrate queues only N+1's upload, on the upload stream, into the
 *     other staging half), and every other entry point settles first.
 *     Only one frame is ever pending.
 *   - N's images are intact: they are in staging half (seq_N & 1); the next
 *     call to write that half is frame N+2's integrate, which waits for it
 *     to be consumed -- and integrate settles first whenever the pending
 *     frame's half is the one it is about to fill (after an early failed
 *     call the halves could otherwise line up), so it is never overwritten
 *     before the re-run. s->consumed is recorded again after the re-run's
 *     update, so the half's next writer waits for the re-run too.
 *   - The re-run uses frame N's own frame_args (same pose, intrinsics,
 *     device images) and version, so every voxel gets the same inputs in
 *     the same frame order; the shared per-voxel code is the same; the
 *     update's grid only changes which CTA handles a block (each voxel is
 *     still updated by exactly one thread). Block ids differ only in pool
 *     position, which export sorts away, as before.
 * Why no block is lost: the device inserts at most room keys, so the pool
 * (ids < capacity) and the table (at most max(0.9, max_load) and never
 * fully occupied, so linear probing always finds a slot) cannot overflow;
 * a frame whose blocks would
 * not fit, or whose set overflowed, is not partly integrated but re-run in
 * full by the synchronous path, which grows first; a failure there (out of
 * memory, 2^31 slots) is returned by that call and counted in
 * frames_rejected (and insert_failures for TSDF_ECAPACITY), as a rejected
 * frame is on the synchronous path.
 * A failure found while settling (the re-run's growth out of memory, a
 * device fault) undoes the frame's version and timeline slot and is
 * returned by the call that settled; an integrate that settles a failed
 * frame does not queue its own frame either (it is counted as rejected).
 * Costs: the first frame always takes the re-run (the pool starts empty),
 * and so does a frame that lands on a full pool or outgrows the set; the
 * pool headroom keeps that to the rare frame.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_band.h"

/* ---- kernels ------------------------------------------------------------- */

/* Where the distinct keys of a frame go (see set_insert). */
struct frame_lists {
    cuda_table_view t; /* the volume's table: read-only while keys are collected */
    uint64_t *set;
    uint32_t mask;
    uint64_t *unique;
    uint32_t *unique_slot;
    int32_t *frame_blocks;
    uint64_t *missing;
    uint32_t *missing_src;
    uint32_t unique_cap;
    uint32_t *counters;
};

/* Inserts key into the per-frame set. The thread that sees a key first
 * appends it to the list of distinct keys (with its set slot, to clear the
 * set afterwards), looks it up in the volume's table, and lists it as
 * missing when absent: collecting and classifying in one pass. */
static __device__ __forceinline__ void set_insert(const frame_lists &L, uint64_t key)
{
    uint64_t *set = L.set;
    const uint32_t mask = L.mask;
    uint32_t *counters = L.counters;
    uint32_t s = (uint32_t)tsdf_key_hash(key) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++) {
        /* A slot, once taken, keeps its key for the whole kernel, so a
         * plain (possibly stale) load can only err towards the CAS. */
        uint64_t k = set[s];
        if (k == key)
            return;
        if (k == TSDF_KEY_EMPTY) {
            unsigned long long old =
                atomicCAS((unsigned long long *)&set[s], (unsigned long long)TSDF_KEY_EMPTY,
                          (unsigned long long)key);
            if (old == TSDF_KEY_EMPTY) {
                uint32_t i = atomicAdd(&counters[CUDA_CTR_UNIQUE], 1u);
                if (i < L.unique_cap) {
                    L.unique[i] = key;
                    L.unique_slot[i] = s;
                    int32_t b = cuda_table_find(L.t, key);
                    L.frame_blocks[i] = b;
                    if (b < 0) {
                        uint32_t j = atomicAdd(&counters[CUDA_CTR_MISSING], 1u);
                        L.missing[j] = key;
                        L.missing_src[j] = i;
                    }
                } else {
                    atomicAdd(&counters[CUDA_CTR_SET_OVERFLOW], 1u);
                }
                return;
            }
            if (old == key)
                return;
        }
        s = (s + 1) & mask;
    }
    atomicAdd(&counters[CUDA_CTR_SET_OVERFLOW], 1u);
}

/* One thread per pixel: its usable depth for the update (the depth, or 0
 * on a depth edge: tsdf_depth_usable_m, so the update reads one value
 * where it took five samples and four comparisons per voxel), and the
 * blocks of its allocation band into the set. The band is walked with
 * tsdf_band_walk, the DDA's blocks in the DDA's order with fewer
 * divisions. */
template <int FMT> static __global__ void k_enumerate(frame_args a, frame_lists L)
{
    uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t npix = a.f.width * a.f.height;
    if (idx >= npix)
        return;
    tsdf_frame f = a.f;
    f.depth_format = (tsdf_depth_format)FMT;
    uint32_t u = idx % a.f.width, v = idx / a.f.width;
    float d = tsdf_depth_sample_m((tsdf_depth_format)FMT, a.f.depth, idx, a.f.depth_scale,
                                  a.f.min_depth_m, a.f.max_depth_m);
    a.usable[idx] = d > 0.0f && tsdf_depth_edge(&f, u, v, d, a.trunc_m) ? 0.0f : d;
    if (!(d > 0.0f))
        return;
    float origin[3], dir[3], pa[3], pb[3];
    tsdf_pixel_ray_world(a.f.T_world_cam, &a.f.K, (float)u, (float)v, origin, dir);
    if (!tsdf_band_segment(origin, dir, d, a.trunc_m, pa, pb))
        return;
    /* The ends in block units, as tsdf_block_dda_init forms them. */
    const float A[3] = {pa[0] * a.inv_block_size, pa[1] * a.inv_block_size,
                        pa[2] * a.inv_block_size};
    const float B[3] = {pb[0] * a.inv_block_size, pb[1] * a.inv_block_size,
                        pb[2] * a.inv_block_size};
    tsdf_band_walk w;
    int32_t b[3];
    if (!tsdf_band_walk_init(&w, A, B))
        return;
    if (w.mode == TSDF_WALK_DDA) {
        tsdf_block_dda s;
        if (!tsdf_block_dda_init_units(&s, A, B))
            return;
        while (tsdf_block_dda_next(&s, b))
            set_insert(L, tsdf_block_key(b[0], b[1], b[2]));
        return;
    }
    while (tsdf_band_walk_next(&w, b))
        set_insert(L, tsdf_block_key(b[0], b[1], b[2]));
}

/* Frees the set slots of the frame's n distinct keys (when no update
 * kernel runs to do it). */
static __global__ void k_clear_set(uint64_t *set, const uint32_t *unique_slot, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        set[unique_slot[i]] = TSDF_KEY_EMPTY;
}

/* One CTA per block of the frame, one thread per voxel, over a grid that
 * strides through the frame's distinct blocks: their count is read on the
 * device (CUDA_CTR_UNIQUE, at most unique_cap listed), so the host need not
 * know it at launch. Each voxel is still updated by exactly one thread,
 * with the same inputs, whatever the grid. When the frame was skipped (set
 * overflow, or more new blocks than `room`: the condition k_insert_frame
 * and cuda_settle evaluate on the same counters) only the set is emptied.
 * Depth format, colour and layout are template arguments: the shared
 * code's branches on them fold, and the loop has none. */
template <int FMT, bool COLOR, int LAYOUT>
static __global__ void __launch_bounds__(TSDF_BLOCK_VOXELS)
    k_update(frame_args a, const uint32_t *counters, uint32_t unique_cap, uint32_t room,
             const int32_t *frame_blocks, const uint64_t *unique, uint64_t *block_versions,
             void *geom, uint8_t *rgb, uint64_t version, uint64_t *set, const uint32_t *unique_slot)
{
    uint32_t n = counters[CUDA_CTR_UNIQUE];
    if (n > unique_cap)
        n = unique_cap;
    const bool skip = counters[CUDA_CTR_SET_OVERFLOW] != 0 || counters[CUDA_CTR_MISSING] > room;
    /* Compile-time format and colour: the shared code's branches fold. */
    tsdf_frame f = a.f;
    f.depth_format = (tsdf_depth_format)FMT;
    if (!COLOR)
        f.rgb = NULL;
    int x, y, z;
    tsdf_voxel_index_unpack((int)threadIdx.x, &x, &y, &z);
    /* i depends on blockIdx only and skip is uniform, so every thread of
     * the CTA takes the same iterations and reaches the same barriers. */
    for (uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
        /* The per-frame set is done with: empty it for the next frame. */
        if (threadIdx.x == 0)
            set[unique_slot[i]] = TSDF_KEY_EMPTY;
        if (skip)
            continue;
        /* The block and its key side by side (the distinct keys' list,
         * not the pool's key of the block: one dependent load less), then
         * the voxel's stored value, loaded before the projection so that
         * its latency and the usable depth's overlap. */
        const int32_t b = frame_blocks[i];
        const uint64_t key = unique[i];
        const size_t vi = (size_t)b * TSDF_BLOCK_VOXELS + threadIdx.x;
        const tsdf_vox old = tsdf_vox_load((tsdf_layout)LAYOUT, geom, vi, a.quant);
        int32_t bc[3];
        tsdf_block_key_unpack(key, &bc[0], &bc[1], &bc[2]);
        float p[3], pc[3], sdf;
        uint32_t pixel;
        tsdf_block_voxel_center(bc, x, y, z, a.voxel_size, p);
        tsdf_transform_point(a.T_cam_world, p, pc);
        /* tsdf_integrate_voxel, with the usable depth k_enumerate wrote
         * (the same result: tests/test_band.c). */
        int changed =
            tsdf_voxel_sample_cam(pc, &f.K, f.width, f.height, a.usable, a.trunc_m, &sdf, &pixel);
        if (changed)
            tsdf_integrate_loaded((tsdf_layout)LAYOUT, geom, COLOR ? rgb : NULL, vi, old, sdf,
                                  pixel, &f, a.max_weight, a.quant);
        if (__syncthreads_or(changed) && threadIdx.x == 0)
            block_versions[b] = version;
    }
}

/* ---- host side ------------------------------------------------------------- */

/* Grows one staging pair (a pinned host buffer and its device copy) to at
 * least `bytes`; their contents are not kept. When an allocation fails the
 * pair is left empty (both NULL, *cap 0). */
static int grow_staging_pair(struct cuda_volume *v, void **h, void **d, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return TSDF_OK;
    if (*h)
        CUDA_TRY(cudaFreeHost(*h));
    cuda_dev_free(v, *d, *cap);
    *h = NULL;
    *d = NULL;
    *cap = 0;
    CUDA_TRY(cudaHostAlloc(h, bytes, cudaHostAllocDefault));
    int rc = cuda_dev_alloc(v, d, bytes);
    if (rc != TSDF_OK) {
        (void)cudaFreeHost(*h);
        *h = NULL;
        return rc;
    }
    *cap = bytes;
    return TSDF_OK;
}

static int ensure_staging(struct cuda_volume *v, struct cuda_staging *s, size_t depth_bytes,
                          size_t rgb_bytes, size_t usable_bytes)
{
    void *h_rgb = s->h_rgb, *d_rgb = s->d_rgb;
    int rc = grow_staging_pair(v, &s->h_depth, &s->d_depth, &s->depth_cap, depth_bytes);
    if (rc != TSDF_OK)
        return rc;
    rc = grow_staging_pair(v, &h_rgb, &d_rgb, &s->rgb_cap, rgb_bytes);
    s->h_rgb = (uint8_t *)h_rgb;
    s->d_rgb = (uint8_t *)d_rgb;
    if (rc != TSDF_OK || usable_bytes <= s->usable_cap)
        return rc;
    cuda_dev_free(v, s->d_usable, s->usable_cap);
    s->d_usable = NULL;
    s->usable_cap = 0;
    void *d = NULL;
    rc = cuda_dev_alloc(v, &d, usable_bytes);
    if (rc != TSDF_OK)
        return rc;
    s->d_usable = (float *)d;
    s->usable_cap = usable_bytes;
    return TSDF_OK;
}

static frame_lists lists_of(struct cuda_volume *v)
{
    frame_lists L;
    L.t = cuda_view(v);
    L.set = v->d_set_keys;
    L.mask = v->set_cap - 1;
    L.unique = v->d_unique;
    L.unique_slot = v->d_set_slot;
    L.frame_blocks = v->d_frame_blocks;
    L.missing = v->d_missing;
    L.missing_src = v->d_missing_src;
    L.unique_cap = v->unique_cap;
    L.counters = v->d_counters;
    return L;
}

static int read_counters(struct cuda_volume *v)
{
    CUDA_TRY(cudaMemcpyAsync(v->h_counters, v->d_counters, CUDA_CTR_COUNT * sizeof(uint32_t),
                             cudaMemcpyDeviceToHost, v->stream));
    CUDA_TRY(cudaStreamSynchronize(v->stream));
    return TSDF_OK;
}

/* Queues the collect pass of a frame (counters reset first). */
static int queue_enumerate(struct cuda_volume *v, const frame_args &a)
{
    uint32_t npix = a.f.width * a.f.height;
    CUDA_TRY(cudaMemsetAsync(v->d_counters, 0, 3 * sizeof(uint32_t), v->stream));
    if (a.f.depth_format == TSDF_DEPTH_U16)
        k_enumerate<TSDF_DEPTH_U16><<<cuda_grid(npix, 128), 128, 0, v->stream>>>(a, lists_of(v));
    else
        k_enumerate<TSDF_DEPTH_F32><<<cuda_grid(npix, 128), 128, 0, v->stream>>>(a, lists_of(v));
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

/* The synchronous path's host wait: growth is decided on these counts. */
static int launch_enumerate(struct cuda_volume *v, const frame_args &a)
{
    int rc = queue_enumerate(v, a);
    if (rc != TSDF_OK)
        return rc;
    return read_counters(v);
}

/* Empties the per-frame set when the frame stops before its update. */
static int clear_set(struct cuda_volume *v, uint32_t unique)
{
    if (unique == 0)
        return TSDF_OK;
    k_clear_set<<<cuda_grid(unique, 256), 256, 0, v->stream>>>(v->d_set_keys, v->d_set_slot,
                                                               unique);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

/* Queues the update of the frame's listed blocks (count on the device).
 * n_host, when the host knows the count (synchronous path), only trims the
 * grid; 0 means unknown. room: see k_update (UINT32_MAX: never skip). */
static int launch_update(struct cuda_volume *v, const frame_args &a, uint32_t n_host, uint32_t room)
{
    const bool color = a.f.rgb != NULL;
    unsigned grid = v->update_grid;
    if (n_host != 0 && n_host < grid)
        grid = n_host;
    /* A colour frame's update needs the colour channel: integrate made it
     * before queueing the frame (or the growth of the first pool did). */
    if (color && v->d_rgb == NULL && v->pool_cap != 0)
        return TSDF_EINTERNAL;
#define LAUNCH(FMT, COL, LAY)                                                                      \
    k_update<FMT, COL, LAY><<<grid, TSDF_BLOCK_VOXELS, 0, v->stream>>>(                            \
        a, v->d_counters, v->unique_cap, room, v->d_frame_blocks, v->d_unique,                     \
        v->d_block_versions, v->d_geom, v->d_rgb, v->version, v->d_set_keys, v->d_set_slot)
#define LAUNCH_LAYOUT(FMT, COL)                                                                    \
    do {                                                                                           \
        if (v->p.layout == TSDF_LAYOUT_S16)                                                        \
            LAUNCH(FMT, COL, TSDF_LAYOUT_S16);                                                     \
        else                                                                                       \
            LAUNCH(FMT, COL, TSDF_LAYOUT_F32);                                                     \
    } while (0)
    if (a.f.depth_format == TSDF_DEPTH_U16) {
        if (color)
            LAUNCH_LAYOUT(TSDF_DEPTH_U16, true);
        else
            LAUNCH_LAYOUT(TSDF_DEPTH_U16, false);
    } else {
        if (color)
            LAUNCH_LAYOUT(TSDF_DEPTH_F32, true);
        else
            LAUNCH_LAYOUT(TSDF_DEPTH_F32, false);
    }
#undef LAUNCH_LAYOUT
#undef LAUNCH
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

/* Inserts the distinct keys now listed in d_unique (count in h_counters)
 * that are missing, at the volume's version. Grows first (with the colour
 * channel when with_rgb); TSDF_ECAPACITY leaves the volume as it was. */
static int insert_missing(struct cuda_volume *v, uint32_t missing, int with_rgb)
{
    v->peak_missing = tsdf_peak_update(v->peak_missing, missing);
    int rc = cuda_reserve(v, missing, with_rgb, 2 * v->peak_missing);
    if (rc == TSDF_ECAPACITY) {
        v->insert_failures += missing;
        return rc;
    }
    if (rc != TSDF_OK)
        return rc;
    return cuda_insert_new(v, v->d_missing, missing, v->version, v->d_frame_blocks,
                           v->d_missing_src);
}

/* Collects and classifies the frame's blocks, growing the per-frame set
 * until it holds them all. On success h_counters holds the counts. */
static int collect_blocks(struct cuda_volume *v, const frame_args &a)
{
    for (;;) {
        int rc = launch_enumerate(v, a);
        if (rc != TSDF_OK)
            return rc;
        if (v->h_counters[CUDA_CTR_SET_OVERFLOW] == 0)
            return TSDF_OK;
        /* The set was too small for this frame: take one four times as
         * large, at most 2^30 slots (a new set starts empty), and start
         * over. At that size the frame fails; the set it filled is
         * emptied first, or every later frame's probes would walk it
         * whole and find its keys "already listed". */
        if (v->set_cap >= (1u << 30)) {
            CUDA_TRY(cudaMemsetAsync(v->d_set_keys, 0xff, (size_t)v->set_cap * sizeof(uint64_t),
                                     v->stream));
            return TSDF_ECAPACITY;
        }
        rc = cuda_scratch_reserve(v, v->set_cap < (1u << 28) ? v->set_cap * 4 : 1u << 30);
        if (rc != TSDF_OK)
            return rc;
    }
}

/* The synchronous path of one frame whose images are on the device (the
 * compute stream already ordered after their upload): collect, read the
 * counts back, grow, insert, update. v->version is the version the frame
 * writes. On failure nothing of the frame was written (the caller restores
 * the version); on success s->consumed is recorded after the update. */
static int frame_sync(struct cuda_volume *v, const frame_args &a, struct cuda_staging *s,
                      struct cuda_frame_events *fe)
{
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_START], v->stream));
    int rc = collect_blocks(v, a);
    if (rc != TSDF_OK)
        return rc;
    uint32_t unique = v->h_counters[CUDA_CTR_UNIQUE];
    uint32_t missing = v->h_counters[CUDA_CTR_MISSING];
    rc = insert_missing(v, missing, a.f.rgb != NULL);
    if (rc != TSDF_OK) {
        int rc2 = clear_set(v, unique);
        return rc2 != TSDF_OK ? rc2 : rc;
    }
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_END], v->stream));
    if (unique > 0) {
        rc = launch_update(v, a, unique, UINT32_MAX);
        if (rc != TSDF_OK)
            return rc;
    }
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPDATE_END], v->stream));
    CUDA_TRY(cudaEventRecord(s->consumed, v->stream));
    s->used = 1;
    return TSDF_OK;
}

/* New blocks the asynchronous path lets one frame add: up to a HARD limit
 * of the pool's free and unused slots, and of keys and tombstones at most
 * max(0.9, max_load_factor) of the slots (all but one at the most), and
 * 2^31 - 1 blocks. Growth keeps keys and tombstones under max_load_factor
 * * slots before each frame is queued, so the soft limit is passed by at
 * most one frame and the hard one never. */
static uint32_t hard_room(const struct cuda_volume *v)
{
    double load = v->p.max_load_factor > 0.9f ? (double)v->p.max_load_factor : 0.9;
    uint64_t limit = (uint64_t)(load * (double)v->capacity);
    if (limit >= v->capacity)
        limit = v->capacity - 1;
    const uint64_t occupied = (uint64_t)v->blocks + v->tombstones;
    uint64_t room = limit > occupied ? limit - occupied : 0;
    const uint64_t pool_room = (uint64_t)v->free_count + (v->pool_cap - v->used);
    if (room > pool_room)
        room = pool_room;
    if ((uint64_t)v->blocks + room > 0x7fffffffull)
        room = 0x7fffffffull > v->blocks ? 0x7fffffffull - v->blocks : 0;
    return (uint32_t)room;
}

/* The asynchronous path: collect, copy the counts back (not waited for),
 * insert and update reading their counts on the device; the frame is
 * skipped on the device when it does not fit in hard_room. cuda_settle
 * consumes the counts. */
static int frame_async(struct cuda_volume *v, const frame_args &a, struct cuda_staging *s,
                       struct cuda_frame_events *fe)
{
    const uint32_t room = hard_room(v);
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_START], v->stream));
    int rc = queue_enumerate(v, a);
    if (rc != TSDF_OK)
        return rc;
    /* From here on the frame is pending: cuda_settle consumes its counts
     * (and re-runs it if the device skips it). A launch that fails below
     * leaves it partly queued, which cuda_integrate turns into a sticky
     * error. */
    v->pend.active = 1;
    v->pend.a = a;
    v->pend.s = s;
    v->pend.fe = fe;
    v->pend.version = v->version;
    v->pend.room = room;
    v->pend.color = a.f.rgb != NULL;
    rc = cuda_insert_frame(v, room);
    if (rc != TSDF_OK)
        return rc;
    /* The insert kernel wrote the counts into h_counters: cuda_settle
     * waits for this event. */
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_END], v->stream));
    rc = launch_update(v, a, 0, room);
    if (rc != TSDF_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPDATE_END], v->stream));
    CUDA_TRY(cudaEventRecord(s->consumed, v->stream));
    s->used = 1;
    return TSDF_OK;
}

/* Grows ahead of need after a frame was consumed: the table once blocks
 * passed max_load_factor * slots (as the synchronous path would have before
 * inserting), the pool when less than twice the largest frame's new blocks
 * is left. Best effort: cuda_reserve and grow_pool leave table and pool as
 * they were when they fail, the hard limit still holds, and a frame that
 * then does not fit is deferred and re-run synchronously, which reports the
 * failure. */
static void grow_ahead(struct cuda_volume *v)
{
    /* Room for twice the largest frame: the table when keys and
     * tombstones would pass max_load, the pool when its free and unused
     * slots would not hold them. */
    (void)cuda_reserve(v, 2 * v->peak_missing, 0, 0);
}

/* A frame is in the volume: the host-side bookkeeping. */
static void frame_done(struct cuda_volume *v, struct cuda_frame_events *fe)
{
    v->frames_integrated++;
    fe->frame = v->frames_integrated;
}

/* The pending frame turned out not to be integrated: undo its timeline
 * slot (the newest: nothing was queued after it), count it. Its version is
 * kept: tsdf_volume_version may already have reported it, and versions
 * never go back (a number that no change carries is harmless). The caller
 * returns the error, so the next call reports it. */
static void settle_failed(struct cuda_volume *v, const struct cuda_pending *p)
{
    v->frames_rejected++;
    if (v->timeline_frames > 0 &&
        p->fe == &v->timeline[(v->timeline_frames - 1) % CUDA_TIMELINE_RING]) {
        v->timeline_frames--;
        p->fe->recorded = 0;
    }
}

int cuda_settle(struct cuda_volume *v)
{
    if (!v->pend.active)
        return TSDF_OK;
    struct cuda_pending p = v->pend;
    v->pend.active = 0;
    cudaError_t err = cudaEventSynchronize(p.fe->ev[CUDA_EV_ALLOC_END]);
    if (err != cudaSuccess) {
        /* A fault in the frame's kernels poisons the context. */
        if (err != cudaErrorMemoryAllocation && err != cudaErrorInvalidValue)
            v->sticky_error = 1;
        settle_failed(v, &p);
        return cuda_check(err, "cudaEventSynchronize(counts)", __FILE__, __LINE__);
    }
    const uint32_t missing = v->h_counters[CUDA_CTR_MISSING];
    const uint32_t overflow = v->h_counters[CUDA_CTR_SET_OVERFLOW];
    if (overflow == 0 && missing <= p.room) {
        /* The device put the frame's new blocks where cuda_alloc_now said. */
        cuda_alloc_take(v, missing);
        v->peak_missing = tsdf_peak_update(v->peak_missing, missing);
        frame_done(v, p.fe);
    } else {
        /* Deferred: the device wrote nothing of the frame and emptied the
         * set slots it listed; an overflowed set also holds unlisted keys,
         * so clear it whole. Nothing after the frame is queued yet and its
         * images are still in p.s, so re-running it now, synchronously,
         * integrates exactly the sequence of frames the host was given. */
        int rc = TSDF_OK;
        if (overflow != 0)
            rc = cuda_check(cudaMemsetAsync(v->d_set_keys, 0xff,
                                            (size_t)v->set_cap * sizeof(uint64_t), v->stream),
                            "clear set", __FILE__, __LINE__);
        if (rc == TSDF_OK) {
            /* The re-run writes the frame's own version. */
            const uint64_t now = v->version;
            v->version = p.version;
            rc = frame_sync(v, p.a, p.s, p.fe);
            v->version = now;
        }
        if (rc != TSDF_OK) {
            settle_failed(v, &p);
            return rc;
        }
        frame_done(v, p.fe);
    }
    grow_ahead(v);
    return TSDF_OK;
}

/* After a failure once the frame's upload is queued (fe: its timeline
 * slot): order its staging half's reuse after the upload, so the host
 * never overwrites pinned memory a copy still reads. */
static void release_staging(struct cuda_volume *v, struct cuda_staging *s,
                            const struct cuda_frame_events *fe)
{
    if (cudaStreamWaitEvent(v->stream, fe->ev[CUDA_EV_UPLOAD_END], 0) == cudaSuccess &&
        cudaEventRecord(s->consumed, v->stream) == cudaSuccess)
        s->used = 1;
    else
        (void)cudaStreamSynchronize(v->upload_stream);
}

/* Queues frame f (see cuda_integrate). Its images are uploaded from
 * depth_src / rgb_src where those are given (page-locked memory), else
 * copied into the staging half's pinned buffers first; *queued is set
 * once an upload may read them. */
static int integrate_from(struct cuda_volume *v, const tsdf_frame *f, const void *depth_src,
                          const uint8_t *rgb_src, int *queued)
{
    const size_t npix = (size_t)f->width * f->height;
    const size_t depth_bytes = npix * (f->depth_format == TSDF_DEPTH_U16 ? 2 : 4);
    const size_t rgb_bytes = f->rgb ? npix * 3 : 0;
    struct cuda_staging *s = &v->staging[v->frame_seq & 1];
    int rc;

    /* The pending frame's images must stay in its half until it is
     * consumed (and re-run if deferred). Normally it sits in the other
     * half; after a failed call it may be this one. */
    if (v->pend.active && v->pend.s == s) {
        rc = cuda_settle(v);
        if (rc != TSDF_OK)
            return rc;
    }
    v->frame_seq++;

    /* This half was last read by the update two frames ago. */
    if (s->used)
        CUDA_TRY(cudaEventSynchronize(s->consumed));
    rc = ensure_staging(v, s, depth_bytes, rgb_bytes, npix * sizeof(float));
    if (rc != TSDF_OK)
        return rc;
    if (depth_src == NULL) {
        memcpy(s->h_depth, f->depth, depth_bytes);
        depth_src = s->h_depth;
    }
    if (rgb_bytes && rgb_src == NULL) {
        memcpy(s->h_rgb, f->rgb, rgb_bytes);
        rgb_src = s->h_rgb;
    }

    /* The slot after the pending frame's (the ring holds 16). */
    struct cuda_frame_events *fe = &v->timeline[v->timeline_frames % CUDA_TIMELINE_RING];
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPLOAD_START], v->upload_stream));
    *queued = 1;
    CUDA_TRY(cudaMemcpyAsync(s->d_depth, depth_src, depth_bytes, cudaMemcpyHostToDevice,
                             v->upload_stream));
    if (rgb_bytes)
        CUDA_TRY(cudaMemcpyAsync(s->d_rgb, rgb_src, rgb_bytes, cudaMemcpyHostToDevice,
                                 v->upload_stream));
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPLOAD_END], v->upload_stream));

    /* The previous frame's counts, while this upload runs: its host
     * mirrors, its re-run if the device deferred it, growth. This frame's
     * kernels are queued only after. */
    rc = cuda_settle(v);
    if (rc != TSDF_OK) {
        release_staging(v, s, fe);
        return rc;
    }
    /* A failed growth of the per-frame set leaves none (free_scratch). */
    if (v->set_cap == 0) {
        rc = cuda_scratch_reserve(v, CUDA_SET_FIRST_SLOTS);
        if (rc != TSDF_OK) {
            release_staging(v, s, fe);
            return rc;
        }
    }
    /* A colour frame into a volume without colour: the channel first (a
     * pool that does not exist yet gets it when it is made), under the
     * cap like any growth. */
    if (rgb_bytes && v->d_rgb == NULL && v->pool_cap != 0) {
        rc = cuda_reserve(v, 0, 1, 0);
        if (rc != TSDF_OK) {
            release_staging(v, s, fe);
            return rc;
        }
    }
    CUDA_TRY(cudaStreamWaitEvent(v->stream, fe->ev[CUDA_EV_UPLOAD_END], 0));

    frame_args a;
    a.f = *f;
    a.f.depth = s->d_depth;
    a.f.rgb = rgb_bytes ? s->d_rgb : NULL;
    a.usable = s->d_usable;
    tsdf_rigid_inverse(f->T_world_cam, a.T_cam_world);
    /* The same expressions as the CPU backend (cpu_backend.c), so both
     * sides feed bit-identical constants into the shared maths. */
    a.voxel_size = v->p.voxel_size_m;
    a.trunc_m = v->p.trunc_vox * v->p.voxel_size_m;
    a.inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * v->p.voxel_size_m);
    a.max_weight = v->p.max_weight;
    a.quant = v->quant;

    /* The version this frame writes; on failure nothing carries it. */
    const uint64_t saved = v->version;
    v->version = saved + 1;
    /* fe->frame is set once the frame is known to be in the volume. */
    fe->recorded = 1;
    v->timeline_frames++;
    if (v->p.memory_cap_bytes == 0) {
        rc = frame_async(v, a, s, fe);
        if (rc != TSDF_OK) {
            if (v->pend.active) {
                /* Part of the frame is queued (its insert may run without
                 * its update): the volume's content is unknown, so it
                 * fails every later call rather than serve it. Only a
                 * broken launch gets here. */
                v->pend.active = 0;
                v->sticky_error = 1;
            }
            v->version = saved;
            v->timeline_frames--;
            fe->recorded = 0;
            release_staging(v, s, fe);
        }
        return rc;
    }
    /* Under a memory cap, the synchronous path: a frame that does not fit
     * fails here with TSDF_ECAPACITY and the volume unchanged. */
    rc = frame_sync(v, a, s, fe);
    if (rc != TSDF_OK) {
        v->version = saved;
        v->timeline_frames--;
        fe->recorded = 0;
        s->used = 0;
        return rc;
    }
    frame_done(v, fe);
    return TSDF_OK;
}

/* 1 when byte p is in page-locked host memory (tsdf_host_alloc,
 * cudaHostAlloc, cudaHostRegister), which the copy engines read directly. */
static int page_locked_at(const void *p)
{
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeHost;
}

static int page_locked(const void *p, size_t bytes)
{
    return page_locked_at(p) && page_locked_at((const char *)p + bytes - 1);
}

int cuda_integrate(struct cuda_volume *v, const tsdf_frame *f)
{
    const size_t npix = (size_t)f->width * f->height;
    const size_t depth_bytes = npix * (f->depth_format == TSDF_DEPTH_U16 ? 2 : 4);
    /* Images in page-locked memory are uploaded from where they are: no
     * host copy into the staging buffer (a 614 KB memcpy for a 640x480
     * 16-bit frame, the larger part of a frame's host time). */
    const void *depth_src = page_locked(f->depth, depth_bytes) ? f->depth : NULL;
    const uint8_t *rgb_src = f->rgb && page_locked(f->rgb, npix * 3) ? f->rgb : NULL;
    int queued = 0;
    int rc = integrate_from(v, f, depth_src, rgb_src, &queued);
    if (queued && (depth_src != NULL || rgb_src != NULL)) {
        /* The caller may refill its images once this returns (the
         * contract of any memory): wait until the upload has read them.
         * The kernels of the frame stay queued behind it. */
        int rc2 = cuda_check(cudaStreamSynchronize(v->upload_stream), "upload from the caller",
                             __FILE__, __LINE__);
        if (rc2 != TSDF_OK) {
            v->sticky_error = 1;
            if (rc == TSDF_OK)
                rc = rc2;
        }
    }
    return rc;
}

/* Test hook: inserts raw keys through the same set / classify / grow /
 * insert path as a frame. */
static __global__ void k_keys_to_set(const uint64_t *keys, uint32_t n, frame_lists L)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        set_insert(L, keys[i]);
}

int cuda_insert_keys(struct cuda_volume *v, const uint64_t *d_keys, uint32_t n, uint32_t *added)
{
    *added = 0;
    /* A set at most half full, within the set's 2^30 slots. */
    if (n > (1u << 29))
        return TSDF_EINVAL;
    uint32_t need = v->set_cap ? v->set_cap : CUDA_SET_FIRST_SLOTS;
    while (need / 2 < n)
        need *= 2;
    int rc = cuda_scratch_reserve(v, need);
    if (rc != TSDF_OK)
        return rc;
    CUDA_TRY(cudaMemsetAsync(v->d_counters, 0, 3 * sizeof(uint32_t), v->stream));
    if (n > 0) {
        k_keys_to_set<<<cuda_grid(n, 256), 256, 0, v->stream>>>(d_keys, n, lists_of(v));
        CUDA_TRY_LAUNCH();
    }
    rc = read_counters(v);
    if (rc != TSDF_OK)
        return rc;
    if (v->h_counters[CUDA_CTR_SET_OVERFLOW])
        return TSDF_EINTERNAL;
    uint32_t unique = v->h_counters[CUDA_CTR_UNIQUE];
    uint32_t missing = v->h_counters[CUDA_CTR_MISSING];
    rc = clear_set(v, unique);
    if (rc != TSDF_OK)
        return rc;
    v->version++;
    rc = insert_missing(v, missing, 0);
    if (rc != TSDF_OK)
        return rc;
    *added = missing;
    return cuda_sync_all(v);
}
