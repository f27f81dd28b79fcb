/*
 * tls_peer.c - the CN of a TLS client's certificate (see tls_peer.h).
 */
#define _GNU_SOURCE /* RTLD_NEXT */

#include "tls_peer.h"

#include <string.h>

#include <nng/nng.h>

#ifndef NNG_OPT_TLS_PEER_CN
#include <dlfcn.h>
#include <pthread.h>

#include <mbedtls/oid.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

/* Armed by tls_peer_cn for the duration of its nng_pipe_get_bool call. */
static _Thread_local int capture_armed;
static _Thread_local int capture_kind; /* 0 nothing seen, 1 one CN, 2 none or several */
static _Thread_local char capture_cn[65];

static uint32_t (*real_verify_result)(const mbedtls_ssl_context *);
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void)
{
    /* The next definition after the executable's: libmbedtls's own. */
    *(void **)&real_verify_result = dlsym(RTLD_NEXT, "mbedtls_ssl_get_verify_result");
}

static void capture(const mbedtls_ssl_context *ssl)
{
    const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(ssl);
    int found = 0;

    capture_kind = 2;
    if (crt == NULL)
        return;
    for (const mbedtls_x509_name *n = &crt->subject; n != NULL; n = n->next) {
        if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) != 0)
            continue;
        /* A second CN makes the subject ambiguous: trust neither. A NUL
         * inside would let "robot1\0x" pose as "robot1". */
        if (++found > 1 || n->val.len == 0 || n->val.len >= sizeof capture_cn ||
            memchr(n->val.p, '\0', n->val.len) != NULL)
            return;
        memcpy(capture_cn, n->val.p, n->val.len);
        capture_cn[n->val.len] = '\0';
    }
    if (found == 1)
        capture_kind = 1;
}

/* Interposes mbedTLS's function of the same name (see tls_peer.h). Outside
 * a tls_peer_cn call it only forwards. */
uint32_t mbedtls_ssl_get_verify_result(const mbedtls_ssl_context *ssl)
{
    if (capture_armed && ssl != NULL)
        capture(ssl);
    pthread_once(&real_once, find_real);
    /* Without the real function nothing counts as verified. */
    return real_verify_result != NULL ? real_verify_result(ssl) : 0xffffffffu;
}
#endif

tls_peer_kind tls_peer_cn(nng_pipe p, char *cn, size_t cn_len)
{
    bool verified = false;
    int rv;

    if (cn_len > 0)
        cn[0] = '\0';
#ifdef NNG_OPT_TLS_PEER_CN
    rv = nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &verified);
    if (rv == NNG_ENOTSUP)
        return TLS_PEER_NOT_TLS;
    if (rv != 0)
        return TLS_PEER_GONE;
    char *name = NULL;
    if (!verified || nng_pipe_get_string(p, NNG_OPT_TLS_PEER_CN, &name) != 0)
        return TLS_PEER_NO_CN;
    size_t n = strlen(name);
    tls_peer_kind k = TLS_PEER_NO_CN;
    if (n > 0 && n < cn_len) {
        memcpy(cn, name, n + 1);
        k = TLS_PEER_CN;
    }
    nng_strfree(name);
    return k;
#else
    capture_armed = 1;
    capture_kind = 0;
    rv = nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &verified);
    capture_armed = 0;
    if (rv == NNG_ENOTSUP)
        return TLS_PEER_NOT_TLS;
    if (rv != 0)
        return TLS_PEER_GONE;
    if (!verified || capture_kind != 1 || strlen(capture_cn) >= cn_len)
        return TLS_PEER_NO_CN;
    memcpy(cn, capture_cn, strlen(capture_cn) + 1);
    return TLS_PEER_CN;
#endif
}
