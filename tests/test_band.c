/*
 * test_band.c - the allocation band along the ray and the intrinsics that
 * may make one (issue 8): tsdf_band_dda_init measures the band along the
 * ray, so no ray yields more than a fixed number of blocks, and
 * tsdf_intrinsics_check refuses cameras wider than 170 degrees, such as the
 * 700-byte 16x16 frame with fx = 0.05 that used to allocate 240 MiB.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "tsdf_band.h"
#include "tsdf_math.h"
#include "tsdf_volume.h"

#define SIDE 16

/* The default volume: 1 cm voxels, trunc 4 voxels, 8 cm blocks. */
#define VOXEL_M 0.01f
#define TRUNC_M (4.0f * VOXEL_M)
#define BLOCK_M (8.0f * VOXEL_M)

/*
 * The most blocks one sample may yield. The band is a segment of length
 * L = 2 trunc along the ray (shorter when clamped at the camera). On axis i
 * it spans L |u_i| (u the unit direction), crossing at most
 * floor(L |u_i| / b) + 1 block boundaries; the DDA yields 1 + the crossings,
 * and sum_i floor(x_i) <= floor(sum_i x_i) with sum |u_i| <= sqrt(3):
 *     blocks <= 4 + floor(sqrt(3) L / b) = 4 + floor(1.732 * 0.08 / 0.08) = 5.
 * A band of camera depths d +- trunc is |dir| times longer along the ray,
 * which is what let grazing rays walk thousands of blocks.
 */
static uint32_t max_blocks_per_sample(void)
{
    return 4u + (uint32_t)floor(sqrt(3.0) * 2.0 * TRUNC_M / BLOCK_M);
}

static tsdf_volume *make_cpu_volume(void)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = VOXEL_M;
    p.initial_capacity_blocks = 1024;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    return v;
}

static void side_frame(tsdf_frame *f, const float *depth, tsdf_intrinsics K)
{
    memset(f, 0, sizeof(*f));
    f->width = SIDE;
    f->height = SIDE;
    f->K = K;
    f->T_world_cam[0] = f->T_world_cam[5] = f->T_world_cam[10] = f->T_world_cam[15] = 1.0f;
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = depth;
    f->depth_scale = 1.0f;
    f->min_depth_m = 0.1f;
    f->max_depth_m = 10.0f;
}

static tsdf_volume_stats stats_of(tsdf_volume *v)
{
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(v, &st), TSDF_OK);
    return st;
}

/* The band of one ray, walked: the count of blocks it yields. */
static uint32_t band_blocks(const float origin[3], const float dir[3], float depth_m)
{
    tsdf_block_dda s;
    int32_t b[3];
    uint32_t n = 0;
    if (!tsdf_band_dda_init(&s, origin, dir, depth_m, TRUNC_M, 1.0f / BLOCK_M))
        return 0;
    while (tsdf_block_dda_next(&s, b) && n < 100000)
        n++;
    return n;
}

static void test_band_along_the_ray(void **state)
{
    (void)state;
    const float origin[3] = {0.001f, 0.002f, 0.003f};
    /* Along the optical axis |dir| = 1: camera depths 0.96 .. 1.04 m, blocks
     * 12 and 13 on z, as before the band was measured along the ray. */
    const float axis[3] = {0.0f, 0.0f, 1.0f};
    assert_int_equal(band_blocks(origin, axis, 1.0f), 2);

    /* 89.4 degrees off the axis (x = 100 per metre of depth, what fx = 0.05
     * gives at the edge of a 16-pixel image): a band of camera depths
     * 0.5 +- 0.04 m would reach from x = 46 m to x = 54 m, a hundred blocks;
     * along the ray it is 8 cm long. */
    const float graze[3] = {100.0f, 0.0f, 1.0f};
    uint32_t n = band_blocks(origin, graze, 0.5f);
    assert_true(n >= 1 && n <= max_blocks_per_sample());
    {
        /* It is centred on the measured point and spans trunc each way
         * along the ray (within float rounding of the end points). */
        tsdf_block_dda s;
        memset(&s, 0, sizeof s);
        assert_true(tsdf_band_dda_init(&s, origin, graze, 0.5f, TRUNC_M, 1.0f / BLOCK_M));
        float x_mid = origin[0] + 0.5f * graze[0];
        float half_x = TRUNC_M * graze[0] / sqrtf(graze[0] * graze[0] + 1.0f);
        assert_int_equal(s.cur[0], (int32_t)floorf((x_mid - half_x) / BLOCK_M));
        assert_int_equal(s.end[0], (int32_t)floorf((x_mid + half_x) / BLOCK_M));
    }

    /* Every direction, every depth: never more than the bound. */
    uint64_t seed = 99;
    for (int trial = 0; trial < 20000; trial++) {
        float d[3], o[3];
        for (int i = 0; i < 3; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            o[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 4.0 - 2.0);
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        d[0] = (float)((double)(seed >> 11) / 9007199254740992.0 * 24.0 - 12.0);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        d[1] = (float)((double)(seed >> 11) / 9007199254740992.0 * 24.0 - 12.0);
        d[2] = 1.0f;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float depth = (float)((double)(seed >> 11) / 9007199254740992.0 * 6.0 + 0.01);
        assert_true(band_blocks(o, d, depth) <= max_blocks_per_sample());
    }
}

static void test_intrinsics_check(void **state)
{
    (void)state;
    const tsdf_intrinsics normal = {525.0f, 525.0f, 319.5f, 239.5f};
    assert_int_equal(tsdf_intrinsics_check(&normal, 640, 480), TSDF_OK);
    /* The camera: 16x16 with fx = fy = 0.05 spans 179.6 degrees. */
    const tsdf_intrinsics tiny = {0.05f, 0.05f, 7.5f, 7.5f};
    assert_int_equal(tsdf_intrinsics_check(&tiny, SIDE, SIDE), TSDF_EBAD_INTRINSICS);
    /* What counts is the angle, not the focal length: fx = 0.07 is fine for
     * a 1x1 image around the principal point (corners at 0.5 px / 0.07 =
     * 7.1 on each axis, r = 10.1 < tan 85 deg = 11.43)... */
    const tsdf_intrinsics one = {0.07f, 0.07f, 0.0f, 0.0f};
    assert_int_equal(tsdf_intrinsics_check(&one, 1, 1), TSDF_OK);
    /* ...and a principal point far outside the image is as bad. */
    const tsdf_intrinsics off = {525.0f, 525.0f, 1e6f, 239.5f};
    assert_int_equal(tsdf_intrinsics_check(&off, 640, 480), TSDF_EBAD_INTRINSICS);

    /* The limit is at the corners: 84.9 degrees passes, 85.1 does not. */
    {
        const double deg = 3.14159265358979323846 / 180.0;
        /* Corner (15.5, 15.5) of a 16x16 image with cx = cy = -0.5: 16 px
         * from the principal point on each axis. */
        double r_ok = tan(84.9 * deg), r_bad = tan(85.1 * deg);
        tsdf_intrinsics k = {0, 0, -0.5f, -0.5f};
        k.fx = k.fy = (float)(16.0 * sqrt(2.0) / r_ok);
        assert_int_equal(tsdf_intrinsics_check(&k, SIDE, SIDE), TSDF_OK);
        k.fx = k.fy = (float)(16.0 * sqrt(2.0) / r_bad);
        assert_int_equal(tsdf_intrinsics_check(&k, SIDE, SIDE), TSDF_EBAD_INTRINSICS);
    }

    /* Zero, negative and non-finite values, as before. */
    tsdf_intrinsics k = normal;
    k.fx = 0.0f;
    assert_int_equal(tsdf_intrinsics_check(&k, 640, 480), TSDF_EBAD_INTRINSICS);
    k = normal;
    k.fy = -1.0f;
    assert_int_equal(tsdf_intrinsics_check(&k, 640, 480), TSDF_EBAD_INTRINSICS);
    k = normal;
    k.fx = INFINITY;
    assert_int_equal(tsdf_intrinsics_check(&k, 640, 480), TSDF_EBAD_INTRINSICS);
    k = normal;
    k.cy = NAN;
    assert_int_equal(tsdf_intrinsics_check(&k, 640, 480), TSDF_EBAD_INTRINSICS);
    assert_int_equal(tsdf_intrinsics_check(NULL, 640, 480), TSDF_EINVAL);
}

/* The 700-byte frame of the issue is refused before anything is allocated,
 * and a raycast with its intrinsics too. */
static void test_tiny_focal_frame_refused(void **state)
{
    (void)state;
    float depth[SIDE * SIDE];
    tsdf_frame f;
    tsdf_volume *v = make_cpu_volume();
    tsdf_volume_stats st0 = stats_of(v), st1;
    for (int i = 0; i < SIDE * SIDE; i++)
        depth[i] = 1.0f + 0.01f * (float)(i % 7);
    side_frame(&f, depth, (tsdf_intrinsics){0.05f, 0.05f, 7.5f, 7.5f});
    assert_int_equal(tsdf_frame_check(&f), TSDF_EBAD_INTRINSICS);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_EBAD_INTRINSICS);
    st1 = stats_of(v);
    assert_int_equal(st1.blocks_allocated, 0);
    assert_int_equal(st1.memory_bytes, st0.memory_bytes);
    assert_int_equal(st1.frames_rejected, st0.frames_rejected + 1);

    float out[SIDE * SIDE];
    tsdf_raycast_output ro = {out, NULL, NULL};
    tsdf_raycast_params rp = {
        .width = SIDE, .height = SIDE, .K = f.K, .min_depth_m = 0.1f, .max_depth_m = 5.0f};
    memcpy(rp.T_world_cam, f.T_world_cam, sizeof(rp.T_world_cam));
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_EBAD_INTRINSICS);
    tsdf_volume_destroy(v);
}

/* A real but wide camera: 16x16 with a 160-degree field of view across
 * (tan 80 deg = 5.67 at the image's edge, 82.9 degrees at its corners), at
 * depths where the outer rays graze: every sample allocates at most
 * max_blocks_per_sample() blocks, alone and together. */
static void test_wide_camera_bounded(void **state)
{
    (void)state;
    const double deg = 3.14159265358979323846 / 180.0;
    const float fx = (float)(8.0 / tan(80.0 * deg));
    const tsdf_intrinsics K = {fx, fx, 7.5f, 7.5f};
    float depth[SIDE * SIDE];
    tsdf_frame f;
    tsdf_volume *v = make_cpu_volume();
    const uint32_t bound = max_blocks_per_sample();

    assert_int_equal(tsdf_intrinsics_check(&K, SIDE, SIDE), TSDF_OK);
    /* Depths of a floor 1.5 m below the camera where the ray meets it,
     * else 3 m: the lower rays hit it at a few degrees. */
    for (int v_px = 0; v_px < SIDE; v_px++) {
        for (int u = 0; u < SIDE; u++) {
            float y = ((float)v_px - K.cy) / K.fy;
            depth[v_px * SIDE + u] = y > 0.5f ? 1.5f / y : 3.0f;
        }
    }
    side_frame(&f, depth, K);

    /* One sample at a time. */
    uint32_t worst = 0;
    for (int i = 0; i < SIDE * SIDE; i++) {
        float one[SIDE * SIDE];
        for (int k = 0; k < SIDE * SIDE; k++)
            one[k] = k == i ? depth[i] : 0.0f;
        f.depth = one;
        assert_int_equal(tsdf_volume_reset(v), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
        uint64_t n = stats_of(v).blocks_allocated;
        assert_true(n >= 1);
        assert_true(n <= bound);
        if (n > worst)
            worst = (uint32_t)n;
    }
    /* The whole frame. */
    f.depth = depth;
    assert_int_equal(tsdf_volume_reset(v), TSDF_OK);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    uint64_t total = stats_of(v).blocks_allocated;
    print_message("wide camera: at most %u blocks per sample (bound %u), %llu for %d samples\n",
                  worst, bound, (unsigned long long)total, SIDE * SIDE);
    assert_true(total <= (uint64_t)bound * SIDE * SIDE);
    tsdf_volume_destroy(v);
}

/* A deterministic uniform float in [lo, hi). */
static float uniform(uint64_t *seed, float lo, float hi)
{
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((double)(*seed >> 11) / 9007199254740992.0);
}

/* tsdf_band_walk walks exactly the blocks of tsdf_block_dda_init_units /
 * _next, in the same order, for every kind of segment: within one block,
 * along one axis, one block on two or three axes (with boundary
 * crossings at equal t, where the DDA's tie rule decides), and long ones
 * that need the DDA itself. */
static void test_band_walk_is_the_dda(void **state)
{
    uint64_t seed = 11;
    int modes[3] = {0, 0, 0}, ties = 0;
    (void)state;
    for (int trial = 0; trial < 300000; trial++) {
        float A[3], B[3];
        int32_t got[3], want[3];
        tsdf_block_dda s;
        tsdf_band_walk w;
        memset(&s, 0, sizeof s);
        memset(&w, 0, sizeof w);
        for (int i = 0; i < 3; i++) {
            A[i] = uniform(&seed, -5.0f, 5.0f);
            B[i] = A[i] + uniform(&seed, -1.0f, 1.0f) * (trial % 10 == 0 ? 3.0f : 1.0f);
        }
        if (trial % 5 == 0)
            B[trial % 3] = A[trial % 3];
        if (trial % 7 == 0) {
            /* A diagonal through a block corner: equal t on two or three
             * axes. */
            float c = floorf(A[0]) + 0.5f, h = uniform(&seed, 0.1f, 0.9f);
            for (int i = 0; i < 3; i++) {
                A[i] = c - h + (float)(i % 2) * 4.0f;
                B[i] = c + h + (float)(i % 2) * 4.0f;
            }
            ties++;
        }
        int ok_dda = tsdf_block_dda_init_units(&s, A, B);
        assert_int_equal(tsdf_band_walk_init(&w, A, B), ok_dda);
        if (!ok_dda)
            continue;
        modes[w.mode]++;
        if (w.mode == TSDF_WALK_DDA) {
            /* Left to the DDA: walking the band would yield nothing. */
            assert_false(tsdf_band_walk_next(&w, got));
            continue;
        }
        for (;;) {
            int more = tsdf_block_dda_next(&s, want);
            assert_int_equal(tsdf_band_walk_next(&w, got), more);
            if (!more)
                break;
            assert_memory_equal(got, want, sizeof got);
        }
    }
    /* Every mode was exercised, and often. */
    assert_true(modes[TSDF_WALK_LINE] > 10000);
    assert_true(modes[TSDF_WALK_STEPS] > 10000);
    assert_true(modes[TSDF_WALK_DDA] > 1000);
    assert_true(ties > 10000);
}

/* The factored per-voxel step (tsdf_depth_usable_m, tsdf_block_cam_*,
 * tsdf_voxel_sample_cam) is tsdf_voxel_sample, bit for bit, on random
 * poses, blocks and depth images with holes and edges. */
static void test_factored_sample_is_the_sample(void **state)
{
    enum { FW = 64, FH = 48 };
    float depth[FW * FH], usable[FW * FH];
    uint64_t seed = 11;
    size_t sampled = 0;
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        tsdf_frame f;
        memset(&f, 0, sizeof f);
        f.width = FW;
        f.height = FH;
        f.K.fx = uniform(&seed, 30.0f, 90.0f);
        f.K.fy = f.K.fx;
        f.K.cx = 31.5f;
        f.K.cy = 23.5f;
        f.depth_format = TSDF_DEPTH_F32;
        f.depth = depth;
        f.depth_scale = 1.0f;
        f.min_depth_m = 0.1f;
        f.max_depth_m = 5.0f;
        /* Patches of depth with steps between them, and holes. */
        for (uint32_t i = 0; i < FW * FH; i++) {
            uint32_t u = i % FW, v = i / FW;
            float base = 1.0f + 0.5f * (float)(((u / 9) + (v / 7)) % 3);
            depth[i] = (i * 2654435761u >> 28) == 0 ? 0.0f : base + 0.001f * (float)(u % 5);
        }
        /* A random rotation (axis-angle) and a camera near the origin. */
        float ax[3] = {uniform(&seed, -1, 1), uniform(&seed, -1, 1), uniform(&seed, -1, 1)};
        float n = sqrtf(ax[0] * ax[0] + ax[1] * ax[1] + ax[2] * ax[2]) + 1e-6f;
        float ang = uniform(&seed, 0.0f, 3.1f), c = cosf(ang), sn = sinf(ang), C = 1.0f - c;
        float x = ax[0] / n, y = ax[1] / n, z = ax[2] / n;
        float R[9] = {c + x * x * C,      x * y * C - z * sn, x * z * C + y * sn,
                      y * x * C + z * sn, c + y * y * C,      y * z * C - x * sn,
                      z * x * C - y * sn, z * y * C + x * sn, c + z * z * C};
        for (int r = 0; r < 3; r++) {
            for (int k = 0; k < 3; k++)
                f.T_world_cam[4 * r + k] = R[3 * r + k];
            f.T_world_cam[4 * r + 3] = uniform(&seed, -0.5f, 0.5f);
        }
        f.T_world_cam[15] = 1.0f;
        float T_cw[16];
        tsdf_rigid_inverse(f.T_world_cam, T_cw);
        float sampled_m[FW * FH];
        for (uint32_t i = 0; i < FW * FH; i++)
            sampled_m[i] = tsdf_depth_sample_m(f.depth_format, f.depth, i, f.depth_scale,
                                               f.min_depth_m, f.max_depth_m);
        for (uint32_t v = 0; v < FH; v++) {
            for (uint32_t u = 0; u < FW; u++) {
                usable[v * FW + u] = tsdf_depth_usable_m(&f, u, v, TRUNC_M);
                float from = tsdf_depth_usable_from_m(sampled_m, FW, FH, u, v, TRUNC_M);
                assert_memory_equal(&from, &usable[v * FW + u], sizeof from);
            }
        }
        /* Blocks around points the camera sees. */
        for (int k = 0; k < 8; k++) {
            float pcam[3] = {uniform(&seed, -0.8f, 0.8f), uniform(&seed, -0.6f, 0.6f),
                             uniform(&seed, 0.8f, 2.2f)},
                  pw[3];
            int32_t b[3] = {0, 0, 0};
            tsdf_transform_point(f.T_world_cam, pcam, pw);
            assert_true(tsdf_world_to_block(pw, 1.0f / BLOCK_M, b));
            tsdf_block_cam bc;
            tsdf_block_cam_init(&bc, b, VOXEL_M, T_cw);
            for (int vz = 0; vz < TSDF_BLOCK_DIM; vz++) {
                for (int vy = 0; vy < TSDF_BLOCK_DIM; vy++) {
                    for (int vx = 0; vx < TSDF_BLOCK_DIM; vx++) {
                        float p[3], pc_ref[3], pc[3], sdf_ref = -7.0f, sdf = -7.0f;
                        uint32_t px_ref = 0, px = 0;
                        tsdf_block_voxel_center(b, vx, vy, vz, VOXEL_M, p);
                        tsdf_transform_point(T_cw, p, pc_ref);
                        for (int r = 0; r < 3; r++)
                            pc[r] = (bc.xy[r][vx + 8 * vy] + bc.z[r][vz]) + bc.t[r];
                        assert_memory_equal(pc, pc_ref, sizeof pc);
                        int ok_ref = tsdf_voxel_sample(p, T_cw, &f, TRUNC_M, &sdf_ref, &px_ref);
                        int ok =
                            tsdf_voxel_sample_cam(pc, &f.K, FW, FH, usable, TRUNC_M, &sdf, &px);
                        assert_int_equal(ok, ok_ref);
                        if (ok) {
                            sampled++;
                            assert_memory_equal(&sdf, &sdf_ref, sizeof sdf);
                            assert_int_equal(px, px_ref);
                        }
                    }
                }
            }
        }
    }
    /* The trials must have exercised the sampling, not only refusals. */
    assert_true(sampled > 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_band_along_the_ray),
        cmocka_unit_test(test_band_walk_is_the_dda),
        cmocka_unit_test(test_factored_sample_is_the_sample),
        cmocka_unit_test(test_intrinsics_check),
        cmocka_unit_test(test_tiny_focal_frame_refused),
        cmocka_unit_test(test_wide_camera_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
