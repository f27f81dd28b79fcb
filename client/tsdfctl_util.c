/*
 * tsdfctl_util.c - helpers shared by the tsdfctl commands (see tsdfctl.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <stdatomic.h>

#include "tsdfctl.h"

/* The options of the client ctl_open_client opened last, for the hints of
 * ctl_call_error. */
static const global_opts *last_opts;

/* ---- small helpers ------------------------------------------------------ */

int ctl_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "tsdfctl: %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `tsdfctl %s --help`)\n", cmd);
    return EXIT_USAGE;
}

static void on_probe_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p;
    (void)ev;
    atomic_store((atomic_int *)arg, 1);
}

/* Whether url is a frames socket (a PULL): a PUSH socket gets a connection
 * to it within a second. A request sent to one is never answered, nor
 * refused: nng takes no REQ peer there and keeps trying. */
static int is_frames_socket(const char *url)
{
    nng_socket s;
    atomic_int up;
    atomic_init(&up, 0);
    if (strncmp(url, "tls+", 4) == 0 || nng_push0_open(&s) != 0)
        return 0;
    if (nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, on_probe_pipe, &up) == 0 &&
        nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK) == 0)
        for (int i = 0; i < 100 && !atomic_load(&up); i++) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    nng_close(s);
    return atomic_load(&up);
}

/* Prints a failed call: the code's message and name, and the daemon's own
 * explanation when it sent one; for a request no daemon answered, what to
 * check. */
int ctl_call_error(const char *cmd, int rc)
{
    const char *detail = tsdf_client_last_message();
    fprintf(stderr, "tsdfctl: %s: %s (%s)%s%s\n", cmd, tsdf_strerror(rc), tsdf_errname(rc),
            detail[0] ? ": " : "", detail);
    if (rc != TSDF_ECONNREFUSED && rc != TSDF_ETIMEOUT)
        return EXIT_FAILURE;
    const char *url = last_opts != NULL ? last_opts->url : NULL;
    if (url != NULL && is_frames_socket(url))
        fprintf(stderr,
                "tsdfctl: %s is a frames socket (the daemon's [server] frames_listen), which "
                "takes streamed frames only: give the daemon's request socket ([server] listen) "
                "as --url, and this one as --push-url\n",
                url);
    else
        fprintf(stderr,
                "tsdfctl: no tsdfd answered at %s within %d ms: is it running and listening "
                "there ([server] listen)? A loaded daemon may need a longer --timeout-ms\n",
                url != NULL ? url : "--url", last_opts != NULL ? last_opts->timeout_ms : 0);
    return EXIT_FAILURE;
}

int ctl_file_error(const char *cmd, const char *what, const char *path, int rc, const char *expect)
{
    if (rc == TSDF_ENOT_FOUND || rc == TSDF_EIO) {
        /* The reader reports codes only: ask the system again for its
         * reason, which names what the user can fix. */
        FILE *f = fopen(path, "rb");
        const char *why = f == NULL ? strerror(errno) : "read error";
        if (f != NULL)
            fclose(f);
        fprintf(stderr, "tsdfctl: %s: %s %s: %s\n", cmd, what, path, why);
    } else if (rc == TSDF_EFORMAT && expect != NULL) {
        fprintf(stderr, "tsdfctl: %s: %s %s: not what it should hold: %s\n", cmd, what, path,
                expect);
    } else {
        fprintf(stderr, "tsdfctl: %s: %s %s: %s (%s)\n", cmd, what, path, tsdf_strerror(rc),
                tsdf_errname(rc));
    }
    return EXIT_FAILURE;
}

int ctl_check_writable(const char *cmd, const char *path)
{
    char dir[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tsdfctl: %s: cannot write %s: it is a directory\n", cmd, path);
        return EXIT_FAILURE;
    }
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) {
        fprintf(stderr, "tsdfctl: %s: cannot write %s: path too long\n", cmd, path);
        return EXIT_FAILURE;
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "tsdfctl: %s: cannot write %s: %s: %s\n", cmd, path, dir, strerror(errno));
        return EXIT_FAILURE;
    }
    return 0;
}

int ctl_parse_float(const char *s, float *out)
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

int ctl_parse_u64(const char *s, uint64_t max, uint64_t *out)
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

int ctl_parse_u32(const char *s, uint32_t *out)
{
    uint64_t v;
    if (ctl_parse_u64(s, UINT32_MAX, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int ctl_is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

double ctl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ctl_open_client(const global_opts *g, int with_push, tsdf_client **c)
{
    last_opts = g;
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.default_timeout_ms = g->timeout_ms;
    o.tls_ca_file = g->tls_ca;
    o.tls_cert_file = g->tls_cert;
    o.tls_key_file = g->tls_key;
    o.tls_server_name = g->tls_server_name;
    /* A replay may start before the daemon listens on the frame socket; the
     * REQ socket is dialled synchronously either way so that a missing
     * daemon is reported at once. */
    int rc = tsdf_client_open(g->url, with_push ? g->push_url : NULL, &o, c);
    if (rc != TSDF_OK) {
        const char *detail = tsdf_client_last_message();
        fprintf(stderr, "tsdfctl: cannot connect to %s: %s (%s)%s%s\n", g->url, tsdf_strerror(rc),
                tsdf_errname(rc), detail[0] ? ": " : "", detail);
        if (rc == TSDF_ECONNREFUSED)
            fprintf(stderr, "tsdfctl: is tsdfd running and listening there ([server] listen)? "
                            "Its URL is --url, or $TSDF_URL\n");
        if (rc == TSDF_EAUTH)
            fprintf(stderr, "tsdfctl: TLS handshake failed: --tls-ca must be the CA of the "
                            "daemon's certificate, --tls-cert/--tls-key a current certificate "
                            "of the CA the daemon trusts, and the daemon's certificate must "
                            "name the URL's host (or --tls-server-name)\n");
    }
    return rc;
}
