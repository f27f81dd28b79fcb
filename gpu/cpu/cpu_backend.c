/*
 * cpu_backend.c - the CPU reference backend: life cycle, integration,
 * statistics, export and import. Raycast and mesh live in cpu_raycast.c and
 * cpu_mesh.c. All per-voxel maths comes from tsdf_math.h, shared with the
 * CUDA backend, so this file is the oracle the GPU results are checked
 * against.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "tsdf_backend.h"
#include "tsdf_math.h"

double cpu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

tsdf_voxel *cpu_volume_block(cpu_volume *v, int32_t bx, int32_t by, int32_t bz)
{
    uint32_t idx;
    if (!tsdf_block_coord_valid(bx, by, bz))
        return NULL;
    if (cpu_hash_find(&v->table, tsdf_block_key(bx, by, bz), &idx) != 1)
        return NULL;
    return v->voxels + (size_t)idx * TSDF_BLOCK_VOXELS;
}

tsdf_voxel *cpu_volume_voxel(cpu_volume *v, int32_t x, int32_t y, int32_t z)
{
    tsdf_voxel *b = cpu_volume_block(v, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
    if (b == NULL)
        return NULL;
    return b + tsdf_voxel_index(x & 7, y & 7, z & 7);
}

static uint64_t pool_bytes(uint64_t blocks)
{
    return blocks * CPU_BLOCK_BYTES;
}

static uint64_t memory_bytes(const cpu_volume *v)
{
    return cpu_hash_bytes(v->table.capacity) + pool_bytes(v->pool_cap);
}

/* Resizes the pool arrays to new_cap blocks. On failure the pool is as it
 * was (realloc leaves the old block alone when it fails). */
static int pool_resize(cpu_volume *v, uint32_t new_cap)
{
    uint64_t *keys, *versions;
    tsdf_voxel *voxels;
    keys = realloc(v->block_keys, (size_t)new_cap * sizeof(*keys));
    if (keys == NULL)
        return TSDF_ENOMEM;
    v->block_keys = keys;
    versions = realloc(v->block_versions, (size_t)new_cap * sizeof(*versions));
    if (versions == NULL)
        return TSDF_ENOMEM;
    v->block_versions = versions;
    voxels = realloc(v->voxels, (size_t)new_cap * TSDF_BLOCK_VOXELS * sizeof(*voxels));
    if (voxels == NULL)
        return TSDF_ENOMEM;
    v->voxels = voxels;
    v->pool_cap = new_cap;
    return TSDF_OK;
}

/* The pool capacity to grow to for `needed` blocks: doubling amortises the
 * copies, but never past what the memory cap leaves next to a table of
 * table_cap slots (then exactly `needed`). */
static uint64_t pool_target(const cpu_volume *v, uint64_t needed, uint64_t table_cap)
{
    uint64_t target;
    if (needed <= v->pool_cap)
        return v->pool_cap;
    target = (uint64_t)v->pool_cap * 2;
    if (target < 64)
        target = 64;
    if (target < needed)
        target = needed;
    if (target > (1u << 30))
        target = needed;
    if (v->params.memory_cap_bytes != 0 &&
        cpu_hash_bytes(table_cap) + pool_bytes(target) > v->params.memory_cap_bytes)
        target = needed;
    return target;
}

static void pool_free(cpu_volume *v)
{
    free(v->block_keys);
    free(v->block_versions);
    free(v->voxels);
    v->block_keys = NULL;
    v->block_versions = NULL;
    v->voxels = NULL;
    v->pool_count = 0;
    v->pool_cap = 0;
}

/* ---- life cycle ------------------------------------------------------------ */

static void cpu_destroy(void *impl)
{
    cpu_volume *v = impl;
    if (v == NULL)
        return;
    cpu_hash_fini(&v->table);
    cpu_hash_fini(&v->frame_set);
    pool_free(v);
    free(v->frame_keys);
    free(v->frame_blocks);
    free(v);
}

static int cpu_create(const tsdf_volume_params *p, void **impl)
{
    cpu_volume *v;
    int rc;

    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return TSDF_ENOMEM;
    v->params = *p;
    v->trunc_m = p->trunc_vox * p->voxel_size_m;
    v->inv_voxel_size = 1.0f / p->voxel_size_m;
    v->inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * p->voxel_size_m);
    v->initial_capacity = cpu_hash_pow2(p->initial_capacity_blocks);
    if (p->memory_cap_bytes != 0 && cpu_hash_bytes(v->initial_capacity) > p->memory_cap_bytes) {
        free(v);
        return TSDF_ECAPACITY;
    }
    if ((rc = cpu_hash_init(&v->table, v->initial_capacity, p->max_load_factor)) != TSDF_OK)
        goto fail_table;
    if ((rc = cpu_hash_init(&v->frame_set, 4096, 0.5f)) != TSDF_OK)
        goto fail_frame_set;
    *impl = v;
    return TSDF_OK;

fail_frame_set:
    cpu_hash_fini(&v->table);
fail_table:
    free(v);
    return rc == TSDF_EINVAL ? TSDF_EBAD_PARAMS : rc;
}

static int cpu_reset(void *impl)
{
    cpu_volume *v = impl;
    cpu_hash fresh;
    int rc;
    if ((rc = cpu_hash_init(&fresh, v->initial_capacity, v->params.max_load_factor)) != TSDF_OK)
        return rc;
    v->growth_events_before += v->table.growth_events;
    cpu_hash_fini(&v->table);
    v->table = fresh;
    pool_free(v);
    v->has_color = 0;
    v->version++;
    return TSDF_OK;
}

static int cpu_sync(void *impl)
{
    (void)impl;
    return TSDF_OK;
}

/* ---- integration ----------------------------------------------------------- */

static int frame_keys_push(cpu_volume *v, uint64_t key)
{
    if (v->frame_count == v->frame_cap) {
        size_t cap = v->frame_cap != 0 ? 2 * v->frame_cap : 4096;
        uint64_t *keys = realloc(v->frame_keys, cap * sizeof(*keys));
        if (keys == NULL)
            return TSDF_ENOMEM;
        v->frame_keys = keys;
        uint32_t *blocks = realloc(v->frame_blocks, cap * sizeof(*blocks));
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

/* Pass 1b: makes sure every needed block exists. Checks the memory cap
 * before changing anything; afterwards frame_blocks[i] is the block index
 * of frame_keys[i]. */
static int allocate_frame_blocks(cpu_volume *v)
{
    uint64_t missing = 0, needed, table_cap, pool_cap;
    int rc;

    for (size_t i = 0; i < v->frame_count; i++) {
        uint32_t idx;
        rc = cpu_hash_find(&v->table, v->frame_keys[i], &idx);
        if (rc < 0)
            return rc;
        v->frame_blocks[i] = rc == 1 ? idx : UINT32_MAX;
        missing += rc == 0;
    }
    if (missing == 0)
        return TSDF_OK;

    needed = (uint64_t)v->pool_count + missing;
    table_cap = cpu_hash_capacity_for(&v->table, needed);
    if (needed > (1u << 30) ||
        (v->params.memory_cap_bytes != 0 &&
         cpu_hash_bytes(table_cap) + pool_bytes(needed) > v->params.memory_cap_bytes)) {
        v->insert_failures += missing;
        return TSDF_ECAPACITY;
    }
    pool_cap = pool_target(v, needed, table_cap);
    if (pool_cap > v->pool_cap && (rc = pool_resize(v, (uint32_t)pool_cap)) != TSDF_OK)
        return rc;
    if ((rc = cpu_hash_reserve(&v->table, needed)) != TSDF_OK)
        return rc;

    for (size_t i = 0; i < v->frame_count; i++) {
        uint32_t idx;
        if (v->frame_blocks[i] != UINT32_MAX)
            continue;
        idx = v->pool_count;
        /* Cannot grow (reserved above), so cannot fail but by a broken
         * invariant, which it reports. */
        rc = cpu_hash_insert(&v->table, v->frame_keys[i], idx, NULL, NULL);
        if (rc != TSDF_OK)
            return rc;
        v->block_keys[idx] = v->frame_keys[i];
        v->block_versions[idx] = v->version + 1;
        memset(v->voxels + (size_t)idx * TSDF_BLOCK_VOXELS, 0,
               TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
        v->pool_count++;
        v->frame_blocks[i] = idx;
    }
    return TSDF_OK;
}

/* Pass 2: every voxel of every block of this frame. */
static void update_frame_blocks(cpu_volume *v, const tsdf_frame *f)
{
    float T_cam_world[16];
    const float s = v->params.voxel_size_m;
    tsdf_rigid_inverse(f->T_world_cam, T_cam_world);
    for (size_t i = 0; i < v->frame_count; i++) {
        uint32_t idx = v->frame_blocks[i];
        tsdf_voxel *vox = v->voxels + (size_t)idx * TSDF_BLOCK_VOXELS;
        int32_t b[3];
        int changed = 0;
        tsdf_block_key_unpack(v->frame_keys[i], &b[0], &b[1], &b[2]);
        for (int z = 0; z < TSDF_BLOCK_DIM; z++) {
            for (int y = 0; y < TSDF_BLOCK_DIM; y++) {
                for (int x = 0; x < TSDF_BLOCK_DIM; x++) {
                    float p[3];
                    tsdf_block_voxel_center(b, x, y, z, s, p);
                    changed |= tsdf_integrate_voxel(&vox[tsdf_voxel_index(x, y, z)], p, T_cam_world,
                                                    f, v->trunc_m, v->params.max_weight);
                }
            }
        }
        if (changed)
            v->block_versions[idx] = v->version;
    }
}

static int cpu_integrate(void *impl, const tsdf_frame *f)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms(), t1;
    int rc;

    if ((rc = collect_frame_blocks(v, f)) != TSDF_OK ||
        (rc = allocate_frame_blocks(v)) != TSDF_OK) {
        v->frames_rejected++;
        return rc;
    }
    t1 = cpu_now_ms();
    v->version++;
    update_frame_blocks(v, f);
    if (f->rgb != NULL)
        v->has_color = 1;
    v->frames_integrated++;
    v->last_upload_ms = 0.0;
    v->last_alloc_ms = t1 - t0;
    v->last_update_ms = cpu_now_ms() - t1;
    return TSDF_OK;
}

/* ---- statistics ------------------------------------------------------------ */

static int cpu_stats(void *impl, tsdf_volume_stats *out)
{
    cpu_volume *v = impl;
    out->backend = TSDF_BACKEND_CPU;
    out->blocks_allocated = v->table.count;
    out->capacity_slots = v->table.capacity;
    out->load_factor = (double)v->table.count / (double)v->table.capacity;
    cpu_hash_probe_stats(&v->table, &out->max_probe, &out->mean_probe, out->probe_hist);
    out->growth_events = v->growth_events_before + v->table.growth_events;
    out->frames_integrated = v->frames_integrated;
    out->frames_rejected = v->frames_rejected;
    out->insert_failures = v->insert_failures;
    out->memory_bytes = memory_bytes(v);
    out->memory_cap_bytes = v->params.memory_cap_bytes;
    out->version = v->version;
    out->has_color = v->has_color;
    out->last_upload_ms = v->last_upload_ms;
    out->last_alloc_ms = v->last_alloc_ms;
    out->last_update_ms = v->last_update_ms;
    out->last_raycast_ms = v->last_raycast_ms;
    out->last_mesh_ms = v->last_mesh_ms;
    return TSDF_OK;
}

/* ---- export / import ------------------------------------------------------- */

typedef struct {
    uint64_t key;
    uint32_t idx;
} key_index;

static int cmp_key_index(const void *a, const void *b)
{
    uint64_t x = ((const key_index *)a)->key, y = ((const key_index *)b)->key;
    return x < y ? -1 : x > y;
}

static int cpu_export(void *impl, tsdf_block_set *out)
{
    cpu_volume *v = impl;
    size_t n = v->pool_count;
    key_index *order = NULL;
    tsdf_block_set s;

    tsdf_block_set_init(&s);
    if (n != 0) {
        order = malloc(n * sizeof(*order));
        s.coords = malloc(3 * n * sizeof(*s.coords));
        s.versions = malloc(n * sizeof(*s.versions));
        s.voxels = malloc(n * TSDF_BLOCK_VOXELS * sizeof(*s.voxels));
        if (order == NULL || s.coords == NULL || s.versions == NULL || s.voxels == NULL) {
            free(order);
            tsdf_block_set_fini(&s);
            return TSDF_ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            order[i].key = v->block_keys[i];
            order[i].idx = (uint32_t)i;
        }
        qsort(order, n, sizeof(*order), cmp_key_index);
        for (size_t i = 0; i < n; i++) {
            uint32_t idx = order[i].idx;
            tsdf_block_key_unpack(order[i].key, &s.coords[3 * i], &s.coords[3 * i + 1],
                                  &s.coords[3 * i + 2]);
            s.versions[i] = v->block_versions[idx];
            memcpy(s.voxels + i * TSDF_BLOCK_VOXELS, v->voxels + (size_t)idx * TSDF_BLOCK_VOXELS,
                   TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
        }
        s.count = n;
        free(order);
    }
    tsdf_block_set_fini(out);
    s.version = v->version;
    *out = s;
    return TSDF_OK;
}

/* Builds the new content aside and swaps it in only when complete, so a
 * failure leaves the volume as it was. Every imported block gets the new
 * volume version, one above both the volume's and the set's: for
 * mesh(since_version) the whole content changed. */
static int cpu_import(void *impl, const tsdf_block_set *in)
{
    cpu_volume *v = impl;
    /* The version continues above the exporter's, so `mesh since` of a
     * client that saw the snapshot's versions still finds later changes. */
    const uint64_t version = (in->version > v->version ? in->version : v->version) + 1;
    cpu_volume fresh;
    uint64_t table_cap;
    /* The content is replaced, so is the colour flag: set when any imported
     * voxel has a colour. */
    int has_color = 0;
    int rc;

    memset(&fresh, 0, sizeof(fresh));
    fresh.params = v->params;
    if ((rc = cpu_hash_init(&fresh.table, v->initial_capacity, v->params.max_load_factor)) !=
        TSDF_OK)
        return rc;
    table_cap = cpu_hash_capacity_for(&fresh.table, in->count);
    if (v->params.memory_cap_bytes != 0 &&
        cpu_hash_bytes(table_cap) + pool_bytes(in->count) > v->params.memory_cap_bytes) {
        cpu_hash_fini(&fresh.table);
        return TSDF_ECAPACITY;
    }
    if ((rc = cpu_hash_reserve(&fresh.table, in->count)) != TSDF_OK ||
        (in->count != 0 && (rc = pool_resize(&fresh, (uint32_t)in->count)) != TSDF_OK)) {
        cpu_hash_fini(&fresh.table);
        pool_free(&fresh);
        return rc;
    }
    for (size_t i = 0; i < in->count; i++) {
        const int32_t *c = &in->coords[3 * i];
        uint64_t key = tsdf_block_key(c[0], c[1], c[2]);
        int inserted = 0;
        rc = cpu_hash_insert(&fresh.table, key, (uint32_t)i, NULL, &inserted);
        if (rc != TSDF_OK || !inserted) {
            cpu_hash_fini(&fresh.table);
            pool_free(&fresh);
            return rc != TSDF_OK ? rc : TSDF_EINVAL;
        }
        fresh.block_keys[i] = key;
        fresh.block_versions[i] = version;
        memcpy(fresh.voxels + i * TSDF_BLOCK_VOXELS, in->voxels + i * TSDF_BLOCK_VOXELS,
               TSDF_BLOCK_VOXELS * sizeof(tsdf_voxel));
        for (size_t k = 0; k < TSDF_BLOCK_VOXELS && !has_color; k++) {
            const uint8_t *rgb = in->voxels[i * TSDF_BLOCK_VOXELS + k].rgb;
            has_color = (rgb[0] | rgb[1] | rgb[2]) != 0;
        }
    }
    fresh.pool_count = (uint32_t)in->count;

    v->growth_events_before += v->table.growth_events;
    cpu_hash_fini(&v->table);
    pool_free(v);
    v->table = fresh.table;
    /* Growth while building the fresh table is an import, not a growth of
     * the volume's table under load. */
    v->table.growth_events = 0;
    v->block_keys = fresh.block_keys;
    v->block_versions = fresh.block_versions;
    v->voxels = fresh.voxels;
    v->pool_count = fresh.pool_count;
    v->pool_cap = fresh.pool_cap;
    v->has_color = has_color;
    v->version = version;
    return TSDF_OK;
}

/* ---- memory ------------------------------------------------------------------ */

/* The next allocation decision reads params.memory_cap_bytes, so changing it
 * is all a new cap needs; memory above it stays until reset or import. */
static int cpu_set_memory_cap(void *impl, uint64_t cap_bytes)
{
    cpu_volume *v = impl;
    v->params.memory_cap_bytes = cap_bytes;
    return TSDF_OK;
}

static uint64_t cpu_memory_bytes(void *impl)
{
    return memory_bytes(impl);
}

const tsdf_backend_ops tsdf_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .reset = cpu_reset,
    .integrate = cpu_integrate,
    .sync = cpu_sync,
    .raycast = cpu_raycast,
    .mesh = cpu_mesh,
    .stats = cpu_stats,
    .export_blocks = cpu_export,
    .import_blocks = cpu_import,
    .set_memory_cap = cpu_set_memory_cap,
    .memory_bytes = cpu_memory_bytes,
};
