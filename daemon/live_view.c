/*
 * live_view.c - the live view's routes, bounds and hand-off to the map
 * workers (see live_view.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "live_view.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers_internal.h"
#include "log.h"
#include "tsdf_error.h"
#include "tsdf_png.h"
#include "tsdf_pose.h"
#include "tsdf_shade.h"
#include "view_files.h"
#include "view_mesh.h"
#include "view_state.h"
#include "worker.h"

/* The API's kinds, each rate-limited on its own per client. */
typedef enum { API_MAPS = 0, API_MAP, API_MESH, API_RAYCAST, API_KINDS } api_kind;

static const char *const api_names[API_KINDS] = {"maps", "map", "mesh", "raycast"};

typedef struct {
    char key[48];               /* the client id, or its peer address; "" free */
    int64_t last_ns[API_KINDS]; /* CLOCK_MONOTONIC of its last request of each kind */
    int64_t seen_ns;
} view_client;

/* A map's share of the view's jobs. */
typedef struct {
    char name[MAPS_NAME_MAX + 1];
    int busy;               /* a mesh or raycast of the view runs on it */
    int64_t quiet_until_ns; /* no view job before this (the duty cycle) */
    int64_t seen_ns;
} view_map;

typedef enum { SHADE_SURFACE = 0, SHADE_DEPTH, SHADE_COLOR } shade_mode;

struct live_view {
    uv_loop_t *loop;
    daemon_ctx *d;
    view_client clients[LIVE_VIEW_MAX_CLIENTS];
    view_map *maps;
    size_t map_slots;
    unsigned jobs; /* meshes and raycasts running */
    view_rates rates;
    live_view_stats stats;
    /* Where the page is, found once at create (view_files_find_web_dir);
     * web_dir "" when no folder holds it, and tried says where it looked. */
    char web_dir[CFG_PATH_LEN];
    char tried[4 * CFG_PATH_LEN];
};

/* One request handed to the thread pool: a file, a mesh or a raycast. */
typedef struct {
    uv_work_t work;
    live_view *v;
    metrics_http_req *req;
    api_kind kind; /* API_MESH, API_RAYCAST, or API_KINDS for a file */
    view_map *slot;
    char map[MAPS_NAME_MAX + 1];
    char path[CFG_PATH_LEN + 64];
    const char *file_type;
    uint64_t since;
    tsdf_req_raycast rq;
    shade_mode mode;
    int64_t started_ns, ended_ns;
    /* the answer */
    int code;
    const char *type;
    char *body;
    size_t len;
} view_work;

static const char text_type[] = "text/plain; charset=utf-8";
static const char no_store[] = "Cache-Control: no-store\r\n";

int live_view_create(uv_loop_t *loop, daemon_ctx *d, live_view **out)
{
    live_view *v = calloc(1, sizeof *v);
    if (v == NULL)
        return TSDF_ENOMEM;
    v->loop = loop;
    v->d = d;
    v->map_slots = d->cfg->max_maps;
    v->maps = calloc(v->map_slots, sizeof *v->maps);
    if (v->maps == NULL || view_rates_init(&v->rates, v->map_slots) != TSDF_OK) {
        free(v->maps);
        free(v);
        return TSDF_ENOMEM;
    }
    if (!view_files_find_web_dir(d->cfg->web_dir, TSDFD_WEB_DIR, TSDFD_SOURCE_WEB_DIR, v->web_dir,
                                 sizeof v->web_dir, v->tried, sizeof v->tried))
        v->web_dir[0] = '\0';
    *out = v;
    return TSDF_OK;
}

const char *live_view_web_dir(const live_view *v, const char **tried)
{
    if (tried != NULL)
        *tried = v->tried;
    return v->web_dir[0] != '\0' ? v->web_dir : NULL;
}

void live_view_destroy(live_view *v)
{
    if (v == NULL)
        return;
    view_rates_fini(&v->rates);
    free(v->maps);
    free(v);
}

void live_view_get_stats(const live_view *v, live_view_stats *out)
{
    *out = v->stats;
}

/* ---- answers ------------------------------------------------------------ */

static void reply_text(metrics_http_req *req, int code, const char *headers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_text(metrics_http_req *req, int code, const char *headers, const char *fmt, ...)
{
    char text[2048], all[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof text - 2)
        n = (int)sizeof text - 2;
    text[n++] = '\n';
    /* An answer in words is an error or a refusal: never kept by a cache,
     * so that it does not outlive its cause. */
    snprintf(all, sizeof all, "%s%s", no_store, headers != NULL ? headers : "");
    metrics_http_reply(req, code, text_type, all, text, (size_t)n);
}

/* A 429 or 503 with the seconds to wait (at least 1) in Retry-After. */
static void reply_retry(metrics_http_req *req, int code, int64_t wait_ns, const char *why)
{
    char headers[64];
    long s = (long)((wait_ns + 999999999) / 1000000000);
    snprintf(headers, sizeof headers, "Retry-After: %ld\r\n", s < 1 ? 1L : s);
    reply_text(req, code, headers, "%s", why);
}

static void reply_json(metrics_http_req *req, json_out *j)
{
    size_t len = 0;
    int rc = json_error(j);
    char *text = json_take(j, &len);
    if (text == NULL) {
        reply_text(req, 500, NULL, "state not written: %s", tsdf_strerror(rc));
        return;
    }
    metrics_http_reply_owned(req, 200, "application/json", no_store, text, len);
}

/* ---- query strings ------------------------------------------------------ */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The value of key in query, percent-decoded ('+' is a space): 1 when
 * found and it fits out_len, else 0. */
static int query_get(const char *query, const char *key, char *out, size_t out_len)
{
    size_t klen = strlen(key);
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, key, klen) != 0 || p[klen] != '=')
            continue;
        size_t n = 0;
        for (const char *s = p + klen + 1; *s && *s != '&'; s++) {
            char c = *s;
            if (c == '+') {
                c = ' ';
            } else if (c == '%') {
                int hi = hex_value(s[1]), lo = hi >= 0 ? hex_value(s[2]) : -1;
                if (lo < 0)
                    return 0;
                c = (char)(hi * 16 + lo);
                s += 2;
            }
            if (c == '\0' || n + 1 >= out_len)
                return 0;
            out[n++] = c;
        }
        out[n] = '\0';
        return 1;
    }
    return 0;
}

/* A number parameter: 1 and *out when present and a finite number, 0 when
 * absent (*out keeps the default); -1 when malformed. */
static int query_double(const char *query, const char *key, double *out)
{
    char buf[64], *end;
    if (!query_get(query, key, buf, sizeof buf))
        return 0;
    double v = strtod(buf, &end);
    if (end == buf || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 1;
}

/* ---- bounds ------------------------------------------------------------- */

/* The client's slot: its id (the page sends a random one, so two tabs
 * behind one SSH tunnel are two clients), else its peer address. A full
 * table gives the slot seen longest ago to the newcomer. */
static view_client *client_for(live_view *v, metrics_http_req *req, int64_t now)
{
    char key[sizeof v->clients[0].key];
    if (!query_get(metrics_http_req_query(req), "client", key, sizeof key) || key[0] == '\0')
        snprintf(key, sizeof key, "%s", metrics_http_req_peer(req));
    view_client *oldest = &v->clients[0];
    for (size_t i = 0; i < LIVE_VIEW_MAX_CLIENTS; i++) {
        view_client *c = &v->clients[i];
        if (c->key[0] != '\0' && strcmp(c->key, key) == 0) {
            c->seen_ns = now;
            return c;
        }
        if (c->seen_ns < oldest->seen_ns)
            oldest = c;
    }
    memset(oldest, 0, sizeof *oldest);
    snprintf(oldest->key, sizeof oldest->key, "%s", key);
    oldest->seen_ns = now;
    return oldest;
}

/* The slot of map `name` for the per-map job bounds; NULL when every slot
 * is busy (only with fewer slots than maps asked about at once). */
static view_map *map_slot_for(live_view *v, const char *name, int64_t now)
{
    view_map *free_slot = NULL;
    for (size_t i = 0; i < v->map_slots; i++) {
        view_map *s = &v->maps[i];
        if (s->name[0] != '\0' && strcmp(s->name, name) == 0) {
            s->seen_ns = now;
            return s;
        }
        if (!s->busy && (free_slot == NULL || s->seen_ns < free_slot->seen_ns))
            free_slot = s;
    }
    if (free_slot != NULL) {
        memset(free_slot, 0, sizeof *free_slot);
        snprintf(free_slot->name, sizeof free_slot->name, "%s", name);
        free_slot->seen_ns = now;
    }
    return free_slot;
}

/* ---- the thread pool's side --------------------------------------------- */

static int http_code_of(int rc)
{
    switch (rc) {
    case TSDF_EBUSY:
    case TSDF_ESHUTDOWN:
        return 503;
    case TSDF_ETIMEOUT:
        return 504;
    case TSDF_ENOT_FOUND:
        return 404;
    case TSDF_EINVAL:
    case TSDF_EBAD_INTRINSICS:
    case TSDF_EBAD_POSE:
        return 400;
    case TSDF_ETOO_LARGE:
        return 413;
    default:
        return 500;
    }
}

static void work_fail(view_work *k, int code, const char *message)
{
    size_t n = strlen(message);
    k->code = code;
    k->type = text_type;
    k->body = malloc(n + 1);
    if (k->body != NULL) {
        memcpy(k->body, message, n);
        k->body[n] = '\n';
        k->len = n + 1;
    }
}

static void encode_mesh(view_work *k, worker_job *j)
{
    uint8_t *buf = NULL;
    int rc =
        view_mesh_encode(&j->mesh, j->version, k->since, LIVE_VIEW_MAX_MESH_BYTES, &buf, &k->len);
    if (rc != TSDF_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "map '%s': the mesh is not served: %s", k->map,
                 rc == TSDF_ETOO_LARGE ? "larger than the view's limit" : tsdf_strerror(rc));
        work_fail(k, http_code_of(rc), msg);
        return;
    }
    k->code = 200;
    k->type = "application/octet-stream";
    k->body = (char *)buf;
}

static void encode_raycast(view_work *k, worker_job *j)
{
    const tsdf_req_raycast *rq = &k->rq;
    size_t px = (size_t)rq->width * rq->height;
    uint8_t *rgb = malloc(px * 3);
    if (rgb == NULL) {
        work_fail(k, 500, "out of memory");
        return;
    }
    if (k->mode == SHADE_COLOR && j->rgb != NULL)
        memcpy(rgb, j->rgb, px * 3);
    else if (k->mode == SHADE_DEPTH)
        tsdf_shade_depth(j->depth_m, rq->width, rq->height, rq->min_depth_m, rq->max_depth_m, rgb);
    else
        tsdf_shade_surface(j->depth_m, j->normals, rq->T_world_cam, &rq->K, rq->width, rq->height,
                           rgb);
    uint8_t *png = NULL;
    int rc = tsdf_png_encode_rgb8(rgb, rq->width, rq->height, &png, &k->len);
    free(rgb);
    if (rc != TSDF_OK) {
        work_fail(k, 500, tsdf_strerror(rc));
        return;
    }
    k->code = 200;
    k->type = "image/png";
    k->body = (char *)png;
}

/* A mesh or raycast on the map's worker, waited for here, on the pool. */
static void run_map_job(view_work *k)
{
    daemon_ctx *d = k->v->d;
    dmap *m = NULL;
    int rc = maps_get(d->maps, k->map, 0, &m);
    if (rc != TSDF_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "map '%s': %s", k->map, tsdf_strerror(rc));
        work_fail(k, http_code_of(rc), msg);
        return;
    }
    tsdf_reply *rep = malloc(sizeof *rep);
    worker_job *j = job_new(k->kind == API_MESH ? JOB_MESH : JOB_RAYCAST, 1);
    if (rep == NULL || j == NULL) {
        free(rep);
        job_free(j);
        maps_put(m);
        work_fail(k, 500, "out of memory");
        return;
    }
    tsdf_reply_init(rep, k->kind == API_MESH ? TSDF_MSG_MESH : TSDF_MSG_RAYCAST, 0);
    if (k->kind == API_MESH) {
        j->req.u.mesh.since_version = k->since;
        j->req.u.mesh.by_block = 1;
    } else {
        j->req.u.raycast = k->rq;
    }
    k->started_ns = worker_now_ns();
    rc = handlers_run_job(d, m, j, LIVE_VIEW_JOB_TIMEOUT_MS, rep);
    k->ended_ns = worker_now_ns();
    if (rc != TSDF_OK) {
        work_fail(k, http_code_of(rc), rep->message);
    } else {
        if (k->kind == API_MESH)
            encode_mesh(k, j);
        else
            encode_raycast(k, j);
        job_free(j);
    }
    free(rep);
    maps_put(m);
}

static void work_run(uv_work_t *w)
{
    view_work *k = w->data;
    if (k->kind == API_MESH || k->kind == API_RAYCAST) {
        run_map_job(k);
        return;
    }
    int rc = view_files_read(k->path, VIEW_FILES_MAX_BYTES, &k->body, &k->len);
    if (rc == TSDF_OK) {
        k->code = 200;
        k->type = k->file_type;
        return;
    }
    char msg[CFG_PATH_LEN + 160];
    snprintf(msg, sizeof msg, "%s: %s%s", k->path, tsdf_strerror(rc),
             strstr(k->path, "three") != NULL ? " (install Debian's libjs-three, or set "
                                                "[metrics] three_dir)"
                                              : " (see [metrics] web_dir)");
    work_fail(k, http_code_of(rc), msg);
}

static void work_done(uv_work_t *w, int status)
{
    view_work *k = w->data;
    live_view *v = k->v;
    (void)status; /* the view never cancels its work */
    if (k->slot != NULL) {
        /* The duty cycle: a job that took T keeps the view off this map's
         * worker for DUTY_FACTOR * T, so that frames get the rest. */
        int64_t took = k->ended_ns - k->started_ns;
        int64_t gap = took * (int64_t)LIVE_VIEW_DUTY_FACTOR;
        if (gap < (int64_t)LIVE_VIEW_MIN_GAP_MS * 1000000)
            gap = (int64_t)LIVE_VIEW_MIN_GAP_MS * 1000000;
        k->slot->busy = 0;
        k->slot->quiet_until_ns = (k->ended_ns ? k->ended_ns : worker_now_ns()) + gap;
        v->jobs--;
    }
    if (k->code == 504)
        v->stats.timeouts++;
    else if (k->code == 413)
        v->stats.too_large++;
    else if (k->code == 503)
        v->stats.refused_busy++;
    else if (k->code == 200 && k->kind == API_MESH)
        v->stats.meshes++;
    else if (k->code == 200 && k->kind == API_RAYCAST)
        v->stats.raycasts++;
    if (k->body == NULL && k->code != 200)
        metrics_http_reply(k->req, 500, text_type, NULL, "out of memory\n", 14);
    else
        metrics_http_reply_owned(
            k->req, k->code, k->type,
            /* Only a page file that was read may be
             * kept: an error must not outlive its cause. */
            k->kind == API_KINDS && k->code == 200 ? "Cache-Control: max-age=60\r\n" : no_store,
            k->body, k->len);
    free(k);
}

static void hand_off(live_view *v, view_work *k)
{
    k->v = v;
    k->work.data = k;
    if (uv_queue_work(v->loop, &k->work, work_run, work_done) != 0) {
        if (k->slot != NULL) {
            k->slot->busy = 0;
            v->jobs--;
        }
        reply_text(k->req, 500, NULL, "cannot hand the work off");
        free(k);
    }
}

/* ---- the API ------------------------------------------------------------ */

static void view_counters_json(void *arg, json_out *j)
{
    live_view *v = arg;
    json_begin_object(j);
    json_kv_u64(j, "interval_ms", v->d->cfg->view_interval_ms);
    json_kv_u64(j, "max_jobs", LIVE_VIEW_MAX_JOBS);
    json_kv_u64(j, "jobs_running", v->jobs);
    json_kv_u64(j, "requests", v->stats.requests);
    json_kv_u64(j, "meshes", v->stats.meshes);
    json_kv_u64(j, "raycasts", v->stats.raycasts);
    json_kv_u64(j, "refused_rate", v->stats.refused_rate);
    json_kv_u64(j, "refused_busy", v->stats.refused_busy);
    json_kv_u64(j, "refused_peer", v->stats.refused_peer);
    json_kv_u64(j, "timeouts", v->stats.timeouts);
    json_kv_u64(j, "too_large", v->stats.too_large);
    json_end_object(j);
}

/* The raycast's camera from the query: a sensor's latest (sensor=NAME, its
 * intrinsics scaled to the image) or an explicit pose (pose=16 numbers,
 * row-major T_world_cam; fx, fy, cx, cy optional). 0 and a 4xx answer
 * given on failure. */
static int raycast_params(live_view *v, metrics_http_req *req, dmap *m, view_work *k)
{
    const char *q = metrics_http_req_query(req);
    tsdf_req_raycast *rq = &k->rq;
    double w = 320, h = 240, mn = 0.1, mx = 10.0;
    char buf[512];
    if (query_double(q, "width", &w) < 0 || query_double(q, "height", &h) < 0 || w < 16 || h < 16 ||
        w > LIVE_VIEW_MAX_RAYCAST_DIM || h > LIVE_VIEW_MAX_RAYCAST_DIM) {
        reply_text(req, 400, NULL, "width and height: 16..%u pixels", LIVE_VIEW_MAX_RAYCAST_DIM);
        return 0;
    }
    rq->width = (uint32_t)w;
    rq->height = (uint32_t)h;
    k->mode = SHADE_SURFACE;
    if (query_get(q, "mode", buf, sizeof buf))
        k->mode = strcmp(buf, "depth") == 0   ? SHADE_DEPTH
                  : strcmp(buf, "color") == 0 ? SHADE_COLOR
                                              : SHADE_SURFACE;
    rq->want_rgb = k->mode == SHADE_COLOR;
    /* Depth shading reads no normals (colour falls back to surface
     * shading on a map without colour, so it keeps them). */
    rq->want_normals = k->mode != SHADE_DEPTH;
    rq->scale = 1;
    rq->after = TSDF_AFTER_INTEGRATED;
    if (query_get(q, "sensor", buf, sizeof buf)) {
        pose_track *t = malloc(sizeof *t);
        int found = t != NULL && pose_ring_find(&m->poses, buf, t) && t->count > 0;
        if (found) {
            float sx = (float)rq->width / (float)t->width,
                  sy = (float)rq->height / (float)t->height;
            rq->K.fx = t->K.fx * sx;
            rq->K.fy = t->K.fy * sy;
            rq->K.cx = (t->K.cx + 0.5f) * sx - 0.5f;
            rq->K.cy = (t->K.cy + 0.5f) * sy - 0.5f;
            memcpy(rq->T_world_cam, t->samples[t->count - 1].T_world_cam, 12 * sizeof(float));
            rq->T_world_cam[15] = 1.0f;
            mn = t->min_depth_m;
            mx = t->max_depth_m;
        }
        free(t);
        if (!found) {
            reply_text(req, 404, NULL, "map '%s' has no pose of sensor '%s'", m->name, buf);
            return 0;
        }
    } else {
        char *p = buf, *end;
        if (!query_get(q, "pose", buf, sizeof buf)) {
            reply_text(req, 400, NULL,
                       "give sensor=NAME or pose=16 numbers (row-major T_world_cam)");
            return 0;
        }
        for (int i = 0; i < 16; i++) {
            rq->T_world_cam[i] = strtof(p, &end);
            if (end == p || (i < 15 && *end != ',') || (i == 15 && *end != '\0')) {
                reply_text(req, 400, NULL, "pose: 16 comma-separated numbers");
                return 0;
            }
            p = end + 1;
        }
        double fx = 525.0 * w / 640.0, fy = fx, cx = 0.5 * w - 0.5, cy = 0.5 * h - 0.5;
        if (query_double(q, "fx", &fx) < 0 || query_double(q, "fy", &fy) < 0 ||
            query_double(q, "cx", &cx) < 0 || query_double(q, "cy", &cy) < 0) {
            reply_text(req, 400, NULL, "fx, fy, cx, cy: numbers");
            return 0;
        }
        rq->K = (tsdf_intrinsics){(float)fx, (float)fy, (float)cx, (float)cy};
    }
    if (query_double(q, "min", &mn) < 0 || query_double(q, "max", &mx) < 0 || !(mn > 0) ||
        !(mx > mn) || mx > TSDF_MAX_RAY_M) {
        reply_text(req, 400, NULL, "min, max: a depth range in metres, 0 < min < max <= %g",
                   (double)TSDF_MAX_RAY_M);
        return 0;
    }
    rq->min_depth_m = (float)mn;
    rq->max_depth_m = (float)mx;
    if (!tsdf_pose_is_rigid(rq->T_world_cam) ||
        tsdf_intrinsics_check(&rq->K, rq->width, rq->height) != TSDF_OK) {
        reply_text(req, 400, NULL, "not a rigid pose, or intrinsics no pinhole camera has");
        return 0;
    }
    return 1;
}

/* A mesh or raycast: checked here, run on the pool. */
static void map_job(live_view *v, metrics_http_req *req, api_kind kind, dmap *m, int64_t now)
{
    view_work *k = calloc(1, sizeof *k);
    if (k == NULL) {
        reply_text(req, 500, NULL, "out of memory");
        return;
    }
    k->req = req;
    k->kind = kind;
    snprintf(k->map, sizeof k->map, "%s", m->name);
    if (kind == API_MESH) {
        double since = 0;
        if (query_double(metrics_http_req_query(req), "since", &since) < 0 || since < 0) {
            reply_text(req, 400, NULL, "since: a map version (0: the whole map)");
            free(k);
            return;
        }
        k->since = (uint64_t)since;
    } else if (!raycast_params(v, req, m, k)) {
        free(k);
        return;
    }
    view_map *slot = map_slot_for(v, m->name, now);
    if (slot == NULL || slot->busy || v->jobs >= LIVE_VIEW_MAX_JOBS) {
        v->stats.refused_busy++;
        reply_retry(req, 503, 0, "the view already runs its share of jobs; try again");
        free(k);
        return;
    }
    if (now < slot->quiet_until_ns) {
        v->stats.refused_busy++;
        reply_retry(req, 503, slot->quiet_until_ns - now,
                    "the map's worker is the frames' for now; try again");
        free(k);
        return;
    }
    slot->busy = 1;
    v->jobs++;
    k->slot = slot;
    hand_off(v, k);
}

/* What GET /api/map says of the map's share of view jobs: the ms until a
 * mesh or raycast of it would be taken (the duty cycle's pause), 0 now, -1
 * while one of the view's jobs runs on it or the view runs all it may. A
 * client (the tests among them) can wait for 0 instead of a guess. */
static int64_t view_ready_in_ms(const live_view *v, const char *map, int64_t now)
{
    for (size_t i = 0; i < v->map_slots; i++) {
        const view_map *s = &v->maps[i];
        if (s->name[0] == '\0' || strcmp(s->name, map) != 0)
            continue;
        if (s->busy)
            return -1;
        if (now < s->quiet_until_ns)
            return (s->quiet_until_ns - now + 999999) / 1000000;
        break;
    }
    return v->jobs >= LIVE_VIEW_MAX_JOBS ? -1 : 0;
}

static void api(live_view *v, metrics_http_req *req, const char *name)
{
    api_kind kind = API_KINDS;
    for (int i = 0; i < API_KINDS; i++)
        if (strcmp(name, api_names[i]) == 0)
            kind = (api_kind)i;
    if (kind == API_KINDS) {
        reply_text(req, 404, NULL, "no such endpoint: /api/%s (maps, map, mesh, raycast)", name);
        return;
    }
    int64_t now = worker_now_ns();
    view_client *c = client_for(v, req, now);
    int64_t interval = (int64_t)v->d->cfg->view_interval_ms * 1000000;
    if (c->last_ns[kind] != 0 && now - c->last_ns[kind] < interval) {
        v->stats.refused_rate++;
        TSDF_LOG_RATELIMITED(TSDF_LOG_DEBUG, "view rate", "view: %s asks for /api/%s too often",
                             c->key, name);
        reply_retry(req, 429, c->last_ns[kind] + interval - now,
                    "too many requests: at most one a [metrics] view_interval_ms");
        return;
    }
    c->last_ns[kind] = now;
    json_out j;
    if (kind == API_MAPS) {
        json_init(&j, LIVE_VIEW_MAX_JSON_BYTES);
        view_state_maps(&j, v->d, &v->rates, view_counters_json, v);
        reply_json(req, &j);
        return;
    }
    char map[MAPS_NAME_MAX + 1];
    dmap *m = NULL;
    if (!query_get(metrics_http_req_query(req), "map", map, sizeof map) ||
        maps_get(v->d->maps, map, 0, &m) != TSDF_OK) {
        reply_text(req, 404, NULL, "no such map (give map=NAME; /api/maps lists them)");
        return;
    }
    if (kind == API_MAP) {
        json_init(&j, LIVE_VIEW_MAX_JSON_BYTES);
        view_state_map(&j, v->d, &v->rates, m, view_ready_in_ms(v, m->name, now));
        reply_json(req, &j);
    } else {
        map_job(v, req, kind, m, now);
    }
    maps_put(m);
}

static void file(live_view *v, metrics_http_req *req, const char *path)
{
    view_work *k = calloc(1, sizeof *k);
    if (k == NULL) {
        reply_text(req, 500, NULL, "out of memory");
        return;
    }
    const tsdfd_config *cfg = v->d->cfg;
    if (v->web_dir[0] == '\0' && strncmp(path, "/three/", 7) != 0) {
        free(k);
        reply_text(req, 404, NULL,
                   "the live view's page was not found when the daemon started (looked in %s): "
                   "set [metrics] web_dir to the folder of its index.html (web/ of the source "
                   "tree, or share/tsdfd/web of an install); the metrics are at /metrics",
                   v->tried);
        return;
    }
    if (!view_files_resolve(path, v->web_dir, cfg->three_dir, k->path, sizeof k->path,
                            &k->file_type)) {
        free(k);
        reply_text(req, 404, NULL, "not found: the view is at /, the metrics at /metrics");
        return;
    }
    k->req = req;
    k->kind = API_KINDS;
    hand_off(v, k);
}

void live_view_route(void *arg, metrics_http_req *req)
{
    live_view *v = arg;
    const char *path = metrics_http_req_path(req);
    v->stats.requests++;
    /* The HTTP endpoint has no TLS, so the view follows the rule of the
     * plain tcp:// listeners: beyond loopback only when asked for. */
    if (!metrics_http_req_peer_is_loopback(req) && !v->d->cfg->allow_insecure_remote) {
        v->stats.refused_peer++;
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "view peer",
                             "view: refused %s: the live view answers loopback clients only "
                             "(use an SSH tunnel, or set [server] allow_insecure_remote)",
                             metrics_http_req_peer(req));
        reply_text(req, 403, NULL,
                   "the live view answers loopback clients only: open it through an SSH "
                   "tunnel (ssh -L 9464:127.0.0.1:9464 HOST), or set [server] "
                   "allow_insecure_remote = true");
        return;
    }
    if (atomic_load(&v->d->stopping)) {
        reply_retry(req, 503, 0, "the daemon is stopping");
        return;
    }
    if (strncmp(path, "/api/", 5) == 0)
        api(v, req, path + 5);
    else
        file(v, req, path);
}
