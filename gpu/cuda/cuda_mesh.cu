/*
 * cuda_mesh.cu - marching cubes on the GPU, producing the same mesh as the
 * CPU reference (gpu/cpu/cpu_mesh.c) up to vertex and triangle order.
 *
 * The CPU rules, kept here: a cell belongs to the block of its minimum
 * corner and needs all 8 corners known; a block is selected by box and
 * since_version (its +x/+y/+z neighbours count as changes); a vertex sits on
 * a crossed cell edge named by (start voxel, axis) and is shared by every
 * cell around that edge, across block seams too, so one vertex per used
 * edge; its position, normal and colour come from tsdf_mesh_edge_vertex
 * (tsdf_mesh_vertex.h), the code the CPU runs.
 *
 * Passes (all on the volume's stream):
 *   select   blocks by the parameters into a list;
 *   touch    the selected blocks and their 7 + neighbours get a mesh-local
 *            index (edge-id arrays exist only for those);
 *   cells    one thread per cell: cube index, triangle count, and a flag on
 *            the owner slot of every crossed edge (the lower voxel of the
 *            edge owns it, whichever cell found it);
 *   number   flagged edges and cells' triangles get compact ids and offsets
 *            by block-wide prefix sums (one atomic per CTA for its base);
 *   emit     vertices (one thread per used edge) and triangles (one thread
 *            per cell with triangles) into the compacted output.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_mc_tables.h"

#define TSDF_MESH_SOURCE const cuda_table_view
#include "tsdf_mesh_vertex.h"

int cuda_sync_all(struct cuda_volume *v);

#define EDGE_SLOTS (3 * TSDF_BLOCK_VOXELS)
#define NO_ID 0xffffffffu

struct mesh_args {
    cuda_table_view t;
    const uint64_t *block_keys;
    const uint64_t *block_versions;
    uint32_t nblocks;
    float voxel_size;
    int use_box;
    tsdf_aabb box;
    uint64_t since_version;
    int with_color;
};

/* ---- a block-wide exclusive scan that also reserves a global range -------- */

/* Returns base + the exclusive prefix of `val` over the CTA, where base is
 * reserved for the whole CTA with one atomicAdd on *counter. blockDim.x
 * must be a multiple of 32 and at most 1024. */
static __device__ uint32_t block_scan_reserve(uint32_t val, uint32_t *counter)
{
    __shared__ uint32_t warp_sums[32];
    __shared__ uint32_t base;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint32_t incl = val;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= (unsigned)o)
            incl += n;
    }
    if (lane == 31)
        warp_sums[warp] = incl;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t acc = 0;
        const unsigned nwarps = blockDim.x >> 5;
        for (unsigned w = 0; w < nwarps; w++) {
            uint32_t s = warp_sums[w];
            warp_sums[w] = acc;
            acc += s;
        }
        base = acc ? atomicAdd(counter, acc) : 0;
    }
    __syncthreads();
    return base + warp_sums[warp] + incl - val;
}

/* ---- kernels --------------------------------------------------------------- */

static __device__ int32_t find_block(const cuda_table_view &t, int32_t bx, int32_t by, int32_t bz)
{
    if (!tsdf_block_coord_valid(bx, by, bz))
        return -1;
    return cuda_table_find(t, tsdf_block_key(bx, by, bz));
}

/* The voxel lookup of tsdf_mesh_vertex.h: no cache (a thread makes one
 * vertex; the table is L2-resident). */
static __device__ const tsdf_voxel *tsdf_mesh_source_voxel(const cuda_table_view *t, int32_t x,
                                                           int32_t y, int32_t z)
{
    int32_t b = find_block(*t, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
    if (b < 0)
        return NULL;
    return t->voxels + (size_t)b * TSDF_BLOCK_VOXELS + tsdf_voxel_index(x & 7, y & 7, z & 7);
}

static __global__ void k_select(mesh_args a, int32_t *sel, uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.nblocks)
        return;
    int32_t b[3];
    tsdf_block_key_unpack(a.block_keys[i], &b[0], &b[1], &b[2]);
    if (a.use_box) {
        const float bs = (float)TSDF_BLOCK_DIM * a.voxel_size;
        for (int ax = 0; ax < 3; ax++) {
            float lo = (float)b[ax] * bs, hi = (float)(b[ax] + 1) * bs;
            if (hi < a.box.min[ax] || lo > a.box.max[ax])
                return;
        }
    }
    if (a.since_version != 0 && a.block_versions[i] <= a.since_version) {
        int changed = 0;
        for (int k = 1; k < 8 && !changed; k++) {
            int32_t n =
                find_block(a.t, b[0] + (k & 1), b[1] + ((k >> 1) & 1), b[2] + ((k >> 2) & 1));
            if (n >= 0)
                changed = a.block_versions[n] > a.since_version;
        }
        if (!changed)
            return;
    }
    sel[atomicAdd(&counters[0], 1u)] = (int32_t)i;
}

/* For each selected block, its 8 blocks (itself and the + neighbours) and
 * a mesh-local index for each that exists. local[] starts at -1. */
static __global__ void k_touch(mesh_args a, const int32_t *sel, int32_t *nbl, int32_t *local,
                               int32_t *touched, uint32_t *counters)
{
    /* Launched for every block (an upper bound), so the host need not wait
     * for the selection's count. */
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= counters[0] * 8)
        return;
    uint32_t s = i >> 3, k = i & 7;
    int32_t b[3];
    tsdf_block_key_unpack(a.block_keys[sel[s]], &b[0], &b[1], &b[2]);
    int32_t n = find_block(a.t, b[0] + (k & 1), b[1] + ((k >> 1) & 1), b[2] + ((k >> 2) & 1));
    nbl[i] = n;
    if (n >= 0 && atomicCAS(&local[n], -1, -2) == -1) {
        uint32_t l = atomicAdd(&counters[1], 1u);
        touched[l] = n;
        /* Published to the later kernels only. */
        local[n] = (int32_t)l;
    }
}

/* The 8 corner voxels of cell (x, y, z) of a selected block; 0 when one is
 * missing or unknown. */
static __device__ __forceinline__ int cell_corners(const tsdf_voxel *voxels, const int32_t *nb,
                                                   int x, int y, int z, float c8[8],
                                                   int32_t cblk[8], int cidx[8])
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int lx = x + (k & 1), ly = y + ((k >> 1) & 1), lz = z + ((k >> 2) & 1);
        int bi = (lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2);
        int32_t blk = nb[bi];
        if (blk < 0)
            return 0;
        int vi = tsdf_voxel_index(lx & 7, ly & 7, lz & 7);
        tsdf_voxel vx = voxels[(size_t)blk * TSDF_BLOCK_VOXELS + vi];
        if (!tsdf_voxel_known(&vx))
            return 0;
        c8[k] = vx.sdf_m;
        cblk[k] = blk;
        cidx[k] = vi;
    }
    return 1;
}

/* One CTA per selected block, one thread per cell: flags used edges at
 * their owners and counts triangles. */
static __global__ void __launch_bounds__(TSDF_BLOCK_VOXELS)
    k_cells(const tsdf_voxel *voxels, const int32_t *nbl, const int32_t *local, uint32_t *edge_ids,
            uint8_t *cell_cube)
{
    __shared__ int32_t nb[8];
    if (threadIdx.x < 8)
        nb[threadIdx.x] = nbl[blockIdx.x * 8 + threadIdx.x];
    __syncthreads();
    int x, y, z;
    tsdf_voxel_index_unpack((int)threadIdx.x, &x, &y, &z);
    float c8[8];
    int32_t cblk[8];
    int cidx[8];
    int cube = 0;
    if (cell_corners(voxels, nb, x, y, z, c8, cblk, cidx)) {
        cube = tsdf_mc_cube_index(c8);
        if (cube == 255)
            cube = 0;
    }
    cell_cube[(size_t)blockIdx.x * TSDF_BLOCK_VOXELS + threadIdx.x] = (uint8_t)cube;
    if (cube == 0)
        return;
    uint16_t mask = tsdf_mc_edge_mask(cube);
    for (int e = 0; e < 12; e++) {
        if (!(mask & (1u << e)))
            continue;
        int c0 = tsdf_mc_edge_corner0(e);
        /* The owner is the voxel of the edge's start corner. Every writer
         * stores the same flag, so plain stores suffice. */
        size_t slot = (size_t)local[cblk[c0]] * EDGE_SLOTS +
                      (size_t)tsdf_mc_edge_axis(e) * TSDF_BLOCK_VOXELS + cidx[c0];
        edge_ids[slot] = 0;
    }
}

/* Flags (0) become compact vertex ids; unused slots stay NO_ID. */
static __global__ void k_number_edges(uint32_t *edge_ids, uint32_t n, uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t used = i < n && edge_ids[i] == 0;
    uint32_t id = block_scan_reserve(used, &counters[2]);
    if (used)
        edge_ids[i] = id;
}

static __global__ void k_number_tris(const uint8_t *cell_cube, uint32_t n, uint32_t *tri_offset,
                                     uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t ntri = 0;
    if (i < n) {
        int cube = cell_cube[i];
        if (cube != 0)
            while (ntri < TSDF_MC_MAX_TRIS && tsdf_mc_tri(cube, 3 * (int)ntri) >= 0)
                ntri++;
    }
    uint32_t off = block_scan_reserve(ntri, &counters[3]);
    if (i < n)
        tri_offset[i] = off;
}

/* One thread per edge slot of a touched block: emits the slot's vertex. */
static __global__ void k_vertices(mesh_args a, const int32_t *touched, const uint32_t *edge_ids,
                                  uint32_t n, float *pos, float *nrm, uint8_t *col)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t id = edge_ids[i];
    if (id == NO_ID)
        return;
    uint32_t l = i / EDGE_SLOTS, r = i % EDGE_SLOTS;
    int axis = (int)(r / TSDF_BLOCK_VOXELS), vi = (int)(r % TSDF_BLOCK_VOXELS);
    int32_t blk = touched[l];
    int32_t b[3];
    tsdf_block_key_unpack(a.block_keys[blk], &b[0], &b[1], &b[2]);
    int x, y, z;
    tsdf_voxel_index_unpack(vi, &x, &y, &z);
    int32_t g0[3] = {b[0] * TSDF_BLOCK_DIM + x, b[1] * TSDF_BLOCK_DIM + y,
                     b[2] * TSDF_BLOCK_DIM + z};
    int32_t g1[3] = {g0[0], g0[1], g0[2]};
    g1[axis] += 1;
    tsdf_voxel v0 = a.t.voxels[(size_t)blk * TSDF_BLOCK_VOXELS + vi];
    int32_t b1 =
        find_block(a.t, tsdf_floor_div8(g1[0]), tsdf_floor_div8(g1[1]), tsdf_floor_div8(g1[2]));
    /* A flagged edge comes from a cell with all corners known, so b1
     * exists; guard anyway rather than read out of bounds. */
    if (b1 < 0)
        return;
    tsdf_voxel v1 = a.t.voxels[(size_t)b1 * TSDF_BLOCK_VOXELS +
                               tsdf_voxel_index(g1[0] & 7, g1[1] & 7, g1[2] & 7)];
    float p[3], nv[3];
    tsdf_mesh_edge_vertex(&a.t, g0, axis, &v0, &v1, a.voxel_size, p, nv,
                          a.with_color ? &col[3 * (size_t)id] : NULL);
    for (int ax = 0; ax < 3; ax++) {
        pos[3 * (size_t)id + ax] = p[ax];
        nrm[3 * (size_t)id + ax] = nv[ax];
    }
}

/* One CTA per selected block, one thread per cell: writes its triangles. */
static __global__ void __launch_bounds__(TSDF_BLOCK_VOXELS)
    k_tris(const int32_t *nbl, const int32_t *local, const uint32_t *edge_ids,
           const uint8_t *cell_cube, const uint32_t *tri_offset, uint32_t *indices)
{
    __shared__ int32_t nb[8];
    if (threadIdx.x < 8) {
        int32_t n = nbl[blockIdx.x * 8 + threadIdx.x];
        nb[threadIdx.x] = n >= 0 ? local[n] : -1;
    }
    __syncthreads();
    size_t cell = (size_t)blockIdx.x * TSDF_BLOCK_VOXELS + threadIdx.x;
    int cube = cell_cube[cell];
    if (cube == 0)
        return;
    int x, y, z;
    tsdf_voxel_index_unpack((int)threadIdx.x, &x, &y, &z);
    uint32_t out = tri_offset[cell];
    for (int i = 0; i < TSDF_MC_TRI_ROW && tsdf_mc_tri(cube, i) >= 0; i += 3) {
        for (int j = 0; j < 3; j++) {
            int e = tsdf_mc_tri(cube, i + j), off[3];
            tsdf_mc_edge_start(e, off);
            int lx = x + off[0], ly = y + off[1], lz = z + off[2];
            int bi = (lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2);
            size_t slot = (size_t)nb[bi] * EDGE_SLOTS +
                          (size_t)tsdf_mc_edge_axis(e) * TSDF_BLOCK_VOXELS +
                          tsdf_voxel_index(lx & 7, ly & 7, lz & 7);
            indices[3 * (size_t)out + j] = edge_ids[slot];
        }
        out++;
    }
}

/* ---- host side ----------------------------------------------------------------- */

/* Scratch buffers of the mesh passes, kept in the volume between calls
 * and grown when a call needs more (cudaMalloc / cudaFree inside a query
 * would cost more than the kernels). Counted in stats.memory_bytes; freed
 * by destroy. */
struct mesh_scratch {
    int n;
};

static int scratch_alloc(struct cuda_volume *v, struct mesh_scratch *s, void **p, size_t bytes)
{
    int slot = s->n++;
    if (slot >= CUDA_MESH_BUFFERS)
        return TSDF_EINTERNAL;
    if (bytes == 0)
        bytes = 4;
    if (bytes > v->mesh_cap[slot]) {
        int rc = cuda_check(cudaStreamSynchronize(v->stream), "mesh scratch", __FILE__, __LINE__);
        if (rc != TSDF_OK)
            return rc;
        cuda_dev_free(v, v->mesh_buf[slot], v->mesh_cap[slot]);
        v->mesh_buf[slot] = NULL;
        v->mesh_cap[slot] = 0;
        /* Some headroom, so a growing map does not reallocate every call. */
        size_t want = bytes + bytes / 4;
        rc = cuda_dev_alloc(v, &v->mesh_buf[slot], want);
        if (rc != TSDF_OK)
            return rc;
        v->mesh_cap[slot] = want;
    }
    *p = v->mesh_buf[slot];
    return TSDF_OK;
}

static void scratch_free(struct cuda_volume *v, struct mesh_scratch *s)
{
    (void)v;
    s->n = 0;
}

static int mesh_impl(struct cuda_volume *v, const tsdf_mesh_params *p, tsdf_mesh *out,
                     struct mesh_scratch *s)
{
    const uint32_t nblocks = v->blocks;
    mesh_args a;
    memset(&a, 0, sizeof a);
    a.t = cuda_view(v);
    a.block_keys = v->d_block_keys;
    a.block_versions = v->d_block_versions;
    a.nblocks = nblocks;
    a.voxel_size = v->p.voxel_size_m;
    a.with_color = v->has_color;
    if (p) {
        a.use_box = p->use_box;
        a.box = p->box;
        a.since_version = p->since_version;
    }
    uint32_t *d_ctr = v->d_counters + CUDA_CTR_AUX0; /* sel, touched, verts, tris */
    uint32_t h_ctr[4];
    int32_t *d_sel, *d_local;
    int rc;
    CUDA_TRY(cudaEventRecord(v->q_start, v->stream));
    CUDA_TRY(cudaMemsetAsync(d_ctr, 0, 4 * sizeof(uint32_t), v->stream));
    if ((rc = scratch_alloc(v, s, (void **)&d_sel, nblocks * sizeof(int32_t))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_local, nblocks * sizeof(int32_t))) != TSDF_OK)
        return rc;
    if (nblocks) {
        CUDA_TRY(cudaMemsetAsync(d_local, 0xff, nblocks * sizeof(int32_t), v->stream));
        k_select<<<cuda_grid(nblocks, 256), 256, 0, v->stream>>>(a, d_sel, d_ctr);
        CUDA_TRY_LAUNCH();
    }
    int32_t *d_nbl, *d_touched;
    if ((rc = scratch_alloc(v, s, (void **)&d_nbl, (size_t)nblocks * 8 * sizeof(int32_t))) !=
            TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_touched, (size_t)nblocks * 8 * sizeof(int32_t))) !=
            TSDF_OK)
        return rc;
    if (nblocks) {
        k_touch<<<cuda_grid((uint64_t)nblocks * 8, 256), 256, 0, v->stream>>>(
            a, d_sel, d_nbl, d_local, d_touched, d_ctr);
        CUDA_TRY_LAUNCH();
    }
    CUDA_TRY(
        cudaMemcpyAsync(h_ctr, d_ctr, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, v->stream));
    if ((rc = cuda_sync_all(v)) != TSDF_OK)
        return rc;
    const uint32_t nsel = h_ctr[0];
    const uint32_t ntouched = h_ctr[1];
    const size_t nslots = (size_t)ntouched * EDGE_SLOTS;
    const size_t ncells = (size_t)nsel * TSDF_BLOCK_VOXELS;
    if (nslots > 0xffffffffull || ncells > 0xffffffffull)
        return TSDF_ETOO_LARGE;

    uint32_t *d_edge, *d_tri_off;
    uint8_t *d_cube;
    if ((rc = scratch_alloc(v, s, (void **)&d_edge, nslots * sizeof(uint32_t))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_cube, ncells)) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_tri_off, ncells * sizeof(uint32_t))) != TSDF_OK)
        return rc;
    if (nsel) {
        CUDA_TRY(cudaMemsetAsync(d_edge, 0xff, nslots * sizeof(uint32_t), v->stream));
        k_cells<<<nsel, TSDF_BLOCK_VOXELS, 0, v->stream>>>(v->d_voxels, d_nbl, d_local, d_edge,
                                                           d_cube);
        CUDA_TRY_LAUNCH();
        k_number_edges<<<cuda_grid(nslots, 256), 256, 0, v->stream>>>(d_edge, (uint32_t)nslots,
                                                                      d_ctr);
        CUDA_TRY_LAUNCH();
        k_number_tris<<<cuda_grid(ncells, 256), 256, 0, v->stream>>>(d_cube, (uint32_t)ncells,
                                                                     d_tri_off, d_ctr);
        CUDA_TRY_LAUNCH();
    }
    CUDA_TRY(
        cudaMemcpyAsync(h_ctr, d_ctr, 4 * sizeof(uint32_t), cudaMemcpyDeviceToHost, v->stream));
    if ((rc = cuda_sync_all(v)) != TSDF_OK)
        return rc;
    const size_t nverts = h_ctr[2], ntris = h_ctr[3];

    float *d_pos, *d_nrm;
    uint8_t *d_col;
    uint32_t *d_idx;
    if ((rc = scratch_alloc(v, s, (void **)&d_pos, nverts * 3 * sizeof(float))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_nrm, nverts * 3 * sizeof(float))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_col, a.with_color ? nverts * 3 : 0)) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_idx, ntris * 3 * sizeof(uint32_t))) != TSDF_OK)
        return rc;
    if (nverts) {
        k_vertices<<<cuda_grid(nslots, 256), 256, 0, v->stream>>>(
            a, d_touched, d_edge, (uint32_t)nslots, d_pos, d_nrm, d_col);
        CUDA_TRY_LAUNCH();
    }
    if (ntris) {
        k_tris<<<nsel, TSDF_BLOCK_VOXELS, 0, v->stream>>>(d_nbl, d_local, d_edge, d_cube, d_tri_off,
                                                          d_idx);
        CUDA_TRY_LAUNCH();
    }
    CUDA_TRY(cudaEventRecord(v->q_end, v->stream));

    float *pos = (float *)malloc((nverts ? nverts : 1) * 3 * sizeof(float));
    float *nrm = (float *)malloc((nverts ? nverts : 1) * 3 * sizeof(float));
    uint8_t *col = a.with_color ? (uint8_t *)malloc((nverts ? nverts : 1) * 3) : NULL;
    uint32_t *idx = (uint32_t *)malloc((ntris ? ntris : 1) * 3 * sizeof(uint32_t));
    rc = TSDF_OK;
    if (!pos || !nrm || (a.with_color && !col) || !idx)
        rc = TSDF_ENOMEM;
    if (rc == TSDF_OK && nverts) {
        rc = cuda_check(cudaMemcpyAsync(pos, d_pos, nverts * 3 * sizeof(float),
                                        cudaMemcpyDeviceToHost, v->stream),
                        "mesh positions", __FILE__, __LINE__);
        if (rc == TSDF_OK)
            rc = cuda_check(cudaMemcpyAsync(nrm, d_nrm, nverts * 3 * sizeof(float),
                                            cudaMemcpyDeviceToHost, v->stream),
                            "mesh normals", __FILE__, __LINE__);
        if (rc == TSDF_OK && col)
            rc = cuda_check(
                cudaMemcpyAsync(col, d_col, nverts * 3, cudaMemcpyDeviceToHost, v->stream),
                "mesh colours", __FILE__, __LINE__);
    }
    if (rc == TSDF_OK && ntris)
        rc = cuda_check(cudaMemcpyAsync(idx, d_idx, ntris * 3 * sizeof(uint32_t),
                                        cudaMemcpyDeviceToHost, v->stream),
                        "mesh indices", __FILE__, __LINE__);
    if (rc == TSDF_OK)
        rc = cuda_sync_all(v);
    if (rc != TSDF_OK) {
        free(pos);
        free(nrm);
        free(col);
        free(idx);
        return rc;
    }
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, v->q_start, v->q_end) == cudaSuccess)
        v->last_mesh_ms = ms;
    tsdf_mesh_fini(out);
    out->vertex_count = nverts;
    out->triangle_count = ntris;
    out->positions = pos;
    out->normals = nrm;
    out->colors = col;
    out->indices = idx;
    return TSDF_OK;
}

int cuda_mesh(struct cuda_volume *v, const tsdf_mesh_params *p, tsdf_mesh *out)
{
    struct mesh_scratch s;
    memset(&s, 0, sizeof s);
    int rc = mesh_impl(v, p, out, &s);
    scratch_free(v, &s);
    return rc;
}
