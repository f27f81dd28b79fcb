/*
 * test_pose_ring.c - the per-map ring of sensor poses (daemon/pose_ring.c):
 * the order of a copy, the wrap at POSE_RING_DEPTH, the sensor limit, the
 * camera of the latest frame, and clear.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pose_ring.h"
#include "testutil.h"
#include "tsdf_error.h"

static tsdf_frame frame_at(float x, uint32_t width)
{
    tsdf_frame f;
    memset(&f, 0, sizeof f);
    f.width = width;
    f.height = width * 3 / 4;
    f.K.fx = f.K.fy = 100.0f;
    f.min_depth_m = 0.2f;
    f.max_depth_m = 4.0f;
    for (int i = 0; i < 4; i++)
        f.T_world_cam[5 * i] = 1.0f;
    f.T_world_cam[3] = x;
    return f;
}

static void test_records_in_order_and_wraps(void **state)
{
    pose_ring r;
    assert_int_equal(pose_ring_init(&r), TSDF_OK);
    const uint64_t n = POSE_RING_DEPTH + 10;
    for (uint64_t i = 0; i < n; i++) {
        tsdf_frame f = frame_at((float)i, i + 1 == n ? 320 : 160);
        pose_ring_record(&r, "cam0", &f, i, 1000 + i, (int64_t)i);
    }
    pose_track *t = malloc(sizeof *t);
    assert_non_null(t);
    assert_int_equal(pose_ring_copy(&r, t, 1, NULL), 1);
    assert_string_equal(t->name, "cam0");
    assert_int_equal(t->frames, n);
    assert_int_equal(t->count, POSE_RING_DEPTH);
    /* The oldest kept pose first: the first ten were overwritten. */
    assert_int_equal(t->samples[0].seq, 10);
    assert_true(t->samples[0].T_world_cam[3] == 10.0f);
    assert_int_equal(t->samples[POSE_RING_DEPTH - 1].seq, n - 1);
    assert_int_equal(t->samples[POSE_RING_DEPTH - 1].stamp_ns, 1000 + n - 1);
    for (size_t i = 1; i < t->count; i++)
        assert_int_equal(t->samples[i].seq, t->samples[i - 1].seq + 1);
    /* The camera is the latest frame's. */
    assert_int_equal(t->width, 320);
    assert_int_equal(t->height, 240);
    assert_true(t->max_depth_m == 4.0f);
    free(t);
    pose_ring_fini(&r);
}

static void test_sensor_limit_and_find(void **state)
{
    pose_ring r;
    assert_int_equal(pose_ring_init(&r), TSDF_OK);
    char name[32];
    tsdf_frame f = frame_at(1.0f, 160);
    for (unsigned s = 0; s < POSE_RING_MAX_SENSORS + 3; s++) {
        snprintf(name, sizeof name, "cam%u", s);
        pose_ring_record(&r, name, &f, 7, 0, 1);
        pose_ring_record(&r, name, &f, 8, 0, 2);
    }
    pose_track *all = calloc(POSE_RING_MAX_SENSORS + 3, sizeof *all);
    assert_non_null(all);
    uint64_t untracked = 0;
    size_t n = pose_ring_copy(&r, all, POSE_RING_MAX_SENSORS + 3, &untracked);
    assert_int_equal(n, POSE_RING_MAX_SENSORS);
    assert_int_equal(untracked, 3 * 2);
    assert_string_equal(all[0].name, "cam0");
    assert_string_equal(all[n - 1].name, "cam15");
    assert_int_equal(all[3].count, 2);

    /* A copy of fewer than there are takes the first ones. */
    assert_int_equal(pose_ring_copy(&r, all, 2, NULL), 2);
    assert_string_equal(all[1].name, "cam1");

    assert_int_equal(pose_ring_find(&r, "cam4", &all[0]), 1);
    assert_string_equal(all[0].name, "cam4");
    assert_int_equal(all[0].samples[1].seq, 8);
    assert_int_equal(pose_ring_find(&r, "cam17", &all[0]), 0);

    pose_ring_clear(&r);
    assert_int_equal(pose_ring_copy(&r, all, 4, &untracked), 0);
    assert_int_equal(untracked, 0);
    /* Room again after a clear. */
    pose_ring_record(&r, "cam17", &f, 1, 0, 1);
    assert_int_equal(pose_ring_find(&r, "cam17", &all[0]), 1);
    free(all);
    pose_ring_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_in_order_and_wraps),
        cmocka_unit_test(test_sensor_limit_and_find),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
