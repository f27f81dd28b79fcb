/*
 * cuda_integrate.cu - integrating one depth frame on the GPU.
 *
 * Per frame, all on the volume's streams:
 *   upload  (upload stream) the frame, staged through one half of a pinned
 *           double buffer, so the upload of frame N+1 can run while the
 *           update of frame N is still on the compute stream;
 *   collect    one thread per pixel walks the shared allocation band
 *           (tsdf_band_dda_* of tsdf_math.h, the CPU's own code) and puts
 *           every block key into a per-frame set (CAS); the thread that
 *           adds a key first lists it as distinct, looks it up in the table
 *           (read-only during this kernel) and lists it as missing if absent;
 *           the update kernel empties the set again for the next frame;
 *   read back  the counts (the only host wait of a frame); the table grows
 *           first if blocks + missing would pass max_load, and a frame that
 *           does not fit under the memory cap fails here with
 *           TSDF_ECAPACITY before anything changed;
 *   insert     the missing keys (CAS) as new pool blocks;
 *   update     one thread per voxel of every block of the frame
 *           (tsdf_integrate_voxel, the CPU's own code), specialised per depth
 *           format and colour so the hot loop has no mode branches.
 * integrate returns after queueing the update; every later call on the
 * volume is ordered after it on the compute stream.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

int cuda_scratch_reserve(struct cuda_volume *v, uint32_t set_cap);
int cuda_sync_all(struct cuda_volume *v);

/* Parameters of one frame for the kernels, passed by value. */
struct frame_args {
    tsdf_frame f; /* depth / rgb point at device memory */
    float T_cam_world[16];
    float trunc_m;
    float inv_block_size;
    float voxel_size;
    float max_weight;
};

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

template <int FMT> static __global__ void k_enumerate(frame_args a, frame_lists L)
{
    uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t npix = a.f.width * a.f.height;
    if (idx >= npix)
        return;
    float d = tsdf_depth_sample_m((tsdf_depth_format)FMT, a.f.depth, idx, a.f.depth_scale,
                                  a.f.min_depth_m, a.f.max_depth_m);
    if (!(d > 0.0f))
        return;
    uint32_t u = idx % a.f.width, v = idx / a.f.width;
    float origin[3], dir[3];
    tsdf_pixel_ray_world(a.f.T_world_cam, &a.f.K, (float)u, (float)v, origin, dir);
    tsdf_block_dda s;
    if (!tsdf_band_dda_init(&s, origin, dir, d, a.trunc_m, a.inv_block_size))
        return;
    int32_t b[3];
    while (tsdf_block_dda_next(&s, b))
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

/* One CTA per block of the frame, one thread per voxel. */
template <int FMT, bool COLOR>
static __global__ void __launch_bounds__(TSDF_BLOCK_VOXELS)
    k_update(frame_args a, const int32_t *frame_blocks, const uint64_t *block_keys,
             uint64_t *block_versions, tsdf_voxel *voxels, uint64_t version, uint64_t *set,
             const uint32_t *unique_slot)
{
    int32_t b = frame_blocks[blockIdx.x];
    /* The per-frame set is done with: empty it for the next frame. */
    if (threadIdx.x == 0)
        set[unique_slot[blockIdx.x]] = TSDF_KEY_EMPTY;
    uint64_t key = block_keys[b];
    int32_t bc[3];
    tsdf_block_key_unpack(key, &bc[0], &bc[1], &bc[2]);
    int x, y, z;
    tsdf_voxel_index_unpack((int)threadIdx.x, &x, &y, &z);
    float p[3];
    tsdf_block_voxel_center(bc, x, y, z, a.voxel_size, p);
    /* Compile-time format and colour: the shared code's branches fold. */
    tsdf_frame f = a.f;
    f.depth_format = (tsdf_depth_format)FMT;
    if (!COLOR)
        f.rgb = NULL;
    tsdf_voxel *vp = &voxels[(size_t)b * TSDF_BLOCK_VOXELS + threadIdx.x];
    tsdf_voxel vox = *vp;
    int changed = tsdf_integrate_voxel(&vox, p, a.T_cam_world, &f, a.trunc_m, a.max_weight);
    if (changed)
        *vp = vox;
    if (__syncthreads_or(changed) && threadIdx.x == 0)
        block_versions[b] = version;
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
                          size_t rgb_bytes)
{
    void *h_rgb = s->h_rgb, *d_rgb = s->d_rgb;
    int rc = grow_staging_pair(v, &s->h_depth, &s->d_depth, &s->depth_cap, depth_bytes);
    if (rc != TSDF_OK)
        return rc;
    rc = grow_staging_pair(v, &h_rgb, &d_rgb, &s->rgb_cap, rgb_bytes);
    s->h_rgb = (uint8_t *)h_rgb;
    s->d_rgb = (uint8_t *)d_rgb;
    return rc;
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

static int launch_enumerate(struct cuda_volume *v, const frame_args &a)
{
    uint32_t npix = a.f.width * a.f.height;
    CUDA_TRY(cudaMemsetAsync(v->d_counters, 0, 3 * sizeof(uint32_t), v->stream));
    if (a.f.depth_format == TSDF_DEPTH_U16)
        k_enumerate<TSDF_DEPTH_U16><<<cuda_grid(npix, 128), 128, 0, v->stream>>>(a, lists_of(v));
    else
        k_enumerate<TSDF_DEPTH_F32><<<cuda_grid(npix, 128), 128, 0, v->stream>>>(a, lists_of(v));
    CUDA_TRY_LAUNCH();
    /* The one host wait of a frame: growth is decided on these counts. */
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

static int launch_update(struct cuda_volume *v, const frame_args &a, uint32_t n)
{
    if (n == 0)
        return TSDF_OK;
    const bool color = a.f.rgb != NULL;
#define LAUNCH(FMT, COL)                                                                           \
    k_update<FMT, COL><<<n, TSDF_BLOCK_VOXELS, 0, v->stream>>>(                                    \
        a, v->d_frame_blocks, v->d_block_keys, v->d_block_versions, v->d_voxels, v->version,       \
        v->d_set_keys, v->d_set_slot)
    if (a.f.depth_format == TSDF_DEPTH_U16) {
        if (color)
            LAUNCH(TSDF_DEPTH_U16, true);
        else
            LAUNCH(TSDF_DEPTH_U16, false);
    } else {
        if (color)
            LAUNCH(TSDF_DEPTH_F32, true);
        else
            LAUNCH(TSDF_DEPTH_F32, false);
    }
#undef LAUNCH
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

/* Inserts the distinct keys now listed in d_unique (count in h_counters)
 * that are missing. Grows first; TSDF_ECAPACITY leaves the volume as it
 * was. */
static int insert_missing(struct cuda_volume *v, uint32_t missing)
{
    int rc = cuda_reserve(v, (uint64_t)v->blocks + missing);
    if (rc == TSDF_ECAPACITY) {
        v->insert_failures += missing;
        return rc;
    }
    if (rc != TSDF_OK)
        return rc;
    return cuda_insert_new(v, v->d_missing, missing, v->d_frame_blocks, v->d_missing_src);
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
        /* The set was too small for this frame: clear it whole, take one
         * four times as large and start over (bounded by the 32-bit slot
         * index; a frame cannot have more distinct blocks than that). */
        if (v->set_cap >= (1u << 30))
            return TSDF_ECAPACITY;
        uint32_t need = v->set_cap * 4;
        rc = cuda_scratch_reserve(v, need);
        if (rc != TSDF_OK)
            return rc;
        CUDA_TRY(
            cudaMemsetAsync(v->d_set_keys, 0xff, (size_t)v->set_cap * sizeof(uint64_t), v->stream));
    }
}

int cuda_integrate(struct cuda_volume *v, const tsdf_frame *f)
{
    const size_t npix = (size_t)f->width * f->height;
    const size_t depth_bytes = npix * (f->depth_format == TSDF_DEPTH_U16 ? 2 : 4);
    const size_t rgb_bytes = f->rgb ? npix * 3 : 0;
    struct cuda_staging *s = &v->staging[v->frame_seq & 1];
    struct cuda_frame_events *fe = &v->timeline[v->timeline_frames % CUDA_TIMELINE_RING];
    v->frame_seq++;

    /* This half was last read by the update two frames ago. */
    if (s->used)
        CUDA_TRY(cudaEventSynchronize(s->consumed));
    int rc = ensure_staging(v, s, depth_bytes, rgb_bytes);
    if (rc != TSDF_OK)
        return rc;
    memcpy(s->h_depth, f->depth, depth_bytes);
    if (rgb_bytes)
        memcpy(s->h_rgb, f->rgb, rgb_bytes);

    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPLOAD_START], v->upload_stream));
    CUDA_TRY(cudaMemcpyAsync(s->d_depth, s->h_depth, depth_bytes, cudaMemcpyHostToDevice,
                             v->upload_stream));
    if (rgb_bytes)
        CUDA_TRY(cudaMemcpyAsync(s->d_rgb, s->h_rgb, rgb_bytes, cudaMemcpyHostToDevice,
                                 v->upload_stream));
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPLOAD_END], v->upload_stream));
    CUDA_TRY(cudaEventRecord(s->uploaded, v->upload_stream));
    CUDA_TRY(cudaStreamWaitEvent(v->stream, s->uploaded, 0));
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_START], v->stream));

    frame_args a;
    a.f = *f;
    a.f.depth = s->d_depth;
    a.f.rgb = rgb_bytes ? s->d_rgb : NULL;
    tsdf_rigid_inverse(f->T_world_cam, a.T_cam_world);
    /* The same expressions as the CPU backend (cpu_backend.c), so both
     * sides feed bit-identical constants into the shared maths. */
    a.voxel_size = v->p.voxel_size_m;
    a.trunc_m = v->p.trunc_vox * v->p.voxel_size_m;
    a.inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * v->p.voxel_size_m);
    a.max_weight = v->p.max_weight;

    rc = collect_blocks(v, a);
    if (rc != TSDF_OK) {
        s->used = 0;
        return rc;
    }
    uint32_t unique = v->h_counters[CUDA_CTR_UNIQUE];
    uint32_t missing = v->h_counters[CUDA_CTR_MISSING];
    /* The version this frame writes; on failure nothing carries it. */
    uint64_t next_version = v->version + 1;
    uint64_t saved = v->version;
    v->version = next_version;
    rc = insert_missing(v, missing);
    if (rc != TSDF_OK) {
        v->version = saved;
        s->used = 0;
        int rc2 = clear_set(v, unique);
        return rc2 != TSDF_OK ? rc2 : rc;
    }
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_ALLOC_END], v->stream));
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPDATE_START], v->stream));
    rc = launch_update(v, a, unique);
    if (rc != TSDF_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(fe->ev[CUDA_EV_UPDATE_END], v->stream));
    CUDA_TRY(cudaEventRecord(s->consumed, v->stream));
    s->used = 1;
    v->frames_integrated++;
    if (rgb_bytes)
        v->has_color = 1;
    fe->frame = v->frames_integrated;
    fe->recorded = 1;
    v->timeline_frames++;
    return TSDF_OK;
}

/* Test hook: inserts raw keys through the same set / classify / grow /
 * insert path as a frame. */
static __global__ void k_keys_to_set(const uint64_t *keys, uint32_t n, frame_lists L)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        set_insert(L, keys[i]);
}

int cuda_insert_keys(struct cuda_volume *v, const uint64_t *d_keys, uint32_t n, uint32_t *added);

int cuda_insert_keys(struct cuda_volume *v, const uint64_t *d_keys, uint32_t n, uint32_t *added)
{
    *added = 0;
    uint32_t need = v->set_cap;
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
    rc = insert_missing(v, missing);
    if (rc != TSDF_OK)
        return rc;
    *added = missing;
    return cuda_sync_all(v);
}
