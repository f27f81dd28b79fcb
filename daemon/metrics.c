/*
 * metrics.c - the catalogue of the daemon's counters and its two walks,
 * the stats reply's "daemon" entries and the /metrics text (see metrics.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "metrics.h"

#include "tsdf_error.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- values ------------------------------------------------------------- */

static metric_value int_value(int64_t i)
{
    metric_value v = {.i = i};
    return v;
}

static metric_value float_value(double f)
{
    metric_value v = {.is_float = 1, .f = f};
    return v;
}

/* The getters are one expression each; the macros keep them to one line
 * per figure, so that the table below is the place to read. */
#define GET(name, expr)                                                                            \
    static metric_value name(const metrics_ctx *c, const metrics_label *l)                         \
    {                                                                                              \
        return int_value((int64_t)(expr));                                                         \
    }
#define GET_TOTAL(name, expr)                                                                      \
    static metric_value name(const metrics_ctx *c)                                                 \
    {                                                                                              \
        return int_value((int64_t)(expr));                                                         \
    }
#define WINDOW(name, expr)                                                                         \
    static lat_window *name(const metrics_ctx *c, const metrics_label *l)                          \
    {                                                                                              \
        return (expr);                                                                             \
    }

static uint64_t array_sum(const uint64_t *a, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i];
    return s;
}

/* The request type of label index i: the i-th of every message type a
 * client may send, in the order of TSDF_MSG_TYPES, so that a type added
 * later gets its series. */
static tsdf_msg_type request_type_at(size_t i)
{
    for (int ty = 0; ty < TSDF_MSG_TYPE_COUNT; ty++)
        if (tsdf_msg_type_is_request((tsdf_msg_type)ty) && i-- == 0)
            return (tsdf_msg_type)ty;
    return TSDF_MSG_NONE;
}

#define TSDF_MSG_COUNT_REQUEST_(name, value, wire, request) +(request)
#define REQUEST_TYPE_COUNT ((size_t)(0 TSDF_MSG_TYPES(TSDF_MSG_COUNT_REQUEST_)))

/* Frames and what became of them (ds_totals, and per sensor). */
GET(get_in_flight,
    c->totals.received - c->totals.integrated - c->totals.dropped - c->totals.rejected)
GET(get_dropped, c->totals.outcome[DS_FIRST_DROP + (int)l->index])
GET(get_rejected, c->totals.outcome[DS_FIRST_REJECT + (int)l->index])
GET(get_sensor_received, l->sensor->received)
GET(get_sensor_integrated, l->sensor->outcome[DS_INTEGRATED])
GET(get_sensor_dropped,
    array_sum(l->sensor->outcome + DS_FIRST_DROP, DS_FIRST_REJECT - DS_FIRST_DROP))
GET(get_sensor_rejected,
    array_sum(l->sensor->outcome + DS_FIRST_REJECT, DS_OUTCOME_COUNT - DS_FIRST_REJECT))
GET(get_sensors_count,
    c->totals.sensor_count > DS_SENSOR_FIRST ? c->totals.sensor_count - DS_SENSOR_FIRST : 0)
GET(get_sensors_overflow, c->totals.sensors_overflow)
GET_TOTAL(total_received, c->totals.received)
GET_TOTAL(total_integrated, c->totals.integrated)
GET_TOTAL(total_dropped, c->totals.dropped)
GET_TOTAL(total_rejected, c->totals.rejected)

/* One map's queue and durability. */
GET(get_queue_depth, l->map->queue.depth)
GET(get_queue_depth_max, l->map->queue.depth_max)
GET(get_queue_dropped_oldest, l->map->queue.dropped_oldest)
GET(get_queue_push_timeouts, l->map->queue.push_timeouts)
GET(get_queue_map_bytes, l->map->queue.bytes)
GET(get_queue_dropped_memory, l->map->queue.dropped_memory)
GET(get_queue_refused_memory, l->map->queue.refused_memory)
GET(get_map_frames_integrated, l->map->frames_integrated)
GET(get_map_frames_unsaved, l->map->frames_unsaved)
GET(get_map_blocks_evicted, l->map->blocks_evicted)
GET(get_map_blocks_restored, l->map->blocks_restored)
GET(get_map_blocks_spilled, l->map->blocks_spilled)
GET_TOTAL(total_frames_unsaved, c->frames_unsaved)

/* The daemon as a whole. */
GET(get_queue_capacity, c->queue_capacity)
GET(get_queue_bytes, c->queue_bytes)
GET(get_queue_max_bytes, c->queue_max_bytes)
GET(get_pinned_bytes, c->pinned.bytes_out + c->pinned.bytes_kept)
GET(get_pinned_fallbacks, c->pinned.fallbacks)
GET(get_rings_attached, c->rings.attached)
GET(get_rings_bytes, c->rings.bytes)
GET(get_rings_refused, c->rings.refused)
GET(get_rings_frames, c->rings.frames)
GET(get_conns_open, c->conns_open)
GET(get_conns_refused, c->conns_refused)
GET(get_conns_idle_closed, c->conns_idle_closed)
GET(get_volume_bytes, c->volume_bytes)
GET(get_volume_budget, c->volume_budget_bytes)
GET(get_budget_refused, c->budget_refused)
GET(get_spill_damaged, c->spill_chunks_damaged)
GET(get_queries_abandoned, c->totals.queries_abandoned)
GET(get_queries_busy, c->queries_busy[l->index])
GET(get_queries_cancelled, c->totals.queries_cancelled)
GET(get_workers_stalled, c->workers_stalled)
GET(get_maps_count, c->maps_count)
GET(get_snapshot_age, c->snapshot_age_ms)
GET(get_requests_total, array_sum(c->totals.requests, DS_MSG_TYPES))
GET(get_requests_errors, array_sum(c->totals.request_errors, DS_MSG_TYPES))
GET(get_uptime, c->uptime_ms)

static metric_value get_host_memory(const metrics_ctx *c, const metrics_label *l)
{
    metric_value v = int_value((int64_t)c->host_memory_bytes);
    v.missing = !c->has_host_memory;
    return v;
}

/* Latency windows (dstats). */
WINDOW(win_integrate, &c->stats->lat_integrate)
WINDOW(win_queue_wait, &c->stats->lat_queue_wait)
WINDOW(win_request, &c->stats->lat_request[request_type_at(l->index)])
WINDOW(win_stage, &c->stats->lat_stage[l->index])

/* A map's volume statistics (the stats reply's "engine" map). */
GET(get_hash_blocks, l->map->vstats.blocks_allocated)
GET(get_hash_slots, l->map->vstats.capacity_slots)
GET(get_hash_growth, l->map->vstats.growth_events)
GET(get_hash_insert_failures, l->map->vstats.insert_failures)
GET(get_gpu_memory, l->map->vstats.backend == TSDF_BACKEND_CUDA ? l->map->vstats.memory_bytes : 0u)
GET(get_map_version, l->map->vstats.version)

static metric_value get_hash_load(const metrics_ctx *c, const metrics_label *l)
{
    return float_value(l->map->vstats.load_factor);
}

/* The engine's last probe bin holds displacements >= 15: the +Inf bucket. */
static void hist_probe(const metrics_ctx *c, const metrics_label *l, metrics_hist *out)
{
    const tsdf_volume_stats *st = &l->map->vstats;
    out->n = TSDF_PROBE_HIST_BINS - 1;
    for (size_t k = 0; k < out->n; k++) {
        out->le[k] = (double)k;
        out->counts[k] = st->probe_hist[k];
    }
    out->overflow = st->probe_hist[TSDF_PROBE_HIST_BINS - 1];
    out->sum = st->mean_probe * (double)st->blocks_allocated;
}

_Static_assert(TSDF_PROBE_HIST_BINS - 1 <= METRICS_HIST_MAX_BUCKETS,
               "the probe histogram must fit metrics_hist");

/* ---- the table ---------------------------------------------------------- */

/* Bits of stats_first for the request types the reply always had. */
#define REQ_BIT(t) (1u << ((t)-TSDF_MSG_INTEGRATE))

static const metrics_row rows[] = {
    /* Frames: received, and what became of them. */
    {.stats_key = "sensor.<sensor>.received",
     .stats_total_key = "frames.received",
     .prom_name = "tsdfd_frames_received_total",
     .help = "Frames received (pushed frames and integrate requests).",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_SENSOR,
     .flags = METRIC_F_OLD_NAME,
     .value = get_sensor_received,
     .total = total_received},
    {.stats_key = "sensor.<sensor>.integrated",
     .stats_total_key = "frames.integrated",
     .prom_name = "tsdfd_frames_integrated_total",
     .help = "Frames fused into a volume.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_SENSOR,
     .flags = METRIC_F_OLD_NAME,
     .value = get_sensor_integrated,
     .total = total_integrated},
    {.stats_key = "dropped.<reason>",
     .stats_total_key = "frames.dropped",
     .prom_name = "tsdfd_frames_dropped_total",
     .help = "Valid frames not integrated because of backpressure or shutdown.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_DROP_REASON,
     .flags = METRIC_F_OLD_NAME,
     .value = get_dropped,
     .total = total_dropped},
    {.stats_key = "rejected.<reason>",
     .stats_total_key = "frames.rejected",
     .prom_name = "tsdfd_frames_rejected_total",
     .help = "Frames refused as invalid or not fitting.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_REJECT_REASON,
     .flags = METRIC_F_OLD_NAME,
     .value = get_rejected,
     .total = total_rejected},
    {.stats_key = "frames.in_flight",
     .prom_name = "tsdfd_frames_in_flight",
     .help = "Frames received that have no outcome yet: queued or being integrated.",
     .type = METRIC_GAUGE,
     .value = get_in_flight},
    {.stats_key = "sensor.<sensor>.dropped",
     .prom_name = "tsdfd_sensor_dropped_total",
     .help = "Frames dropped, by sensor (tsdfd_frames_dropped_total has them by reason).",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_SENSOR,
     .value = get_sensor_dropped},
    {.stats_key = "sensor.<sensor>.rejected",
     .prom_name = "tsdfd_sensor_rejected_total",
     .help = "Frames rejected, by sensor (tsdfd_frames_rejected_total has them by reason).",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_SENSOR,
     .value = get_sensor_rejected},

    /* One map's queue and durability. */
    {.stats_key = "queue.depth",
     .prom_name = "tsdfd_queue_depth",
     .help = "Frames waiting in the map's queue.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_depth},
    {.stats_key = "queue.depth_max",
     .prom_name = "tsdfd_queue_depth_max",
     .help = "The most frames the map's queue has held at once.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_depth_max},
    {.stats_key = "queue.capacity",
     .prom_name = "tsdfd_queue_capacity",
     .help = "Frames each map's queue holds ([queue] length).",
     .type = METRIC_GAUGE,
     .value = get_queue_capacity},
    {.stats_key = "queue.dropped_oldest",
     .prom_name = "tsdfd_queue_dropped_oldest_total",
     .help = "Frames the map's full queue dropped to make room for newer ones (policy "
             "drop_oldest).",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_dropped_oldest},
    {.stats_key = "queue.push_timeouts",
     .prom_name = "tsdfd_queue_push_timeouts_total",
     .help = "Integrates refused QUEUE_FULL after waiting [queue] push_timeout_ms for room in "
             "the map's queue.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_push_timeouts},
    {.stats_key = "queue.map_bytes",
     .prom_name = "tsdfd_queue_map_bytes",
     .help = "Bytes held by the frames queued in the map.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_map_bytes},
    {.stats_key = "queue.dropped_memory",
     .prom_name = "tsdfd_queue_dropped_memory_total",
     .help = "Queued frames of the map dropped to fit the [queue] max_bytes_mb budget.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_dropped_memory},
    {.stats_key = "queue.refused_memory",
     .prom_name = "tsdfd_queue_refused_memory_total",
     .help = "Frames for the map refused because the [queue] max_bytes_mb budget had no room.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_queue_refused_memory},
    {.stats_key = "map.frames_integrated",
     .prom_name = "tsdfd_map_frames_integrated_total",
     .help = "Frames the daemon integrated into the map.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_map_frames_integrated},
    {.stats_key = "map.frames_unsaved",
     .stats_total_key = "frames.unsaved",
     .prom_name = "tsdfd_frames_unsaved",
     .help = "Frames integrated since the map's last snapshot that a restart restores: what a "
             "crash now would lose.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_MAP,
     .flags = METRIC_F_OLD_NAME,
     .value = get_map_frames_unsaved,
     .total = total_frames_unsaved},
    {.stats_key = "map.blocks_evicted",
     .prom_name = "tsdfd_map_blocks_evicted_total",
     .help = "Blocks removed from the map's volume by eviction ([eviction] mode drop or spill).",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_map_blocks_evicted},
    {.stats_key = "map.blocks_restored",
     .prom_name = "tsdfd_map_blocks_restored_total",
     .help = "Spilled blocks brought back into the map's volume when a frame reached them.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_MAP,
     .value = get_map_blocks_restored},
    {.stats_key = "map.blocks_spilled",
     .prom_name = "tsdfd_map_blocks_spilled",
     .help = "Blocks of the map in its spill store (state_dir/spill/<map>) now.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_MAP,
     .value = get_map_blocks_spilled},

    /* The daemon as a whole. */
    {.stats_key = "queue.bytes",
     .prom_name = "tsdfd_queue_bytes",
     .help = "Bytes held by the frames queued in every map (bounded by [queue] max_bytes_mb).",
     .type = METRIC_GAUGE,
     .value = get_queue_bytes},
    {.stats_key = "queue.max_bytes",
     .prom_name = "tsdfd_queue_max_bytes",
     .help = "The bound on tsdfd_queue_bytes ([queue] max_bytes_mb).",
     .type = METRIC_GAUGE,
     .value = get_queue_max_bytes},
    {.stats_key = "queue.pinned_bytes",
     .prom_name = "tsdfd_queue_pinned_bytes",
     .help = "Page-locked host memory held for frames' depth and colour images, in use and "
             "kept (CUDA only; bounded by [queue] pinned_mb).",
     .type = METRIC_GAUGE,
     .value = get_pinned_bytes},
    {.stats_key = "queue.pinned_fallbacks",
     .prom_name = "tsdfd_queue_pinned_fallbacks_total",
     .help = "Frames' images (depth or colour) that took ordinary memory because the "
             "page-locked buffers were full.",
     .type = METRIC_COUNTER,
     .value = get_pinned_fallbacks},
    {.stats_key = "rings.attached",
     .prom_name = "tsdfd_rings_attached",
     .help = "Shared-memory frame rings attached by local clients ([server] ring_socket).",
     .type = METRIC_GAUGE,
     .value = get_rings_attached},
    {.stats_key = "rings.bytes",
     .prom_name = "tsdfd_rings_bytes",
     .help = "Bytes of the attached frame rings (bounded by [server] ring_max_mb).",
     .type = METRIC_GAUGE,
     .value = get_rings_bytes},
    {.stats_key = "rings.refused",
     .prom_name = "tsdfd_rings_refused_total",
     .help = "Ring socket connections and ring attachments refused.",
     .type = METRIC_COUNTER,
     .value = get_rings_refused},
    {.stats_key = "rings.frames",
     .prom_name = "tsdfd_rings_frames_total",
     .help = "Frames whose depth the daemon read from a frame ring.",
     .type = METRIC_COUNTER,
     .value = get_rings_frames},
    {.stats_key = "connections.open",
     .prom_name = "tsdfd_connections",
     .help = "Connections open on the request and frame sockets.",
     .type = METRIC_GAUGE,
     .flags = METRIC_F_OLD_NAME,
     .value = get_conns_open},
    {.stats_key = "connections.refused",
     .prom_name = "tsdfd_connections_refused_total",
     .help = "Connections closed at once because [server] max_connections were open and every "
             "one of them had a request in progress.",
     .type = METRIC_COUNTER,
     .value = get_conns_refused},
    {.stats_key = "connections.idle_closed",
     .prom_name = "tsdfd_connections_idle_closed_total",
     .help = "Connections closed with no request in progress: idle for [server] idle_timeout_s, "
             "or the longest idle one when a new connection found max_connections open.",
     .type = METRIC_COUNTER,
     .value = get_conns_idle_closed},
    {.stats_key = "volume.memory_bytes",
     .prom_name = "tsdfd_volume_memory_bytes",
     .help = "Memory held by every map's volume together (host for CPU volumes, device for "
             "CUDA ones).",
     .type = METRIC_GAUGE,
     .value = get_volume_bytes},
    {.stats_key = "volume.memory_budget_bytes",
     .prom_name = "tsdfd_volume_memory_budget_bytes",
     .help = "The bound on tsdfd_volume_memory_bytes ([volume] memory_budget_mb, resolved).",
     .type = METRIC_GAUGE,
     .value = get_volume_budget},
    {.stats_key = "volume.budget_refused_frames",
     .prom_name = "tsdfd_volume_budget_refused_frames_total",
     .help = "Frames refused because the volume memory budget had no room (also counted in "
             "tsdfd_frames_rejected_total, reason capacity).",
     .type = METRIC_COUNTER,
     .value = get_budget_refused},
    {.stats_key = "spill.chunks_damaged",
     .prom_name = "tsdfd_spill_chunks_damaged_total",
     .help = "Spill chunk files that did not read back (truncated, corrupt, replaced or a "
             "link): each one's blocks were lost and their space is unobserved; every other "
             "block was kept.",
     .type = METRIC_COUNTER,
     .value = get_spill_damaged},
    {.stats_key = "queries.abandoned",
     .prom_name = "tsdfd_queries_abandoned_total",
     .help = "Queries not run: their request timed out while they waited, or the daemon "
             "stopped.",
     .type = METRIC_COUNTER,
     .value = get_queries_abandoned},
    {.stats_key = "queries.busy_<reason>",
     .prom_name = "tsdfd_queries_busy_total",
     .help = "Queries refused with BUSY: their map (reason map) or their kind (reason kind) "
             "already had its share of request contexts waiting.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_BUSY_REASON,
     .value = get_queries_busy},
    {.stats_key = "queries.cancelled",
     .prom_name = "tsdfd_queries_cancelled_total",
     .help = "Raycasts stopped while running because their request timed out.",
     .type = METRIC_COUNTER,
     .value = get_queries_cancelled},
    {.stats_key = "workers.stalled",
     .prom_name = "tsdfd_workers_stalled",
     .help = "Map workers on one job for longer than [server] stall_timeout_ms.",
     .type = METRIC_GAUGE,
     .value = get_workers_stalled},
    {.stats_key = "maps.count",
     .prom_name = "tsdfd_maps",
     .help = "Maps that exist now.",
     .type = METRIC_GAUGE,
     .value = get_maps_count},
    {.stats_key = "snapshot.last_save_age_ms",
     .prom_name = "tsdfd_snapshot_age_seconds",
     .help = "Seconds since the last snapshot that a restart restores (-1: none yet).",
     .type = METRIC_GAUGE,
     .unit = METRIC_UNIT_MS,
     .flags = METRIC_F_OLD_NAME,
     .value = get_snapshot_age},
    {.stats_key = "requests.total",
     .prom_name = "tsdfd_requests_total",
     .help = "Requests answered, of every type (tsdfd_request_seconds has them by type).",
     .type = METRIC_COUNTER,
     .value = get_requests_total},
    {.stats_key = "requests.errors",
     .prom_name = "tsdfd_requests_errors_total",
     .help = "Requests answered with an error reply.",
     .type = METRIC_COUNTER,
     .value = get_requests_errors},
    {.stats_key = "uptime_ms",
     .prom_name = "tsdfd_uptime_seconds",
     .help = "Seconds since the daemon started.",
     .type = METRIC_GAUGE,
     .unit = METRIC_UNIT_MS,
     .value = get_uptime},
    {.stats_key = "host.memory_bytes",
     .prom_name = "tsdfd_host_memory_bytes",
     .help = "Resident set size of the daemon.",
     .type = METRIC_GAUGE,
     .value = get_host_memory},

    /* Latencies. */
    {.stats_key = "latency.integrate",
     .prom_name = "tsdfd_integrate_seconds",
     .help = "Time the engine takes to integrate a frame (with the wait for the device of an "
             "acknowledged one).",
     .type = METRIC_SUMMARY,
     .stats_first = 1u,
     .window = win_integrate},
    {.stats_key = "latency.queue_wait",
     .prom_name = "tsdfd_queue_wait_seconds",
     .help = "Time a frame waits in its map's queue.",
     .type = METRIC_SUMMARY,
     .stats_first = 1u,
     .window = win_queue_wait},
    {.stats_key = "latency.request.<type>",
     .prom_name = "tsdfd_request_seconds",
     .help = "Request service time, by request type.",
     .type = METRIC_SUMMARY,
     .dim = METRIC_DIM_REQUEST_TYPE,
     .stats_first =
         REQ_BIT(TSDF_MSG_INTEGRATE) | REQ_BIT(TSDF_MSG_RAYCAST) | REQ_BIT(TSDF_MSG_MESH),
     .window = win_request},
    {.stats_key = "latency.stage.<stage>",
     .prom_name = "tsdfd_stage_latency_seconds",
     .help = "Time per pipeline stage; quantiles over the last log.latency_window samples.",
     .type = METRIC_SUMMARY,
     .dim = METRIC_DIM_STAGE,
     .flags = METRIC_F_OLD_NAME,
     .window = win_stage},

    /* Sensors. */
    {.stats_key = "sensors.count",
     .prom_name = "tsdfd_sensors",
     .help = "Sensors with counters of their own (at most [queue] max_sensors; not the \"(no "
             "sensor)\" and \"(other sensors)\" buckets).",
     .type = METRIC_GAUGE,
     .value = get_sensors_count},
    {.stats_key = "sensors.overflow_frames",
     .prom_name = "tsdfd_sensors_overflow_frames_total",
     .help = "Frames of sensors beyond [queue] max_sensors (counted under sensor=\"(other "
             "sensors)\").",
     .type = METRIC_COUNTER,
     .value = get_sensors_overflow},

    /* Per map, from the map's volume statistics. */
    {.stats_key = "engine.load_factor",
     .prom_name = "tsdfd_hash_load_factor",
     .help = "Allocated voxel blocks per hash-table slot (the table grows before "
             "volume.max_load_factor).",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_ENGINE,
     .value = get_hash_load},
    {.stats_key = "engine.blocks_allocated",
     .prom_name = "tsdfd_hash_blocks",
     .help = "Allocated 8x8x8 voxel blocks.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_ENGINE,
     .value = get_hash_blocks},
    {.stats_key = "engine.capacity_slots",
     .prom_name = "tsdfd_hash_capacity_slots",
     .help = "Slots of the hash table.",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_ENGINE,
     .value = get_hash_slots},
    {.stats_key = "engine.probe_hist",
     .prom_name = "tsdfd_hash_probe_length",
     .help = "Displacement of resident keys from their home slot, in slots.",
     .type = METRIC_HISTOGRAM,
     .dim = METRIC_DIM_ENGINE,
     .histogram = hist_probe},
    {.stats_key = "engine.growth_events",
     .prom_name = "tsdfd_hash_growth_events_total",
     .help = "Rehashes into a larger table.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_ENGINE,
     .value = get_hash_growth},
    {.stats_key = "engine.insert_failures",
     .prom_name = "tsdfd_hash_insert_failures_total",
     .help = "Blocks not inserted because of the memory cap.",
     .type = METRIC_COUNTER,
     .dim = METRIC_DIM_ENGINE,
     .value = get_hash_insert_failures},
    {.stats_key = "engine.memory_bytes",
     .prom_name = "tsdfd_gpu_memory_bytes",
     .help = "Device memory held by the map's volume (0 on the CPU backend).",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_ENGINE,
     .value = get_gpu_memory},
    {.stats_key = "engine.version",
     .prom_name = "tsdfd_map_version",
     .help = "Version of the map's volume (bumps on every change).",
     .type = METRIC_GAUGE,
     .dim = METRIC_DIM_ENGINE,
     .value = get_map_version},
};

#define ROW_COUNT (sizeof rows / sizeof rows[0])

const metrics_row *metrics_rows(size_t *count)
{
    *count = ROW_COUNT;
    return rows;
}

/* ---- dimensions --------------------------------------------------------- */

const char *metrics_dim_label(metric_dim d)
{
    static const char *const names[METRIC_DIM_COUNT] = {
        [METRIC_DIM_MAP] = "map",
        [METRIC_DIM_ENGINE] = "map",
        [METRIC_DIM_SENSOR] = "sensor",
        [METRIC_DIM_DROP_REASON] = "reason",
        [METRIC_DIM_REJECT_REASON] = "reason",
        [METRIC_DIM_BUSY_REASON] = "reason",
        [METRIC_DIM_STAGE] = "stage",
        [METRIC_DIM_REQUEST_TYPE] = "type",
    };
    return (unsigned)d < METRIC_DIM_COUNT ? names[d] : NULL;
}

size_t metrics_dim_fixed_count(metric_dim d)
{
    switch (d) {
    case METRIC_DIM_NONE:
        return 1;
    case METRIC_DIM_DROP_REASON:
        return DS_FIRST_REJECT - DS_FIRST_DROP;
    case METRIC_DIM_REJECT_REASON:
        return DS_OUTCOME_COUNT - DS_FIRST_REJECT;
    case METRIC_DIM_BUSY_REASON:
        return 2;
    case METRIC_DIM_STAGE:
        return DS_STAGE_COUNT;
    case METRIC_DIM_REQUEST_TYPE:
        return REQUEST_TYPE_COUNT;
    default:
        return 0;
    }
}

const char *metrics_dim_fixed_value(metric_dim d, size_t i)
{
    if (i >= metrics_dim_fixed_count(d))
        return NULL;
    switch (d) {
    case METRIC_DIM_DROP_REASON:
        return dstats_outcome_name((ds_outcome)(DS_FIRST_DROP + (int)i));
    case METRIC_DIM_REJECT_REASON:
        return dstats_outcome_name((ds_outcome)(DS_FIRST_REJECT + (int)i));
    case METRIC_DIM_BUSY_REASON:
        return i == 0 ? "map" : "kind";
    case METRIC_DIM_STAGE:
        return dstats_stage_name((ds_stage)i);
    case METRIC_DIM_REQUEST_TYPE:
        return tsdf_msg_type_name(request_type_at(i));
    default:
        return NULL;
    }
}

/* Walks the labels of one dimension in a context: the maps, the sensors
 * that received a frame (an always-zero series confuses more than it
 * tells), or the fixed list. */
typedef struct {
    const metrics_ctx *c;
    metric_dim dim;
    size_t next;
    metrics_label label;
    const char *value; /* the raw label value; NULL for METRIC_DIM_NONE */
    ds_sensor sensor;
} label_iter;

static void label_iter_init(label_iter *it, const metrics_ctx *c, metric_dim dim)
{
    memset(it, 0, sizeof *it);
    it->c = c;
    it->dim = dim;
}

static int label_next(label_iter *it)
{
    const metrics_ctx *c = it->c;
    memset(&it->label, 0, sizeof it->label);
    switch (it->dim) {
    case METRIC_DIM_MAP:
    case METRIC_DIM_ENGINE:
        while (it->next < c->map_count) {
            const metrics_map *m = &c->maps[it->next];
            it->label.index = it->next++;
            if (it->dim == METRIC_DIM_ENGINE && !m->has_vstats)
                continue;
            it->label.map = m;
            it->value = m->name;
            return 1;
        }
        return 0;
    case METRIC_DIM_SENSOR:
        while (it->next < c->totals.sensor_count) {
            it->label.index = it->next++;
            if (!dstats_sensor_at(c->stats, it->label.index, &it->sensor))
                return 0;
            if (it->sensor.received == 0)
                continue;
            it->label.sensor = &it->sensor;
            it->value = it->sensor.name;
            return 1;
        }
        return 0;
    default:
        if (it->next >= metrics_dim_fixed_count(it->dim))
            return 0;
        it->label.index = it->next++;
        it->value = metrics_dim_fixed_value(it->dim, it->label.index);
        return 1;
    }
}

/* The stats key of a row for one label value: the pattern with its
 * "<label>" replaced (a pattern without one is the key itself). */
static void expand_key(const char *pattern, const char *value, char *out, size_t len)
{
    const char *open = strchr(pattern, '<');
    const char *close = open != NULL ? strchr(open, '>') : NULL;
    if (close == NULL || value == NULL) {
        snprintf(out, len, "%s", pattern);
        return;
    }
    snprintf(out, len, "%.*s%s%s", (int)(open - pattern), pattern, value, close + 1);
}

/* ---- the stats reply ---------------------------------------------------- */

/* Room for a key pattern expanded with any label value and a summary's
 * suffix; put() leaves out what is longer than the protocol allows. */
#define KEY_BUF (TSDF_PROTO_MAX_STATS_KEY_LEN + DS_SENSOR_NAME_LEN + 64)

static void put(tsdf_rep_stats *s, const char *key, metric_value v)
{
    if (v.missing || s->extra_count >= TSDF_PROTO_MAX_STATS_EXTRA ||
        strlen(key) > TSDF_PROTO_MAX_STATS_KEY_LEN)
        return;
    tsdf_stat_entry *e = &s->extra[s->extra_count++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->is_float = v.is_float;
    e->i = v.i;
    e->f = v.f;
}

/* A summary as key.count, and when the window holds samples key.p50_ms and
 * key.p99_ms, plus key.max_ms and key.mean_ms when full; all of them or,
 * when the reply has no room for all, none. */
static void put_summary(tsdf_rep_stats *s, const char *key, lat_window *w, int full)
{
    static const char *const suffix[] = {"count", "p50_ms", "p99_ms", "max_ms", "mean_ms"};
    lat_summary ls;
    char k[KEY_BUF + 16];
    lat_window_summary(w, &ls);
    metric_value v[5] = {int_value((int64_t)ls.count), float_value(ls.p50_ms),
                         float_value(ls.p99_ms), float_value(ls.max_ms),
                         float_value(ls.count > 0 ? ls.sum_ms / (double)ls.count : 0.0)};
    size_t n = ls.count == 0 ? 1 : full ? 5 : 3;
    if (s->extra_count + n > TSDF_PROTO_MAX_STATS_EXTRA)
        return;
    for (size_t i = 0; i < n; i++) {
        snprintf(k, sizeof k, "%s.%s", key, suffix[i]);
        put(s, k, v[i]);
    }
}

/* Whether a row's entries for a label come before the per-sensor entries:
 * all but those of the summary labels the reply did not always have. */
static int label_first(const metrics_row *r, size_t label)
{
    return r->type != METRIC_SUMMARY || ((r->stats_first >> label) & 1u);
}

/* The most entries the first (first = 1) or the last part gives. */
static size_t entries_max(int first)
{
    size_t n = 0;
    for (size_t i = 0; i < ROW_COUNT; i++) {
        const metrics_row *r = &rows[i];
        if (first)
            n += r->stats_total_key != NULL;
        /* Per-map rows give the asked map's entry; sensors are counted
         * apart, and the engine rows are the reply's engine map. */
        size_t labels = r->dim == METRIC_DIM_MAP ? 1 : metrics_dim_fixed_count(r->dim);
        for (size_t k = 0; k < labels; k++) {
            if (label_first(r, k) != first)
                continue;
            n += r->type != METRIC_SUMMARY ? 1 : first ? 5 : 3;
        }
    }
    return n;
}

size_t metrics_stats_entries_first(void)
{
    return entries_max(1);
}

size_t metrics_stats_entries_last(void)
{
    return entries_max(0);
}

size_t metrics_stats_sensor_label_max(void)
{
    size_t longest = 0;
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (rows[i].dim == METRIC_DIM_SENSOR) {
            size_t n = strlen(rows[i].stats_key) - (sizeof "<sensor>" - 1);
            longest = n > longest ? n : longest;
        }
    }
    return TSDF_PROTO_MAX_STATS_KEY_LEN - longest;
}

size_t metrics_stats_entries_per_sensor(void)
{
    size_t n = 0;
    for (size_t i = 0; i < ROW_COUNT; i++)
        n += rows[i].dim == METRIC_DIM_SENSOR;
    return n;
}

/* The label a sensor has in stats keys: its name, or when that would make
 * a key too long its first 20 bytes and "~<index>". */
static void sensor_stats_label(const ds_sensor *sn, size_t index, char *out, size_t len)
{
    size_t max = metrics_stats_sensor_label_max();
    if (strlen(sn->name) <= max)
        snprintf(out, len, "%.*s", (int)max, sn->name);
    else
        snprintf(out, len, "%.20s~%zu", sn->name, index);
}

/* Every sensor's entries, sensor after sensor, as far as the reply has
 * room for all of a sensor's entries. */
static void fill_sensors(const metrics_ctx *c, tsdf_rep_stats *s)
{
    label_iter it;
    char label[TSDF_PROTO_MAX_STATS_KEY_LEN + 1];
    char key[KEY_BUF];
    size_t per_sensor = metrics_stats_entries_per_sensor();

    label_iter_init(&it, c, METRIC_DIM_SENSOR);
    while (label_next(&it)) {
        if (s->extra_count + per_sensor > TSDF_PROTO_MAX_STATS_EXTRA)
            break;
        sensor_stats_label(it.label.sensor, it.label.index, label, sizeof label);
        for (size_t i = 0; i < ROW_COUNT; i++) {
            if (rows[i].dim != METRIC_DIM_SENSOR)
                continue;
            expand_key(rows[i].stats_key, label, key, sizeof key);
            put(s, key, rows[i].value(c, &it.label));
        }
    }
}

/* The rows' entries of one part: first, or the later summaries. */
static void fill_rows(const metrics_ctx *c, tsdf_rep_stats *s, int first)
{
    label_iter it;
    char key[KEY_BUF];

    for (size_t i = 0; i < ROW_COUNT; i++) {
        const metrics_row *r = &rows[i];
        if (first && r->stats_total_key != NULL)
            put(s, r->stats_total_key, r->total(c));
        if (r->dim == METRIC_DIM_SENSOR || r->dim == METRIC_DIM_ENGINE)
            continue;
        label_iter_init(&it, c, r->dim);
        while (label_next(&it)) {
            if (label_first(r, it.label.index) != first)
                continue;
            expand_key(r->stats_key, it.value, key, sizeof key);
            if (r->type == METRIC_SUMMARY)
                put_summary(s, key, r->window(c, &it.label), first);
            else
                put(s, key, r->value(c, &it.label));
        }
    }
}

int metrics_fill_stats(const metrics_ctx *c, tsdf_rep_stats *s)
{
    if (c->map_count > 1)
        return TSDF_EINVAL;
    fill_rows(c, s, 1);
    fill_sensors(c, s);
    fill_rows(c, s, 0);
    if (c->map_count == 1 && c->maps[0].has_vstats) {
        s->has_engine = 1;
        s->engine = c->maps[0].vstats;
    }
    return TSDF_OK;
}

/* ---- /metrics ----------------------------------------------------------- */

static const char *type_name(metric_type t)
{
    static const char *const names[] = {"counter", "gauge", "summary", "histogram"};
    return names[t];
}

static double prom_value(const metrics_row *r, metric_value v)
{
    double x = v.is_float ? v.f : (double)v.i;
    return r->unit == METRIC_UNIT_MS && x >= 0 ? x / 1e3 : x;
}

static void render_row(const metrics_ctx *c, const metrics_row *r, prom_buf *b)
{
    label_iter it;
    char esc[160], labels[192];
    const char *label = metrics_dim_label(r->dim);

    prom_family(b, r->prom_name, type_name(r->type), r->help);
    label_iter_init(&it, c, r->dim);
    while (label_next(&it)) {
        labels[0] = '\0';
        if (label != NULL) {
            prom_label_escape(esc, sizeof esc, it.value);
            snprintf(labels, sizeof labels, "%s=\"%s\"", label, esc);
        }
        if (r->type == METRIC_SUMMARY) {
            lat_summary ls;
            lat_window_summary(r->window(c, &it.label), &ls);
            prom_summary(b, r->prom_name, r->help, labels, &ls);
        } else if (r->type == METRIC_HISTOGRAM) {
            metrics_hist h;
            r->histogram(c, &it.label, &h);
            prom_histogram(b, r->prom_name, r->help, labels, h.le, h.counts, h.n, h.overflow,
                           h.sum);
        } else {
            metric_value v = r->value(c, &it.label);
            if (v.missing)
                continue;
            if (r->type == METRIC_COUNTER)
                prom_counter(b, r->prom_name, r->help, labels, prom_value(r, v));
            else
                prom_gauge(b, r->prom_name, r->help, labels, prom_value(r, v));
        }
    }
}

int metrics_render(const metrics_ctx *c, prom_buf *b)
{
    /* The one family that is no counter: the build's identity (the ping
     * reply's "server" says the same, and engine.backend the backend). */
    char labels[192], v[64], be[64];
    prom_label_escape(v, sizeof v, c->version != NULL ? c->version : "unknown");
    prom_label_escape(be, sizeof be, c->backend != NULL ? c->backend : "unknown");
    snprintf(labels, sizeof labels, "version=\"%s\",backend=\"%s\"", v, be);
    prom_gauge(b, "tsdfd_build_info", "Build of the daemon; the value is always 1.", labels, 1);
    for (size_t i = 0; i < ROW_COUNT; i++)
        render_row(c, &rows[i], b);
    return prom_buf_error(b);
}

int metrics_rss_bytes(uint64_t *out)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return TSDF_EIO;
    unsigned long long size_pages = 0, resident_pages = 0;
    int got = fscanf(f, "%llu %llu", &size_pages, &resident_pages);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (got != 2 || page <= 0)
        return TSDF_EIO;
    *out = (uint64_t)resident_pages * (uint64_t)page;
    return TSDF_OK;
}
