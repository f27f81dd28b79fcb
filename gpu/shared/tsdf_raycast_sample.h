/*
 * tsdf_raycast_sample.h - what the raycast reads from the volume, written
 * once for the CPU reference (cpu_raycast.c) and the CUDA kernels
 * (cuda_raycast.cu): the volume view and its block lookup, the cell
 * gather (the 8 voxels around a point, tsdf_ray_gather_body) and the
 * samples made of it (the interpolated sdf, its gradient, the colour),
 * and the surface's normal (central differences over a 32-voxel stencil)
 * and colour at a hit. The march that takes these samples is
 * tsdf_raycast_march.h, which includes this file.
 *
 * How a block is found is the including file's business. Before including
 * tsdf_raycast_march.h (or this header) it defines TSDF_RAY_SOURCE, the
 * type of what a lookup needs (the CPU: a cpu_store pointer; CUDA: a
 * cuda_table_view), held by value in tsdf_ray_volume.src; after the
 * #include, in the same translation unit, it defines the lookup that this
 * header declares (it takes tsdf_ray_volume, defined here):
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
 * so the GPU evaluates every float expression exactly as the CPU does.
 *
 * Threads: the functions keep no state but the caller's tsdf_ray_cache; one
 * cache per thread.
 */
#ifndef TSDF_RAYCAST_SAMPLE_H
#define TSDF_RAYCAST_SAMPLE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tsdf_math.h"

#ifndef TSDF_RAY_SOURCE
#error "define TSDF_RAY_SOURCE (the block lookup's state) before including tsdf_raycast_sample.h"
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

/* The cell gather and the functions around it, inlined everywhere. Each
 * kernel calls them at one place: the march's one cell sample
 * (tsdf_ray_march_span), the surface's normal and colour. Inlined at every
 * sample site of the earlier march it made the CUDA kernel 7,416
 * instructions long (Nsight Compute showed its warps waiting for an
 * instruction fetch for 64% of their cycles); called, the volume view and
 * the cache whose addresses it took lived in local memory. On the host
 * through TSDF_LOOKUP_FN, which cpu_raycast.c forces inline. */
#ifdef __CUDACC__
#define TSDF_RAY_BODY_FN static __device__ __forceinline__
#else
#define TSDF_RAY_BODY_FN TSDF_LOOKUP_FN
#endif

/* The 8 voxels around the point pv given in voxel units (world / voxel
 * size: the cell whose corners are the voxel centres around it). Returns
 * 1 with the sdf values in c8, the corner voxels' channel indices in idx8
 * and the position inside the cell in frac when all 8 are known, else 0.
 * The corners' blocks are found first (one lookup for the 343 cells of a
 * block's 512 that lie inside it, else one per block the cell reaches),
 * then the 8 voxels are loaded together and checked together: no load
 * waits for the check of the one before, so on the GPU the eight are in
 * flight at once. */
TSDF_RAY_BODY_FN int tsdf_ray_gather_body(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                          const float pv[3], float c8[8], size_t idx8[8],
                                          float frac[3])
{
    int32_t base[3];
    for (int i = 0; i < 3; i++) {
        float f = pv[i] - 0.5f;
        float fl = floorf(f);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return 0;
        base[i] = (int32_t)fl;
        frac[i] = f - fl;
    }
    const int32_t gb[3] = {tsdf_floor_div8(base[0]), tsdf_floor_div8(base[1]),
                           tsdf_floor_div8(base[2])};
    /* Bit a: the cell reaches into the next block along axis a. */
    const int straddle =
        ((base[0] & 7) == 7) | (((base[1] & 7) == 7) << 1) | (((base[2] & 7) == 7) << 2);
    const int32_t b0 = tsdf_ray_block(vol, c, gb[0], gb[1], gb[2]);
    if (straddle == 0) {
        if (b0 < 0)
            return 0;
        const size_t i0 = (size_t)b0 * TSDF_BLOCK_VOXELS +
                          (size_t)tsdf_voxel_index(base[0] & 7, base[1] & 7, base[2] & 7);
        TSDF_UNROLL
        for (int k = 0; k < 8; k++)
            idx8[k] = i0 + (size_t)((k & 1) + TSDF_BLOCK_DIM * ((k >> 1) & 1) +
                                    TSDF_BLOCK_DIM * TSDF_BLOCK_DIM * ((k >> 2) & 1));
    } else {
        /* The blocks beyond base's go through a cache of their own, so
         * that the ray's stays on base's block. */
        tsdf_ray_cache other;
        tsdf_ray_cache_init(&other);
        TSDF_UNROLL
        for (int k = 0; k < 8; k++) {
            const int h = k & straddle;
            const int32_t b = h == 0
                                  ? b0
                                  : tsdf_ray_block(vol, &other, gb[0] + (h & 1),
                                                   gb[1] + ((h >> 1) & 1), gb[2] + ((h >> 2) & 1));
            if (b < 0)
                return 0;
            idx8[k] =
                (size_t)b * TSDF_BLOCK_VOXELS +
                (size_t)tsdf_voxel_index((base[0] + (k & 1)) & 7, (base[1] + ((k >> 1) & 1)) & 7,
                                         (base[2] + ((k >> 2) & 1)) & 7);
        }
    }
    int known = 1;
    TSDF_UNROLL
    for (int k = 0; k < 8; k++) {
        tsdf_vox vx = tsdf_vox_load_ro(vol->layout, vol->geom, idx8[k], vol->quant);
        c8[k] = vx.sdf_m;
        known &= tsdf_vox_known(vx);
    }
    return known;
}

/* The interpolated sdf at the voxel-space point (x, y, z) (world / voxel
 * size) and whether all 8 corners are known: every cell sample of the
 * march and of its refinement. */
typedef struct {
    float sdf;
    int ok;
} tsdf_ray_sample;

/* The march's cell sample, inlined at its one call site (see
 * tsdf_ray_march_span). */
TSDF_LOOKUP_INLINE tsdf_ray_sample tsdf_ray_cell_sample(const tsdf_ray_volume *vol,
                                                        tsdf_ray_cache *c, const float pv[3])
{
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_sample r;
    r.ok = tsdf_ray_gather_body(vol, c, pv, c8, idx8, frac);
    r.sdf = r.ok ? tsdf_trilinear(c8, frac[0], frac[1], frac[2]) : 0.0f;
    return r;
}

/* A gradient (per voxel), ok when every voxel it needs is known. */
typedef struct {
    float g[3];
    int ok;
} tsdf_ray_grad;

/* The interpolated sdf at the voxel-space point (x, y, z) and its gradient
 * (per voxel, the gradient of the cell's trilinear interpolant), ok when
 * all 8 corners are known: the normal where central differences cannot
 * be taken. */
typedef struct {
    float sdf;
    float g[3];
    int ok;
} tsdf_ray_cell;

TSDF_RAY_BODY_FN tsdf_ray_cell tsdf_ray_cell_at(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                                float x, float y, float z)
{
    tsdf_ray_cache lc = *c;
    const float pv[3] = {x, y, z};
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_cell r = {0.0f, {0.0f, 0.0f, 0.0f}, 0};
    r.ok = tsdf_ray_gather_body(vol, &lc, pv, c8, idx8, frac);
    if (r.ok) {
        r.sdf = tsdf_trilinear(c8, frac[0], frac[1], frac[2]);
        tsdf_trilinear_grad(c8, frac[0], frac[1], frac[2], r.g);
    }
    *c = lc;
    return r;
}

/* The interpolated colour at the voxel-space point (x, y, z) of a volume
 * with colour, black where the cell is not known. */
typedef struct {
    uint8_t rgb[3];
} tsdf_ray_rgb;

TSDF_RAY_BODY_FN tsdf_ray_rgb tsdf_ray_color_at(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                                float x, float y, float z)
{
    tsdf_ray_cache lc = *c;
    const float pv[3] = {x, y, z};
    float c8[8], frac[3];
    size_t idx8[8];
    tsdf_ray_rgb r = {{0, 0, 0}};
    if (tsdf_ray_gather_body(vol, &lc, pv, c8, idx8, frac)) {
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

/* The voxels of a stencil around a cell: offsets -1..2 from the cell's
 * base voxel on each axis. On an axis those four voxels lie in at most two
 * blocks (the offsets from upper_from[a] on are in the upper one), so the
 * stencil in at most eight, looked up once each. The eight are picked by
 * selects, never by an index computed at run time: under nvcc that keeps
 * them in registers, where an indexed array went to local memory. */
typedef struct {
    int32_t base[3];
    int32_t upper_from[3]; /* the first offset (-1..2) in the upper block, 3: none */
    int32_t blk[8];        /* pool index of the block (upper bits x | y << 1 | z << 2), -1 */
} tsdf_ray_stencil;

TSDF_LOOKUP_INLINE void tsdf_ray_stencil_init(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                              tsdf_ray_stencil *st, const int32_t base[3])
{
    int32_t lo[3];
    TSDF_UNROLL
    for (int a = 0; a < 3; a++) {
        st->base[a] = base[a];
        lo[a] = tsdf_floor_div8(base[a] - 1);
        /* (base - 1) & 7 == 7 - k puts the block boundary before offset
         * k - 1 + 1 = k; beyond 2, the four share lo's block. */
        int32_t k = 8 - ((base[a] - 1) & 7);
        st->upper_from[a] = k <= 3 ? k - 1 : 3;
    }
    TSDF_UNROLL
    for (int h = 0; h < 8; h++) {
        st->blk[h] = -1;
        /* Only the combinations some voxel of the stencil is in. */
        if (((h & 1) && st->upper_from[0] == 3) || ((h & 2) && st->upper_from[1] == 3) ||
            ((h & 4) && st->upper_from[2] == 3))
            continue;
        st->blk[h] =
            tsdf_ray_block(vol, c, lo[0] + (h & 1), lo[1] + ((h >> 1) & 1), lo[2] + ((h >> 2) & 1));
    }
}

/* Voxel base + (dx, dy, dz) of the stencil (offsets -1..2): 1 with its sdf
 * when known (else 0, and 0 for the sdf). */
TSDF_LOOKUP_INLINE int tsdf_ray_stencil_voxel(const tsdf_ray_volume *vol,
                                              const tsdf_ray_stencil *st, int dx, int dy, int dz,
                                              float *sdf)
{
    const int ux = dx >= st->upper_from[0], uy = dy >= st->upper_from[1],
              uz = dz >= st->upper_from[2];
    const int32_t *bl = st->blk;
    const int32_t y0 = uy ? (ux ? bl[3] : bl[2]) : (ux ? bl[1] : bl[0]);
    const int32_t y1 = uy ? (ux ? bl[7] : bl[6]) : (ux ? bl[5] : bl[4]);
    const int32_t b = uz ? y1 : y0;
    if (b < 0) {
        *sdf = 0.0f;
        return 0;
    }
    const size_t i = (size_t)b * TSDF_BLOCK_VOXELS +
                     (size_t)tsdf_voxel_index((st->base[0] + dx) & 7, (st->base[1] + dy) & 7,
                                              (st->base[2] + dz) & 7);
    tsdf_vox v = tsdf_vox_load_ro(vol->layout, vol->geom, i, vol->quant);
    *sdf = v.sdf_m;
    return tsdf_vox_known(v);
}

/* The central differences one voxel apart of the interpolated sdf around
 * p, per axis a: the cell at p moved one voxel up a, minus the one moved
 * one voxel down, both interpolated at p's position in its cell. The two
 * share 4 corners each with p's own cell, so the six samples need only 32
 * voxels: p's cell and the 4 voxels beyond each of its 6 faces (six
 * gathers of 8 read 48), in at most 8 blocks looked up once each. ok when
 * all 32 are known. */
TSDF_LOOKUP_INLINE tsdf_ray_grad tsdf_ray_central_diff_at(const tsdf_ray_volume *vol,
                                                          tsdf_ray_cache *c, float x, float y,
                                                          float z)
{
    tsdf_ray_cache lc = *c;
    const float p[3] = {x, y, z};
    tsdf_ray_grad r = {{0.0f, 0.0f, 0.0f}, 0};
    tsdf_ray_stencil st;
    int32_t base[3];
    float frac[3], c8[8];
    for (int i = 0; i < 3; i++) {
        float f = p[i] * vol->inv_voxel_size - 0.5f;
        float fl = floorf(f);
        /* One voxel of room on either side for the stencil. */
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT + 1.0f && fl < TSDF_VOXEL_COORD_LIMIT - 2.0f))
            return r;
        base[i] = (int32_t)fl;
        frac[i] = f - fl;
    }
    tsdf_ray_stencil_init(vol, &lc, &st, base);
    /* Every load first, the checks after: no load waits for the one
     * before (on the GPU all 32 are in flight together). */
    int known = 1;
    float up[3][8], down[3][8];
    TSDF_UNROLL
    for (int k = 0; k < 8; k++)
        known &= tsdf_ray_stencil_voxel(vol, &st, k & 1, (k >> 1) & 1, (k >> 2) & 1, &c8[k]);
    TSDF_UNROLL
    for (int a = 0; a < 3; a++) {
        const int bit = 1 << a;
        TSDF_UNROLL
        for (int k = 0; k < 8; k++) {
            /* Corner k moved one voxel along a: beyond the cell's upper
             * face for an upper corner, else the cell's own corner; and
             * the other way round down. */
            int q[3] = {k & 1, (k >> 1) & 1, (k >> 2) & 1};
            if (k & bit) {
                q[a] += 1;
                known &= tsdf_ray_stencil_voxel(vol, &st, q[0], q[1], q[2], &up[a][k]);
                down[a][k] = c8[k & ~bit];
            } else {
                q[a] -= 1;
                known &= tsdf_ray_stencil_voxel(vol, &st, q[0], q[1], q[2], &down[a][k]);
                up[a][k] = c8[k | bit];
            }
        }
    }
    if (!known)
        return r;
    TSDF_UNROLL
    for (int a = 0; a < 3; a++) {
        r.g[a] = tsdf_trilinear(up[a], frac[0], frac[1], frac[2]) -
                 tsdf_trilinear(down[a], frac[0], frac[1], frac[2]);
    }
    r.ok = 1;
    *c = lc;
    return r;
}

/* The surface normal at p: central differences of the interpolated sdf
 * one voxel apart (tsdf_ray_central_diff_at), or the gradient of the cell
 * at p where a voxel of those is unknown. 0 when neither gives a
 * direction. */
TSDF_LOOKUP_FN int tsdf_ray_surface_normal(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                           const float p[3], float n[3])
{
    tsdf_ray_grad g = tsdf_ray_central_diff_at(vol, c, p[0], p[1], p[2]);
    n[0] = g.g[0];
    n[1] = g.g[1];
    n[2] = g.g[2];
    if (g.ok && tsdf_normalize3(n))
        return 1;
    tsdf_ray_cell cg = tsdf_ray_cell_at(vol, c, p[0] * vol->inv_voxel_size,
                                        p[1] * vol->inv_voxel_size, p[2] * vol->inv_voxel_size);
    if (!cg.ok)
        return 0;
    n[0] = cg.g[0];
    n[1] = cg.g[1];
    n[2] = cg.g[2];
    return tsdf_normalize3(n);
}

/* The interpolated colour at p, black where the cell is not known or the
 * volume has no colour. */
TSDF_LOOKUP_FN void tsdf_ray_surface_color(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                           const float p[3], uint8_t rgb[3])
{
    tsdf_ray_rgb m = {{0, 0, 0}};
    if (vol->rgb != NULL)
        m = tsdf_ray_color_at(vol, c, p[0] * vol->inv_voxel_size, p[1] * vol->inv_voxel_size,
                              p[2] * vol->inv_voxel_size);
    rgb[0] = m.rgb[0];
    rgb[1] = m.rgb[1];
    rgb[2] = m.rgb[2];
}

#endif /* TSDF_RAYCAST_SAMPLE_H */
