/*
 * cuda_table.cu - the device hash table of the CUDA backend: slot
 * initialisation, growth and tombstone removal by rehashing on the device,
 * lookups, erasure and the probe-length histogram. Insertion (which takes
 * pool slots too) is in cuda_store.cu, on cuda_dev_insert.
 *
 * Probing is linear from tsdf_key_hash(key) & mask. An insertion probes at
 * most `capacity` slots, i.e. the whole table; it can only fail if the table
 * is full of keys and tombstones, which growth rules out: cuda_reserve
 * before every synchronous insertion, and for the asynchronous frame
 * insert a room the host computed so that keys and tombstones stay at most
 * max(0.9, max_load) (and never all) of the slots (see cuda_integrate.cu).
 * A failure is still counted in CUDA_CTR_INSERT_FAIL and read back, so a
 * broken invariant is reported instead of silently losing a block.
 *
 * Erasure writes a tombstone: a parallel backward shift would let two
 * threads move keys across each other's holes. Lookups probe past
 * tombstones, inserts never take them, and the table is rebuilt without
 * them (cuda_table_rehash) once they pass an eighth of the slots or the
 * load of keys and tombstones passes max_load_factor.
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

/* Moves every resident (key, block) of the old table into the new one;
 * tombstones stay behind. */
static __global__ void k_rehash(const uint64_t *old_keys, const int32_t *old_vals, uint32_t old_cap,
                                uint64_t *keys, int32_t *vals, uint32_t mask, uint32_t *fail)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= old_cap)
        return;
    uint64_t key = old_keys[i];
    if (key == TSDF_KEY_EMPTY || key == CUDA_KEY_TOMB)
        return;
    int existing;
    if (cuda_dev_insert(keys, vals, mask, key, old_vals[i], &existing) < 0)
        atomicAdd(fail, 1u);
}

static __global__ void k_lookup(cuda_table_view t, const uint64_t *keys, uint32_t n, int32_t *out)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = cuda_table_find(t, keys[i]);
}

/* Erases each present key of keys[0 .. n) (distinct; nothing inserts
 * meanwhile): its slot becomes a tombstone, its pool slot free (key
 * TSDF_KEY_EMPTY) and pushed on the free stack above free_count. */
static __global__ void k_erase(uint64_t *table_keys, const int32_t *vals, uint32_t mask,
                               const uint64_t *keys, uint32_t n, uint64_t *block_keys,
                               uint32_t *free_stack, uint32_t free_count, uint32_t *erased)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint64_t key = keys[i];
    uint32_t s = (uint32_t)tsdf_key_hash(key) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++) {
        uint64_t k = table_keys[s];
        if (k == TSDF_KEY_EMPTY)
            return;
        if (k == key) {
            int32_t b = vals[s];
            table_keys[s] = CUDA_KEY_TOMB;
            block_keys[b] = TSDF_KEY_EMPTY;
            free_stack[free_count + atomicAdd(erased, 1u)] = (uint32_t)b;
            return;
        }
        s = (s + 1) & mask;
    }
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
        if (key != TSDF_KEY_EMPTY && key != CUDA_KEY_TOMB) {
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
    v->tombstones = 0;
    return TSDF_OK;
}

void cuda_table_free(struct cuda_volume *v)
{
    cuda_dev_free(v, v->d_keys, (size_t)v->capacity * sizeof(uint64_t));
    cuda_dev_free(v, v->d_vals, (size_t)v->capacity * sizeof(int32_t));
    v->d_keys = NULL;
    v->d_vals = NULL;
    v->capacity = 0;
    v->tombstones = 0;
}

uint64_t cuda_table_capacity_for(const struct cuda_volume *v, uint64_t keys)
{
    uint64_t cap = v->capacity;
    while ((double)keys > (double)v->p.max_load_factor * (double)cap)
        cap *= 2;
    return cap;
}

int cuda_table_rehash(struct cuda_volume *v, uint32_t new_cap)
{
    uint64_t *old_keys = v->d_keys;
    int32_t *old_vals = v->d_vals;
    uint32_t old_cap = v->capacity, old_tombs = v->tombstones;
    int rc = cuda_table_alloc(v, new_cap);
    if (rc != TSDF_OK) {
        v->d_keys = old_keys;
        v->d_vals = old_vals;
        v->capacity = old_cap;
        v->tombstones = old_tombs;
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
        v->tombstones = old_tombs;
        return rc;
    }
    /* The rehash must have read the old table before it goes. */
    rc = cuda_check(cudaStreamSynchronize(v->stream), "rehash", __FILE__, __LINE__);
    if (rc != TSDF_OK)
        return rc;
    cuda_dev_free(v, old_keys, (size_t)old_cap * sizeof(uint64_t));
    cuda_dev_free(v, old_vals, (size_t)old_cap * sizeof(int32_t));
    if (new_cap != old_cap)
        v->growth_events++;
    return TSDF_OK;
}

int cuda_lookup(struct cuda_volume *v, const uint64_t *d_keys_in, uint32_t n, int32_t *d_idx_out)
{
    if (n == 0)
        return TSDF_OK;
    k_lookup<<<cuda_grid(n, 256), 256, 0, v->stream>>>(cuda_view(v), d_keys_in, n, d_idx_out);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

int cuda_erase_keys(struct cuda_volume *v, const uint64_t *d_keys_in, uint32_t n, uint32_t *erased)
{
    uint32_t *d_ctr = v->d_counters + CUDA_CTR_AUX0;
    *erased = 0;
    if (n == 0)
        return TSDF_OK;
    CUDA_TRY(cudaMemsetAsync(d_ctr, 0, sizeof(uint32_t), v->stream));
    k_erase<<<cuda_grid(n, 256), 256, 0, v->stream>>>(v->d_keys, v->d_vals, v->capacity - 1,
                                                      d_keys_in, n, v->d_block_keys, v->d_free,
                                                      v->free_count, d_ctr);
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaMemcpyAsync(v->h_counters + CUDA_CTR_AUX0, d_ctr, sizeof(uint32_t),
                             cudaMemcpyDeviceToHost, v->stream));
    int rc = cuda_sync_all(v);
    if (rc != TSDF_OK)
        return rc;
    const uint32_t gone = v->h_counters[CUDA_CTR_AUX0];
    v->free_count += gone;
    v->blocks -= gone;
    v->tombstones += gone;
    v->erased_total += gone;
    *erased = gone;
    /* Tombstones lengthen every probe that passes them: rebuild once they
     * are an eighth of the table, or once keys and tombstones together
     * pass the load the table grows at (the size the keys need alone may
     * be the current one). A failed rebuild leaves a table that is still
     * correct, only slower. */
    if ((uint64_t)v->tombstones * 8 > v->capacity ||
        (double)(v->blocks + v->tombstones) > (double)v->p.max_load_factor * (double)v->capacity)
        (void)cuda_table_rehash(v, (uint32_t)cuda_table_capacity_for(v, v->blocks));
    return TSDF_OK;
}

int cuda_probe_stats(struct cuda_volume *v, tsdf_volume_stats *out)
{
    /* The scratch: 17 u64 (bins + sum) and one u32 max, from the set's
     * slot list (CUDA_SET_FIRST_SLOTS / 2 entries at least), which is idle
     * between operations; a failed growth of the set may have freed it. */
    if (v->set_cap == 0) {
        int rc = cuda_scratch_reserve(v, CUDA_SET_FIRST_SLOTS);
        if (rc != TSDF_OK)
            return rc;
    }
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
