/*
 * tsdf_raycast_range.h - where along each ray a raycast has to look: the
 * camera-depth range of the allocated blocks, per tile of the image,
 * written once for the CPU reference (cpu_raycast.c) and the CUDA kernels
 * (cuda_raycast.cu).
 *
 * The march of tsdf_raycast_march.h starts at the near plane and crosses
 * the empty space in front of the surface one unallocated block at a time:
 * a table lookup per block, some forty per ray at 1 cm voxels on 7-Scenes,
 * and most of a raycast's time. Instead, every allocated block is
 * projected first (the 8 corners of its cube): the tiles of
 * TSDF_RANGE_TILE_PX x TSDF_RANGE_TILE_PX pixels its image may cover get
 * the lowest and highest camera depth of its corners (a min / max over
 * blocks, so the order in which blocks are projected does not matter and
 * every backend gets the same range). A ray then marches only from its
 * tile's lowest depth to its highest, and a tile that no block covers is
 * empty at once.
 *
 * Why that finds what the full march finds: the march takes samples only
 * at points inside allocated blocks (elsewhere it skips to the block's
 * exit). A point of block b on the ray of pixel (u, v) lies in the convex
 * hull of b's corners, so it projects inside the corners' projections
 * (pixel (u, v) is in b's rectangle, widened by a pixel for rounding) and
 * its camera depth lies between the corners' lowest and highest depth. So
 * before the tile's lowest depth and after its highest the ray is outside
 * every allocated block. TSDF_RANGE_MARGIN_VOX voxels more on each side
 * keep float rounding of the two computations (corners through
 * T_cam_world, ray points through T_world_cam) from cutting a block.
 *
 * The march resumes in empty space before the first block at a depth the
 * full march provably passes (tsdf_ray_resume_z in tsdf_raycast_march.h)
 * and gives up past the last, so it returns the full march's answer bit
 * for bit; backends that use the range agree with each other and with the
 * reference (tests/test_ray_fast.c).
 *
 * A block with a corner at or behind the camera (z <= 0) cannot be
 * projected; it covers the whole image, from depth 0.
 */
#ifndef TSDF_RAYCAST_RANGE_H
#define TSDF_RAYCAST_RANGE_H

#include <math.h>
#include <stdint.h>

#include "tsdf_math.h"

#define TSDF_RANGE_TILE_PX 8
#define TSDF_RANGE_MARGIN_VOX 1.0f
/* A tile no block covers: the lowest depth stays at its initial bits. */
#define TSDF_RANGE_LO_EMPTY 0xffffffffu

/* What projecting a block needs: the pose inverted once per raycast. */
typedef struct {
    float T_cam_world[16]; /* tsdf_rigid_inverse of the raycast's T_world_cam */
    tsdf_intrinsics K;
    uint32_t width, height;
    uint32_t tiles_x, tiles_y;
    float block_m; /* TSDF_BLOCK_DIM * voxel size */
} tsdf_range_view;

TSDF_HD uint32_t tsdf_range_tiles(uint32_t pixels)
{
    return (pixels + TSDF_RANGE_TILE_PX - 1) / TSDF_RANGE_TILE_PX;
}

/* T_world_cam is rigid (checked by the front end). */
TSDF_HD void tsdf_range_view_init(tsdf_range_view *rv, const float *T_world_cam,
                                  const tsdf_intrinsics *K, uint32_t width, uint32_t height,
                                  float voxel_size_m)
{
    tsdf_rigid_inverse(T_world_cam, rv->T_cam_world);
    rv->K = *K;
    rv->width = width;
    rv->height = height;
    rv->tiles_x = tsdf_range_tiles(width);
    rv->tiles_y = tsdf_range_tiles(height);
    rv->block_m = (float)TSDF_BLOCK_DIM * voxel_size_m;
}

/* The first and last pixel (inclusive) of [lo, hi] widened by one pixel
 * and clipped to [0, n); 0 when nothing is left. lo and hi may be huge or
 * infinite: they are clipped as floats before they become integers. */
TSDF_HD int tsdf_range_span(float lo, float hi, uint32_t n, uint32_t *first, uint32_t *last)
{
    float a = floorf(lo) - 1.0f, b = floorf(hi) + 1.0f;
    if (!(a <= b) || b < 0.0f || a > (float)n - 1.0f)
        return 0;
    a = a < 0.0f ? 0.0f : a;
    b = b > (float)n - 1.0f ? (float)n - 1.0f : b;
    *first = (uint32_t)a;
    *last = (uint32_t)b;
    return *first <= *last && *last < n;
}

/* Block (bx, by, bz): 1 with the tiles [tile[0], tile[2]] x [tile[1],
 * tile[3]] (inclusive) its image may cover and its corners' camera-depth
 * range [*z_lo, *z_hi]; 0 when it lies wholly behind the camera or out of
 * the image. */
TSDF_HD int tsdf_range_block(const tsdf_range_view *rv, int32_t bx, int32_t by, int32_t bz,
                             uint32_t tile[4], float *z_lo, float *z_hi)
{
    float u_lo = INFINITY, u_hi = -INFINITY, v_lo = INFINITY, v_hi = -INFINITY;
    float zl = INFINITY, zh = -INFINITY;
    int behind = 0;
    for (int k = 0; k < 8; k++) {
        float w[3] = {(float)(bx + (k & 1)) * rv->block_m,
                      (float)(by + ((k >> 1) & 1)) * rv->block_m,
                      (float)(bz + ((k >> 2) & 1)) * rv->block_m};
        float c[3];
        tsdf_transform_point(rv->T_cam_world, w, c);
        zl = c[2] < zl ? c[2] : zl;
        zh = c[2] > zh ? c[2] : zh;
        if (!(c[2] > 0.0f)) {
            behind = 1;
            continue;
        }
        float inv_z = 1.0f / c[2];
        float u = rv->K.fx * c[0] * inv_z + rv->K.cx;
        float v = rv->K.fy * c[1] * inv_z + rv->K.cy;
        u_lo = u < u_lo ? u : u_lo;
        u_hi = u > u_hi ? u : u_hi;
        v_lo = v < v_lo ? v : v_lo;
        v_hi = v > v_hi ? v : v_hi;
    }
    if (!(zh > 0.0f))
        return 0;
    uint32_t px0, px1, py0, py1;
    if (behind) {
        px0 = py0 = 0;
        px1 = rv->width - 1;
        py1 = rv->height - 1;
        zl = 0.0f;
    } else if (!tsdf_range_span(u_lo, u_hi, rv->width, &px0, &px1) ||
               !tsdf_range_span(v_lo, v_hi, rv->height, &py0, &py1)) {
        return 0;
    }
    tile[0] = px0 / TSDF_RANGE_TILE_PX;
    tile[1] = py0 / TSDF_RANGE_TILE_PX;
    tile[2] = px1 / TSDF_RANGE_TILE_PX;
    tile[3] = py1 / TSDF_RANGE_TILE_PX;
    *z_lo = zl;
    *z_hi = zh;
    return 1;
}

/* Depths as ordered integers for an atomic min / max: non-negative floats
 * order as their bits do. */
TSDF_HD uint32_t tsdf_range_bits(float z)
{
    union {
        float f;
        uint32_t u;
    } c;
    c.f = z > 0.0f ? z : 0.0f;
    return c.u;
}

TSDF_HD float tsdf_range_float(uint32_t bits)
{
    union {
        float f;
        uint32_t u;
    } c;
    c.u = bits;
    return c.f;
}

/* tsdf_range_block of the block at pool key `key` (TSDF_KEY_EMPTY: a free
 * slot, 0), its depth range as the ordered bits the tile bounds keep. */
TSDF_HD int tsdf_range_key(const tsdf_range_view *rv, uint64_t key, uint32_t tile[4],
                           uint32_t *lo_bits, uint32_t *hi_bits)
{
    int32_t bx, by, bz;
    float zl, zh;
    if (key == TSDF_KEY_EMPTY)
        return 0;
    tsdf_block_key_unpack(key, &bx, &by, &bz);
    if (!tsdf_range_block(rv, bx, by, bz, tile, &zl, &zh))
        return 0;
    *lo_bits = tsdf_range_bits(zl);
    *hi_bits = tsdf_range_bits(zh);
    return 1;
}

/* The part of [z_min, z_max] pixel (px, py) has to march, from the tile
 * bounds lo_bits / hi_bits (tiles_x per row): 1 with [*z_from, *z_to], 0
 * when no block covers the tile or the range misses [z_min, z_max]. */
TSDF_HD int tsdf_range_of_pixel(const uint32_t *lo_bits, const uint32_t *hi_bits, uint32_t tiles_x,
                                uint32_t px, uint32_t py, float voxel_size_m, float z_min,
                                float z_max, float *z_from, float *z_to)
{
    size_t t = (size_t)(py / TSDF_RANGE_TILE_PX) * tiles_x + px / TSDF_RANGE_TILE_PX;
    if (lo_bits[t] == TSDF_RANGE_LO_EMPTY)
        return 0;
    const float margin = TSDF_RANGE_MARGIN_VOX * voxel_size_m;
    float a = tsdf_range_float(lo_bits[t]) - margin, b = tsdf_range_float(hi_bits[t]) + margin;
    a = a > z_min ? a : z_min;
    b = b < z_max ? b : z_max;
    if (!(a <= b))
        return 0;
    *z_from = a;
    *z_to = b;
    return 1;
}

#endif /* TSDF_RAYCAST_RANGE_H */
