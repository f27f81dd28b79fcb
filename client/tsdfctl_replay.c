/*
 * tsdfctl_replay.c - tsdfctl replay: stream a dataset or a synthetic scene to the daemon.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tsdfctl.h"
#include "tsdf_dataset.h"
#include "tsdf_depth_codec.h"
#include "tsdf_pose.h"
#include "tsdf_synth.h"

/* ---- replay ------------------------------------------------------------- */

static const char replay_help[] =
    "usage: tsdfctl replay DIR [options]\n"
    "       tsdfctl replay --synthetic NAME [options]\n"
    "\n"
    "Sends the frames of a depth sequence to tsdfd.\n"
    "  DIR                 a 7-Scenes folder (frame-XXXXXX.depth.png + .pose.txt) or a\n"
    "                      TUM RGB-D folder (depth.txt + groundtruth.txt); the camera\n"
    "                      from DIR/camera-intrinsics.txt (a 3x3 K, or \"fx fy cx cy\"),\n"
    "                      else the format's default (printed at the start)\n"
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
    "  --compress ENC      send the depth losslessly compressed: raw (default), png, zstd\n"
    "                      or rvl; png and rvl need u16 depth (a dataset), synthetic\n"
    "                      sequences are f32 (use zstd)\n"
    "  --compress-level N  png 1..9 (default 1), zstd 1..19 (default 3); rvl takes none\n"
    "  --ring PATH|auto|off  with --ack over ipc://: the depth through a shared-memory ring\n"
    "                      attached at the daemon's [server] ring_socket PATH (auto: the\n"
    "                      one the daemon names; a socket named auto: ./auto;\n"
    "                      PROTOCOL.md 6.10), not in the requests. Default with --ack\n"
    "                      over ipc://: the ring the daemon names when it names one,\n"
    "                      else the requests (a ring it names but refuses is an error:\n"
    "                      use off); off: always the requests\n"
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
    tsdf_depth_encoding encoding;
    const char *ring; /* --ring: the daemon's ring socket, "auto" or "off"; NULL: not given */
    uint32_t level;
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

/* What the daemon has counted of this replay's frames: the frames it
 * received from the replay's sensor (sensor.<label>.received, which the
 * stats reply lists for at least 11 sensors), and of the map's the ones it
 * integrated. -1 for a figure the stats do not give. */
typedef struct {
    int64_t received;
    int64_t integrated;
} replay_counts;

static int64_t stat_value(const tsdf_rep_stats *s, const char *key)
{
    for (size_t i = 0; i < s->extra_count; i++)
        if (strcmp(s->extra[i].key, key) == 0)
            return s->extra[i].is_float ? (int64_t)s->extra[i].f : s->extra[i].i;
    return -1;
}

static int read_counts(tsdf_client *c, const char *map, const char *sensor, replay_counts *out)
{
    char key[TSDF_PROTO_MAX_STATS_KEY_LEN + 32];
    tsdf_rep_stats *s = malloc(sizeof(*s));
    out->received = out->integrated = -1;
    if (s == NULL)
        return TSDF_ENOMEM;
    int rc = tsdf_client_stats(c, map, s, TSDF_CLIENT_TIMEOUT_DEFAULT);
    if (rc == TSDF_OK) {
        snprintf(key, sizeof key, "sensor.%s.received", sensor != NULL ? sensor : "id 0");
        out->received = stat_value(s, key);
        if (out->received < 0)
            out->received = 0; /* not listed: none received yet, or no room */
        out->integrated = s->has_engine ? (int64_t)s->engine.frames_integrated : 0;
    }
    free(s);
    return rc;
}

/* Fire-and-forget frames may still sit in the PUSH buffer or the daemon's
 * queue, and nng drops what is buffered when the socket closes: wait until
 * the daemon has received `sent` more of the replay's frames than before,
 * as long as it keeps receiving some at least every timeout_ms (a loaded
 * machine is slow, not wrong; a daemon that receives none, because
 * --push-url names another socket, is found out after timeout_ms). The
 * counts then, minus those before, into *got. */
static void wait_for_daemon(tsdf_client *c, const char *map, const char *sensor,
                            const replay_counts *before, uint64_t sent, int timeout_ms,
                            replay_counts *got)
{
    double last_progress = ctl_now_s();
    replay_counts now;
    got->received = got->integrated = 0;
    while (!g_interrupted && read_counts(c, map, sensor, &now) == TSDF_OK) {
        if (now.received - before->received > got->received)
            last_progress = ctl_now_s();
        got->received = now.received - before->received;
        got->integrated = now.integrated - before->integrated;
        if (got->received >= (int64_t)sent || (ctl_now_s() - last_progress) * 1000.0 > timeout_ms)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* 1 when dir/name exists. */
static int has_entry(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    return snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path &&
           stat(path, &st) == 0;
}

/* Says why dir did not open as a sequence: the reader's NOT_FOUND covers a
 * missing folder, a folder of neither layout and a file the sequence lists
 * but lacks, which want different fixes. Returns EXIT_FAILURE. */
static int dataset_error(const char *dir, int rc)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "tsdfctl: replay: %s: %s\n", dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tsdfctl: replay: %s is not a folder (DIR is a sequence's folder)\n", dir);
    } else if (rc == TSDF_ENOT_FOUND && has_entry(dir, "depth.txt") &&
               has_entry(dir, "groundtruth.txt")) {
        fprintf(stderr,
                "tsdfctl: replay: %s: a TUM RGB-D sequence, but a depth image that depth.txt "
                "lists is missing\n",
                dir);
    } else if (rc == TSDF_ENOT_FOUND) {
        fprintf(stderr,
                "tsdfctl: replay: %s is not a sequence tsdfctl reads: expected a 7-Scenes "
                "folder (frame-XXXXXX.depth.png with frame-XXXXXX.pose.txt, in it or in its "
                "frames/ folder) or a TUM RGB-D folder (depth.txt and groundtruth.txt)%s\n",
                dir,
                has_entry(dir, "depth.txt") || has_entry(dir, "groundtruth.txt")
                    ? "; it has only one of depth.txt and groundtruth.txt"
                    : "");
    } else {
        fprintf(stderr, "tsdfctl: replay: cannot read the sequence in %s: %s (%s)\n", dir,
                tsdf_strerror(rc), tsdf_errname(rc));
    }
    return EXIT_FAILURE;
}

int ctl_replay(const global_opts *g, int argc, char **argv)
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
        if (ctl_is_help(a)) {
            fputs(replay_help, stdout);
            return 0;
        } else if (strcmp(a, "--synthetic") == 0 && v) {
            o.synthetic = v;
            i++;
        } else if (strcmp(a, "--rate") == 0 && v) {
            float r;
            /* Bounded so that the frame schedule (k / rate seconds) stays a
             * sane number of seconds: at least one frame a day. */
            if (ctl_parse_float(v, &r) != 0 || !(r >= 1.0f / 86400.0f && r <= 1e6f))
                return ctl_usage_error("replay",
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
            if (ctl_parse_u64(v, UINT64_MAX, &o.max_frames) != 0 || o.max_frames == 0)
                return ctl_usage_error("replay",
                                       "--max-frames needs a positive integer, not \"%s\"", v);
            i++;
        } else if (strcmp(a, "--every") == 0 && v) {
            if (ctl_parse_u32(v, &o.every) != 0 || o.every == 0)
                return ctl_usage_error("replay", "--every needs a positive integer, not \"%s\"", v);
            i++;
        } else if ((strcmp(a, "--min-depth") == 0 || strcmp(a, "--max-depth") == 0) && v) {
            float *dst = a[2] == 'm' && a[3] == 'i' ? &o.min_depth_m : &o.max_depth_m;
            if (ctl_parse_float(v, dst) != 0)
                return ctl_usage_error("replay", "bad depth \"%s\"", v);
            o.depth_range_given = 1;
            i++;
        } else if (strcmp(a, "--size") == 0 && v && i + 2 < argc) {
            if (ctl_parse_u32(v, &o.width) != 0 || ctl_parse_u32(argv[i + 2], &o.height) != 0)
                return ctl_usage_error("replay", "--size needs two integers W H%s", "");
            i += 2;
        } else if (strcmp(a, "--compress") == 0 && v) {
            if (tsdf_depth_encoding_parse(v, strlen(v), &o.encoding) != TSDF_OK)
                return ctl_usage_error("replay",
                                       "--compress takes raw, png, zstd or rvl, not \"%s\"", v);
            i++;
        } else if (strcmp(a, "--ring") == 0 && v) {
            o.ring = v;
            i++;
        } else if (strcmp(a, "--compress-level") == 0 && v) {
            if (ctl_parse_u32(v, &o.level) != 0 || o.level < 1)
                return ctl_usage_error("replay", "--compress-level needs a level, not \"%s\"", v);
            i++;
        } else if (a[0] == '-') {
            return ctl_usage_error("replay", "unknown option or missing value: %s", a);
        } else if (o.dir == NULL) {
            o.dir = a;
        } else {
            return ctl_usage_error("replay", "unexpected argument \"%s\"", a);
        }
    }
    if ((o.dir == NULL) == (o.synthetic == NULL))
        return ctl_usage_error("replay", "give either DIR or --synthetic NAME%s", "");
    /* The levels of TSDF_DEPTH_ENCODINGS, the table libtsdf and the Python
     * package follow. */
    if (o.level != 0) {
        int lo = 0, hi = 0, dflt = 0;
        tsdf_depth_encoding_levels(o.encoding, &lo, &hi, &dflt);
        if (hi == 0) {
            fprintf(stderr, "tsdfctl: replay: --compress %s takes no --compress-level\n",
                    tsdf_depth_encoding_name(o.encoding));
            return EXIT_USAGE;
        }
        if ((int)o.level < lo || (int)o.level > hi) {
            fprintf(stderr,
                    "tsdfctl: replay: --compress-level for %s is %d..%d (default %d), not %u\n",
                    tsdf_depth_encoding_name(o.encoding), lo, hi, dflt, o.level);
            return EXIT_USAGE;
        }
    }
    /* Only an answered request frees its slot (PROTOCOL.md 6.10). */
    if (o.ring != NULL && strcmp(o.ring, "off") != 0 && !o.ack)
        return ctl_usage_error("replay", "--ring needs --ack%s", "");
    /* Not given: the daemon's ring, when it names one, for acknowledged
     * frames from its host; a daemon without one is no error. */
    const int ring_default =
        o.ring == NULL && o.ack && g->url != NULL && strncmp(g->url, "ipc://", 6) == 0;
    if (ring_default)
        o.ring = "auto";
    if (o.ring != NULL && strcmp(o.ring, "off") == 0)
        o.ring = NULL;
    /* Synthetic depth is exact float metres; rounding it to u16 for png or
     * rvl would send other depth than --compress raw does. */
    if (o.synthetic != NULL && !tsdf_depth_encoding_allows(o.encoding, TSDF_DEPTH_F32))
        return ctl_usage_error("replay",
                               "--compress %s needs u16 depth; synthetic sequences are f32 (use "
                               "zstd)",
                               tsdf_depth_encoding_name(o.encoding));

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
        if (rc != TSDF_OK)
            return dataset_error(o.dir, rc);
        tsdf_dataset_get_info(ds, &info);
        total = info.frame_count;
        depth_u16 = malloc((size_t)info.width * info.height * sizeof(uint16_t));
        if (depth_u16 == NULL)
            goto oom;
        fprintf(stderr, "tsdfctl: %s: %s sequence, %u frames of %ux%u\n", o.dir,
                info.kind == TSDF_DATASET_TUM ? "TUM RGB-D" : "7-Scenes", info.frame_count,
                info.width, info.height);
        /* Where the camera comes from, since a wrong one gives a wrong map
         * and no error. */
        const int has_file = has_entry(o.dir, "camera-intrinsics.txt");
        fprintf(stderr, "tsdfctl: intrinsics fx %g fy %g cx %g cy %g, %s%s%s\n", (double)info.K.fx,
                (double)info.K.fy, (double)info.K.cx, (double)info.K.cy,
                has_file ? "from " : "the format's default (no ", o.dir,
                has_file ? "/camera-intrinsics.txt" : "/camera-intrinsics.txt)");
    } else {
        seq = malloc(sizeof(*seq));
        if (seq == NULL)
            goto oom;
        rc = tsdf_synth_sequence_init(seq, o.synthetic);
        if (rc == TSDF_OK && (o.width != seq->width || o.height != seq->height))
            rc = tsdf_synth_sequence_set_resolution(seq, o.width, o.height);
        if (rc != TSDF_OK) {
            if (rc == TSDF_ENOT_FOUND)
                fprintf(stderr,
                        "tsdfctl: replay: --synthetic %s: no synthetic sequence of that "
                        "name; the sequences are:",
                        o.synthetic);
            else
                fprintf(stderr,
                        "tsdfctl: replay: synthetic sequence \"%s\" at %ux%u: %s (%s); the "
                        "sequences are:",
                        o.synthetic, o.width, o.height, tsdf_strerror(rc), tsdf_errname(rc));
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

    if (ctl_open_client(g, !o.ack, &c) != TSDF_OK)
        goto out;
    if (o.ring != NULL) {
        /* Two slots of the largest depth a frame of this source has. */
        size_t w = ds != NULL ? info.width : seq->width, h = ds != NULL ? info.height : seq->height;
        const int automatic = strcmp(o.ring, "auto") == 0;
        rc = tsdf_client_attach_ring(c, automatic ? NULL : o.ring, w * h * sizeof(float), 2);
        if (rc == TSDF_ENOT_FOUND && ring_default) {
            rc = TSDF_OK; /* the daemon names no ring: the requests carry the depth */
        } else if (rc != TSDF_OK) {
            fprintf(stderr, "tsdfctl: replay: ring %s: %s (%s)\n", o.ring, tsdf_strerror(rc),
                    tsdf_client_last_message());
            goto out;
        }
    }
    replay_counts before = {0, 0};
    if (!o.ack && (rc = read_counts(c, o.map, o.sensor, &before)) != TSDF_OK) {
        fprintf(stderr, "tsdfctl: replay: cannot read the daemon's counters at %s: %s (%s)\n",
                g->url, tsdf_strerror(rc), tsdf_client_last_message());
        goto out;
    }

    signal(SIGINT, on_sigint);
    int tty = isatty(STDERR_FILENO);
    uint64_t sent = 0, acked = 0, failed = 0, reported = 0;
    double t0 = ctl_now_s();
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
                double due = t0 + (double)k / o.rate_hz, wait = due - ctl_now_s();
                if (wait > 0) {
                    struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
                    nanosleep(&ts, NULL);
                }
            }
            tsdf_client_frame cf = {o.map, o.sensor, 0, k, 0, &f, o.encoding, (int)o.level};
            cf.stamp_ns = (uint64_t)((ctl_now_s() - t0) * 1e9);
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
            progress(k + 1, to_send, ctl_now_s() - t0, failed);
    }
    double secs = ctl_now_s() - t0;
    if (tty)
        fputc('\n', stderr);
    if (o.ack) {
        printf("frames sent %llu, acked %llu, failed %llu, %.2f s, %.1f fps\n",
               (unsigned long long)sent, (unsigned long long)acked, (unsigned long long)failed,
               secs, secs > 0 ? (double)(acked) / secs : 0.0);
    } else {
        replay_counts got = {0, 0};
        if (sent > 0)
            wait_for_daemon(c, o.map, o.sensor, &before, sent, g->timeout_ms, &got);
        double all_s = ctl_now_s() - t0;
        printf("frames sent %llu, received %lld and integrated %lld by the daemon "
               "(fire-and-forget, from its counters), failed %llu, %.2f s, %.1f fps sent, "
               "%.1f fps integrated\n",
               (unsigned long long)sent, (long long)got.received, (long long)got.integrated,
               (unsigned long long)failed, secs, secs > 0 ? (double)sent / secs : 0.0,
               all_s > 0 ? (double)got.integrated / all_s : 0.0);
        if (got.received < (int64_t)sent) {
            /* Sent, and never seen by the daemon of --url: a failure. */
            fprintf(stderr,
                    "tsdfctl: replay: the daemon at %s received %lld of the %llu frames sent to "
                    "%s in %d ms without progress: is --push-url that daemon's frames socket "
                    "(frames_listen)?\n",
                    g->url, (long long)got.received, (unsigned long long)sent, g->push_url,
                    g->timeout_ms);
            failed += sent - (uint64_t)(got.received > 0 ? got.received : 0);
        } else if (got.integrated < (int64_t)sent) {
            fprintf(stderr,
                    "tsdfctl: replay: the daemon received every frame and integrated %lld of "
                    "%llu so far (the rest dropped by its backpressure policy, rejected or "
                    "still queued; see `tsdfctl stats`)\n",
                    (long long)got.integrated, (unsigned long long)sent);
        }
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
