/*
 * tsdf_backend.h - the internal interface between the public volume API
 * (volume.c: parameter and frame checks, dispatch, and everything written
 * once over the block store: export, import, eviction, incremental meshes)
 * and a backend (gpu/cpu/: the CPU reference; gpu/cuda/: the CUDA backend).
 *
 * The front end validates every argument before it calls a backend, so a
 * backend may assume: params passed tsdf_volume_params_check, frames passed
 * tsdf_frame_check, raycast params are valid, block sets passed validation
 * and are in the backend's own layout (the front end converts), selections
 * passed tsdf_block_select_check, key lists hold valid keys without
 * duplicates. A backend owns all of its statistics (counters, version).
 *
 * Threads: every op runs on the one thread that uses the volume at a time.
 * Ordering: the CUDA backend queues device work on the volume's streams;
 * an op marked (async) may return before its work is done, every later op
 * is ordered after it, and sync waits for it. Every other op returns with
 * its results on the host. Ownership: arrays an op returns through a
 * pointer argument are malloc'ed and belong to the caller.
 */
#ifndef TSDF_BACKEND_H
#define TSDF_BACKEND_H

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsdf_backend_ops {
    const char *name;

    /* ---- life cycle ---- */
    /* A new empty volume of *p (its layout, its cap): *impl. */
    int (*create)(const tsdf_volume_params *p, void **impl);
    /* Frees everything, waiting for queued work first. */
    void (*destroy)(void *impl);
    /* Drops every block; the table returns to its initial capacity; the
     * version moves one up; the counters stay. */
    int (*reset)(void *impl);

    /* ---- work ---- */
    /* (async) Integrates one frame, or refuses it whole (TSDF_ECAPACITY,
     * counted); see tsdf_volume_integrate for when a CUDA failure surfaces. */
    int (*integrate)(void *impl, const tsdf_frame *f);
    /* Waits for every queued operation; returns an error any of them met. */
    int (*sync)(void *impl);
    int (*raycast)(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out);
    /* Marching cubes over the blocks of keys[0 .. n) (ascending; absent
     * ones are skipped), or over every block when keys is NULL, into *out
     * (shared vertices). *out may hold the vertex and index arrays of an
     * earlier mesh, for the backend to reuse (realloc) or free; on
     * failure they are valid or NULL, for the caller to free. tri_keys (may be NULL)
     * receives the key of the block that owns each triangle's cell; meshed
     * (may be NULL) the keys of the blocks meshed, ascending, and n_meshed
     * their count. */
    int (*mesh)(void *impl, const uint64_t *keys, size_t n, tsdf_mesh *out, uint64_t **tri_keys,
                uint64_t **meshed, size_t *n_meshed);
    /* Every statistic; the probe histogram (max_probe, mean_probe,
     * probe_hist: a walk over the whole table) only when probe is 1. */
    int (*stats)(void *impl, tsdf_volume_stats *out, int probe);
    /* Sets the memory cap of later integrate / write calls (see
     * tsdf_volume_set_memory_cap). */
    int (*set_memory_cap)(void *impl, uint64_t cap_bytes);
    /* The bytes of the content now, and the version now: host arithmetic
     * only, never waits. */
    uint64_t (*memory_bytes)(void *impl);
    uint64_t (*version)(void *impl);
    /* Optional (NULL: TSDF_ENOT_BUILT): tsdf_volume_get_timeline. */
    int (*timeline)(void *impl, tsdf_frame_timeline *out, size_t max, size_t *n);

    /* ---- the block store ---- */
    /* The keys of the blocks q selects (q NULL: all), ascending: *keys
     * (NULL when *n is 0). */
    int (*select)(void *impl, const tsdf_block_select *q, uint64_t **keys, size_t *n);
    /* Copies the blocks of keys[0 .. n) (all present) into *out (replacing
     * what it held), in the order given, in the volume's layout, with the
     * colour channel when the volume has colour; out->version is the
     * volume's version. */
    int (*read)(void *impl, const uint64_t *keys, size_t n, tsdf_block_set *out);
    /* Writes the blocks of *in (the volume's layout): replace 0 adds the
     * absent ones and overwrites the present ones, replace 1 first drops
     * every block (import). The written blocks carry version, which becomes
     * the volume's (above its own). TSDF_ECAPACITY when they do not fit
     * under the cap; on any error the volume is unchanged. A colour channel
     * in *in gives the volume colour. */
    int (*write)(void *impl, const tsdf_block_set *in, int replace, uint64_t version);
    /* Removes the blocks of keys[0 .. n) that are present; *erased gets how
     * many. When any went, the version moves one up. */
    int (*erase)(void *impl, const uint64_t *keys, size_t n, size_t *erased);
    /* present[i] = 1 when block keys[i] exists, else 0. */
    int (*find)(void *impl, const uint64_t *keys, size_t n, uint8_t *present);
} tsdf_backend_ops;

/* The pool's headroom policy, the same on both backends: the recent peak
 * of new blocks per frame, which a pool that must grow keeps twice spare
 * (so that the next frames fit without growing again, and the CUDA
 * backend's asynchronous frames are not deferred). The peak decays by an
 * eighth a frame, so the first frame of a map (where every block is new)
 * does not set it for the map's life. */
static inline uint64_t tsdf_peak_update(uint64_t peak, uint64_t new_blocks)
{
    return new_blocks > peak - peak / 8 ? new_blocks : peak - peak / 8;
}

extern const tsdf_backend_ops tsdf_cpu_ops;

#ifdef TSDF_HAVE_CUDA
extern const tsdf_backend_ops tsdf_cuda_ops;
/* 1 when device `ordinal` exists and a context can be made on it. */
int tsdf_cuda_probe(int ordinal);
/* tsdf_cuda_device_memory of the CUDA backend. */
int tsdf_cuda_total_memory(int ordinal, uint64_t *total_bytes);
/* Page-locked host memory for tsdf_host_alloc (cudaHostAlloc, portable);
 * TSDF_ENOMEM when the driver refuses. */
int tsdf_cuda_host_alloc(size_t bytes, void **out);
void tsdf_cuda_host_free(void *p);
/* tsdf_host_register's page-locking (cudaHostRegister, portable) and its
 * undoing; TSDF_ENOMEM when the driver refuses. */
int tsdf_cuda_host_register(void *p, size_t bytes);
void tsdf_cuda_host_unregister(void *p);
#endif

#ifdef __cplusplus
}
#endif

#endif /* TSDF_BACKEND_H */
