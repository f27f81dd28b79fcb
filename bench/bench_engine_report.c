/*
 * bench_engine_report.c - bench_engine's bytes-per-stage table and copy
 * bandwidth; see bench_engine_report.h.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, for bench_clock.h */

#include "bench_engine_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#ifdef TSDF_HAVE_CUDA
#include "bench_copy.h"
#endif

double bench_median(const double *v, size_t n)
{
    double *s = n ? malloc(n * sizeof *s) : NULL;
    if (!s)
        return 0.0;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

void bench_print_stage_header(void)
{
    printf("  %-30s %12s %10s %8s %10s %8s %6s\n", "(medians)", "bytes", "engine ms", "GB/s",
           "wall ms", "GB/s", "n");
}

/* The median time and the median GB/s of one clock's samples into *ms and
 * *gbs (*gbs < 0: no sample with a time). 0, or -1 without memory. */
static int median_rate(const double *bytes, double each_bytes, const double *ms, size_t n,
                       double *med_ms, double *gbs)
{
    double *rate = malloc((n ? n : 1) * sizeof *rate);
    size_t nrate = 0;
    if (!rate)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (ms[i] > 0.0)
            rate[nrate++] = (bytes ? bytes[i] : each_bytes) / (ms[i] * 1e6);
    *med_ms = bench_median(ms, n);
    *gbs = nrate ? bench_median(rate, nrate) : -1.0;
    free(rate);
    return 0;
}

/* "%10.3f %8.2f", or dashes where the clock or the rate is missing. */
static void print_clock(const double *bytes, double each_bytes, const double *ms, size_t n)
{
    double med_ms, gbs;
    if (!ms || n == 0) {
        printf(" %10s %8s", "-", "-");
        return;
    }
    if (median_rate(bytes, each_bytes, ms, n, &med_ms, &gbs) != 0) {
        printf(" %19s", "(out of memory)");
        return;
    }
    if (gbs < 0.0)
        printf(" %10.3f %8s", med_ms, "-");
    else
        printf(" %10.3f %8.2f", med_ms, gbs);
}

void bench_print_stage(const char *name, const double *bytes, double each_bytes,
                       const double *engine_ms, const double *wall_ms, size_t n)
{
    if (n == 0) {
        printf("  %-30s (no samples)\n", name);
        return;
    }
    printf("  %-30s %12.0f", name, bytes ? bench_median(bytes, n) : each_bytes);
    print_clock(bytes, each_bytes, engine_ms, n);
    print_clock(bytes, each_bytes, wall_ms, n);
    printf(" %6zu\n", n);
}

double bench_mesh_bytes(const tsdf_mesh *m)
{
    return (double)m->vertex_count * (24.0 + (m->colors ? 3.0 : 0.0)) +
           12.0 * (double)m->triangle_count;
}

/* What is counted: the upload, the depth (and colour) bytes of a frame;
 * the update, the voxels of the blocks the frame changed, read and written
 * (2 x blocks x block bytes); a raycast, its output images (depth 4 bytes
 * and normal 12 a pixel) and a mesh its arrays, both brought to the host.
 * The voxels a raycast or a mesh reads are not counted: the rays and the
 * surface decide how many, not the output. */
int bench_print_bytes_per_stage(const bench_stage_bytes *b)
{
    double *update = malloc((b->frames ? b->frames : 1) * sizeof *update);
    if (!update) {
        fprintf(stderr, "bench_engine: no memory for the bytes per stage\n");
        return 2;
    }
    for (uint32_t i = 0; i < b->frames; i++)
        update[i] = 2.0 * (double)b->changed[i] * (double)b->block_bytes;
    printf("bytes moved per stage (GB/s = 1e9 bytes/s, the median over samples of bytes / time; "
           "update: %zu-byte blocks read and written):\n",
           b->block_bytes);
    bench_print_stage_header();
    bench_print_stage(b->color ? "upload (depth + rgb, H2D)" : "upload (depth, H2D)", NULL,
                      (double)b->npix * (2.0 + (b->color ? 3.0 : 0.0)), b->upload_ms, NULL,
                      b->frames);
    bench_print_stage("update (voxels read+written)", update, 0.0, b->update_ms, NULL, b->frames);
    bench_print_stage("raycast (depth + normals out)", NULL, (double)b->npix * 16.0, b->raycast_ms,
                      b->raycast_wall_ms, b->raycast_reps);
    bench_print_stage("mesh, whole (to host)", NULL, bench_mesh_bytes(b->mesh), b->mesh_ms,
                      b->mesh_wall_ms, b->mesh_reps);
    bench_print_stage("mesh, incremental (to host)", b->inc_bytes, 0.0, b->inc_ms, b->inc_wall_ms,
                      b->inc_count);
    free(update);
    return 0;
}

int bench_print_copy_bandwidth(tsdf_backend backend)
{
#ifdef TSDF_HAVE_CUDA
    if (backend != TSDF_BACKEND_CUDA) {
        printf("copy bandwidth: n/a (CPU backend)\n");
        return 0;
    }
    /* Copies large enough that the launch cost is lost in them. */
    bench_copy_result c;
    char err[256];
    int rc = bench_copy_measure(0, (size_t)256 << 20, (size_t)64 << 20, 20, &c, err, sizeof err);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_engine: copy bandwidth: %s (%s)\n", tsdf_strerror(rc), err);
        return rc == TSDF_ECHECKSUM ? 1 : 2;
    }
    printf("copy bandwidth (CUDA events, median of 20, checked): device to device %.1f GB/s "
           "(%zu MiB, read + write), host to device %.1f GB/s, device to host %.1f GB/s (%zu "
           "MiB pinned)\n",
           c.d2d_gbs, c.d2d_bytes >> 20, c.h2d_gbs, c.d2h_gbs, c.host_bytes >> 20);
#else
    (void)backend;
    printf("copy bandwidth: n/a (CPU build)\n");
#endif
    return 0;
}
