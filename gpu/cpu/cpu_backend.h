/*
 * cpu_backend.h - internals shared by the files of the CPU reference
 * backend: cpu_backend.c (life cycle, statistics, the store operations and
 * the ops table), cpu_integrate.c, cpu_raycast.c, cpu_mesh.c, over the
 * block store of cpu_store.h. Not a public header.
 *
 * Threads: one thread at a time calls into a volume (see tsdf_volume.h);
 * integrate, raycast and mesh spread their work over the volume's pool
 * (cpu_pool.h), whose jobs only read the store's table and write disjoint
 * parts of its channels, so their results do not depend on the number of
 * threads.
 */
#ifndef TSDF_CPU_BACKEND_H
#define TSDF_CPU_BACKEND_H

#include <stdint.h>

#include "cpu_hash.h"
#include "cpu_pool.h"
#include "cpu_store.h"
#include "tsdf_backend.h"
#include "tsdf_volume.h"

/* A growing list of block keys. */
typedef struct {
    uint64_t *keys;
    size_t n, cap;
} cpu_key_list;

/* Integration's per-frame scratch (cpu_integrate.c), kept between frames. */
typedef struct {
    float *alloc_depth_m; /* per pixel: its sample in metres, 0 for none */
    float *usable_m;      /* per pixel: tsdf_depth_usable_m */
    size_t pix_cap;
    /* Per row r = 0..2 of T_world_cam, per column u (cols_cap a row):
     * T_world_cam[4r] * (u - cx) / fx at ray_cols[r * cols_cap + u]. */
    float *ray_cols;
    size_t cols_cap;
    cpu_key_list *bands; /* per band of rows: its blocks in first-seen order */
    size_t bands_cap;
    cpu_hash *sets; /* per pool thread: a band's dedupe table */
    unsigned nsets;
    /* Per pool thread, a row's band ends (collect_band): 6 rows of floats
     * a column, the block coordinates of the two ends, and 6 rows of
     * int32, the blocks that hold them (TSDF_NO_BLOCK in the first: an end
     * outside the key range, or no band). */
    float *row_ends;
    int32_t *row_blocks;
    size_t row_ends_cols;
} cpu_frame_scratch;

void cpu_frame_scratch_fini(cpu_frame_scratch *s);

typedef struct {
    tsdf_volume_params params;
    float trunc_m;
    float inv_voxel_size; /* 1 / voxel_size_m */
    float inv_block_size; /* 1 / (8 voxel_size_m) */

    cpu_store store;
    cpu_pool *pool; /* params.cpu_threads threads */

    /* Per-frame scratch, kept between frames to avoid re-allocation; not
     * counted against the memory cap (it is bounded by one frame's band). */
    cpu_hash frame_set; /* this frame's block keys (dedupe) */
    uint64_t *frame_keys;
    int64_t *frame_blocks;
    size_t frame_count, frame_cap;
    cpu_frame_scratch scratch;

    uint64_t peak_missing; /* recent peak of new blocks a frame (tsdf_peak_update) */
    uint64_t version;
    uint64_t frames_integrated;
    uint64_t frames_rejected;
    uint64_t insert_failures;
    double last_upload_ms, last_alloc_ms, last_update_ms, last_raycast_ms, last_mesh_ms;
} cpu_volume;

/* The pool index of block (bx, by, bz), or -1 when it is not allocated (or
 * out of the key range). A pure read of the table: any number of threads
 * may call it at once while nothing changes the store. */
int32_t cpu_volume_block(const cpu_volume *v, int32_t bx, int32_t by, int32_t bz);

/* Monotonic wall time in ms, for the stats' timings. */
double cpu_now_ms(void);

int cpu_integrate(void *impl, const tsdf_frame *f);
/* The raycast: the reference march's answer, bit for bit, marching only
 * where the volume's blocks can be (cpu_raycast.c). */
int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out);
/* The reference march over every whole ray, for the tests of cpu_raycast. */
int cpu_raycast_reference(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out);
int cpu_mesh(void *impl, const uint64_t *keys, size_t n, tsdf_mesh *out, uint64_t **tri_keys,
             uint64_t **meshed, size_t *n_meshed);

#endif /* TSDF_CPU_BACKEND_H */
