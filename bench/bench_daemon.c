/*
 * bench_daemon.c - frames/s and latencies of tsdfd under many clients.
 *
 *   bench_daemon (--spawn TSDFD | --addr URL [--frames-addr URL])
 *                [--backend cpu|cuda|auto] [--transport ipc|tcp]
 *                [--clients N] [--seconds T] [--mode acked|ff]
 *                [--maps own|shared] [--width W] [--height H] [--scene NAME]
 *                [--raycast on|off] [--mesh on|off] [--query-period-ms P]
 *                [--raycast-width W] [--raycast-height H]
 *                [--raycast-reply full|depth|half] [--raycast-view on|off]
 *                [--set SECTION.KEY=VALUE]... [--settle-timeout-s S] [--keep]
 *
 * --spawn runs the given tsdfd binary on a generated configuration in a
 * fresh temporary directory (bench_spawn.h): its sockets on ipc:// there or
 * on tcp://127.0.0.1 (--transport), the backend of --backend, room for the
 * benchmark's maps and connections, plus any --set overrides. --addr uses
 * a daemon that runs already (its REQ/REP URL, and with --mode ff its
 * PUSH/PULL URL); that daemon must be otherwise idle, because the counters
 * below are the daemon's totals.
 *
 * N client threads (default 32), each with its own libtsdf client (its own
 * connection, as N robots would have), stream 16-bit depth frames of W x H
 * (default 640 x 480) for T seconds (default 12): --mode acked sends each
 * frame as an integrate request and waits for the reply (the next frame
 * goes when the last is integrated); --mode ff sends them on the PUSH
 * socket without waiting. With --maps own every client fuses into a map of
 * its own, with shared all into one. The frames are a synthetic analytic
 * scene (scenes/tsdf_synth.h, "demo" by default) rendered with exact depth
 * from a camera that moves 0.25 degrees a frame along an orbit, back and
 * forth over 64 poses (each client starts elsewhere on it), so that every
 * frame does real integration work, and rendered before the clock starts.
 *
 * Meanwhile (--raycast / --mesh, both on by default) one thread each asks
 * the first map for a raycast (depth and normals, 640 x 480 unless told;
 * --raycast-reply depth or half asks for depth alone, half: at half the
 * width and height) and for the whole mesh, at most once every P ms
 * (default 100). Before the clock starts that map integrates the first
 * pose once, so a raycast from that pose has a surface to find; every
 * raycast is checked against the scene's exact depth and every mesh's
 * vertices against the scene's signed distance, and a wrong answer fails
 * the run. A query's latency is its client call alone (request sent to
 * the arrays in the caller's memory), not the check after it. With
 * --raycast-view on the raycast is read where it arrived
 * (tsdf_client_raycast_view: the ring, or the reply) instead of copied
 * into the benchmark's arrays.
 *
 * --clients 0 measures the queries alone, on an idle daemon: no client
 * streams; before the clock starts one map integrates the first 30 poses
 * of the walk (acknowledged, one after another), and then only the query
 * threads run against that map for T seconds, checked as above. The
 * frames/s line is left out, the prefill's send-to-ack latency is printed
 * in its place, and the reconciliation covers the 30 frames.
 * Raycast latency on an idle daemon is best taken with --mesh off, so that
 * the two queries do not queue behind each other on the one map.
 *
 * Afterwards the program waits until the daemon has received every frame
 * sent and holds none in flight, and reconciles: the daemon's received and
 * integrated counters grew by exactly the frames sent, dropped and rejected
 * by nothing, and each map's frames_integrated equals what was sent to it.
 * Only then, and when no call failed and no query result was wrong, does it
 * print frames/s (acked: acknowledged by the clients within the window;
 * ff: integrated by the daemon within it, from its counters read at the
 * window's start and end), the send-to-ack latency (acked), the query
 * latencies and the daemon's own latency summaries. Otherwise it says what
 * did not reconcile and exits 1: a throughput of lost frames means nothing.
 *
 * This file is the run; the command line and the latency samples are in
 * bench_daemon_opts.c, declared in bench_daemon.h.
 *
 * Exit: 0 success, 1 a failed check or call, 2 a usage or setup error.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_daemon.h"
#include "bench_cputime.h"
#include "bench_spawn.h"
#include "tsdf_client.h"
#include "tsdf_synth.h"
#include "bench_clock.h"

/* How long one call may wait (ms): long enough for a CPU raycast behind a
 * queue of frames on a loaded 2-core machine. */
#define CALL_TIMEOUT_MS 120000
/* A raycast pixel agrees with the scene within this many voxels; a mesh
 * vertex lies within this many voxels of the surface. */
#define RAYCAST_TOL_VOX 3.0f
#define MESH_TOL_VOX 2.0f
/* At least this share of the pixels that see the scene must agree, at most
 * this share of the hits may be wrong, at least this share of the sampled
 * vertices must lie on the surface. After the one frame of the prefill,
 * about 82% of the pixels agree on the "demo" scene and none is wrong: the
 * rest find no surface, at depth edges where the one view left no zero
 * crossing; the bound leaves room for that, and a raycast that misses the
 * scene or finds surfaces where there are none fails it. */
#define RAYCAST_MIN_AGREE 0.70
#define RAYCAST_MAX_WRONG 0.02
#define MESH_MIN_ON_SURFACE 0.95
#define DEG_TO_RAD (3.14159265358979323846 / 180.0)
/* The frames the query map integrates before the window: 1 under
 * streaming clients (enough for a surface to find), more with --clients 0,
 * where nothing else adds views and the map should look like one a robot
 * has been filling for a second. */
#define PREFILL_FRAMES 1u
#define IDLE_PREFILL_FRAMES 30u

/* What every thread of the run sees. t_end_ms is set before the threads
 * are released from the barrier and not written after. */
typedef struct {
    const bench_opts *o;
    const bd_frames *frames;
    const char *req_url, *frames_url;
    const char *ring_path; /* --ring: the daemon's ring socket; else NULL */
    pthread_barrier_t start;
    double t_start_ms, t_end_ms;
} run_ctx;

typedef struct {
    run_ctx *run;
    uint32_t index;
    char map[64];
    tsdf_client *client; /* kept open after the thread ends: see main */
    uint64_t sent, acked_in_window, failed;
    int first_error;
    char first_message[160];
    sample_set lat;
} client_job;

typedef enum { QUERY_RAYCAST, QUERY_MESH } query_kind;

typedef struct {
    run_ctx *run;
    query_kind kind;
    const char *map;
    tsdf_raycast_params rp; /* raycast */
    tsdf_client_raycast_options ro;
    uint32_t out_w, out_h;     /* the reply's pixels (ro.scale) */
    const float *want_depth_m; /* out_w x out_h */
    float voxel_m;
    uint64_t ok, failed, wrong;
    int first_error;
    char first_message[160];
    char first_wrong[200];
    double worst_agree;      /* raycast: the least agreeing share seen */
    double worst_on_surface; /* mesh: the least share of vertices on the surface */
    size_t last_vertices;    /* mesh */
    sample_set lat;
} query_job;

/* The daemon's totals, read through the stats of a map that does not
 * exist: such a reply carries the daemon's counters without waiting for a
 * map's worker (PROTOCOL.md 6.6), so it is answered at once under load. */
typedef struct {
    int64_t received, integrated, dropped, rejected, in_flight;
    double at_ms; /* the middle of the request */
} daemon_counters;

static void nap_ms(double ms)
{
    if (ms <= 0.0)
        return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

/* ---- daemon counters ------------------------------------------------------ */

static int read_counters(tsdf_client *c, const char *absent_map, daemon_counters *out)
{
    static const char *const keys[5] = {"frames.received", "frames.dropped", "frames.rejected",
                                        "frames.in_flight", "frames.integrated"};
    tsdf_rep_stats *st = malloc(sizeof *st);
    if (st == NULL)
        return TSDF_ENOMEM;
    double t0 = now_ms();
    int rc = tsdf_client_stats(c, absent_map, st, CALL_TIMEOUT_MS);
    out->at_ms = 0.5 * (t0 + now_ms());
    if (rc == TSDF_OK) {
        int64_t *dst[5] = {&out->received, &out->dropped, &out->rejected, &out->in_flight,
                           &out->integrated};
        for (int k = 0; k < 5; k++)
            if (!bd_stat_find(st, keys[k], dst[k])) {
                fprintf(stderr, "bench_daemon: the stats reply has no %s\n", keys[k]);
                rc = TSDF_EFORMAT;
            }
    } else {
        fprintf(stderr, "bench_daemon: stats: %s (%s)\n", tsdf_strerror(rc),
                tsdf_client_last_message());
    }
    free(st);
    return rc;
}

/* ---- threads ---------------------------------------------------------------- */

static void note_error(int *first_error, char *msg, size_t len, int rc)
{
    if (*first_error != 0)
        return;
    *first_error = rc;
    snprintf(msg, len, "%s", tsdf_client_last_message());
}

static int open_client(const run_ctx *run, int with_push, tsdf_client **out)
{
    tsdf_client_options co;
    tsdf_client_options_default(&co);
    co.default_timeout_ms = CALL_TIMEOUT_MS;
    return tsdf_client_open(run->req_url, with_push ? run->frames_url : NULL, &co, out);
}

static void *client_main(void *arg)
{
    client_job *j = arg;
    run_ctx *run = j->run;
    int ff = run->o->mode == MODE_FF;
    int rc = open_client(run, ff, &j->client);
    if (rc == TSDF_OK && run->ring_path != NULL)
        rc = tsdf_client_attach_ring(j->client, run->ring_path,
                                     (size_t)run->frames->width * run->frames->height * 2u, 2);
    if (rc != TSDF_OK) {
        note_error(&j->first_error, j->first_message, sizeof j->first_message, rc);
        j->failed++;
    }
    pthread_barrier_wait(&run->start);
    /* Clients start at poses spread over the walk, so that they do not all
     * send the same image at once. */
    uint32_t start = (uint32_t)((uint64_t)j->index * (2 * (BD_FRAME_POSES - 1)) / run->o->clients);
    tsdf_frame frame;
    tsdf_client_frame cf;
    memset(&cf, 0, sizeof cf);
    cf.map = j->map;
    cf.sensor_id = j->index + 1;
    cf.frame = &frame;
    for (uint64_t k = 0; rc == TSDF_OK && now_ms() < run->t_end_ms; k++) {
        bd_frames_frame(run->frames, bd_frames_index(k, start), &frame);
        cf.seq = k;
        j->sent++;
        if (ff) {
            rc = tsdf_client_send_frame(j->client, &cf, CALL_TIMEOUT_MS);
        } else {
            tsdf_rep_integrate rep;
            double t0 = now_ms();
            rc = tsdf_client_integrate(j->client, &cf, CALL_TIMEOUT_MS, &rep);
            double t1 = now_ms();
            if (rc == TSDF_OK) {
                bd_sample_add(&j->lat, t1 - t0);
                if (t1 <= run->t_end_ms)
                    j->acked_in_window++;
            }
        }
        if (rc != TSDF_OK) {
            note_error(&j->first_error, j->first_message, sizeof j->first_message, rc);
            j->failed++;
        }
    }
    return NULL;
}

/* One query and its check. *call_ms is the call's time alone: the check
 * (a pass over every pixel, or a scene distance per checked vertex) is
 * the benchmark's work, not the daemon's answer, so it is not in the
 * latency. */
static int query_once(query_job *q, tsdf_client *c, float *depth, float *normals, double *call_ms)
{
    double t0 = now_ms();
    if (q->kind == QUERY_RAYCAST) {
        tsdf_raycast_output out = {depth, q->ro.want_normals ? normals : NULL, NULL};
        tsdf_client_raycast_info info;
        tsdf_client_view view;
        const float *got = depth;
        int rc;
        if (q->run->o->raycast_view) {
            rc = tsdf_client_raycast_view(c, q->map, &q->rp, &q->ro, &view, CALL_TIMEOUT_MS);
            info = view.info;
            got = view.depth_m;
        } else {
            rc = tsdf_client_raycast_ex(c, q->map, &q->rp, &q->ro, &out, &info, CALL_TIMEOUT_MS);
        }
        *call_ms = now_ms() - t0;
        if (rc != TSDF_OK)
            return rc;
        double agree = 0.0, wrong = 1.0;
        if (info.width == q->out_w && info.height == q->out_h)
            bd_raycast_agreement(got, q->want_depth_m, (size_t)q->out_w * q->out_h,
                                 RAYCAST_TOL_VOX * q->voxel_m, &agree, &wrong);
        if (q->run->o->raycast_view)
            tsdf_client_view_release(&view);
        if (info.width != q->out_w || info.height != q->out_h)
            return TSDF_EBAD_SIZE;
        if (agree < q->worst_agree)
            q->worst_agree = agree;
        if (agree < RAYCAST_MIN_AGREE || wrong > RAYCAST_MAX_WRONG) {
            if (q->wrong++ == 0)
                snprintf(q->first_wrong, sizeof q->first_wrong,
                         "raycast: %.1f%% of the pixels agree with the scene within %.0f voxels "
                         "(want >= %.0f%%), %.1f%% of the hits are wrong (want <= %.0f%%)",
                         100.0 * agree, RAYCAST_TOL_VOX, 100.0 * RAYCAST_MIN_AGREE, 100.0 * wrong,
                         100.0 * RAYCAST_MAX_WRONG);
        }
        return TSDF_OK;
    }
    tsdf_mesh m;
    uint64_t version = 0;
    tsdf_mesh_init(&m);
    int rc = tsdf_client_mesh(c, q->map, NULL, &m, &version, CALL_TIMEOUT_MS);
    *call_ms = now_ms() - t0;
    if (rc != TSDF_OK)
        return rc;
    double on = bd_mesh_on_surface(&m, &q->run->frames->scene, MESH_TOL_VOX * q->voxel_m);
    q->last_vertices = m.vertex_count;
    if (on < q->worst_on_surface)
        q->worst_on_surface = on;
    if (m.triangle_count == 0 || on < MESH_MIN_ON_SURFACE) {
        if (q->wrong++ == 0)
            snprintf(q->first_wrong, sizeof q->first_wrong,
                     "mesh: %zu triangles, %.1f%% of the sampled vertices within %.0f voxels "
                     "of the surface (want >= %.0f%%)",
                     m.triangle_count, 100.0 * on, MESH_TOL_VOX, 100.0 * MESH_MIN_ON_SURFACE);
    }
    tsdf_mesh_fini(&m);
    return TSDF_OK;
}

static void *query_main(void *arg)
{
    query_job *q = arg;
    run_ctx *run = q->run;
    tsdf_client *c = NULL;
    size_t n = (size_t)q->out_w * q->out_h;
    float *depth = NULL, *normals = NULL;
    int rc = open_client(run, 0, &c);
    if (rc == TSDF_OK && q->kind == QUERY_RAYCAST) {
        depth = malloc(n * sizeof *depth);
        normals = q->ro.want_normals ? malloc(3 * n * sizeof *normals) : NULL;
        if (depth == NULL || (q->ro.want_normals && normals == NULL))
            rc = TSDF_ENOMEM;
        /* With --ring the images come back through a ring of five slots
         * of a depth image each: room for depth, normals and colour
         * (19 bytes a pixel). */
        if (rc == TSDF_OK && run->ring_path != NULL)
            rc = tsdf_client_attach_ring(c, run->ring_path, n * sizeof *depth, 5);
    }
    if (rc != TSDF_OK) {
        note_error(&q->first_error, q->first_message, sizeof q->first_message, rc);
        q->failed++;
    }
    pthread_barrier_wait(&run->start);
    while (rc == TSDF_OK && now_ms() < run->t_end_ms) {
        double t0 = now_ms(), call_ms = 0.0;
        rc = query_once(q, c, depth, normals, &call_ms);
        if (rc != TSDF_OK) {
            note_error(&q->first_error, q->first_message, sizeof q->first_message, rc);
            q->failed++;
            break;
        }
        q->ok++;
        bd_sample_add(&q->lat, call_ms);
        nap_ms(t0 + run->o->query_period_ms - now_ms());
    }
    free(depth);
    free(normals);
    tsdf_client_close(c);
    return NULL;
}

/* ---- the run ---------------------------------------------------------------- */

typedef struct {
    bench_opts o;
    bd_frames frames;
    bench_spawn spawn;
    int spawned;
    run_ctx run;
    bench_cputime cpu_start, cpu_end; /* host CPU time at the window's ends */
    tsdf_client *ctl;                 /* prefill, counters, per-map stats */
    char absent_map[64];
    char shared_map[64];
    char query_map[64]; /* the map the prefill and the queries use */
    client_job *jobs;
    query_job queries[2];
    size_t query_count;
    float *want_depth_m; /* the raycast's reference */
    uint64_t prefill_frames;
    sample_set prefill_lat; /* the prefill's send-to-ack, ms */
    float voxel_m;
    /* Before the first frame (the reconciliation's origin), at the
     * window's start and end (the rate), and once all frames arrived. */
    daemon_counters before, base, at_end, settled;
    tsdf_backend backend;
    double settle_s;
    int stop_status;
} bench;

static int start_daemon(bench *b)
{
    const bench_opts *o = &b->o;
    if (o->spawn_bin == NULL) {
        b->run.req_url = o->addr;
        b->run.frames_url = o->frames_addr;
        return 0;
    }
    bench_spawn_opts so;
    memset(&so, 0, sizeof so);
    so.bin = o->spawn_bin;
    so.backend = o->backend;
    so.tcp = o->tcp;
    so.max_maps = o->shared_map ? 4 : (int)o->clients + 2;
    /* Every client holds a REQ and (ff) a PUSH connection; the queries and
     * the control client add a few. */
    so.max_connections = (int)(2 * o->clients + 16);
    if (so.max_connections > 4096)
        so.max_connections = 4096;
    so.sets = o->sets;
    so.set_count = o->set_count;
    so.ready_timeout_ms = 60000;
    if (bench_spawn_start(&b->spawn, &so) != 0)
        return -1;
    b->spawned = 1;
    b->run.req_url = b->spawn.req_url;
    b->run.frames_url = b->spawn.frames_url;
    b->run.ring_path = o->ring ? b->spawn.ring_path : NULL;
    return 0;
}

/* The query map integrates the first pose once, or with --clients 0 the
 * first IDLE_PREFILL_FRAMES poses of the walk (acknowledged), so that the
 * queries from the first pose find a surface from the start; the voxel
 * size of the checks is that map's. */
static int prefill(bench *b)
{
    tsdf_frame frame;
    tsdf_client_frame cf;
    tsdf_rep_integrate rep;
    uint32_t frames = b->o.clients ? PREFILL_FRAMES : IDLE_PREFILL_FRAMES;
    int rc = TSDF_OK;
    memset(&cf, 0, sizeof cf);
    cf.map = b->query_map;
    cf.frame = &frame;
    for (uint32_t k = 0; k < frames && rc == TSDF_OK; k++) {
        bd_frames_frame(&b->frames, bd_frames_index(k, 0), &frame);
        cf.seq = k;
        b->prefill_frames++;
        double t0 = now_ms();
        rc = tsdf_client_integrate(b->ctl, &cf, CALL_TIMEOUT_MS, &rep);
        if (rc == TSDF_OK)
            bd_sample_add(&b->prefill_lat, now_ms() - t0);
    }
    if (rc != TSDF_OK) {
        fprintf(stderr,
                "bench_daemon: integrating frame %" PRIu64 " of the prefill into %s: %s (%s)\n",
                b->prefill_frames, cf.map, tsdf_strerror(rc), tsdf_client_last_message());
        return -1;
    }
    tsdf_rep_stats *st = malloc(sizeof *st);
    if (st == NULL)
        return -1;
    rc = tsdf_client_stats(b->ctl, cf.map, st, CALL_TIMEOUT_MS);
    if (rc == TSDF_OK && (!st->has_params || !st->has_engine)) {
        fprintf(stderr, "bench_daemon: the daemon's stats reply has no params or engine\n");
        rc = TSDF_EFORMAT;
    } else if (rc != TSDF_OK) {
        fprintf(stderr, "bench_daemon: stats of %s: %s\n", cf.map, tsdf_strerror(rc));
    } else {
        b->voxel_m = st->params.voxel_size_m;
        b->backend = st->engine.backend;
    }
    free(st);
    return rc == TSDF_OK ? 0 : -1;
}

static int setup_queries(bench *b)
{
    const bench_opts *o = &b->o;
    tsdf_synth_sequence seq;
    if (!o->raycast && !o->mesh)
        return 0;
    int rc = tsdf_synth_sequence_init(&seq, o->scene);
    if (rc == TSDF_OK)
        rc = tsdf_synth_sequence_set_resolution(&seq, o->raycast_width, o->raycast_height);
    /* The reply's view: the exact depth is rendered through it. */
    tsdf_client_raycast_options ro;
    tsdf_intrinsics out_K;
    uint32_t out_w, out_h;
    bd_raycast_view(o->raycast_reply, o->raycast_width, o->raycast_height, &seq.K, &ro, &out_w,
                    &out_h, &out_K);
    size_t n = (size_t)out_w * out_h;
    b->want_depth_m = rc == TSDF_OK ? malloc(n * sizeof *b->want_depth_m) : NULL;
    if (b->want_depth_m == NULL)
        return -1;
    for (int kind = 0; kind < 2; kind++) {
        if ((kind == QUERY_RAYCAST && !o->raycast) || (kind == QUERY_MESH && !o->mesh))
            continue;
        query_job *q = &b->queries[b->query_count++];
        memset(q, 0, sizeof *q);
        q->run = &b->run;
        q->kind = (query_kind)kind;
        q->map = b->query_map;
        q->voxel_m = b->voxel_m;
        q->worst_agree = 1.0;
        q->worst_on_surface = 1.0;
        q->want_depth_m = b->want_depth_m;
        q->rp.width = o->raycast_width;
        q->rp.height = o->raycast_height;
        q->rp.K = seq.K;
        q->ro = ro;
        q->out_w = out_w;
        q->out_h = out_h;
        memcpy(q->rp.T_world_cam, b->frames.T_world_cam[0], sizeof q->rp.T_world_cam);
        q->rp.min_depth_m = seq.min_depth_m;
        q->rp.max_depth_m = seq.max_depth_m;
    }
    rc = tsdf_scene_render(&seq.scene, out_w, out_h, &out_K, b->frames.T_world_cam[0],
                           b->want_depth_m, NULL);
    return rc == TSDF_OK ? 0 : -1;
}

/* Runs the clients and queries for the window and joins them. */
static int run_window(bench *b)
{
    const bench_opts *o = &b->o;
    size_t threads = o->clients + b->query_count;
    pthread_t *tid = calloc(threads, sizeof *tid);
    size_t started = 0;
    int result = 0;
    if (tid == NULL)
        return -1;
    if (pthread_barrier_init(&b->run.start, NULL, (unsigned)threads + 1) != 0) {
        free(tid);
        return -1;
    }
    while (started < threads) {
        int rc = started < o->clients
                     ? pthread_create(&tid[started], NULL, client_main, &b->jobs[started])
                     : pthread_create(&tid[started], NULL, query_main,
                                      &b->queries[started - o->clients]);
        if (rc != 0)
            break;
        started++;
    }
    if (started != threads) {
        /* The barrier would wait for threads that never came: a setup
         * failure this program cannot recover from cleanly. */
        fprintf(stderr, "bench_daemon: could not start %zu threads\n", threads);
        return -1;
    }
    if (read_counters(b->ctl, b->absent_map, &b->base) != TSDF_OK)
        result = -1;
    b->run.t_start_ms = now_ms();
    b->run.t_end_ms = result == 0 ? b->run.t_start_ms + 1e3 * o->seconds : 0.0;
    bench_cputime_read(b->spawned ? b->spawn.pid : 0, &b->cpu_start);
    pthread_barrier_wait(&b->run.start);
    nap_ms(b->run.t_end_ms - now_ms());
    bench_cputime_read(b->spawned ? b->spawn.pid : 0, &b->cpu_end);
    if (result == 0 && read_counters(b->ctl, b->absent_map, &b->at_end) != TSDF_OK)
        result = -1;
    for (size_t i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&b->run.start);
    free(tid);
    return result;
}

/* The maps this run made: one per client, one shared, or with no clients
 * the query map alone; map 0 is the query map in every case. */
static uint32_t map_count(const bench *b)
{
    return b->o.shared_map || b->o.clients == 0 ? 1 : b->o.clients;
}

static const char *map_name(const bench *b, uint32_t i)
{
    return b->o.clients ? b->jobs[i].map : b->query_map;
}

/* Waits until the daemon received every frame sent and none is in flight. */
static int settle(bench *b, uint64_t sent)
{
    double t0 = now_ms();
    for (;;) {
        if (read_counters(b->ctl, b->absent_map, &b->settled) != TSDF_OK)
            return -1;
        int64_t received = b->settled.received - b->before.received;
        if (received >= (int64_t)sent && b->settled.in_flight == 0)
            break;
        if (now_ms() - t0 > 1e3 * b->o.settle_timeout_s) {
            fprintf(stderr,
                    "bench_daemon: after %.0f s the daemon has received %" PRId64 " of %" PRIu64
                    " frames and holds %" PRId64 " in flight\n",
                    b->o.settle_timeout_s, received, sent, b->settled.in_flight);
            return -1;
        }
        nap_ms(50);
    }
    b->settle_s = (now_ms() - t0) / 1e3;
    return 0;
}

/* The daemon's counters against what was sent: every check is printed;
 * returns the number that failed. */
static int reconcile(bench *b, uint64_t sent)
{
    const daemon_counters *s = &b->settled, *base = &b->before;
    int bad = 0;
    struct {
        const char *name;
        int64_t got, want;
    } rows[4] = {
        {"received", s->received - base->received, (int64_t)sent},
        {"integrated", s->integrated - base->integrated, (int64_t)sent},
        {"dropped", s->dropped - base->dropped, 0},
        {"rejected", s->rejected - base->rejected, 0},
    };
    printf("reconcile: frames sent %" PRIu64 " (%" PRIu64 " of them before the window)\n", sent,
           b->prefill_frames);
    for (int k = 0; k < 4; k++) {
        int ok = rows[k].got == rows[k].want;
        bad += !ok;
        printf("  daemon frames.%-11s +%-10" PRId64 " want %-10" PRId64 " %s\n", rows[k].name,
               rows[k].got, rows[k].want, ok ? "ok" : "MISMATCH");
    }
    /* Per map: map.frames_integrated of a map this run created. */
    tsdf_rep_stats *st = malloc(sizeof *st);
    if (st == NULL)
        return bad + 1;
    uint32_t maps = map_count(b), maps_ok = 0;
    for (uint32_t i = 0; i < maps; i++) {
        uint64_t want = b->prefill_frames * (i == 0);
        for (uint32_t k = 0; k < b->o.clients; k++)
            if (strcmp(b->jobs[k].map, map_name(b, i)) == 0)
                want += b->jobs[k].sent;
        int64_t got = -1;
        int rc = tsdf_client_stats(b->ctl, map_name(b, i), st, CALL_TIMEOUT_MS);
        if (rc == TSDF_OK && bd_stat_find(st, "map.frames_integrated", &got) &&
            got == (int64_t)want) {
            maps_ok++;
            continue;
        }
        if (i - maps_ok < 8)
            printf("  map %s: frames_integrated %" PRId64 ", want %" PRIu64 " (%s)\n",
                   map_name(b, i), got, want, rc == TSDF_OK ? "MISMATCH" : tsdf_strerror(rc));
    }
    printf("  maps whose frames_integrated equals the frames sent to them: %u of %u %s\n", maps_ok,
           maps, maps_ok == maps ? "ok" : "MISMATCH");
    bad += maps_ok != maps;
    if (b->o.ring) {
        /* Every client frame through its ring (the prefill's go in the
         * request), or the run did not measure what it says. */
        int64_t got = -1, want = (int64_t)(sent - b->prefill_frames);
        int rc = tsdf_client_stats(b->ctl, NULL, st, CALL_TIMEOUT_MS);
        if (rc == TSDF_OK)
            bd_stat_find(st, "rings.frames", &got);
        printf("  frames whose depth came through a shared ring: %" PRId64 ", want %" PRId64
               " %s\n",
               got, want, got == want ? "ok" : "MISMATCH");
        bad += got != want;
    }
    free(st);
    return bad;
}

/* Failed calls and wrong query results: every one is printed; returns how
 * many kinds of failure there were. */
static int report_failures(const bench *b)
{
    uint64_t failed = 0;
    int bad = 0;
    for (uint32_t i = 0; i < b->o.clients; i++) {
        const client_job *j = &b->jobs[i];
        if (j->failed && failed == 0)
            printf("  client %u: first failure %s (%s)\n", i, tsdf_strerror(j->first_error),
                   j->first_message);
        failed += j->failed;
    }
    if (failed) {
        printf("  client calls that failed: %" PRIu64 "\n", failed);
        bad++;
    }
    for (size_t i = 0; i < b->query_count; i++) {
        const query_job *q = &b->queries[i];
        const char *name = q->kind == QUERY_RAYCAST ? "raycast" : "mesh";
        if (q->failed) {
            printf("  %s query failed: %s (%s)\n", name, tsdf_strerror(q->first_error),
                   q->first_message);
            bad++;
        }
        if (q->wrong) {
            printf("  %s answers that were wrong: %" PRIu64 " of %" PRIu64 "; first: %s\n", name,
                   q->wrong, q->ok, q->first_wrong);
            bad++;
        }
        if (q->ok == 0 && !q->failed) {
            printf("  %s: no query was answered within the window\n", name);
            bad++;
        }
    }
    return bad;
}

static void print_daemon_summary(const char *label, const tsdf_rep_stats *st, const char *key)
{
    char k50[64], k99[64], kmax[64], kn[64];
    double p50, p99, mx, n;
    snprintf(k50, sizeof k50, "%s.p50_ms", key);
    snprintf(k99, sizeof k99, "%s.p99_ms", key);
    snprintf(kmax, sizeof kmax, "%s.max_ms", key);
    snprintf(kn, sizeof kn, "%s.count", key);
    if (bd_stat_find_f(st, k50, &p50) && bd_stat_find_f(st, k99, &p99) &&
        bd_stat_find_f(st, kn, &n)) {
        if (!bd_stat_find_f(st, kmax, &mx))
            mx = NAN;
        printf("  %-28s %9.2f %9s %9.2f %9.2f %8.0f (daemon's last window)\n", label, p50, "", p99,
               mx, n);
    }
}

/* summary: a stats reply of the daemon's counters read after the run. */
static void print_results(bench *b, uint64_t sent, const tsdf_rep_stats *summary)
{
    const bench_opts *o = &b->o;
    double window_s = (b->at_end.at_ms - b->base.at_ms) / 1e3;
    double run_s = o->seconds;
    uint64_t acked = 0;
    sample_set lat = {0};
    for (uint32_t i = 0; i < o->clients; i++) {
        acked += b->jobs[i].acked_in_window;
        bd_sample_merge(&lat, &b->jobs[i].lat);
    }
    double integrated_rate =
        (double)(b->at_end.integrated - b->base.integrated) / (window_s > 0 ? window_s : 1);
    printf("\nresults (every frame integrated, none dropped or rejected):\n");
    if (o->clients == 0)
        printf("  queries only: no client streamed; the map holds the %" PRIu64 " prefill frames\n",
               b->prefill_frames);
    else if (o->mode == MODE_ACKED)
        printf("  frames/s sustained: %.1f (acknowledged within the %.1f s window; the daemon "
               "integrated %.1f/s between its counter reads)\n",
               (double)acked / run_s, run_s, integrated_rate);
    else
        printf("  frames/s sustained: %.1f (integrated by the daemon between its counter reads "
               "%.2f s apart; clients sent %.1f/s, the rest was integrated %.1f s after the "
               "window)\n",
               integrated_rate, window_s, (double)(sent - b->prefill_frames) / run_s, b->settle_s);
    bench_cputime_report(&b->cpu_start, &b->cpu_end,
                         o->clients == 0 ? 0.0
                         : o->mode == MODE_ACKED
                             ? (double)acked
                             : (double)(b->at_end.integrated - b->base.integrated),
                         "the daemon", "the clients");
    printf("  %-28s %9s %9s %9s %9s %8s\n", "latency (ms)", "p50", "p90", "p99", "max", "n");
    if (o->clients == 0)
        bd_print_latency("prefill send-to-ack (idle)", &b->prefill_lat);
    else if (o->mode == MODE_ACKED)
        bd_print_latency("send-to-ack (integrate)", &lat);
    for (size_t i = 0; i < b->query_count; i++) {
        query_job *q = &b->queries[i];
        char name[64];
        if (q->kind == QUERY_RAYCAST)
            snprintf(name, sizeof name, "raycast %ux%u%s", q->out_w, q->out_h,
                     q->ro.want_normals ? "" : " depth");
        else
            snprintf(name, sizeof name, "mesh (%zu vertices)", q->last_vertices);
        bd_print_latency(name, &q->lat);
    }
    for (size_t i = 0; i < b->query_count; i++) {
        const query_job *q = &b->queries[i];
        if (q->kind == QUERY_RAYCAST)
            printf(
                "  (every raycast checked: at least %.1f%% of the pixels agreed with the scene's "
                "exact depth within %.0f voxels)\n",
                100.0 * q->worst_agree, RAYCAST_TOL_VOX);
        else
            printf("  (every mesh checked: at least %.1f%% of its sampled vertices within %.0f "
                   "voxels of the surface)\n",
                   100.0 * q->worst_on_surface, MESH_TOL_VOX);
    }
    if (summary != NULL) {
        print_daemon_summary("daemon latency.integrate", summary, "latency.integrate");
        print_daemon_summary("daemon latency.queue_wait", summary, "latency.queue_wait");
        print_daemon_summary("daemon request.integrate", summary, "latency.request.integrate");
        print_daemon_summary("daemon request.raycast", summary, "latency.request.raycast");
        print_daemon_summary("daemon request.mesh", summary, "latency.request.mesh");
    }
    if (lat.not_kept)
        printf("  (%" PRIu64 " latency samples beyond the per-thread limit were not kept)\n",
               lat.not_kept);
    free(lat.ms);
}

static void print_setup(const bench *b)
{
    const bench_opts *o = &b->o;
    if (o->clients == 0)
        printf("bench_daemon: queries only, no clients, one map of %" PRIu64
               " acknowledged %ux%u u16 frames of scene %s, %.1f s\n",
               b->prefill_frames, o->width, o->height, o->scene, o->seconds);
    else
        printf("bench_daemon: %u client%s, %s, %s, %ux%u u16 frames of scene %s, %.1f s\n",
               o->clients, o->clients == 1 ? "" : "s",
               o->mode == MODE_ACKED ? "acknowledged" : "fire-and-forget",
               o->shared_map ? "one shared map" : "a map per client", o->width, o->height, o->scene,
               o->seconds);
    printf("daemon: %s %s (%s backend, voxel %.3f m)\n", b->spawned ? "spawned" : "at",
           b->spawned ? o->spawn_bin : o->addr,
           b->backend == TSDF_BACKEND_CUDA  ? "cuda"
           : b->backend == TSDF_BACKEND_CPU ? "cpu"
                                            : "unknown",
           b->voxel_m);
    printf("  requests %s%s%s\n", b->run.req_url, o->mode == MODE_FF ? ", frames " : "",
           o->mode == MODE_FF ? b->run.frames_url : "");
    if (b->run.ring_path != NULL)
        printf("  clients' depth and raycast images through shared-memory rings at %s\n",
               b->run.ring_path);
    for (size_t i = 0; i < o->set_count; i++)
        printf("  --set %s\n", o->sets[i]);
}

static int setup_jobs(bench *b)
{
    const bench_opts *o = &b->o;
    long pid = (long)getpid();
    snprintf(b->shared_map, sizeof b->shared_map, "bench%ld-shared", pid);
    /* One element at least, so that calloc(0) cannot read as a failure. */
    b->jobs = calloc(o->clients ? o->clients : 1, sizeof *b->jobs);
    if (b->jobs == NULL)
        return -1;
    for (uint32_t i = 0; i < o->clients; i++) {
        client_job *j = &b->jobs[i];
        j->run = &b->run;
        j->index = i;
        if (o->shared_map)
            snprintf(j->map, sizeof j->map, "%s", b->shared_map);
        else
            snprintf(j->map, sizeof j->map, "bench%ld-c%u", pid, i);
    }
    /* The queries ask the first client's map; with no clients, a map of
     * their own that only the prefill fills. */
    if (o->clients)
        snprintf(b->query_map, sizeof b->query_map, "%s", b->jobs[0].map);
    else
        snprintf(b->query_map, sizeof b->query_map, "bench%ld-idle", pid);
    b->run.o = o;
    b->run.frames = &b->frames;
    return 0;
}

/* The maps this run made go again, so that a daemon given by --addr gets
 * its map slots back. */
static void delete_maps(bench *b)
{
    for (uint32_t i = 0; b->ctl != NULL && i < map_count(b); i++)
        tsdf_client_delete(b->ctl, map_name(b, i), CALL_TIMEOUT_MS);
}

static void teardown(bench *b, int failed)
{
    for (uint32_t i = 0; b->jobs != NULL && i < b->o.clients; i++) {
        tsdf_client_close(b->jobs[i].client);
        free(b->jobs[i].lat.ms);
    }
    for (size_t i = 0; i < b->query_count; i++)
        free(b->queries[i].lat.ms);
    free(b->prefill_lat.ms);
    tsdf_client_close(b->ctl);
    free(b->jobs);
    free(b->want_depth_m);
    bd_frames_free(&b->frames);
    if (b->spawned) {
        if (b->spawn.pid > 0)
            bench_spawn_stop(&b->spawn, 60000);
        if (failed || b->o.keep)
            fprintf(stderr, "bench_daemon: the daemon's directory is kept: %s\n", b->spawn.dir);
        else
            bench_spawn_cleanup(&b->spawn);
    }
}

static int run_bench(bench *b)
{
    uint64_t sent = 0;
    if (setup_jobs(b) != 0 || bd_frames_make(&b->o, &b->frames) != 0 || start_daemon(b) != 0)
        return 2;
    tsdf_client_options co;
    tsdf_client_options_default(&co);
    co.default_timeout_ms = CALL_TIMEOUT_MS;
    int rc = tsdf_client_open(b->run.req_url, NULL, &co, &b->ctl);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_daemon: connecting to %s: %s\n", b->run.req_url, tsdf_strerror(rc));
        return 2;
    }
    snprintf(b->absent_map, sizeof b->absent_map, "bench%ld-counters", (long)getpid());
    if (read_counters(b->ctl, b->absent_map, &b->before) != TSDF_OK || prefill(b) != 0 ||
        setup_queries(b) != 0)
        return 2;
    print_setup(b);
    fflush(stdout);
    if (run_window(b) != 0)
        return 1;
    sent = b->prefill_frames;
    for (uint32_t i = 0; i < b->o.clients; i++)
        sent += b->jobs[i].sent;
    int bad = settle(b, sent) != 0;
    if (!bad)
        bad += reconcile(b, sent);
    bad += report_failures(b);
    /* The daemon's own latency summaries are read now and printed with
     * the rest once the daemon has stopped cleanly. */
    tsdf_rep_stats *summary = malloc(sizeof *summary);
    if (summary != NULL &&
        tsdf_client_stats(b->ctl, b->absent_map, summary, CALL_TIMEOUT_MS) != TSDF_OK) {
        free(summary);
        summary = NULL;
    }
    delete_maps(b);
    if (b->spawned) {
        b->stop_status = bench_spawn_stop(&b->spawn, 60000);
        if (b->stop_status != 0) {
            printf("the daemon did not stop cleanly (status %d)\n", b->stop_status);
            bench_spawn_print_log(&b->spawn, 40);
            bad++;
        }
    }
    if (!bad)
        print_results(b, sent, summary);
    free(summary);
    if (bad) {
        printf("bench_daemon: FAILED: the counters do not reconcile, a call failed or a query "
               "answer was wrong; no throughput is reported for this run\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static bench b;
    int rc = bd_parse_args(argc, argv, &b.o);
    if (rc != 0) {
        bd_usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    rc = run_bench(&b);
    fflush(stdout);
    teardown(&b, rc != 0);
    return rc;
}
