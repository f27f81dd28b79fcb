/*
 * test_volume_raycast.c - the CPU raycast through the volume API: a plane
 * seen from many poses, rays that could march forever (bounded in time),
 * and a raycast cancelled from its callback.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "volume_testlib.h"

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The test camera at the origin, looking along world +z, 0.1 to 4 m. */
static void origin_raycast(tsdf_raycast_params *rp)
{
    memset(rp, 0, sizeof(*rp));
    rp->width = W;
    rp->height = H;
    rp->K = K_TEST;
    pose_translation(rp->T_world_cam, 0.0f, 0.0f, 0.0f);
    rp->min_depth_m = 0.1f;
    rp->max_depth_m = 4.0f;
}

/* A volume with a fused wall 1 m in front of the origin. */
/* A wall fused into a CPU volume of `threads` threads (0: every core). */
static tsdf_volume *wall_volume_threads(uint32_t threads)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_frame f;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.initial_capacity_blocks = 1024;
    p.cpu_threads = threads;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    assert_non_null(depth);
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    free(depth);
    return v;
}

static tsdf_volume *wall_volume(void)
{
    return wall_volume_threads(0);
}

/* Issue 8: a raycast of 16x16 pixels with fx = fy = 0.01 marched every ray
 * thousands of metres (and could stall on float steps for hours), wedging
 * the map. It must come back: refused as bad intrinsics, or bounded by
 * the ray-length caps (whose step counts tests/test_raycast_march.c
 * checks; the times here are printed, not checked). So must a legal but very wide camera
 * (160 degrees) asked for the longest depth allowed; a depth beyond the
 * cap is refused. */
static void test_raycast_extreme_rays_are_bounded(void **state)
{
    float cast[16 * 16];
    tsdf_volume *v = wall_volume();
    tsdf_raycast_params rp;
    tsdf_raycast_output ro = {cast, NULL, NULL};
    (void)state;

    memset(&rp, 0, sizeof(rp));
    rp.width = 16;
    rp.height = 16;
    rp.K.fx = rp.K.fy = 0.01f;
    rp.K.cx = rp.K.cy = 7.5f;
    pose_translation(rp.T_world_cam, 0.0f, 0.0f, 0.0f);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    double t0 = mono_s();
    int rc = tsdf_volume_raycast(v, &rp, &ro);
    double dt = mono_s() - t0;
    print_message("16x16 raycast of fx 0.01: %s in %.3f s\n", tsdf_errname(rc), dt);
    assert_true(rc == TSDF_OK || rc == TSDF_EBAD_INTRINSICS);

    /* 160 degrees across: fx = 7.5 / tan(80 degrees). */
    rp.K.fx = rp.K.fy = 7.5f / tanf(80.0f * 3.14159265f / 180.0f);
    rp.max_depth_m = TSDF_MAX_RAY_M;
    t0 = mono_s();
    rc = tsdf_volume_raycast(v, &rp, &ro);
    dt = mono_s() - t0;
    print_message("16x16 raycast of 160 degrees to %g m: %s in %.3f s\n", (double)TSDF_MAX_RAY_M,
                  tsdf_errname(rc), dt);
    assert_int_equal(rc, TSDF_OK);
    /* The central rays still see the wall. */
    assert_true(fabsf(cast[8 * 16 + 8] - 1.0f) <= 0.01f);

    rp.max_depth_m = 2.0f * TSDF_MAX_RAY_M;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_DEPTH_RANGE);
    rp.max_depth_m = INFINITY;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_DEPTH_RANGE);
    tsdf_volume_destroy(v);
}

typedef struct {
    int calls;
    int cancel_at; /* the call that answers "cancel"; 0: never */
} cancel_probe;

static int probe_cancel(void *arg)
{
    cancel_probe *c = arg;
    c->calls++;
    return c->cancel_at != 0 && c->calls >= c->cancel_at;
}

/* The CPU raycast polls params.cancel on the calling thread every
 * TSDF_RAYCAST_CANCEL_PIXELS pixels of the rows that thread marches, and
 * stops with TSDF_ETIMEOUT once it says so. On one thread that is every
 * row; with more, the calling thread's share of them, and the other
 * threads stop at their next row. */
static void raycast_cancel(uint32_t threads)
{
    float *cast = malloc(W * H * sizeof(float));
    tsdf_volume *v = wall_volume_threads(threads);
    tsdf_raycast_params rp;
    tsdf_raycast_output ro = {cast, NULL, NULL};
    cancel_probe probe = {0, 0};
    const int per_row = (W + TSDF_RAYCAST_CANCEL_PIXELS - 1) / TSDF_RAYCAST_CANCEL_PIXELS;

    assert_non_null(cast);
    origin_raycast(&rp);
    rp.cancel = probe_cancel;
    rp.cancel_arg = &probe;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
    if (threads == 1)
        assert_int_equal(probe.calls, per_row * H);
    else /* whole rows of the calling thread; maybe none (see below) */
        assert_true(probe.calls <= per_row * H && probe.calls % per_row == 0);
    assert_true(fabsf(cast[(H / 2) * W + W / 2] - 1.0f) <= 0.01f);

    probe.calls = 0;
    if (threads == 1) {
        probe.cancel_at = 3;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_ETIMEOUT);
        assert_int_equal(probe.calls, 3);
    } else {
        /* Only the calling thread polls, and the pool's other threads may
         * take every row before it takes one: then nothing was asked and
         * the raycast is whole. Asked once, it must stop at once. */
        probe.cancel_at = 1;
        int rc = tsdf_volume_raycast(v, &rp, &ro);
        if (probe.calls == 0) {
            assert_int_equal(rc, TSDF_OK);
        } else {
            assert_int_equal(rc, TSDF_ETIMEOUT);
            assert_int_equal(probe.calls, 1);
        }
    }
    tsdf_volume_destroy(v);
    free(cast);
}

static void test_raycast_cancel(void **state)
{
    (void)state;
    raycast_cancel(1);
    raycast_cancel(3);
}

/* A raycast of a fused fronto-parallel wall from a fused pose gives the
 * wall's depth and a normal facing the camera; an empty volume gives no
 * surface anywhere. */
static void test_raycast_plane(void **state)
{
    const float s = 0.01f, plane_z = 1.013f;
    float *depth = malloc(W * H * sizeof(float)), *cast = malloc(W * H * sizeof(float));
    float *normals = malloc(3 * W * H * sizeof(float));
    uint8_t *rgb_in = malloc(3 * W * H), *rgb_out = malloc(3 * W * H);
    tsdf_volume *v = make_volume(s, 64.0f, 0, 1024);
    tsdf_raycast_params rp;
    tsdf_raycast_output ro = {cast, normals, rgb_out};
    tsdf_frame f;
    size_t hits = 0;
    double max_err = 0.0;
    (void)state;
    assert_non_null(depth);
    assert_non_null(cast);
    assert_non_null(normals);
    assert_non_null(rgb_in);
    assert_non_null(rgb_out);
    origin_raycast(&rp);

    /* Empty volume: nothing. */
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
    for (int i = 0; i < W * H; i++) {
        assert_true(isnan(cast[i]));
        assert_true(isnan(normals[3 * i]));
        assert_int_equal(rgb_out[3 * i], 0);
    }

    for (int i = 0; i < W * H; i++) {
        rgb_in[3 * i] = 10;
        rgb_in[3 * i + 1] = 20;
        rgb_in[3 * i + 2] = 30;
    }
    for (int i = 0; i < 5; i++) {
        plane_frame(&f, depth, plane_z, 0.01f * (float)i, 0.0f, 0.0f);
        f.rgb = rgb_in;
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
    for (int i = 0; i < W * H; i++) {
        double err;
        if (isnan(cast[i]))
            continue;
        hits++;
        err = fabs((double)cast[i] - (double)plane_z);
        if (err > max_err)
            max_err = err;
        /* The wall's normal points back at the camera: world -z. (Written
         * as a comparison so that a NaN fails.) */
        assert_true(fabsf(normals[3 * i + 2] + 1.0f) <= 1e-3f);
        assert_int_equal(rgb_out[3 * i], 10);
        assert_int_equal(rgb_out[3 * i + 1], 20);
        assert_int_equal(rgb_out[3 * i + 2], 30);
    }
    print_message("plane raycast: %zu of %d pixels hit, max depth error %.5f voxel\n", hits, W * H,
                  max_err / s);
    /* Every pixel but a rim (where a cell reaches past the observed part)
     * sees the wall, at its exact depth. */
    assert_true(hits >= (size_t)(0.95 * W * H));
    assert_true(max_err <= 0.01 * s);

    /* A depth range that stops short of the wall finds nothing. */
    rp.max_depth_m = 0.9f;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
    for (int i = 0; i < W * H; i++)
        assert_true(isnan(cast[i]));

    tsdf_volume_destroy(v);
    free(depth);
    free(cast);
    free(normals);
    free(rgb_in);
    free(rgb_out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raycast_plane),
        cmocka_unit_test(test_raycast_extreme_rays_are_bounded),
        cmocka_unit_test(test_raycast_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
