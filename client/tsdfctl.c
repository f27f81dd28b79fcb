/*
 * tsdfctl - command-line client of tsdfd.
 *
 *   tsdfctl [--url URL] [--push-url URL] [--timeout-ms MS] COMMAND [ARGS]
 *
 * Commands: replay, mesh, raycast, stats, save, load, reset, maps, ping.
 * `tsdfctl COMMAND --help` explains each. Exit status: 0 on success, 1 when
 * the daemon or a file operation failed, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tsdf_client.h"
#include "tsdf_dataset.h"
#include "tsdf_png.h"
#include "tsdf_pose.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

#define EXIT_USAGE 2

typedef struct {
    const char *url;
    const char *push_url;
    int timeout_ms;
} global_opts;

/* ---- small helpers ------------------------------------------------------ */

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "tsdfctl: %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `tsdfctl %s --help`)\n", cmd);
    return EXIT_USAGE;
}

/* Prints a failed call: the code's message and name, and the daemon's own
 * explanation when it sent one. */
static int call_error(const char *cmd, int rc)
{
    const char *detail = tsdf_client_last_message();
    fprintf(stderr, "tsdfctl: %s: %s (%s)%s%s\n", cmd, tsdf_strerror(rc), tsdf_errname(rc),
            detail[0] ? ": " : "", detail);
    if (rc == TSDF_ECONNREFUSED || rc == TSDF_ETIMEOUT)
        fprintf(stderr, "tsdfctl: is tsdfd running and listening there? (--url, --push-url)\n");
    return EXIT_FAILURE;
}

static int parse_float(const char *s, float *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    /* Beyond the float range the conversion would be undefined: refuse. */
    if (*end != '\0' || errno != 0 || !isfinite(d) || fabs(d) > FLT_MAX)
        return -1;
    *out = (float)d;
    return 0;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno != 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
    uint64_t v;
    if (parse_u64(s, UINT32_MAX, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int open_client(const global_opts *g, int with_push, tsdf_client **c)
{
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.default_timeout_ms = g->timeout_ms;
    /* A replay may start before the daemon listens on the frame socket; the
     * REQ socket is dialled synchronously either way so that a missing
     * daemon is reported at once. */
    int rc = tsdf_client_open(g->url, with_push ? g->push_url : NULL, &o, c);
    if (rc != TSDF_OK) {
        const char *detail = tsdf_client_last_message();
        fprintf(stderr, "tsdfctl: cannot connect to %s: %s (%s)%s%s\n", g->url, tsdf_strerror(rc),
                tsdf_errname(rc), detail[0] ? ": " : "", detail);
    }
    return rc;
}

/* ---- replay ------------------------------------------------------------- */

static const char replay_help[] =
    "usage: tsdfctl replay DIR [options]\n"
    "       tsdfctl replay --synthetic NAME [options]\n"
    "\n"
    "Sends the frames of a depth sequence to tsdfd.\n"
    "  DIR                 a 7-Scenes folder (frame-XXXXXX.depth.png + .pose.txt) or a\n"
    "                      TUM RGB-D folder (depth.txt + groundtruth.txt)\n"
    "  --synthetic NAME    a synthetic sequence rendered here: sphere, box, room, demo, plane\n"
    "  --rate HZ           frames per second (default: as fast as possible)\n"
    "  --ack               send `integrate` requests and wait for each result instead of\n"
    "                      fire-and-forget `frame` messages on the push socket\n"
    "  --map NAME          target map (default \"default\")\n"
    "  --sensor NAME       sensor name (default: sensor id 0)\n"
    "  --max-frames N      stop after N frames\n"
    "  --every K           send every K-th frame (default 1)\n"
    "  --min-depth M, --max-depth M   valid depth range in metres (default 0.1, 5.0;\n"
    "                      synthetic sequences use their own range unless given)\n"
    "  --size W H          synthetic image size (default 320 240)\n"
    "Prints a progress bar on a terminal and a summary: frames sent, acknowledged,\n"
    "failed, seconds, frames per second. Exit status 1 if any frame failed.\n";

typedef struct {
    const char *dir;
    const char *synthetic;
    double rate_hz;
    int ack;
    const char *map;
    const char *sensor;
    uint64_t max_frames;
    uint32_t every;
    float min_depth_m, max_depth_m;
    int depth_range_given;
    uint32_t width, height;
} replay_opts;

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static void progress(uint64_t done, uint64_t total, double elapsed_s, uint64_t failed)
{
    const int bar = 30;
    int filled = total ? (int)((double)bar * (double)done / (double)total) : 0;
    char line[bar + 1];
    for (int i = 0; i < bar; i++)
        line[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    line[bar] = '\0';
    fprintf(stderr, "\r[%s] %llu/%llu  %.1f fps  %llu failed ", line, (unsigned long long)done,
            (unsigned long long)total, elapsed_s > 0 ? (double)done / elapsed_s : 0.0,
            (unsigned long long)failed);
    fflush(stderr);
}

/* Frames the map has integrated or rejected so far (0 when it does not
 * exist yet); -1 when stats cannot be read. */
static int64_t map_frames_done(tsdf_client *c, const char *map)
{
    tsdf_rep_stats *s = malloc(sizeof(*s));
    if (s == NULL)
        return -1;
    int64_t n = -1;
    if (tsdf_client_stats(c, map, s, TSDF_CLIENT_TIMEOUT_DEFAULT) == TSDF_OK)
        n = s->has_engine ? (int64_t)(s->engine.frames_integrated + s->engine.frames_rejected) : 0;
    free(s);
    return n;
}

/* Fire-and-forget frames may still sit in the PUSH buffer or the daemon's
 * queue, and nng drops what is buffered when the socket closes: wait until
 * the map has taken `sent` more frames than at the start, until it makes no
 * progress for 2 s, or until the timeout. Returns the frames seen done (the
 * map's counters, so frames of other senders to the same map count too). */
static uint64_t wait_for_map(tsdf_client *c, const char *map, int64_t before, uint64_t sent,
                             int timeout_ms)
{
    double start = now_s(), last_progress = start;
    int64_t done = 0;
    while (!g_interrupted) {
        int64_t n = map_frames_done(c, map);
        if (n < 0)
            break;
        if (n - before > done) {
            done = n - before;
            last_progress = now_s();
        }
        if (done >= (int64_t)sent || now_s() - last_progress > 2.0 ||
            (now_s() - start) * 1000.0 > timeout_ms)
            break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return done > 0 ? (uint64_t)done : 0;
}

static int cmd_replay(const global_opts *g, int argc, char **argv)
{
    replay_opts o = {0};
    o.every = 1;
    o.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
    o.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
    o.width = 320;
    o.height = 240;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is_help(a)) {
            fputs(replay_help, stdout);
            return 0;
        } else if (strcmp(a, "--synthetic") == 0 && v) {
            o.synthetic = v;
            i++;
        } else if (strcmp(a, "--rate") == 0 && v) {
            float r;
            /* Bounded so that the frame schedule (k / rate seconds) stays a
             * sane number of seconds: at least one frame a day. */
            if (parse_float(v, &r) != 0 || !(r >= 1.0f / 86400.0f && r <= 1e6f))
                return usage_error("replay",
                                   "--rate needs a number in [1/86400, 1e6] Hz, not \"%s\"", v);
            o.rate_hz = r;
            i++;
        } else if (strcmp(a, "--ack") == 0) {
            o.ack = 1;
        } else if (strcmp(a, "--map") == 0 && v) {
            o.map = v;
            i++;
        } else if (strcmp(a, "--sensor") == 0 && v) {
            o.sensor = v;
            i++;
        } else if (strcmp(a, "--max-frames") == 0 && v) {
            if (parse_u64(v, UINT64_MAX, &o.max_frames) != 0 || o.max_frames == 0)
                return usage_error("replay", "--max-frames needs a positive integer, not \"%s\"",
                                   v);
            i++;
        } else if (strcmp(a, "--every") == 0 && v) {
            if (parse_u32(v, &o.every) != 0 || o.every == 0)
                return usage_error("replay", "--every needs a positive integer, not \"%s\"", v);
            i++;
        } else if ((strcmp(a, "--min-depth") == 0 || strcmp(a, "--max-depth") == 0) && v) {
            float *dst = a[2] == 'm' && a[3] == 'i' ? &o.min_depth_m : &o.max_depth_m;
            if (parse_float(v, dst) != 0)
                return usage_error("replay", "bad depth \"%s\"", v);
            o.depth_range_given = 1;
            i++;
        } else if (strcmp(a, "--size") == 0 && v && i + 2 < argc) {
            if (parse_u32(v, &o.width) != 0 || parse_u32(argv[i + 2], &o.height) != 0)
                return usage_error("replay", "--size needs two integers W H%s", "");
            i += 2;
        } else if (a[0] == '-') {
            return usage_error("replay", "unknown option or missing value: %s", a);
        } else if (o.dir == NULL) {
            o.dir = a;
        } else {
            return usage_error("replay", "unexpected argument \"%s\"", a);
        }
    }
    if ((o.dir == NULL) == (o.synthetic == NULL))
        return usage_error("replay", "give either DIR or --synthetic NAME%s", "");

    /* The source of frames. */
    tsdf_dataset *ds = NULL;
    tsdf_synth_sequence *seq = NULL;
    uint16_t *depth_u16 = NULL;
    float *depth_f32 = NULL;
    uint8_t *rgb = NULL;
    uint64_t total;
    int rc;
    int exit_code = EXIT_FAILURE;
    tsdf_client *c = NULL;
    tsdf_dataset_info info;
    memset(&info, 0, sizeof(info));
    if (o.dir != NULL) {
        rc = tsdf_dataset_open(o.dir, &ds);
        if (rc != TSDF_OK) {
            fprintf(stderr, "tsdfctl: replay: cannot open %s: %s (%s)\n", o.dir, tsdf_strerror(rc),
                    tsdf_errname(rc));
            return EXIT_FAILURE;
        }
        tsdf_dataset_get_info(ds, &info);
        total = info.frame_count;
        depth_u16 = malloc((size_t)info.width * info.height * sizeof(uint16_t));
        if (depth_u16 == NULL)
            goto oom;
        fprintf(stderr, "tsdfctl: %s: %s sequence, %u frames of %ux%u\n", o.dir,
                info.kind == TSDF_DATASET_TUM ? "TUM RGB-D" : "7-Scenes", info.frame_count,
                info.width, info.height);
    } else {
        seq = malloc(sizeof(*seq));
        if (seq == NULL)
            goto oom;
        rc = tsdf_synth_sequence_init(seq, o.synthetic);
        if (rc == TSDF_OK && (o.width != seq->width || o.height != seq->height))
            rc = tsdf_synth_sequence_set_resolution(seq, o.width, o.height);
        if (rc != TSDF_OK) {
            fprintf(stderr,
                    "tsdfctl: replay: synthetic sequence \"%s\": %s (%s); known:", o.synthetic,
                    tsdf_strerror(rc), tsdf_errname(rc));
            for (const char *const *n = tsdf_synth_sequence_names(); *n; n++)
                fprintf(stderr, " %s", *n);
            fputc('\n', stderr);
            goto out;
        }
        total = seq->frame_count;
        depth_f32 = malloc((size_t)seq->width * seq->height * sizeof(float));
        rgb = malloc((size_t)seq->width * seq->height * 3u);
        if (depth_f32 == NULL || rgb == NULL)
            goto oom;
    }
    uint64_t to_send = (total + o.every - 1) / o.every;
    if (o.max_frames && o.max_frames < to_send)
        to_send = o.max_frames;

    if (open_client(g, !o.ack, &c) != TSDF_OK)
        goto out;
    int64_t done_before = o.ack ? 0 : map_frames_done(c, o.map);

    signal(SIGINT, on_sigint);
    int tty = isatty(STDERR_FILENO);
    uint64_t sent = 0, acked = 0, failed = 0, reported = 0;
    double t0 = now_s();
    for (uint64_t k = 0; k < to_send && !g_interrupted; k++) {
        uint32_t i = (uint32_t)(k * o.every);
        tsdf_frame f;
        if (ds != NULL) {
            tsdf_dataset_frame df;
            rc = tsdf_dataset_load(ds, i, depth_u16, (size_t)info.width * info.height, &df);
            if (rc == TSDF_OK)
                tsdf_dataset_frame_to_tsdf(&df, depth_u16, o.min_depth_m, o.max_depth_m, &f);
        } else {
            rc = tsdf_synth_sequence_frame(seq, i, depth_f32, rgb, &f);
            if (rc == TSDF_OK && o.depth_range_given) {
                f.min_depth_m = o.min_depth_m;
                f.max_depth_m = o.max_depth_m;
            }
        }
        if (rc == TSDF_OK) {
            if (o.rate_hz > 0) {
                double due = t0 + (double)k / o.rate_hz, wait = due - now_s();
                if (wait > 0) {
                    struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
                    nanosleep(&ts, NULL);
                }
            }
            tsdf_client_frame cf = {o.map, o.sensor, 0, k, 0, &f};
            cf.stamp_ns = (uint64_t)((now_s() - t0) * 1e9);
            if (o.ack)
                rc = tsdf_client_integrate(c, &cf, TSDF_CLIENT_TIMEOUT_DEFAULT, NULL);
            else
                rc = tsdf_client_send_frame(c, &cf, g->timeout_ms);
        }
        if (rc == TSDF_OK) {
            sent++;
            acked += o.ack ? 1 : 0;
        } else {
            failed++;
            if (o.ack && rc != TSDF_ETIMEOUT && rc != TSDF_ECONNREFUSED && rc != TSDF_ECLOSED)
                sent++; /* it reached the daemon, which refused it */
            if (reported++ < 5) {
                const char *detail = tsdf_client_last_message();
                fprintf(stderr, "%stsdfctl: replay: frame %u: %s (%s)%s%s\n", tty ? "\n" : "", i,
                        tsdf_strerror(rc), tsdf_errname(rc), detail[0] ? ": " : "", detail);
            }
            if (rc == TSDF_ECLOSED || rc == TSDF_ECONNREFUSED)
                break;
        }
        if (tty && (k % 4 == 0 || k + 1 == to_send))
            progress(k + 1, to_send, now_s() - t0, failed);
    }
    double secs = now_s() - t0;
    if (tty)
        fputc('\n', stderr);
    if (o.ack) {
        printf("frames sent %llu, acked %llu, failed %llu, %.2f s, %.1f fps\n",
               (unsigned long long)sent, (unsigned long long)acked, (unsigned long long)failed,
               secs, secs > 0 ? (double)(acked) / secs : 0.0);
    } else {
        uint64_t taken = 0;
        if (sent > 0 && done_before >= 0)
            taken = wait_for_map(c, o.map, done_before, sent, g->timeout_ms);
        double all_s = now_s() - t0;
        printf("frames sent %llu, integrated %llu (fire-and-forget, from the map's counters), "
               "failed %llu, %.2f s, %.1f fps sent, %.1f fps integrated\n",
               (unsigned long long)sent, (unsigned long long)taken, (unsigned long long)failed,
               secs, secs > 0 ? (double)sent / secs : 0.0, all_s > 0 ? (double)taken / all_s : 0.0);
        if (taken < sent)
            fprintf(stderr,
                    "tsdfctl: replay: the daemon took %llu of %llu frames so far (dropped by "
                    "its backpressure policy or still queued; see `tsdfctl stats`)\n",
                    (unsigned long long)taken, (unsigned long long)sent);
    }
    if (g_interrupted)
        fprintf(stderr, "tsdfctl: replay: interrupted\n");
    exit_code = failed == 0 && !g_interrupted ? EXIT_SUCCESS : EXIT_FAILURE;
    goto out;
oom:
    fprintf(stderr, "tsdfctl: replay: out of memory\n");
out:
    tsdf_client_close(c);
    tsdf_dataset_close(ds);
    free(seq);
    free(depth_u16);
    free(depth_f32);
    free(rgb);
    return exit_code;
}

/* ---- mesh --------------------------------------------------------------- */

static const char mesh_help[] =
    "usage: tsdfctl mesh OUT.ply [--map NAME] [--box X0 Y0 Z0 X1 Y1 Z1] [--since VERSION]\n"
    "\n"
    "Extracts the map's surface (marching cubes) and writes it as binary PLY.\n"
    "  --box      only blocks that intersect this axis-aligned box (metres, world frame)\n"
    "  --since    only blocks changed after map version VERSION (printed by earlier runs)\n";

static int cmd_mesh(const global_opts *g, int argc, char **argv)
{
    const char *out = NULL, *map = NULL;
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof(mp));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            fputs(mesh_help, stdout);
            return 0;
        } else if (strcmp(a, "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (strcmp(a, "--box") == 0 && i + 6 < argc) {
            float b[6];
            for (int k = 0; k < 6; k++) {
                if (parse_float(argv[i + 1 + k], &b[k]) != 0)
                    return usage_error("mesh", "--box: \"%s\" is not a number", argv[i + 1 + k]);
            }
            for (int k = 0; k < 3; k++) {
                mp.box.min[k] = b[k];
                mp.box.max[k] = b[k + 3];
            }
            mp.use_box = 1;
            i += 6;
        } else if (strcmp(a, "--since") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], UINT64_MAX, &mp.since_version) != 0)
                return usage_error("mesh", "--since needs a version number, not \"%s\"", argv[i]);
        } else if (a[0] == '-') {
            return usage_error("mesh", "unknown option or missing value: %s", a);
        } else if (out == NULL) {
            out = a;
        } else {
            return usage_error("mesh", "unexpected argument \"%s\"", a);
        }
    }
    if (out == NULL)
        return usage_error("mesh", "missing OUT.ply%s", "");
    tsdf_client *c;
    if (open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_mesh m;
    memset(&m, 0, sizeof(m));
    uint64_t version = 0;
    double t0 = now_s();
    int rc = tsdf_client_mesh(c, map, &mp, &m, &version, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK)
        return call_error("mesh", rc);
    double dt = now_s() - t0;
    rc = tsdf_mesh_write_ply(&m, out);
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfctl: mesh: cannot write %s: %s\n", out, tsdf_strerror(rc));
        tsdf_client_mesh_release(&m);
        return EXIT_FAILURE;
    }
    printf("%s: %zu vertices, %zu triangles%s, map version %llu (%.0f ms)\n", out, m.vertex_count,
           m.triangle_count, m.colors ? ", coloured" : "", (unsigned long long)version,
           dt * 1000.0);
    tsdf_client_mesh_release(&m);
    return EXIT_SUCCESS;
}

/* ---- raycast ------------------------------------------------------------ */

static const char raycast_help[] =
    "usage: tsdfctl raycast --pose FILE [options] OUT.png\n"
    "\n"
    "Renders the map from a camera pose and writes a shaded image of its surface.\n"
    "  --pose FILE          4x4 row-major camera-to-world matrix (16 numbers; 7-Scenes\n"
    "                       .pose.txt files work)\n"
    "  --width W, --height H   image size (default 640 x 480)\n"
    "  --fx F --fy F --cx C --cy C   intrinsics (default fx = fy = 525 * W / 640,\n"
    "                       principal point at the image centre)\n"
    "  --min-depth M --max-depth M   ray range in metres (default 0.1, 5.0)\n"
    "  --map NAME           (default \"default\")\n"
    "  --color              write the fused colour instead of shading (when the map has it)\n";

static void shade(const float *depth, const float *normals, const float T[16], uint32_t w,
                  uint32_t h, const tsdf_intrinsics *K, uint8_t *rgb)
{
    for (uint32_t v = 0; v < h; v++) {
        for (uint32_t u = 0; u < w; u++) {
            size_t i = (size_t)v * w + u;
            const float *n = normals + 3 * i;
            uint8_t *px = rgb + 3 * i;
            if (!isfinite(depth[i]) || !isfinite(n[0])) {
                px[0] = 32, px[1] = 32, px[2] = 40; /* background */
                continue;
            }
            /* The viewing ray in the world; a headlight at the camera gives
             * Lambertian shading, and the normal's direction tints it so that
             * surfaces of different orientation stay distinguishable. */
            float rc[3] = {((float)u - K->cx) / K->fx, ((float)v - K->cy) / K->fy, 1.0f};
            float rw[3];
            for (int r = 0; r < 3; r++)
                rw[r] = T[4 * r] * rc[0] + T[4 * r + 1] * rc[1] + T[4 * r + 2] * rc[2];
            float len = sqrtf(rw[0] * rw[0] + rw[1] * rw[1] + rw[2] * rw[2]);
            float lambert = -(n[0] * rw[0] + n[1] * rw[1] + n[2] * rw[2]) / len;
            if (lambert < 0)
                lambert = 0;
            float I = 0.15f + 0.85f * lambert;
            for (int k = 0; k < 3; k++) {
                float tint = 0.75f + 0.25f * n[k];
                float val = 255.0f * I * tint;
                px[k] = (uint8_t)(val > 255.0f ? 255.0f : val);
            }
        }
    }
}

static int cmd_raycast(const global_opts *g, int argc, char **argv)
{
    const char *pose_file = NULL, *out = NULL, *map = NULL;
    tsdf_raycast_params p;
    memset(&p, 0, sizeof(p));
    p.width = 640;
    p.height = 480;
    p.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
    p.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
    float fx = 0, fy = 0, cx = NAN, cy = NAN;
    int color = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        float *fdst = NULL;
        uint32_t *udst = NULL;
        if (is_help(a)) {
            fputs(raycast_help, stdout);
            return 0;
        } else if (strcmp(a, "--pose") == 0 && v) {
            pose_file = v;
            i++;
            continue;
        } else if (strcmp(a, "--map") == 0 && v) {
            map = v;
            i++;
            continue;
        } else if (strcmp(a, "--color") == 0) {
            color = 1;
            continue;
        } else if (strcmp(a, "--width") == 0) {
            udst = &p.width;
        } else if (strcmp(a, "--height") == 0) {
            udst = &p.height;
        } else if (strcmp(a, "--fx") == 0) {
            fdst = &fx;
        } else if (strcmp(a, "--fy") == 0) {
            fdst = &fy;
        } else if (strcmp(a, "--cx") == 0) {
            fdst = &cx;
        } else if (strcmp(a, "--cy") == 0) {
            fdst = &cy;
        } else if (strcmp(a, "--min-depth") == 0) {
            fdst = &p.min_depth_m;
        } else if (strcmp(a, "--max-depth") == 0) {
            fdst = &p.max_depth_m;
        } else if (a[0] == '-') {
            return usage_error("raycast", "unknown option: %s", a);
        } else if (out == NULL) {
            out = a;
            continue;
        } else {
            return usage_error("raycast", "unexpected argument \"%s\"", a);
        }
        if (v == NULL)
            return usage_error("raycast", "%s needs a value", a);
        if ((fdst && parse_float(v, fdst) != 0) || (udst && parse_u32(v, udst) != 0))
            return usage_error("raycast", "bad value \"%s\"", v);
        i++;
    }
    if (pose_file == NULL || out == NULL)
        return usage_error("raycast", "need --pose FILE and OUT.png%s", "");
    if (p.width == 0 || p.height == 0 || p.width > TSDF_MAX_IMAGE_DIM ||
        p.height > TSDF_MAX_IMAGE_DIM)
        return usage_error("raycast", "image size out of range%s", "");
    p.K.fx = fx > 0 ? fx : 525.0f * (float)p.width / 640.0f;
    p.K.fy = fy > 0 ? fy : 525.0f * (float)p.height / 480.0f;
    p.K.cx = isfinite(cx) ? cx : 0.5f * (float)(p.width - 1);
    p.K.cy = isfinite(cy) ? cy : 0.5f * (float)(p.height - 1);
    int rc = tsdf_dataset_read_pose_file(pose_file, p.T_world_cam);
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfctl: raycast: pose file %s: %s (%s)\n", pose_file, tsdf_strerror(rc),
                tsdf_errname(rc));
        return EXIT_FAILURE;
    }

    size_t px = (size_t)p.width * p.height;
    float *depth = malloc(px * sizeof(float));
    float *normals = malloc(px * 3 * sizeof(float));
    uint8_t *rgb = malloc(px * 3);
    uint8_t *img = malloc(px * 3);
    int exit_code = EXIT_FAILURE;
    tsdf_client *c = NULL;
    if (depth == NULL || normals == NULL || rgb == NULL || img == NULL) {
        fprintf(stderr, "tsdfctl: raycast: out of memory\n");
        goto out;
    }
    if (open_client(g, 0, &c) != TSDF_OK)
        goto out;
    tsdf_raycast_output ro = {depth, normals, rgb};
    int has_rgb = 0;
    rc = tsdf_client_raycast(c, map, &p, color, &ro, &has_rgb, TSDF_CLIENT_TIMEOUT_DEFAULT);
    if (rc != TSDF_OK) {
        exit_code = call_error("raycast", rc);
        goto out;
    }
    size_t hits = 0;
    for (size_t i = 0; i < px; i++)
        hits += isfinite(depth[i]) ? 1 : 0;
    if (color && !has_rgb)
        fprintf(stderr, "tsdfctl: raycast: the map has no colour; writing shading instead\n");
    if (color && has_rgb)
        memcpy(img, rgb, px * 3);
    else
        shade(depth, normals, p.T_world_cam, p.width, p.height, &p.K, img);
    rc = tsdf_png_write_rgb8(out, img, p.width, p.height);
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfctl: raycast: cannot write %s: %s\n", out, tsdf_strerror(rc));
        goto out;
    }
    printf("%s: %ux%u, surface in %.1f%% of the pixels\n", out, p.width, p.height,
           100.0 * (double)hits / (double)px);
    exit_code = EXIT_SUCCESS;
out:
    tsdf_client_close(c);
    free(depth);
    free(normals);
    free(rgb);
    free(img);
    return exit_code;
}

/* ---- stats -------------------------------------------------------------- */

static const char stats_help[] =
    "usage: tsdfctl stats [--map NAME] [--json]\n"
    "\n"
    "Prints the map's volume statistics and the daemon's counters, as a table or as JSON,\n"
    "and, on the CUDA backend, the device timeline of the map's last frames.\n";

typedef struct {
    const char *key;
    int kind; /* 0 u64, 1 u32, 2 double */
    size_t offset;
} stat_row;

#define ROW(k, kind)                                                                               \
    {                                                                                              \
#k, kind, offsetof(tsdf_volume_stats, k)                                                   \
    }
static const stat_row engine_rows[] = {
    ROW(blocks_allocated, 0),  ROW(capacity_slots, 0),   ROW(load_factor, 2),
    ROW(max_probe, 1),         ROW(mean_probe, 2),       ROW(growth_events, 0),
    ROW(frames_integrated, 0), ROW(frames_rejected, 0),  ROW(insert_failures, 0),
    ROW(memory_bytes, 0),      ROW(memory_cap_bytes, 0), ROW(version, 0),
    ROW(last_upload_ms, 2),    ROW(last_alloc_ms, 2),    ROW(last_update_ms, 2),
    ROW(last_raycast_ms, 2),   ROW(last_mesh_ms, 2),
};
#undef ROW

static void print_row_value(const stat_row *r, const tsdf_volume_stats *st, int json)
{
    const char *p = (const char *)st + r->offset;
    if (r->kind == 0) {
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        printf("%llu", (unsigned long long)v);
    } else if (r->kind == 1) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        printf("%u", v);
    } else {
        double v;
        memcpy(&v, p, sizeof(v));
        if (json && !isfinite(v))
            printf("null");
        else
            printf(json ? "%.17g" : "%.4f", v);
    }
}

static const char *backend_str(tsdf_backend b)
{
    return b == TSDF_BACKEND_CUDA ? "cuda" : b == TSDF_BACKEND_CPU ? "cpu" : "auto";
}

static int cmd_stats(const global_opts *g, int argc, char **argv)
{
    const char *map = NULL;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(stats_help, stdout);
            return 0;
        } else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else {
            return usage_error("stats", "unexpected argument \"%s\"", argv[i]);
        }
    }
    tsdf_client *c;
    if (open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_rep_stats *s = malloc(sizeof(*s));
    if (s == NULL) {
        tsdf_client_close(c);
        return EXIT_FAILURE;
    }
    int rc = tsdf_client_stats(c, map, s, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK) {
        free(s);
        return call_error("stats", rc);
    }
    const tsdf_volume_stats *st = &s->engine;
    /* Map and stats keys are restricted to characters that need no JSON
     * escaping, except the daemon's free-form keys: escape those. */
    if (json) {
        printf("{\"map\": \"%s\"", map ? map : TSDF_PROTO_DEFAULT_MAP);
        if (s->has_engine) {
            printf(", \"engine\": {\"backend\": \"%s\"", backend_str(st->backend));
            for (size_t i = 0; i < sizeof(engine_rows) / sizeof(engine_rows[0]); i++) {
                printf(", \"%s\": ", engine_rows[i].key);
                print_row_value(&engine_rows[i], st, 1);
            }
            printf(", \"has_color\": %s, \"probe_hist\": [", st->has_color ? "true" : "false");
            for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
                printf("%s%llu", i ? ", " : "", (unsigned long long)st->probe_hist[i]);
            printf("]}");
        }
        printf(", \"daemon\": {");
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            printf("%s\"", i ? ", " : "");
            for (const char *k = e->key; *k; k++) {
                if (*k == '"' || *k == '\\')
                    putchar('\\');
                if ((unsigned char)*k < 0x20)
                    printf("\\u%04x", (unsigned)*k);
                else
                    putchar(*k);
            }
            printf("\": ");
            if (e->is_float && !isfinite(e->f))
                printf("null");
            else if (e->is_float)
                printf("%.17g", e->f);
            else
                printf("%lld", (long long)e->i);
        }
        printf("}");
        if (s->timeline_count > 0) {
            printf(", \"timeline\": [");
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                printf("%s{\"frame\": %llu, \"upload_start_ms\": %.6f, \"upload_end_ms\": %.6f, "
                       "\"alloc_start_ms\": %.6f, \"alloc_end_ms\": %.6f, "
                       "\"update_start_ms\": %.6f, \"update_end_ms\": %.6f}",
                       i ? ", " : "", (unsigned long long)t->frame, t->upload_start_ms,
                       t->upload_end_ms, t->alloc_start_ms, t->alloc_end_ms, t->update_start_ms,
                       t->update_end_ms);
            }
            printf("]");
        }
        printf("}\n");
    } else {
        printf("map %s\n", map ? map : TSDF_PROTO_DEFAULT_MAP);
        if (s->has_engine) {
            printf("engine:\n  %-24s %s\n", "backend", backend_str(st->backend));
            for (size_t i = 0; i < sizeof(engine_rows) / sizeof(engine_rows[0]); i++) {
                printf("  %-24s ", engine_rows[i].key);
                print_row_value(&engine_rows[i], st, 0);
                putchar('\n');
            }
            printf("  %-24s %s\n  %-24s", "has_color", st->has_color ? "yes" : "no", "probe_hist");
            for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
                printf(" %llu", (unsigned long long)st->probe_hist[i]);
            putchar('\n');
        } else {
            printf("engine: (no such map yet)\n");
        }
        printf("daemon:\n");
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            if (e->is_float)
                printf("  %-32s %.4f\n", e->key, e->f);
            else
                printf("  %-32s %lld\n", e->key, (long long)e->i);
        }
        /* The CUDA backend's device event times: the upload of frame N+1
         * starting before the update of frame N ends shows the overlap. */
        if (s->timeline_count > 0) {
            printf("timeline (ms since the volume's epoch):\n"
                   "  %6s %21s %21s %21s\n",
                   "frame", "upload", "alloc", "update");
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                printf("  %6llu %10.3f-%-10.3f %10.3f-%-10.3f %10.3f-%-10.3f\n",
                       (unsigned long long)t->frame, t->upload_start_ms, t->upload_end_ms,
                       t->alloc_start_ms, t->alloc_end_ms, t->update_start_ms, t->update_end_ms);
            }
        }
    }
    free(s);
    return EXIT_SUCCESS;
}

/* ---- save, load, reset, maps, ping -------------------------------------- */

static const char save_help[] =
    "usage: tsdfctl save [--map NAME] [PATH]\n"
    "       tsdfctl load [--map NAME] [PATH]\n"
    "\n"
    "save writes a snapshot of the daemon's maps; load replaces map NAME (default\n"
    "\"default\") by its blocks from a snapshot. PATH is relative to the daemon's state\n"
    "directory or absolute inside it, and is opened by the daemon on its machine.\n"
    "Without PATH, save writes a new snapshot into the state directory and load reads\n"
    "the newest valid one there.\n";

static int cmd_save_load(const global_opts *g, int argc, char **argv, int load)
{
    const char *name = load ? "load" : "save";
    const char *map = NULL, *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(save_help, stdout);
            return 0;
        } else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (argv[i][0] == '-') {
            return usage_error(name, "unknown option or missing value: %s", argv[i]);
        } else if (path == NULL) {
            path = argv[i];
        } else {
            return usage_error(name, "unexpected argument \"%s\"", argv[i]);
        }
    }
    tsdf_client *c;
    if (open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_rep_path r;
    int rc = load ? tsdf_client_load(c, map, path, &r, TSDF_CLIENT_TIMEOUT_DEFAULT)
                  : tsdf_client_save(c, map, path, &r, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK)
        return call_error(name, rc);
    if (load)
        printf("loaded map %s from %s (version %llu)\n", map ? map : TSDF_PROTO_DEFAULT_MAP, r.path,
               (unsigned long long)r.version);
    else
        printf("saved snapshot %s (map %s at version %llu)\n", r.path,
               map ? map : TSDF_PROTO_DEFAULT_MAP, (unsigned long long)r.version);
    return EXIT_SUCCESS;
}

static const char reset_help[] = "usage: tsdfctl reset [--map NAME]\n"
                                 "\n"
                                 "Drops every block of the map (the map keeps existing).\n";
static const char maps_help[] = "usage: tsdfctl maps\n\nLists the daemon's maps, one a line.\n";
static const char ping_help[] = "usage: tsdfctl ping\n"
                                "\n"
                                "Asks the daemon for its version and uptime and prints the "
                                "round-trip time.\n";

static int cmd_simple(const global_opts *g, int argc, char **argv, const char *name)
{
    const char *map = NULL;
    const char *help = strcmp(name, "reset") == 0  ? reset_help
                       : strcmp(name, "maps") == 0 ? maps_help
                                                   : ping_help;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if (strcmp(name, "reset") == 0 && strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else {
            return usage_error(name, "unexpected argument \"%s\"", argv[i]);
        }
    }
    tsdf_client *c;
    if (open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    int rc;
    if (strcmp(name, "reset") == 0) {
        rc = tsdf_client_reset(c, map, TSDF_CLIENT_TIMEOUT_DEFAULT);
        if (rc == TSDF_OK)
            printf("map %s reset\n", map ? map : TSDF_PROTO_DEFAULT_MAP);
    } else if (strcmp(name, "maps") == 0) {
        tsdf_rep_maps *m = malloc(sizeof(*m));
        rc = m ? tsdf_client_maps(c, m, TSDF_CLIENT_TIMEOUT_DEFAULT) : TSDF_ENOMEM;
        for (uint32_t i = 0; rc == TSDF_OK && i < m->count; i++)
            printf("%s\n", m->names[i]);
        free(m);
    } else {
        tsdf_rep_ping p;
        double t0 = now_s();
        rc = tsdf_client_ping(c, &p, TSDF_CLIENT_TIMEOUT_DEFAULT);
        if (rc == TSDF_OK)
            printf("%s: %s, up %.1f s, round trip %.3f ms\n", g->url, p.server,
                   (double)p.uptime_ms / 1000.0, (now_s() - t0) * 1000.0);
    }
    tsdf_client_close(c);
    return rc == TSDF_OK ? EXIT_SUCCESS : call_error(name, rc);
}

/* ---- main --------------------------------------------------------------- */

static const char main_help[] =
    "usage: tsdfctl [--url URL] [--push-url URL] [--timeout-ms MS] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  replay DIR | --synthetic NAME   send a depth sequence to the daemon\n"
    "  mesh OUT.ply                    extract the surface as a PLY mesh\n"
    "  raycast --pose FILE OUT.png     render the surface from a pose into a PNG\n"
    "  stats [--json]                  volume and daemon statistics\n"
    "  save [PATH], load [PATH]        snapshots\n"
    "  reset                           empty a map\n"
    "  maps                            list the maps\n"
    "  ping                            check that the daemon answers\n"
    "`tsdfctl COMMAND --help` describes each command.\n"
    "\n"
    "Global options (anywhere on the line):\n"
    "  --url URL         request socket (default $TSDF_URL or " TSDF_PROTO_DEFAULT_REQ_URL ")\n"
    "  --push-url URL    frame socket (default $TSDF_PUSH_URL or " TSDF_PROTO_DEFAULT_PUSH_URL ")\n"
    "  --timeout-ms MS   the most any call waits (default 10000); connecting to a\n"
    "                    silent tcp:// peer may take longer (nng's 10 s handshake limit,\n"
    "                    the OS's connect timeout for an unreachable host)\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

int main(int argc, char **argv)
{
    global_opts g;
    g.url =
        getenv("TSDF_URL") && *getenv("TSDF_URL") ? getenv("TSDF_URL") : TSDF_PROTO_DEFAULT_REQ_URL;
    g.push_url = getenv("TSDF_PUSH_URL") && *getenv("TSDF_PUSH_URL") ? getenv("TSDF_PUSH_URL")
                                                                     : TSDF_PROTO_DEFAULT_PUSH_URL;
    g.timeout_ms = 10000;

    /* Take the global options out of argv wherever they are, so that
     * `tsdfctl stats --url X` works as well as `tsdfctl --url X stats`. */
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (rest == NULL)
        return EXIT_FAILURE;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--url") == 0 || strcmp(a, "--push-url") == 0 ||
             strcmp(a, "--timeout-ms") == 0)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tsdfctl: %s needs a value\n", a);
                free(rest);
                return EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (strcmp(a, "--url") == 0) {
                g.url = v;
            } else if (strcmp(a, "--push-url") == 0) {
                g.push_url = v;
            } else {
                uint32_t t;
                if (parse_u32(v, &t) != 0 || t == 0 || t > 86400000u) {
                    fprintf(stderr, "tsdfctl: --timeout-ms needs 1..86400000, not \"%s\"\n", v);
                    free(rest);
                    return EXIT_USAGE;
                }
                g.timeout_ms = (int)t;
            }
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    int rc;
    if (n == 0 || is_help(rest[0]) || strcmp(rest[0], "help") == 0) {
        fputs(main_help, n == 0 ? stderr : stdout);
        rc = n == 0 ? EXIT_USAGE : EXIT_SUCCESS;
    } else {
        const char *cmd = rest[0];
        int cargc = n - 1;
        char **cargv = rest + 1;
        if (strcmp(cmd, "replay") == 0)
            rc = cmd_replay(&g, cargc, cargv);
        else if (strcmp(cmd, "mesh") == 0)
            rc = cmd_mesh(&g, cargc, cargv);
        else if (strcmp(cmd, "raycast") == 0)
            rc = cmd_raycast(&g, cargc, cargv);
        else if (strcmp(cmd, "stats") == 0)
            rc = cmd_stats(&g, cargc, cargv);
        else if (strcmp(cmd, "save") == 0)
            rc = cmd_save_load(&g, cargc, cargv, 0);
        else if (strcmp(cmd, "load") == 0)
            rc = cmd_save_load(&g, cargc, cargv, 1);
        else if (strcmp(cmd, "reset") == 0 || strcmp(cmd, "maps") == 0 || strcmp(cmd, "ping") == 0)
            rc = cmd_simple(&g, cargc, cargv, cmd);
        else {
            fprintf(stderr, "tsdfctl: unknown command \"%s\" (see tsdfctl --help)\n", cmd);
            rc = EXIT_USAGE;
        }
    }
    free(rest);
    return rc;
}
