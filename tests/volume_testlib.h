/*
 * volume_testlib.h - what the tests of the volume API (test_volume*.c)
 * share: a small test camera, fronto-parallel wall frames, CPU volumes, and
 * block-set comparisons. Each function fails the running cmocka test
 * instead of returning an error.
 */
#ifndef TSDF_TESTS_VOLUME_TESTLIB_H
#define TSDF_TESTS_VOLUME_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

/* |a - b| <= eps, failing on NaN (cmocka's assert_float_equal lets NaN pass). */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (double)(eps))

/* A small camera: 160 x 120, 60 degrees-ish field of view. */
#define W 160
#define H 120
extern const tsdf_intrinsics K_TEST;

/* T = a pure translation. */
void pose_translation(float T[16], float tx, float ty, float tz);

/* A fronto-parallel wall: the camera looks along world +z (identity
 * rotation) at the plane z = plane_z_m, so every pixel measures the same
 * depth plane_z_m - tz. depth holds W x H floats. */
void plane_frame(tsdf_frame *f, float *depth, float plane_z_m, float tx, float ty, float tz);

/* A CPU volume of these parameters (the rest default). */
tsdf_volume *make_volume(float voxel_m, float max_weight, uint64_t cap_bytes, uint32_t capacity);
/* A CPU volume of voxel_m voxels, max_weight and layout, the rest default. */
tsdf_volume *make_volume_as(float voxel_m, float max_weight, tsdf_layout layout);

tsdf_volume_stats get_stats(tsdf_volume *v);

/* Two block sets hold the same blocks with bit-identical voxels. */
void assert_sets_equal(const tsdf_block_set *a, const tsdf_block_set *b);

/* Voxel i of a set, counting through its blocks (block i / 512). */
tsdf_vox vox_at(const tsdf_block_set *s, size_t i);
void vox_put(tsdf_block_set *s, size_t i, tsdf_vox x);

/* The 7-Scenes kitchen of tsdf_test_data_dir(), opened with its info, or
 * the running test skipped (saying why) when the data is not there. */
struct tsdf_dataset;
struct tsdf_dataset *open_kitchen_or_skip(uint32_t *width, uint32_t *height, uint32_t *frames);

#endif /* TSDF_TESTS_VOLUME_TESTLIB_H */
