/*
 * metrics.h - the one catalogue of the daemon's counters, and the two
 * outputs that walk it: the "daemon" entries of the stats reply
 * (proto/PROTOCOL.md, 6.6) and the /metrics text (docs/OPERATIONS.md,
 * "Metrics").
 *
 * Each row of the table describes one figure once: its stats key, its
 * Prometheus family, help text, type, label dimension, unit and how to read
 * its value from a metrics_ctx. Both outputs iterate the same rows, so a
 * figure added to the table appears in both, and none can exist in one and
 * not the other (issue #11). The habit is Valkey's INFO and config tables.
 *
 * The context is a plain snapshot of numbers, gathered by the caller:
 * the stats reply fills it from the counters the map's worker read in one
 * step with the engine's statistics (job_counters), /metrics from live
 * counters and the maps' cached statistics (it never waits for a worker).
 * Neither walk reads anything but the context (and, through ctx->stats,
 * the sensors and the latency windows, which are thread-safe).
 *
 * Stats keys: a key names the value of its row; a label row's key holds
 * the label's place as "<label>" ("dropped.<reason>", "sensor.<sensor>.
 * received"). A per-map row's key has no place: the stats reply is about
 * one map, the one asked for. Rows of the engine dimension are the reply's
 * "engine" map ("engine.<key>"), a fixed schema of its own; their
 * Prometheus families carry the same figures per map.
 *
 * Units: a row of unit METRIC_UNIT_MS holds milliseconds in the stats reply
 * and seconds in /metrics; a negative value means "none yet" and stays as
 * it is in both (-1). Summaries are kept in milliseconds (lat_window) and
 * exported as seconds by prom_summary.
 *
 * Threads: the table is constant; the walks may run on any thread, many at
 * once, each with its own context and output.
 */
#ifndef TSDFD_METRICS_H
#define TSDFD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "dstats.h"
#include "frame_pool.h"
#include "latency.h"
#include "prom.h"
#include "queue.h"
#include "rings.h"
#include "tsdf_proto.h"
#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    METRIC_COUNTER = 0,
    METRIC_GAUGE,
    METRIC_SUMMARY,
    METRIC_HISTOGRAM,
} metric_type;

/* What a row's series are labelled with. */
typedef enum {
    METRIC_DIM_NONE = 0,      /* one value, no label */
    METRIC_DIM_MAP,           /* map="<name>"; stats reply: the asked map's value */
    METRIC_DIM_ENGINE,        /* map="<name>", from the map's volume stats; stats reply: "engine" */
    METRIC_DIM_SENSOR,        /* sensor="<name>"; stats reply: sensor.<name>.<figure> */
    METRIC_DIM_DROP_REASON,   /* reason="queue_full" | "shutdown" | "memory" */
    METRIC_DIM_REJECT_REASON, /* reason="decode_error" | ... | "depth_decode" */
    METRIC_DIM_BUSY_REASON,   /* reason="map" | "kind" */
    METRIC_DIM_STAGE,         /* stage="decode" | ... | "mesh" (ds_stage) */
    METRIC_DIM_REQUEST_TYPE,  /* type="integrate" | ... (every request type) */
    METRIC_DIM_COUNT
} metric_dim;

typedef enum {
    METRIC_UNIT_NONE = 0,
    METRIC_UNIT_MS, /* stats reply: milliseconds; /metrics: seconds */
} metric_unit;

/* Row flags. */
enum {
    /* The Prometheus name predates the table and does not follow the
     * naming rule (docs/OPERATIONS.md, "Metrics"); kept, as clients query it. */
    METRIC_F_OLD_NAME = 1u << 0,
};

/* One value: an integer, or a number when is_float. missing: the figure
 * could not be read (the host's memory without /proc): neither output
 * carries it this time. */
typedef struct {
    int is_float;
    int missing;
    int64_t i;
    double f;
} metric_value;

/* One map as the outputs see it. */
typedef struct {
    const char *name;           /* raw (escaped by the render) */
    queue_stats queue;          /* the map's queue */
    uint64_t frames_integrated; /* frames the daemon integrated into this map */
    uint64_t frames_unsaved;    /* of those, the ones a crash now would lose */
    uint64_t blocks_evicted;    /* removed from the volume by eviction (evict.h) */
    uint64_t blocks_restored;   /* brought back from the spill store */
    uint64_t blocks_spilled;    /* in the spill store now */
    int has_vstats;             /* vstats is valid (METRIC_DIM_ENGINE rows) */
    tsdf_volume_stats vstats;   /* the map's volume statistics */
} metrics_map;

/* The numbers both outputs are made from. The caller owns everything it
 * points to, for the duration of one walk. */
typedef struct {
    ds_totals totals;
    /* Sensors (dstats_sensor_at) and latency windows; read during the
     * walk (both are thread-safe). Never NULL. */
    dstats *stats;
    uint64_t queue_capacity;       /* frames per map queue ([queue] length) */
    uint64_t queue_bytes;          /* bytes queued in every map */
    uint64_t queue_max_bytes;      /* [queue] max_bytes_mb, in bytes */
    frame_pool_stats pinned;       /* the page-locked depth buffers (all 0 without) */
    rings_stats rings;             /* the shared-memory frame rings (all 0 without) */
    uint64_t volume_bytes;         /* every map's volume memory */
    uint64_t volume_budget_bytes;  /* [volume] memory_budget_mb, resolved */
    uint64_t budget_refused;       /* frames the volume budget refused */
    uint64_t spill_chunks_damaged; /* spill chunk files found damaged (spill.h) */
    uint64_t conns_open, conns_refused, conns_idle_closed;
    uint64_t queries_busy[2]; /* refused BUSY: by map, by kind (METRIC_DIM_BUSY_REASON) */
    uint64_t workers_stalled;
    uint64_t maps_count;
    uint64_t frames_unsaved; /* every map together */
    int64_t snapshot_age_ms; /* since the last restorable snapshot; -1: none yet */
    int64_t uptime_ms;       /* since the daemon started */
    int has_host_memory;     /* host_memory_bytes could be read */
    uint64_t host_memory_bytes;
    const char *version; /* tsdfd_build_info's labels */
    const char *backend;
    /* The maps: every map for /metrics; for the stats reply the asked map
     * alone, or none (map_count 0: the per-map entries are left out). */
    const metrics_map *maps;
    size_t map_count;
} metrics_ctx;

/* The label a value is read for: its index within the row's dimension,
 * and for the map and sensor dimensions the map or sensor itself. */
typedef struct {
    size_t index;
    const metrics_map *map;
    const ds_sensor *sensor;
} metrics_label;

/* A histogram's buckets (counts per bucket, not cumulative) and the +Inf
 * overflow, as prom_histogram takes them. */
#define METRICS_HIST_MAX_BUCKETS 32
typedef struct {
    double le[METRICS_HIST_MAX_BUCKETS];
    uint64_t counts[METRICS_HIST_MAX_BUCKETS];
    size_t n;
    uint64_t overflow;
    double sum;
} metrics_hist;

typedef struct {
    /* The stats key or key pattern (see the top of this file). */
    const char *stats_key;
    /* Label rows: the stats key of the sum over every label ("frames.
     * dropped" for "dropped.<reason>"), read by total(); NULL for none. */
    const char *stats_total_key;
    const char *prom_name;
    const char *help;
    metric_type type;
    metric_dim dim;
    metric_unit unit;
    unsigned flags; /* METRIC_F_* */
    /* Summaries: the labels (bit i: label index i) the reply always had,
     * which come before the per-sensor entries and carry count, p50_ms,
     * p99_ms, max_ms and mean_ms. Every other summary label carries count,
     * p50_ms and p99_ms (the figures of the Prometheus summary) after the
     * per-sensor entries, as far as TSDF_PROTO_MAX_STATS_EXTRA allows: so
     * the reply keeps its room for sensors (METRICS_STATS_MIN_SENSORS). */
    uint32_t stats_first;
    /* Exactly one of these reads the value, by type: value for counters
     * and gauges, window for summaries, histogram for histograms. */
    metric_value (*value)(const metrics_ctx *c, const metrics_label *l);
    lat_window *(*window)(const metrics_ctx *c, const metrics_label *l);
    void (*histogram)(const metrics_ctx *c, const metrics_label *l, metrics_hist *out);
    /* With stats_total_key: the sum over every label. */
    metric_value (*total)(const metrics_ctx *c);
} metrics_row;

/* The table, in output order; *count receives its length. */
const metrics_row *metrics_rows(size_t *count);

/* The label name of a dimension ("map", "sensor", "reason", "stage",
 * "type"); NULL for METRIC_DIM_NONE. */
const char *metrics_dim_label(metric_dim d);

/* The number of labels of a dimension that does not depend on the context
 * (the reasons, stages and request types; 1 for METRIC_DIM_NONE), and the
 * label value of index i in it; 0 and NULL for the map and sensor
 * dimensions, whose labels come from the context. */
size_t metrics_dim_fixed_count(metric_dim d);
const char *metrics_dim_fixed_value(metric_dim d, size_t i);

/* The longest sensor name a stats key carries in full: longer ones are cut
 * to their first 20 bytes plus "~<sensor index>" (unique per sensor), so
 * that every per-sensor key fits TSDF_PROTO_MAX_STATS_KEY_LEN. */
size_t metrics_stats_sensor_label_max(void);

/* The most "daemon" entries the table gives a stats reply (a map asked
 * for, every latency window with samples) before the per-sensor entries,
 * and after them; and the entries of one sensor (a sensor has all of them
 * or none). */
size_t metrics_stats_entries_first(void);
size_t metrics_stats_entries_last(void);
size_t metrics_stats_entries_per_sensor(void);

/* The sensors whose entries every stats reply has room for, as before the
 * table (more are listed as far as room allows; sensors.count says how
 * many there are, and /metrics has them all); and the sensors up to which
 * every entry of the table fits as well. */
/* 12 and 2 since the four rings.* rows (12 entries of the 128 were a
 * thirteenth sensor's and a third sensor's room before); 11 and 1 since
 * spill.chunks_damaged and connections.idle_closed, which leaves room for
 * two entries more. The
 * protocol's 128 is kept: clients written to it hold that many entries. */
#define METRICS_STATS_MIN_SENSORS 11
#define METRICS_STATS_FULL_SENSORS 1

/* Appends the table's entries to s->extra (the "daemon" map; s->extra_count
 * entries may be there already) in three parts, each within
 * TSDF_PROTO_MAX_STATS_EXTRA: every row's entries but those of the later
 * summary labels (stats_first), then the per-sensor entries, sensor after
 * sensor, as far as there is room for all of a sensor's, then the later
 * summaries, each whole or not at all. With one map that has_vstats, sets
 * s->engine from it (the engine rows' half of the reply). TSDF_OK, or
 * TSDF_EINVAL when c holds more than one map. */
int metrics_fill_stats(const metrics_ctx *c, tsdf_rep_stats *s);

/* Appends tsdfd_build_info and every row's family to b: all of a family's
 * series together, every family declared (HELP, TYPE) even without series
 * (the per-sensor families of an idle daemon). Returns prom_buf_error(b). */
int metrics_render(const metrics_ctx *c, prom_buf *b);

/* The resident set size of this process in bytes (/proc/self/statm), for
 * tsdfd_host_memory_bytes. TSDF_OK, or TSDF_EIO when it cannot be read. */
int metrics_rss_bytes(uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_METRICS_H */
