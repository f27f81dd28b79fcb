/*
 * cpu_mesh.c - the CPU reference marching cubes.
 *
 * A cell is the cube between 8 neighbouring voxel centres; it belongs to the
 * block that holds its minimum corner, so a block's cells read the block and
 * its +x/+y/+z neighbours. A vertex lies on a cell edge, and an edge is
 * named globally by (the voxel of its start corner, its axis): the vertex is
 * made once, the first time any of the (up to four) cells around the edge
 * asks for it, and shared by all of them, across block seams too. So a
 * closed surface gives a closed mesh without a welding pass.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "tsdf_math.h"
#include "tsdf_mc_tables.h"

#define NO_VERTEX UINT32_MAX
/* Vertex slots per block: one per (voxel, axis). */
#define EDGE_SLOTS (3 * TSDF_BLOCK_VOXELS)

typedef struct {
    cpu_volume *v;
    const cpu_store *st;
    int with_color;

    /* block key -> index of that block's EDGE_SLOTS vertex ids in edge_ids */
    cpu_hash edge_blocks;
    uint32_t *edge_ids;
    size_t edge_blocks_cap;

    /* the mesh being built */
    float *positions, *normals;
    uint8_t *colors;
    size_t vcount, vcap;
    uint32_t *indices;
    size_t tcount, tcap;
    /* the owner block of each triangle (tri_keys), when asked for */
    uint64_t *tri_keys;
    int tri_keys_wanted;
    uint64_t cur_key;

    /* one-entry block cache for voxel lookups */
    int32_t ckey[3];
    int32_t cblk;
    int cvalid;
} mesher;

#define TSDF_MESH_SOURCE mesher
#include "tsdf_mesh_vertex.h"

/* The channel index of voxel v of pool block b. */
static size_t voxel_at(int32_t b, int v)
{
    return (size_t)b * TSDF_BLOCK_VOXELS + (size_t)v;
}

static tsdf_vox load(const mesher *m, size_t i)
{
    return tsdf_vox_load(m->st->layout, m->st->geom, i, m->st->quant);
}

/* The voxel lookup of tsdf_mesh_vertex.h, through the mesher's one-entry
 * block cache. */
static int tsdf_mesh_source_voxel(mesher *m, int32_t x, int32_t y, int32_t z, tsdf_vox *out)
{
    int32_t bx = tsdf_floor_div8(x), by = tsdf_floor_div8(y), bz = tsdf_floor_div8(z);
    if (!m->cvalid || m->ckey[0] != bx || m->ckey[1] != by || m->ckey[2] != bz) {
        m->cblk = cpu_volume_block(m->v, bx, by, bz);
        m->ckey[0] = bx;
        m->ckey[1] = by;
        m->ckey[2] = bz;
        m->cvalid = 1;
    }
    if (m->cblk < 0)
        return 0;
    *out = load(m, voxel_at(m->cblk, tsdf_voxel_index(x & 7, y & 7, z & 7)));
    return 1;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    size_t c = *cap;
    void *n;
    if (need <= c)
        return TSDF_OK;
    if (c < min_cap)
        c = min_cap;
    while (c < need)
        c *= 2;
    n = realloc(*arr, c * elem);
    if (n == NULL)
        return TSDF_ENOMEM;
    *arr = n;
    *cap = c;
    return TSDF_OK;
}

/* The vertex-id slot of the edge that starts at voxel g along axis. */
static int edge_slot(mesher *m, const int32_t g[3], int axis, uint32_t **slot)
{
    uint64_t key =
        tsdf_block_key(tsdf_floor_div8(g[0]), tsdf_floor_div8(g[1]), tsdf_floor_div8(g[2]));
    uint32_t n = (uint32_t)m->edge_blocks.count, idx;
    int inserted, rc;
    rc = cpu_hash_insert(&m->edge_blocks, key, n, &idx, &inserted);
    if (rc != TSDF_OK)
        return rc;
    if (inserted) {
        size_t cap = m->edge_blocks_cap;
        rc = grow((void **)&m->edge_ids, &cap, (size_t)(n + 1) * EDGE_SLOTS, sizeof(uint32_t),
                  64 * EDGE_SLOTS);
        if (rc != TSDF_OK)
            return rc;
        m->edge_blocks_cap = cap;
        memset(m->edge_ids + (size_t)n * EDGE_SLOTS, 0xff, EDGE_SLOTS * sizeof(uint32_t));
    }
    *slot = m->edge_ids + (size_t)idx * EDGE_SLOTS + (size_t)axis * TSDF_BLOCK_VOXELS +
            tsdf_voxel_index(g[0] & 7, g[1] & 7, g[2] & 7);
    return TSDF_OK;
}

/* The id of the vertex on the edge from voxel g0 (channel index i0) one
 * step along axis to g1 (i1), made on first use. */
static int edge_vertex(mesher *m, const int32_t g0[3], int axis, size_t i0, size_t i1, uint32_t *id)
{
    uint32_t *slot;
    int rc;
    size_t cap;

    if ((rc = edge_slot(m, g0, axis, &slot)) != TSDF_OK)
        return rc;
    if (*slot != NO_VERTEX) {
        *id = *slot;
        return TSDF_OK;
    }
    if (m->vcount >= UINT32_MAX - 1)
        return TSDF_ETOO_LARGE;
    cap = m->vcap;
    if ((rc = grow((void **)&m->positions, &cap, m->vcount + 1, 3 * sizeof(float), 1024)) !=
        TSDF_OK)
        return rc;
    cap = m->vcap;
    if ((rc = grow((void **)&m->normals, &cap, m->vcount + 1, 3 * sizeof(float), 1024)) != TSDF_OK)
        return rc;
    if (m->with_color) {
        cap = m->vcap;
        if ((rc = grow((void **)&m->colors, &cap, m->vcount + 1, 3, 1024)) != TSDF_OK)
            return rc;
    }
    m->vcap = cap;

    tsdf_mesh_edge_vertex(m, g0, axis, load(m, i0), load(m, i1),
                          m->with_color ? m->st->rgb + TSDF_RGB_BYTES * i0 : NULL,
                          m->with_color ? m->st->rgb + TSDF_RGB_BYTES * i1 : NULL,
                          m->v->params.voxel_size_m, &m->positions[3 * m->vcount],
                          &m->normals[3 * m->vcount],
                          m->with_color ? &m->colors[3 * m->vcount] : NULL);
    *slot = (uint32_t)m->vcount;
    *id = *slot;
    m->vcount++;
    return TSDF_OK;
}

/* Marching cubes over the 512 cells of block b. */
static int mesh_block(mesher *m, const int32_t b[3])
{
    /* The block and its +x/+y/+z neighbours: nb[dx + 2 dy + 4 dz]. */
    int32_t nb[8];
    for (int k = 0; k < 8; k++)
        nb[k] =
            cpu_volume_block(m->v, b[0] + (k & 1), b[1] + ((k >> 1) & 1), b[2] + ((k >> 2) & 1));

    for (int z = 0; z < TSDF_BLOCK_DIM; z++) {
        for (int y = 0; y < TSDF_BLOCK_DIM; y++) {
            for (int x = 0; x < TSDF_BLOCK_DIM; x++) {
                size_t cv[8];
                float c8[8];
                int ok = 1, cube, rc;
                for (int k = 0; k < 8 && ok; k++) {
                    int lx = x + (k & 1), ly = y + ((k >> 1) & 1), lz = z + ((k >> 2) & 1);
                    int bi = (lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2);
                    if (nb[bi] < 0) {
                        ok = 0;
                        break;
                    }
                    cv[k] = voxel_at(nb[bi], tsdf_voxel_index(lx & 7, ly & 7, lz & 7));
                    tsdf_vox vx = load(m, cv[k]);
                    ok = tsdf_vox_known(vx);
                    c8[k] = vx.sdf_m;
                }
                if (!ok)
                    continue;
                cube = tsdf_mc_cube_index(c8);
                if (cube == 0 || cube == 255)
                    continue;
                for (int i = 0; i < TSDF_MC_TRI_ROW && tsdf_mc_tri(cube, i) >= 0; i += 3) {
                    uint32_t tri[3];
                    for (int j = 0; j < 3; j++) {
                        int e = tsdf_mc_tri(cube, i + j), off[3];
                        int32_t g0[3];
                        tsdf_mc_edge_start(e, off);
                        g0[0] = b[0] * TSDF_BLOCK_DIM + x + off[0];
                        g0[1] = b[1] * TSDF_BLOCK_DIM + y + off[1];
                        g0[2] = b[2] * TSDF_BLOCK_DIM + z + off[2];
                        rc = edge_vertex(m, g0, tsdf_mc_edge_axis(e), cv[tsdf_mc_edge_corner0(e)],
                                         cv[tsdf_mc_edge_corner1(e)], &tri[j]);
                        if (rc != TSDF_OK)
                            return rc;
                    }
                    size_t cap = m->tcap;
                    rc =
                        grow((void **)&m->indices, &cap, m->tcount + 1, 3 * sizeof(uint32_t), 1024);
                    if (rc != TSDF_OK)
                        return rc;
                    if (m->tri_keys_wanted) {
                        size_t kcap = m->tcap;
                        rc = grow((void **)&m->tri_keys, &kcap, m->tcount + 1, sizeof(uint64_t),
                                  1024);
                        if (rc != TSDF_OK)
                            return rc;
                        m->tri_keys[m->tcount] = m->cur_key;
                    }
                    m->tcap = cap;
                    memcpy(&m->indices[3 * m->tcount], tri, sizeof(tri));
                    m->tcount++;
                }
            }
        }
    }
    return TSDF_OK;
}

static void mesher_free(mesher *m)
{
    cpu_hash_fini(&m->edge_blocks);
    free(m->edge_ids);
    free(m->positions);
    free(m->normals);
    free(m->colors);
    free(m->indices);
    free(m->tri_keys);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The keys of every block, ascending: the order that makes the mesh the
 * same whatever the insertion order was (and comparable with the CUDA
 * backend's). */
static int all_keys(const cpu_store *st, uint64_t **keys, size_t *n)
{
    size_t count = 0;
    *keys = NULL;
    *n = 0;
    if (cpu_store_count(st) == 0)
        return TSDF_OK;
    uint64_t *k = malloc((size_t)cpu_store_count(st) * sizeof(*k));
    if (k == NULL)
        return TSDF_ENOMEM;
    for (uint32_t i = 0; i < st->used; i++)
        if (st->keys[i] != TSDF_KEY_EMPTY)
            k[count++] = st->keys[i];
    qsort(k, count, sizeof(*k), cmp_u64);
    *keys = k;
    *n = count;
    return TSDF_OK;
}

int cpu_mesh(void *impl, const uint64_t *keys, size_t n, tsdf_mesh *out, uint64_t **tri_keys,
             uint64_t **meshed, size_t *n_meshed)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    uint64_t *all = NULL, *done = NULL;
    size_t ndone = 0;
    mesher m;
    int rc;

    memset(&m, 0, sizeof(m));
    m.v = v;
    m.st = &v->store;
    m.with_color = v->store.rgb != NULL;
    m.tri_keys_wanted = tri_keys != NULL;
    if ((rc = cpu_hash_init(&m.edge_blocks, 1024, 0.5f)) != TSDF_OK)
        return rc;
    if (keys == NULL) {
        if ((rc = all_keys(&v->store, &all, &n)) != TSDF_OK)
            goto out;
        keys = all;
    }
    if (meshed != NULL && n != 0 && (done = malloc(n * sizeof(*done))) == NULL) {
        rc = TSDF_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t b[3];
        if (cpu_store_find(&v->store, keys[i]) < 0)
            continue;
        tsdf_block_key_unpack(keys[i], &b[0], &b[1], &b[2]);
        m.cur_key = keys[i];
        if ((rc = mesh_block(&m, b)) != TSDF_OK)
            goto out;
        if (done != NULL)
            done[ndone++] = keys[i];
    }

    tsdf_mesh_fini(out);
    out->vertex_count = m.vcount;
    out->triangle_count = m.tcount;
    out->positions = m.positions;
    out->normals = m.normals;
    out->colors = m.colors;
    out->indices = m.indices;
    m.positions = m.normals = NULL;
    m.colors = NULL;
    m.indices = NULL;
    if (tri_keys != NULL) {
        *tri_keys = m.tri_keys;
        m.tri_keys = NULL;
    }
    if (meshed != NULL) {
        *meshed = done;
        *n_meshed = ndone;
        done = NULL;
    }
    v->last_mesh_ms = cpu_now_ms() - t0;
    rc = TSDF_OK;
out:
    free(all);
    free(done);
    mesher_free(&m);
    return rc;
}
