/*
 * metrics_sample.c - the populated counter-table context of
 * metrics_sample.h.
 */
#include "metrics_sample.h"

#include <stdio.h>
#include <string.h>

#include "tsdf_error.h"

/* Frames of one sensor: received, and the outcome of each but the last
 * in_flight of them. */
static void frames(dstats *st, uint32_t sensor, const ds_outcome *outcomes, size_t n,
                   size_t in_flight)
{
    for (size_t i = 0; i < n + in_flight; i++)
        dstats_frame_received(st, sensor);
    for (size_t i = 0; i < n; i++)
        dstats_frame_outcome(st, sensor, outcomes[i]);
}

static uint32_t sensor(dstats *st, const char *name)
{
    tsdf_proto_sensor s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", name);
    return dstats_sensor_index(st, &s);
}

static void counters(dstats *st)
{
    static const ds_outcome cam0[] = {DS_INTEGRATED,       DS_INTEGRATED, DS_INTEGRATED,
                                      DS_INTEGRATED,       DS_INTEGRATED, DS_DROP_QUEUE_FULL,
                                      DS_REJ_INVALID_FRAME};
    static const ds_outcome cam1[] = {DS_INTEGRATED,   DS_INTEGRATED,  DS_INTEGRATED,
                                      DS_INTEGRATED,   DS_INTEGRATED,  DS_INTEGRATED,
                                      DS_INTEGRATED,   DS_INTEGRATED,  DS_DROP_MEMORY,
                                      DS_REJ_CAPACITY, DS_REJ_CAPACITY};
    static const ds_outcome other[] = {DS_INTEGRATED, DS_DROP_SHUTDOWN, DS_REJ_NO_MAP};
    static const ds_outcome unknown[] = {DS_REJ_DECODE_ERROR, DS_REJ_DECODE_ERROR};

    frames(st, sensor(st, "cam0"), cam0, sizeof cam0 / sizeof cam0[0], 1);
    frames(st, sensor(st, "cam1"), cam1, sizeof cam1 / sizeof cam1[0], 0);
    /* max_sensors is 2: a third sensor shares the "(other sensors)" bucket. */
    frames(st, sensor(st, "cam2"), other, sizeof other / sizeof other[0], 0);
    frames(st, DS_SENSOR_UNKNOWN, unknown, sizeof unknown / sizeof unknown[0], 0);

    for (int i = 0; i < 6; i++)
        dstats_request(st, TSDF_MSG_INTEGRATE, i == 0);
    for (int i = 0; i < 4; i++)
        dstats_request(st, TSDF_MSG_STATS, 0);
    dstats_request(st, TSDF_MSG_PING, 0);
    dstats_request(st, TSDF_MSG_NONE, 1);
    dstats_query_abandoned(st);
    dstats_query_abandoned(st);
    dstats_query_cancelled(st);
}

/* Samples in every window but the mesh stage's, each window its own. */
static void latencies(dstats *st)
{
    for (int j = 1; j <= 50; j++) {
        lat_window_add(&st->lat_integrate, 0.5 * j);
        lat_window_add(&st->lat_queue_wait, 0.25 * j);
        lat_window_add(&st->lat_request[TSDF_MSG_INTEGRATE], 0.7 * j);
        lat_window_add(&st->lat_request[TSDF_MSG_RAYCAST], 1.1 * j);
        lat_window_add(&st->lat_request[TSDF_MSG_STATS], 0.05 * j);
        for (int k = 0; k < DS_STAGE_COUNT; k++) {
            if (k != DS_STAGE_MESH)
                lat_window_add(&st->lat_stage[k], 0.1 * j * (k + 1));
        }
    }
    lat_window_add(&st->lat_request[TSDF_MSG_PING], 0.02);
}

static void volume(tsdf_volume_stats *st, int cuda, uint64_t seed)
{
    memset(st, 0, sizeof *st);
    st->backend = cuda ? TSDF_BACKEND_CUDA : TSDF_BACKEND_CPU;
    if (cuda) {
        st->blocks_allocated = 300;
        st->capacity_slots = 1024;
        st->load_factor = 300.0 / 1024.0;
        st->probe_hist[0] = 200;
        st->probe_hist[1] = 90;
        st->probe_hist[TSDF_PROBE_HIST_BINS - 1] = 10; /* displacements >= 15 */
        st->mean_probe = 1.0;
        st->growth_events = 3;
        st->insert_failures = 7;
        st->memory_bytes = 4096;
    } else {
        st->memory_bytes = 999; /* host memory: not GPU memory */
    }
    st->version = 40 + seed;
    st->frames_integrated = 50 + seed;
}

static void map(metrics_map *m, const char *name, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->name = name;
    m->queue.depth = 100 + seed;
    m->queue.depth_max = 110 + seed;
    m->queue.dropped_oldest = 120 + seed;
    m->queue.push_timeouts = 130 + seed;
    m->queue.bytes = 140 + seed;
    m->queue.dropped_memory = 150 + seed;
    m->queue.refused_memory = 160 + seed;
    m->frames_integrated = 170 + seed;
    m->frames_unsaved = 180 + seed;
    m->has_vstats = 1;
    volume(&m->vstats, seed == 0, seed);
}

int metrics_sample_init(metrics_sample *s)
{
    memset(s, 0, sizeof *s);
    int rc = dstats_init(&s->stats, 2, 64);
    if (rc != TSDF_OK)
        return rc;
    counters(&s->stats);
    latencies(&s->stats);
    map(&s->maps[0], "default", 0);
    map(&s->maps[1], "a\"b", 5);

    metrics_ctx *c = &s->ctx;
    dstats_get_totals(&s->stats, &c->totals);
    c->stats = &s->stats;
    c->queue_capacity = 16;
    c->queue_bytes = 123456;
    c->queue_max_bytes = 256u << 20;
    c->volume_bytes = 5000;
    c->volume_budget_bytes = 1u << 30;
    c->budget_refused = 17;
    c->conns_open = 3;
    c->conns_refused = 19;
    c->queries_busy[0] = 23;
    c->queries_busy[1] = 29;
    c->workers_stalled = 1;
    c->maps_count = METRICS_SAMPLE_MAPS;
    c->frames_unsaved = s->maps[0].frames_unsaved + s->maps[1].frames_unsaved;
    c->snapshot_age_ms = 4321;
    c->uptime_ms = 12500;
    c->has_host_memory = 1;
    c->host_memory_bytes = 300000000;
    c->version = "0.1.0";
    c->backend = "cuda";
    c->maps = s->maps;
    c->map_count = METRICS_SAMPLE_MAPS;
    return TSDF_OK;
}

void metrics_sample_fini(metrics_sample *s)
{
    dstats_fini(&s->stats);
}

metrics_ctx metrics_sample_for_map(const metrics_sample *s, size_t i)
{
    metrics_ctx c = s->ctx;
    c.maps = i < METRICS_SAMPLE_MAPS ? &s->maps[i] : NULL;
    c.map_count = i < METRICS_SAMPLE_MAPS ? 1 : 0;
    return c;
}
