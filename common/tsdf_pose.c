#include "tsdf_pose.h"

#include <math.h>
#include <stddef.h>

int tsdf_pose_is_rigid(const float T[16])
{
    if (T == NULL)
        return 0;
    for (int i = 0; i < 16; i++) {
        if (!isfinite(T[i]))
            return 0;
    }
    /* The last row must be exactly what a rigid transform has, within the
     * tolerance, so a projective matrix is not mistaken for a pose. */
    if (fabs(T[12]) > TSDF_POSE_RIGID_TOL || fabs(T[13]) > TSDF_POSE_RIGID_TOL ||
        fabs(T[14]) > TSDF_POSE_RIGID_TOL || fabs(T[15] - 1.0) > TSDF_POSE_RIGID_TOL)
        return 0;

    /* Columns of R in double: float rounding of a valid pose is far below
     * the tolerance, so the check is not fooled by the conversion. */
    double R[3][3];
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++)
            R[r][c] = T[4 * r + c];
    }
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            double dot = R[0][a] * R[0][b] + R[1][a] * R[1][b] + R[2][a] * R[2][b];
            double want = a == b ? 1.0 : 0.0;
            if (fabs(dot - want) > TSDF_POSE_RIGID_TOL)
                return 0;
        }
    }
    double det = R[0][0] * (R[1][1] * R[2][2] - R[1][2] * R[2][1]) -
                 R[0][1] * (R[1][0] * R[2][2] - R[1][2] * R[2][0]) +
                 R[0][2] * (R[1][0] * R[2][1] - R[1][1] * R[2][0]);
    return fabs(det - 1.0) <= TSDF_POSE_RIGID_TOL;
}

void tsdf_pose_identity(float T[16])
{
    for (int i = 0; i < 16; i++)
        T[i] = (i % 5 == 0) ? 1.0f : 0.0f;
}
