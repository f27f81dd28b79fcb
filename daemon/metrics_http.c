#define _GNU_SOURCE

#include "metrics_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tsdf_error.h"

typedef struct metrics_http_req conn;

struct metrics_http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    metrics_render_fn render;
    void *arg;
    metrics_route_fn route; /* every other path; NULL: 404 */
    void *route_arg;
    metrics_http_limits lim;
    int port;
    int stopping;
    int listener_open; /* 1 until the listener's close callback ran */
    conn *conns;       /* open connections, doubly linked */
    uint32_t conn_count;
    metrics_http_stats stats;
};

struct metrics_http_req {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    metrics_http *srv;
    conn *prev, *next;
    int handles_open; /* tcp + timer: freed when this drops to 0 */
    int closing;
    int responded;
    /* The route took the request and has not replied yet: the struct is
     * kept (even once its handles are closed) until it does, since the
     * route holds a pointer to it. */
    int pending;
    uint64_t accepted_ms; /* uv_now at accept */
    char head[1024];      /* the status line and headers being written */
    char *body;           /* the body being written, owned */
    const char *path;     /* into req, once the request line is parsed */
    const char *query;
    char peer[INET6_ADDRSTRLEN];
    int peer_loopback;
    size_t req_len;
    char req[]; /* lim.max_request_bytes + 1 (room for a NUL) */
};

static int map_uv_error(int r)
{
    switch (r) {
    case UV_EADDRINUSE:
    case UV_EADDRNOTAVAIL:
        return TSDF_EBUSY;
    case UV_EINVAL:
        return TSDF_EINVAL;
    case UV_ENOMEM:
        return TSDF_ENOMEM;
    default:
        return TSDF_EIO;
    }
}

static void maybe_free_server(metrics_http *m)
{
    if (m->stopping && !m->listener_open && m->conn_count == 0)
        free(m);
}

static void conn_free(conn *c)
{
    metrics_http *m = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        m->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    m->conn_count--;
    free(c->body);
    free(c);
    maybe_free_server(m);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->handles_open > 0 || c->pending)
        return;
    conn_free(c);
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_timeout(uv_timer_t *t);

static void on_shutdown_done(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    /* Lingering close: the FIN is sent; now read (and discard) whatever
     * the client still sends until it closes too, bounded by the timer.
     * Closing at once with unread bytes queued would make the kernel send
     * a reset, which can destroy the response before the client reads it. */
    if (status < 0 || c->closing || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        conn_close(c);
}

static void on_write_done(uv_write_t *req, int status)
{
    conn *c = req->data;
    /* A failed write means the peer went away; there is nobody to tell. */
    if (status < 0 || c->closing) {
        conn_close(c);
        return;
    }
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown_done) < 0)
        conn_close(c);
}

static const char *reason_phrase(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return code < 300 ? "OK" : code < 500 ? "Client Error" : "Server Error";
    }
}

/* Queues status line + headers + body (owned: freed with the connection;
 * NULL for an empty one) and closes the connection once the kernel has
 * taken the bytes. */
static void respond_owned(conn *c, int code, const char *content_type, const char *extra_headers,
                          char *body, size_t body_len)
{
    metrics_http *m = c->srv;
    c->responded = 1;
    c->body = body;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (code < 300)
        m->stats.responses_2xx++;
    else if (code < 500)
        m->stats.responses_4xx++;
    else
        m->stats.responses_5xx++;

    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\n"
                     "Content-Type: %s\r\n"
                     "Content-Length: %zu\r\n"
                     "%s"
                     "Connection: close\r\n"
                     "\r\n",
                     code, reason_phrase(code), content_type, body_len,
                     extra_headers ? extra_headers : "");
    if (n < 0 || (size_t)n >= sizeof c->head || body_len > UINT32_MAX) {
        conn_close(c);
        return;
    }
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)n),
                        uv_buf_init(body ? body : c->head, (unsigned)body_len)};
    c->wreq.data = c;
    /* The timer keeps running: a client that never reads its response is
     * cut off by the same deadline as one that never sends a request. */
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, body_len ? 2 : 1, on_write_done);
    if (r < 0)
        conn_close(c);
}

static void respond(conn *c, int code, const char *content_type, const char *extra_headers,
                    const char *body, size_t body_len)
{
    char *copy = NULL;
    if (body_len > 0) {
        copy = malloc(body_len);
        if (copy == NULL) {
            conn_close(c);
            return;
        }
        memcpy(copy, body, body_len);
    }
    respond_owned(c, code, content_type, extra_headers, copy, body_len);
}

static void respond_text(conn *c, int code, const char *extra_headers, const char *text)
{
    respond(c, code, "text/plain; charset=utf-8", extra_headers, text, strlen(text));
}

static void serve_metrics(conn *c)
{
    metrics_http *m = c->srv;
    prom_buf b;
    prom_buf_init(&b);
    int r = m->render(m->arg, &b);
    if (r == TSDF_OK)
        r = prom_buf_error(&b);
    if (r != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "metrics render", "metrics: render failed: %s",
                             tsdf_strerror(r));
        respond_text(c, 500, NULL, "metrics render failed\n");
    } else {
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data ? b.data : "",
                b.len);
    }
    prom_buf_fini(&b);
}

/* Parses the request line of a complete head in c->req (NUL-terminated)
 * and answers it. Headers are not needed to serve a scrape, so they are
 * only bounded, never interpreted. */
static void handle_request(conn *c)
{
    char *line_end = strpbrk(c->req, "\r\n");
    if (line_end)
        *line_end = '\0';
    char *method = c->req;
    char *sp1 = strchr(method, ' ');
    char *target = sp1 ? sp1 + 1 : NULL;
    char *sp2 = target ? strchr(target, ' ') : NULL;
    char *version = sp2 ? sp2 + 1 : NULL;
    if (!sp1 || !sp2 || sp1 == method || sp2 == target || strchr(version, ' ') ||
        (strcmp(version, "HTTP/1.1") != 0 && strcmp(version, "HTTP/1.0") != 0)) {
        respond_text(c, 400, NULL, "bad request\n");
        return;
    }
    *sp1 = '\0';
    *sp2 = '\0';
    if (strcmp(method, "GET") != 0) {
        respond_text(c, 405, "Allow: GET\r\n", "method not allowed\n");
        return;
    }
    char *query = strchr(target, '?');
    if (query)
        *query++ = '\0';
    if (strcmp(target, "/metrics") == 0) {
        serve_metrics(c);
        return;
    }
    if (c->srv->route == NULL) {
        respond_text(c, 404, NULL, "not found: try /metrics\n");
        return;
    }
    c->path = target;
    c->query = query ? query : "";
    /* The route answers now or later; until then the request is not read
     * further (its path and query live in the request buffer), and the
     * deadline becomes the one for answers that take work. */
    c->pending = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_start(&c->timer, on_timeout, c->srv->lim.pending_timeout_ms, 0);
    c->srv->route(c->srv->route_arg, c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    (void)suggested;
    if (c->responded)
        c->req_len = 0; /* draining after the response: reuse the buffer */
    size_t room = c->srv->lim.max_request_bytes - c->req_len;
    *buf = uv_buf_init(c->req + c->req_len, (unsigned)room);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    (void)buf;
    if (c->closing)
        return;
    if (c->responded) {
        if (nread < 0)
            conn_close(c); /* the client's FIN (or reset): done */
        return;
    }
    if (nread < 0) {
        /* EOF before a complete head, or a socket error: nothing to answer. */
        conn_close(c);
        return;
    }
    if (nread == 0)
        return; /* EAGAIN; libuv calls again */
    c->req_len += (size_t)nread;
    c->req[c->req_len] = '\0';
    /* NUL bytes would hide the end of the head from the string search, and
     * have no business in a request line anyway. */
    if (memchr(c->req, '\0', c->req_len)) {
        respond_text(c, 400, NULL, "bad request\n");
        return;
    }
    if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
        handle_request(c);
        return;
    }
    if (c->req_len >= c->srv->lim.max_request_bytes) {
        c->srv->stats.oversized++;
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "metrics oversized",
                             "metrics: request head over %u bytes refused",
                             c->srv->lim.max_request_bytes);
        respond_text(c, 431, NULL, "request too large\n");
    }
}

static void on_timeout(uv_timer_t *t)
{
    conn *c = t->data;
    /* The route is still at work: tell the client, and keep the struct
     * for the route's late reply (metrics_http_reply drops it). */
    if (c->pending && !c->responded) {
        c->srv->stats.timeouts++;
        uv_timer_start(&c->timer, on_timeout, c->srv->lim.timeout_ms, 0);
        respond_text(c, 504, NULL, "no answer in time\n");
        return;
    }
    /* A client that got its answer and lingers is not a timeout worth
     * counting; one that never finished its request (or never read the
     * answer) is. */
    if (!c->responded || !c->sreq.data)
        c->srv->stats.timeouts++;
    conn_close(c);
}

static void on_reject_closed(uv_handle_t *h)
{
    free(h);
}

/* Closes the oldest open connection that has not completed a request
 * within evict_after_ms (see metrics_http.h). Returns 1 when it closed one.
 * The list holds the newest first, so the walk keeps the last match. */
static int evict_one(metrics_http *m)
{
    uint64_t now = uv_now(m->loop);
    conn *victim = NULL;
    for (conn *c = m->conns; c != NULL; c = c->next) {
        if (!c->closing && !c->responded && !c->pending &&
            now - c->accepted_ms >= m->lim.evict_after_ms)
            victim = c;
    }
    if (victim == NULL)
        return 0;
    m->stats.evicted++;
    conn_close(victim);
    return 1;
}

/* Notes the peer's address, for routes that answer loopback clients only. */
static void read_peer(conn *c)
{
    struct sockaddr_storage sa;
    int len = sizeof sa;
    snprintf(c->peer, sizeof c->peer, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)&sa;
        uv_ip4_name(a4, c->peer, sizeof c->peer);
        c->peer_loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    } else if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&sa;
        uv_ip6_name(a6, c->peer, sizeof c->peer);
        static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        const uint8_t *b = a6->sin6_addr.s6_addr;
        c->peer_loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ||
                           (memcmp(b, v4mapped, sizeof v4mapped) == 0 && b[12] == 127);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    metrics_http *m = server->data;
    if (status < 0 || m->stopping) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "metrics accept", "metrics: accept: %s",
                             uv_strerror(status));
        return;
    }
    if (m->conn_count >= m->lim.max_connections && evict_one(m)) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "metrics evict",
                             "metrics: %u connections open; closed the oldest one that sent no "
                             "request within %u ms",
                             m->lim.max_connections, m->lim.evict_after_ms);
    } else if (m->conn_count >= m->lim.max_connections) {
        /* The connection must still be accepted, or libuv reports it again
         * at once; it is closed without a word. */
        uv_tcp_t *t = malloc(sizeof *t);
        m->stats.conns_rejected++;
        if (!t)
            return;
        uv_tcp_init(m->loop, t);
        if (uv_accept(server, (uv_stream_t *)t) < 0) {
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "metrics accept", "metrics: accept failed");
        }
        uv_close((uv_handle_t *)t, on_reject_closed);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "metrics conn limit",
                             "metrics: %u connections open, refusing another",
                             m->lim.max_connections);
        return;
    }
    conn *c = calloc(1, sizeof *c + m->lim.max_request_bytes + 1);
    if (!c)
        return;
    c->srv = m;
    uv_tcp_init(m->loop, &c->tcp);
    uv_timer_init(m->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    c->next = m->conns;
    if (m->conns)
        m->conns->prev = c;
    m->conns = c;
    m->conn_count++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    m->stats.connections++;
    c->accepted_ms = uv_now(m->loop);
    read_peer(c);
    uv_timer_start(&c->timer, on_timeout, m->lim.timeout_ms, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        conn_close(c);
}

static void on_listener_closed(uv_handle_t *h)
{
    metrics_http *m = h->data;
    m->listener_open = 0;
    maybe_free_server(m);
}

int metrics_http_start_ex(uv_loop_t *loop, const char *host, int port,
                          const metrics_http_limits *limits, metrics_render_fn render, void *arg,
                          metrics_http **out)
{
    if (!loop || !render || !out || port < 0 || port > 65535)
        return TSDF_EINVAL;
    *out = NULL;
    if (!host || !*host || strcmp(host, "localhost") == 0)
        host = METRICS_HTTP_DEFAULT_HOST;

    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    if (strchr(host, ':')) {
        if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0)
            return TSDF_EINVAL;
    } else if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0) {
        return TSDF_EINVAL;
    }

    metrics_http *m = calloc(1, sizeof *m);
    if (!m)
        return TSDF_ENOMEM;
    m->loop = loop;
    m->render = render;
    m->arg = arg;
    m->lim.max_request_bytes = METRICS_HTTP_MAX_REQUEST_BYTES;
    m->lim.max_connections = METRICS_HTTP_MAX_CONNECTIONS;
    m->lim.timeout_ms = METRICS_HTTP_TIMEOUT_MS;
    m->lim.evict_after_ms = METRICS_HTTP_EVICT_AFTER_MS;
    m->lim.pending_timeout_ms = METRICS_HTTP_PENDING_TIMEOUT_MS;
    if (limits) {
        if (limits->max_request_bytes)
            m->lim.max_request_bytes = limits->max_request_bytes;
        if (limits->max_connections)
            m->lim.max_connections = limits->max_connections;
        if (limits->timeout_ms)
            m->lim.timeout_ms = limits->timeout_ms;
        if (limits->evict_after_ms)
            m->lim.evict_after_ms = limits->evict_after_ms;
        if (limits->pending_timeout_ms)
            m->lim.pending_timeout_ms = limits->pending_timeout_ms;
    }

    int r = uv_tcp_init(loop, &m->listener);
    if (r < 0) {
        free(m);
        return map_uv_error(r);
    }
    m->listener.data = m;
    m->listener_open = 1;
    r = uv_tcp_bind(&m->listener, (const struct sockaddr *)&addr, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
    if (r < 0) {
        TSDF_LOG(TSDF_LOG_ERROR, "metrics: cannot listen on %s:%d: %s", host, port, uv_strerror(r));
        goto fail_listen;
    }

    struct sockaddr_storage bound;
    int len = sizeof bound;
    r = uv_tcp_getsockname(&m->listener, (struct sockaddr *)&bound, &len);
    if (r < 0)
        goto fail_listen;
    m->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    TSDF_LOG(TSDF_LOG_INFO, "metrics: serving http://%s%s%s:%d/metrics",
             strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", m->port);
    *out = m;
    return TSDF_OK;

fail_listen:
    /* The handle was initialised, so it must be closed through the loop;
     * the server is freed by the close callback. */
    m->stopping = 1;
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
    return map_uv_error(r);
}

int metrics_http_start(uv_loop_t *loop, const char *host, int port, metrics_render_fn render,
                       void *arg, metrics_http **out)
{
    return metrics_http_start_ex(loop, host, port, NULL, render, arg, out);
}

void metrics_http_stop(metrics_http *m)
{
    if (!m || m->stopping)
        return;
    m->stopping = 1;
    for (conn *c = m->conns; c; c = c->next)
        conn_close(c);
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}

void metrics_http_set_route(metrics_http *m, metrics_route_fn route, void *arg)
{
    m->route = route;
    m->route_arg = arg;
}

const char *metrics_http_req_path(const metrics_http_req *r)
{
    return r->path;
}

const char *metrics_http_req_query(const metrics_http_req *r)
{
    return r->query;
}

const char *metrics_http_req_peer(const metrics_http_req *r)
{
    return r->peer;
}

int metrics_http_req_peer_is_loopback(const metrics_http_req *r)
{
    return r->peer_loopback;
}

int metrics_http_req_gone(const metrics_http_req *r)
{
    return r->closing || r->responded;
}

void metrics_http_reply_owned(metrics_http_req *r, int code, const char *content_type,
                              const char *extra_headers, void *body, size_t len)
{
    if (!r->pending) {
        free(body); /* a second reply: a bug in the route, answered by nothing */
        return;
    }
    r->pending = 0;
    if (r->closing || r->responded) {
        /* Timed out or stopped meanwhile: nobody reads this any more. */
        free(body);
        if (r->handles_open == 0)
            conn_free(r);
        return;
    }
    uv_timer_start(&r->timer, on_timeout, r->srv->lim.timeout_ms, 0);
    respond_owned(r, code, content_type, extra_headers, body, len);
}

void metrics_http_reply(metrics_http_req *r, int code, const char *content_type,
                        const char *extra_headers, const void *body, size_t len)
{
    void *copy = NULL;
    if (len > 0 && (copy = malloc(len)) == NULL) {
        code = 500;
        content_type = "text/plain; charset=utf-8";
        extra_headers = NULL;
        len = 0;
    } else if (len > 0) {
        memcpy(copy, body, len);
    }
    metrics_http_reply_owned(r, code, content_type, extra_headers, copy, len);
}

int metrics_http_port(const metrics_http *m)
{
    return m ? m->port : -1;
}

void metrics_http_get_stats(const metrics_http *m, metrics_http_stats *out)
{
    if (!out)
        return;
    if (!m) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = m->stats;
    out->open = m->conn_count;
}
