/*
 * test_view_mesh.c - the live view's binary form of a mesh by block
 * (daemon/view_mesh.c): the layout a browser reads (read back here by a
 * decoder written from the header's description), removed blocks and
 * flags, the size limit, and a real by-block mesh of the CPU engine,
 * whole and since a version.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "view_mesh.h"

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static float get_f32(const uint8_t *p)
{
    uint32_t v = get_u32(p);
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

static size_t pad4(size_t n)
{
    return (n + 3u) & ~(size_t)3u;
}

/* What a decoder sees of one encoded mesh. */
typedef struct {
    uint64_t version, since;
    uint32_t flags, blocks, removed;
    size_t triangles, vertices;
    int32_t first_removed[3];
    int32_t first_block[3];
    float first_position[3];
    int8_t first_normal[3];
} decoded;

/* Walks buf as view_mesh.h describes it and checks every section against
 * the mesh it came from: positions, normals, colours and triangles. */
static decoded decode_and_check(const uint8_t *buf, size_t len, const tsdf_mesh *m)
{
    decoded d;
    memset(&d, 0, sizeof d);
    assert_true(len >= VIEW_MESH_HEADER_BYTES);
    assert_memory_equal(buf, "TSMB", 4);
    assert_int_equal(get_u32(buf + 4), VIEW_MESH_FORMAT);
    d.version = get_u64(buf + 8);
    d.since = get_u64(buf + 16);
    d.flags = get_u32(buf + 24);
    d.blocks = get_u32(buf + 28);
    d.removed = get_u32(buf + 32);
    assert_int_equal(get_u32(buf + 36), 0);
    assert_int_equal(d.blocks, m->block_count);
    assert_int_equal(d.removed, m->removed_count);
    const uint8_t *p = buf + VIEW_MESH_HEADER_BYTES;
    for (uint32_t i = 0; i < 3 * d.removed; i++, p += 4) {
        assert_int_equal((int32_t)get_u32(p), m->removed_coords[i]);
        if (i < 3)
            d.first_removed[i] = (int32_t)get_u32(p);
    }
    int colors = (d.flags & VIEW_MESH_COLORS) != 0, index32 = (d.flags & VIEW_MESH_INDEX32) != 0;
    assert_int_equal(colors, m->colors != NULL);
    for (uint32_t b = 0; b < d.blocks; b++) {
        uint32_t v0 = m->block_vertex_start[b], t0 = m->block_triangle_start[b];
        for (int k = 0; k < 3; k++)
            assert_int_equal((int32_t)get_u32(p + 4 * k), m->block_coords[3 * b + k]);
        if (b == 0)
            for (int k = 0; k < 3; k++)
                d.first_block[k] = (int32_t)get_u32(p + 4 * k);
        uint32_t nv = get_u32(p + 12), nt = get_u32(p + 16);
        assert_int_equal(nv, m->block_vertex_start[b + 1] - v0);
        assert_int_equal(nt, m->block_triangle_start[b + 1] - t0);
        p += 20;
        for (size_t i = 0; i < 3u * nv; i++)
            assert_true(get_f32(p + 4 * i) == m->positions[3 * v0 + i]);
        if (b == 0 && nv > 0)
            for (int k = 0; k < 3; k++)
                d.first_position[k] = get_f32(p + 4 * k);
        p += 12u * nv;
        for (size_t i = 0; i < 3u * nv; i++)
            assert_true(fabsf((float)(int8_t)p[i] / 127.0f - m->normals[3 * v0 + i]) <= 0.01f);
        if (b == 0 && nv > 0)
            memcpy(d.first_normal, p, 3);
        p += pad4(3u * nv);
        if (colors) {
            assert_memory_equal(p, m->colors + 3 * v0, 3u * nv);
            p += pad4(3u * nv);
        }
        for (size_t i = 0; i < 3u * nt; i++) {
            uint32_t idx = index32 ? get_u32(p + 4 * i) : (uint32_t)(p[2 * i] | p[2 * i + 1] << 8);
            assert_true(idx < nv);
            assert_int_equal(idx + v0, m->indices[3 * t0 + i]);
        }
        p += pad4(3u * nt * (index32 ? 4u : 2u));
        d.triangles += nt;
        d.vertices += nv;
    }
    assert_int_equal((size_t)(p - buf), len);
    return d;
}

/* Two parts by hand: one triangle in block (1,-2,3), none in (0,0,0), and
 * a removed block. */
static void make_two_parts(tsdf_mesh *m, int with_colors)
{
    static float pos[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f};
    static float nrm[] = {0, 0, 1, 0, 1, 0, -1, 0, 0};
    static uint8_t col[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static uint32_t idx[] = {0, 1, 2};
    static int32_t coords[] = {1, -2, 3, 0, 0, 0};
    static uint32_t vstart[] = {0, 3, 3}, tstart[] = {0, 1, 1};
    static int32_t removed[] = {-5, 6, -7};
    tsdf_mesh_init(m);
    m->vertex_count = 3;
    m->triangle_count = 1;
    m->positions = pos;
    m->normals = nrm;
    m->colors = with_colors ? col : NULL;
    m->indices = idx;
    m->block_count = 2;
    m->block_coords = coords;
    m->block_vertex_start = vstart;
    m->block_triangle_start = tstart;
    m->removed_count = 1;
    m->removed_coords = removed;
    m->full = 0;
}

static void test_layout_of_two_parts(void **state)
{
    for (int with_colors = 0; with_colors <= 1; with_colors++) {
        tsdf_mesh m;
        make_two_parts(&m, with_colors);
        uint8_t *buf = NULL;
        size_t len = 0;
        assert_int_equal(view_mesh_encode(&m, 42, 40, 1 << 20, &buf, &len), TSDF_OK);
        assert_int_equal(len, view_mesh_encoded_bytes(&m));
        /* Header 40, removed 12; part one: head 20, positions 36, normals
         * 9 padded to 12, (colours 12,) indices 6 padded to 8; part two:
         * its head alone. */
        assert_int_equal(len, 40u + 12u + 20u + 36u + 12u + (with_colors ? 12u : 0u) + 8u + 20u);
        decoded d = decode_and_check(buf, len, &m);
        assert_int_equal(d.version, 42);
        assert_int_equal(d.since, 40);
        assert_int_equal(d.flags, with_colors ? VIEW_MESH_COLORS : 0u);
        assert_int_equal(d.triangles, 1);
        assert_int_equal(d.first_removed[0], -5);
        assert_int_equal(d.first_removed[2], -7);
        assert_int_equal(d.first_block[1], -2);
        assert_true(d.first_position[0] == 0.1f);
        assert_int_equal(d.first_normal[2], 127);
        free(buf);
    }
}

static void test_full_flag_limit_and_bad_meshes(void **state)
{
    tsdf_mesh m;
    make_two_parts(&m, 0);
    m.full = 1;
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(view_mesh_encode(&m, 7, 3, 1 << 20, &buf, &len), TSDF_OK);
    assert_int_equal(get_u32(buf + 24), VIEW_MESH_FULL);
    free(buf);

    /* One byte short of the limit: refused, nothing allocated. */
    size_t need = view_mesh_encoded_bytes(&m);
    assert_int_equal(view_mesh_encode(&m, 7, 3, need - 1, &buf, &len), TSDF_ETOO_LARGE);
    assert_null(buf);
    assert_int_equal(len, 0);

    /* An index outside its part is a broken mesh, not bytes to send. */
    uint32_t bad[] = {0, 1, 3};
    m.indices = bad;
    assert_int_equal(view_mesh_encode(&m, 7, 3, 1 << 20, &buf, &len), TSDF_EINVAL);
    assert_null(buf);

    /* Triangles without parts: not a by-block mesh. */
    make_two_parts(&m, 0);
    m.block_count = 0;
    assert_int_equal(view_mesh_encode(&m, 7, 3, 1 << 20, &buf, &len), TSDF_EINVAL);

    /* An empty map is a valid, empty mesh. */
    tsdf_mesh empty;
    tsdf_mesh_init(&empty);
    assert_int_equal(view_mesh_encode(&empty, 0, 0, 1 << 20, &buf, &len), TSDF_OK);
    assert_int_equal(len, VIEW_MESH_HEADER_BYTES);
    free(buf);
}

/* The engine's own by-block meshes, whole and since a version, with
 * colour: every part and triangle comes through. */
static void test_engine_mesh_by_block(void **state)
{
    tsdf_synth_sequence seq;
    tsdf_volume_params p;
    tsdf_volume *vol = NULL;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "sphere"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 80, 60), TSDF_OK);
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = 0.02f;
    assert_int_equal(tsdf_volume_create(&p, &vol), TSDF_OK);
    float *depth = malloc(80 * 60 * sizeof(float));
    uint8_t *rgb = malloc(80 * 60 * 3);
    assert_non_null(depth);
    assert_non_null(rgb);
    uint64_t half_version = 0;
    for (uint32_t i = 0; i < 12; i++) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(vol, &f), TSDF_OK);
        if (i == 5) {
            tsdf_volume_stats st;
            assert_int_equal(tsdf_volume_get_stats(vol, &st), TSDF_OK);
            half_version = st.version;
        }
    }
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.by_block = 1;
    tsdf_mesh whole, since;
    tsdf_mesh_init(&whole);
    tsdf_mesh_init(&since);
    assert_int_equal(tsdf_volume_mesh(vol, &mp, &whole), TSDF_OK);
    mp.since_version = half_version;
    assert_int_equal(tsdf_volume_mesh(vol, &mp, &since), TSDF_OK);
    assert_true(whole.triangle_count > 100);
    assert_true(since.block_count > 0 && since.block_count <= whole.block_count);

    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(view_mesh_encode(&whole, 99, 0, 64u << 20, &buf, &len), TSDF_OK);
    decoded d = decode_and_check(buf, len, &whole);
    assert_int_equal(d.triangles, whole.triangle_count);
    assert_int_equal(d.vertices, whole.vertex_count);
    assert_int_equal(d.flags & VIEW_MESH_COLORS, VIEW_MESH_COLORS);
    free(buf);
    assert_int_equal(view_mesh_encode(&since, 99, half_version, 64u << 20, &buf, &len), TSDF_OK);
    d = decode_and_check(buf, len, &since);
    assert_int_equal(d.since, half_version);
    assert_int_equal(d.flags & VIEW_MESH_FULL, 0);
    free(buf);

    tsdf_mesh_fini(&whole);
    tsdf_mesh_fini(&since);
    tsdf_volume_destroy(vol);
    free(depth);
    free(rgb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_of_two_parts),
        cmocka_unit_test(test_full_flag_limit_and_bad_meshes),
        cmocka_unit_test(test_engine_mesh_by_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
