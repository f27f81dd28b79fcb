/*
 * test_cuda_volume.c - the CUDA backend computes what the CPU reference
 * computes, for each voxel layout. The same frames go into a CPU and a CUDA
 * volume of the same layout through the public API; then
 *   - the allocated block sets agree (a difference allowed only where float
 *     rounding decides a band edge: at most 0.01% of the blocks),
 *   - in every common block every voxel has the same weight, the same
 *     colour, and an sdf within the layout's quantum (s16: one unit of
 *     trunc / 32767; f32: 1e-4 m), and the block versions agree,
 *   - the meshes have vertex and triangle counts within 0.1% and every GPU
 *     vertex lies within 0.01 voxel of a CPU vertex (nearest by a spatial
 *     hash),
 *   - raycasts agree within 1 mm on at least 99.9% of the valid pixels,
 *   - eviction (a radius about a point) removes the same blocks, copies
 *     out the same voxels, and an incremental mesh then reports the same
 *     removed blocks; writing the blocks back restores both volumes; meshes
 *     by block come in the same parts;
 *   - frames in page-locked memory (tsdf_host_alloc, uploaded without the
 *     staging copy) give the same volume as from ordinary memory, and a
 *     shared mapping registered with tsdf_host_register (as the daemon
 *     registers a client's ring) takes raycast outputs and frames as
 *     ordinary memory does.
 * On synthetic sequences (scenes/tsdf_synth.h: float and uint16 depth, with
 * colour) and on the first 100 frames of 7-Scenes (1 cm voxels, 4 cm
 * truncation, depth <= 4 m), which also prints the GPU timings.
 * Exits 77 without a usable GPU; the 7-Scenes case skips without the data.
 */
#define _GNU_SOURCE /* memfd_create, fallocate */

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "tsdf_dataset.h"
#include "tsdf_math.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static tsdf_volume *make_volume(tsdf_backend backend, float voxel, float trunc_vox,
                                tsdf_layout layout)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.voxel_size_m = voxel;
    p.trunc_vox = trunc_vox;
    p.backend = backend;
    p.layout = layout;
    /* Small on purpose: both backends must grow along the way. */
    p.initial_capacity_blocks = 4096;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    assert_int_equal(tsdf_volume_backend(v), backend);
    return v;
}

/* ---- volumes ------------------------------------------------------------ */

static uint64_t set_key(const tsdf_block_set *s, size_t i)
{
    return tsdf_block_key(s->coords[3 * i], s->coords[3 * i + 1], s->coords[3 * i + 2]);
}

/* The largest sdf difference the layout lets two backends have: they run
 * the same maths with the same rounding, so in practice none. */
static double sdf_tolerance(const tsdf_block_set *s)
{
    return s->layout == TSDF_LAYOUT_S16 ? (double)s->sdf_unit_m : 1e-4;
}

static void compare_sets(const tsdf_block_set *a, const tsdf_block_set *b, const char *what)
{
    size_t i = 0, j = 0, only_cpu = 0, only_gpu = 0, common = 0;
    size_t weight_diff = 0, sdf_diff = 0, rgb_diff = 0, version_diff = 0;
    const double tol = sdf_tolerance(a);
    double max_sdf = 0.0;
    while (i < a->count || j < b->count) {
        uint64_t ka = i < a->count ? set_key(a, i) : UINT64_MAX;
        uint64_t kb = j < b->count ? set_key(b, j) : UINT64_MAX;
        if (ka < kb) {
            only_cpu++;
            i++;
            continue;
        }
        if (kb < ka) {
            only_gpu++;
            j++;
            continue;
        }
        common++;
        version_diff += a->versions[i] != b->versions[j];
        for (unsigned k = 0; k < TSDF_BLOCK_VOXELS; k++) {
            const tsdf_vox x = tsdf_block_set_get(a, i, k), y = tsdf_block_set_get(b, j, k);
            double d = fabs((double)x.sdf_m - (double)y.sdf_m);
            if (d > max_sdf)
                max_sdf = d;
            sdf_diff += d > tol;
            weight_diff += x.weight != y.weight;
            if (a->rgb != NULL && b->rgb != NULL)
                rgb_diff += memcmp(&a->rgb[3 * (i * TSDF_BLOCK_VOXELS + k)],
                                   &b->rgb[3 * (j * TSDF_BLOCK_VOXELS + k)], 3) != 0;
        }
        i++;
        j++;
    }
    printf("[%s] %s blocks cpu %zu gpu %zu common %zu only-cpu %zu only-gpu %zu; voxels: weight "
           "diffs %zu, sdf > %.2g %zu (max %.3g m), rgb diffs %zu, version diffs %zu\n",
           what, tsdf_layout_name(a->layout), a->count, b->count, common, only_cpu, only_gpu,
           weight_diff, tol, sdf_diff, max_sdf, rgb_diff, version_diff);
    assert_int_equal(a->layout, b->layout);
    assert_int_equal(a->rgb != NULL, b->rgb != NULL);
    assert_true((double)(only_cpu + only_gpu) <= 1e-4 * (double)a->count);
    assert_int_equal(weight_diff, 0);
    assert_int_equal(sdf_diff, 0);
    assert_int_equal(rgb_diff, 0);
    assert_int_equal(version_diff, 0);
}

static void compare_volumes(tsdf_volume *cpu, tsdf_volume *gpu, const char *what)
{
    tsdf_block_set a, b;
    tsdf_block_set_init(&a);
    tsdf_block_set_init(&b);
    assert_int_equal(tsdf_volume_export_blocks(cpu, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(gpu, &b), TSDF_OK);
    assert_true(a.count > 0);
    compare_sets(&a, &b, what);
    tsdf_block_set_fini(&a);
    tsdf_block_set_fini(&b);

    tsdf_volume_stats sa, sb;
    assert_int_equal(tsdf_volume_get_stats(cpu, &sa), TSDF_OK);
    assert_int_equal(tsdf_volume_get_stats(gpu, &sb), TSDF_OK);
    assert_int_equal(sa.frames_integrated, sb.frames_integrated);
    assert_int_equal(sa.version, sb.version);
    assert_int_equal(sa.has_color, sb.has_color);
    assert_int_equal(sa.layout, sb.layout);
    assert_int_equal(sa.blocks_erased, sb.blocks_erased);
    assert_int_equal(sb.backend, TSDF_BACKEND_CUDA);
}

/* ---- meshes: nearest vertex through a spatial hash ------------------------ */

typedef struct {
    float cell;
    size_t nbuckets;
    int64_t *head; /* per bucket: first vertex or -1 */
    int64_t *next; /* per vertex */
    const float *pos;
} vgrid;

static uint64_t cell_hash(int64_t x, int64_t y, int64_t z)
{
    uint64_t h = (uint64_t)x * 73856093u ^ (uint64_t)y * 19349663u ^ (uint64_t)z * 83492791u;
    return tsdf_key_hash(h);
}

static void vgrid_build(vgrid *g, const float *pos, size_t n, float cell)
{
    g->cell = cell;
    g->nbuckets = 1;
    while (g->nbuckets < 2 * n + 1)
        g->nbuckets <<= 1;
    g->head = malloc(g->nbuckets * sizeof(*g->head));
    g->next = malloc((n ? n : 1) * sizeof(*g->next));
    assert_non_null(g->head);
    assert_non_null(g->next);
    g->pos = pos;
    for (size_t i = 0; i < g->nbuckets; i++)
        g->head[i] = -1;
    for (size_t i = 0; i < n; i++) {
        int64_t c[3];
        for (int a = 0; a < 3; a++)
            c[a] = (int64_t)floorf(pos[3 * i + a] / cell);
        size_t b = cell_hash(c[0], c[1], c[2]) & (g->nbuckets - 1);
        g->next[i] = g->head[b];
        g->head[b] = (int64_t)i;
    }
}

static double vgrid_nearest(const vgrid *g, const float *p)
{
    int64_t c[3];
    double best = INFINITY;
    for (int a = 0; a < 3; a++)
        c[a] = (int64_t)floorf(p[a] / g->cell);
    for (int dz = -1; dz <= 1; dz++)
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) {
                size_t b = cell_hash(c[0] + dx, c[1] + dy, c[2] + dz) & (g->nbuckets - 1);
                for (int64_t k = g->head[b]; k >= 0; k = g->next[k]) {
                    double d2 = 0.0;
                    for (int a = 0; a < 3; a++) {
                        double d = (double)g->pos[3 * k + a] - (double)p[a];
                        d2 += d * d;
                    }
                    if (d2 < best)
                        best = d2;
                }
            }
    return sqrt(best);
}

static void vgrid_free(vgrid *g)
{
    free(g->head);
    free(g->next);
}

static void check_mesh_sane(const tsdf_mesh *m)
{
    for (size_t i = 0; i < 3 * m->triangle_count; i++)
        assert_true(m->indices[i] < m->vertex_count);
    for (size_t i = 0; i < m->vertex_count; i++) {
        const float *n = &m->normals[3 * i];
        double len = sqrt((double)n[0] * n[0] + (double)n[1] * n[1] + (double)n[2] * n[2]);
        assert_true(fabs(len - 1.0) < 1e-3);
    }
}

/* The sum of every triangle's corner positions: the same for two meshes
 * with the same triangles, whatever their order and vertex numbering. */
static void triangle_sum(const tsdf_mesh *m, double sum[3])
{
    sum[0] = sum[1] = sum[2] = 0.0;
    for (size_t i = 0; i < 3 * m->triangle_count; i++)
        for (int k = 0; k < 3; k++)
            sum[k] += (double)m->positions[3 * (size_t)m->indices[i] + k];
}

static void compare_meshes(tsdf_volume *cpu, tsdf_volume *gpu, const tsdf_mesh_params *mp,
                           float voxel, const char *what)
{
    tsdf_mesh a, b;
    tsdf_mesh_init(&a);
    tsdf_mesh_init(&b);
    assert_int_equal(tsdf_volume_mesh(cpu, mp, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(gpu, mp, &b), TSDF_OK);
    check_mesh_sane(&b);
    vgrid g;
    vgrid_build(&g, a.positions, a.vertex_count, voxel);
    double max_d = 0.0;
    size_t far = 0;
    for (size_t i = 0; i < b.vertex_count; i++) {
        double d = vgrid_nearest(&g, &b.positions[3 * i]);
        if (d > max_d)
            max_d = d;
        far += d > 0.01 * voxel;
    }
    vgrid_free(&g);
    printf("[%s] mesh: cpu %zu vertices %zu triangles, gpu %zu vertices %zu triangles; "
           "max nearest distance %.3g voxel, %zu vertices beyond 0.01 voxel\n",
           what, a.vertex_count, a.triangle_count, b.vertex_count, b.triangle_count, max_d / voxel,
           far);
    assert_true(a.vertex_count > 0 || mp != NULL);
    double dv = fabs((double)a.vertex_count - (double)b.vertex_count);
    double dt = fabs((double)a.triangle_count - (double)b.triangle_count);
    assert_true(dv <= 1e-3 * (double)a.vertex_count);
    assert_true(dt <= 1e-3 * (double)a.triangle_count);
    assert_int_equal(far, 0);
    assert_int_equal(a.colors != NULL, b.colors != NULL);
    /* With the same triangle count, the triangles themselves: each one's
     * corners are the CPU's (an index into the wrong vertex, or a
     * triangle not written, moves the sum by about a voxel or more). */
    if (a.triangle_count == b.triangle_count) {
        double sa[3], sb[3];
        triangle_sum(&a, sa);
        triangle_sum(&b, sb);
        /* Vertices may differ by max_d (0 so far: the same bits). */
        const double tol = 1e-3 * voxel + max_d * 3.0 * (double)a.triangle_count;
        for (int k = 0; k < 3; k++)
            assert_true(fabs(sa[k] - sb[k]) <= tol);
    }
    tsdf_mesh_fini(&a);
    tsdf_mesh_fini(&b);
}

/* ---- raycasts --------------------------------------------------------------- */

static void compare_raycast(tsdf_volume *cpu, tsdf_volume *gpu, uint32_t w, uint32_t h,
                            const tsdf_intrinsics *K, const float T[16], float zmax,
                            const char *what)
{
    size_t n = (size_t)w * h;
    float *da = malloc(n * sizeof(float)), *db = malloc(n * sizeof(float));
    float *na = malloc(3 * n * sizeof(float)), *nb = malloc(3 * n * sizeof(float));
    assert_non_null(da);
    assert_non_null(db);
    assert_non_null(na);
    assert_non_null(nb);
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = w;
    rp.height = h;
    rp.K = *K;
    memcpy(rp.T_world_cam, T, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = zmax;
    tsdf_raycast_output oa = {da, na, NULL}, ob = {db, nb, NULL};
    assert_int_equal(tsdf_volume_raycast(cpu, &rp, &oa), TSDF_OK);
    assert_int_equal(tsdf_volume_raycast(gpu, &rp, &ob), TSDF_OK);
    size_t valid = 0, bad = 0, normal_bad = 0;
    double max_d = 0.0;
    for (size_t i = 0; i < n; i++) {
        int va = !isnan(da[i]), vb = !isnan(db[i]);
        if (!va && !vb)
            continue;
        valid++;
        if (va != vb) {
            bad++;
            continue;
        }
        double d = fabs((double)da[i] - (double)db[i]);
        if (d > max_d)
            max_d = d;
        bad += d > 1e-3;
        if (!isnan(na[3 * i]) && !isnan(nb[3 * i])) {
            double dot = (double)na[3 * i] * nb[3 * i] + (double)na[3 * i + 1] * nb[3 * i + 1] +
                         (double)na[3 * i + 2] * nb[3 * i + 2];
            normal_bad += dot < 0.99;
        }
    }
    printf("[%s] raycast %ux%u: %zu valid pixels, %zu beyond 1 mm or valid on one side only "
           "(%.4f%%), max diff %.3g m, normals off by > 8 deg: %zu\n",
           what, w, h, valid, bad, 100.0 * (double)bad / (double)(valid ? valid : 1), max_d,
           normal_bad);
    assert_true(valid > n / 20);
    assert_true((double)bad <= 1e-3 * (double)valid);
    assert_true((double)normal_bad <= 1e-3 * (double)valid);
    free(da);
    free(db);
    free(na);
    free(nb);
}

/* ---- incremental meshes, parts and eviction --------------------------------- */

/* The same parts (blocks, and each one's vertex and triangle counts) and
 * the same removed blocks. */
static void compare_mesh_structure(tsdf_volume *cpu, tsdf_volume *gpu, const tsdf_mesh_params *mp,
                                   const char *what)
{
    tsdf_mesh a, b;
    tsdf_mesh_init(&a);
    tsdf_mesh_init(&b);
    assert_int_equal(tsdf_volume_mesh(cpu, mp, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(gpu, mp, &b), TSDF_OK);
    check_mesh_sane(&b);
    printf("[%s] %s%s mesh: %zu parts, %zu triangles, %zu removed blocks%s\n", what,
           mp->by_block ? "by-block " : "", mp->since_version ? "incremental" : "whole",
           b.block_count, b.triangle_count, b.removed_count, b.full ? " (full)" : "");
    assert_int_equal(a.full, b.full);
    assert_int_equal(a.block_count, b.block_count);
    assert_int_equal(a.triangle_count, b.triangle_count);
    assert_int_equal(a.vertex_count, b.vertex_count);
    if (a.block_count != 0) {
        assert_memory_equal(a.block_coords, b.block_coords, 3 * a.block_count * sizeof(int32_t));
        assert_memory_equal(a.block_vertex_start, b.block_vertex_start,
                            (a.block_count + 1) * sizeof(uint32_t));
        assert_memory_equal(a.block_triangle_start, b.block_triangle_start,
                            (a.block_count + 1) * sizeof(uint32_t));
    }
    assert_int_equal(a.removed_count, b.removed_count);
    if (a.removed_count != 0)
        assert_memory_equal(a.removed_coords, b.removed_coords,
                            3 * a.removed_count * sizeof(int32_t));
    tsdf_mesh_fini(&a);
    tsdf_mesh_fini(&b);
}

/* Evicts the same far blocks from both, compares what went and what is
 * left, the incremental meshes that report it, and the volumes after the
 * blocks are written back. */
static void compare_eviction(tsdf_volume *cpu, tsdf_volume *gpu, const float center[3],
                             const char *what)
{
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(cpu, &st), TSDF_OK);
    const uint64_t before = st.version;
    tsdf_block_select q;
    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    memcpy(q.center_m, center, sizeof q.center_m);
    q.radius_m = 0.25f;
    /* A frustum selection (a camera at center looking along +z) takes the
     * same blocks on both sides: the shared tsdf_block_in_frustum. */
    tsdf_block_select fq;
    memset(&fq, 0, sizeof fq);
    fq.rules = TSDF_SELECT_INSIDE_FRUSTUM;
    fq.frustum.T_world_cam[0] = fq.frustum.T_world_cam[5] = fq.frustum.T_world_cam[10] = 1.0f;
    fq.frustum.T_world_cam[15] = 1.0f;
    fq.frustum.T_world_cam[3] = center[0];
    fq.frustum.T_world_cam[7] = center[1];
    fq.frustum.T_world_cam[11] = center[2];
    fq.frustum.K.fx = fq.frustum.K.fy = 100.0f;
    fq.frustum.K.cx = 79.5f;
    fq.frustum.K.cy = 59.5f;
    fq.frustum.width = 160;
    fq.frustum.height = 120;
    fq.frustum.near_m = 0.0f;
    fq.frustum.far_m = 5.0f;
    int32_t *fa = NULL, *fb = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(tsdf_volume_select(cpu, &fq, &fa, &na), TSDF_OK);
    assert_int_equal(tsdf_volume_select(gpu, &fq, &fb, &nb), TSDF_OK);
    printf("[%s] frustum selection: cpu %zu gpu %zu blocks\n", what, na, nb);
    assert_int_equal(na, nb);
    if (na)
        assert_memory_equal(fa, fb, 3 * na * sizeof(int32_t));
    free(fa);
    free(fb);

    tsdf_block_set oa, ob;
    tsdf_block_set_init(&oa);
    tsdf_block_set_init(&ob);
    size_t ea = 0, eb = 0;
    assert_int_equal(tsdf_volume_evict(cpu, &q, &oa, &ea), TSDF_OK);
    assert_int_equal(tsdf_volume_evict(gpu, &q, &ob, &eb), TSDF_OK);
    printf("[%s] evicted %zu blocks beyond 0.25 m\n", what, ea);
    assert_true(ea > 0);
    assert_int_equal(ea, eb);
    assert_int_equal(oa.count, ea);
    compare_sets(&oa, &ob, "evicted");
    compare_volumes(cpu, gpu, "after eviction");

    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = before;
    compare_mesh_structure(cpu, gpu, &mp, what);
    mp.by_block = 1;
    compare_mesh_structure(cpu, gpu, &mp, what);

    assert_int_equal(tsdf_volume_write_blocks(cpu, &oa), TSDF_OK);
    assert_int_equal(tsdf_volume_write_blocks(gpu, &ob), TSDF_OK);
    compare_volumes(cpu, gpu, "written back");
    tsdf_block_set_fini(&oa);
    tsdf_block_set_fini(&ob);
}

/* ---- synthetic sequences ------------------------------------------------------ */

/* Whether compute-sanitizer runs the program (scripts/gpu-test.sh sets
 * TSDF_UNDER_SANITIZER=1): the long cases then take fewer frames, and no
 * timings, which would measure the sanitizer. */
static int under_sanitizer(void)
{
    const char *san = getenv("TSDF_UNDER_SANITIZER");
    return san != NULL && strcmp(san, "1") == 0;
}

/* Whether the sanitizer's tool is racecheck (gpu-test.sh sets
 * TSDF_SANITIZER_TOOL to the tool it runs). */
static int under_racecheck(void)
{
    const char *tool = getenv("TSDF_SANITIZER_TOOL");
    return under_sanitizer() && tool != NULL && strcmp(tool, "racecheck") == 0;
}

/* Exports of two volumes of the same backend: the same bits. */
static void assert_same_volume(tsdf_volume *a, tsdf_volume *b)
{
    tsdf_block_set x, y;
    tsdf_block_set_init(&x);
    tsdf_block_set_init(&y);
    assert_int_equal(tsdf_volume_export_blocks(a, &x), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(b, &y), TSDF_OK);
    assert_true(x.count > 0);
    assert_int_equal(x.count, y.count);
    assert_memory_equal(x.coords, y.coords, 3 * x.count * sizeof(int32_t));
    assert_memory_equal(x.geom, y.geom, tsdf_block_set_geom_bytes(&x));
    assert_int_equal(x.rgb != NULL, y.rgb != NULL);
    if (x.rgb != NULL)
        assert_memory_equal(x.rgb, y.rgb, x.count * TSDF_BLOCK_RGB_BYTES);
    tsdf_block_set_fini(&x);
    tsdf_block_set_fini(&y);
}

/* Frame i of seq into *f: float depth, or 16-bit millimetres in mm when
 * mm is not NULL; colour into rgb when it is not NULL. */
static void synth_frame(const tsdf_synth_sequence *seq, uint32_t i, float *depth, uint16_t *mm,
                        uint8_t *rgb, tsdf_frame *f)
{
    assert_int_equal(tsdf_synth_sequence_frame(seq, i, depth, rgb, f), TSDF_OK);
    if (mm == NULL)
        return;
    tsdf_depth_m_to_mm(depth, (size_t)seq->width * seq->height, mm);
    f->depth_format = TSDF_DEPTH_U16;
    f->depth = mm;
    f->depth_scale = 0.001f;
}

static void fuse_synth(const char *name, int u16, int color, float voxel, tsdf_layout layout)
{
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, name), TSDF_OK);
    size_t n = (size_t)seq.width * seq.height;
    float *depth = malloc(n * sizeof(float));
    uint16_t *mm = malloc(n * sizeof(uint16_t));
    uint8_t *rgb = malloc(3 * n);
    assert_non_null(depth);
    assert_non_null(mm);
    assert_non_null(rgb);
    tsdf_volume *cpu = make_volume(TSDF_BACKEND_CPU, voxel, 4.0f, layout);
    tsdf_volume *gpu = make_volume(TSDF_BACKEND_CUDA, voxel, 4.0f, layout);
    for (uint32_t i = 0; i < seq.frame_count; i++) {
        tsdf_frame f;
        synth_frame(&seq, i, depth, u16 ? mm : NULL, color ? rgb : NULL, &f);
        assert_int_equal(tsdf_volume_integrate(cpu, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(gpu, &f), TSDF_OK);
    }
    assert_int_equal(tsdf_volume_sync(gpu), TSDF_OK);
    char what[64];
    snprintf(what, sizeof what, "%s %s%s %s", name, u16 ? "u16" : "f32", color ? " rgb" : "",
             tsdf_layout_name(layout));
    compare_volumes(cpu, gpu, what);
    compare_meshes(cpu, gpu, NULL, voxel, what);

    /* A box and a since-version selection mesh the same on both sides. */
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.use_box = 1;
    for (int a = 0; a < 3; a++) {
        mp.box.min[a] = seq.target_m[a] - 0.2f;
        mp.box.max[a] = seq.target_m[a] + 0.25f;
    }
    compare_meshes(cpu, gpu, &mp, voxel, "box");
    mp.by_block = 1;
    compare_mesh_structure(cpu, gpu, &mp, what);

    /* Raycasts from two of the sequence's poses and one in between. */
    for (uint32_t k = 0; k < 3; k++) {
        float T[16];
        assert_int_equal(tsdf_synth_sequence_pose(&seq, (k * 7 + 3) % seq.frame_count, T), TSDF_OK);
        compare_raycast(cpu, gpu, seq.width, seq.height, &seq.K, T, seq.max_depth_m, what);
    }

    /* One more frame, then a mesh of what changed since. */
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(cpu, &st), TSDF_OK);
    {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, 1, depth, color ? rgb : NULL, &f),
                         TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(cpu, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(gpu, &f), TSDF_OK);
        memset(&mp, 0, sizeof mp);
        mp.since_version = st.version;
        compare_meshes(cpu, gpu, &mp, voxel, "since");
        mp.by_block = 1;
        compare_mesh_structure(cpu, gpu, &mp, what);
    }

    compare_eviction(cpu, gpu, seq.target_m, what);

    /* Export from the GPU, import into a fresh GPU volume: identical. */
    tsdf_block_set bs;
    tsdf_block_set_init(&bs);
    assert_int_equal(tsdf_volume_export_blocks(gpu, &bs), TSDF_OK);
    tsdf_volume *gpu2 = make_volume(TSDF_BACKEND_CUDA, voxel, 4.0f, layout);
    assert_int_equal(tsdf_volume_import_blocks(gpu2, &bs), TSDF_OK);
    tsdf_block_set_fini(&bs);
    assert_same_volume(gpu, gpu2);
    tsdf_volume_destroy(gpu2);

    tsdf_volume_destroy(cpu);
    tsdf_volume_destroy(gpu);
    free(depth);
    free(mm);
    free(rgb);
}

static void test_sphere_f32(void **state)
{
    (void)state;
    fuse_synth("sphere", 0, 0, 0.01f, TSDF_LAYOUT_F32);
}

static void test_sphere_s16(void **state)
{
    (void)state;
    fuse_synth("sphere", 0, 0, 0.01f, TSDF_LAYOUT_S16);
}

static void test_room_u16_rgb(void **state)
{
    (void)state;
    fuse_synth("room", 1, 1, 0.02f, TSDF_LAYOUT_S16);
}

static void test_demo_f32_rgb(void **state)
{
    (void)state;
    fuse_synth("demo", 0, 1, 0.01f, TSDF_LAYOUT_S16);
    fuse_synth("demo", 0, 1, 0.01f, TSDF_LAYOUT_F32);
}

/* ---- frames in page-locked memory ------------------------------------------ */

/* Frames whose depth and colour are in tsdf_host_alloc memory are uploaded
 * from it (no staging copy) and give the volume that the same frames from
 * ordinary memory give, on the synchronous (memory cap) and the
 * asynchronous path; the caller's buffers are free once integrate returns:
 * they are overwritten with garbage right after each call. */
static void test_page_locked_frames(void **state)
{
    (void)state;
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    size_t n = (size_t)seq.width * seq.height;
    float *depth = malloc(n * sizeof(float));
    uint16_t *mm = malloc(n * sizeof(uint16_t));
    uint8_t *rgb = malloc(3 * n);
    uint16_t *mm_pl = NULL;
    uint8_t *rgb_pl = NULL;
    assert_non_null(depth);
    assert_non_null(mm);
    assert_non_null(rgb);
    assert_int_equal(tsdf_host_alloc(n * sizeof(uint16_t), (void **)&mm_pl), TSDF_OK);
    assert_int_equal(tsdf_host_alloc(3 * n, (void **)&rgb_pl), TSDF_OK);
    /* Under compute-sanitizer the first frames only: they already take
     * both paths, growth and the deferred first frame. */
    uint32_t frames = seq.frame_count;
    if (under_sanitizer() && frames > 6)
        frames = 6;
    for (int capped = 0; capped < 2; capped++) {
        tsdf_volume *cpu = make_volume(TSDF_BACKEND_CPU, 0.02f, 4.0f, TSDF_LAYOUT_S16);
        tsdf_volume *ref = make_volume(TSDF_BACKEND_CUDA, 0.02f, 4.0f, TSDF_LAYOUT_S16);
        tsdf_volume *pl = make_volume(TSDF_BACKEND_CUDA, 0.02f, 4.0f, TSDF_LAYOUT_S16);
        if (capped)
            assert_int_equal(tsdf_volume_set_memory_cap(pl, (uint64_t)1 << 32), TSDF_OK);
        for (uint32_t i = 0; i < frames; i++) {
            tsdf_frame f;
            synth_frame(&seq, i, depth, mm, rgb, &f);
            assert_int_equal(tsdf_volume_integrate(cpu, &f), TSDF_OK);
            assert_int_equal(tsdf_volume_integrate(ref, &f), TSDF_OK);
            /* Under racecheck the reference volume's frame is waited for
             * before the page-locked volume's: with the kernels of both in
             * flight, racecheck of the whole program stalled in 5 of 6
             * runs (a kernel at 99% of the GPU, the host in the
             * synchronous path's stream wait), in 3 of 3 not with this
             * wait (bench/RESULTS.md, 2026-12-04 afternoon). Racecheck
             * looks for hazards inside a kernel, which the wait does not
             * change; natively and under the other tools both volumes'
             * work overlaps, as in the daemon. */
            if (under_racecheck())
                assert_int_equal(tsdf_volume_sync(ref), TSDF_OK);
            memcpy(mm_pl, mm, n * sizeof(uint16_t));
            memcpy(rgb_pl, rgb, 3 * n);
            f.depth = mm_pl;
            f.rgb = rgb_pl;
            assert_int_equal(tsdf_volume_integrate(pl, &f), TSDF_OK);
            if (under_sanitizer()) {
                /* Racecheck of the whole program has stalled in this
                 * loop's capped pass (bench/RESULTS.md, 2026-12-03
                 * evening): say how far it got. */
                printf("[page-locked%s] frame %u integrated\n", capped ? ", capped" : "", i);
                fflush(stdout);
            }
            /* Near depth everywhere, and another colour: any of it read
             * after the call would change the volume. */
            memset(mm_pl, 0x01, n * sizeof(uint16_t));
            memset(rgb_pl, 0x5a, 3 * n);
        }
        assert_int_equal(tsdf_volume_sync(pl), TSDF_OK);
        assert_same_volume(ref, pl);
        printf("[page-locked%s] %u frames: the same volume as from ordinary memory\n",
               capped ? ", capped" : "", frames);
        compare_volumes(cpu, pl, capped ? "page-locked, capped" : "page-locked");
        tsdf_volume_destroy(cpu);
        tsdf_volume_destroy(ref);
        tsdf_volume_destroy(pl);
    }
    tsdf_host_free(mm_pl);
    tsdf_host_free(rgb_pl);
    free(depth);
    free(mm);
    free(rgb);
}

/* A memfd mapped shared and registered (tsdf_host_register), as the
 * daemon maps a client's ring: a raycast's depth, normals and colour
 * copied into it by the device are the bytes a raycast into ordinary
 * memory gets, and a frame whose depth lies in it integrates as from
 * ordinary memory. */
static void test_registered_memory(void **state)
{
    (void)state;
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    const size_t n = (size_t)seq.width * seq.height;
    const size_t bytes = n * (4u + 12u + 3u);
    float *depth = malloc(n * sizeof(float));
    uint16_t *mm = malloc(n * sizeof(uint16_t));
    uint8_t *rgb = malloc(3 * n), *plain = malloc(bytes);
    assert_true(depth != NULL && mm != NULL && rgb != NULL && plain != NULL);
    int fd = memfd_create("test-registered", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    assert_int_equal(fallocate(fd, 0, 0, (off_t)bytes), 0);
    uint8_t *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(tsdf_host_register(map, bytes), TSDF_OK);

    tsdf_volume *a = make_volume(TSDF_BACKEND_CUDA, 0.02f, 4.0f, TSDF_LAYOUT_S16);
    tsdf_volume *b = make_volume(TSDF_BACKEND_CUDA, 0.02f, 4.0f, TSDF_LAYOUT_S16);
    uint32_t frames = seq.frame_count < 8 ? seq.frame_count : 8;
    for (uint32_t i = 0; i < frames; i++) {
        tsdf_frame f;
        synth_frame(&seq, i, depth, mm, rgb, &f);
        assert_int_equal(tsdf_volume_integrate(a, &f), TSDF_OK);
        memcpy(map, mm, n * sizeof(uint16_t));
        f.depth = map;
        assert_int_equal(tsdf_volume_integrate(b, &f), TSDF_OK);
        /* Read once integrate returned: overwriting it changes nothing. */
        memset(map, 0x01, n * sizeof(uint16_t));
    }
    assert_int_equal(tsdf_volume_sync(b), TSDF_OK);
    assert_same_volume(a, b);

    tsdf_raycast_params p;
    memset(&p, 0, sizeof p);
    p.width = seq.width;
    p.height = seq.height;
    p.K = seq.K;
    tsdf_frame f;
    synth_frame(&seq, frames / 2, depth, NULL, rgb, &f);
    memcpy(p.T_world_cam, f.T_world_cam, sizeof p.T_world_cam);
    p.min_depth_m = 0.1f;
    p.max_depth_m = 5.0f;
    memset(map, 0x5a, bytes);
    memset(plain, 0xa5, bytes);
    tsdf_raycast_output into_map = {(float *)(void *)map, (float *)(void *)(map + 4 * n),
                                    map + 16 * n};
    tsdf_raycast_output into_plain = {(float *)(void *)plain, (float *)(void *)(plain + 4 * n),
                                      plain + 16 * n};
    assert_int_equal(tsdf_volume_raycast(a, &p, &into_plain), TSDF_OK);
    assert_int_equal(tsdf_volume_raycast(a, &p, &into_map), TSDF_OK);
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        hits += !isnan(((const float *)(const void *)plain)[i]);
    assert_true(hits > n / 4);
    assert_memory_equal(map, plain, bytes);
    printf("[registered] %u frames, raycast of %zu hits: as from ordinary memory\n", frames, hits);

    tsdf_volume_destroy(a);
    tsdf_volume_destroy(b);
    tsdf_host_unregister(map);
    assert_int_equal(munmap(map, bytes), 0);
    close(fd);
    free(plain);
    free(depth);
    free(mm);
    free(rgb);
}

/* ---- a dense surface ------------------------------------------------------------ */

/* An n x n x n cube of blocks at block (x0, 0, 0) whose voxels alternate
 * in sign like a 3-D checkerboard (+-half a voxel, weight 1), so that
 * every cell with all corners known is crossed by four triangles. */
static void checker_blocks(tsdf_block_set *s, int32_t n, int32_t x0, float voxel)
{
    tsdf_block_set_init(s);
    const size_t count = (size_t)n * n * n;
    assert_int_equal(tsdf_block_set_alloc(s, count, TSDF_LAYOUT_F32, 0.0f, 0), TSDF_OK);
    for (size_t i = 0; i < count; i++) {
        s->coords[3 * i + 0] = x0 + (int32_t)(i % (size_t)n);
        s->coords[3 * i + 1] = (int32_t)(i / (size_t)n % (size_t)n);
        s->coords[3 * i + 2] = (int32_t)(i / ((size_t)n * n));
        s->versions[i] = 1;
        /* Blocks start at multiples of 8, so the parity of the voxel's
         * three in-block coordinates is that of its global ones, in any
         * order of the index's axes. */
        for (unsigned j = 0; j < TSDF_BLOCK_VOXELS; j++) {
            unsigned parity = ((j & 7) + ((j >> 3) & 7) + (j >> 6)) & 1;
            tsdf_vox x = {parity ? 0.5f * voxel : -0.5f * voxel, 1.0f};
            tsdf_block_set_put(s, i, j, x);
        }
    }
}

/* A surface far denser than a scan gives: every cell crossed, about
 * 1,700 triangles a block where 7-Scenes has 60, so that the edge
 * bitmap's words, their vertex ids and the triangles' offsets run to
 * counts the scenes do not reach. Whole and by block on a fresh volume,
 * then incremental over more blocks than the first mesh had; each must be
 * the CPU's mesh. */
static void test_dense_mesh(void **state)
{
    (void)state;
    const float voxel = 0.01f;
    tsdf_volume *cpu = make_volume(TSDF_BACKEND_CPU, voxel, 4.0f, TSDF_LAYOUT_F32);
    tsdf_volume *gpu = make_volume(TSDF_BACKEND_CUDA, voxel, 4.0f, TSDF_LAYOUT_F32);
    tsdf_block_set s;
    checker_blocks(&s, 2, 0, voxel);
    assert_int_equal(tsdf_volume_import_blocks(cpu, &s), TSDF_OK);
    assert_int_equal(tsdf_volume_import_blocks(gpu, &s), TSDF_OK);
    tsdf_block_set_fini(&s);

    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.by_block = 1;
    compare_mesh_structure(cpu, gpu, &mp, "dense");
    /* The GPU sizes a mesh's output by the largest of its kind so far
     * and emits it again when the counts outgrow that: the first whole
     * mesh outgrows nothing, the second fits. */
    compare_meshes(cpu, gpu, NULL, voxel, "dense");
    compare_meshes(cpu, gpu, NULL, voxel, "dense, again");
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_volume_mesh(gpu, NULL, &m), TSDF_OK);
    /* 15^3 cells with all corners known, four triangles each. */
    assert_int_equal(m.triangle_count, 4 * 15 * 15 * 15);
    tsdf_mesh_fini(&m);

    /* 27 more blocks apart from them, then what changed since. */
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(gpu, &st), TSDF_OK);
    checker_blocks(&s, 3, 4, voxel);
    assert_int_equal(tsdf_volume_write_blocks(cpu, &s), TSDF_OK);
    assert_int_equal(tsdf_volume_write_blocks(gpu, &s), TSDF_OK);
    tsdf_block_set_fini(&s);
    mp.since_version = st.version;
    compare_mesh_structure(cpu, gpu, &mp, "dense");
    mp.by_block = 0;
    compare_meshes(cpu, gpu, &mp, voxel, "dense, since");
    /* The whole mesh, now over four times the size it was: past the output
     * sized by the first, so emitted again; then within it. */
    compare_meshes(cpu, gpu, NULL, voxel, "dense, grown");
    compare_meshes(cpu, gpu, NULL, voxel, "dense, grown, again");
    tsdf_volume_destroy(cpu);
    tsdf_volume_destroy(gpu);
}

/* ---- 7-Scenes ----------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, size_t n)
{
    qsort(x, n, sizeof(double), cmp_double);
    return n ? x[n / 2] : 0.0;
}

static void test_7scenes(void **state)
{
    (void)state;
    const char *dir = tsdf_test_data_dir();
    if (dir == NULL) {
        printf("7-Scenes data not found: case skipped\n");
        skip();
    }
    tsdf_dataset *ds = NULL;
    assert_int_equal(tsdf_dataset_open(dir, &ds), TSDF_OK);
    tsdf_dataset_info info;
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    uint32_t nframes = info.frame_count < 100 ? info.frame_count : 100;
    const char *env = getenv("TSDF_7SCENES_FRAMES");
    if (env && atoi(env) > 0 && (uint32_t)atoi(env) < nframes)
        nframes = (uint32_t)atoi(env);
    size_t npix = (size_t)info.width * info.height;
    uint16_t *depth = malloc(npix * nframes * sizeof(uint16_t));
    tsdf_dataset_frame *fr = malloc(nframes * sizeof(*fr));
    assert_non_null(depth);
    assert_non_null(fr);
    for (uint32_t i = 0; i < nframes; i++)
        assert_int_equal(tsdf_dataset_load(ds, i, depth + i * npix, npix, &fr[i]), TSDF_OK);
    tsdf_dataset_close(ds);

    tsdf_volume *cpu = make_volume(TSDF_BACKEND_CPU, 0.01f, 4.0f, TSDF_LAYOUT_S16);
    tsdf_volume *gpu = make_volume(TSDF_BACKEND_CUDA, 0.01f, 4.0f, TSDF_LAYOUT_S16);
    double cpu_ms = 0.0;
    double *alloc_ms = malloc(nframes * sizeof(double));
    double *update_ms = malloc(nframes * sizeof(double));
    double *upload_ms = malloc(nframes * sizeof(double));
    assert_non_null(alloc_ms);
    assert_non_null(update_ms);
    assert_non_null(upload_ms);
    for (uint32_t i = 0; i < nframes; i++) {
        tsdf_frame f;
        tsdf_dataset_frame_to_tsdf(&fr[i], depth + i * npix, 0.1f, 4.0f, &f);
        double t0 = now_ms();
        assert_int_equal(tsdf_volume_integrate(cpu, &f), TSDF_OK);
        cpu_ms += now_ms() - t0;
        assert_int_equal(tsdf_volume_integrate(gpu, &f), TSDF_OK);
        tsdf_volume_stats st;
        assert_int_equal(tsdf_volume_get_stats(gpu, &st), TSDF_OK);
        alloc_ms[i] = st.last_alloc_ms;
        update_ms[i] = st.last_update_ms;
        upload_ms[i] = st.last_upload_ms;
    }
    compare_volumes(cpu, gpu, "7scenes");
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(gpu, &st), TSDF_OK);
    double sum_a = 0, sum_u = 0;
    for (uint32_t i = 0; i < nframes; i++) {
        sum_a += alloc_ms[i];
        sum_u += update_ms[i];
    }
    printf("[7scenes] %u frames 640x480, 1 cm voxels, 4 cm truncation, s16: %lu blocks, %lu "
           "slots, load %.3f, max probe %u, mean probe %.3f, %lu growth events, %.1f MiB on the "
           "GPU (%.0f bytes a block)\n",
           nframes, (unsigned long)st.blocks_allocated, (unsigned long)st.capacity_slots,
           st.load_factor, st.max_probe, st.mean_probe, (unsigned long)st.growth_events,
           st.memory_bytes / 1048576.0,
           (double)st.memory_bytes / (double)(st.blocks_allocated ? st.blocks_allocated : 1));
    printf("[7scenes] GPU per frame (CUDA events): upload median %.4f ms, allocate mean %.4f / "
           "median %.4f ms, update mean %.4f / median %.4f ms; CPU reference %.2f ms/frame\n",
           median(upload_ms, nframes), sum_a / nframes, median(alloc_ms, nframes), sum_u / nframes,
           median(update_ms, nframes), cpu_ms / nframes);

    /* Throughput: a second GPU volume, no stats calls in the loop, one sync
     * at the end: wall time per frame including upload and host work. */
    {
        tsdf_volume *g2 = make_volume(TSDF_BACKEND_CUDA, 0.01f, 4.0f, TSDF_LAYOUT_S16);
        double t0 = now_ms();
        for (uint32_t i = 0; i < nframes; i++) {
            tsdf_frame f;
            tsdf_dataset_frame_to_tsdf(&fr[i], depth + i * npix, 0.1f, 4.0f, &f);
            assert_int_equal(tsdf_volume_integrate(g2, &f), TSDF_OK);
        }
        assert_int_equal(tsdf_volume_sync(g2), TSDF_OK);
        double wall = now_ms() - t0;
        printf("[7scenes] GPU integrate wall time, %u frames back to back: %.4f ms/frame "
               "(host copy + upload + allocate + update)\n",
               nframes, wall / nframes);
        tsdf_volume_destroy(g2);
    }

    /* Meshes and raycasts agree; then their timings (not under a
     * sanitizer: with the data present, racecheck with the 20 repetitions
     * ran past the script's time limit). */
    compare_meshes(cpu, gpu, NULL, 0.01f, "7scenes");
    const uint32_t probe_frames[3] = {0, nframes / 2, nframes - 1};
    for (int k = 0; k < 3; k++)
        compare_raycast(cpu, gpu, info.width, info.height, &info.K, fr[probe_frames[k]].T_world_cam,
                        4.0f, "7scenes");
    if (under_sanitizer()) {
        printf("[7scenes] under compute-sanitizer: no raycast and mesh timings\n");
    } else {
        enum { REPS = 20 };
        double ray_k[REPS], ray_w[REPS], mesh_k[REPS], mesh_w[REPS];
        float *d = malloc(npix * sizeof(float)), *nrm = malloc(3 * npix * sizeof(float));
        assert_non_null(d);
        assert_non_null(nrm);
        tsdf_raycast_params rp;
        memset(&rp, 0, sizeof rp);
        rp.width = info.width;
        rp.height = info.height;
        rp.K = info.K;
        memcpy(rp.T_world_cam, fr[nframes / 2].T_world_cam, sizeof rp.T_world_cam);
        rp.min_depth_m = 0.1f;
        rp.max_depth_m = 4.0f;
        tsdf_raycast_output out = {d, nrm, NULL};
        for (int r = 0; r < REPS; r++) {
            double t0 = now_ms();
            assert_int_equal(tsdf_volume_raycast(gpu, &rp, &out), TSDF_OK);
            ray_w[r] = now_ms() - t0;
            assert_int_equal(tsdf_volume_get_stats(gpu, &st), TSDF_OK);
            ray_k[r] = st.last_raycast_ms;
            tsdf_mesh m;
            tsdf_mesh_init(&m);
            t0 = now_ms();
            assert_int_equal(tsdf_volume_mesh(gpu, NULL, &m), TSDF_OK);
            mesh_w[r] = now_ms() - t0;
            assert_int_equal(tsdf_volume_get_stats(gpu, &st), TSDF_OK);
            mesh_k[r] = st.last_mesh_ms;
            tsdf_mesh_fini(&m);
        }
        printf("[7scenes] raycast 640x480 (depth + normals): kernel median %.4f ms, call median "
               "%.4f ms; mesh (all blocks): GPU-side median %.4f ms, call median %.4f ms\n",
               median(ray_k, REPS), median(ray_w, REPS), median(mesh_k, REPS),
               median(mesh_w, REPS));
        free(d);
        free(nrm);
    }
    tsdf_volume_destroy(cpu);
    tsdf_volume_destroy(gpu);
    free(alloc_ms);
    free(update_ms);
    free(upload_ms);
    free(depth);
    free(fr);
}

int main(void)
{
    if (!tsdf_cuda_available())
        tsdf_test_skip_program("no usable GPU");
    tsdf_test_trace_on_signal();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sphere_f32),         cmocka_unit_test(test_sphere_s16),
        cmocka_unit_test(test_room_u16_rgb),       cmocka_unit_test(test_demo_f32_rgb),
        cmocka_unit_test(test_page_locked_frames), cmocka_unit_test(test_registered_memory),
        cmocka_unit_test(test_dense_mesh),         cmocka_unit_test(test_7scenes),
    };
    /* TSDF_TEST_FILTER="test_7scenes" runs one case (measurements). */
    const char *filter = getenv("TSDF_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
