/*
 * test_metrics_http.c - the /metrics HTTP server (daemon/metrics_http.c),
 * driven by a real loopback TCP client.
 *
 * The libuv loop runs on its own thread, as in the daemon; the test thread
 * is the scraper, with blocking sockets and receive timeouts. The server is
 * started before the loop thread exists and stopped from the loop thread
 * (through a uv_async), so each server call happens on the loop's thread
 * or before it runs, as metrics_http.h requires.
 *
 * The program also has two modes for tests/test_metrics_promtool.sh:
 *   test_metrics_http --print         writes the sample render to stdout
 *   test_metrics_http --serve FILE    serves it on 127.0.0.1 (free port,
 *                                     written to FILE) until SIGTERM/SIGINT
 * The sample render is the daemon's (metrics_render) over a populated
 * context (metrics_sample.h), so it holds every metric family documented
 * in docs/OPERATIONS.md.
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "metrics.h"
#include "metrics_http.h"
#include "metrics_sample.h"
#include "prom.h"
#include "testutil.h"
#include "tsdf_error.h"

/* ---- the sample render ------------------------------------------------ */

/* The daemon's own render (the counter table, daemon/metrics.h) over the
 * populated sample context of metrics_sample.h: every documented family,
 * in the shapes the daemon writes, escaped map names and NaN quantiles
 * included. */
static metrics_sample sample;

static int sample_render(void *arg, prom_buf *b)
{
    (void)arg;
    return metrics_render(&sample.ctx, b);
}

static int failing_render(void *arg, prom_buf *b)
{
    (void)arg;
    prom_gauge(b, "ok_bytes", "x", NULL, 1);
    return TSDF_EINTERNAL;
}

/* ---- loop thread harness ---------------------------------------------- */

typedef struct {
    uv_loop_t loop;
    uv_async_t stop_async;
    uv_timer_t late; /* answers a pending route request later */
    metrics_http_req *held;
    atomic_int late_answered; /* on_late ran */
    int late_code;
    pthread_t thread;
    metrics_http *srv;
    metrics_http_stats stats; /* copied on the loop thread just before stop */
    int port;
    atomic_int renders;
    /* harness_stats: a copy of the server's counters made on the loop
     * thread while it runs. */
    uv_async_t stats_async;
    pthread_mutex_t stats_lock;
    pthread_cond_t stats_done;
    int stats_ready;
    metrics_http_stats live;
} harness;

static harness H;

static int counting_render(void *arg, prom_buf *b)
{
    harness *h = arg;
    atomic_fetch_add(&h->renders, 1);
    return sample_render(NULL, b);
}

static void on_stop_async(uv_async_t *a)
{
    harness *h = a->data;
    metrics_http_get_stats(h->srv, &h->stats);
    metrics_http_stop(h->srv);
    uv_close((uv_handle_t *)a, NULL);
    uv_close((uv_handle_t *)&h->stats_async, NULL);
}

static void on_stats_async(uv_async_t *a)
{
    harness *h = a->data;
    pthread_mutex_lock(&h->stats_lock);
    metrics_http_get_stats(h->srv, &h->live);
    h->stats_ready = 1;
    pthread_cond_signal(&h->stats_done);
    pthread_mutex_unlock(&h->stats_lock);
}

/* The server's counters now, read on its loop thread. */
static metrics_http_stats harness_stats(harness *h)
{
    pthread_mutex_lock(&h->stats_lock);
    h->stats_ready = 0;
    uv_async_send(&h->stats_async);
    while (!h->stats_ready)
        pthread_cond_wait(&h->stats_done, &h->stats_lock);
    metrics_http_stats s = h->live;
    pthread_mutex_unlock(&h->stats_lock);
    return s;
}

/* Polls (60 s at most) until the server has open connections open and
 * has accepted at least accepted in all. */
static void wait_server(harness *h, uint64_t open, uint64_t accepted)
{
    for (int waited = 0;; waited += 5) {
        metrics_http_stats s = harness_stats(h);
        if (s.open == open && s.connections + s.conns_rejected >= accepted)
            return;
        if (waited > 60000)
            fail_msg("the server has %llu connections open, wanted %llu",
                     (unsigned long long)s.open, (unsigned long long)open);
        usleep(5000);
    }
}

static void *loop_main(void *arg)
{
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void harness_start(harness *h, const metrics_http_limits *lim, metrics_render_fn fn,
                          metrics_route_fn route)
{
    memset(h, 0, sizeof *h);
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(uv_async_init(&h->loop, &h->stop_async, on_stop_async), 0);
    h->stop_async.data = h;
    assert_int_equal(uv_async_init(&h->loop, &h->stats_async, on_stats_async), 0);
    h->stats_async.data = h;
    pthread_mutex_init(&h->stats_lock, NULL);
    pthread_cond_init(&h->stats_done, NULL);
    assert_int_equal(
        metrics_http_start_ex(&h->loop, "127.0.0.1", 0, lim, fn ? fn : counting_render, h, &h->srv),
        TSDF_OK);
    h->port = metrics_http_port(h->srv);
    assert_true(h->port > 0 && h->port < 65536);
    if (route != NULL)
        metrics_http_set_route(h->srv, route, h);
    assert_int_equal(pthread_create(&h->thread, NULL, loop_main, h), 0);
}

/* Stops the server from the loop thread and waits for every handle to
 * close; the loop must then close cleanly (no handle leaked). */
static void harness_stop(harness *h)
{
    uv_async_send(&h->stop_async);
    pthread_join(h->thread, NULL);
    assert_int_equal(uv_loop_close(&h->loop), 0);
    pthread_cond_destroy(&h->stats_done);
    pthread_mutex_destroy(&h->stats_lock);
}

/* ---- a blocking loopback client ---------------------------------------- */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    /* A deadline for a server that never answers, not a speed. */
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Reads until the server closes; returns the malloc'ed bytes (NUL-ended)
 * or NULL if the receive timed out (the server never closed). */
static char *read_until_close(int fd, size_t *len_out)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ECONNRESET)
            break; /* a close with unread data resets; it is a close all the same */
        if (n < 0) {
            free(buf);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
}

static char *request(int port, const char *req, size_t *len)
{
    int fd = connect_to(port);
    send_all(fd, req, strlen(req));
    char *resp = read_until_close(fd, len);
    close(fd);
    assert_non_null(resp);
    return resp;
}

static int status_of(const char *resp)
{
    int code = 0;
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &code), 1);
    return code;
}

static const char *body_of(const char *resp)
{
    const char *p = strstr(resp, "\r\n\r\n");
    assert_non_null(p);
    return p + 4;
}

/* ---- tests ------------------------------------------------------------ */

static void test_get_metrics_serves_the_render(void **state)
{
    harness_start(&H, NULL, NULL, NULL);
    size_t len = 0;
    char *resp = request(H.port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", &len);
    assert_int_equal(status_of(resp), 200);
    assert_true(strncmp(resp, "HTTP/1.1 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(resp, "\r\nContent-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));

    prom_buf expect;
    prom_buf_init(&expect);
    assert_int_equal(sample_render(NULL, &expect), TSDF_OK);
    const char *body = body_of(resp);
    assert_string_equal(body, expect.data);
    size_t content_length = 0;
    const char *cl = strstr(resp, "Content-Length: ");
    assert_non_null(cl);
    assert_int_equal(sscanf(cl, "Content-Length: %zu", &content_length), 1);
    assert_int_equal(content_length, expect.len);
    assert_int_equal(len, (size_t)(body - resp) + expect.len);
    prom_buf_fini(&expect);
    free(resp);

    /* A query string, HTTP/1.0 and bare-LF line ends are all scrapes too. */
    resp = request(H.port, "GET /metrics?x=1 HTTP/1.0\n\n", NULL);
    assert_int_equal(status_of(resp), 200);
    free(resp);

    harness_stop(&H);
    assert_int_equal(atomic_load(&H.renders), 2);
    assert_int_equal(H.stats.responses_2xx, 2);
    assert_int_equal(H.stats.connections, 2);
}

static void test_wrong_path_method_and_garbage(void **state)
{
    harness_start(&H, NULL, NULL, NULL);
    char *resp = request(H.port, "GET / HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 404);
    free(resp);
    resp = request(H.port, "GET /metricsX HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 404);
    free(resp);
    resp = request(H.port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 405);
    assert_non_null(strstr(resp, "\r\nAllow: GET\r\n"));
    free(resp);
    resp = request(H.port, "HEAD /metrics HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 405);
    free(resp);
    resp = request(H.port, "GARBAGE\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 400);
    free(resp);
    resp = request(H.port, "GET /metrics HTTP/2.0\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 400);
    free(resp);
    harness_stop(&H);
    assert_int_equal(atomic_load(&H.renders), 0);
    assert_int_equal(H.stats.responses_4xx, 6);
    assert_int_equal(H.stats.responses_2xx, 0);
}

static void test_request_in_pieces(void **state)
{
    harness_start(&H, NULL, NULL, NULL);
    int fd = connect_to(H.port);
    const char *parts[] = {"GE", "T /met", "rics HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        send_all(fd, parts[i], strlen(parts[i]));
        usleep(20000);
    }
    char *resp = read_until_close(fd, NULL);
    close(fd);
    assert_non_null(resp);
    assert_int_equal(status_of(resp), 200);
    free(resp);
    harness_stop(&H);
}

static void test_oversized_request_gets_431(void **state)
{
    harness_start(&H, NULL, NULL, NULL);
    size_t n = METRICS_HTTP_MAX_REQUEST_BYTES + 1000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memcpy(big, "GET /metrics HTTP/1.1\r\nX-Filler: ", 33);
    memset(big + 33, 'a', n - 33);
    big[n] = '\0';
    int fd = connect_to(H.port);
    /* The server may close before taking every byte; a failed send is fine. */
    send(fd, big, n, MSG_NOSIGNAL);
    char *resp = read_until_close(fd, NULL);
    close(fd);
    free(big);
    assert_non_null(resp);
    assert_int_equal(status_of(resp), 431);
    free(resp);
    harness_stop(&H);
    assert_int_equal(H.stats.oversized, 1);
    assert_int_equal(atomic_load(&H.renders), 0);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void test_idle_connection_times_out(void **state)
{
    metrics_http_limits lim = {.timeout_ms = 200};
    harness_start(&H, &lim, NULL, NULL);
    int fd = connect_to(H.port);
    send_all(fd, "GET /metr", 9); /* and then nothing */
    double t0 = now_s();
    size_t len = 99;
    char *resp = read_until_close(fd, &len);
    double waited = now_s() - t0;
    close(fd);
    assert_non_null(resp); /* closed by the server, not by our receive timeout */
    assert_int_equal(len, 0);
    /* Not before its timeout (the end is the server's, whenever it comes). */
    assert_true(waited >= 0.1);
    free(resp);
    harness_stop(&H);
    assert_int_equal(H.stats.timeouts, 1);
}

/* While every open connection is young (its client may be about to send
 * its request), a connection beyond the limit is closed at once. */
static void test_connection_limit(void **state)
{
    metrics_http_limits lim = {.max_connections = 2, .evict_after_ms = 60000};
    harness_start(&H, &lim, NULL, NULL);
    int idle1 = connect_to(H.port);
    int idle2 = connect_to(H.port);
    wait_server(&H, 2, 2); /* the loop has accepted both */
    int third = connect_to(H.port);
    send_all(third, "GET /metrics HTTP/1.1\r\n\r\n", 25);
    size_t len = 99;
    char *resp = read_until_close(third, &len);
    close(third);
    assert_non_null(resp);
    assert_int_equal(len, 0); /* closed without an answer */
    free(resp);
    close(idle1);
    close(idle2);
    wait_server(&H, 0, 3); /* the loop has seen both closes */
    resp = request(H.port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 200);
    free(resp);
    harness_stop(&H);
    assert_int_equal(H.stats.conns_rejected, 1);
    assert_int_equal(H.stats.evicted, 0);
    assert_int_equal(H.stats.responses_2xx, 1);
}

/* Twenty connections that send part of a request and then nothing used to
 * hold every slot for their whole timeout, so real scrapes failed. Now each
 * scrape closes the oldest of them and is answered. */
static void test_slow_connections_do_not_lock_out_scrapes(void **state)
{
    enum { SLOW = 20, SCRAPES = 10 };
    metrics_http_limits lim = {.max_connections = 16, .evict_after_ms = 50};
    int slow[SLOW];
    harness_start(&H, &lim, NULL, NULL);
    for (int i = 0; i < SLOW; i++) {
        slow[i] = connect_to(H.port);
        send_all(slow[i], "GET /met", 8);
    }
    /* Every one of them reached the loop (16 open, the rest closed at
     * once or making room), and then more than evict_after_ms passed: the
     * policy's own time, which a slow machine only lengthens. */
    for (int waited = 0;; waited += 5) {
        metrics_http_stats s = harness_stats(&H);
        if (s.connections + s.conns_rejected >= SLOW)
            break;
        if (waited > 60000)
            fail_msg("the server took %llu of %d connections",
                     (unsigned long long)(s.connections + s.conns_rejected), SLOW);
        usleep(5000);
    }
    usleep(150000);
    for (int k = 0; k < SCRAPES; k++) {
        char *resp = request(H.port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
        assert_int_equal(status_of(resp), 200);
        free(resp);
    }
    for (int i = 0; i < SLOW; i++)
        close(slow[i]);
    harness_stop(&H);
    assert_int_equal(H.stats.responses_2xx, SCRAPES);
    /* The first scrape frees a slot for good; later ones find it free. */
    assert_true(H.stats.evicted >= 1 && H.stats.evicted <= SLOW);
    assert_int_equal(H.stats.responses_4xx, 0);
}

static void test_render_failure_is_500(void **state)
{
    harness_start(&H, NULL, failing_render, NULL);
    char *resp = request(H.port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 500);
    assert_null(strstr(resp, "ok_bytes"));
    free(resp);
    harness_stop(&H);
    assert_int_equal(H.stats.responses_5xx, 1);
}

static void test_stop_with_open_connections(void **state)
{
    harness_start(&H, NULL, NULL, NULL);
    int fd = connect_to(H.port);
    wait_server(&H, 1, 1); /* the loop holds it open */
    /* harness_stop asserts uv_loop_close == 0: no handle left behind. */
    harness_stop(&H);
    size_t len = 99;
    char *resp = read_until_close(fd, &len);
    assert_non_null(resp);
    assert_int_equal(len, 0);
    free(resp);
    close(fd);
}

static void test_bad_address_and_port_in_use(void **state)
{
    uv_loop_t loop;
    metrics_http *a = NULL, *b = NULL;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(metrics_http_start(&loop, "not-an-address", 0, sample_render, NULL, &a),
                     TSDF_EINVAL);
    assert_null(a);
    assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 70000, sample_render, NULL, &a),
                     TSDF_EINVAL);
    assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 0, NULL, NULL, &a), TSDF_EINVAL);
    assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 0, sample_render, NULL, &a), TSDF_OK);
    assert_int_equal(
        metrics_http_start(&loop, "127.0.0.1", metrics_http_port(a), sample_render, NULL, &b),
        TSDF_EBUSY);
    assert_null(b);
    metrics_http_stop(a);
    metrics_http_stop(NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_ipv6_loopback(void **state)
{
    uv_loop_t loop;
    metrics_http *a = NULL;
    assert_int_equal(uv_loop_init(&loop), 0);
    int r = metrics_http_start(&loop, "::1", 0, sample_render, NULL, &a);
    if (r == TSDF_OK) {
        assert_true(metrics_http_port(a) > 0);
        metrics_http_stop(a);
    } else {
        /* A host without IPv6 refuses the bind; the code must say so. */
        assert_true(r == TSDF_EIO || r == TSDF_EBUSY || r == TSDF_EINVAL);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- routes ------------------------------------------------------------ */

/* Answers at once with what the route sees of the request. */
static void echo_route(void *arg, metrics_http_req *req)
{
    char body[512];
    snprintf(body, sizeof body, "path=%s query=%s peer=%s loopback=%d", metrics_http_req_path(req),
             metrics_http_req_query(req), metrics_http_req_peer(req),
             metrics_http_req_peer_is_loopback(req));
    metrics_http_reply(req, strcmp(metrics_http_req_path(req), "/teapot") == 0 ? 429 : 200,
                       "text/plain", "Retry-After: 1\r\n", body, strlen(body));
}

static void on_late(uv_timer_t *t)
{
    harness *h = t->data;
    char *body = strdup("late answer");
    assert_non_null(body);
    metrics_http_reply_owned(h->held, h->late_code, "text/plain", NULL, body, strlen(body));
    h->held = NULL;
    atomic_store(&h->late_answered, 1);
    uv_close((uv_handle_t *)t, NULL);
}

/* Holds the request and answers it from a timer, as the live view answers
 * from a uv_queue_work completion. */
static void late_route(void *arg, metrics_http_req *req)
{
    harness *h = arg;
    assert_null(h->held);
    h->held = req;
    uv_timer_init(&h->loop, &h->late);
    h->late.data = h;
    uv_timer_start(&h->late, on_late, h->late_code == 200 ? 50 : 400, 0);
}

static void test_route_answers_other_paths(void **state)
{
    harness_start(&H, NULL, NULL, echo_route);
    char *resp = request(H.port, "GET /api/maps?map=a%20b&x=1 HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 200);
    assert_string_equal(body_of(resp),
                        "path=/api/maps query=map=a%20b&x=1 peer=127.0.0.1 loopback=1");
    free(resp);
    resp = request(H.port, "GET /teapot HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 429);
    assert_true(strncmp(resp, "HTTP/1.1 429 Too Many Requests\r\n", 32) == 0);
    assert_non_null(strstr(resp, "\r\nRetry-After: 1\r\n"));
    free(resp);
    /* /metrics stays the render's, whatever the route would say. */
    resp = request(H.port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 200);
    assert_null(strstr(resp, "path="));
    free(resp);
    harness_stop(&H);
    assert_int_equal(atomic_load(&H.renders), 1);
    assert_int_equal(H.stats.responses_2xx, 2);
    assert_int_equal(H.stats.responses_4xx, 1);
}

static void test_route_answers_later(void **state)
{
    harness_start(&H, NULL, NULL, late_route);
    H.late_code = 200;
    char *resp = request(H.port, "GET /slow HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 200);
    assert_string_equal(body_of(resp), "late answer");
    free(resp);
    harness_stop(&H);
    assert_int_equal(H.stats.responses_2xx, 1);
    assert_int_equal(H.stats.timeouts, 0);
}

/* A route slower than pending_timeout_ms: the client gets 504 at the
 * deadline, and the reply that comes after is dropped without a leak or a
 * use after free (the sanitizer build checks both). */
static void test_route_past_its_deadline_gets_504(void **state)
{
    metrics_http_limits lim = {.pending_timeout_ms = 150};
    harness_start(&H, &lim, NULL, late_route);
    H.late_code = 299; /* answered at 400 ms, long after the deadline */
    char *resp = request(H.port, "GET /slow HTTP/1.1\r\n\r\n", NULL);
    assert_int_equal(status_of(resp), 504);
    free(resp);
    /* The late reply comes while the server runs. */
    for (int waited = 0; !atomic_load(&H.late_answered); waited += 5) {
        if (waited > 60000)
            fail_msg("the late reply never came");
        usleep(5000);
    }
    harness_stop(&H);
    assert_null(H.held);
    assert_int_equal(H.stats.responses_5xx, 1);
    assert_int_equal(H.stats.responses_2xx, 0);
    assert_int_equal(H.stats.timeouts, 1);
}

/* ---- modes for the shell test ----------------------------------------- */

static uv_signal_t sig_term, sig_int;
static metrics_http *serve_srv;

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    metrics_http_stop(serve_srv);
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    (void)s;
}

static int serve(const char *port_file)
{
    uv_loop_t *loop = uv_default_loop();
    if (metrics_http_start(loop, "127.0.0.1", 0, sample_render, NULL, &serve_srv) != TSDF_OK)
        return 1;
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    fprintf(f, "%d\n", metrics_http_port(serve_srv));
    fclose(f);
    rename(tmp, port_file); /* the port file appears complete or not at all */
    uv_run(loop, UV_RUN_DEFAULT);
    return uv_loop_close(loop) == 0 ? 0 : 1;
}

static int run(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--print") == 0) {
        prom_buf b;
        prom_buf_init(&b);
        int r = sample_render(NULL, &b);
        if (r == TSDF_OK)
            fwrite(b.data, 1, b.len, stdout);
        prom_buf_fini(&b);
        return r == TSDF_OK ? 0 : 1;
    }
    if (argc >= 3 && strcmp(argv[1], "--serve") == 0)
        return serve(argv[2]);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_metrics_serves_the_render),
        cmocka_unit_test(test_wrong_path_method_and_garbage),
        cmocka_unit_test(test_request_in_pieces),
        cmocka_unit_test(test_oversized_request_gets_431),
        cmocka_unit_test(test_idle_connection_times_out),
        cmocka_unit_test(test_connection_limit),
        cmocka_unit_test(test_slow_connections_do_not_lock_out_scrapes),
        cmocka_unit_test(test_render_failure_is_500),
        cmocka_unit_test(test_stop_with_open_connections),
        cmocka_unit_test(test_bad_address_and_port_in_use),
        cmocka_unit_test(test_ipv6_loopback),
        cmocka_unit_test(test_route_answers_other_paths),
        cmocka_unit_test(test_route_answers_later),
        cmocka_unit_test(test_route_past_its_deadline_gets_504),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

int main(int argc, char **argv)
{
    if (metrics_sample_init(&sample) != TSDF_OK) {
        fprintf(stderr, "cannot make the sample counters\n");
        return 1;
    }
    int rc = run(argc, argv);
    metrics_sample_fini(&sample);
    return rc;
}
