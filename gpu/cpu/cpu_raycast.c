/*
 * cpu_raycast.c - the CPU raycast: per pixel, the march of
 * tsdf_raycast_march.h (shared with the CUDA kernel), with blocks found in
 * the CPU store's hash table, rows spread over the volume's pool.
 *
 * The fast path (cpu_raycast) gives the reference march's answer without
 * marching where the reference only skips empty space. Per tile it knows
 * the depths [near, far] where the volume's blocks can be
 * (cpu_ray_range.h). Past far the reference only skips unallocated blocks
 * to the ray's end and reports no surface, so the march stops there. Before
 * near it skips block by block, each skip to the block's exit plus eps_z;
 * a skip out of block b lands on the same depth whichever depth inside b it
 * left from (the exit of b plus eps_z). So the fast path finds an
 * unallocated block b before near that the ray crosses for well over eps_z
 * (the reference's skips, eps_z past each exit, cannot jump over it, and
 * its depth inside b is then far from b's exit), and resumes the
 * reference march at b's exit plus eps_z, computed by the same expressions.
 * From there both take the same samples and return the same bits
 * (tests/test_ray_fast.c). The one way they could part is the iteration
 * bound, which the fast path, skipping iterations, reaches later: the
 * bound only stops marches whose float steps stall, which a correct march
 * never does. cpu_raycast_reference is the plain march, for that test.
 */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cpu_backend.h"
#include "cpu_ray_range.h"
#include "tsdf_math.h"

#define TSDF_RAY_SOURCE const cpu_volume *
#include "tsdf_raycast_march.h"

/* Rows per chunk of the raycast job. */
#define RAY_ROWS 4

static int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz)
{
    return cpu_volume_block(vol->src, bx, by, bz);
}

typedef struct {
    tsdf_ray_volume vol;
    const tsdf_raycast_params *p;
    tsdf_raycast_output *out;
    const cpu_ray_range *range; /* NULL: the reference march */
    atomic_int cancelled;
} ray_job;

/* The depth at which the ray o + z d enters block b (the latest of its
 * three entry planes): only compared against margins, never a result. */
static float block_entry_z(const float o[3], const float d[3], const int32_t b[3], float block_m)
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
 * before `near` (see the top of this file); z_min when none is found. */
static float resume_z(const tsdf_ray_volume *vol, const float o[3], const float d[3], float z_min,
                      float near)
{
    /* The march's own expressions: its skips land on exit + eps_z. */
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
        float z_in = block_entry_z(o, d, b, block_m);
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

static void no_surface(const ray_job *j, size_t i)
{
    j->out->depth_m[i] = NAN;
    if (j->out->normals != NULL)
        j->out->normals[3 * i] = j->out->normals[3 * i + 1] = j->out->normals[3 * i + 2] = NAN;
    if (j->out->rgb != NULL)
        j->out->rgb[3 * i] = j->out->rgb[3 * i + 1] = j->out->rgb[3 * i + 2] = 0;
}

/* Rows [b, e). */
static int ray_rows(void *arg, size_t b, size_t e, unsigned worker)
{
    ray_job *j = arg;
    const tsdf_raycast_params *p = j->p;
    tsdf_ray_cache cache;
    tsdf_ray_cache_init(&cache);
    for (uint32_t py = (uint32_t)b; py < (uint32_t)e; py++) {
        if (atomic_load_explicit(&j->cancelled, memory_order_relaxed))
            return TSDF_ETIMEOUT;
        for (uint32_t px = 0; px < p->width; px++) {
            size_t i = (size_t)py * p->width + px;
            float z_from = p->min_depth_m, z_stop = INFINITY;
            /* A large image of long rays takes the CPU minutes; polling
             * every few dozen pixels lets a caller whose client gave up
             * stop it within milliseconds. params.cancel is called on the
             * calling thread only, which is worker 0. */
            if (worker == 0 && p->cancel != NULL && px % TSDF_RAYCAST_CANCEL_PIXELS == 0 &&
                p->cancel(p->cancel_arg)) {
                atomic_store(&j->cancelled, 1);
                return TSDF_ETIMEOUT;
            }
            if (j->range != NULL) {
                float near, far, o[3], d[3];
                cpu_ray_range_of(j->range, px, py, &near, &far);
                if (!(near <= far)) {
                    no_surface(j, i);
                    continue;
                }
                if (near > p->min_depth_m) {
                    tsdf_pixel_ray_world(p->T_world_cam, &p->K, (float)px, (float)py, o, d);
                    z_from = resume_z(&j->vol, o, d, p->min_depth_m, near);
                }
                z_stop = far;
            }
            tsdf_ray_pixel_span(&j->vol, &cache, p->T_world_cam, &p->K, px, py, p->min_depth_m,
                                p->max_depth_m, z_from, z_stop, i, j->out->depth_m, j->out->normals,
                                j->out->rgb);
        }
    }
    return TSDF_OK;
}

static int run_raycast(cpu_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out,
                       const cpu_ray_range *range)
{
    ray_job j;
    j.vol.src = v;
    j.vol.layout = v->store.layout;
    j.vol.geom = v->store.geom;
    j.vol.rgb = v->store.rgb;
    j.vol.quant = v->store.quant;
    j.vol.voxel_size_m = v->params.voxel_size_m;
    j.vol.inv_voxel_size = v->inv_voxel_size;
    j.vol.inv_block_size = v->inv_block_size;
    j.p = p;
    j.out = out;
    j.range = range;
    atomic_init(&j.cancelled, 0);
    return cpu_pool_run(v->pool, p->height, RAY_ROWS, ray_rows, &j);
}

int cpu_raycast_reference(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    int rc = run_raycast(v, p, out, NULL);
    v->last_raycast_ms = cpu_now_ms() - t0;
    return rc;
}

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    cpu_ray_range range;
    int rc;

    cpu_ray_range_init(&range);
    if ((rc = cpu_ray_range_build(&range, v, p)) == TSDF_OK)
        rc = run_raycast(v, p, out, &range);
    cpu_ray_range_fini(&range);
    v->last_raycast_ms = cpu_now_ms() - t0;
    return rc;
}
