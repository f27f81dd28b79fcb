/*
 * test_raycast_march.c - the bounds of the shared ray march
 * (gpu/shared/tsdf_raycast_march.h), on the CPU, with a block lookup of the
 * test's own that counts the lookups and records how far along the ray
 * they reached:
 *  - tsdf_ray_end_z leaves ordinary rays at their z_max and cuts long ones
 *    at the ray-length caps of tsdf_volume.h;
 *  - tsdf_ray_max_iterations stays small for every legal combination;
 *  - a ray of extreme intrinsics (fx = 0.01) through empty space and a
 *    ray asked for a depth of 10^9 m through known space stop at the caps
 *    instead of marching to the edge of the key range.
 * The raycast through the volume API (the request checks, the CPU
 * backend's cancellation) is tested in test_volume.c.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "tsdf_math.h"
#include "tsdf_volume.h"

/* What the test's lookup hands out and counts. */
typedef struct {
    int has_block; /* 1: every block exists (block 0 of geom); 0: space is empty */
    uint64_t lookups;
    int32_t max_abs_coord; /* the farthest block coordinate asked for, on any axis */
} fake_source;

#define TSDF_RAY_SOURCE fake_source *
#include "tsdf_raycast_march.h"

static int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz)
{
    fake_source *f = vol->src;
    int32_t m = abs(bx) > abs(by) ? abs(bx) : abs(by);
    m = m > abs(bz) ? m : abs(bz);
    f->lookups++;
    if (m > f->max_abs_coord)
        f->max_abs_coord = m;
    return f->has_block ? 0 : -1;
}

static void volume_of(tsdf_ray_volume *vol, fake_source *src, float voxel_m)
{
    memset(src, 0, sizeof *src);
    memset(vol, 0, sizeof *vol);
    vol->src = src;
    vol->layout = TSDF_LAYOUT_F32;
    vol->voxel_size_m = voxel_m;
    vol->inv_voxel_size = 1.0f / voxel_m;
    vol->inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * voxel_m);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static float length3(const float d[3])
{
    return sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
}

/* Ordinary rays end exactly at z_max (so no raycast result of a real
 * camera changed); long ones end where they reach the length caps. */
static void test_end_z_caps(void **state)
{
    (void)state;
    /* The corner ray of a 640x480 camera of fx 525 and the central ray. */
    assert_true(tsdf_ray_end_z(5.0f, 1.0f, 0.01f) == 5.0f);
    assert_true(tsdf_ray_end_z(5.0f, 1.25f, 0.01f) == 5.0f);
    /* 60 degrees off axis: the ray is exactly twice its depth. */
    assert_true(tsdf_ray_end_z(5.0f, 2.0f, 0.01f) == 5.0f);
    /* fx = 0.01 on a 16-pixel image: rays of ~1100 m per metre of depth
     * end after 2 * max_depth along the ray. */
    {
        float dl = 1131.0f, z = tsdf_ray_end_z(5.0f, dl, 0.01f);
        assert_true(fabsf(z * dl - 10.0f) <= 1e-4f);
    }
    /* The engine-wide cap, and the voxel cap of tiny voxels. */
    assert_true(fabsf(tsdf_ray_end_z(1e9f, 1.0f, 0.01f) - TSDF_MAX_RAY_M) <= 1e-3f);
    assert_true(fabsf(tsdf_ray_end_z(1e9f, 1.0f, 1e-4f) - TSDF_MAX_RAY_VOX * 1e-4f) <= 1e-3f);
}

/* Over the legal ranges (voxels of 0.1 mm to 10 m, depths up to the cap,
 * any direction) a ray never gets more than 2^23 iterations, and none for
 * a range that ends before it starts or is not a number. */
static void test_iteration_bound_is_small(void **state)
{
    static const float voxels[] = {1e-4f, 1e-3f, 0.01f, 0.1f, 1.0f, 10.0f};
    static const float dir_lens[] = {1.0f, 1.5f, 11.5f, 1131.0f, 1e5f};
    (void)state;
    for (size_t i = 0; i < sizeof voxels / sizeof voxels[0]; i++) {
        for (size_t k = 0; k < sizeof dir_lens / sizeof dir_lens[0]; k++) {
            float z_end = tsdf_ray_end_z(TSDF_MAX_RAY_M, dir_lens[k], voxels[i]);
            uint32_t n = tsdf_ray_max_iterations(1e-3f, z_end, dir_lens[k], voxels[i]);
            assert_true(n <= (1u << 23));
        }
    }
    /* 1 cm voxels, a 1000 m ray: two samples per voxel, twice, plus blocks. */
    assert_true(tsdf_ray_max_iterations(0.0f, 1000.0f, 1.0f, 0.01f) < 500000u);
    assert_true(tsdf_ray_max_iterations(2.0f, 1.0f, 1.0f, 0.01f) <= 64u);
    assert_int_equal(tsdf_ray_max_iterations(0.1f, NAN, 1.0f, 0.01f), 0);
}

/* A pixel of a 16x16 image of fx = fy = 0.01 (its ray ~1100 times longer
 * than its depth) through empty space: before the caps the march visited
 * every block of 5.5 km of ray (and could stall on float steps for hours);
 * now it stops after 2 * max_depth of ray. */
static void test_extreme_intrinsics_ray_stops_at_cap(void **state)
{
    const float s = 0.01f, block_m = 8.0f * s;
    const tsdf_intrinsics K = {0.01f, 0.01f, 7.5f, 7.5f};
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    tsdf_ray_volume vol;
    tsdf_ray_cache c;
    fake_source src;
    (void)state;

    for (uint32_t py = 0; py < 16; py += 5) {
        for (uint32_t px = 0; px < 16; px += 5) {
            float o[3], d[3], z = 0.0f;
            volume_of(&vol, &src, s);
            tsdf_ray_cache_init(&c);
            tsdf_pixel_ray_world(T, &K, (float)px, (float)py, o, d);
            float dl = length3(d);
            assert_int_equal(tsdf_ray_march(&vol, &c, o, d, 0.1f, 5.0f, &z), 0);
            /* The ray reaches no farther than 2 * 5 m (plus a block). */
            assert_true((double)src.max_abs_coord * block_m <= 10.0 + block_m);
            /* One lookup per block the (at most 10 m) ray can cross. */
            float ray_m = dl * 5.0f > 10.0f ? 10.0f : dl * 5.0f;
            assert_true((double)src.lookups <= 3.0 * ray_m / block_m + 8.0);
        }
    }
}

/* A central ray asked to march to a depth of 10^9 m (the volume API
 * refuses that; the march must not rely on it) through known space of a
 * tiny positive sdf (the smallest steps, half a voxel): it stops after
 * TSDF_MAX_RAY_M, promptly (a bounded number of steps), with no surface. */
static void test_huge_depth_stops_at_engine_cap(void **state)
{
    const float s = 0.01f, block_m = 8.0f * s;
    static tsdf_geom_f32 blk[TSDF_BLOCK_VOXELS];
    const float o[3] = {0.005f, 0.005f, 0.0f}, d[3] = {0.0f, 0.0f, 1.0f};
    tsdf_ray_volume vol;
    tsdf_ray_cache c;
    fake_source src;
    float z = 0.0f;
    (void)state;

    for (int i = 0; i < TSDF_BLOCK_VOXELS; i++) {
        blk[i].sdf_m = 1e-6f;
        blk[i].weight = 1.0f;
    }
    volume_of(&vol, &src, s);
    src.has_block = 1;
    vol.geom = blk;
    tsdf_ray_cache_init(&c);
    double t0 = now_s();
    assert_int_equal(tsdf_ray_march(&vol, &c, o, d, 0.1f, 1e9f, &z), 0);
    double dt = now_s() - t0;
    print_message("1e9 m ray: %llu lookups, farthest block %d, %.3f s\n",
                  (unsigned long long)src.lookups, src.max_abs_coord, dt);
    assert_true((double)src.max_abs_coord * block_m <= (double)TSDF_MAX_RAY_M + block_m);
    assert_true(src.max_abs_coord * block_m >= 0.9 * (double)TSDF_MAX_RAY_M);
    /* Promptly, in work rather than seconds: at most one block look-up a
     * step of the smallest (half a voxel) over the capped length. */
    assert_true((double)src.lookups <= (double)TSDF_MAX_RAY_M / (0.5 * s) + 2.0);

    /* Empty space: the same cap, a block at a time. */
    volume_of(&vol, &src, s);
    tsdf_ray_cache_init(&c);
    assert_int_equal(tsdf_ray_march(&vol, &c, o, d, 0.1f, 1e9f, &z), 0);
    assert_true((double)src.max_abs_coord * block_m <= (double)TSDF_MAX_RAY_M + block_m);
    assert_true((double)src.lookups <= (double)TSDF_MAX_RAY_M / block_m + 8.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_z_caps),
        cmocka_unit_test(test_iteration_bound_is_small),
        cmocka_unit_test(test_extreme_intrinsics_ray_stops_at_cap),
        cmocka_unit_test(test_huge_depth_stops_at_engine_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
