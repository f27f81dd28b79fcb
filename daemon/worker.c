/*
 * worker.c - one integration thread per map (see worker.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "worker.h"

#include "dstats.h"
#include "evict.h"
#include "log.h"
#include "maps.h"
#include "tsdf_depth_codec.h"
#include "tsdf_error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long one pop waits before the loop looks at its flags again. */
#define WORKER_POP_SLICE_MS 200

/* How often a stop looks at a draining queue or an exiting worker. */
#define WORKER_STOP_POLL_MS 5

int64_t worker_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *job_kind_name(job_kind k)
{
    static const char *const names[] = {"frame", "raycast", "mesh",  "stats",
                                        "reset", "export",  "import"};
    if ((unsigned)k >= sizeof names / sizeof names[0])
        return "unknown";
    return names[k];
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

worker_job *job_new(job_kind kind, int has_waiter)
{
    worker_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->kind = kind;
    tsdf_mesh_init(&j->mesh);
    tsdf_block_set_init(&j->blocks);
    tsdf_block_set_init(&j->spilled);
    if (has_waiter) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (pthread_mutex_init(&j->lock, NULL) != 0) {
            pthread_condattr_destroy(&ca);
            free(j);
            return NULL;
        }
        if (pthread_cond_init(&j->cond, &ca) != 0) {
            pthread_condattr_destroy(&ca);
            pthread_mutex_destroy(&j->lock);
            free(j);
            return NULL;
        }
        pthread_condattr_destroy(&ca);
        j->has_waiter = 1;
    }
    return j;
}

/* Frees an image buffer to the pool it came from, or the heap (from NULL). */
static void image_free(frame_pool *from, void *p)
{
    if (from != NULL)
        frame_pool_put(from, p);
    else
        free(p);
}

/* Copies a frame's colour image into a page-locked buffer of pool, so that
 * the backend uploads it from there too; when the pool has no room it
 * stays in the message (the backend then stages it). */
static void pin_rgb(worker_job *j, frame_pool *pool)
{
    tsdf_frame *f = &j->req.u.frame.frame;
    if (pool == NULL || f->rgb == NULL || j->rgb_pinned != NULL)
        return;
    const size_t bytes = (size_t)f->width * f->height * 3u;
    void *p = frame_pool_get(pool, bytes);
    if (p == NULL)
        return;
    memcpy(p, f->rgb, bytes);
    j->rgb_pinned = p;
    j->rgb_pool = pool;
    f->rgb = p;
}

void job_free(worker_job *j)
{
    if (j == NULL)
        return;
    if (j->has_waiter) {
        pthread_cond_destroy(&j->cond);
        pthread_mutex_destroy(&j->lock);
    }
    if (j->msg != NULL)
        nng_msg_free(j->msg);
    image_free(j->depth_pool, j->depth_aligned);
    image_free(j->rgb_pool, j->rgb_pinned);
    if (j->out_buf != NULL) {
        frame_pool_put(j->out_pool, j->out_buf);
    } else {
        free(j->depth_m);
        free(j->normals);
        free(j->rgb);
    }
    tsdf_mesh_fini(&j->mesh);
    tsdf_block_set_fini(&j->blocks);
    tsdf_block_set_fini(&j->spilled);
    free(j);
}

/* p (bytes, from pool `from`, or malloc'd when NULL) becomes the frame's
 * depth, owned by the job; the buffer it had before is given back. */
static void own_depth(worker_job *j, frame_pool *from, void *p, size_t bytes)
{
    tsdf_frame *f = &j->req.u.frame.frame;
    image_free(j->depth_pool, j->depth_aligned);
    j->depth_aligned = p;
    j->depth_pool = from;
    f->depth = p;
    f->depth_size_bytes = bytes;
}

static int prepare_depth(worker_job *j, frame_pool *pool, tsdf_proto_error *err)
{
    tsdf_req_frame *rf = &j->req.u.frame;
    tsdf_frame *f = &rf->frame;
    size_t bytes = job_depth_bytes(j);
    int coded = rf->depth_encoding != TSDF_DEPTH_ENC_RAW;
    int in_place = !coded && (f->depth == NULL || ((uintptr_t)f->depth % 4u) == 0);

    /* Used where it is without a pool, and with one when it is already in
     * a buffer of the job's own (job_depth_buffer). */
    if (in_place && (pool == NULL || f->depth == NULL || f->depth == j->depth_aligned))
        return TSDF_OK;
    /* msgpack puts a bin payload wherever the encoder's header ends, so the
     * depth is usually misaligned; one copy here (on the decoding thread)
     * keeps the worker free to integrate back to back. A compressed payload
     * needs that buffer anyway: it is decoded into it, at no extra copy. The
     * size is the frame's own (bounded by the image limits), never one a
     * compressed payload claims. In a page-locked buffer of the pool the
     * copy is the only one: the CUDA backend uploads from there. */
    void *p = frame_pool_get(pool, bytes);
    frame_pool *from = p != NULL ? pool : NULL;
    if (p == NULL) {
        if (in_place)
            return TSDF_OK; /* the pool is full: as without one */
        p = malloc(bytes);
        if (p == NULL)
            return TSDF_ENOMEM;
    }
    int rc = coded ? tsdf_depth_decode(rf->depth_encoding, f->depth_format, f->width, f->height,
                                       rf->depth_coded, rf->depth_coded_bytes, p, bytes, err)
                   : tsdf_depth_decode(TSDF_DEPTH_ENC_RAW, f->depth_format, f->width, f->height,
                                       f->depth, bytes, p, bytes, err);
    if (rc != TSDF_OK) {
        image_free(from, p);
        return rc;
    }
    own_depth(j, from, p, bytes);
    rf->depth_encoding = TSDF_DEPTH_ENC_RAW;
    rf->depth_coded = NULL;
    rf->depth_coded_bytes = 0;
    return TSDF_OK;
}

size_t job_depth_bytes(const worker_job *j)
{
    const tsdf_frame *f = &j->req.u.frame.frame;
    return (size_t)f->width * f->height * (f->depth_format == TSDF_DEPTH_F32 ? 4u : 2u);
}

void *job_depth_buffer(worker_job *j, frame_pool *pool)
{
    size_t bytes = job_depth_bytes(j);
    void *p = frame_pool_get(pool, bytes);
    frame_pool *from = p != NULL ? pool : NULL;
    if (p == NULL && (p = malloc(bytes)) == NULL)
        return NULL;
    own_depth(j, from, p, bytes);
    return p;
}

int job_prepare_images(worker_job *j, frame_pool *pool, tsdf_proto_error *err)
{
    int rc = prepare_depth(j, pool, err);
    if (rc == TSDF_OK)
        pin_rgb(j, pool);
    return rc;
}

/* rq's image of px pixels laid out from p as the wire has it (PROTOCOL.md
 * 6.10): depth, then normals (4-byte aligned after px floats) when asked
 * for, then colour when asked for. p is aligned for floats. */
static void image_layout(uint8_t *p, const tsdf_req_raycast *rq, size_t px,
                         tsdf_raycast_output *out)
{
    out->depth_m = (float *)(void *)p;
    out->normals = rq->want_normals ? (float *)(void *)(p + px * 4u) : NULL;
    out->rgb = rq->want_rgb ? p + tsdf_proto_raycast_rgb_offset(px, rq->want_normals) : NULL;
}

void job_raycast_outputs(worker_job *j, frame_pool *pool)
{
    const tsdf_req_raycast *rq = &j->req.u.raycast;
    uint32_t w, h;
    tsdf_intrinsics K;
    tsdf_proto_raycast_scaled(rq, &w, &h, &K);
    uint8_t *p = pool != NULL
                     ? frame_pool_get(pool, (size_t)tsdf_proto_raycast_request_image_bytes(rq))
                     : NULL;
    if (p == NULL)
        return;
    tsdf_raycast_output out;
    image_layout(p, rq, (size_t)w * h, &out);
    j->out_buf = p;
    j->out_pool = pool;
    j->depth_m = out.depth_m;
    j->normals = out.normals;
    j->rgb = out.rgb;
}

int job_wait(worker_job *j, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&j->lock);
    while (!j->done) {
        if (pthread_cond_timedwait(&j->cond, &j->lock, &deadline) == ETIMEDOUT && !j->done) {
            j->abandoned = 1;
            pthread_mutex_unlock(&j->lock);
            return TSDF_ETIMEOUT;
        }
    }
    pthread_mutex_unlock(&j->lock);
    return TSDF_OK;
}

void job_complete(worker_job *j, int status)
{
    if (!j->has_waiter) {
        job_free(j);
        return;
    }
    pthread_mutex_lock(&j->lock);
    j->status = status;
    j->done = 1;
    int abandoned = j->abandoned;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
    if (abandoned)
        job_free(j);
}

/* 1 when nobody waits for j's result any more (its waiter timed out). */
static int job_abandoned(worker_job *j)
{
    if (!j->has_waiter)
        return 0;
    pthread_mutex_lock(&j->lock);
    int abandoned = j->abandoned;
    pthread_mutex_unlock(&j->lock);
    return abandoned;
}

/*
 * Takes the volume's statistics into the map's cache (for readers that may
 * not wait for this thread) and its version. frame_stages: also record the
 * engine's upload / allocate / update times of the last frame. It walks
 * the whole table (the probe histogram), and on the CUDA backend waits for
 * the queued work, so frames call it at most every MAPS_STATS_PERIOD_MS
 * (and once when the worker goes idle after them): the stage latencies
 * are samples, and the GPU stays fed back to back in between.
 */
static int refresh_stats(dmap *m, int frame_stages, tsdf_volume_stats *out)
{
    tsdf_volume_stats st;
    dstats *ds = m->reg->stats;
    int rc = tsdf_volume_get_stats(m->vol, &st);
    if (rc != TSDF_OK)
        return rc;
    atomic_store(&m->version, st.version);
    pthread_mutex_lock(&m->stats_lock);
    m->cached_stats = st;
    pthread_mutex_unlock(&m->stats_lock);
    m->frame_stats_at_ns = worker_now_ns();
    m->stats_stale = 0;
    if (frame_stages) {
        lat_window_add(&ds->lat_stage[DS_STAGE_UPLOAD], st.last_upload_ms);
        lat_window_add(&ds->lat_stage[DS_STAGE_ALLOCATE], st.last_alloc_ms);
        lat_window_add(&ds->lat_stage[DS_STAGE_UPDATE], st.last_update_ms);
    }
    if (out != NULL)
        *out = st;
    return TSDF_OK;
}

/* After a query: the statistics that do not walk the table (a raycast's
 * or mesh's time, the colour flag, the version) into the cache, keeping
 * the probe histogram of the last full refresh, which comes at the metrics
 * cadence only. */
static int refresh_counters(dmap *m, tsdf_volume_stats *out)
{
    tsdf_volume_stats st;
    int rc = tsdf_volume_get_counters(m->vol, &st);
    if (rc != TSDF_OK)
        return rc;
    atomic_store(&m->version, st.version);
    pthread_mutex_lock(&m->stats_lock);
    st.max_probe = m->cached_stats.max_probe;
    st.mean_probe = m->cached_stats.mean_probe;
    memcpy(st.probe_hist, m->cached_stats.probe_hist, sizeof st.probe_hist);
    m->cached_stats = st;
    pthread_mutex_unlock(&m->stats_lock);
    *out = st;
    return TSDF_OK;
}

/* Integrates f under the budget's cap, after the spilled blocks it reaches
 * came back; with [eviction] on_full = evict, a frame refused for memory
 * makes room once and is integrated again. *by_budget: the cap in force
 * was the budget's, not the map's own. */
static int integrate_frame(dmap *m, const tsdf_frame *f, int *by_budget)
{
    *by_budget = maps_apply_budget(m);
    int rc = evict_before_frame(m, f);
    if (rc == TSDF_ECAPACITY && evict_make_room(m, f))
        rc = evict_before_frame(m, f);
    if (rc != TSDF_OK)
        return rc;
    rc = tsdf_volume_integrate(m->vol, f);
    if (rc == TSDF_ECAPACITY && evict_make_room(m, f))
        rc = tsdf_volume_integrate(m->vol, f);
    if (rc == TSDF_OK)
        evict_after_frame(m, f);
    return rc;
}

/* What a frame's statistics need once its job is completed (and maybe
 * freed by its waiter): copied out of the job before. */
typedef struct {
    tsdf_proto_sensor sensor;
    tsdf_frame frame; /* the pose and intrinsics; its payload pointers are not read */
    uint64_t seq, stamp_ns;
    uint32_t sensor_index;
    double decode_ms, queue_wait_ms;
} frame_record;

/* The bookkeeping of an integrated or refused frame, after its sender has
 * been answered: latency windows, the dstats outcome, the camera's path
 * and, at the metrics cadence, the full statistics (which walk the table
 * and wait for the GPU). None of it is on the acknowledgement's path. */
static void record_frame(dmap *m, const frame_record *r, int rc, double ms)
{
    dstats *ds = m->reg->stats;
    lat_window_add(&ds->lat_stage[DS_STAGE_DECODE], r->decode_ms);
    lat_window_add(&ds->lat_queue_wait, r->queue_wait_ms);
    if (rc == TSDF_OK) {
        char sensor[DS_SENSOR_NAME_LEN];
        lat_window_add(&ds->lat_integrate, ms);
        dstats_sensor_name(&r->sensor, sensor, sizeof sensor);
        pose_ring_record(&m->poses, sensor, &r->frame, r->seq, r->stamp_ns, worker_now_ns());
    }
    dstats_frame_outcome(ds, r->sensor_index, dstats_outcome_for_error(rc));
    if (worker_now_ns() - m->frame_stats_at_ns >= (int64_t)MAPS_STATS_PERIOD_MS * 1000000LL)
        refresh_stats(m, rc == TSDF_OK, NULL);
}

static void run_frame(dmap *m, worker_job *j)
{
    const tsdf_req_frame *rf = &j->req.u.frame;
    int64_t t0 = worker_now_ns();
    int by_budget;
    frame_record rec = {rf->sensor,
                        rf->frame,
                        rf->seq,
                        rf->stamp_ns,
                        j->sensor,
                        j->decode_ms,
                        (double)(t0 - j->t_queued_ns) / 1e6};
    rec.frame.depth = NULL;
    rec.frame.rgb = NULL;

    int rc = integrate_frame(m, &rf->frame, &by_budget);
    /* An acked frame is synced so that the ack carries the frame's real
     * status; the stream keeps the GPU fed back to back instead. */
    if (rc == TSDF_OK && j->has_waiter)
        rc = tsdf_volume_sync(m->vol);
    maps_publish_memory(m);
    double ms = (double)(worker_now_ns() - t0) / 1e6;
    if (rc == TSDF_OK) {
        atomic_fetch_add(&m->frames_done, 1);
    } else {
        int budget = rc == TSDF_ECAPACITY && by_budget;
        if (budget)
            atomic_fetch_add(&m->reg->vbudget.refused_frames, 1);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "integrate failed",
                             "map %s: frame seq %llu refused by the engine: %s%s", m->name,
                             (unsigned long long)rf->seq, tsdf_strerror(rc),
                             budget ? " ([volume] memory_budget_mb, all maps together)" : "");
    }
    j->integrate_ms = ms;
    /* The ack's version costs nothing (no wait, no kernel). */
    j->version = tsdf_volume_version(m->vol);
    atomic_store(&m->version, j->version);
    m->stats_stale = 1;
    job_complete(j, rc); /* j may be gone from here on */
    record_frame(m, &rec, rc, ms);
}

typedef struct {
    dmap *m;
    worker_job *j;
} raycast_cancel_ctx;

/* The engine's cancellation hook: a CPU raycast of a large image with long
 * rays takes minutes, and once its client has given up (or the stop
 * deadline has passed) every later job of the map would wait for it. */
static int raycast_cancelled(void *arg)
{
    raycast_cancel_ctx *c = arg;
    return atomic_load(&c->m->abort_drain) || job_abandoned(c->j);
}

static int run_raycast(dmap *m, worker_job *j)
{
    const tsdf_req_raycast *rq = &j->req.u.raycast;
    raycast_cancel_ctx cancel = {m, j};
    tsdf_raycast_params p;
    tsdf_raycast_output out;

    /* The image the client asked for: its size and intrinsics divided by
     * the scale, normals only when wanted (the engine then computes none). */
    memset(&p, 0, sizeof p);
    tsdf_proto_raycast_scaled(rq, &p.width, &p.height, &p.K);
    size_t px = (size_t)p.width * p.height;
    j->out_width = p.width;
    j->out_height = p.height;
    j->out_rgb = rq->want_rgb; /* until the map turns out to have none */
    /* Straight into the sender's ring where it is mapped for the device:
     * the same layout as out_buf's (depth, normals, colour), written only
     * by the device's copies, and held against fences and detaching until
     * they are done. The job's own arrays are then not needed (the handler
     * took no page-locked buffer for them: rings_mapped). */
    uint8_t *ring = NULL;
    rings_lease_t lease = {NULL};
    if (j->out_rings != NULL &&
        rings_lease(j->out_rings, &j->out_ref, tsdf_proto_raycast_request_image_bytes(rq), &lease,
                    (void **)&ring) != TSDF_OK)
        ring = NULL;
    if (ring == NULL && j->out_buf == NULL) {
        j->depth_m = malloc(px * sizeof(float));
        if (rq->want_normals)
            j->normals = malloc(px * 3 * sizeof(float));
        if (rq->want_rgb)
            j->rgb = malloc(px * 3);
        if (j->depth_m == NULL || (rq->want_normals && j->normals == NULL) ||
            (rq->want_rgb && j->rgb == NULL))
            return TSDF_ENOMEM;
    }
    memcpy(p.T_world_cam, rq->T_world_cam, sizeof p.T_world_cam);
    p.min_depth_m = rq->min_depth_m;
    p.max_depth_m = rq->max_depth_m;
    p.cancel = raycast_cancelled;
    p.cancel_arg = &cancel;
    if (ring != NULL) {
        /* rings_lease gives a float-aligned offset. */
        image_layout(ring, rq, px, &out);
    } else {
        out.depth_m = j->depth_m;
        out.normals = j->normals;
        out.rgb = j->rgb;
    }
    int rc = tsdf_volume_raycast(m->vol, &p, &out);
    if (rc == TSDF_OK || ring != NULL) {
        /* Into a ring, whatever the raycast returned: no copy of the
         * device's may still be writing there when the lease ends. */
        int sync = tsdf_volume_sync(m->vol);
        if (rc == TSDF_OK)
            rc = sync;
    }
    if (ring != NULL) {
        rings_lease_end(j->out_rings, &lease);
        j->out_in_ring = rc == TSDF_OK;
    }
    return rc;
}

static int run_mesh(dmap *m, worker_job *j)
{
    tsdf_mesh_params p;
    memset(&p, 0, sizeof p);
    p.use_box = j->req.u.mesh.use_box;
    p.box = j->req.u.mesh.box;
    p.since_version = j->req.u.mesh.since_version;
    p.by_block = j->req.u.mesh.by_block;
    int rc = tsdf_volume_mesh(m->vol, &p, &j->mesh);
    if (rc == TSDF_OK)
        rc = tsdf_volume_sync(m->vol);
    return rc;
}

/* The parameters that decide what a volume's blocks mean: a snapshot of
 * others cannot be poured into it. */
static int same_voxels(const tsdf_volume_params *a, const tsdf_volume_params *b)
{
    return a->voxel_size_m == b->voxel_size_m && a->trunc_vox == b->trunc_vox &&
           a->max_weight == b->max_weight && a->layout == b->layout;
}

static int run_import(dmap *m, worker_job *j)
{
    const tsdf_volume_params *cur = tsdf_volume_get_params(m->vol);
    tsdf_volume_params want = j->params;
    int rc;

    /* A snapshot made with other voxel parameters (its layout among them)
     * cannot be poured into this volume: make a fresh volume with the
     * snapshot's parameters (on this daemon's backend), and swap it in only
     * once the import worked. A snapshot of format version 1 does not say
     * its layout: the map keeps the configured one. */
    want.backend = m->reg->backend;
    want.cuda_device = m->reg->cfg->volume.cuda_device;
    want.layout = maps_layout_for(m->reg->cfg, &want);
    /* An import is bounded like frames: by what the budget leaves. */
    want.memory_cap_bytes = maps_budget_cap(m, NULL);
    if (!same_voxels(cur, &want)) {
        tsdf_volume *nv = NULL;
        rc = tsdf_volume_create(&want, &nv);
        if (rc != TSDF_OK)
            return rc;
        rc = tsdf_volume_import_blocks(nv, &j->blocks);
        if (rc != TSDF_OK) {
            tsdf_volume_destroy(nv);
            return rc;
        }
        tsdf_volume_destroy(m->vol);
        m->vol = nv;
        m->cap_set_bytes = want.memory_cap_bytes;
    } else {
        maps_apply_budget(m);
        if ((rc = tsdf_volume_import_blocks(m->vol, &j->blocks)) != TSDF_OK)
            return rc;
    }
    evict_reset(m);
    return evict_import_spilled(m, &j->spilled, tsdf_volume_get_params(m->vol));
}

/* The device event times of the last frames, for the stats reply. Only this
 * worker touches the volume, so it asks here. A backend without timelines
 * (CPU: TSDF_ENOT_BUILT) gives none; a failure to read them is logged and
 * leaves the stats reply without them rather than failing it. */
static void fetch_timeline(dmap *m, worker_job *j)
{
    size_t n = 0;
    int rc = tsdf_volume_get_timeline(m->vol, j->timeline, TSDF_PROTO_MAX_TIMELINE, &n);
    j->timeline_count = 0;
    if (rc == TSDF_OK) {
        j->timeline_count = n <= TSDF_PROTO_MAX_TIMELINE ? n : TSDF_PROTO_MAX_TIMELINE;
    } else if (rc != TSDF_ENOT_BUILT) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "timeline failed", "map %s: frame timeline: %s",
                             m->name, tsdf_strerror(rc));
    }
}

static void run_query(dmap *m, worker_job *j)
{
    int rc;

    switch (j->kind) {
    case JOB_RAYCAST:
        rc = run_raycast(m, j);
        /* Only the cancellation hook makes a raycast time out: its client
         * gave up, or the map is being deleted (then the map is gone, as
         * for the queries left in its queue) or the daemon stopped. */
        if (rc == TSDF_ETIMEOUT) {
            const int deleted = atomic_load(&m->deleting);
            dstats_query_cancelled(m->reg->stats);
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "raycast cancelled",
                                 "map %s: a %ux%u raycast was stopped: %s", m->name,
                                 j->req.u.raycast.width, j->req.u.raycast.height,
                                 deleted ? "the map is being deleted" : "its client gave up");
            if (deleted)
                rc = TSDF_ENOT_FOUND;
        }
        break;
    case JOB_MESH:
        rc = run_mesh(m, j);
        break;
    case JOB_STATS:
        rc = tsdf_volume_get_stats(m->vol, &j->vstats);
        if (rc == TSDF_OK)
            fetch_timeline(m, j);
        /* The daemon's counters of the same moment (see job_counters): no
         * frame of this map can be integrated and counted in between. */
        dstats_get_totals(m->reg->stats, &j->counters.totals);
        queue_get_stats(&m->queue, &j->counters.queue);
        j->counters.map_frames_integrated = atomic_load(&m->frames_done);
        j->counters.queue_bytes = queue_budget_bytes(&m->reg->budget);
        j->counters.volume_bytes = atomic_load(&m->reg->vbudget.used_bytes);
        j->counters.budget_refused = atomic_load(&m->reg->vbudget.refused_frames);
        /* The map's voxel parameters (a load may have changed them) and
         * its own cap, as a snapshot keeps them. */
        j->params = *tsdf_volume_get_params(m->vol);
        j->params.memory_cap_bytes = m->own_cap_bytes;
        break;
    case JOB_RESET:
        rc = tsdf_volume_reset(m->vol);
        /* Nothing is spilled any more, and the cameras' paths belong to
         * the map that was dropped. */
        if (rc == TSDF_OK) {
            evict_reset(m);
            pose_ring_clear(&m->poses);
        }
        break;
    case JOB_EXPORT:
        rc = tsdf_volume_sync(m->vol);
        if (rc == TSDF_OK)
            rc = tsdf_volume_export_blocks(m->vol, &j->blocks);
        if (rc == TSDF_OK)
            rc = evict_export_spilled(m, &j->spilled);
        j->params = *tsdf_volume_get_params(m->vol);
        /* The volume's cap follows the budget; the map's own is what a
         * snapshot keeps. */
        j->params.memory_cap_bytes = m->own_cap_bytes;
        j->frames_done = atomic_load(&m->frames_done);
        break;
    case JOB_IMPORT:
        rc = run_import(m, j);
        if (rc == TSDF_OK)
            pose_ring_clear(&m->poses);
        break;
    default:
        rc = TSDF_EINTERNAL;
        break;
    }
    /* Reset and import change what the volume holds; the rest is cheap. */
    maps_publish_memory(m);
    /* The mesh reply carries the version the mesh was made at: the worker
     * made both, so nothing can have changed in between. */
    tsdf_volume_stats st;
    if (refresh_counters(m, &st) == TSDF_OK && rc == TSDF_OK) {
        if (j->kind == JOB_RAYCAST)
            lat_window_add(&m->reg->stats->lat_stage[DS_STAGE_RAYCAST], st.last_raycast_ms);
        if (j->kind == JOB_MESH)
            lat_window_add(&m->reg->stats->lat_stage[DS_STAGE_MESH], st.last_mesh_ms);
        /* A raycast reply carries rgb only when the map has colour
         * (PROTOCOL.md 6.2): otherwise it would be all zeros, which a client
         * cannot tell from a black surface. */
        if (j->kind == JOB_RAYCAST && !st.has_color) {
            j->out_rgb = 0;
            if (j->out_buf == NULL) /* else it lies in out_buf */
                free(j->rgb);
            j->rgb = NULL;
        }
    }
    j->version = atomic_load(&m->version);
    if (j->kind == JOB_STATS && rc == TSDF_OK)
        j->version = j->vstats.version;
    job_complete(j, rc);
}

/* Publishes that the worker took a job of kind k now (for the watchdog and
 * the stop's log), and that it is idle again. */
static void busy_begin(dmap *m, job_kind k)
{
    atomic_store(&m->busy_kind, (int)k);
    atomic_store(&m->busy_since_ns, worker_now_ns());
}

static void busy_end(dmap *m)
{
    atomic_store(&m->busy_since_ns, 0);
}

static void *worker_main(void *arg)
{
    dmap *m = arg;
    dstats *ds = m->reg->stats;

    for (;;) {
        void *item;
        int is_query;
        int rc = queue_pop(&m->queue, &item, &is_query, WORKER_POP_SLICE_MS);
        if (rc == TSDF_ETIMEOUT) {
            /* Idle: the last frames' statistics, which the period may have
             * skipped, reach /metrics now rather than with the next frame. */
            if (m->stats_stale)
                refresh_stats(m, 0, NULL);
            continue;
        }
        if (rc != TSDF_OK)
            break; /* closed and empty */
        worker_job *j = item;
        if (is_query) {
            /* Nobody reads the result of a query whose waiter gave up, and
             * running it would only delay every job behind it; past the
             * stop's drain deadline no query is started either. */
            int gone = job_abandoned(j);
            if (gone || atomic_load(&m->abort_drain)) {
                dstats_query_abandoned(ds);
                job_complete(j, gone                        ? TSDF_ETIMEOUT
                                : atomic_load(&m->deleting) ? TSDF_ENOT_FOUND
                                                            : TSDF_ESHUTDOWN);
                continue;
            }
            busy_begin(m, j->kind);
            run_query(m, j);
            busy_end(m);
            continue;
        }
        if (atomic_load(&m->abort_drain)) {
            /* A deleted map's frames count as frames for no map. */
            int deleted = atomic_load(&m->deleting);
            dstats_frame_outcome(ds, j->sensor, deleted ? DS_REJ_NO_MAP : DS_DROP_SHUTDOWN);
            job_complete(j, deleted ? TSDF_ENOT_FOUND : TSDF_ESHUTDOWN);
            continue;
        }
        busy_begin(m, JOB_FRAME);
        run_frame(m, j);
        busy_end(m);
    }
    /* The stream's frames are not synced one by one: wait for the last
     * (a frame's work, so it counts as one for the watchdog). */
    busy_begin(m, JOB_FRAME);
    int rc = tsdf_volume_sync(m->vol);
    if (rc != TSDF_OK)
        TSDF_LOG(TSDF_LOG_ERROR, "map %s: final sync failed: %s", m->name, tsdf_strerror(rc));
    refresh_stats(m, 0, NULL);
    busy_end(m);
    atomic_store(&m->worker_exited, 1);
    return NULL;
}

int worker_start(dmap *m)
{
    if (pthread_create(&m->thread, NULL, worker_main, m) != 0)
        return TSDF_ENOMEM;
    m->thread_started = 1;
    return TSDF_OK;
}

void worker_drain(dmap *m, int64_t deadline_ns)
{
    if (!m->thread_started || m->stuck)
        return;
    queue_close(&m->queue);
    for (;;) {
        queue_stats st;
        queue_get_stats(&m->queue, &st);
        if (st.depth == 0 && st.queries_depth == 0)
            return;
        if (worker_now_ns() >= deadline_ns) {
            TSDF_LOG(TSDF_LOG_WARN,
                     "map %s: drain timed out with %zu frames and %zu queries queued: dropping "
                     "them",
                     m->name, st.depth, st.queries_depth);
            atomic_store(&m->abort_drain, 1);
            return;
        }
        sleep_ms(WORKER_STOP_POLL_MS);
    }
}

int worker_join(dmap *m, int64_t deadline_ns)
{
    if (!m->thread_started)
        return TSDF_OK;
    if (m->stuck)
        return TSDF_ETIMEOUT;
    queue_close(&m->queue);
    atomic_store(&m->abort_drain, 1);
    /* pthread_join has no deadline: wait for the worker's last step, after
     * which the join returns at once. */
    while (!atomic_load(&m->worker_exited)) {
        int64_t now = worker_now_ns();
        if (now >= deadline_ns) {
            int64_t since = atomic_load(&m->busy_since_ns);
            TSDF_LOG(TSDF_LOG_ERROR,
                     "map %s: the worker is still on a %s job (for %lld ms) at the stop "
                     "deadline: leaving it running; the map is left out of the final save",
                     m->name, job_kind_name((job_kind)atomic_load(&m->busy_kind)),
                     since != 0 ? (long long)((now - since) / 1000000) : 0LL);
            m->stuck = 1;
            return TSDF_ETIMEOUT;
        }
        sleep_ms(WORKER_STOP_POLL_MS);
    }
    pthread_join(m->thread, NULL);
    m->thread_started = 0;
    return TSDF_OK;
}
