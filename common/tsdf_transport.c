/*
 * tsdf_transport.c - listen, dial, TLS configurations, nng errors (see
 * tsdf_transport.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "tsdf_transport.h"

#include "tsdf_error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* A PEM file larger than this is not a certificate or a key of ours: refuse
 * it instead of reading an arbitrary file into memory. */
#define TRANSPORT_PEM_MAX_BYTES (1u << 20)

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
fail(char *err, size_t err_len, const char *fmt, ...)
{
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
}

int tsdf_transport_error(int nng_err)
{
    switch (nng_err) {
    case 0:
        return TSDF_OK;
    case NNG_ETIMEDOUT:
        return TSDF_ETIMEOUT;
    case NNG_ECONNREFUSED:
    case NNG_ENOENT: /* ipc:// path does not exist: nobody listens */
    case NNG_EUNREACHABLE:
    case NNG_ECONNRESET:
    case NNG_ECONNABORTED:
        return TSDF_ECONNREFUSED;
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
        return TSDF_EAUTH;
    case NNG_ECLOSED:
    case NNG_ECANCELED:
    case NNG_ECONNSHUT:
        return TSDF_ECLOSED;
    case NNG_EAGAIN:
        return TSDF_EQUEUE_FULL;
    case NNG_ENOMEM:
        return TSDF_ENOMEM;
    case NNG_EADDRINUSE:
    case NNG_EBUSY:
        return TSDF_EBUSY;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
        return TSDF_EINVAL;
    case NNG_EMSGSIZE:
        return TSDF_ETOO_LARGE;
    case NNG_EPERM:
        return TSDF_EIO;
    default:
        return TSDF_ENNG;
    }
}

static int has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

int tsdf_transport_is_tls(const char *url)
{
    return url != NULL && has_prefix(url, "tls+tcp");
}

/* The host of a "scheme://host:port" URL into out; 0 when it does not fit. */
static int url_host(const char *url, char *out, size_t len)
{
    const char *p = strstr(url, "://");
    if (p == NULL)
        return 0;
    p += 3;
    const char *end;
    if (*p == '[') {
        p++;
        end = strchr(p, ']');
    } else {
        end = strrchr(p, ':');
    }
    if (end == NULL)
        end = p + strlen(p);
    if ((size_t)(end - p) >= len)
        return 0;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return 1;
}

int tsdf_transport_is_local(const char *url)
{
    char host[256];
    struct in_addr a4;
    struct in6_addr a6;

    if (url == NULL)
        return 0;
    if (has_prefix(url, "ipc://") || has_prefix(url, "inproc://"))
        return 1;
    if (!url_host(url, host, sizeof host))
        return 0;
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

/* Reads a whole PEM file into a NUL-terminated malloc'ed string. */
static int read_pem(const char *what, const char *path, char **out, char *err, size_t err_len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fail(err, err_len, "%s %s: cannot open: %s", what, path, strerror(errno));
        return TSDF_EIO;
    }
    char *buf = malloc(TRANSPORT_PEM_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        return TSDF_ENOMEM;
    }
    size_t n = fread(buf, 1, TRANSPORT_PEM_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > TRANSPORT_PEM_MAX_BYTES || n == 0) {
        free(buf);
        fail(err, err_len, "%s %s: %s", what, path,
             bad      ? "read error"
             : n == 0 ? "empty file"
                      : "larger than 1 MiB");
        return bad ? TSDF_EIO : TSDF_EINVAL;
    }
    buf[n] = '\0';
    *out = buf;
    return TSDF_OK;
}

static int given(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Loads this side's certificate and key. nng_tls_config_cert_key_file
 * wants both in one file; reading them here lets an operator keep the key
 * in its own file (mode 0600) beside a world-readable certificate. */
static int load_own_cert(nng_tls_config *cfg, const tsdf_tls_files *f, char *err, size_t err_len)
{
    char *cert, *key;
    int rc = read_pem("certificate", f->cert_file, &cert, err, err_len);
    if (rc != TSDF_OK)
        return rc;
    rc = read_pem("key", f->key_file, &key, err, err_len);
    if (rc != TSDF_OK) {
        free(cert);
        return rc;
    }
    int rv = nng_tls_config_own_cert(cfg, cert, key, NULL);
    /* The key's bytes do not linger in freed memory. */
    memset(key, 0, strlen(key));
    free(key);
    free(cert);
    if (rv != 0) {
        fail(err, err_len, "certificate %s with key %s: %s (not a PEM certificate and its key?)",
             f->cert_file, f->key_file, nng_strerror(rv));
        return rv == NNG_ENOMEM ? TSDF_ENOMEM : TSDF_EINVAL;
    }
    return TSDF_OK;
}

static int load_ca(nng_tls_config *cfg, const char *path, char *err, size_t err_len)
{
    /* nng reports a missing file as a parse failure: say which. */
    if (access(path, R_OK) != 0) {
        fail(err, err_len, "CA file %s: %s", path, strerror(errno));
        return TSDF_EIO;
    }
    int rv = nng_tls_config_ca_file(cfg, path);
    if (rv != 0) {
        fail(err, err_len, "CA file %s: %s (not PEM certificates?)", path, nng_strerror(rv));
        return rv == NNG_ENOMEM ? TSDF_ENOMEM : TSDF_EINVAL;
    }
    return TSDF_OK;
}

int tsdf_tls_server_config(const tsdf_tls_files *f, nng_tls_config **out, char *err, size_t err_len)
{
    nng_tls_config *cfg;
    int rc, rv;

    *out = NULL;
    if (f == NULL || !given(f->cert_file) || !given(f->key_file) || !given(f->ca_file)) {
        fail(err, err_len, "a TLS server needs a certificate, its key and a CA file");
        return TSDF_EINVAL;
    }
    if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER)) != 0) {
        fail(err, err_len, "TLS configuration: %s", nng_strerror(rv));
        return tsdf_transport_error(rv);
    }
    if ((rc = load_own_cert(cfg, f, err, err_len)) != TSDF_OK)
        goto fail_cfg;
    if ((rc = load_ca(cfg, f->ca_file, err, err_len)) != TSDF_OK)
        goto fail_cfg;
    /* Every client proves who it is: the permission check (writers) needs a
     * verified subject, and an anonymous client has no business here. */
    if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) {
        fail(err, err_len, "TLS auth mode: %s", nng_strerror(rv));
        rc = tsdf_transport_error(rv);
        goto fail_cfg;
    }
    *out = cfg;
    return TSDF_OK;

fail_cfg:
    nng_tls_config_free(cfg);
    return rc;
}

int tsdf_tls_client_config(const tsdf_tls_files *f, const char *url, nng_tls_config **out,
                           char *err, size_t err_len)
{
    nng_tls_config *cfg;
    char host[256];
    int rc, rv;

    *out = NULL;
    if (f == NULL || !given(f->ca_file)) {
        fail(err, err_len, "%s: TLS needs a CA file to check the server against",
             url ? url : "(no URL)");
        return TSDF_EINVAL;
    }
    if (given(f->cert_file) != given(f->key_file)) {
        fail(err, err_len, "a client certificate needs its key, and a key its certificate");
        return TSDF_EINVAL;
    }
    const char *name = f->server_name;
    if (!given(name)) {
        if (url == NULL || !url_host(url, host, sizeof host) || host[0] == '\0') {
            fail(err, err_len, "%s: no host in the URL to check the server's certificate against",
                 url ? url : "(no URL)");
            return TSDF_EINVAL;
        }
        name = host;
    }
    if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT)) != 0) {
        fail(err, err_len, "TLS configuration: %s", nng_strerror(rv));
        return tsdf_transport_error(rv);
    }
    if (given(f->cert_file) && (rc = load_own_cert(cfg, f, err, err_len)) != TSDF_OK)
        goto fail_cfg;
    if ((rc = load_ca(cfg, f->ca_file, err, err_len)) != TSDF_OK)
        goto fail_cfg;
    /* The name is checked against the certificate's SAN (or CN): without it
     * any certificate of the CA would pass for this server. */
    if ((rv = nng_tls_config_server_name(cfg, name)) != 0 ||
        (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) {
        fail(err, err_len, "TLS server name %s: %s", name, nng_strerror(rv));
        rc = tsdf_transport_error(rv);
        goto fail_cfg;
    }
    *out = cfg;
    return TSDF_OK;

fail_cfg:
    nng_tls_config_free(cfg);
    return rc;
}

int tsdf_transport_listen(nng_socket s, const char *url, const tsdf_listen_opts *opts,
                          nng_listener *out, char *err, size_t err_len)
{
    nng_listener l;
    int rv;

    if (tsdf_transport_is_tls(url) && (opts == NULL || opts->tls == NULL)) {
        fail(err, err_len, "cannot listen on %s: no TLS configuration ([tls])", url);
        return TSDF_EINVAL;
    }
    if ((rv = nng_listener_create(&l, s, url)) != 0) {
        fail(err, err_len, "cannot listen on %s: %s", url, nng_strerror(rv));
        return tsdf_transport_error(rv);
    }
    rv = 0;
    if (tsdf_transport_is_tls(url))
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, opts->tls);
    else if (has_prefix(url, "ipc://") && opts != NULL && opts->ipc_mode != 0)
        rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, opts->ipc_mode);
    if (rv != 0) {
        fail(err, err_len, "cannot configure the listener on %s: %s", url, nng_strerror(rv));
        goto fail_listener;
    }
    if ((rv = nng_listener_start(l, 0)) != 0) {
        fail(err, err_len, "cannot listen on %s: %s", url, nng_strerror(rv));
        goto fail_listener;
    }
    /* nng has no option for the group: change it once the file exists.
     * Between bind and here the file has nng's mode and the daemon's
     * group, which is never wider than the result. */
    if (has_prefix(url, "ipc://") && opts != NULL && opts->ipc_gid >= 0 &&
        chown(url + 6, (uid_t)-1, (gid_t)opts->ipc_gid) != 0) {
        int e = errno;
        nng_listener_close(l);
        fail(err, err_len, "cannot give %s to group %ld: %s", url + 6, opts->ipc_gid, strerror(e));
        return TSDF_EIO;
    }
    if (out != NULL)
        *out = l;
    return TSDF_OK;

fail_listener:
    nng_listener_close(l);
    return tsdf_transport_error(rv);
}

int tsdf_transport_dial(nng_socket s, const char *url, nng_tls_config *tls, int nonblock,
                        nng_dialer *out, char *err, size_t err_len)
{
    nng_dialer d;
    int rv;

    if (tsdf_transport_is_tls(url) && tls == NULL) {
        fail(err, err_len, "%s: TLS needs a CA file (and usually a client certificate)", url);
        return TSDF_EINVAL;
    }
    if ((rv = nng_dialer_create(&d, s, url)) != 0) {
        if (rv == NNG_ENOTSUP || rv == NNG_EADDRINVAL)
            fail(err, err_len,
                 "%s: %s: tsdfd's sockets are ipc://PATH, tcp://HOST:PORT or "
                 "tls+tcp://HOST:PORT (an http:// URL is the metrics and the live view, for a "
                 "browser)",
                 url, rv == NNG_ENOTSUP ? "not a kind of URL tsdfd speaks" : "not a valid URL");
        else
            fail(err, err_len, "%s: %s", url, nng_strerror(rv));
        return tsdf_transport_error(rv);
    }
    if (tsdf_transport_is_tls(url) && (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tls)) != 0) {
        fail(err, err_len, "%s: cannot set the TLS configuration: %s", url, nng_strerror(rv));
        nng_dialer_close(d);
        return tsdf_transport_error(rv);
    }
    if ((rv = nng_dialer_start(d, nonblock ? NNG_FLAG_NONBLOCK : 0)) != 0) {
        int rc = tsdf_transport_error(rv);
        /* A TLS server that refuses the client's certificate, or gets none,
         * may just close the connection during the handshake (mbedTLS does
         * for a missing one): nng then says "connection shutdown" or
         * "reset". On the first dial of a TLS URL that is a failed
         * handshake, not a daemon that is away (that is ECONNREFUSED). */
        if (tsdf_transport_is_tls(url) && (rv == NNG_ECONNSHUT || rv == NNG_ECONNRESET)) {
            rc = TSDF_EAUTH;
            fail(err, err_len,
                 "%s: TLS handshake failed: the daemon closed the connection (%s): it "
                 "accepts no client without a certificate of its CA",
                 url, nng_strerror(rv));
        } else if (rc == TSDF_EAUTH) {
            fail(err, err_len, "%s: TLS handshake failed: %s", url, nng_strerror(rv));
        } else if (rv == NNG_EPROTO) {
            fail(err, err_len,
                 "%s: what answers there does not speak tsdfd's protocol (nng's SP): it is not "
                 "tsdfd; tsdfd listens where its [server] listen and frames_listen say",
                 url);
        } else {
            fail(err, err_len, "%s: %s", url, nng_strerror(rv));
        }
        nng_dialer_close(d);
        return rc;
    }
    if (out != NULL)
        *out = d;
    return TSDF_OK;
}
