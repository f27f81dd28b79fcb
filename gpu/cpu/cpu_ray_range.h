/*
 * cpu_ray_range.h - where in a raycast's image the volume's blocks can be:
 * per tile of CPU_RAY_TILE x CPU_RAY_TILE pixels, the camera depths
 * [near, far] between which any of the tile's rays can be inside an
 * allocated block. Built by projecting every block's (slightly grown)
 * bounding box into the image, so it is conservative: a ray of the tile at
 * a camera depth outside [near, far] is in an unallocated block, as the
 * march computes its points and blocks. A tile no block covers has
 * near > far. cpu_raycast.c marches only inside the range.
 *
 * Ownership: caller-owned struct, cpu_ray_range_init / _fini. Threads: the
 * build spreads over the volume's pool; the result is the same for any
 * thread count (minima and maxima).
 */
#ifndef TSDF_CPU_RAY_RANGE_H
#define TSDF_CPU_RAY_RANGE_H

#include <stdint.h>

#include "cpu_backend.h"

#define CPU_RAY_TILE 8

typedef struct {
    uint32_t tiles_x, tiles_y;
    float *near_m, *far_m; /* tiles_x * tiles_y each, row-major */
    /* Per pool thread, while building: its own near / far arrays. */
    float *part;
    unsigned parts;
} cpu_ray_range;

void cpu_ray_range_init(cpu_ray_range *r);
void cpu_ray_range_fini(cpu_ray_range *r);

/* The ranges of the raycast p over the blocks of v. TSDF_ENOMEM. */
int cpu_ray_range_build(cpu_ray_range *r, cpu_volume *v, const tsdf_raycast_params *p);

/* The range of pixel (px, py). */
static inline void cpu_ray_range_of(const cpu_ray_range *r, uint32_t px, uint32_t py, float *near,
                                    float *far)
{
    size_t t = (size_t)(py / CPU_RAY_TILE) * r->tiles_x + px / CPU_RAY_TILE;
    *near = r->near_m[t];
    *far = r->far_m[t];
}

#endif /* TSDF_CPU_RAY_RANGE_H */
