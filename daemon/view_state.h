/*
 * view_state.h - the live view's JSON state: GET /api/maps (every map and
 * its counters) and GET /api/map?map=NAME (one map with its sensors: the
 * latest pose, the camera and the recent path of each). The fields are
 * listed in docs/OPERATIONS.md, "Live view".
 *
 * Everything comes from what the daemon already counts (the maps' queues,
 * frames_done, the volume statistics the worker cached, the pose rings):
 * nothing here waits for a worker or asks the engine.
 *
 * frames/s: view_rates keeps, per map, the frames integrated at the last
 * sample, and turns their growth into a rate once a sample is at least
 * VIEW_RATE_PERIOD_MS old; the rate is 0 until there are two samples.
 *
 * Threads: the loop thread (view_rates has no lock).
 */
#ifndef TSDFD_VIEW_STATE_H
#define TSDFD_VIEW_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "handlers.h"
#include "json_out.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIEW_RATE_PERIOD_MS 1000

typedef struct {
    char name[MAPS_NAME_MAX + 1];
    uint64_t frames;   /* frames_done at the sample */
    int64_t sample_ns; /* CLOCK_MONOTONIC of the sample; 0: free slot */
    int64_t seen_ns;   /* the last time a reply asked for this map */
    double per_s;
} view_rate;

typedef struct {
    view_rate *slots;
    size_t count;
} view_rates;

/* slots: room for max_maps maps. TSDF_OK or TSDF_ENOMEM. */
int view_rates_init(view_rates *r, size_t slots);
void view_rates_fini(view_rates *r);

/* Appends the object of GET /api/maps to j: the daemon, the view's own
 * counters (view_json, written by the caller into the "view" key: may be
 * NULL) and every map. */
void view_state_maps(json_out *j, daemon_ctx *d, view_rates *rates,
                     void (*view_json)(void *arg, json_out *j), void *view_arg);

/* Appends the object of GET /api/map for map m (its entry of /api/maps
 * plus "sensors", "untracked_frames" and "view_ready_in_ms": how long
 * until the map takes a view job (mesh, raycast) again, 0 now, -1 while
 * one runs). */
void view_state_map(json_out *j, daemon_ctx *d, view_rates *rates, dmap *m,
                    int64_t view_ready_in_ms);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_VIEW_STATE_H */
