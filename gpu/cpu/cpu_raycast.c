/*
 * cpu_raycast.c - the CPU reference raycast: the allocated blocks' depth
 * range per image tile (tsdf_raycast_range.h), then per pixel the march of
 * tsdf_raycast_march.h over its tile's range, with blocks found in the CPU
 * store's hash table. Both passes are the code the CUDA kernels run.
 */
#include <stddef.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "tsdf_math.h"
#include "tsdf_raycast_range.h"

#define TSDF_RAY_SOURCE cpu_volume *
#include "tsdf_raycast_march.h"

static int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz)
{
    return cpu_volume_block(vol->src, bx, by, bz);
}

/* The lowest and highest corner depth of the blocks that may cover each
 * tile (lo / hi: tiles_x * tiles_y entries, as float bits). */
static void range_tiles(const cpu_volume *v, const tsdf_range_view *rv, uint32_t *lo, uint32_t *hi)
{
    const size_t ntiles = (size_t)rv->tiles_x * rv->tiles_y;
    for (size_t t = 0; t < ntiles; t++) {
        lo[t] = TSDF_RANGE_LO_EMPTY;
        hi[t] = 0;
    }
    for (uint32_t slot = 0; slot < v->store.used; slot++) {
        uint64_t key = v->store.keys[slot];
        int32_t bx, by, bz;
        uint32_t tile[4];
        float zl, zh;
        if (key == TSDF_KEY_EMPTY)
            continue;
        tsdf_block_key_unpack(key, &bx, &by, &bz);
        if (!tsdf_range_block(rv, bx, by, bz, tile, &zl, &zh))
            continue;
        const uint32_t bl = tsdf_range_bits(zl), bh = tsdf_range_bits(zh);
        for (uint32_t ty = tile[1]; ty <= tile[3]; ty++) {
            for (uint32_t tx = tile[0]; tx <= tile[2]; tx++) {
                size_t t = (size_t)ty * rv->tiles_x + tx;
                lo[t] = bl < lo[t] ? bl : lo[t];
                hi[t] = bh > hi[t] ? bh : hi[t];
            }
        }
    }
}

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    tsdf_ray_volume vol;
    tsdf_ray_cache cache;
    tsdf_range_view rv;

    tsdf_range_view_init(&rv, p->T_world_cam, &p->K, p->width, p->height, v->params.voxel_size_m);
    const size_t ntiles = (size_t)rv.tiles_x * rv.tiles_y;
    uint32_t *lo = malloc(2 * ntiles * sizeof(uint32_t));
    if (lo == NULL)
        return TSDF_ENOMEM;
    uint32_t *hi = lo + ntiles;
    range_tiles(v, &rv, lo, hi);

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
                free(lo);
                v->last_raycast_ms = cpu_now_ms() - t0;
                return TSDF_ETIMEOUT;
            }
            float z_from = 0.0f, z_to = 0.0f;
            int span = tsdf_range_of_pixel(lo, hi, rv.tiles_x, px, py, vol.voxel_size_m,
                                           p->min_depth_m, p->max_depth_m, &z_from, &z_to);
            tsdf_ray_pixel_span(&vol, &cache, p->T_world_cam, &p->K, px, py, span, z_from, z_to,
                                p->max_depth_m, (size_t)py * p->width + px, out->depth_m,
                                out->normals, out->rgb);
        }
    }
    free(lo);
    v->last_raycast_ms = cpu_now_ms() - t0;
    return TSDF_OK;
}
