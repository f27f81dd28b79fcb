/*
 * config.c - defaults, INI file and command line (see config.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "config.h"

#include "log.h"
#include "tsdf_error.h"
#include "tsdf_proto.h"
#include "tsdf_transport.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

typedef enum {
    KEY_U32,       /* decimal integer within [min, max] */
    KEY_FLOAT,     /* finite float within (min, max] or [min, max] (see min_open) */
    KEY_BOOL,      /* true/false/yes/no/on/off/1/0 */
    KEY_STRING,    /* non-empty text, len < CFG_PATH_LEN */
    KEY_URLS,      /* comma-separated nng URLs */
    KEY_MAPS,      /* comma-separated map names */
    KEY_POLICY,    /* block | drop_oldest */
    KEY_BACKEND,   /* auto | cpu | cuda */
    KEY_LOG_LEVEL, /* error | warn | info | debug */
    KEY_MEMCAP_MB, /* u32 MiB into volume.memory_cap_bytes */
    KEY_BUDGET_MB, /* auto, or u32 MiB (0 = auto) into volume_memory_budget_bytes */
    KEY_OPTSTRING, /* text, may be empty ("not set"), len < size */
    KEY_MODE,      /* octal file mode within [min, max] */
    KEY_CNS,       /* comma-separated certificate common names, may be empty */
    KEY_LAYOUT,    /* f32 | s16 into volume.layout */
    KEY_EVICT,     /* off | drop | spill into evict_mode */
    KEY_ON_FULL,   /* refuse | evict into evict_on_full */
} key_type;

typedef struct {
    const char *section;
    const char *key;
    key_type type;
    size_t offset; /* into tsdfd_config */
    double min, max;
    int min_open; /* KEY_FLOAT: 1 when min itself is not allowed */
    size_t size;  /* KEY_STRING: buffer size */
} key_def;

#define OFF(f) offsetof(tsdfd_config, f)
#define SZ(f) sizeof(((tsdfd_config *)0)->f)

static const key_def cfg_keys[] = {
    {"server", "listen", KEY_URLS, OFF(listen), 0, 0, 0, 0},
    {"server", "frames_listen", KEY_URLS, OFF(frames_listen), 0, 0, 0, 0},
    {"server", "request_contexts", KEY_U32, OFF(request_contexts), 1, 64, 0, 0},
    {"server", "max_queries_per_map", KEY_U32, OFF(max_queries_per_map), 0, 64, 0, 0},
    {"server", "max_queries_per_kind", KEY_U32, OFF(max_queries_per_kind), 0, 64, 0, 0},
    {"server", "decode_threads", KEY_U32, OFF(decode_threads), 1, 32, 0, 0},
    {"server", "max_message_mb", KEY_U32, OFF(max_message_mb), 1, 64, 0, 0},
    {"server", "max_reply_mb", KEY_U32, OFF(max_reply_mb), 1, 64, 0, 0},
    {"server", "max_connections", KEY_U32, OFF(max_connections), 1, 4096, 0, 0},
    {"server", "idle_timeout_s", KEY_U32, OFF(idle_timeout_s), 0, 86400, 0, 0},
    {"server", "request_timeout_ms", KEY_U32, OFF(request_timeout_ms), 100, 600000, 0, 0},
    {"server", "stop_timeout_ms", KEY_U32, OFF(stop_timeout_ms), 0, 600000, 0, 0},
    {"server", "stall_timeout_ms", KEY_U32, OFF(stall_timeout_ms), 0, 86400000, 0, 0},
    {"server", "state_dir", KEY_STRING, OFF(state_dir), 0, 0, 0, SZ(state_dir)},
    {"server", "allow_insecure_remote", KEY_BOOL, OFF(allow_insecure_remote), 0, 0, 0, 0},
    {"server", "ipc_mode", KEY_MODE, OFF(ipc_mode), 0600, 0777, 0, 0},
    {"server", "ipc_group", KEY_OPTSTRING, OFF(ipc_group), 0, 0, 0, SZ(ipc_group)},
    {"server", "ring_socket", KEY_OPTSTRING, OFF(ring_socket), 0, 0, 0, SZ(ring_socket)},
    {"server", "ring_max_mb", KEY_U32, OFF(ring_max_mb), 1, 65536, 0, 0},
    {"server", "ring_attach_timeout_ms", KEY_U32, OFF(ring_attach_timeout_ms), 100, 600000, 0, 0},

    {"tls", "cert_file", KEY_OPTSTRING, OFF(tls_cert_file), 0, 0, 0, SZ(tls_cert_file)},
    {"tls", "key_file", KEY_OPTSTRING, OFF(tls_key_file), 0, 0, 0, SZ(tls_key_file)},
    {"tls", "ca_file", KEY_OPTSTRING, OFF(tls_ca_file), 0, 0, 0, SZ(tls_ca_file)},
    {"tls", "writers", KEY_CNS, OFF(tls_writers), 0, 0, 0, 0},

    {"queue", "length", KEY_U32, OFF(queue_length), 1, 65536, 0, 0},
    {"queue", "policy", KEY_POLICY, OFF(queue_policy), 0, 0, 0, 0},
    {"queue", "push_timeout_ms", KEY_U32, OFF(push_timeout_ms), 0, 600000, 0, 0},
    {"queue", "max_bytes_mb", KEY_U32, OFF(queue_max_bytes_mb), 16, 1048576, 0, 0},
    {"queue", "pinned_mb", KEY_U32, OFF(queue_pinned_mb), 0, 65536, 0, 0},
    {"queue", "drain_timeout_ms", KEY_U32, OFF(drain_timeout_ms), 0, 600000, 0, 0},
    {"queue", "max_sensors", KEY_U32, OFF(max_sensors), 1, 65536, 0, 0},

    {"volume", "backend", KEY_BACKEND, OFF(volume.backend), 0, 0, 0, 0},
    {"volume", "voxel_size_m", KEY_FLOAT, OFF(volume.voxel_size_m), 0, 1.0, 1, 0},
    {"volume", "trunc_vox", KEY_FLOAT, OFF(volume.trunc_vox), 1.0, 64.0, 0, 0},
    {"volume", "max_weight", KEY_FLOAT, OFF(volume.max_weight), 1.0, 65535.0, 0, 0},
    {"volume", "initial_capacity_blocks", KEY_U32, OFF(volume.initial_capacity_blocks), 16,
     1u << 30, 0, 0},
    {"volume", "max_load_factor", KEY_FLOAT, OFF(volume.max_load_factor), 0, 0.95, 1, 0},
    {"volume", "memory_cap_mb", KEY_MEMCAP_MB, OFF(volume.memory_cap_bytes), 0, 16u << 20, 0, 0},
    {"volume", "memory_budget_mb", KEY_BUDGET_MB, OFF(volume_memory_budget_bytes), 0, 16u << 20, 0,
     0},
    {"volume", "cuda_device", KEY_U32, OFF(volume.cuda_device), 0, 63, 0, 0},
    {"volume", "max_maps", KEY_U32, OFF(max_maps), 1, 256, 0, 0},
    {"volume", "auto_create_maps", KEY_BOOL, OFF(auto_create_maps), 0, 0, 0, 0},
    {"volume", "maps", KEY_MAPS, OFF(maps), 0, 0, 0, 0},
    {"volume", "layout", KEY_LAYOUT, OFF(volume.layout), 0, 0, 0, 0},
    /* 0 = every online core; the bound is the engine's (TSDF_MAX_CPU_THREADS). */
    {"volume", "cpu_threads", KEY_U32, OFF(volume.cpu_threads), 0, TSDF_MAX_CPU_THREADS, 0, 0},

    {"eviction", "mode", KEY_EVICT, OFF(evict_mode), 0, 0, 0, 0},
    {"eviction", "radius_m", KEY_FLOAT, OFF(evict_radius_m), 0, 1e5, 1, 0},
    {"eviction", "check_frames", KEY_U32, OFF(evict_check_frames), 1, 1000000, 0, 0},
    {"eviction", "on_full", KEY_ON_FULL, OFF(evict_on_full), 0, 0, 0, 0},

    {"snapshot", "autosave_period_s", KEY_U32, OFF(autosave_period_s), 0, 7 * 86400, 0, 0},
    {"snapshot", "save_on_stop", KEY_BOOL, OFF(save_on_stop), 0, 0, 0, 0},
    {"snapshot", "load_on_start", KEY_BOOL, OFF(load_on_start), 0, 0, 0, 0},
    {"snapshot", "keep", KEY_U32, OFF(snapshot_keep), 1, 1000, 0, 0},

    {"metrics", "enabled", KEY_BOOL, OFF(metrics_enabled), 0, 0, 0, 0},
    {"metrics", "host", KEY_STRING, OFF(metrics_host), 0, 0, 0, SZ(metrics_host)},
    {"metrics", "port", KEY_U32, OFF(metrics_port), 1, 65535, 0, 0},
    {"metrics", "view", KEY_BOOL, OFF(view_enabled), 0, 0, 0, 0},
    {"metrics", "web_dir", KEY_OPTSTRING, OFF(web_dir), 0, 0, 0, SZ(web_dir)},
    {"metrics", "three_dir", KEY_STRING, OFF(three_dir), 0, 0, 0, SZ(three_dir)},
    {"metrics", "view_interval_ms", KEY_U32, OFF(view_interval_ms), 10, 60000, 0, 0},

    {"log", "level", KEY_LOG_LEVEL, OFF(log_level), 0, 0, 0, 0},
    {"log", "stats_period_s", KEY_U32, OFF(stats_period_s), 0, 86400, 0, 0},
    {"log", "latency_window", KEY_U32, OFF(latency_window), 1, 65536, 0, 0},
};

#define CFG_KEY_COUNT (sizeof cfg_keys / sizeof cfg_keys[0])

void cfg_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (err == NULL || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void cfg_defaults(tsdfd_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen[0], CFG_URL_LEN, "%s", TSDF_PROTO_DEFAULT_REQ_URL);
    snprintf(c->listen[1], CFG_URL_LEN, "%s", TSDF_PROTO_DEFAULT_REQ_TCP_URL);
    c->listen_count = 2;
    snprintf(c->frames_listen[0], CFG_URL_LEN, "%s", TSDF_PROTO_DEFAULT_PUSH_URL);
    snprintf(c->frames_listen[1], CFG_URL_LEN, "%s", TSDF_PROTO_DEFAULT_PUSH_TCP_URL);
    c->frames_listen_count = 2;
    c->request_contexts = 16;
    c->max_queries_per_map = 0;  /* auto: request_contexts / 4 */
    c->max_queries_per_kind = 0; /* auto: request_contexts / 2 */
    c->decode_threads = 2;
    /* A 640 x 480 frame with colour is 1.5 MB; 8 MiB takes 1280 x 720 RGB-D. */
    c->max_message_mb = 8;
    c->max_reply_mb = 64;
    c->max_connections = 64;
    c->idle_timeout_s = 60;
    c->ring_attach_timeout_ms = 5000;
    c->request_timeout_ms = 30000;
    c->stop_timeout_ms = 5000;
    /* Twice the request timeout: a job that long has outlived its client
     * whatever it is, and the CPU raycast, the one query that can take
     * minutes, is cancelled when its client gives up. */
    c->stall_timeout_ms = 60000;
    snprintf(c->state_dir, sizeof c->state_dir, "/var/lib/tsdfd");
    /* Owner and group (the unit's Group=tsdfd) may connect; others may not
     * even see the socket's permissions change under a wider umask. */
    c->ipc_mode = 0660;
    snprintf(c->ring_socket, sizeof c->ring_socket, "auto");
    c->ring_max_mb = 256;

    c->queue_length = 64;
    c->queue_policy = CFG_POLICY_BLOCK;
    c->push_timeout_ms = 5000;
    c->queue_max_bytes_mb = 1024;
    /* About a hundred 640 x 480 16-bit depth images. */
    c->queue_pinned_mb = 64;
    c->drain_timeout_ms = 10000;
    c->max_sensors = 1024;

    tsdf_volume_params_default(&c->volume);
    /* A map is bounded on its own and all maps together (memory_budget_mb,
     * 0 = auto: derived from the machine at start), so no stream of frames
     * can take the host's or the device's memory. */
    c->volume.memory_cap_bytes = (uint64_t)CFG_DEFAULT_MEMORY_CAP_MB << 20;
    c->volume_memory_budget_bytes = 0;
    c->max_maps = 16;
    c->auto_create_maps = 1;
    snprintf(c->maps[0], CFG_NAME_LEN, "%s", TSDF_PROTO_DEFAULT_MAP);
    c->maps_count = 1;

    /* Off until the operator says what far blocks are worth: dropping
     * them loses surface, spilling them takes disk. 10 m is twice the
     * depth range of most depth cameras; checked every 30 frames (a
     * second at 30 Hz). */
    c->evict_mode = CFG_EVICT_OFF;
    c->evict_radius_m = 10.0f;
    c->evict_check_frames = 30;
    c->evict_on_full = 0;

    /* A daemon that loses its map on a restart or a crash surprises its
     * users: save every 5 minutes and at stop, and restore at start. */
    c->autosave_period_s = 300;
    c->save_on_stop = 1;
    c->load_on_start = 1;
    c->snapshot_keep = 3;

    /* Loopback only by default: the metrics carry no secrets, but exposing
     * a port beyond the host is the operator's decision. */
    c->metrics_enabled = 1;
    snprintf(c->metrics_host, sizeof c->metrics_host, "127.0.0.1");
    c->metrics_port = 9464;
    /* The live view is read-only and served under the metrics endpoint's
     * address; its page is installed with the daemon and three.js comes
     * from Debian's libjs-three, so it never needs the network. */
    c->view_enabled = 1;
    snprintf(c->three_dir, sizeof c->three_dir, "/usr/share/javascript/three");
    c->view_interval_ms = 250;

    c->log_level = TSDF_LOG_INFO;
    c->stats_period_s = 60;
    c->latency_window = 1024;
}

const char *cfg_policy_name(cfg_queue_policy p)
{
    return p == CFG_POLICY_DROP_OLDEST ? "drop_oldest" : "block";
}

const char *cfg_evict_mode_name(cfg_evict_mode m)
{
    return m == CFG_EVICT_SPILL ? "spill" : m == CFG_EVICT_DROP ? "drop" : "off";
}

/* Copies s without leading and trailing blanks into out (out_len bytes). */
static int trim_copy(const char *s, size_t len, char *out, size_t out_len)
{
    while (len > 0 && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    if (len + 1 > out_len)
        return TSDF_ETOO_LARGE;
    memcpy(out, s, len);
    out[len] = '\0';
    return TSDF_OK;
}

static int parse_u32(const char *v, double min, double max, uint32_t *out)
{
    char *end;
    if (v[0] == '\0' || v[0] == '-' || v[0] == '+')
        return TSDF_EINVAL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0')
        return TSDF_EINVAL;
    if ((double)x < min || (double)x > max)
        return TSDF_EINVAL;
    *out = (uint32_t)x;
    return TSDF_OK;
}

static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return TSDF_OK;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return TSDF_OK;
        }
    }
    return TSDF_EINVAL;
}

/* A URL nng can listen on: ipc://, tcp://, inproc:// (tests), tls+tcp://
 * (cfg_validate checks that [tls] is configured for it). */
static int check_url(const char *u)
{
    static const char *const schemes[] = {"ipc://",    "tcp://",     "tcp4://",     "tcp6://",
                                          "inproc://", "tls+tcp://", "tls+tcp4://", "tls+tcp6://"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t n = strlen(schemes[i]);
        if (strncmp(u, schemes[i], n) == 0 && u[n] != '\0')
            return TSDF_OK;
    }
    return TSDF_EINVAL;
}

/* A certificate common name as [tls] writers lists it: 1..64 printable
 * characters (the comma separates entries). */
static int check_cn(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CFG_CN_LEN)
        return TSDF_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isprint((unsigned char)s[i]))
            return TSDF_EINVAL;
    return TSDF_OK;
}

/* Splits a comma-separated list into up to max entries of entry_len bytes.
 * kind 0: URLs, 1: map names, 2: common names. */
static int parse_list(const char *v, char *entries, size_t max, size_t entry_len, size_t *count,
                      int kind, char *why, size_t why_len)
{
    size_t n = 0;
    const char *p = v;
    char tmp[CFG_URL_LEN];

    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (trim_copy(p, len, tmp, sizeof tmp) != TSDF_OK || strlen(tmp) + 1 > entry_len) {
            snprintf(why, why_len, "entry %zu is too long (max %zu bytes)", n + 1, entry_len - 1);
            return TSDF_EINVAL;
        }
        if (tmp[0] == '\0') {
            snprintf(why, why_len, "entry %zu is empty", n + 1);
            return TSDF_EINVAL;
        }
        if (kind == 0 && check_url(tmp) != TSDF_OK) {
            snprintf(why, why_len, "'%.128s' is not an ipc://, tcp://, tls+tcp:// or inproc:// URL",
                     tmp);
            return TSDF_EINVAL;
        }
        if (kind == 1 && tsdf_proto_check_name(tmp, strlen(tmp)) != TSDF_OK) {
            snprintf(why, why_len,
                     "'%s' is not a map name (1..%u of [A-Za-z0-9_.-], not starting with '.')", tmp,
                     TSDF_PROTO_MAX_NAME_LEN);
            return TSDF_EINVAL;
        }
        if (kind == 2 && check_cn(tmp) != TSDF_OK) {
            snprintf(why, why_len, "'%.128s' is not a common name (1..64 printable characters)",
                     tmp);
            return TSDF_EINVAL;
        }
        if (n == max) {
            snprintf(why, why_len, "more than %zu entries", max);
            return TSDF_EINVAL;
        }
        for (size_t i = 0; i < n; i++) {
            if (strcmp(entries + i * entry_len, tmp) == 0) {
                snprintf(why, why_len, "'%.128s' is listed twice", tmp);
                return TSDF_EINVAL;
            }
        }
        memcpy(entries + n * entry_len, tmp, strlen(tmp) + 1);
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *count = n;
    return TSDF_OK;
}

static const key_def *find_key(const char *section, const char *key, int *section_known)
{
    *section_known = 0;
    for (size_t i = 0; i < CFG_KEY_COUNT; i++) {
        if (strcmp(cfg_keys[i].section, section) != 0)
            continue;
        *section_known = 1;
        if (strcmp(cfg_keys[i].key, key) == 0)
            return &cfg_keys[i];
    }
    return NULL;
}

int cfg_set(tsdfd_config *c, const char *section, const char *key, const char *value, char *err,
            size_t err_len)
{
    char why[256] = "";
    char v[CFG_PATH_LEN * 2];
    int section_known;
    int rc = TSDF_OK;

    if (c == NULL || section == NULL || key == NULL || value == NULL)
        return TSDF_EINVAL;
    const key_def *k = find_key(section, key, &section_known);
    if (k == NULL) {
        if (section_known)
            cfg_err(err, err_len, "[%s] %s: unknown key", section, key);
        else
            cfg_err(err, err_len, "[%s] %s: unknown section", section, key);
        return TSDF_ENOT_FOUND;
    }
    if (trim_copy(value, strlen(value), v, sizeof v) != TSDF_OK) {
        cfg_err(err, err_len, "[%s] %s: value too long", section, key);
        return TSDF_EINVAL;
    }
    char *field = (char *)c + k->offset;

    switch (k->type) {
    case KEY_U32:
    case KEY_MEMCAP_MB:
    case KEY_BUDGET_MB: {
        uint32_t x;
        if (k->type == KEY_BUDGET_MB && strcmp(v, "auto") == 0) {
            *(uint64_t *)field = 0;
            break;
        }
        if (parse_u32(v, k->min, k->max, &x) != TSDF_OK) {
            snprintf(why, sizeof why, "'%.64s' is not %san integer in [%.0f, %.0f]", v,
                     k->type == KEY_BUDGET_MB ? "auto or " : "", k->min, k->max);
            rc = TSDF_EINVAL;
            break;
        }
        /* The field's C type decides the store: the memory cap and budget
         * are given in MiB but kept in bytes, and cuda_device is an int. */
        if (k->type == KEY_MEMCAP_MB || k->type == KEY_BUDGET_MB)
            *(uint64_t *)field = (uint64_t)x << 20;
        else if (k->offset == OFF(volume.cuda_device))
            *(int *)field = (int)x;
        else
            *(uint32_t *)field = x;
        break;
    }
    case KEY_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        int ok = v[0] != '\0' && *end == '\0' && errno == 0 && isfinite(x) &&
                 (k->min_open ? x > k->min : x >= k->min) && x <= k->max;
        if (!ok) {
            snprintf(why, sizeof why, "'%.64s' is not a number in %s%g, %g]", v,
                     k->min_open ? "(" : "[", k->min, k->max);
            rc = TSDF_EINVAL;
            break;
        }
        *(float *)field = (float)x;
        break;
    }
    case KEY_BOOL:
        if (parse_bool(v, (int *)field) != TSDF_OK) {
            snprintf(why, sizeof why, "'%.64s' is not a boolean (true/false, yes/no, on/off, 1/0)",
                     v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_STRING:
        if (v[0] == '\0' || strlen(v) + 1 > k->size) {
            snprintf(why, sizeof why, "must be 1..%zu bytes", k->size - 1);
            rc = TSDF_EINVAL;
            break;
        }
        memcpy(field, v, strlen(v) + 1);
        break;
    case KEY_URLS: {
        char tmp[CFG_MAX_URLS][CFG_URL_LEN];
        size_t n;
        memset(tmp, 0, sizeof tmp);
        rc = parse_list(v, &tmp[0][0], CFG_MAX_URLS, CFG_URL_LEN, &n, 0, why, sizeof why);
        if (rc != TSDF_OK)
            break;
        memcpy(field, tmp, sizeof tmp);
        if (k->offset == OFF(listen))
            c->listen_count = n;
        else
            c->frames_listen_count = n;
        break;
    }
    case KEY_MAPS: {
        char tmp[CFG_MAX_DECLARED_MAPS][CFG_NAME_LEN];
        size_t n;
        memset(tmp, 0, sizeof tmp);
        rc = parse_list(v, &tmp[0][0], CFG_MAX_DECLARED_MAPS, CFG_NAME_LEN, &n, 1, why, sizeof why);
        if (rc != TSDF_OK)
            break;
        memcpy(c->maps, tmp, sizeof tmp);
        c->maps_count = n;
        break;
    }
    case KEY_OPTSTRING:
        if (strlen(v) + 1 > k->size) {
            snprintf(why, sizeof why, "must be at most %zu bytes", k->size - 1);
            rc = TSDF_EINVAL;
            break;
        }
        memcpy(field, v, strlen(v) + 1);
        break;
    case KEY_MODE: {
        char *end;
        errno = 0;
        unsigned long x = strtoul(v, &end, 8);
        if (v[0] == '\0' || v[0] == '-' || v[0] == '+' || *end != '\0' || errno != 0 ||
            (double)x < k->min || (double)x > k->max) {
            snprintf(why, sizeof why, "'%.64s' is not an octal mode in [0%o, 0%o]", v,
                     (unsigned)k->min, (unsigned)k->max);
            rc = TSDF_EINVAL;
            break;
        }
        *(uint32_t *)field = (uint32_t)x;
        break;
    }
    case KEY_CNS: {
        char tmp[CFG_MAX_WRITERS][CFG_CN_LEN];
        size_t n = 0;
        memset(tmp, 0, sizeof tmp);
        /* Empty: no list, every authenticated client may write. */
        if (v[0] != '\0')
            rc = parse_list(v, &tmp[0][0], CFG_MAX_WRITERS, CFG_CN_LEN, &n, 2, why, sizeof why);
        if (rc != TSDF_OK)
            break;
        memcpy(c->tls_writers, tmp, sizeof tmp);
        c->tls_writers_count = n;
        break;
    }
    case KEY_POLICY:
        if (strcmp(v, "block") == 0)
            c->queue_policy = CFG_POLICY_BLOCK;
        else if (strcmp(v, "drop_oldest") == 0)
            c->queue_policy = CFG_POLICY_DROP_OLDEST;
        else {
            snprintf(why, sizeof why, "'%.64s' is not block or drop_oldest", v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_BACKEND:
        if (tsdf_backend_parse(v, &c->volume.backend) != TSDF_OK) {
            snprintf(why, sizeof why, "'%.64s' is not auto, cpu or cuda", v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_LOG_LEVEL:
        if (tsdf_log_parse_level(v, &c->log_level) != TSDF_OK) {
            snprintf(why, sizeof why, "'%.64s' is not error, warn, info or debug", v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_LAYOUT:
        if (tsdf_layout_parse(v, &c->volume.layout) != TSDF_OK) {
            snprintf(why, sizeof why, "'%.64s' is not f32 or s16", v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_EVICT:
        if (strcmp(v, "off") == 0)
            c->evict_mode = CFG_EVICT_OFF;
        else if (strcmp(v, "drop") == 0)
            c->evict_mode = CFG_EVICT_DROP;
        else if (strcmp(v, "spill") == 0)
            c->evict_mode = CFG_EVICT_SPILL;
        else {
            snprintf(why, sizeof why, "'%.64s' is not off, drop or spill", v);
            rc = TSDF_EINVAL;
        }
        break;
    case KEY_ON_FULL:
        if (strcmp(v, "refuse") == 0)
            c->evict_on_full = 0;
        else if (strcmp(v, "evict") == 0)
            c->evict_on_full = 1;
        else {
            snprintf(why, sizeof why, "'%.64s' is not refuse or evict", v);
            rc = TSDF_EINVAL;
        }
        break;
    }
    if (rc != TSDF_OK)
        cfg_err(err, err_len, "[%s] %s: %s", section, key, why);
    return rc;
}

typedef struct {
    tsdfd_config *c;
    int rc;
    char err[CFG_ERR_LEN];
    int lineno; /* counts handler calls only when inih gives no line numbers */
} load_ctx;

static int load_handler(void *user, const char *section, const char *name, const char *value)
{
    load_ctx *lc = user;
    char err[CFG_ERR_LEN];

    /* inih reports "a section header alone" with a NULL name in some builds. */
    if (name == NULL)
        return 1;
    int rc = cfg_set(lc->c, section ? section : "", name, value ? value : "", err, sizeof err);
    if (rc != TSDF_OK) {
        if (lc->rc == TSDF_OK) {
            lc->rc = rc;
            snprintf(lc->err, sizeof lc->err, "%s", err);
        }
        return 0;
    }
    return 1;
}

int cfg_load_file(tsdfd_config *c, const char *path, char *err, size_t err_len)
{
    load_ctx lc;
    memset(&lc, 0, sizeof lc);
    lc.c = c;

    FILE *f = fopen(path, "r");
    if (f == NULL) {
        cfg_err(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return TSDF_EIO;
    }
    int line = ini_parse_file(f, load_handler, &lc);
    fclose(f);
    if (line == -2) {
        cfg_err(err, err_len, "%s: out of memory while parsing", path);
        return TSDF_ENOMEM;
    }
    if (line < 0) {
        cfg_err(err, err_len, "%s: cannot read", path);
        return TSDF_EIO;
    }
    if (line > 0) {
        if (lc.rc != TSDF_OK) {
            cfg_err(err, err_len, "%s:%d: %s", path, line, lc.err);
            return lc.rc;
        }
        cfg_err(err, err_len, "%s:%d: not a valid INI line (expected [section] or key = value)",
                path, line);
        return TSDF_EFORMAT;
    }
    return TSDF_OK;
}

const char *cfg_usage(void)
{
    return "usage: tsdfd [options]\n"
           "  --config FILE            configuration file (default " CFG_DEFAULT_PATH
           ", used when present)\n"
           "  --check-config FILE      validate FILE and exit (0: valid)\n"
           "  --listen URL[,URL...]    REQ/REP listen URLs (ipc://, tcp://, tls+tcp://)\n"
           "  --frames-listen URL[,..] PUSH/PULL listen URLs for frame streams\n"
           "  --backend auto|cpu|cuda  volume backend\n"
           "  --log-level LEVEL        error, warn, info or debug\n"
           "  --state-dir DIR          snapshot directory\n"
           "  --metrics HOST:PORT|off  Prometheus endpoint\n"
           "  --queue-length N         frames per map queue\n"
           "  --queue-policy P         block or drop_oldest\n"
           "  --set SECTION.KEY=VALUE  any configuration key\n"
           "  --foreground             run in the foreground (the default; never forks)\n"
           "  --help, --version\n";
}

/* Flags that map onto one file key. */
typedef struct {
    const char *flag;
    const char *section;
    const char *key;
} flag_map;

static const flag_map cfg_flags[] = {
    {"--listen", "server", "listen"},       {"--frames-listen", "server", "frames_listen"},
    {"--backend", "volume", "backend"},     {"--log-level", "log", "level"},
    {"--state-dir", "server", "state_dir"}, {"--queue-length", "queue", "length"},
    {"--queue-policy", "queue", "policy"},
};

/* 1 when a is a flag that takes a value. */
static int cfg_flag_known(const char *a)
{
    if (strcmp(a, "--metrics") == 0 || strcmp(a, "--set") == 0)
        return 1;
    for (size_t f = 0; f < sizeof cfg_flags / sizeof cfg_flags[0]; f++)
        if (strcmp(a, cfg_flags[f].flag) == 0)
            return 1;
    return 0;
}

/* --metrics HOST:PORT or off. */
static int apply_metrics_flag(tsdfd_config *c, const char *v, char *err, size_t err_len)
{
    if (strcmp(v, "off") == 0) {
        c->metrics_enabled = 0;
        return TSDF_OK;
    }
    const char *colon = strrchr(v, ':');
    char host[CFG_URL_LEN];
    if (colon == NULL || colon == v || (size_t)(colon - v) >= sizeof host) {
        cfg_err(err, err_len, "--metrics: '%s' is not HOST:PORT or off", v);
        return TSDF_EINVAL;
    }
    memcpy(host, v, (size_t)(colon - v));
    host[colon - v] = '\0';
    int rc = cfg_set(c, "metrics", "port", colon + 1, err, err_len);
    if (rc != TSDF_OK)
        return rc;
    rc = cfg_set(c, "metrics", "host", host, err, err_len);
    if (rc != TSDF_OK)
        return rc;
    c->metrics_enabled = 1;
    return TSDF_OK;
}

/* --set section.key=value */
static int apply_set_flag(tsdfd_config *c, const char *v, char *err, size_t err_len)
{
    char sec[64], key[64];
    const char *dot = strchr(v, '.');
    const char *eq = strchr(v, '=');
    if (dot == NULL || eq == NULL || dot > eq || (size_t)(dot - v) >= sizeof sec ||
        (size_t)(eq - dot - 1) >= sizeof key) {
        cfg_err(err, err_len, "--set: '%s' is not SECTION.KEY=VALUE", v);
        return TSDF_EINVAL;
    }
    memcpy(sec, v, (size_t)(dot - v));
    sec[dot - v] = '\0';
    memcpy(key, dot + 1, (size_t)(eq - dot - 1));
    key[eq - dot - 1] = '\0';
    return cfg_set(c, sec, key, eq + 1, err, err_len);
}

int cfg_from_args(int argc, char **argv, tsdfd_config *c, cfg_action *action, char *config_path,
                  size_t config_path_len, char *err, size_t err_len)
{
    const char *file = NULL;
    int explicit_file = 0;
    int rc;

    cfg_defaults(c);
    *action = CFG_ACTION_RUN;
    if (config_path != NULL && config_path_len > 0)
        config_path[0] = '\0';

    /* First pass: the file, so that the flags (second pass) override it. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *action = CFG_ACTION_HELP;
            return TSDF_OK;
        }
        if (strcmp(a, "--version") == 0) {
            *action = CFG_ACTION_VERSION;
            return TSDF_OK;
        }
        if (strcmp(a, "--config") == 0 || strcmp(a, "--check-config") == 0) {
            if (i + 1 >= argc) {
                cfg_err(err, err_len, "%s: needs a FILE", a);
                return TSDF_EINVAL;
            }
            file = argv[++i];
            explicit_file = 1;
            if (strcmp(a, "--check-config") == 0)
                *action = CFG_ACTION_CHECK;
        }
    }
    if (file == NULL && access(CFG_DEFAULT_PATH, F_OK) == 0)
        file = CFG_DEFAULT_PATH;
    if (file != NULL) {
        rc = cfg_load_file(c, file, err, err_len);
        if (rc != TSDF_OK)
            return rc;
        if (config_path != NULL && config_path_len > 0)
            snprintf(config_path, config_path_len, "%s", file);
    }
    (void)explicit_file;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 || strcmp(a, "--check-config") == 0) {
            i++;
            continue;
        }
        if (strcmp(a, "--foreground") == 0 || strcmp(a, "-f") == 0)
            continue;
        if (i + 1 >= argc) {
            cfg_err(err, err_len, "%s: %s (`tsdfd --help` lists the options)", a,
                    cfg_flag_known(a) ? "needs a value" : "unknown option");
            return TSDF_EINVAL;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--metrics") == 0) {
            rc = apply_metrics_flag(c, v, err, err_len);
        } else if (strcmp(a, "--set") == 0) {
            rc = apply_set_flag(c, v, err, err_len);
        } else {
            rc = TSDF_ENOT_FOUND;
            for (size_t f = 0; f < sizeof cfg_flags / sizeof cfg_flags[0]; f++) {
                if (strcmp(a, cfg_flags[f].flag) == 0) {
                    char e2[CFG_ERR_LEN];
                    rc = cfg_set(c, cfg_flags[f].section, cfg_flags[f].key, v, e2, sizeof e2);
                    if (rc != TSDF_OK)
                        cfg_err(err, err_len, "%s: %s", a, e2);
                    break;
                }
            }
            if (rc == TSDF_ENOT_FOUND) {
                cfg_err(err, err_len, "%s: unknown option (`tsdfd --help` lists the options)", a);
                return TSDF_EINVAL;
            }
        }
        if (rc != TSDF_OK)
            return rc;
    }
    return cfg_validate(c, err, err_len);
}

void cfg_query_limits(const tsdfd_config *cfg, uint32_t *per_map, uint32_t *per_kind)
{
    uint32_t m = cfg->max_queries_per_map, k = cfg->max_queries_per_kind;
    if (m == 0)
        m = cfg->request_contexts / 4;
    if (k == 0)
        k = cfg->request_contexts / 2;
    *per_map = m > 0 ? m : 1;
    *per_kind = k > 0 ? k : 1;
}
