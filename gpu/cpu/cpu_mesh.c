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
 *
 * Three steps, the first and last spread over the volume's pool:
 *   1. per block: the triangles of its cells, each as its three edges;
 *   2. on the calling thread, blocks in order: each edge's vertex id, a new
 *      one the first time the edge comes up (the numbering of one thread
 *      meshing the blocks in order);
 *   3. per vertex: its position, normal and colour from the voxels.
 * Steps 1 and 3 write only their own entries, and step 2 sees the edges in
 * the order one thread would, so the mesh is the same bits for any number
 * of threads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "tsdf_math.h"
#include "tsdf_sort.h"
#include "tsdf_mc_tables.h"

#define NO_VERTEX UINT32_MAX
/* Vertex slots per block: one per (voxel, axis). */
#define EDGE_SLOTS (3 * TSDF_BLOCK_VOXELS)
/* Blocks per chunk of step 1, vertices per chunk of step 3. */
#define MESH_BLOCKS 16
#define MESH_VERTICES 1024

/* A voxel lookup with a one-entry block cache, one per thread. */
typedef struct {
    const cpu_volume *v;
    int32_t ckey[3];
    int32_t cblk;
    int cvalid;
} mesh_src;

#define TSDF_MESH_SOURCE mesh_src
#include "tsdf_mesh_vertex.h"

/* An edge: the global voxel of its start corner, its axis, and the pool
 * index of the block that holds that voxel (step 1 knows it, so steps 2
 * and 3 need no table lookup for it). */
typedef struct {
    int32_t g[3];
    int32_t axis;
    int32_t blk;
} mesh_edge;

/* Step 1's output for a chunk of blocks: the edges of its triangles, three
 * a triangle, and the triangles of each of its blocks. */
typedef struct {
    mesh_edge *edges;
    size_t n, cap;
    uint32_t tris[MESH_BLOCKS];
    uint8_t meshed[MESH_BLOCKS]; /* the block exists */
} mesh_chunk;

typedef struct {
    const cpu_volume *v;
    const uint64_t *keys;
    mesh_chunk *chunks;

    /* step 2: pool block -> index of that block's EDGE_SLOTS vertex ids
     * in edge_ids (-1: none yet) */
    int32_t *edge_base;
    uint32_t edge_blocks;
    uint32_t *edge_ids;
    size_t edge_blocks_cap;
    mesh_edge *vertex_edges; /* per vertex, the edge it lies on */

    /* the mesh being built */
    float *positions, *normals;
    uint8_t *colors;
    size_t vcount, vcap;
    uint32_t *indices;
    uint64_t *tri_keys;
    size_t tcount;
} mesher;

/* The channel index of voxel v of pool block b. */
static size_t voxel_at(int32_t b, int v)
{
    return (size_t)b * TSDF_BLOCK_VOXELS + (size_t)v;
}

static tsdf_vox load(const cpu_volume *v, size_t i)
{
    return tsdf_vox_load(v->store.layout, v->store.geom, i, v->store.quant);
}

static int32_t src_block(mesh_src *m, int32_t bx, int32_t by, int32_t bz)
{
    if (!m->cvalid || m->ckey[0] != bx || m->ckey[1] != by || m->ckey[2] != bz) {
        m->cblk = cpu_volume_block(m->v, bx, by, bz);
        m->ckey[0] = bx;
        m->ckey[1] = by;
        m->ckey[2] = bz;
        m->cvalid = 1;
    }
    return m->cblk;
}

/* The channel index of global voxel (x, y, z), or -1 when its block is
 * absent. */
static int64_t src_voxel_index(mesh_src *m, int32_t x, int32_t y, int32_t z)
{
    int32_t b = src_block(m, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
    if (b < 0)
        return -1;
    return (int64_t)voxel_at(b, tsdf_voxel_index(x & 7, y & 7, z & 7));
}

/* The voxel lookup of tsdf_mesh_vertex.h. */
static int tsdf_mesh_source_voxel(mesh_src *m, int32_t x, int32_t y, int32_t z, tsdf_vox *out)
{
    int64_t i = src_voxel_index(m, x, y, z);
    if (i < 0)
        return 0;
    *out = load(m->v, (size_t)i);
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

/* Step 1 for block b: the edges of its cells' triangles onto ch; *tris gets
 * how many triangles. The 9 x 9 x 9 voxels the cells read are loaded once
 * (each cell reading its 8 corners from the pool loaded every voxel up to
 * 8 times, through the layout's decoder each time). */
static int block_edges(const cpu_volume *v, const int32_t b[3], mesh_chunk *ch, uint32_t *tris)
{
    /* The block and its +x/+y/+z neighbours: nb[dx + 2 dy + 4 dz]. */
    int32_t nb[8];
    for (int k = 0; k < 8; k++)
        nb[k] = cpu_volume_block(v, b[0] + (k & 1), b[1] + ((k >> 1) & 1), b[2] + ((k >> 2) & 1));
    float sdf[TSDF_MESH_CELL_VOXELS];
    uint8_t known[TSDF_MESH_CELL_VOXELS];
    for (int lz = 0, i = 0; lz < TSDF_MESH_CELL_SPAN; lz++)
        for (int ly = 0; ly < TSDF_MESH_CELL_SPAN; ly++)
            for (int lx = 0; lx < TSDF_MESH_CELL_SPAN; lx++, i++) {
                int32_t blk = nb[(lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2)];
                known[i] = 0;
                sdf[i] = 0.0f;
                if (blk < 0)
                    continue;
                tsdf_vox vx = load(v, voxel_at(blk, tsdf_voxel_index(lx & 7, ly & 7, lz & 7)));
                known[i] = (uint8_t)tsdf_vox_known(vx);
                sdf[i] = vx.sdf_m;
            }

    *tris = 0;
    for (int z = 0; z < TSDF_BLOCK_DIM; z++) {
        for (int y = 0; y < TSDF_BLOCK_DIM; y++) {
            for (int x = 0; x < TSDF_BLOCK_DIM; x++) {
                float c8[8];
                int all_known = 1, cube, rc;
                for (int k = 0; k < 8; k++) {
                    const int j = tsdf_mesh_cell_corner(x, y, z, k);
                    all_known &= known[j];
                    c8[k] = sdf[j];
                }
                if (!all_known)
                    continue;
                cube = tsdf_mc_cube_index(c8);
                if (cube == 0 || cube == 255)
                    continue;
                for (int i = 0; i < TSDF_MC_TRI_ROW && tsdf_mc_tri(cube, i) >= 0; i += 3) {
                    if ((rc = grow((void **)&ch->edges, &ch->cap, ch->n + 3, sizeof(mesh_edge),
                                   1024)) != TSDF_OK)
                        return rc;
                    for (int j = 0; j < 3; j++) {
                        int e = tsdf_mc_tri(cube, i + j), off[3];
                        mesh_edge *me = &ch->edges[ch->n++];
                        tsdf_mc_edge_start(e, off);
                        const int lx = x + off[0], ly = y + off[1], lz = z + off[2];
                        me->g[0] = b[0] * TSDF_BLOCK_DIM + lx;
                        me->g[1] = b[1] * TSDF_BLOCK_DIM + ly;
                        me->g[2] = b[2] * TSDF_BLOCK_DIM + lz;
                        me->axis = tsdf_mc_edge_axis(e);
                        /* A corner of a cell whose corners are all known:
                         * its block exists. */
                        me->blk = nb[(lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2)];
                    }
                    (*tris)++;
                }
            }
        }
    }
    return TSDF_OK;
}

/* Step 1 over keys[b, e): one chunk. */
static int mesh_chunk_job(void *arg, size_t b, size_t e, unsigned worker)
{
    mesher *m = arg;
    mesh_chunk *ch = &m->chunks[b / MESH_BLOCKS];
    (void)worker;
    ch->n = 0;
    for (size_t i = b; i < e; i++) {
        int32_t blk[3];
        uint32_t idx;
        ch->tris[i - b] = 0;
        ch->meshed[i - b] = (uint8_t)cpu_hash_lookup(&m->v->store.table, m->keys[i], &idx);
        if (!ch->meshed[i - b])
            continue;
        tsdf_block_key_unpack(m->keys[i], &blk[0], &blk[1], &blk[2]);
        int rc = block_edges(m->v, blk, ch, &ch->tris[i - b]);
        if (rc != TSDF_OK)
            return rc;
    }
    return TSDF_OK;
}

/* The vertex-id slot of edge me: its block's slots, made on first use. */
static int edge_slot(mesher *m, const mesh_edge *me, uint32_t **slot)
{
    const int32_t *g = me->g;
    int32_t idx = m->edge_base[me->blk];
    if (idx < 0) {
        size_t cap = m->edge_blocks_cap;
        uint32_t n = m->edge_blocks;
        int rc = grow((void **)&m->edge_ids, &cap, (size_t)(n + 1) * EDGE_SLOTS, sizeof(uint32_t),
                      64 * EDGE_SLOTS);
        if (rc != TSDF_OK)
            return rc;
        m->edge_blocks_cap = cap;
        memset(m->edge_ids + (size_t)n * EDGE_SLOTS, 0xff, EDGE_SLOTS * sizeof(uint32_t));
        idx = (int32_t)n;
        m->edge_base[me->blk] = idx;
        m->edge_blocks = n + 1;
    }
    *slot = m->edge_ids + (size_t)idx * EDGE_SLOTS + (size_t)me->axis * TSDF_BLOCK_VOXELS +
            tsdf_voxel_index(g[0] & 7, g[1] & 7, g[2] & 7);
    return TSDF_OK;
}

/* Step 2: vertex ids, triangles and their owner blocks, chunks in order. */
static int number_vertices(mesher *m, size_t nchunks, size_t nkeys, int want_tri_keys)
{
    size_t tris = 0, vcap = 0;
    int rc;
    for (size_t c = 0; c < nchunks; c++)
        tris += m->chunks[c].n / 3;
    if (tris != 0) {
        if ((m->indices = malloc(3 * tris * sizeof(uint32_t))) == NULL)
            return TSDF_ENOMEM;
        if (want_tri_keys && (m->tri_keys = malloc(tris * sizeof(uint64_t))) == NULL)
            return TSDF_ENOMEM;
    }
    for (size_t c = 0; c < nchunks; c++) {
        const mesh_chunk *ch = &m->chunks[c];
        for (size_t k = 0; k < ch->n; k++) {
            uint32_t *slot;
            if ((rc = edge_slot(m, &ch->edges[k], &slot)) != TSDF_OK)
                return rc;
            if (*slot == NO_VERTEX) {
                if (m->vcount >= UINT32_MAX - 1)
                    return TSDF_ETOO_LARGE;
                if ((rc = grow((void **)&m->vertex_edges, &vcap, m->vcount + 1, sizeof(mesh_edge),
                               1024)) != TSDF_OK)
                    return rc;
                m->vertex_edges[m->vcount] = ch->edges[k];
                *slot = (uint32_t)m->vcount++;
            }
            m->indices[3 * m->tcount + k % 3] = *slot;
            if (k % 3 == 2)
                m->tcount++;
        }
        if (m->tri_keys != NULL) {
            size_t t = m->tcount - ch->n / 3;
            for (size_t b = 0; b < MESH_BLOCKS && c * MESH_BLOCKS + b < nkeys; b++)
                for (uint32_t i = 0; i < ch->tris[b]; i++)
                    m->tri_keys[t++] = m->keys[c * MESH_BLOCKS + b];
        }
    }
    return TSDF_OK;
}

/* Step 3 over vertices [b, e). */
static int vertex_job(void *arg, size_t b, size_t e, unsigned worker)
{
    mesher *m = arg;
    const cpu_volume *v = m->v;
    const uint8_t *rgb = v->store.rgb;
    mesh_src src = {v, {0, 0, 0}, -1, 0};
    (void)worker;
    for (size_t i = b; i < e; i++) {
        const mesh_edge *me = &m->vertex_edges[i];
        int32_t g1[3] = {me->g[0], me->g[1], me->g[2]};
        g1[me->axis] += 1;
        /* Step 1 read both voxels of the edge, so both exist. */
        int64_t i0 =
            (int64_t)voxel_at(me->blk, tsdf_voxel_index(me->g[0] & 7, me->g[1] & 7, me->g[2] & 7));
        int64_t i1 = src_voxel_index(&src, g1[0], g1[1], g1[2]);
        if (i1 < 0)
            return TSDF_EINTERNAL;
        tsdf_mesh_edge_vertex(&src, me->g, me->axis, load(v, (size_t)i0), load(v, (size_t)i1),
                              rgb != NULL ? rgb + TSDF_RGB_BYTES * (size_t)i0 : NULL,
                              rgb != NULL ? rgb + TSDF_RGB_BYTES * (size_t)i1 : NULL,
                              v->params.voxel_size_m, &m->positions[3 * i], &m->normals[3 * i],
                              rgb != NULL ? &m->colors[3 * i] : NULL);
    }
    return TSDF_OK;
}

static void mesher_free(mesher *m, size_t nchunks)
{
    for (size_t c = 0; m->chunks != NULL && c < nchunks; c++)
        free(m->chunks[c].edges);
    free(m->chunks);
    free(m->edge_base);
    free(m->edge_ids);
    free(m->vertex_edges);
    free(m->positions);
    free(m->normals);
    free(m->colors);
    free(m->indices);
    free(m->tri_keys);
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
    tsdf_sort_u64(k, count);
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
    size_t ndone = 0, nchunks = 0;
    mesher m;
    int rc;

    memset(&m, 0, sizeof(m));
    m.v = v;
    if (v->store.used != 0) {
        if ((m.edge_base = malloc((size_t)v->store.used * sizeof(int32_t))) == NULL)
            return TSDF_ENOMEM;
        memset(m.edge_base, 0xff, (size_t)v->store.used * sizeof(int32_t));
    }
    if (keys == NULL) {
        if ((rc = all_keys(&v->store, &all, &n)) != TSDF_OK)
            goto out;
        keys = all;
    }
    m.keys = keys;
    nchunks = (n + MESH_BLOCKS - 1) / MESH_BLOCKS;
    if (nchunks != 0 && (m.chunks = calloc(nchunks, sizeof(*m.chunks))) == NULL) {
        rc = TSDF_ENOMEM;
        goto out;
    }
    if (meshed != NULL && n != 0 && (done = malloc(n * sizeof(*done))) == NULL) {
        rc = TSDF_ENOMEM;
        goto out;
    }
    if ((rc = cpu_pool_run(v->pool, n, MESH_BLOCKS, mesh_chunk_job, &m)) != TSDF_OK ||
        (rc = number_vertices(&m, nchunks, n, tri_keys != NULL)) != TSDF_OK)
        goto out;
    if (m.vcount != 0) {
        m.positions = malloc(3 * m.vcount * sizeof(float));
        m.normals = malloc(3 * m.vcount * sizeof(float));
        if (v->store.rgb != NULL)
            m.colors = malloc(3 * m.vcount);
        if (m.positions == NULL || m.normals == NULL ||
            (v->store.rgb != NULL && m.colors == NULL)) {
            rc = TSDF_ENOMEM;
            goto out;
        }
    }
    if ((rc = cpu_pool_run(v->pool, m.vcount, MESH_VERTICES, vertex_job, &m)) != TSDF_OK)
        goto out;
    for (size_t i = 0; done != NULL && i < n; i++)
        if (m.chunks[i / MESH_BLOCKS].meshed[i % MESH_BLOCKS])
            done[ndone++] = keys[i];

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
    mesher_free(&m, nchunks);
    return rc;
}
