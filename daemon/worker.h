/*
 * worker.h - integration workers and the jobs they run.
 *
 * Each map has one worker thread, the only thread that touches the map's
 * volume while the daemon runs (volumes are not thread-safe). The worker
 * pops jobs from the map's queue (queue.h): queries first, then frames, so a
 * query waits for at most the one integration in progress. Frames of the
 * fire-and-forget stream are fed back to back (no sync between them), so
 * the CUDA backend can overlap the upload of frame N+1 with the update of
 * frame N; a frame whose sender waits for an ack (integrate) is synced
 * before the ack so the ack reports the frame's real status.
 *
 * Jobs: a worker_job is allocated by the producer (a request thread or a
 * frame decoder) and handed to the queue. Fire-and-forget frames (no
 * waiter) are freed by the worker. A job with a waiter is completed by the
 * worker (job_complete) and then owned by the waiter again, unless the
 * waiter gave up (job_wait timed out): then the worker frees it. That
 * hand-off is decided under the job's lock, so exactly one side frees it.
 *
 * Bounded work: a query whose waiter gave up before the worker took it is
 * not run (nobody would read its result, and everyone queued behind it
 * would wait for it): it is counted as abandoned and freed. A CPU raycast
 * whose waiter gives up while it runs stops within a few dozen pixels
 * (tsdf_raycast_params.cancel), counted as cancelled. The worker publishes
 * when it took its current job (dmap.busy_since_ns), so the watchdog can
 * tell a worker that stopped making progress (watchdog.h), and the stop
 * (worker_drain, worker_join) has a deadline.
 */
#ifndef TSDFD_WORKER_H
#define TSDFD_WORKER_H

#include <pthread.h>
#include <stdint.h>

#include <nng/nng.h>

#include "dstats.h"
#include "frame_pool.h"
#include "queue.h"
#include "rings.h"
#include "tsdf_proto.h"
#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dmap;

typedef enum {
    JOB_FRAME = 0, /* integrate req.u.frame */
    JOB_RAYCAST,   /* req.u.raycast -> depth_m, normals, rgb */
    JOB_MESH,      /* req.u.mesh -> mesh, version */
    JOB_STATS,     /* -> vstats, timeline, counters, params */
    JOB_RESET,     /* drop every block */
    JOB_EXPORT,    /* -> blocks, spilled, params, version */
    JOB_IMPORT,    /* blocks, spilled, params -> the volume (recreated when params differ) */
} job_kind;

/*
 * The daemon's counters as a stats query sees them, read by the worker in
 * the same step as the engine's statistics. Only the worker integrates this
 * map's frames and counts them "integrated", so a snapshot taken there,
 * between two frames, agrees with the engine's frame count; read later on
 * the request thread it would not, since the worker may integrate the next
 * queued frame meanwhile.
 */
typedef struct {
    ds_totals totals;               /* every map's frame counters */
    queue_stats queue;              /* this map's queue */
    uint64_t map_frames_integrated; /* this map's frames integrated */
    uint64_t queue_bytes;           /* bytes queued in every map (the byte budget) */
    uint64_t volume_bytes;          /* every map's volume memory (the volume budget) */
    uint64_t budget_refused;        /* frames the volume budget refused */
} job_counters;

typedef struct worker_job {
    job_kind kind;
    tsdf_request req;       /* the decoded request (frame payloads point into msg) */
    nng_msg *msg;           /* owned: the message req's payloads point into, or NULL */
    void *depth_aligned;    /* owned: the aligned (decoded or copied) depth, or NULL */
    frame_pool *depth_pool; /* the pool depth_aligned came from; NULL: malloc'd */
    void *rgb_pinned;       /* owned: the colour image's page-locked copy, or NULL */
    frame_pool *rgb_pool;   /* the pool rgb_pinned came from */
    uint32_t sensor;        /* dstats sensor index (frames) */
    int64_t t_queued_ns;    /* CLOCK_MONOTONIC when queued */
    double decode_ms;       /* frames: the decode's time, recorded by the worker after the frame */

    /* completion */
    int has_waiter;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    int abandoned;

    /* results */
    int status;
    uint64_t version;
    double integrate_ms;
    float *depth_m; /* raycast outputs, owned, at the request's scaled size */
    float *normals; /* NULL when the request said "normals": false */
    uint8_t *rgb;
    /* With out_buf, the three arrays above lie in that one buffer of
     * out_pool (page-locked: the device copies the image straight into
     * it); else each is malloc'd. */
    void *out_buf;
    frame_pool *out_pool;
    /* A raycast that asked for its image in its sender's ring: the rings
     * and the request's reference there (out_rings NULL: none). Where the
     * ring is mapped for the device (rings_lease) the image is copied from
     * the GPU straight into it, and out_in_ring says so; else the handler
     * writes it there from the arrays above (rings_write). */
    struct rings *out_rings;
    rings_ref out_ref;
    int out_in_ring;
    int out_rgb; /* a raycast's image carries colour (asked for, and the map has it) */
    uint32_t out_width, out_height; /* the raycast's image (the request's size / scale) */
    tsdf_mesh mesh;                 /* owned */
    tsdf_volume_stats vstats;
    /* JOB_STATS: the backend's last frame timelines (CUDA only; 0 else). */
    size_t timeline_count;
    tsdf_frame_timeline timeline[TSDF_PROTO_MAX_TIMELINE];
    job_counters counters;  /* JOB_STATS: read together with vstats */
    tsdf_block_set blocks;  /* export output / import input, owned */
    tsdf_block_set spilled; /* the same for the map's spilled blocks (evict.h), owned */
    uint64_t frames_done;   /* JOB_EXPORT: the map's frames_done at the export */
    tsdf_volume_params params;
} worker_job;

/* "frame", "raycast", "mesh", "stats", "reset", "export", "import"; "unknown"
 * for other values. */
const char *job_kind_name(job_kind k);

/* Allocates a zeroed job; has_waiter 1 makes it waitable. NULL on ENOMEM. */
worker_job *job_new(job_kind kind, int has_waiter);

/* Frees a job and everything it owns (msg, outputs). NULL is a no-op. */
void job_free(worker_job *j);

/* Makes a frame job's images ready to integrate. The depth becomes raw
 * samples, 4-byte aligned, so that the engine may read them as
 * uint16/float arrays: a compressed payload (depth_encoding not raw) is
 * decoded straight into j->depth_aligned, a misaligned raw one copied
 * there; an aligned raw one is used in place. With a pool (optional; the
 * daemon has one when its volumes run on CUDA, see frame_pool.h)
 * j->depth_aligned is a page-locked buffer from it, an aligned raw depth
 * is copied there too, and so is a colour image (j->rgb_pinned), so that
 * the backend uploads both without a copy of its own on the worker; what
 * the pool has no room for is handled as without one. Afterwards
 * depth_encoding is raw. TSDF_EDEPTH_DECODE (err, optional, says why)
 * when a payload does not decode to exactly width x height samples;
 * TSDF_ENOMEM. Called on the decoding thread, before queueing. */
int job_prepare_images(worker_job *j, frame_pool *pool, tsdf_proto_error *err);

/* The bytes of a frame job's raw depth: width x height samples of its
 * format. */
size_t job_depth_bytes(const worker_job *j);

/* A buffer of the job's own for its raw depth (width x height samples of
 * its format): page-locked from pool when it has room, else malloc'd; it
 * becomes the frame's depth, and job_prepare_images leaves it there. For a
 * depth the request thread copies in from elsewhere (a shared ring,
 * rings.h). NULL: out of memory. */
void *job_depth_buffer(worker_job *j, frame_pool *pool);

/* Puts a raycast job's outputs (depth, and normals and colour as its
 * request asks, at its scaled size) in one buffer of pool when it has
 * room, so that the CUDA backend's copies of the image land in
 * page-locked memory; else the worker mallocs them as it would without a
 * pool. */
void job_raycast_outputs(worker_job *j, frame_pool *pool);

/* Waits for the worker to finish j, up to timeout_ms. TSDF_OK: j->status
 * holds the result and the caller owns j again. TSDF_ETIMEOUT: the caller
 * gave j up and must not touch it again (the worker frees it). */
int job_wait(worker_job *j, int timeout_ms);

/* Worker side: publishes the result. A job without waiter, or one whose
 * waiter gave up, is freed here. */
void job_complete(worker_job *j, int status);

/* Starts the worker thread of m (m->vol and m->queue ready). */
int worker_start(struct dmap *m);

/* The first step of a stop, after queue_close: lets the worker of m work
 * through its queue until it is empty or deadline_ns (CLOCK_MONOTONIC)
 * passes; then the worker drops the frames left (counted as "shutdown")
 * and answers the queries left SHUTDOWN without running them (counted as
 * abandoned). Main thread only. */
void worker_drain(struct dmap *m, int64_t deadline_ns);

/* The second step: from now on the worker starts nothing new (and a CPU
 * raycast stops), and it has until deadline_ns to finish the job it is on
 * and exit; then its thread is joined. TSDF_OK, or TSDF_ETIMEOUT when it
 * did not finish: the map and its job are logged, m->stuck is set, and the
 * thread is left running (see dmap.stuck). Main thread only. */
int worker_join(struct dmap *m, int64_t deadline_ns);

/* Monotonic clock in nanoseconds. */
int64_t worker_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_WORKER_H */
