/*
 * dstats.h - the daemon's own counters: frames received and what became of
 * each (integrated, dropped or rejected, by reason), in total and per
 * sensor, and requests by type.
 *
 * The invariant the counters keep (and the end-to-end test checks) is that
 * every received frame gets exactly one outcome once it has left the
 * daemon's hands:
 *     received == integrated + sum(dropped[reason]) + sum(rejected[reason])
 * (frames still queued or being integrated are "in flight" until then).
 *
 * Sensors: the first max_sensors distinct sensors get their own counters;
 * later ones share the "(other sensors)" bucket (counted in
 * sensors_overflow), and frames whose sensor could not be decoded count
 * under "(no sensor)". A numeric wire sensor id N is named "id N". Wire
 * sensor names never contain a space, so none of these names can collide
 * with a real sensor's.
 *
 * Threads: every function is thread-safe (one mutex; the counters move a
 * few hundred times a second at most, far from contention).
 */
#ifndef TSDFD_DSTATS_H
#define TSDFD_DSTATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "latency.h"
#include "tsdf_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DS_INTEGRATED = 0,
    /* dropped: a valid frame the daemon had no room or time for */
    DS_DROP_QUEUE_FULL,
    DS_DROP_SHUTDOWN,
    DS_DROP_MEMORY, /* the global byte budget of queued frames ([queue] max_bytes_mb) */
    /* rejected: a frame that could not be integrated */
    DS_REJ_DECODE_ERROR,  /* not a decodable frame message */
    DS_REJ_INVALID_FRAME, /* decoded but refused by tsdf_frame_check / the engine's checks */
    DS_REJ_CAPACITY,      /* the volume's memory cap (TSDF_ECAPACITY) */
    DS_REJ_NO_MAP,        /* unknown map and auto-create off, or max_maps reached */
    DS_REJ_ENGINE,        /* any other engine failure (TSDF_ECUDA, ...) */
    DS_REJ_FORBIDDEN,     /* from a TLS client that may only read ([tls] writers) */
    DS_REJ_DEPTH_DECODE,  /* compressed depth that does not decode to width x height */
    DS_OUTCOME_COUNT
} ds_outcome;

#define DS_FIRST_DROP DS_DROP_QUEUE_FULL
#define DS_FIRST_REJECT DS_REJ_DECODE_ERROR

/* "integrated", "queue_full", "shutdown", "memory", "decode_error", "invalid_frame",
 * "capacity", "no_map", "engine_error", "forbidden", "depth_decode". */
const char *dstats_outcome_name(ds_outcome o);

/* The outcome for an engine or codec error code. */
ds_outcome dstats_outcome_for_error(int err);

#define DS_SENSOR_UNKNOWN 0u /* index of "(no sensor)" */
#define DS_SENSOR_OTHER 1u   /* index of "(other sensors)" */
#define DS_SENSOR_FIRST 2u   /* index of the first real sensor */
#define DS_SENSOR_NAME_LEN (TSDF_PROTO_MAX_SENSOR_NAME_LEN + 2)

typedef struct {
    char name[DS_SENSOR_NAME_LEN];
    uint64_t received;
    uint64_t outcome[DS_OUTCOME_COUNT];
} ds_sensor;

/* Pipeline stages with a latency window each (the stage label of
 * tsdfd_stage_latency_seconds, dstats_stage_name). decode: a frame
 * message into a validated frame (every frame); upload, allocate, update:
 * the engine's times of an integrated frame (sampled: see worker.c);
 * raycast, mesh: the engine's times of every such query. */
typedef enum {
    DS_STAGE_DECODE = 0,
    DS_STAGE_UPLOAD,
    DS_STAGE_ALLOCATE,
    DS_STAGE_UPDATE,
    DS_STAGE_RAYCAST,
    DS_STAGE_MESH,
    DS_STAGE_COUNT
} ds_stage;

/* "decode", "upload", "allocate", "update", "raycast", "mesh"; "unknown"
 * for other values. */
const char *dstats_stage_name(ds_stage s);

/* Request counters by message type (index = tsdf_msg_type). */
#define DS_MSG_TYPES TSDF_MSG_TYPE_COUNT

typedef struct {
    pthread_mutex_t lock;
    uint64_t received;
    uint64_t outcome[DS_OUTCOME_COUNT];
    uint64_t requests[DS_MSG_TYPES];
    uint64_t request_errors[DS_MSG_TYPES];
    uint64_t sensors_overflow;  /* frames of sensors beyond max_sensors */
    uint64_t queries_abandoned; /* queries never run: their waiter gave up, or the stop came */
    uint64_t queries_cancelled; /* queries stopped while running: their waiter gave up */
    ds_sensor *sensors;         /* 2 + max_sensors slots */
    size_t sensor_count, sensor_capacity;
    /* Latencies (ms), each thread-safe on its own: */
    lat_window lat_integrate;             /* tsdf_volume_integrate (+ sync for acks) */
    lat_window lat_queue_wait;            /* frame queued -> worker starts it */
    lat_window lat_request[DS_MSG_TYPES]; /* request received -> reply ready, by type */
    lat_window lat_stage[DS_STAGE_COUNT]; /* pipeline stages (ds_stage) */
    /* Connections (nng pipes) of both sockets, kept by the server's pipe
     * callbacks without the lock: open now, closed at once because
     * [server] max_connections were open and every one of them was busy,
     * and closed for idleness (idle_timeout_s, or to make room for a new
     * connection at the limit; conns.h). */
    atomic_uint conns_open;
    atomic_uint_least64_t conns_refused;
    atomic_uint_least64_t conns_idle_closed;
} dstats;

/* A copy of the totals (sensors are read with dstats_sensor_at). */
typedef struct {
    uint64_t received;
    uint64_t integrated;
    uint64_t dropped;  /* sum over drop reasons */
    uint64_t rejected; /* sum over reject reasons */
    uint64_t outcome[DS_OUTCOME_COUNT];
    uint64_t requests[DS_MSG_TYPES];
    uint64_t request_errors[DS_MSG_TYPES];
    uint64_t sensors_overflow;
    uint64_t queries_abandoned;
    uint64_t queries_cancelled;
    size_t sensor_count;
} ds_totals;

/* max_sensors >= 1; latency_window: samples per latency window. */
int dstats_init(dstats *s, size_t max_sensors, size_t latency_window);
void dstats_fini(dstats *s);

/* The counter index of a wire sensor (name, or "id <N>" for a numeric id); creates
 * it on first sight, or returns DS_SENSOR_OTHER once max_sensors are taken. */
uint32_t dstats_sensor_index(dstats *s, const tsdf_proto_sensor *sensor);

/* Writes the display name of a wire sensor ("robot1" or "id 7"). */
void dstats_sensor_name(const tsdf_proto_sensor *sensor, char *out, size_t len);

void dstats_frame_received(dstats *s, uint32_t sensor);
void dstats_frame_outcome(dstats *s, uint32_t sensor, ds_outcome o);

/* Counts one request of type t (out of range: counted as TSDF_MSG_NONE), and
 * whether its reply was an error. */
void dstats_request(dstats *s, int type, int failed);

/* Counts a query the worker did not run because nobody waits for its result
 * any more (its request timed out, or the stop deadline passed), and one it
 * stopped half-way for the same reason. */
void dstats_query_abandoned(dstats *s);
void dstats_query_cancelled(dstats *s);

void dstats_get_totals(dstats *s, ds_totals *out);
/* Copies sensor slot i (< totals.sensor_count); 0 when out of range. */
int dstats_sensor_at(dstats *s, size_t i, ds_sensor *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_DSTATS_H */
