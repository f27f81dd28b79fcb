/*
 * stats_reply.c - the stats reply (the daemon's counters beside the map's
 * engine statistics, read at one moment by the map's worker) and the status
 * line of the periodic log and STATUS=.
 */
#define _POSIX_C_SOURCE 200809L

#include "handlers_internal.h"

#include "log.h"
#include "tsdf_error.h"
#include "watchdog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        put_i(s, "map.frames_unsaved", (int64_t)handlers_frames_unsaved(d, m));
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
    put_i(s, "queries.abandoned", (int64_t)t.queries_abandoned);
    put_i(s, "queries.busy_map", (int64_t)atomic_load(&d->queries_busy_map));
    put_i(s, "queries.busy_kind", (int64_t)atomic_load(&d->queries_busy_kind));
    put_i(s, "queries.cancelled", (int64_t)t.queries_cancelled);
    put_i(s, "workers.stalled",
          (int64_t)watchdog_find_stalls(d->maps, worker_now_ns(), d->cfg->stall_timeout_ms, NULL));
    put_i(s, "maps.count", (int64_t)maps_count(d->maps));
    /* Durability: an acknowledged frame is safe from a crash only once a
     * snapshot that the daemon restores at start holds it. */
    int64_t last_save = atomic_load(&d->last_save_ns);
    put_i(s, "frames.unsaved", (int64_t)handlers_frames_unsaved(d, NULL));
    put_i(s, "snapshot.last_save_age_ms",
          last_save != 0 ? (worker_now_ns() - last_save) / 1000000 : -1);
    uint64_t reqs = 0, errs = 0;
    for (int i = 0; i < DS_MSG_TYPES; i++) {
        reqs += t.requests[i];
        errs += t.request_errors[i];
    }
    put_i(s, "requests.total", (int64_t)reqs);
    put_i(s, "requests.errors", (int64_t)errs);
    put_i(s, "uptime_ms", (worker_now_ns() - d->start_ns) / 1000000);
    put_latency(s, "integrate", &d->stats->lat_integrate);
    put_latency(s, "queue_wait", &d->stats->lat_queue_wait);
    put_latency(s, "request.integrate", &d->stats->lat_request[TSDF_MSG_INTEGRATE]);
    put_latency(s, "request.raycast", &d->stats->lat_request[TSDF_MSG_RAYCAST]);
    put_latency(s, "request.mesh", &d->stats->lat_request[TSDF_MSG_MESH]);

    /* Per sensor, as far as the reply's entry limit allows; the count says
     * how many real sensors have their own counters (not the "(no sensor)"
     * and "(other sensors)" buckets), so a reader knows when the list was
     * cut. */
    put_i(s, "sensors.count", (int64_t)(t.sensor_count - DS_SENSOR_FIRST));
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

void handlers_do_stats(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    dmap *m = NULL;
    worker_job *j = NULL;
    job_counters snap;

    memset(&snap, 0, sizeof snap);

    /* Stats of an absent map still carry the daemon's counters: a monitor
     * must see drops even before the first frame made a map. */
    if (maps_get(d->maps, req->map, 0, &m) == TSDF_OK) {
        if (handlers_run_query(d, m, JOB_STATS, req, rep, &j) != TSDF_OK) {
            maps_put(m);
            return;
        }
        rep->u.stats.has_engine = 1;
        rep->u.stats.engine = j->vstats;
        rep->u.stats.has_params = 1;
        rep->u.stats.params.voxel_size_m = j->params.voxel_size_m;
        rep->u.stats.params.trunc_vox = j->params.trunc_vox;
        rep->u.stats.params.max_weight = j->params.max_weight;
        rep->u.stats.params.memory_cap_bytes = j->params.memory_cap_bytes;
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
