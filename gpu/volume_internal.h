/*
 * volume_internal.h - the front end's own state, shared by its files:
 * volume.c (checks, life cycle, dispatch), volume_blocks.c (block sets,
 * export, import, writes, eviction) and volume_mesh.c (what a mesh covers:
 * boxes, incremental meshes, parts by block). Not a public header.
 *
 * What the front end keeps beside the backend: the count of frames its
 * checks refused, and the record of removed blocks that incremental meshes
 * report (the backends only erase; what went, and when, is written once
 * here for both).
 */
#ifndef TSDF_VOLUME_INTERNAL_H
#define TSDF_VOLUME_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_backend.h"
#include "tsdf_volume.h"

/* Removed blocks remembered for mesh(since_version): 2^18 records (4 MiB).
 * Past that the oldest half is forgotten and the floor rises: a client
 * further behind gets a full mesh. */
#define VOLUME_REMOVED_MAX (1u << 18)

/* The most blocks one block set may hold (the backends' 32-bit pool
 * indices, with room). */
#define VOLUME_BLOCK_SET_MAX (1u << 30)

typedef struct {
    uint64_t key;
    uint64_t version; /* the version the removal made */
} volume_removed;

struct tsdf_volume {
    const tsdf_backend_ops *ops;
    void *impl;
    tsdf_volume_params params;
    tsdf_backend backend;
    uint64_t frames_rejected_front; /* frames refused by tsdf_frame_check */

    /* Removals since `removed_floor`, oldest first: an incremental mesh
     * since V >= removed_floor finds here every block removed after V; one
     * since an older V cannot tell and is answered with the whole volume.
     * Reset and import move the floor to their version (everything before
     * them is gone at once). */
    volume_removed *removed;
    size_t removed_count, removed_cap;
    uint64_t removed_floor;
};

/* Records that the blocks keys[0 .. n) went at `version` (evict). */
int volume_note_removed(tsdf_volume *v, const uint64_t *keys, size_t n, uint64_t version);

/* Forgets every removal: nothing before `version` can be told apart any
 * more (reset, import). */
void volume_forget_removed(tsdf_volume *v, uint64_t version);

/* The metres of one block edge. */
static inline float volume_block_m(const tsdf_volume *v)
{
    return (float)TSDF_BLOCK_DIM * v->params.voxel_size_m;
}

#endif /* TSDF_VOLUME_INTERNAL_H */
