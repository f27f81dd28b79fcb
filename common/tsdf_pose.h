/*
 * tsdf_pose.h - checks on rigid transforms shared by the wire codec, the
 * client and anyone else who must validate a pose without the engine.
 *
 * Pure C, no allocation, no globals; callable from any thread.
 */
#ifndef TSDF_POSE_H
#define TSDF_POSE_H

#include "tsdf_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tolerance of tsdf_pose_is_rigid: on R^T R - I entries, on det(R) - 1
 * and on the last row. The same 1e-3 that tsdf_frame_check documents. */
#define TSDF_POSE_RIGID_TOL 1e-3

/* 1 if T (row-major 4x4, e.g. T_world_cam) is a finite rigid transform: all
 * 16 entries finite, last row 0 0 0 1, rotation block orthonormal
 * (|R^T R - I| <= tol per entry) with det(R) = +1 within tol. 0 otherwise,
 * also for T == NULL. */
TSDF_API int tsdf_pose_is_rigid(const float T[16]);

/* Fills T with the 4x4 identity. */
TSDF_API void tsdf_pose_identity(float T[16]);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_POSE_H */
