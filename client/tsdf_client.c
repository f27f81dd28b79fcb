/*
 * tsdf_client.c - libtsdf (see tsdf_client.h).
 *
 * The client is immutable after open: the sockets are thread-safe in nng,
 * and every request opens its own REQ context, so no lock is needed. The
 * request id comes from an atomic counter.
 */
#define _POSIX_C_SOURCE 200809L
#include "tsdf_client.h"

#include "client_ring.h"

#include "tsdf_depth_codec.h"
#include "tsdf_proto.h"
#include "tsdf_transport.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>

struct tsdf_client {
    nng_socket req;
    nng_socket push;
    int has_push;
    int default_timeout_ms;
    atomic_uint_fast64_t next_id;
    /* TLS configurations of the two dialers (NULL for other transports),
     * freed after the sockets. */
    nng_tls_config *tls_req, *tls_push;
    /* The shared-memory frame ring (tsdf_client_attach_ring), or NULL. */
    _Atomic(client_ring *) ring;
    int req_ipc; /* requests go over ipc://: the daemon is on this host */
};

static _Thread_local char last_message[TSDF_PROTO_MAX_MESSAGE_LEN + 1];

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
client_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof(last_message), fmt, ap);
    va_end(ap);
    return code;
}

const char *tsdf_client_last_message(void)
{
    return last_message;
}

int tsdf_client_nng_error(int nng_err)
{
    return tsdf_transport_error(nng_err);
}

static int nng_fail(int nng_err, const char *what)
{
    return client_fail(tsdf_client_nng_error(nng_err), "%s: %s", what, nng_strerror(nng_err));
}

void tsdf_client_options_default(tsdf_client_options *o)
{
    o->lazy_connect = 0;
    o->push_send_buffer = 16;
    o->default_timeout_ms = 5000;
    o->tls_ca_file = NULL;
    o->tls_cert_file = NULL;
    o->tls_key_file = NULL;
    o->tls_server_name = NULL;
}

/* Dials url; for a tls+tcp:// URL *tls receives the configuration made
 * from o's files (the caller frees it after closing s). */
static int dial(nng_socket s, const char *url, const tsdf_client_options *o, nng_tls_config **tls)
{
    char err[TSDF_PROTO_MAX_MESSAGE_LEN];
    int has_files = o->tls_ca_file != NULL || o->tls_cert_file != NULL || o->tls_key_file != NULL ||
                    o->tls_server_name != NULL;

    *tls = NULL;
    if (tsdf_transport_is_tls(url)) {
        tsdf_tls_files f = {o->tls_ca_file, o->tls_cert_file, o->tls_key_file, o->tls_server_name};
        int rc = tsdf_tls_client_config(&f, url, tls, err, sizeof err);
        if (rc != TSDF_OK)
            return client_fail(rc, "%s", err);
    } else if (has_files) {
        return client_fail(TSDF_EINVAL, "%s: TLS options given, but the URL is not tls+tcp://",
                           url);
    }
    /* Short reconnect intervals: a restarted daemon is found again within a
     * second instead of nng's default back-off. */
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 1000);
    int rc = tsdf_transport_dial(s, url, *tls, o->lazy_connect, NULL, err, sizeof err);
    if (rc != TSDF_OK)
        return client_fail(rc, "%s", err);
    return TSDF_OK;
}

/* Frees what dial made, after the socket it served is closed. */
static void free_tls(nng_tls_config **tls)
{
    if (*tls != NULL)
        nng_tls_config_free(*tls);
    *tls = NULL;
}

int tsdf_client_open(const char *req_url, const char *push_url, const tsdf_client_options *opts,
                     tsdf_client **out)
{
    if (out == NULL)
        return TSDF_EINVAL;
    *out = NULL;
    last_message[0] = '\0';
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    if (opts != NULL)
        o = *opts;
    if (o.push_send_buffer < 1 || o.push_send_buffer > 8192 || o.default_timeout_ms <= 0)
        return client_fail(TSDF_EINVAL, "invalid client options");
    if (req_url == NULL)
        req_url = TSDF_PROTO_DEFAULT_REQ_URL;

    tsdf_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TSDF_ENOMEM;
    c->default_timeout_ms = o.default_timeout_ms;
    c->req_ipc = strncmp(req_url, "ipc://", 6) == 0;
    atomic_init(&c->next_id, 1);

    int rc;
    int rv = nng_req0_open(&c->req);
    if (rv != 0) {
        rc = nng_fail(rv, "req socket");
        goto fail_req;
    }
    /* A resent integrate would integrate its frame twice: never resend;
     * the per-call timeout bounds the wait instead. */
    nng_socket_set_ms(c->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    /* Replies (meshes, raycasts) may be large, but never beyond the limit. */
    nng_socket_set_size(c->req, NNG_OPT_RECVMAXSZ, TSDF_PROTO_MAX_MESSAGE_BYTES + 1024u);
    rc = dial(c->req, req_url, &o, &c->tls_req);
    if (rc != TSDF_OK)
        goto fail_req_dial;

    if (push_url != NULL) {
        rv = nng_push0_open(&c->push);
        if (rv != 0) {
            rc = nng_fail(rv, "push socket");
            goto fail_req_dial;
        }
        c->has_push = 1;
        rv = nng_socket_set_int(c->push, NNG_OPT_SENDBUF, o.push_send_buffer);
        if (rv != 0) {
            rc = nng_fail(rv, "push send buffer");
            goto fail_push;
        }
        rc = dial(c->push, push_url, &o, &c->tls_push);
        if (rc != TSDF_OK)
            goto fail_push;
    }
    *out = c;
    return TSDF_OK;

fail_push:
    nng_close(c->push);
    free_tls(&c->tls_push);
fail_req_dial:
    nng_close(c->req);
    free_tls(&c->tls_req);
fail_req:
    free(c);
    return rc;
}

void tsdf_client_close(tsdf_client *c)
{
    if (c == NULL)
        return;
    if (c->has_push)
        nng_close(c->push);
    nng_close(c->req);
    free_tls(&c->tls_push);
    free_tls(&c->tls_req);
    client_ring_close(atomic_load(&c->ring));
    free(c);
}

/* ---- plumbing ----------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int effective_timeout(const tsdf_client *c, int timeout_ms)
{
    return timeout_ms > 0 ? timeout_ms : c->default_timeout_ms;
}

static int copy_name(char *dst, const char *src, const char *what)
{
    if (src == NULL)
        src = TSDF_PROTO_DEFAULT_MAP;
    size_t n = strlen(src);
    int rc = tsdf_proto_check_name(src, n);
    if (rc != TSDF_OK)
        return client_fail(rc, "%s \"%.64s\" is not 1..%u characters of [A-Za-z0-9_.-]", what, src,
                           TSDF_PROTO_MAX_NAME_LEN);
    memcpy(dst, src, n + 1);
    return TSDF_OK;
}

/* Starts a request of type for map (NULL: the default map). */
static int map_request(tsdf_request *q, tsdf_msg_type type, const char *map)
{
    tsdf_request_init(q, type);
    return copy_name(q->map, map, "map");
}

/* Encodes q straight into the body of a fresh nng message sized by
 * tsdf_proto_request_bound, then trims the message to what was written: a
 * frame's depth is copied once, from the caller's image into the message
 * that goes on the wire. */
static int encode_msg(const tsdf_request *q, nng_msg **out)
{
    size_t bound = tsdf_proto_request_bound(q);
    if (bound > TSDF_PROTO_MAX_MESSAGE_BYTES)
        bound = TSDF_PROTO_MAX_MESSAGE_BYTES;
    nng_msg *m;
    int rv = nng_msg_alloc(&m, bound);
    if (rv != 0)
        return nng_fail(rv, "message");
    tsdf_buf b;
    tsdf_buf_init_fixed(&b, nng_msg_body(m), bound);
    int rc = tsdf_proto_encode_request(q, &b);
    if (rc != TSDF_OK) {
        nng_msg_free(m);
        return client_fail(rc, "cannot encode the %s request: %s", tsdf_msg_type_name(q->type),
                           tsdf_strerror(rc));
    }
    nng_msg_chop(m, bound - b.len);
    *out = m;
    return TSDF_OK;
}

/* Sends q (its id is assigned here) and waits for the reply. On TSDF_OK,
 * *rep is decoded from *reply_msg, which the caller frees after it is done
 * with rep's payload pointers. A daemon error reply returns its status and
 * frees the message. */
static int call_once(tsdf_client *c, tsdf_request *q, int64_t deadline, tsdf_reply *rep,
                     nng_msg **reply_msg, int *recv_rv)
{
    last_message[0] = '\0';
    *reply_msg = NULL;
    *recv_rv = 0;
    q->id = atomic_fetch_add(&c->next_id, 1);
    nng_msg *m;
    int rc = encode_msg(q, &m);
    if (rc != TSDF_OK)
        return rc;

    nng_ctx ctx;
    nng_aio *aio = NULL;
    int rv = nng_ctx_open(&ctx, c->req);
    if (rv != 0) {
        nng_msg_free(m);
        return nng_fail(rv, "request context");
    }
    rv = nng_aio_alloc(&aio, NULL, NULL);
    if (rv != 0) {
        nng_msg_free(m);
        nng_ctx_close(ctx);
        return nng_fail(rv, "aio");
    }

    nng_aio_set_msg(aio, m);
    nng_aio_set_timeout(aio, (nng_duration)(deadline - now_ms() > 0 ? deadline - now_ms() : 1));
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv != 0) {
        /* A failed send leaves the message with us. */
        nng_msg_free(nng_aio_get_msg(aio));
        rc = nng_fail(rv, "send");
        goto done;
    }
    int64_t left = deadline - now_ms();
    nng_aio_set_timeout(aio, (nng_duration)(left > 0 ? left : 1));
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv != 0) {
        *recv_rv = rv;
        rc = nng_fail(rv, "receive");
        goto done;
    }
    nng_msg *r = nng_aio_get_msg(aio);
    tsdf_proto_error perr;
    rc = tsdf_proto_decode_reply(nng_msg_body(r), nng_msg_len(r), rep, &perr);
    if (rc != TSDF_OK) {
        nng_msg_free(r);
        client_fail(rc, "malformed reply: %s", perr.message);
        goto done;
    }
    if (rep->id != q->id || (rep->type != q->type && rep->type != TSDF_MSG_ERROR)) {
        nng_msg_free(r);
        rc = client_fail(TSDF_EFORMAT, "reply %s #%llu does not answer request %s #%llu",
                         tsdf_msg_type_name(rep->type), (unsigned long long)rep->id,
                         tsdf_msg_type_name(q->type), (unsigned long long)q->id);
        goto done;
    }
    if (rep->status != TSDF_OK) {
        nng_msg_free(r);
        rc = client_fail(rep->status, "%s", rep->message);
        goto done;
    }
    *reply_msg = r;
    rc = TSDF_OK;
done:
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return rc;
}

/* Requests that change nothing, which may be sent again: not a raycast
 * into a ring, whose first copy may still be writing its image there when
 * the second's answer has freed the slots. */
static int is_query(const tsdf_request *q)
{
    const tsdf_msg_type t = q->type;
    return t == TSDF_MSG_PING || t == TSDF_MSG_STATS || t == TSDF_MSG_MAPS ||
           (t == TSDF_MSG_RAYCAST && !q->u.raycast.has_ring) || t == TSDF_MSG_MESH;
}

/* call_once, and once more for a query whose connection was reset or shut
 * before its reply, while time is left: nng does not resend on another
 * connection (the resend time is off, so that an integrate is never sent
 * twice), and with nng 1.5 a daemon replaces an ipc:// listener that
 * stopped handing over connections by closing the connections stuck on
 * it (daemon/ipc_watch.h). */
static int call(tsdf_client *c, tsdf_request *q, int timeout_ms, tsdf_reply *rep,
                nng_msg **reply_msg)
{
    const int64_t deadline = now_ms() + effective_timeout(c, timeout_ms);
    int recv_rv;
    int rc = call_once(c, q, deadline, rep, reply_msg, &recv_rv);
    if (rc != TSDF_OK && is_query(q) && (recv_rv == NNG_ECONNRESET || recv_rv == NNG_ECONNSHUT) &&
        deadline - now_ms() > 0)
        rc = call_once(c, q, deadline, rep, reply_msg, &recv_rv);
    return rc;
}

/* A reply struct is large (the maps and stats arrays): keep it off small
 * thread stacks. */
static int call_alloc(tsdf_client *c, tsdf_request *q, int timeout_ms, tsdf_reply **rep,
                      nng_msg **reply_msg)
{
    *rep = malloc(sizeof(**rep));
    if (*rep == NULL)
        return TSDF_ENOMEM;
    int rc = call(c, q, timeout_ms, *rep, reply_msg);
    if (rc != TSDF_OK) {
        free(*rep);
        *rep = NULL;
    }
    return rc;
}

static void call_free(tsdf_reply *rep, nng_msg *m)
{
    free(rep);
    if (m != NULL)
        nng_msg_free(m);
}

/* Sends q and copies the reply's body (the member of its union u that answers
 * q's type, out_size bytes) into out; out NULL: the body is not wanted. Every
 * member of a union starts at the union's address, so one copy serves all the
 * reply types. */
static int call_copy(tsdf_client *c, tsdf_request *q, int timeout_ms, void *out, size_t out_size)
{
    tsdf_reply *rep = NULL;
    nng_msg *m = NULL;
    int rc = call_alloc(c, q, timeout_ms, &rep, &m);
    if (rc == TSDF_OK && out != NULL)
        memcpy(out, &rep->u, out_size);
    call_free(rep, m);
    return rc;
}

/* The bytes of f's raw depth: width x height samples of its format. */
static size_t depth_bytes(const tsdf_frame *f)
{
    return (size_t)f->width * f->height * (f->depth_format == TSDF_DEPTH_U16 ? 2u : 4u);
}

/* Compresses the frame's depth into coded (caller-owned, initialised) when
 * f asks for an encoding, and points q's frame at it. The raw size is
 * checked first: the encoder reads width x height samples from the
 * caller's pointer, and the codec's own check on the receiving side only
 * sees the compressed bytes. */
static int encode_depth(const tsdf_client_frame *f, tsdf_req_frame *r, tsdf_buf *coded)
{
    const tsdf_frame *fr = f->frame;
    tsdf_depth_encoding e = f->depth_encoding;

    r->depth_encoding = e;
    if (e == TSDF_DEPTH_ENC_RAW)
        return TSDF_OK;
    if ((unsigned)e >= TSDF_DEPTH_ENC_COUNT)
        return client_fail(TSDF_EINVAL, "unknown depth encoding %d", (int)e);
    if (!tsdf_depth_encoding_allows(e, fr->depth_format))
        return client_fail(TSDF_EINVAL, "depth encoding %s carries u16 depth only",
                           tsdf_depth_encoding_name(e));
    if (fr->depth == NULL)
        return client_fail(TSDF_EINVAL, "no depth");
    if (fr->width == 0 || fr->height == 0)
        return client_fail(TSDF_EEMPTY_IMAGE, "image of %ux%u pixels", fr->width, fr->height);
    size_t bytes = depth_bytes(fr);
    if (fr->depth_size_bytes != 0 && fr->depth_size_bytes != bytes)
        return client_fail(TSDF_EBAD_SIZE, "depth: %zu bytes, expected %zu", fr->depth_size_bytes,
                           bytes);
    int rc = tsdf_depth_encode(e, f->depth_level, fr->depth_format, fr->width, fr->height,
                               fr->depth, coded);
    if (rc != TSDF_OK)
        return client_fail(rc, "cannot encode the depth as %s: %s", tsdf_depth_encoding_name(e),
                           tsdf_strerror(rc));
    r->depth_coded = coded->data;
    r->depth_coded_bytes = coded->len;
    r->frame.depth = NULL;
    r->frame.depth_size_bytes = 0;
    return TSDF_OK;
}

static int frame_request(const tsdf_client_frame *f, tsdf_msg_type type, tsdf_request *q,
                         tsdf_buf *coded)
{
    if (f == NULL || f->frame == NULL)
        return client_fail(TSDF_EINVAL, "no frame");
    tsdf_request_init(q, type);
    int rc = copy_name(q->map, f->map, "map");
    if (rc != TSDF_OK)
        return rc;
    tsdf_req_frame *r = &q->u.frame;
    if (f->sensor != NULL) {
        size_t n = strlen(f->sensor);
        if (n == 0 || n > TSDF_PROTO_MAX_SENSOR_NAME_LEN)
            return client_fail(n ? TSDF_ETOO_LARGE : TSDF_EINVAL, "bad sensor name");
        r->sensor.is_id = 0;
        memcpy(r->sensor.name, f->sensor, n + 1);
    } else {
        r->sensor.is_id = 1;
        r->sensor.id = f->sensor_id;
    }
    r->seq = f->seq;
    r->stamp_ns = f->stamp_ns;
    r->frame = *f->frame;
    return encode_depth(f, r, coded);
}

/* ---- calls -------------------------------------------------------------- */

int tsdf_client_send_frame(tsdf_client *c, const tsdf_client_frame *f, int timeout_ms)
{
    if (c == NULL)
        return TSDF_EINVAL;
    last_message[0] = '\0';
    if (!c->has_push)
        return client_fail(TSDF_EINVAL, "the client was opened without a push URL");
    tsdf_request *q = malloc(sizeof(*q));
    if (q == NULL)
        return TSDF_ENOMEM;
    tsdf_buf coded;
    tsdf_buf_init(&coded);
    int rc = frame_request(f, TSDF_MSG_FRAME, q, &coded);
    nng_msg *m = NULL;
    if (rc == TSDF_OK)
        rc = encode_msg(q, &m);
    tsdf_buf_fini(&coded);
    free(q);
    if (rc != TSDF_OK)
        return rc;

    int rv;
    if (timeout_ms == 0) {
        rv = nng_sendmsg(c->push, m, NNG_FLAG_NONBLOCK);
        if (rv != 0)
            nng_msg_free(m);
    } else {
        nng_aio *aio;
        rv = nng_aio_alloc(&aio, NULL, NULL);
        if (rv != 0) {
            nng_msg_free(m);
            return nng_fail(rv, "aio");
        }
        nng_aio_set_msg(aio, m);
        nng_aio_set_timeout(aio, effective_timeout(c, timeout_ms));
        nng_send_aio(c->push, aio);
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(aio));
        nng_aio_free(aio);
    }
    if (rv != 0)
        return nng_fail(rv, "send frame");
    return TSDF_OK;
}

/* Puts q's raw depth into free slots of ring and makes q name them
 * instead of carrying it; sp->slot -1 when q goes as it is (no ring,
 * compressed depth, no slots free). */
static void ring_frame(client_ring *ring, tsdf_request *q, client_ring_span *sp)
{
    tsdf_req_frame *rf = &q->u.frame;
    const tsdf_frame *f = &rf->frame;
    sp->slot = -1;
    if (ring == NULL || rf->depth_encoding != TSDF_DEPTH_ENC_RAW || f->depth == NULL)
        return;
    rf->has_ring = client_ring_put(ring, f->depth, depth_bytes(f), sp) == TSDF_OK;
    rf->ring_token = sp->token;
    rf->ring_offset = sp->offset;
    rf->ring_seq = sp->seq;
}

/* Whether the daemon answered (so it has read the slot, or never will):
 * not when the request timed out, its connection failed, or nng ran out
 * of memory receiving the reply. A TIMEOUT the daemon itself answered
 * retires the slot too: rare, and on the safe side. */
static int ring_answered(int rc)
{
    return rc != TSDF_ETIMEOUT && rc != TSDF_ECLOSED && rc != TSDF_ENNG &&
           rc != TSDF_ECONNREFUSED && rc != TSDF_ENOMEM;
}

/* Whether the daemon refused the frame for its ring token, not for the
 * frame (its messages for those start with the key). */
static int ring_lost(int rc)
{
    return (rc == TSDF_ENOT_FOUND || rc == TSDF_EFORBIDDEN) &&
           strncmp(last_message, "ring_token", 10) == 0;
}

int tsdf_client_integrate(tsdf_client *c, const tsdf_client_frame *f, int timeout_ms,
                          tsdf_rep_integrate *out)
{
    if (c == NULL)
        return TSDF_EINVAL;
    last_message[0] = '\0';
    tsdf_request *q = malloc(sizeof(*q));
    if (q == NULL)
        return TSDF_ENOMEM;
    tsdf_buf coded;
    tsdf_buf_init(&coded);
    int rc = frame_request(f, TSDF_MSG_INTEGRATE, q, &coded);
    if (rc == TSDF_OK) {
        client_ring *ring = atomic_load(&c->ring);
        client_ring_span sp;
        ring_frame(ring, q, &sp);
        rc = call_copy(c, q, timeout_ms, out, sizeof(*out));
        if (sp.slot >= 0) {
            client_ring_release(ring, &sp, ring_answered(rc));
            if (ring_lost(rc)) {
                /* The daemon no longer has the ring (it restarted): this
                 * frame and the next ones go in the request. */
                client_ring_break(ring);
                q->u.frame.has_ring = 0;
                rc = call_copy(c, q, timeout_ms, out, sizeof(*out));
            }
        }
    }
    tsdf_buf_fini(&coded);
    free(q);
    return rc;
}

int tsdf_client_attach_ring(tsdf_client *c, const char *ring_socket, size_t slot_bytes,
                            unsigned slots)
{
    if (c == NULL)
        return TSDF_EINVAL;
    last_message[0] = '\0';
    client_ring *r = NULL;
    char why[160] = "";
    char advertised[TSDF_PROTO_MAX_RING_SOCKET_LEN + 1];
    int rc;
    if (ring_socket == NULL) {
        /* The daemon's own: its ping reply names it (PROTOCOL.md 6.8), a
         * path on its host, which only an ipc:// client shares. */
        if (!c->req_ipc)
            return client_fail(TSDF_EINVAL, "a ring needs requests over ipc:// (the daemon's "
                                            "host); this client connected otherwise");
        tsdf_request q;
        tsdf_reply *rep = NULL;
        nng_msg *m = NULL;
        if ((rc = map_request(&q, TSDF_MSG_PING, NULL)) != TSDF_OK ||
            (rc = call_alloc(c, &q, c->default_timeout_ms, &rep, &m)) != TSDF_OK)
            return rc;
        snprintf(advertised, sizeof advertised, "%s", rep->ring_socket);
        call_free(rep, m);
        if (advertised[0] == '\0')
            return client_fail(TSDF_ENOT_FOUND,
                               "the daemon named no ring socket (none is set in its [server] "
                               "ring_socket, or it predates naming it)");
        ring_socket = advertised;
    }
    rc = client_ring_attach(ring_socket, slot_bytes, slots, c->default_timeout_ms, &r, why,
                            sizeof why);
    if (rc != TSDF_OK)
        return client_fail(rc, "%s", why);
    client_ring *none = NULL;
    if (!atomic_compare_exchange_strong(&c->ring, &none, r)) {
        client_ring_close(r);
        return client_fail(TSDF_EBUSY, "this client already has a ring");
    }
    return TSDF_OK;
}

int tsdf_client_raycast(tsdf_client *c, const char *map, const tsdf_raycast_params *p, int want_rgb,
                        tsdf_raycast_output *out, int *has_rgb, int timeout_ms)
{
    /* Normals are asked for only by a caller that takes them. */
    tsdf_client_raycast_options o = {.want_normals = out != NULL && out->normals != NULL,
                                     .want_rgb = want_rgb ? 1 : 0};
    tsdf_client_raycast_info info;
    int rc = tsdf_client_raycast_ex(c, map, p, &o, out, &info, timeout_ms);
    if (rc == TSDF_OK && has_rgb != NULL)
        *has_rgb = info.has_rgb;
    return rc;
}

/* Where a raycast's image goes and what was asked for it. */
typedef struct {
    const tsdf_req_raycast *q;
    uint32_t w, h;        /* the image asked for (the request's size over its scale) */
    client_ring *ring;    /* the ring its image was asked into, or NULL */
    uint64_t ring_offset; /* and where in it */
} raycast_dest;

/* The arrays of a raycast reply, where they are: in the message or in
 * the ring. */
typedef struct {
    const void *depth, *normals, *rgb;
} raycast_arrays;

/* Checks raycast reply rr against what d asked for and finds its arrays
 * (in the message, or in the ring); fills info (optional). */
static int raycast_locate(const raycast_dest *d, const tsdf_rep_raycast *rr, raycast_arrays *a,
                          tsdf_client_raycast_info *info)
{
    const size_t px = (size_t)d->w * d->h;
    a->depth = rr->depth_m;
    a->normals = rr->normals;
    a->rgb = rr->rgb;
    if (rr->width != d->w || rr->height != d->h)
        /* A daemon from before "scale" renders the full image. */
        return client_fail(TSDF_EBAD_SIZE, "raycast reply is %ux%u, asked for %ux%u", rr->width,
                           rr->height, d->w, d->h);
    if (rr->in_ring) {
        /* Only the layout asked for lies inside the slots taken: normals
         * as asked, colour only when asked (a map without colour sends
         * none). */
        if (d->ring == NULL || rr->ring_offset != d->ring_offset ||
            rr->ring_normals != (d->q->want_normals != 0) || (rr->ring_rgb && !d->q->want_rgb))
            return client_fail(TSDF_EFORMAT,
                               "raycast reply names a ring slot or a layout not asked for");
        const uint8_t *at = client_ring_data(d->ring, rr->ring_offset);
        a->depth = at;
        a->normals = rr->ring_normals ? at + px * 4u : NULL;
        a->rgb = rr->ring_rgb ? at + tsdf_proto_raycast_rgb_offset(px, rr->ring_normals) : NULL;
    }
    if (d->q->want_normals && a->normals == NULL)
        return client_fail(TSDF_EPROTO_KEY, "raycast reply without the normals asked for");
    if (info != NULL) {
        info->width = d->w;
        info->height = d->h;
        info->has_rgb = a->rgb != NULL;
        info->version = rr->version;
    }
    return TSDF_OK;
}

/* A raycast request sent and answered: the reply (rep, m), the ring span
 * its image was asked into (sp.slot -1: none) and where the image goes.
 * raycast_finish gives the span and the reply back. */
typedef struct {
    tsdf_request q;
    raycast_dest d;
    client_ring *ring;
    client_ring_span sp;
    tsdf_reply *rep;
    nng_msg *m;
} raycast_call;

static void raycast_finish(raycast_call *k, int rc)
{
    if (k->rep != NULL)
        call_free(k->rep, k->m);
    k->rep = NULL;
    k->m = NULL;
    client_ring_release(k->ring, &k->sp, ring_answered(rc));
    k->sp.slot = -1;
}

/* Sends the raycast of p with options o (NULL: depth alone, full size) and
 * waits for its reply; on success *k holds it and its span (give both back
 * with raycast_finish), on failure nothing is held. */
static int raycast_send(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                        const tsdf_client_raycast_options *o, int timeout_ms, raycast_call *k)
{
    static const tsdf_client_raycast_options depth_only = {0, 0, 1, 0};
    if (o == NULL)
        o = &depth_only;
    memset(k, 0, sizeof *k);
    k->sp.slot = -1;
    int rc = map_request(&k->q, TSDF_MSG_RAYCAST, map);
    if (rc != TSDF_OK)
        return rc;
    tsdf_req_raycast *r = &k->q.u.raycast;
    r->width = p->width;
    r->height = p->height;
    r->K = p->K;
    memcpy(r->T_world_cam, p->T_world_cam, sizeof(r->T_world_cam));
    r->min_depth_m = p->min_depth_m;
    r->max_depth_m = p->max_depth_m;
    r->want_rgb = o->want_rgb ? 1 : 0;
    r->want_normals = o->want_normals ? 1 : 0;
    r->scale = o->scale == 0 ? 1u : o->scale;
    r->after = o->after_queued ? TSDF_AFTER_QUEUED : TSDF_AFTER_INTEGRATED;
    if (r->scale > TSDF_CLIENT_MAX_RAYCAST_SCALE || p->width / r->scale == 0 ||
        p->height / r->scale == 0)
        return client_fail(TSDF_EINVAL, "scale %u: not 1..%u, or no pixel of a %ux%u image left",
                           r->scale, TSDF_CLIENT_MAX_RAYCAST_SCALE, p->width, p->height);
    const uint64_t reply_bytes = tsdf_proto_raycast_reply_bytes(r);
    if (reply_bytes > TSDF_PROTO_MAX_MESSAGE_BYTES)
        return client_fail(TSDF_ETOO_LARGE,
                           "a %ux%u raycast reply would be %llu bytes, more than the protocol's "
                           "64 MiB (a daemon's [server] max_reply_mb may allow less): ask for a "
                           "scale, or fewer outputs",
                           r->width / r->scale, r->height / r->scale,
                           (unsigned long long)reply_bytes);
    uint32_t w, h;
    tsdf_intrinsics K_scaled;
    tsdf_proto_raycast_scaled(r, &w, &h, &K_scaled);

    /* With a ring, the image comes back in its slots rather than through
     * the socket (PROTOCOL.md 6.10); where no run of slots is free or big
     * enough, in the reply as usual. */
    k->ring = atomic_load(&c->ring);
    r->has_ring =
        client_ring_take(k->ring, tsdf_proto_raycast_request_image_bytes(r), &k->sp) == TSDF_OK;
    r->ring_token = k->sp.token;
    r->ring_offset = k->sp.offset;
    r->ring_seq = k->sp.seq;
    rc = call_alloc(c, &k->q, timeout_ms, &k->rep, &k->m);
    if (r->has_ring && ring_lost(rc)) {
        /* The daemon no longer has the ring (it restarted). */
        client_ring_break(k->ring);
        client_ring_release(k->ring, &k->sp, 1);
        k->sp.slot = -1;
        r->has_ring = 0;
        rc = call_alloc(c, &k->q, timeout_ms, &k->rep, &k->m);
    }
    k->d.q = r;
    k->d.w = w;
    k->d.h = h;
    k->d.ring = k->sp.slot >= 0 ? k->ring : NULL;
    k->d.ring_offset = k->sp.offset;
    if (rc != TSDF_OK)
        raycast_finish(k, rc);
    return rc;
}

int tsdf_client_raycast_ex(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                           const tsdf_client_raycast_options *o, tsdf_raycast_output *out,
                           tsdf_client_raycast_info *info, int timeout_ms)
{
    if (c == NULL || p == NULL || out == NULL || out->depth_m == NULL)
        return TSDF_EINVAL;
    last_message[0] = '\0';
    if (o != NULL && o->want_normals && out->normals == NULL)
        return client_fail(TSDF_EINVAL, "normals asked for, but no buffer for them");
    raycast_call k;
    int rc = raycast_send(c, map, p, o, timeout_ms, &k);
    if (rc != TSDF_OK)
        return rc;
    raycast_arrays a;
    rc = raycast_locate(&k.d, &k.rep->u.raycast, &a, info);
    if (rc == TSDF_OK) {
        const size_t px = (size_t)k.d.w * k.d.h;
        memcpy(out->depth_m, a.depth, px * 4u);
        if (k.d.q->want_normals)
            memcpy(out->normals, a.normals, px * 12u);
        if (out->rgb != NULL) {
            if (a.rgb != NULL)
                memcpy(out->rgb, a.rgb, px * 3u);
            else
                memset(out->rgb, 0, px * 3u);
        }
    }
    raycast_finish(&k, rc);
    return rc;
}

/* What a view holds until it is released: the call (its reply message and
 * ring span), and a copy of arrays that were not aligned for their floats
 * in the message. */
struct tsdf_client_view_hold {
    raycast_call k;
    void *copy;
};

static int float_aligned(const void *p)
{
    return ((uintptr_t)p & (_Alignof(float) - 1)) == 0;
}

/* The n floats at p: p itself when it is aligned for them, else a copy
 * at copy + *at (and *at moves past it). */
static const float *aligned_floats(const void *p, size_t n, uint8_t *copy, size_t *at)
{
    if (float_aligned(p))
        return p;
    float *dst = (float *)(void *)(copy + *at);
    memcpy(dst, p, n * sizeof(float));
    *at += n * sizeof(float);
    return dst;
}

int tsdf_client_raycast_view(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                             const tsdf_client_raycast_options *o, tsdf_client_view *v,
                             int timeout_ms)
{
    if (v == NULL)
        return TSDF_EINVAL;
    memset(v, 0, sizeof *v);
    if (c == NULL || p == NULL)
        return TSDF_EINVAL;
    last_message[0] = '\0';
    struct tsdf_client_view_hold *hold = calloc(1, sizeof *hold);
    if (hold == NULL)
        return TSDF_ENOMEM;
    int rc = raycast_send(c, map, p, o, timeout_ms, &hold->k);
    if (rc != TSDF_OK) {
        free(hold);
        return rc;
    }
    raycast_arrays a;
    rc = raycast_locate(&hold->k.d, &hold->k.rep->u.raycast, &a, &v->info);
    if (rc == TSDF_OK) {
        const size_t px = (size_t)hold->k.d.w * hold->k.d.h;
        /* Ring slots are aligned; a msgpack payload inside a message is
         * aligned only by chance (its header's length): copy what is not. */
        size_t need = 0, at = 0;
        if (!float_aligned(a.depth))
            need += px * 4u;
        if (hold->k.d.q->want_normals && !float_aligned(a.normals))
            need += px * 12u;
        if (need > 0 && (hold->copy = malloc(need)) == NULL)
            rc = TSDF_ENOMEM;
        if (rc == TSDF_OK) {
            v->depth_m = aligned_floats(a.depth, px, hold->copy, &at);
            v->normals = hold->k.d.q->want_normals
                             ? aligned_floats(a.normals, 3 * px, hold->copy, &at)
                             : NULL;
            v->rgb = a.rgb;
        }
    }
    if (rc != TSDF_OK) {
        raycast_finish(&hold->k, rc);
        free(hold->copy);
        free(hold);
        memset(v, 0, sizeof *v);
        return rc;
    }
    v->hold = hold;
    return TSDF_OK;
}

void tsdf_client_view_release(tsdf_client_view *v)
{
    if (v == NULL || v->hold == NULL)
        return;
    raycast_finish(&v->hold->k, TSDF_OK);
    free(v->hold->copy);
    free(v->hold);
    memset(v, 0, sizeof *v);
}

void tsdf_client_mesh_release(tsdf_mesh *m)
{
    tsdf_mesh_fini(m);
}

/* A malloc'ed copy of n bytes of a reply's payload (at least one byte, as
 * malloc(0) may return NULL, so that NULL always means failure); *ok
 * becomes 0 when it fails. */
static void *copy_payload(const void *p, size_t n, int *ok)
{
    void *q = malloc(n ? n : 1);
    if (q == NULL)
        *ok = 0;
    else if (n > 0)
        memcpy(q, p, n);
    return q;
}

int tsdf_client_mesh(tsdf_client *c, const char *map, const tsdf_mesh_params *params,
                     tsdf_mesh *out, uint64_t *version, int timeout_ms)
{
    return tsdf_client_mesh_ex(c, map, params, 0, out, version, timeout_ms);
}

int tsdf_client_mesh_ex(tsdf_client *c, const char *map, const tsdf_mesh_params *params,
                        int after_queued, tsdf_mesh *out, uint64_t *version, int timeout_ms)
{
    if (c == NULL || out == NULL)
        return TSDF_EINVAL;
    tsdf_request q;
    int rc = map_request(&q, TSDF_MSG_MESH, map);
    if (rc != TSDF_OK)
        return rc;
    q.u.mesh.after = after_queued ? TSDF_AFTER_QUEUED : TSDF_AFTER_INTEGRATED;
    if (params != NULL) {
        q.u.mesh.use_box = params->use_box ? 1 : 0;
        q.u.mesh.box = params->box;
        q.u.mesh.since_version = params->since_version;
        q.u.mesh.by_block = params->by_block ? 1 : 0;
        /* The encoder would refuse it as a bare INVAL: say what is wrong. */
        for (int k = 0; k < 3 && q.u.mesh.use_box; k++) {
            const tsdf_aabb *b = &params->box;
            if (!isfinite(b->min[k]) || !isfinite(b->max[k]))
                return client_fail(TSDF_EINVAL, "box: %c is not finite", "xyz"[k]);
            if (b->max[k] < b->min[k])
                return client_fail(TSDF_EINVAL, "box is inverted: max %c %g is below min %c %g",
                                   "xyz"[k], (double)b -> max[k], "xyz"[k], (double)b -> min[k]);
        }
    }
    tsdf_reply *rep;
    nng_msg *m;
    rc = call_alloc(c, &q, timeout_ms, &rep, &m);
    if (rc != TSDF_OK)
        return rc;
    const tsdf_rep_mesh *rm = &rep->u.mesh;
    /* A caller that asked for parts replaces its mesh part by part: a whole
     * mesh without them (from a daemon before by_block) would read as a
     * mesh of no parts, that is, as no change at all. */
    if (q.u.mesh.by_block && !rm->has_blocks) {
        call_free(rep, m);
        return client_fail(TSDF_EPROTO_KEY,
                           "the mesh reply has no parts (block_coords): the daemon is older "
                           "than by_block");
    }
    size_t vb = (size_t)rm->vertex_count * 12u, ib = (size_t)rm->triangle_count * 12u;
    size_t nb = (size_t)rm->block_count;
    int ok = 1;
    tsdf_mesh mesh;
    tsdf_mesh_init(&mesh);
    mesh.positions = copy_payload(rm->positions, vb, &ok);
    mesh.normals = copy_payload(rm->normals, vb, &ok);
    mesh.indices = copy_payload(rm->indices, ib, &ok);
    if (rm->colors != NULL)
        mesh.colors = copy_payload(rm->colors, (size_t)rm->vertex_count * 3u, &ok);
    /* As the engine fills a tsdf_mesh: the arrays of parts and of removed
     * blocks are NULL when there are none. */
    if (nb > 0) {
        mesh.block_coords = copy_payload(rm->block_coords, nb * 12u, &ok);
        mesh.block_vertex_start = copy_payload(rm->block_vertex_start, (nb + 1u) * 4u, &ok);
        mesh.block_triangle_start = copy_payload(rm->block_triangle_start, (nb + 1u) * 4u, &ok);
    }
    if (rm->removed_count > 0)
        mesh.removed_coords =
            copy_payload(rm->removed_coords, (size_t)rm->removed_count * 12u, &ok);
    if (!ok) {
        tsdf_mesh_fini(&mesh);
        call_free(rep, m);
        return TSDF_ENOMEM;
    }
    mesh.vertex_count = (size_t)rm->vertex_count;
    mesh.triangle_count = (size_t)rm->triangle_count;
    mesh.block_count = nb;
    mesh.removed_count = (size_t)rm->removed_count;
    mesh.full = rm->full;
    if (version != NULL)
        *version = rm->version;
    tsdf_mesh_fini(out);
    *out = mesh;
    call_free(rep, m);
    return TSDF_OK;
}

static int path_call(tsdf_client *c, tsdf_msg_type type, const char *map, const char *path,
                     tsdf_rep_path *out, int timeout_ms)
{
    if (c == NULL)
        return TSDF_EINVAL;
    tsdf_request *q = malloc(sizeof(*q));
    if (q == NULL)
        return TSDF_ENOMEM;
    int rc = map_request(q, type, map);
    if (rc == TSDF_OK && path != NULL) {
        size_t n = strlen(path);
        if (n == 0 || n > TSDF_PROTO_MAX_PATH_LEN)
            rc = client_fail(n ? TSDF_ETOO_LARGE : TSDF_EINVAL, "path must be 1..%u bytes",
                             TSDF_PROTO_MAX_PATH_LEN);
        else
            memcpy(q->u.path.path, path, n + 1);
    }
    if (rc == TSDF_OK)
        rc = call_copy(c, q, timeout_ms, out, sizeof(*out));
    free(q);
    return rc;
}

int tsdf_client_save(tsdf_client *c, const char *map, const char *path, tsdf_rep_path *out,
                     int timeout_ms)
{
    return path_call(c, TSDF_MSG_SAVE, map, path, out, timeout_ms);
}

int tsdf_client_load(tsdf_client *c, const char *map, const char *path, tsdf_rep_path *out,
                     int timeout_ms)
{
    return path_call(c, TSDF_MSG_LOAD, map, path, out, timeout_ms);
}

/* stats, reset, maps and ping: no arguments but the map. out/out_size: as
 * for call_copy. */
static int simple_call(tsdf_client *c, tsdf_msg_type type, const char *map, int timeout_ms,
                       void *out, size_t out_size)
{
    if (c == NULL)
        return TSDF_EINVAL;
    tsdf_request q;
    int rc = map_request(&q, type, map);
    if (rc != TSDF_OK)
        return rc;
    return call_copy(c, &q, timeout_ms, out, out_size);
}

int tsdf_client_stats(tsdf_client *c, const char *map, tsdf_rep_stats *out, int timeout_ms)
{
    if (c == NULL || out == NULL)
        return TSDF_EINVAL;
    return simple_call(c, TSDF_MSG_STATS, map, timeout_ms, out, sizeof(*out));
}

int tsdf_client_reset(tsdf_client *c, const char *map, int timeout_ms)
{
    return simple_call(c, TSDF_MSG_RESET, map, timeout_ms, NULL, 0);
}

int tsdf_client_delete(tsdf_client *c, const char *map, int timeout_ms)
{
    return simple_call(c, TSDF_MSG_DELETE, map, timeout_ms, NULL, 0);
}

int tsdf_client_maps(tsdf_client *c, tsdf_rep_maps *out, int timeout_ms)
{
    if (out == NULL)
        return TSDF_EINVAL;
    return simple_call(c, TSDF_MSG_MAPS, NULL, timeout_ms, out, sizeof(*out));
}

int tsdf_client_ping(tsdf_client *c, tsdf_rep_ping *out, int timeout_ms)
{
    return simple_call(c, TSDF_MSG_PING, NULL, timeout_ms, out, sizeof(*out));
}
