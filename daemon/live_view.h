/*
 * live_view.h - the live view: a page and its data on the daemon's HTTP
 * endpoint (the one of /metrics, metrics_http.h), so that an operator sees
 * the maps in a browser with nothing else installed. The endpoints and
 * their formats are in docs/OPERATIONS.md, "Live view":
 *
 *   GET /, /view.js, ...      the page (view_files.h)
 *   GET /three/...            three.js from Debian's libjs-three
 *   GET /api/maps             JSON: the daemon and every map (view_state.h)
 *   GET /api/map?map=M        JSON: one map with its sensors' poses and paths
 *   GET /api/mesh?map=M&since=V   the mesh by block since version V
 *                             (view_mesh.h), application/octet-stream
 *   GET /api/raycast?map=M&...    a shaded raycast, image/png
 *
 * Access: the view is read-only, and answers loopback peers only unless
 * [server] allow_insecure_remote is set: the same rule as the plain
 * tcp:// listeners, since the HTTP endpoint has no TLS (403 otherwise).
 *
 * Bounds, so that a browser left open never slows integration:
 *   - per client (the page's `client` query parameter, else the peer
 *     address), each of the four API kinds at most once every
 *     [metrics] view_interval_ms: 429 with Retry-After;
 *   - meshes and raycasts run on the map's worker, one at a time per map
 *     and LIVE_VIEW_MAX_JOBS in all, and after a job that took T the map
 *     takes no other view job for LIVE_VIEW_DUTY_FACTOR * T (at least
 *     LIVE_VIEW_MIN_GAP_MS): the view gets at most a fifth of a worker's
 *     time. 503 with Retry-After;
 *   - the per-map and per-kind query admission of every request
 *     (handlers_run_job) holds too, and a job waits at most
 *     LIVE_VIEW_JOB_TIMEOUT_MS (504 past it);
 *   - a mesh reply is at most LIVE_VIEW_MAX_MESH_BYTES (413 beyond: the
 *     page says so), a raycast at most LIVE_VIEW_MAX_RAYCAST_DIM pixels a
 *     side, a JSON reply LIVE_VIEW_MAX_JSON_BYTES.
 * Refusals are counted (live_view_stats, in /api/maps under "view") and
 * logged rate-limited.
 *
 * Threads: the HTTP server's loop thread runs the route; worker waits,
 * encoding and file reads run on libuv's thread pool (uv_queue_work), so
 * the loop never blocks on a map. live_view_create and _destroy run on
 * the loop thread; destroy only once the loop has run every pending
 * completion (after the final uv_run), since they use the view.
 *
 * Ownership: create allocates, destroy frees. d must outlive the view.
 */
#ifndef TSDFD_LIVE_VIEW_H
#define TSDFD_LIVE_VIEW_H

#include <stdint.h>
#include <uv.h>

#include "handlers.h"
#include "metrics_http.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LIVE_VIEW_MAX_JOBS 2u
#define LIVE_VIEW_DUTY_FACTOR 4u
#define LIVE_VIEW_MIN_GAP_MS 50u
#define LIVE_VIEW_JOB_TIMEOUT_MS 10000u
#define LIVE_VIEW_MAX_MESH_BYTES (64u * 1024u * 1024u)
#define LIVE_VIEW_MAX_RAYCAST_DIM 640u
#define LIVE_VIEW_MAX_JSON_BYTES (4u * 1024u * 1024u)
#define LIVE_VIEW_MAX_CLIENTS 64u

typedef struct live_view live_view;

typedef struct {
    uint64_t requests;         /* every request the view answered */
    uint64_t refused_rate;     /* 429: a client asked faster than view_interval_ms */
    uint64_t refused_busy;     /* 503: the map or the view had its share of jobs */
    uint64_t refused_peer;     /* 403: a peer beyond loopback */
    uint64_t timeouts;         /* 504: a job that did not finish in time */
    uint64_t too_large;        /* 413: a mesh over LIVE_VIEW_MAX_MESH_BYTES */
    uint64_t meshes, raycasts; /* answered 200 */
} live_view_stats;

/* Creates the view of daemon d on loop. TSDF_OK or TSDF_ENOMEM. */
int live_view_create(uv_loop_t *loop, daemon_ctx *d, live_view **out);

/* The folder the page is served from, or NULL when none was found; then
 * *tried (when not NULL) lists the folders looked in. */
const char *live_view_web_dir(const live_view *v, const char **tried);
void live_view_destroy(live_view *v);

/* The route for metrics_http_set_route (arg: the view). */
void live_view_route(void *arg, metrics_http_req *req);

void live_view_get_stats(const live_view *v, live_view_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_LIVE_VIEW_H */
