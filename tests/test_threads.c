/*
 * test_threads.c - the CPU backend gives the same volume, mesh and raycast,
 * bit for bit, whatever its thread count (tsdf_volume_params.cpu_threads):
 * 1 against 2, 3 and 7 threads (more threads than this machine has cores
 * is the point of 7), on an analytic scene in both layouts with colour, and
 * on the first 7-Scenes frames when the data is there.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "tsdf_dataset.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "volume_testlib.h"

static const uint32_t thread_counts[] = {1, 2, 3, 7};
#define N_COUNTS (sizeof thread_counts / sizeof thread_counts[0])

static tsdf_volume *volume_with(uint32_t threads, tsdf_layout layout)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.layout = layout;
    p.cpu_threads = threads;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    return v;
}

static void assert_meshes_equal(const tsdf_mesh *a, const tsdf_mesh *b)
{
    assert_int_equal(a->vertex_count, b->vertex_count);
    assert_int_equal(a->triangle_count, b->triangle_count);
    assert_int_equal(a->block_count, b->block_count);
    assert_true(a->vertex_count > 0);
    assert_memory_equal(a->positions, b->positions, 3 * a->vertex_count * sizeof(float));
    assert_memory_equal(a->normals, b->normals, 3 * a->vertex_count * sizeof(float));
    assert_memory_equal(a->indices, b->indices, 3 * a->triangle_count * sizeof(uint32_t));
    assert_int_equal(a->colors != NULL, b->colors != NULL);
    if (a->colors != NULL)
        assert_memory_equal(a->colors, b->colors, 3 * a->vertex_count);
    if (a->block_count != 0) {
        assert_memory_equal(a->block_coords, b->block_coords, 3 * a->block_count * sizeof(int32_t));
        assert_memory_equal(a->block_vertex_start, b->block_vertex_start,
                            (a->block_count + 1) * sizeof(uint32_t));
        assert_memory_equal(a->block_triangle_start, b->block_triangle_start,
                            (a->block_count + 1) * sizeof(uint32_t));
    }
}

typedef struct {
    float *depth, *normals;
    uint8_t *rgb;
    size_t hits;
} ray_image;

static void raycast(tsdf_volume *v, const tsdf_raycast_params *rp, ray_image *img, int with_rgb)
{
    size_t n = (size_t)rp->width * rp->height;
    img->depth = malloc(n * sizeof(float));
    img->normals = malloc(3 * n * sizeof(float));
    img->rgb = with_rgb ? malloc(3 * n) : NULL;
    assert_non_null(img->depth);
    assert_non_null(img->normals);
    tsdf_raycast_output out = {img->depth, img->normals, img->rgb};
    assert_int_equal(tsdf_volume_raycast(v, rp, &out), TSDF_OK);
    img->hits = 0;
    for (size_t i = 0; i < n; i++)
        img->hits += isfinite(img->depth[i]);
}

static void assert_images_equal(const ray_image *a, const ray_image *b, size_t n)
{
    assert_int_equal(a->hits, b->hits);
    assert_memory_equal(a->depth, b->depth, n * sizeof(float));
    assert_memory_equal(a->normals, b->normals, 3 * n * sizeof(float));
    if (a->rgb != NULL)
        assert_memory_equal(a->rgb, b->rgb, 3 * n);
}

static void image_fini(ray_image *img)
{
    free(img->depth);
    free(img->normals);
    free(img->rgb);
}

/* Everything a volume gives, compared against the one-thread volume. */
static void assert_volumes_equal(tsdf_volume *ref, tsdf_volume *v, const tsdf_raycast_params *rp,
                                 int with_rgb)
{
    tsdf_block_set a, b;
    tsdf_mesh ma, mb;
    tsdf_mesh_params by_block;
    ray_image ia, ib;
    tsdf_volume_stats sa = get_stats(ref), sb = get_stats(v);

    assert_int_equal(sa.blocks_allocated, sb.blocks_allocated);
    assert_int_equal(sa.pool_capacity_blocks, sb.pool_capacity_blocks);
    assert_int_equal(sa.capacity_slots, sb.capacity_slots);
    assert_int_equal(sa.version, sb.version);
    tsdf_block_set_init(&a);
    tsdf_block_set_init(&b);
    assert_int_equal(tsdf_volume_export_blocks(ref, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(v, &b), TSDF_OK);
    assert_true(a.count > 0);
    assert_sets_equal(&a, &b);
    assert_memory_equal(a.versions, b.versions, a.count * sizeof(uint64_t));
    tsdf_block_set_fini(&a);
    tsdf_block_set_fini(&b);

    tsdf_mesh_init(&ma);
    tsdf_mesh_init(&mb);
    assert_int_equal(tsdf_volume_mesh(ref, NULL, &ma), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(v, NULL, &mb), TSDF_OK);
    assert_meshes_equal(&ma, &mb);
    memset(&by_block, 0, sizeof by_block);
    by_block.by_block = 1;
    assert_int_equal(tsdf_volume_mesh(ref, &by_block, &ma), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(v, &by_block, &mb), TSDF_OK);
    assert_meshes_equal(&ma, &mb);
    tsdf_mesh_fini(&ma);
    tsdf_mesh_fini(&mb);

    raycast(ref, rp, &ia, with_rgb);
    raycast(v, rp, &ib, with_rgb);
    assert_true(ia.hits > 0);
    assert_images_equal(&ia, &ib, (size_t)rp->width * rp->height);
    image_fini(&ia);
    image_fini(&ib);
}

static void ray_params(tsdf_raycast_params *rp, uint32_t w, uint32_t h, const tsdf_intrinsics *K,
                       float min_m, float max_m)
{
    memset(rp, 0, sizeof *rp);
    rp->width = w;
    rp->height = h;
    rp->K = *K;
    rp->min_depth_m = min_m;
    rp->max_depth_m = max_m;
}

static void synth_identical(tsdf_layout layout)
{
    tsdf_synth_sequence seq;
    tsdf_volume *vols[N_COUNTS];
    assert_int_equal(tsdf_synth_sequence_init(&seq, "demo"), TSDF_OK);
    size_t n = (size_t)seq.width * seq.height;
    float *depth = malloc(n * sizeof(float));
    uint8_t *rgb = malloc(3 * n);
    assert_non_null(depth);
    assert_non_null(rgb);
    for (size_t t = 0; t < N_COUNTS; t++)
        vols[t] = volume_with(thread_counts[t], layout);
    /* A third of the sequence is plenty to make every path run. */
    for (uint32_t i = 0; i < seq.frame_count; i += 3) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f), TSDF_OK);
        for (size_t t = 0; t < N_COUNTS; t++)
            assert_int_equal(tsdf_volume_integrate(vols[t], &f), TSDF_OK);
    }
    tsdf_raycast_params rp;
    ray_params(&rp, seq.width, seq.height, &seq.K, seq.min_depth_m, seq.max_depth_m);
    assert_int_equal(tsdf_synth_sequence_pose(&seq, 7, rp.T_world_cam), TSDF_OK);
    for (size_t t = 1; t < N_COUNTS; t++)
        assert_volumes_equal(vols[0], vols[t], &rp, 1);
    for (size_t t = 0; t < N_COUNTS; t++)
        tsdf_volume_destroy(vols[t]);
    free(depth);
    free(rgb);
}

static void test_synth_s16(void **state)
{
    (void)state;
    synth_identical(TSDF_LAYOUT_S16);
}

static void test_synth_f32(void **state)
{
    (void)state;
    synth_identical(TSDF_LAYOUT_F32);
}

/* The first frames of the 7-Scenes kitchen at 1 cm: real depth, with its
 * holes and edges. */
static void test_kitchen(void **state)
{
    uint32_t width, height, frame_count;
    tsdf_volume *vols[N_COUNTS];
    (void)state;
    tsdf_dataset *ds = open_kitchen_or_skip(&width, &height, &frame_count);
    size_t n = (size_t)width * height;
    uint16_t *depth = malloc(n * sizeof(uint16_t));
    assert_non_null(depth);
    for (size_t t = 0; t < N_COUNTS; t++)
        vols[t] = volume_with(thread_counts[t], TSDF_LAYOUT_S16);
    tsdf_dataset_frame meta;
    for (uint32_t i = 0; i < 40 && i < frame_count; i += 2) {
        tsdf_frame f;
        assert_int_equal(tsdf_dataset_load(ds, i, depth, n, &meta), TSDF_OK);
        tsdf_dataset_frame_to_tsdf(&meta, depth, 0.1f, 4.0f, &f);
        for (size_t t = 0; t < N_COUNTS; t++)
            assert_int_equal(tsdf_volume_integrate(vols[t], &f), TSDF_OK);
    }
    tsdf_raycast_params rp;
    ray_params(&rp, width, height, &meta.K, 0.1f, 4.0f);
    memcpy(rp.T_world_cam, meta.T_world_cam, sizeof rp.T_world_cam);
    for (size_t t = 1; t < N_COUNTS; t++)
        assert_volumes_equal(vols[0], vols[t], &rp, 0);
    for (size_t t = 0; t < N_COUNTS; t++)
        tsdf_volume_destroy(vols[t]);
    free(depth);
    tsdf_dataset_close(ds);
}

/* The count is checked with the other parameters: above the bound is a
 * bad parameter, not a silently smaller pool. */
static void test_thread_param(void **state)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    (void)state;
    tsdf_volume_params_default(&p);
    assert_int_equal(p.cpu_threads, 0);
    p.backend = TSDF_BACKEND_CPU;
    p.cpu_threads = TSDF_MAX_CPU_THREADS + 1;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_EBAD_PARAMS);
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_EBAD_PARAMS);
    assert_null(v);
    p.cpu_threads = TSDF_MAX_CPU_THREADS;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_param),
        cmocka_unit_test(test_synth_s16),
        cmocka_unit_test(test_synth_f32),
        cmocka_unit_test(test_kitchen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
