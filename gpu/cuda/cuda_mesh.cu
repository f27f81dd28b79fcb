/*
 * cuda_mesh.cu - marching cubes on the GPU, producing the same mesh as the
 * CPU reference (gpu/cpu/cpu_mesh.c) up to vertex and triangle order.
 *
 * The CPU rules, kept here: a cell belongs to the block of its minimum
 * corner and needs all 8 corners known; a vertex sits on a crossed cell
 * edge named by (start voxel, axis) and is shared by every cell around that
 * edge, across block seams too, so one vertex per used edge; its position,
 * normal and colour come from tsdf_mesh_edge_vertex (tsdf_mesh_vertex.h),
 * the code the CPU runs. Which blocks to mesh (a box, an incremental mesh)
 * the front end decides (gpu/volume_mesh.c): it passes every block or a
 * list of keys.
 *
 * Passes (all on the volume's stream):
 *   select   every live block, or the listed keys that exist, into a list;
 *   touch    the selected blocks and their 7 + neighbours get a mesh-local
 *            index (edge bitmaps exist only for those);
 *   cells    a CTA per selected block, four cells a thread: each cell's
 *            cube index, and a bit for every crossed edge in the
 *            used-edge bitmap, at the edge's owner slot (the lower voxel
 *            of the edge owns it, whichever cell found it);
 *   number   a prefix sum over the bitmap's words names the used edges'
 *            vertex ids (an edge's id is its word's base plus the bits
 *            below it), and one over the cells' triangle counts gives
 *            each cell's first triangle (block-wide scans, one atomic
 *            per CTA for its base);
 *   emit     the vertex ids' slots from the bitmap, then vertices (one
 *            thread per vertex) and triangles (one thread per cell that
 *            has triangles, listed by the numbering) into the compacted
 *            output;
 *   copy     the output arrays, packed in one device buffer, to pinned host
 *            memory kept in the volume, in one copy; then into the mesh's
 *            own arrays.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_sort.h"
#include "tsdf_mc_tables.h"

/* The voxel lookup of tsdf_mesh_vertex.h reads through this: the table
 * view and the layout, which the kernels set from a template argument. */
struct mesh_source {
    cuda_table_view t;
    tsdf_layout layout;
    tsdf_quant quant;
    /* A block known without the table (home_blk, or -1: none): the
     * vertex pass sets the vertex's own block, where most of the
     * gradient's neighbours are. */
    int32_t home[3];
    int32_t home_blk;
};

#define TSDF_MESH_SOURCE const mesh_source
#include "tsdf_mesh_vertex.h"

#define EDGE_SLOTS (3 * TSDF_BLOCK_VOXELS)
/* Edge slots are one bit each in the used-edge bitmap (32 to a word). */
#define EDGE_WORDS (EDGE_SLOTS / 32)

struct mesh_args {
    mesh_source src;
    const uint64_t *block_keys;
    uint32_t used; /* pool slots 0 .. used-1 may hold blocks */
    float voxel_size;
    int with_color;
};

/* src with its layout fixed at compile time, so the loads' switch folds. */
template <int LAYOUT> static __device__ __forceinline__ mesh_source fixed(const mesh_source &s)
{
    mesh_source f = s;
    f.layout = (tsdf_layout)LAYOUT;
    return f;
}

static __device__ __forceinline__ tsdf_vox load_vox(const mesh_source &s, size_t i)
{
    return tsdf_vox_load(s.layout, s.t.geom, i, s.quant);
}

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

/* Block (bx, by, bz) of s: its home block without the table. */
static __device__ __forceinline__ int32_t source_block(const mesh_source *s, int32_t bx, int32_t by,
                                                       int32_t bz)
{
    if (s->home_blk >= 0 && bx == s->home[0] && by == s->home[1] && bz == s->home[2])
        return s->home_blk;
    return find_block(s->t, bx, by, bz);
}

/* The voxel lookup of tsdf_mesh_vertex.h: the home block, else the
 * table. A vertex's gradients read 12 voxels around its edge; with a
 * table lookup for each the vertex pass took 103 us for 359,300
 * vertices (H200); most of them are in the vertex's own block. */
static __device__ int tsdf_mesh_source_voxel(const mesh_source *s, int32_t x, int32_t y, int32_t z,
                                             tsdf_vox *out)
{
    int32_t b = source_block(s, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
    if (b < 0)
        return 0;
    *out = load_vox(*s, (size_t)b * TSDF_BLOCK_VOXELS + tsdf_voxel_index(x & 7, y & 7, z & 7));
    return 1;
}

/* Every live block of the pool into the list. */
static __global__ void k_select_all(const uint64_t *block_keys, uint32_t used, int32_t *sel,
                                    uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < used && block_keys[i] != TSDF_KEY_EMPTY)
        sel[atomicAdd(&counters[0], 1u)] = (int32_t)i;
}

/* The listed keys that exist into the list. */
static __global__ void k_select_keys(cuda_table_view t, const uint64_t *keys, uint32_t n,
                                     int32_t *sel, uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int32_t b = cuda_table_find(t, keys[i]);
    if (b >= 0)
        sel[atomicAdd(&counters[0], 1u)] = b;
}

/* The keys of the listed blocks (the blocks meshed). */
static __global__ void k_sel_keys(const uint64_t *block_keys, const int32_t *sel, uint32_t n,
                                  uint64_t *out)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = block_keys[sel[i]];
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
    int32_t n = find_block(a.src.t, b[0] + (k & 1), b[1] + ((k >> 1) & 1), b[2] + ((k >> 2) & 1));
    nbl[i] = n;
    if (n >= 0 && atomicCAS(&local[n], -1, -2) == -1) {
        uint32_t l = atomicAdd(&counters[1], 1u);
        touched[l] = n;
        /* Published to the later kernels only. */
        local[n] = (int32_t)l;
    }
}

/* The number of triangles of cube index `cube`. */
static __device__ __forceinline__ uint32_t cube_tris(uint32_t cube)
{
    uint32_t ntri = 0;
    if (cube != 0)
        while (ntri < TSDF_MC_MAX_TRIS && tsdf_mc_tri((int)cube, 3 * (int)ntri) >= 0)
            ntri++;
    return ntri;
}

/* Cells a thread of k_cells takes: four neighbours along x,
 * whose cube indices are one 32-bit word. With a thread per cell (CTAs of
 * 512) an SM held 4 CTAs, so a 3,300-block incremental mesh took 6 waves
 * of one block's latency chain (its neighbour list, its voxels, its edge
 * atomics): 41 us in k_cells and 36 in k_tris (Nsight Compute, H200). */
#define CELLS_PER_THREAD 4
#define CELL_CTA (TSDF_BLOCK_VOXELS / CELLS_PER_THREAD)

/* One CTA per selected block, four cells a thread: the cells' cube
 * indices and a bit for each crossed edge at its owner. The CTA first
 * loads the 9 x 9 x 9 voxels its cells read into shared memory, all loads
 * in flight at once; each cell then reads its 8 corners there (the same
 * values, so the same cubes). Loaded by each cell from the pool, one
 * corner behind the other's known-test, the kernel took 108 us for a
 * 12,000-block map (84 at three CTAs per SM; Nsight Compute, H200). */
template <int LAYOUT>
static __global__ void __launch_bounds__(CELL_CTA)
    k_cells(mesh_source src_any, const int32_t *nbl, const int32_t *local, uint32_t *edge_bits,
            uint8_t *cell_cube, const uint32_t *counters)
{
    /* The grid covers the bound on the selection; its count is read here
     * (the same for the whole CTA, so no barrier is left half-reached). */
    if (blockIdx.x >= counters[0])
        return;
    const mesh_source src = fixed<LAYOUT>(src_any);
    /* The 8 blocks a cell of this block may touch: pool index, and the
     * mesh-local index that names their edge slots. */
    __shared__ int32_t nb[8], nb_local[8];
    __shared__ float sdf[TSDF_MESH_CELL_VOXELS];
    __shared__ uint8_t known[TSDF_MESH_CELL_VOXELS];
    if (threadIdx.x < 8) {
        int32_t n = nbl[blockIdx.x * 8 + threadIdx.x];
        nb[threadIdx.x] = n;
        nb_local[threadIdx.x] = n >= 0 ? local[n] : -1;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < (TSDF_MESH_CELL_VOXELS + CELL_CTA - 1) / CELL_CTA; r++) {
        const int i = (int)threadIdx.x + r * CELL_CTA;
        if (i >= TSDF_MESH_CELL_VOXELS)
            break;
        const int lx = i % TSDF_MESH_CELL_SPAN,
                  ly = (i / TSDF_MESH_CELL_SPAN) % TSDF_MESH_CELL_SPAN,
                  lz = i / (TSDF_MESH_CELL_SPAN * TSDF_MESH_CELL_SPAN);
        const int32_t blk = nb[(lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2)];
        float sd = 0.0f;
        uint8_t kn = 0;
        if (blk >= 0) {
            tsdf_vox vx = load_vox(src, (size_t)blk * TSDF_BLOCK_VOXELS +
                                            (size_t)tsdf_voxel_index(lx & 7, ly & 7, lz & 7));
            kn = (uint8_t)tsdf_vox_known(vx);
            sd = vx.sdf_m;
        }
        sdf[i] = sd;
        known[i] = kn;
    }
    __syncthreads();
    const int c0 = (int)threadIdx.x * CELLS_PER_THREAD;
    int x0, y, z;
    tsdf_voxel_index_unpack(c0, &x0, &y, &z);
    uint32_t cubes = 0;
    for (int c = 0; c < CELLS_PER_THREAD; c++) {
        const int x = x0 + c;
        float c8[8];
        int all_known = 1;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int j = tsdf_mesh_cell_corner(x, y, z, k);
            all_known &= known[j];
            c8[k] = sdf[j];
        }
        int cube = all_known ? tsdf_mc_cube_index(c8) : 0;
        if (cube == 255)
            cube = 0;
        cubes |= (uint32_t)cube << (8 * c);
        if (cube == 0)
            continue;
        uint16_t mask = tsdf_mc_edge_mask(cube);
        for (int e = 0; e < 12; e++) {
            if (!(mask & (1u << e)))
                continue;
            /* The owner is the voxel of the edge's start corner. Up to
             * four cells set the same bit. (Reading the word first to
             * skip the atomic when the bit is set made the kernel
             * slower.) */
            int off[3];
            tsdf_mc_edge_start(e, off);
            const int lx = x + off[0], ly = y + off[1], lz = z + off[2];
            const int bi = (lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2);
            size_t slot = (size_t)nb_local[bi] * EDGE_SLOTS +
                          (size_t)tsdf_mc_edge_axis(e) * TSDF_BLOCK_VOXELS +
                          (size_t)tsdf_voxel_index(lx & 7, ly & 7, lz & 7);
            atomicOr(&edge_bits[slot >> 5], 1u << (slot & 31));
        }
    }
    /* Little-endian: cell c0 is the low byte, as k_number_tris reads it. */
    reinterpret_cast<uint32_t *>(
        cell_cube)[((size_t)blockIdx.x * TSDF_BLOCK_VOXELS + c0) / CELLS_PER_THREAD] = cubes;
}

/* The edge numbering takes NUMBER_PER_THREAD bitmap words per thread
 * (one 16-byte load) in CTAs of NUMBER_CTA threads, so that a CTA
 * reserves its range with one atomicAdd. With one slot or cell per thread
 * in CTAs of 256, the 70,000 CTAs of a 12,000-block map queued
 * on the one counter: the edge numbering took 70 us for 18 M slots, the
 * triangles' 30 us for 6 M cells (Nsight Compute, H200). The word count
 * is a multiple of 4 (EDGE_WORDS is) and the bitmap is cudaMalloc'd, so
 * the wide loads are aligned. */
#define NUMBER_PER_THREAD 4
#define NUMBER_CTA 512
static_assert(NUMBER_CTA >= 256, "k_number_tris fills its 256-entry table in one step");
#define NUMBER_SPAN (NUMBER_PER_THREAD * NUMBER_CTA)

/* The used edges get compact vertex ids in bitmap order: word w's first
 * set bit is vertex word_base[w], the next word_base[w] + 1, and so on
 * (edge_id). n4 is the word count over 4. A bit per slot, not an id per
 * slot: the pass reads 2.2 MB for a 12,000-block map, where the id array
 * was 72 MB to clear, number and scan again for the vertices. */
static __global__ void __launch_bounds__(NUMBER_CTA)
    k_number_edges(const uint32_t *edge_bits, uint32_t n4, uint32_t *word_base, uint32_t *counters)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (i < n4)
        w = reinterpret_cast<const uint4 *>(edge_bits)[i];
    uint32_t p0 = (uint32_t)__popc(w.x), p1 = (uint32_t)__popc(w.y), p2 = (uint32_t)__popc(w.z),
             p3 = (uint32_t)__popc(w.w);
    uint32_t base = block_scan_reserve(p0 + p1 + p2 + p3, &counters[2]);
    if (i < n4)
        reinterpret_cast<uint4 *>(word_base)[i] =
            make_uint4(base, base + p0, base + p0 + p1, base + p0 + p1 + p2);
}

/* Each cell's first triangle in the output, four cells per thread; the
 * grid covers the bound on the selection (sel_bound blocks), whose count
 * is read here. The cells that have triangles are listed in cell_list
 * (their count in counters[4]), so that k_tris runs a thread for each of
 * them and none for the rest: a block's 512 cells hold about 60 with
 * triangles on 7-Scenes, and a thread per cell left 8 of a warp's 32
 * lanes working (Nsight Compute, H200). The list's order is that of the
 * CTAs' reservations; each cell still writes at its own offset, so the
 * mesh is the same. */
static __global__ void __launch_bounds__(NUMBER_CTA)
    k_number_tris(const uint8_t *cell_cube, uint32_t sel_bound, uint32_t *tri_offset,
                  uint32_t *cell_list, uint32_t *counters)
{
    /* Each cube's triangle count, from the table once per CTA: walked
     * per cell, it was up to five dependent table loads a cell. */
    __shared__ uint8_t ntris[256];
    if (threadIdx.x < 256)
        ntris[threadIdx.x] = (uint8_t)cube_tris(threadIdx.x);
    const uint32_t nsel = counters[0] < sel_bound ? counters[0] : sel_bound;
    const uint32_t n4 = nsel * (TSDF_BLOCK_VOXELS / NUMBER_PER_THREAD);
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t c = 0;
    if (i < n4)
        c = reinterpret_cast<const uint32_t *>(cell_cube)[i];
    __syncthreads();
    /* Little-endian: cell 4i is the low byte. */
    uint32_t t0 = ntris[c & 0xffu], t1 = ntris[(c >> 8) & 0xffu], t2 = ntris[(c >> 16) & 0xffu],
             t3 = ntris[c >> 24];
    uint32_t off = block_scan_reserve(t0 + t1 + t2 + t3, &counters[3]);
    /* Each warp reads back only its own scan sums, so the second scan may
     * reuse the first's shared memory. */
    uint32_t at = block_scan_reserve((t0 != 0) + (t1 != 0) + (t2 != 0) + (t3 != 0), &counters[4]);
    if (i < n4) {
        reinterpret_cast<uint4 *>(tri_offset)[i] =
            make_uint4(off, off + t0, off + t0 + t1, off + t0 + t1 + t2);
        if (t0)
            cell_list[at++] = 4 * i;
        if (t1)
            cell_list[at++] = 4 * i + 1;
        if (t2)
            cell_list[at++] = 4 * i + 2;
        if (t3)
            cell_list[at] = 4 * i + 3;
    }
}

/* The vertex id of used edge slot `slot`. */
static __device__ __forceinline__ uint32_t edge_id(const uint32_t *edge_bits,
                                                   const uint32_t *word_base, size_t slot)
{
    const size_t w = slot >> 5;
    const uint32_t below = edge_bits[w] & ((1u << (slot & 31)) - 1u);
    return word_base[w] + (uint32_t)__popc(below);
}

/* The slot of every vertex id: one thread per bitmap word. */
static __global__ void k_vert_slots(const uint32_t *edge_bits, const uint32_t *word_base,
                                    uint32_t nwords, uint32_t *vert_slot)
{
    uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= nwords)
        return;
    uint32_t m = edge_bits[w], id = word_base[w];
    while (m) {
        vert_slot[id++] = w * 32u + (uint32_t)(__ffs((int)m) - 1);
        m &= m - 1u;
    }
}

/* The vertex of used edge slot i, vertex id `id`. */
template <int LAYOUT>
static __device__ __forceinline__ void emit_vertex(const mesh_args &a, const mesh_source &src,
                                                   const int32_t *touched, uint32_t i, uint32_t id,
                                                   float *pos, float *nrm, uint8_t *col)
{
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
    const size_t i0 = (size_t)blk * TSDF_BLOCK_VOXELS + vi;
    mesh_source hs = src;
    hs.home[0] = b[0];
    hs.home[1] = b[1];
    hs.home[2] = b[2];
    hs.home_blk = blk;
    int32_t b1 =
        source_block(&hs, tsdf_floor_div8(g1[0]), tsdf_floor_div8(g1[1]), tsdf_floor_div8(g1[2]));
    /* A flagged edge comes from a cell with all corners known, so b1
     * exists; guard anyway rather than read out of bounds. */
    if (b1 < 0)
        return;
    const size_t i1 =
        (size_t)b1 * TSDF_BLOCK_VOXELS + tsdf_voxel_index(g1[0] & 7, g1[1] & 7, g1[2] & 7);
    const int color = a.with_color && src.t.rgb != NULL;
    float p[3], nv[3];
    tsdf_mesh_edge_vertex(&hs, g0, axis, load_vox(src, i0), load_vox(src, i1),
                          color ? src.t.rgb + TSDF_RGB_BYTES * i0 : NULL,
                          color ? src.t.rgb + TSDF_RGB_BYTES * i1 : NULL, a.voxel_size, p, nv,
                          color ? &col[3 * (size_t)id] : NULL);
    for (int ax = 0; ax < 3; ax++) {
        pos[3 * (size_t)id + ax] = p[ax];
        nrm[3 * (size_t)id + ax] = nv[ax];
    }
}

/* One thread per vertex. With a thread per edge slot (17.9 M threads for
 * a 12,000-block map, 2% of them used) most warps ran one lane's vertex
 * while 31 waited: 176 us (Nsight Compute, H200); a warp compacting its
 * run of slots in shared memory, 103 us. */
template <int LAYOUT>
static __global__ void k_vertices(mesh_args a, const int32_t *touched, const uint32_t *vert_slot,
                                  uint32_t nverts, float *pos, float *nrm, uint8_t *col)
{
    const mesh_source src = fixed<LAYOUT>(a.src);
    uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= nverts)
        return;
    emit_vertex<LAYOUT>(a, src, touched, vert_slot[id], id, pos, nrm, col);
}

/* The triangles of the listed cells (k_number_tris), one thread a cell,
 * each at its cell's offset: corners' edges by their vertex ids, and the
 * block's key per triangle when asked. The neighbours' mesh-local indices
 * are read through L1 (a CTA of one block's cells waited at a barrier
 * behind the 8 threads that loaded them: a third of its stall cycles). */
static __global__ void k_tris(const int32_t *nbl, const int32_t *local, const uint32_t *edge_bits,
                              const uint32_t *word_base, const uint8_t *cell_cube,
                              const uint32_t *tri_offset, const uint32_t *cell_list,
                              uint32_t ncells, uint32_t *indices, const int32_t *sel,
                              const uint64_t *block_keys, uint64_t *tri_keys)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ncells)
        return;
    const uint32_t cell = cell_list[i];
    const uint32_t blk = cell / TSDF_BLOCK_VOXELS;
    const int cube = cell_cube[cell];
    int x, y, z;
    tsdf_voxel_index_unpack((int)(cell % TSDF_BLOCK_VOXELS), &x, &y, &z);
    uint32_t out = tri_offset[cell];
    for (int t = 0; t < TSDF_MC_TRI_ROW && tsdf_mc_tri(cube, t) >= 0; t += 3) {
        for (int j = 0; j < 3; j++) {
            int e = tsdf_mc_tri(cube, t + j), off[3];
            tsdf_mc_edge_start(e, off);
            int lx = x + off[0], ly = y + off[1], lz = z + off[2];
            int bi = (lx >> 3) | ((ly >> 3) << 1) | ((lz >> 3) << 2);
            /* A known cell's corners are in allocated blocks: n >= 0. */
            const int32_t n = __ldg(&nbl[(size_t)blk * 8 + (size_t)bi]);
            size_t slot = (size_t)__ldg(&local[n]) * EDGE_SLOTS +
                          (size_t)tsdf_mc_edge_axis(e) * TSDF_BLOCK_VOXELS +
                          tsdf_voxel_index(lx & 7, ly & 7, lz & 7);
            indices[3 * (size_t)out + j] = edge_id(edge_bits, word_base, slot);
        }
        if (tri_keys != NULL)
            tri_keys[out] = block_keys[sel[blk]];
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
    if (slot >= CUDA_KEPT_SELECT)
        return TSDF_EINTERNAL;
    return cuda_kept_reserve(v, slot, bytes, p);
}

static void scratch_free(struct cuda_volume *v, struct mesh_scratch *s)
{
    (void)v;
    s->n = 0;
}

/* The list of blocks to mesh into d_sel (capacity cap): every live block,
 * or those of the n host keys that exist. */
static int select_blocks(struct cuda_volume *v, const uint64_t *keys, size_t n, int32_t *d_sel,
                         uint32_t *d_ctr, struct mesh_scratch *s)
{
    if (keys == NULL) {
        if (v->used == 0)
            return TSDF_OK;
        k_select_all<<<cuda_grid(v->used, 256), 256, 0, v->stream>>>(v->d_block_keys, v->used,
                                                                     d_sel, d_ctr);
        CUDA_TRY_LAUNCH();
        return TSDF_OK;
    }
    if (n == 0)
        return TSDF_OK;
    uint64_t *d_keys;
    int rc = scratch_alloc(v, s, (void **)&d_keys, n * sizeof(uint64_t));
    if (rc != TSDF_OK)
        return rc;
    CUDA_TRY(
        cudaMemcpyAsync(d_keys, keys, n * sizeof(uint64_t), cudaMemcpyHostToDevice, v->stream));
    k_select_keys<<<cuda_grid(n, 256), 256, 0, v->stream>>>(cuda_view(v), d_keys, (uint32_t)n,
                                                            d_sel, d_ctr);
    CUDA_TRY_LAUNCH();
    return TSDF_OK;
}

/* The mesh's output arrays, packed into one device buffer so that they
 * reach the host with one copy into pinned memory: pageable copies of
 * each array went through the driver's staging buffer at a fraction of
 * the bus's speed and took most of a mesh's wall time. Packed without
 * gaps, widest elements first (8-byte keys, then 4-byte floats and
 * indices, the colour bytes last), so every array is aligned to its
 * element and the copy reads only bytes the kernels wrote: 16-byte
 * rounded offsets left up to 15 unwritten bytes after each array, which
 * compute-sanitizer's initcheck reported as the copy's uninitialized
 * reads. */
struct mesh_pack {
    size_t pos, nrm, col, idx, tri_keys, meshed, total;
};

static size_t pack_add(size_t *at, size_t bytes)
{
    size_t off = *at;
    *at += bytes;
    return off;
}

static void pack_layout(struct mesh_pack *k, size_t nverts, size_t ntris, size_t nsel, int color,
                        int tri_keys, int meshed)
{
    size_t at = 0;
    k->tri_keys = pack_add(&at, tri_keys ? ntris * sizeof(uint64_t) : 0);
    k->meshed = pack_add(&at, meshed ? nsel * sizeof(uint64_t) : 0);
    k->pos = pack_add(&at, nverts * 3 * sizeof(float));
    k->nrm = pack_add(&at, nverts * 3 * sizeof(float));
    k->idx = pack_add(&at, ntris * 3 * sizeof(uint32_t));
    k->col = pack_add(&at, color ? nverts * 3 : 0);
    k->total = at;
}

/* Grows the pinned host buffer to hold `bytes`. */
static int host_reserve(struct cuda_volume *v, size_t bytes)
{
    if (bytes <= v->h_mesh_cap)
        return TSDF_OK;
    if (v->h_mesh != NULL)
        (void)cudaFreeHost(v->h_mesh);
    v->h_mesh = NULL;
    v->h_mesh_cap = 0;
    /* Some headroom, so a growing map does not reallocate every call. */
    size_t want = bytes + bytes / 4;
    CUDA_TRY(cudaHostAlloc(&v->h_mesh, want, cudaHostAllocDefault));
    v->h_mesh_cap = want;
    return TSDF_OK;
}

/* *arr resized (realloc: an array of an earlier mesh that the caller
 * handed back keeps its pages, where fresh memory would take a page fault
 * every 4 KiB, most of a large mesh's way to the host) to n elements of
 * `elem` bytes (an allocation also when n is 0, as the mesh's arrays
 * always were), holding the bytes at offset `off` of the pinned buffer.
 * On failure *arr is left as it was. */
static int unpack(const struct cuda_volume *v, size_t off, size_t n, size_t elem, void **arr)
{
    void *a = realloc(*arr, (n ? n : 1) * elem);
    if (a == NULL)
        return TSDF_ENOMEM;
    *arr = a;
    if (n)
        memcpy(a, (const uint8_t *)v->h_mesh + off, n * elem);
    return TSDF_OK;
}

static int mesh_impl(struct cuda_volume *v, const uint64_t *keys, size_t nkeys, tsdf_mesh *out,
                     uint64_t **tri_keys_out, uint64_t **meshed_out, size_t *n_meshed,
                     struct mesh_scratch *s)
{
    /* The list holds at most every live block, or every listed key. */
    const uint32_t sel_cap = keys == NULL ? v->blocks : (uint32_t)nkeys;
    mesh_args a;
    memset(&a, 0, sizeof a);
    a.src.t = cuda_view(v);
    a.src.layout = v->p.layout;
    a.src.quant = v->quant;
    a.src.home_blk = -1; /* none: lookups go to the table */
    a.block_keys = v->d_block_keys;
    a.used = v->used;
    a.voxel_size = v->p.voxel_size_m;
    a.with_color = v->d_rgb != NULL;
    /* sel, touched, verts, tris, cells with triangles */
    uint32_t *d_ctr = v->d_counters + CUDA_CTR_AUX0;
    /* Pinned, so the counts' copies are plain DMA. */
    uint32_t *h_ctr = v->h_counters + CUDA_CTR_AUX0;
    int32_t *d_sel, *d_local;
    int rc;
    if (keys != NULL && nkeys > 0x7fffffffu)
        return TSDF_ETOO_LARGE;
    CUDA_TRY(cudaEventRecord(v->q_start, v->stream));
    CUDA_TRY(cudaMemsetAsync(d_ctr, 0, 5 * sizeof(uint32_t), v->stream));
    if ((rc = scratch_alloc(v, s, (void **)&d_sel, (size_t)sel_cap * sizeof(int32_t))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_local, (size_t)v->used * sizeof(int32_t))) != TSDF_OK)
        return rc;
    if (v->used)
        CUDA_TRY(cudaMemsetAsync(d_local, 0xff, (size_t)v->used * sizeof(int32_t), v->stream));
    if (sel_cap && (rc = select_blocks(v, keys, nkeys, d_sel, d_ctr, s)) != TSDF_OK)
        return rc;
    int32_t *d_nbl, *d_touched;
    if ((rc = scratch_alloc(v, s, (void **)&d_nbl, (size_t)sel_cap * 8 * sizeof(int32_t))) !=
            TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_touched, (size_t)sel_cap * 8 * sizeof(int32_t))) !=
            TSDF_OK)
        return rc;
    if (sel_cap) {
        k_touch<<<cuda_grid((uint64_t)sel_cap * 8, 256), 256, 0, v->stream>>>(
            a, d_sel, d_nbl, d_local, d_touched, d_ctr);
        CUDA_TRY_LAUNCH();
    }
    /* The passes up to the counts' read-back are sized by bounds, and
     * read the selected and touched counts on the device: the host
     * waited for those counts here once, a round trip inside every
     * mesh. The selected blocks are distinct live blocks (the keys are
     * distinct: the front end sorts them unique), so at most `blocks`
     * however many keys an incremental mesh lists; the touched ones are
     * distinct live blocks, at most 8 for each selected one. */
    const uint32_t sel_bound = sel_cap < v->blocks ? sel_cap : v->blocks;
    const uint64_t touched_bound =
        (uint64_t)sel_bound * 8 < v->blocks ? (uint64_t)sel_bound * 8 : (uint64_t)v->blocks;
    const uint64_t ncells = (uint64_t)sel_bound * TSDF_BLOCK_VOXELS;
    if (touched_bound * EDGE_SLOTS > 0xffffffffull || ncells > 0xffffffffull)
        return TSDF_ETOO_LARGE;
    const size_t nwords_bound = (size_t)touched_bound * EDGE_WORDS;
    uint32_t *d_bits, *d_word_base, *d_tri_off, *d_cell_list;
    uint8_t *d_cube;
    if ((rc = scratch_alloc(v, s, (void **)&d_bits, nwords_bound * sizeof(uint32_t))) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_word_base, nwords_bound * sizeof(uint32_t))) !=
            TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_cube, (size_t)ncells)) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_tri_off, (size_t)ncells * sizeof(uint32_t))) !=
            TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_cell_list, (size_t)ncells * sizeof(uint32_t))) !=
            TSDF_OK)
        return rc;
    if (sel_bound) {
        CUDA_TRY(cudaMemsetAsync(d_bits, 0, nwords_bound * sizeof(uint32_t), v->stream));
        if (v->p.layout == TSDF_LAYOUT_S16)
            k_cells<TSDF_LAYOUT_S16><<<sel_bound, CELL_CTA, 0, v->stream>>>(a.src, d_nbl, d_local,
                                                                            d_bits, d_cube, d_ctr);
        else
            k_cells<TSDF_LAYOUT_F32><<<sel_bound, CELL_CTA, 0, v->stream>>>(a.src, d_nbl, d_local,
                                                                            d_bits, d_cube, d_ctr);
        CUDA_TRY_LAUNCH();
        k_number_edges<<<cuda_grid(nwords_bound, NUMBER_SPAN), NUMBER_CTA, 0, v->stream>>>(
            d_bits, (uint32_t)(nwords_bound / NUMBER_PER_THREAD), d_word_base, d_ctr);
        CUDA_TRY_LAUNCH();
        k_number_tris<<<cuda_grid(ncells, NUMBER_SPAN), NUMBER_CTA, 0, v->stream>>>(
            d_cube, sel_bound, d_tri_off, d_cell_list, d_ctr);
        CUDA_TRY_LAUNCH();
    }
    CUDA_TRY(
        cudaMemcpyAsync(h_ctr, d_ctr, 5 * sizeof(uint32_t), cudaMemcpyDeviceToHost, v->stream));
    if ((rc = cuda_sync_all(v)) != TSDF_OK)
        return rc;
    const uint32_t nsel = h_ctr[0];
    /* Only keys listed twice could select more blocks than the bound
     * (the passes above clamp to it); refuse rather than mesh them. */
    if (nsel > sel_bound || h_ctr[1] > touched_bound)
        return TSDF_EINTERNAL;
    const size_t nwords = (size_t)h_ctr[1] * EDGE_WORDS;
    const size_t nverts = h_ctr[2], ntris = h_ctr[3];
    const uint32_t ntri_cells = h_ctr[4];
    if (ntri_cells > ncells || (ntri_cells == 0) != (ntris == 0))
        return TSDF_EINTERNAL;

    struct mesh_pack k;
    uint8_t *d_out;
    uint32_t *d_vert_slot;
    pack_layout(&k, nverts, ntris, nsel, a.with_color, tri_keys_out != NULL, meshed_out != NULL);
    if ((rc = scratch_alloc(v, s, (void **)&d_out, k.total)) != TSDF_OK ||
        (rc = scratch_alloc(v, s, (void **)&d_vert_slot, nverts * sizeof(uint32_t))) != TSDF_OK ||
        (rc = host_reserve(v, k.total)) != TSDF_OK)
        return rc;
    float *d_pos = (float *)(d_out + k.pos), *d_nrm = (float *)(d_out + k.nrm);
    uint8_t *d_col = d_out + k.col;
    uint32_t *d_idx = (uint32_t *)(d_out + k.idx);
    uint64_t *d_tri_keys = tri_keys_out != NULL ? (uint64_t *)(d_out + k.tri_keys) : NULL;
    uint64_t *d_meshed = meshed_out != NULL ? (uint64_t *)(d_out + k.meshed) : NULL;
    if (nverts) {
        k_vert_slots<<<cuda_grid(nwords, 256), 256, 0, v->stream>>>(d_bits, d_word_base,
                                                                    (uint32_t)nwords, d_vert_slot);
        CUDA_TRY_LAUNCH();
        if (v->p.layout == TSDF_LAYOUT_S16)
            k_vertices<TSDF_LAYOUT_S16><<<cuda_grid(nverts, 128), 128, 0, v->stream>>>(
                a, d_touched, d_vert_slot, (uint32_t)nverts, d_pos, d_nrm, d_col);
        else
            k_vertices<TSDF_LAYOUT_F32><<<cuda_grid(nverts, 128), 128, 0, v->stream>>>(
                a, d_touched, d_vert_slot, (uint32_t)nverts, d_pos, d_nrm, d_col);
        CUDA_TRY_LAUNCH();
    }
    if (ntris) {
        k_tris<<<cuda_grid(ntri_cells, 128), 128, 0, v->stream>>>(
            d_nbl, d_local, d_bits, d_word_base, d_cube, d_tri_off, d_cell_list, ntri_cells, d_idx,
            d_sel, v->d_block_keys, d_tri_keys);
        CUDA_TRY_LAUNCH();
    }
    if (d_meshed != NULL && nsel) {
        k_sel_keys<<<cuda_grid(nsel, 256), 256, 0, v->stream>>>(v->d_block_keys, d_sel, nsel,
                                                                d_meshed);
        CUDA_TRY_LAUNCH();
    }
    CUDA_TRY(cudaEventRecord(v->q_end, v->stream));

    if (k.total)
        CUDA_TRY(cudaMemcpyAsync(v->h_mesh, d_out, k.total, cudaMemcpyDeviceToHost, v->stream));
    if ((rc = cuda_sync_all(v)) != TSDF_OK)
        return rc;
    /* The arrays out already holds (handed back by the front end) are
     * reused; the block lists are new. */
    uint64_t *tri_keys = NULL, *meshed = NULL;
    rc = unpack(v, k.pos, nverts, 3 * sizeof(float), (void **)&out->positions);
    if (rc == TSDF_OK)
        rc = unpack(v, k.nrm, nverts, 3 * sizeof(float), (void **)&out->normals);
    if (rc == TSDF_OK && a.with_color)
        rc = unpack(v, k.col, nverts, 3, (void **)&out->colors);
    if (rc == TSDF_OK)
        rc = unpack(v, k.idx, ntris, 3 * sizeof(uint32_t), (void **)&out->indices);
    if (rc == TSDF_OK && tri_keys_out != NULL)
        rc = unpack(v, k.tri_keys, ntris, sizeof(uint64_t), (void **)&tri_keys);
    if (rc == TSDF_OK && meshed_out != NULL)
        rc = unpack(v, k.meshed, nsel, sizeof(uint64_t), (void **)&meshed);
    if (rc != TSDF_OK) {
        free(tri_keys);
        free(meshed);
        return rc;
    }
    if (!a.with_color) {
        free(out->colors);
        out->colors = NULL;
    }
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, v->q_start, v->q_end) == cudaSuccess)
        v->last_mesh_ms = ms;
    out->vertex_count = nverts;
    out->triangle_count = ntris;
    if (tri_keys_out != NULL)
        *tri_keys_out = tri_keys;
    if (meshed_out != NULL) {
        if (nsel > 1)
            tsdf_sort_u64(meshed, nsel);
        *meshed_out = meshed;
        *n_meshed = nsel;
    }
    return TSDF_OK;
}

int cuda_mesh(struct cuda_volume *v, const uint64_t *keys, size_t n, tsdf_mesh *out,
              uint64_t **tri_keys, uint64_t **meshed, size_t *n_meshed)
{
    struct mesh_scratch s;
    memset(&s, 0, sizeof s);
    int rc = mesh_impl(v, keys, n, out, tri_keys, meshed, n_meshed, &s);
    scratch_free(v, &s);
    return rc;
}
