/*
 * server.c - REP contexts and PULL decoders (see server.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "server.h"

#include "access.h"
#include "conns.h"
#include "ipc_watch.h"
#include "log.h"
#include "tsdf_error.h"
#include "tsdf_transport.h"
#include "worker.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/reqrep0/rep.h>

/* Room above max_message_mb for the msgpack envelope of a maximal payload,
 * and for a TOO_LARGE answer to messages slightly over the limit. */
#define SERVER_ENVELOPE_BYTES (64u * 1024u)

/* Idle connections closed per look of server_sweep's table walk. */
#define SERVER_SWEEP_BATCH 64

/* A request thread waits for a request in slices of this length, so that it
 * notices a shutdown without the REP socket being closed under it. */
#define SERVER_RECV_SLICE_MS 200

/* How often each ipc:// listener is probed (ipc_watch.h): a listener nng
 * stopped is listened on again within two periods. */
#define SERVER_IPC_PROBE_MS 1000

/* The SP protocol numbers a peer sends in its handshake: REQ0 for the REP
 * socket, PUSH0 for PULL (nng's headers name only the first). */
#define SERVER_PEER_REQ0 0x30
#define SERVER_PEER_PUSH0 0x50

/* How long a reply may wait for room in the peer's pipe. Bounded so that a
 * shutdown, which joins the request threads, never hangs on a stuck peer. */
#define SERVER_REPLY_SEND_MS 10000

typedef struct {
    server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    pthread_t thread;
    int started;
} req_context;

struct server {
    daemon_ctx *d;
    nng_socket rep;
    nng_socket pull;
    int rep_open, pull_open;
    req_context *reqs;
    size_t req_count;
    pthread_t *decoders;
    size_t decoder_count;
    atomic_int stopping; /* server_stop began: request threads exit */
    access_policy *access;
    ipc_watch *watch;    /* keeps the ipc:// listeners accepting */
    nng_tls_config *tls; /* of the tls+tcp:// listeners; NULL without [tls] */
    /* The admitted connections of both sockets (conns.h): conns_open is
     * its count, so a refused, replaced or expired pipe, whose REM_POST
     * comes later, is not counted twice. */
    conns table;
};

/* Closes pipe id (a value nng gave us; a pipe already gone is a no-op). */
static void close_pipe(uint32_t id)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    nng_pipe_close(p);
}

/* The connection a message came on, for the table. */
static uint32_t msg_pipe(nng_msg *msg)
{
    return nng_pipe_id(nng_msg_get_pipe(msg));
}

/* A request context: receive, handle, reply, forever, until the socket closes. */
static void *req_main(void *arg)
{
    req_context *rc = arg;
    daemon_ctx *d = rc->srv->d;
    tsdf_buf out;

    tsdf_buf_init(&out);
    for (;;) {
        if (atomic_load(&rc->srv->stopping))
            break;
        nng_aio_set_timeout(rc->aio, SERVER_RECV_SLICE_MS);
        nng_ctx_recv(rc->ctx, rc->aio);
        nng_aio_wait(rc->aio);
        int rv = nng_aio_result(rc->aio);
        if (rv == NNG_ECLOSED)
            break;
        if (rv == NNG_ETIMEDOUT)
            continue; /* no request in this slice: look at the flag again */
        if (rv != 0) {
            /* A transient failure (a peer gone mid-message): nothing to answer. */
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "request receive", "request receive failed: %s",
                                 nng_strerror(rv));
            if (atomic_load(&d->stopping))
                break;
            continue;
        }
        nng_msg *msg = nng_aio_get_msg(rc->aio);
        handler_result res;
        memset(&res, 0, sizeof res);
        /* The connection is busy (never closed for idleness) until the
         * reply is on its way. */
        const uint32_t pipe = msg_pipe(msg);
        conns_begin(&rc->srv->table, pipe, worker_now_ns());
        if (access_refuse_request(rc->srv->access, msg, &out)) { /* takes msg if refused */
            /* Rare and small: the refusal is copied into a message. */
            if (out.len == 0) {
                conns_end(&rc->srv->table, pipe, worker_now_ns());
                continue;
            }
            if (nng_msg_alloc(&res.reply, out.len) != 0)
                res.reply = NULL;
            else
                memcpy(nng_msg_body(res.reply), out.data, out.len);
        } else {
            handle_request(d, msg, &res); /* takes msg */
        }
        nng_msg *reply = res.reply;
        if (reply == NULL) {
            TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "reply alloc", "no memory for a reply");
            conns_end(&rc->srv->table, pipe, worker_now_ns());
            handlers_request_done(d, &res);
            continue;
        }
        nng_aio_set_msg(rc->aio, reply);
        nng_aio_set_timeout(rc->aio, SERVER_REPLY_SEND_MS);
        nng_ctx_send(rc->ctx, rc->aio);
        nng_aio_wait(rc->aio);
        rv = nng_aio_result(rc->aio);
        conns_end(&rc->srv->table, pipe, worker_now_ns());
        if (rv != 0) {
            /* A failed send leaves the message with us (nng's rule). */
            nng_msg_free(nng_aio_get_msg(rc->aio));
            if (rv == NNG_ECLOSED)
                break;
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "reply send", "reply send failed: %s",
                                 nng_strerror(rv));
        }
        /* The request's statistics, now that its reply is on its way. */
        handlers_request_done(d, &res);
    }
    tsdf_buf_fini(&out);
    return NULL;
}

static void *decoder_main(void *arg)
{
    server *s = arg;
    for (;;) {
        nng_msg *msg;
        int rv = nng_recvmsg(s->pull, &msg, 0);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0) {
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "frame receive", "frame receive failed: %s",
                                 nng_strerror(rv));
            if (atomic_load(&s->d->stopping))
                break;
            continue;
        }
        conns_touch(&s->table, msg_pipe(msg), worker_now_ns());
        if (!access_refuse_frame(s->access, msg)) /* takes msg if refused */
            handle_frame(s->d, msg);              /* takes msg */
    }
    return NULL;
}

/* nng does not create the directory of an ipc:// socket; the daemon makes
 * it (mode 0755) when missing, which a demo or a test in a temp dir needs. */
static void ensure_ipc_dir(const char *url)
{
    const char *p = NULL;
    char dir[PATH_MAX];
    if (strncmp(url, "ipc://", 6) == 0)
        p = url + 6;
    if (p == NULL)
        return;
    const char *slash = strrchr(p, '/');
    if (slash == NULL || slash == p || (size_t)(slash - p) >= sizeof dir)
        return;
    memcpy(dir, p, (size_t)(slash - p));
    dir[slash - p] = '\0';
    mkdir(dir, 0755); /* EEXIST is fine; any real problem shows in nng_listen */
}

/* Runs on nng's threads for every connection of either socket. nng calls
 * REM_POST for every pipe that saw ADD_PRE, also one closed here. Closing
 * the pipe in ADD_PRE refuses the connection before it can receive
 * anything: with at most max_connections pipes, each buffering at most
 * one message of the size limit, the memory in-flight receives hold is
 * bounded (nng has no timeout for a message that arrives only in part).
 * At the limit a new connection takes the place of the one idle longest
 * (conns.h), so connections held open and unused cannot lock clients
 * out; it is refused only when every admitted one is busy. */
static void on_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    server *s = arg;
    dstats *ds = s->d->stats;
    uint32_t id = nng_pipe_id(p), evict = 0;
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        /* The watch's own probes are not clients: not counted, not
         * policed (their REM_POST is left out the same way). */
        if (ipc_watch_pipe_added(s->watch, p))
            return;
        switch (conns_admit(&s->table, id, worker_now_ns(), &evict)) {
        case CONNS_ADMITTED:
            atomic_fetch_add(&ds->conns_open, 1);
            break;
        case CONNS_REPLACED:
            atomic_fetch_add(&ds->conns_idle_closed, 1);
            close_pipe(evict);
            TSDF_LOG_RATELIMITED(TSDF_LOG_INFO, "connection replaced",
                                 "%u connections open ([server] max_connections): closed the "
                                 "one idle longest for a new one",
                                 s->d->cfg->max_connections);
            break;
        case CONNS_REFUSED:
            atomic_fetch_add(&ds->conns_refused, 1);
            nng_pipe_close(p);
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "connection limit",
                                 "%u connections open ([server] max_connections), each with a "
                                 "request in progress: refusing another",
                                 s->d->cfg->max_connections);
            break;
        }
        access_pipe_added(s->access, p);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        if (ipc_watch_pipe_removed(s->watch, p))
            return;
        if (conns_remove(&s->table, id))
            atomic_fetch_sub(&ds->conns_open, 1);
        access_pipe_removed(s->access, p);
    }
}

void server_sweep(server *s)
{
    uint32_t ids[SERVER_SWEEP_BATCH];
    const int64_t idle_ns = (int64_t)s->d->cfg->idle_timeout_s * 1000000000;
    size_t n, total = 0;
    do {
        n = conns_expired(&s->table, worker_now_ns(), idle_ns, ids, SERVER_SWEEP_BATCH);
        for (size_t i = 0; i < n; i++) {
            atomic_fetch_sub(&s->d->stats->conns_open, 1);
            atomic_fetch_add(&s->d->stats->conns_idle_closed, 1);
            close_pipe(ids[i]);
        }
        total += n;
    } while (n == SERVER_SWEEP_BATCH);
    if (total != 0)
        TSDF_LOG(TSDF_LOG_DEBUG, "closed %zu connections idle for %u s ([server] idle_timeout_s)",
                 total, s->d->cfg->idle_timeout_s);
}

static int watch_pipes(server *s, nng_socket sock)
{
    int rv = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, on_pipe_event, s);
    if (rv == 0)
        rv = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, on_pipe_event, s);
    return rv;
}

static int listen_all(server *s, nng_socket sock, uint16_t peer_proto,
                      const char (*urls)[CFG_URL_LEN], size_t n, const tsdf_listen_opts *opts,
                      char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        nng_listener l;
        ensure_ipc_dir(urls[i]);
        int rc = tsdf_transport_listen(sock, urls[i], opts, &l, err, err_len);
        if (rc == TSDF_OK &&
            (rc = ipc_watch_add(s->watch, sock, l, urls[i], peer_proto, opts)) != TSDF_OK)
            snprintf(err, err_len, "%s: too many ipc:// listeners to watch", urls[i]);
        if (rc != TSDF_OK)
            return rc;
        TSDF_LOG(TSDF_LOG_INFO, "listening on %s", urls[i]);
    }
    return TSDF_OK;
}

int server_start(daemon_ctx *d, server **out, char *err, size_t err_len)
{
    const tsdfd_config *cfg = d->cfg;
    size_t max_recv = (size_t)cfg->max_message_mb * 1024u * 1024u + SERVER_ENVELOPE_BYTES;
    int rv, rc;

    *out = NULL;
    server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return TSDF_ENOMEM;
    if (conns_init(&s->table, cfg->max_connections) != TSDF_OK) {
        free(s);
        return TSDF_ENOMEM;
    }
    s->d = d;
    if ((rc = access_create(cfg, d->stats, &s->access)) != TSDF_OK ||
        (rc = ipc_watch_create(&s->watch)) != TSDF_OK) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    if (cfg_tls_enabled(cfg)) {
        tsdf_tls_files f = {cfg->tls_ca_file, cfg->tls_cert_file, cfg->tls_key_file, NULL};
        if ((rc = tsdf_tls_server_config(&f, &s->tls, err, err_len)) != TSDF_OK)
            goto fail;
    }
    long gid;
    if (cfg_ipc_gid(cfg, &gid) != TSDF_OK) {
        snprintf(err, err_len, "[server] ipc_group: no group '%s'", cfg->ipc_group);
        rc = TSDF_ENOT_FOUND;
        goto fail;
    }

    if ((rv = nng_rep0_open(&s->rep)) != 0) {
        snprintf(err, err_len, "cannot open the REP socket: %s", nng_strerror(rv));
        rc = tsdf_transport_error(rv);
        goto fail;
    }
    s->rep_open = 1;
    if ((rv = nng_pull0_open(&s->pull)) != 0) {
        snprintf(err, err_len, "cannot open the PULL socket: %s", nng_strerror(rv));
        rc = tsdf_transport_error(rv);
        goto fail;
    }
    s->pull_open = 1;
    /* Bounded messages: nng refuses larger ones before it buffers them. */
    nng_socket_set_size(s->rep, NNG_OPT_RECVMAXSZ, max_recv);
    nng_socket_set_size(s->pull, NNG_OPT_RECVMAXSZ, max_recv);
    if ((rv = watch_pipes(s, s->rep)) != 0 || (rv = watch_pipes(s, s->pull)) != 0) {
        snprintf(err, err_len, "cannot watch connections: %s", nng_strerror(rv));
        rc = tsdf_transport_error(rv);
        goto fail;
    }
    TSDF_LOG(TSDF_LOG_INFO,
             "at most %u connections, each receiving up to %zu bytes: in-flight receives "
             "hold at most %zu MiB",
             cfg->max_connections, max_recv, (max_recv * cfg->max_connections) >> 20);

    tsdf_listen_opts lo = {.tls = s->tls, .ipc_mode = (int)cfg->ipc_mode, .ipc_gid = gid};
    rc = listen_all(s, s->rep, SERVER_PEER_REQ0, cfg->listen, cfg->listen_count, &lo, err, err_len);
    if (rc != TSDF_OK)
        goto fail;
    rc = listen_all(s, s->pull, SERVER_PEER_PUSH0, cfg->frames_listen, cfg->frames_listen_count,
                    &lo, err, err_len);
    if (rc != TSDF_OK)
        goto fail;
    if ((rc = ipc_watch_start(s->watch, SERVER_IPC_PROBE_MS)) != TSDF_OK) {
        snprintf(err, err_len, "cannot start the ipc listener watch");
        goto fail;
    }

    s->reqs = calloc(cfg->request_contexts, sizeof *s->reqs);
    s->decoders = calloc(cfg->decode_threads, sizeof *s->decoders);
    if (s->reqs == NULL || s->decoders == NULL) {
        rc = TSDF_ENOMEM;
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < cfg->request_contexts; i++) {
        req_context *c = &s->reqs[i];
        c->srv = s;
        if ((rv = nng_ctx_open(&c->ctx, s->rep)) != 0 ||
            (rv = nng_aio_alloc(&c->aio, NULL, NULL)) != 0) {
            snprintf(err, err_len, "cannot make request context %zu: %s", i, nng_strerror(rv));
            rc = tsdf_transport_error(rv);
            goto fail;
        }
        s->req_count++;
        if (pthread_create(&c->thread, NULL, req_main, c) != 0) {
            snprintf(err, err_len, "cannot start request thread %zu", i);
            rc = TSDF_ENOMEM;
            goto fail;
        }
        c->started = 1;
    }
    for (size_t i = 0; i < cfg->decode_threads; i++) {
        if (pthread_create(&s->decoders[i], NULL, decoder_main, s) != 0) {
            snprintf(err, err_len, "cannot start decoder thread %zu", i);
            rc = TSDF_ENOMEM;
            goto fail;
        }
        s->decoder_count++;
    }
    *out = s;
    return TSDF_OK;

fail:
    server_stop(s);
    return rc;
}

void server_stop(server *s)
{
    if (s == NULL)
        return;
    /* No listener restart may race with the closes below. */
    ipc_watch_stop(s->watch);
    /* Closing the PULL socket ends the decoders' blocking receives with
     * NNG_ECLOSED (no context is involved there). */
    if (s->pull_open)
        nng_close(s->pull);
    for (size_t i = 0; i < s->decoder_count; i++)
        pthread_join(s->decoders[i], NULL);
    /* The REP socket is closed only once no thread uses its contexts: nng
     * 1.5 can finalise a context that nng_close closed while another thread
     * is still inside nng_ctx_send/nng_ctx_recv on it, and then locks the
     * freed socket's mutex ("panic: pthread_mutex_lock: Invalid argument",
     * an abort). A SIGTERM right after a reply went out hit exactly that.
     * So the request threads stop first: each finishes the request it has
     * (its reply is sent, within SERVER_REPLY_SEND_MS) and sees the flag
     * within one receive slice. */
    atomic_store(&s->stopping, 1);
    for (size_t i = 0; i < s->req_count; i++) {
        req_context *c = &s->reqs[i];
        if (c->started)
            pthread_join(c->thread, NULL);
        c->started = 0;
    }
    if (s->rep_open)
        nng_close(s->rep);
    for (size_t i = 0; i < s->req_count; i++) {
        req_context *c = &s->reqs[i];
        if (c->aio != NULL)
            nng_aio_free(c->aio);
    }
    /* Both sockets are closed: no pipe callback runs any more. */
    access_destroy(s->access);
    ipc_watch_destroy(s->watch);
    if (s->tls != NULL)
        nng_tls_config_free(s->tls);
    free(s->reqs);
    free(s->decoders);
    conns_fini(&s->table);
    free(s);
}
