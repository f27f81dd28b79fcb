/*
 * cuda_hash.cu - the device hash table and block pool of the CUDA backend:
 * slot initialisation, compare-and-swap insertion, growth by rehashing on
 * the device, lookups and the probe-length histogram.
 *
 * Probing is linear from tsdf_key_hash(key) & mask. An insertion probes at
 * most `capacity` slots, i.e. the whole table; it can only fail if the table
 * is full, which growth rules out: cuda_reserve before every synchronous
 * insertion, and for the asynchronous frame insert (k_insert_frame) a room
 * the host computed so that the table stays at most max(0.9, max_load)
 * (and never fully) occupied and the pool is not exceeded (see
 * cuda_integrate.cu). A failure is still counted in CUDA_CTR_INSERT_FAIL
 * and read back, so a broken invariant is reported instead of silently
 * losing a block.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- kernels ------------------------------------------------------------ */

static __global__ void k_fill_u64(uint64_t *p, uint64_t n, uint64_t value)
{
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = value;
}

/* CAS insertion of (key, val). Returns the slot, or -1 when every slot was
 * probed (the table is full). *existing is set when the key was already
 * there (its slot is returned and val is not written). */
static __device__ __forceinline__ int64_t dev_insert(uint64_t *keys, int32_t *vals, uint32_t mask,
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

/* Moves every resident (key, block) of the old table into the new one. */
static __global__ void k_rehash(const uint64_t *old_keys, const int32_t *old_vals, uint32_t old_cap,
                                uint64_t *keys, int32_t *vals, uint32_t mask, uint32_t *fail)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= old_cap)
        return;
    uint64_t key = old_keys[i];
    if (key == TSDF_KEY_EMPTY)
        return;
    int existing;
    if (dev_insert(keys, vals, mask, key, old_vals[i], &existing) < 0)
        atomicAdd(fail, 1u);
}

/* Inserts new key i of src as block base + i and writes its empty voxels:
 * thread 0 inserts, all threads of the CTA initialise the 512 voxels. */
static __device__ __forceinline__ void
insert_one(uint64_t *keys, int32_t *vals, uint32_t mask, const uint64_t *src, uint32_t i,
           uint32_t base, uint64_t *block_keys, uint64_t *block_versions, tsdf_voxel *voxels,
           uint64_t version, int32_t *block_of, const uint32_t *out_index, uint32_t *fail)
{
    uint64_t key = src[i];
    int32_t b = (int32_t)(base + i);
    if (threadIdx.x == 0) {
        int existing;
        if (dev_insert(keys, vals, mask, key, b, &existing) < 0 || existing)
            atomicAdd(fail, 1u);
        block_keys[b] = key;
        block_versions[b] = version;
        if (block_of)
            block_of[out_index ? out_index[i] : i] = b;
    }
    tsdf_voxel empty;
    empty.sdf_m = 0.0f;
    empty.weight = 0.0f;
    empty.rgb[0] = empty.rgb[1] = empty.rgb[2] = 0;
    empty.pad = 0;
    for (uint32_t t = threadIdx.x; t < TSDF_BLOCK_VOXELS; t += blockDim.x)
        voxels[(size_t)b * TSDF_BLOCK_VOXELS + t] = empty;
}

/* Inserts n distinct new keys as blocks base .. base + n - 1, one CTA per
 * new block. */
static __global__ void k_insert_new(uint64_t *keys, int32_t *vals, uint32_t mask,
                                    const uint64_t *src, uint32_t n, uint32_t base,
                                    uint64_t *block_keys, uint64_t *block_versions,
                                    tsdf_voxel *voxels, uint64_t version, int32_t *block_of,
                                    const uint32_t *out_index, uint32_t *fail)
{
    uint32_t i = blockIdx.x;
    if (i >= n)
        return;
    insert_one(keys, vals, mask, src, i, base, block_keys, block_versions, voxels, version,
               block_of, out_index, fail);
}

/* The asynchronous form: the count is the frame's CUDA_CTR_MISSING, read on
 * the device, over a fixed grid. The frame is skipped (nothing written)
 * when its per-frame set overflowed or its new blocks exceed `room`; the
 * update kernel and the host (cuda_settle) evaluate the same condition on
 * the same counters. */
static __global__ void k_insert_frame(uint64_t *keys, int32_t *vals, uint32_t mask,
                                      const uint64_t *src, const uint32_t *counters, uint32_t room,
                                      uint32_t base, uint64_t *block_keys, uint64_t *block_versions,
                                      tsdf_voxel *voxels, uint64_t version, int32_t *block_of,
                                      const uint32_t *out_index, uint32_t *fail)
{
    const uint32_t n = counters[CUDA_CTR_MISSING];
    if (counters[CUDA_CTR_SET_OVERFLOW] != 0 || n > room)
        return;
    for (uint32_t i = blockIdx.x; i < n; i += gridDim.x)
        insert_one(keys, vals, mask, src, i, base, block_keys, block_versions, voxels, version,
                   block_of, out_index, fail);
}

static __global__ void k_lookup(cuda_table_view t, const uint64_t *keys, uint32_t n, int32_t *out)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = cuda_table_find(t, keys[i]);
}

/* Probe-length histogram: per-CTA bins in shared memory, then one atomic
 * per bin and CTA into the global counters (16 bins, max, sum). */
static __global__ void k_probe_hist(const uint64_t *keys, uint32_t cap,
                                    unsigned long long *hist /* 16 bins + sum */,
                                    uint32_t *max_disp)
{
    __shared__ unsigned int bins[TSDF_PROBE_HIST_BINS];
    __shared__ unsigned long long sum;
    __shared__ unsigned int mx;
    if (threadIdx.x < TSDF_PROBE_HIST_BINS)
        bins[threadIdx.x] = 0;
    if (threadIdx.x == 0) {
        sum = 0;
        mx = 0;
    }
    __syncthreads();
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cap) {
        uint64_t key = keys[i];
        if (key != TSDF_KEY_EMPTY) {
            uint32_t home = (uint32_t)tsdf_key_hash(key) & (cap - 1);
            uint32_t disp = (i - home) & (cap - 1);
            atomicAdd(&bins[disp < TSDF_PROBE_HIST_BINS - 1 ? disp : TSDF_PROBE_HIST_BINS - 1], 1u);
            atomicAdd(&sum, (unsigned long long)disp);
            atomicMax(&mx, disp);
        }
    }
    __syncthreads();
    if (threadIdx.x < TSDF_PROBE_HIST_BINS && bins[threadIdx.x])
        atomicAdd(&hist[threadIdx.x], (unsigned long long)bins[threadIdx.x]);
    if (threadIdx.x == 0) {
        if (sum)
            atomicAdd(&hist[TSDF_PROBE_HIST_BINS], sum);
        atomicMax(max_disp, mx);
    }
}

/* ---- host side ---------------------------------------------------------- */

static int fill_u64(struct cuda_volume *v, uint64_t *p, uint64_t n, uint64_t value)
{
    if (n == 0)
        return TSDF_OK;
    k_fill_u64<<<cuda_grid(n, 256), 256, 0, v->stream>>>(p, n, value);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

int cuda_table_alloc(struct cuda_volume *v, uint32_t capacity)
{
    uint64_t *keys = NULL;
    int32_t *vals = NULL;
    int rc = cuda_dev_alloc(v, (void **)&keys, (size_t)capacity * sizeof(uint64_t));
    if (rc != TSDF_OK)
        return rc;
    rc = cuda_dev_alloc(v, (void **)&vals, (size_t)capacity * sizeof(int32_t));
    if (rc != TSDF_OK) {
        cuda_dev_free(v, keys, (size_t)capacity * sizeof(uint64_t));
        return rc;
    }
    rc = fill_u64(v, keys, capacity, TSDF_KEY_EMPTY);
    if (rc != TSDF_OK) {
        cuda_dev_free(v, keys, (size_t)capacity * sizeof(uint64_t));
        cuda_dev_free(v, vals, (size_t)capacity * sizeof(int32_t));
        return rc;
    }
    v->d_keys = keys;
    v->d_vals = vals;
    v->capacity = capacity;
    return TSDF_OK;
}

/* Bytes that count against the memory cap: the table and the blocks in use
 * (the pool is allocated in steps, but only the blocks needed count, as on
 * the CPU backend; per-frame scratch buffers are not volume content). */
static uint64_t capped_bytes(uint64_t slots, uint64_t blocks)
{
    return slots * CUDA_SLOT_BYTES + blocks * CUDA_BLOCK_BYTES;
}

static int grow_pool(struct cuda_volume *v, uint64_t need)
{
    if (need <= v->pool_cap)
        return TSDF_OK;
    /* The first pool holds exactly what is needed, as on the CPU backend:
     * a fixed first step (it was 1024 blocks, 6 MiB) made a map of a few
     * blocks hold megabytes it never used, which a daemon-wide memory
     * budget then could not give to other maps. Later steps double. */
    uint64_t cap = v->pool_cap ? v->pool_cap : need;
    while (cap < need)
        cap *= 2;
    if (v->p.memory_cap_bytes) {
        /* Near the cap, take only what fits: the pool may not exceed it. */
        uint64_t fit = v->p.memory_cap_bytes > (uint64_t)v->capacity * CUDA_SLOT_BYTES
                           ? (v->p.memory_cap_bytes - (uint64_t)v->capacity * CUDA_SLOT_BYTES) /
                                 CUDA_BLOCK_BYTES
                           : 0;
        if (cap > fit)
            cap = fit > need ? fit : need;
    }
    if (cap > 0x7fffffffu)
        return TSDF_ECAPACITY;
    uint64_t *keys = NULL, *vers = NULL;
    tsdf_voxel *vox = NULL;
    int rc = cuda_dev_alloc(v, (void **)&keys, cap * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&vers, cap * sizeof(uint64_t));
    if (rc == TSDF_OK)
        rc = cuda_dev_alloc(v, (void **)&vox, cap * TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
    if (rc == TSDF_OK && v->blocks) {
        rc = cuda_check(cudaMemcpyAsync(keys, v->d_block_keys, v->blocks * sizeof(uint64_t),
                                        cudaMemcpyDeviceToDevice, v->stream),
                        "copy block keys", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_check(cudaMemcpyAsync(vers, v->d_block_versions, v->blocks * sizeof(uint64_t),
                                            cudaMemcpyDeviceToDevice, v->stream),
                            "copy block versions", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_check(
                cudaMemcpyAsync(vox, v->d_voxels,
                                (size_t)v->blocks * TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel),
                                cudaMemcpyDeviceToDevice, v->stream),
                "copy voxels", __FILE__, __LINE__);
        /* The old pool is freed below, once the copies are done. */
        if (rc == TSDF_OK)
            rc = cuda_check(cudaStreamSynchronize(v->stream), "pool growth", __FILE__, __LINE__);
    }
    if (rc != TSDF_OK) {
        cuda_dev_free(v, keys, cap * sizeof(uint64_t));
        cuda_dev_free(v, vers, cap * sizeof(uint64_t));
        cuda_dev_free(v, vox, cap * TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
        return rc;
    }
    cuda_dev_free(v, v->d_block_keys, (size_t)v->pool_cap * sizeof(uint64_t));
    cuda_dev_free(v, v->d_block_versions, (size_t)v->pool_cap * sizeof(uint64_t));
    cuda_dev_free(v, v->d_voxels, (size_t)v->pool_cap * TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
    v->d_block_keys = keys;
    v->d_block_versions = vers;
    v->d_voxels = vox;
    v->pool_cap = (uint32_t)cap;
    return TSDF_OK;
}

static int rehash(struct cuda_volume *v, uint32_t new_cap)
{
    uint64_t *old_keys = v->d_keys;
    int32_t *old_vals = v->d_vals;
    uint32_t old_cap = v->capacity;
    int rc = cuda_table_alloc(v, new_cap);
    if (rc != TSDF_OK) {
        v->d_keys = old_keys;
        v->d_vals = old_vals;
        v->capacity = old_cap;
        return rc;
    }
    k_rehash<<<cuda_grid(old_cap, 256), 256, 0, v->stream>>>(old_keys, old_vals, old_cap, v->d_keys,
                                                             v->d_vals, new_cap - 1,
                                                             v->d_counters + CUDA_CTR_INSERT_FAIL);
    rc = cuda_check(cudaGetLastError(), "k_rehash launch", __FILE__, __LINE__);
    if (rc != TSDF_OK) {
        /* Keep the old table: it is still complete. */
        cuda_dev_free(v, v->d_keys, (size_t)new_cap * sizeof(uint64_t));
        cuda_dev_free(v, v->d_vals, (size_t)new_cap * sizeof(int32_t));
        v->d_keys = old_keys;
        v->d_vals = old_vals;
        v->capacity = old_cap;
        return rc;
    }
    /* The rehash must have read the old table before it goes. */
    rc = cuda_check(cudaStreamSynchronize(v->stream), "rehash", __FILE__, __LINE__);
    if (rc != TSDF_OK)
        return rc;
    cuda_dev_free(v, old_keys, (size_t)old_cap * sizeof(uint64_t));
    cuda_dev_free(v, old_vals, (size_t)old_cap * sizeof(int32_t));
    v->growth_events++;
    return TSDF_OK;
}

int cuda_reserve(struct cuda_volume *v, uint64_t blocks_needed)
{
    uint64_t cap = v->capacity;
    while ((double)blocks_needed > (double)v->p.max_load_factor * (double)cap)
        cap *= 2;
    if (cap > (1ull << 31))
        return TSDF_ECAPACITY;
    if (v->p.memory_cap_bytes && capped_bytes(cap, blocks_needed) > v->p.memory_cap_bytes)
        return TSDF_ECAPACITY;
    if (blocks_needed > 0x7fffffffull)
        return TSDF_ECAPACITY;
    if (cap != v->capacity) {
        int rc = rehash(v, (uint32_t)cap);
        if (rc != TSDF_OK)
            return rc;
    }
    return grow_pool(v, blocks_needed);
}

int cuda_insert_new(struct cuda_volume *v, const uint64_t *d_src, uint32_t n,
                    int32_t *d_block_of_out, const uint32_t *d_out_index)
{
    if (n == 0)
        return TSDF_OK;
    k_insert_new<<<n, 128, 0, v->stream>>>(v->d_keys, v->d_vals, v->capacity - 1, d_src, n,
                                           v->blocks, v->d_block_keys, v->d_block_versions,
                                           v->d_voxels, v->version, d_block_of_out, d_out_index,
                                           v->d_counters + CUDA_CTR_INSERT_FAIL);
    CUDA_TRY_LAUNCH();
    v->blocks += n;
    return TSDF_OK;
}

int cuda_insert_frame(struct cuda_volume *v, uint32_t room)
{
    k_insert_frame<<<v->insert_grid, 128, 0, v->stream>>>(
        v->d_keys, v->d_vals, v->capacity - 1, v->d_missing, v->d_counters, room, v->blocks,
        v->d_block_keys, v->d_block_versions, v->d_voxels, v->version, v->d_frame_blocks,
        v->d_missing_src, v->d_counters + CUDA_CTR_INSERT_FAIL);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

int cuda_reserve_pool(struct cuda_volume *v, uint64_t need)
{
    if (need > 0x7fffffffull)
        need = 0x7fffffffull;
    return grow_pool(v, need);
}

int cuda_lookup(struct cuda_volume *v, const uint64_t *d_keys_in, uint32_t n, int32_t *d_idx_out)
{
    if (n == 0)
        return TSDF_OK;
    k_lookup<<<cuda_grid(n, 256), 256, 0, v->stream>>>(cuda_view(v), d_keys_in, n, d_idx_out);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

int cuda_probe_stats(struct cuda_volume *v, tsdf_volume_stats *out)
{
    /* The scratch: 17 u64 (bins + sum) and one u32 max, from the set
     * buffer, which is idle between operations. */
    unsigned long long *d_hist = (unsigned long long *)v->d_set_slot;
    uint32_t *d_max = (uint32_t *)(d_hist + TSDF_PROBE_HIST_BINS + 1);
    size_t bytes = (TSDF_PROBE_HIST_BINS + 1) * sizeof(unsigned long long) + sizeof(uint32_t);
    CUDA_TRY(cudaMemsetAsync(d_hist, 0, bytes, v->stream));
    k_probe_hist<<<cuda_grid(v->capacity, 256), 256, 0, v->stream>>>(v->d_keys, v->capacity, d_hist,
                                                                     d_max);
    CUDA_TRY_LAUNCH();
    unsigned long long h[TSDF_PROBE_HIST_BINS + 2];
    CUDA_TRY(cudaMemcpyAsync(h, d_hist, bytes, cudaMemcpyDeviceToHost, v->stream));
    CUDA_TRY(cudaStreamSynchronize(v->stream));
    uint64_t resident = 0;
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++) {
        out->probe_hist[i] = h[i];
        resident += h[i];
    }
    uint32_t mx;
    memcpy(&mx, &h[TSDF_PROBE_HIST_BINS + 1], sizeof mx);
    out->max_probe = mx;
    out->mean_probe = resident ? (double)h[TSDF_PROBE_HIST_BINS] / (double)resident : 0.0;
    return TSDF_OK;
}
