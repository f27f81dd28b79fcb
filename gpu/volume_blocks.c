/*
 * volume_blocks.c - blocks in and out of a volume, written once over the
 * backends' block stores (tsdf_backend.h): block sets and their voxels,
 * export, import, writes, selections and eviction, and the record of
 * removed blocks that incremental meshes report.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_math.h"
#include "tsdf_sort.h"
#include "tsdf_pose.h"
#include "volume_internal.h"

/* ---- block sets ------------------------------------------------------------ */

void tsdf_block_set_init(tsdf_block_set *s)
{
    if (s != NULL)
        memset(s, 0, sizeof(*s));
}

void tsdf_block_set_fini(tsdf_block_set *s)
{
    if (s == NULL)
        return;
    free(s->coords);
    free(s->versions);
    free(s->geom);
    free(s->rgb);
    tsdf_block_set_init(s);
}

int tsdf_block_set_alloc(tsdf_block_set *s, size_t count, tsdf_layout layout, float sdf_unit_m,
                         int with_rgb)
{
    const size_t geom = tsdf_layout_block_bytes(layout);
    if (s == NULL || geom == 0)
        return TSDF_EINVAL;
    tsdf_block_set_fini(s);
    if (count > (size_t)VOLUME_BLOCK_SET_MAX)
        return TSDF_ETOO_LARGE;
    /* calloc of at least one element, so a set of none still has arrays
     * (a NULL geom means "no set" to the checks). */
    const size_t n = count != 0 ? count : 1;
    s->coords = calloc(3 * n, sizeof(*s->coords));
    s->versions = calloc(n, sizeof(*s->versions));
    s->geom = calloc(n, geom);
    s->rgb = with_rgb ? calloc(n, TSDF_BLOCK_RGB_BYTES) : NULL;
    if (s->coords == NULL || s->versions == NULL || s->geom == NULL ||
        (with_rgb && s->rgb == NULL)) {
        tsdf_block_set_fini(s);
        return TSDF_ENOMEM;
    }
    s->count = count;
    s->layout = layout;
    s->sdf_unit_m = sdf_unit_m;
    return TSDF_OK;
}

size_t tsdf_block_set_geom_bytes(const tsdf_block_set *s)
{
    return s != NULL ? s->count * tsdf_layout_block_bytes(s->layout) : 0;
}

static tsdf_quant set_quant(const tsdf_block_set *s)
{
    tsdf_quant q;
    q.unit_m = s->sdf_unit_m;
    q.inv_unit = s->sdf_unit_m > 0.0f ? 1.0f / s->sdf_unit_m : 0.0f;
    return q;
}

tsdf_vox tsdf_block_set_get(const tsdf_block_set *s, size_t i, unsigned v)
{
    return tsdf_vox_load(s->layout, s->geom, i * TSDF_BLOCK_VOXELS + v, set_quant(s));
}

void tsdf_block_set_put(tsdf_block_set *s, size_t i, unsigned v, tsdf_vox x)
{
    tsdf_vox_store(s->layout, s->geom, i * TSDF_BLOCK_VOXELS + v, x, set_quant(s));
}

/* The quantisation of v's layout: what its backend stores with. */
static tsdf_quant volume_quant(const tsdf_volume *v)
{
    return tsdf_quant_for(v->params.trunc_vox * v->params.voxel_size_m);
}

/* 1 when the set's channels are stored exactly as v stores its own. */
static int same_storage(const tsdf_volume *v, const tsdf_block_set *in)
{
    return in->layout == v->params.layout &&
           (in->layout == TSDF_LAYOUT_F32 || in->sdf_unit_m == volume_quant(v).unit_m);
}

/* Everything the header promises about a set written into v, checked
 * before the backend changes anything: coordinates in range, no duplicate,
 * every voxel's sdf finite and within the truncation band, weights in
 * [0, max_weight]. */
static int block_set_validate(const tsdf_volume *v, const tsdf_block_set *in)
{
    const tsdf_volume_params *p = &v->params;
    const float trunc_m = p->trunc_vox * p->voxel_size_m;
    /* The stored sdf is a weighted mean of values clamped to +-trunc; allow
     * the rounding of that mean and of a snapshot's conversions. */
    const float sdf_limit = trunc_m * (1.0f + 1e-4f);
    uint64_t *keys;
    int rc = TSDF_OK;

    if (in->count == 0)
        return TSDF_OK;
    if (in->coords == NULL || in->geom == NULL || tsdf_layout_voxel_bytes(in->layout) == 0)
        return TSDF_EINVAL;
    if (in->layout == TSDF_LAYOUT_S16 && !(isfinite(in->sdf_unit_m) && in->sdf_unit_m > 0.0f))
        return TSDF_EINVAL;
    if (in->count > (size_t)VOLUME_BLOCK_SET_MAX)
        return TSDF_ETOO_LARGE;
    keys = malloc(in->count * sizeof(*keys));
    if (keys == NULL)
        return TSDF_ENOMEM;
    for (size_t i = 0; i < in->count; i++) {
        const int32_t *c = &in->coords[3 * i];
        if (!tsdf_block_coord_valid(c[0], c[1], c[2])) {
            rc = TSDF_EINVAL;
            goto out;
        }
        keys[i] = tsdf_block_key(c[0], c[1], c[2]);
    }
    tsdf_sort_u64(keys, in->count);
    for (size_t i = 1; i < in->count; i++) {
        if (keys[i] == keys[i - 1]) {
            rc = TSDF_EINVAL;
            goto out;
        }
    }
    for (size_t i = 0; i < in->count; i++) {
        for (unsigned k = 0; k < TSDF_BLOCK_VOXELS; k++) {
            tsdf_vox x = tsdf_block_set_get(in, i, k);
            if (!isfinite(x.sdf_m) || fabsf(x.sdf_m) > sdf_limit || !isfinite(x.weight) ||
                x.weight < 0.0f || x.weight > p->max_weight) {
                rc = TSDF_EINVAL;
                goto out;
            }
        }
    }
out:
    free(keys);
    return rc;
}

/* *in in v's storage: *in itself when it already is (*conv untouched),
 * else a converted copy in *conv (the caller frees it). */
static int to_volume_storage(const tsdf_volume *v, const tsdf_block_set *in, tsdf_block_set *conv,
                             const tsdf_block_set **out)
{
    int rc;
    *out = in;
    if (in->count == 0 || same_storage(v, in))
        return TSDF_OK;
    rc = tsdf_block_set_alloc(conv, in->count, v->params.layout, volume_quant(v).unit_m,
                              in->rgb != NULL);
    if (rc != TSDF_OK)
        return rc;
    memcpy(conv->coords, in->coords, 3 * in->count * sizeof(*in->coords));
    if (in->versions != NULL)
        memcpy(conv->versions, in->versions, in->count * sizeof(*in->versions));
    if (in->rgb != NULL)
        memcpy(conv->rgb, in->rgb, in->count * TSDF_BLOCK_RGB_BYTES);
    for (size_t i = 0; i < in->count; i++)
        for (unsigned k = 0; k < TSDF_BLOCK_VOXELS; k++)
            tsdf_block_set_put(conv, i, k, tsdf_block_set_get(in, i, k));
    conv->version = in->version;
    *out = conv;
    return TSDF_OK;
}

/* Validates *in and writes it through the backend at version. */
static int write_set(tsdf_volume *v, const tsdf_block_set *in, int replace, uint64_t version)
{
    const tsdf_block_set *src;
    tsdf_block_set conv;
    int rc;
    if ((rc = block_set_validate(v, in)) != TSDF_OK)
        return rc;
    tsdf_block_set_init(&conv);
    if ((rc = to_volume_storage(v, in, &conv, &src)) == TSDF_OK)
        rc = v->ops->write(v->impl, src, replace, version);
    tsdf_block_set_fini(&conv);
    return rc;
}

/* ---- removed blocks --------------------------------------------------------- */

int volume_note_removed(tsdf_volume *v, const uint64_t *keys, size_t n, uint64_t version)
{
    if (n > VOLUME_REMOVED_MAX) {
        /* More than the record holds at once: nothing older can be told. */
        volume_forget_removed(v, version);
        return TSDF_OK;
    }
    if (v->removed_count + n > VOLUME_REMOVED_MAX) {
        /* Forget the oldest half (or more): a client behind them gets a
         * full mesh. */
        size_t drop = v->removed_count / 2;
        if (v->removed_count - drop + n > VOLUME_REMOVED_MAX)
            drop = v->removed_count + n - VOLUME_REMOVED_MAX;
        v->removed_floor = v->removed[drop - 1].version;
        memmove(v->removed, v->removed + drop, (v->removed_count - drop) * sizeof(*v->removed));
        v->removed_count -= drop;
    }
    if (v->removed_count + n > v->removed_cap) {
        size_t cap = v->removed_cap != 0 ? v->removed_cap : 1024;
        while (cap < v->removed_count + n)
            cap *= 2;
        if (cap > VOLUME_REMOVED_MAX)
            cap = VOLUME_REMOVED_MAX;
        volume_removed *r = realloc(v->removed, cap * sizeof(*r));
        if (r == NULL) {
            /* Without room to remember them, forgetting everything keeps
             * incremental meshes right (they become full ones). */
            volume_forget_removed(v, version);
            return TSDF_OK;
        }
        v->removed = r;
        v->removed_cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        v->removed[v->removed_count].key = keys[i];
        v->removed[v->removed_count].version = version;
        v->removed_count++;
    }
    return TSDF_OK;
}

void volume_forget_removed(tsdf_volume *v, uint64_t version)
{
    v->removed_count = 0;
    v->removed_floor = version;
}

/* ---- export, import, selections, eviction ------------------------------------ */

int tsdf_block_select_check(const tsdf_block_select *q)
{
    if (q == NULL)
        return TSDF_OK;
    if ((q->rules & ~TSDF_SELECT_RULES) != 0)
        return TSDF_EINVAL;
    if (q->rules & (TSDF_SELECT_OUTSIDE_RADIUS | TSDF_SELECT_INSIDE_RADIUS)) {
        for (int a = 0; a < 3; a++)
            if (!isfinite(q->center_m[a]))
                return TSDF_EINVAL;
        if (!(isfinite(q->radius_m) && q->radius_m >= 0.0f))
            return TSDF_EINVAL;
    }
    if (q->rules & (TSDF_SELECT_OUTSIDE_BOX | TSDF_SELECT_INSIDE_BOX)) {
        for (int a = 0; a < 3; a++)
            if (!isfinite(q->box.min[a]) || !isfinite(q->box.max[a]) ||
                q->box.min[a] > q->box.max[a])
                return TSDF_EINVAL;
    }
    if (q->rules & (TSDF_SELECT_INSIDE_FRUSTUM | TSDF_SELECT_OUTSIDE_FRUSTUM)) {
        const tsdf_frustum *f = &q->frustum;
        if (!tsdf_pose_is_rigid(f->T_world_cam) ||
            tsdf_intrinsics_check(&f->K, f->width, f->height) != TSDF_OK ||
            !(isfinite(f->near_m) && isfinite(f->far_m) && f->near_m >= 0.0f &&
              f->near_m < f->far_m))
            return TSDF_EINVAL;
    }
    return TSDF_OK;
}

int tsdf_volume_select(tsdf_volume *v, const tsdf_block_select *q, int32_t **coords, size_t *n)
{
    uint64_t *keys = NULL;
    size_t count = 0;
    int rc;
    if (v == NULL || coords == NULL || n == NULL)
        return TSDF_EINVAL;
    *coords = NULL;
    *n = 0;
    if ((rc = tsdf_block_select_check(q)) != TSDF_OK)
        return rc;
    if ((rc = v->ops->select(v->impl, q, &keys, &count)) != TSDF_OK)
        return rc;
    if (count != 0) {
        int32_t *c = malloc(3 * count * sizeof(*c));
        if (c == NULL) {
            free(keys);
            return TSDF_ENOMEM;
        }
        for (size_t i = 0; i < count; i++)
            tsdf_block_key_unpack(keys[i], &c[3 * i], &c[3 * i + 1], &c[3 * i + 2]);
        *coords = c;
        *n = count;
    }
    free(keys);
    return TSDF_OK;
}

/* The blocks q selects, copied into *out (sorted by key); their keys in
 * *keys (the caller frees them). */
static int read_selected(tsdf_volume *v, const tsdf_block_select *q, tsdf_block_set *out,
                         uint64_t **keys, size_t *n)
{
    int rc = v->ops->select(v->impl, q, keys, n);
    if (rc != TSDF_OK)
        return rc;
    if (out != NULL && (rc = v->ops->read(v->impl, *keys, *n, out)) != TSDF_OK) {
        free(*keys);
        *keys = NULL;
        *n = 0;
    }
    return rc;
}

int tsdf_volume_export_blocks(tsdf_volume *v, tsdf_block_set *out)
{
    uint64_t *keys = NULL;
    size_t n = 0;
    int rc;
    if (v == NULL || out == NULL)
        return TSDF_EINVAL;
    rc = read_selected(v, NULL, out, &keys, &n);
    free(keys);
    return rc;
}

int tsdf_volume_import_blocks(tsdf_volume *v, const tsdf_block_set *in)
{
    int rc;
    if (v == NULL || in == NULL)
        return TSDF_EINVAL;
    /* The version continues above the exporter's, so `mesh since` of a
     * client that saw the snapshot's versions still finds later changes;
     * the whole content changed at once, so an older `since` is answered
     * with everything. */
    const uint64_t cur = v->ops->version(v->impl);
    const uint64_t version = (in->version > cur ? in->version : cur) + 1;
    if ((rc = write_set(v, in, 1, version)) != TSDF_OK)
        return rc;
    volume_forget_removed(v, version);
    return TSDF_OK;
}

int tsdf_volume_write_blocks(tsdf_volume *v, const tsdf_block_set *in)
{
    if (v == NULL || in == NULL)
        return TSDF_EINVAL;
    if (in->count == 0)
        return TSDF_OK;
    return write_set(v, in, 0, v->ops->version(v->impl) + 1);
}

int tsdf_volume_evict(tsdf_volume *v, const tsdf_block_select *q, tsdf_block_set *out,
                      size_t *erased)
{
    uint64_t *keys = NULL;
    size_t n = 0, gone = 0;
    int rc;
    if (erased != NULL)
        *erased = 0;
    if (v == NULL)
        return TSDF_EINVAL;
    if ((rc = tsdf_block_select_check(q)) != TSDF_OK)
        return rc;
    if ((rc = read_selected(v, q, out, &keys, &n)) != TSDF_OK)
        return rc;
    if (n != 0)
        rc = v->ops->erase(v->impl, keys, n, &gone);
    if (rc == TSDF_OK && gone != 0)
        rc = volume_note_removed(v, keys, n, v->ops->version(v->impl));
    free(keys);
    if (erased != NULL)
        *erased = gone;
    return rc;
}
