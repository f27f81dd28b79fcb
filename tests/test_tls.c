/*
 * test_tls.c - TLS with client certificates, end to end: a real tsdfd
 * (tests/daemon_harness.c) listening on tls+tcp://127.0.0.1:<free port>
 * for requests and frames, with [tls] writers = robot1, and libtsdf
 * clients holding certificates made by tests/tls_certs.sh (openssl CLI):
 *   robot1 (a writer)    integrates, streams frames, resets, saves, meshes
 *   viewer (read-only)   pings, lists, meshes, gets stats; integrate, save,
 *                        load and reset answer FORBIDDEN; its streamed
 *                        frames are dropped and counted as "forbidden"
 *   another CA, an expired certificate, no certificate, the wrong CA for
 *   the server: tsdf_client_open fails with TSDF_EAUTH
 * The harness's own ipc:// socket stays open beside TLS: local clients may
 * always write. Only loopback addresses are used.
 */
#define _POSIX_C_SOURCE 200809L

#include "daemon_harness.h"
#include "testutil.h"
#include "tsdf_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define W 64
#define H 48

static char certs[512];
static char req_url[128], frames_url[128];
static tsdfd_harness daemon_h;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A TCP port on 127.0.0.1 that nobody listens on right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static const char *cert(const char *name)
{
    static char paths[8][600];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", certs, name);
    return p;
}

/* Opens a client with the certificate pair `who` (NULL: none) and ca. */
static int open_as(const char *who, const char *ca, int with_push, tsdf_client **c)
{
    tsdf_client_options o;
    char crt[64], key[64];
    tsdf_client_options_default(&o);
    o.default_timeout_ms = 10000;
    o.tls_ca_file = cert(ca);
    if (who != NULL) {
        snprintf(crt, sizeof crt, "%s.pem", who);
        snprintf(key, sizeof key, "%s.key", who);
        o.tls_cert_file = cert(crt);
        o.tls_key_file = cert(key);
    }
    return tsdf_client_open(req_url, with_push ? frames_url : NULL, &o, c);
}

static int64_t stat_get(const tsdf_rep_stats *s, const char *key)
{
    for (uint32_t i = 0; i < s->extra_count; i++)
        if (strcmp(s->extra[i].key, key) == 0)
            return s->extra[i].is_float ? (int64_t)s->extra[i].f : s->extra[i].i;
    fail_msg("stats reply has no key '%s'", key);
    return 0;
}

/* A flat wall 1 m in front of the camera. */
static float depth[W * H];
static tsdf_frame wall;

static void make_wall(void)
{
    for (int i = 0; i < W * H; i++)
        depth[i] = 1.0f;
    memset(&wall, 0, sizeof wall);
    wall.width = W;
    wall.height = H;
    wall.K.fx = wall.K.fy = 50.0f;
    wall.K.cx = W / 2.0f;
    wall.K.cy = H / 2.0f;
    for (int i = 0; i < 4; i++)
        wall.T_world_cam[i * 5] = 1.0f;
    wall.depth_format = TSDF_DEPTH_F32;
    wall.depth = depth;
    wall.min_depth_m = 0.1f;
    wall.max_depth_m = 5.0f;
}

static tsdf_client_frame frame_of(const char *sensor, uint64_t seq)
{
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.sensor = sensor;
    f.seq = seq;
    f.frame = &wall;
    return f;
}

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("TSDF_SOURCE_DIR");
    char cmd[1400];
    if (access("/usr/bin/openssl", X_OK) != 0 && system("openssl version >/dev/null 2>&1") != 0)
        tsdf_test_skip_program("no openssl CLI to make the test certificates");
    snprintf(certs, sizeof certs, "%.400s/certs", tsdf_test_tmpdir());
    snprintf(cmd, sizeof cmd, "sh '%s/tests/tls_certs.sh' '%s'", src ? src : ".", certs);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    int rp = free_port(), fp = free_port();
    if (rp < 0 || fp < 0 || rp == fp)
        fail_msg("no free loopback port");
    snprintf(req_url, sizeof req_url, "tls+tcp://127.0.0.1:%d", rp);
    snprintf(frames_url, sizeof frames_url, "tls+tcp://127.0.0.1:%d", fp);

    char ini[4096];
    snprintf(ini, sizeof ini,
             "[server]\n"
             "listen = ipc://@DIR@/req.sock, %s\n"
             "frames_listen = ipc://@DIR@/frames.sock, %s\n"
             "[tls]\n"
             "cert_file = %s/server.pem\n"
             "key_file = %s/server.key\n"
             "ca_file = %s/ca.pem\n"
             "writers = robot1, robot2\n",
             req_url, frames_url, certs, certs, certs);
    if (tsdfd_harness_start(&daemon_h, ini, NULL) != 0)
        fail_msg("tsdfd did not start with TLS");
    make_wall();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (daemon_h.pid > 0 && tsdfd_harness_stop(&daemon_h, 30000) != 0) {
        tsdfd_harness_dump_log(&daemon_h);
        return -1;
    }
    return 0;
}

static void test_writer_integrates_and_meshes(void **state)
{
    tsdf_client *c;
    (void)state;
    int rc = open_as("robot1", "ca.pem", 1, &c);
    if (rc != TSDF_OK)
        fail_msg("robot1 cannot connect: %s: %s", tsdf_errname(rc), tsdf_client_last_message());
    tsdf_client_frame f = frame_of("cam0", 1);
    tsdf_rep_integrate ir;
    assert_int_equal(tsdf_client_integrate(c, &f, 10000, &ir), TSDF_OK);
    /* Streamed frames of a writer are integrated. */
    for (uint64_t s = 2; s <= 4; s++) {
        f = frame_of("cam0", s);
        assert_int_equal(tsdf_client_send_frame(c, &f, 5000), TSDF_OK);
    }
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    int64_t integrated = 0;
    for (int i = 0; i < 1200 && integrated < 4; i++) {
        assert_int_equal(tsdf_client_stats(c, NULL, st, 5000), TSDF_OK);
        integrated = stat_get(st, "frames.integrated");
        sleep_ms(50);
    }
    assert_int_equal(integrated, 4);
    free(st);
    tsdf_mesh m;
    memset(&m, 0, sizeof m);
    assert_int_equal(tsdf_client_mesh(c, NULL, NULL, &m, NULL, 10000), TSDF_OK);
    assert_true(m.triangle_count > 0);
    tsdf_client_mesh_release(&m);
    tsdf_rep_path pr;
    assert_int_equal(tsdf_client_save(c, NULL, NULL, &pr, 10000), TSDF_OK);
    tsdf_client_close(c);
}

static void expect_forbidden(int rc, const char *what)
{
    if (rc != TSDF_EFORBIDDEN)
        fail_msg("%s by the reader gave %s, expected FORBIDDEN", what, tsdf_errname(rc));
    const char *msg = tsdf_client_last_message();
    if (strstr(msg, "CN=viewer may only read") == NULL || strstr(msg, what) == NULL)
        fail_msg("FORBIDDEN message for %s is unclear: '%s'", what, msg);
}

static void test_reader_reads_but_cannot_write(void **state)
{
    tsdf_client *c;
    (void)state;
    int rc = open_as("viewer", "ca.pem", 1, &c);
    if (rc != TSDF_OK)
        fail_msg("viewer cannot connect: %s: %s", tsdf_errname(rc), tsdf_client_last_message());
    tsdf_rep_ping ping;
    assert_int_equal(tsdf_client_ping(c, &ping, 5000), TSDF_OK);
    tsdf_rep_maps *maps = malloc(sizeof *maps);
    assert_non_null(maps);
    assert_int_equal(tsdf_client_maps(c, maps, 5000), TSDF_OK);
    free(maps);
    tsdf_mesh m;
    memset(&m, 0, sizeof m);
    assert_int_equal(tsdf_client_mesh(c, NULL, NULL, &m, NULL, 10000), TSDF_OK);
    tsdf_client_mesh_release(&m);
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    assert_int_equal(tsdf_client_stats(c, NULL, st, 5000), TSDF_OK);
    int64_t integrated0 = stat_get(st, "frames.integrated");
    int64_t forbidden0 = stat_get(st, "rejected.forbidden");

    tsdf_client_frame f = frame_of("viewer-cam", 1);
    tsdf_rep_integrate ir;
    expect_forbidden(tsdf_client_integrate(c, &f, 5000, &ir), "integrate");
    tsdf_rep_path pr;
    expect_forbidden(tsdf_client_save(c, NULL, NULL, &pr, 5000), "save");
    expect_forbidden(tsdf_client_load(c, NULL, NULL, &pr, 5000), "load");
    expect_forbidden(tsdf_client_reset(c, NULL, 5000), "reset");

    /* Streamed frames go nowhere: dropped, counted as rejected "forbidden"
     * (the refused integrate above is one of them). */
    for (uint64_t s = 2; s <= 4; s++) {
        f = frame_of("viewer-cam", s);
        assert_int_equal(tsdf_client_send_frame(c, &f, 5000), TSDF_OK);
    }
    int64_t forbidden = forbidden0;
    for (int i = 0; i < 1200 && forbidden < forbidden0 + 4; i++) {
        sleep_ms(50);
        assert_int_equal(tsdf_client_stats(c, NULL, st, 5000), TSDF_OK);
        forbidden = stat_get(st, "rejected.forbidden");
    }
    assert_int_equal(forbidden, forbidden0 + 4);
    assert_int_equal(stat_get(st, "frames.integrated"), integrated0);
    free(st);
    tsdf_client_close(c);

    /* The harness's local ipc:// socket may still write. */
    tsdf_client *local;
    assert_int_equal(tsdf_client_open(daemon_h.req_url, NULL, NULL, &local), TSDF_OK);
    assert_int_equal(tsdf_client_reset(local, NULL, 5000), TSDF_OK);
    tsdf_client_close(local);
}

static void expect_auth(const char *who, const char *ca, const char *what)
{
    tsdf_client *c = NULL;
    int rc = open_as(who, ca, 0, &c);
    if (rc != TSDF_EAUTH)
        fail_msg("%s: open gave %s (%s), expected AUTH", what, tsdf_errname(rc),
                 tsdf_client_last_message());
    if (strstr(tsdf_client_last_message(), "TLS handshake failed") == NULL)
        fail_msg("%s: the message does not say the handshake failed: '%s'", what,
                 tsdf_client_last_message());
    assert_null(c);
}

static void test_bad_certificates_fail_with_auth(void **state)
{
    (void)state;
    expect_auth("stranger", "ca.pem", "a certificate of another CA");
    expect_auth("expired", "ca.pem", "an expired certificate");
    expect_auth(NULL, "ca.pem", "no client certificate");
    expect_auth("robot1", "other-ca.pem", "a server certificate of an untrusted CA");

    /* A TLS client with the right CA but the wrong expected server name. */
    tsdf_client_options o;
    tsdf_client *c = NULL;
    tsdf_client_options_default(&o);
    o.tls_ca_file = cert("ca.pem");
    o.tls_cert_file = cert("robot1.pem");
    o.tls_key_file = cert("robot1.key");
    o.tls_server_name = "not-tsdfd.example";
    assert_int_equal(tsdf_client_open(req_url, NULL, &o, &c), TSDF_EAUTH);

    /* TLS files with a URL that is not TLS are refused, not ignored. */
    assert_int_equal(tsdf_client_open(daemon_h.req_url, NULL, &o, &c), TSDF_EINVAL);
    /* And a tls+tcp:// URL without a CA file. */
    tsdf_client_options_default(&o);
    assert_int_equal(tsdf_client_open(req_url, NULL, &o, &c), TSDF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_integrates_and_meshes),
        cmocka_unit_test(test_reader_reads_but_cannot_write),
        cmocka_unit_test(test_bad_certificates_fail_with_auth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
