/*
 * tls_peer.h - the common name (CN) of the certificate a TLS client
 * presented, for the daemon's write permissions ([tls] writers).
 *
 * nng 1.6 and later expose it on a pipe (NNG_OPT_TLS_PEER_CN) and this
 * module uses that where the header has it. nng 1.5 (Debian 12's libnng
 * 1.5.2) exposes only whether the peer was verified (NNG_OPT_TLS_VERIFIED).
 * Its mbedTLS engine answers that option by calling
 * mbedtls_ssl_get_verify_result() on the pipe's TLS context, synchronously
 * on the caller's thread; tls_peer.c defines that function in the daemon
 * (the executable's definition comes first in the dynamic symbol lookup,
 * so libnng's call lands there), reads the peer certificate of the context
 * it is given while a tls_peer_cn() call is in progress on the same thread,
 * and forwards to mbedTLS's own function. If libnng is built differently
 * (another TLS engine, another code path), the CN cannot be read and
 * tls_peer_cn() says so; the caller then treats the client as read-only
 * (fail closed).
 *
 * Threads: any thread, including nng's pipe callbacks.
 */
#ifndef TSDFD_TLS_PEER_H
#define TSDFD_TLS_PEER_H

#include <stddef.h>

#include <nng/nng.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What tls_peer_cn found. */
typedef enum {
    TLS_PEER_NOT_TLS = 0, /* not a TLS pipe (ipc://, tcp://, inproc://) */
    TLS_PEER_CN = 1,      /* a verified TLS peer; cn holds its certificate's CN */
    TLS_PEER_NO_CN = 2,   /* a TLS peer whose CN could not be read (none, several, or
                           * this libnng cannot tell) */
    TLS_PEER_GONE = 3,    /* the pipe is closed or unknown: nothing can be said */
} tls_peer_kind;

/* Looks at pipe p. cn (cn_len bytes, >= 65 to hold any CN) receives the
 * common name for TLS_PEER_CN, "" otherwise. */
tls_peer_kind tls_peer_cn(nng_pipe p, char *cn, size_t cn_len);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_TLS_PEER_H */
