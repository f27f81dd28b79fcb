/*
 * config_check.c - the checks of a whole configuration, across keys and
 * against the system it runs on (cfg_validate), and the values derived
 * from it (the ring socket's path, the ipc group, whether TLS is on). The
 * keys themselves are parsed in config.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "config.h"

#include "log.h"
#include "tsdf_error.h"
#include "tsdf_transport.h"

#include <grp.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int cfg_tls_enabled(const tsdfd_config *c)
{
    return c->tls_cert_file[0] != '\0' && c->tls_key_file[0] != '\0' && c->tls_ca_file[0] != '\0';
}

void cfg_ring_socket_path(const tsdfd_config *c, char *out, size_t n)
{
    static const char name[] = "rings.sock";
    const size_t sun_max = sizeof(((struct sockaddr_un *)0)->sun_path);
    const int is_auto = strcmp(c->ring_socket, "auto") == 0;
    char given[CFG_PATH_LEN + sizeof name] = "";
    if (n == 0)
        return;
    out[0] = '\0';
    if (!is_auto) {
        snprintf(given, sizeof given, "%s", c->ring_socket);
    } else {
        for (size_t i = 0; i < c->listen_count && given[0] == '\0'; i++) {
            if (strncmp(c->listen[i], "ipc://", 6) != 0)
                continue;
            const char *p = c->listen[i] + 6;
            const char *slash = strrchr(p, '/');
            const int dir = slash != NULL ? (int)(slash - p) + 1 : 0; /* with its '/' */
            snprintf(given, sizeof given, "%.*s%s", dir, p, name);
        }
    }
    if (given[0] == '\0')
        return;
    /* Ping replies name it, so absolute: a client would read a relative
     * path from its own working directory. */
    char cwd[PATH_MAX], path[sizeof cwd + sizeof given + 1];
    if (given[0] != '/' && getcwd(cwd, sizeof cwd) != NULL)
        snprintf(path, sizeof path, "%s/%s", cwd, given);
    else
        memcpy(path, given, sizeof given);
    /* auto gives way to a path too long to bind; a given one is refused
     * when bound (rings_start). */
    if (is_auto && strlen(path) >= sun_max)
        return;
    if (strlen(path) < n)
        memcpy(out, path, strlen(path) + 1);
    else if (!is_auto)
        snprintf(out, n, "%s", c->ring_socket);
}

int cfg_ipc_gid(const tsdfd_config *c, long *gid)
{
    struct group g, *found = NULL;
    char buf[16384];

    *gid = -1;
    if (c->ipc_group[0] == '\0')
        return TSDF_OK;
    if (getgrnam_r(c->ipc_group, &g, buf, sizeof buf, &found) != 0 || found == NULL)
        return TSDF_ENOT_FOUND;
    *gid = (long)found->gr_gid;
    return TSDF_OK;
}

/* The URLs of one listen key against the access rules (see config.h). */
static int check_listen_access(const tsdfd_config *c, const char *key,
                               const char (*urls)[CFG_URL_LEN], size_t n, size_t *tls_urls,
                               char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        const char *u = urls[i];
        if (tsdf_transport_is_tls(u)) {
            (*tls_urls)++;
            if (!cfg_tls_enabled(c)) {
                cfg_err(err, err_len, "[server] %s: %s needs [tls] cert_file, key_file and ca_file",
                        key, u);
                return TSDF_EINVAL;
            }
        } else if (!tsdf_transport_is_local(u)) {
            if (!c->allow_insecure_remote) {
                cfg_err(err, err_len,
                        "[server] %s: %s takes connections from other hosts without TLS, so "
                        "anyone who reaches it may read and change every map; listen on "
                        "tls+tcp:// with [tls], or on a loopback address, or set [server] "
                        "allow_insecure_remote = true",
                        key, u);
                return TSDF_EINVAL;
            }
            TSDF_LOG(TSDF_LOG_WARN,
                     "[server] %s: %s is open to other hosts without TLS or authentication "
                     "(allow_insecure_remote = true)",
                     key, u);
        }
    }
    return TSDF_OK;
}

/* [tls] and [server] access keys: see cfg_validate in config.h. */
static int validate_access(const tsdfd_config *c, char *err, size_t err_len)
{
    size_t tls_urls = 0;
    int rc;

    if ((c->tls_cert_file[0] || c->tls_key_file[0] || c->tls_ca_file[0]) && !cfg_tls_enabled(c)) {
        cfg_err(err, err_len, "[tls] %s: cert_file, key_file and ca_file go together",
                !c->tls_cert_file[0]  ? "cert_file"
                : !c->tls_key_file[0] ? "key_file"
                                      : "ca_file");
        return TSDF_EINVAL;
    }
    rc = check_listen_access(c, "listen", c->listen, c->listen_count, &tls_urls, err, err_len);
    if (rc == TSDF_OK)
        rc = check_listen_access(c, "frames_listen", c->frames_listen, c->frames_listen_count,
                                 &tls_urls, err, err_len);
    if (rc != TSDF_OK)
        return rc;
    if (c->tls_writers_count > 0 && tls_urls == 0) {
        cfg_err(err, err_len,
                "[tls] writers: no tls+tcp:// URL listens, so the list would restrict no client");
        return TSDF_EINVAL;
    }
    /* Load the files now, so that --check-config finds a wrong path or a
     * key that does not match before a start does. */
    if (cfg_tls_enabled(c)) {
        tsdf_tls_files f = {c->tls_ca_file, c->tls_cert_file, c->tls_key_file, NULL};
        nng_tls_config *tls;
        char why[CFG_ERR_LEN - 16];
        if (tsdf_tls_server_config(&f, &tls, why, sizeof why) != TSDF_OK) {
            cfg_err(err, err_len, "[tls] %s", why);
            return TSDF_EINVAL;
        }
        nng_tls_config_free(tls);
    }
    long gid;
    if (cfg_ipc_gid(c, &gid) != TSDF_OK) {
        cfg_err(err, err_len, "[server] ipc_group: no group '%s' on this system", c->ipc_group);
        return TSDF_EINVAL;
    }
    return TSDF_OK;
}

/* The ipc:// paths the daemon will bind, against a Unix socket path's
 * room: refused here, so that --check-config finds what the start would. */
static int validate_socket_paths(const tsdfd_config *c, char *err, size_t err_len)
{
    const size_t sun_max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    const struct {
        const char *key;
        const char (*urls)[CFG_URL_LEN];
        size_t n;
    } lists[] = {{"listen", c->listen, c->listen_count},
                 {"frames_listen", c->frames_listen, c->frames_listen_count}};
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++)
        for (size_t i = 0; i < lists[k].n; i++) {
            const char *u = lists[k].urls[i];
            if (strncmp(u, "ipc://", 6) == 0 && strlen(u + 6) > sun_max) {
                cfg_err(err, err_len,
                        "[server] %s: %s: the path is %zu bytes, a Unix socket path at most %zu",
                        lists[k].key, u, strlen(u + 6), sun_max);
                return TSDF_EINVAL;
            }
        }
    if (c->ring_socket[0] != '\0' && strcmp(c->ring_socket, "auto") != 0) {
        char path[PATH_MAX + CFG_PATH_LEN];
        cfg_ring_socket_path(c, path, sizeof path);
        if (strlen(path) > sun_max) {
            cfg_err(err, err_len,
                    "[server] ring_socket: %s is %zu bytes, a Unix socket path at most %zu (a "
                    "shorter path, or auto)",
                    path, strlen(path), sun_max);
            return TSDF_EINVAL;
        }
    }
    return TSDF_OK;
}

/* /metrics and the live view answer anyone who reaches them, with every
 * map's meshes and raycasts: said as the request sockets say it. */
static void warn_metrics_host(const tsdfd_config *c)
{
    char url[CFG_PATH_LEN + 32];
    if (!c->metrics_enabled)
        return;
    snprintf(url, sizeof url,
             strchr(c->metrics_host, ':') != NULL ? "tcp://[%s]:%u" : "tcp://%s:%u",
             c->metrics_host, c->metrics_port);
    if (!tsdf_transport_is_local(url))
        TSDF_LOG(TSDF_LOG_WARN,
                 "[metrics] host: %s:%u is open to other hosts without TLS or authentication: "
                 "/metrics%s answer anyone who reaches them",
                 c->metrics_host, c->metrics_port,
                 c->view_enabled ? " and the live view (every map's meshes and raycasts)" : "");
}

int cfg_validate(const tsdfd_config *c, char *err, size_t err_len)
{
    if (c->listen_count == 0) {
        cfg_err(err, err_len, "[server] listen: no URL");
        return TSDF_EINVAL;
    }
    if (c->frames_listen_count == 0) {
        cfg_err(err, err_len, "[server] frames_listen: no URL");
        return TSDF_EINVAL;
    }
    for (size_t i = 0; i < c->listen_count; i++)
        for (size_t j = 0; j < c->frames_listen_count; j++)
            if (strcmp(c->listen[i], c->frames_listen[j]) == 0) {
                cfg_err(err, err_len, "[server] frames_listen: '%s' is also a listen URL",
                        c->listen[i]);
                return TSDF_EINVAL;
            }
    if (c->volume.layout == TSDF_LAYOUT_S16 &&
        floorf(c->volume.max_weight) != c->volume.max_weight) {
        cfg_err(err, err_len,
                "[volume] max_weight: %g is not an integer, which layout s16 stores weights as "
                "(use an integer, or layout = f32)",
                (double)c->volume.max_weight);
        return TSDF_EINVAL;
    }
    if (tsdf_volume_params_check(&c->volume) != TSDF_OK) {
        cfg_err(err, err_len, "[volume] voxel_size_m: volume parameters are invalid together");
        return TSDF_EINVAL;
    }
    if (c->evict_on_full && c->evict_mode == CFG_EVICT_OFF) {
        cfg_err(err, err_len,
                "[eviction] on_full: evict needs a mode that removes blocks (drop or spill), not "
                "off");
        return TSDF_EINVAL;
    }
    if (c->maps_count > c->max_maps) {
        cfg_err(err, err_len, "[volume] maps: %zu declared maps exceed max_maps = %u",
                c->maps_count, c->max_maps);
        return TSDF_EINVAL;
    }
    if (c->maps_count == 0 && !c->auto_create_maps) {
        cfg_err(err, err_len, "[volume] maps: no map declared and auto_create_maps is off");
        return TSDF_EINVAL;
    }
    int rc = validate_socket_paths(c, err, err_len);
    if (rc == TSDF_OK)
        rc = validate_access(c, err, err_len);
    if (rc == TSDF_OK)
        warn_metrics_host(c);
    return rc;
}
