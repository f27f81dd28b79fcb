/*
 * handlers.c - the dispatch of requests and frames (see handlers.h): decode,
 * validate, hand map work to the map's worker, wait, encode the reply. The
 * stats reply is built in stats_reply.c, save and load in persist.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "handlers.h"

#include "handlers_internal.h"

#include "log.h"
#include "proto_utf8.h"
#include "tsdf_error.h"
#include "tsdf_version.h"
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TSDFD_SERVER_NAME "tsdfd " TSDF_VERSION

/* How long one blocked push of a streamed frame waits before it looks at
 * the shutdown flag again. */
#define FRAME_PUSH_SLICE_MS 200

/* ---- replies ------------------------------------------------------------ */

/* rep encoded into a fresh message sized by its bound, at most max_bytes:
 * the bytes are written once, into the body that nng sends. */
static int encode_into_msg(const tsdf_reply *rep, size_t max_bytes, nng_msg **out)
{
    size_t bound = tsdf_proto_reply_bound(rep);
    if (bound > max_bytes)
        bound = max_bytes;
    nng_msg *m;
    if (nng_msg_alloc(&m, bound) != 0)
        return TSDF_ENOMEM;
    tsdf_buf b;
    tsdf_buf_init_fixed(&b, nng_msg_body(m), bound);
    int rc = tsdf_proto_encode_reply(rep, &b);
    if (rc != TSDF_OK) {
        nng_msg_free(m);
        return rc;
    }
    nng_msg_chop(m, bound - b.len);
    *out = m;
    return TSDF_OK;
}

nng_msg *handlers_reply_msg(const tsdf_reply *rep, size_t max_bytes)
{
    nng_msg *m = NULL;
    if (max_bytes == 0 || max_bytes > TSDF_PROTO_MAX_MESSAGE_BYTES)
        max_bytes = TSDF_PROTO_MAX_MESSAGE_BYTES;
    int rc = encode_into_msg(rep, max_bytes, &m);
    if (rc == TSDF_OK)
        return m;
    /* Fall back to an error reply of the same type, and last to one of type
     * "error" (the codec has no reply for some types, e.g. frame), so that
     * a client is always answered. */
    tsdf_msg_type types[2] = {rep->type, TSDF_MSG_ERROR};
    int status = rep->status != TSDF_OK ? rep->status : rc;
    for (int i = 0; i < 2; i++) {
        tsdf_reply err;
        tsdf_reply_init(&err, types[i], rep->id);
        if (rep->status != TSDF_OK)
            tsdf_reply_set_error(&err, status, "%s", rep->message);
        else if (rc == TSDF_ETOO_LARGE)
            tsdf_reply_set_error(&err, status,
                                 "the reply exceeds the reply limit of %zu MiB ([server] "
                                 "max_reply_mb, 64 at most)%s",
                                 max_bytes >> 20,
                                 rep->type == TSDF_MSG_MESH ? ": ask for a box, or since a version"
                                                            : "");
        else
            tsdf_reply_set_error(&err, status, "the reply could not be encoded: %s",
                                 tsdf_strerror(rc));
        if (encode_into_msg(&err, TSDF_PROTO_MAX_MESSAGE_BYTES, &m) == TSDF_OK)
            return m;
    }
    return NULL;
}

static nng_msg *reply_error(tsdf_msg_type type, uint64_t id, int status, const char *message)
{
    tsdf_reply rep;
    tsdf_reply_init(&rep, type, id);
    if (message != NULL && message[0] != '\0')
        tsdf_reply_set_error(&rep, status, "%s", message);
    else
        tsdf_reply_set_error(&rep, status, NULL);
    return handlers_reply_msg(&rep, 0);
}

/* ---- frames ------------------------------------------------------------- */

static int is_frame_type(tsdf_msg_type t)
{
    return t == TSDF_MSG_FRAME || t == TSDF_MSG_INTEGRATE;
}

/* Counts a frame that failed before it had a sensor: received + rejected. */
static void count_early_reject(daemon_ctx *d, int rc)
{
    ds_outcome o = dstats_outcome_for_error(rc);
    if (o < DS_FIRST_REJECT)
        o = DS_REJ_DECODE_ERROR;
    dstats_frame_received(d->stats, DS_SENSOR_UNKNOWN);
    dstats_frame_outcome(d->stats, DS_SENSOR_UNKNOWN, o);
}

/* A frame evicted by drop_oldest (from any map's queue when it made room in
 * the byte budget): counted, and its waiter (if any) told. Called by the
 * queue with no queue lock held. */
static void drop_victim(void *item, queue_drop_reason why, void *arg)
{
    daemon_ctx *d = arg;
    worker_job *victim = item;

    if (why == QUEUE_DROP_MEMORY) {
        dstats_frame_outcome(d->stats, victim->sensor, DS_DROP_MEMORY);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "queue bytes (drop_oldest)",
                             "queued frames at [queue] max_bytes_mb: dropped the oldest frame "
                             "(seq %llu) to make room",
                             (unsigned long long)victim->req.u.frame.seq);
    } else {
        dstats_frame_outcome(d->stats, victim->sensor, DS_DROP_QUEUE_FULL);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "queue full (drop_oldest)",
                             "queue full: dropped the oldest frame (seq %llu) of a sensor",
                             (unsigned long long)victim->req.u.frame.seq);
    }
    job_complete(victim, TSDF_EDROPPED);
}

/* The host memory a queued frame job holds: its message (the payloads point
 * into it), the aligned copy of its depth and the page-locked copy of its
 * colour, where those were made. */
static size_t job_bytes(const worker_job *j)
{
    const tsdf_frame *f = &j->req.u.frame.frame;
    size_t n = j->msg != NULL ? nng_msg_len(j->msg) : 0;
    if (j->depth_aligned != NULL)
        n += job_depth_bytes(j);
    if (j->rgb_pinned != NULL)
        n += (size_t)f->width * f->height * 3u;
    return n;
}

/*
 * Queues frame job j on m. The frame was counted as received; on failure
 * its outcome is counted here, j is freed and, when why is not NULL, why
 * says what refused it and which setting to change. timeout_ms: how long
 * a block policy push waits (negative: in slices until room or shutdown).
 */
static int queue_frame(daemon_ctx *d, dmap *m, worker_job *j, int timeout_ms, char *why_text,
                       size_t why_len)
{
    queue_drop_reason why = QUEUE_DROP_FULL;
    size_t bytes = job_bytes(j);
    int rc;

    j->t_queued_ns = worker_now_ns();
    if (timeout_ms >= 0 || d->cfg->queue_policy == CFG_POLICY_DROP_OLDEST) {
        rc = queue_push_frame_sized(&m->queue, j, j->sensor, bytes, timeout_ms < 0 ? 0 : timeout_ms,
                                    drop_victim, d, &why);
    } else {
        /* Waiting for room is the block policy at work, not a timeout: the
         * queue counts none for the slices (queue.push_timeouts used to
         * rise through a plain replay that dropped nothing). */
        rc = queue_push_frame_until(&m->queue, j, j->sensor, bytes, FRAME_PUSH_SLICE_MS,
                                    &d->stopping, drop_victim, d, &why);
    }
    /* A queue closed under the push by a delete of the map (not by the
     * daemon's stop) means the map is gone: NOT_FOUND, counted as rejected
     * no_map (PROTOCOL.md), as a frame that arrives just after the delete
     * is. */
    if (rc == TSDF_ESHUTDOWN && atomic_load(&m->deleting))
        rc = TSDF_ENOT_FOUND;
    if (rc != TSDF_OK) {
        ds_outcome o = rc == TSDF_ENOT_FOUND ? DS_REJ_NO_MAP : dstats_outcome_for_error(rc);
        /* No room in the byte budget (or a frame larger than all of it) is
         * a drop for memory, whatever code the sender is answered. */
        if ((rc == TSDF_EQUEUE_FULL || rc == TSDF_ETOO_LARGE) && why == QUEUE_DROP_MEMORY)
            o = DS_DROP_MEMORY;
        if (o == DS_DROP_MEMORY)
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "queue bytes (refused)",
                                 "map %s: a %zu-byte frame refused: queued frames at [queue] "
                                 "max_bytes_mb",
                                 m->name, bytes);
        if (why_text != NULL) {
            if (rc == TSDF_ETOO_LARGE)
                snprintf(why_text, why_len,
                         "a frame of %zu bytes queued is more than the %u MiB all queued frames "
                         "may hold ([queue] max_bytes_mb)",
                         bytes, d->cfg->queue_max_bytes_mb);
            else if (o == DS_DROP_MEMORY)
                snprintf(why_text, why_len,
                         "the frames queued in all maps hold the %u MiB of [queue] max_bytes_mb",
                         d->cfg->queue_max_bytes_mb);
            else if (rc == TSDF_EQUEUE_FULL)
                snprintf(why_text, why_len,
                         "the map's queue ([queue] length %u) stayed full for [queue] "
                         "push_timeout_ms (%u ms)",
                         d->cfg->queue_length, d->cfg->push_timeout_ms);
            else
                snprintf(why_text, why_len, "%s", tsdf_strerror(rc));
        }
        dstats_frame_outcome(d->stats, j->sensor, o);
        job_free(j);
    }
    return rc;
}

/* The outcome of a frame whose depth could not be made ready to integrate
 * (job_prepare_images): a payload that does not decode has its own reason. */
static ds_outcome depth_outcome(int rc)
{
    return rc == TSDF_EDEPTH_DECODE ? DS_REJ_DEPTH_DECODE : DS_REJ_ENGINE;
}

void handle_frame(daemon_ctx *d, nng_msg *msg)
{
    worker_job *j = job_new(JOB_FRAME, 0);
    tsdf_proto_error perr;
    dmap *m;
    int rc;

    if (j == NULL) {
        count_early_reject(d, TSDF_ENOMEM);
        nng_msg_free(msg);
        return;
    }
    memset(&perr, 0, sizeof perr);
    size_t len = nng_msg_len(msg);
    int64_t t0 = worker_now_ns();
    if (len > d->max_message_bytes)
        rc = TSDF_ETOO_LARGE;
    else
        rc = tsdf_proto_decode_request(nng_msg_body(msg), len, &j->req, &perr);
    /* The worker records it, after the frame: no statistics before. */
    j->decode_ms = (double)(worker_now_ns() - t0) / 1e6;
    if (rc == TSDF_OK && !is_frame_type(j->req.type)) {
        rc = TSDF_EPROTO_TYPE;
        snprintf(perr.message, sizeof perr.message,
                 "%s is not a frame (the frames socket takes frame messages)",
                 tsdf_msg_type_name(j->req.type));
    }
    if (rc != TSDF_OK) {
        count_early_reject(d, rc);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "bad frame message",
                             "frames socket: rejected a %zu-byte message: %s (%s)", len,
                             tsdf_errname(rc), perr.message);
        nng_msg_free(msg);
        job_free(j);
        return;
    }
    j->msg = msg;
    j->sensor = dstats_sensor_index(d->stats, &j->req.u.frame.sensor);
    dstats_frame_received(d->stats, j->sensor);
    /* Before the map lookup, so that a frame whose depth does not decode
     * creates no map. */
    rc = job_prepare_images(j, d->frame_buffers, &perr);
    if (rc != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "bad frame depth",
                             "frames socket: frame seq %llu for map '%s' refused: %s (%s)",
                             (unsigned long long)j->req.u.frame.seq, j->req.map, tsdf_errname(rc),
                             perr.message);
        dstats_frame_outcome(d->stats, j->sensor, depth_outcome(rc));
        job_free(j);
        return;
    }
    rc = maps_get(d->maps, j->req.map, 1, &m);
    if (rc != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "frame for no map", "frame for map '%s' refused: %s",
                             j->req.map, tsdf_strerror(rc));
        dstats_frame_outcome(d->stats, j->sensor, DS_REJ_NO_MAP);
        job_free(j);
        return;
    }
    queue_frame(d, m, j, -1, NULL, 0);
    maps_put(m);
}

/* ---- requests ----------------------------------------------------------- */

static int64_t ms_since(int64_t t0_ns)
{
    return (worker_now_ns() - t0_ns) / 1000000;
}

/* Sets an error reply for code rc when rc != TSDF_OK; returns rc. */
static void set_error(tsdf_reply *rep, int rc, const char *what)
{
    if (what != NULL)
        tsdf_reply_set_error(rep, rc, "%s: %s", what, tsdf_strerror(rc));
    else
        tsdf_reply_set_error(rep, rc, NULL);
}

/* The pid of the process on msg's ipc:// connection, for a request that
 * names a shared ring (PROTOCOL.md 6.10): TSDF_ENOT_FOUND when this
 * daemon has no ring socket, TSDF_EFORBIDDEN over another transport. */
static int ring_peer(daemon_ctx *d, nng_msg *msg, uint64_t *pid, char *why, size_t why_len)
{
    if (d->rings == NULL) {
        snprintf(why, why_len, "ring_token: this daemon has no ring socket ([server] ring_socket)");
        return TSDF_ENOT_FOUND;
    }
    if (nng_pipe_get_uint64(nng_msg_get_pipe(msg), NNG_OPT_IPC_PEER_PID, pid) != 0) {
        snprintf(why, why_len, "ring_token: a shared ring serves ipc:// connections only");
        return TSDF_EFORBIDDEN;
    }
    return TSDF_OK;
}

/* The message of a refused ring access (rings_read's codes). */
static void ring_refusal(int rc, uint64_t offset, uint64_t bytes, char *why, size_t why_len)
{
    if (rc == TSDF_ENOT_FOUND)
        snprintf(why, why_len, "ring_token: no such ring (never attached, or detached)");
    else if (rc == TSDF_EFORBIDDEN)
        snprintf(why, why_len, "ring_token: the ring of another process");
    else if (rc == TSDF_EINVAL)
        snprintf(why, why_len,
                 "ring_token: the ring is sealed against writing (or was sent read-only): "
                 "no raycast image can go into it");
    else if (rc == TSDF_EBAD_SIZE)
        snprintf(why, why_len,
                 "ring_offset: %" PRIu64 " + %" PRIu64 " bytes is not inside the ring", offset,
                 bytes);
    else if (rc == TSDF_ETIMEOUT)
        snprintf(why, why_len,
                 "ring_seq: below the ring's fence (the sender gave up on this request and may "
                 "have reused its slots)");
    else if (rc != TSDF_OK)
        snprintf(why, why_len, "ring_offset: the ring could not be read or written there");
}

/* The depth of a frame that names a slot of its sender's shared ring,
 * copied out of the ring into a buffer of the job's own (page-locked on
 * CUDA: the one copy the frame's depth gets), so the slot is the sender's
 * again once we reply. Only over ipc://, from the process that attached
 * the ring. */
static int ring_depth(daemon_ctx *d, worker_job *j, nng_msg *msg, char *why, size_t why_len)
{
    const tsdf_req_frame *rf = &j->req.u.frame;
    uint64_t pid = 0;
    int rc = ring_peer(d, msg, &pid, why, why_len);
    if (rc != TSDF_OK)
        return rc;
    void *p = job_depth_buffer(j, d->frame_buffers);
    if (p == NULL) {
        snprintf(why, why_len, "out of memory");
        return TSDF_ENOMEM;
    }
    const rings_ref ref = {rf->ring_token, pid, rf->ring_offset, rf->ring_seq};
    rc = rings_read(d->rings, &ref, p, rf->frame.depth_size_bytes);
    ring_refusal(rc, rf->ring_offset, rf->frame.depth_size_bytes, why, why_len);
    return rc;
}

/* A raycast that asked for its image in the sender's ring: checked before
 * the raycast runs (no work for an image that could not be delivered),
 * and after it the arrays written there, the reply only saying where. */
static int raycast_ring_check(daemon_ctx *d, const tsdf_req_raycast *rq, nng_msg *msg,
                              uint64_t *pid, tsdf_reply *rep)
{
    char why[160];
    /* rgb counted when asked for: the map may have colour. */
    const uint64_t need = tsdf_proto_raycast_request_image_bytes(rq);
    int rc = ring_peer(d, msg, pid, why, sizeof why);
    if (rc == TSDF_OK) {
        const rings_ref ref = {rq->ring_token, *pid, rq->ring_offset, rq->ring_seq};
        rc = rings_check(d->rings, &ref, need, 1);
        ring_refusal(rc, rq->ring_offset, need, why, sizeof why);
    }
    if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc, "%s", why);
    return rc;
}

/* Writes j's image into the sender's ring with pwrite: 1, or 0 with the
 * refusal in rep. */
static int raycast_ring_write(daemon_ctx *d, const tsdf_req_raycast *rq, uint64_t pid,
                              const worker_job *j, size_t px, tsdf_reply *rep)
{
    struct iovec v[3];
    int n = 0;
    v[n++] = (struct iovec){j->depth_m, px * 4u};
    if (j->normals != NULL)
        v[n++] = (struct iovec){j->normals, px * 12u};
    if (j->rgb != NULL)
        v[n++] = (struct iovec){j->rgb, px * 3u};
    const rings_ref ref = {rq->ring_token, pid, rq->ring_offset, rq->ring_seq};
    int rc = rings_write(d->rings, &ref, v, n);
    if (rc != TSDF_OK) {
        char why[160];
        ring_refusal(rc, rq->ring_offset,
                     tsdf_proto_raycast_image_bytes(px, j->normals != NULL, j->rgb != NULL), why,
                     sizeof why);
        tsdf_reply_set_error(rep, rc, "%s", why);
        return 0;
    }
    return 1;
}

static void raycast_ring_reply(daemon_ctx *d, const tsdf_req_raycast *rq, uint64_t pid,
                               const worker_job *j, tsdf_reply *rep)
{
    const size_t px = (size_t)j->out_width * j->out_height;
    /* Unless the device copied it there already (rings_lease), from the
     * job's arrays. */
    if (!j->out_in_ring && !raycast_ring_write(d, rq, pid, j, px, rep))
        return;
    tsdf_rep_raycast *rr = &rep->u.raycast;
    rr->in_ring = 1;
    rr->ring_offset = rq->ring_offset;
    rr->ring_normals = rq->want_normals != 0;
    rr->ring_rgb = j->out_rgb;
}

static void do_integrate(daemon_ctx *d, tsdf_request *req, nng_msg **msg, tsdf_reply *rep,
                         double decode_ms)
{
    worker_job *j = job_new(JOB_FRAME, 1);
    dmap *m;
    int rc;

    uint32_t sensor = dstats_sensor_index(d->stats, &req->u.frame.sensor);
    dstats_frame_received(d->stats, sensor);
    if (j == NULL) {
        dstats_frame_outcome(d->stats, sensor, DS_REJ_ENGINE);
        set_error(rep, TSDF_ENOMEM, NULL);
        return;
    }
    j->req = *req;
    j->sensor = sensor;
    j->decode_ms = decode_ms;
    /* The payloads still point into *msg, which lives until we return. As
     * for streamed frames, a depth that does not decode creates no map. */
    tsdf_proto_error perr;
    if (req->u.frame.has_ring) {
        char why[160];
        rc = ring_depth(d, j, *msg, why, sizeof why);
        if (rc != TSDF_OK) {
            dstats_frame_outcome(d->stats, sensor, DS_REJ_INVALID_FRAME);
            job_free(j);
            tsdf_reply_set_error(rep, rc, "%s", why);
            return;
        }
    }
    rc = job_prepare_images(j, d->frame_buffers, &perr);
    if (rc != TSDF_OK) {
        dstats_frame_outcome(d->stats, sensor, depth_outcome(rc));
        job_free(j);
        if (rc == TSDF_EDEPTH_DECODE && perr.message[0] != '\0')
            tsdf_reply_set_error(rep, rc, "%s", perr.message);
        else
            set_error(rep, rc, NULL);
        return;
    }
    rc = maps_get(d->maps, req->map, 1, &m);
    if (rc != TSDF_OK) {
        dstats_frame_outcome(d->stats, sensor, DS_REJ_NO_MAP);
        job_free(j);
        tsdf_reply_set_error(rep, rc, "map '%s': %s", req->map, tsdf_strerror(rc));
        return;
    }
    /* The job now owns the message its payload points into: should this
     * request time out, the worker may still read the depth after we reply. */
    j->msg = *msg;
    *msg = NULL;
    char why[256];
    rc = queue_frame(d, m, j, (int)d->cfg->push_timeout_ms, why, sizeof why);
    /* The queue holds the job (or refused it); the map itself is no
     * longer needed here. */
    maps_put(m);
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, rc, "map '%s': frame not queued: %s", req->map, why);
        return;
    }
    rc = job_wait(j, (int)d->cfg->request_timeout_ms);
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, TSDF_ETIMEOUT, "map '%s': no result within %u ms", req->map,
                             d->cfg->request_timeout_ms);
        return;
    }
    if (j->status != TSDF_OK) {
        tsdf_reply_set_error(rep, j->status, "map '%s': frame seq %" PRIu64 ": %s", req->map,
                             req->u.frame.seq, tsdf_strerror(j->status));
    } else {
        rep->u.integrate.seq = req->u.frame.seq;
        rep->u.integrate.version = j->version;
        rep->u.integrate.integrate_ms = j->integrate_ms;
    }
    job_free(j);
}

_Static_assert(JOB_IMPORT < sizeof(((daemon_ctx *)0)->queries_waiting_kind) /
                                sizeof(((daemon_ctx *)0)->queries_waiting_kind[0]),
               "daemon_ctx.queries_waiting_kind must have a slot per job_kind");

/* Takes one of n slots of *waiting; 0 when all are taken. */
static int take_slot(atomic_uint *waiting, uint32_t n)
{
    unsigned cur = atomic_load(waiting);
    do {
        if (cur >= n)
            return 0;
    } while (!atomic_compare_exchange_weak(waiting, &cur, cur + 1));
    return 1;
}

/* Admission of a query: a request context waits on a worker only while
 * neither its map nor its kind already holds its share of the contexts,
 * so that one big map or one kind of slow query (ten meshes of a huge map)
 * can never take every context and leave ping, stats and the other maps
 * unanswered. The caller releases the slots with query_done. */
static int query_admit(daemon_ctx *d, dmap *m, job_kind kind, tsdf_reply *rep)
{
    uint32_t per_map, per_kind;
    cfg_query_limits(d->cfg, &per_map, &per_kind);
    if (!take_slot(&m->queries_waiting, per_map)) {
        atomic_fetch_add(&d->queries_busy_map, 1);
        tsdf_reply_set_error(rep, TSDF_EBUSY,
                             "map '%s': %u queries already wait for it "
                             "([server] max_queries_per_map); try again",
                             m->name, per_map);
        return TSDF_EBUSY;
    }
    if (!take_slot(&d->queries_waiting_kind[kind], per_kind)) {
        atomic_fetch_sub(&m->queries_waiting, 1);
        atomic_fetch_add(&d->queries_busy_kind, 1);
        tsdf_reply_set_error(rep, TSDF_EBUSY,
                             "%u %s queries already wait ([server] max_queries_per_kind); "
                             "try again",
                             per_kind, job_kind_name(kind));
        return TSDF_EBUSY;
    }
    return TSDF_OK;
}

static void query_done(daemon_ctx *d, dmap *m, job_kind kind)
{
    atomic_fetch_sub(&m->queries_waiting, 1);
    atomic_fetch_sub(&d->queries_waiting_kind[kind], 1);
}

/* Queues query job j on m and waits up to timeout_ms for it. On TSDF_OK
 * the caller owns j again; otherwise rep holds the error reply and j is
 * gone (freed here, or the worker's to free after a timeout). */
/* 1 when j asked to run after the frames queued before it ("after":
 * "queued", PROTOCOL.md 6.9); every other query goes ahead of them. */
static int after_queued_frames(const worker_job *j)
{
    if (j->kind == JOB_RAYCAST)
        return j->req.u.raycast.after == TSDF_AFTER_QUEUED;
    if (j->kind == JOB_MESH)
        return j->req.u.mesh.after == TSDF_AFTER_QUEUED;
    return 0;
}

static int run_admitted_job(daemon_ctx *d, dmap *m, worker_job *j, uint32_t timeout_ms,
                            tsdf_reply *rep)
{
    int rc = queue_push_query_after(&m->queue, j, after_queued_frames(j));
    /* Closed by a delete of the map, not by the stop: the map is gone. */
    if (rc == TSDF_ESHUTDOWN && atomic_load(&m->deleting))
        rc = TSDF_ENOT_FOUND;
    if (rc != TSDF_OK) {
        job_free(j);
        tsdf_reply_set_error(rep, rc, "map '%s': %s", m->name, tsdf_strerror(rc));
        return rc;
    }
    rc = job_wait(j, (int)timeout_ms);
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, TSDF_ETIMEOUT, "map '%s': no result within %u ms", m->name,
                             timeout_ms);
        return TSDF_ETIMEOUT;
    }
    if (j->status != TSDF_OK) {
        rc = j->status;
        tsdf_reply_set_error(rep, rc, "map '%s': %s", m->name, tsdf_strerror(rc));
        job_free(j);
        return rc;
    }
    return TSDF_OK;
}

int handlers_run_job(daemon_ctx *d, dmap *m, worker_job *j, uint32_t timeout_ms, tsdf_reply *rep)
{
    int rc = query_admit(d, m, j->kind, rep);
    if (rc != TSDF_OK) {
        job_free(j);
        return rc;
    }
    job_kind kind = j->kind; /* j may be gone when the wait returns */
    rc = run_admitted_job(d, m, j, timeout_ms, rep);
    query_done(d, m, kind);
    return rc;
}

/* handlers_run_query; ring (a raycast's only, or NULL): its image may go
 * into the sender's ring there (worker_job.out_rings). */
static int run_query(daemon_ctx *d, dmap *m, job_kind kind, const tsdf_request *req,
                     const rings_ref *ring, tsdf_reply *rep, worker_job **jp)
{
    *jp = NULL;
    worker_job *j = job_new(kind, 1);
    if (j == NULL) {
        set_error(rep, TSDF_ENOMEM, NULL);
        return TSDF_ENOMEM;
    }
    if (req != NULL)
        j->req = *req;
    if (kind == JOB_RAYCAST) {
        if (ring != NULL && d->rings != NULL) {
            j->out_rings = d->rings;
            j->out_ref = *ring;
        }
        /* A page-locked buffer for the image, unless it is to go into a
         * ring mapped for the device (the worker allocates one itself if
         * that falls back): the frames need the page-locked memory more. */
        if (j->out_rings == NULL || !rings_mapped(d->rings))
            job_raycast_outputs(j, d->frame_buffers);
    }
    int rc = handlers_run_job(d, m, j, d->cfg->request_timeout_ms, rep);
    if (rc == TSDF_OK)
        *jp = j;
    return rc;
}

int handlers_run_query(daemon_ctx *d, dmap *m, job_kind kind, const tsdf_request *req,
                       tsdf_reply *rep, worker_job **jp)
{
    return run_query(d, m, kind, req, NULL, rep, jp);
}

static int find_map(daemon_ctx *d, const char *name, tsdf_reply *rep, dmap **m)
{
    int rc = maps_get(d->maps, name, 0, m);
    if (rc == TSDF_ENOT_FOUND)
        tsdf_reply_set_error(
            rep, rc, "no map '%s' (maps lists them; a map is made by its first frame)", name);
    else if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc, "map '%s': %s", name, tsdf_strerror(rc));
    return rc;
}

/* ---- dispatch ----------------------------------------------------------- */

void handle_request(daemon_ctx *d, nng_msg *msg, handler_result *res)
{
    int64_t t0 = worker_now_ns();
    tsdf_request *req = malloc(sizeof *req);
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_proto_error perr;
    worker_job *j = NULL;
    dmap *m = NULL; /* with a reference once find_map found it */
    double decode_ms = 0;
    int rc;

    memset(res, 0, sizeof *res);
    res->t0_ns = t0;
    if (req == NULL || rep == NULL) {
        res->reply = reply_error(TSDF_MSG_ERROR, 0, TSDF_ENOMEM, NULL);
        goto done;
    }
    memset(&perr, 0, sizeof perr);
    memset(req, 0, sizeof *req);
    size_t len = nng_msg_len(msg);
    const void *data = nng_msg_body(msg);
    if (len > d->max_message_bytes) {
        tsdf_msg_type t = TSDF_MSG_NONE;
        uint64_t id = 0;
        tsdf_proto_peek(data, len, &t, &id);
        rc = TSDF_ETOO_LARGE;
        snprintf(perr.message, sizeof perr.message,
                 "message of %zu bytes exceeds the limit of %zu MiB ([server] max_message_mb, 64 "
                 "at most)",
                 len, d->max_message_bytes >> 20);
        req->type = t;
        req->id = id;
    } else {
        rc = tsdf_proto_decode_request(data, len, req, &perr);
        decode_ms = (double)(worker_now_ns() - t0) / 1e6;
    }
    if (rc == TSDF_OK && req->type == TSDF_MSG_FRAME) {
        rc = TSDF_EPROTO_TYPE;
        snprintf(perr.message, sizeof perr.message,
                 "frame messages go to the frames (PUSH/PULL) socket; use integrate here");
    }
    if (rc != TSDF_OK) {
        tsdf_msg_type t = req->type;
        /* Answered as what it claimed to be when that is a request (a
         * malformed delete is a delete), as "error" otherwise. */
        if (!tsdf_msg_type_is_request(t))
            t = TSDF_MSG_ERROR;
        /* A malformed integrate is a frame received and rejected. */
        if (t == TSDF_MSG_INTEGRATE)
            count_early_reject(d, rc);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "bad request",
                             "request of %zu bytes (%s) refused: %s (%s%s%s)", len,
                             tsdf_msg_type_name(t), tsdf_errname(rc), perr.key,
                             perr.key[0] ? ": " : "", perr.message);
        res->reply = reply_error(t, req->id, rc, perr.message[0] ? perr.message : NULL);
        res->type = t == TSDF_MSG_ERROR ? 0 : (int)t;
        res->failed = 1;
        goto done;
    }

    tsdf_reply_init(rep, req->type, req->id);
    switch (req->type) {
    case TSDF_MSG_PING:
        snprintf(rep->u.ping.server, sizeof rep->u.ping.server, "%s", TSDFD_SERVER_NAME);
        rep->u.ping.uptime_ms = (uint64_t)ms_since(d->start_ns);
        /* Where local clients attach a ring ([server] ring_socket), so
         * that they need not be told (tsdf_client_attach_ring with NULL).
         * A path too long for the reply was too long to bind; one that is
         * not UTF-8 is not named (clients would refuse the whole reply). */
        const char *ring = rings_path(d->rings);
        if (proto_utf8_valid(ring, strlen(ring)))
            snprintf(rep->ring_socket, sizeof rep->ring_socket, "%s", ring);
        break;
    case TSDF_MSG_MAPS: {
        dmap *all[TSDF_PROTO_MAX_MAPS];
        size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
        rep->u.maps.count = (uint32_t)n;
        for (size_t i = 0; i < n; i++)
            snprintf(rep->u.maps.names[i], sizeof rep->u.maps.names[i], "%s", all[i]->name);
        maps_put_list(all, n);
        break;
    }
    case TSDF_MSG_INTEGRATE:
        do_integrate(d, req, &msg, rep, decode_ms);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_req_raycast *rq = &req->u.raycast;
        uint64_t bytes = tsdf_proto_raycast_reply_bytes(rq);
        if (bytes > d->max_reply_bytes) {
            tsdf_reply_set_error(rep, TSDF_ETOO_LARGE,
                                 "a %ux%u raycast reply (%" PRIu64
                                 " bytes) exceeds the reply limit of %zu MiB ([server] "
                                 "max_reply_mb, 64 at most): ask for a scale, or fewer outputs",
                                 rq->width / rq->scale, rq->height / rq->scale, bytes,
                                 d->max_reply_bytes >> 20);
            break;
        }
        uint64_t pid = 0;
        if (rq->has_ring && raycast_ring_check(d, rq, msg, &pid, rep) != TSDF_OK)
            break;
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        const rings_ref where = {rq->ring_token, pid, rq->ring_offset, rq->ring_seq};
        if (run_query(d, m, JOB_RAYCAST, req, rq->has_ring ? &where : NULL, rep, &j) != TSDF_OK)
            break;
        rep->u.raycast.width = j->out_width;
        rep->u.raycast.height = j->out_height;
        rep->u.raycast.version = j->version;
        if (rq->has_ring) {
            raycast_ring_reply(d, rq, pid, j, rep);
            break;
        }
        rep->u.raycast.depth_m = j->depth_m;
        rep->u.raycast.normals = j->normals;
        rep->u.raycast.rgb = j->rgb;
        break;
    }
    case TSDF_MSG_MESH:
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        if (handlers_run_query(d, m, JOB_MESH, req, rep, &j) != TSDF_OK)
            break;
        rep->u.mesh.version = j->version;
        rep->u.mesh.vertex_count = j->mesh.vertex_count;
        rep->u.mesh.triangle_count = j->mesh.triangle_count;
        rep->u.mesh.positions = j->mesh.positions;
        rep->u.mesh.normals = j->mesh.normals;
        rep->u.mesh.colors = j->mesh.colors;
        rep->u.mesh.indices = j->mesh.indices;
        /* The parts and the removed blocks travel only to a request that
         * asked for them, so the reply to any other is what it was before
         * they existed (PROTOCOL.md 6.3). */
        rep->u.mesh.has_blocks = req->u.mesh.by_block;
        rep->u.mesh.block_count = j->mesh.block_count;
        rep->u.mesh.block_coords = j->mesh.block_coords;
        rep->u.mesh.block_vertex_start = j->mesh.block_vertex_start;
        rep->u.mesh.block_triangle_start = j->mesh.block_triangle_start;
        rep->u.mesh.has_removed = req->u.mesh.since_version > 0;
        rep->u.mesh.removed_count = j->mesh.removed_count;
        rep->u.mesh.removed_coords = j->mesh.removed_coords;
        rep->u.mesh.full = j->mesh.full;
        break;
    case TSDF_MSG_STATS:
        handlers_do_stats(d, req, rep);
        break;
    case TSDF_MSG_RESET:
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        if (handlers_run_query(d, m, JOB_RESET, req, rep, &j) != TSDF_OK)
            break;
        TSDF_LOG(TSDF_LOG_INFO, "map %s: reset by a client", m->name);
        break;
    case TSDF_MSG_SAVE:
        handlers_do_save(d, req, rep);
        break;
    case TSDF_MSG_LOAD:
        handlers_do_load(d, req, rep);
        break;
    case TSDF_MSG_DELETE:
        handlers_do_delete(d, req, rep);
        break;
    default:
        tsdf_reply_set_error(rep, TSDF_EPROTO_TYPE, "type %s is not a request",
                             tsdf_msg_type_name(req->type));
        break;
    }
    res->reply = handlers_reply_msg(rep, d->max_reply_bytes);
    /* State-changing requests refresh the service status at once. */
    if (d->wake != NULL && (req->type == TSDF_MSG_SAVE || req->type == TSDF_MSG_LOAD ||
                            req->type == TSDF_MSG_RESET || req->type == TSDF_MSG_DELETE))
        d->wake(d->wake_arg);
    job_free(j); /* after encoding: the reply pointed into the job's outputs */
    maps_put(m); /* the map of a raycast, mesh or reset; NULL otherwise */
    res->type = (int)req->type;
    res->failed = rep->status != TSDF_OK;
    res->timed = 1;

done:
    if (msg != NULL)
        nng_msg_free(msg);
    free(req);
    free(rep);
}

void handlers_request_done(daemon_ctx *d, const handler_result *res)
{
    if (res->type == 0 && !res->failed)
        return; /* nothing was handled (no memory for the request) */
    dstats_request(d->stats, res->type, res->failed);
    if (res->timed)
        lat_window_add(&d->stats->lat_request[res->type],
                       (double)(worker_now_ns() - res->t0_ns) / 1e6);
}
