/*
 * handlers.c - request and frame handlers (see handlers.h).
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include "handlers.h"

#include "log.h"
#include "snapshot.h"
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

/* Encodes rep into out; when that fails (a reply beyond the size limit, no
 * memory) encodes an error reply with that code instead. */
static void encode_reply(tsdf_reply *rep, tsdf_buf *out)
{
    tsdf_buf_clear(out);
    int rc = tsdf_proto_encode_reply(rep, out);
    if (rc == TSDF_OK)
        return;
    /* Fall back to an error reply of the same type, and last to one of type
     * "error" (the codec has no reply for some types, e.g. frame), so that
     * a client is always answered. */
    tsdf_msg_type types[2] = {rep->type, TSDF_MSG_ERROR};
    int status = rep->status != TSDF_OK ? rep->status : rc;
    for (int i = 0; i < 2; i++) {
        tsdf_reply err;
        tsdf_buf_clear(out);
        tsdf_reply_init(&err, types[i], rep->id);
        if (rep->status != TSDF_OK)
            tsdf_reply_set_error(&err, status, "%s", rep->message);
        else
            tsdf_reply_set_error(&err, status, "the reply could not be encoded: %s",
                                 tsdf_strerror(rc));
        if (tsdf_proto_encode_reply(&err, out) == TSDF_OK)
            return;
    }
    tsdf_buf_clear(out);
}

static void reply_error(tsdf_buf *out, tsdf_msg_type type, uint64_t id, int status,
                        const char *message)
{
    tsdf_reply rep;
    tsdf_reply_init(&rep, type, id);
    if (message != NULL && message[0] != '\0')
        tsdf_reply_set_error(&rep, status, "%s", message);
    else
        tsdf_reply_set_error(&rep, status, NULL);
    encode_reply(&rep, out);
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
 * into it) and the aligned copy of its depth, if one was made. */
static size_t job_bytes(const worker_job *j)
{
    const tsdf_frame *f = &j->req.u.frame.frame;
    size_t n = j->msg != NULL ? nng_msg_len(j->msg) : 0;
    if (j->depth_aligned != NULL)
        n += (size_t)f->width * f->height * (f->depth_format == TSDF_DEPTH_F32 ? 4u : 2u);
    return n;
}

/*
 * Queues frame job j on m. The frame was counted as received; on failure
 * its outcome is counted here and j is freed. timeout_ms: how long a block
 * policy push waits (negative: in slices until room or shutdown).
 */
static int queue_frame(daemon_ctx *d, dmap *m, worker_job *j, int timeout_ms)
{
    queue_drop_reason why = QUEUE_DROP_FULL;
    size_t bytes = job_bytes(j);
    int rc;

    j->t_queued_ns = worker_now_ns();
    if (timeout_ms >= 0 || d->cfg->queue_policy == CFG_POLICY_DROP_OLDEST) {
        rc = queue_push_frame_sized(&m->queue, j, j->sensor, bytes, timeout_ms < 0 ? 0 : timeout_ms,
                                    drop_victim, d, &why);
    } else {
        for (;;) {
            rc = queue_push_frame_sized(&m->queue, j, j->sensor, bytes, FRAME_PUSH_SLICE_MS,
                                        drop_victim, d, &why);
            if (rc != TSDF_EQUEUE_FULL || atomic_load(&d->stopping))
                break;
        }
        if (rc == TSDF_EQUEUE_FULL)
            rc = TSDF_ESHUTDOWN; /* gave up only because the daemon stops */
    }
    if (rc != TSDF_OK) {
        ds_outcome o = dstats_outcome_for_error(rc);
        /* No room in the byte budget (or a frame larger than all of it) is
         * a drop for memory, whatever code the sender is answered. */
        if ((rc == TSDF_EQUEUE_FULL || rc == TSDF_ETOO_LARGE) && why == QUEUE_DROP_MEMORY)
            o = DS_DROP_MEMORY;
        if (o == DS_DROP_MEMORY)
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "queue bytes (refused)",
                                 "map %s: a %zu-byte frame refused: queued frames at [queue] "
                                 "max_bytes_mb",
                                 m->name, bytes);
        dstats_frame_outcome(d->stats, j->sensor, o);
        job_free(j);
    }
    return rc;
}

/* The outcome of a frame whose depth could not be made ready to integrate
 * (job_prepare_depth): a payload that does not decode has its own reason. */
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
    lat_window_add(&d->stats->lat_stage[DS_STAGE_DECODE], (double)(worker_now_ns() - t0) / 1e6);
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
    rc = job_prepare_depth(j, &perr);
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
    queue_frame(d, m, j, -1);
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

static void do_integrate(daemon_ctx *d, tsdf_request *req, nng_msg **msg, tsdf_reply *rep,
                         tsdf_buf *out)
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
    /* The payloads still point into *msg, which lives until we return. As
     * for streamed frames, a depth that does not decode creates no map. */
    tsdf_proto_error perr;
    rc = job_prepare_depth(j, &perr);
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
    rc = queue_frame(d, m, j, (int)d->cfg->push_timeout_ms);
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, rc, "map '%s': frame not queued: %s", req->map,
                             tsdf_strerror(rc));
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
    (void)out;
    job_free(j);
}

/* Runs a query job on map m and waits for it. On TSDF_OK the caller owns *jp
 * (free it after encoding); otherwise rep holds the error. */
static int run_query(daemon_ctx *d, dmap *m, job_kind kind, const tsdf_request *req,
                     tsdf_reply *rep, worker_job **jp)
{
    worker_job *j = job_new(kind, 1);
    int rc;

    *jp = NULL;
    if (j == NULL) {
        set_error(rep, TSDF_ENOMEM, NULL);
        return TSDF_ENOMEM;
    }
    if (req != NULL)
        j->req = *req;
    rc = queue_push_query(&m->queue, j);
    if (rc != TSDF_OK) {
        job_free(j);
        tsdf_reply_set_error(rep, rc, "map '%s': %s", m->name, tsdf_strerror(rc));
        return rc;
    }
    rc = job_wait(j, (int)d->cfg->request_timeout_ms);
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, TSDF_ETIMEOUT, "map '%s': no result within %u ms", m->name,
                             d->cfg->request_timeout_ms);
        return TSDF_ETIMEOUT;
    }
    if (j->status != TSDF_OK) {
        rc = j->status;
        tsdf_reply_set_error(rep, rc, "map '%s': %s", m->name, tsdf_strerror(rc));
        job_free(j);
        return rc;
    }
    *jp = j;
    return TSDF_OK;
}

static int find_map(daemon_ctx *d, const char *name, tsdf_reply *rep, dmap **m)
{
    int rc = maps_get(d->maps, name, 0, m);
    if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc, "map '%s': %s", name, tsdf_strerror(rc));
    return rc;
}

/* ---- stats -------------------------------------------------------------- */

static void put_i(tsdf_rep_stats *s, const char *key, int64_t v)
{
    if (s->extra_count >= TSDF_PROTO_MAX_STATS_EXTRA || strlen(key) > TSDF_PROTO_MAX_STATS_KEY_LEN)
        return;
    tsdf_stat_entry *e = &s->extra[s->extra_count++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->i = v;
}

static void put_f(tsdf_rep_stats *s, const char *key, double v)
{
    if (s->extra_count >= TSDF_PROTO_MAX_STATS_EXTRA || strlen(key) > TSDF_PROTO_MAX_STATS_KEY_LEN)
        return;
    tsdf_stat_entry *e = &s->extra[s->extra_count++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->is_float = 1;
    e->f = v;
}

static void put_latency(tsdf_rep_stats *s, const char *name, lat_window *w)
{
    lat_summary ls;
    char key[64];
    lat_window_summary(w, &ls);
    snprintf(key, sizeof key, "latency.%s.count", name);
    put_i(s, key, (int64_t)ls.count);
    if (ls.count == 0)
        return;
    snprintf(key, sizeof key, "latency.%s.p50_ms", name);
    put_f(s, key, ls.p50_ms);
    snprintf(key, sizeof key, "latency.%s.p99_ms", name);
    put_f(s, key, ls.p99_ms);
    snprintf(key, sizeof key, "latency.%s.max_ms", name);
    put_f(s, key, ls.max_ms);
    snprintf(key, sizeof key, "latency.%s.mean_ms", name);
    put_f(s, key, ls.sum_ms / (double)ls.count);
}

/* The longest sensor name that fits the longest per-sensor stats key,
 * "sensor.<name>.integrated", within TSDF_PROTO_MAX_STATS_KEY_LEN. */
#define STATS_SENSOR_LABEL_MAX (TSDF_PROTO_MAX_STATS_KEY_LEN - (sizeof "sensor..integrated" - 1))

/* The daemon's counters as "daemon" entries of a stats reply. m may be NULL
 * (no such map): then the queue entries are left out. snap: the counters the
 * map's worker read together with the engine's statistics (JOB_STATS), so
 * that the reply is one moment's picture; NULL (no map) reads them now. */
static void fill_daemon_stats(daemon_ctx *d, dmap *m, const job_counters *snap, tsdf_rep_stats *s)
{
    ds_totals t;
    char key[96];

    if (snap != NULL)
        t = snap->totals;
    else
        dstats_get_totals(d->stats, &t);
    put_i(s, "frames.received", (int64_t)t.received);
    put_i(s, "frames.integrated", (int64_t)t.integrated);
    put_i(s, "frames.dropped", (int64_t)t.dropped);
    put_i(s, "frames.rejected", (int64_t)t.rejected);
    put_i(s, "frames.in_flight", (int64_t)(t.received - t.integrated - t.dropped - t.rejected));
    for (int o = DS_FIRST_DROP; o < DS_FIRST_REJECT; o++) {
        snprintf(key, sizeof key, "dropped.%s", dstats_outcome_name((ds_outcome)o));
        put_i(s, key, (int64_t)t.outcome[o]);
    }
    for (int o = DS_FIRST_REJECT; o < DS_OUTCOME_COUNT; o++) {
        snprintf(key, sizeof key, "rejected.%s", dstats_outcome_name((ds_outcome)o));
        put_i(s, key, (int64_t)t.outcome[o]);
    }
    if (m != NULL) {
        queue_stats q;
        uint64_t map_integrated;
        if (snap != NULL) {
            q = snap->queue;
            map_integrated = snap->map_frames_integrated;
        } else {
            queue_get_stats(&m->queue, &q);
            map_integrated = atomic_load(&m->frames_done);
        }
        put_i(s, "queue.depth", (int64_t)q.depth);
        put_i(s, "queue.depth_max", (int64_t)q.depth_max);
        put_i(s, "queue.capacity", (int64_t)d->cfg->queue_length);
        put_i(s, "queue.dropped_oldest", (int64_t)q.dropped_oldest);
        put_i(s, "queue.push_timeouts", (int64_t)q.push_timeouts);
        put_i(s, "queue.map_bytes", (int64_t)q.bytes);
        put_i(s, "queue.dropped_memory", (int64_t)q.dropped_memory);
        put_i(s, "queue.refused_memory", (int64_t)q.refused_memory);
        put_i(s, "map.frames_integrated", (int64_t)map_integrated);
    }
    /* Bytes held by the frames queued in every map (the [queue] max_bytes_mb
     * budget), read with the counters above when the worker took them. */
    put_i(s, "queue.bytes",
          (int64_t)(snap != NULL ? snap->queue_bytes : queue_budget_bytes(&d->maps->budget)));
    put_i(s, "queue.max_bytes", (int64_t)d->maps->budget.limit_bytes);
    put_i(s, "connections.open", (int64_t)atomic_load(&d->stats->conns_open));
    put_i(s, "connections.refused", (int64_t)atomic_load(&d->stats->conns_refused));
    /* The volume memory of every map together (the [volume] memory_budget_mb
     * budget) and the frames it refused (counted as rejected.capacity too). */
    volume_budget *vb = &d->maps->vbudget;
    put_i(s, "volume.memory_bytes",
          (int64_t)(snap != NULL ? snap->volume_bytes : atomic_load(&vb->used_bytes)));
    put_i(s, "volume.memory_budget_bytes", (int64_t)vb->limit_bytes);
    put_i(s, "volume.budget_refused_frames",
          (int64_t)(snap != NULL ? snap->budget_refused : atomic_load(&vb->refused_frames)));
    dmap *all[TSDF_PROTO_MAX_MAPS];
    put_i(s, "maps.count", (int64_t)maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS));
    uint64_t reqs = 0, errs = 0;
    for (int i = 0; i < DS_MSG_TYPES; i++) {
        reqs += t.requests[i];
        errs += t.request_errors[i];
    }
    put_i(s, "requests.total", (int64_t)reqs);
    put_i(s, "requests.errors", (int64_t)errs);
    put_i(s, "uptime_ms", ms_since(d->start_ns));
    put_latency(s, "integrate", &d->stats->lat_integrate);
    put_latency(s, "queue_wait", &d->stats->lat_queue_wait);
    put_latency(s, "request.integrate", &d->stats->lat_request[TSDF_MSG_INTEGRATE]);
    put_latency(s, "request.raycast", &d->stats->lat_request[TSDF_MSG_RAYCAST]);
    put_latency(s, "request.mesh", &d->stats->lat_request[TSDF_MSG_MESH]);

    /* Per sensor, as far as the reply's entry limit allows; the count says
     * how many there are, so a reader knows when the list was cut. */
    put_i(s, "sensors.count", (int64_t)t.sensor_count);
    put_i(s, "sensors.overflow_frames", (int64_t)t.sensors_overflow);
    for (size_t i = 0; i < t.sensor_count; i++) {
        ds_sensor sn;
        if (!dstats_sensor_at(d->stats, i, &sn))
            break;
        if (sn.received == 0)
            continue;
        if (s->extra_count + 4 > TSDF_PROTO_MAX_STATS_EXTRA)
            break;
        uint64_t dropped = 0, rejected = 0;
        for (int o = DS_FIRST_DROP; o < DS_FIRST_REJECT; o++)
            dropped += sn.outcome[o];
        for (int o = DS_FIRST_REJECT; o < DS_OUTCOME_COUNT; o++)
            rejected += sn.outcome[o];
        /* Keys are at most TSDF_PROTO_MAX_STATS_KEY_LEN bytes, sensor names
         * up to 64: a long name is cut to its start plus "~<index>" (unique
         * per sensor) rather than its counters silently missing from the
         * reply. The metrics carry the full name. */
        char label[TSDF_PROTO_MAX_STATS_KEY_LEN + 1];
        if (strlen(sn.name) <= STATS_SENSOR_LABEL_MAX)
            snprintf(label, sizeof label, "%.*s", (int)STATS_SENSOR_LABEL_MAX, sn.name);
        else
            snprintf(label, sizeof label, "%.20s~%zu", sn.name, i);
        snprintf(key, sizeof key, "sensor.%s.received", label);
        put_i(s, key, (int64_t)sn.received);
        snprintf(key, sizeof key, "sensor.%s.integrated", label);
        put_i(s, key, (int64_t)sn.outcome[DS_INTEGRATED]);
        snprintf(key, sizeof key, "sensor.%s.dropped", label);
        put_i(s, key, (int64_t)dropped);
        snprintf(key, sizeof key, "sensor.%s.rejected", label);
        put_i(s, key, (int64_t)rejected);
    }
}

static void do_stats(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    dmap *m = NULL;
    worker_job *j = NULL;
    job_counters snap;

    memset(&snap, 0, sizeof snap);

    /* Stats of an absent map still carry the daemon's counters: a monitor
     * must see drops even before the first frame made a map. */
    if (maps_get(d->maps, req->map, 0, &m) == TSDF_OK) {
        if (run_query(d, m, JOB_STATS, req, rep, &j) != TSDF_OK)
            return;
        rep->u.stats.has_engine = 1;
        rep->u.stats.engine = j->vstats;
        rep->u.stats.timeline_count = (uint32_t)j->timeline_count;
        memcpy(rep->u.stats.timeline, j->timeline,
               j->timeline_count * sizeof rep->u.stats.timeline[0]);
        /* The worker's counters, not a fresh read: by now it may have
         * integrated the next queued frame, which the engine's numbers
         * above do not include. */
        snap = j->counters;
        job_free(j);
    }
    fill_daemon_stats(d, m, m != NULL ? &snap : NULL, &rep->u.stats);
}

/* ---- snapshots ---------------------------------------------------------- */

/* Resolves a client's path inside the state dir: relative paths are taken
 * from there, absolute ones must lie below it, ".." is refused. A client
 * may thus not make the daemon write or read files elsewhere. */
/* TSDF_OK when path, with symbolic links resolved, lies inside dir: the
 * deepest ancestor of path that exists (path itself when it exists) must
 * resolve to dir or below it, so a link planted in the state directory
 * cannot lead a save or load elsewhere. */
static int inside_real_dir(const char *dir, const char *path)
{
    char real_dir[PATH_MAX], probe[PATH_MAX], real[PATH_MAX];
    if (realpath(dir, real_dir) == NULL)
        return TSDF_EIO;
    if ((size_t)snprintf(probe, sizeof probe, "%s", path) >= sizeof probe)
        return TSDF_ETOO_LARGE;
    while (realpath(probe, real) == NULL) {
        char *slash = strrchr(probe, '/');
        if (errno != ENOENT || slash == NULL || slash == probe)
            return TSDF_EINVAL;
        *slash = '\0';
    }
    size_t n = strlen(real_dir);
    if (strncmp(real, real_dir, n) != 0 || (real[n] != '\0' && real[n] != '/' && n > 1))
        return TSDF_EINVAL;
    return TSDF_OK;
}

static int resolve_path(daemon_ctx *d, const char *path, char *out, size_t len)
{
    const char *dir = d->cfg->state_dir;
    size_t dl = strlen(dir);

    if (strstr(path, "..") != NULL)
        return TSDF_EINVAL;
    if (path[0] == '/') {
        if (strncmp(path, dir, dl) != 0 || (path[dl] != '/' && dir[dl - 1] != '/'))
            return TSDF_EINVAL;
        if ((size_t)snprintf(out, len, "%s", path) >= len)
            return TSDF_ETOO_LARGE;
    } else if ((size_t)snprintf(out, len, "%s/%s", dir, path) >= len) {
        return TSDF_ETOO_LARGE;
    }
    return inside_real_dir(dir, out);
}

/* Exports every map (in parallel, each by its worker) and writes one
 * snapshot: to the client's file when file is not NULL, else under the
 * daemon's own next name in dir, keeping the newest snapshot_keep files. */
static int save_maps(daemon_ctx *d, const char *dir, const char *file, char *path_out,
                     size_t path_len)
{
    dmap *all[TSDF_PROTO_MAX_MAPS];
    worker_job *jobs[TSDF_PROTO_MAX_MAPS];
    snap_map *sm = NULL;
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    int rc = TSDF_OK;

    memset(jobs, 0, sizeof jobs);
    sm = calloc(n ? n : 1, sizeof *sm);
    if (sm == NULL)
        return TSDF_ENOMEM;
    /* Queue every export first so the maps export in parallel. */
    for (size_t i = 0; i < n && rc == TSDF_OK; i++) {
        jobs[i] = job_new(JOB_EXPORT, 1);
        if (jobs[i] == NULL) {
            rc = TSDF_ENOMEM;
            break;
        }
        rc = queue_push_query(&all[i]->queue, jobs[i]);
        if (rc != TSDF_OK) {
            job_free(jobs[i]);
            jobs[i] = NULL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (jobs[i] == NULL)
            continue;
        if (job_wait(jobs[i], (int)d->cfg->request_timeout_ms) != TSDF_OK) {
            jobs[i] = NULL; /* the worker frees it */
            if (rc == TSDF_OK)
                rc = TSDF_ETIMEOUT;
            continue;
        }
        if (jobs[i]->status != TSDF_OK && rc == TSDF_OK)
            rc = jobs[i]->status;
        snprintf(sm[i].name, sizeof sm[i].name, "%s", all[i]->name);
        sm[i].params = jobs[i]->params;
        sm[i].blocks = jobs[i]->blocks;
        sm[i].version = jobs[i]->version;
    }
    if (rc == TSDF_OK && file != NULL) {
        /* keep is not applied: the file's directory may hold the daemon's
         * own snapshots too, and an explicit save must not prune them. */
        rc = snap_write_file(file, sm, n);
        if (rc == TSDF_OK)
            snprintf(path_out, path_len, "%s", file);
    } else if (rc == TSDF_OK) {
        rc = snap_save(dir, sm, n, d->cfg->snapshot_keep, path_out, path_len);
    }
    for (size_t i = 0; i < n; i++)
        job_free(jobs[i]); /* frees the block sets sm[] borrowed */
    free(sm);
    return rc;
}

int handlers_save_all(daemon_ctx *d, const char *dir, char *path_out, size_t path_len)
{
    return save_maps(d, dir ? dir : d->cfg->state_dir, NULL, path_out, path_len);
}

int handlers_load(daemon_ctx *d, const char *path, const char *only_map, char *path_out,
                  size_t path_len, uint64_t *version_out)
{
    snap_map *sm = NULL;
    size_t n = 0;
    int rc;
    char found[PATH_MAX];

    if (version_out != NULL)
        *version_out = 0;
    if (path != NULL) {
        rc = snap_read(path, &sm, &n);
        snprintf(found, sizeof found, "%s", path);
    } else {
        rc = snap_find_latest_valid(d->cfg->state_dir, found, sizeof found, &sm, &n);
    }
    if (rc != TSDF_OK)
        return rc;
    int loaded = 0;
    for (size_t i = 0; i < n && rc == TSDF_OK; i++) {
        if (only_map != NULL && strcmp(sm[i].name, only_map) != 0)
            continue;
        dmap *m;
        rc = maps_get_with(d->maps, sm[i].name, &sm[i].params, &m);
        if (rc != TSDF_OK)
            break;
        worker_job *j = job_new(JOB_IMPORT, 1);
        if (j == NULL) {
            rc = TSDF_ENOMEM;
            break;
        }
        /* The job takes the block set; the snapshot's copy is emptied. */
        j->blocks = sm[i].blocks;
        tsdf_block_set_init(&sm[i].blocks);
        j->params = sm[i].params;
        rc = queue_push_query(&m->queue, j);
        if (rc != TSDF_OK) {
            job_free(j);
            break;
        }
        if (job_wait(j, (int)d->cfg->request_timeout_ms) != TSDF_OK) {
            rc = TSDF_ETIMEOUT;
            break;
        }
        rc = j->status;
        if (rc == TSDF_OK && version_out != NULL)
            *version_out = j->version;
        job_free(j);
        if (rc == TSDF_OK) {
            loaded++;
            TSDF_LOG(TSDF_LOG_INFO, "map %s: loaded from %s", m->name, found);
        }
    }
    snap_maps_free(sm, n);
    if (rc == TSDF_OK && only_map != NULL && loaded == 0)
        rc = TSDF_ENOT_FOUND;
    if (rc == TSDF_OK && path_out != NULL)
        snprintf(path_out, path_len, "%s", found);
    return rc;
}

static void do_save(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    char file[PATH_MAX];
    int rc;

    if (req->u.path.path[0] != '\0') {
        const char *slash = strrchr(req->u.path.path, '/');
        const char *base = slash ? slash + 1 : req->u.path.path;
        /* The daemon restores and prunes its snapshots by name: a client's
         * file under such a name could pin every later restart to it. */
        if (snap_name_is_reserved(base)) {
            tsdf_reply_set_error(rep, TSDF_EINVAL,
                                 "save: the name '%.64s' is reserved for the daemon's own "
                                 "snapshots (snap-*.tsdfsnap, .snap-*); choose another",
                                 base);
            return;
        }
        rc = resolve_path(d, req->u.path.path, file, sizeof file);
        if (rc == TSDF_OK && strlen(file) >= sizeof rep->u.path.path)
            rc = TSDF_ETOO_LARGE;
        if (rc == TSDF_OK)
            rc = save_maps(d, NULL, file, rep->u.path.path, sizeof rep->u.path.path);
    } else {
        rc = handlers_save_all(d, NULL, rep->u.path.path, sizeof rep->u.path.path);
    }
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, rc, "save: %s", tsdf_strerror(rc));
        return;
    }
    dmap *m;
    if (maps_get(d->maps, req->map, 0, &m) == TSDF_OK)
        rep->u.path.version = atomic_load(&m->version);
    TSDF_LOG(TSDF_LOG_INFO, "saved a snapshot to %s", rep->u.path.path);
}

static void do_load(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    char file[PATH_MAX];
    int rc = TSDF_OK;

    if (req->u.path.path[0] != '\0')
        rc = resolve_path(d, req->u.path.path, file, sizeof file);
    if (rc == TSDF_OK)
        rc = handlers_load(d, req->u.path.path[0] ? file : NULL, req->map, rep->u.path.path,
                           sizeof rep->u.path.path, &rep->u.path.version);
    if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc, "load of map '%s': %s", req->map, tsdf_strerror(rc));
}

/* ---- dispatch ----------------------------------------------------------- */

void handle_request(daemon_ctx *d, nng_msg *msg, tsdf_buf *out)
{
    int64_t t0 = worker_now_ns();
    tsdf_request *req = malloc(sizeof *req);
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_proto_error perr;
    worker_job *j = NULL;
    dmap *m;
    int rc;

    tsdf_buf_clear(out);
    if (req == NULL || rep == NULL) {
        reply_error(out, TSDF_MSG_ERROR, 0, TSDF_ENOMEM, NULL);
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
        snprintf(perr.message, sizeof perr.message, "message of %zu bytes exceeds the limit of %zu",
                 len, d->max_message_bytes);
        req->type = t;
        req->id = id;
    } else {
        rc = tsdf_proto_decode_request(data, len, req, &perr);
        if (req->type == TSDF_MSG_INTEGRATE)
            lat_window_add(&d->stats->lat_stage[DS_STAGE_DECODE],
                           (double)(worker_now_ns() - t0) / 1e6);
    }
    if (rc == TSDF_OK && req->type == TSDF_MSG_FRAME) {
        rc = TSDF_EPROTO_TYPE;
        snprintf(perr.message, sizeof perr.message,
                 "frame messages go to the frames (PUSH/PULL) socket; use integrate here");
    }
    if (rc != TSDF_OK) {
        tsdf_msg_type t = req->type;
        if (t <= TSDF_MSG_NONE || t >= TSDF_MSG_ERROR)
            t = TSDF_MSG_ERROR;
        /* A malformed integrate is a frame received and rejected. */
        if (t == TSDF_MSG_INTEGRATE)
            count_early_reject(d, rc);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "bad request",
                             "request of %zu bytes (%s) refused: %s (%s%s%s)", len,
                             tsdf_msg_type_name(t), tsdf_errname(rc), perr.key,
                             perr.key[0] ? ": " : "", perr.message);
        reply_error(out, t, req->id, rc, perr.message[0] ? perr.message : NULL);
        dstats_request(d->stats, t == TSDF_MSG_ERROR ? 0 : (int)t, 1);
        goto done;
    }

    tsdf_reply_init(rep, req->type, req->id);
    switch (req->type) {
    case TSDF_MSG_PING:
        snprintf(rep->u.ping.server, sizeof rep->u.ping.server, "%s", TSDFD_SERVER_NAME);
        rep->u.ping.uptime_ms = (uint64_t)ms_since(d->start_ns);
        break;
    case TSDF_MSG_MAPS: {
        dmap *all[TSDF_PROTO_MAX_MAPS];
        size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
        rep->u.maps.count = (uint32_t)n;
        for (size_t i = 0; i < n; i++)
            snprintf(rep->u.maps.names[i], sizeof rep->u.maps.names[i], "%s", all[i]->name);
        break;
    }
    case TSDF_MSG_INTEGRATE:
        do_integrate(d, req, &msg, rep, out);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_req_raycast *rq = &req->u.raycast;
        uint64_t bytes = (uint64_t)rq->width * rq->height * (4u + 12u + (rq->want_rgb ? 3u : 0u));
        if (bytes + 4096 > d->max_message_bytes) {
            tsdf_reply_set_error(rep, TSDF_ETOO_LARGE,
                                 "a %ux%u raycast reply (%" PRIu64 " bytes) exceeds the limit",
                                 rq->width, rq->height, bytes);
            break;
        }
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        if (run_query(d, m, JOB_RAYCAST, req, rep, &j) != TSDF_OK)
            break;
        rep->u.raycast.width = rq->width;
        rep->u.raycast.height = rq->height;
        rep->u.raycast.depth_m = j->depth_m;
        rep->u.raycast.normals = j->normals;
        rep->u.raycast.rgb = j->rgb;
        break;
    }
    case TSDF_MSG_MESH:
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        if (run_query(d, m, JOB_MESH, req, rep, &j) != TSDF_OK)
            break;
        rep->u.mesh.version = j->version;
        rep->u.mesh.vertex_count = j->mesh.vertex_count;
        rep->u.mesh.triangle_count = j->mesh.triangle_count;
        rep->u.mesh.positions = j->mesh.positions;
        rep->u.mesh.normals = j->mesh.normals;
        rep->u.mesh.colors = j->mesh.colors;
        rep->u.mesh.indices = j->mesh.indices;
        break;
    case TSDF_MSG_STATS:
        do_stats(d, req, rep);
        break;
    case TSDF_MSG_RESET:
        if (find_map(d, req->map, rep, &m) != TSDF_OK)
            break;
        if (run_query(d, m, JOB_RESET, req, rep, &j) != TSDF_OK)
            break;
        TSDF_LOG(TSDF_LOG_INFO, "map %s: reset by a client", m->name);
        break;
    case TSDF_MSG_SAVE:
        do_save(d, req, rep);
        break;
    case TSDF_MSG_LOAD:
        do_load(d, req, rep);
        break;
    default:
        tsdf_reply_set_error(rep, TSDF_EPROTO_TYPE, "type %s is not a request",
                             tsdf_msg_type_name(req->type));
        break;
    }
    encode_reply(rep, out);
    /* State-changing requests refresh the service status at once. */
    if (d->wake != NULL &&
        (req->type == TSDF_MSG_SAVE || req->type == TSDF_MSG_LOAD || req->type == TSDF_MSG_RESET))
        d->wake(d->wake_arg);
    job_free(j); /* after encoding: the reply pointed into the job's outputs */
    dstats_request(d->stats, (int)req->type, rep->status != TSDF_OK);
    lat_window_add(&d->stats->lat_request[req->type], (double)(worker_now_ns() - t0) / 1e6);

done:
    if (msg != NULL)
        nng_msg_free(msg);
    free(req);
    free(rep);
}

void handlers_status_line(daemon_ctx *d, char *out, size_t len)
{
    ds_totals t;
    dmap *all[TSDF_PROTO_MAX_MAPS];
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    size_t depth = 0;

    dstats_get_totals(d->stats, &t);
    for (size_t i = 0; i < n; i++) {
        queue_stats q;
        queue_get_stats(&all[i]->queue, &q);
        depth += q.depth;
    }
    snprintf(out, len,
             "maps %zu, frames received %" PRIu64 " integrated %" PRIu64 " dropped %" PRIu64
             " rejected %" PRIu64 ", queued %zu",
             n, t.received, t.integrated, t.dropped, t.rejected, depth);
}
