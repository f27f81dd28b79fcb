/*
 * cuda_store.cu - the block pool of the CUDA backend and the store
 * operations over it: growth in steps, insertion of new blocks (free slots
 * first), the colour channel, and select / read / write / erase / find /
 * clear for the front end (tsdf_backend_ops).
 *
 * The host keeps exact mirrors of the pool's bookkeeping (blocks, used,
 * free_count) between operations: kernels that insert take where their
 * blocks go by value (cuda_alloc_now) and the host takes the same count
 * afterwards (cuda_alloc_take), so host and device never disagree about
 * which slots are in use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_sort.h"

/* ---- sizes --------------------------------------------------------------- */

uint64_t cuda_block_bytes(const struct cuda_volume *v, int with_rgb)
{
    return tsdf_pool_block_bytes(v->p.layout, with_rgb);
}

static uint64_t bytes_for(const struct cuda_volume *v, uint64_t slots, uint64_t pool, int with_rgb)
{
    return slots * CUDA_SLOT_BYTES + pool * cuda_block_bytes(v, with_rgb);
}

uint64_t cuda_content_bytes(const struct cuda_volume *v)
{
    return bytes_for(v, v->capacity, v->pool_cap, v->d_rgb != NULL);
}

cuda_alloc cuda_alloc_now(const struct cuda_volume *v)
{
    cuda_alloc a;
    a.free_stack = v->d_free;
    a.free_count = v->free_count;
    a.used = v->used;
    return a;
}

void cuda_alloc_take(struct cuda_volume *v, uint32_t n)
{
    uint32_t from_free = n < v->free_count ? n : v->free_count;
    v->free_count -= from_free;
    v->used += n - from_free;
    v->blocks += n;
}

/* ---- kernels -------------------------------------------------------------- */

/* Inserts new key i of src into the slot cuda_alloc_slot(a, i) and writes
 * its empty voxels: thread 0 inserts, all threads of the CTA clear the
 * block's channels. */
static __device__ __forceinline__ void
insert_one(uint64_t *keys, int32_t *vals, uint32_t mask, const uint64_t *src, uint32_t i,
           const cuda_alloc &a, uint64_t *block_keys, uint64_t *block_versions, void *geom,
           uint32_t geom_words, uint8_t *rgb, uint64_t version, int32_t *block_of,
           const uint32_t *out_index, uint32_t *fail)
{
    uint64_t key = src[i];
    int32_t b = cuda_alloc_slot(a, i);
    if (threadIdx.x == 0) {
        int existing;
        if (cuda_dev_insert(keys, vals, mask, key, b, &existing) < 0 || existing)
            atomicAdd(fail, 1u);
        block_keys[b] = key;
        block_versions[b] = version;
        if (block_of)
            block_of[out_index ? out_index[i] : i] = b;
    }
    /* Both layouts are whole 32-bit words a block, and all-zero bits are
     * an unobserved voxel (sdf 0, weight 0) in each. */
    uint32_t *g = (uint32_t *)geom + (size_t)b * geom_words;
    for (uint32_t t = threadIdx.x; t < geom_words; t += blockDim.x)
        g[t] = 0u;
    if (rgb != NULL) {
        uint8_t *c = rgb + (size_t)b * TSDF_BLOCK_RGB_BYTES;
        for (uint32_t t = threadIdx.x; t < TSDF_BLOCK_RGB_BYTES; t += blockDim.x)
            c[t] = 0;
    }
}

/* Inserts n distinct new keys, one CTA per new block. */
static __global__ void k_insert_new(uint64_t *keys, int32_t *vals, uint32_t mask,
                                    const uint64_t *src, uint32_t n, cuda_alloc a,
                                    uint64_t *block_keys, uint64_t *block_versions, void *geom,
                                    uint32_t geom_words, uint8_t *rgb, uint64_t version,
                                    int32_t *block_of, const uint32_t *out_index, uint32_t *fail)
{
    uint32_t i = blockIdx.x;
    if (i >= n)
        return;
    insert_one(keys, vals, mask, src, i, a, block_keys, block_versions, geom, geom_words, rgb,
               version, block_of, out_index, fail);
}

/* The asynchronous form: the count is the frame's CUDA_CTR_MISSING, read on
 * the device, over a fixed grid. The frame is skipped (nothing written)
 * when its per-frame set overflowed or its new blocks exceed `room`; the
 * update kernel and the host (cuda_settle) evaluate the same condition on
 * the same counters, which the first thread writes to the host (mapped
 * pinned memory, read once the kernel is done): a copy on the stream
 * between collect and insert cost a few microseconds a frame. */
static __global__ void k_insert_frame(uint64_t *keys, int32_t *vals, uint32_t mask,
                                      const uint64_t *src, const uint32_t *counters,
                                      uint32_t *host_counters, uint32_t room, cuda_alloc a,
                                      uint64_t *block_keys, uint64_t *block_versions, void *geom,
                                      uint32_t geom_words, uint8_t *rgb, uint64_t version,
                                      int32_t *block_of, const uint32_t *out_index, uint32_t *fail)
{
    const uint32_t n = counters[CUDA_CTR_MISSING];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        host_counters[CUDA_CTR_UNIQUE] = counters[CUDA_CTR_UNIQUE];
        host_counters[CUDA_CTR_MISSING] = n;
        host_counters[CUDA_CTR_SET_OVERFLOW] = counters[CUDA_CTR_SET_OVERFLOW];
    }
    if (counters[CUDA_CTR_SET_OVERFLOW] != 0 || n > room)
        return;
    for (uint32_t i = blockIdx.x; i < n; i += gridDim.x)
        insert_one(keys, vals, mask, src, i, a, block_keys, block_versions, geom, geom_words, rgb,
                   version, block_of, out_index, fail);
}

/* The keys of the live pool slots [0, used) that q selects. */
static __global__ void k_select(const uint64_t *block_keys, const uint64_t *block_versions,
                                uint32_t used, tsdf_block_select q, int all, float block_m,
                                uint64_t *out, uint32_t *count)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= used)
        return;
    uint64_t key = block_keys[i];
    if (key == TSDF_KEY_EMPTY)
        return;
    if (!all) {
        int32_t b[3];
        tsdf_block_key_unpack(key, &b[0], &b[1], &b[2]);
        if (!tsdf_block_selected(&q, b, block_versions[i], block_m))
            return;
    }
    out[atomicAdd(count, 1u)] = key;
}

/* Block i of a staged set <-> pool slot idx[i]: copy_out 1 gathers the
 * pool's channels into the staging (read), 0 scatters the staging into the
 * pool (write) and stamps the version. One CTA per block. */
static __global__ void k_copy_blocks(const int32_t *idx, uint32_t n, int copy_out,
                                     uint64_t *block_versions, uint32_t *geom, uint32_t geom_words,
                                     uint8_t *rgb, uint64_t *st_versions, uint32_t *st_geom,
                                     uint8_t *st_rgb, uint64_t version)
{
    uint32_t i = blockIdx.x;
    if (i >= n)
        return;
    const int32_t b = idx[i];
    uint32_t *pg = geom + (size_t)b * geom_words, *sg = st_geom + (size_t)i * geom_words;
    uint8_t *pc = rgb != NULL ? rgb + (size_t)b * TSDF_BLOCK_RGB_BYTES : NULL;
    uint8_t *sc = st_rgb != NULL ? st_rgb + (size_t)i * TSDF_BLOCK_RGB_BYTES : NULL;
    if (copy_out) {
        if (threadIdx.x == 0)
            st_versions[i] = block_versions[b];
        for (uint32_t t = threadIdx.x; t < geom_words; t += blockDim.x)
            sg[t] = pg[t];
        if (pc != NULL && sc != NULL)
            for (uint32_t t = threadIdx.x; t < TSDF_BLOCK_RGB_BYTES; t += blockDim.x)
                sc[t] = pc[t];
    } else {
        if (threadIdx.x == 0)
            block_versions[b] = version;
        for (uint32_t t = threadIdx.x; t < geom_words; t += blockDim.x)
            pg[t] = sg[t];
        if (pc != NULL)
            for (uint32_t t = threadIdx.x; t < TSDF_BLOCK_RGB_BYTES; t += blockDim.x)
                pc[t] = sc != NULL ? sc[t] : 0;
    }
}

/* ---- the pool ---------------------------------------------------------------- */

/* Copies `n` elements of `elem` bytes from old to new on the stream. */
static int copy_dev(struct cuda_volume *v, void *dst, const void *src, size_t bytes, const char *w)
{
    if (bytes == 0 || src == NULL)
        return TSDF_OK;
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, v->stream), w,
                      __FILE__, __LINE__);
}

/* Replaces the pool's arrays by ones of cap slots (cap >= used), keeping
 * their content, with a colour channel when with_rgb (new: zeros). On
 * failure the pool is as it was. */
static int pool_resize(struct cuda_volume *v, uint32_t cap, int with_rgb)
{
    const size_t gb = v->geom_block_bytes;
    uint64_t *keys = NULL, *vers = NULL;
    uint32_t *fr = NULL;
    void *geom = NULL;
    uint8_t *rgb = NULL;
    int rc = cuda_dev_alloc(v, (void **)&keys, (size_t)cap * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&vers, (size_t)cap * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&fr, (size_t)cap * sizeof(uint32_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, &geom, (size_t)cap * gb);
    if (rc == TSDF_OK && with_rgb)
        rc = cuda_dev_alloc(v, (void **)&rgb, (size_t)cap * TSDF_BLOCK_RGB_BYTES);
    if (rc == TSDF_OK && with_rgb && v->d_rgb == NULL)
        rc = cuda_check(cudaMemsetAsync(rgb, 0, (size_t)cap * TSDF_BLOCK_RGB_BYTES, v->stream),
                        "clear colour", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = copy_dev(v, keys, v->d_block_keys, (size_t)v->used * sizeof(uint64_t), "copy keys");
    if (rc == TSDF_OK)
        rc = copy_dev(v, vers, v->d_block_versions, (size_t)v->used * sizeof(uint64_t),
                      "copy versions");
    if (rc == TSDF_OK)
        rc = copy_dev(v, fr, v->d_free, (size_t)v->free_count * sizeof(uint32_t), "copy free");
    if (rc == TSDF_OK)
        rc = copy_dev(v, geom, v->d_geom, (size_t)v->used * gb, "copy geometry");
    if (rc == TSDF_OK && with_rgb)
        rc = copy_dev(v, rgb, v->d_rgb, (size_t)v->used * TSDF_BLOCK_RGB_BYTES, "copy colour");
    /* The old pool is freed below, once the copies are done. */
    if (rc == TSDF_OK)
        rc = cuda_check(cudaStreamSynchronize(v->stream), "pool growth", __FILE__, __LINE__);
    if (rc != TSDF_OK) {
        cuda_dev_free(v, keys, (size_t)cap * sizeof(uint64_t));
        cuda_dev_free(v, vers, (size_t)cap * sizeof(uint64_t));
        cuda_dev_free(v, fr, (size_t)cap * sizeof(uint32_t));
        cuda_dev_free(v, geom, (size_t)cap * gb);
        cuda_dev_free(v, rgb, (size_t)cap * TSDF_BLOCK_RGB_BYTES);
        return rc;
    }
    const size_t old = v->pool_cap;
    cuda_dev_free(v, v->d_block_keys, old * sizeof(uint64_t));
    cuda_dev_free(v, v->d_block_versions, old * sizeof(uint64_t));
    cuda_dev_free(v, v->d_free, old * sizeof(uint32_t));
    cuda_dev_free(v, v->d_geom, old * gb);
    cuda_dev_free(v, v->d_rgb, old * TSDF_BLOCK_RGB_BYTES);
    v->d_block_keys = keys;
    v->d_block_versions = vers;
    v->d_free = fr;
    v->d_geom = geom;
    v->d_rgb = rgb;
    v->pool_cap = cap;
    return TSDF_OK;
}

int cuda_enable_rgb(struct cuda_volume *v)
{
    if (v->d_rgb != NULL)
        return TSDF_OK;
    if (v->pool_cap == 0) {
        /* No pool yet: the first growth allocates the channel with it. */
        return TSDF_OK;
    }
    return pool_resize(v, v->pool_cap, 1);
}

int cuda_reserve(struct cuda_volume *v, uint64_t more, int with_rgb, uint64_t headroom)
{
    const int rgb = with_rgb || v->d_rgb != NULL;
    const uint64_t blocks = (uint64_t)v->blocks + more;
    const uint64_t fresh = more > v->free_count ? more - v->free_count : 0;
    const uint64_t need = (uint64_t)v->used + fresh;
    const uint64_t cap_bytes = v->p.memory_cap_bytes;
    /* Tombstones take slots until a rehash drops them: count them while
     * deciding whether to rebuild, but size the new table for the keys. */
    const int rebuild =
        (double)(blocks + v->tombstones) > (double)v->p.max_load_factor * (double)v->capacity;
    const uint64_t slots = rebuild ? cuda_table_capacity_for(v, blocks) : v->capacity;
    uint64_t target = need > v->pool_cap ? need : v->pool_cap;
    int rc;

    if (slots > (1ull << 31) || need > 0x7fffffffull || blocks > 0x7fffffffull)
        return TSDF_ECAPACITY;
    if (cap_bytes != 0 &&
        (slots != v->capacity || target != v->pool_cap || rgb != (v->d_rgb != NULL)) &&
        bytes_for(v, slots, target, rgb) > cap_bytes)
        return TSDF_ECAPACITY;
    if (rebuild && (rc = cuda_table_rehash(v, (uint32_t)slots)) != TSDF_OK)
        return rc;
    if (need <= v->pool_cap && !(rgb && v->d_rgb == NULL))
        return TSDF_OK;
    if (need > v->pool_cap) {
        /* A sixteenth more, or the caller's headroom: growth stays rare
         * and the spare capacity small. The first pool is sized to its
         * first need: a fixed first step made a map of a few blocks hold
         * megabytes it never used, which a daemon-wide budget then could
         * not give to other maps. */
        uint64_t spare = v->pool_cap / 16;
        if (spare < headroom)
            spare = headroom;
        target = need + spare;
        if (target > 0x7fffffffull)
            target = need;
        /* Near the cap, exactly what is needed (which fits: checked
         * above), as on the CPU backend: spare slots up to the cap would
         * hold memory that other maps under the same budget could not get. */
        if (cap_bytes != 0 && bytes_for(v, slots, target, rgb) > cap_bytes)
            target = need;
    }
    return pool_resize(v, (uint32_t)target, rgb);
}

int cuda_insert_new(struct cuda_volume *v, const uint64_t *d_src, uint32_t n, uint64_t version,
                    int32_t *d_block_of_out, const uint32_t *d_out_index)
{
    if (n == 0)
        return TSDF_OK;
    k_insert_new<<<n, 128, 0, v->stream>>>(
        v->d_keys, v->d_vals, v->capacity - 1, d_src, n, cuda_alloc_now(v), v->d_block_keys,
        v->d_block_versions, v->d_geom, (uint32_t)(v->geom_block_bytes / 4), v->d_rgb, version,
        d_block_of_out, d_out_index, v->d_counters + CUDA_CTR_INSERT_FAIL);
    CUDA_TRY_LAUNCH();
    cuda_alloc_take(v, n);
    return TSDF_OK;
}

int cuda_insert_frame(struct cuda_volume *v, uint32_t room)
{
    k_insert_frame<<<v->insert_grid, 128, 0, v->stream>>>(
        v->d_keys, v->d_vals, v->capacity - 1, v->d_missing, v->d_counters, v->dh_counters, room,
        cuda_alloc_now(v), v->d_block_keys, v->d_block_versions, v->d_geom,
        (uint32_t)(v->geom_block_bytes / 4), v->d_rgb, v->version, v->d_frame_blocks,
        v->d_missing_src, v->d_counters + CUDA_CTR_INSERT_FAIL);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

int cuda_store_clear(struct cuda_volume *v)
{
    uint32_t cap = 1;
    while (cap < v->p.initial_capacity_blocks && cap < (1u << 31))
        cap <<= 1;
    if (cap != v->capacity) {
        cuda_table_free(v);
        int rc = cuda_table_alloc(v, cap);
        if (rc != TSDF_OK)
            return rc;
    } else {
        CUDA_TRY(cudaMemsetAsync(v->d_keys, 0xff, (size_t)cap * sizeof(uint64_t), v->stream));
        v->tombstones = 0;
    }
    /* The pool's slots start over (its memory is kept for reuse), and the
     * colour channel goes: the content, colour included, is gone. */
    cuda_dev_free(v, v->d_rgb, (size_t)v->pool_cap * TSDF_BLOCK_RGB_BYTES);
    v->d_rgb = NULL;
    v->blocks = 0;
    v->used = 0;
    v->free_count = 0;
    return cuda_sync_all(v);
}

int cuda_upload_keys(struct cuda_volume *v, const uint64_t *keys, size_t n, uint64_t **d_out)
{
    *d_out = NULL;
    int rc = cuda_dev_alloc(v, (void **)d_out, (n ? n : 1) * sizeof(uint64_t));
    if (rc != TSDF_OK)
        return rc;
    if (n != 0)
        rc = cuda_check(
            cudaMemcpyAsync(*d_out, keys, n * sizeof(uint64_t), cudaMemcpyHostToDevice, v->stream),
            "upload keys", __FILE__, __LINE__);
    if (rc != TSDF_OK) {
        cuda_dev_free(v, *d_out, (n ? n : 1) * sizeof(uint64_t));
        *d_out = NULL;
    }
    return rc;
}

/* ---- the store operations ----------------------------------------------------- */

int cuda_store_select(struct cuda_volume *v, const tsdf_block_select *q, uint64_t **keys, size_t *n)
{
    uint32_t *d_ctr = v->d_counters + CUDA_CTR_AUX0;
    uint64_t *d_out = NULL;
    tsdf_block_select none;
    int rc;

    *keys = NULL;
    *n = 0;
    if (v->blocks == 0)
        return TSDF_OK;
    memset(&none, 0, sizeof none);
    /* A kept buffer: a cudaMalloc and a (synchronising) cudaFree per call
     * were most of an incremental mesh's wall time. */
    rc = cuda_kept_reserve(v, CUDA_KEPT_SELECT, (size_t)v->blocks * sizeof(uint64_t),
                           (void **)&d_out);
    if (rc != TSDF_OK)
        return rc;
    uint64_t *h = (uint64_t *)malloc((size_t)v->blocks * sizeof(uint64_t));
    if (h == NULL) {
        rc = TSDF_ENOMEM;
        goto out;
    }
    rc = cuda_check(cudaMemsetAsync(d_ctr, 0, sizeof(uint32_t), v->stream), "select", __FILE__,
                    __LINE__);
    if (rc == TSDF_OK) {
        k_select<<<cuda_grid(v->used, 256), 256, 0, v->stream>>>(
            v->d_block_keys, v->d_block_versions, v->used, q ? *q : none, q == NULL,
            (float)TSDF_BLOCK_DIM * v->p.voxel_size_m, d_out, d_ctr);
        rc = cuda_check(cudaGetLastError(), "k_select", __FILE__, __LINE__);
    }
    if (rc == TSDF_OK)
        rc = cuda_check(cudaMemcpyAsync(v->h_counters + CUDA_CTR_AUX0, d_ctr, sizeof(uint32_t),
                                        cudaMemcpyDeviceToHost, v->stream),
                        "select count", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    if (rc == TSDF_OK && v->h_counters[CUDA_CTR_AUX0] != 0) {
        rc = cuda_check(cudaMemcpyAsync(h, d_out,
                                        (size_t)v->h_counters[CUDA_CTR_AUX0] * sizeof(uint64_t),
                                        cudaMemcpyDeviceToHost, v->stream),
                        "select keys", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_sync_all(v);
    }
    if (rc == TSDF_OK) {
        size_t count = v->h_counters[CUDA_CTR_AUX0];
        tsdf_sort_u64(h, count);
        if (count != 0) {
            *keys = h;
            *n = count;
            h = NULL;
        }
    }
out:
    free(h);
    return rc;
}

/* The pool slots of keys[0 .. n) into *d_idx (device) and, when h_idx is
 * not NULL, on the host too. */
static int lookup_host_keys(struct cuda_volume *v, const uint64_t *keys, size_t n, int32_t **d_idx,
                            int32_t *h_idx)
{
    uint64_t *d_keys = NULL;
    int rc = cuda_upload_keys(v, keys, n, &d_keys);
    if (rc != TSDF_OK)
        return rc;
    rc = cuda_dev_alloc(v, (void **)d_idx, (n ? n : 1) * sizeof(int32_t));
    if (rc == TSDF_OK)
        rc = cuda_lookup(v, d_keys, (uint32_t)n, *d_idx);
    if (rc == TSDF_OK && h_idx != NULL && n != 0)
        rc = cuda_check(
            cudaMemcpyAsync(h_idx, *d_idx, n * sizeof(int32_t), cudaMemcpyDeviceToHost, v->stream),
            "lookup", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    cuda_dev_free(v, d_keys, (n ? n : 1) * sizeof(uint64_t));
    if (rc != TSDF_OK) {
        cuda_dev_free(v, *d_idx, (n ? n : 1) * sizeof(int32_t));
        *d_idx = NULL;
    }
    return rc;
}

int cuda_store_find(struct cuda_volume *v, const uint64_t *keys, size_t n, uint8_t *present)
{
    int32_t *d_idx = NULL;
    int32_t *h = (int32_t *)malloc((n ? n : 1) * sizeof(int32_t));
    if (h == NULL)
        return TSDF_ENOMEM;
    int rc = lookup_host_keys(v, keys, n, &d_idx, h);
    if (rc == TSDF_OK)
        for (size_t i = 0; i < n; i++)
            present[i] = h[i] >= 0;
    cuda_dev_free(v, d_idx, (n ? n : 1) * sizeof(int32_t));
    free(h);
    return rc;
}

/* Device staging of a block set's versions and channels. */
struct staged_set {
    uint64_t *versions;
    uint32_t *geom;
    uint8_t *rgb;
    size_t n;
};

static void staged_free(struct cuda_volume *v, struct staged_set *s)
{
    cuda_dev_free(v, s->versions, (s->n ? s->n : 1) * sizeof(uint64_t));
    cuda_dev_free(v, s->geom, (s->n ? s->n : 1) * v->geom_block_bytes);
    cuda_dev_free(v, s->rgb, (s->n ? s->n : 1) * TSDF_BLOCK_RGB_BYTES);
    memset(s, 0, sizeof *s);
}

static int staged_alloc(struct cuda_volume *v, struct staged_set *s, size_t n, int with_rgb)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    int rc = cuda_dev_alloc(v, (void **)&s->versions, (n ? n : 1) * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&s->geom, (n ? n : 1) * v->geom_block_bytes);
    if (rc == TSDF_OK && with_rgb)
        rc = cuda_dev_alloc(v, (void **)&s->rgb, (n ? n : 1) * TSDF_BLOCK_RGB_BYTES);
    if (rc != TSDF_OK)
        staged_free(v, s);
    return rc;
}

int cuda_store_read(struct cuda_volume *v, const uint64_t *keys, size_t n, tsdf_block_set *out)
{
    const int with_rgb = v->d_rgb != NULL;
    int32_t *d_idx = NULL;
    int32_t *h_idx = (int32_t *)malloc((n ? n : 1) * sizeof(int32_t));
    struct staged_set st;
    tsdf_block_set set;
    int rc;

    tsdf_block_set_init(&set);
    memset(&st, 0, sizeof st);
    if (h_idx == NULL)
        return TSDF_ENOMEM;
    rc = tsdf_block_set_alloc(&set, n, v->p.layout, v->quant.unit_m, with_rgb);
    if (rc == TSDF_OK)
        rc = lookup_host_keys(v, keys, n, &d_idx, h_idx);
    for (size_t i = 0; rc == TSDF_OK && i < n; i++)
        if (h_idx[i] < 0)
            rc = TSDF_EINTERNAL;
    if (rc == TSDF_OK)
        rc = staged_alloc(v, &st, n, with_rgb);
    if (rc == TSDF_OK && n != 0) {
        k_copy_blocks<<<(unsigned)n, 128, 0, v->stream>>>(
            d_idx, (uint32_t)n, 1, v->d_block_versions, (uint32_t *)v->d_geom,
            (uint32_t)(v->geom_block_bytes / 4), v->d_rgb, st.versions, st.geom, st.rgb, 0);
        rc = cuda_check(cudaGetLastError(), "k_copy_blocks", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_check(cudaMemcpyAsync(set.versions, st.versions, n * sizeof(uint64_t),
                                            cudaMemcpyDeviceToHost, v->stream),
                            "read versions", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_check(cudaMemcpyAsync(set.geom, st.geom, n * v->geom_block_bytes,
                                            cudaMemcpyDeviceToHost, v->stream),
                            "read geometry", __FILE__, __LINE__);
        if (rc == TSDF_OK && with_rgb)
            rc = cuda_check(cudaMemcpyAsync(set.rgb, st.rgb, n * TSDF_BLOCK_RGB_BYTES,
                                            cudaMemcpyDeviceToHost, v->stream),
                            "read colour", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_sync_all(v);
    }
    if (rc == TSDF_OK) {
        for (size_t i = 0; i < n; i++)
            tsdf_block_key_unpack(keys[i], &set.coords[3 * i], &set.coords[3 * i + 1],
                                  &set.coords[3 * i + 2]);
        set.version = v->version;
        tsdf_block_set_fini(out);
        *out = set;
        tsdf_block_set_init(&set);
    }
    staged_free(v, &st);
    cuda_dev_free(v, d_idx, (n ? n : 1) * sizeof(int32_t));
    free(h_idx);
    tsdf_block_set_fini(&set);
    return rc;
}

int cuda_store_write(struct cuda_volume *v, const tsdf_block_set *in, int replace, uint64_t version)
{
    const size_t n = in->count;
    const int with_rgb = in->rgb != NULL;
    uint64_t *keys = (uint64_t *)malloc((n ? n : 1) * sizeof(uint64_t));
    int32_t *h_idx = (int32_t *)malloc((n ? n : 1) * sizeof(int32_t));
    uint32_t *miss_at = (uint32_t *)malloc((n ? n : 1) * sizeof(uint32_t));
    uint64_t *miss_keys = (uint64_t *)malloc((n ? n : 1) * sizeof(uint64_t));
    uint64_t *d_miss = NULL;
    uint32_t *d_miss_at = NULL;
    int32_t *d_idx = NULL;
    struct staged_set st;
    size_t missing = 0;
    int rc = TSDF_OK;

    memset(&st, 0, sizeof st);
    if (keys == NULL || h_idx == NULL || miss_at == NULL || miss_keys == NULL) {
        rc = TSDF_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = tsdf_block_key(in->coords[3 * i], in->coords[3 * i + 1], in->coords[3 * i + 2]);
    if (replace) {
        /* Check that the blocks fit before dropping anything: a table of
         * the initial size grown for them, and a pool of exactly them. */
        uint64_t slots = 1;
        while (slots < v->p.initial_capacity_blocks)
            slots <<= 1;
        while ((double)n > (double)v->p.max_load_factor * (double)slots)
            slots *= 2;
        if (v->p.memory_cap_bytes != 0 &&
            bytes_for(v, slots, n, with_rgb) > v->p.memory_cap_bytes) {
            rc = TSDF_ECAPACITY;
            goto out;
        }
        const uint64_t growth_before = v->growth_events;
        rc = cuda_store_clear(v);
        if (rc == TSDF_OK)
            rc = cuda_reserve(v, n, with_rgb, 0);
        /* Growth while building the imported table is an import, not a
         * growth of the volume's table under load. */
        v->growth_events = growth_before;
        if (rc != TSDF_OK)
            goto out;
        for (size_t i = 0; i < n; i++)
            h_idx[i] = -1;
    } else {
        rc = lookup_host_keys(v, keys, n, &d_idx, h_idx);
        cuda_dev_free(v, d_idx, (n ? n : 1) * sizeof(int32_t));
        d_idx = NULL;
        if (rc != TSDF_OK)
            goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (h_idx[i] < 0) {
            miss_at[missing] = (uint32_t)i;
            miss_keys[missing++] = keys[i];
        }
    }
    if (!replace) {
        rc = cuda_reserve(v, missing, with_rgb, 0);
        if (rc == TSDF_ECAPACITY)
            v->insert_failures += missing;
        if (rc != TSDF_OK)
            goto out;
    }
    if (with_rgb && (rc = cuda_enable_rgb(v)) != TSDF_OK)
        goto out;
    /* The pool slot of every block: present ones as found, missing ones as
     * inserted (k_insert_new writes them through miss_at). */
    rc = cuda_dev_alloc(v, (void **)&d_idx, (n ? n : 1) * sizeof(int32_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&d_miss_at, (missing ? missing : 1) * sizeof(uint32_t));
    if (rc == TSDF_OK && n != 0)
        rc = cuda_check(
            cudaMemcpyAsync(d_idx, h_idx, n * sizeof(int32_t), cudaMemcpyHostToDevice, v->stream),
            "write slots", __FILE__, __LINE__);
    if (rc == TSDF_OK && missing != 0)
        rc = cuda_check(cudaMemcpyAsync(d_miss_at, miss_at, missing * sizeof(uint32_t),
                                        cudaMemcpyHostToDevice, v->stream),
                        "write missing", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_upload_keys(v, miss_keys, missing, &d_miss);
    if (rc == TSDF_OK)
        rc = cuda_insert_new(v, d_miss, (uint32_t)missing, version, d_idx, d_miss_at);
    if (rc == TSDF_OK)
        rc = staged_alloc(v, &st, n, with_rgb);
    if (rc == TSDF_OK && n != 0) {
        rc = cuda_check(cudaMemcpyAsync(st.geom, in->geom, n * v->geom_block_bytes,
                                        cudaMemcpyHostToDevice, v->stream),
                        "write geometry", __FILE__, __LINE__);
        if (rc == TSDF_OK && with_rgb)
            rc = cuda_check(cudaMemcpyAsync(st.rgb, in->rgb, n * TSDF_BLOCK_RGB_BYTES,
                                            cudaMemcpyHostToDevice, v->stream),
                            "write colour", __FILE__, __LINE__);
        if (rc == TSDF_OK) {
            k_copy_blocks<<<(unsigned)n, 128, 0, v->stream>>>(
                d_idx, (uint32_t)n, 0, v->d_block_versions, (uint32_t *)v->d_geom,
                (uint32_t)(v->geom_block_bytes / 4), v->d_rgb, st.versions, st.geom, st.rgb,
                version);
            rc = cuda_check(cudaGetLastError(), "k_copy_blocks", __FILE__, __LINE__);
        }
    }
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    if (rc == TSDF_OK)
        v->version = version;
out:
    staged_free(v, &st);
    cuda_dev_free(v, d_idx, (n ? n : 1) * sizeof(int32_t));
    cuda_dev_free(v, d_miss_at, (missing ? missing : 1) * sizeof(uint32_t));
    cuda_dev_free(v, d_miss, (missing ? missing : 1) * sizeof(uint64_t));
    free(keys);
    free(h_idx);
    free(miss_at);
    free(miss_keys);
    return rc;
}

int cuda_store_erase(struct cuda_volume *v, const uint64_t *keys, size_t n, size_t *erased)
{
    uint64_t *d_keys = NULL;
    uint32_t gone = 0;
    *erased = 0;
    if (n == 0)
        return TSDF_OK;
    if (n > 0x7fffffffu)
        return TSDF_EINVAL;
    int rc = cuda_upload_keys(v, keys, n, &d_keys);
    if (rc != TSDF_OK)
        return rc;
    rc = cuda_erase_keys(v, d_keys, (uint32_t)n, &gone);
    cuda_dev_free(v, d_keys, n * sizeof(uint64_t));
    if (rc == TSDF_OK && gone != 0)
        v->version++;
    *erased = gone;
    return rc;
}
