/*
 * cuda_raycast.cu - the raycast on the GPU: one thread per pixel runs the
 * CPU reference's march (gpu/cpu_raycast.c) step for step: from min_depth
 * along the pixel's ray, skipping unallocated blocks to their exit, sampling
 * the trilinearly interpolated TSDF (tsdf_trilinear) of the 8 surrounding
 * voxels, stepping 0.75 sdf (at least half a voxel), and refining the first
 * + to - crossing with tsdf_zero_crossing plus one secant step (a crossing
 * whose refinement falls in unobserved space is passed over). Normals are
 * central differences of the interpolated TSDF (cell gradient as fallback).
 *
 * The operations and their order are those of the CPU code, and the
 * backend is compiled with --fmad=false, so a GPU ray sees the same samples
 * as the CPU ray; the depths agree to float rounding of the lookups.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"

int cuda_sync_all(struct cuda_volume *v);

/* A dense bit per block over the bounding box of the allocated blocks
 * (bits == NULL: none; then every miss asks the table). It answers "not
 * allocated" with one cached load, where the table would walk a probe
 * chain; it is exact (bit set iff the block is in the table), so it changes
 * no result, only the cost of skipping empty space. */
struct occ_grid {
    const uint32_t *bits;
    int32_t lo[3];
    uint32_t dim[3];
};

struct ray_args {
    occ_grid occ;
    cuda_table_view t;
    uint32_t width, height;
    tsdf_intrinsics K;
    float T_world_cam[16];
    float z_min, z_max;
    float voxel_size, inv_voxel_size, inv_block_size;
};

/* Raycast kernel variants (template parameter VAR), all computing the
 * same result; they differ only in how blocks are found:
 *   RC_FAST  a cell inside one block gathers its 8 corners with one lookup;
 *   RC_TWO   the per-thread block cache holds two entries instead of one;
 *   RC_OCC   misses consult the occupancy grid before the hash table;
 *   RC_OCCUPANCY  caps registers at 64 for 8 resident CTAs per SM.
 * The volume picks one at creation (TSDF_CUDA_RAYCAST_VARIANT overrides,
 * for measurements); see cuda_raycast.
 *
 * Measured on an H200 (7-Scenes, 100 frames fused at 1 cm, 640x480 depth +
 * normals from frame 50, kernel median of 20): variant 0 1.26 ms, 4 (grid)
 * 1.84 ms, 12 (grid, 64 registers) 1.86 ms, 7 (all) 2.17 ms; all gave the
 * CPU's depths exactly. The table is small and L2-resident, so a miss costs
 * little, and every extra register costs occupancy in this latency-bound
 * loop: the plain variant 0 is the default. */
#define RC_FAST 1
#define RC_TWO 2
#define RC_OCC 4
#define RC_OCCUPANCY 8 /* __launch_bounds__ for 8 CTAs of 128 per SM (64 registers) */

/* A two-entry block cache per thread (the CPU keeps one entry; the cache
 * only saves lookups, it never changes a result). Two entries keep both
 * blocks of a cell that straddles a block face, and the block of the ray
 * point next to the block of the cell's base voxel. Entries are addressed
 * with constant indices only, so they stay in registers. */
struct dev_block_cache {
    int32_t k0[3], k1[3];
    const tsdf_voxel *b0, *b1;
    int next;
};

static __device__ __forceinline__ void cache_init(dev_block_cache *c)
{
    /* No valid block coordinate is INT32_MIN (the key range is +-2^20). */
    c->k0[0] = c->k1[0] = INT32_MIN;
    c->k0[1] = c->k0[2] = c->k1[1] = c->k1[2] = 0;
    c->b0 = c->b1 = NULL;
    c->next = 0;
}

template <int VAR>
static __device__ const tsdf_voxel *cached_block(const ray_args &a, dev_block_cache *c, int32_t bx,
                                                 int32_t by, int32_t bz)
{
    if (c->k0[0] == bx && c->k0[1] == by && c->k0[2] == bz)
        return c->b0;
    if ((VAR & RC_TWO) && c->k1[0] == bx && c->k1[1] == by && c->k1[2] == bz)
        return c->b1;
    const tsdf_voxel *blk = NULL;
    int maybe = tsdf_block_coord_valid(bx, by, bz);
    if ((VAR & RC_OCC) && maybe && a.occ.bits) {
        uint32_t rx = (uint32_t)(bx - a.occ.lo[0]), ry = (uint32_t)(by - a.occ.lo[1]),
                 rz = (uint32_t)(bz - a.occ.lo[2]);
        if (rx >= a.occ.dim[0] || ry >= a.occ.dim[1] || rz >= a.occ.dim[2]) {
            maybe = 0;
        } else {
            uint64_t bit = rx + (uint64_t)a.occ.dim[0] * (ry + (uint64_t)a.occ.dim[1] * rz);
            maybe = (__ldg(&a.occ.bits[bit >> 5]) >> (bit & 31)) & 1u;
        }
    }
    if (maybe) {
        int32_t b = cuda_table_find(a.t, tsdf_block_key(bx, by, bz));
        if (b >= 0)
            blk = a.t.voxels + (size_t)b * TSDF_BLOCK_VOXELS;
    }
    if (c->next == 0) {
        c->k0[0] = bx;
        c->k0[1] = by;
        c->k0[2] = bz;
        c->b0 = blk;
    } else {
        c->k1[0] = bx;
        c->k1[1] = by;
        c->k1[2] = bz;
        c->b1 = blk;
    }
    if (VAR & RC_TWO)
        c->next ^= 1;
    return blk;
}

/* The CPU's gather_cell (cpu_raycast.c). A cell inside one block (7 of 8
 * per axis) takes one lookup and issues its 16 loads at once; the CPU
 * stops at the first unknown corner, which gives the same result since
 * loads have no side effects. A cell across a block face walks the corners
 * as the CPU does. */
template <int VAR>
static __device__ int gather_cell(const ray_args &a, dev_block_cache *c, const float p[3],
                                  float c8[8], tsdf_voxel vox8[8], float frac[3])
{
    int32_t base[3];
    for (int i = 0; i < 3; i++) {
        float f = p[i] * a.inv_voxel_size - 0.5f;
        float fl = floorf(f);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return 0;
        base[i] = (int32_t)fl;
        frac[i] = f - fl;
    }
    if ((VAR & RC_FAST) && (base[0] & 7) != 7 && (base[1] & 7) != 7 && (base[2] & 7) != 7) {
        const tsdf_voxel *b = cached_block<VAR>(a, c, tsdf_floor_div8(base[0]),
                                                tsdf_floor_div8(base[1]), tsdf_floor_div8(base[2]));
        if (b == NULL)
            return 0;
        const tsdf_voxel *v0 = b + tsdf_voxel_index(base[0] & 7, base[1] & 7, base[2] & 7);
        int known = 1;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            vox8[k] = v0[(k & 1) + TSDF_BLOCK_DIM * (((k >> 1) & 1) + TSDF_BLOCK_DIM * (k >> 2))];
            c8[k] = vox8[k].sdf_m;
            known &= tsdf_voxel_known(&vox8[k]);
        }
        return known;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int32_t x = base[0] + (k & 1), y = base[1] + ((k >> 1) & 1), z = base[2] + ((k >> 2) & 1);
        const tsdf_voxel *b =
            cached_block<VAR>(a, c, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
        if (b == NULL)
            return 0;
        tsdf_voxel vx = b[tsdf_voxel_index(x & 7, y & 7, z & 7)];
        if (!tsdf_voxel_known(&vx))
            return 0;
        vox8[k] = vx;
        c8[k] = vx.sdf_m;
    }
    return 1;
}

template <int VAR>
static __device__ int sample_sdf(const ray_args &a, dev_block_cache *c, const float p[3],
                                 float *sdf)
{
    float c8[8], frac[3];
    tsdf_voxel vox8[8];
    if (!gather_cell<VAR>(a, c, p, c8, vox8, frac))
        return 0;
    *sdf = tsdf_trilinear(c8, frac[0], frac[1], frac[2]);
    return 1;
}

static __device__ __forceinline__ void ray_point(const float o[3], const float d[3], float z,
                                                 float p[3])
{
    p[0] = o[0] + z * d[0];
    p[1] = o[1] + z * d[1];
    p[2] = o[2] + z * d[2];
}

static __device__ float block_exit_z(const float o[3], const float d[3], const int32_t b[3],
                                     float block_m)
{
    float z_exit = INFINITY;
    for (int i = 0; i < 3; i++) {
        float t;
        if (d[i] > 0.0f)
            t = ((float)(b[i] + 1) * block_m - o[i]) / d[i];
        else if (d[i] < 0.0f)
            t = ((float)b[i] * block_m - o[i]) / d[i];
        else
            continue;
        if (t < z_exit)
            z_exit = t;
    }
    return z_exit;
}

template <int VAR>
static __device__ int surface_normal(const ray_args &a, dev_block_cache *c, const float p[3],
                                     float n[3])
{
    const float h = a.voxel_size;
    float c8[8], frac[3];
    tsdf_voxel vox8[8];
    int ok = 1;
    for (int ax = 0; ax < 3 && ok; ax++) {
        float pp[3] = {p[0], p[1], p[2]}, pm[3] = {p[0], p[1], p[2]}, sp = 0.0f, sm = 0.0f;
        pp[ax] += h;
        pm[ax] -= h;
        ok = sample_sdf<VAR>(a, c, pp, &sp) && sample_sdf<VAR>(a, c, pm, &sm);
        n[ax] = sp - sm;
        if (!ok)
            break;
    }
    if (ok && tsdf_normalize3(n))
        return 1;
    if (!gather_cell<VAR>(a, c, p, c8, vox8, frac))
        return 0;
    tsdf_trilinear_grad(c8, frac[0], frac[1], frac[2], n);
    return tsdf_normalize3(n);
}

template <int VAR>
static __device__ void surface_color(const ray_args &a, dev_block_cache *c, const float p[3],
                                     uint8_t rgb[3])
{
    float c8[8], frac[3];
    tsdf_voxel vox8[8];
    rgb[0] = rgb[1] = rgb[2] = 0;
    if (!gather_cell<VAR>(a, c, p, c8, vox8, frac))
        return;
    for (int ch = 0; ch < 3; ch++) {
        float col[8];
        for (int k = 0; k < 8; k++)
            col[k] = (float)vox8[k].rgb[ch];
        float m = tsdf_trilinear(col, frac[0], frac[1], frac[2]) + 0.5f;
        rgb[ch] = (uint8_t)(m < 0.0f ? 0.0f : (m > 255.0f ? 255.0f : m));
    }
}

template <int VAR>
static __device__ int march(const ray_args &a, dev_block_cache *c, const float o[3],
                            const float d[3], float z_min, float z_max, float *z_hit)
{
    const float s = a.voxel_size;
    const float block_m = (float)TSDF_BLOCK_DIM * s;
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const float min_step_z = 0.5f * s / dir_len;
    const float eps_z = 0.01f * s / dir_len;
    /* The CPU's bound on the loop (never reached by a correct march). */
    const double max_iter = (double)(z_max - z_min) / (double)eps_z + 64.0;
    /* The CPU counts in double; for an integral count it < max_iter is
     * it < ceil(max_iter), which an integer counter tests in fewer
     * registers. */
    const double lim = ceil(max_iter);
    const uint64_t max_it = lim < 1.8e19 ? (uint64_t)lim : UINT64_MAX;
    float z = z_min, prev_z = 0.0f, prev_s = 0.0f;
    int prev_known = 0;

    for (uint64_t it = 0; z <= z_max && it < max_it; it++) {
        float p[3], sdf;
        int32_t b[3];
        ray_point(o, d, z, p);
        if (!tsdf_world_to_block(p, a.inv_block_size, b))
            return 0;
        if (cached_block<VAR>(a, c, b[0], b[1], b[2]) == NULL) {
            float z_next = block_exit_z(o, d, b, block_m) + eps_z;
            prev_known = 0;
            z = z_next > z + eps_z ? z_next : z + eps_z;
            continue;
        }
        if (!sample_sdf<VAR>(a, c, p, &sdf)) {
            prev_known = 0;
            z += min_step_z;
            continue;
        }
        if (prev_known && prev_s > 0.0f && sdf <= 0.0f) {
            float zc = tsdf_zero_crossing(prev_z, prev_s, z, sdf), pc[3], sc;
            /* One secant refinement on the side that still brackets the
             * root; the hit must lie in a known cell, else the first
             * estimate stands (as on the CPU). */
            ray_point(o, d, zc, pc);
            if (sample_sdf<VAR>(a, c, pc, &sc)) {
                float z2 = zc, p2[3], s2;
                if (sc > 0.0f)
                    z2 = tsdf_zero_crossing(zc, sc, z, sdf);
                else if (sc < 0.0f)
                    z2 = tsdf_zero_crossing(prev_z, prev_s, zc, sc);
                ray_point(o, d, z2, p2);
                *z_hit = sample_sdf<VAR>(a, c, p2, &s2) ? z2 : zc;
                return 1;
            }
            /* The segment passes a cell with an unobserved corner (the rim
             * of what was seen): no crossing through unknown space. */
            prev_known = 0;
            z += min_step_z;
            continue;
        }
        prev_known = 1;
        prev_z = z;
        prev_s = sdf;
        {
            float step = sdf > 0.0f ? 0.75f * sdf / dir_len : 0.0f;
            z += step > min_step_z ? step : min_step_z;
        }
    }
    return 0;
}

/* Bounding box of the allocated blocks: bbox[0..2] min, bbox[3..5] max. */
static __global__ void k_bbox(const uint64_t *block_keys, uint32_t n, int32_t *bbox)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int32_t b[3];
    tsdf_block_key_unpack(block_keys[i], &b[0], &b[1], &b[2]);
    for (int k = 0; k < 3; k++) {
        atomicMin(&bbox[k], b[k]);
        atomicMax(&bbox[3 + k], b[k]);
    }
}

static __global__ void k_occ_fill(const uint64_t *block_keys, uint32_t n, occ_grid g,
                                  uint32_t *bits)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int32_t b[3];
    tsdf_block_key_unpack(block_keys[i], &b[0], &b[1], &b[2]);
    uint64_t bit = (uint64_t)(b[0] - g.lo[0]) +
                   (uint64_t)g.dim[0] * ((uint64_t)(b[1] - g.lo[1]) +
                                         (uint64_t)g.dim[1] * (uint64_t)(b[2] - g.lo[2]));
    atomicOr(&bits[bit >> 5], 1u << (bit & 31));
}

template <bool NORMALS, bool COLOR, int VAR>
static __global__ void __launch_bounds__(128, (VAR & RC_OCCUPANCY) ? 8 : 1)
    k_raycast(ray_args a, float *depth, float *normals, uint8_t *rgb)
{
    uint32_t px = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= a.width || py >= a.height)
        return;
    size_t i = (size_t)py * a.width + px;
    dev_block_cache c;
    cache_init(&c);
    float o[3], d[3], z;
    tsdf_pixel_ray_world(a.T_world_cam, &a.K, (float)px, (float)py, o, d);
    if (march<VAR>(a, &c, o, d, a.z_min, a.z_max, &z)) {
        float hit[3];
        ray_point(o, d, z, hit);
        depth[i] = z;
        if (NORMALS) {
            float n[3];
            if (!surface_normal<VAR>(a, &c, hit, n))
                n[0] = n[1] = n[2] = NAN;
            normals[3 * i] = n[0];
            normals[3 * i + 1] = n[1];
            normals[3 * i + 2] = n[2];
        }
        if (COLOR)
            surface_color<VAR>(a, &c, hit, &rgb[3 * i]);
    } else {
        depth[i] = NAN;
        if (NORMALS)
            normals[3 * i] = normals[3 * i + 1] = normals[3 * i + 2] = NAN;
        if (COLOR)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = 0;
    }
}

template <int VAR>
static void launch_raycast(struct cuda_volume *v, dim3 grid, dim3 block, const ray_args &a,
                           const tsdf_raycast_output *out, float *d_depth, float *d_normals,
                           uint8_t *d_rgb)
{
    if (out->normals && out->rgb)
        k_raycast<true, true, VAR><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else if (out->normals)
        k_raycast<true, false, VAR><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else if (out->rgb)
        k_raycast<false, true, VAR><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else
        k_raycast<false, false, VAR><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
}

/* Grids larger than this (bits) are not built; the table answers then. */
#define OCC_MAX_BITS (1ull << 27)

/* Builds (or reuses, while the volume's version is unchanged) the
 * occupancy grid of the allocated blocks. */
static int occ_build(struct cuda_volume *v, occ_grid *g)
{
    memset(g, 0, sizeof *g);
    if (v->blocks == 0)
        return TSDF_OK;
    if (v->occ_valid && v->occ_version == v->version && v->occ_blocks == v->blocks) {
        *g = *(const occ_grid *)v->occ_desc;
        return TSDF_OK;
    }
    v->occ_valid = 0;
    int32_t h_bbox[6] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MIN, INT32_MIN, INT32_MIN};
    CUDA_TRY(cudaMemcpyAsync(v->d_bbox, h_bbox, sizeof h_bbox, cudaMemcpyHostToDevice, v->stream));
    k_bbox<<<cuda_grid(v->blocks, 256), 256, 0, v->stream>>>(v->d_block_keys, v->blocks, v->d_bbox);
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaMemcpyAsync(h_bbox, v->d_bbox, sizeof h_bbox, cudaMemcpyDeviceToHost, v->stream));
    CUDA_TRY(cudaStreamSynchronize(v->stream));
    uint64_t dim[3], total = 1;
    for (int k = 0; k < 3; k++) {
        dim[k] = (uint64_t)((int64_t)h_bbox[3 + k] - (int64_t)h_bbox[k] + 1);
        total *= dim[k];
    }
    if (total > OCC_MAX_BITS)
        return TSDF_OK;
    size_t bytes = (size_t)((total + 31) / 32) * sizeof(uint32_t);
    if (bytes > v->occ_cap) {
        cuda_dev_free(v, v->d_occ, v->occ_cap);
        v->d_occ = NULL;
        v->occ_cap = 0;
        int rc = cuda_dev_alloc(v, &v->d_occ, bytes);
        if (rc != TSDF_OK)
            return rc;
        v->occ_cap = bytes;
    }
    CUDA_TRY(cudaMemsetAsync(v->d_occ, 0, bytes, v->stream));
    g->bits = (const uint32_t *)v->d_occ;
    for (int k = 0; k < 3; k++) {
        g->lo[k] = h_bbox[k];
        g->dim[k] = (uint32_t)dim[k];
    }
    k_occ_fill<<<cuda_grid(v->blocks, 256), 256, 0, v->stream>>>(v->d_block_keys, v->blocks, *g,
                                                                 (uint32_t *)v->d_occ);
    CUDA_TRY_LAUNCH();
    static_assert(sizeof(occ_grid) <= sizeof(v->occ_desc), "occ_desc size");
    memcpy(v->occ_desc, g, sizeof *g);
    v->occ_valid = 1;
    v->occ_version = v->version;
    v->occ_blocks = v->blocks;
    return TSDF_OK;
}

int cuda_raycast(struct cuda_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    const size_t npix = (size_t)p->width * p->height;
    const size_t bytes =
        npix * (sizeof(float) + (out->normals ? 3 * sizeof(float) : 0) + (out->rgb ? 3 : 0));
    /* One device buffer for the outputs, kept between calls. */
    if (bytes > v->ray_cap) {
        int rc = cuda_sync_all(v);
        if (rc != TSDF_OK)
            return rc;
        cuda_dev_free(v, v->d_ray, v->ray_cap);
        v->d_ray = NULL;
        v->ray_cap = 0;
        rc = cuda_dev_alloc(v, &v->d_ray, bytes);
        if (rc != TSDF_OK)
            return rc;
        v->ray_cap = bytes;
    }
    float *d_depth = (float *)v->d_ray;
    float *d_normals = out->normals ? d_depth + npix : NULL;
    uint8_t *d_rgb = (uint8_t *)(d_depth + npix + (out->normals ? 3 * npix : 0));

    ray_args a;
    memset(&a.occ, 0, sizeof a.occ);
    if (v->raycast_variant & RC_OCC) {
        int rc0 = occ_build(v, &a.occ);
        if (rc0 != TSDF_OK)
            return rc0;
    }
    a.t = cuda_view(v);
    a.width = p->width;
    a.height = p->height;
    a.K = p->K;
    memcpy(a.T_world_cam, p->T_world_cam, sizeof a.T_world_cam);
    a.z_min = p->min_depth_m;
    a.z_max = p->max_depth_m;
    a.voxel_size = v->p.voxel_size_m;
    a.inv_voxel_size = 1.0f / v->p.voxel_size_m;
    a.inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * v->p.voxel_size_m);

    dim3 block(16, 8);
    dim3 grid((p->width + block.x - 1) / block.x, (p->height + block.y - 1) / block.y);
    CUDA_TRY(cudaEventRecord(v->q_start, v->stream));
    switch (v->raycast_variant) {
    case 0:
        launch_raycast<0>(v, grid, block, a, out, d_depth, d_normals, d_rgb);
        break;
    case RC_OCC:
        launch_raycast<RC_OCC>(v, grid, block, a, out, d_depth, d_normals, d_rgb);
        break;
    case RC_OCC | RC_OCCUPANCY:
        launch_raycast<RC_OCC | RC_OCCUPANCY>(v, grid, block, a, out, d_depth, d_normals, d_rgb);
        break;
    case RC_FAST | RC_TWO:
        launch_raycast<RC_FAST | RC_TWO>(v, grid, block, a, out, d_depth, d_normals, d_rgb);
        break;
    default:
        launch_raycast<RC_FAST | RC_TWO | RC_OCC>(v, grid, block, a, out, d_depth, d_normals,
                                                  d_rgb);
        break;
    }
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaEventRecord(v->q_end, v->stream));
    CUDA_TRY(cudaMemcpyAsync(out->depth_m, d_depth, npix * sizeof(float), cudaMemcpyDeviceToHost,
                             v->stream));
    if (out->normals)
        CUDA_TRY(cudaMemcpyAsync(out->normals, d_normals, 3 * npix * sizeof(float),
                                 cudaMemcpyDeviceToHost, v->stream));
    if (out->rgb)
        CUDA_TRY(cudaMemcpyAsync(out->rgb, d_rgb, 3 * npix, cudaMemcpyDeviceToHost, v->stream));
    int rc = cuda_sync_all(v);
    if (rc != TSDF_OK)
        return rc;
    float ms = 0.0f;
    CUDA_TRY(cudaEventElapsedTime(&ms, v->q_start, v->q_end));
    v->last_raycast_ms = ms;
    return TSDF_OK;
}
