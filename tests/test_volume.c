/*
 * test_volume.c - the volume API on the CPU reference backend: fusion
 * accuracy, weights, argument checks, the memory cap (fixed and changed on a
 * live volume), reset, export/import,
 * and the shared per-voxel maths of gpu/shared/tsdf_math.h (block walk, projection).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

/* |a - b| <= eps, failing on NaN (cmocka's assert_float_equal lets NaN pass). */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (double)(eps))

#include "tsdf_math.h"
#include "tsdf_volume.h"

/* A small camera: 160 x 120, 60 degrees-ish field of view. */
#define W 160
#define H 120
static const tsdf_intrinsics K_TEST = {150.0f, 150.0f, 79.5f, 59.5f};

static void pose_translation(float T[16], float tx, float ty, float tz)
{
    memset(T, 0, 16 * sizeof(float));
    T[0] = T[5] = T[10] = T[15] = 1.0f;
    T[3] = tx;
    T[7] = ty;
    T[11] = tz;
}

/* A fronto-parallel wall: the camera looks along world +z (identity
 * rotation) at the plane z = plane_z_m, so every pixel measures the same
 * depth plane_z_m - tz. */
static void plane_frame(tsdf_frame *f, float *depth, float plane_z_m, float tx, float ty, float tz)
{
    for (int i = 0; i < W * H; i++)
        depth[i] = plane_z_m - tz;
    memset(f, 0, sizeof(*f));
    f->width = W;
    f->height = H;
    f->K = K_TEST;
    pose_translation(f->T_world_cam, tx, ty, tz);
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = depth;
    f->depth_scale = 1.0f;
    f->min_depth_m = 0.1f;
    f->max_depth_m = 5.0f;
    f->rgb = NULL;
}

static tsdf_volume *make_volume(float voxel_m, float max_weight, uint64_t cap_bytes,
                                uint32_t capacity)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = voxel_m;
    p.max_weight = max_weight;
    p.memory_cap_bytes = cap_bytes;
    p.initial_capacity_blocks = capacity;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    assert_non_null(v);
    assert_int_equal(tsdf_volume_backend(v), TSDF_BACKEND_CPU);
    return v;
}

static tsdf_volume_stats get_stats(tsdf_volume *v)
{
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(v, &st), TSDF_OK);
    return st;
}

/* Two block sets hold the same blocks with bit-identical voxels. */
static void assert_sets_equal(const tsdf_block_set *a, const tsdf_block_set *b)
{
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->layout, b->layout);
    assert_int_equal(a->rgb != NULL, b->rgb != NULL);
    if (a->count == 0)
        return;
    assert_memory_equal(a->coords, b->coords, 3 * a->count * sizeof(int32_t));
    assert_memory_equal(a->geom, b->geom, tsdf_block_set_geom_bytes(a));
    if (a->rgb != NULL)
        assert_memory_equal(a->rgb, b->rgb, a->count * TSDF_BLOCK_RGB_BYTES);
}

/* Voxel i of a set, counting through its blocks (block i / 512). */
static tsdf_vox vox_at(const tsdf_block_set *s, size_t i)
{
    return tsdf_block_set_get(s, i / TSDF_BLOCK_VOXELS, (unsigned)(i % TSDF_BLOCK_VOXELS));
}

static void vox_put(tsdf_block_set *s, size_t i, tsdf_vox x)
{
    tsdf_block_set_put(s, i / TSDF_BLOCK_VOXELS, (unsigned)(i % TSDF_BLOCK_VOXELS), x);
}

/* ---- names and parameters ------------------------------------------------ */

static void test_backend_names_and_params(void **state)
{
    tsdf_backend b;
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    (void)state;
    assert_string_equal(tsdf_backend_name(TSDF_BACKEND_AUTO), "auto");
    assert_string_equal(tsdf_backend_name(TSDF_BACKEND_CPU), "cpu");
    assert_string_equal(tsdf_backend_name(TSDF_BACKEND_CUDA), "cuda");
    assert_string_equal(tsdf_backend_name((tsdf_backend)7), "unknown");
    assert_int_equal(tsdf_backend_parse("cpu", &b), TSDF_OK);
    assert_int_equal(b, TSDF_BACKEND_CPU);
    assert_int_equal(tsdf_backend_parse("cuda", &b), TSDF_OK);
    assert_int_equal(b, TSDF_BACKEND_CUDA);
    assert_int_equal(tsdf_backend_parse("auto", &b), TSDF_OK);
    assert_int_equal(b, TSDF_BACKEND_AUTO);
    assert_int_equal(tsdf_backend_parse("gpu", &b), TSDF_EINVAL);

    tsdf_volume_params_default(&p);
    assert_true(p.voxel_size_m == 0.01f && p.trunc_vox == 4.0f && p.max_weight == 64.0f);
    assert_int_equal(p.initial_capacity_blocks, 65536);
    assert_true(p.max_load_factor == 0.5f);
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_OK);

    /* Each bad parameter is refused by check and by create. */
    {
        tsdf_volume_params bad[9];
        for (int i = 0; i < 9; i++)
            bad[i] = p;
        bad[0].voxel_size_m = 0.0f;
        bad[1].voxel_size_m = NAN;
        bad[2].trunc_vox = -1.0f;
        bad[3].max_weight = INFINITY;
        bad[4].max_load_factor = 0.99f;
        bad[5].max_load_factor = 0.0f;
        bad[6].initial_capacity_blocks = 0;
        /* Tiny factors made growth ask for a 128 GiB table for two blocks
         * (found by fuzz/fuzz_snapshot.c on a snapshot's parameters) or,
         * denormal, double the capacity to 0 and loop forever. */
        bad[7].max_load_factor = 1.16e-10f;
        bad[8].max_load_factor = 1e-45f;
        for (int i = 0; i < 9; i++) {
            assert_int_equal(tsdf_volume_params_check(&bad[i]), TSDF_EBAD_PARAMS);
            assert_int_equal(tsdf_volume_create(&bad[i], &v), TSDF_EBAD_PARAMS);
            assert_null(v);
        }
    }
    /* A cap smaller than the initial table. */
    p.backend = TSDF_BACKEND_CPU;
    p.memory_cap_bytes = 1000;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_ECAPACITY);
    assert_null(v);
#ifndef TSDF_HAVE_CUDA
    p.memory_cap_bytes = 0;
    p.backend = TSDF_BACKEND_CUDA;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_ENOT_BUILT);
    assert_int_equal(tsdf_cuda_available(), 0);
    /* AUTO without CUDA is the CPU backend. */
    p.backend = TSDF_BACKEND_AUTO;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    assert_int_equal(tsdf_volume_backend(v), TSDF_BACKEND_CPU);
    tsdf_volume_destroy(v);
#else
    if (!tsdf_cuda_available()) {
        /* Built with CUDA on a machine without a usable GPU. */
        p.memory_cap_bytes = 0;
        p.backend = TSDF_BACKEND_CUDA;
        assert_int_equal(tsdf_volume_create(&p, &v), TSDF_ENO_GPU);
        assert_null(v);
        p.backend = TSDF_BACKEND_AUTO;
        assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
        assert_int_equal(tsdf_volume_backend(v), TSDF_BACKEND_CPU);
        tsdf_volume_destroy(v);
    }
#endif
    tsdf_volume_destroy(NULL);
}

/* ---- shared maths ----------------------------------------------------------- */

/* The block walk of a segment visits a connected chain of blocks (each step
 * one face neighbour) from a's block to b's block, and contains every block
 * that dense sampling of the segment touches. */
static void test_block_dda_exact(void **state)
{
    uint64_t s = 12345;
    (void)state;
    for (int trial = 0; trial < 2000; trial++) {
        float a[3], b[3];
        const float inv_bs = 1.0f / 0.08f;
        int32_t blk[3], prev[3], first[3], n = 0;
        int32_t chain[512][3];
        tsdf_block_dda dda;
        for (int i = 0; i < 3; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b[i] = a[i] + (float)((double)(s >> 11) / 9007199254740992.0 * 0.6 - 0.3);
        }
        assert_true(tsdf_block_dda_init(&dda, a, b, inv_bs));
        while (tsdf_block_dda_next(&dda, blk)) {
            assert_true(n < 512);
            if (n == 0) {
                memcpy(first, blk, sizeof(first));
            } else {
                int dist = abs(blk[0] - prev[0]) + abs(blk[1] - prev[1]) + abs(blk[2] - prev[2]);
                assert_int_equal(dist, 1);
            }
            memcpy(chain[n++], blk, sizeof(blk));
            memcpy(prev, blk, sizeof(prev));
        }
        {
            int32_t ea[3], eb[3];
            assert_true(tsdf_world_to_block(a, inv_bs, ea));
            assert_true(tsdf_world_to_block(b, inv_bs, eb));
            assert_memory_equal(first, ea, sizeof(ea));
            assert_memory_equal(prev, eb, sizeof(eb));
        }
        /* Dense samples, away from block faces by a hair (where rounding
         * may legitimately pick either side). */
        for (int k = 0; k <= 1000; k++) {
            float t = (float)k / 1000.0f, p[3], q[3];
            int32_t pb[3] = {0, 0, 0}, found = 0;
            int near_face = 0;
            for (int i = 0; i < 3; i++) {
                p[i] = a[i] + (b[i] - a[i]) * t;
                q[i] = p[i] * inv_bs;
                near_face |= fabsf(q[i] - floorf(q[i] + 0.5f)) < 1e-4f;
            }
            if (near_face)
                continue;
            assert_true(tsdf_world_to_block(p, inv_bs, pb));
            for (int j = 0; j < n && !found; j++)
                found = chain[j][0] == pb[0] && chain[j][1] == pb[1] && chain[j][2] == pb[2];
            assert_true(found);
        }
    }
    /* Out of range or not finite: nothing to walk. */
    {
        tsdf_block_dda dda;
        float a[3] = {0, 0, 0}, b[3] = {1e9f, 0, 0}, c[3] = {NAN, 0, 0};
        assert_false(tsdf_block_dda_init(&dda, a, b, 12.5f));
        assert_false(tsdf_block_dda_init(&dda, c, a, 12.5f));
    }
}

static void test_projection_and_coords(void **state)
{
    uint32_t u, v;
    int32_t vox[3] = {0, 0, 0}, b[3];
    int local[3];
    (void)state;
    /* The principal point projects to pixel (80, 60) (79.5 rounds up). */
    {
        float p[3] = {0.0f, 0.0f, 2.0f};
        assert_true(tsdf_project_nearest(&K_TEST, W, H, p, &u, &v));
        assert_int_equal(u, 80);
        assert_int_equal(v, 60);
    }
    /* A pixel's own ray projects back onto it. */
    for (uint32_t py = 0; py < H; py += 7) {
        for (uint32_t px = 0; px < W; px += 5) {
            float r[3];
            tsdf_pixel_ray_cam(&K_TEST, (float)px, (float)py, r);
            for (int i = 0; i < 3; i++)
                r[i] *= 1.7f;
            assert_true(tsdf_project_nearest(&K_TEST, W, H, r, &u, &v));
            assert_int_equal(u, px);
            assert_int_equal(v, py);
        }
    }
    {
        float behind[3] = {0.0f, 0.0f, -1.0f}, outside[3] = {10.0f, 0.0f, 1.0f};
        assert_false(tsdf_project_nearest(&K_TEST, W, H, behind, &u, &v));
        assert_false(tsdf_project_nearest(&K_TEST, W, H, outside, &u, &v));
    }
    /* Floor for negatives: world -0.001 m is voxel -1, block -1, local 7. */
    {
        float p[3] = {-0.001f, 0.085f, 0.0f};
        assert_true(tsdf_world_to_voxel(p, 100.0f, vox));
        assert_int_equal(vox[0], -1);
        assert_int_equal(vox[1], 8);
        assert_int_equal(vox[2], 0);
        tsdf_voxel_to_block(vox, b, local);
        assert_int_equal(b[0], -1);
        assert_int_equal(local[0], 7);
        assert_int_equal(b[1], 1);
        assert_int_equal(local[1], 0);
    }
    /* Trilinear interpolation reproduces a linear function and its gradient. */
    {
        float c8[8], g[3];
        for (int c = 0; c < 8; c++)
            c8[c] = 1.0f + 2.0f * (float)(c & 1) - 3.0f * (float)((c >> 1) & 1) +
                    0.5f * (float)((c >> 2) & 1);
        assert_near(tsdf_trilinear(c8, 0.25f, 0.5f, 0.75f), 1.0f + 0.5f - 1.5f + 0.375f, 1e-6f);
        tsdf_trilinear_grad(c8, 0.3f, 0.6f, 0.1f, g);
        assert_near(g[0], 2.0f, 1e-6f);
        assert_near(g[1], -3.0f, 1e-6f);
        assert_near(g[2], 0.5f, 1e-6f);
    }
}

/* ---- fusion accuracy ------------------------------------------------------- */

/* Noise-free frames of a fronto-parallel wall fused from several camera
 * positions: every observed voxel holds the true signed distance (clamped
 * to the truncation band) within 0.1 voxel.
 *
 * Why a fronto-parallel wall: the projective TSDF stores the depth
 * difference along the camera's z axis (measured depth - voxel depth), which
 * equals the Euclidean distance to the surface only where the view direction
 * is along the surface normal. Seen obliquely, a voxel at distance d from a
 * surface gets d / cos(angle) instead: the zero crossing stays right (the
 * mesh and raycast tests check that) but the band's values are stretched.
 * With the camera axis along the wall's normal and a wall that fills the
 * image, every pixel measures the same depth and the projective value is
 * exact across the whole band, so a band-wide comparison is meaningful. */
static void test_fusion_plane_band_accuracy(void **state)
{
    const float s = 0.01f, trunc = 4.0f * s, plane_z = 1.013f;
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *v = make_volume(s, 64.0f, 0, 1024);
    tsdf_block_set set;
    tsdf_frame f;
    size_t checked = 0, in_band = 0;
    double max_err = 0.0, sum_err = 0.0;
    tsdf_volume_stats st;
    (void)state;
    assert_non_null(depth);
    for (int i = 0; i < 10; i++) {
        plane_frame(&f, depth, plane_z, 0.013f * (float)i, -0.007f * (float)i,
                    0.02f * (float)(i % 3));
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    st = get_stats(v);
    assert_int_equal(st.frames_integrated, 10);
    assert_int_equal(st.version, 10);
    assert_true(st.blocks_allocated > 100);
    assert_true(st.load_factor <= 0.5);
    print_message("plane: %llu blocks, %.2f ms alloc + %.2f ms update for the last frame\n",
                  (unsigned long long)st.blocks_allocated, st.last_alloc_ms, st.last_update_ms);

    tsdf_block_set_init(&set);
    assert_int_equal(tsdf_volume_export_blocks(v, &set), TSDF_OK);
    assert_int_equal(set.count, st.blocks_allocated);
    for (size_t bi = 0; bi < set.count; bi++) {
        for (int k = 0; k < TSDF_BLOCK_VOXELS; k++) {
            const tsdf_vox vx = tsdf_block_set_get(&set, bi, (unsigned)k);
            int x, y, z;
            float p[3], truth, err;
            if (vx.weight <= 0.0f)
                continue;
            tsdf_voxel_index_unpack(k, &x, &y, &z);
            tsdf_block_voxel_center(&set.coords[3 * bi], x, y, z, s, p);
            truth = plane_z - p[2];
            truth = truth > trunc ? trunc : truth;
            /* Voxels more than trunc behind the surface are never updated. */
            assert_true(truth >= -trunc - 1e-5f);
            err = fabsf(vx.sdf_m - truth);
            checked++;
            in_band += fabsf(truth) < trunc;
            sum_err += err;
            if (err > max_err)
                max_err = err;
            assert_true(vx.weight <= 10.0f);
        }
    }
    print_message("plane: %zu observed voxels (%zu inside the band), mean |err| %.4f vox, "
                  "max %.4f vox\n",
                  checked, in_band, sum_err / (double)checked / s, max_err / s);
    assert_true(in_band > 50000);
    assert_true(max_err <= 0.1 * s);
    tsdf_block_set_fini(&set);
    tsdf_volume_destroy(v);
    free(depth);
}

/* uint16 millimetre depth gives the same volume as the same depth in float
 * metres when the values are exactly representable. */
static void test_u16_equals_f32(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    uint16_t *mm = malloc(W * H * sizeof(uint16_t));
    tsdf_volume *a = make_volume(0.02f, 64.0f, 0, 1024), *b = make_volume(0.02f, 64.0f, 0, 1024);
    tsdf_block_set sa, sb;
    tsdf_frame f;
    (void)state;
    plane_frame(&f, depth, 1.25f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(a, &f), TSDF_OK);
    for (int i = 0; i < W * H; i++)
        mm[i] = 1250;
    f.depth_format = TSDF_DEPTH_U16;
    f.depth = mm;
    f.depth_scale = 0.001f;
    assert_int_equal(tsdf_volume_integrate(b, &f), TSDF_OK);
    tsdf_block_set_init(&sa);
    tsdf_block_set_init(&sb);
    assert_int_equal(tsdf_volume_export_blocks(a, &sa), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(b, &sb), TSDF_OK);
    assert_true(sa.count > 0);
    assert_int_equal(sa.count, sb.count);
    assert_memory_equal(sa.coords, sb.coords, 3 * sa.count * sizeof(int32_t));
    for (size_t i = 0; i < sa.count * TSDF_BLOCK_VOXELS; i++) {
        assert_near(vox_at(&sa, i).sdf_m, vox_at(&sb, i).sdf_m, 1e-6f);
        assert_true(vox_at(&sa, i).weight == vox_at(&sb, i).weight);
    }
    tsdf_block_set_fini(&sa);
    tsdf_block_set_fini(&sb);
    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
    free(depth);
    free(mm);
}

/* Weights stop at max_weight; the average keeps moving with a fixed
 * window; colour is averaged. */
static void test_weight_clamp_and_color(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    uint8_t *rgb = malloc(W * H * 3);
    tsdf_volume *v = make_volume(0.02f, 5.0f, 0, 1024);
    tsdf_block_set set;
    tsdf_frame f;
    size_t at_max = 0;
    (void)state;
    for (int i = 0; i < W * H; i++) {
        rgb[3 * i] = 200;
        rgb[3 * i + 1] = 100;
        rgb[3 * i + 2] = 10;
    }
    for (int i = 0; i < 8; i++) {
        plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
        f.rgb = rgb;
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    assert_true(get_stats(v).has_color);
    tsdf_block_set_init(&set);
    assert_int_equal(tsdf_volume_export_blocks(v, &set), TSDF_OK);
    assert_non_null(set.rgb);
    for (size_t i = 0; i < set.count * TSDF_BLOCK_VOXELS; i++) {
        const tsdf_vox vx = vox_at(&set, i);
        assert_true(vx.weight <= 5.0f);
        if (vx.weight == 5.0f) {
            at_max++;
            assert_int_equal(set.rgb[3 * i], 200);
            assert_int_equal(set.rgb[3 * i + 1], 100);
            assert_int_equal(set.rgb[3 * i + 2], 10);
        }
    }
    /* All voxels of the band seen by all 8 frames are at the clamp. */
    assert_true(at_max > 10000);

    /* Past the clamp, a new observation moves the mean by 1/(w+1). */
    {
        float before = 0.0f, after = 0.0f;
        size_t probe_idx = SIZE_MAX;
        tsdf_block_set s2;
        for (size_t i = 0; i < set.count * TSDF_BLOCK_VOXELS && probe_idx == SIZE_MAX; i++)
            if (vox_at(&set, i).weight == 5.0f && fabsf(vox_at(&set, i).sdf_m) < 0.03f)
                probe_idx = i;
        assert_true(probe_idx != SIZE_MAX);
        before = vox_at(&set, probe_idx).sdf_m;
        plane_frame(&f, depth, 1.01f, 0.0f, 0.0f, 0.0f);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
        tsdf_block_set_init(&s2);
        assert_int_equal(tsdf_volume_export_blocks(v, &s2), TSDF_OK);
        assert_int_equal(s2.count, set.count);
        after = vox_at(&s2, probe_idx).sdf_m;
        assert_near(after, (before * 5.0f + (before + 0.01f)) / 6.0f, 1e-5f);
        assert_true(vox_at(&s2, probe_idx).weight == 5.0f);
        tsdf_block_set_fini(&s2);
    }
    tsdf_block_set_fini(&set);
    tsdf_volume_destroy(v);
    free(depth);
    free(rgb);
}

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
static tsdf_volume *wall_volume(void)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *v = make_volume(0.01f, 64.0f, 0, 1024);
    tsdf_frame f;
    assert_non_null(depth);
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    free(depth);
    return v;
}

/* Issue 8: a raycast of 16x16 pixels with fx = fy = 0.01 marched every ray
 * thousands of metres (and could stall on float steps for hours), wedging
 * the map. It must come back at once: refused as bad intrinsics, or
 * bounded by the ray-length caps. So must a legal but very wide camera
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
    assert_true(dt < 2.0);

    /* 160 degrees across: fx = 7.5 / tan(80 degrees). */
    rp.K.fx = rp.K.fy = 7.5f / tanf(80.0f * 3.14159265f / 180.0f);
    rp.max_depth_m = TSDF_MAX_RAY_M;
    t0 = mono_s();
    rc = tsdf_volume_raycast(v, &rp, &ro);
    dt = mono_s() - t0;
    print_message("16x16 raycast of 160 degrees to %g m: %s in %.3f s\n", (double)TSDF_MAX_RAY_M,
                  tsdf_errname(rc), dt);
    assert_int_equal(rc, TSDF_OK);
    assert_true(dt < 2.0);
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

/* The CPU raycast polls params.cancel every TSDF_RAYCAST_CANCEL_PIXELS
 * pixels and stops with TSDF_ETIMEOUT once it says so. */
static void test_raycast_cancel(void **state)
{
    float *cast = malloc(W * H * sizeof(float));
    tsdf_volume *v = wall_volume();
    tsdf_raycast_params rp;
    tsdf_raycast_output ro = {cast, NULL, NULL};
    cancel_probe probe = {0, 0};
    const int per_row = (W + TSDF_RAYCAST_CANCEL_PIXELS - 1) / TSDF_RAYCAST_CANCEL_PIXELS;
    (void)state;

    assert_non_null(cast);
    origin_raycast(&rp);
    rp.cancel = probe_cancel;
    rp.cancel_arg = &probe;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_OK);
    assert_int_equal(probe.calls, per_row * H);
    assert_true(fabsf(cast[(H / 2) * W + W / 2] - 1.0f) <= 0.01f);

    probe.calls = 0;
    probe.cancel_at = 3;
    assert_int_equal(tsdf_volume_raycast(v, &rp, &ro), TSDF_ETIMEOUT);
    assert_int_equal(probe.calls, 3);
    tsdf_volume_destroy(v);
    free(cast);
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

/* ---- reset, export, import ------------------------------------------------ */

static void test_reset(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *v = make_volume(0.01f, 64.0f, 0, 64);
    tsdf_volume_stats st;
    tsdf_frame f;
    (void)state;
    plane_frame(&f, depth, 1.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    st = get_stats(v);
    assert_true(st.blocks_allocated > 0);
    assert_true(st.capacity_slots > 64);
    assert_int_equal(tsdf_volume_reset(v), TSDF_OK);
    st = get_stats(v);
    assert_int_equal(st.blocks_allocated, 0);
    assert_int_equal(st.capacity_slots, 64);
    assert_int_equal(st.version, 2);
    assert_int_equal(st.frames_integrated, 1);
    assert_true(st.growth_events > 0);
    /* An empty volume renders nothing and meshes nothing. */
    {
        tsdf_mesh m;
        tsdf_mesh_init(&m);
        assert_int_equal(tsdf_volume_mesh(v, NULL, &m), TSDF_OK);
        assert_int_equal(m.vertex_count, 0);
        assert_int_equal(m.triangle_count, 0);
        tsdf_mesh_fini(&m);
    }
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    assert_true(get_stats(v).blocks_allocated > 0);
    tsdf_volume_destroy(v);
    free(depth);
}

static void test_export_import_roundtrip(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *a = make_volume(0.01f, 64.0f, 0, 1024), *b = make_volume(0.01f, 64.0f, 0, 16);
    tsdf_block_set sa, sb, bad;
    tsdf_frame f;
    (void)state;
    for (int i = 0; i < 3; i++) {
        plane_frame(&f, depth, 1.0f, 0.02f * (float)i, 0.0f, 0.0f);
        assert_int_equal(tsdf_volume_integrate(a, &f), TSDF_OK);
    }
    /* b holds something else first; import replaces it. */
    plane_frame(&f, depth, 2.0f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(b, &f), TSDF_OK);

    tsdf_block_set_init(&sa);
    tsdf_block_set_init(&sb);
    tsdf_block_set_init(&bad);
    assert_int_equal(tsdf_volume_export_blocks(a, &sa), TSDF_OK);
    assert_int_equal(tsdf_volume_import_blocks(b, &sa), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(b, &sb), TSDF_OK);
    assert_sets_equal(&sa, &sb);
    assert_int_equal(get_stats(b).blocks_allocated, sa.count);
    /* One above the larger of b's version (1) and the exporter's (3). */
    assert_int_equal(sa.version, 3);
    assert_int_equal(get_stats(b).version, 4);

    /* Invalid sets are refused and leave b as it was. */
    {
        tsdf_block_set cur;
        /* f32 copies, so that any value can be written into them. */
        assert_int_equal(tsdf_block_set_alloc(&bad, sa.count, TSDF_LAYOUT_F32, 0.0f, 0), TSDF_OK);

#define RESET_BAD()                                                                                \
    do {                                                                                           \
        memcpy(bad.coords, sa.coords, 3 * sa.count * sizeof(int32_t));                             \
        for (size_t i_ = 0; i_ < sa.count * TSDF_BLOCK_VOXELS; i_++)                               \
            vox_put(&bad, i_, vox_at(&sa, i_));                                                    \
    } while (0)
        RESET_BAD();
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_OK);
        RESET_BAD();
        memcpy(&bad.coords[3], &bad.coords[0], 3 * sizeof(int32_t)); /* duplicate */
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
        RESET_BAD();
        bad.coords[4] = TSDF_BLOCK_COORD_MAX + 1;
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
        RESET_BAD();
        vox_put(&bad, 77, (tsdf_vox){NAN, 1.0f});
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
        RESET_BAD();
        vox_put(&bad, 78, (tsdf_vox){1.0f, 1.0f}); /* beyond the 4 cm band */
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
        RESET_BAD();
        vox_put(&bad, 79, (tsdf_vox){0.0f, 65.0f});
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
        RESET_BAD();
        vox_put(&bad, 80, (tsdf_vox){0.0f, -1.0f});
        assert_int_equal(tsdf_volume_import_blocks(b, &bad), TSDF_EINVAL);
#undef RESET_BAD
        tsdf_block_set_init(&cur);
        assert_int_equal(tsdf_volume_export_blocks(b, &cur), TSDF_OK);
        assert_sets_equal(&sa, &cur);
        tsdf_block_set_fini(&cur);
    }

    /* An empty set empties the volume. */
    {
        tsdf_block_set empty;
        tsdf_block_set_init(&empty);
        assert_int_equal(tsdf_volume_import_blocks(b, &empty), TSDF_OK);
        assert_int_equal(get_stats(b).blocks_allocated, 0);
    }
    tsdf_block_set_fini(&sa);
    tsdf_block_set_fini(&sb);
    tsdf_block_set_fini(&bad);
    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
    free(depth);
}

/* A restore into a fresh volume (a restarted daemon) started the version
 * at 1 again while clients still held the snapshot's versions, so `mesh
 * since=V` missed every change until the version climbed past V. The
 * importer continues above the exporter's version instead. */
static void test_import_continues_versions(void **state)
{
    float *depth = malloc(W * H * sizeof(float));
    tsdf_volume *a = make_volume(0.01f, 64.0f, 0, 1024), *b = make_volume(0.01f, 64.0f, 0, 16);
    tsdf_block_set sa, sb;
    tsdf_frame f;
    tsdf_mesh m;
    (void)state;
    assert_non_null(depth);
    for (int i = 0; i < 5; i++) {
        plane_frame(&f, depth, 1.0f, 0.02f * (float)i, 0.0f, 0.0f);
        assert_int_equal(tsdf_volume_integrate(a, &f), TSDF_OK);
    }
    uint64_t seen = get_stats(a).version; /* what a client of `a` last saw */
    assert_int_equal(seen, 5);
    tsdf_block_set_init(&sa);
    tsdf_block_set_init(&sb);
    assert_int_equal(tsdf_volume_export_blocks(a, &sa), TSDF_OK);
    assert_int_equal(sa.version, seen);
    assert_int_equal(tsdf_volume_import_blocks(b, &sa), TSDF_OK);
    uint64_t restored = get_stats(b).version;
    assert_true(restored > seen);
    assert_int_equal(tsdf_volume_export_blocks(b, &sb), TSDF_OK);
    for (size_t i = 0; i < sb.count; i++)
        assert_int_equal(sb.versions[i], restored);

    /* A frame after the restore is found by `since` the client's version. */
    plane_frame(&f, depth, 1.5f, 0.3f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(b, &f), TSDF_OK);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = restored;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(b, &mp, &m), TSDF_OK);
    assert_true(m.triangle_count > 0);
    tsdf_mesh_fini(&m);
    tsdf_block_set_fini(&sa);
    tsdf_block_set_fini(&sb);
    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
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
        cmocka_unit_test(test_backend_names_and_params),
        cmocka_unit_test(test_block_dda_exact),
        cmocka_unit_test(test_projection_and_coords),
        cmocka_unit_test(test_fusion_plane_band_accuracy),
        cmocka_unit_test(test_u16_equals_f32),
        cmocka_unit_test(test_weight_clamp_and_color),
        cmocka_unit_test(test_raycast_plane),
        cmocka_unit_test(test_raycast_extreme_rays_are_bounded),
        cmocka_unit_test(test_raycast_cancel),
        cmocka_unit_test(test_bad_frames_distinct_codes),
        cmocka_unit_test(test_memory_cap),
        cmocka_unit_test(test_set_memory_cap),
        cmocka_unit_test(test_growth_keeps_blocks),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_export_import_roundtrip),
        cmocka_unit_test(test_import_continues_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
