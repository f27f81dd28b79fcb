/*
 * bench_daemon_opts.c - the daemon benchmark's command line, latency
 * samples, answer checks and stats look-ups (bench_daemon.h);
 * bench_daemon.c holds the run itself.
 *
 * All of it is plain C with no threads or sockets, so it sits apart from
 * the run: a change to how an option is spelled, how a percentile is taken
 * or how an answer is judged should not mean reading the code that drives
 * the daemon.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_daemon.h"
#include "tsdf_proto.h"
#include "tsdf_proto_types.h"
#include "bench_clock.h"

/* The vertices of a mesh that bd_mesh_on_surface samples, at most. */
#define MESH_CHECK_VERTICES 4096u

/* ---- samples ------------------------------------------------------------ */

void bd_sample_add(sample_set *s, double ms)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        double *p = cap <= MAX_SAMPLES_PER_THREAD ? realloc(s->ms, cap * sizeof *p) : NULL;
        if (p == NULL) {
            s->not_kept++;
            return;
        }
        s->ms = p;
        s->cap = cap;
    }
    s->ms[s->n++] = ms;
}

/* Nearest rank: the smallest sample with at least q of them at or below. */
static double quantile(const double *sorted, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);
    return sorted[k == 0 ? 0 : k - 1];
}

void bd_print_latency(const char *name, sample_set *s)
{
    if (s->n == 0) {
        printf("  %-28s (no samples)\n", name);
        return;
    }
    qsort(s->ms, s->n, sizeof *s->ms, cmp_double);
    printf("  %-28s %9.2f %9.2f %9.2f %9.2f %8zu\n", name, quantile(s->ms, s->n, 0.50),
           quantile(s->ms, s->n, 0.90), quantile(s->ms, s->n, 0.99), s->ms[s->n - 1], s->n);
}

void bd_sample_merge(sample_set *dst, sample_set *src)
{
    for (size_t i = 0; i < src->n; i++)
        bd_sample_add(dst, src->ms[i]);
    dst->not_kept += src->not_kept;
    free(src->ms);
    memset(src, 0, sizeof *src);
}

/* ---- answer checks and stats ------------------------------------------------ */

void bd_raycast_agreement(const float *got, const float *want, size_t n, float tol_m, double *agree,
                          double *wrong)
{
    size_t seen = 0, ok = 0, hits = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        int has_want = want[i] > 0.0f;
        int has_got = isfinite(got[i]);
        seen += has_want;
        hits += has_got;
        if (has_got && has_want && fabsf(got[i] - want[i]) <= tol_m)
            ok++;
        else if (has_got)
            bad++;
    }
    *agree = seen ? (double)ok / (double)seen : 0.0;
    *wrong = hits ? (double)bad / (double)hits : 0.0;
}

double bd_mesh_on_surface(const tsdf_mesh *m, const tsdf_scene *scene, float tol_m)
{
    size_t step = m->vertex_count / MESH_CHECK_VERTICES + 1, n = 0, ok = 0;
    for (size_t i = 0; i < m->vertex_count; i += step, n++)
        ok += fabsf(tsdf_scene_sdf(scene, &m->positions[3 * i])) <= tol_m;
    return n ? (double)ok / (double)n : 0.0;
}

int bd_stat_find(const tsdf_rep_stats *s, const char *key, int64_t *v)
{
    for (uint32_t i = 0; i < s->extra_count; i++) {
        if (strcmp(s->extra[i].key, key) == 0) {
            *v = s->extra[i].is_float ? (int64_t)s->extra[i].f : s->extra[i].i;
            return 1;
        }
    }
    return 0;
}

int bd_stat_find_f(const tsdf_rep_stats *s, const char *key, double *v)
{
    for (uint32_t i = 0; i < s->extra_count; i++) {
        if (strcmp(s->extra[i].key, key) == 0) {
            *v = s->extra[i].is_float ? s->extra[i].f : (double)s->extra[i].i;
            return 1;
        }
    }
    return 0;
}

/* ---- options ------------------------------------------------------------ */

void bd_usage(FILE *to)
{
    fprintf(to, "usage: bench_daemon (--spawn TSDFD | --addr URL [--frames-addr URL])\n"
                "                    [--backend cpu|cuda|auto] [--transport ipc|tcp]\n"
                "                    [--clients N] [--seconds T] [--mode acked|ff]\n"
                "                    [--maps own|shared] [--width W] [--height H] [--scene NAME]\n"
                "                    [--raycast on|off] [--mesh on|off] [--query-period-ms P]\n"
                "                    [--raycast-width W] [--raycast-height H]\n"
                "                    [--raycast-reply full|depth|half] [--raycast-view on|off]\n"
                "                    [--set SECTION.KEY=VALUE]... [--settle-timeout-s S] [--keep]\n"
                "                    [--ring]\n"
                "defaults: --backend auto, --transport ipc (both with --spawn only),\n"
                "          --clients 32, --seconds 12, --mode acked, --maps own,\n"
                "          --width 640 --height 480, --scene demo, --raycast on --mesh on,\n"
                "          --query-period-ms 100, --raycast-width 640 --raycast-height 480,\n"
                "          --raycast-reply full (depth and normals; depth: depth alone;\n"
                "          half: depth alone at half the width and height), --raycast-view off\n"
                "          (on: the raycast is read in place, tsdf_client_raycast_view,\n"
                "          not copied into the benchmark's arrays),\n"
                "          --settle-timeout-s 300\n"
                "--ring: every client attaches a shared-memory frame ring (two slots)\n"
                "          and sends its depth through it, and the raycast query's\n"
                "          images come back through a ring of its own (PROTOCOL.md 6.10)\n"
                "--clients 0: no client streams; one map integrates the first 30 poses,\n"
                "          then only the queries run against it (idle query latency;\n"
                "          with --mesh off for the raycast alone, --query-period-ms 0 for\n"
                "          back-to-back queries)\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_seconds(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v <= 0.0 || v > 86400.0)
        return -1;
    *out = v;
    return 0;
}

static int parse_on_off(const char *s, int *out)
{
    if (strcmp(s, "on") == 0)
        *out = 1;
    else if (strcmp(s, "off") == 0)
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_choice(const char *s, const char *a, const char *b, int *out)
{
    if (strcmp(s, a) == 0)
        *out = 0;
    else if (strcmp(s, b) == 0)
        *out = 1;
    else
        return -1;
    return 0;
}

static int parse_option(bench_opts *o, const char *a, const char *val)
{
    int mode = 0;
    if (strcmp(a, "--spawn") == 0)
        o->spawn_bin = val;
    else if (strcmp(a, "--addr") == 0)
        o->addr = val;
    else if (strcmp(a, "--frames-addr") == 0)
        o->frames_addr = val;
    else if (strcmp(a, "--backend") == 0) {
        o->backend = val;
        return strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto") ? -1 : 0;
    } else if (strcmp(a, "--transport") == 0)
        return parse_choice(val, "ipc", "tcp", &o->tcp);
    else if (strcmp(a, "--clients") == 0)
        return parse_u32(val, 0, 1024, &o->clients);
    else if (strcmp(a, "--seconds") == 0)
        return parse_seconds(val, &o->seconds);
    else if (strcmp(a, "--mode") == 0) {
        if (parse_choice(val, "acked", "ff", &mode) != 0)
            return -1;
        o->mode = mode ? MODE_FF : MODE_ACKED;
    } else if (strcmp(a, "--maps") == 0)
        return parse_choice(val, "own", "shared", &o->shared_map);
    else if (strcmp(a, "--width") == 0)
        return parse_u32(val, 8, 4096, &o->width);
    else if (strcmp(a, "--height") == 0)
        return parse_u32(val, 8, 4096, &o->height);
    else if (strcmp(a, "--scene") == 0)
        o->scene = val;
    else if (strcmp(a, "--raycast") == 0)
        return parse_on_off(val, &o->raycast);
    else if (strcmp(a, "--mesh") == 0)
        return parse_on_off(val, &o->mesh);
    else if (strcmp(a, "--query-period-ms") == 0)
        return parse_u32(val, 0, 600000, &o->query_period_ms);
    else if (strcmp(a, "--raycast-width") == 0)
        return parse_u32(val, 8, 4096, &o->raycast_width);
    else if (strcmp(a, "--raycast-height") == 0)
        return parse_u32(val, 8, 4096, &o->raycast_height);
    else if (strcmp(a, "--raycast-reply") == 0) {
        if (strcmp(val, "full") == 0)
            o->raycast_reply = REPLY_FULL;
        else if (strcmp(val, "depth") == 0)
            o->raycast_reply = REPLY_DEPTH;
        else if (strcmp(val, "half") == 0)
            o->raycast_reply = REPLY_HALF;
        else
            return -1;
    } else if (strcmp(a, "--raycast-view") == 0)
        return parse_on_off(val, &o->raycast_view);
    else if (strcmp(a, "--settle-timeout-s") == 0)
        return parse_seconds(val, &o->settle_timeout_s);
    else if (strcmp(a, "--set") == 0) {
        if (o->set_count == MAX_SETS || strchr(val, '=') == NULL)
            return -1;
        o->sets[o->set_count++] = val;
    } else {
        fprintf(stderr, "bench_daemon: unknown option %s\n", a);
        return -1;
    }
    return 0;
}

int bd_parse_args(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->clients = 32;
    o->seconds = 12.0;
    o->width = 640;
    o->height = 480;
    o->scene = "demo";
    o->raycast = 1;
    o->mesh = 1;
    o->query_period_ms = 100;
    o->raycast_width = 640;
    o->raycast_height = 480;
    o->settle_timeout_s = 300.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return 1;
        if (strcmp(a, "--keep") == 0) {
            o->keep = 1;
            continue;
        }
        if (strcmp(a, "--ring") == 0) {
            o->ring = 1;
            continue;
        }
        if (val == NULL) {
            fprintf(stderr, "bench_daemon: %s needs a value\n", a);
            return -1;
        }
        if (parse_option(o, a, val) != 0) {
            fprintf(stderr, "bench_daemon: bad value for %s: %s\n", a, val);
            return -1;
        }
        i++;
    }
    if ((o->spawn_bin == NULL) == (o->addr == NULL)) {
        fprintf(stderr, "bench_daemon: give exactly one of --spawn and --addr\n");
        return -1;
    }
    /* The ring socket's path is the spawned daemon's; a ring serves
     * acknowledged frames over ipc:// only (PROTOCOL.md 6.10). */
    if (o->ring && (o->spawn_bin == NULL || o->tcp || o->mode != MODE_ACKED)) {
        fprintf(stderr, "bench_daemon: --ring needs --spawn, --transport ipc and --mode acked\n");
        return -1;
    }
    if (o->addr != NULL && o->mode == MODE_FF && o->frames_addr == NULL) {
        fprintf(stderr, "bench_daemon: --mode ff with --addr needs --frames-addr\n");
        return -1;
    }
    /* With no clients the queries are all there is to measure. */
    if (o->clients == 0 && !o->raycast && !o->mesh) {
        fprintf(stderr, "bench_daemon: --clients 0 needs --raycast on or --mesh on\n");
        return -1;
    }
    /* A map per client plus the counters' absent one must fit the daemon. */
    if (!o->shared_map && o->clients > TSDF_PROTO_MAX_MAPS - 1) {
        fprintf(stderr, "bench_daemon: --maps own takes at most %u clients\n",
                TSDF_PROTO_MAX_MAPS - 1);
        return -1;
    }
    return 0;
}

void bd_raycast_view(raycast_reply r, uint32_t w, uint32_t h, const tsdf_intrinsics *K,
                     tsdf_client_raycast_options *ro, uint32_t *ow, uint32_t *oh,
                     tsdf_intrinsics *oK)
{
    tsdf_req_raycast q;
    memset(&q, 0, sizeof q);
    memset(ro, 0, sizeof *ro);
    ro->want_normals = r == REPLY_FULL;
    ro->scale = r == REPLY_HALF ? 2u : 1u;
    q.width = w;
    q.height = h;
    q.K = *K;
    q.scale = ro->scale;
    tsdf_proto_raycast_scaled(&q, ow, oh, oK);
}
