/*
 * metrics_http.h - a minimal HTTP/1.1 server for Prometheus scrapes.
 *
 * Serves GET /metrics (a query string is ignored) with the text the render
 * callback builds, as `Content-Type: text/plain; version=0.0.4`, and closes
 * the connection after every response (no keep-alive: a scrape every few
 * seconds does not need it, and it keeps the server small). Other paths go
 * to the route callback when one is set (metrics_http_set_route: the live
 * view, live_view.h), else get 404; other methods get 405 (with `Allow:
 * GET`), malformed requests 400, and a request head larger than the limit
 * 431.
 *
 * Routes may answer later: the route callback gets a metrics_http_req and
 * answers it exactly once with metrics_http_reply (now, or later from the
 * loop thread, e.g. in a uv_queue_work completion). Until then the request
 * is not read further and its deadline is pending_timeout_ms (15 s); past
 * that the client gets 504 and the late reply is dropped. The handle stays
 * valid until the route replies, also after a timeout or a stop, so that
 * the route never holds a dangling pointer; the server is freed only once
 * every route has replied.
 *
 * Bounded: a request head may be at most max_request_bytes (8 KiB by
 * default); at most max_connections (16) are open at once; a connection that
 * has not completed its request, or not taken its response, within
 * timeout_ms (5 s) is closed (counted in timeouts). When the limit is
 * reached, a new connection closes the oldest one that has still not sent
 * a complete request after evict_after_ms (100 ms; counted in evicted) and
 * takes its place: a real scrape sends its request at once, so connections
 * that trickle or send nothing (twenty of them used to lock out every scrape
 * for their whole timeout) give way to it. Only when every open connection
 * is younger than that, or already being answered, is the new one accepted
 * and closed at once (counted in conns_rejected).
 *
 * Threads: everything, render included, runs on the thread that runs the
 * libuv loop; start and stop must be called on that thread too. The render
 * callback therefore must read the daemon's counters in a thread-safe way
 * (atomics or a lock), since workers update them concurrently.
 *
 * Ownership: metrics_http_start creates the server; metrics_http_stop
 * closes its handles and frees it once the loop has run the close
 * callbacks (run the loop once more, as with any libuv handle).
 */
#ifndef TSDF_DAEMON_METRICS_HTTP_H
#define TSDF_DAEMON_METRICS_HTTP_H

#include <stdint.h>
#include <uv.h>

#include "prom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define METRICS_HTTP_DEFAULT_HOST "127.0.0.1"
#define METRICS_HTTP_DEFAULT_PORT 9464
#define METRICS_HTTP_MAX_REQUEST_BYTES 8192u
#define METRICS_HTTP_MAX_CONNECTIONS 16u
#define METRICS_HTTP_TIMEOUT_MS 5000u
#define METRICS_HTTP_EVICT_AFTER_MS 100u
#define METRICS_HTTP_PENDING_TIMEOUT_MS 15000u

/* Fills *out with the text of one scrape. Returns TSDF_OK, or an error
 * code: the client then gets 500 and the error is logged. A prom_buf
 * error (prom_buf_error) counts as a failure too. */
typedef int (*metrics_render_fn)(void *arg, prom_buf *out);

typedef struct metrics_http metrics_http;

/* A request handed to the route callback, valid until it is answered. */
typedef struct metrics_http_req metrics_http_req;

/* Called on the loop thread for every GET whose path is not /metrics. It
 * must answer req exactly once (metrics_http_reply or _reply_owned), before
 * it returns or later on the loop thread. */
typedef void (*metrics_route_fn)(void *arg, metrics_http_req *req);

typedef struct {
    uint32_t max_request_bytes;  /* 0: METRICS_HTTP_MAX_REQUEST_BYTES */
    uint32_t max_connections;    /* 0: METRICS_HTTP_MAX_CONNECTIONS */
    uint32_t timeout_ms;         /* 0: METRICS_HTTP_TIMEOUT_MS */
    uint32_t evict_after_ms;     /* 0: METRICS_HTTP_EVICT_AFTER_MS */
    uint32_t pending_timeout_ms; /* 0: METRICS_HTTP_PENDING_TIMEOUT_MS */
} metrics_http_limits;

/* Counters of the server itself (for the daemon's own metrics). */
typedef struct {
    uint64_t connections;    /* accepted and served (not rejected) */
    uint64_t conns_rejected; /* closed at once: max_connections reached */
    uint64_t evicted;        /* closed without a request to make room for a new one */
    uint64_t responses_2xx, responses_4xx, responses_5xx;
    uint64_t timeouts;  /* connections closed by the timeout */
    uint64_t oversized; /* requests answered 431 */
    uint64_t open;      /* connections open now (accepted, not yet closed) */
} metrics_http_stats;

/* Binds host:port (a numeric IPv4 or IPv6 address, or "localhost"; NULL:
 * METRICS_HTTP_DEFAULT_HOST; port 0 picks a free port, see
 * metrics_http_port) and starts listening on loop. render and arg are kept
 * until stop. Returns TSDF_OK and *out, or TSDF_EINVAL (bad address or
 * arguments), TSDF_EBUSY (address in use), TSDF_ENOMEM, TSDF_EIO (other
 * socket errors; the libuv error is logged). On failure the listener handle
 * is already closing: run the loop (uv_run) before uv_loop_close so that
 * its close callback frees it, as after metrics_http_stop. */
int metrics_http_start(uv_loop_t *loop, const char *host, int port, metrics_render_fn render,
                       void *arg, metrics_http **out);

/* The same with explicit limits (NULL: defaults). */
int metrics_http_start_ex(uv_loop_t *loop, const char *host, int port,
                          const metrics_http_limits *limits, metrics_render_fn render, void *arg,
                          metrics_http **out);

/* Sends every path but /metrics to route(arg, req) from now on (NULL:
 * 404 again). Loop thread. */
void metrics_http_set_route(metrics_http *m, metrics_route_fn route, void *arg);

/* The request's path ("/api/maps", percent-escapes as sent) and query (the
 * text after '?', "" when none); valid until the reply. */
const char *metrics_http_req_path(const metrics_http_req *r);
const char *metrics_http_req_query(const metrics_http_req *r);

/* The peer's address as text ("127.0.0.1", "::1"; "?" when unknown), and
 * 1 when it is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z). */
const char *metrics_http_req_peer(const metrics_http_req *r);
int metrics_http_req_peer_is_loopback(const metrics_http_req *r);

/* 1 when the client will not read a reply any more (it timed out with 504,
 * or the server stopped): a route may skip its work, but must still reply. */
int metrics_http_req_gone(const metrics_http_req *r);

/* Answers r with status code, Content-Type content_type, extra_headers
 * (complete "Name: value\r\n" lines, or NULL) and len bytes of body. The
 * plain form copies body; the owned form takes body (malloc'ed, or NULL
 * for none) and frees it, also when the reply is dropped. r is invalid
 * afterwards. Loop thread. */
void metrics_http_reply(metrics_http_req *r, int code, const char *content_type,
                        const char *extra_headers, const void *body, size_t len);
void metrics_http_reply_owned(metrics_http_req *r, int code, const char *content_type,
                              const char *extra_headers, void *body, size_t len);

/* Stops listening, closes every open connection, and frees m when the
 * loop has run the close callbacks and every pending route has replied.
 * NULL is a no-op. */
void metrics_http_stop(metrics_http *m);

/* The port actually bound (useful after asking for port 0), or -1. */
int metrics_http_port(const metrics_http *m);

void metrics_http_get_stats(const metrics_http *m, metrics_http_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_METRICS_HTTP_H */
