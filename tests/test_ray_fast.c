/*
 * test_ray_fast.c - the CPU backend's raycast (cpu_raycast: the march only
 * inside the depth range of the blocks, resumed after the empty space) is
 * the reference march (cpu_raycast_reference) bit for bit: the same hit
 * mask, depths, normals and colours, on analytic scenes from outside and
 * inside, at odd angles and depth windows, and on 7-Scenes frames when the
 * data is there. It prints how much faster it is.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "cpu_backend.h"
#include "tsdf_dataset.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "volume_internal.h"
#include "volume_testlib.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

typedef struct {
    double fast_ms, ref_ms;
    size_t pixels, hits;
} tally;

/* Both raycasts of rp; every output byte must agree. */
static void compare(tsdf_volume *v, const tsdf_raycast_params *rp, int with_rgb, tally *t)
{
    size_t n = (size_t)rp->width * rp->height;
    float *d0 = malloc(n * sizeof(float)), *d1 = malloc(n * sizeof(float));
    float *n0 = malloc(3 * n * sizeof(float)), *n1 = malloc(3 * n * sizeof(float));
    uint8_t *c0 = with_rgb ? malloc(3 * n) : NULL, *c1 = with_rgb ? malloc(3 * n) : NULL;
    assert_non_null(d0);
    assert_non_null(d1);
    assert_non_null(n0);
    assert_non_null(n1);
    tsdf_raycast_output fast = {d0, n0, c0}, ref = {d1, n1, c1};
    double t0 = now_ms();
    assert_int_equal(tsdf_volume_raycast(v, rp, &fast), TSDF_OK);
    double t1 = now_ms();
    assert_int_equal(cpu_raycast_reference(v->impl, rp, &ref), TSDF_OK);
    t->fast_ms += t1 - t0;
    t->ref_ms += now_ms() - t1;
    size_t hits = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        hits += isfinite(d1[i]);
        if (memcmp(&d0[i], &d1[i], sizeof(float)) != 0 ||
            memcmp(&n0[3 * i], &n1[3 * i], 3 * sizeof(float)) != 0 ||
            (with_rgb && memcmp(&c0[3 * i], &c1[3 * i], 3) != 0)) {
            if (bad++ < 5)
                print_message("pixel (%zu, %zu): fast %.9g, reference %.9g\n", i % rp->width,
                              i / rp->width, (double)d0[i], (double)d1[i]);
        }
    }
    assert_int_equal(bad, 0);
    t->pixels += n;
    t->hits += hits;
    free(d0);
    free(d1);
    free(n0);
    free(n1);
    free(c0);
    free(c1);
}

static void report(const char *what, const tally *t)
{
    print_message("%s: %zu pixels, %zu hits, identical; fast %.1f ms, reference %.1f ms (%.1fx)\n",
                  what, t->pixels, t->hits, t->fast_ms, t->ref_ms,
                  t->fast_ms > 0.0 ? t->ref_ms / t->fast_ms : 0.0);
    /* The views must see the surface, or the comparison proves nothing. */
    assert_true(t->hits > t->pixels / 10);
}

static tsdf_volume *cpu_volume_of(tsdf_layout layout)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.layout = layout;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    return v;
}

static void synth_case(const char *name, tsdf_layout layout)
{
    tsdf_synth_sequence seq;
    tally t = {0};
    assert_int_equal(tsdf_synth_sequence_init(&seq, name), TSDF_OK);
    size_t n = (size_t)seq.width * seq.height;
    float *depth = malloc(n * sizeof(float));
    uint8_t *rgb = malloc(3 * n);
    assert_non_null(depth);
    assert_non_null(rgb);
    tsdf_volume *v = cpu_volume_of(layout);
    for (uint32_t i = 0; i < seq.frame_count; i += 2) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = seq.width;
    rp.height = seq.height;
    rp.K = seq.K;
    /* The sequence's own views, and views it never had. */
    for (uint32_t i = 1; i < seq.frame_count; i += 9) {
        assert_int_equal(tsdf_synth_sequence_pose(&seq, i, rp.T_world_cam), TSDF_OK);
        rp.min_depth_m = seq.min_depth_m;
        rp.max_depth_m = seq.max_depth_m;
        compare(v, &rp, 1, &t);
        /* A depth window that starts inside the surface's band and one
         * that ends before the far wall. */
        rp.min_depth_m = 0.9f;
        rp.max_depth_m = 1.7f;
        compare(v, &rp, 1, &t);
    }
    static const float eyes[][3] = {
        {0.05f, 0.02f, 1.2f}, /* above the middle, looking straight down an axis */
        {1.5f, -1.0f, 0.4f},  /* low, from a corner */
        {0.0f, 0.0f, 0.3f},   /* inside everything, almost on the floor */
    };
    for (size_t e = 0; e < sizeof eyes / sizeof eyes[0]; e++) {
        const float target[3] = {0.0f, 0.0f, 0.3f}, side[3] = {0.5f, 0.3f, 0.3f};
        const float *tg = e == 2 ? side : target;
        assert_int_equal(tsdf_synth_look_at(eyes[e], tg, NULL, rp.T_world_cam), TSDF_OK);
        rp.min_depth_m = 0.1f;
        rp.max_depth_m = 8.0f;
        compare(v, &rp, 1, &t);
    }
    report(name, &t);
    tsdf_volume_destroy(v);
    free(depth);
    free(rgb);
}

static void test_demo_s16(void **state)
{
    (void)state;
    synth_case("demo", TSDF_LAYOUT_S16);
}

static void test_room_f32(void **state)
{
    (void)state;
    synth_case("room", TSDF_LAYOUT_F32);
}

static void test_sphere_s16(void **state)
{
    (void)state;
    synth_case("sphere", TSDF_LAYOUT_S16);
}

static void test_kitchen(void **state)
{
    uint32_t width, height, frame_count;
    tally t = {0};
    (void)state;
    tsdf_dataset *ds = open_kitchen_or_skip(&width, &height, &frame_count);
    size_t n = (size_t)width * height;
    uint16_t *depth = malloc(n * sizeof(uint16_t));
    assert_non_null(depth);
    tsdf_volume *v = cpu_volume_of(TSDF_LAYOUT_S16);
    tsdf_dataset_frame meta;
    float poses[3][16];
    int np = 0;
    uint32_t last = frame_count < 120 ? frame_count : 120;
    for (uint32_t i = 0; i < last; i += 3) {
        tsdf_frame f;
        assert_int_equal(tsdf_dataset_load(ds, i, depth, n, &meta), TSDF_OK);
        tsdf_dataset_frame_to_tsdf(&meta, depth, 0.1f, 4.0f, &f);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
        if (i % 45 == 0 && np < 3)
            memcpy(poses[np++], meta.T_world_cam, sizeof poses[0]);
    }
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = width;
    rp.height = height;
    rp.K = meta.K;
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 4.0f;
    for (int k = 0; k < np; k++) {
        memcpy(rp.T_world_cam, poses[k], sizeof rp.T_world_cam);
        compare(v, &rp, 0, &t);
    }
    report("7-Scenes kitchen", &t);
    tsdf_volume_destroy(v);
    free(depth);
    tsdf_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_s16),
        cmocka_unit_test(test_room_f32),
        cmocka_unit_test(test_sphere_s16),
        cmocka_unit_test(test_kitchen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
