/*
 * cpu_store.c - the CPU backend's block store (see cpu_store.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_store.h"
#include "tsdf_math.h"

/* Bytes of one pool slot: key, version, free-list entry, channels. */
static uint64_t slot_bytes(const cpu_store *s, int with_rgb)
{
    return tsdf_pool_block_bytes(s->layout, with_rgb);
}

static uint64_t content_bytes(const cpu_store *s, uint64_t table_slots, uint64_t pool_slots,
                              int with_rgb)
{
    return cpu_hash_bytes(table_slots) + pool_slots * slot_bytes(s, with_rgb);
}

uint64_t cpu_store_bytes(const cpu_store *s)
{
    return content_bytes(s, s->table.capacity, s->pool_cap, s->rgb != NULL);
}

int cpu_store_init(cpu_store *s, tsdf_layout layout, tsdf_quant quant, uint64_t initial_slots,
                   float max_load)
{
    memset(s, 0, sizeof(*s));
    if (tsdf_layout_voxel_bytes(layout) == 0)
        return TSDF_EINVAL;
    s->layout = layout;
    s->quant = quant;
    s->geom_block_bytes = tsdf_layout_block_bytes(layout);
    s->initial_slots = cpu_hash_pow2(initial_slots);
    return cpu_hash_init(&s->table, s->initial_slots, max_load);
}

static void pool_free(cpu_store *s)
{
    free(s->keys);
    free(s->versions);
    free(s->geom);
    free(s->rgb);
    free(s->free_list);
    s->keys = NULL;
    s->versions = NULL;
    s->geom = NULL;
    s->rgb = NULL;
    s->free_list = NULL;
    s->free_count = 0;
    s->used = 0;
    s->pool_cap = 0;
}

void cpu_store_fini(cpu_store *s)
{
    cpu_hash_fini(&s->table);
    pool_free(s);
}

int cpu_store_clear(cpu_store *s)
{
    cpu_hash fresh;
    int rc = cpu_hash_init(&fresh, s->initial_slots, s->table.max_load);
    if (rc != TSDF_OK)
        return rc;
    s->growth_before += s->table.growth_events;
    cpu_hash_fini(&s->table);
    s->table = fresh;
    pool_free(s);
    return TSDF_OK;
}

int32_t cpu_store_find(cpu_store *s, uint64_t key)
{
    uint32_t idx;
    if (cpu_hash_find(&s->table, key, &idx) != 1)
        return -1;
    return (int32_t)idx;
}

/* realloc that leaves *p alone when it fails. */
static int grow_array(void **p, size_t bytes)
{
    void *n = realloc(*p, bytes != 0 ? bytes : 1);
    if (n == NULL)
        return TSDF_ENOMEM;
    *p = n;
    return TSDF_OK;
}

/* Resizes the pool to cap slots (cap >= used). On failure the arrays that
 * did grow are merely larger than pool_cap says, which is harmless. */
static int pool_resize(cpu_store *s, uint32_t cap, int with_rgb)
{
    int rc;
    if ((rc = grow_array((void **)&s->keys, (size_t)cap * sizeof(uint64_t))) != TSDF_OK ||
        (rc = grow_array((void **)&s->versions, (size_t)cap * sizeof(uint64_t))) != TSDF_OK ||
        (rc = grow_array((void **)&s->free_list, (size_t)cap * sizeof(uint32_t))) != TSDF_OK ||
        (rc = grow_array(&s->geom, (size_t)cap * s->geom_block_bytes)) != TSDF_OK)
        return rc;
    if (with_rgb) {
        int had = s->rgb != NULL;
        if ((rc = grow_array((void **)&s->rgb, (size_t)cap * TSDF_BLOCK_RGB_BYTES)) != TSDF_OK)
            return rc;
        /* A new colour channel starts black for the blocks already there,
         * as their colour was before colour arrived. */
        if (!had)
            memset(s->rgb, 0, (size_t)cap * TSDF_BLOCK_RGB_BYTES);
    }
    s->pool_cap = cap;
    return TSDF_OK;
}

int cpu_store_reserve(cpu_store *s, uint64_t more, int with_rgb, uint64_t cap_bytes,
                      uint64_t headroom)
{
    const int rgb = with_rgb || s->rgb != NULL;
    const uint64_t blocks = cpu_store_count(s) + more;
    /* New blocks take free slots first; the rest extend the used range. */
    const uint64_t fresh = more > s->free_count ? more - s->free_count : 0;
    const uint64_t need = (uint64_t)s->used + fresh;
    uint64_t table_cap, target;
    int rc;

    if (blocks > CPU_STORE_MAX_BLOCKS || need > CPU_STORE_MAX_BLOCKS)
        return TSDF_ECAPACITY;
    table_cap = cpu_hash_capacity_for(&s->table, blocks);
    /* The pool may already be larger than need (spare slots): the cap is
     * checked against what the content will hold. */
    target = need > s->pool_cap ? need : s->pool_cap;
    if (cap_bytes != 0 &&
        (table_cap != s->table.capacity || target != s->pool_cap || rgb != (s->rgb != NULL)) &&
        content_bytes(s, table_cap, target, rgb) > cap_bytes)
        return TSDF_ECAPACITY;
    if (need > s->pool_cap || (rgb && s->rgb == NULL)) {
        /* A sixteenth more, or the caller's headroom: growth stays rare and
         * the spare capacity small, never past what the cap leaves. */
        uint64_t spare = s->pool_cap / 16;
        if (spare < headroom)
            spare = headroom;
        if (need > s->pool_cap)
            target = need + spare;
        if (target > CPU_STORE_MAX_BLOCKS)
            target = need;
        /* Near the cap, exactly what is needed (which fits: checked
         * above). Spare slots up to the cap would hold memory that other
         * maps under the same daemon-wide budget then could not get. */
        if (cap_bytes != 0 && content_bytes(s, table_cap, target, rgb) > cap_bytes)
            target = need > s->pool_cap ? need : s->pool_cap;
        if ((rc = pool_resize(s, (uint32_t)target, rgb)) != TSDF_OK)
            return rc;
    }
    return cpu_hash_reserve(&s->table, blocks);
}

int cpu_store_enable_rgb(cpu_store *s)
{
    if (s->rgb != NULL)
        return TSDF_OK;
    return pool_resize(s, s->pool_cap, 1);
}

int64_t cpu_store_add(cpu_store *s, uint64_t key, uint64_t version)
{
    uint32_t idx;
    int inserted = 0, rc;
    if (s->free_count > 0)
        idx = s->free_list[s->free_count - 1];
    else if (s->used < s->pool_cap)
        idx = s->used;
    else
        return TSDF_EINTERNAL;
    rc = cpu_hash_insert(&s->table, key, idx, NULL, &inserted);
    if (rc != TSDF_OK)
        return rc;
    if (!inserted)
        return TSDF_EINTERNAL;
    if (s->free_count > 0)
        s->free_count--;
    else
        s->used++;
    s->keys[idx] = key;
    s->versions[idx] = version;
    memset(cpu_store_geom(s, idx), 0, s->geom_block_bytes);
    if (s->rgb != NULL)
        memset(cpu_store_rgb(s, idx), 0, TSDF_BLOCK_RGB_BYTES);
    return idx;
}

int cpu_store_erase(cpu_store *s, uint64_t key)
{
    uint32_t idx;
    int rc = cpu_hash_erase(&s->table, key, &idx);
    if (rc != 1)
        return rc;
    s->keys[idx] = TSDF_KEY_EMPTY;
    s->free_list[s->free_count++] = idx;
    s->erased_total++;
    return 1;
}
