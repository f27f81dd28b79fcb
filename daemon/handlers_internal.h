/*
 * handlers_internal.h - what the parts of the request handlers share:
 * handlers.c (dispatch), stats_reply.c (the stats reply and the status line),
 * metrics_source.c (the counter table's numbers) and persist.c (save, load
 * and the path policy). Not for other modules.
 *
 * Threads: as handlers.h: the server's request threads, many at once.
 */
#ifndef TSDFD_HANDLERS_INTERNAL_H
#define TSDFD_HANDLERS_INTERNAL_H

#include "handlers.h"
#include "metrics.h"
#include "worker.h"

/* Runs a query job of `kind` (with a copy of *req when not NULL) on map m
 * and waits up to request_timeout_ms. On TSDF_OK the caller owns *jp (free
 * it with job_free after encoding); otherwise rep holds the error reply
 * and *jp is NULL (a job that timed out is the worker's to free). */
int handlers_run_query(daemon_ctx *d, dmap *m, job_kind kind, const tsdf_request *req,
                       tsdf_reply *rep, worker_job **jp);

/* The same for a job the caller made (job_new(kind, 1)) and filled, for
 * queries that have no wire request (the live view's meshes by block):
 * the same admission, waiting up to timeout_ms. Takes j: on TSDF_OK the
 * caller owns it again, with its results; otherwise rep holds the error
 * reply and j is gone (freed, or the worker's to free after a timeout). */
int handlers_run_job(daemon_ctx *d, dmap *m, worker_job *j, uint32_t timeout_ms, tsdf_reply *rep);

/* The stats request: the daemon's counters, and the engine's of req->map
 * when it names a map (stats_reply.c). */
void handlers_do_stats(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep);

/* Fills *c with the daemon-wide numbers of the counter table (metrics.h),
 * and no map (c->maps NULL): read now, or with snap (the counters a map's
 * worker read with its engine statistics, JOB_STATS) the frame, queue and
 * budget counters from there, so that a stats reply is one moment's
 * picture. Any thread but a map worker (metrics_source.c). */
void handlers_metrics_context(daemon_ctx *d, const job_counters *snap, metrics_ctx *c);

/* Copies m's eviction counters (evict.h: blocks evicted, restored and
 * spilled now) into *out; any thread (metrics_source.c). */
void handlers_map_eviction(dmap *m, metrics_map *out);

/* The save, load and delete requests (persist.c). */
void handlers_do_save(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep);
void handlers_do_load(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep);
void handlers_do_delete(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep);

#endif /* TSDFD_HANDLERS_INTERNAL_H */
