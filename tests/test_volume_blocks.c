/*
 * test_volume_blocks.c - reset, and blocks copied out of a volume and into
 * another (export / import): bit-identical round trips, and
 * versions that go on above an imported set's.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "volume_testlib.h"
#include "tsdf_math.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_export_import_roundtrip),
        cmocka_unit_test(test_import_continues_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
