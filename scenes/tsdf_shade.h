/*
 * tsdf_shade.h - raycast images for people: the shaded surface that
 * `tsdfctl raycast` writes and the live view shows, and a depth colour map.
 *
 * Ownership: the caller owns every buffer. Threads: pure functions.
 */
#ifndef TSDF_SHADE_H
#define TSDF_SHADE_H

#include <stdint.h>

#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes w x h RGB8 pixels into rgb from a raycast (depth_m, normals as
 * tsdf_raycast_output) seen from T_world_cam with intrinsics K: a headlight
 * at the camera (Lambert) tinted by the normal's direction, so that
 * surfaces of different orientation stay apart; pixels without a surface
 * get a dark background. */
void tsdf_shade_surface(const float *depth_m, const float *normals, const float T_world_cam[16],
                        const tsdf_intrinsics *K, uint32_t w, uint32_t h, uint8_t *rgb);

/* Writes w x h RGB8 pixels: depth from near_m (yellow) to far_m (blue),
 * the background where there is no surface. */
void tsdf_shade_depth(const float *depth_m, uint32_t w, uint32_t h, float near_m, float far_m,
                      uint8_t *rgb);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_SHADE_H */
