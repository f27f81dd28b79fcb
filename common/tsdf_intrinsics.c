/*
 * tsdf_intrinsics.c - the one check of pinhole intrinsics (declared in
 * common/tsdf_types.h, next to the type), shared by the engine's frame and
 * raycast checks and the wire codec, so that intrinsics one of them accepts
 * are never refused by another. It lives here, in the common library,
 * because the codec (and the client library built on it) is linked without
 * the engine.
 *
 * Pure C, no allocation, no globals; callable from any thread.
 */
#include "tsdf_types.h"

#include <math.h>
#include <stddef.h>

int tsdf_intrinsics_check(const tsdf_intrinsics *K, uint32_t width, uint32_t height)
{
    if (K == NULL)
        return TSDF_EINVAL;
    /* NaN fails the comparisons too. */
    if (!(K->fx > 0.0f) || !(K->fy > 0.0f) || !isfinite(K->fx) || !isfinite(K->fy) ||
        !isfinite(K->cx) || !isfinite(K->cy))
        return TSDF_EBAD_INTRINSICS;

    /* The image's extent runs from pixel edge -0.5 to w - 0.5 (pixel centres
     * are integers). The ray of image point (u, v) leaves the optical axis by
     * atan(r) with r^2 = ((u - cx) / fx)^2 + ((v - cy) / fy)^2, a convex
     * function of (u, v), so its largest value over the image is at a
     * corner: the corners bound every pixel ray. Computed in double, so a
     * tiny focal length gives a huge r instead of an overflow. */
    const double max_tan = TSDF_INTRINSICS_MAX_TAN;
    const double us[2] = {-0.5, (double)width - 0.5};
    const double vs[2] = {-0.5, (double)height - 0.5};
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            double x = (us[i] - (double)K->cx) / (double)K->fx;
            double y = (vs[j] - (double)K->cy) / (double)K->fy;
            if (!(x * x + y * y <= max_tan * max_tan))
                return TSDF_EBAD_INTRINSICS;
        }
    }
    return TSDF_OK;
}
