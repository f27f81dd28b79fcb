/*
 * access.c - write permissions per connection (see access.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "access.h"

#include "log.h"
#include "tls_peer.h"
#include "tsdf_error.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_FREE = 0, SLOT_OPEN, SLOT_CLOSED } slot_state;

typedef struct {
    uint32_t pipe_id;
    uint8_t state;     /* slot_state */
    uint8_t may_write; /* the decision */
    uint64_t closed_seq;
    char who[80]; /* "CN=robot1", for the log */
} pipe_slot;

struct access_policy {
    const tsdfd_config *cfg;
    dstats *ds;
    int restricted; /* [tls] writers is set: decisions are kept per pipe */
    pthread_mutex_t lock;
    pipe_slot *slots;
    size_t slot_count;
    uint64_t close_seq;
};

int access_create(const tsdfd_config *cfg, dstats *ds, access_policy **out)
{
    *out = NULL;
    access_policy *a = calloc(1, sizeof *a);
    if (a == NULL)
        return TSDF_ENOMEM;
    a->cfg = cfg;
    a->ds = ds;
    a->restricted = cfg->tls_writers_count > 0;
    if (a->restricted) {
        /* Room for every open pipe and, beyond them, the decisions of
         * closed ones whose messages may still be queued in nng. nng's pipe
         * ids are not reused until their 31-bit space wraps. */
        a->slot_count = (size_t)cfg->max_connections * 4u + 16u;
        a->slots = calloc(a->slot_count, sizeof *a->slots);
        if (a->slots == NULL) {
            free(a);
            return TSDF_ENOMEM;
        }
    }
    pthread_mutex_init(&a->lock, NULL);
    *out = a;
    return TSDF_OK;
}

void access_destroy(access_policy *a)
{
    if (a == NULL)
        return;
    pthread_mutex_destroy(&a->lock);
    free(a->slots);
    free(a);
}

int access_needs_write(tsdf_msg_type t)
{
    switch (t) {
    case TSDF_MSG_PING:
    case TSDF_MSG_MAPS:
    case TSDF_MSG_STATS:
    case TSDF_MSG_MESH:
    case TSDF_MSG_RAYCAST:
        return 0;
    default:
        return 1;
    }
}

static int is_writer(const tsdfd_config *cfg, const char *cn)
{
    for (size_t i = 0; i < cfg->tls_writers_count; i++)
        if (strcmp(cfg->tls_writers[i], cn) == 0)
            return 1;
    return 0;
}

void access_pipe_added(access_policy *a, nng_pipe p)
{
    char cn[CFG_CN_LEN];
    if (a == NULL || !a->restricted)
        return;
    tls_peer_kind k = tls_peer_cn(p, cn, sizeof cn);
    int may_write = k == TLS_PEER_NOT_TLS || (k == TLS_PEER_CN && is_writer(a->cfg, cn));
    if (k == TLS_PEER_CN)
        TSDF_LOG(TSDF_LOG_INFO, "TLS client CN=%s connected (%s)", cn,
                 may_write ? "may write" : "read-only: not in [tls] writers");
    else if (k == TLS_PEER_NO_CN)
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "tls no cn",
                             "a TLS client connected whose certificate CN cannot be read "
                             "(none, several, or this libnng cannot tell): read-only");

    pthread_mutex_lock(&a->lock);
    pipe_slot *slot = NULL, *oldest = NULL;
    for (size_t i = 0; i < a->slot_count && slot == NULL; i++) {
        pipe_slot *s = &a->slots[i];
        if (s->state == SLOT_FREE)
            slot = s;
        else if (s->state == SLOT_CLOSED && (oldest == NULL || s->closed_seq < oldest->closed_seq))
            oldest = s;
    }
    if (slot == NULL)
        slot = oldest;
    if (slot != NULL) {
        slot->pipe_id = nng_pipe_id(p);
        slot->state = SLOT_OPEN;
        slot->may_write = (uint8_t)may_write;
        snprintf(slot->who, sizeof slot->who, "%s%s", k == TLS_PEER_CN ? "CN=" : "",
                 k == TLS_PEER_CN        ? cn
                 : k == TLS_PEER_NOT_TLS ? "a local client"
                                         : "a TLS client");
    }
    pthread_mutex_unlock(&a->lock);
    /* No slot: the pipe's messages find no decision and are read-only. */
    if (slot == NULL)
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "access table full",
                             "no room to keep a connection's permissions: it is read-only");
}

void access_pipe_removed(access_policy *a, nng_pipe p)
{
    if (a == NULL || !a->restricted)
        return;
    uint32_t id = nng_pipe_id(p);
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->slot_count; i++) {
        pipe_slot *s = &a->slots[i];
        if (s->state == SLOT_OPEN && s->pipe_id == id) {
            s->state = SLOT_CLOSED;
            s->closed_seq = ++a->close_seq;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
}

/* 1 when msg's connection may write; who receives its description. */
static int may_write(access_policy *a, nng_msg *msg, char *who, size_t who_len)
{
    if (!a->restricted)
        return 1;
    uint32_t id = nng_pipe_id(nng_msg_get_pipe(msg));
    int ok = 0;
    snprintf(who, who_len, "a client whose connection is gone");
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->slot_count; i++) {
        const pipe_slot *s = &a->slots[i];
        if (s->state != SLOT_FREE && s->pipe_id == id) {
            ok = s->may_write;
            snprintf(who, who_len, "%s", s->who);
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return ok;
}

int access_refuse_request(access_policy *a, nng_msg *msg, tsdf_buf *out)
{
    tsdf_msg_type t = TSDF_MSG_NONE;
    uint64_t id = 0;
    char who[96];

    if (a == NULL || !a->restricted)
        return 0;
    /* tsdf_proto_peek reads the envelope exactly as the full decoder does
     * (a repeated "type" key is an error for both), so the type checked
     * here is the type that would run. A message it cannot read is left to
     * handle_request, which answers it with the decoder's error. */
    if (tsdf_proto_peek(nng_msg_body(msg), nng_msg_len(msg), &t, &id) != TSDF_OK ||
        !access_needs_write(t) || may_write(a, msg, who, sizeof who))
        return 0;

    TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "forbidden request",
                         "refused a %s request from %s: not in [tls] writers",
                         tsdf_msg_type_name(t), who);
    /* A refused integrate is a frame received and rejected, like every
     * other integrate that does not make it. */
    if (t == TSDF_MSG_INTEGRATE) {
        dstats_frame_received(a->ds, DS_SENSOR_UNKNOWN);
        dstats_frame_outcome(a->ds, DS_SENSOR_UNKNOWN, DS_REJ_FORBIDDEN);
    }
    tsdf_reply rep;
    tsdf_reply_init(&rep, t, id);
    tsdf_reply_set_error(&rep, TSDF_EFORBIDDEN,
                         "%s may only read (ping, maps, stats, mesh, raycast): %s needs write "
                         "access ([tls] writers)",
                         who, tsdf_msg_type_name(t));
    tsdf_buf_clear(out);
    if (tsdf_proto_encode_reply(&rep, out) != TSDF_OK)
        tsdf_buf_clear(out);
    dstats_request(a->ds, (int)t, 1);
    nng_msg_free(msg);
    return 1;
}

int access_refuse_frame(access_policy *a, nng_msg *msg)
{
    char who[96];
    if (a == NULL || may_write(a, msg, who, sizeof who))
        return 0;
    TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "forbidden frame",
                         "dropped a streamed frame from %s: not in [tls] writers", who);
    dstats_frame_received(a->ds, DS_SENSOR_UNKNOWN);
    dstats_frame_outcome(a->ds, DS_SENSOR_UNKNOWN, DS_REJ_FORBIDDEN);
    nng_msg_free(msg);
    return 1;
}
