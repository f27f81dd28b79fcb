/*
 * tsdf_transport.h - how tsdfd and libtsdf put nng sockets on the network:
 * listening and dialling (plain and TLS), TLS configurations from PEM
 * files, and the one mapping of nng errors onto tsdf codes.
 *
 * Both the daemon and the client library use this module, so that a
 * listener and a dialler agree on the TLS setup and a failure reads the
 * same on both sides. Socket options (NNG_OPT_RECVMAXSZ, reconnect times,
 * buffers) stay with the code that opens the socket: they belong to the
 * socket, not to the transport.
 *
 * TLS: tls+tcp:// URLs, through nng's TLS transport (mbedTLS on Debian).
 * Both sides authenticate: the server presents its certificate and
 * requires one from the client (NNG_TLS_AUTH_MODE_REQUIRED), each chained
 * to the other side's CA file. A handshake that fails (a certificate from
 * another CA, an expired one, none at all) is TSDF_EAUTH where nng says
 * so (NNG_EPEERAUTH, NNG_ECRYPTO).
 *
 * Ownership: a TLS configuration made here belongs to the caller, who
 * releases it with nng_tls_config_free after the listeners or dialers that
 * use it are closed (nng holds its own reference while they use it).
 * Threads: every function may be called from any thread.
 * Errors: TSDF_OK or a negative tsdf_errno; err (optional, err_len bytes)
 * then says what failed, naming the file or the URL.
 */
#ifndef TSDF_TRANSPORT_H
#define TSDF_TRANSPORT_H

#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PEM files of one side of a TLS connection. NULL or "" means "not given".
 * The strings are read during the call only. */
typedef struct {
    const char *ca_file;     /* CA certificate(s) the peer must chain to */
    const char *cert_file;   /* this side's certificate (chain) */
    const char *key_file;    /* the private key of cert_file (unencrypted) */
    const char *server_name; /* client only: the name the server's certificate
                              * must carry; NULL: the URL's host */
} tsdf_tls_files;

/* Maps an nng error number onto a tsdf code (0 -> TSDF_OK):
 *   NNG_ETIMEDOUT -> TIMEOUT; NNG_ECONNREFUSED, NNG_ENOENT (no ipc:// socket
 *   file), NNG_EUNREACHABLE, NNG_ECONNRESET, NNG_ECONNABORTED -> CONNREFUSED;
 *   NNG_EPEERAUTH, NNG_ECRYPTO -> AUTH; NNG_ECLOSED, NNG_ECANCELED,
 *   NNG_ECONNSHUT -> CLOSED;
 *   NNG_EAGAIN -> QUEUE_FULL; NNG_ENOMEM -> NOMEM; NNG_EADDRINUSE, NNG_EBUSY
 *   -> BUSY; NNG_EINVAL, NNG_EADDRINVAL, NNG_ENOTSUP -> INVAL; NNG_EMSGSIZE
 *   -> TOO_LARGE; NNG_EPERM -> IO; anything else -> NNG. */
int tsdf_transport_error(int nng_err);

/* 1 when url uses nng's TLS transport (tls+tcp://, tls+tcp4://, tls+tcp6://). */
int tsdf_transport_is_tls(const char *url);

/* 1 when url stays on this host: ipc://, inproc://, and tcp:// or
 * tls+tcp:// whose host is a loopback address (127.0.0.0/8, ::1) or
 * "localhost". A wildcard ("*") or empty host ("tcp://:5555",
 * 0.0.0.0, ::) listens on every interface and is not local. */
int tsdf_transport_is_local(const char *url);

/* A server configuration: cert_file + key_file presented to clients, and
 * every client must present a certificate that chains to ca_file. All
 * three are required (TSDF_EINVAL otherwise); TSDF_EIO when a file cannot
 * be read, TSDF_EAUTH / TSDF_EINVAL when nng refuses its contents. */
int tsdf_tls_server_config(const tsdf_tls_files *f, nng_tls_config **out, char *err,
                           size_t err_len);

/* A client configuration for dialling url: the server's certificate must
 * chain to ca_file (required) and carry server_name (default: the URL's
 * host); cert_file + key_file (both or neither) are presented to a server
 * that asks for them, as tsdfd does. */
int tsdf_tls_client_config(const tsdf_tls_files *f, const char *url, nng_tls_config **out,
                           char *err, size_t err_len);

/* Listen options. */
typedef struct {
    nng_tls_config *tls; /* required for tls+tcp:// URLs, ignored otherwise */
    int ipc_mode;        /* ipc:// socket file mode (e.g. 0660); 0: nng's default */
    long ipc_gid;        /* ipc:// socket file group; -1: leave it */
} tsdf_listen_opts;

/* Listens on url (nng_listener_create, the options, nng_listener_start).
 * *out (optional) receives the listener. TSDF_EINVAL for a tls+tcp:// URL
 * without opts->tls; nng's failures mapped by tsdf_transport_error. */
int tsdf_transport_listen(nng_socket s, const char *url, const tsdf_listen_opts *opts,
                          nng_listener *out, char *err, size_t err_len);

/* Dials url (nng_dialer_create, the TLS configuration, nng_dialer_start).
 * tls: required for tls+tcp:// URLs, ignored otherwise. nonblock: return at
 * once and keep connecting in the background (NNG_FLAG_NONBLOCK); else wait
 * for the first connection, TLS handshake included, and report its failure
 * (TSDF_ECONNREFUSED, TSDF_EAUTH, ...). For a tls+tcp:// URL a connection
 * the server shuts or resets during that first handshake is TSDF_EAUTH too:
 * that is how a server refuses a client that sent no certificate. */
int tsdf_transport_dial(nng_socket s, const char *url, nng_tls_config *tls, int nonblock,
                        nng_dialer *out, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_TRANSPORT_H */
