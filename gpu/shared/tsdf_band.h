/*
 * tsdf_band.h - which blocks a depth sample's truncation band crosses,
 * written once for the CPU reference (cpu_integrate.c) and the CUDA
 * allocation pass (cuda_integrate.cu): the band's segment along the ray
 * (tsdf_band_segment), an exact DDA over blocks (tsdf_block_dda) and the
 * walk that takes the DDA's blocks in its order with fewer divisions
 * (tsdf_band_walk). The rest of the per-voxel maths is tsdf_math.h.
 */
#ifndef TSDF_BAND_H
#define TSDF_BAND_H

#include <math.h>
#include <stdint.h>

#include "tsdf_math.h"

/* ---- block allocation along a ray ----------------------------------------
 * An exact 3D DDA over blocks (Amanatides & Woo) of the segment a..b: it
 * yields every block the segment passes through, in order, starting with the
 * block of a and ending with the block of b. The number of steps is fixed at
 * init (the Manhattan distance between the end blocks, + 1), and each step
 * moves one axis that has not yet reached its end block, so the walk always
 * ends exactly at b's block whatever the rounding. A CUDA thread keeps the
 * state in registers:
 *
 *     tsdf_block_dda s;
 *     int32_t blk[3];
 *     if (tsdf_band_dda_init(&s, origin, dir, depth_m, trunc_m, inv_block_size))
 *         while (tsdf_block_dda_next(&s, blk))
 *             use(blk);
 */
typedef struct {
    int32_t cur[3], end[3], step[3];
    float t_max[3], t_delta[3];
    int32_t remaining; /* blocks still to yield, cur included */
} tsdf_block_dda;

/* tsdf_block_dda_init from the ends in block units: A = a * inv_block_size
 * and B likewise, the products tsdf_block_dda_init forms. */
TSDF_HD int tsdf_block_dda_init_units(tsdf_block_dda *s, const float A[3], const float B[3])
{
    int32_t total = 1;
    s->remaining = 0;
    if (!tsdf_block_of_units(A, s->cur) || !tsdf_block_of_units(B, s->end))
        return 0;
    for (int i = 0; i < 3; i++) {
        float d = B[i] - A[i];
        if (s->end[i] > s->cur[i]) {
            s->step[i] = 1;
            s->t_delta[i] = 1.0f / d;
            s->t_max[i] = ((float)(s->cur[i] + 1) - A[i]) / d;
            total += s->end[i] - s->cur[i];
        } else if (s->end[i] < s->cur[i]) {
            s->step[i] = -1;
            s->t_delta[i] = -1.0f / d;
            s->t_max[i] = ((float)s->cur[i] - A[i]) / d;
            total += s->cur[i] - s->end[i];
        } else {
            s->step[i] = 0;
            s->t_delta[i] = INFINITY;
            s->t_max[i] = INFINITY;
        }
    }
    s->remaining = total;
    return 1;
}

/* Returns 0 (nothing to walk) when a or b is not finite or outside the key
 * range. inv_block_size = 1 / (8 voxel_size). */
TSDF_HD int tsdf_block_dda_init(tsdf_block_dda *s, const float a[3], const float b[3],
                                float inv_block_size)
{
    float A[3], B[3];
    for (int i = 0; i < 3; i++) {
        A[i] = a[i] * inv_block_size;
        B[i] = b[i] * inv_block_size;
    }
    return tsdf_block_dda_init_units(s, A, B);
}

/* Writes the next block to b and returns 1, or returns 0 when done. */
TSDF_HD int tsdf_block_dda_next(tsdf_block_dda *s, int32_t b[3])
{
    if (s->remaining <= 0)
        return 0;
    b[0] = s->cur[0];
    b[1] = s->cur[1];
    b[2] = s->cur[2];
    s->remaining--;
    if (s->remaining > 0) {
        /* Among the axes not yet at their end block, step the one whose next
         * boundary comes first (ties: lowest axis). */
        int axis = -1;
        for (int i = 0; i < 3; i++) {
            if (s->cur[i] == s->end[i])
                continue;
            if (axis < 0 || s->t_max[i] < s->t_max[axis])
                axis = i;
        }
        if (axis < 0) {
            /* Cannot happen while remaining counts the Manhattan distance. */
            s->remaining = 0;
            return 1;
        }
        s->cur[axis] += s->step[axis];
        s->t_max[axis] += s->t_delta[axis];
    }
    return 1;
}

/* The allocation band of one depth sample: the blocks of the ray segment
 * within trunc_m of the measured point, measured along the ray, i.e. camera
 * depths [max(depth - h, 0), depth + h] with h = trunc_m / |dir|. A band of
 * camera depths depth +- trunc_m would be |dir| = 1 / cos(angle off the
 * optical axis) times longer along the ray: at grazing angles (wide or
 * bogus intrinsics) thousands of blocks per pixel. Measured along the ray it
 * is 2 trunc_m long for every ray, so one sample yields at most
 * 4 + floor(sqrt(3) * 2 trunc_m / block size) blocks (the segment crosses at
 * most floor(L |u_i| / b) + 1 block boundaries on axis i, with sum |u_i| <=
 * sqrt(3) for the unit direction u). The voxels near the surface that the
 * sample updates, those within trunc_m of it along the ray, lie in it.
 * |dir| is computed here, in this expression order, on both backends (sqrtf
 * and the division are correctly rounded on the host and under nvcc's
 * default -prec-sqrt / -prec-div), so both allocate the same blocks.
 * origin, dir: from tsdf_pixel_ray_world. Returns 0 when depth_m <= 0 or the
 * segment leaves the key range (the sample then allocates nothing).
 * tsdf_band_segment gives the segment a..b that tsdf_band_dda_init walks
 * (0: none), so that a caller may look at its end blocks first
 * (tsdf_band_walk, in block units). */
TSDF_HD int tsdf_band_segment(const float origin[3], const float dir[3], float depth_m,
                              float trunc_m, float a[3], float b[3])
{
    if (!(depth_m > 0.0f))
        return 0;
    float dir_len = sqrtf(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]);
    float half_z = trunc_m / dir_len;
    /* NaN fails the comparison: a ray without a length allocates nothing. */
    if (!(half_z > 0.0f))
        return 0;
    float z0 = depth_m - half_z;
    float z1 = depth_m + half_z;
    if (z0 < 0.0f)
        z0 = 0.0f;
    for (int i = 0; i < 3; i++) {
        a[i] = origin[i] + z0 * dir[i];
        b[i] = origin[i] + z1 * dir[i];
    }
    return 1;
}

TSDF_HD int tsdf_band_dda_init(tsdf_block_dda *s, const float origin[3], const float dir[3],
                               float depth_m, float trunc_m, float inv_block_size)
{
    float a[3], b[3];
    if (!tsdf_band_segment(origin, dir, depth_m, trunc_m, a, b))
        return 0;
    return tsdf_block_dda_init(s, a, b, inv_block_size);
}

/* The walk of tsdf_block_dda_init_units(A, B) / tsdf_block_dda_next, the
 * same blocks in the same order, with fewer divisions where the segment is
 * short, as a band (2 trunc_m, a block at 4 voxels of truncation) almost
 * always is. Where the end blocks differ on one axis at most (a little
 * over half of a 7-Scenes frame's pixels) the walk is a line along it
 * (each DDA step moves that axis, the only one not at its end) and needs
 * none; where they differ by one block on
 * two or three axes (the rest, nearly) each of those axes is stepped once,
 * in the order of its boundary's t_max (the DDA's expression, so its
 * order, ties to the lower axis as tsdf_block_dda_next breaks them), one
 * division an axis where the DDA's init takes two; anything longer is
 * left to the DDA itself (TSDF_WALK_DDA). A CUDA thread keeps it in
 * registers. */
typedef struct {
    /* In scalars rather than arrays indexed at run time, which nvcc would
     * keep in local memory: */
    int32_t cx, cy, cz; /* the next block to yield */
    int32_t sx, sy, sz; /* the step per axis: -1, 0 or +1 */
    int32_t o0, o1, o2; /* the axes in the order they are stepped */
    int32_t remaining;  /* blocks still to yield */
    int32_t next;       /* steps mode: how many steps were taken */
    int32_t mode;
} tsdf_band_walk;

#define TSDF_WALK_LINE 0  /* one axis, any number of blocks */
#define TSDF_WALK_STEPS 1 /* two or three axes, one block each */
#define TSDF_WALK_DDA 2   /* longer: the caller walks tsdf_block_dda */

/* Returns 0 (nothing to walk) where tsdf_block_dda_init_units does, else
 * 1 with w->mode: TSDF_WALK_DDA leaves the walk to the caller
 * (tsdf_block_dda_init_units(A, B) and _next, in a loop of its own: a
 * tsdf_block_dda kept in this struct went to local memory under nvcc);
 * the other modes are walked with tsdf_band_walk_next. */
TSDF_HD int tsdf_band_walk_init(tsdf_band_walk *w, const float A[3], const float B[3])
{
    int32_t cur[3], end[3], step[3];
    int differ = 0, far = 0, axis = 0;
    w->remaining = w->next = 0;
    w->mode = TSDF_WALK_LINE;
    if (!tsdf_block_of_units(A, cur) || !tsdf_block_of_units(B, end))
        return 0;
    for (int i = 0; i < 3; i++) {
        int32_t dd = end[i] - cur[i];
        step[i] = dd > 0 ? 1 : (dd < 0 ? -1 : 0);
        if (dd != 0) {
            differ++;
            axis = i;
        }
        far |= dd > 1 || dd < -1;
    }
    w->cx = cur[0];
    w->cy = cur[1];
    w->cz = cur[2];
    w->sx = step[0];
    w->sy = step[1];
    w->sz = step[2];
    if (differ <= 1) {
        const int32_t n =
            axis == 0 ? end[0] - cur[0] : (axis == 1 ? end[1] - cur[1] : end[2] - cur[2]);
        w->mode = TSDF_WALK_LINE;
        w->o0 = w->o1 = w->o2 = axis;
        w->remaining = 1 + (n < 0 ? -n : n);
        return 1;
    }
    if (far) {
        w->mode = TSDF_WALK_DDA;
        return 1;
    }
    /* t_max as tsdf_block_dda_init_units computes it, for the axes that
     * step; the others never do (t = +inf sorts them last). */
    float t[3];
    for (int i = 0; i < 3; i++) {
        float d = B[i] - A[i];
        if (step[i] > 0)
            t[i] = ((float)(cur[i] + 1) - A[i]) / d;
        else if (step[i] < 0)
            t[i] = ((float)cur[i] - A[i]) / d;
        else
            t[i] = INFINITY;
    }
    /* Sort the three axes by (t, axis): the DDA steps, among the axes not
     * at their end, the one of least t_max, the lowest of equal ones. An
     * insertion sort from the order 0, 1, 2 that moves an axis only past a
     * strictly greater t keeps equal ones in axis order. */
    int32_t o0 = 0, o1 = 1, o2 = 2;
    float t0 = t[0], t1 = t[1];
    if (t[1] < t[0]) {
        o0 = 1;
        o1 = 0;
        t0 = t[1];
        t1 = t[0];
    }
    if (t[2] < t1) {
        o2 = o1;
        o1 = 2;
        if (t[2] < t0) {
            o1 = o0;
            o0 = 2;
        }
    }
    w->o0 = o0;
    w->o1 = o1;
    w->o2 = o2;
    w->mode = TSDF_WALK_STEPS;
    w->remaining = 1 + differ;
    return 1;
}

/* Writes the next block to b and returns 1, or returns 0 when done (at
 * once in mode TSDF_WALK_DDA). */
TSDF_HD int tsdf_band_walk_next(tsdf_band_walk *w, int32_t b[3])
{
    if (w->remaining <= 0)
        return 0;
    b[0] = w->cx;
    b[1] = w->cy;
    b[2] = w->cz;
    if (--w->remaining > 0) {
        const int32_t a = w->next == 0 ? w->o0 : (w->next == 1 ? w->o1 : w->o2);
        w->next += w->mode == TSDF_WALK_STEPS;
        w->cx += a == 0 ? w->sx : 0;
        w->cy += a == 1 ? w->sy : 0;
        w->cz += a == 2 ? w->sz : 0;
    }
    return 1;
}

#endif /* TSDF_BAND_H */
