/*
 * view_state.c - the live view's JSON state (see view_state.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "view_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"
#include "tsdf_version.h"
#include "worker.h"

int view_rates_init(view_rates *r, size_t slots)
{
    r->slots = calloc(slots ? slots : 1, sizeof *r->slots);
    r->count = slots;
    return r->slots != NULL ? TSDF_OK : TSDF_ENOMEM;
}

void view_rates_fini(view_rates *r)
{
    free(r->slots);
    memset(r, 0, sizeof *r);
}

/* The frames/s of map `name` with frames integrated now. A map seen for the
 * first time takes a free slot, or the one asked for longest ago (a map
 * that was deleted). */
static double rate_of(view_rates *r, const char *name, uint64_t frames, int64_t now)
{
    view_rate *slot = NULL, *oldest = NULL;
    for (size_t i = 0; i < r->count && slot == NULL; i++) {
        view_rate *s = &r->slots[i];
        if (s->sample_ns != 0 && strcmp(s->name, name) == 0)
            slot = s;
        else if (oldest == NULL || s->seen_ns < oldest->seen_ns)
            oldest = s;
    }
    if (slot == NULL) {
        if (oldest == NULL)
            return 0.0;
        slot = oldest;
        memset(slot, 0, sizeof *slot);
        snprintf(slot->name, sizeof slot->name, "%s", name);
        slot->frames = frames;
        slot->sample_ns = now;
    }
    slot->seen_ns = now;
    int64_t dt = now - slot->sample_ns;
    if (frames < slot->frames) {
        /* A new map of the same name: start over. */
        slot->frames = frames;
        slot->sample_ns = now;
        slot->per_s = 0.0;
    } else if (dt >= (int64_t)VIEW_RATE_PERIOD_MS * 1000000) {
        slot->per_s = (double)(frames - slot->frames) * 1e9 / (double)dt;
        slot->frames = frames;
        slot->sample_ns = now;
    }
    return slot->per_s;
}

/* The figures of map m that /api/maps and /api/map share (the caller has
 * opened the object). sensors: also list the sensors' names. */
static void map_fields(json_out *j, daemon_ctx *d, view_rates *rates, dmap *m)
{
    tsdf_volume_stats st;
    queue_stats q;
    maps_cached_stats(m, &st);
    queue_get_stats(&m->queue, &q);
    uint64_t frames = atomic_load(&m->frames_done);
    json_kv_string(j, "name", m->name);
    json_kv_u64(j, "version", atomic_load(&m->version));
    json_kv_u64(j, "blocks", st.blocks_allocated);
    json_kv_u64(j, "capacity_slots", st.capacity_slots);
    json_kv_double(j, "load_factor", st.load_factor);
    json_kv_u64(j, "memory_bytes", st.memory_bytes);
    json_kv_u64(j, "memory_cap_bytes", st.memory_cap_bytes);
    json_kv_bool(j, "has_color", st.has_color);
    json_kv_u64(j, "frames_integrated", frames);
    json_kv_double(j, "frames_per_s", rate_of(rates, m->name, frames, worker_now_ns()));
    json_kv_u64(j, "frames_unsaved", handlers_frames_unsaved(d, m));
    json_kv_u64(j, "queue_depth", q.depth);
    json_kv_u64(j, "queue_capacity", d->cfg->queue_length);
    json_kv_u64(j, "queue_bytes", q.bytes);
}

static void sensor_names(json_out *j, const pose_track *t, size_t n)
{
    json_key(j, "sensors");
    json_begin_array(j);
    for (size_t i = 0; i < n; i++)
        json_string(j, t[i].name);
    json_end_array(j);
}

void view_state_maps(json_out *j, daemon_ctx *d, view_rates *rates,
                     void (*view_json)(void *arg, json_out *j), void *view_arg)
{
    dmap *all[TSDF_PROTO_MAX_MAPS];
    ds_totals t;
    pose_track *tracks = malloc(POSE_RING_MAX_SENSORS * sizeof *tracks);
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);

    dstats_get_totals(d->stats, &t);
    json_begin_object(j);
    json_key(j, "daemon");
    json_begin_object(j);
    json_kv_string(j, "version", TSDF_VERSION);
    json_kv_string(j, "backend", tsdf_backend_name(d->maps->backend));
    json_kv_double(j, "uptime_s", (double)(worker_now_ns() - d->start_ns) / 1e9);
    json_kv_u64(j, "frames_received", t.received);
    json_kv_u64(j, "frames_integrated", t.integrated);
    json_kv_u64(j, "frames_dropped", t.dropped);
    json_kv_u64(j, "frames_rejected", t.rejected);
    json_kv_u64(j, "volume_memory_bytes", atomic_load(&d->maps->vbudget.used_bytes));
    json_kv_u64(j, "volume_budget_bytes", d->maps->vbudget.limit_bytes);
    json_end_object(j);
    if (view_json != NULL) {
        json_key(j, "view");
        view_json(view_arg, j);
    }
    json_key(j, "maps");
    json_begin_array(j);
    for (size_t i = 0; i < n; i++) {
        json_begin_object(j);
        map_fields(j, d, rates, all[i]);
        size_t ns =
            tracks ? pose_ring_copy(&all[i]->poses, tracks, POSE_RING_MAX_SENSORS, NULL) : 0;
        sensor_names(j, tracks, ns);
        json_end_object(j);
    }
    json_end_array(j);
    json_end_object(j);
    maps_put_list(all, n);
    free(tracks);
}

static void sensor_object(json_out *j, const pose_track *t)
{
    json_begin_object(j);
    json_kv_string(j, "name", t->name);
    json_kv_u64(j, "frames", t->frames);
    json_kv_u64(j, "width", t->width);
    json_kv_u64(j, "height", t->height);
    json_key(j, "K");
    json_begin_array(j);
    json_double(j, t->K.fx);
    json_double(j, t->K.fy);
    json_double(j, t->K.cx);
    json_double(j, t->K.cy);
    json_end_array(j);
    json_kv_double(j, "min_depth_m", t->min_depth_m);
    json_kv_double(j, "max_depth_m", t->max_depth_m);
    if (t->count > 0) {
        const pose_sample *last = &t->samples[t->count - 1];
        json_kv_u64(j, "seq", last->seq);
        json_kv_u64(j, "stamp_ns", last->stamp_ns);
        json_kv_double(j, "age_s", (double)(worker_now_ns() - last->integrated_ns) / 1e9);
        json_key(j, "T_world_cam");
        json_begin_array(j);
        for (int k = 0; k < 12; k++)
            json_double(j, last->T_world_cam[k]);
        json_end_array(j);
    }
    /* The path: camera centres, the oldest first. */
    json_key(j, "trajectory");
    json_begin_array(j);
    for (size_t i = 0; i < t->count; i++) {
        const float *T = t->samples[i].T_world_cam;
        json_begin_array(j);
        json_double(j, T[3]);
        json_double(j, T[7]);
        json_double(j, T[11]);
        json_end_array(j);
    }
    json_end_array(j);
    json_end_object(j);
}

void view_state_map(json_out *j, daemon_ctx *d, view_rates *rates, dmap *m,
                    int64_t view_ready_in_ms)
{
    pose_track *tracks = malloc(POSE_RING_MAX_SENSORS * sizeof *tracks);
    uint64_t untracked = 0;
    size_t n = tracks ? pose_ring_copy(&m->poses, tracks, POSE_RING_MAX_SENSORS, &untracked) : 0;
    json_begin_object(j);
    map_fields(j, d, rates, m);
    json_kv_u64(j, "untracked_frames", untracked);
    json_key(j, "view_ready_in_ms");
    json_i64(j, view_ready_in_ms);
    json_key(j, "sensors");
    json_begin_array(j);
    for (size_t i = 0; i < n; i++)
        sensor_object(j, &tracks[i]);
    json_end_array(j);
    json_end_object(j);
    free(tracks);
}
