/*
 * test_transport.c - common/tsdf_transport.c: the one nng -> tsdf error
 * map, which URLs count as local, and TLS configurations refused with a
 * reason before any connection is made. The TLS handshakes themselves are
 * tested end to end in test_tls.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"
#include "tsdf_error.h"
#include "tsdf_transport.h"

#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

static void test_error_map(void **state)
{
    static const struct {
        int nng, tsdf;
    } map[] = {
        {0, TSDF_OK},
        {NNG_ETIMEDOUT, TSDF_ETIMEOUT},
        {NNG_ECONNREFUSED, TSDF_ECONNREFUSED},
        {NNG_ENOENT, TSDF_ECONNREFUSED},
        {NNG_EUNREACHABLE, TSDF_ECONNREFUSED},
        {NNG_ECONNRESET, TSDF_ECONNREFUSED},
        {NNG_ECONNABORTED, TSDF_ECONNREFUSED},
        {NNG_EPEERAUTH, TSDF_EAUTH},
        {NNG_ECRYPTO, TSDF_EAUTH},
        {NNG_ECLOSED, TSDF_ECLOSED},
        {NNG_ECANCELED, TSDF_ECLOSED},
        {NNG_ECONNSHUT, TSDF_ECLOSED},
        {NNG_EAGAIN, TSDF_EQUEUE_FULL},
        {NNG_ENOMEM, TSDF_ENOMEM},
        {NNG_EADDRINUSE, TSDF_EBUSY},
        {NNG_EBUSY, TSDF_EBUSY},
        {NNG_EINVAL, TSDF_EINVAL},
        {NNG_EADDRINVAL, TSDF_EINVAL},
        {NNG_ENOTSUP, TSDF_EINVAL},
        {NNG_EMSGSIZE, TSDF_ETOO_LARGE},
        {NNG_EPERM, TSDF_EIO},
        {NNG_EPROTO, TSDF_ENNG},
        {NNG_EINTERNAL, TSDF_ENNG},
        {12345, TSDF_ENNG},
    };
    (void)state;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (tsdf_transport_error(map[i].nng) != map[i].tsdf)
            fail_msg("nng %d (%s) maps to %s, expected %s", map[i].nng, nng_strerror(map[i].nng),
                     tsdf_errname(tsdf_transport_error(map[i].nng)), tsdf_errname(map[i].tsdf));
}

/* The codes travel on the wire: their numbers never change. */
static void test_new_codes_are_stable(void **state)
{
    (void)state;
    assert_int_equal(TSDF_EFORBIDDEN, -31);
    assert_int_equal(TSDF_EAUTH, -32);
    assert_string_equal(tsdf_errname(TSDF_EFORBIDDEN), "FORBIDDEN");
    assert_string_equal(tsdf_errname(TSDF_EAUTH), "AUTH");
}

static void test_local_urls(void **state)
{
    static const char *const local[] = {
        "ipc:///run/tsdfd/tsdfd.sock", "inproc://x",           "tcp://127.0.0.1:5555",
        "tcp://127.9.8.7:1",           "tcp://localhost:5555", "tcp://[::1]:5555",
        "tls+tcp://127.0.0.1:5555",    "tcp4://127.0.0.1:1",   "tcp6://[::1]:1",
    };
    static const char *const remote[] = {
        "tcp://0.0.0.0:5555", "tcp://*:5555",        "tcp://:5555",
        "tcp://[::]:5555",    "tcp://10.0.0.5:5555", "tcp://robot-gw.example:5555",
        "tls+tcp://*:5555",   "tcp://128.0.0.1:1",   "ws://127.0.0.1:80",
    };
    (void)state;
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (!tsdf_transport_is_local(local[i]))
            fail_msg("%s should be local", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
        /* ws:// is not offered by the daemon; a web socket is never local here. */
        if (strncmp(remote[i], "ws://", 5) == 0)
            continue;
        if (tsdf_transport_is_local(remote[i]))
            fail_msg("%s should not be local", remote[i]);
    }
    assert_true(tsdf_transport_is_tls("tls+tcp://127.0.0.1:1"));
    assert_false(tsdf_transport_is_tls("tcp://127.0.0.1:1"));
}

static void test_tls_config_refusals(void **state)
{
    char err[256] = "";
    nng_tls_config *cfg = (nng_tls_config *)1;
    (void)state;

    tsdf_tls_files none = {NULL, NULL, NULL, NULL};
    assert_int_equal(tsdf_tls_server_config(&none, &cfg, err, sizeof err), TSDF_EINVAL);
    assert_null(cfg);
    assert_int_equal(tsdf_tls_client_config(&none, "tls+tcp://127.0.0.1:1", &cfg, err, sizeof err),
                     TSDF_EINVAL);
    assert_non_null(strstr(err, "CA file"));

    tsdf_tls_files missing = {"/nonexistent/ca.pem", "/nonexistent/c.pem", "/nonexistent/k.pem",
                              NULL};
    assert_int_equal(tsdf_tls_server_config(&missing, &cfg, err, sizeof err), TSDF_EIO);
    assert_non_null(strstr(err, "/nonexistent/c.pem"));

    tsdf_tls_files half = {"/nonexistent/ca.pem", "/nonexistent/c.pem", NULL, NULL};
    assert_int_equal(tsdf_tls_client_config(&half, "tls+tcp://127.0.0.1:1", &cfg, err, sizeof err),
                     TSDF_EINVAL);

    /* Not PEM: nng refuses the contents, and the message names the file. */
    char path[512];
    snprintf(path, sizeof path, "%s/garbage.pem", tsdf_test_tmpdir());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("this is not a certificate\n", f);
    fclose(f);
    tsdf_tls_files garbage = {path, NULL, NULL, "localhost"};
    int rc = tsdf_tls_client_config(&garbage, "tls+tcp://127.0.0.1:1", &cfg, err, sizeof err);
    assert_int_not_equal(rc, TSDF_OK);
    assert_non_null(strstr(err, "garbage.pem"));
}

static void test_tls_listen_needs_config(void **state)
{
    nng_socket s;
    char err[256] = "";
    (void)state;
    assert_int_equal(nng_rep0_open(&s), 0);
    tsdf_listen_opts lo = {.tls = NULL, .ipc_mode = 0, .ipc_gid = -1};
    assert_int_equal(tsdf_transport_listen(s, "tls+tcp://127.0.0.1:0", &lo, NULL, err, sizeof err),
                     TSDF_EINVAL);
    assert_non_null(strstr(err, "tls+tcp://127.0.0.1:0"));
    assert_int_equal(
        tsdf_transport_dial(s, "tls+tcp://127.0.0.1:1", NULL, 0, NULL, err, sizeof err),
        TSDF_EINVAL);
    /* A plain dial to nobody: CONNREFUSED, through the same map. */
    char url[512];
    snprintf(url, sizeof url, "ipc://%s/nobody.sock", tsdf_test_tmpdir());
    assert_int_equal(tsdf_transport_dial(s, url, NULL, 0, NULL, err, sizeof err),
                     TSDF_ECONNREFUSED);
    nng_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_map),
        cmocka_unit_test(test_new_codes_are_stable),
        cmocka_unit_test(test_local_urls),
        cmocka_unit_test(test_tls_config_refusals),
        cmocka_unit_test(test_tls_listen_needs_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
