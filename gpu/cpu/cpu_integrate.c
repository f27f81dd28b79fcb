/*
 * cpu_integrate.c - the CPU reference integration of one depth frame:
 * collect the blocks of the frame's allocation band, make sure they exist
 * (checking the memory cap before anything changes), then update every
 * voxel of those blocks. All per-voxel maths comes from tsdf_math.h, shared
 * with the CUDA kernels, so this is the oracle the GPU is checked against.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "tsdf_math.h"

static int frame_keys_push(cpu_volume *v, uint64_t key)
{
    if (v->frame_count == v->frame_cap) {
        size_t cap = v->frame_cap != 0 ? 2 * v->frame_cap : 4096;
        uint64_t *keys = realloc(v->frame_keys, cap * sizeof(*keys));
        if (keys == NULL)
            return TSDF_ENOMEM;
        v->frame_keys = keys;
        int64_t *blocks = realloc(v->frame_blocks, cap * sizeof(*blocks));
        if (blocks == NULL)
            return TSDF_ENOMEM;
        v->frame_blocks = blocks;
        v->frame_cap = cap;
    }
    v->frame_keys[v->frame_count++] = key;
    return TSDF_OK;
}

/* Pass 1a: the set of blocks this frame needs, deduplicated, in first-seen
 * order, into frame_keys[0 .. frame_count). */
static int collect_frame_blocks(cpu_volume *v, const tsdf_frame *f)
{
    uint64_t last_keys[4] = {TSDF_KEY_EMPTY, TSDF_KEY_EMPTY, TSDF_KEY_EMPTY, TSDF_KEY_EMPTY};
    unsigned last_pos = 0;
    int rc;

    v->frame_count = 0;
    cpu_hash_clear(&v->frame_set);
    for (uint32_t py = 0; py < f->height; py++) {
        for (uint32_t px = 0; px < f->width; px++) {
            float d = tsdf_depth_sample_m(f->depth_format, f->depth, py * f->width + px,
                                          f->depth_scale, f->min_depth_m, f->max_depth_m);
            float origin[3], dir[3];
            tsdf_block_dda dda;
            int32_t b[3];
            if (d == 0.0f)
                continue;
            tsdf_pixel_ray_world(f->T_world_cam, &f->K, (float)px, (float)py, origin, dir);
            if (!tsdf_band_dda_init(&dda, origin, dir, d, v->trunc_m, v->inv_block_size))
                continue;
            while (tsdf_block_dda_next(&dda, b)) {
                uint64_t key = tsdf_block_key(b[0], b[1], b[2]);
                int inserted;
                /* Neighbouring rays mostly walk the same blocks; a tiny
                 * cache of recent keys saves most hash probes. */
                if (key == last_keys[0] || key == last_keys[1] || key == last_keys[2] ||
                    key == last_keys[3])
                    continue;
                last_keys[last_pos++ & 3] = key;
                rc = cpu_hash_insert(&v->frame_set, key, 0, NULL, &inserted);
                if (rc != TSDF_OK)
                    return rc;
                if (inserted && (rc = frame_keys_push(v, key)) != TSDF_OK)
                    return rc;
            }
        }
    }
    return TSDF_OK;
}

/* Pass 1b: makes sure every needed block exists, checking the memory cap
 * before changing anything; afterwards frame_blocks[i] is the pool index
 * of frame_keys[i]. New blocks carry `version`. */
static int allocate_frame_blocks(cpu_volume *v, int with_rgb, uint64_t version)
{
    uint64_t missing = 0;
    int rc;

    for (size_t i = 0; i < v->frame_count; i++) {
        v->frame_blocks[i] = cpu_store_find(&v->store, v->frame_keys[i]);
        missing += v->frame_blocks[i] < 0;
    }
    v->peak_missing = tsdf_peak_update(v->peak_missing, missing);
    if (missing == 0 && !(with_rgb && v->store.rgb == NULL))
        return TSDF_OK;
    rc = cpu_store_reserve(&v->store, missing, with_rgb, v->params.memory_cap_bytes,
                           2 * v->peak_missing);
    if (rc == TSDF_ECAPACITY)
        v->insert_failures += missing;
    if (rc != TSDF_OK)
        return rc;
    for (size_t i = 0; i < v->frame_count; i++) {
        if (v->frame_blocks[i] >= 0)
            continue;
        /* Room is reserved, so this fails only on a broken invariant,
         * which it reports. */
        int64_t idx = cpu_store_add(&v->store, v->frame_keys[i], version);
        if (idx < 0)
            return (int)idx;
        v->frame_blocks[i] = idx;
    }
    return TSDF_OK;
}

/* Pass 2: every voxel of every block of this frame. */
static void update_frame_blocks(cpu_volume *v, const tsdf_frame *f)
{
    const cpu_store *st = &v->store;
    const float s = v->params.voxel_size_m;
    float T_cam_world[16];
    tsdf_rigid_inverse(f->T_world_cam, T_cam_world);
    for (size_t i = 0; i < v->frame_count; i++) {
        uint32_t idx = (uint32_t)v->frame_blocks[i];
        void *geom = cpu_store_geom(st, idx);
        uint8_t *rgb = cpu_store_rgb(st, idx);
        int32_t b[3];
        int changed = 0;
        tsdf_block_key_unpack(v->frame_keys[i], &b[0], &b[1], &b[2]);
        for (int z = 0; z < TSDF_BLOCK_DIM; z++) {
            for (int y = 0; y < TSDF_BLOCK_DIM; y++) {
                for (int x = 0; x < TSDF_BLOCK_DIM; x++) {
                    float p[3];
                    tsdf_block_voxel_center(b, x, y, z, s, p);
                    changed |= tsdf_integrate_voxel(
                        st->layout, geom, rgb, (size_t)tsdf_voxel_index(x, y, z), p, T_cam_world, f,
                        v->trunc_m, v->params.max_weight, st->quant);
                }
            }
        }
        if (changed)
            st->versions[idx] = v->version;
    }
}

int cpu_integrate(void *impl, const tsdf_frame *f)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms(), t1;
    int rc;

    if ((rc = collect_frame_blocks(v, f)) != TSDF_OK ||
        (rc = allocate_frame_blocks(v, f->rgb != NULL, v->version + 1)) != TSDF_OK) {
        v->frames_rejected++;
        return rc;
    }
    t1 = cpu_now_ms();
    v->version++;
    update_frame_blocks(v, f);
    v->frames_integrated++;
    v->last_upload_ms = 0.0;
    v->last_alloc_ms = t1 - t0;
    v->last_update_ms = cpu_now_ms() - t1;
    return TSDF_OK;
}
