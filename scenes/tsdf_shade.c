/*
 * tsdf_shade.c - raycast images for people (see tsdf_shade.h).
 */
#include "tsdf_shade.h"

#include <math.h>
#include <stddef.h>

static const uint8_t background[3] = {32, 32, 40};

void tsdf_shade_surface(const float *depth_m, const float *normals, const float T[16],
                        const tsdf_intrinsics *K, uint32_t w, uint32_t h, uint8_t *rgb)
{
    for (uint32_t v = 0; v < h; v++) {
        for (uint32_t u = 0; u < w; u++) {
            size_t i = (size_t)v * w + u;
            const float *n = normals + 3 * i;
            uint8_t *px = rgb + 3 * i;
            if (!isfinite(depth_m[i]) || !isfinite(n[0])) {
                px[0] = background[0], px[1] = background[1], px[2] = background[2];
                continue;
            }
            /* The viewing ray in the world; a headlight at the camera gives
             * Lambertian shading, and the normal's direction tints it so that
             * surfaces of different orientation stay distinguishable. */
            float rc[3] = {((float)u - K->cx) / K->fx, ((float)v - K->cy) / K->fy, 1.0f};
            float rw[3];
            for (int r = 0; r < 3; r++)
                rw[r] = T[4 * r] * rc[0] + T[4 * r + 1] * rc[1] + T[4 * r + 2] * rc[2];
            float len = sqrtf(rw[0] * rw[0] + rw[1] * rw[1] + rw[2] * rw[2]);
            float lambert = -(n[0] * rw[0] + n[1] * rw[1] + n[2] * rw[2]) / len;
            if (lambert < 0)
                lambert = 0;
            float I = 0.15f + 0.85f * lambert;
            for (int k = 0; k < 3; k++) {
                float tint = 0.75f + 0.25f * n[k];
                float val = 255.0f * I * tint;
                px[k] = (uint8_t)(val > 255.0f ? 255.0f : val);
            }
        }
    }
}

void tsdf_shade_depth(const float *depth_m, uint32_t w, uint32_t h, float near_m, float far_m,
                      uint8_t *rgb)
{
    float span = far_m > near_m ? far_m - near_m : 1.0f;
    for (size_t i = 0; i < (size_t)w * h; i++) {
        uint8_t *px = rgb + 3 * i;
        if (!isfinite(depth_m[i])) {
            px[0] = background[0], px[1] = background[1], px[2] = background[2];
            continue;
        }
        float t = (depth_m[i] - near_m) / span;
        t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
        /* Near is warm and bright, far cold and dark: readable at a glance. */
        px[0] = (uint8_t)(255.0f * (1.0f - t));
        px[1] = (uint8_t)(200.0f * (1.0f - t) + 40.0f * t);
        px[2] = (uint8_t)(60.0f + 180.0f * t);
    }
}
