/*
 * tsdf_raycast_march.h - the raycast's per-pixel march, written once for the
 * CPU reference (cpu_raycast.c) and the CUDA kernels (cuda_raycast.cu).
 *
 * Per pixel: march the ray from min_depth to max_depth (camera z; the end
 * comes sooner on a ray longer than the caps of tsdf_volume.h allow, see
 * TSDF_MAX_RAY_M and tsdf_ray_end_z) in voxel units (tsdf_ray_vox): skip
 * unallocated space a block at a time (to the block's exit) and
 * unobserved voxels a voxel at a time; where the voxel that holds the
 * point is far from the surface (TSDF_RAY_FAR_VOX), step by its sdf after
 * one load; nearer, sample the trilinearly interpolated TSDF
 * (tsdf_trilinear) of the 8 surrounding voxels and step 0.75 sdf (at least
 * half a voxel); refine the first + to - zero crossing with
 * tsdf_zero_crossing plus one secant step (a crossing whose refinement
 * falls in unobserved space is passed over). See tsdf_ray_march_span.
 * Normals are central differences of the interpolated TSDF one voxel
 * apart (the cell's gradient as fallback), colours the interpolated voxel
 * colours, both functions of the hit point alone (tsdf_ray_pixel_surface).
 *
 * The samples and the block lookup are tsdf_raycast_sample.h's (included
 * here; the includer defines TSDF_RAY_SOURCE and the lookup, see there).
 * The CUDA backend is compiled with --fmad=false, so the GPU evaluates
 * every float expression here exactly as the CPU does, in the same order:
 * a GPU ray sees the same samples and returns the same depth, normal and
 * colour, bit for bit.
 */
#ifndef TSDF_RAYCAST_MARCH_H
#define TSDF_RAYCAST_MARCH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tsdf_math.h"
#include "tsdf_raycast_range.h"
#include "tsdf_raycast_sample.h"

TSDF_LOOKUP_INLINE void tsdf_ray_point(const float o[3], const float d[3], float z, float p[3])
{
    p[0] = o[0] + z * d[0];
    p[1] = o[1] + z * d[1];
    p[2] = o[2] + z * d[2];
}

/* A ray in voxel units, set up once per ray: the point at camera depth z
 * is ov + z dv (world / voxel size), and inv_dv is 1 / dv per axis (0
 * where dv is 0). The march steps, finds voxels and blocks and leaves them
 * in these units: the voxel that holds a point is one floor per axis, its
 * block a shift of that, and a cube's exit is a multiplication by inv_dv
 * where it was a division per axis (under nvcc each IEEE division is a
 * call-sized sequence of instructions, and the march's code size is what
 * bounds it: see cuda_raycast.cu). */
typedef struct {
    float ov[3], dv[3], inv_dv[3];
} tsdf_ray_vox;

TSDF_LOOKUP_INLINE void tsdf_ray_vox_init(const tsdf_ray_volume *vol, const float o[3],
                                          const float d[3], tsdf_ray_vox *r)
{
    for (int i = 0; i < 3; i++) {
        r->ov[i] = o[i] * vol->inv_voxel_size;
        r->dv[i] = d[i] * vol->inv_voxel_size;
        r->inv_dv[i] = r->dv[i] != 0.0f ? 1.0f / r->dv[i] : 0.0f;
    }
}

TSDF_LOOKUP_INLINE void tsdf_ray_vox_point(const tsdf_ray_vox *r, float z, float pv[3])
{
    pv[0] = r->ov[0] + z * r->dv[0];
    pv[1] = r->ov[1] + z * r->dv[1];
    pv[2] = r->ov[2] + z * r->dv[2];
}

/* The voxel that holds voxel-space point pv; 0 outside the coordinate
 * range (or NaN). */
TSDF_LOOKUP_INLINE int tsdf_ray_vox_cell(const float pv[3], int32_t vx[3])
{
    for (int i = 0; i < 3; i++) {
        float fl = floorf(pv[i]);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return 0;
        vx[i] = (int32_t)fl;
    }
    return 1;
}

/* The camera depth at which the ray leaves the cube of side `size` voxels
 * whose lowest voxel is lo (a block: size 8; a voxel: size 1). */
TSDF_LOOKUP_FN float tsdf_ray_cube_exit_z(const tsdf_ray_vox *r, const int32_t lo[3], int32_t size)
{
    float z_exit = INFINITY;
    for (int i = 0; i < 3; i++) {
        float t;
        if (r->dv[i] > 0.0f)
            t = ((float)(lo[i] + size) - r->ov[i]) * r->inv_dv[i];
        else if (r->dv[i] < 0.0f)
            t = ((float)lo[i] - r->ov[i]) * r->inv_dv[i];
        else
            continue;
        if (t < z_exit)
            z_exit = t;
    }
    return z_exit;
}

/* The camera depth at which the ray enters that cube (the latest of its
 * three entry planes): only compared against margins, never a result. */
TSDF_LOOKUP_FN float tsdf_ray_cube_entry_z(const tsdf_ray_vox *r, const int32_t lo[3], int32_t size)
{
    float z_in = -INFINITY;
    for (int i = 0; i < 3; i++) {
        float t;
        if (r->dv[i] > 0.0f)
            t = ((float)lo[i] - r->ov[i]) * r->inv_dv[i];
        else if (r->dv[i] < 0.0f)
            t = ((float)(lo[i] + size) - r->ov[i]) * r->inv_dv[i];
        else
            continue;
        if (t > z_in)
            z_in = t;
    }
    return z_in;
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

/* Far from the surface the march reads one voxel, not a cell of eight:
 * where the voxel holding the point has |sdf| >= TSDF_RAY_FAR_VOX voxels,
 * no zero crossing is near, and the step is 0.75 of |sdf| less
 * TSDF_RAY_FAR_MARGIN_VOX voxels (the point may lie up to sqrt(3) / 2 of
 * a voxel from that voxel's centre, where the sdf was measured). Nearer,
 * it samples the interpolated sdf of the cell and steps 0.75 sdf, at
 * least half a voxel, as the march always did. */
#define TSDF_RAY_FAR_VOX 2.0f
#define TSDF_RAY_FAR_MARGIN_VOX 0.875f

/* tsdf_ray_march resumed at camera depth z_from, in empty space (no
 * sample before it counts), and given up past z_stop. A caller that knows
 * two things about the ray may skip what the full march would do there
 * and get the same answer: that the full march from z_min passes through
 * z_from with no sample taken yet (it is one of its empty-block skips,
 * see cpu_raycast.c), and that past z_stop the ray meets no allocated
 * block (where the full march would only skip on to its end and return
 * 0). The step sizes and the iteration bound are those of the full march
 * from z_min. tsdf_ray_march is the span (z_min, INFINITY).
 *
 * Per step, at the point p of depth z:
 *   - p's block is not allocated: on to the block's exit;
 *   - p's voxel is unobserved: on to the voxel's exit (no cell around any
 *     point of that voxel is known), at least half a voxel;
 *   - p's voxel is known and far from the surface (TSDF_RAY_FAR_VOX): one
 *     load, a long step, 0.75 of the sdf less the margin;
 *   - else the cell's interpolated sdf (8 loads). A + to - crossing
 *     between two such samples is refined (tsdf_zero_crossing, one secant
 *     step) and returned. When the
 *     first point after a far step out of free space is already behind a
 *     surface (its voxel or its cell <= 0), the far step's start closes
 *     the bracket, so that a crossing the step passed over (the
 *     projective sdf overstates the distance at grazing angles) is still
 *     found.
 * So a ray reads one voxel per step in the free space in front of a
 * surface and a full cell only in the last voxel or two. */
TSDF_LOOKUP_FN int tsdf_ray_march_span(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                       const float o[3], const float d[3], float z_min, float z_max,
                                       float z_from, float z_stop, float *z_hit)
{
    /* What the cell sample of a turn of the loop is for. */
    enum { STEP, AT_Z, BRACKET, REFINE, HIT };
    const float s = vol->voxel_size_m;
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    /* Distances along the ray are dir_len per unit of camera depth. */
    const float min_step_z = 0.5f * s / dir_len;
    const float eps_z = 0.01f * s / dir_len;
    /* Steps multiply by it: no division in the loop. */
    const float inv_len = 1.0f / dir_len;
    const float far_m = TSDF_RAY_FAR_VOX * s;
    const float margin_m = TSDF_RAY_FAR_MARGIN_VOX * s;
    const float z_end = tsdf_ray_end_z(z_max, dir_len, s);
    /* An integer counter: it costs fewer GPU registers than a double. */
    const uint32_t max_it = tsdf_ray_max_iterations(z_min, z_end, dir_len, s);
    float z = z_from, prev_z = 0.0f, prev_s = 0.0f, far_z = 0.0f, far_s = 0.0f;
    /* The pending cell sample's depth, and the crossing's first estimate
     * and the sample at z while a bracket or refinement is under way. */
    float q_z = 0.0f, zc = 0.0f, sdf = 0.0f;
    int prev_known = 0, after_far = 0, phase = STEP;
    uint32_t it = 0;
    tsdf_ray_vox r;
    tsdf_ray_vox_init(vol, o, d, &r);

    /* One turn is a step, or one cell sample (at z, or for a bracket or
     * the refinement): so the gather is inlined at one place, and a lane
     * whose ray refines does not make its warp run the march twice over.
     * Only steps count against max_it; at most three samples follow one. */
    while (z <= z_end && it < max_it) {
        float pv[3];
        if (phase == STEP) {
            int32_t vx[3];
            it++;
            if (z > z_stop)
                return 0;
            tsdf_ray_vox_point(&r, z, pv);
            if (!tsdf_ray_vox_cell(pv, vx))
                return 0;
            const int32_t b[3] = {tsdf_floor_div8(vx[0]), tsdf_floor_div8(vx[1]),
                                  tsdf_floor_div8(vx[2])};
            const int32_t blk = tsdf_ray_block(vol, c, b[0], b[1], b[2]);
            if (blk < 0) {
                const int32_t lo[3] = {b[0] * TSDF_BLOCK_DIM, b[1] * TSDF_BLOCK_DIM,
                                       b[2] * TSDF_BLOCK_DIM};
                float z_next = tsdf_ray_cube_exit_z(&r, lo, TSDF_BLOCK_DIM) + eps_z;
                prev_known = after_far = 0;
                z = z_next > z + eps_z ? z_next : z + eps_z;
                continue;
            }
            /* The voxel that holds the point, read alone. */
            const tsdf_vox v =
                tsdf_vox_load_ro(vol->layout, vol->geom,
                                 (size_t)blk * TSDF_BLOCK_VOXELS +
                                     (size_t)tsdf_voxel_index(vx[0] & 7, vx[1] & 7, vx[2] & 7),
                                 vol->quant);
            if (!tsdf_vox_known(v)) {
                /* Every cell around a point of this voxel has it as a
                 * corner: none is known until the ray leaves it. */
                float z_next = tsdf_ray_cube_exit_z(&r, vx, 1) + eps_z;
                prev_known = after_far = 0;
                z = z_next > z + min_step_z ? z_next : z + min_step_z;
                continue;
            }
            /* A far step; but not behind a surface (sdf < 0) where the
             * point before was in front of one (a far step out of free
             * space, or a positive sample): a crossing lies between, to
             * be bracketed. */
            if (fabsf(v.sdf_m) >= far_m &&
                (v.sdf_m > 0.0f || !(after_far || (prev_known && prev_s > 0.0f)))) {
                float step = 0.75f * (fabsf(v.sdf_m) - margin_m) * inv_len;
                prev_known = 0;
                /* Only a step out of free space can pass over a + to -
                 * crossing. */
                after_far = v.sdf_m > 0.0f;
                far_z = z;
                far_s = v.sdf_m;
                z += step > min_step_z ? step : min_step_z;
                continue;
            }
            phase = AT_Z;
            q_z = z;
        } else {
            tsdf_ray_vox_point(&r, q_z, pv);
        }
        const tsdf_ray_sample cs = tsdf_ray_cell_sample(vol, c, pv);
        if (phase == AT_Z) {
            if (!cs.ok) {
                /* The point's voxel is known, a corner of its cell is not. */
                prev_known = after_far = 0;
                z += min_step_z;
                phase = STEP;
                continue;
            }
            sdf = cs.sdf;
            if (sdf <= 0.0f && after_far) {
                /* The bracket's near end: the far step's start, sampled as
                 * a cell where it can be (else its one voxel's sdf,
                 * positive). */
                phase = BRACKET;
                q_z = far_z;
                continue;
            }
        } else if (phase == BRACKET) {
            prev_known = 1;
            prev_z = far_z;
            prev_s = cs.ok && cs.sdf > 0.0f ? cs.sdf : far_s;
        } else if (phase == REFINE) {
            if (!cs.ok) {
                /* Both samples are known but the segment between them
                 * passes a cell with an unobserved corner (at the rim of
                 * what was seen): no crossing through unknown space;
                 * march on. */
                prev_known = 0;
                z += min_step_z;
                phase = STEP;
                continue;
            }
            /* One secant refinement on the side that still brackets the
             * root: the sdf is only piecewise linear along the ray. The
             * hit must lie in a known cell (its normal and colour come
             * from there): its sample decides. */
            q_z = zc;
            if (cs.sdf > 0.0f)
                q_z = tsdf_zero_crossing(zc, cs.sdf, z, sdf);
            else if (cs.sdf < 0.0f)
                q_z = tsdf_zero_crossing(prev_z, prev_s, zc, cs.sdf);
            phase = HIT;
            continue;
        } else {
            /* HIT: keep the first estimate where the second's cell is not
             * known. */
            *z_hit = cs.ok ? q_z : zc;
            return 1;
        }
        /* A cell sample at z (after its bracket, if it needed one). */
        after_far = 0;
        if (prev_known && prev_s > 0.0f && sdf <= 0.0f) {
            zc = tsdf_zero_crossing(prev_z, prev_s, z, sdf);
            q_z = zc;
            phase = REFINE;
            continue;
        }
        prev_known = 1;
        prev_z = z;
        prev_s = sdf;
        {
            float step = sdf > 0.0f ? 0.75f * sdf * inv_len : 0.0f;
            z += step > min_step_z ? step : min_step_z;
        }
        phase = STEP;
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

/* Entry i of the normal and colour outputs of a ray o + z d whose march
 * returned depth z (NaN: none): normals[3i..3i+2] (normals may be NULL) the
 * unit normal at the hit (tsdf_ray_surface_normal) or NaNs; rgb[3i..3i+2]
 * (may be NULL) the colour or black. A function of the hit point alone,
 * so the CUDA backend runs it as a kernel of its own after the march's
 * (the march's code then is smaller and its warps do not wait for the
 * lanes that compute normals) and gets the bits the CPU gets by calling it
 * right after the march. */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel_surface(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                               const float o[3], const float d[3], float z,
                                               size_t i, float *normals, uint8_t *rgb)
{
    if (!isnan(z)) {
        float hit[3];
        tsdf_ray_point(o, d, z, hit);
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
        if (normals != NULL)
            normals[3 * i] = normals[3 * i + 1] = normals[3 * i + 2] = NAN;
        if (rgb != NULL)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = 0;
    }
}

/* The whole of one ray o + z d: the march (tsdf_ray_march_span from z_from
 * to z_stop, see there), and entry i of the outputs. depth[i] gets the
 * hit's camera depth or NaN, normals and rgb (either may be NULL) what
 * tsdf_ray_pixel_surface gives. Inlined, so that a constant NULL drops the
 * work it would feed; the outputs are indexed here, late, because
 * addresses formed by the caller would stay live in GPU registers through
 * the march. */
TSDF_LOOKUP_INLINE void tsdf_ray_pixel_od(const tsdf_ray_volume *vol, tsdf_ray_cache *c,
                                          const float o[3], const float d[3], float z_min,
                                          float z_max, float z_from, float z_stop, size_t i,
                                          float *depth, float *normals, uint8_t *rgb)
{
    float z;
    if (!tsdf_ray_march_span(vol, c, o, d, z_min, z_max, z_from, z_stop, &z))
        z = NAN;
    depth[i] = z;
    if (normals != NULL || rgb != NULL)
        tsdf_ray_pixel_surface(vol, c, o, d, z, i, normals, rgb);
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
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const float eps_z = 0.01f * s / dir_len;
    float zc = near - 4.0f * eps_z;
    tsdf_ray_vox r;
    tsdf_ray_vox_init(vol, o, d, &r);

    /* The block before near, or the one before that when the ray only
     * clips it. Blocks are found as the march finds them: the voxel of the
     * point, shifted. */
    for (int tries = 0; tries < 3 && zc > z_min; tries++) {
        float pv[3];
        int32_t vx[3], lo[3];
        tsdf_ray_vox_point(&r, zc, pv);
        if (!tsdf_ray_vox_cell(pv, vx))
            return z_min;
        for (int i = 0; i < 3; i++)
            lo[i] = tsdf_floor_div8(vx[i]) * TSDF_BLOCK_DIM;
        float z_out = tsdf_ray_cube_exit_z(&r, lo, TSDF_BLOCK_DIM);
        float z_in = tsdf_ray_cube_entry_z(&r, lo, TSDF_BLOCK_DIM);
        float zlo = z_in > z_min ? z_in : z_min;
        if (z_out - zlo > 8.0f * eps_z && z_out - zc > 2.0f * eps_z) {
            if (z_in <= z_min) {
                /* The march starts inside the block: only if z_min is in it. */
                int32_t v0[3];
                tsdf_ray_vox_point(&r, z_min, pv);
                if (!tsdf_ray_vox_cell(pv, v0))
                    return z_min;
                for (int i = 0; i < 3; i++)
                    if (tsdf_floor_div8(v0[i]) * TSDF_BLOCK_DIM != lo[i])
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
