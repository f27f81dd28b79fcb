/*
 * cuda_backend.cu - the CUDA backend's life cycle and bookkeeping: device
 * probe, error mapping, create / destroy / reset, statistics, the frame
 * timeline, the test hooks, and the tsdf_cuda_ops table the front end
 * dispatches to (the store operations themselves are in cuda_store.cu).
 *
 * Errors: every CUDA call goes through cuda_check, which maps a failure to
 * TSDF_ECUDA and keeps its text per thread (tsdf_cuda_last_error_string).
 * An error that poisons the context (a kernel fault) is sticky: the volume
 * then fails every call with TSDF_ECUDA instead of using corrupt state; the
 * daemon reports it and keeps serving its other maps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_sort.h"

/* ---- errors --------------------------------------------------------------- */

static thread_local char g_last_error[256];

extern "C" const char *tsdf_cuda_last_error_string(void)
{
    return g_last_error;
}

int cuda_check(cudaError_t err, const char *what, const char *file, int line)
{
    if (err == cudaSuccess)
        return TSDF_OK;
    const char *base = strrchr(file, '/');
    snprintf(g_last_error, sizeof g_last_error, "%s at %s:%d: %s (%s)", what,
             base ? base + 1 : file, line, cudaGetErrorString(err), cudaGetErrorName(err));
    return TSDF_ECUDA;
}

/* ---- memory ---------------------------------------------------------------- */

int cuda_dev_alloc(struct cuda_volume *v, void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (bytes == 0)
        return TSDF_OK;
    /* tsdf_cuda_test_fail_alloc: this one fails as cudaMalloc would. */
    if (v->test_fail_alloc != 0 && --v->test_fail_alloc == 0)
        return cuda_check(cudaErrorMemoryAllocation, "cudaMalloc (failed by a test)", __FILE__,
                          __LINE__);
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err != cudaSuccess) {
        *ptr = NULL;
        /* An allocation failure is not sticky: clear it so the next call
         * does not see it. */
        (void)cudaGetLastError();
        return cuda_check(err, "cudaMalloc", __FILE__, __LINE__);
    }
    v->mem_bytes += bytes;
    return TSDF_OK;
}

void cuda_dev_free(struct cuda_volume *v, void *ptr, size_t bytes)
{
    if (ptr == NULL)
        return;
    (void)cudaFree(ptr);
    v->mem_bytes -= bytes;
}

/* ---- probe ----------------------------------------------------------------- */

extern "C" int tsdf_cuda_probe(int ordinal)
{
    int count = 0;
    /* Without a driver or a device these return an error; nothing here may
     * crash or exit. */
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (ordinal < 0 || ordinal >= count)
        return 0;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    if (cudaSetDevice(ordinal) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    (void)cudaSetDevice(prev);
    return 1;
}

/* ---- life cycle ------------------------------------------------------------ */

static uint32_t round_pow2(uint32_t n)
{
    uint32_t c = 1;
    while (c < n && c < (1u << 31))
        c <<= 1;
    return c;
}

static void free_scratch(struct cuda_volume *v)
{
    size_t n = v->unique_cap;
    cuda_dev_free(v, v->d_set_keys, (size_t)v->set_cap * sizeof(uint64_t));
    cuda_dev_free(v, v->d_set_slot, n * sizeof(uint32_t));
    cuda_dev_free(v, v->d_unique, n * sizeof(uint64_t));
    cuda_dev_free(v, v->d_frame_blocks, n * sizeof(int32_t));
    cuda_dev_free(v, v->d_missing, n * sizeof(uint64_t));
    cuda_dev_free(v, v->d_missing_src, n * sizeof(uint32_t));
    v->d_set_keys = NULL;
    v->d_set_slot = NULL;
    v->d_unique = NULL;
    v->d_frame_blocks = NULL;
    v->d_missing = NULL;
    v->d_missing_src = NULL;
    v->set_cap = 0;
    v->unique_cap = 0;
}

int cuda_kept_reserve(struct cuda_volume *v, int slot, size_t bytes, void **p)
{
    if (bytes == 0)
        bytes = 4;
    if (bytes > v->mesh_cap[slot]) {
        CUDA_TRY(cudaStreamSynchronize(v->stream));
        cuda_dev_free(v, v->mesh_buf[slot], v->mesh_cap[slot]);
        v->mesh_buf[slot] = NULL;
        v->mesh_cap[slot] = 0;
        /* Some headroom, so a growing map does not reallocate every call. */
        size_t want = bytes + bytes / 4;
        int rc = cuda_dev_alloc(v, &v->mesh_buf[slot], want);
        if (rc != TSDF_OK)
            return rc;
        v->mesh_cap[slot] = want;
    }
    *p = v->mesh_buf[slot];
    return TSDF_OK;
}

/* The per-frame candidate set: set_cap slots (power of two) and lists of
 * set_cap / 2 distinct keys, so the set never passes half full. */
int cuda_scratch_reserve(struct cuda_volume *v, uint32_t set_cap)
{
    if (set_cap <= v->set_cap)
        return TSDF_OK;
    CUDA_TRY(cudaStreamSynchronize(v->stream));
    free_scratch(v);
    uint32_t n = set_cap / 2;
    int rc = cuda_dev_alloc(v, (void **)&v->d_set_keys, (size_t)set_cap * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&v->d_set_slot, (size_t)n * sizeof(uint32_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&v->d_unique, (size_t)n * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&v->d_frame_blocks, (size_t)n * sizeof(int32_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&v->d_missing, (size_t)n * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&v->d_missing_src, (size_t)n * sizeof(uint32_t));
    if (rc != TSDF_OK) {
        v->unique_cap = n;
        v->set_cap = set_cap;
        free_scratch(v);
        return rc;
    }
    v->set_cap = set_cap;
    v->unique_cap = n;
    /* The set starts empty; each frame clears the slots it used. */
    CUDA_TRY(cudaMemsetAsync(v->d_set_keys, 0xff, (size_t)set_cap * sizeof(uint64_t), v->stream));
    return TSDF_OK;
}

static void free_staging(struct cuda_volume *v)
{
    for (int i = 0; i < 2; i++) {
        struct cuda_staging *s = &v->staging[i];
        if (s->h_depth)
            (void)cudaFreeHost(s->h_depth);
        if (s->h_rgb)
            (void)cudaFreeHost(s->h_rgb);
        cuda_dev_free(v, s->d_depth, s->depth_cap);
        cuda_dev_free(v, s->d_rgb, s->rgb_cap);
        cuda_dev_free(v, s->d_usable, s->usable_cap);
        if (s->consumed)
            (void)cudaEventDestroy(s->consumed);
        memset(s, 0, sizeof *s);
    }
}

static void cuda_destroy(void *impl)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    if (v == NULL)
        return;
    (void)cudaSetDevice(v->device);
    /* A pending frame is dropped with the volume: waiting for both streams
     * covers its kernels, which write its counts into h_counters, freed
     * below. */
    v->pend.active = 0;
    if (v->stream)
        (void)cudaStreamSynchronize(v->stream);
    if (v->upload_stream)
        (void)cudaStreamSynchronize(v->upload_stream);
    free_staging(v);
    free_scratch(v);
    cuda_table_free(v);
    cuda_dev_free(v, v->d_block_keys, (size_t)v->pool_cap * sizeof(uint64_t));
    cuda_dev_free(v, v->d_block_versions, (size_t)v->pool_cap * sizeof(uint64_t));
    cuda_dev_free(v, v->d_free, (size_t)v->pool_cap * sizeof(uint32_t));
    cuda_dev_free(v, v->d_geom, (size_t)v->pool_cap * v->geom_block_bytes);
    cuda_dev_free(v, v->d_rgb, (size_t)v->pool_cap * TSDF_BLOCK_RGB_BYTES);
    cuda_dev_free(v, v->d_counters, CUDA_CTR_COUNT * sizeof(uint32_t));
    cuda_dev_free(v, v->d_ray, v->ray_cap);
    for (int i = 0; i < CUDA_MESH_BUFFERS; i++)
        cuda_dev_free(v, v->mesh_buf[i], v->mesh_cap[i]);
    if (v->h_counters)
        (void)cudaFreeHost(v->h_counters);
    if (v->h_mesh)
        (void)cudaFreeHost(v->h_mesh);
    for (int i = 0; i < CUDA_TIMELINE_RING; i++)
        for (int e = 0; e < CUDA_EV_COUNT; e++)
            if (v->timeline[i].ev[e])
                (void)cudaEventDestroy(v->timeline[i].ev[e]);
    if (v->epoch)
        (void)cudaEventDestroy(v->epoch);
    if (v->q_start)
        (void)cudaEventDestroy(v->q_start);
    if (v->q_end)
        (void)cudaEventDestroy(v->q_end);
    if (v->upload_stream)
        (void)cudaStreamDestroy(v->upload_stream);
    if (v->stream)
        (void)cudaStreamDestroy(v->stream);
    free(v);
}

static int create_events(struct cuda_volume *v)
{
    CUDA_TRY(cudaEventCreate(&v->epoch));
    CUDA_TRY(cudaEventCreate(&v->q_start));
    CUDA_TRY(cudaEventCreate(&v->q_end));
    for (int i = 0; i < CUDA_TIMELINE_RING; i++)
        for (int e = 0; e < CUDA_EV_COUNT; e++)
            CUDA_TRY(cudaEventCreate(&v->timeline[i].ev[e]));
    for (int i = 0; i < 2; i++)
        CUDA_TRY(cudaEventCreateWithFlags(&v->staging[i].consumed, cudaEventDisableTiming));
    return TSDF_OK;
}

static int cuda_create_impl(struct cuda_volume *v)
{
    CUDA_TRY(cudaSetDevice(v->device));
    CUDA_TRY(cudaStreamCreateWithFlags(&v->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&v->upload_stream, cudaStreamNonBlocking));
    /* The fixed grids of the asynchronous insert and update, which stride
     * over counts read on the device: enough CTAs to fill every SM (the
     * update's 512-thread CTAs fit four to an SM). */
    int sms = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, v->device));
    if (sms < 1)
        sms = 1;
    v->sm_count = (unsigned)sms;
    v->update_grid = (unsigned)sms * 4;
    v->insert_grid = (unsigned)sms * 8;
    int rc = create_events(v);
    if (rc != TSDF_OK)
        return rc;
    rc = cuda_dev_alloc(v, (void **)&v->d_counters, CUDA_CTR_COUNT * sizeof(uint32_t));
    if (rc != TSDF_OK)
        return rc;
    /* Mapped: the asynchronous frame path's insert kernel writes the
     * frame's counts here itself (cuda_insert_frame), with no copy. */
    CUDA_TRY(cudaHostAlloc((void **)&v->h_counters, CUDA_CTR_COUNT * sizeof(uint32_t),
                           cudaHostAllocMapped));
    CUDA_TRY(cudaHostGetDevicePointer((void **)&v->dh_counters, v->h_counters, 0));
    CUDA_TRY(cudaMemsetAsync(v->d_counters, 0, CUDA_CTR_COUNT * sizeof(uint32_t), v->stream));
    uint32_t cap = round_pow2(v->p.initial_capacity_blocks);
    if (v->p.memory_cap_bytes && (uint64_t)cap * CUDA_SLOT_BYTES > v->p.memory_cap_bytes)
        return TSDF_ECAPACITY;
    rc = cuda_table_alloc(v, cap);
    if (rc != TSDF_OK)
        return rc;
    rc = cuda_scratch_reserve(v, CUDA_SET_FIRST_SLOTS);
    if (rc != TSDF_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(v->epoch, v->stream));
    CUDA_TRY(cudaStreamSynchronize(v->stream));
    return TSDF_OK;
}

static int cuda_create(const tsdf_volume_params *p, void **impl)
{
    *impl = NULL;
    if (!tsdf_cuda_probe(p->cuda_device))
        return TSDF_ENO_GPU;
    struct cuda_volume *v = (struct cuda_volume *)calloc(1, sizeof *v);
    if (v == NULL)
        return TSDF_ENOMEM;
    v->p = *p;
    v->device = p->cuda_device;
    /* The same expressions as the CPU backend, so both quantise alike. */
    v->quant = tsdf_quant_for(p->trunc_vox * p->voxel_size_m);
    v->geom_block_bytes = tsdf_layout_block_bytes(p->layout);
    int rc = cuda_create_impl(v);
    if (rc != TSDF_OK) {
        cuda_destroy(v);
        return rc;
    }
    *impl = v;
    return TSDF_OK;
}

/* Every entry point starts here: the calling thread may have another device
 * current, and a poisoned context fails fast. */
static int enter(struct cuda_volume *v)
{
    if (v->sticky_error)
        return TSDF_ECUDA;
    CUDA_TRY(cudaSetDevice(v->device));
    return TSDF_OK;
}

/* Waits for the volume's streams; a fault in an earlier kernel surfaces
 * here. Errors that poison the context make the volume unusable. */
int cuda_sync_all(struct cuda_volume *v)
{
    cudaError_t e1 = cudaStreamSynchronize(v->upload_stream);
    cudaError_t e2 = cudaStreamSynchronize(v->stream);
    cudaError_t err = e2 != cudaSuccess ? e2 : e1;
    if (err != cudaSuccess) {
        if (err != cudaErrorMemoryAllocation && err != cudaErrorInvalidValue)
            v->sticky_error = 1;
        return cuda_check(err, "cudaStreamSynchronize", __FILE__, __LINE__);
    }
    return TSDF_OK;
}

/* enter, then consume the pending frame (host mirrors, a deferred frame's
 * re-run): the start of every call but integrate. A failure of the pending
 * frame is returned here, so the next call reports it. */
static int enter_settled(struct cuda_volume *v)
{
    int rc = enter(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_settle(v);
}

/* enter_settled, then wait for the streams: the start of every call that
 * reads or replaces the volume's state from the host. */
static int enter_synced(struct cuda_volume *v)
{
    int rc = enter_settled(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_sync_all(v);
}

static int cuda_sync(void *impl)
{
    return enter_synced((struct cuda_volume *)impl);
}

static int cuda_reset(void *impl)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    /* As on the CPU backend: the blocks and the colour go, the counters
     * stay, the version moves on. */
    rc = cuda_store_clear(v);
    if (rc != TSDF_OK)
        return rc;
    v->version++;
    return TSDF_OK;
}

static int cuda_stats(void *impl, tsdf_volume_stats *out, int probe)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    memset(out, 0, sizeof *out);
    out->backend = TSDF_BACKEND_CUDA;
    out->blocks_allocated = v->blocks;
    out->capacity_slots = v->capacity;
    out->load_factor = v->capacity ? (double)v->blocks / (double)v->capacity : 0.0;
    if (probe && (rc = cuda_probe_stats(v, out)) != TSDF_OK)
        return rc;
    out->growth_events = v->growth_events;
    out->frames_integrated = v->frames_integrated;
    out->frames_rejected = v->frames_rejected;
    out->insert_failures = v->insert_failures;
    out->memory_bytes = cuda_content_bytes(v);
    out->memory_cap_bytes = v->p.memory_cap_bytes;
    out->version = v->version;
    out->has_color = v->d_rgb != NULL;
    out->layout = v->p.layout;
    out->pool_capacity_blocks = v->pool_cap;
    out->blocks_erased = v->erased_total;
    if (v->timeline_frames > 0) {
        const struct cuda_frame_events *fe =
            &v->timeline[(v->timeline_frames - 1) % CUDA_TIMELINE_RING];
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, fe->ev[CUDA_EV_UPLOAD_START], fe->ev[CUDA_EV_UPLOAD_END]) ==
            cudaSuccess)
            out->last_upload_ms = ms;
        if (cudaEventElapsedTime(&ms, fe->ev[CUDA_EV_ALLOC_START], fe->ev[CUDA_EV_ALLOC_END]) ==
            cudaSuccess)
            out->last_alloc_ms = ms;
        if (cudaEventElapsedTime(&ms, fe->ev[CUDA_EV_ALLOC_END], fe->ev[CUDA_EV_UPDATE_END]) ==
            cudaSuccess)
            out->last_update_ms = ms;
        (void)cudaGetLastError();
    }
    out->last_raycast_ms = v->last_raycast_ms;
    out->last_mesh_ms = v->last_mesh_ms;
    return TSDF_OK;
}

int cuda_timeline(struct cuda_volume *v, tsdf_frame_timeline *out, size_t max, size_t *n)
{
    *n = 0;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    uint64_t have =
        v->timeline_frames < CUDA_TIMELINE_RING ? v->timeline_frames : CUDA_TIMELINE_RING;
    if (have > max)
        have = max;
    for (uint64_t i = 0; i < have; i++) {
        uint64_t seq = v->timeline_frames - have + i;
        const struct cuda_frame_events *fe = &v->timeline[seq % CUDA_TIMELINE_RING];
        double t[CUDA_EV_COUNT];
        for (int e = 0; e < CUDA_EV_COUNT; e++) {
            float ms = 0.0f;
            CUDA_TRY(cudaEventElapsedTime(&ms, v->epoch, fe->ev[e]));
            t[e] = ms;
        }
        out[i].frame = fe->frame;
        out[i].upload_start_ms = t[CUDA_EV_UPLOAD_START];
        out[i].upload_end_ms = t[CUDA_EV_UPLOAD_END];
        out[i].alloc_start_ms = t[CUDA_EV_ALLOC_START];
        out[i].alloc_end_ms = t[CUDA_EV_ALLOC_END];
        out[i].update_start_ms = t[CUDA_EV_ALLOC_END];
        out[i].update_end_ms = t[CUDA_EV_UPDATE_END];
    }
    *n = (size_t)have;
    return TSDF_OK;
}

extern "C" int tsdf_cuda_timeline(void *impl, tsdf_frame_timeline *out, size_t max, size_t *n)
{
    return cuda_timeline((struct cuda_volume *)impl, out, max, n);
}

static int cuda_timeline_op(void *impl, tsdf_frame_timeline *out, size_t max, size_t *n)
{
    return cuda_timeline((struct cuda_volume *)impl, out, max, n);
}

/* ---- the operations ---------------------------------------------------------- */

static int cuda_integrate_op(void *impl, const tsdf_frame *f)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter(v);
    if (rc != TSDF_OK) {
        v->frames_rejected++;
        return rc;
    }
    rc = cuda_integrate(v, f);
    if (rc != TSDF_OK)
        v->frames_rejected++;
    return rc;
}

static int cuda_raycast_op(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_settled(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_raycast(v, p, out);
}

static int cuda_mesh_op(void *impl, const uint64_t *keys, size_t n, tsdf_mesh *out,
                        uint64_t **tri_keys, uint64_t **meshed, size_t *n_meshed)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_settled(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_mesh(v, keys, n, out, tri_keys, meshed, n_meshed);
}

/* ---- the block store ------------------------------------------------------- */

static int cuda_select_op(void *impl, const tsdf_block_select *q, uint64_t **keys, size_t *n)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    *keys = NULL;
    *n = 0;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_store_select(v, q, keys, n);
}

static int cuda_read_op(void *impl, const uint64_t *keys, size_t n, tsdf_block_set *out)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_store_read(v, keys, n, out);
}

static int cuda_write_op(void *impl, const tsdf_block_set *in, int replace, uint64_t version)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_store_write(v, in, replace, version);
}

static int cuda_erase_op(void *impl, const uint64_t *keys, size_t n, size_t *erased)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    *erased = 0;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_store_erase(v, keys, n, erased);
}

static int cuda_find_op(void *impl, const uint64_t *keys, size_t n, uint8_t *present)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_synced(v);
    if (rc != TSDF_OK)
        return rc;
    return cuda_store_find(v, keys, n, present);
}

/* ---- memory ------------------------------------------------------------------ */

/* A frame queued without a cap took the asynchronous path, which settles
 * against the cap it was queued under: settle it first, so that the new cap
 * applies from the next call on and the path switches cleanly. The cap is
 * changed even when the settled frame failed (its failure is returned). */
static int cuda_set_memory_cap(void *impl, uint64_t cap_bytes)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = v->p.memory_cap_bytes == 0 ? enter_settled(v) : TSDF_OK;
    v->p.memory_cap_bytes = cap_bytes;
    return rc;
}

static uint64_t cuda_memory_bytes(void *impl)
{
    return cuda_content_bytes((struct cuda_volume *)impl);
}

static uint64_t cuda_version(void *impl)
{
    return ((struct cuda_volume *)impl)->version;
}

extern "C" int tsdf_cuda_total_memory(int ordinal, uint64_t *total_bytes)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return TSDF_ENO_GPU;
    }
    if (ordinal < 0 || ordinal >= count)
        return TSDF_ENO_GPU;
    cudaDeviceProp prop;
    int rc = cuda_check(cudaGetDeviceProperties(&prop, ordinal), "device properties", __FILE__,
                        __LINE__);
    if (rc != TSDF_OK)
        return rc;
    *total_bytes = (uint64_t)prop.totalGlobalMem;
    return TSDF_OK;
}

extern "C" int tsdf_cuda_host_alloc(size_t bytes, void **out)
{
    if (cudaHostAlloc(out, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return TSDF_ENOMEM;
    }
    return TSDF_OK;
}

extern "C" void tsdf_cuda_host_free(void *p)
{
    if (cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

extern "C" int tsdf_cuda_host_register(void *p, size_t bytes)
{
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return TSDF_ENOMEM;
    }
    return TSDF_OK;
}

extern "C" void tsdf_cuda_host_unregister(void *p)
{
    if (cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError();
}

/* In the order of tsdf_backend_ops (C++ has no designated initialisers
 * for C structs before C++20). */
extern "C" const tsdf_backend_ops tsdf_cuda_ops = {
    "cuda",
    cuda_create,
    cuda_destroy,
    cuda_reset,
    cuda_integrate_op,
    cuda_sync,
    cuda_raycast_op,
    cuda_mesh_op,
    cuda_stats,
    cuda_set_memory_cap,
    cuda_memory_bytes,
    cuda_version,
    cuda_timeline_op,
    cuda_select_op,
    cuda_read_op,
    cuda_write_op,
    cuda_erase_op,
    cuda_find_op,
};

/* ---- test hooks ---------------------------------------------------------------- */

extern "C" int tsdf_cuda_test_insert_keys(void *impl, const uint64_t *keys, size_t n,
                                          size_t *inserted)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_settled(v);
    if (rc != TSDF_OK)
        return rc;
    if (n > 0x40000000u)
        return TSDF_EINVAL;
    uint64_t *d = NULL;
    rc = cuda_dev_alloc(v, (void **)&d, (n ? n : 1) * sizeof(uint64_t));
    if (rc != TSDF_OK)
        return rc;
    uint32_t added = 0;
    rc = cuda_check(
        cudaMemcpyAsync(d, keys, n * sizeof(uint64_t), cudaMemcpyHostToDevice, v->stream),
        "test keys", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_insert_keys(v, d, (uint32_t)n, &added);
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    cuda_dev_free(v, d, (n ? n : 1) * sizeof(uint64_t));
    if (inserted)
        *inserted = added;
    return rc;
}

extern "C" int tsdf_cuda_test_find_keys(void *impl, const uint64_t *keys, size_t n,
                                        int32_t *idx_out)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    int rc = enter_settled(v);
    if (rc != TSDF_OK)
        return rc;
    uint64_t *d = NULL;
    int32_t *di = NULL;
    rc = cuda_dev_alloc(v, (void **)&d, (n ? n : 1) * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&di, (n ? n : 1) * sizeof(int32_t));
    if (rc == TSDF_OK && n)
        rc = cuda_check(
            cudaMemcpyAsync(d, keys, n * sizeof(uint64_t), cudaMemcpyHostToDevice, v->stream),
            "find keys", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_lookup(v, d, (uint32_t)n, di);
    if (rc == TSDF_OK && n)
        rc = cuda_check(
            cudaMemcpyAsync(idx_out, di, n * sizeof(int32_t), cudaMemcpyDeviceToHost, v->stream),
            "find keys", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    cuda_dev_free(v, d, (n ? n : 1) * sizeof(uint64_t));
    cuda_dev_free(v, di, (n ? n : 1) * sizeof(int32_t));
    return rc;
}

extern "C" void tsdf_cuda_test_fail_alloc(void *impl, uint32_t n)
{
    ((struct cuda_volume *)impl)->test_fail_alloc = n;
}

extern "C" uint64_t tsdf_cuda_test_insert_errors(void *impl)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    uint32_t fail = 0;
    if (enter_settled(v) != TSDF_OK)
        return UINT64_MAX;
    if (cudaMemcpyAsync(&fail, v->d_counters + CUDA_CTR_INSERT_FAIL, sizeof fail,
                        cudaMemcpyDeviceToHost, v->stream) != cudaSuccess ||
        cudaStreamSynchronize(v->stream) != cudaSuccess)
        return UINT64_MAX;
    return fail;
}

extern "C" int tsdf_cuda_test_erase_keys(void *impl, const uint64_t *keys, size_t n, size_t *erased)
{
    struct cuda_volume *v = (struct cuda_volume *)impl;
    size_t gone = 0, m = 0;
    /* The erase kernel takes distinct keys, as the front end passes them. */
    uint64_t *u = (uint64_t *)malloc((n ? n : 1) * sizeof(uint64_t));
    if (u == NULL)
        return TSDF_ENOMEM;
    memcpy(u, keys, n * sizeof(uint64_t));
    tsdf_sort_u64(u, n);
    for (size_t i = 0; i < n; i++)
        if (m == 0 || u[i] != u[m - 1])
            u[m++] = u[i];
    int rc = enter_synced(v);
    if (rc == TSDF_OK)
        rc = cuda_store_erase(v, u, m, &gone);
    free(u);
    if (erased)
        *erased = gone;
    return rc;
}
