/*
 * cpu_backend.c - the CPU reference backend: life cycle, statistics, the
 * block-store operations (select, read, write, erase) and the ops table.
 * Integration, raycast and mesh live in cpu_integrate.c, cpu_raycast.c and
 * cpu_mesh.c; the storage itself in cpu_store.c.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "tsdf_math.h"
#include "tsdf_sort.h"

_Static_assert(TSDF_MAX_CPU_THREADS == CPU_POOL_MAX_THREADS,
               "a volume's cpu_threads must fit its pool");

double cpu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int32_t cpu_volume_block(const cpu_volume *v, int32_t bx, int32_t by, int32_t bz)
{
    uint32_t idx;
    if (!tsdf_block_coord_valid(bx, by, bz))
        return -1;
    return cpu_hash_lookup(&v->store.table, tsdf_block_key(bx, by, bz), &idx) ? (int32_t)idx : -1;
}

/* ---- life cycle ------------------------------------------------------------ */

static void cpu_destroy(void *impl)
{
    cpu_volume *v = impl;
    if (v == NULL)
        return;
    cpu_pool_destroy(v->pool);
    cpu_store_fini(&v->store);
    cpu_hash_fini(&v->frame_set);
    free(v->frame_keys);
    free(v->frame_blocks);
    cpu_frame_scratch_fini(&v->scratch);
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
    if (p->memory_cap_bytes != 0 &&
        cpu_hash_bytes(cpu_hash_pow2(p->initial_capacity_blocks)) > p->memory_cap_bytes) {
        free(v);
        return TSDF_ECAPACITY;
    }
    rc = cpu_store_init(&v->store, p->layout, tsdf_quant_for(v->trunc_m),
                        p->initial_capacity_blocks, p->max_load_factor);
    if (rc != TSDF_OK)
        goto fail_store;
    if ((rc = cpu_hash_init(&v->frame_set, 4096, 0.5f)) != TSDF_OK)
        goto fail_frame_set;
    if ((rc = cpu_pool_create(p->cpu_threads, &v->pool)) != TSDF_OK)
        goto fail_pool;
    *impl = v;
    return TSDF_OK;

fail_pool:
    cpu_hash_fini(&v->frame_set);
fail_frame_set:
    cpu_store_fini(&v->store);
fail_store:
    free(v);
    return rc == TSDF_EINVAL ? TSDF_EBAD_PARAMS : rc;
}

static int cpu_reset(void *impl)
{
    cpu_volume *v = impl;
    int rc = cpu_store_clear(&v->store);
    if (rc != TSDF_OK)
        return rc;
    v->version++;
    return TSDF_OK;
}

static int cpu_sync(void *impl)
{
    (void)impl;
    return TSDF_OK;
}

/* ---- statistics ------------------------------------------------------------ */

static int cpu_stats(void *impl, tsdf_volume_stats *out, int probe)
{
    cpu_volume *v = impl;
    const cpu_store *s = &v->store;
    out->backend = TSDF_BACKEND_CPU;
    out->blocks_allocated = cpu_store_count(s);
    out->capacity_slots = s->table.capacity;
    out->load_factor = (double)s->table.count / (double)s->table.capacity;
    if (probe)
        cpu_hash_probe_stats(&s->table, &out->max_probe, &out->mean_probe, out->probe_hist);
    out->growth_events = s->growth_before + s->table.growth_events;
    out->frames_integrated = v->frames_integrated;
    out->frames_rejected = v->frames_rejected;
    out->insert_failures = v->insert_failures;
    out->memory_bytes = cpu_store_bytes(s);
    out->memory_cap_bytes = v->params.memory_cap_bytes;
    out->version = v->version;
    out->has_color = s->rgb != NULL;
    out->layout = s->layout;
    out->pool_capacity_blocks = s->pool_cap;
    out->blocks_erased = s->erased_total;
    out->last_upload_ms = v->last_upload_ms;
    out->last_alloc_ms = v->last_alloc_ms;
    out->last_update_ms = v->last_update_ms;
    out->last_raycast_ms = v->last_raycast_ms;
    out->last_mesh_ms = v->last_mesh_ms;
    return TSDF_OK;
}

/* ---- the block store ------------------------------------------------------ */

static int cpu_select(void *impl, const tsdf_block_select *q, uint64_t **keys, size_t *n)
{
    cpu_volume *v = impl;
    const cpu_store *s = &v->store;
    const float block_m = (float)TSDF_BLOCK_DIM * v->params.voxel_size_m;
    uint64_t *out = NULL;
    size_t count = 0;

    *keys = NULL;
    *n = 0;
    if (cpu_store_count(s) != 0) {
        out = malloc((size_t)cpu_store_count(s) * sizeof(*out));
        if (out == NULL)
            return TSDF_ENOMEM;
    }
    for (uint32_t i = 0; i < s->used; i++) {
        int32_t b[3];
        if (s->keys[i] == TSDF_KEY_EMPTY)
            continue;
        tsdf_block_key_unpack(s->keys[i], &b[0], &b[1], &b[2]);
        if (q == NULL || tsdf_block_selected(q, b, s->versions[i], block_m))
            out[count++] = s->keys[i];
    }
    if (count == 0) {
        free(out);
        return TSDF_OK;
    }
    tsdf_sort_u64(out, count);
    *keys = out;
    *n = count;
    return TSDF_OK;
}

static int cpu_read(void *impl, const uint64_t *keys, size_t n, tsdf_block_set *out)
{
    cpu_volume *v = impl;
    const cpu_store *s = &v->store;
    tsdf_block_set set;
    int rc;

    tsdf_block_set_init(&set);
    rc = tsdf_block_set_alloc(&set, n, s->layout, s->quant.unit_m, s->rgb != NULL);
    if (rc != TSDF_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int32_t idx = cpu_store_find(&v->store, keys[i]);
        if (idx < 0) {
            tsdf_block_set_fini(&set);
            return TSDF_EINTERNAL;
        }
        tsdf_block_key_unpack(keys[i], &set.coords[3 * i], &set.coords[3 * i + 1],
                              &set.coords[3 * i + 2]);
        set.versions[i] = s->versions[idx];
        memcpy((uint8_t *)set.geom + i * s->geom_block_bytes, cpu_store_geom(s, (uint32_t)idx),
               s->geom_block_bytes);
        if (set.rgb != NULL)
            memcpy(set.rgb + i * TSDF_BLOCK_RGB_BYTES, cpu_store_rgb(s, (uint32_t)idx),
                   TSDF_BLOCK_RGB_BYTES);
    }
    set.version = v->version;
    tsdf_block_set_fini(out);
    *out = set;
    return TSDF_OK;
}

/* Copies block i of *in into pool slot idx, stamped with version. */
static void write_block(cpu_store *s, uint32_t idx, const tsdf_block_set *in, size_t i,
                        uint64_t version)
{
    s->versions[idx] = version;
    memcpy(cpu_store_geom(s, idx), (const uint8_t *)in->geom + i * s->geom_block_bytes,
           s->geom_block_bytes);
    if (s->rgb != NULL) {
        uint8_t *dst = cpu_store_rgb(s, idx);
        if (in->rgb != NULL)
            memcpy(dst, in->rgb + i * TSDF_BLOCK_RGB_BYTES, TSDF_BLOCK_RGB_BYTES);
        else
            memset(dst, 0, TSDF_BLOCK_RGB_BYTES);
    }
}

/* Writes every block of *in into s, which has room for them. */
static int write_blocks(cpu_store *s, const tsdf_block_set *in, uint64_t version)
{
    for (size_t i = 0; i < in->count; i++) {
        const int32_t *c = &in->coords[3 * i];
        uint64_t key = tsdf_block_key(c[0], c[1], c[2]);
        int64_t idx = cpu_store_find(s, key);
        if (idx < 0 && (idx = cpu_store_add(s, key, version)) < 0)
            return (int)idx;
        write_block(s, (uint32_t)idx, in, i, version);
    }
    return TSDF_OK;
}

/* Import: the new content is built in a store of its own and swapped in
 * only when complete, so a failure leaves the volume as it was. */
static int write_replace(cpu_volume *v, const tsdf_block_set *in, uint64_t version)
{
    cpu_store fresh;
    int rc = cpu_store_init(&fresh, v->store.layout, v->store.quant, v->store.initial_slots,
                            v->store.table.max_load);
    if (rc != TSDF_OK)
        return rc;
    if ((rc = cpu_store_reserve(&fresh, in->count, in->rgb != NULL, v->params.memory_cap_bytes,
                                0)) != TSDF_OK ||
        (rc = write_blocks(&fresh, in, version)) != TSDF_OK) {
        cpu_store_fini(&fresh);
        return rc;
    }
    /* Growth while building the imported table is an import, not a growth
     * of the volume's table under load; the erase count stays the
     * volume's. */
    fresh.growth_before = v->store.growth_before + v->store.table.growth_events;
    fresh.table.growth_events = 0;
    fresh.erased_total = v->store.erased_total;
    cpu_store_fini(&v->store);
    v->store = fresh;
    return TSDF_OK;
}

static int cpu_write(void *impl, const tsdf_block_set *in, int replace, uint64_t version)
{
    cpu_volume *v = impl;
    int rc;
    if (replace) {
        rc = write_replace(v, in, version);
    } else {
        /* Reserving for every block (present ones too) keeps the check
         * simple and the invariant that nothing changes on failure: room
         * for blocks that turn out present is merely spare capacity. */
        uint64_t missing = 0;
        for (size_t i = 0; i < in->count; i++) {
            const int32_t *c = &in->coords[3 * i];
            missing += cpu_store_find(&v->store, tsdf_block_key(c[0], c[1], c[2])) < 0;
        }
        rc = cpu_store_reserve(&v->store, missing, in->rgb != NULL, v->params.memory_cap_bytes, 0);
        if (rc == TSDF_ECAPACITY)
            v->insert_failures += missing;
        if (rc == TSDF_OK)
            rc = write_blocks(&v->store, in, version);
    }
    if (rc != TSDF_OK)
        return rc;
    v->version = version;
    return TSDF_OK;
}

static int cpu_erase(void *impl, const uint64_t *keys, size_t n, size_t *erased)
{
    cpu_volume *v = impl;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = cpu_store_erase(&v->store, keys[i]);
        if (rc < 0)
            return rc;
        count += (size_t)rc;
    }
    if (count != 0)
        v->version++;
    *erased = count;
    return TSDF_OK;
}

static int cpu_find(void *impl, const uint64_t *keys, size_t n, uint8_t *present)
{
    cpu_volume *v = impl;
    for (size_t i = 0; i < n; i++)
        present[i] = cpu_store_find(&v->store, keys[i]) >= 0;
    return TSDF_OK;
}

/* ---- memory and version -------------------------------------------------------- */

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
    return cpu_store_bytes(&((cpu_volume *)impl)->store);
}

static uint64_t cpu_version(void *impl)
{
    return ((cpu_volume *)impl)->version;
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
    .set_memory_cap = cpu_set_memory_cap,
    .memory_bytes = cpu_memory_bytes,
    .version = cpu_version,
    .select = cpu_select,
    .read = cpu_read,
    .write = cpu_write,
    .erase = cpu_erase,
    .find = cpu_find,
};
