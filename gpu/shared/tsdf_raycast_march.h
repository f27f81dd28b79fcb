/*
 * tsdf_raycast_march.h - the raycast's per-pixel march, written once for the
 * CPU reference (cpu_raycast.c) and the CUDA kernel (cuda_raycast.cu).
 *
 * Per pixel: march the ray from min_depth to max_depth (camera z; the end
 * comes sooner on a ray longer than the caps of tsdf_volume.h allow, see
 * TSDF_MAX_RAY_M and tsdf_ray_end_z), skip
 * unallocated space a block at a time (to the block's exit), sample the
 * trilinearly interpolated TSDF (tsdf_trilinear) of the 8 surrounding voxels,
 * step 0.75 sdf (at least half a voxel; past an unobserved voxel at once),
 * and refine the first + to - zero
 * crossing with tsdf_zero_crossing plus one secant step (a crossing whose
 * refinement falls in unobserved space is passed over). Normals are central
 * differences of the interpolated TSDF (the cell's gradient as fallback);
 * colours are the interpolated voxel colours.
 *
 * How a block is found is the including file's business. Before including
 * this header it defines TSDF_RAY_SOURCE, the type of what a lookup needs
 * (the CPU: a cpu_store pointer; CUDA: a cuda_table_view), held by value in
 * tsdf_ray_volume.src; after the #include, in the same translation unit, it
 * defines the lookup that this header declares (it takes tsdf_ray_volume,
 * defined here):
 *     TSDF_LOOKUP_FN int32_t tsdf_ray_source_block(
 *         const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz);
 * the pool index of block (bx, by, bz), or -1 when the block is not
 * allocated or out of the key range. Voxels are read from the channels in
 * tsdf_ray_volume (geom, rgb) through tsdf_voxel_layout.h; the CUDA kernels
 * set vol.layout from a template argument, so the layout's switch folds.
 *
 * Under nvcc the functions are __device__ only (TSDF_LOOKUP_FN, not
 * TSDF_HD): the CUDA lookup reads device memory, and a __host__ __device__
 * function may not call it. The CUDA backend is compiled with --fmad=false,
 * so the GPU evaluates every float expression here exactly as the CPU does,
 * in the same order: a GPU ray sees the same samples and returns the same
 * depth, normal and colour, bit for bit.
 *
 * Threads: the functions keep no state but the caller's tsdf_ray_cache; one
 * cache per thread.
 */
#ifndef TSDF_RAYCAST_MARCH_H
#define TSDF_RAYCAST_MARCH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tsdf_math.h"
#include "tsdf_raycast_range.h"

#ifndef TSDF_RAY_SOURCE
#error "define TSDF_RAY_SOURCE (the block lookup's state) before including tsdf_raycast_march.h"
#endif

/* What a march reads: the volume's block lookup, its channels and its
 * scale. Read-only during a raycast. */
typedef struct {
    TSDF_RAY_SOURCE src;
    tsdf_layout layout;
    const void *geom;   /* the geometry channel of the pool */
    const uint8_t *rgb; /* its colour channel, or NULL */
    tsdf_quant quant;
    float voxel_size_m;
    float inv_voxel_size; /* 1 / voxel_size_m */
    float inv_block_size; /* 1 / (8 voxel_size_m) */
} tsdf_ray_volume;

/* A one-entry block cache, per thread: successive samples of a ray mostly
 * fall in the block of the previous one. It only saves lookups; it never
 * changes a result. */
typedef struct {
    int32_t key[3];
    int32_t blk;
} tsdf_ray_cache;

/* Defined by the includer (see the top of this file). */
TSDF_LOOKUP_FN int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by,
                                             int32_t bz);

TSDF_LOOKUP_INLINE void tsdf_ray_cache_init(tsdf_ray_cache *c)
{
    /* No valid block coordinate is INT32_MIN (the key range is +-2^20), so
     * the first lookup always misses; and were it asked for, -1 would be
     * the right answer. */
    c->key[0] = INT32_MIN;
    c->key[1] = c->key[2] = 0;
    c->blk = -1;
}

TSDF_LOOKUP_FN int32_t tsdf_ray_block(const tsdf_ray_volume *vol, tsdf_ray_cache *c, int32_t bx,
                                      int32_t by, int32_t bz)
{
    if (c->key[0] != bx || c->key[1] != by || c->key[2] != bz) {
        c->blk = tsdf_ray_source_block(vol, bx, by, bz);
        c->key[0] = bx;
        c->key[1] = by;
        c->key[2] = bz;
    }
    return c->blk;
}

/* Corner k of a cell is channel index i: 1 with its sdf when known. */
TSDF_LOOKUP_INLINE int tsdf_ray_corner(const tsdf_ray_volume *vol, size_t i, int k, float c8[8],
                                       size_t idx8[8])
{
    tsdf_vox vx = tsdf_vox_load(vol->layout, vol->geom, i, vol->quant);
    if (!tsdf_vox_known(vx))
        return 0;
    idx8[k] = i;
    c8[k] = vx.sdf_m;
    return 1;
}

/* The cell gather is the body of every sample. Inlined into the march,
 * its refinement, the normal's six samples and the colour, it made the
 * CUDA kernel 7,416 instructions long, and Nsight Compute showed its warps
 * waiting for an instruction fetch for 64% of their cycles (memory at 9%
 * of peak). Under nvcc the kernels call one copy instead. On the H200
 * (7-Scenes, 450 frames, 640x480 depth + normals, kernel median of 50, two
 * runs, identical output checksums): inlined 1.17 ms, called 1.00 ms, and
 * called without the one-lookup path below 0.88 ms, which the GPU
 * therefore leaves out; on the CPU that path pays. The called functions
 * are tsdf_ray_sample_at, tsdf_ray_grad_at and tsdf_ray_color_at: each
 * inlines the gather's body and returns what its callers need by value
 * (0.88 -> 0.71 ms, see tsdf_ray_sample_at). */
#ifdef __CUDACC__
#define TSDF_RAY_GATHER_FN static __device__ __noinline__
#define TSDF_RAY_BODY_FN static __device__ __forceinline__
#else
#define TSDF_RAY_GATHER_FN TSDF_LOOKUP_FN
#define TSDF_RAY_BODY_FN TSDF_LOOKUP_FN
#endif

/* The 8 voxels around world point p (the cell whose corners are the voxel
 * centres around it). Returns 1 with the sdf values in c8, the corner
 * voxels' channel indices in idx8 and the position inside the cell in frac
 * when all 8 are known, else 0. The body, inlined into the three
 * functions below that the march calls; on the host through
 * TSDF_LOOKUP_FN, which cpu_raycast.c forces inline (left to gcc as a
 * plain static inline it was called, and the CPU raycast took 9% more). */
TSDF_RAY_BODY_FN int tsdf_ray_gather_body(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                          const float p[3], float c8[8], size_t idx8[8],
                                          float frac[3])
{
    int32_t base[3];
    for (int i = 0; i < 3; i++) {
        float f = p[i] * vol->inv_voxel_size - 0.5f;
        float fl = floorf(f);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return 0;
        base[i] = (int32_t)fl;
        frac[i] = f - fl;
    }
    /* A cell whose corners are all in one block (343 of a block's 512):
     * one lookup for the eight; the same voxels, so the same result. CPU
     * only: on the GPU the extra code costs more than the lookups (see
     * TSDF_RAY_GATHER_FN). */
#ifndef __CUDACC__
    if ((base[0] & 7) != 7 && (base[1] & 7) != 7 && (base[2] & 7) != 7) {
        int32_t b = tsdf_ray_block(vol, c, tsdf_floor_div8(base[0]), tsdf_floor_div8(base[1]),
                                   tsdf_floor_div8(base[2]));
        if (b < 0)
            return 0;
        const size_t i0 = (size_t)b * TSDF_BLOCK_VOXELS +
                          (size_t)tsdf_voxel_index(base[0] & 7, base[1] & 7, base[2] & 7);
        TSDF_UNROLL
        for (int k = 0; k < 8; k++) {
            size_t i = i0 + (size_t)((k & 1) + TSDF_BLOCK_DIM * ((k >> 1) & 1) +
                                     TSDF_BLOCK_DIM * TSDF_BLOCK_DIM * ((k >> 2) & 1));
            if (!tsdf_ray_corner(vol, i, k, c8, idx8))
                return 0;
        }
        return 1;
    }
#endif
    TSDF_UNROLL
    for (int k = 0; k < 8; k++) {
        int32_t x = base[0] + (k & 1), y = base[1] + ((k >> 1) & 1), z = base[2] + ((k >> 2) & 1);
        int32_t b =
            tsdf_ray_block(vol, c, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
        if (b < 0)
            return 0;
        size_t i = (size_t)b * TSDF_BLOCK_VOXELS + (size_t)tsdf_voxel_index(x & 7, y & 7, z & 7);
        if (!tsdf_ray_corner(vol, i, k, c8, idx8))
            return 0;
    }
    return 1;
}

/* The interpolated sdf at p and whether all 8 corners are known: every
 * sample of the march, its refinement and the normal's differences. */
typedef struct {
    float sdf;
    int ok;
} tsdf_ray_sample;

/* Under nvcc a called function whose results come back through pointers
 * keeps them, and the caller's arrays, in local memory: the earlier form
 * (the gather called, its c8 / idx8 / frac arrays returned) had a stack
 * frame of 256-368 bytes and its warps stalled on the loads 36% of their
 * cycles (Nsight Compute, H200). This one takes the point by value, works
 * on a register copy of the cache and returns two words, so the cell stays
 * in registers and idx8, which no sample reads, is never formed: 104
 * bytes of stack frame (the volume view and the cache), and the kernel
 * 0.88 -> 0.71 ms (H200, 7-Scenes, 450 frames, depth + normals, kernel
 * median of 50, the same output checksum). */
TSDF_RAY_GATHER_FN tsdf_ray_sample tsdf_ray_sample_at(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                                      float x, float y, float z)
{
    tsdf_ray_cache lc = *c;
    const float p[3] = {x, y, z};
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_sample r;
    r.ok = tsdf_ray_gather_body(vol, &lc, p, c8, idx8, frac);
    r.sdf = r.ok ? tsdf_trilinear(c8, frac[0], frac[1], frac[2]) : 0.0f;
    *c = lc;
    return r;
}

/* The gradient of the cell at p (the normal's fallback), ok when all 8
 * corners are known. */
typedef struct {
    float g[3];
    int ok;
} tsdf_ray_grad;

TSDF_RAY_GATHER_FN tsdf_ray_grad tsdf_ray_grad_at(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                                  float x, float y, float z)
{
    tsdf_ray_cache lc = *c;
    const float p[3] = {x, y, z};
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_grad r = {{0.0f, 0.0f, 0.0f}, 0};
    r.ok = tsdf_ray_gather_body(vol, &lc, p, c8, idx8, frac);
    if (r.ok)
        tsdf_trilinear_grad(c8, frac[0], frac[1], frac[2], r.g);
    *c = lc;
    return r;
}

/* The interpolated colour at p of a volume with colour, black where the
 * cell is not known. */
typedef struct {
    uint8_t rgb[3];
} tsdf_ray_rgb;

TSDF_RAY_GATHER_FN tsdf_ray_rgb tsdf_ray_color_at(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                                  float x, float y, float z)
{
    tsdf_ray_cache lc = *c;
    const float p[3] = {x, y, z};
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_rgb r = {{0, 0, 0}};
    if (tsdf_ray_gather_body(vol, &lc, p, c8, idx8, frac)) {
        for (int ch = 0; ch < 3; ch++) {
            float col[8];
            for (int k = 0; k < 8; k++)
                col[k] = (float)vol->rgb[TSDF_RGB_BYTES * idx8[k] + (size_t)ch];
            float m = tsdf_trilinear(col, frac[0], frac[1], frac[2]) + 0.5f;
            r.rgb[ch] = (uint8_t)(m < 0.0f ? 0.0f : (m > 255.0f ? 255.0f : m));
        }
    }
    *c = lc;
    return r;
}

TSDF_LOOKUP_FN int tsdf_ray_sample_sdf(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                       const float p[3], float *sdf)
{
    tsdf_ray_sample r = tsdf_ray_sample_at(vol, c, p[0], p[1], p[2]);
    if (r.ok)
        *sdf = r.sdf;
    return r.ok;
}

TSDF_LOOKUP_INLINE void tsdf_ray_point(const float o[3], const float d[3], float z, float p[3])
{
    p[0] = o[0] + z * d[0];
    p[1] = o[1] + z * d[1];
    p[2] = o[2] + z * d[2];
}

/* The camera depth at which the ray leaves block b. */
TSDF_LOOKUP_FN float tsdf_ray_block_exit_z(const float o[3], const float d[3], const int32_t b[3],
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

/* Where a march goes on from camera depth z (point p) after a sample that
 * found an unobserved corner. Every point of the voxel around p has that
 * voxel among its cell's corners, so when it is the unobserved one no
 * sample inside it can succeed: go on at its exit (or half a voxel on,
 * what the march always stepped, when that is further). */
TSDF_LOOKUP_FN float tsdf_ray_after_unknown(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                            const float o[3], const float d[3], const float p[3],
                                            float z, float min_step_z, float eps_z)
{
    int32_t vx[3];
    for (int i = 0; i < 3; i++) {
        float fl = floorf(p[i] * vol->inv_voxel_size);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return z + min_step_z;
        vx[i] = (int32_t)fl;
    }
    int32_t b = tsdf_ray_block(vol, c, tsdf_floor_div8(vx[0]), tsdf_floor_div8(vx[1]),
                               tsdf_floor_div8(vx[2]));
    if (b >= 0) {
        size_t i = (size_t)b * TSDF_BLOCK_VOXELS +
                   (size_t)tsdf_voxel_index(vx[0] & 7, vx[1] & 7, vx[2] & 7);
        if (tsdf_vox_known(tsdf_vox_load(vol->layout, vol->geom, i, vol->quant)))
            return z + min_step_z;
    }
    float z_exit = tsdf_ray_block_exit_z(o, d, vx, vol->voxel_size_m) + eps_z;
    return z_exit > z + min_step_z ? z_exit : z + min_step_z;
}

/* The surface normal at p: central differences of the interpolated sdf one
 * voxel apart, or the gradient of the cell at p where a neighbour is
 * unknown. 0 when neither gives a direction. */
TSDF_LOOKUP_FN int tsdf_ray_surface_normal(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                           const float p[3], float n[3])
{
    const float h = vol->voxel_size_m;
    int ok = 1;
    for (int a = 0; a < 3 && ok; a++) {
        float pp[3] = {p[0], p[1], p[2]}, pm[3] = {p[0], p[1], p[2]}, sp = 0.0f, sm = 0.0f;
        pp[a] += h;
        pm[a] -= h;
        ok = tsdf_ray_sample_sdf(vol, c, pp, &sp) && tsdf_ray_sample_sdf(vol, c, pm, &sm);
        n[a] = sp - sm;
    }
    if (ok && tsdf_normalize3(n))
        return 1;
    tsdf_ray_grad g = tsdf_ray_grad_at(vol, c, p[0], p[1], p[2]);
    if (!g.ok)
        return 0;
    n[0] = g.g[0];
    n[1] = g.g[1];
    n[2] = g.g[2];
    return tsdf_normalize3(n);
}

/* The interpolated colour at p, black where the cell is not known or the
 * volume has no colour. */
TSDF_LOOKUP_FN void tsdf_ray_surface_color(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                           const float p[3], uint8_t rgb[3])
{
    tsdf_ray_rgb m = {{0, 0, 0}};
    if (vol->rgb != NULL)
        m = tsdf_ray_color_at(vol, c, p[0], p[1], p[2]);
    rgb[0] = m.rgb[0];
    rgb[1] = m.rgb[1];
    rgb[2] = m.rgb[2];
}

/* The camera depth at which a ray of dir_len metres per unit of camera
 * depth ends: z_max, or sooner where the ray would be longer than
 * TSDF_RAY_DEPTH_RATIO * z_max, TSDF_MAX_RAY_M or TSDF_MAX_RAY_VOX voxels of
 * voxel_m (see tsdf_volume.h). The march used to end at z_max alone, so a
 * focal length of a fraction of a pixel (dir_len in the thousands) marched
 * rays of kilometres to the edge of the key range. */
TSDF_LOOKUP_INLINE float tsdf_ray_end_z(float z_max, float dir_len, float voxel_m)
{
    float len_m = TSDF_RAY_DEPTH_RATIO * z_max;
    len_m = fminf(len_m, TSDF_MAX_RAY_M);
    len_m = fminf(len_m, TSDF_MAX_RAY_VOX * voxel_m);
    return fminf(z_max, len_m / dir_len);
}

/* The most iterations a march from z_min to z_end may take. A sample step
 * advances at least half a voxel along the ray, and an empty-block skip
 * enters the next block; a segment of ray_m metres crosses at most
 * 3 * ray_m / block_m + 3 blocks (the block planes it crosses on each of
 * the three axes, plus the first block). Twice that allows for the float
 * rounding of the steps (tsdf_ray_end_z keeps a ray within 2^20 voxels, so
 * a half-voxel step is many units of the last place of its depth), plus a
 * few for the refinement. A correct march never reaches the bound; it
 * stops a march whose float steps stall (the pixel then reports no
 * surface), and it is what makes the work of a ray, and of a raycast,
 * bounded. The count is below 2^23; a NaN or non-positive bound allows no
 * iteration. */
TSDF_LOOKUP_INLINE uint32_t tsdf_ray_max_iterations(float z_min, float z_end, float dir_len,
                                                    float voxel_m)
{
    const float ray_m = (z_end - z_min) * dir_len;
    const float block_m = (float)TSDF_BLOCK_DIM * voxel_m;
    const float n = 2.0f * (2.0f * ray_m / voxel_m + 3.0f * ray_m / block_m + 3.0f) + 64.0f;
    return n > 0.0f ? (n < 4.0e9f ? (uint32_t)n : 4000000000u) : 0u;
}

/* tsdf_ray_march resumed at camera depth z_from, in empty space (no
 * sample before it counts), and given up past z_stop. A caller that knows
 * two things about the ray may skip what the full march would do there
 * and get the same answer: that the full march from z_min passes through
 * z_from with no sample taken yet (it is one of its empty-block skips,
 * see cpu_raycast.c), and that past z_stop the ray meets no allocated
 * block (where the full march would only skip on to its end and return
 * 0). The step sizes and the iteration bound are those of the full march
 * from z_min. tsdf_ray_march is the span (z_min, INFINITY). */
TSDF_LOOKUP_FN int tsdf_ray_march_span(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                       const float o[3], const float d[3], float z_min, float z_max,
                                       float z_from, float z_stop, float *z_hit)
{
    const float s = vol->voxel_size_m;
    const float block_m = (float)TSDF_BLOCK_DIM * s;
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    /* Distances along the ray are dir_len per unit of camera depth. */
    const float min_step_z = 0.5f * s / dir_len;
    const float eps_z = 0.01f * s / dir_len;
    const float z_end = tsdf_ray_end_z(z_max, dir_len, s);
    /* An integer counter: it costs fewer GPU registers than a double. */
    const uint32_t max_it = tsdf_ray_max_iterations(z_min, z_end, dir_len, s);
    float z = z_from, prev_z = 0.0f, prev_s = 0.0f;
    int prev_known = 0;

    for (uint32_t it = 0; z <= z_end && it < max_it; it++) {
        float p[3], sdf;
        int32_t b[3];
        if (z > z_stop)
            return 0;
        tsdf_ray_point(o, d, z, p);
        if (!tsdf_world_to_block(p, vol->inv_block_size, b))
            return 0;
        if (tsdf_ray_block(vol, c, b[0], b[1], b[2]) < 0) {
            float z_next = tsdf_ray_block_exit_z(o, d, b, block_m) + eps_z;
            prev_known = 0;
            z = z_next > z + eps_z ? z_next : z + eps_z;
            continue;
        }
        if (!tsdf_ray_sample_sdf(vol, c, p, &sdf)) {
            prev_known = 0;
            z = tsdf_ray_after_unknown(vol, c, o, d, p, z, min_step_z, eps_z);
            continue;
        }
        if (prev_known && prev_s > 0.0f && sdf <= 0.0f) {
            float zc = tsdf_zero_crossing(prev_z, prev_s, z, sdf), pc[3], sc;
            /* One secant refinement on the side that still brackets the
             * root: the sdf is only piecewise linear along the ray. */
            tsdf_ray_point(o, d, zc, pc);
            if (tsdf_ray_sample_sdf(vol, c, pc, &sc)) {
                float z2 = zc, p2[3], s2;
                if (sc > 0.0f)
                    z2 = tsdf_zero_crossing(zc, sc, z, sdf);
                else if (sc < 0.0f)
                    z2 = tsdf_zero_crossing(prev_z, prev_s, zc, sc);
                /* The hit must lie in a known cell (its normal and colour
                 * come from there); keep the first estimate otherwise. */
                tsdf_ray_point(o, d, z2, p2);
                *z_hit = tsdf_ray_sample_sdf(vol, c, p2, &s2) ? z2 : zc;
                return 1;
            }
            /* Both samples are known but the segment between them passes
             * a cell with an unobserved corner (at the rim of what was
             * seen): no crossing through unknown space; march on. */
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

/* One ray from o along d (d scaled so that z is the camera depth). Returns
 * 1 and the crossing's camera depth, 0 when there is no surface between
 * z_min and the ray's end (z_max, or sooner: tsdf_ray_end_z). At most
 * tsdf_ray_max_iterations steps. */
TSDF_LOOKUP_INLINE int tsdf_ray_march(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                      const float o[3], const float d[3], float z_min, float z_max,
                                      float *z_hit)
{
    return tsdf_ray_march_span(vol, c, o, d, z_min, z_max, z_min, INFINITY, z_hit);
}

/* The whole of one ray o + z d: the march, and entry i of the
 * outputs. depth[i] gets the hit's camera depth or NaN; normals[3i..3i+2]
 * (normals may be NULL) the unit normal or NaNs; rgb[3i..3i+2] (may be NULL)
 * the colour or black. Inlined, so that a constant NULL drops the work it
 * would feed; the outputs are indexed here, late, because addresses formed
 * by the caller would stay live in GPU registers through the march. The
 * march is tsdf_ray_march_span from z_from to z_stop (see there). */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel_od(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                          const float o[3], const float d[3], float z_min,
                                          float z_max, float z_from, float z_stop, size_t i,
                                          float *depth, float *normals, uint8_t *rgb)
{
    float z;
    if (tsdf_ray_march_span(vol, c, o, d, z_min, z_max, z_from, z_stop, &z)) {
        float hit[3];
        tsdf_ray_point(o, d, z, hit);
        depth[i] = z;
        if (normals != NULL) {
            float n[3];
            if (!tsdf_ray_surface_normal(vol, c, hit, n))
                n[0] = n[1] = n[2] = NAN;
            normals[3 * i] = n[0];
            normals[3 * i + 1] = n[1];
            normals[3 * i + 2] = n[2];
        }
        if (rgb != NULL)
            tsdf_ray_surface_color(vol, c, hit, &rgb[3 * i]);
    } else {
        depth[i] = NAN;
        if (normals != NULL)
            normals[3 * i] = normals[3 * i + 1] = normals[3 * i + 2] = NAN;
        if (rgb != NULL)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = 0;
    }
}

/* tsdf_ray_pixel_od of the ray of pixel (px, py). */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel_span(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                            const float *T_world_cam, const tsdf_intrinsics *K,
                                            uint32_t px, uint32_t py, float z_min, float z_max,
                                            float z_from, float z_stop, size_t i, float *depth,
                                            float *normals, uint8_t *rgb)
{
    float o[3], d[3];
    tsdf_pixel_ray_world(T_world_cam, K, (float)px, (float)py, o, d);
    tsdf_ray_pixel_od(vol, c, o, d, z_min, z_max, z_from, z_stop, i, depth, normals, rgb);
}

/* The depth at which the ray o + z d enters block b (the latest of its
 * three entry planes): only compared against margins, never a result. */
TSDF_LOOKUP_FN float tsdf_ray_block_entry_z(const float o[3], const float d[3], const int32_t b[3],
                                            float block_m)
{
    float z_in = -INFINITY;
    for (int i = 0; i < 3; i++) {
        float t;
        if (d[i] > 0.0f)
            t = ((float)b[i] * block_m - o[i]) / d[i];
        else if (d[i] < 0.0f)
            t = ((float)(b[i] + 1) * block_m - o[i]) / d[i];
        else
            continue;
        if (t > z_in)
            z_in = t;
    }
    return z_in;
}

/* A depth where the reference march from z_min is, with no sample taken,
 * before `near` (the first depth at which the ray can be in a block: see
 * tsdf_raycast_range.h); z_min when none is found. Before near the march
 * skips block by block, each skip to the block's exit plus eps_z; a skip
 * out of block b lands on the same depth whichever depth inside b it left
 * from. So find an unallocated block b before near that the ray crosses
 * for well over eps_z (the march's skips, eps_z past each exit, cannot
 * jump over it, and its depth inside b is then far from b's exit), and
 * resume at b's exit plus eps_z, computed by the march's own expressions.
 * From there the resumed march takes the reference's samples and returns
 * its bits (tests/test_ray_fast.c). */
TSDF_LOOKUP_FN float tsdf_ray_resume_z(const tsdf_ray_volume *vol, const float o[3],
                                       const float d[3], float z_min, float near)
{
    const float s = vol->voxel_size_m;
    const float block_m = (float)TSDF_BLOCK_DIM * s;
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const float eps_z = 0.01f * s / dir_len;
    float zc = near - 4.0f * eps_z;

    /* The block before near, or the one before that when the ray only
     * clips it. */
    for (int tries = 0; tries < 3 && zc > z_min; tries++) {
        float p[3];
        int32_t b[3];
        tsdf_ray_point(o, d, zc, p);
        if (!tsdf_world_to_block(p, vol->inv_block_size, b))
            return z_min;
        float z_out = tsdf_ray_block_exit_z(o, d, b, block_m);
        float z_in = tsdf_ray_block_entry_z(o, d, b, block_m);
        float lo = z_in > z_min ? z_in : z_min;
        if (z_out - lo > 8.0f * eps_z && z_out - zc > 2.0f * eps_z) {
            if (z_in <= z_min) {
                /* The march starts inside b: only if z_min is in b. */
                int32_t b0[3];
                tsdf_ray_point(o, d, z_min, p);
                if (!tsdf_world_to_block(p, vol->inv_block_size, b0) || b0[0] != b[0] ||
                    b0[1] != b[1] || b0[2] != b[2])
                    return z_min;
            }
            return z_out + eps_z;
        }
        zc = z_in - 4.0f * eps_z;
    }
    return z_min;
}

/* One pixel of the fast raycast, for the CPU and the CUDA kernel alike: the
 * reference march's answer (tsdf_ray_pixel), bit for bit, marched only
 * over the depths where its tile's blocks can be (lo_bits / hi_bits, the
 * tile bounds of tsdf_raycast_range.h, tiles_x per row): resumed before
 * the first block (tsdf_ray_resume_z) and given up past the last, where
 * the reference would only skip empty blocks to its end. A tile no block
 * covers marches nothing. */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel_ranged(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                              const float *T_world_cam, const tsdf_intrinsics *K,
                                              uint32_t px, uint32_t py, float z_min, float z_max,
                                              const uint32_t *lo_bits, const uint32_t *hi_bits,
                                              uint32_t tiles_x, size_t i, float *depth,
                                              float *normals, uint8_t *rgb)
{
    float o[3], d[3], near, far;
    /* Nothing to march (z_from past z_stop): no surface. */
    float z_from = INFINITY, z_stop = -INFINITY;
    tsdf_pixel_ray_world(T_world_cam, K, (float)px, (float)py, o, d);
    if (tsdf_range_of_pixel(lo_bits, hi_bits, tiles_x, px, py, vol->voxel_size_m, z_min, z_max,
                            &near, &far)) {
        z_from = near > z_min ? tsdf_ray_resume_z(vol, o, d, z_min, near) : z_min;
        z_stop = far;
    }
    tsdf_ray_pixel_od(vol, c, o, d, z_min, z_max, z_from, z_stop, i, depth, normals, rgb);
}

/* tsdf_ray_pixel_span over the whole ray: the reference march. */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                       const float *T_world_cam, const tsdf_intrinsics *K,
                                       uint32_t px, uint32_t py, float z_min, float z_max, size_t i,
                                       float *depth, float *normals, uint8_t *rgb)
{
    tsdf_ray_pixel_span(vol, c, T_world_cam, K, px, py, z_min, z_max, z_min, INFINITY, i, depth,
                        normals, rgb);
}

#endif /* TSDF_RAYCAST_MARCH_H */
