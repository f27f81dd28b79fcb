/*
 * cpu_raycast.c - the CPU reference raycast: per pixel, march the ray from
 * min_depth to max_depth (camera z), skip unallocated space a block at a
 * time, and find the first + to - zero crossing of the trilinearly
 * interpolated TSDF.
 */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"
#include "tsdf_math.h"

/* Looks blocks up through a one-entry cache: successive samples of a ray
 * mostly fall in the block of the previous one. */
typedef struct {
    cpu_volume *v;
    int32_t key[3];
    tsdf_voxel *blk;
    int valid;
} block_cache;

static tsdf_voxel *cached_block(block_cache *c, int32_t bx, int32_t by, int32_t bz)
{
    if (!c->valid || c->key[0] != bx || c->key[1] != by || c->key[2] != bz) {
        c->blk = cpu_volume_block(c->v, bx, by, bz);
        c->key[0] = bx;
        c->key[1] = by;
        c->key[2] = bz;
        c->valid = 1;
    }
    return c->blk;
}

static const tsdf_voxel *cached_voxel(block_cache *c, int32_t x, int32_t y, int32_t z)
{
    tsdf_voxel *b = cached_block(c, tsdf_floor_div8(x), tsdf_floor_div8(y), tsdf_floor_div8(z));
    return b != NULL ? b + tsdf_voxel_index(x & 7, y & 7, z & 7) : NULL;
}

/* The 8 voxels around world point p (the cell whose corners are the voxel
 * centres around it). Returns 1 with the sdf values in c8, the corner voxels
 * and the position inside the cell when all 8 are known, else 0. */
static int gather_cell(block_cache *c, const float p[3], float c8[8], const tsdf_voxel *vox8[8],
                       float frac[3])
{
    int32_t base[3];
    for (int i = 0; i < 3; i++) {
        float f = p[i] * c->v->inv_voxel_size - 0.5f;
        float fl = floorf(f);
        if (!(fl >= -TSDF_VOXEL_COORD_LIMIT && fl < TSDF_VOXEL_COORD_LIMIT))
            return 0;
        base[i] = (int32_t)fl;
        frac[i] = f - fl;
    }
    if ((base[0] & 7) != 7 && (base[1] & 7) != 7 && (base[2] & 7) != 7) {
        /* All 8 corners in one block (7 cells in 8 per axis): one lookup. */
        const tsdf_voxel *blk = cached_block(c, tsdf_floor_div8(base[0]), tsdf_floor_div8(base[1]),
                                             tsdf_floor_div8(base[2]));
        int i0;
        if (blk == NULL)
            return 0;
        i0 = tsdf_voxel_index(base[0] & 7, base[1] & 7, base[2] & 7);
        for (int k = 0; k < 8; k++) {
            const tsdf_voxel *vx = blk + i0 + tsdf_voxel_index(k & 1, (k >> 1) & 1, (k >> 2) & 1);
            if (!tsdf_voxel_known(vx))
                return 0;
            vox8[k] = vx;
            c8[k] = vx->sdf_m;
        }
        return 1;
    }
    for (int k = 0; k < 8; k++) {
        const tsdf_voxel *vx =
            cached_voxel(c, base[0] + (k & 1), base[1] + ((k >> 1) & 1), base[2] + ((k >> 2) & 1));
        if (vx == NULL || !tsdf_voxel_known(vx))
            return 0;
        vox8[k] = vx;
        c8[k] = vx->sdf_m;
    }
    return 1;
}

static int sample_sdf(block_cache *c, const float p[3], float *sdf)
{
    float c8[8], frac[3];
    const tsdf_voxel *vox8[8];
    if (!gather_cell(c, p, c8, vox8, frac))
        return 0;
    *sdf = tsdf_trilinear(c8, frac[0], frac[1], frac[2]);
    return 1;
}

static void ray_point(const float o[3], const float d[3], float z, float p[3])
{
    p[0] = o[0] + z * d[0];
    p[1] = o[1] + z * d[1];
    p[2] = o[2] + z * d[2];
}

/* The camera depth at which the ray leaves block b. */
static float block_exit_z(const float o[3], const float d[3], const int32_t b[3], float block_m)
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

/* The surface normal at p: central differences of the interpolated sdf one
 * voxel apart, or the gradient of the cell at p where a neighbour is
 * unknown. 0 when neither gives a direction. */
static int surface_normal(block_cache *c, const float p[3], float n[3])
{
    const float h = c->v->params.voxel_size_m;
    float c8[8], frac[3];
    const tsdf_voxel *vox8[8];
    int ok = 1;
    for (int a = 0; a < 3 && ok; a++) {
        float pp[3] = {p[0], p[1], p[2]}, pm[3] = {p[0], p[1], p[2]}, sp = 0.0f, sm = 0.0f;
        pp[a] += h;
        pm[a] -= h;
        ok = sample_sdf(c, pp, &sp) && sample_sdf(c, pm, &sm);
        n[a] = sp - sm;
    }
    if (ok && tsdf_normalize3(n))
        return 1;
    if (!gather_cell(c, p, c8, vox8, frac))
        return 0;
    tsdf_trilinear_grad(c8, frac[0], frac[1], frac[2], n);
    return tsdf_normalize3(n);
}

static void surface_color(block_cache *c, const float p[3], uint8_t rgb[3])
{
    float c8[8], frac[3];
    const tsdf_voxel *vox8[8];
    rgb[0] = rgb[1] = rgb[2] = 0;
    if (!gather_cell(c, p, c8, vox8, frac))
        return;
    for (int ch = 0; ch < 3; ch++) {
        float col[8];
        for (int k = 0; k < 8; k++)
            col[k] = (float)vox8[k]->rgb[ch];
        float m = tsdf_trilinear(col, frac[0], frac[1], frac[2]) + 0.5f;
        rgb[ch] = (uint8_t)(m < 0.0f ? 0.0f : (m > 255.0f ? 255.0f : m));
    }
}

/* One ray. Returns 1 and the crossing's camera depth, 0 when there is no
 * surface between min and max depth. */
static int march(block_cache *c, const float o[3], const float d[3], float z_min, float z_max,
                 float *z_hit)
{
    cpu_volume *v = c->v;
    const float s = v->params.voxel_size_m;
    const float block_m = (float)TSDF_BLOCK_DIM * s;
    const float dir_len = sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    /* Distances along the ray are dir_len per unit of camera depth. */
    const float min_step_z = 0.5f * s / dir_len;
    const float eps_z = 0.01f * s / dir_len;
    /* Every iteration advances z by at least eps_z, so this bound is never
     * reached by a correct march; it guards the loop against a broken
     * invariant (then the pixel reports no surface). */
    const double max_iter = (double)(z_max - z_min) / (double)eps_z + 64.0;
    float z = z_min, prev_z = 0.0f, prev_s = 0.0f;
    int prev_known = 0;

    for (double it = 0; z <= z_max && it < max_iter; it++) {
        float p[3], sdf;
        int32_t b[3];
        ray_point(o, d, z, p);
        if (!tsdf_world_to_block(p, v->inv_block_size, b))
            return 0;
        if (cached_block(c, b[0], b[1], b[2]) == NULL) {
            float z_next = block_exit_z(o, d, b, block_m) + eps_z;
            prev_known = 0;
            z = z_next > z + eps_z ? z_next : z + eps_z;
            continue;
        }
        if (!sample_sdf(c, p, &sdf)) {
            prev_known = 0;
            z += min_step_z;
            continue;
        }
        if (prev_known && prev_s > 0.0f && sdf <= 0.0f) {
            float zc = tsdf_zero_crossing(prev_z, prev_s, z, sdf), pc[3], sc;
            /* One secant refinement on the side that still brackets the
             * root: the sdf is only piecewise linear along the ray. */
            ray_point(o, d, zc, pc);
            if (sample_sdf(c, pc, &sc)) {
                float z2 = zc, p2[3], s2;
                if (sc > 0.0f)
                    z2 = tsdf_zero_crossing(zc, sc, z, sdf);
                else if (sc < 0.0f)
                    z2 = tsdf_zero_crossing(prev_z, prev_s, zc, sc);
                /* The hit must lie in a known cell (its normal and colour
                 * come from there); keep the first estimate otherwise. */
                ray_point(o, d, z2, p2);
                *z_hit = sample_sdf(c, p2, &s2) ? z2 : zc;
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

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    block_cache cache;
    memset(&cache, 0, sizeof(cache));
    cache.v = v;

    for (uint32_t py = 0; py < p->height; py++) {
        for (uint32_t px = 0; px < p->width; px++) {
            size_t i = (size_t)py * p->width + px;
            float o[3], d[3], z;
            tsdf_pixel_ray_world(p->T_world_cam, &p->K, (float)px, (float)py, o, d);
            if (march(&cache, o, d, p->min_depth_m, p->max_depth_m, &z)) {
                float hit[3];
                ray_point(o, d, z, hit);
                out->depth_m[i] = z;
                if (out->normals != NULL) {
                    float n[3];
                    if (!surface_normal(&cache, hit, n))
                        n[0] = n[1] = n[2] = NAN;
                    memcpy(&out->normals[3 * i], n, sizeof(n));
                }
                if (out->rgb != NULL)
                    surface_color(&cache, hit, &out->rgb[3 * i]);
            } else {
                out->depth_m[i] = NAN;
                if (out->normals != NULL)
                    out->normals[3 * i] = out->normals[3 * i + 1] = out->normals[3 * i + 2] = NAN;
                if (out->rgb != NULL)
                    out->rgb[3 * i] = out->rgb[3 * i + 1] = out->rgb[3 * i + 2] = 0;
            }
        }
    }
    v->last_raycast_ms = cpu_now_ms() - t0;
    return TSDF_OK;
}
