/*
 * stats_reply.c - the stats reply (the daemon's counters of the counter
 * table, metrics.h, beside the map's engine statistics, read at one moment
 * by the map's worker) and the status line of the periodic log and STATUS=.
 */
#define _POSIX_C_SOURCE 200809L

#include "handlers_internal.h"

#include "metrics.h"
#include "tsdf_error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void handlers_do_stats(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    dmap *m = NULL;
    worker_job *j = NULL;
    metrics_ctx c;
    metrics_map one;

    /* Stats of an absent map still carry the daemon's counters: a monitor
     * must see drops even before the first frame made a map. */
    if (maps_get(d->maps, req->map, 0, &m) != TSDF_OK) {
        handlers_metrics_context(d, NULL, &c);
        metrics_fill_stats(&c, &rep->u.stats);
        return;
    }
    if (handlers_run_query(d, m, JOB_STATS, req, rep, &j) != TSDF_OK) {
        maps_put(m);
        return;
    }
    rep->u.stats.has_params = 1;
    rep->u.stats.params.voxel_size_m = j->params.voxel_size_m;
    rep->u.stats.params.trunc_vox = j->params.trunc_vox;
    rep->u.stats.params.max_weight = j->params.max_weight;
    rep->u.stats.params.memory_cap_bytes = j->params.memory_cap_bytes;
    rep->u.stats.params.layout = j->params.layout;
    rep->u.stats.timeline_count = (uint32_t)j->timeline_count;
    memcpy(rep->u.stats.timeline, j->timeline, j->timeline_count * sizeof rep->u.stats.timeline[0]);
    /* The worker's counters, not a fresh read: by now it may have
     * integrated the next queued frame, which the engine's numbers do not
     * include. So the reply is one moment's picture. */
    handlers_metrics_context(d, &j->counters, &c);
    memset(&one, 0, sizeof one);
    one.name = m->name;
    one.queue = j->counters.queue;
    one.frames_integrated = j->counters.map_frames_integrated;
    one.frames_unsaved = handlers_frames_unsaved(d, m);
    handlers_map_eviction(m, &one);
    one.has_vstats = 1;
    one.vstats = j->vstats;
    c.maps = &one;
    c.map_count = 1;
    job_free(j);
    metrics_fill_stats(&c, &rep->u.stats);
    maps_put(m);
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
    maps_put_list(all, n);
    snprintf(out, len,
             "maps %zu, frames received %" PRIu64 " integrated %" PRIu64 " dropped %" PRIu64
             " rejected %" PRIu64 ", queued %zu",
             n, t.received, t.integrated, t.dropped, t.rejected, depth);
}
