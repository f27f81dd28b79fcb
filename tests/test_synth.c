/*
 * test_synth.c - the analytic scenes: exact signed distances, exact rendered
 * depth, rigid trajectories, and sequences that see their objects whole.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_synth.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define EPS 1e-6f

static float sdf_at(const tsdf_scene *s, float x, float y, float z)
{
    float p[3] = {x, y, z};
    return tsdf_scene_sdf(s, p);
}

static void test_sdf_sphere(void **state)
{
    tsdf_scene s;
    assert_int_equal(tsdf_scene_make_sphere(&s), TSDF_OK);
    assert_int_equal(s.count, 1);
    assert_float_equal(sdf_at(&s, 0, 0, 0), -0.3f, EPS);
    assert_float_equal(sdf_at(&s, 1, 0, 0), 0.7f, EPS);
    assert_float_equal(sdf_at(&s, 0, 0.3f, 0), 0.0f, EPS);
    assert_float_equal(sdf_at(&s, 0, 0, -0.1f), -0.2f, EPS);
    /* (0.6, 0.8, 0) is at distance 1 from the centre. */
    assert_float_equal(sdf_at(&s, 0.6f, 0.8f, 0), 0.7f, EPS);
}

static void test_sdf_box(void **state)
{
    tsdf_scene s;
    assert_int_equal(tsdf_scene_make_box(&s), TSDF_OK); /* half 0.25 x 0.15 x 0.1 */
    assert_float_equal(sdf_at(&s, 0.5f, 0, 0), 0.25f, EPS);
    assert_float_equal(sdf_at(&s, 0, -0.35f, 0), 0.2f, EPS);
    /* Beyond a corner: the Euclidean distance to the corner. */
    assert_float_equal(sdf_at(&s, 0.35f, 0.25f, 0.2f), sqrtf(0.03f), EPS);
    /* Beyond an edge: the distance to the edge. */
    assert_float_equal(sdf_at(&s, 0.29f, 0.18f, 0.0f), 0.05f, EPS);
    /* Inside: minus the distance to the nearest face. */
    assert_float_equal(sdf_at(&s, 0, 0, 0), -0.1f, EPS);
    assert_float_equal(sdf_at(&s, 0.2f, 0, 0), -0.05f, EPS);

    /* Turned by 90 degrees about z, the long axis lies along y. */
    tsdf_scene r;
    tsdf_scene_init(&r);
    float c[3] = {1, 2, 0}, h[3] = {0.25f, 0.15f, 0.1f};
    assert_int_equal(tsdf_scene_add_box_yaw(&r, c, h, (float)(M_PI / 2), NULL), TSDF_OK);
    assert_float_equal(sdf_at(&r, 1, 2.5f, 0), 0.25f, EPS);
    assert_float_equal(sdf_at(&r, 1.5f, 2, 0), 0.35f, EPS);
    /* Turned by 45 degrees: the corner (0.25, 0.15) of the footprint now
     * lies at distance sqrt(0.25^2+0.15^2) from the centre, at angle
     * 45 + atan(0.15/0.25) degrees. */
    tsdf_scene q;
    tsdf_scene_init(&q);
    float o[3] = {0, 0, 0};
    assert_int_equal(tsdf_scene_add_box_yaw(&q, o, h, (float)(M_PI / 4), NULL), TSDF_OK);
    double cr = sqrt(0.25 * 0.25 + 0.15 * 0.15), ca = M_PI / 4 + atan2(0.15, 0.25);
    double ext = cr + 0.1;
    assert_float_equal(sdf_at(&q, (float)(ext * cos(ca)), (float)(ext * sin(ca)), 0), 0.1f, 1e-5f);
}

static void test_sdf_room_plane(void **state)
{
    tsdf_scene s;
    tsdf_scene_init(&s);
    float c[3] = {0, 0, 1.25f}, h[3] = {2.0f, 1.5f, 1.25f};
    assert_int_equal(tsdf_scene_add_room(&s, c, h, NULL), TSDF_OK);
    assert_float_equal(sdf_at(&s, 0, 0, 1.25f), 1.25f, EPS);
    assert_float_equal(sdf_at(&s, 0, 0, 0.1f), 0.1f, EPS);
    assert_float_equal(sdf_at(&s, 1.9f, 0, 1.0f), 0.1f, EPS);
    assert_float_equal(sdf_at(&s, 3.0f, 0, 1.25f), -1.0f, EPS);
    assert_float_equal(sdf_at(&s, 3.0f, 2.5f, 1.25f), -sqrtf(2.0f), EPS);

    tsdf_scene p;
    tsdf_scene_init(&p);
    float p0[3] = {0, 0, 1}, n[3] = {0, 0, 2};
    assert_int_equal(tsdf_scene_add_plane(&p, p0, n, NULL), TSDF_OK);
    assert_float_equal(p.prims[0].normal[2], 1.0f, EPS);
    assert_float_equal(sdf_at(&p, 5, -3, 1.5f), 0.5f, EPS);
    assert_float_equal(sdf_at(&p, 5, -3, 0.25f), -0.75f, EPS);

    /* A union of disjoint solids: the nearest one decides. */
    tsdf_scene u;
    tsdf_scene_init(&u);
    float a[3] = {-1, 0, 0}, b[3] = {1, 0, 0}, bh[3] = {0.1f, 0.1f, 0.1f};
    assert_int_equal(tsdf_scene_add_sphere(&u, a, 0.5f, NULL), TSDF_OK);
    assert_int_equal(tsdf_scene_add_box(&u, b, bh, NULL), TSDF_OK);
    assert_float_equal(sdf_at(&u, 0, 0, 0), 0.5f, EPS);
    assert_float_equal(sdf_at(&u, 0.5f, 0, 0), 0.4f, EPS);
    assert_float_equal(sdf_at(&u, -1, 0, 0), -0.5f, EPS);
    float pb[3] = {0.5f, 0, 0};
    assert_int_equal(tsdf_scene_nearest_prim(&u, pb), 1);
}

static void test_scene_errors(void **state)
{
    tsdf_scene s;
    tsdf_scene_init(&s);
    float c[3] = {0, 0, 0}, h[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, badh[3] = {1, -1, 1};
    assert_int_equal(tsdf_scene_add_sphere(&s, c, 0.0f, NULL), TSDF_EINVAL);
    assert_int_equal(tsdf_scene_add_sphere(&s, c, NAN, NULL), TSDF_EINVAL);
    assert_int_equal(tsdf_scene_add_box(&s, c, badh, NULL), TSDF_EINVAL);
    assert_int_equal(tsdf_scene_add_plane(&s, c, zero, NULL), TSDF_EINVAL);
    assert_int_equal(tsdf_scene_add_room(NULL, c, h, NULL), TSDF_EINVAL);
    assert_int_equal(s.count, 0);
    assert_true(isinf(tsdf_scene_sdf(&s, c)));
    for (int i = 0; i < TSDF_SCENE_MAX_PRIMS; i++)
        assert_int_equal(tsdf_scene_add_sphere(&s, c, 1.0f, NULL), TSDF_OK);
    assert_int_equal(tsdf_scene_add_sphere(&s, c, 1.0f, NULL), TSDF_ETOO_LARGE);
    assert_int_equal(s.count, TSDF_SCENE_MAX_PRIMS);

    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "nope"), TSDF_ENOT_FOUND);
}

/* The depth of the sphere of radius r whose centre lies at camera z = D on
 * the optical axis, along the pixel ray (x, y, 1): the smaller root of
 * t^2 (x^2 + y^2 + 1) - 2 t D + D^2 - r^2 = 0, or 0 when there is none. */
static double sphere_depth(double x, double y, double D, double r)
{
    double a = x * x + y * y + 1.0;
    double disc = D * D - a * (D * D - r * r);
    if (disc < 0.0)
        return 0.0;
    return (D - sqrt(disc)) / a;
}

static void test_render_sphere(void **state)
{
    tsdf_scene s;
    assert_int_equal(tsdf_scene_make_sphere(&s), TSDF_OK);
    const uint32_t w = 160, h = 120;
    tsdf_intrinsics K = {150.0f, 140.0f, 79.5f, 59.5f};
    float T[16], eye[3] = {1.2f, -0.9f, 0.4f}, target[3] = {0, 0, 0};
    assert_int_equal(tsdf_synth_look_at(eye, target, NULL, T), TSDF_OK);
    double D = sqrt(1.2 * 1.2 + 0.9 * 0.9 + 0.4 * 0.4);
    float *depth = malloc(sizeof(float) * w * h);
    uint8_t *rgb = malloc(3u * w * h);
    assert_non_null(depth);
    assert_non_null(rgb);
    assert_int_equal(tsdf_scene_render(&s, w, h, &K, T, depth, rgb), TSDF_OK);
    uint32_t hits = 0;
    double max_err = 0.0;
    for (uint32_t v = 0; v < h; v++)
        for (uint32_t u = 0; u < w; u++) {
            double x = ((double)u - K.cx) / K.fx, y = ((double)v - K.cy) / K.fy;
            double ref = sphere_depth(x, y, D, 0.3);
            float got = depth[v * w + u];
            if (ref == 0.0) {
                /* Rays that graze the rim may go either way in float. */
                if (got != 0.0f)
                    assert_true(sphere_depth(x, y, D, 0.3 + 1e-6) > 0.0);
                continue;
            }
            hits++;
            double err = fabs(got - ref);
            if (err > max_err)
                max_err = err;
            assert_memory_equal(&rgb[(v * w + u) * 3], s.prims[0].rgb, 3);
        }
    printf("sphere: %u hit pixels, max |depth - analytic| = %.3g m\n", hits, max_err);
    assert_true(hits > 1000);
    assert_true(max_err < 1e-5);
    /* The centre of the image looks at the sphere's centre. */
    double centre = sphere_depth((79.5 - K.cx) / K.fx, (59.5 - K.cy) / K.fy, D, 0.3);
    assert_float_equal(centre, D - 0.3, 1e-9);
    free(depth);
    free(rgb);
}

static void test_render_plane(void **state)
{
    tsdf_scene s;
    tsdf_scene_init(&s);
    float p0[3] = {0, 0, 0}, n[3] = {0, 0, 1};
    assert_int_equal(tsdf_scene_add_plane(&s, p0, n, NULL), TSDF_OK);
    const uint32_t w = 64, h = 48;
    tsdf_intrinsics K = {60.0f, 60.0f, 31.5f, 23.5f};
    float *depth = malloc(sizeof(float) * w * h);
    assert_non_null(depth);

    /* Straight down from 2 m (the look-at's degenerate case): depth 2 everywhere. */
    float T[16], eye[3] = {0.3f, -0.2f, 2.0f}, target[3] = {0.3f, -0.2f, 0.0f};
    assert_int_equal(tsdf_synth_look_at(eye, target, NULL, T), TSDF_OK);
    assert_true(tsdf_synth_pose_error(T) < 1e-6);
    assert_int_equal(tsdf_scene_render(&s, w, h, &K, T, depth, NULL), TSDF_OK);
    for (uint32_t i = 0; i < w * h; i++)
        assert_float_equal(depth[i], 2.0f, 1e-6f);

    /* Oblique: t = -o_z / d_z for the world ray d = R (x, y, 1). */
    float eye2[3] = {0.0f, -1.0f, 1.5f}, target2[3] = {0.5f, 1.0f, 0.0f};
    assert_int_equal(tsdf_synth_look_at(eye2, target2, NULL, T), TSDF_OK);
    assert_int_equal(tsdf_scene_render(&s, w, h, &K, T, depth, NULL), TSDF_OK);
    uint32_t hits = 0, misses = 0;
    for (uint32_t v = 0; v < h; v++)
        for (uint32_t u = 0; u < w; u++) {
            double x = ((double)u - K.cx) / K.fx, y = ((double)v - K.cy) / K.fy;
            double dz = T[8] * x + T[9] * y + T[10];
            double ref = dz < 0.0 ? -(double)T[11] / dz : 0.0;
            if (ref > 0.0) {
                hits++;
                assert_true(fabs(depth[v * w + u] - ref) < 1e-5 * ref);
            } else {
                misses++;
                assert_float_equal(depth[v * w + u], 0.0f, 0.0f);
            }
        }
    assert_true(hits > 0);
    printf("oblique plane: %u hits, %u misses (sky)\n", hits, misses);
    free(depth);
}

/* Back-projects every hit of frame i and checks that it lies on the scene's
 * surface and carries the colour of the primitive there. Returns the
 * largest |sdf| seen. */
static double check_backprojection(const tsdf_synth_sequence *seq, uint32_t i, uint32_t *hits)
{
    size_t n = (size_t)seq->width * seq->height;
    float *depth = malloc(sizeof(float) * n);
    uint8_t *rgb = malloc(3 * n);
    assert_non_null(depth);
    assert_non_null(rgb);
    tsdf_frame f;
    assert_int_equal(tsdf_synth_sequence_frame(seq, i, depth, rgb, &f), TSDF_OK);
    assert_int_equal(f.width, seq->width);
    assert_int_equal(f.depth_format, TSDF_DEPTH_F32);
    assert_ptr_equal(f.depth, depth);
    assert_true(tsdf_synth_pose_error(f.T_world_cam) < 1e-5);
    double worst = 0.0;
    for (uint32_t v = 0; v < f.height; v++)
        for (uint32_t u = 0; u < f.width; u++) {
            float z = depth[v * f.width + u];
            if (z == 0.0f)
                continue;
            assert_true(z > 0.0f && isfinite(z));
            (*hits)++;
            float pc[3] = {((float)u - f.K.cx) / f.K.fx * z, ((float)v - f.K.cy) / f.K.fy * z, z};
            float pw[3];
            for (int r = 0; r < 3; r++)
                pw[r] = f.T_world_cam[r * 4 + 0] * pc[0] + f.T_world_cam[r * 4 + 1] * pc[1] +
                        f.T_world_cam[r * 4 + 2] * pc[2] + f.T_world_cam[r * 4 + 3];
            double e = fabs(tsdf_scene_sdf(&seq->scene, pw));
            if (e > worst)
                worst = e;
            int prim = tsdf_scene_nearest_prim(&seq->scene, pw);
            assert_true(prim >= 0);
            /* Where two primitives touch (a ball on the floor) either colour is right. */
            if (memcmp(&rgb[(v * f.width + u) * 3], seq->scene.prims[prim].rgb, 3) != 0) {
                int ok = 0;
                for (uint32_t k = 0; k < seq->scene.count; k++) {
                    tsdf_scene one;
                    tsdf_scene_init(&one);
                    one.count = 1;
                    one.prims[0] = seq->scene.prims[k];
                    if (fabsf(tsdf_scene_sdf(&one, pw)) < 1e-4f &&
                        memcmp(&rgb[(v * f.width + u) * 3], one.prims[0].rgb, 3) == 0)
                        ok = 1;
                }
                assert_true(ok);
            }
        }
    free(depth);
    free(rgb);
    return worst;
}

static void test_backprojection_on_surface(void **state)
{
    const char *const *names = tsdf_synth_sequence_names();
    for (int k = 0; names[k]; k++) {
        tsdf_synth_sequence seq;
        assert_int_equal(tsdf_synth_sequence_init(&seq, names[k]), TSDF_OK);
        assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 160, 120), TSDF_OK);
        assert_float_equal(seq.K.cx, 79.5f, 0.0f);
        double worst = 0.0;
        uint32_t hits = 0;
        /* A handful of frames spread over every ring. */
        for (uint32_t i = 0; i < seq.frame_count; i += 5) {
            double w = check_backprojection(&seq, i, &hits);
            if (w > worst)
                worst = w;
        }
        printf("%-6s: %2u frames, %u hit pixels checked, max |sdf| = %.3g m\n", names[k],
               seq.frame_count, hits, worst);
        assert_true(hits > 1000);
        assert_true(worst < 1e-4);
    }
}

static void test_poses(void **state)
{
    float c[3] = {0.5f, -1.0f, 0.2f}, T[16];
    for (uint32_t i = 0; i < 37; i++) {
        assert_int_equal(tsdf_synth_orbit_pose(c, 1.5f, 0.7f, 37, i, T), TSDF_OK);
        assert_true(tsdf_synth_pose_error(T) < 1e-6);
        double dx = T[3] - c[0], dy = T[7] - c[1];
        assert_float_equal(sqrt(dx * dx + dy * dy), 1.5, 1e-5);
        assert_float_equal(T[11], 0.9f, 1e-6f);
        /* The optical axis (third column) points at the centre. */
        double len = sqrt(dx * dx + dy * dy + 0.7 * 0.7);
        assert_float_equal(T[2], -dx / len, 1e-5);
        assert_float_equal(T[6], -dy / len, 1e-5);
        assert_float_equal(T[10], -0.7 / len, 1e-5);
        /* Image "down" (+y) has a negative world z component: upright. */
        assert_true(T[9] < 0.0f);
        /* Image right (+x) is horizontal. */
        assert_float_equal(T[8], 0.0f, 1e-6f);
    }
    assert_int_equal(tsdf_synth_orbit_pose(c, 1.5f, 0.7f, 37, 37, T), TSDF_EINVAL);
    assert_int_equal(tsdf_synth_orbit_pose(c, 0.0f, 0.7f, 37, 0, T), TSDF_EINVAL);
    assert_int_equal(tsdf_synth_look_at(c, c, NULL, T), TSDF_EINVAL);

    /* Straight up and straight down still give rigid poses. */
    float below[3] = {0.5f, -1.0f, -3.0f};
    assert_int_equal(tsdf_synth_look_at(below, c, NULL, T), TSDF_OK);
    assert_true(tsdf_synth_pose_error(T) < 1e-6);
    assert_float_equal(T[10], 1.0f, 1e-6f);

    /* A reflection and a scaled rotation are not rigid. */
    float M[16] = {-1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    assert_false(tsdf_synth_pose_error(M) < 1e-3);
    M[0] = 1.01f;
    assert_false(tsdf_synth_pose_error(M) < 1e-3);
    M[0] = 1.0f;
    assert_true(tsdf_synth_pose_error(M) < 1e-6);
    M[3] = NAN;
    assert_false(tsdf_synth_pose_error(M) < 1e-3);

    const char *const *names = tsdf_synth_sequence_names();
    for (int k = 0; names[k]; k++) {
        tsdf_synth_sequence seq;
        assert_int_equal(tsdf_synth_sequence_init(&seq, names[k]), TSDF_OK);
        assert_int_equal(seq.frame_count, seq.ring_count * seq.frames_per_ring);
        for (uint32_t i = 0; i < seq.frame_count; i++) {
            assert_int_equal(tsdf_synth_sequence_pose(&seq, i, T), TSDF_OK);
            assert_true(tsdf_synth_pose_error(T) < 1e-5);
            /* The camera must stand in free space, outside every object. */
            float eye[3] = {T[3], T[7], T[11]};
            assert_true(tsdf_scene_sdf(&seq.scene, eye) > 0.05f);
        }
        assert_int_equal(tsdf_synth_sequence_pose(&seq, seq.frame_count, T), TSDF_EINVAL);
    }
}

/* Every point of the sphere must be seen by some frame of the "sphere"
 * sequence (top and bottom included), so a fused sphere is closed. */
static void test_sphere_sequence_coverage(void **state)
{
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "sphere"), TSDF_OK);
    size_t n = (size_t)seq.width * seq.height;
    float *depth = malloc(sizeof(float) * n * seq.frame_count);
    assert_non_null(depth);
    float poses[64][16];
    assert_true(seq.frame_count <= 64);
    for (uint32_t i = 0; i < seq.frame_count; i++) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth + n * i, NULL, &f), TSDF_OK);
        memcpy(poses[i], f.T_world_cam, sizeof poses[i]);
    }
    /* A Fibonacci lattice of 400 points plus the two poles. */
    const int npts = 402;
    int unseen = 0;
    for (int k = 0; k < npts; k++) {
        double zc, phi;
        if (k < 400) {
            zc = 1.0 - (2.0 * k + 1.0) / 400.0;
            phi = k * M_PI * (3.0 - sqrt(5.0));
        } else {
            zc = k == 400 ? 1.0 : -1.0;
            phi = 0.0;
        }
        double rr = sqrt(1.0 - zc * zc);
        float pw[3] = {(float)(0.3 * rr * cos(phi)), (float)(0.3 * rr * sin(phi)),
                       (float)(0.3 * zc)};
        int seen = 0;
        for (uint32_t i = 0; i < seq.frame_count && !seen; i++) {
            float Tinv[16];
            const float *T = poses[i];
            /* p_cam = R^T (p - t). */
            float d[3] = {pw[0] - T[3], pw[1] - T[7], pw[2] - T[11]};
            for (int r = 0; r < 3; r++)
                Tinv[r] = T[0 * 4 + r] * d[0] + T[1 * 4 + r] * d[1] + T[2 * 4 + r] * d[2];
            if (Tinv[2] <= 0.0f)
                continue;
            long u = lroundf(seq.K.fx * Tinv[0] / Tinv[2] + seq.K.cx);
            long v = lroundf(seq.K.fy * Tinv[1] / Tinv[2] + seq.K.cy);
            if (u < 0 || v < 0 || u >= (long)seq.width || v >= (long)seq.height)
                continue;
            float z = depth[n * i + (size_t)v * seq.width + (size_t)u];
            if (z > 0.0f && fabsf(z - Tinv[2]) < 0.01f)
                seen = 1;
        }
        if (!seen)
            unseen++;
    }
    printf("sphere coverage: %d of %d surface points unseen\n", unseen, npts);
    assert_int_equal(unseen, 0);
    free(depth);
}

static void test_render_errors(void **state)
{
    tsdf_scene s;
    assert_int_equal(tsdf_scene_make_sphere(&s), TSDF_OK);
    tsdf_intrinsics K = {100, 100, 16, 12};
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, -2, 0, 0, 0, 1};
    float depth[32 * 24];
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &K, T, depth, NULL), TSDF_OK);
    assert_float_equal(depth[12 * 32 + 16], 1.7f, 1e-6f);
    assert_int_equal(tsdf_scene_render(&s, 0, 24, &K, T, depth, NULL), TSDF_EEMPTY_IMAGE);
    assert_int_equal(tsdf_scene_render(&s, 9000, 24, &K, T, depth, NULL), TSDF_ETOO_LARGE);
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &K, T, NULL, NULL), TSDF_EINVAL);
    tsdf_intrinsics badK = {0, 100, 16, 12};
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &badK, T, depth, NULL), TSDF_EBAD_INTRINSICS);
    badK.fx = INFINITY;
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &badK, T, depth, NULL), TSDF_EBAD_INTRINSICS);
    T[0] = 2.0f;
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &K, T, depth, NULL), TSDF_EBAD_POSE);
    T[0] = 1.0f;
    T[15] = NAN;
    assert_int_equal(tsdf_scene_render(&s, 32, 24, &K, T, depth, NULL), TSDF_EBAD_POSE);
}

static void test_depth_to_mm(void **state)
{
    float in[7] = {1.2344f, 1.2346f, 0.0f, -1.0f, NAN, 70.0f, 65.5344f};
    uint16_t out[7];
    tsdf_depth_m_to_mm(in, 7, out);
    assert_int_equal(out[0], 1234);
    assert_int_equal(out[1], 1235);
    assert_int_equal(out[2], 0);
    assert_int_equal(out[3], 0);
    assert_int_equal(out[4], 0);
    assert_int_equal(out[5], 0);
    assert_int_equal(out[6], 65534);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdf_sphere),
        cmocka_unit_test(test_sdf_box),
        cmocka_unit_test(test_sdf_room_plane),
        cmocka_unit_test(test_scene_errors),
        cmocka_unit_test(test_render_sphere),
        cmocka_unit_test(test_render_plane),
        cmocka_unit_test(test_backprojection_on_surface),
        cmocka_unit_test(test_poses),
        cmocka_unit_test(test_sphere_sequence_coverage),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_depth_to_mm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
