/*
 * dstats.c - daemon counters (see dstats.h).
 */
#include "dstats.h"

#include "tsdf_error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dstats_outcome_name(ds_outcome o)
{
    static const char *const names[DS_OUTCOME_COUNT] = {
        "integrated", "queue_full", "shutdown",     "memory",    "decode_error", "invalid_frame",
        "capacity",   "no_map",     "engine_error", "forbidden", "depth_decode",
    };
    if ((unsigned)o >= DS_OUTCOME_COUNT)
        return "unknown";
    return names[o];
}

const char *dstats_stage_name(ds_stage s)
{
    static const char *const names[DS_STAGE_COUNT] = {"decode", "upload",  "allocate",
                                                      "update", "raycast", "mesh"};
    if ((unsigned)s >= DS_STAGE_COUNT)
        return "unknown";
    return names[s];
}

ds_outcome dstats_outcome_for_error(int err)
{
    switch (err) {
    case TSDF_OK:
        return DS_INTEGRATED;
    case TSDF_EQUEUE_FULL:
    case TSDF_EDROPPED:
        return DS_DROP_QUEUE_FULL;
    case TSDF_ESHUTDOWN:
    case TSDF_ECLOSED:
        return DS_DROP_SHUTDOWN;
    case TSDF_EFORMAT:
    case TSDF_EVERSION:
    case TSDF_EPROTO_TYPE:
    case TSDF_EPROTO_KEY:
    case TSDF_ETOO_LARGE:
    case TSDF_ENOMEM:
        return DS_REJ_DECODE_ERROR;
    case TSDF_EEMPTY_IMAGE:
    case TSDF_EBAD_SIZE:
    case TSDF_EBAD_INTRINSICS:
    case TSDF_EBAD_POSE:
    case TSDF_EBAD_DEPTH_RANGE:
    case TSDF_EINVAL:
        return DS_REJ_INVALID_FRAME;
    case TSDF_ECAPACITY:
        return DS_REJ_CAPACITY;
    case TSDF_ENOT_FOUND:
    case TSDF_ELIMIT:
        return DS_REJ_NO_MAP;
    case TSDF_EFORBIDDEN:
        return DS_REJ_FORBIDDEN;
    case TSDF_EDEPTH_DECODE:
        return DS_REJ_DEPTH_DECODE;
    default:
        return DS_REJ_ENGINE;
    }
}

/* Frees every latency window and zeroes s: the end of both dstats_fini and
 * a failed dstats_init. lat_window_fini is safe on zeroed windows, so a
 * partly initialised s is fine. */
static void fini_windows(dstats *s)
{
    lat_window_fini(&s->lat_integrate);
    lat_window_fini(&s->lat_queue_wait);
    for (int t = 0; t < DS_MSG_TYPES; t++)
        lat_window_fini(&s->lat_request[t]);
    for (int t = 0; t < DS_STAGE_COUNT; t++)
        lat_window_fini(&s->lat_stage[t]);
    memset(s, 0, sizeof *s);
}

int dstats_init(dstats *s, size_t max_sensors, size_t latency_window)
{
    memset(s, 0, sizeof *s);
    if (max_sensors == 0 || latency_window == 0)
        return TSDF_EINVAL;
    int rc = lat_window_init(&s->lat_integrate, latency_window);
    if (rc == TSDF_OK)
        rc = lat_window_init(&s->lat_queue_wait, latency_window);
    for (int t = 0; rc == TSDF_OK && t < DS_MSG_TYPES; t++)
        rc = lat_window_init(&s->lat_request[t], latency_window);
    for (int t = 0; rc == TSDF_OK && t < DS_STAGE_COUNT; t++)
        rc = lat_window_init(&s->lat_stage[t], latency_window);
    if (rc != TSDF_OK)
        goto fail_lat;
    s->sensor_capacity = max_sensors + 2;
    s->sensors = calloc(s->sensor_capacity, sizeof *s->sensors);
    if (s->sensors == NULL) {
        rc = TSDF_ENOMEM;
        goto fail_lat;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        rc = TSDF_ENOMEM;
        goto fail_lock;
    }
    snprintf(s->sensors[DS_SENSOR_UNKNOWN].name, DS_SENSOR_NAME_LEN, "(no sensor)");
    snprintf(s->sensors[DS_SENSOR_OTHER].name, DS_SENSOR_NAME_LEN, "(other sensors)");
    s->sensor_count = DS_SENSOR_FIRST;
    return TSDF_OK;

fail_lock:
    free(s->sensors);
fail_lat:
    fini_windows(s);
    return rc;
}

void dstats_fini(dstats *s)
{
    if (s->sensors == NULL)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->sensors);
    fini_windows(s);
}

void dstats_sensor_name(const tsdf_proto_sensor *sensor, char *out, size_t len)
{
    if (sensor->is_id)
        snprintf(out, len, "id %" PRIu64, sensor->id);
    else
        snprintf(out, len, "%s", sensor->name);
}

uint32_t dstats_sensor_index(dstats *s, const tsdf_proto_sensor *sensor)
{
    char name[DS_SENSOR_NAME_LEN];
    uint32_t idx = DS_SENSOR_OTHER;

    dstats_sensor_name(sensor, name, sizeof name);
    pthread_mutex_lock(&s->lock);
    /* Linear search: bounded by max_sensors, and fleets are tens of robots. */
    for (size_t i = DS_SENSOR_FIRST; i < s->sensor_count; i++) {
        if (strcmp(s->sensors[i].name, name) == 0) {
            idx = (uint32_t)i;
            goto out;
        }
    }
    if (s->sensor_count < s->sensor_capacity) {
        idx = (uint32_t)s->sensor_count++;
        memcpy(s->sensors[idx].name, name, sizeof name);
    }
out:
    pthread_mutex_unlock(&s->lock);
    return idx;
}

void dstats_frame_received(dstats *s, uint32_t sensor)
{
    pthread_mutex_lock(&s->lock);
    s->received++;
    if (sensor >= s->sensor_count)
        sensor = DS_SENSOR_OTHER;
    if (sensor == DS_SENSOR_OTHER)
        s->sensors_overflow++;
    s->sensors[sensor].received++;
    pthread_mutex_unlock(&s->lock);
}

void dstats_frame_outcome(dstats *s, uint32_t sensor, ds_outcome o)
{
    if ((unsigned)o >= DS_OUTCOME_COUNT)
        o = DS_REJ_ENGINE;
    pthread_mutex_lock(&s->lock);
    s->outcome[o]++;
    if (sensor >= s->sensor_count)
        sensor = DS_SENSOR_OTHER;
    s->sensors[sensor].outcome[o]++;
    pthread_mutex_unlock(&s->lock);
}

void dstats_request(dstats *s, int type, int failed)
{
    if (type < 0 || type >= DS_MSG_TYPES)
        type = 0;
    pthread_mutex_lock(&s->lock);
    s->requests[type]++;
    if (failed)
        s->request_errors[type]++;
    pthread_mutex_unlock(&s->lock);
}

void dstats_query_abandoned(dstats *s)
{
    pthread_mutex_lock(&s->lock);
    s->queries_abandoned++;
    pthread_mutex_unlock(&s->lock);
}

void dstats_query_cancelled(dstats *s)
{
    pthread_mutex_lock(&s->lock);
    s->queries_cancelled++;
    pthread_mutex_unlock(&s->lock);
}

void dstats_get_totals(dstats *s, ds_totals *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->lock);
    out->received = s->received;
    memcpy(out->outcome, s->outcome, sizeof out->outcome);
    memcpy(out->requests, s->requests, sizeof out->requests);
    memcpy(out->request_errors, s->request_errors, sizeof out->request_errors);
    out->sensors_overflow = s->sensors_overflow;
    out->queries_abandoned = s->queries_abandoned;
    out->queries_cancelled = s->queries_cancelled;
    out->sensor_count = s->sensor_count;
    pthread_mutex_unlock(&s->lock);
    out->integrated = out->outcome[DS_INTEGRATED];
    for (int o = DS_FIRST_DROP; o < DS_FIRST_REJECT; o++)
        out->dropped += out->outcome[o];
    for (int o = DS_FIRST_REJECT; o < DS_OUTCOME_COUNT; o++)
        out->rejected += out->outcome[o];
}

int dstats_sensor_at(dstats *s, size_t i, ds_sensor *out)
{
    int ok = 0;
    pthread_mutex_lock(&s->lock);
    if (i < s->sensor_count) {
        *out = s->sensors[i];
        ok = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}
