/*
 * volume_mesh.c - what a mesh covers, written once for both backends: the
 * blocks of a box, the blocks an incremental mesh must redo (changed ones,
 * and those whose cells reach into a block that changed or went), the
 * blocks that went since a version, and the regrouping of a mesh into one
 * part per block. The backends only run marching cubes over a list of
 * blocks (tsdf_backend_ops.mesh).
 *
 * A cell belongs to the block of its minimum corner and reads the block's
 * +x/+y/+z neighbours, so when a block changes or goes, the cells of the
 * blocks at -1 in any combination of axes (7 of them) change too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_math.h"
#include "tsdf_sort.h"
#include "volume_internal.h"

/* Appends the keys of b - (dx, dy, dz) for dx, dy, dz in {0, 1} (b itself
 * included) that are valid block coordinates. */
static size_t push_minus_neighbours(uint64_t key, uint64_t *out)
{
    int32_t b[3];
    size_t n = 0;
    tsdf_block_key_unpack(key, &b[0], &b[1], &b[2]);
    for (int k = 0; k < 8; k++) {
        int32_t x = b[0] - (k & 1), y = b[1] - ((k >> 1) & 1), z = b[2] - ((k >> 2) & 1);
        if (tsdf_block_coord_valid(x, y, z))
            out[n++] = tsdf_block_key(x, y, z);
    }
    return n;
}

/* Sorts keys[0 .. n) and drops duplicates; returns the new count. */
static size_t sort_unique(uint64_t *keys, size_t n)
{
    size_t m = 0;
    if (n == 0)
        return 0;
    tsdf_sort_u64(keys, n);
    for (size_t i = 1; i < n; i++)
        if (keys[i] != keys[m])
            keys[++m] = keys[i];
    return m + 1;
}

/* Keeps the keys whose blocks intersect box; returns the new count. */
static size_t filter_box(const tsdf_volume *v, const tsdf_aabb *box, uint64_t *keys, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b[3];
        tsdf_block_key_unpack(keys[i], &b[0], &b[1], &b[2]);
        if (tsdf_block_in_box(b, volume_block_m(v), box))
            keys[m++] = keys[i];
    }
    return m;
}

/* The blocks removed after `since` that are absent now (a block brought
 * back later is a changed block instead), sorted: *out, *n. */
static int removed_since(tsdf_volume *v, uint64_t since, uint64_t **out, size_t *n)
{
    size_t count = 0;
    uint64_t *keys;
    uint8_t *present;
    int rc;

    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < v->removed_count; i++)
        count += v->removed[i].version > since;
    if (count == 0)
        return TSDF_OK;
    keys = malloc(count * sizeof(*keys));
    present = malloc(count);
    if (keys == NULL || present == NULL) {
        free(keys);
        free(present);
        return TSDF_ENOMEM;
    }
    count = 0;
    for (size_t i = 0; i < v->removed_count; i++)
        if (v->removed[i].version > since)
            keys[count++] = v->removed[i].key;
    count = sort_unique(keys, count);
    rc = v->ops->find(v->impl, keys, count, present);
    if (rc == TSDF_OK) {
        size_t m = 0;
        for (size_t i = 0; i < count; i++)
            if (!present[i])
                keys[m++] = keys[i];
        count = m;
    }
    free(present);
    if (rc != TSDF_OK || count == 0) {
        free(keys);
        return rc;
    }
    *out = keys;
    *n = count;
    return TSDF_OK;
}

/* The blocks an incremental mesh since `since` redoes: those changed after
 * it, and every block whose cells reach into one that changed or went. */
static int redo_since(tsdf_volume *v, uint64_t since, const uint64_t *removed, size_t nremoved,
                      uint64_t **out, size_t *n)
{
    tsdf_block_select q;
    uint64_t *changed = NULL, *keys;
    size_t nchanged = 0, count = 0;
    int rc;

    memset(&q, 0, sizeof(q));
    q.rules = TSDF_SELECT_SINCE;
    q.version = since;
    if ((rc = v->ops->select(v->impl, &q, &changed, &nchanged)) != TSDF_OK)
        return rc;
    *out = NULL;
    *n = 0;
    if (nchanged + nremoved == 0) {
        free(changed);
        return TSDF_OK;
    }
    keys = malloc(8 * (nchanged + nremoved) * sizeof(*keys));
    if (keys == NULL) {
        free(changed);
        return TSDF_ENOMEM;
    }
    for (size_t i = 0; i < nchanged; i++)
        count += push_minus_neighbours(changed[i], keys + count);
    for (size_t i = 0; i < nremoved; i++)
        count += push_minus_neighbours(removed[i], keys + count);
    free(changed);
    *out = keys;
    *n = sort_unique(keys, count);
    return TSDF_OK;
}

/* ---- parts by block ------------------------------------------------------ */

/* The index of key in keys[0 .. n) (ascending; it must be there). */
static size_t find_key(const uint64_t *keys, size_t n, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* A run of consecutive triangles owned by one block. */
typedef struct {
    uint32_t start, end; /* triangles [start, end) */
    uint32_t part;       /* the block's index in the parts */
} tri_run;

/* By part, then by position: the triangles' order within a part stays. */
static int cmp_run(const void *a, const void *b)
{
    const tri_run *x = a, *y = b;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Rewrites *m (shared vertices; triangle t owned by block tri_keys[t])
 * into one part per block of blocks[0 .. nblocks) (ascending), each with
 * its own copies of the vertices its triangles use, numbered in the order
 * its triangles use them. A backend lists a block's triangles together,
 * so the triangles are moved as runs (a few thousand), not one by one;
 * runs of one block in several places keep their order. */
static int split_by_block(tsdf_mesh *m, const uint64_t *tri_keys, const uint64_t *blocks,
                          size_t nblocks)
{
    const size_t T = m->triangle_count, V = m->vertex_count;
    if (3 * T > UINT32_MAX || V >= UINT32_MAX || nblocks >= UINT32_MAX)
        return TSDF_ETOO_LARGE;
    size_t nruns = 0;
    for (size_t t = 0; t < T; t++)
        nruns += t == 0 || tri_keys[t] != tri_keys[t - 1];
    uint32_t *tri_start = calloc(nblocks + 1, sizeof(*tri_start));
    uint32_t *vert_start = calloc(nblocks + 1, sizeof(*vert_start));
    int32_t *coords = malloc((nblocks ? nblocks : 1) * 3 * sizeof(*coords));
    tri_run *runs = malloc((nruns ? nruns : 1) * sizeof(*runs));
    /* The part the old vertex was last copied into, and its copy there. */
    uint32_t *seen_in = malloc((V ? V : 1) * sizeof(*seen_in));
    uint32_t *new_id = malloc((V ? V : 1) * sizeof(*new_id));
    /* The old vertex of each copy: at most three a triangle. */
    uint32_t *src = malloc((T ? 3 * T : 1) * sizeof(*src));
    uint32_t *idx = malloc((T ? T : 1) * 3 * sizeof(uint32_t));
    float *pos = NULL, *nrm = NULL;
    uint8_t *col = NULL;
    int rc = TSDF_ENOMEM;

    if (!tri_start || !vert_start || !coords || !runs || !seen_in || !new_id || !src || !idx)
        goto out;
    for (size_t t = 0, r = 0; t < T; t++) {
        if (t > 0 && tri_keys[t] == tri_keys[t - 1]) {
            runs[r - 1].end++;
            continue;
        }
        runs[r].start = (uint32_t)t;
        runs[r].end = (uint32_t)t + 1;
        runs[r].part = (uint32_t)find_key(blocks, nblocks, tri_keys[t]);
        r++;
    }
    qsort(runs, nruns, sizeof(*runs), cmp_run);
    memset(seen_in, 0xff, (V ? V : 1) * sizeof(*seen_in));
    uint32_t nv = 0, k = 0;
    size_t r = 0;
    for (size_t p = 0; p < nblocks; p++) {
        tri_start[p] = k;
        vert_start[p] = nv;
        tsdf_block_key_unpack(blocks[p], &coords[3 * p], &coords[3 * p + 1], &coords[3 * p + 2]);
        for (; r < nruns && runs[r].part == p; r++) {
            for (uint32_t t = runs[r].start; t < runs[r].end; t++, k++) {
                const uint32_t *tri = &m->indices[3 * (size_t)t];
                for (int j = 0; j < 3; j++) {
                    uint32_t o = tri[j];
                    if (seen_in[o] != (uint32_t)p) {
                        seen_in[o] = (uint32_t)p;
                        new_id[o] = nv;
                        src[nv++] = o;
                    }
                    idx[3 * (size_t)k + j] = new_id[o];
                }
            }
        }
    }
    tri_start[nblocks] = k;
    vert_start[nblocks] = nv;

    /* The copies, sized now that their count is known. */
    pos = malloc((nv ? (size_t)nv : 1) * 3 * sizeof(float));
    nrm = malloc((nv ? (size_t)nv : 1) * 3 * sizeof(float));
    col = m->colors != NULL ? malloc((nv ? (size_t)nv : 1) * 3) : NULL;
    if (!pos || !nrm || (m->colors != NULL && !col))
        goto out;
    for (uint32_t i = 0; i < nv; i++) {
        const size_t o = 3 * (size_t)src[i];
        memcpy(&pos[3 * (size_t)i], &m->positions[o], 3 * sizeof(float));
        memcpy(&nrm[3 * (size_t)i], &m->normals[o], 3 * sizeof(float));
        if (col != NULL)
            memcpy(&col[3 * (size_t)i], &m->colors[o], 3);
    }
    tsdf_mesh_fini(m);
    m->vertex_count = nv;
    m->triangle_count = T;
    m->positions = pos;
    m->normals = nrm;
    m->colors = col;
    m->indices = idx;
    m->block_count = nblocks;
    m->block_coords = coords;
    m->block_vertex_start = vert_start;
    m->block_triangle_start = tri_start;
    pos = nrm = NULL;
    col = NULL;
    idx = vert_start = tri_start = NULL;
    coords = NULL;
    rc = TSDF_OK;
out:
    free(tri_start);
    free(vert_start);
    free(coords);
    free(runs);
    free(seen_in);
    free(new_id);
    free(src);
    free(pos);
    free(nrm);
    free(col);
    free(idx);
    return rc;
}

/* The coordinates of keys[0 .. n), into a new array (NULL when n is 0). */
static int coords_of(const uint64_t *keys, size_t n, int32_t **out)
{
    *out = NULL;
    if (n == 0)
        return TSDF_OK;
    int32_t *c = malloc(3 * n * sizeof(*c));
    if (c == NULL)
        return TSDF_ENOMEM;
    for (size_t i = 0; i < n; i++)
        tsdf_block_key_unpack(keys[i], &c[3 * i], &c[3 * i + 1], &c[3 * i + 2]);
    *out = c;
    return TSDF_OK;
}

int tsdf_volume_mesh(tsdf_volume *v, const tsdf_mesh_params *params, tsdf_mesh *out)
{
    tsdf_mesh_params p;
    uint64_t *keys = NULL, *removed = NULL, *tri_keys = NULL, *meshed = NULL;
    size_t nkeys = 0, nremoved = 0, nmeshed = 0;
    int all = 0, full = 0, rc;
    tsdf_mesh m;

    if (v == NULL || out == NULL)
        return TSDF_EINVAL;
    memset(&p, 0, sizeof(p));
    if (params != NULL)
        p = *params;
    if (p.use_box) {
        for (int i = 0; i < 3; i++) {
            if (!isfinite(p.box.min[i]) || !isfinite(p.box.max[i]) || p.box.min[i] > p.box.max[i])
                return TSDF_EINVAL;
        }
    }
    /* An incremental mesh the record of removals cannot answer covers the
     * whole volume, and says so. */
    if (p.since_version != 0 && p.since_version < v->removed_floor) {
        full = 1;
        p.since_version = 0;
    }
    if (p.since_version != 0) {
        if ((rc = removed_since(v, p.since_version, &removed, &nremoved)) != TSDF_OK ||
            (rc = redo_since(v, p.since_version, removed, nremoved, &keys, &nkeys)) != TSDF_OK)
            goto out;
    } else if (p.use_box || p.by_block) {
        tsdf_block_select q;
        memset(&q, 0, sizeof(q));
        if (p.use_box) {
            q.rules = TSDF_SELECT_INSIDE_BOX;
            q.box = p.box;
        }
        if ((rc = v->ops->select(v->impl, &q, &keys, &nkeys)) != TSDF_OK)
            goto out;
    } else {
        all = 1;
    }
    if (p.use_box) {
        nkeys = filter_box(v, &p.box, keys, nkeys);
        nremoved = filter_box(v, &p.box, removed, nremoved);
    }

    tsdf_mesh_init(&m);
    /* The caller's arrays from an earlier mesh go to the backend for reuse:
     * memory already mapped costs nothing, where fresh memory takes a page
     * fault every 4 KiB, which was most of a large mesh's way to the host
     * (15 ms of 16 MB against 2 ms reused, measured on the development
     * machine). out is left empty on failure. */
    if (all || nkeys != 0) {
        m.positions = out->positions;
        m.normals = out->normals;
        m.colors = out->colors;
        m.indices = out->indices;
        out->positions = out->normals = NULL;
        out->colors = NULL;
        out->indices = NULL;
        tsdf_mesh_fini(out);
        rc = v->ops->mesh(v->impl, all ? NULL : keys, nkeys, &m, p.by_block ? &tri_keys : NULL,
                          p.by_block ? &meshed : NULL, &nmeshed);
        if (rc == TSDF_OK && p.by_block)
            rc = split_by_block(&m, tri_keys, meshed, nmeshed);
        if (rc != TSDF_OK) {
            tsdf_mesh_fini(&m);
            goto out;
        }
    }
    if ((rc = coords_of(removed, nremoved, &m.removed_coords)) != TSDF_OK) {
        tsdf_mesh_fini(&m);
        goto out;
    }
    m.removed_count = nremoved;
    m.full = full;
    tsdf_mesh_fini(out);
    *out = m;
out:
    free(keys);
    free(removed);
    free(tri_keys);
    free(meshed);
    return rc;
}
