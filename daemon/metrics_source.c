/*
 * metrics_source.c - where the counter table's numbers (metrics.h) come
 * from in the running daemon: the daemon-wide counters, read now or taken
 * from a map worker's snapshot, and for /metrics every map's queue and
 * cached volume statistics.
 */
#define _POSIX_C_SOURCE 200809L

#include "handlers_internal.h"

#include "metrics.h"
#include "tsdf_error.h"
#include "tsdf_version.h"
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

void handlers_metrics_context(daemon_ctx *d, const job_counters *snap, metrics_ctx *c)
{
    int64_t now = worker_now_ns();
    volume_budget *vb = &d->maps->vbudget;

    memset(c, 0, sizeof *c);
    /* The counters the map's worker read in one step with the engine's
     * statistics, when there are such: read now, they could already hold
     * the next queued frame, which the engine's numbers do not. */
    if (snap != NULL) {
        c->totals = snap->totals;
        c->queue_bytes = snap->queue_bytes;
        c->volume_bytes = snap->volume_bytes;
        c->budget_refused = snap->budget_refused;
    } else {
        dstats_get_totals(d->stats, &c->totals);
        c->queue_bytes = queue_budget_bytes(&d->maps->budget);
        c->volume_bytes = atomic_load(&vb->used_bytes);
        c->budget_refused = atomic_load(&vb->refused_frames);
    }
    c->stats = d->stats;
    c->spill_chunks_damaged = atomic_load(&d->maps->spill_chunks_damaged);
    c->queue_capacity = d->cfg->queue_length;
    c->queue_max_bytes = d->maps->budget.limit_bytes;
    frame_pool_get_stats(d->frame_buffers, &c->pinned);
    rings_get_stats(d->rings, &c->rings);
    c->volume_budget_bytes = vb->limit_bytes;
    c->conns_open = atomic_load(&d->stats->conns_open);
    c->conns_refused = atomic_load(&d->stats->conns_refused);
    c->conns_idle_closed = atomic_load(&d->stats->conns_idle_closed);
    c->queries_busy[0] = atomic_load(&d->queries_busy_map);
    c->queries_busy[1] = atomic_load(&d->queries_busy_kind);
    c->workers_stalled = watchdog_find_stalls(d->maps, now, d->cfg->stall_timeout_ms, NULL);
    c->maps_count = maps_count(d->maps);
    /* Durability: an acknowledged frame is safe from a crash only once a
     * snapshot that the daemon restores at start holds it. */
    c->frames_unsaved = handlers_frames_unsaved(d, NULL);
    int64_t last_save = atomic_load(&d->last_save_ns);
    c->snapshot_age_ms = last_save != 0 ? (now - last_save) / 1000000 : -1;
    c->uptime_ms = (now - d->start_ns) / 1000000;
    c->has_host_memory = metrics_rss_bytes(&c->host_memory_bytes) == TSDF_OK;
    c->version = TSDF_VERSION;
    c->backend = tsdf_backend_name(d->maps->backend);
}

void handlers_map_eviction(dmap *m, metrics_map *out)
{
    out->blocks_evicted = atomic_load(&m->blocks_evicted);
    out->blocks_restored = atomic_load(&m->blocks_restored);
    out->blocks_spilled = atomic_load(&m->blocks_spilled);
}

int handlers_render_metrics(void *arg, prom_buf *b)
{
    daemon_ctx *d = arg;
    dmap *all[TSDF_PROTO_MAX_MAPS];
    metrics_ctx c;

    handlers_metrics_context(d, NULL, &c);
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    metrics_map *maps = calloc(n > 0 ? n : 1, sizeof *maps);
    if (maps == NULL) {
        maps_put_list(all, n);
        return TSDF_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        maps[i].name = all[i]->name;
        queue_get_stats(&all[i]->queue, &maps[i].queue);
        maps[i].frames_integrated = atomic_load(&all[i]->frames_done);
        maps[i].frames_unsaved = handlers_frames_unsaved(d, all[i]);
        handlers_map_eviction(all[i], &maps[i]);
        /* The copy the worker left, never a fresh read: that would wait
         * for the worker. Its version is the one the worker publishes
         * after every job, which the copy may lag by MAPS_STATS_PERIOD_MS. */
        maps[i].has_vstats = 1;
        maps_cached_stats(all[i], &maps[i].vstats);
        maps[i].vstats.version = atomic_load(&all[i]->version);
    }
    c.maps = maps;
    c.map_count = n;
    int rc = metrics_render(&c, b);
    free(maps);
    maps_put_list(all, n);
    return rc;
}
