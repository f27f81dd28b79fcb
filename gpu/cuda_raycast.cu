/*
 * cuda_raycast.cu - the raycast on the GPU: one thread per pixel runs the
 * CPU reference's march (gpu/cpu_raycast.c) step for step: from min_depth
 * along the pixel's ray, skipping unallocated blocks to their exit, sampling
 * the trilinearly interpolated TSDF (tsdf_trilinear) of the 8 surrounding
 * voxels, stepping 0.75 sdf (at least half a voxel), and refining the first
 * + to - crossing with tsdf_zero_crossing plus one secant step. Normals are
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

struct ray_args {
    cuda_table_view t;
    uint32_t width, height;
    tsdf_intrinsics K;
    float T_world_cam[16];
    float z_min, z_max;
    float voxel_size, inv_voxel_size, inv_block_size;
};

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

static __device__ const tsdf_voxel *cached_block(const ray_args &a, dev_block_cache *c, int32_t bx,
                                                 int32_t by, int32_t bz)
{
    if (c->k0[0] == bx && c->k0[1] == by && c->k0[2] == bz)
        return c->b0;
    if (c->k1[0] == bx && c->k1[1] == by && c->k1[2] == bz)
        return c->b1;
    const tsdf_voxel *blk = NULL;
    if (tsdf_block_coord_valid(bx, by, bz)) {
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
    c->next ^= 1;
    return blk;
}

/* The CPU's gather_cell (cpu_raycast.c). A cell inside one block (7 of 8
 * per axis) takes one lookup and issues its 16 loads at once; the CPU
 * stops at the first unknown corner, which gives the same result since
 * loads have no side effects. A cell across a block face walks the corners
 * as the CPU does. */
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
    if ((base[0] & 7) != 7 && (base[1] & 7) != 7 && (base[2] & 7) != 7) {
        const tsdf_voxel *b = cached_block(a, c, tsdf_floor_div8(base[0]),
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
            cached_block(a, c, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
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

static __device__ int sample_sdf(const ray_args &a, dev_block_cache *c, const float p[3],
                                 float *sdf)
{
    float c8[8], frac[3];
    tsdf_voxel vox8[8];
    if (!gather_cell(a, c, p, c8, vox8, frac))
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
        ok = sample_sdf(a, c, pp, &sp) && sample_sdf(a, c, pm, &sm);
        n[ax] = sp - sm;
        if (!ok)
            break;
    }
    if (ok && tsdf_normalize3(n))
        return 1;
    if (!gather_cell(a, c, p, c8, vox8, frac))
        return 0;
    tsdf_trilinear_grad(c8, frac[0], frac[1], frac[2], n);
    return tsdf_normalize3(n);
}

static __device__ void surface_color(const ray_args &a, dev_block_cache *c, const float p[3],
                                     uint8_t rgb[3])
{
    float c8[8], frac[3];
    tsdf_voxel vox8[8];
    rgb[0] = rgb[1] = rgb[2] = 0;
    if (!gather_cell(a, c, p, c8, vox8, frac))
        return;
    for (int ch = 0; ch < 3; ch++) {
        float col[8];
        for (int k = 0; k < 8; k++)
            col[k] = (float)vox8[k].rgb[ch];
        float m = tsdf_trilinear(col, frac[0], frac[1], frac[2]) + 0.5f;
        rgb[ch] = (uint8_t)(m < 0.0f ? 0.0f : (m > 255.0f ? 255.0f : m));
    }
}

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
    float z = z_min, prev_z = 0.0f, prev_s = 0.0f;
    int prev_known = 0;

    for (double it = 0; z <= z_max && it < max_iter; it++) {
        float p[3], sdf;
        int32_t b[3];
        ray_point(o, d, z, p);
        if (!tsdf_world_to_block(p, a.inv_block_size, b))
            return 0;
        if (cached_block(a, c, b[0], b[1], b[2]) == NULL) {
            float z_next = block_exit_z(o, d, b, block_m) + eps_z;
            prev_known = 0;
            z = z_next > z + eps_z ? z_next : z + eps_z;
            continue;
        }
        if (!sample_sdf(a, c, p, &sdf)) {
            prev_known = 0;
            z += min_step_z;
            continue;
        }
        if (prev_known && prev_s > 0.0f && sdf <= 0.0f) {
            float zc = tsdf_zero_crossing(prev_z, prev_s, z, sdf), pc[3], sc;
            ray_point(o, d, zc, pc);
            if (sample_sdf(a, c, pc, &sc)) {
                if (sc > 0.0f)
                    zc = tsdf_zero_crossing(zc, sc, z, sdf);
                else if (sc < 0.0f)
                    zc = tsdf_zero_crossing(prev_z, prev_s, zc, sc);
            }
            *z_hit = zc;
            return 1;
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

template <bool NORMALS, bool COLOR>
static __global__ void k_raycast(ray_args a, float *depth, float *normals, uint8_t *rgb)
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
    if (march(a, &c, o, d, a.z_min, a.z_max, &z)) {
        float hit[3];
        ray_point(o, d, z, hit);
        depth[i] = z;
        if (NORMALS) {
            float n[3];
            if (!surface_normal(a, &c, hit, n))
                n[0] = n[1] = n[2] = NAN;
            normals[3 * i] = n[0];
            normals[3 * i + 1] = n[1];
            normals[3 * i + 2] = n[2];
        }
        if (COLOR)
            surface_color(a, &c, hit, &rgb[3 * i]);
    } else {
        depth[i] = NAN;
        if (NORMALS)
            normals[3 * i] = normals[3 * i + 1] = normals[3 * i + 2] = NAN;
        if (COLOR)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = 0;
    }
}

int cuda_raycast(struct cuda_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    const size_t npix = (size_t)p->width * p->height;
    const size_t bytes = npix * (sizeof(float) + (out->normals ? 3 * sizeof(float) : 0) +
                                 (out->rgb ? 3 : 0));
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
    if (out->normals && out->rgb)
        k_raycast<true, true><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else if (out->normals)
        k_raycast<true, false><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else if (out->rgb)
        k_raycast<false, true><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
    else
        k_raycast<false, false><<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);
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
