/*
 * test_volume_limits.c - what the volume API refuses: bad frames, each with
 * its own code, and frames beyond a memory cap, fixed at creation or
 * changed on a live volume (nothing integrated is lost); and growth, which
 * keeps every block.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "volume_testlib.h"
#include "tsdf_math.h"

/* ---- argument checks ----------------------------------------------------- */

static void test_bad_frames_distinct_codes(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *v = make_volume(0.02f, 64.0f, 0, 1024);
    tsdf_block_set before, after;
    tsdf_frame good, f;
    tsdf_volume_stats st0, st1;
    int codes[16], n = 0;
    (void)state;
    plane_frame(&good, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_frame_check(&good), TSDF_OK);
    assert_int_equal(tsdf_volume_integrate(v, &good), TSDF_OK);
    tsdf_block_set_init(&before);
    tsdf_block_set_init(&after);
    assert_int_equal(tsdf_volume_export_blocks(v, &before), TSDF_OK);
    st0 = get_stats(v);

#define EXPECT_REJECT(mutation, code)                                                              \
    do {                                                                                           \
        f = good;                                                                                  \
        mutation;                                                                                  \
        assert_int_equal(tsdf_frame_check(&f), code);                                              \
        assert_int_equal(tsdf_volume_integrate(v, &f), code);                                      \
        codes[n++] = code;                                                                         \
    } while (0)

    EXPECT_REJECT(f.K.fx = 0.0f, TSDF_EBAD_INTRINSICS);
    EXPECT_REJECT(f.K.fy = NAN, TSDF_EBAD_INTRINSICS);
    EXPECT_REJECT(f.K.cx = INFINITY, TSDF_EBAD_INTRINSICS);
    /* A scaled rotation is not rigid; nor is a broken last row. */
    EXPECT_REJECT(f.T_world_cam[0] = 1.5f, TSDF_EBAD_POSE);
    EXPECT_REJECT(f.T_world_cam[14] = 0.5f, TSDF_EBAD_POSE);
    EXPECT_REJECT(f.T_world_cam[3] = NAN, TSDF_EBAD_POSE);
    /* A reflection (det -1) is orthonormal but not a rotation. */
    EXPECT_REJECT(f.T_world_cam[0] = -1.0f, TSDF_EBAD_POSE);
    EXPECT_REJECT(f.width = 0, TSDF_EEMPTY_IMAGE);
    EXPECT_REJECT(f.height = 0, TSDF_EEMPTY_IMAGE);
    /* Sizes beyond the limits (the size check runs before any buffer is
     * read, so the small buffer is never overrun). */
    EXPECT_REJECT(f.width = TSDF_MAX_IMAGE_DIM + 1, TSDF_ETOO_LARGE);
    EXPECT_REJECT((f.width = 4100, f.height = 4100), TSDF_ETOO_LARGE);
    EXPECT_REJECT(f.max_depth_m = f.min_depth_m, TSDF_EBAD_DEPTH_RANGE);
    /* A stated buffer size that does not match width x height x sample. */
    EXPECT_REJECT(f.depth_size_bytes = (size_t)f.width * f.height * 4 - 1, TSDF_EBAD_SIZE);
    EXPECT_REJECT((f.rgb = (const uint8_t *)f.depth, f.rgb_size_bytes = 7), TSDF_EBAD_SIZE);
#undef EXPECT_REJECT
    assert_int_equal(n, 14);

    f = good;
    f.min_depth_m = -1.0f;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EBAD_DEPTH_RANGE);
    f = good;
    f.max_depth_m = NAN;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EBAD_DEPTH_RANGE);
    f = good;
    f.depth_format = TSDF_DEPTH_U16;
    f.depth_scale = 0.0f;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EBAD_DEPTH_RANGE);
    f = good;
    f.depth = NULL;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EINVAL);
    f = good;
    f.depth_format = (tsdf_depth_format)9;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EINVAL);
    assert_int_equal(tsdf_volume_integrate(v, NULL), TSDF_EINVAL);

    /* The fault classes have distinct codes. */
    {
        const int classes[] = {TSDF_EBAD_INTRINSICS, TSDF_EBAD_POSE, TSDF_EEMPTY_IMAGE,
                               TSDF_ETOO_LARGE,      TSDF_EBAD_SIZE, TSDF_EBAD_DEPTH_RANGE,
                               TSDF_EINVAL};
        for (size_t i = 0; i < 7; i++)
            for (size_t j = i + 1; j < 7; j++)
                assert_int_not_equal(classes[i], classes[j]);
        for (int i = 0; i < n; i++)
            assert_true(codes[i] < 0);
    }

    /* Nothing changed but the count of rejected frames. */
    st1 = get_stats(v);
    assert_int_equal(st1.version, st0.version);
    assert_int_equal(st1.blocks_allocated, st0.blocks_allocated);
    assert_int_equal(st1.frames_integrated, st0.frames_integrated);
    assert_int_equal(st1.frames_rejected, st0.frames_rejected + 14 + 6);
    assert_int_equal(tsdf_volume_export_blocks(v, &after), TSDF_OK);
    assert_sets_equal(&before, &after);

    /* Raycast checks its parameters the same way. */
    {
        float out_depth[W * H];
        tsdf_raycast_params rp;
        tsdf_raycast_output ro = {out_depth, NULL, NULL};
        memset(&rp, 0, sizeof(rp));
        rp.width = W;
        rp.height = H;
        rp.K = K_TEST;
        memcpy(rp.T_world_cam, good.T_world_cam, sizeof(rp.T_world_cam));
        rp.min_depth_m = 0.1f;
        rp.max_depth_m = 3.0f;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
        rp.K.fx = -1.0f;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_INTRINSICS);
        rp.K = K_TEST;
        rp.T_world_cam[5] = 2.0f;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_POSE);
        rp.T_world_cam[5] = 1.0f;
        rp.width = 0;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EEMPTY_IMAGE);
        rp.width = W;
        rp.min_depth_m = 0.0f;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_DEPTH_RANGE);
        rp.min_depth_m = 0.1f;
        ro.depth_m = NULL;
        assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EINVAL);
    }
    assert_int_equal(get_stats(v).version, st0.version);

    tsdf_block_set_fini(&before);
    tsdf_block_set_fini(&after);
    tsdf_volume_destroy(v);
    free(depth);
}

/* ---- memory cap ------------------------------------------------------------ */

static void test_memory_cap(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *free_v = make_volume(0.01f, 64.0f, 0, 1024), *v;
    tsdf_volume_stats st, st_free;
    tsdf_block_set before, after;
    tsdf_frame f;
    uint64_t block_bytes, cap;
    (void)state;
    /* How many blocks the first frame needs, and what that costs. */
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(free_v, &f), TSDF_OK);
    st_free = get_stats(free_v);
    assert_true(st_free.blocks_allocated > 50);

    /* A cap that holds the initial table and a few blocks: the frame does
     * not fit, nothing is integrated, the failure is counted. */
    block_bytes = tsdf_pool_block_bytes(TSDF_LAYOUT_S16, 0);
    cap = 1024 * 12 + 10 * block_bytes;
    v = make_volume(0.01f, 64.0f, cap, 1024);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_ECAPACITY);
    st = get_stats(v);
    assert_int_equal(st.blocks_allocated, 0);
    assert_int_equal(st.version, 0);
    assert_int_equal(st.frames_integrated, 0);
    assert_int_equal(st.frames_rejected, 1);
    assert_int_equal(st.insert_failures, st_free.blocks_allocated);
    assert_int_equal(st.memory_cap_bytes, cap);
    assert_true(st.memory_bytes <= cap);
    tsdf_volume_destroy(v);

    /* A cap that holds the first frame but not a second one further away:
     * the second is refused and the volume keeps the first, unchanged. */
    cap = 2048 * 12 + (st_free.blocks_allocated + 20) * (block_bytes + 16);
    v = make_volume(0.01f, 64.0f, cap, 1024);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    st = get_stats(v);
    assert_true(st.memory_bytes <= cap);
    tsdf_block_set_init(&before);
    tsdf_block_set_init(&after);
    assert_int_equal(tsdf_volume_export_blocks(v, &before), TSDF_OK);
    plane_frame(&f, depth, 2.0f, 0.5f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_ECAPACITY);
    {
        tsdf_volume_stats st2 = get_stats(v);
        assert_int_equal(st2.version, st.version);
        assert_int_equal(st2.blocks_allocated, st.blocks_allocated);
        assert_int_equal(st2.frames_rejected, 1);
        assert_true(st2.insert_failures > 0);
        assert_true(st2.memory_bytes <= cap);
    }
    assert_int_equal(tsdf_volume_export_blocks(v, &after), TSDF_OK);
    assert_sets_equal(&before, &after);
    /* The first frame again needs no new block and still integrates. */
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);

    tsdf_block_set_fini(&before);
    tsdf_block_set_fini(&after);
    tsdf_volume_destroy(v);
    tsdf_volume_destroy(free_v);
    free(depth);
}

/* The table grows under load and keeps every block. */
static void test_growth_keeps_blocks(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *small = make_volume(0.01f, 64.0f, 0, 16),
                *big = make_volume(0.01f, 64.0f, 0, 1 << 16);
    tsdf_block_set a, b;
    tsdf_frame f;
    tsdf_volume_stats st;
    (void)state;
    for (int i = 0; i < 4; i++) {
        plane_frame(&f, depth, 1.0f + 0.3f * (float)i, 0.1f * (float)i, 0.0f, 0.0f);
        assert_int_equal(tsdf_volume_integrate(small, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(big, &f), TSDF_OK);
    }
    st = get_stats(small);
    assert_true(st.growth_events >= 4);
    assert_true(st.load_factor <= 0.5);
    assert_int_equal(get_stats(big).growth_events, 0);
    assert_true(st.mean_probe < 2.0);
    assert_true(st.max_probe >= 1);
    /* The counters are the same statistics without the table walk. */
    {
        tsdf_volume_stats c;
        assert_int_equal(tsdf_volume_get_counters(small, &c), TSDF_OK);
        assert_int_equal(c.max_probe, 0);
        assert_true(c.mean_probe == 0.0);
        for (size_t i = 0; i < sizeof c.probe_hist / sizeof c.probe_hist[0]; i++)
            assert_int_equal(c.probe_hist[i], 0);
        assert_int_equal(c.blocks_allocated, st.blocks_allocated);
        assert_int_equal(c.capacity_slots, st.capacity_slots);
        assert_int_equal(c.growth_events, st.growth_events);
        assert_int_equal(c.frames_integrated, st.frames_integrated);
        assert_int_equal(c.memory_bytes, st.memory_bytes);
        assert_int_equal(c.version, st.version);
        assert_int_equal(c.version, tsdf_volume_version(small));
        assert_int_equal(tsdf_volume_get_counters(NULL, &c), TSDF_EINVAL);
    }
    tsdf_block_set_init(&a);
    tsdf_block_set_init(&b);
    assert_int_equal(tsdf_volume_export_blocks(small, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(big, &b), TSDF_OK);
    assert_sets_equal(&a, &b);
    /* Sorted by packed key, ascending. */
    for (size_t i = 1; i < a.count; i++)
        assert_true(tsdf_block_key(a.coords[3 * i - 3], a.coords[3 * i - 2], a.coords[3 * i - 1]) <
                    tsdf_block_key(a.coords[3 * i], a.coords[3 * i + 1], a.coords[3 * i + 2]));
    tsdf_block_set_fini(&a);
    tsdf_block_set_fini(&b);
    tsdf_volume_destroy(small);
    tsdf_volume_destroy(big);
    free(depth);
}

/* A cap changed on a live volume (the daemon's memory budget does this):
 * frames that need new blocks beyond it are refused whole, frames that need
 * none still go in, and nothing already integrated is dropped. */
static void test_set_memory_cap(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *v = make_volume(0.01f, 64.0f, 0, 1024);
    tsdf_block_set before, after;
    tsdf_volume_stats st, st2;
    tsdf_frame f;
    uint64_t total = 0;
    (void)state;
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    st = get_stats(v);
    assert_int_equal(tsdf_volume_memory_bytes(v), st.memory_bytes);
    assert_int_equal(tsdf_volume_memory_bytes(NULL), 0);

    /* A cap below what the volume holds keeps what it holds. */
    assert_int_equal(tsdf_volume_set_memory_cap(v, st.memory_bytes / 2), TSDF_OK);
    assert_int_equal(tsdf_volume_get_params(v)->memory_cap_bytes, st.memory_bytes / 2);
    st2 = get_stats(v);
    assert_int_equal(st2.memory_cap_bytes, st.memory_bytes / 2);
    assert_int_equal(st2.blocks_allocated, st.blocks_allocated);
    assert_int_equal(st2.memory_bytes, st.memory_bytes);

    /* A frame elsewhere needs new blocks: refused, counted, nothing changed. */
    tsdf_block_set_init(&before);
    tsdf_block_set_init(&after);
    assert_int_equal(tsdf_volume_export_blocks(v, &before), TSDF_OK);
    plane_frame(&f, depth, 2.0f, 0.5f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_ECAPACITY);
    st2 = get_stats(v);
    assert_int_equal(st2.version, st.version);
    assert_int_equal(st2.frames_rejected, 1);
    assert_true(st2.insert_failures > 0);
    assert_int_equal(tsdf_volume_export_blocks(v, &after), TSDF_OK);
    assert_sets_equal(&before, &after);

    /* The first frame again needs no new block: it goes in. */
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    assert_int_equal(get_stats(v).blocks_allocated, st.blocks_allocated);

    /* Without a cap the frame elsewhere fits again. */
    assert_int_equal(tsdf_volume_set_memory_cap(v, 0), TSDF_OK);
    plane_frame(&f, depth, 2.0f, 0.5f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    assert_true(get_stats(v).blocks_allocated > st.blocks_allocated);
    assert_int_equal(tsdf_volume_set_memory_cap(NULL, 0), TSDF_EINVAL);

    /* A build without CUDA says so when asked for device memory. */
    assert_int_equal(tsdf_cuda_device_memory(0, NULL), TSDF_EINVAL);
#ifndef TSDF_HAVE_CUDA
    assert_int_equal(tsdf_cuda_device_memory(0, &total), TSDF_ENOT_BUILT);
#else
    int rc = tsdf_cuda_device_memory(0, &total);
    assert_true(rc == TSDF_ENO_GPU || (rc == TSDF_OK && total > 0));
#endif
    tsdf_block_set_fini(&before);
    tsdf_block_set_fini(&after);
    tsdf_volume_destroy(v);
    free(depth);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_frames_distinct_codes),
        cmocka_unit_test(test_memory_cap),
        cmocka_unit_test(test_set_memory_cap),
        cmocka_unit_test(test_growth_keeps_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
