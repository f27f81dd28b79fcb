/*
 * test_volume.c - the volume API on the CPU reference backend: names and
 * parameters, the shared per-voxel maths of gpu/shared/tsdf_math.h (block
 * walk, projection), fusion accuracy, u16 against f32 depth, weights and
 * colour, host memory for frames. The raycast, the argument checks and memory caps, and reset /
 * export / import have files of their own (test_volume_*.c).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "volume_testlib.h"
#include "tsdf_band.h"
#include "tsdf_math.h"
#include "tsdf_synth.h"

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

/* ---- the integration against the per-voxel reference ----------------------- */

static uint64_t set_key(const tsdf_block_set *s, size_t i)
{
    return tsdf_block_key(s->coords[3 * i], s->coords[3 * i + 1], s->coords[3 * i + 2]);
}

/* The frame that turned `before` into `after` (exports, sorted by key),
 * voxel by voxel: every block the frame changed (its version is the
 * volume's) equals its old voxels (none for a new block) updated by
 * tsdf_integrate_voxel, the shared per-voxel reference that the CPU's
 * factored, vectorised update must reproduce bit for bit; every other
 * block is as it was. Returns the voxels the frame changed. */
static size_t check_frame_voxels(const tsdf_block_set *before, const tsdf_block_set *after,
                                 const tsdf_frame *f, float voxel, float trunc_m, float max_weight)
{
    const size_t bb = tsdf_block_set_geom_bytes(after) / after->count;
    const tsdf_quant q = tsdf_quant_for(trunc_m);
    float T_cam_world[16];
    tsdf_rigid_inverse(f->T_world_cam, T_cam_world);
    uint8_t *ref = malloc(bb), ref_rgb[TSDF_BLOCK_RGB_BYTES];
    assert_non_null(ref);
    assert_int_equal(after->rgb != NULL, f->rgb != NULL);
    size_t j = 0, changed = 0;
    for (size_t i = 0; i < after->count; i++) {
        const uint64_t key = set_key(after, i);
        while (j < before->count && set_key(before, j) < key)
            j++;
        const int had = j < before->count && set_key(before, j) == key;
        if (had)
            memcpy(ref, (const uint8_t *)before->geom + j * bb, bb);
        else
            memset(ref, 0, bb);
        if (had && before->rgb != NULL)
            memcpy(ref_rgb, before->rgb + j * TSDF_BLOCK_RGB_BYTES, TSDF_BLOCK_RGB_BYTES);
        else
            memset(ref_rgb, 0, sizeof ref_rgb);
        if (after->versions[i] == after->version) {
            for (int k = 0; k < TSDF_BLOCK_VOXELS; k++) {
                int x, y, z;
                float p[3];
                tsdf_voxel_index_unpack(k, &x, &y, &z);
                tsdf_block_voxel_center(&after->coords[3 * i], x, y, z, voxel, p);
                changed += (size_t)tsdf_integrate_voxel(after->layout, ref,
                                                        f->rgb != NULL ? ref_rgb : NULL, (size_t)k,
                                                        p, T_cam_world, f, trunc_m, max_weight, q);
            }
        } else {
            assert_true(had);
        }
        assert_memory_equal(ref, (const uint8_t *)after->geom + i * bb, bb);
        if (after->rgb != NULL)
            assert_memory_equal(ref_rgb, after->rgb + i * TSDF_BLOCK_RGB_BYTES,
                                TSDF_BLOCK_RGB_BYTES);
    }
    free(ref);
    return changed;
}

/* The CPU backend's integration (its bands of rows, its four-pixel depth
 * preparation and four-voxel s16 update) against tsdf_integrate_voxel, on
 * the "room" sequence (depth edges at its objects): u16 and f32 depth, both
 * layouts, with and without colour, a weight cap the frames reach, and
 * frames three columns narrower than the camera's, so that no row is a
 * multiple of four. */
static void test_integrate_is_the_voxel_reference(void **state)
{
    (void)state;
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    const uint32_t W0 = seq.width, H0 = seq.height;
    float *full = malloc((size_t)W0 * H0 * sizeof(float));
    float *depth = malloc((size_t)W0 * H0 * sizeof(float));
    uint16_t *mm = malloc((size_t)W0 * H0 * sizeof(uint16_t));
    uint8_t *full_rgb = malloc((size_t)W0 * H0 * 3), *rgb = malloc((size_t)W0 * H0 * 3);
    assert_non_null(full);
    assert_non_null(depth);
    assert_non_null(mm);
    assert_non_null(full_rgb);
    assert_non_null(rgb);
    /* Variants: bit 0 the f32 layout, bit 1 f32 depth, bit 2 colour. */
    for (int variant = 0; variant < 8; variant++) {
        const tsdf_layout layout = variant & 1 ? TSDF_LAYOUT_F32 : TSDF_LAYOUT_S16;
        const int u16 = !(variant & 2), color = variant & 4;
        const float voxel = 0.02f, max_weight = 3.0f;
        tsdf_volume *v = make_volume_as(voxel, max_weight, layout);
        const float trunc_m = tsdf_volume_get_params(v)->trunc_vox * voxel;
        size_t changed = 0, edges = 0;
        tsdf_block_set sets[2], *before = &sets[0], *after = &sets[1];
        tsdf_block_set_init(before);
        tsdf_block_set_init(after);
        assert_int_equal(tsdf_volume_export_blocks(v, before), TSDF_OK);
        for (uint32_t i = 0; i < 6; i++) {
            tsdf_frame f;
            assert_int_equal(
                tsdf_synth_sequence_frame(&seq, i * 3, full, color ? full_rgb : NULL, &f), TSDF_OK);
            f.width = W0 - 3;
            for (uint32_t y = 0; y < H0; y++) {
                memcpy(depth + (size_t)y * f.width, full + (size_t)y * W0, f.width * sizeof(float));
                memcpy(rgb + (size_t)y * f.width * 3, full_rgb + (size_t)y * W0 * 3,
                       (size_t)f.width * 3);
            }
            f.depth = depth;
            f.rgb = color ? rgb : NULL;
            if (u16) {
                for (size_t k = 0; k < (size_t)f.width * H0; k++)
                    mm[k] = depth[k] > 0.0f && depth[k] < 65.0f
                                ? (uint16_t)lrintf(depth[k] * 1000.0f)
                                : 0;
                f.depth_format = TSDF_DEPTH_U16;
                f.depth = mm;
                f.depth_scale = 0.001f;
            }
            for (uint32_t y = 0; y < H0; y++)
                for (uint32_t x = 0; x < f.width; x++) {
                    const float d =
                        tsdf_depth_sample_m(f.depth_format, f.depth, y * f.width + x, f.depth_scale,
                                            f.min_depth_m, f.max_depth_m);
                    edges += d > 0.0f && tsdf_depth_usable_m(&f, x, y, trunc_m) == 0.0f;
                }
            assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
            assert_int_equal(tsdf_volume_export_blocks(v, after), TSDF_OK);
            changed += check_frame_voxels(before, after, &f, voxel, trunc_m, max_weight);
            /* This frame's result is the next one's starting point. */
            tsdf_block_set *t = before;
            before = after;
            after = t;
        }
        printf("[%s %s%s] 6 frames %ux%u: %zu voxel updates equal to tsdf_integrate_voxel's, "
               "%zu pixels on depth edges\n",
               u16 ? "u16" : "f32", layout == TSDF_LAYOUT_S16 ? "s16" : "f32", color ? " rgb" : "",
               W0 - 3, H0, changed, edges);
        assert_true(changed > 0);
        assert_true(edges > 0);
        tsdf_block_set_fini(before);
        tsdf_block_set_fini(after);
        tsdf_volume_destroy(v);
    }
    free(full);
    free(depth);
    free(mm);
    free(full_rgb);
    free(rgb);
}

/* tsdf_host_alloc and tsdf_host_register: their arguments checked, 64-byte aligned memory, and a
 * frame in it integrates as from any memory (on the CPU backend here; the
 * CUDA backend's direct upload is test_cuda_volume's). */
static void test_host_memory(void **state)
{
    void *p = (void *)1;
    (void)state;
    assert_int_equal(tsdf_host_alloc(0, &p), TSDF_EINVAL);
    assert_null(p);
    assert_int_equal(tsdf_host_alloc(16, NULL), TSDF_EINVAL);
    assert_int_equal(tsdf_host_alloc(SIZE_MAX, &p), TSDF_EINVAL);
    tsdf_host_free(NULL);
    /* tsdf_host_register: arguments checked, and without a device (this
     * program's machines in CI) it says why and locks nothing. */
    char page[64];
    assert_int_equal(tsdf_host_register(NULL, 64), TSDF_EINVAL);
    assert_int_equal(tsdf_host_register(page, 0), TSDF_EINVAL);
    if (!tsdf_cuda_available()) {
        int rc = tsdf_host_register(page, sizeof page);
        assert_true(rc == TSDF_ENOT_BUILT || rc == TSDF_ENO_GPU);
    }
    tsdf_host_unregister(NULL);

    float *depth = malloc(W * H * sizeof(float)), *pl = NULL;
    assert_non_null(depth);
    assert_int_equal(tsdf_host_alloc(W * H * sizeof(float), (void **)&pl), TSDF_OK);
    assert_int_equal((uintptr_t)pl % 64u, 0);
    tsdf_volume *a = make_volume(0.02f, 64.0f, 0, 1024), *b = make_volume(0.02f, 64.0f, 0, 1024);
    tsdf_frame f;
    plane_frame(&f, depth, 1.25f, 0.0f, 0.0f, 0.0f);
    assert_int_equal(tsdf_volume_integrate(a, &f), TSDF_OK);
    memcpy(pl, depth, W * H * sizeof(float));
    f.depth = pl;
    assert_int_equal(tsdf_volume_integrate(b, &f), TSDF_OK);
    tsdf_block_set sa, sb;
    tsdf_block_set_init(&sa);
    tsdf_block_set_init(&sb);
    assert_int_equal(tsdf_volume_export_blocks(a, &sa), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(b, &sb), TSDF_OK);
    assert_true(sa.count > 0);
    assert_sets_equal(&sa, &sb);
    tsdf_block_set_fini(&sa);
    tsdf_block_set_fini(&sb);
    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
    tsdf_host_free(pl);
    free(depth);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_names_and_params),
        cmocka_unit_test(test_block_dda_exact),
        cmocka_unit_test(test_projection_and_coords),
        cmocka_unit_test(test_fusion_plane_band_accuracy),
        cmocka_unit_test(test_u16_equals_f32),
        cmocka_unit_test(test_weight_clamp_and_color),
        cmocka_unit_test(test_host_memory),
        cmocka_unit_test(test_integrate_is_the_voxel_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
