/*
 * cpu_raycast.c - the CPU reference raycast: per pixel, the march of
 * tsdf_raycast_march.h (shared with the CUDA kernel), with blocks found in
 * the CPU store's hash table.
 */
#include <stddef.h>

#include "cpu_backend.h"
#include "tsdf_math.h"

#define TSDF_RAY_SOURCE cpu_volume *
#include "tsdf_raycast_march.h"

static int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz)
{
    return cpu_volume_block(vol->src, bx, by, bz);
}

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    tsdf_ray_volume vol;
    tsdf_ray_cache cache;

    vol.src = v;
    vol.layout = v->store.layout;
    vol.geom = v->store.geom;
    vol.rgb = v->store.rgb;
    vol.quant = v->store.quant;
    vol.voxel_size_m = v->params.voxel_size_m;
    vol.inv_voxel_size = v->inv_voxel_size;
    vol.inv_block_size = v->inv_block_size;
    tsdf_ray_cache_init(&cache);

    for (uint32_t py = 0; py < p->height; py++) {
        for (uint32_t px = 0; px < p->width; px++) {
            /* A large image of long rays takes the CPU minutes; polling
             * every few dozen pixels lets a caller whose client gave up
             * stop it within milliseconds, at the cost of one call. */
            if (p->cancel != NULL && px % TSDF_RAYCAST_CANCEL_PIXELS == 0 &&
                p->cancel(p->cancel_arg)) {
                v->last_raycast_ms = cpu_now_ms() - t0;
                return TSDF_ETIMEOUT;
            }
            tsdf_ray_pixel(&vol, &cache, p->T_world_cam, &p->K, px, py, p->min_depth_m,
                           p->max_depth_m, (size_t)py * p->width + px, out->depth_m, out->normals,
                           out->rgb);
        }
    }
    v->last_raycast_ms = cpu_now_ms() - t0;
    return TSDF_OK;
}
