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

#ifdef __CUDACC__
#define TSDF_HD __host__ __device__ __forceinline__
#else
#define TSDF_HD static inline
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
TSDF_HD void tsdf_voxel_update(tsdf_voxel *v, float sdf, float max_weight)
{
    float w = v->weight;
    v->sdf_m = (v->sdf_m * w + sdf) / (w + 1.0f);
    v->weight = w + 1.0f < max_weight ? w + 1.0f : max_weight;
}

TSDF_HD void tsdf_voxel_update_color(tsdf_voxel *v, float w_old, const uint8_t *rgb)
{
    for (int c = 0; c < 3; c++) {
        float mixed = ((float)v->rgb[c] * w_old + (float)rgb[c]) / (w_old + 1.0f);
        v->rgb[c] = (uint8_t)(mixed + 0.5f);
    }
}

#endif /* TSDF_MATH_H */
