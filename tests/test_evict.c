/*
 * test_evict.c - blocks leaving and coming back, through the volume API on
 * the CPU reference backend (gpu/volume_blocks.c, gpu/volume_mesh.c):
 *  - selections by radius, box, version and frustum take exactly the
 *    blocks their rules describe;
 *  - eviction removes those blocks, hands them out intact, frees their
 *    memory for later blocks, and an incremental mesh then lists them as
 *    removed (and redoes the blocks whose cells reached into them); written
 *    back, they come back voxel for voxel and the next incremental mesh
 *    carries them again;
 *  - a reset, an import or a record of removals that no longer reaches back
 *    far enough make an incremental mesh a full one, and say so;
 *  - a mesh by block comes in parts that together are the whole mesh, each
 *    with vertices of its own;
 *  - meshing again into the same struct, which reuses its arrays, gives
 *    what a fresh struct gets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "tsdf_math.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

static tsdf_volume *make_volume(tsdf_layout layout)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = 0.02f;
    p.layout = layout;
    p.initial_capacity_blocks = 1024;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    return v;
}

/* Frames [first, first + n) of the "room" sequence at 160x120, with
 * their colour when with_rgb. */
static void fuse_room_rgb(tsdf_volume *v, uint32_t first, uint32_t n, int with_rgb)
{
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 160, 120), TSDF_OK);
    float *depth = malloc(160 * 120 * sizeof(float));
    uint8_t *rgb = malloc(160 * 120 * 3);
    assert_non_null(depth);
    assert_non_null(rgb);
    for (uint32_t i = first; i < first + n; i++) {
        tsdf_frame f;
        assert_int_equal(
            tsdf_synth_sequence_frame(&seq, i % seq.frame_count, depth, with_rgb ? rgb : NULL, &f),
            TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    free(depth);
    free(rgb);
}

static void fuse_room(tsdf_volume *v, uint32_t first, uint32_t n)
{
    fuse_room_rgb(v, first, n, 1);
}

static tsdf_volume_stats stats_of(tsdf_volume *v)
{
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(v, &st), TSDF_OK);
    return st;
}

static int32_t *coords_of(tsdf_volume *v, const tsdf_block_select *q, size_t *n)
{
    int32_t *c = NULL;
    assert_int_equal(tsdf_volume_select(v, q, &c, n), TSDF_OK);
    return c;
}

static uint64_t key_at(const int32_t *c, size_t i)
{
    return tsdf_block_key(c[3 * i], c[3 * i + 1], c[3 * i + 2]);
}

/* Every block is in exactly one of (q with rule a) and (q with rule b),
 * and the rule holds for the blocks it took. */
static void test_selections(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    fuse_room(v, 0, 12);
    const float block_m = 8 * 0.02f;
    size_t n_all, n_in, n_out;
    int32_t *all = coords_of(v, NULL, &n_all);
    assert_int_equal(n_all, stats_of(v).blocks_allocated);
    for (size_t i = 1; i < n_all; i++)
        assert_true(key_at(all, i - 1) < key_at(all, i));

    tsdf_block_select q;
    memset(&q, 0, sizeof q);
    q.center_m[0] = 0.3f;
    q.center_m[2] = 0.2f;
    q.radius_m = 1.0f;
    q.rules = TSDF_SELECT_INSIDE_RADIUS;
    int32_t *in = coords_of(v, &q, &n_in);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    int32_t *out = coords_of(v, &q, &n_out);
    assert_int_equal(n_in + n_out, n_all);
    assert_true(n_in > 0 && n_out > 0);
    for (size_t i = 0; i < n_out; i++)
        assert_true(tsdf_block_dist2(&out[3 * i], block_m, q.center_m) > 1.0f);
    for (size_t i = 0; i < n_in; i++)
        assert_true(tsdf_block_dist2(&in[3 * i], block_m, q.center_m) <= 1.0f);
    free(in);
    free(out);

    /* By version: blocks changed after frame 6, and the others. */
    uint64_t v6;
    {
        tsdf_volume *w = make_volume(TSDF_LAYOUT_S16);
        fuse_room(w, 0, 6);
        v6 = stats_of(w).version;
        fuse_room(w, 6, 6);
        q.rules = TSDF_SELECT_SINCE;
        q.version = v6;
        int32_t *newer = coords_of(w, &q, &n_in);
        q.rules = TSDF_SELECT_NOT_SINCE;
        int32_t *older = coords_of(w, &q, &n_out);
        assert_int_equal(n_in + n_out, stats_of(w).blocks_allocated);
        assert_true(n_in > 0 && n_out > 0);
        free(newer);
        free(older);
        tsdf_volume_destroy(w);
    }

    /* Rules combine: inside a box and outside a radius. */
    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_INSIDE_BOX | TSDF_SELECT_OUTSIDE_RADIUS;
    for (int a = 0; a < 3; a++) {
        q.box.min[a] = -1.0f;
        q.box.max[a] = 1.0f;
    }
    q.radius_m = 0.5f;
    int32_t *both = coords_of(v, &q, &n_in);
    for (size_t i = 0; i < n_in; i++) {
        assert_true(tsdf_block_in_box(&both[3 * i], block_m, &q.box));
        assert_true(tsdf_block_dist2(&both[3 * i], block_m, q.center_m) > 0.25f);
    }
    free(both);
    /* Bad selections are refused. */
    q.radius_m = NAN;
    assert_int_equal(tsdf_volume_select(v, &q, &both, &n_in), TSDF_EINVAL);
    q.radius_m = 1.0f;
    q.rules = 1u << 20;
    assert_int_equal(tsdf_volume_select(v, &q, &both, &n_in), TSDF_EINVAL);
    free(all);
    tsdf_volume_destroy(v);
}

/* The view of frame i of the "room" sequence at 160x120, near 0 and far
 * 1 m beyond the frame's depth range. */
static tsdf_frustum room_view(uint32_t i)
{
    tsdf_synth_sequence seq;
    tsdf_frame f;
    tsdf_frustum fr;
    float *depth = malloc(160 * 120 * sizeof(float));
    assert_non_null(depth);
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 160, 120), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, NULL, &f), TSDF_OK);
    memset(&fr, 0, sizeof fr);
    memcpy(fr.T_world_cam, f.T_world_cam, sizeof fr.T_world_cam);
    fr.K = f.K;
    fr.width = f.width;
    fr.height = f.height;
    fr.near_m = 0.0f;
    fr.far_m = f.max_depth_m + 1.0f;
    free(depth);
    return fr;
}

/* Frustum selections: every block one frame allocated is in that frame's
 * view (its band lies along the frame's rays), none is in the view turned
 * around, inside and outside split the blocks, and bad frustums are
 * refused. */
static void test_select_frustum(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    fuse_room(v, 0, 1);
    size_t n_all, n_in, n_out;
    int32_t *all = coords_of(v, NULL, &n_all);
    assert_true(n_all > 0);
    tsdf_block_select q;
    memset(&q, 0, sizeof q);
    q.frustum = room_view(0);
    q.rules = TSDF_SELECT_INSIDE_FRUSTUM;
    free(coords_of(v, &q, &n_in));
    assert_int_equal(n_in, n_all);

    /* Turned around the camera's y axis: x and z of the camera flip. */
    tsdf_block_select back = q;
    for (int r = 0; r < 3; r++) {
        back.frustum.T_world_cam[4 * r] = -q.frustum.T_world_cam[4 * r];
        back.frustum.T_world_cam[4 * r + 2] = -q.frustum.T_world_cam[4 * r + 2];
    }
    free(coords_of(v, &back, &n_in));
    assert_int_equal(n_in, 0);
    back.rules = TSDF_SELECT_OUTSIDE_FRUSTUM;
    free(coords_of(v, &back, &n_out));
    assert_int_equal(n_out, n_all);

    /* More frames from elsewhere: inside and outside of frame 0's view
     * split them, and both are taken. */
    fuse_room(v, 1, 23);
    free(all);
    all = coords_of(v, NULL, &n_all);
    free(coords_of(v, &q, &n_in));
    q.rules = TSDF_SELECT_OUTSIDE_FRUSTUM;
    free(coords_of(v, &q, &n_out));
    printf("frame 0's view: %zu of %zu blocks inside, %zu outside\n", n_in, n_all, n_out);
    assert_int_equal(n_in + n_out, n_all);
    assert_true(n_in > 0 && n_out > 0);

    /* Refused: near not below far, a pose that is not rigid, a camera
     * tsdf_intrinsics_check does not take. */
    tsdf_block_select bad = q;
    int32_t *none = NULL;
    bad.frustum.near_m = bad.frustum.far_m;
    assert_int_equal(tsdf_volume_select(v, &bad, &none, &n_in), TSDF_EINVAL);
    bad = q;
    bad.frustum.T_world_cam[0] = 2.0f;
    assert_int_equal(tsdf_volume_select(v, &bad, &none, &n_in), TSDF_EINVAL);
    bad = q;
    bad.frustum.K.fx = 0.0f;
    assert_int_equal(tsdf_volume_select(v, &bad, &none, &n_in), TSDF_EINVAL);
    free(all);
    tsdf_volume_destroy(v);
}

static void evict_and_restore(tsdf_layout layout)
{
    tsdf_volume *v = make_volume(layout);
    fuse_room(v, 0, 16);
    tsdf_volume_stats st0 = stats_of(v);
    tsdf_block_set all;
    tsdf_block_set_init(&all);
    assert_int_equal(tsdf_volume_export_blocks(v, &all), TSDF_OK);

    /* Everything beyond 1 m of the room's centre goes, handed out. */
    tsdf_block_select q;
    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    q.center_m[2] = 0.3f;
    q.radius_m = 1.0f;
    size_t n_far;
    int32_t *far = coords_of(v, &q, &n_far);
    tsdf_block_set out;
    tsdf_block_set_init(&out);
    size_t erased = 0;
    assert_int_equal(tsdf_volume_evict(v, &q, &out, &erased), TSDF_OK);
    assert_int_equal(erased, n_far);
    assert_int_equal(out.count, n_far);
    assert_memory_equal(out.coords, far, 3 * n_far * sizeof(int32_t));
    assert_int_equal(out.layout, layout);
    assert_non_null(out.rgb);
    tsdf_volume_stats st1 = stats_of(v);
    assert_int_equal(st1.blocks_allocated, st0.blocks_allocated - n_far);
    assert_int_equal(st1.blocks_erased, n_far);
    assert_int_equal(st1.version, st0.version + 1);
    /* The memory stays with the volume (its pool), for later blocks. */
    assert_int_equal(st1.pool_capacity_blocks, st0.pool_capacity_blocks);
    size_t n_left;
    int32_t *left = coords_of(v, &q, &n_left);
    assert_int_equal(n_left, 0);
    free(left);
    /* The evicted blocks are exactly what the volume held there. */
    for (size_t i = 0, j = 0; i < out.count; i++) {
        while (key_at(all.coords, j) != key_at(out.coords, i))
            j++;
        assert_memory_equal((const uint8_t *)out.geom + i * tsdf_layout_block_bytes(layout),
                            (const uint8_t *)all.geom + j * tsdf_layout_block_bytes(layout),
                            tsdf_layout_block_bytes(layout));
        assert_memory_equal(out.rgb + i * TSDF_BLOCK_RGB_BYTES, all.rgb + j * TSDF_BLOCK_RGB_BYTES,
                            TSDF_BLOCK_RGB_BYTES);
        assert_int_equal(out.versions[i], all.versions[j]);
    }

    /* An incremental mesh since before the eviction lists every evicted
     * block as removed, and redoes the blocks at -1 of them that remain. */
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = st0.version;
    mp.by_block = 1;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 0);
    assert_int_equal(m.removed_count, n_far);
    assert_memory_equal(m.removed_coords, far, 3 * n_far * sizeof(int32_t));
    assert_true(m.block_count > 0);
    for (size_t i = 0; i < m.block_count; i++) {
        /* Each redone block is a - neighbour of an evicted one. */
        int near = 0;
        for (size_t k = 0; k < n_far && !near; k++) {
            int ok = 1;
            for (int a = 0; a < 3; a++) {
                int32_t d = far[3 * k + a] - m.block_coords[3 * i + a];
                ok &= d == 0 || d == 1;
            }
            near = ok;
        }
        assert_true(near);
    }
    print_message("%s: evicted %zu of %llu blocks; the incremental mesh redoes %zu blocks\n",
                  tsdf_layout_name(layout), n_far, (unsigned long long)st0.blocks_allocated,
                  m.block_count);
    tsdf_mesh_fini(&m);

    /* New blocks take the freed slots first: the pool does not grow. */
    /* Written back, the blocks are as they were (versions aside: a write
     * is a change), and an incremental mesh carries them, none removed. */
    const uint64_t v1 = stats_of(v).version;
    assert_int_equal(tsdf_volume_write_blocks(v, &out), TSDF_OK);
    tsdf_volume_stats st2 = stats_of(v);
    assert_int_equal(st2.blocks_allocated, st0.blocks_allocated);
    assert_int_equal(st2.pool_capacity_blocks, st0.pool_capacity_blocks);
    assert_int_equal(st2.version, v1 + 1);
    tsdf_block_set back;
    tsdf_block_set_init(&back);
    assert_int_equal(tsdf_volume_export_blocks(v, &back), TSDF_OK);
    assert_int_equal(back.count, all.count);
    assert_memory_equal(back.coords, all.coords, 3 * all.count * sizeof(int32_t));
    assert_memory_equal(back.geom, all.geom, tsdf_block_set_geom_bytes(&all));
    assert_memory_equal(back.rgb, all.rgb, all.count * TSDF_BLOCK_RGB_BYTES);
    tsdf_mesh_init(&m);
    mp.since_version = v1;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.removed_count, 0);
    assert_true(m.block_count >= n_far);
    tsdf_mesh_fini(&m);
    /* Since before the eviction: nothing is gone any more. */
    tsdf_mesh_init(&m);
    mp.since_version = st0.version;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.removed_count, 0);
    assert_int_equal(m.full, 0);
    tsdf_mesh_fini(&m);

    tsdf_block_set_fini(&back);
    tsdf_block_set_fini(&out);
    tsdf_block_set_fini(&all);
    free(far);
    tsdf_volume_destroy(v);
}

static void test_evict_and_restore(void **state)
{
    (void)state;
    evict_and_restore(TSDF_LAYOUT_S16);
    evict_and_restore(TSDF_LAYOUT_F32);
}

/* Eviction without keeping the blocks drops them; its freed memory is
 * what later blocks use first. */
static void test_evict_drop_reuses_memory(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    fuse_room(v, 0, 8);
    tsdf_volume_stats st0 = stats_of(v);
    size_t erased = 0;
    assert_int_equal(tsdf_volume_evict(v, NULL, NULL, &erased), TSDF_OK);
    assert_int_equal(erased, st0.blocks_allocated);
    assert_int_equal(stats_of(v).blocks_allocated, 0);
    /* The same frames again need as many blocks, from the free list. */
    fuse_room(v, 0, 8);
    tsdf_volume_stats st1 = stats_of(v);
    assert_int_equal(st1.blocks_allocated, st0.blocks_allocated);
    assert_int_equal(st1.pool_capacity_blocks, st0.pool_capacity_blocks);
    assert_int_equal(st1.memory_bytes, st0.memory_bytes);
    tsdf_volume_destroy(v);
}

/* When the volume cannot say what went since a version, an incremental
 * mesh is a whole one, marked full. */
static void test_full_meshes(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    fuse_room(v, 0, 6);
    const uint64_t before = stats_of(v).version;
    tsdf_mesh whole, m;
    tsdf_mesh_init(&whole);
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(v, NULL, &whole), TSDF_OK);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = before;
    /* Nothing changed: an empty incremental mesh, not a full one. */
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 0);
    assert_int_equal(m.triangle_count, 0);
    /* Export, import into the same volume: the content was replaced at
     * once, so since `before` is answered with everything. */
    tsdf_block_set s;
    tsdf_block_set_init(&s);
    assert_int_equal(tsdf_volume_export_blocks(v, &s), TSDF_OK);
    assert_int_equal(tsdf_volume_import_blocks(v, &s), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 1);
    assert_int_equal(m.triangle_count, whole.triangle_count);
    assert_int_equal(m.vertex_count, whole.vertex_count);
    /* Since the import's own version: nothing new. */
    mp.since_version = stats_of(v).version;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 0);
    assert_int_equal(m.triangle_count, 0);
    /* A reset: the same, with nothing left. */
    mp.since_version = stats_of(v).version;
    assert_int_equal(tsdf_volume_reset(v), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 1);
    assert_int_equal(m.triangle_count, 0);
    tsdf_block_set_fini(&s);
    tsdf_mesh_fini(&m);
    tsdf_mesh_fini(&whole);
    tsdf_volume_destroy(v);
}

/* The record of removals is bounded: evicting more blocks than it holds
 * (2^18) one at a time is not needed to see the bound; one eviction of a
 * set larger than the record makes every older incremental mesh full. */
static void test_removed_record_is_bounded(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    /* 2^18 + 1 empty blocks written in, then all evicted at once. */
    enum { N = (1 << 18) + 1 };
    tsdf_block_set s;
    tsdf_block_set_init(&s);
    assert_int_equal(tsdf_block_set_alloc(&s, N, TSDF_LAYOUT_S16, 0.08f / 32767.0f, 0), TSDF_OK);
    for (size_t i = 0; i < N; i++) {
        s.coords[3 * i] = (int32_t)(i % 1024);
        s.coords[3 * i + 1] = (int32_t)(i / 1024);
        s.coords[3 * i + 2] = 0;
    }
    assert_int_equal(tsdf_volume_write_blocks(v, &s), TSDF_OK);
    const uint64_t before = stats_of(v).version;
    size_t erased = 0;
    assert_int_equal(tsdf_volume_evict(v, NULL, NULL, &erased), TSDF_OK);
    assert_int_equal(erased, N);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = before;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &m), TSDF_OK);
    assert_int_equal(m.full, 1);
    assert_int_equal(m.removed_count, 0);
    tsdf_mesh_fini(&m);
    tsdf_block_set_fini(&s);
    tsdf_volume_destroy(v);
}

/* The parts of a mesh by block are the whole mesh: the same triangles,
 * block by block, each part indexing only its own vertices, which are
 * copies of the whole mesh's. */
static void test_mesh_by_block(void **state)
{
    (void)state;
    tsdf_volume *v = make_volume(TSDF_LAYOUT_S16);
    fuse_room(v, 0, 12);
    tsdf_mesh whole, parts;
    tsdf_mesh_init(&whole);
    tsdf_mesh_init(&parts);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    assert_int_equal(tsdf_volume_mesh(v, &mp, &whole), TSDF_OK);
    mp.by_block = 1;
    assert_int_equal(tsdf_volume_mesh(v, &mp, &parts), TSDF_OK);
    assert_int_equal(parts.triangle_count, whole.triangle_count);
    assert_true(parts.vertex_count >= whole.vertex_count);
    assert_int_equal(parts.block_count, stats_of(v).blocks_allocated);
    assert_int_equal(parts.block_triangle_start[parts.block_count], parts.triangle_count);
    assert_int_equal(parts.block_vertex_start[parts.block_count], parts.vertex_count);
    size_t empty = 0;
    for (size_t b = 0; b < parts.block_count; b++) {
        if (b > 0)
            assert_true(key_at(parts.block_coords, b - 1) < key_at(parts.block_coords, b));
        const uint32_t v0 = parts.block_vertex_start[b], v1 = parts.block_vertex_start[b + 1];
        const uint32_t t0 = parts.block_triangle_start[b], t1 = parts.block_triangle_start[b + 1];
        assert_true(v0 <= v1 && t0 <= t1);
        empty += t0 == t1;
        for (uint32_t t = t0; t < t1; t++)
            for (int j = 0; j < 3; j++) {
                uint32_t i = parts.indices[3 * (size_t)t + j];
                assert_true(i >= v0 && i < v1);
            }
        /* A part's vertices lie on its block's cells: within the block or
         * on its + faces. */
        const float block_m = 8 * 0.02f;
        for (uint32_t i = v0; i < v1; i++)
            for (int a = 0; a < 3; a++) {
                float lo = (float)parts.block_coords[3 * b + a] * block_m;
                assert_true(parts.positions[3 * (size_t)i + a] >= lo - 1e-4f);
                assert_true(parts.positions[3 * (size_t)i + a] <= lo + block_m + 0.02f + 1e-4f);
            }
    }
    print_message("by block: %zu parts (%zu without triangles), %zu vertices against %zu "
                  "shared\n",
                  parts.block_count, empty, parts.vertex_count, whole.vertex_count);
    tsdf_mesh_fini(&whole);
    tsdf_mesh_fini(&parts);
    tsdf_volume_destroy(v);
}

/* n elements of `elem` bytes at a and b are equal (both NULL for none). */
static void assert_same_array(const void *a, const void *b, size_t n, size_t elem)
{
    assert_true((a == NULL) == (b == NULL));
    if (a != NULL && n != 0)
        assert_memory_equal(a, b, n * elem);
}

/* The mesh of params into `reused` (which holds an earlier mesh, whose
 * arrays the engine reuses) is the mesh into a fresh struct, array for
 * array. */
static void assert_mesh_as_fresh(tsdf_volume *v, const tsdf_mesh_params *mp, tsdf_mesh *reused)
{
    tsdf_mesh fresh;
    tsdf_mesh_init(&fresh);
    assert_int_equal(tsdf_volume_mesh(v, mp, reused), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(v, mp, &fresh), TSDF_OK);
    const tsdf_mesh *a = reused, *b = &fresh;
    assert_int_equal(a->vertex_count, b->vertex_count);
    assert_int_equal(a->triangle_count, b->triangle_count);
    assert_int_equal(a->block_count, b->block_count);
    assert_int_equal(a->removed_count, b->removed_count);
    assert_int_equal(a->full, b->full);
    assert_same_array(a->positions, b->positions, 3 * a->vertex_count, sizeof(float));
    assert_same_array(a->normals, b->normals, 3 * a->vertex_count, sizeof(float));
    assert_same_array(a->colors, b->colors, 3 * a->vertex_count, 1);
    assert_same_array(a->indices, b->indices, 3 * a->triangle_count, sizeof(uint32_t));
    assert_same_array(a->block_coords, b->block_coords, 3 * a->block_count, sizeof(int32_t));
    if (mp->by_block) {
        assert_same_array(a->block_vertex_start, b->block_vertex_start, a->block_count + 1,
                          sizeof(uint32_t));
        assert_same_array(a->block_triangle_start, b->block_triangle_start, a->block_count + 1,
                          sizeof(uint32_t));
    }
    assert_same_array(a->removed_coords, b->removed_coords, 3 * a->removed_count, sizeof(int32_t));
    tsdf_mesh_fini(&fresh);
}

/* Meshing again into the same struct (the cheap way, which reuses its
 * arrays and the volume's by-block scratch) gives what a fresh struct
 * gets, as the meshes grow, shrink, lose their colour, switch between
 * shared vertices and parts, and between volumes. */
static void test_mesh_reuse(void **state)
{
    (void)state;
    tsdf_volume *a = make_volume(TSDF_LAYOUT_S16), *b = make_volume(TSDF_LAYOUT_F32);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    fuse_room(a, 0, 8);
    fuse_room_rgb(b, 0, 10, 0);
    mp.by_block = 1;
    assert_mesh_as_fresh(a, &mp, &m); /* every block, in parts, coloured */
    assert_non_null(m.colors);
    const size_t whole_parts = m.block_count;
    const uint64_t before = stats_of(a).version;
    fuse_room(a, 8, 1);
    mp.since_version = before;
    assert_mesh_as_fresh(a, &mp, &m); /* what one frame changed: fewer parts */
    assert_true(m.block_count > 0 && m.block_count < whole_parts);
    mp.since_version = 0;
    assert_mesh_as_fresh(b, &mp, &m); /* another volume, no colour */
    assert_null(m.colors);
    assert_true(m.block_count > 0);
    mp.by_block = 0;
    assert_mesh_as_fresh(b, &mp, &m); /* shared vertices, no parts */
    assert_int_equal(m.block_count, 0);
    mp.by_block = 1;
    assert_mesh_as_fresh(a, &mp, &m); /* parts and colour again, grown */
    assert_true(m.block_count > whole_parts - 1);
    assert_non_null(m.colors);
    tsdf_mesh_fini(&m);
    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selections),        cmocka_unit_test(test_select_frustum),
        cmocka_unit_test(test_evict_and_restore), cmocka_unit_test(test_evict_drop_reuses_memory),
        cmocka_unit_test(test_full_meshes),       cmocka_unit_test(test_removed_record_is_bounded),
        cmocka_unit_test(test_mesh_by_block),     cmocka_unit_test(test_mesh_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
