/*
 * bench_engine.c - times the volume engine on the 7-Scenes kitchen.
 *
 *   bench_engine [--backend cpu|cuda|auto] [--data DIR] [--frames N]
 *                [--voxel M] [--trunc-vox V] [--max-depth M]
 *                [--layout s16|f32] [--color on|off]
 *                [--check-frames K] [--raycast-reps R] [--mesh-reps R]
 *                [--inc-mesh-step S]
 *                [--threads N] [--raycast-out FILE]
 *
 * --raycast-out writes the raycast's depth image (width x height float32
 * metres, NaN where no surface, host byte order) to FILE, for a comparison
 * with another engine (bench/open3d_compare.py).
 * --threads sets the CPU backend's thread count (tsdf_volume_params
 * cpu_threads; default 0, every online core); the header line prints the
 * count in use.
 * --layout picks how the volume stores a voxel (default s16, the engine's
 * default). --color on gives every frame an RGB image so that the volume
 * keeps a colour channel: the 7-Scenes copy here has depth only, so the
 * image is synthetic (a gradient over the pixels); it costs what real
 * colour costs in memory and integration work. The volume line reports the
 * volume memory per allocated block.
 *
 * All frames are loaded into memory first, so disk and PNG decoding are
 * not timed. With the CUDA backend the GPU result is first checked against
 * the CPU reference on the first K frames (the same allocated blocks, the
 * same weights, TSDF within 1e-4 m); the program stops with exit code 1 if
 * they disagree, because timing a wrong result is meaningless.
 *
 * Then, on a fresh volume: each frame is integrated and synced, and the
 * engine's own per-frame times (tsdf_volume_get_stats: last_upload_ms,
 * last_alloc_ms, last_update_ms: CUDA events on the GPU, wall time on the
 * CPU) are recorded with the wall time of integrate + sync; then a raycast
 * at the camera's resolution from the middle frame's pose and a full mesh
 * are repeated. Each series is printed as mean / median / p99 / max.
 *
 * After those series (whose lines stay as they were: RESULTS.md's raw
 * outputs are parsed), each checked before its time is printed:
 *  - back to back: all frames on a fresh volume with no sync between them
 *    and one at the end, as the daemon feeds a map; ms a frame is the total
 *    wall over the frames. Its volume must equal the synced run's (the same
 *    blocks, the same checksum of their voxels).
 *  - page-locked frames (CUDA backend): the synced and the back-to-back
 *    runs again with the frames in tsdf_host_alloc memory, which is
 *    uploaded without the host copy into staging; both volumes must equal
 *    the synced run's.
 *  - incremental mesh: a further run, synced, counts the blocks each frame
 *    changes, and after every S-th frame of the second half (--inc-mesh-step,
 *    0 skips it) times the by-block mesh since the version before that
 *    frame. Its parts must be the whole by-block mesh's parts of the same
 *    blocks (triangle and vertex counts, vertex positions) and cover every
 *    changed block; the run must end equal to the synced one.
 *  - bytes moved per stage and GB/s (bench_engine_report.c), beside the
 *    copy bandwidth the device achieves in the same run (bench_copy.cu:
 *    device to device, pinned host to device and back, each checked; with
 *    the CUDA backend only).
 *
 * This is a program, not a test: it exits 0 on success, 1 when a check
 * fails (the GPU against the CPU, back to back against synced, an
 * incremental mesh against the whole one, a copy), 2 on a usage or setup
 * error, 77 when the data or the GPU asked for is not there (the smoke
 * tests in tests/bench.cmake skip then).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_engine_check.h"
#include "bench_engine_report.h"
#include "tsdf_dataset.h"
#include "tsdf_voxel_layout.h"
#include "tsdf_volume.h"
#include "bench_clock.h"

#ifndef TSDF_SOURCE_DIR
#define TSDF_SOURCE_DIR "."
#endif

#define BENCH_SDF_TOL_M 1e-4

typedef struct {
    tsdf_backend backend;
    const char *data_dir;
    uint32_t frames;
    float voxel_m;
    float trunc_vox;
    float min_depth_m, max_depth_m;
    uint32_t check_frames;
    uint32_t raycast_reps;
    uint32_t mesh_reps;
    uint32_t inc_mesh_step; /* an incremental mesh after every this many frames; 0: none */
    tsdf_layout layout;
    uint32_t threads;
    const char *raycast_out;
    int color;
    const uint8_t *rgb; /* with color: one width*height*3 image for every frame */
} bench_opts;

typedef struct {
    tsdf_dataset_frame meta;
    uint16_t *depth;
} bench_frame;

/* Prints mean / median / p99 (nearest rank) / max of n samples in ms. */
static void print_series(const char *name, const double *v, size_t n)
{
    if (n == 0) {
        printf("  %-22s (no samples)\n", name);
        return;
    }
    double *s = malloc(n * sizeof *s);
    if (!s) {
        printf("  %-22s (out of memory)\n", name);
        return;
    }
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    size_t p99 = (size_t)ceil(0.99 * (double)n);
    p99 = p99 == 0 ? 0 : p99 - 1;
    double median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    printf("  %-22s %9.3f %9.3f %9.3f %9.3f %7zu\n", name, sum / (double)n, median, s[p99],
           s[n - 1], n);
    free(s);
}

static void print_series_header(void)
{
    printf("  %-22s %9s %9s %9s %9s %7s\n", "(ms)", "mean", "median", "p99", "max", "n");
}

static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: bench_engine [--backend cpu|cuda|auto] [--data DIR] [--frames N]\n"
        "                    [--voxel M] [--trunc-vox V] [--max-depth M]\n"
        "                    [--layout s16|f32] [--color on|off]\n"
        "                    [--check-frames K] [--raycast-reps R] [--mesh-reps R]\n"
        "                    [--inc-mesh-step S]\n"
        "                    [--threads N] [--raycast-out FILE]\n"
        "defaults: --backend auto, --data $TSDF_DATA_DIR or ../shared/data/7scenes-redkitchen,\n"
        "          all frames, --voxel 0.01, --trunc-vox 4, --max-depth 4,\n"
        "          --layout s16, --color off,\n"
        "          --check-frames 10 (CUDA only; 0 skips the check), --raycast-reps 20,\n"
        "          --mesh-reps 3, --inc-mesh-step 10 (an incremental mesh after every S-th\n"
        "          frame of the second half; 0 skips it), --threads 0 (CPU backend: every\n"
        "          online core)\n");
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > 0xfffffffful || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_pos_float(const char *s, float *out)
{
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v <= 0.0f)
        return -1;
    *out = v;
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* --data, else $TSDF_DATA_DIR, else ../shared/data/7scenes-redkitchen from
 * the working directory, else the same next to the source tree. */
static const char *resolve_data_dir(const char *given)
{
    if (given)
        return given;
    const char *env = getenv("TSDF_DATA_DIR");
    if (env && *env)
        return env;
    if (is_dir("../shared/data/7scenes-redkitchen"))
        return "../shared/data/7scenes-redkitchen";
    return TSDF_SOURCE_DIR "/../shared/data/7scenes-redkitchen";
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->backend = TSDF_BACKEND_AUTO;
    o->frames = UINT32_MAX;
    o->voxel_m = 0.01f;
    o->trunc_vox = 4.0f;
    o->min_depth_m = 0.1f;
    o->max_depth_m = 4.0f;
    o->check_frames = 10;
    o->raycast_reps = 20;
    o->mesh_reps = 3;
    o->inc_mesh_step = 10;
    o->layout = TSDF_LAYOUT_S16;
    const char *data = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (!val) {
            fprintf(stderr, "bench_engine: %s needs a value\n", a);
            return -1;
        }
        int bad = 0;
        if (strcmp(a, "--backend") == 0)
            bad = tsdf_backend_parse(val, &o->backend) != TSDF_OK;
        else if (strcmp(a, "--data") == 0)
            data = val;
        else if (strcmp(a, "--frames") == 0)
            bad = parse_u32(val, &o->frames) || o->frames == 0;
        else if (strcmp(a, "--voxel") == 0)
            bad = parse_pos_float(val, &o->voxel_m);
        else if (strcmp(a, "--trunc-vox") == 0)
            bad = parse_pos_float(val, &o->trunc_vox);
        else if (strcmp(a, "--max-depth") == 0)
            bad = parse_pos_float(val, &o->max_depth_m);
        else if (strcmp(a, "--check-frames") == 0)
            bad = parse_u32(val, &o->check_frames);
        else if (strcmp(a, "--raycast-reps") == 0)
            bad = parse_u32(val, &o->raycast_reps);
        else if (strcmp(a, "--mesh-reps") == 0)
            bad = parse_u32(val, &o->mesh_reps);
        else if (strcmp(a, "--inc-mesh-step") == 0)
            bad = parse_u32(val, &o->inc_mesh_step);
        else if (strcmp(a, "--threads") == 0)
            bad = parse_u32(val, &o->threads) || o->threads > TSDF_MAX_CPU_THREADS;
        else if (strcmp(a, "--raycast-out") == 0)
            o->raycast_out = val;
        else if (strcmp(a, "--layout") == 0)
            bad = tsdf_layout_parse(val, &o->layout) != TSDF_OK;
        else if (strcmp(a, "--color") == 0) {
            o->color = strcmp(val, "on") == 0;
            bad = !o->color && strcmp(val, "off") != 0;
        } else {
            fprintf(stderr, "bench_engine: unknown option %s\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "bench_engine: bad value for %s: %s\n", a, val);
            return -1;
        }
        i++;
    }
    o->data_dir = resolve_data_dir(data);
    return 0;
}

static int make_volume(const bench_opts *o, tsdf_backend backend, tsdf_volume **out)
{
    tsdf_volume_params p;
    tsdf_volume_params_default(&p);
    p.voxel_size_m = o->voxel_m;
    p.trunc_vox = o->trunc_vox;
    p.backend = backend;
    p.layout = o->layout;
    p.cpu_threads = o->threads;
    int rc = tsdf_volume_create(&p, out);
    if (rc != TSDF_OK)
        fprintf(stderr, "bench_engine: creating a %s volume: %s\n", tsdf_backend_name(backend),
                tsdf_strerror(rc));
    return rc;
}

/* Queues frame f on v without waiting for it (the CUDA backend may still be
 * working on it when this returns). */
static int submit_frame(tsdf_volume *v, const bench_opts *o, const bench_frame *f)
{
    tsdf_frame fr;
    tsdf_dataset_frame_to_tsdf(&f->meta, f->depth, o->min_depth_m, o->max_depth_m, &fr);
    fr.rgb = o->rgb;
    int rc = tsdf_volume_integrate(v, &fr);
    if (rc != TSDF_OK)
        fprintf(stderr, "bench_engine: integrating frame %u: %s\n", f->meta.index,
                tsdf_strerror(rc));
    return rc;
}

static int integrate_frame(tsdf_volume *v, const bench_opts *o, const bench_frame *f)
{
    int rc = submit_frame(v, o, f);
    if (rc != TSDF_OK)
        return rc;
    rc = tsdf_volume_sync(v);
    if (rc != TSDF_OK)
        fprintf(stderr, "bench_engine: integrating frame %u: %s\n", f->meta.index,
                tsdf_strerror(rc));
    return rc;
}

/* Fuses the first k frames on the CPU reference and on the CUDA backend
 * and compares the two volumes block by block. Returns 0 when they agree. */
static int check_cuda_against_cpu(const bench_opts *o, const bench_frame *frames, uint32_t k)
{
    tsdf_volume *cpu = NULL, *gpu = NULL;
    tsdf_block_set a, b;
    tsdf_block_set_init(&a);
    tsdf_block_set_init(&b);
    int result = 2;
    if (make_volume(o, TSDF_BACKEND_CPU, &cpu) != TSDF_OK ||
        make_volume(o, TSDF_BACKEND_CUDA, &gpu) != TSDF_OK)
        goto out;
    for (uint32_t i = 0; i < k; i++)
        if (integrate_frame(cpu, o, &frames[i]) != TSDF_OK ||
            integrate_frame(gpu, o, &frames[i]) != TSDF_OK)
            goto out;
    int rc = tsdf_volume_export_blocks(cpu, &a);
    if (rc == TSDF_OK)
        rc = tsdf_volume_export_blocks(gpu, &b);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_engine: exporting blocks: %s\n", tsdf_strerror(rc));
        goto out;
    }
    result = 1;
    printf("check: CUDA vs CPU after %u frames: %zu vs %zu blocks", k, b.count, a.count);
    if (a.count != b.count) {
        printf(" -> FAIL (block counts differ)\n");
        goto out;
    }
    size_t coord_mismatch = 0, weight_mismatch = 0, sdf_mismatch = 0, observed = 0;
    double max_diff = 0.0;
    for (size_t i = 0; i < a.count; i++) {
        if (memcmp(&a.coords[3 * i], &b.coords[3 * i], 3 * sizeof(int32_t)) != 0) {
            coord_mismatch++;
            continue;
        }
        for (unsigned j = 0; j < TSDF_BLOCK_VOXELS; j++) {
            const tsdf_vox va = tsdf_block_set_get(&a, i, j);
            const tsdf_vox vb = tsdf_block_set_get(&b, i, j);
            if (va.weight != vb.weight) {
                weight_mismatch++;
                continue;
            }
            if (va.weight == 0.0f)
                continue;
            observed++;
            double d = fabs((double)va.sdf_m - (double)vb.sdf_m);
            if (!(d <= BENCH_SDF_TOL_M))
                sdf_mismatch++;
            if (d > max_diff || isnan(d))
                max_diff = d;
        }
    }
    printf(", %zu observed voxels, max |sdf diff| %.3g m; mismatched blocks %zu, weights %zu, "
           "sdf > %.0e m %zu",
           observed, max_diff, coord_mismatch, weight_mismatch, BENCH_SDF_TOL_M, sdf_mismatch);
    if (coord_mismatch || weight_mismatch || sdf_mismatch) {
        printf(" -> FAIL\n");
        goto out;
    }
    printf(" -> PASS\n");
    result = 0;
out:
    tsdf_block_set_fini(&a);
    tsdf_block_set_fini(&b);
    tsdf_volume_destroy(cpu);
    tsdf_volume_destroy(gpu);
    return result;
}

/* ---- back to back ---------------------------------------------------------
 * Integrates all n frames on a fresh volume with no sync between them (one
 * tsdf_volume_sync at the end), as the daemon feeds a map; *total_ms
 * receives the host wall time of it all, once the volume it made equals
 * the synced run's (*ref: the same blocks, the same voxels; the check line
 * names the run `what`). 0, 1 on a mismatch, 2 on an error. */
static int back_to_back(const bench_opts *o, const bench_frame *frames, uint32_t n,
                        const bench_digest *ref, const char *what, double *total_ms)
{
    tsdf_volume *v = NULL;
    int rc, result = 2;
    if (make_volume(o, o->backend, &v) != TSDF_OK)
        return 2;
    double t0 = now_ms();
    for (uint32_t i = 0; i < n; i++)
        if (submit_frame(v, o, &frames[i]) != TSDF_OK)
            goto out;
    if ((rc = tsdf_volume_sync(v)) != TSDF_OK) {
        fprintf(stderr, "bench_engine: %s: sync: %s\n", what, tsdf_strerror(rc));
        goto out;
    }
    *total_ms = now_ms() - t0;
    if ((result = bench_check_digest(v, ref, what, n)) == 0)
        printf(" -> PASS\n");
out:
    tsdf_volume_destroy(v);
    return result;
}

static int run_back_to_back(const bench_opts *o, const bench_frame *frames, uint32_t n,
                            const bench_digest *ref)
{
    double total_ms;
    int result = back_to_back(o, frames, n, ref, "back-to-back", &total_ms);
    if (result == 0)
        printf("back-to-back integration (no sync between frames, one at the end): %u frames in "
               "%.1f ms = %.3f ms a frame = %.1f frames/s\n",
               n, total_ms, total_ms / (double)n, 1e3 * (double)n / total_ms);
    return result;
}

/* ---- frames in page-locked memory -----------------------------------------
 * The synced and the back-to-back runs again, with the frames in memory
 * from tsdf_host_alloc, which the CUDA backend uploads from without its
 * host copy into the staging buffer (as for a caller that decodes its
 * frames into such buffers). Each run's volume must equal the first synced
 * run's (*ref) before its times are printed. CUDA backend only; 0, 1 on a
 * mismatch, 2 on an error. */
static int run_page_locked(const bench_opts *o, const bench_frame *frames, uint32_t n, size_t npix,
                           const bench_digest *ref)
{
    if (o->backend != TSDF_BACKEND_CUDA)
        return 0;
    uint16_t *pool = NULL;
    bench_frame *pf = calloc(n, sizeof *pf);
    double *wall = calloc(n, sizeof *wall);
    tsdf_volume *v = NULL;
    int result = 2;
    if (pf == NULL || wall == NULL ||
        tsdf_host_alloc((size_t)n * npix * sizeof *pool, (void **)&pool) != TSDF_OK) {
        fprintf(stderr, "bench_engine: no page-locked memory for %u frames\n", n);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        pf[i].meta = frames[i].meta;
        pf[i].depth = pool + (size_t)i * npix;
        memcpy(pf[i].depth, frames[i].depth, npix * sizeof *pool);
    }
    if (make_volume(o, o->backend, &v) != TSDF_OK)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        double w0 = now_ms();
        if (integrate_frame(v, o, &pf[i]) != TSDF_OK)
            goto out;
        wall[i] = now_ms() - w0;
    }
    if ((result = bench_check_digest(v, ref, "page-locked synced", n)) != 0)
        goto out;
    printf(" -> PASS\n");
    double total_ms;
    if ((result = back_to_back(o, pf, n, ref, "page-locked back-to-back", &total_ms)) != 0)
        goto out;
    printf("page-locked frames (tsdf_host_alloc: uploaded without the staging copy):\n");
    print_series_header();
    print_series("integrate+sync (wall)", wall, n);
    printf("  back to back: %u frames in %.1f ms = %.3f ms a frame = %.1f frames/s\n", n, total_ms,
           total_ms / (double)n, 1e3 * (double)n / total_ms);
    result = 0;
out:
    tsdf_volume_destroy(v);
    tsdf_host_free(pool);
    free(pf);
    free(wall);
    return result;
}

/* ---- incremental mesh -----------------------------------------------------
 * What run_incremental measured: the blocks each frame changed, and one
 * sample per incremental mesh it timed. */
typedef struct {
    uint64_t *changed; /* n: blocks frame i changed (their version moved) */
    uint32_t count;    /* incremental meshes timed */
    uint32_t *frame;   /* count: the frame after which each was made */
    double *engine_ms, *wall_ms, *bytes;
    size_t *parts, *triangles;
    /* Meshed into again after every sample, as a client keeping its mesh
     * current would: the engine may reuse their arrays. */
    tsdf_mesh whole, inc;
} bench_incremental;

static void incremental_fini(bench_incremental *r)
{
    free(r->changed);
    free(r->frame);
    free(r->engine_ms);
    free(r->wall_ms);
    free(r->bytes);
    free(r->parts);
    free(r->triangles);
    tsdf_mesh_fini(&r->whole);
    tsdf_mesh_fini(&r->inc);
    memset(r, 0, sizeof *r);
}

/* After frame k, which changed the nchanged blocks of `changed` (select
 * since `before`): the whole volume meshed by block (untimed: the
 * reference, and it sizes the engine's buffers so that the timed mesh pays
 * no first-use cost), then the timed incremental mesh since `before`, which
 * must cover every changed block with the same parts as the whole mesh. 0,
 * 1 on a mismatch, 2 on an error. */
static int incremental_sample(tsdf_volume *v, uint64_t before, uint32_t k, const int32_t *changed,
                              size_t nchanged, bench_incremental *r)
{
    tsdf_mesh *whole = &r->whole, *inc = &r->inc;
    tsdf_mesh_params mp;
    tsdf_volume_stats st;
    bench_parts_diff diff;
    int rc;
    memset(&mp, 0, sizeof mp);
    mp.by_block = 1;
    if ((rc = tsdf_volume_mesh(v, &mp, whole)) != TSDF_OK)
        goto fail;
    mp.since_version = before;
    double w0 = now_ms();
    if ((rc = tsdf_volume_mesh(v, &mp, inc)) != TSDF_OK)
        goto fail;
    double wall = now_ms() - w0;
    if ((rc = tsdf_volume_get_counters(v, &st)) != TSDF_OK)
        goto fail;
    if (inc->full) {
        printf("check: incremental mesh after frame %u came back whole (full = 1) -> FAIL\n", k);
        return 1;
    }
    if (bench_compare_parts(inc, whole, changed, nchanged, &diff) != 0) {
        printf("check: incremental mesh after frame %u: %zu parts, %zu without a part in the "
               "whole mesh, %zu differing from it, %zu of %zu changed blocks not covered, max "
               "|position sum diff| %.3g m -> FAIL\n",
               k, diff.parts, diff.missing, diff.differ, diff.uncovered, nchanged,
               diff.max_pos_diff);
        return 1;
    }
    uint32_t i = r->count++;
    r->frame[i] = k;
    r->engine_ms[i] = st.last_mesh_ms;
    r->wall_ms[i] = wall;
    r->bytes[i] = bench_mesh_bytes(inc);
    r->parts[i] = diff.parts;
    r->triangles[i] = diff.triangles;
    return 0;
fail:
    fprintf(stderr, "bench_engine: incremental mesh after frame %u: %s\n", k, tsdf_strerror(rc));
    return 2;
}

/* Integrates all n frames (synced) on a fresh volume, counting the blocks
 * each frame changes (for the update's bytes), and after every step-th
 * frame of the second half (step 0: none) times the incremental by-block
 * mesh of what that frame changed (incremental_sample). The volume must
 * end equal to the synced run's (*ref), so that the counts are those of the
 * timed run. Prints the series once everything is checked. 0, 1 on a
 * mismatch, 2 on an error. */
static int run_incremental(const bench_opts *o, const bench_frame *frames, uint32_t n,
                           uint32_t step, const bench_digest *ref, bench_incremental *r)
{
    tsdf_volume *v = NULL;
    int rc, result = 2;
    uint32_t first = n / 2, most = step ? (n - first + step - 1) / step : 0;
    memset(r, 0, sizeof *r);
    tsdf_mesh_init(&r->whole);
    tsdf_mesh_init(&r->inc);
    r->changed = calloc(n, sizeof *r->changed);
    r->frame = calloc(most + 1, sizeof *r->frame);
    r->engine_ms = calloc(most + 1, sizeof *r->engine_ms);
    r->wall_ms = calloc(most + 1, sizeof *r->wall_ms);
    r->bytes = calloc(most + 1, sizeof *r->bytes);
    r->parts = calloc(most + 1, sizeof *r->parts);
    r->triangles = calloc(most + 1, sizeof *r->triangles);
    if (!r->changed || !r->frame || !r->engine_ms || !r->wall_ms || !r->bytes || !r->parts ||
        !r->triangles) {
        fprintf(stderr, "bench_engine: no memory for the incremental mesh series\n");
        return 2;
    }
    if (make_volume(o, o->backend, &v) != TSDF_OK)
        return 2;
    for (uint32_t i = 0; i < n; i++) {
        tsdf_block_select q;
        memset(&q, 0, sizeof q);
        q.rules = TSDF_SELECT_SINCE;
        q.version = tsdf_volume_version(v);
        int32_t *coords = NULL;
        size_t nchanged = 0;
        if (integrate_frame(v, o, &frames[i]) != TSDF_OK)
            goto out;
        if ((rc = tsdf_volume_select(v, &q, &coords, &nchanged)) != TSDF_OK) {
            fprintf(stderr, "bench_engine: selecting frame %u's blocks: %s\n", i,
                    tsdf_strerror(rc));
            goto out;
        }
        r->changed[i] = nchanged;
        int c = 0;
        if (step && i >= first && (i - first) % step == 0)
            c = incremental_sample(v, q.version, i, coords, nchanged, r);
        free(coords);
        if (c != 0) {
            result = c;
            goto out;
        }
    }
    if ((result = bench_check_digest(v, ref, "incremental-mesh run", n)) != 0)
        goto out;
    printf("; %u incremental meshes with the same parts as the whole mesh -> PASS\n", r->count);
    result = 0;
    if (r->count == 0)
        goto out;
    printf("incremental mesh (by block, of what one frame changed) after frames %u, %u, ... "
           "(every %u):\n",
           first, first + step, step);
    for (uint32_t i = 0; i < r->count; i++)
        printf("  frame %4u: %6llu blocks changed, %6zu parts meshed, %7zu triangles, engine "
               "%8.3f ms, wall %8.3f ms\n",
               r->frame[i], (unsigned long long)r->changed[r->frame[i]], r->parts[i],
               r->triangles[i], r->engine_ms[i], r->wall_ms[i]);
    print_series_header();
    print_series("inc. mesh (engine)", r->engine_ms, r->count);
    print_series("inc. mesh (wall)", r->wall_ms, r->count);
out:
    tsdf_volume_destroy(v);
    return result;
}

/* Everything measured after the series above (their format stays as it
 * was: others parse it), against the synced run's volume v; *b holds that
 * run's series, for the bytes per stage. */
static int run_after_series(const bench_opts *o, const bench_frame *frames, uint32_t n, size_t npix,
                            tsdf_volume *v, bench_stage_bytes *b)
{
    bench_digest ref;
    bench_incremental inc;
    int rc = bench_digest_volume(v, &ref);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_engine: exporting blocks: %s\n", tsdf_strerror(rc));
        return 2;
    }
    if ((rc = run_back_to_back(o, frames, n, &ref)) != 0)
        return rc;
    if ((rc = run_page_locked(o, frames, n, npix, &ref)) != 0)
        return rc;
    if ((rc = run_incremental(o, frames, n, o->inc_mesh_step, &ref, &inc)) == 0) {
        b->block_bytes = ref.block_bytes;
        b->changed = inc.changed;
        b->inc_bytes = inc.bytes;
        b->inc_ms = inc.engine_ms;
        b->inc_wall_ms = inc.wall_ms;
        b->inc_count = inc.count;
        rc = bench_print_bytes_per_stage(b);
    }
    incremental_fini(&inc);
    return rc != 0 ? rc : bench_print_copy_bandwidth(o->backend);
}

int main(int argc, char **argv)
{
    bench_opts o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    if (o.backend == TSDF_BACKEND_AUTO)
        o.backend = tsdf_cuda_available() ? TSDF_BACKEND_CUDA : TSDF_BACKEND_CPU;
    if (o.backend == TSDF_BACKEND_CUDA && !tsdf_cuda_available()) {
        printf("SKIPPED: --backend cuda, but no usable GPU (or this binary has no CUDA "
               "backend)\n");
        return 77;
    }

    tsdf_dataset *ds = NULL;
    int rc = tsdf_dataset_open(o.data_dir, &ds);
    if (rc != TSDF_OK) {
        printf("SKIPPED: no 7-Scenes data at %s (%s); set --data or TSDF_DATA_DIR\n", o.data_dir,
               tsdf_strerror(rc));
        return 77;
    }
    tsdf_dataset_info info;
    tsdf_dataset_get_info(ds, &info);
    uint32_t n = o.frames < info.frame_count ? o.frames : info.frame_count;
    size_t npix = (size_t)info.width * info.height;

    /* ---- load everything first ---- */
    double t0 = now_ms();
    bench_frame *frames = calloc(n, sizeof *frames);
    uint16_t *pool = malloc((size_t)n * npix * sizeof *pool);
    if (!frames || !pool) {
        fprintf(stderr, "bench_engine: no memory for %u frames\n", n);
        return 2;
    }
    for (uint32_t i = 0; i < n; i++) {
        frames[i].depth = pool + (size_t)i * npix;
        rc = tsdf_dataset_load(ds, i, frames[i].depth, npix, &frames[i].meta);
        if (rc != TSDF_OK) {
            fprintf(stderr, "bench_engine: loading frame %u: %s\n", i, tsdf_strerror(rc));
            return 2;
        }
    }
    tsdf_dataset_close(ds);
    uint8_t *rgb = NULL;
    if (o.color) {
        if ((rgb = malloc(npix * 3)) == NULL) {
            fprintf(stderr, "bench_engine: no memory for the colour image\n");
            return 2;
        }
        for (uint32_t y = 0; y < info.height; y++)
            for (uint32_t x = 0; x < info.width; x++) {
                uint8_t *c = rgb + 3 * ((size_t)y * info.width + x);
                c[0] = (uint8_t)(255u * x / info.width);
                c[1] = (uint8_t)(255u * y / info.height);
                c[2] = 128;
            }
        o.rgb = rgb;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads = o.threads != 0 ? o.threads : (uint32_t)(cores > 0 ? cores : 1);
    printf("bench_engine: backend %s, data %s, layout %s, colour %s, threads %u%s\n",
           tsdf_backend_name(o.backend), o.data_dir, tsdf_layout_name(o.layout),
           o.color ? "on (synthetic)" : "off", threads,
           o.backend == TSDF_BACKEND_CPU ? (o.threads == 0 ? " (all online cores)" : "")
                                         : " (CPU reference only)");
    printf("  %u frames %ux%u loaded in %.0f ms (%.0f MiB); voxel %.3f m, truncation %.1f "
           "voxels (%.3f m), depth %.2f..%.2f m\n",
           n, info.width, info.height, now_ms() - t0, (double)n * npix * sizeof *pool / 1048576.0,
           o.voxel_m, o.trunc_vox, o.voxel_m * o.trunc_vox, o.min_depth_m, o.max_depth_m);

    /* ---- correctness first ---- */
    if (o.backend == TSDF_BACKEND_CUDA && o.check_frames > 0) {
        uint32_t k = o.check_frames < n ? o.check_frames : n;
        int c = check_cuda_against_cpu(&o, frames, k);
        if (c != 0) {
            fprintf(stderr, "bench_engine: the CUDA result does not match the CPU reference; "
                            "not timing it\n");
            return c;
        }
    }

    /* ---- warm-up: first-use costs (context, JIT, allocator) off the books ---- */
    tsdf_volume *v = NULL;
    if (make_volume(&o, o.backend, &v) != TSDF_OK)
        return 2;
    for (uint32_t i = 0; i < n && i < 5; i++)
        if (integrate_frame(v, &o, &frames[i]) != TSDF_OK)
            return 2;
    tsdf_volume_destroy(v);
    v = NULL;

    /* ---- integration ---- */
    if (make_volume(&o, o.backend, &v) != TSDF_OK)
        return 2;
    double *upload = calloc(n, sizeof(double)), *alloc = calloc(n, sizeof(double));
    double *update = calloc(n, sizeof(double)), *wall = calloc(n, sizeof(double));
    if (!upload || !alloc || !update || !wall)
        return 2;
    tsdf_volume_stats st;
    double run0 = now_ms();
    for (uint32_t i = 0; i < n; i++) {
        double w0 = now_ms();
        if (integrate_frame(v, &o, &frames[i]) != TSDF_OK)
            return 2;
        wall[i] = now_ms() - w0;
        if (tsdf_volume_get_stats(v, &st) != TSDF_OK)
            return 2;
        upload[i] = st.last_upload_ms;
        alloc[i] = st.last_alloc_ms;
        update[i] = st.last_update_ms;
    }
    double run_ms = now_ms() - run0;
    tsdf_volume_get_stats(v, &st);
    printf("integration: %u frames in %.1f ms = %.1f frames/s\n", n, run_ms,
           1e3 * (double)n / run_ms);
    print_series_header();
    print_series("upload", upload, n);
    print_series("allocate", alloc, n);
    print_series("update", update, n);
    print_series("integrate+sync (wall)", wall, n);
    printf("volume: %llu blocks, %llu slots (load %.2f), %llu growths, %.1f MiB, max probe %u\n",
           (unsigned long long)st.blocks_allocated, (unsigned long long)st.capacity_slots,
           st.load_factor, (unsigned long long)st.growth_events,
           (double)st.memory_bytes / 1048576.0, st.max_probe);
    bench_digest vd;
    if (bench_digest_volume(v, &vd) != TSDF_OK)
        vd.hash = 0;
    printf("checksum: volume %016llx\n", (unsigned long long)vd.hash);
    printf("memory: %llu bytes for %llu blocks = %.2f KiB a block (pool of %llu blocks, layout "
           "%s, colour %s)\n",
           (unsigned long long)st.memory_bytes, (unsigned long long)st.blocks_allocated,
           st.blocks_allocated ? (double)st.memory_bytes / (double)st.blocks_allocated / 1024.0
                               : 0.0,
           (unsigned long long)st.pool_capacity_blocks, tsdf_layout_name(st.layout),
           st.has_color ? "yes" : "no");

    /* ---- raycast ---- */
    uint32_t mid = n / 2;
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = info.width;
    rp.height = info.height;
    rp.K = frames[mid].meta.K;
    memcpy(rp.T_world_cam, frames[mid].meta.T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = o.min_depth_m;
    rp.max_depth_m = o.max_depth_m;
    float *depth = malloc(npix * sizeof(float)), *normals = malloc(3 * npix * sizeof(float));
    double *ray_wall = calloc(o.raycast_reps + 1, sizeof(double));
    double *ray_dev = calloc(o.raycast_reps + 1, sizeof(double));
    if (!depth || !normals || !ray_wall || !ray_dev)
        return 2;
    tsdf_raycast_output out = {depth, normals, NULL};
    size_t hits = 0;
    for (uint32_t r = 0; r < o.raycast_reps; r++) {
        double w0 = now_ms();
        rc = tsdf_volume_raycast(v, &rp, &out);
        if (rc == TSDF_OK)
            rc = tsdf_volume_sync(v);
        if (rc != TSDF_OK) {
            fprintf(stderr, "bench_engine: raycast: %s\n", tsdf_strerror(rc));
            return 2;
        }
        ray_wall[r] = now_ms() - w0;
        tsdf_volume_get_stats(v, &st);
        ray_dev[r] = st.last_raycast_ms;
    }
    if (o.raycast_reps == 0) {
        /* Nothing was cast: no image to count or checksum. */
        printf("raycast: not run (--raycast-reps 0)\n");
    } else {
        for (size_t i = 0; i < npix; i++)
            hits += isfinite(depth[i]);
        if (o.raycast_out != NULL) {
            FILE *fp = fopen(o.raycast_out, "wb");
            if (fp == NULL || fwrite(depth, sizeof(float), npix, fp) != npix || fclose(fp) != 0) {
                fprintf(stderr, "bench_engine: writing %s: %s\n", o.raycast_out, strerror(errno));
                return 2;
            }
        }
        printf("raycast %ux%u with normals from frame %u's pose: %zu hit pixels, checksum "
               "%016llx\n",
               rp.width, rp.height, mid, hits,
               (unsigned long long)bench_fnv1a(
                   bench_fnv1a(BENCH_FNV_OFFSET, depth, npix * sizeof(float)), normals,
                   3 * npix * sizeof(float)));
    }
    print_series_header();
    print_series("raycast (engine)", ray_dev, o.raycast_reps);
    print_series("raycast (wall)", ray_wall, o.raycast_reps);

    /* ---- mesh ---- */
    double *mesh_wall = calloc(o.mesh_reps + 1, sizeof(double));
    double *mesh_dev = calloc(o.mesh_reps + 1, sizeof(double));
    if (!mesh_wall || !mesh_dev)
        return 2;
    tsdf_mesh mesh;
    tsdf_mesh_init(&mesh);
    for (uint32_t r = 0; r < o.mesh_reps; r++) {
        double w0 = now_ms();
        rc = tsdf_volume_mesh(v, NULL, &mesh);
        if (rc != TSDF_OK) {
            fprintf(stderr, "bench_engine: mesh: %s\n", tsdf_strerror(rc));
            return 2;
        }
        mesh_wall[r] = now_ms() - w0;
        tsdf_volume_get_stats(v, &st);
        mesh_dev[r] = st.last_mesh_ms;
    }
    if (o.mesh_reps == 0)
        printf("mesh: not run (--mesh-reps 0)\n");
    else
        printf("mesh (all blocks): %zu vertices, %zu triangles, checksum %016llx\n",
               mesh.vertex_count, mesh.triangle_count,
               (unsigned long long)bench_mesh_checksum(&mesh));
    print_series_header();
    print_series("mesh (engine)", mesh_dev, o.mesh_reps);
    print_series("mesh (wall)", mesh_wall, o.mesh_reps);

    bench_stage_bytes sb = {.frames = n,
                            .npix = npix,
                            .color = o.color,
                            .upload_ms = upload,
                            .update_ms = update,
                            .raycast_ms = ray_dev,
                            .raycast_wall_ms = ray_wall,
                            .raycast_reps = o.raycast_reps,
                            .mesh_ms = mesh_dev,
                            .mesh_wall_ms = mesh_wall,
                            .mesh_reps = o.mesh_reps,
                            .mesh = &mesh};
    int after = run_after_series(&o, frames, n, npix, v, &sb);
    if (after != 0)
        return after;

    tsdf_mesh_fini(&mesh);
    tsdf_volume_destroy(v);
    free(depth);
    free(normals);
    free(ray_wall);
    free(ray_dev);
    free(mesh_wall);
    free(mesh_dev);
    free(upload);
    free(alloc);
    free(update);
    free(wall);
    free(pool);
    free(rgb);
    free(frames);
    return 0;
}
