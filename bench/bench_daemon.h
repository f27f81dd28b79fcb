/*
 * bench_daemon.h - what the daemon benchmark's files share.
 *
 * bench_daemon.c is the run: it starts or reaches the daemon, drives the
 * client and query threads, reconciles the daemon's counters and prints
 * the results. bench_daemon_opts.c holds the parts that need none of that:
 * the command line (bd_parse_args, bd_usage), the latency samples the
 * threads record and the report prints (bd_sample_add, bd_sample_merge,
 * bd_print_latency), the checks of the query answers
 * (bd_raycast_view, bd_raycast_agreement, bd_mesh_on_surface) and the
 * look-ups in a stats
 * reply (bd_stat_find, bd_stat_find_f). bench_daemon_frames.c renders the
 * frames the clients send (bd_frames_make, bd_frames_frame).
 *
 * Ownership: the caller owns every struct here; a sample_set owns its ms
 * array, which bd_sample_merge frees from its source. Threads: a sample_set
 * is used by one thread at a time; the functions keep no state of their own.
 */
#ifndef TSDF_BENCH_DAEMON_H
#define TSDF_BENCH_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tsdf_client.h"
#include "tsdf_proto_types.h"
#include "tsdf_synth.h"
#include "tsdf_types.h"

/* Latency samples one thread keeps; later ones are counted, not kept. */
#define MAX_SAMPLES_PER_THREAD (1u << 20)
/* The --set overrides one run takes. */
#define MAX_SETS 32

typedef enum { MODE_ACKED, MODE_FF } bench_mode;

/* What a raycast query asks the daemon to send back (PROTOCOL.md 6.2):
 * depth and normals at full size, depth alone, or depth alone at half the
 * size on each axis. */
typedef enum { REPLY_FULL, REPLY_DEPTH, REPLY_HALF } raycast_reply;

/* The command line, as bd_parse_args leaves it. The strings point into
 * argv, which must outlive the struct. */
typedef struct {
    const char *spawn_bin;
    const char *addr;
    const char *frames_addr;
    const char *backend;
    int tcp;
    uint32_t clients;
    double seconds;
    bench_mode mode;
    int shared_map;
    uint32_t width, height;
    const char *scene;
    int raycast, mesh;
    uint32_t query_period_ms;
    uint32_t raycast_width, raycast_height;
    raycast_reply raycast_reply;
    int raycast_view; /* --raycast-view on: tsdf_client_raycast_view, no copy */
    const char *sets[MAX_SETS];
    size_t set_count;
    double settle_timeout_s;
    int keep;
    int ring; /* --ring: clients send their depth through shared rings */
} bench_opts;

/* A growable array of latencies, in ms. Zero-initialised it is empty. */
typedef struct {
    double *ms;
    size_t n, cap;
    uint64_t not_kept;
} sample_set;

/* Prints the usage text and the defaults to `to`. */
void bd_usage(FILE *to);

/* Fills o from argv, defaults first. Returns 0, 1 for --help, -1 for a
 * usage error (said on stderr). */
int bd_parse_args(int argc, char **argv, bench_opts *o);

/* Appends one latency (ms) to s; past MAX_SAMPLES_PER_THREAD, or when the
 * array cannot grow, the sample is counted in not_kept instead. */
void bd_sample_add(sample_set *s, double ms);

/* Moves every sample of src into dst (src is emptied and its array freed). */
void bd_sample_merge(sample_set *dst, sample_set *src);

/* Sorts s and prints p50 / p90 / p99 / max (ms) and the count. */
void bd_print_latency(const char *name, sample_set *s);

/* The share of the pixels that see the scene (want > 0) where the raycast
 * depth `got` (NaN or inf: no hit) lies within tol_m (m) of the exact depth
 * `want`, and the share of the raycast's hits that do not; both images
 * hold n depths in m. */
void bd_raycast_agreement(const float *got, const float *want, size_t n, float tol_m, double *agree,
                          double *wrong);

/* The share of (up to 4096 evenly spread) vertices of m within tol_m (m)
 * of the scene's surface, by its signed distance; 0 for an empty mesh. */
double bd_mesh_on_surface(const tsdf_mesh *m, const tsdf_scene *scene, float tol_m);

/* The view a raycast reply of kind r shows for a request of w x h pixels
 * through K: its pixels (*ow x *oh) and their intrinsics (*oK, as the
 * daemon scales them: tsdf_proto_raycast_scaled), and the options that
 * ask for it. */
void bd_raycast_view(raycast_reply r, uint32_t w, uint32_t h, const tsdf_intrinsics *K,
                     tsdf_client_raycast_options *ro, uint32_t *ow, uint32_t *oh,
                     tsdf_intrinsics *oK);

/* The value of the extra counter `key` of a stats reply, as an integer or
 * a double; returns 1 when found, 0 (and *v untouched) when not. */
int bd_stat_find(const tsdf_rep_stats *s, const char *key, int64_t *v);
int bd_stat_find_f(const tsdf_rep_stats *s, const char *key, double *v);

/* The camera's path: BD_FRAME_POSES poses, BD_FRAME_STEP_DEG apart on the
 * first ring of the scene's sequence, walked back and forth. */
#define BD_FRAME_POSES 64u
#define BD_FRAME_STEP_DEG 0.25

/* The frames every client sends: BD_FRAME_POSES u16 images and their poses. */
typedef struct {
    uint32_t width, height;
    tsdf_intrinsics K;
    float min_depth_m, max_depth_m;
    uint16_t *depth_mm[BD_FRAME_POSES];
    float T_world_cam[BD_FRAME_POSES][16];
    tsdf_scene scene;
} bd_frames;

/* Renders o's scene at every pose (bench_daemon_frames.c); 0, or -1
 * with a message on stderr. */
int bd_frames_make(const bench_opts *o, bd_frames *r);
void bd_frames_free(bd_frames *r);
/* Step k of a walk that starts at pose `start` and goes back and forth,
 * so that the camera never jumps. */
uint32_t bd_frames_index(uint64_t k, uint32_t start);
/* Frame i, pointing into r. */
void bd_frames_frame(const bd_frames *r, uint32_t i, tsdf_frame *f);

#endif
