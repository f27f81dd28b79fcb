/*
 * test_mesh.c - marching cubes, raycast and the PLY writer of the CPU
 * reference backend, on synthetic scenes with exact depth (scenes/tsdf_synth):
 * mesh vertices lie on the true surface, a closed object gives a closed,
 * outward-facing mesh without duplicate vertices, a raycast of the fused
 * volume matches the exact render, the f32 and s16 voxel layouts mesh
 * equally close to the true surface, and the PLY file reads back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

/* |a - b| <= eps, failing on NaN (cmocka's assert_float_equal lets NaN pass). */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (double)(eps))

#include "tsdf_math.h"
#include "tsdf_mc_tables.h"
#include "tsdf_synth.h"
#include "tsdf_ply.h"
#include "tsdf_volume.h"

#define VOXEL_M 0.01f

typedef struct {
    tsdf_synth_sequence seq;
    tsdf_volume *vol;
    double ms_per_frame;
} fused_scene;

/* Fuses every frame of the named sequence at w x h into a CPU volume. */
static void fuse(fused_scene *fs, const char *name, uint32_t w, uint32_t h, int with_rgb)
{
    tsdf_volume_params p;
    float *depth;
    uint8_t *rgb = NULL;
    double total_ms = 0.0;
    assert_int_equal(tsdf_synth_sequence_init(&fs->seq, name), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&fs->seq, w, h), TSDF_OK);
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = VOXEL_M;
    p.initial_capacity_blocks = 4096;
    assert_int_equal(tsdf_volume_create(&p, &fs->vol), TSDF_OK);
    depth = malloc((size_t)w * h * sizeof(float));
    assert_non_null(depth);
    if (with_rgb) {
        rgb = malloc((size_t)w * h * 3);
        assert_non_null(rgb);
    }
    for (uint32_t i = 0; i < fs->seq.frame_count; i++) {
        tsdf_frame f;
        tsdf_volume_stats st;
        assert_int_equal(tsdf_synth_sequence_frame(&fs->seq, i, depth, rgb, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(fs->vol, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_get_stats(fs->vol, &st), TSDF_OK);
        total_ms += st.last_alloc_ms + st.last_update_ms;
    }
    fs->ms_per_frame = total_ms / (double)fs->seq.frame_count;
    free(depth);
    free(rgb);
}

/* 1 when p lies within r of an edge of an axis-aligned box or room
 * primitive (both are boxes with centre_m and half_m). */
static int near_box_edge(const tsdf_primitive *pr, const float p[3], float r)
{
    if (pr->type != TSDF_PRIM_BOX && pr->type != TSDF_PRIM_ROOM)
        return 0;
    for (int a = 0; a < 3; a++) {
        int b = (a + 1) % 3, c = (a + 2) % 3;
        if (fabsf(p[a] - pr->center_m[a]) <= pr->half_m[a] + r &&
            fabsf(fabsf(p[b] - pr->center_m[b]) - pr->half_m[b]) <= r &&
            fabsf(fabsf(p[c] - pr->center_m[c]) - pr->half_m[c]) <= r)
            return 1;
    }
    return 0;
}

/* The smallest weight of the 8 voxels around world point p, from an
 * exported block set (sorted by key); 0 where a voxel is missing. */
static float min_cell_weight(const tsdf_block_set *bs, const uint64_t *keys, const float p[3])
{
    int32_t base[3];
    float w_min = INFINITY;
    for (int a = 0; a < 3; a++)
        base[a] = (int32_t)floorf(p[a] / VOXEL_M - 0.5f);
    for (int k = 0; k < 8; k++) {
        int32_t g[3] = {base[0] + (k & 1), base[1] + ((k >> 1) & 1), base[2] + ((k >> 2) & 1)};
        uint64_t key =
            tsdf_block_key(tsdf_floor_div8(g[0]), tsdf_floor_div8(g[1]), tsdf_floor_div8(g[2]));
        size_t lo = 0, hi = bs->count;
        float w = 0.0f;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (keys[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < bs->count && keys[lo] == key)
            w = tsdf_block_set_get(bs, lo, (unsigned)tsdf_voxel_index(g[0] & 7, g[1] & 7, g[2] & 7))
                    .weight;
        if (w < w_min)
            w_min = w;
    }
    return w_min;
}

/* Distance of the mesh vertices of a fused volume to the true surface, in
 * voxels: the mean over all vertices, the maximum over all vertices, and
 * the maximum over the "well-determined" ones: farther than edge_r_m from
 * every box edge and in a cell whose 8 voxels were each seen by at least
 * min_weight frames.
 *
 * Why the two exclusions: (1) at a convex edge, a voxel just outside one
 * face lies behind the other face as seen from cameras on that side, so the
 * projective TSDF gives it a negative value (within trunc behind the
 * observed surface) although it is in free space; that is inherent to
 * projective fusion, moves the zero crossing outward by up to about trunc/2
 * within a few voxels of the edge, and does not happen on smooth surfaces.
 * (2) a voxel seen by one frame only carries that frame's nearest-pixel
 * sampling error (half a pixel across an oblique surface, about half a
 * voxel at 320 x 240 on the far walls); averaging over frames removes it
 * elsewhere. The mean covers every vertex. */
static void vertex_error(tsdf_volume *vol, const tsdf_scene *scene, const tsdf_mesh *m,
                         float edge_r_m, float min_weight, double *mean_vox, double *max_vox,
                         double *max_good_vox, size_t *good)
{
    double sum = 0.0, mx = 0.0, mx_good = 0.0;
    tsdf_block_set bs;
    uint64_t *keys;
    tsdf_block_set_init(&bs);
    assert_int_equal(tsdf_volume_export_blocks(vol, &bs), TSDF_OK);
    keys = malloc((bs.count + 1) * sizeof(*keys));
    assert_non_null(keys);
    for (size_t i = 0; i < bs.count; i++)
        keys[i] = tsdf_block_key(bs.coords[3 * i], bs.coords[3 * i + 1], bs.coords[3 * i + 2]);
    *good = 0;
    for (size_t i = 0; i < m->vertex_count; i++) {
        const float *p = &m->positions[3 * i];
        double e = fabs((double)tsdf_scene_sdf(scene, p)) / VOXEL_M;
        int excluded = 0;
        sum += e;
        if (e > mx)
            mx = e;
        for (uint32_t k = 0; k < scene->count && !excluded; k++)
            excluded = near_box_edge(&scene->prims[k], p, edge_r_m);
        if (!excluded && min_weight > 0.0f)
            excluded = min_cell_weight(&bs, keys, p) < min_weight;
        if (excluded)
            continue;
        (*good)++;
        if (e > mx_good)
            mx_good = e;
    }
    *mean_vox = m->vertex_count != 0 ? sum / (double)m->vertex_count : 0.0;
    *max_vox = mx;
    *max_good_vox = mx_good;
    free(keys);
    tsdf_block_set_fini(&bs);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_pos(const void *a, const void *b)
{
    const float *p = a, *q = b;
    for (int i = 0; i < 3; i++)
        if (p[i] != q[i])
            return p[i] < q[i] ? -1 : 1;
    return 0;
}

/* Every undirected edge is shared by exactly two triangles (a closed
 * 2-manifold edge structure); returns the number of edges that are not. */
static size_t open_edges(const tsdf_mesh *m)
{
    size_t n = 3 * m->triangle_count, bad = 0;
    uint64_t *e = malloc(n * sizeof(*e));
    assert_non_null(e);
    for (size_t t = 0; t < m->triangle_count; t++) {
        for (int k = 0; k < 3; k++) {
            uint64_t a = m->indices[3 * t + k], b = m->indices[3 * t + (k + 1) % 3];
            e[3 * t + k] = a < b ? (a << 32 | b) : (b << 32 | a);
        }
    }
    qsort(e, n, sizeof(*e), cmp_u64);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && e[j] == e[i])
            j++;
        bad += (j - i) != 2;
        i = j;
    }
    free(e);
    return bad;
}

static size_t duplicate_positions(const tsdf_mesh *m)
{
    size_t dup = 0;
    float *p = malloc(3 * m->vertex_count * sizeof(float));
    assert_non_null(p);
    memcpy(p, m->positions, 3 * m->vertex_count * sizeof(float));
    qsort(p, m->vertex_count, 3 * sizeof(float), cmp_pos);
    for (size_t i = 1; i < m->vertex_count; i++)
        dup += cmp_pos(&p[3 * i - 3], &p[3 * i]) == 0;
    free(p);
    return dup;
}

/* ---- the tables ------------------------------------------------------------- */

/* Each table row uses exactly the crossed edges of its case, each crossed
 * edge at least once, and each triangle faces the outside. */
static void test_mc_tables(void **state)
{
    (void)state;
    for (int cube = 0; cube < 256; cube++) {
        uint16_t mask = tsdf_mc_edge_mask(cube), used = 0;
        float c8[8];
        int i;
        for (int e = 0; e < 12; e++) {
            int c0 = tsdf_mc_edge_corner0(e), c1 = tsdf_mc_edge_corner1(e);
            int crossed = ((cube >> c0) & 1) != ((cube >> c1) & 1);
            assert_int_equal((mask >> e) & 1, crossed);
            assert_int_equal(c1 - c0, 1 << tsdf_mc_edge_axis(e));
        }
        for (int c = 0; c < 8; c++)
            c8[c] = ((cube >> c) & 1) ? -1.0f : 1.0f;
        for (i = 0; i < TSDF_MC_TRI_ROW && tsdf_mc_tri(cube, i) >= 0; i += 3) {
            float p[3][3], centroid[3] = {0, 0, 0}, n[3], g[3], u[3], v[3];
            for (int j = 0; j < 3; j++) {
                int e = tsdf_mc_tri(cube, i + j), off[3];
                assert_true(e < 12);
                assert_true((mask >> e) & 1);
                used |= (uint16_t)(1u << e);
                tsdf_mc_edge_start(e, off);
                for (int a = 0; a < 3; a++)
                    p[j][a] = (float)off[a];
                p[j][tsdf_mc_edge_axis(e)] += 0.5f;
                for (int a = 0; a < 3; a++)
                    centroid[a] += p[j][a] / 3.0f;
            }
            for (int a = 0; a < 3; a++) {
                u[a] = p[1][a] - p[0][a];
                v[a] = p[2][a] - p[0][a];
            }
            n[0] = u[1] * v[2] - u[2] * v[1];
            n[1] = u[2] * v[0] - u[0] * v[2];
            n[2] = u[0] * v[1] - u[1] * v[0];
            /* Outward = up the gradient of the cell's trilinear field with
             * -1 at inside corners and +1 at outside ones. */
            tsdf_trilinear_grad(c8, centroid[0], centroid[1], centroid[2], g);
            assert_true(n[0] * g[0] + n[1] * g[1] + n[2] * g[2] > 0.0f);
        }
        assert_true(i <= 3 * TSDF_MC_MAX_TRIS);
        assert_int_equal(used, mask);
        assert_int_equal(i == 0, mask == 0);
    }
}

/* ---- sphere ------------------------------------------------------------------ */

static void test_sphere_mesh(void **state)
{
    fused_scene fs;
    tsdf_mesh m;
    double mean_vox, max_vox, max_good_vox;
    size_t good;
    size_t inward = 0;
    const float *c;
    (void)state;
    fuse(&fs, "sphere", 160, 120, 1);
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(fs.vol, NULL, &m), TSDF_OK);
    assert_true(m.vertex_count > 1000);
    assert_true(m.triangle_count > 2000);
    assert_non_null(m.colors);
    vertex_error(fs.vol, &fs.seq.scene, &m, 0.0f, 0.0f, &mean_vox, &max_vox, &max_good_vox, &good);
    assert_int_equal(good, m.vertex_count);
    print_message("sphere: %zu vertices %zu triangles, |sdf| mean %.4f max %.4f voxel, "
                  "%.1f ms/frame (160x120)\n",
                  m.vertex_count, m.triangle_count, mean_vox, max_vox, fs.ms_per_frame);
    assert_true(mean_vox <= 0.1);
    /* A sphere has no edge: the bound holds for every vertex. */
    assert_true(max_vox <= 0.5);
    /* Closed, without duplicate vertices. */
    assert_int_equal(open_edges(&m), 0);
    assert_int_equal(duplicate_positions(&m), 0);
    /* Euler characteristic of a sphere: V - E + F = 2, E = 3F / 2. */
    assert_int_equal(
        (long)m.vertex_count - (long)(3 * m.triangle_count / 2) + (long)m.triangle_count, 2);
    /* Normals and winding point out of the sphere. */
    c = fs.seq.scene.prims[0].center_m;
    for (size_t i = 0; i < m.vertex_count; i++) {
        const float *p = &m.positions[3 * i], *n = &m.normals[3 * i];
        float d = (p[0] - c[0]) * n[0] + (p[1] - c[1]) * n[1] + (p[2] - c[2]) * n[2];
        float len = sqrtf(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
        assert_near(len, 1.0f, 1e-4f);
        inward += d <= 0.0f;
    }
    assert_int_equal(inward, 0);
    for (size_t t = 0; t < m.triangle_count; t++) {
        const float *a = &m.positions[3 * m.indices[3 * t]];
        const float *b = &m.positions[3 * m.indices[3 * t + 1]];
        const float *d = &m.positions[3 * m.indices[3 * t + 2]];
        float u[3], v[3], n[3], g[3];
        for (int k = 0; k < 3; k++) {
            u[k] = b[k] - a[k];
            v[k] = d[k] - a[k];
            g[k] = (a[k] + b[k] + d[k]) / 3.0f - c[k];
        }
        n[0] = u[1] * v[2] - u[2] * v[1];
        n[1] = u[2] * v[0] - u[0] * v[2];
        n[2] = u[0] * v[1] - u[1] * v[0];
        assert_true(n[0] * g[0] + n[1] * g[1] + n[2] * g[2] > 0.0f);
    }

    /* Box selection: only blocks meeting the box, a strict, non-empty part. */
    {
        tsdf_mesh part;
        tsdf_mesh_params mp;
        memset(&mp, 0, sizeof(mp));
        mp.use_box = 1;
        mp.box.min[0] = 0.1f;
        mp.box.min[1] = -1.0f;
        mp.box.min[2] = -1.0f;
        mp.box.max[0] = 1.0f;
        mp.box.max[1] = 1.0f;
        mp.box.max[2] = 1.0f;
        tsdf_mesh_init(&part);
        assert_int_equal(tsdf_volume_mesh(fs.vol, &mp, &part), TSDF_OK);
        assert_true(part.triangle_count > 0);
        assert_true(part.triangle_count < m.triangle_count);
        for (size_t i = 0; i < part.vertex_count; i++)
            assert_true(part.positions[3 * i] >= 0.1f - 8 * VOXEL_M - VOXEL_M);
        /* A box in empty space selects nothing; a reversed box is refused. */
        mp.box.min[0] = 5.0f;
        mp.box.max[0] = 6.0f;
        assert_int_equal(tsdf_volume_mesh(fs.vol, &mp, &part), TSDF_OK);
        assert_int_equal(part.triangle_count, 0);
        mp.box.max[0] = 4.0f;
        assert_int_equal(tsdf_volume_mesh(fs.vol, &mp, &part), TSDF_EINVAL);
        tsdf_mesh_fini(&part);
    }

    /* since_version: nothing changed after the current version; one more
     * frame changes part of the surface. */
    {
        tsdf_mesh part;
        tsdf_mesh_params mp;
        tsdf_volume_stats st;
        float *depth = malloc((size_t)fs.seq.width * fs.seq.height * sizeof(float));
        tsdf_frame f;
        assert_non_null(depth);
        assert_int_equal(tsdf_volume_get_stats(fs.vol, &st), TSDF_OK);
        memset(&mp, 0, sizeof(mp));
        mp.since_version = st.version;
        tsdf_mesh_init(&part);
        assert_int_equal(tsdf_volume_mesh(fs.vol, &mp, &part), TSDF_OK);
        assert_int_equal(part.triangle_count, 0);
        assert_int_equal(tsdf_synth_sequence_frame(&fs.seq, 0, depth, NULL, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(fs.vol, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_mesh(fs.vol, &mp, &part), TSDF_OK);
        assert_true(part.triangle_count > 0);
        assert_true(part.triangle_count < m.triangle_count);
        tsdf_mesh_fini(&part);
        free(depth);
    }
    tsdf_mesh_fini(&m);
    tsdf_volume_destroy(fs.vol);
}

/* ---- room -------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The angle in degrees between a raycast normal n at pixel (u, v), depth z,
 * and the true surface's (the gradient of the scene's exact sdf there, by
 * central differences); -1 where the truth has no clear direction: within
 * two voxels of another surface or an edge, where the true sdf's gradient
 * turns. */
/* The unit gradient of the scene's exact sdf at p, by central
 * differences a quarter voxel apart; 0 where it has no direction. */
static int true_normal(const tsdf_scene *sc, const float p[3], float g[3])
{
    const float h = 0.25f * VOXEL_M;
    for (int a = 0; a < 3; a++) {
        float pp[3] = {p[0], p[1], p[2]}, pm[3] = {p[0], p[1], p[2]};
        pp[a] += h;
        pm[a] -= h;
        g[a] = tsdf_scene_sdf(sc, pp) - tsdf_scene_sdf(sc, pm);
    }
    return tsdf_normalize3(g);
}

static float normal_error_deg(const tsdf_scene *sc, const tsdf_raycast_params *rp, uint32_t u,
                              uint32_t v, float z, const float n[3])
{
    float o[3], d[3], p[3], g[3];
    tsdf_pixel_ray_world(rp->T_world_cam, &rp->K, (float)u, (float)v, o, d);
    for (int a = 0; a < 3; a++)
        p[a] = o[a] + z * d[a];
    if (!true_normal(sc, p, g))
        return -1.0f;
    /* The gradient two voxels on must agree: else a second surface or an
     * edge is near, and "the" normal is not defined at voxel resolution. */
    for (int s = -1; s <= 1; s += 2) {
        for (int ax = 0; ax < 3; ax++) {
            float q[3] = {p[0], p[1], p[2]}, gq[3];
            q[ax] += (float)s * 2.0f * VOXEL_M;
            if (!true_normal(sc, q, gq) || g[0] * gq[0] + g[1] * gq[1] + g[2] * gq[2] < 0.999f)
                return -1.0f;
        }
    }
    float c = g[0] * n[0] + g[1] * n[1] + g[2] * n[2];
    c = c > 1.0f ? 1.0f : (c < -1.0f ? -1.0f : c);
    return acosf(c) * (180.0f / 3.14159265f);
}

static void test_room_mesh_and_raycast(void **state)
{
    fused_scene fs;
    tsdf_mesh m;
    double mean_vox, max_vox, max_good_vox;
    size_t good;
    (void)state;
    /* 320 x 240: at 160 x 120 a pixel covers 2 cm on the far walls, twice
     * the voxel, and nearest-pixel sampling alone costs a voxel of error. */
    fuse(&fs, "room", 320, 240, 0);
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(fs.vol, NULL, &m), TSDF_OK);
    assert_true(m.vertex_count > 10000);
    assert_null(m.colors);
    vertex_error(fs.vol, &fs.seq.scene, &m, 4.0f * VOXEL_M, 3.0f, &mean_vox, &max_vox,
                 &max_good_vox, &good);
    print_message("room: %zu vertices %zu triangles, |sdf| mean %.4f voxel, max %.4f voxel; "
                  "max %.4f voxel over the %.1f%% of vertices away from box edges and seen "
                  ">= 3 times; %.1f ms/frame (320x240)\n",
                  m.vertex_count, m.triangle_count, mean_vox, max_vox, max_good_vox,
                  100.0 * (double)good / (double)m.vertex_count, fs.ms_per_frame);
    assert_true(mean_vox <= 0.1);
    assert_true(max_good_vox <= 0.5);
    assert_true((double)good >= 0.8 * (double)m.vertex_count);
    /* Even at the edges the error stays within the truncation band. */
    assert_true(max_vox <= 4.0);
    assert_int_equal(duplicate_positions(&m), 0);
    tsdf_mesh_fini(&m);

    /* Raycast from poses between the fused ones against the exact render. */
    {
        const uint32_t w = fs.seq.width, h = fs.seq.height;
        float *exact = malloc((size_t)w * h * sizeof(float));
        float *cast = malloc((size_t)w * h * sizeof(float));
        float *normals = malloc((size_t)w * h * 3 * sizeof(float));
        size_t both = 0, close = 0, only_exact = 0, n_angles = 0;
        const size_t n_cap = (size_t)w * h * 5;
        float *angles = malloc(n_cap * sizeof(float));
        double ms = 0.0;
        assert_non_null(angles);
        assert_non_null(exact);
        assert_non_null(cast);
        assert_non_null(normals);
        for (uint32_t i = 3; i < fs.seq.frame_count; i += 11) {
            tsdf_raycast_params rp;
            tsdf_raycast_output ro = {cast, normals, NULL};
            tsdf_volume_stats st;
            memset(&rp, 0, sizeof(rp));
            rp.width = w;
            rp.height = h;
            rp.K = fs.seq.K;
            assert_int_equal(tsdf_synth_sequence_pose(&fs.seq, i, rp.T_world_cam), TSDF_OK);
            /* Move the camera a little off the fused trajectory. */
            rp.T_world_cam[3] += 0.037f;
            rp.T_world_cam[7] -= 0.021f;
            rp.min_depth_m = fs.seq.min_depth_m;
            rp.max_depth_m = fs.seq.max_depth_m;
            assert_int_equal(
                tsdf_scene_render(&fs.seq.scene, w, h, &rp.K, rp.T_world_cam, exact, NULL),
                TSDF_OK);
            assert_int_equal(tsdf_volume_raycast(fs.vol, &rp, &ro), TSDF_OK);
            assert_int_equal(tsdf_volume_get_stats(fs.vol, &st), TSDF_OK);
            ms += st.last_raycast_ms;
            for (size_t k = 0; k < (size_t)w * h; k++) {
                int he = exact[k] > 0.0f, hc = !isnan(cast[k]);
                if (he && hc) {
                    both++;
                    close += fabsf(cast[k] - exact[k]) <= 0.5f * VOXEL_M;
                    if (n_angles < n_cap) {
                        float a = normal_error_deg(&fs.seq.scene, &rp, k % w, k / w, cast[k],
                                                   &normals[3 * k]);
                        if (a >= 0.0f)
                            angles[n_angles++] = a;
                    }
                    assert_near(normals[3 * k] * normals[3 * k] +
                                    normals[3 * k + 1] * normals[3 * k + 1] +
                                    normals[3 * k + 2] * normals[3 * k + 2],
                                1.0f, 1e-3f);
                } else if (he) {
                    only_exact++;
                }
            }
        }
        qsort(angles, n_angles, sizeof(float), cmp_float);
        print_message("room raycast: %zu pixels with depth in both, %.3f%% within 0.5 voxel, "
                      "%zu only in the exact render, %.1f ms per 320x240 raycast; normals "
                      "against the true surface's: median %.2f, p90 %.2f, p99 %.2f degrees "
                      "(%zu away from edges)\n",
                      both, 100.0 * (double)close / (double)both, only_exact, ms / 5.0,
                      (double)angles[n_angles / 2], (double)angles[n_angles * 9 / 10],
                      (double)angles[n_angles * 99 / 100], n_angles);
        /* Central differences one voxel apart measured 0.81 / 4.58 degrees
         * (the gradient of the hit's cell alone: 2.17 / 10.22). */
        assert_true(n_angles > 100000);
        assert_true(angles[n_angles / 2] <= 1.2f);
        assert_true(angles[n_angles * 99 / 100] <= 6.0f);
        free(angles);
        assert_true(both > 50000);
        assert_true((double)close >= 0.99 * (double)both);
        /* The room is fully seen; nearly every exact hit is found. */
        assert_true((double)only_exact <= 0.02 * (double)(both + only_exact));
        free(exact);
        free(cast);
        free(normals);
    }
    tsdf_volume_destroy(fs.vol);
}

/* ---- a room of planes ---------------------------------------------------------- */

/* The inside of an axis-aligned box, walls, floor and ceiling only: 2.4 x
 * 1.8 x 2.0 m. The centre is off the voxel grid by a few millimetres on each
 * axis so that no wall lies on a plane of voxel centres or voxel faces (a
 * wall through voxel centres leaves sdf values of about 0 with either sign
 * there, which marching cubes turns into many needless tiny triangles). */
static const float plane_room_center_m[3] = {0.0137f, -0.0219f, 1.0031f};
static const float plane_room_half_m[3] = {1.2f, 0.9f, 1.0f};

/* The trajectory: from each of 5 eyes (the room's centre and the 4 corners of
 * a tetrahedron around it, 0.4 of the half-extents out) the camera looks at
 * each of the 26 points c + (i hx, j hy, k hz), i, j, k in {-1, 0, 1}, not all
 * 0: the centres of the 6 faces, the midpoints of the 12 edges and the 8
 * corners, 130 frames. A face centre is seen head-on, an edge or a corner
 * from roughly along its bisector, so no part of the surface is seen only at
 * grazing angles. Fewer eyes are not enough: from the centre alone (26
 * frames) the frusta (62 x 49 degrees) leave patches of floor and ceiling
 * that no frame sees, and a cell with an unseen corner makes no triangle
 * (546 open edges); 2 eyes (52 frames) still leave 104 open edges. */
#define PLANE_ROOM_EYES 5
#define PLANE_ROOM_TARGETS 26

static void plane_room_pose(uint32_t i, float T_world_cam[16])
{
    static const float eye_dir[PLANE_ROOM_EYES][3] = {
        {0, 0, 0}, {1, 1, 1}, {1, -1, -1}, {-1, 1, -1}, {-1, -1, 1}};
    const float *c = plane_room_center_m, *h = plane_room_half_m;
    uint32_t e = i / PLANE_ROOM_TARGETS, t = i % PLANE_ROOM_TARGETS;
    float eye[3], target[3];
    /* Target t of the 26 skips the room's centre (index 13 of 27). */
    uint32_t cell = t < 13 ? t : t + 1;
    int ijk[3] = {(int)(cell % 3) - 1, (int)(cell / 3 % 3) - 1, (int)(cell / 9) - 1};
    for (int a = 0; a < 3; a++) {
        eye[a] = c[a] + 0.4f * eye_dir[e][a] * h[a];
        target[a] = c[a] + (float)ijk[a] * h[a];
    }
    assert_int_equal(tsdf_synth_look_at(eye, target, NULL, T_world_cam), TSDF_OK);
}

static void test_plane_room_mesh(void **state)
{
    const uint32_t w = 320, h = 240, n_frames = PLANE_ROOM_EYES * PLANE_ROOM_TARGETS;
    tsdf_scene scene;
    tsdf_volume_params p;
    tsdf_volume *vol;
    tsdf_mesh m;
    tsdf_frame f;
    float *depth;
    double mean_vox, max_vox, max_good_vox;
    size_t good, inward = 0;
    (void)state;
    tsdf_scene_init(&scene);
    assert_int_equal(tsdf_scene_add_room(&scene, plane_room_center_m, plane_room_half_m, NULL),
                     TSDF_OK);
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = VOXEL_M;
    p.initial_capacity_blocks = 4096;
    assert_int_equal(tsdf_volume_create(&p, &vol), TSDF_OK);
    depth = malloc((size_t)w * h * sizeof(float));
    assert_non_null(depth);

    /* The camera of the standard sequences (the TUM fr1 camera at half
     * resolution): a pixel spans about 1 cm across the ray at the farthest
     * corner, 2.5 m from the eye, i.e. a voxel. */
    memset(&f, 0, sizeof(f));
    f.width = w;
    f.height = h;
    f.K.fx = f.K.fy = 262.5f;
    f.K.cx = 159.5f;
    f.K.cy = 119.5f;
    f.depth_format = TSDF_DEPTH_F32;
    f.depth = depth;
    f.min_depth_m = 0.1f;
    f.max_depth_m = 8.0f;
    for (uint32_t i = 0; i < n_frames; i++) {
        plane_room_pose(i, f.T_world_cam);
        assert_int_equal(tsdf_scene_render(&scene, w, h, &f.K, f.T_world_cam, depth, NULL),
                         TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(vol, &f), TSDF_OK);
    }
    free(depth);

    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(vol, NULL, &m), TSDF_OK);
    /* About 2 vertices per cm^2 of wall: 15 m^2 of surface. */
    assert_true(m.vertex_count > 200000);
    /* No exclusion (edge radius 0); min_weight 3 only counts, in good, the
     * vertices whose 8 cell corners were each seen by >= 3 frames, which
     * must be all of them: the trajectory sees every surface point often. */
    vertex_error(vol, &scene, &m, 0.0f, 3.0f, &mean_vox, &max_vox, &max_good_vox, &good);
    /* Normals point out of the surface, i.e. into the room: along the
     * gradient of the true sdf (by central differences; at an edge or a
     * corner it is the nearest wall's inward normal). */
    for (size_t i = 0; i < m.vertex_count; i++) {
        const float *q = &m.positions[3 * i], *n = &m.normals[3 * i];
        float g = 0.0f;
        for (int a = 0; a < 3; a++) {
            float qp[3] = {q[0], q[1], q[2]}, qm[3] = {q[0], q[1], q[2]};
            qp[a] += 0.25f * VOXEL_M;
            qm[a] -= 0.25f * VOXEL_M;
            g += n[a] * (tsdf_scene_sdf(&scene, qp) - tsdf_scene_sdf(&scene, qm));
        }
        inward += g <= 0.0f;
    }
    print_message("room of planes: %zu vertices %zu triangles from %u frames (320x240), "
                  "|sdf| mean %.4f max %.4f voxel over all vertices, %zu open edges, "
                  "%zu vertices in cells seen < 3 times, %zu normals facing the wall\n",
                  m.vertex_count, m.triangle_count, n_frames, mean_vox, max_vox, open_edges(&m),
                  m.vertex_count - good, inward);
    assert_true(mean_vox <= 0.1);
    assert_true(max_vox <= 0.5);
    assert_int_equal(good, m.vertex_count);
    /* Seen from everywhere inside, the room's surface is closed, a
     * topological sphere (V - E + F = 2 with E = 3F / 2), without duplicate
     * vertices, its normals facing the room. */
    assert_int_equal(open_edges(&m), 0);
    assert_int_equal(
        (long)m.vertex_count - (long)(3 * m.triangle_count / 2) + (long)m.triangle_count, 2);
    assert_int_equal(duplicate_positions(&m), 0);
    assert_int_equal(inward, 0);
    tsdf_mesh_fini(&m);
    tsdf_volume_destroy(vol);
}

/* ---- the two voxel layouts ---------------------------------------------------- */

/* The s16 layout (the default) stores the sdf in units of trunc / 32767 and
 * the weight as an integer frame count; f32 stores both as floats. The
 * default may be s16 only if that costs no visible accuracy: on each
 * standard sequence, fused frame for frame into one volume of each layout
 * with the same parameters, the mean distance of the mesh vertices to the
 * true surface may differ by at most LAYOUT_MEAN_DIFF_VOX between the two. */
#define LAYOUT_MEAN_DIFF_VOX 0.01

typedef struct {
    const char *name;
    uint32_t width, height;
    /* Each layout's own mean |sdf| must stay below this, so that the
     * comparison is between two good meshes. */
    double mean_bound_vox;
} layout_case;

static void test_layouts_agree(void **state)
{
    /* The sphere and the box at 160 x 120 as in test_sphere_mesh; the room
     * at 320 x 240 as in test_room_mesh_and_raycast, since at 160 x 120 a
     * pixel spans 2 cm on its far walls (mean 0.11 voxel there); the plane
     * at 240 x 180, where a pixel on the far floor is about a voxel (at
     * 160 x 120 the mean is 0.13 voxel). Integration, not the image size,
     * sets the time: the room and the plane take about 5 s of CPU each.
     * The box is small, 50 x 30 x 20 cm, so much of its surface lies near
     * a convex edge, where projective fusion moves the zero crossing out
     * by up to trunc / 2 (see vertex_error): its mean is about 0.32 voxel,
     * hence its looser bound. */
    static const layout_case cases[] = {
        {"sphere", 160, 120, 0.1},
        {"box", 160, 120, 0.5},
        {"room", 320, 240, 0.1},
        {"plane", 240, 180, 0.1},
    };
    static const tsdf_layout layouts[2] = {TSDF_LAYOUT_F32, TSDF_LAYOUT_S16};
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const layout_case *lc = &cases[c];
        tsdf_synth_sequence seq;
        tsdf_volume *vol[2];
        double mean_vox[2], max_vox[2];
        size_t vertices[2];
        float *depth;
        clock_t t0 = clock();
        assert_int_equal(tsdf_synth_sequence_init(&seq, lc->name), TSDF_OK);
        assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, lc->width, lc->height), TSDF_OK);
        for (int l = 0; l < 2; l++) {
            tsdf_volume_params p;
            tsdf_volume_params_default(&p);
            p.backend = TSDF_BACKEND_CPU;
            p.voxel_size_m = VOXEL_M;
            p.initial_capacity_blocks = 4096;
            p.layout = layouts[l];
            assert_int_equal(tsdf_volume_create(&p, &vol[l]), TSDF_OK);
        }
        depth = malloc((size_t)lc->width * lc->height * sizeof(float));
        assert_non_null(depth);
        /* Each frame is rendered once and integrated into both volumes. */
        for (uint32_t i = 0; i < seq.frame_count; i++) {
            tsdf_frame f;
            assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, NULL, &f), TSDF_OK);
            for (int l = 0; l < 2; l++)
                assert_int_equal(tsdf_volume_integrate(vol[l], &f), TSDF_OK);
        }
        free(depth);
        for (int l = 0; l < 2; l++) {
            tsdf_mesh m;
            double max_good_vox;
            size_t good;
            tsdf_mesh_init(&m);
            assert_int_equal(tsdf_volume_mesh(vol[l], NULL, &m), TSDF_OK);
            assert_true(m.vertex_count > 1000);
            vertex_error(vol[l], &seq.scene, &m, 0.0f, 0.0f, &mean_vox[l], &max_vox[l],
                         &max_good_vox, &good);
            vertices[l] = m.vertex_count;
            tsdf_mesh_fini(&m);
            tsdf_volume_destroy(vol[l]);
        }
        print_message("layouts, %s (%u frames, %ux%u): |sdf| mean f32 %.5f s16 %.5f voxel, "
                      "s16 - f32 %+.2e voxel; max f32 %.4f s16 %.4f voxel; "
                      "%zu / %zu vertices; %.1f s CPU\n",
                      lc->name, seq.frame_count, lc->width, lc->height, mean_vox[0], mean_vox[1],
                      mean_vox[1] - mean_vox[0], max_vox[0], max_vox[1], vertices[0], vertices[1],
                      (double)(clock() - t0) / CLOCKS_PER_SEC);
        assert_true(mean_vox[0] <= lc->mean_bound_vox);
        assert_true(mean_vox[1] <= lc->mean_bound_vox);
        assert_true(fabs(mean_vox[1] - mean_vox[0]) <= LAYOUT_MEAN_DIFF_VOX);
    }
}

/* ---- PLY ---------------------------------------------------------------------- */

static void test_ply_roundtrip(void **state)
{
    fused_scene fs;
    tsdf_mesh m;
    char path[512], line[256];
    FILE *fp;
    size_t nv = 0, nf = 0, header_bytes;
    int saw_format = 0, saw_red = 0, saw_list = 0, props = 0;
    long file_size;
    (void)state;
    fuse(&fs, "sphere", 80, 60, 1);
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(fs.vol, NULL, &m), TSDF_OK);
    assert_true(m.triangle_count > 0);
    snprintf(path, sizeof(path), "%s/sphere.ply", tsdf_test_tmpdir());
    assert_int_equal(tsdf_mesh_write_ply(&m, path), TSDF_OK);

    fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_non_null(fgets(line, sizeof(line), fp));
    assert_string_equal(line, "ply\n");
    for (;;) {
        assert_non_null(fgets(line, sizeof(line), fp));
        if (strcmp(line, "end_header\n") == 0)
            break;
        if (strcmp(line, "format binary_little_endian 1.0\n") == 0)
            saw_format = 1;
        sscanf(line, "element vertex %zu", &nv);
        sscanf(line, "element face %zu", &nf);
        props += strncmp(line, "property float ", 15) == 0;
        saw_red |= strcmp(line, "property uchar red\n") == 0;
        saw_list |= strcmp(line, "property list uchar int vertex_indices\n") == 0;
    }
    header_bytes = (size_t)ftell(fp);
    assert_true(saw_format && saw_red && saw_list);
    assert_int_equal(props, 6);
    assert_int_equal(nv, m.vertex_count);
    assert_int_equal(nf, m.triangle_count);
    /* The body: 6 floats + 3 bytes per vertex, 1 + 3 * 4 bytes per face. */
    {
        unsigned char rec[27];
        float xyz[6];
        assert_int_equal(fread(rec, 1, 27, fp), 27);
        memcpy(xyz, rec, sizeof(xyz)); /* the test host is little-endian */
        assert_memory_equal(xyz, m.positions, 3 * sizeof(float));
        assert_memory_equal(xyz + 3, m.normals, 3 * sizeof(float));
        assert_memory_equal(rec + 24, m.colors, 3);
        assert_int_equal(fseek(fp, (long)(header_bytes + 27 * m.vertex_count), SEEK_SET), 0);
        for (size_t t = 0; t < m.triangle_count; t++) {
            unsigned char frec[13];
            int32_t idx[3];
            assert_int_equal(fread(frec, 1, 13, fp), 13);
            assert_int_equal(frec[0], 3);
            memcpy(idx, frec + 1, sizeof(idx));
            for (int k = 0; k < 3; k++)
                assert_int_equal((uint32_t)idx[k], m.indices[3 * t + k]);
        }
    }
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    file_size = ftell(fp);
    assert_int_equal((size_t)file_size, header_bytes + 27 * nv + 13 * nf);
    fclose(fp);

    /* An unwritable path is an I/O error, and leaves nothing behind. */
    assert_int_equal(tsdf_mesh_write_ply(&m, "/nonexistent-dir/x.ply"), TSDF_EIO);
    /* An index past the vertices is refused before anything is written. */
    m.indices[0] = (uint32_t)m.vertex_count;
    assert_int_equal(tsdf_mesh_write_ply(&m, path), TSDF_EINVAL);
    tsdf_mesh_fini(&m);
    assert_null(m.positions);
    tsdf_volume_destroy(fs.vol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mc_tables),
        cmocka_unit_test(test_sphere_mesh),
        cmocka_unit_test(test_room_mesh_and_raycast),
        cmocka_unit_test(test_plane_room_mesh),
        cmocka_unit_test(test_layouts_agree),
        cmocka_unit_test(test_ply_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
