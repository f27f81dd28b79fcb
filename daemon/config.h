/*
 * config.h - the daemon's configuration: defaults, the INI file (inih) and
 * the command line, in that order of precedence (later wins).
 *
 * Every key is documented with its default in config/tsdfd.conf; the table
 * in config.c is the single source of the keys, their types and their
 * bounds. Unknown sections and keys are errors, so a typo never silently
 * leaves a default in force.
 *
 * Ownership: tsdfd_config is a caller-owned, fixed-size struct with no
 * pointers; copy it freely. Threads: not thread-safe; the daemon fills it on
 * the main thread before it starts any other thread and then only reads it.
 * Errors: TSDF_OK or a negative tsdf_errno; on error the caller's err buffer
 * holds "[section] key: reason" (with the file and line when from a file).
 */
#ifndef TSDFD_CONFIG_H
#define TSDFD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_proto.h"
#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CFG_MAX_URLS 8
#define CFG_URL_LEN 256
#define CFG_PATH_LEN 1024
#define CFG_MAX_DECLARED_MAPS 16
#define CFG_NAME_LEN (TSDF_PROTO_MAX_NAME_LEN + 1) /* a wire map name + NUL */
#define CFG_GROUP_LEN 65                           /* a group name + NUL */
#define CFG_ERR_LEN 512
#define CFG_MAX_WRITERS 32
#define CFG_CN_LEN 65 /* an X.509 common name: at most 64 characters + NUL */

#define CFG_DEFAULT_PATH "/etc/tsdfd/tsdfd.conf"

/* [volume] memory_cap_mb by default: one map's volume, MiB. */
#define CFG_DEFAULT_MEMORY_CAP_MB 4096u

typedef enum {
    CFG_POLICY_BLOCK = 0,       /* senders wait: the daemon stops pulling while full */
    CFG_POLICY_DROP_OLDEST = 1, /* drop the oldest frame of the same sensor, else the oldest */
} cfg_queue_policy;

/* What happens to a map's blocks far from its sensors ([eviction] mode). */
typedef enum {
    CFG_EVICT_OFF = 0,   /* kept: the map grows with everything it ever saw */
    CFG_EVICT_DROP = 1,  /* removed and forgotten */
    CFG_EVICT_SPILL = 2, /* removed to the state directory, brought back when seen again */
} cfg_evict_mode;

typedef struct {
    /* [server] */
    char listen[CFG_MAX_URLS][CFG_URL_LEN]; /* REQ/REP listen URLs */
    size_t listen_count;
    char frames_listen[CFG_MAX_URLS][CFG_URL_LEN]; /* PUSH/PULL listen URLs */
    size_t frames_listen_count;
    uint32_t request_contexts; /* nng contexts (request threads) on the REP socket */
    /* Request contexts that may wait on one map's worker at once, and on
     * one kind of query (mesh, raycast, ...) over all maps; 0: auto
     * (request_contexts / 4 and / 2, at least 1). See cfg_query_limits. */
    uint32_t max_queries_per_map;
    uint32_t max_queries_per_kind;
    uint32_t decode_threads;  /* threads pulling and decoding frames */
    uint32_t max_message_mb;  /* nng recv max size, MiB */
    uint32_t max_reply_mb;    /* the largest reply (raycast, mesh) sent, MiB */
    uint32_t max_connections; /* open connections (pipes) of both sockets together */
    uint32_t
        idle_timeout_s; /* a connection with no request in progress this long is closed; 0 never */
    uint32_t ring_attach_timeout_ms; /* a ring socket connection that attached nothing is closed */
    uint32_t request_timeout_ms;     /* a request waits at most this long for its map */
    uint32_t stop_timeout_ms;        /* at shutdown, after the drain: a worker's last job */
    uint32_t stall_timeout_ms;       /* a worker on one job longer is stalled; 0 = never */
    char state_dir[CFG_PATH_LEN];
    int allow_insecure_remote;     /* plain tcp:// beyond loopback: allowed, with a warning */
    uint32_t ipc_mode;             /* mode of ipc:// socket files (octal in the file) */
    char ipc_group[CFG_GROUP_LEN]; /* group of ipc:// socket files; "": the daemon's */
    /* The unix socket where local clients attach shared-memory frame
     * rings (rings.h; "": none; "auto", the default: beside the first
     * ipc:// listen socket, cfg_ring_socket_path), with ipc_mode and
     * ipc_group, and the bound on what the rings hold in all, MiB. */
    char ring_socket[CFG_PATH_LEN];
    uint32_t ring_max_mb;

    /* [tls] ("" = not set; the three files go together) */
    char tls_cert_file[CFG_PATH_LEN];              /* server certificate (PEM) */
    char tls_key_file[CFG_PATH_LEN];               /* its private key (PEM) */
    char tls_ca_file[CFG_PATH_LEN];                /* CA(s) client certificates must chain to */
    char tls_writers[CFG_MAX_WRITERS][CFG_CN_LEN]; /* CNs that may write; none: every client */
    size_t tls_writers_count;

    /* [queue] */
    uint32_t queue_length; /* frames per map queue */
    cfg_queue_policy queue_policy;
    uint32_t push_timeout_ms;    /* block policy: an integrate request waits this long */
    uint32_t queue_max_bytes_mb; /* MiB the frames queued in all maps may hold together */
    uint32_t queue_pinned_mb;    /* MiB of page-locked depth buffers (frame_pool.h); 0: none */
    uint32_t drain_timeout_ms;   /* at shutdown: how long to integrate what is queued */
    uint32_t max_sensors;        /* sensors with their own counters */

    /* [volume] */
    tsdf_volume_params volume; /* backend, voxel size, ... (memory cap from memory_cap_mb) */
    uint64_t volume_memory_budget_bytes; /* all maps' volumes together; 0 = auto (maps.h) */
    uint32_t max_maps;
    int auto_create_maps;                           /* create a map on first use */
    char maps[CFG_MAX_DECLARED_MAPS][CFG_NAME_LEN]; /* declared maps, created at start */
    size_t maps_count;

    /* [eviction] */
    cfg_evict_mode evict_mode;
    float evict_radius_m;        /* blocks farther from the map's latest sensor go */
    uint32_t evict_check_frames; /* a map's frames between two checks */
    int evict_on_full;           /* a frame refused for memory: make room by eviction, retry */

    /* [snapshot] */
    uint32_t autosave_period_s; /* 0 = off */
    int save_on_stop;
    int load_on_start;
    uint32_t snapshot_keep;

    /* [metrics] */
    int metrics_enabled;
    char metrics_host[CFG_URL_LEN];
    uint32_t metrics_port;
    int view_enabled;             /* the live view on the same endpoint (live_view.h) */
    char web_dir[CFG_PATH_LEN];   /* the view's page files; "": found (view_files.h) */
    char three_dir[CFG_PATH_LEN]; /* three.js (Debian's libjs-three) */
    uint32_t view_interval_ms;    /* a client's shortest interval between two requests of a kind */

    /* [log] */
    int log_level;           /* TSDF_LOG_* */
    uint32_t stats_period_s; /* periodic stats log line; 0 = off */
    uint32_t latency_window; /* samples in each latency window */
} tsdfd_config;

/* Fills *c with every default (the values documented in config/tsdfd.conf). */
void cfg_defaults(tsdfd_config *c);

/* Sets one key from its text value, as the file would. Returns TSDF_OK,
 * TSDF_ENOT_FOUND (unknown section or key) or TSDF_EINVAL (bad value); err
 * (optional) receives "[section] key: reason". */
int cfg_set(tsdfd_config *c, const char *section, const char *key, const char *value, char *err,
            size_t err_len);

/* Applies the INI file at path on top of *c. Returns TSDF_OK, TSDF_EIO (the
 * file cannot be opened), TSDF_ENOT_FOUND / TSDF_EINVAL (the first bad key;
 * err says "path:line: [section] key: reason"), TSDF_EFORMAT (a line that is
 * not INI). *c may be partly updated on error. */
int cfg_load_file(tsdfd_config *c, const char *path, char *err, size_t err_len);

/* Cross-key checks after everything is applied (at least one listen URL,
 * volume parameters, declared maps within max_maps, ...). TSDF_EINVAL with err.
 * Access: a tls+tcp:// URL needs [tls] cert_file, key_file and ca_file
 * (which must load); a tcp:// URL beyond loopback needs [server]
 * allow_insecure_remote = true, and is then logged as a warning (once per
 * call); ipc_group must name an existing group. Every ipc:// path and a
 * given ring_socket fit a Unix socket path (107 bytes). A [metrics] host
 * beyond loopback is logged as a warning. (config_check.c) */
int cfg_validate(const tsdfd_config *c, char *err, size_t err_len);

/* Internal to config.c and config_check.c: formats an error into err
 * (err_len bytes; NULL or 0: nothing). */
void cfg_err(char *err, size_t err_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* What the command line asks for. */
typedef enum {
    CFG_ACTION_RUN = 0,
    CFG_ACTION_CHECK, /* --check-config FILE: validate and exit */
    CFG_ACTION_HELP,
    CFG_ACTION_VERSION,
} cfg_action;

/*
 * Builds the configuration from the command line: defaults, then the file
 * (--config FILE, else CFG_DEFAULT_PATH when it exists: the daemon also runs
 * with no file at all), then the flags, then cfg_validate. Flags:
 *   --config FILE, --check-config FILE, --listen URL[,URL...],
 *   --frames-listen URL[,URL...], --backend auto|cpu|cuda,
 *   --log-level LEVEL, --state-dir DIR, --metrics HOST:PORT|off,
 *   --queue-length N, --queue-policy block|drop_oldest,
 *   --set SECTION.KEY=VALUE (any file key), --foreground (accepted; the
 *   daemon never forks), --help, --version.
 * *config_path receives the file used ("" when none). Returns TSDF_OK or an
 * error with err filled.
 */
int cfg_from_args(int argc, char **argv, tsdfd_config *c, cfg_action *action, char *config_path,
                  size_t config_path_len, char *err, size_t err_len);

/* The usage text for --help. */
const char *cfg_usage(void);

/* 1 when [tls] is configured (cert_file, key_file and ca_file all set). */
int cfg_tls_enabled(const tsdfd_config *c);

/* The ring socket [server] ring_socket names, into out[n] ("" for none):
 * the path as given, or for "auto" rings.sock in the folder of the first
 * ipc:// listen URL; a relative path made absolute from the working
 * directory (ping replies name it). "auto" gives none without an ipc://
 * listener or when the path would not fit a Unix socket path. */
void cfg_ring_socket_path(const tsdfd_config *c, char *out, size_t n);

/* The gid of [server] ipc_group, or -1 when it is empty. TSDF_ENOT_FOUND
 * for a group the system does not know. */
int cfg_ipc_gid(const tsdfd_config *c, long *gid);

/* "block" / "drop_oldest". */
const char *cfg_policy_name(cfg_queue_policy p);
/* "off", "drop", "spill". */
const char *cfg_evict_mode_name(cfg_evict_mode m);

/* The effective query limits of cfg (auto resolved): per map and per kind. */
void cfg_query_limits(const tsdfd_config *cfg, uint32_t *per_map, uint32_t *per_kind);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_CONFIG_H */
