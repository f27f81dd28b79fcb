/*
 * cpu_backend.h - internals shared by the files of the CPU reference
 * backend (cpu_backend.c: life cycle, integrate, stats, export/import;
 * cpu_raycast.c; cpu_mesh.c). Not a public header.
 *
 * Storage: a block pool (parallel arrays indexed by block index: key,
 * version, 512 voxels) and a cpu_hash from packed block key to block index.
 * Blocks are appended to the pool and never move or disappear until reset
 * or import replaces the whole content.
 * Threads: one thread at a time per volume (see tsdf_volume.h).
 */
#ifndef TSDF_CPU_BACKEND_H
#define TSDF_CPU_BACKEND_H

#include <stdint.h>

#include "cpu_hash.h"
#include "tsdf_volume.h"

/* Bytes one block takes in the pool: voxels, key and version. */
#define CPU_BLOCK_BYTES ((uint64_t)TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel) + 2 * sizeof(uint64_t))

typedef struct {
    tsdf_volume_params params;
    float trunc_m;
    float inv_voxel_size; /* 1 / voxel_size_m */
    float inv_block_size; /* 1 / (8 voxel_size_m) */
    uint64_t initial_capacity;

    cpu_hash table;           /* block key -> block index */
    uint64_t *block_keys;     /* pool_cap */
    uint64_t *block_versions; /* pool_cap */
    tsdf_voxel *voxels;       /* pool_cap * TSDF_BLOCK_VOXELS */
    uint32_t pool_count;      /* blocks in use (== table.count) */
    uint32_t pool_cap;        /* blocks allocated */

    /* Per-frame scratch, kept between frames to avoid re-allocation; not
     * counted against the memory cap (it is bounded by one frame's band). */
    cpu_hash frame_set; /* this frame's block keys (dedupe) */
    uint64_t *frame_keys;
    uint32_t *frame_blocks;
    size_t frame_count, frame_cap;

    uint64_t version;
    uint64_t frames_integrated;
    uint64_t frames_rejected;
    uint64_t insert_failures;
    uint64_t growth_events_before; /* growth of tables replaced by reset/import */
    int has_color;
    double last_upload_ms, last_alloc_ms, last_update_ms, last_raycast_ms, last_mesh_ms;
} cpu_volume;

/* The voxels of block (bx, by, bz), or NULL when it is not allocated (or
 * out of the key range). */
tsdf_voxel *cpu_volume_block(cpu_volume *v, int32_t bx, int32_t by, int32_t bz);

/* The voxel at global voxel coordinate (x, y, z), or NULL when its block is
 * not allocated. */
tsdf_voxel *cpu_volume_voxel(cpu_volume *v, int32_t x, int32_t y, int32_t z);

/* Monotonic wall time in ms, for the stats' timings. */
double cpu_now_ms(void);

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out);
int cpu_mesh(void *impl, const tsdf_mesh_params *p, tsdf_mesh *out);

#endif /* TSDF_CPU_BACKEND_H */
