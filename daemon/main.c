/*
 * main.c - tsdfd: configuration, the libuv main loop, start-up and orderly
 * shutdown.
 *
 * Threads: the main thread runs the libuv loop (signals, the cron timer,
 * the watchdog, the /metrics server and the live view, autosave and view
 * hand-off); the server's
 * threads receive and answer messages; one worker per map integrates. The
 * loop never blocks on a map: autosave runs on libuv's thread pool
 * (uv_queue_work) and other threads reach the loop through a uv_async.
 *
 * Shutdown (SIGTERM, SIGINT): STOPPING=1, stop accepting (close the
 * sockets; requests in progress finish, each within request_timeout_ms),
 * drain every map's queue for at most drain_timeout_ms (what is left is
 * dropped and counted), give each worker stop_timeout_ms to finish its
 * job, save if save_on_stop, then exit 0. A worker still busy then is
 * logged and left running: its map is left out of the save (the others
 * are saved), its memory is never freed, and the exit status is 1. So the
 * stop takes at most request_timeout_ms + drain_timeout_ms +
 * stop_timeout_ms plus the save, whatever a worker is stuck in.
 *
 * Watchdog: WATCHDOG=1 goes out from a loop timer only while no worker
 * has been on one job longer than stall_timeout_ms (watchdog.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "config.h"
#include "dstats.h"
#include "handlers.h"
#include "live_view.h"
#include "log.h"
#include "maps.h"
#include "metrics_http.h"
#include "notify.h"
#include "server.h"
#include "snapshot.h"
#include "tsdf_error.h"
#include "tsdf_version.h"
#include "watchdog.h"
#include "worker.h"

#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#define CRON_PERIOD_MS 100
#define STATUS_PERIOD_MS 5000
/* Connections idle for [server] idle_timeout_s are looked for this often. */
#define IDLE_SWEEP_PERIOD_MS 1000

typedef struct {
    tsdfd_config cfg;
    dstats stats;
    map_registry maps;
    daemon_ctx d;
    server *srv;
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t cron, watchdog, autosave;
    uv_async_t wake; /* other threads -> loop: refresh STATUS now */
    uv_work_t autosave_work;
    int autosave_running;
    int autosave_rc;
    char autosave_path[PATH_MAX];
    metrics_http *metrics;
    live_view *view; /* the page and its data on the metrics endpoint */
    uint64_t cron_loops;
    int stopping;
    int exit_code;
} tsdfd_main;

/* Redis's habit: a cron that runs often, and blocks that run every ms. */
#define run_with_period(m, ms)                                                                     \
    ((ms) <= CRON_PERIOD_MS || (m)->cron_loops % ((ms) / CRON_PERIOD_MS) == 0)

static void update_status(tsdfd_main *m)
{
    char line[256];
    handlers_status_line(&m->d, line, sizeof line);
    notify_status("%s", line);
}

static void on_cron(uv_timer_t *t)
{
    tsdfd_main *m = t->data;
    m->cron_loops++;
    if (run_with_period(m, STATUS_PERIOD_MS))
        update_status(m);
    if (m->srv != NULL && run_with_period(m, IDLE_SWEEP_PERIOD_MS))
        server_sweep(m->srv);
    if (m->cfg.stats_period_s > 0 && run_with_period(m, m->cfg.stats_period_s * 1000u)) {
        char line[256];
        handlers_status_line(&m->d, line, sizeof line);
        TSDF_LOG(TSDF_LOG_INFO, "stats: %s", line);
    }
}

static void on_watchdog(uv_timer_t *t)
{
    tsdfd_main *m = t->data;
    watchdog_stall w;
    /* A running loop is not enough: a worker wedged on one job leaves its
     * map dead to every request. Withholding the kick lets systemd restart
     * the daemon (after WatchdogSec) from its newest snapshot. */
    if (watchdog_find_stalls(&m->maps, worker_now_ns(), m->cfg.stall_timeout_ms, &w) == 0) {
        notify_watchdog_kick();
        return;
    }
    TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "worker stalled",
                         "map %s: the worker has been on a %s job for %lld ms (stall_timeout_ms "
                         "%u): not kicking the watchdog",
                         w.map, w.job, (long long)w.busy_ms, m->cfg.stall_timeout_ms);
}

static void on_wake(uv_async_t *a)
{
    update_status(a->data);
}

/* ---- autosave: exported and written on the thread pool ------------------ */

static void autosave_work(uv_work_t *w)
{
    tsdfd_main *m = w->data;
    m->autosave_rc = handlers_save_all(&m->d, NULL, m->autosave_path, sizeof m->autosave_path);
}

static void autosave_done(uv_work_t *w, int status)
{
    tsdfd_main *m = w->data;
    m->autosave_running = 0;
    if (status != 0)
        return; /* cancelled */
    if (m->autosave_rc == TSDF_OK)
        TSDF_LOG(TSDF_LOG_INFO, "autosave: wrote %s", m->autosave_path);
    else
        TSDF_LOG(TSDF_LOG_ERROR, "autosave failed: %s", tsdf_strerror(m->autosave_rc));
}

static void on_autosave(uv_timer_t *t)
{
    tsdfd_main *m = t->data;
    /* One autosave at a time: a slow disk must not pile them up. */
    if (m->autosave_running || m->stopping)
        return;
    m->autosave_running = 1;
    m->autosave_work.data = m;
    if (uv_queue_work(&m->loop, &m->autosave_work, autosave_work, autosave_done) != 0)
        m->autosave_running = 0;
}

/* ---- shutdown ----------------------------------------------------------- */

static void begin_shutdown(tsdfd_main *m, const char *why)
{
    if (m->stopping) {
        TSDF_LOG(TSDF_LOG_WARN, "%s again: cutting the drain short", why);
        m->cfg.drain_timeout_ms = 0;
        return;
    }
    m->stopping = 1;
    TSDF_LOG(TSDF_LOG_INFO, "%s: stopping (drain up to %u ms%s)", why, m->cfg.drain_timeout_ms,
             m->cfg.save_on_stop ? ", then save" : "");
    notify_stopping();
    notify_status("stopping: draining the frame queues");
    uv_stop(&m->loop);
}

static void on_signal(uv_signal_t *s, int signum)
{
    tsdfd_main *m = s->data;
    if (signum == SIGHUP) {
        TSDF_LOG(TSDF_LOG_INFO, "SIGHUP: configuration reload is not supported; restart to apply");
        return;
    }
    begin_shutdown(m, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void close_cb(uv_handle_t *h)
{
    (void)h;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, close_cb);
}

/* ---- start -------------------------------------------------------------- */

static void wake_loop(void *arg)
{
    uv_async_send(arg);
}

static int start_loop_handles(tsdfd_main *m)
{
    uv_loop_t *loop = &m->loop;
    int rv;

    uv_signal_init(loop, &m->sigterm);
    uv_signal_init(loop, &m->sigint);
    uv_signal_init(loop, &m->sighup);
    m->sigterm.data = m->sigint.data = m->sighup.data = m;
    if ((rv = uv_signal_start(&m->sigterm, on_signal, SIGTERM)) != 0 ||
        (rv = uv_signal_start(&m->sigint, on_signal, SIGINT)) != 0 ||
        (rv = uv_signal_start(&m->sighup, on_signal, SIGHUP)) != 0) {
        TSDF_LOG(TSDF_LOG_ERROR, "cannot install signal handlers: %s", uv_strerror(rv));
        return TSDF_EINTERNAL;
    }
    uv_timer_init(loop, &m->cron);
    m->cron.data = m;
    uv_timer_start(&m->cron, on_cron, CRON_PERIOD_MS, CRON_PERIOD_MS);

    uint64_t wd_usec = notify_watchdog_usec();
    uv_timer_init(loop, &m->watchdog);
    m->watchdog.data = m;
    if (wd_usec > 0) {
        uint64_t period_ms = wd_usec / 2000u;
        if (period_ms == 0)
            period_ms = 1;
        uv_timer_start(&m->watchdog, on_watchdog, 0, period_ms);
        TSDF_LOG(TSDF_LOG_INFO, "watchdog: kicking every %" PRIu64 " ms", period_ms);
    }
    uv_timer_init(loop, &m->autosave);
    m->autosave.data = m;
    if (m->cfg.autosave_period_s > 0) {
        uint64_t ms = (uint64_t)m->cfg.autosave_period_s * 1000u;
        uv_timer_start(&m->autosave, on_autosave, ms, ms);
    }
    uv_async_init(loop, &m->wake, on_wake);
    m->wake.data = m;
    if (m->cfg.metrics_enabled) {
        int rc = metrics_http_start(loop, m->cfg.metrics_host, (int)m->cfg.metrics_port,
                                    handlers_render_metrics, &m->d, &m->metrics);
        if (rc != TSDF_OK) {
            TSDF_LOG(TSDF_LOG_ERROR, "metrics: cannot serve on %s:%u: %s", m->cfg.metrics_host,
                     m->cfg.metrics_port, tsdf_strerror(rc));
            return rc;
        }
    }
    if (m->metrics != NULL && m->cfg.view_enabled) {
        int rc = live_view_create(loop, &m->d, &m->view);
        if (rc != TSDF_OK)
            return rc;
        metrics_http_set_route(m->metrics, live_view_route, m->view);
        const char *h = m->cfg.metrics_host, *tried = NULL;
        const char *dir = live_view_web_dir(m->view, &tried);
        int v6 = strchr(h, ':') != NULL;
        if (dir != NULL)
            TSDF_LOG(TSDF_LOG_INFO, "view: open http://%s%s%s:%d/ in a browser (page from %s)",
                     v6 ? "[" : "",
                     strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::") == 0 ? "127.0.0.1" : h,
                     v6 ? "]" : "", metrics_http_port(m->metrics), dir);
        else
            TSDF_LOG(TSDF_LOG_WARN,
                     "view: off: no folder holds its page (looked in %s); set [metrics] web_dir "
                     "to the folder of its index.html",
                     tried);
    } else if (m->metrics == NULL) {
        TSDF_LOG(TSDF_LOG_INFO, "view: off ([metrics] enabled = false)");
    } else {
        TSDF_LOG(TSDF_LOG_INFO, "view: off ([metrics] view = false)");
    }
    return TSDF_OK;
}

int main(int argc, char **argv)
{
    static tsdfd_main m; /* large (config, maps): static, not on the stack */
    char err[CFG_ERR_LEN] = "";
    char config_path[CFG_PATH_LEN];
    cfg_action action;
    int rc;

    rc = cfg_from_args(argc, argv, &m.cfg, &action, config_path, sizeof config_path, err,
                       sizeof err);
    if (action == CFG_ACTION_HELP) {
        fputs(cfg_usage(), stdout);
        return 0;
    }
    if (action == CFG_ACTION_VERSION) {
        puts("tsdfd " TSDF_VERSION);
        return 0;
    }
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfd: configuration error: %s\n", err);
        return 2;
    }
    if (action == CFG_ACTION_CHECK) {
        printf("%s: configuration ok\n", config_path);
        return 0;
    }
    tsdf_log_set_level(m.cfg.log_level);
    /* A peer that vanishes mid-send must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    TSDF_LOG(TSDF_LOG_INFO, "tsdfd " TSDF_VERSION " starting (config: %s)",
             config_path[0] ? config_path : "none, defaults");

    m.exit_code = 1;
    if (uv_loop_init(&m.loop) != 0) {
        TSDF_LOG(TSDF_LOG_ERROR, "cannot initialise the event loop");
        return 1;
    }
    rc = dstats_init(&m.stats, m.cfg.max_sensors, m.cfg.latency_window);
    if (rc != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "cannot initialise the counters: %s", tsdf_strerror(rc));
        goto fail_stats;
    }
    rc = maps_init(&m.maps, &m.cfg, &m.stats);
    if (rc != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "cannot create the maps: %s", tsdf_strerror(rc));
        goto fail_maps;
    }
    m.d.cfg = &m.cfg;
    m.d.maps = &m.maps;
    m.d.stats = &m.stats;
    m.d.start_ns = worker_now_ns();
    m.d.max_message_bytes = (size_t)m.cfg.max_message_mb * 1024u * 1024u;
    m.d.max_reply_bytes = (size_t)m.cfg.max_reply_mb * 1024u * 1024u;
    if (m.d.max_reply_bytes > TSDF_PROTO_MAX_MESSAGE_BYTES)
        m.d.max_reply_bytes = TSDF_PROTO_MAX_MESSAGE_BYTES;
    if (m.d.max_message_bytes > TSDF_PROTO_MAX_MESSAGE_BYTES)
        m.d.max_message_bytes = TSDF_PROTO_MAX_MESSAGE_BYTES;
    m.d.wake = wake_loop;
    m.d.wake_arg = &m.wake;
    if (m.maps.backend == TSDF_BACKEND_CUDA && m.cfg.queue_pinned_mb > 0) {
        /* Without it frames take ordinary memory, as on the CPU backend. */
        rc = frame_pool_create((uint64_t)m.cfg.queue_pinned_mb << 20, &m.d.frame_buffers);
        if (rc != TSDF_OK)
            TSDF_LOG(TSDF_LOG_WARN, "no page-locked frame buffers: %s", tsdf_strerror(rc));
        else
            TSDF_LOG(TSDF_LOG_INFO, "frames' images in page-locked buffers, up to %u MiB",
                     m.cfg.queue_pinned_mb);
    }

    if (m.cfg.load_on_start) {
        char path[PATH_MAX];
        rc = handlers_load(&m.d, NULL, NULL, path, sizeof path, NULL);
        if (rc == TSDF_OK)
            TSDF_LOG(TSDF_LOG_INFO, "loaded the newest valid snapshot: %s", path);
        else if (rc == TSDF_ENOT_FOUND)
            TSDF_LOG(TSDF_LOG_INFO, "no snapshot in %s: starting empty", m.cfg.state_dir);
        else
            TSDF_LOG(TSDF_LOG_WARN, "snapshot load failed (%s): starting empty", tsdf_strerror(rc));
    }
    rc = start_loop_handles(&m);
    if (rc != TSDF_OK)
        goto fail_handles;
    char ring_path[CFG_PATH_LEN];
    cfg_ring_socket_path(&m.cfg, ring_path, sizeof ring_path);
    if (ring_path[0] == '\0' && strcmp(m.cfg.ring_socket, "auto") == 0)
        TSDF_LOG(TSDF_LOG_INFO, "no ring socket: ring_socket = auto and no ipc:// listen URL "
                                "whose folder has room for rings.sock");
    if (ring_path[0] != '\0') {
        long gid = -1;
        if (cfg_ipc_gid(&m.cfg, &gid) != TSDF_OK)
            gid = -1; /* server_start reports the unknown group */
        rc = rings_start(ring_path, (int)m.cfg.ipc_mode, gid, m.cfg.max_connections,
                         (uint64_t)m.cfg.ring_max_mb << 20, m.cfg.ring_attach_timeout_ms,
                         m.maps.backend == TSDF_BACKEND_CUDA ? RINGS_GPU : RINGS_PWRITE, &m.d.rings,
                         err, sizeof err);
        if (rc != TSDF_OK) {
            TSDF_LOG(TSDF_LOG_ERROR, "%s", err);
            goto fail_server;
        }
    }
    rc = server_start(&m.d, &m.srv, err, sizeof err);
    if (rc != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "%s", err);
        goto fail_server;
    }
    TSDF_LOG(TSDF_LOG_INFO, "ready: %u request contexts, %u decoders, queue %u (%s) per map",
             m.cfg.request_contexts, m.cfg.decode_threads, m.cfg.queue_length,
             cfg_policy_name(m.cfg.queue_policy));
    notify_ready();
    update_status(&m);

    uv_run(&m.loop, UV_RUN_DEFAULT);

    /* Stop accepting: no new frame or request gets in from here on. */
    atomic_store(&m.d.stopping, 1);
    server_stop(m.srv);
    m.srv = NULL;
    /* Drain: the workers integrate what is queued, for a bounded time,
     * then get a bounded time to finish their jobs. The loop (and its
     * watchdog kicks) is stopped meanwhile, so ask systemd for the time
     * these and the final save may take. */
    notify_extend_timeout(((uint64_t)m.cfg.drain_timeout_ms + m.cfg.stop_timeout_ms + 30000u) *
                          1000u);
    size_t stuck = maps_stop(&m.maps, m.cfg.drain_timeout_ms, m.cfg.stop_timeout_ms);
    m.exit_code = stuck == 0 ? 0 : 1;
    if (m.cfg.save_on_stop && handlers_save_on_stop(&m.d) != TSDF_OK)
        m.exit_code = 1;
    {
        char line[256];
        handlers_status_line(&m.d, line, sizeof line);
        TSDF_LOG(TSDF_LOG_INFO, "stopped: %s", line);
    }

fail_server:
fail_handles:
    if (m.metrics != NULL)
        metrics_http_stop(m.metrics);
    uv_walk(&m.loop, close_walk, NULL);
    /* Let the closes (and a running autosave, and the view's work on the
     * thread pool) finish. */
    uv_run(&m.loop, UV_RUN_DEFAULT);
    live_view_destroy(m.view);
    if (m.srv != NULL)
        server_stop(m.srv);
    /* After the request threads, which read from the rings. */
    rings_stop(m.d.rings);
    m.d.rings = NULL;
fail_maps:
    /* A failed start drops what is queued but still lets the workers
     * finish their jobs, so that their memory can be freed. */
    maps_stop(&m.maps, 0, m.cfg.stop_timeout_ms);
    /* With a stuck worker nothing it may touch is freed: exit leaves it. */
    if (maps_fini(&m.maps) == TSDF_OK) {
        frame_pool_destroy(m.d.frame_buffers);
        dstats_fini(&m.stats);
    }
fail_stats:
    uv_loop_close(&m.loop);
    return m.exit_code;
}
