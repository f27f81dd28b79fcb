/*
 * tsdf_math.h - the per-voxel maths, written once.
 *
 * Everything here is a static inline function marked TSDF_HD: plain C for
 * the CPU reference backend, __host__ __device__ under nvcc, so the CUDA
 * kernels and the CPU reference compute the same thing with the same code.
 * No allocation, no I/O, no globals except the constant lookup tables (see
 * tsdf_mc_tables.h).
 */
#ifndef TSDF_MATH_H
#define TSDF_MATH_H

#include <math.h>
#include <stdint.h>

#include "tsdf_volume.h"
#include "tsdf_voxel_layout.h"

#ifdef __CUDACC__
#define TSDF_HD __host__ __device__ __forceinline__
#else
#define TSDF_HD static inline
#endif

/* Shared code that calls a voxel lookup of the including file
 * (tsdf_raycast_march.h, tsdf_mesh_vertex.h) is marked TSDF_LOOKUP_FN, or
 * TSDF_LOOKUP_INLINE to force inlining: plain static C on the host, and
 * __device__ only under nvcc, because the CUDA lookups read device memory
 * and a __host__ __device__ function may not call a __device__ one.
 * TSDF_UNROLL asks nvcc to unroll the loop that follows (nothing in C). */
#ifdef __CUDACC__
#define TSDF_LOOKUP_FN static __device__
#define TSDF_LOOKUP_INLINE static __device__ __forceinline__
#define TSDF_UNROLL _Pragma("unroll")
#else
#define TSDF_LOOKUP_FN static
#define TSDF_LOOKUP_INLINE static inline
#define TSDF_UNROLL
#endif

/* ---- block keys --------------------------------------------------------
 * A block coordinate is the voxel coordinate floor-divided by 8. Each axis is
 * stored in 21 bits with an offset of 2^20, so block coordinates must lie in
 * [-2^20, 2^20 - 1] (about +-84 km at 1 cm voxels). Bit 63 is never set in a
 * valid key, so all-ones is the empty-slot sentinel. */
#define TSDF_KEY_BITS 21
#define TSDF_KEY_OFFSET (1 << 20)
#define TSDF_KEY_MASK ((1ull << TSDF_KEY_BITS) - 1ull)
#define TSDF_KEY_EMPTY 0xffffffffffffffffull
#define TSDF_BLOCK_COORD_MIN (-TSDF_KEY_OFFSET)
#define TSDF_BLOCK_COORD_MAX (TSDF_KEY_OFFSET - 1)

TSDF_HD int tsdf_block_coord_valid(int32_t bx, int32_t by, int32_t bz)
{
    return bx >= TSDF_BLOCK_COORD_MIN && bx <= TSDF_BLOCK_COORD_MAX && by >= TSDF_BLOCK_COORD_MIN &&
           by <= TSDF_BLOCK_COORD_MAX && bz >= TSDF_BLOCK_COORD_MIN && bz <= TSDF_BLOCK_COORD_MAX;
}

TSDF_HD uint64_t tsdf_block_key(int32_t bx, int32_t by, int32_t bz)
{
    return ((uint64_t)(uint32_t)(bx + TSDF_KEY_OFFSET) & TSDF_KEY_MASK) |
           (((uint64_t)(uint32_t)(by + TSDF_KEY_OFFSET) & TSDF_KEY_MASK) << TSDF_KEY_BITS) |
           (((uint64_t)(uint32_t)(bz + TSDF_KEY_OFFSET) & TSDF_KEY_MASK) << (2 * TSDF_KEY_BITS));
}

TSDF_HD void tsdf_block_key_unpack(uint64_t key, int32_t *bx, int32_t *by, int32_t *bz)
{
    *bx = (int32_t)(key & TSDF_KEY_MASK) - TSDF_KEY_OFFSET;
    *by = (int32_t)((key >> TSDF_KEY_BITS) & TSDF_KEY_MASK) - TSDF_KEY_OFFSET;
    *bz = (int32_t)((key >> (2 * TSDF_KEY_BITS)) & TSDF_KEY_MASK) - TSDF_KEY_OFFSET;
}

/* A 64-bit finaliser (splitmix64): neighbouring blocks land far apart, so
 * linear probing does not cluster along a surface. */
TSDF_HD uint64_t tsdf_key_hash(uint64_t key)
{
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return key;
}

/* ---- indexing ---------------------------------------------------------- */

TSDF_HD int32_t tsdf_floor_div8(int32_t v)
{
    /* Arithmetic shift floors for negatives too. */
    return v >> 3;
}

TSDF_HD int tsdf_voxel_index(int x, int y, int z)
{
    return x + TSDF_BLOCK_DIM * (y + TSDF_BLOCK_DIM * z);
}

/* World point -> continuous voxel coordinate. Voxel (i, j, k) has its centre
 * at ((i + 0.5) * s, (j + 0.5) * s, (k + 0.5) * s). */
TSDF_HD float tsdf_world_to_voxelf(float w, float inv_voxel_size)
{
    return w * inv_voxel_size - 0.5f;
}

TSDF_HD float tsdf_voxel_center(int32_t i, float voxel_size)
{
    return ((float)i + 0.5f) * voxel_size;
}

/* ---- poses ------------------------------------------------------------- */

/* p_out = T * p (T row-major 4x4, rigid). */
TSDF_HD void tsdf_transform_point(const float *T, const float *p, float *out)
{
    out[0] = T[0] * p[0] + T[1] * p[1] + T[2] * p[2] + T[3];
    out[1] = T[4] * p[0] + T[5] * p[1] + T[6] * p[2] + T[7];
    out[2] = T[8] * p[0] + T[9] * p[1] + T[10] * p[2] + T[11];
}

/* The inverse of a rigid transform: R^T, -R^T t. */
TSDF_HD void tsdf_rigid_inverse(const float *T, float *out)
{
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            out[r * 4 + c] = T[c * 4 + r];
    for (int r = 0; r < 3; r++)
        out[r * 4 + 3] = -(out[r * 4 + 0] * T[3] + out[r * 4 + 1] * T[7] + out[r * 4 + 2] * T[11]);
    out[12] = 0.0f;
    out[13] = 0.0f;
    out[14] = 0.0f;
    out[15] = 1.0f;
}

/* ---- depth samples ----------------------------------------------------- */

/* Depth in metres of one sample, or 0 when it is no measurement (0, NaN,
 * infinite, or outside [min, max]). */
TSDF_HD float tsdf_depth_sample_m(tsdf_depth_format fmt, const void *depth, uint32_t idx,
                                  float depth_scale, float min_m, float max_m)
{
    float d;
    if (fmt == TSDF_DEPTH_U16)
        d = (float)((const uint16_t *)depth)[idx] * depth_scale;
    else
        d = ((const float *)depth)[idx];
    /* NaN fails both comparisons. */
    if (!(d >= min_m && d <= max_m) || d <= 0.0f)
        return 0.0f;
    return d;
}

/* ---- the TSDF update --------------------------------------------------- */

/* Projective signed distance of a voxel at camera depth z_vox whose pixel
 * measured depth d_m: positive in front of the surface. Voxels more than
 * trunc behind the surface are not updated (returns 0, *sdf untouched). */
TSDF_HD int tsdf_projective_sdf(float d_m, float z_vox, float trunc_m, float *sdf)
{
    float s = d_m - z_vox;
    if (d_m <= 0.0f || s < -trunc_m)
        return 0;
    *sdf = s > trunc_m ? trunc_m : s;
    return 1;
}

/* Running weighted average with weight 1 per observation; the weight stops
 * at max_weight, after which the average keeps moving with a fixed window. */
TSDF_HD void tsdf_vox_update(tsdf_vox *v, float sdf, float max_weight)
{
    float w = v->weight;
    v->sdf_m = (v->sdf_m * w + sdf) / (w + 1.0f);
    v->weight = w + 1.0f < max_weight ? w + 1.0f : max_weight;
}

/* The colour's running average, with the voxel's weight before this
 * update. */
TSDF_HD void tsdf_rgb_update(uint8_t *rgb, float w_old, const uint8_t *src)
{
    for (int c = 0; c < 3; c++) {
        float mixed = ((float)rgb[c] * w_old + (float)src[c]) / (w_old + 1.0f);
        rgb[c] = (uint8_t)(mixed + 0.5f);
    }
}

/* ======================================================================
 * Everything below is shared, bit for bit, by the CPU reference backend and
 * the CUDA kernels. Build the CUDA side with --fmad=false (gpu/CMakeLists.txt
 * does) so that nvcc does not contract a * b + c into an FMA and both sides
 * round alike; then the allocated block set and the voxel values agree.
 *
 * Conventions:
 *   - Voxel (i, j, k) has its centre at ((i + 0.5) s, (j + 0.5) s, (k + 0.5) s)
 *     and covers [i s, (i + 1) s) on x (likewise y, z). Block (bx, by, bz)
 *     holds voxels 8 bx .. 8 bx + 7 (floor division, also for negatives).
 *   - Pixels: integer pixel coordinates are pixel centres. The ray of pixel
 *     (u, v) passes through camera point ((u - cx) / fx, (v - cy) / fy, 1);
 *     a camera point projects to the pixel whose centre is nearest,
 *     floor(fx * x * (1 / z) + cx + 0.5), evaluated in that order in float
 *     (same for v); see tsdf_project_nearest.
 *   - Rays are parameterised by camera depth z (not by length): the point at
 *     camera depth z of pixel (u, v) is origin + z * dir with the
 *     unnormalised dir of tsdf_pixel_ray_world, so one metre of depth is
 *     |dir| >= 1 metres along the ray.
 *   - The allocation band of a sample is measured along its ray: the points
 *     within trunc metres of the measured point on the ray, i.e. camera
 *     depths d +- trunc / |dir| (tsdf_band_dda_init of tsdf_band.h), so
 *     every ray's band has the same length 2 trunc whatever its angle to
 *     the optical axis.
 *   - Integration touches exactly the blocks that the allocation pass yields
 *     for this frame (tsdf_band.h's walk over every valid pixel), and updates
 *     every voxel of those blocks with tsdf_integrate_voxel, which skips
 *     samples on depth edges (tsdf_depth_edge). Other blocks, even in view,
 *     are left alone.
 * ====================================================================== */

#define TSDF_VOXEL_COORD_LIMIT 8388608.0f /* 2^23: voxel coords of valid blocks */

/* ---- coordinates --------------------------------------------------------- */

TSDF_HD void tsdf_voxel_index_unpack(int idx, int *x, int *y, int *z)
{
    *x = idx & (TSDF_BLOCK_DIM - 1);
    *y = (idx >> 3) & (TSDF_BLOCK_DIM - 1);
    *z = (idx >> 6) & (TSDF_BLOCK_DIM - 1);
}

/* Global voxel coordinate -> block coordinate and local index 0..7. */
TSDF_HD void tsdf_voxel_to_block(const int32_t v[3], int32_t b[3], int local[3])
{
    for (int i = 0; i < 3; i++) {
        b[i] = tsdf_floor_div8(v[i]);
        local[i] = (int)(v[i] & (TSDF_BLOCK_DIM - 1));
    }
}

/* The voxel that contains world point p: floor(p / s) per axis. Returns 0
 * (v untouched) when p is not finite or outside the representable range. */
TSDF_HD int tsdf_world_to_voxel(const float p[3], float inv_voxel_size, int32_t v[3])
{
    float f[3];
    for (int i = 0; i < 3; i++) {
        f[i] = floorf(p[i] * inv_voxel_size);
        /* NaN fails the comparison too. */
        if (!(f[i] >= -TSDF_VOXEL_COORD_LIMIT && f[i] < TSDF_VOXEL_COORD_LIMIT))
            return 0;
    }
    for (int i = 0; i < 3; i++)
        v[i] = (int32_t)f[i];
    return 1;
}

/* The block of a point P given in block units (world / block size): its
 * floor. Returns 0 when P is not finite or the block is outside the key
 * range. */
TSDF_HD int tsdf_block_of_units(const float P[3], int32_t b[3])
{
    for (int i = 0; i < 3; i++) {
        float f = floorf(P[i]);
        if (!(f >= (float)TSDF_BLOCK_COORD_MIN && f <= (float)TSDF_BLOCK_COORD_MAX))
            return 0;
    }
    for (int i = 0; i < 3; i++)
        b[i] = (int32_t)floorf(P[i]);
    return 1;
}

/* The block that contains world point p (inv_block_size = 1 / (8 s)).
 * Returns 0 when p is not finite or the block is outside the key range. */
TSDF_HD int tsdf_world_to_block(const float p[3], float inv_block_size, int32_t b[3])
{
    const float P[3] = {p[0] * inv_block_size, p[1] * inv_block_size, p[2] * inv_block_size};
    return tsdf_block_of_units(P, b);
}

/* World position of the centre of local voxel (x, y, z) of block b. */
TSDF_HD void tsdf_block_voxel_center(const int32_t b[3], int x, int y, int z, float voxel_size,
                                     float out[3])
{
    out[0] = tsdf_voxel_center(b[0] * TSDF_BLOCK_DIM + x, voxel_size);
    out[1] = tsdf_voxel_center(b[1] * TSDF_BLOCK_DIM + y, voxel_size);
    out[2] = tsdf_voxel_center(b[2] * TSDF_BLOCK_DIM + z, voxel_size);
}

/* ---- rays and projection ------------------------------------------------ */

/* out = R v, the rotation part of the row-major rigid transform T. */
TSDF_HD void tsdf_rotate(const float *T, const float *v, float *out)
{
    out[0] = T[0] * v[0] + T[1] * v[1] + T[2] * v[2];
    out[1] = T[4] * v[0] + T[5] * v[1] + T[6] * v[2];
    out[2] = T[8] * v[0] + T[9] * v[1] + T[10] * v[2];
}

/* The camera-frame ray of pixel (u, v) with z = 1. */
TSDF_HD void tsdf_pixel_ray_cam(const tsdf_intrinsics *K, float u, float v, float out[3])
{
    out[0] = (u - K->cx) / K->fx;
    out[1] = (v - K->cy) / K->fy;
    out[2] = 1.0f;
}

/* The world-frame ray of pixel (u, v): the point at camera depth z is
 * origin + z * dir (dir is not unit length; its camera-frame z is 1). */
TSDF_HD void tsdf_pixel_ray_world(const float *T_world_cam, const tsdf_intrinsics *K, float u,
                                  float v, float origin[3], float dir[3])
{
    float rc[3];
    tsdf_pixel_ray_cam(K, u, v, rc);
    tsdf_rotate(T_world_cam, rc, dir);
    origin[0] = T_world_cam[3];
    origin[1] = T_world_cam[7];
    origin[2] = T_world_cam[11];
}

/* The two halves of tsdf_project_nearest, so that a CPU loop can do the
 * first for a row of voxels at once (it has no branches): the continuous
 * pixel coordinates (+ 0.5, so that their floor is the nearest pixel) of
 * camera point p_cam, and then the checks and the floors. */
TSDF_HD void tsdf_project_uv(const tsdf_intrinsics *K, const float p_cam[3], float *uf, float *vf)
{
    float inv_z = 1.0f / p_cam[2];
    *uf = K->fx * p_cam[0] * inv_z + K->cx + 0.5f;
    *vf = K->fy * p_cam[1] * inv_z + K->cy + 0.5f;
}

TSDF_HD int tsdf_project_check(uint32_t w, uint32_t h, float z, float uf, float vf, uint32_t *u,
                               uint32_t *v)
{
    if (!(z > 0.0f))
        return 0;
    if (!(uf >= 0.0f && uf < (float)w && vf >= 0.0f && vf < (float)h))
        return 0;
    uint32_t ui = (uint32_t)floorf(uf);
    uint32_t vi = (uint32_t)floorf(vf);
    /* (float)w may round up for huge w; keep the index strictly inside. */
    if (ui >= w || vi >= h)
        return 0;
    *u = ui;
    *v = vi;
    return 1;
}

/* Projects camera point p_cam to its nearest pixel (see conventions above).
 * Returns 1 and (*u, *v) when z > 0 and the pixel lies in the w x h image,
 * else 0. */
TSDF_HD int tsdf_project_nearest(const tsdf_intrinsics *K, uint32_t w, uint32_t h,
                                 const float p_cam[3], uint32_t *u, uint32_t *v)
{
    float uf, vf;
    if (!(p_cam[2] > 0.0f))
        return 0;
    tsdf_project_uv(K, p_cam, &uf, &vf);
    return tsdf_project_check(w, h, p_cam[2], uf, vf, u, v);
}

/* 1 when pixel (u, v) of depth d_m sits on a depth edge: a 4-neighbour
 * measures a depth more than jump_m away. Such a sample is skipped: a voxel
 * that projects there lies within half a pixel of a silhouette, and the
 * nearest pixel may belong to the other surface (e.g. a voxel just behind a
 * box's edge would take the box's depth and carve a bulge of wrong sign into
 * free space). Neighbours without a measurement do not count. */
TSDF_HD int tsdf_depth_edge(const tsdf_frame *f, uint32_t u, uint32_t v, float d_m, float jump_m)
{
    const int du[4] = {-1, 1, 0, 0}, dv[4] = {0, 0, -1, 1};
    for (int k = 0; k < 4; k++) {
        int64_t nu = (int64_t)u + du[k], nv = (int64_t)v + dv[k];
        if (nu < 0 || nv < 0 || nu >= (int64_t)f->width || nv >= (int64_t)f->height)
            continue;
        float dn =
            tsdf_depth_sample_m(f->depth_format, f->depth, (uint32_t)nv * f->width + (uint32_t)nu,
                                f->depth_scale, f->min_depth_m, f->max_depth_m);
        if (dn > 0.0f && fabsf(dn - d_m) > jump_m)
            return 1;
    }
    return 0;
}

/* ---- the per-voxel integration step ---------------------------------------
 * What frame f says about the voxel whose centre is p_world (f->depth must
 * be readable where this runs: device pointers on the GPU): returns 1 with
 * the truncated projective sdf and the index of the pixel it came from, 0
 * when the frame says nothing about the voxel (outside the image, no
 * measurement, more than trunc behind the surface, or on a depth edge).
 * T_cam_world = tsdf_rigid_inverse(f->T_world_cam). */
TSDF_HD int tsdf_voxel_sample(const float p_world[3], const float *T_cam_world, const tsdf_frame *f,
                              float trunc_m, float *sdf, uint32_t *pixel)
{
    float pc[3];
    uint32_t u, v;
    tsdf_transform_point(T_cam_world, p_world, pc);
    if (!tsdf_project_nearest(&f->K, f->width, f->height, pc, &u, &v))
        return 0;
    uint32_t idx = v * f->width + u;
    float d = tsdf_depth_sample_m(f->depth_format, f->depth, idx, f->depth_scale, f->min_depth_m,
                                  f->max_depth_m);
    if (!tsdf_projective_sdf(d, pc[2], trunc_m, sdf))
        return 0;
    if (tsdf_depth_edge(f, u, v, d, trunc_m))
        return 0;
    *pixel = idx;
    return 1;
}

/* ---- the per-voxel step, factored for a CPU block loop -------------------
 * tsdf_voxel_sample does per voxel what is the same for a whole frame or a
 * whole block; these give the same answer, bit for bit, from work done
 * once (tests/test_band.c checks them against tsdf_voxel_sample):
 *
 *   - The depth a pixel contributes depends on the frame alone: its
 *     sample (tsdf_depth_sample_m), or 0 where that is no measurement or
 *     the pixel is on a depth edge (tsdf_depth_edge with trunc_m).
 *     tsdf_voxel_sample uses a sample only when it is > 0 and not on an
 *     edge, and tsdf_projective_sdf refuses d <= 0, so reading this
 *     "usable depth" instead gives the same result.
 *   - The camera point of a voxel centre, tsdf_transform_point of
 *     tsdf_block_voxel_center, is ((T0 p0 + T1 p1) + T2 p2) + T3 per row in
 *     float; each product depends on one axis of the voxel only, so a
 *     block's 3 x 8 products per axis, and the x + y sums, are computed once
 *     and the same roundings happen in the same order. (This holds because
 *     the host does not contract a * b + c into an FMA: x86-64 C without
 *     -mfma, as the CUDA side is built with --fmad=false.) */

/* The usable depth of pixel (u, v) of f (see above). */
TSDF_HD float tsdf_depth_usable_m(const tsdf_frame *f, uint32_t u, uint32_t v, float trunc_m)
{
    float d = tsdf_depth_sample_m(f->depth_format, f->depth, v * f->width + u, f->depth_scale,
                                  f->min_depth_m, f->max_depth_m);
    if (d > 0.0f && tsdf_depth_edge(f, u, v, d, trunc_m))
        return 0.0f;
    return d;
}

/* tsdf_depth_usable_m from the frame's samples already converted
 * (depth_m[i] = tsdf_depth_sample_m of sample i, w x h of them): the same
 * comparisons on the same values as tsdf_depth_edge makes. */
TSDF_HD float tsdf_depth_usable_from_m(const float *depth_m, uint32_t w, uint32_t h, uint32_t u,
                                       uint32_t v, float trunc_m)
{
    const float d = depth_m[(size_t)v * w + u];
    if (!(d > 0.0f))
        return d;
    if ((u > 0 && depth_m[(size_t)v * w + u - 1] > 0.0f &&
         fabsf(depth_m[(size_t)v * w + u - 1] - d) > trunc_m) ||
        (u + 1 < w && depth_m[(size_t)v * w + u + 1] > 0.0f &&
         fabsf(depth_m[(size_t)v * w + u + 1] - d) > trunc_m) ||
        (v > 0 && depth_m[(size_t)(v - 1) * w + u] > 0.0f &&
         fabsf(depth_m[(size_t)(v - 1) * w + u] - d) > trunc_m) ||
        (v + 1 < h && depth_m[(size_t)(v + 1) * w + u] > 0.0f &&
         fabsf(depth_m[(size_t)(v + 1) * w + u] - d) > trunc_m))
        return 0.0f;
    return d;
}

/* The camera-frame voxel centres of one block, factored (see above):
 * voxel (x, y, z) is at (xy[r][x + 8 y] + z[r][z]) + t[r] per row r. */
typedef struct {
    float xy[3][TSDF_BLOCK_DIM * TSDF_BLOCK_DIM];
    float z[3][TSDF_BLOCK_DIM];
    float t[3];
} tsdf_block_cam;

TSDF_HD void tsdf_block_cam_init(tsdf_block_cam *bc, const int32_t b[3], float voxel_size,
                                 const float *T_cam_world)
{
    float px[3][TSDF_BLOCK_DIM], py[3][TSDF_BLOCK_DIM];
    for (int i = 0; i < TSDF_BLOCK_DIM; i++) {
        float c[3];
        tsdf_block_voxel_center(b, i, i, i, voxel_size, c);
        for (int r = 0; r < 3; r++) {
            px[r][i] = T_cam_world[4 * r + 0] * c[0];
            py[r][i] = T_cam_world[4 * r + 1] * c[1];
            bc->z[r][i] = T_cam_world[4 * r + 2] * c[2];
        }
    }
    for (int r = 0; r < 3; r++) {
        bc->t[r] = T_cam_world[4 * r + 3];
        for (int y = 0; y < TSDF_BLOCK_DIM; y++)
            for (int x = 0; x < TSDF_BLOCK_DIM; x++)
                bc->xy[r][x + TSDF_BLOCK_DIM * y] = px[r][x] + py[r][y];
    }
}

/* tsdf_voxel_sample of the voxel whose camera point is pc, reading the
 * frame's usable depth (w x h of them, tsdf_depth_usable_m) instead of its
 * samples. tsdf_voxel_sample_uv is the same from pc[2] and
 * tsdf_project_uv's uf, vf. */
TSDF_HD int tsdf_voxel_sample_uv(float z, float uf, float vf, uint32_t w, uint32_t h,
                                 const float *usable_m, float trunc_m, float *sdf, uint32_t *pixel)
{
    uint32_t u, v;
    if (!tsdf_project_check(w, h, z, uf, vf, &u, &v))
        return 0;
    uint32_t idx = v * w + u;
    if (!tsdf_projective_sdf(usable_m[idx], z, trunc_m, sdf))
        return 0;
    *pixel = idx;
    return 1;
}

TSDF_HD int tsdf_voxel_sample_cam(const float pc[3], const tsdf_intrinsics *K, uint32_t w,
                                  uint32_t h, const float *usable_m, float trunc_m, float *sdf,
                                  uint32_t *pixel)
{
    uint32_t u, v;
    if (!tsdf_project_nearest(K, w, h, pc, &u, &v))
        return 0;
    uint32_t idx = v * w + u;
    if (!tsdf_projective_sdf(usable_m[idx], pc[2], trunc_m, sdf))
        return 0;
    *pixel = idx;
    return 1;
}

/* tsdf_integrate_sample of voxel i whose stored value the caller loaded
 * already (vox): the CUDA update loads it before the projection, so that
 * the two memory reads of a voxel overlap. */
TSDF_HD void tsdf_integrate_loaded(tsdf_layout layout, void *geom, uint8_t *rgb, size_t i,
                                   tsdf_vox vox, float sdf, uint32_t pixel, const tsdf_frame *f,
                                   float max_weight, tsdf_quant q)
{
    if (f->rgb != NULL && rgb != NULL)
        tsdf_rgb_update(rgb + TSDF_RGB_BYTES * i, vox.weight, f->rgb + 3u * pixel);
    tsdf_vox_update(&vox, sdf, max_weight);
    tsdf_vox_store(layout, geom, i, vox, q);
}

/* The update of voxel i with what tsdf_voxel_sample (or _cam) found: sdf,
 * from pixel `pixel` of f (see tsdf_integrate_voxel). */
TSDF_HD void tsdf_integrate_sample(tsdf_layout layout, void *geom, uint8_t *rgb, size_t i,
                                   float sdf, uint32_t pixel, const tsdf_frame *f, float max_weight,
                                   tsdf_quant q)
{
    tsdf_integrate_loaded(layout, geom, rgb, i, tsdf_vox_load(layout, geom, i, q), sdf, pixel, f,
                          max_weight, q);
}

/* Updates voxel i of a geometry channel of `layout` (and its colour in
 * rgb, a colour channel, when f has colour and rgb is not NULL) with frame
 * f; p_world is the voxel's centre. Colour is blended with the weight
 * before this update. Returns 1 when the voxel changed (and was stored). */
TSDF_HD int tsdf_integrate_voxel(tsdf_layout layout, void *geom, uint8_t *rgb, size_t i,
                                 const float p_world[3], const float *T_cam_world,
                                 const tsdf_frame *f, float trunc_m, float max_weight, tsdf_quant q)
{
    float sdf;
    uint32_t pixel;
    if (!tsdf_voxel_sample(p_world, T_cam_world, f, trunc_m, &sdf, &pixel))
        return 0;
    tsdf_integrate_sample(layout, geom, rgb, i, sdf, pixel, f, max_weight, q);
    return 1;
}

/* A voxel that was never observed carries no information. */
TSDF_HD int tsdf_vox_known(tsdf_vox v)
{
    return v.weight > 0.0f;
}

/* ---- block selections ----------------------------------------------------
 * Whether block b (version `version`, blocks of block_m metres) satisfies
 * every rule of q (tsdf_block_select); the same code for the CPU store and
 * the CUDA select kernel. */
TSDF_HD float tsdf_block_dist2(const int32_t b[3], float block_m, const float c[3])
{
    float d2 = 0.0f;
    for (int a = 0; a < 3; a++) {
        float lo = (float)b[a] * block_m, hi = (float)(b[a] + 1) * block_m, d = 0.0f;
        if (c[a] < lo)
            d = lo - c[a];
        else if (c[a] > hi)
            d = c[a] - hi;
        d2 += d * d;
    }
    return d2;
}

TSDF_HD int tsdf_block_in_box(const int32_t b[3], float block_m, const tsdf_aabb *box)
{
    for (int a = 0; a < 3; a++) {
        float lo = (float)b[a] * block_m, hi = (float)(b[a] + 1) * block_m;
        if (hi < box->min[a] || lo > box->max[a])
            return 0;
    }
    return 1;
}

/* Whether block b may be in view of frustum f (see tsdf_frustum): for each
 * of the pyramid's 6 faces, some corner of the block's box is on the inner
 * side. A pixel's footprint is half a pixel beyond the outer pixel
 * centres, so the side faces go through the image's edges. */
TSDF_HD int tsdf_block_in_frustum(const tsdf_frustum *f, const int32_t b[3], float block_m)
{
    const float *T = f->T_world_cam;
    const float x_lo = (-0.5f - f->K.cx) / f->K.fx,
                x_hi = ((float)f->width - 0.5f - f->K.cx) / f->K.fx;
    const float y_lo = (-0.5f - f->K.cy) / f->K.fy,
                y_hi = ((float)f->height - 0.5f - f->K.cy) / f->K.fy;
    int in[6] = {0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 8; k++) {
        float w[3] = {(float)(b[0] + (k & 1)) * block_m, (float)(b[1] + ((k >> 1) & 1)) * block_m,
                      (float)(b[2] + ((k >> 2) & 1)) * block_m};
        float d[3] = {w[0] - T[3], w[1] - T[7], w[2] - T[11]}, c[3];
        /* Camera coordinates: the transposed rotation of the rigid pose. */
        for (int r = 0; r < 3; r++)
            c[r] = T[r] * d[0] + T[4 + r] * d[1] + T[8 + r] * d[2];
        in[0] |= c[2] >= f->near_m;
        in[1] |= c[2] <= f->far_m;
        in[2] |= c[0] >= x_lo * c[2];
        in[3] |= c[0] <= x_hi * c[2];
        in[4] |= c[1] >= y_lo * c[2];
        in[5] |= c[1] <= y_hi * c[2];
    }
    return in[0] && in[1] && in[2] && in[3] && in[4] && in[5];
}

TSDF_HD int tsdf_block_selected(const tsdf_block_select *q, const int32_t b[3], uint64_t version,
                                float block_m)
{
    const uint32_t r = q->rules;
    if (r & (TSDF_SELECT_OUTSIDE_RADIUS | TSDF_SELECT_INSIDE_RADIUS)) {
        int inside = tsdf_block_dist2(b, block_m, q->center_m) <= q->radius_m * q->radius_m;
        if (((r & TSDF_SELECT_OUTSIDE_RADIUS) && inside) ||
            ((r & TSDF_SELECT_INSIDE_RADIUS) && !inside))
            return 0;
    }
    if (r & (TSDF_SELECT_OUTSIDE_BOX | TSDF_SELECT_INSIDE_BOX)) {
        int in = tsdf_block_in_box(b, block_m, &q->box);
        if (((r & TSDF_SELECT_OUTSIDE_BOX) && in) || ((r & TSDF_SELECT_INSIDE_BOX) && !in))
            return 0;
    }
    if ((r & TSDF_SELECT_NOT_SINCE) && version > q->version)
        return 0;
    if ((r & TSDF_SELECT_SINCE) && version <= q->version)
        return 0;
    if (r & (TSDF_SELECT_INSIDE_FRUSTUM | TSDF_SELECT_OUTSIDE_FRUSTUM)) {
        int in = tsdf_block_in_frustum(&q->frustum, b, block_m);
        if (((r & TSDF_SELECT_OUTSIDE_FRUSTUM) && in) || ((r & TSDF_SELECT_INSIDE_FRUSTUM) && !in))
            return 0;
    }
    return 1;
}

/* ---- interpolation --------------------------------------------------------
 * Corner c of a cell (c = dx + 2 dy + 4 dz, the marching-cubes corner order
 * of tsdf_mc_tables.h) holds value c8[c]; (fx, fy, fz) in [0, 1] is the
 * position inside the cell. */
TSDF_HD float tsdf_trilinear(const float c8[8], float fx, float fy, float fz)
{
    float c00 = c8[0] + (c8[1] - c8[0]) * fx;
    float c10 = c8[2] + (c8[3] - c8[2]) * fx;
    float c01 = c8[4] + (c8[5] - c8[4]) * fx;
    float c11 = c8[6] + (c8[7] - c8[6]) * fx;
    float c0 = c00 + (c10 - c00) * fy;
    float c1 = c01 + (c11 - c01) * fy;
    return c0 + (c1 - c0) * fz;
}

/* The gradient of tsdf_trilinear with respect to (fx, fy, fz), i.e. per
 * voxel; divide by the voxel size for per metre. */
TSDF_HD void tsdf_trilinear_grad(const float c8[8], float fx, float fy, float fz, float g[3])
{
    float gx = 0.0f, gy = 0.0f, gz = 0.0f;
    for (int c = 0; c < 8; c++) {
        float wx = (c & 1) ? fx : 1.0f - fx;
        float wy = (c & 2) ? fy : 1.0f - fy;
        float wz = (c & 4) ? fz : 1.0f - fz;
        float sx = (c & 1) ? 1.0f : -1.0f;
        float sy = (c & 2) ? 1.0f : -1.0f;
        float sz = (c & 4) ? 1.0f : -1.0f;
        gx += sx * wy * wz * c8[c];
        gy += sy * wx * wz * c8[c];
        gz += sz * wx * wy * c8[c];
    }
    g[0] = gx;
    g[1] = gy;
    g[2] = gz;
}

/* Normalises v in place; returns 0 (v untouched) when its length is zero or
 * not finite. */
TSDF_HD int tsdf_normalize3(float v[3])
{
    float n2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    if (!(n2 > 0.0f) || !(n2 < INFINITY))
        return 0;
    float inv = 1.0f / sqrtf(n2);
    v[0] *= inv;
    v[1] *= inv;
    v[2] *= inv;
    return 1;
}

/* The depth where the line through (z0, s0) and (z1, s1) crosses zero; the
 * raycast refines a + to - crossing with it (s0 > 0 >= s1). */
TSDF_HD float tsdf_zero_crossing(float z0, float s0, float z1, float s1)
{
    float den = s0 - s1;
    if (!(den > 0.0f))
        return z1;
    return z0 + (z1 - z0) * (s0 / den);
}

/* ---- marching cubes (tables: tsdf_mc_tables.h) ---------------------------- */

/* Edge interpolation parameters are kept off the corners by this much, so
 * that an sdf of exactly 0 at a corner does not put the vertices of the
 * corner's three edges on one point (duplicate positions, zero-area
 * triangles). 1e-3 voxel is far below any accuracy the TSDF has. */
#define TSDF_MC_T_EPS 1e-3f

/* Bit c set when corner c is inside (sdf < 0). */
TSDF_HD int tsdf_mc_cube_index(const float sdf8[8])
{
    int cube = 0;
    for (int c = 0; c < 8; c++)
        if (sdf8[c] < 0.0f)
            cube |= 1 << c;
    return cube;
}

/* Axis (0 = x, 1 = y, 2 = z) of edge e. */
TSDF_HD int tsdf_mc_edge_axis(int e)
{
    return e >> 2;
}

/* Offset (0 or 1 per axis) of the start corner of edge e from the cell's
 * minimum corner; the end corner is one further along tsdf_mc_edge_axis(e). */
TSDF_HD void tsdf_mc_edge_start(int e, int off[3])
{
    int a = e >> 2, j = e & 3;
    off[a] = 0;
    off[(a + 1) % 3] = j & 1;
    off[(a + 2) % 3] = j >> 1;
}

/* Corner numbers (0..7) of the start and end of edge e. */
TSDF_HD int tsdf_mc_edge_corner0(int e)
{
    int off[3];
    tsdf_mc_edge_start(e, off);
    return off[0] | (off[1] << 1) | (off[2] << 2);
}

TSDF_HD int tsdf_mc_edge_corner1(int e)
{
    return tsdf_mc_edge_corner0(e) | (1 << (e >> 2));
}

/* Where along a crossed edge (0 = start, 1 = end) the surface lies, from the
 * sdf at its start (s0) and end (s1); clamped to [eps, 1 - eps]. */
TSDF_HD float tsdf_mc_edge_t(float s0, float s1)
{
    float den = s0 - s1;
    float t = den != 0.0f ? s0 / den : 0.5f;
    if (!(t >= TSDF_MC_T_EPS))
        t = TSDF_MC_T_EPS;
    if (t > 1.0f - TSDF_MC_T_EPS)
        t = 1.0f - TSDF_MC_T_EPS;
    return t;
}

#endif /* TSDF_MATH_H */
