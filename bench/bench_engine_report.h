/*
 * bench_engine_report.h - what bench_engine prints after its series: the
 * bytes each stage moves and the bandwidth that makes, beside the device's
 * copy bandwidth, and a median helper they (and bench_copy.cu) share. No
 * state; single-threaded like the benchmark.
 */
#ifndef BENCH_ENGINE_REPORT_H
#define BENCH_ENGINE_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The median of v[0 .. n), 0 for n 0 (or when there is no memory for the
 * sorted copy). v is left unchanged. */
double bench_median(const double *v, size_t n);

/* The header of the bytes-per-stage table, and one row: n samples of a
 * stage, sample i moving bytes[i] bytes (bytes NULL: each moves
 * each_bytes) in engine_ms[i] by the engine's own clock and wall_ms[i] on
 * the host's (either may be NULL: printed "-"). The row gives the median
 * bytes, the median times and the median over samples of bytes / time in
 * GB/s (1e9 bytes/s); samples with a time of 0 (no such work on this
 * backend) count for no GB/s. */
void bench_print_stage_header(void);
void bench_print_stage(const char *name, const double *bytes, double each_bytes,
                       const double *engine_ms, const double *wall_ms, size_t n);

/* The bytes a mesh brings to the host: positions and normals (12 bytes
 * each a vertex), colours (3) when present, and the indices (12 a
 * triangle). */
double bench_mesh_bytes(const tsdf_mesh *m);

/* The samples of every stage, from bench_engine's runs (times in ms: the
 * engine's own clock, and wall on the host's). */
typedef struct {
    uint32_t frames;
    size_t npix;                         /* pixels of a frame */
    int color;                           /* frames carry an RGB image */
    const double *upload_ms, *update_ms; /* frames each, the synced run's */
    const uint64_t *changed;             /* frames: blocks each frame changed */
    size_t block_bytes;                  /* voxel bytes of one block (geometry + colour) */
    const double *raycast_ms, *raycast_wall_ms;
    uint32_t raycast_reps;
    const double *mesh_ms, *mesh_wall_ms;
    uint32_t mesh_reps;
    const tsdf_mesh *mesh; /* the whole mesh those times made */
    const double *inc_bytes, *inc_ms, *inc_wall_ms;
    uint32_t inc_count; /* incremental meshes timed */
} bench_stage_bytes;

/* Prints what each stage moved and the GB/s that makes (see the comment
 * above its definition for what is counted). 0, or 2 without memory. */
int bench_print_bytes_per_stage(const bench_stage_bytes *b);

/* Measures and prints the copy bandwidth of CUDA device 0 (bench_copy.h)
 * with the CUDA backend; "n/a" with the CPU backend or in a CPU build. 0,
 * 1 when a copy delivered wrong bytes, 2 on a CUDA error. */
int bench_print_copy_bandwidth(tsdf_backend backend);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_ENGINE_REPORT_H */
