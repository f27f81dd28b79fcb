/*
 * test_daemon_malformed.c - end-to-end tests of a real tsdfd against bytes
 * a well-behaved client would never send, on raw nng sockets:
 *
 *  - malformed messages of every kind get the right error codes (and the
 *    frames among them are counted as rejected), and the daemon keeps
 *    serving;
 *  - error replies that quote broken client bytes stay valid UTF-8;
 *  - 1500 randomly mutated integrates are each answered, nothing crashes,
 *    and the counters reconcile.
 *
 * The hostile-input suite beside a streaming client is test_daemon_hostile.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <msgpack.h>
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- malformed input ---------------------------------------------------- */

static void test_malformed_messages(void **state)
{
    tsdfd_harness h;
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    pk_opts o;
    (void)state;

    assert_non_null(rep);
    assert_non_null(st);
    assert_int_equal(start_daemon(&h, "[server]\nmax_message_mb = 1\n", NULL), 0);
    nng_socket s = raw_req(&h);

    /* Garbage bytes, an empty message, a msgpack value that is not a map,
     * and a map with trailing bytes: FORMAT, answered as type "error". */
    raw_roundtrip(s, "\xc1\xc1\xc1\xc1", 4, rep);
    assert_int_equal(rep->status, TSDF_EFORMAT);
    assert_int_equal(rep->type, TSDF_MSG_ERROR);
    raw_roundtrip(s, "", 0, rep);
    assert_int_equal(rep->status, TSDF_EFORMAT);
    raw_roundtrip(s, "\x93\x01\x02\x03", 4, rep); /* [1, 2, 3] */
    assert_int_equal(rep->status, TSDF_EFORMAT);
    {
        unsigned char noise[4096];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof noise; i++) {
            x = x * 1103515245u + 12345u;
            noise[i] = (unsigned char)(x >> 16);
        }
        raw_roundtrip(s, noise, sizeof noise, rep);
        assert_true(rep->status < 0);
    }
    {
        msgpack_sbuffer sb;
        o = pk_defaults();
        o.type = "ping";
        pack_request(&sb, &o, 5);
        msgpack_sbuffer_write(&sb, "\x00", 1);
        raw_roundtrip(s, sb.data, sb.size, rep);
        msgpack_sbuffer_destroy(&sb);
        assert_int_equal(rep->status, TSDF_EFORMAT);
    }

    /* Wrong types, versions and message types. */
    o = pk_defaults();
    o.type = "ping";
    o.id_as_string = 1;
    expect_error(s, &o, 0, TSDF_EPROTO_KEY, TSDF_MSG_PING);
    o = pk_defaults();
    o.type = "ping";
    o.version = 2;
    /* Another version: type and id are still echoed (PROTOCOL.md 3). */
    expect_error(s, &o, 11, TSDF_EVERSION, TSDF_MSG_PING);
    o = pk_defaults();
    o.type = "teleport";
    expect_error(s, &o, 12, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR);
    o = pk_defaults();
    o.type = "error";
    expect_error(s, &o, 13, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR);
    o = pk_defaults();
    o.type = "frame";                                          /* frames go to the PUSH socket */
    expect_error(s, &o, 14, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR); /* frame has no reply type */
    /* A malformed delete is answered as a delete: "delete" comes after
     * "error" in the list of types, and a range check took it for no
     * request (answered "error", counted as type 0). */
    o = pk_defaults();
    o.type = "delete";
    o.id_as_string = 1;
    expect_error(s, &o, 0, TSDF_EPROTO_KEY, TSDF_MSG_DELETE);

    /* Malformed integrates: each is a frame received and rejected. */
    o = pk_defaults();
    o.omit_depth = 1;
    expect_error(s, &o, 20, TSDF_EPROTO_KEY, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.bad_pose = 1;
    expect_error(s, &o, 21, TSDF_EBAD_POSE, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.depth_delta = 6;
    expect_error(s, &o, 22, TSDF_EBAD_SIZE, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.width = 10000;
    expect_error(s, &o, 23, TSDF_ETOO_LARGE, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.fx = -1.0f;
    expect_error(s, &o, 24, TSDF_EBAD_INTRINSICS, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.fmt = "u8";
    expect_error(s, &o, 25, TSDF_EPROTO_KEY, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.map = "no spaces!";
    expect_error(s, &o, 26, TSDF_EINVAL, TSDF_MSG_INTEGRATE); /* invalid_frame */

    /* Oversize: above the configured 1 MiB (but under nng's hard limit). */
    o = pk_defaults();
    o.type = "ping";
    o.pad_bytes = 1024 * 1024 + 1000;
    expect_error(s, &o, 30, TSDF_ETOO_LARGE, TSDF_MSG_PING);

    /* Valid requests the daemon must refuse. */
    tsdf_client *c = open_client(&h, 1);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "nosuchmap", NULL, &m, NULL, 10000), TSDF_ENOT_FOUND);
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = 4096;
    rp.height = 4096;
    rp.K = (tsdf_intrinsics){500, 500, 2048, 2048};
    for (int i = 0; i < 16; i++)
        rp.T_world_cam[i] = (i % 5 == 0) ? 1.0f : 0.0f;
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    float *big = malloc((size_t)4096 * 4096 * sizeof(float));
    assert_non_null(big);
    tsdf_raycast_output ro = {big, NULL, NULL};
    int rc = tsdf_client_raycast(c, "default", &rp, 0, &ro, NULL, 10000);
    free(big);
    assert_int_equal(rc, TSDF_ETOO_LARGE);

    /* Garbage and a non-frame on the frames socket. */
    nng_socket push = raw_push(&h);
    assert_int_equal(nng_send(push, "\xc1\xff\x00", 3, 0), 0);
    {
        msgpack_sbuffer sb;
        o = pk_defaults();
        o.type = "ping";
        pack_request(&sb, &o, 40);
        assert_int_equal(nng_send(push, sb.data, sb.size, 0), 0);
        msgpack_sbuffer_destroy(&sb);
    }

    /* Still serving: ping, then a real frame integrates. */
    tsdf_rep_ping ping;
    assert_int_equal(tsdf_client_ping(c, &ping, 10000), TSDF_OK);
    assert_non_null(strstr(ping.server, "tsdfd"));
    frame_set fs;
    frames_make(&fs, "sphere", 64, 48, 1);
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.frame = &fs.frames[0];
    f.sensor = "good";
    tsdf_rep_integrate irep;
    assert_int_equal(tsdf_client_integrate(c, &f, 30000, &irep), TSDF_OK);

    /* 7 malformed integrates + 2 bad frames + 1 good frame. */
    wait_settled(c, "default", 10, st);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "frames.received"), 10);
    assert_int_equal(stat_get(st, "frames.integrated"), 1);
    assert_int_equal(stat_get(st, "rejected.decode_error"), 3 + 2);
    assert_int_equal(stat_get(st, "rejected.invalid_frame"), 4);
    assert_int_equal(stat_get(st, "sensor.good.integrated"), 1);
    assert_true(stat_get(st, "requests.errors") >= 16);

    frames_free(&fs);
    nng_close(push);
    nng_close(s);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(rep);
    free(st);
}

/* A request {v, type, id, key: value} with raw bytes for the strings. */
static void pack_raw_request(msgpack_sbuffer *sb, const char *type, size_t type_len,
                             const char *key, const char *value, size_t value_len)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pk_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    pk_str(&pk, "type");
    msgpack_pack_str(&pk, type_len);
    msgpack_pack_str_body(&pk, type, type_len);
    pk_str(&pk, "id");
    msgpack_pack_uint64(&pk, 77);
    pk_str(&pk, key);
    msgpack_pack_str(&pk, value_len);
    msgpack_pack_str_body(&pk, value, value_len);
}

/* Error replies quote what the client sent (names, paths, types); however
 * broken those bytes are, the reply stays valid UTF-8 (raw_roundtrip checks
 * every str) and its message printable. */
static void test_error_replies_are_utf8(void **state)
{
    tsdfd_harness h;
    tsdf_reply *rep = malloc(sizeof *rep);
    msgpack_sbuffer sb;
    (void)state;

    assert_non_null(rep);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);

    /* A map name that is not UTF-8, and one that is but holds an escape
     * character, which the message quotes. */
    pack_raw_request(&sb, "stats", 5, "map", "caf\xc3", 4);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    assert_int_equal(rep->type, TSDF_MSG_STATS);
    pack_raw_request(&sb, "stats", 5, "map", "caf\xc3\xa9\x1b[2J", 9);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    if (strstr(rep->message, "\"caf\xc3\xa9?[2J\"") == NULL)
        fail_msg("message: %s", rep->message);

    /* A type that is a truncated 3-byte sequence. */
    pack_raw_request(&sb, "\xe2\x82", 2, "map", "default", 7);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EPROTO_TYPE);

    /* A path that is not UTF-8 is refused before the daemon uses it. */
    pack_raw_request(&sb, "save", 4, "path", "m\xff.tsdf", 7);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);

    /* A valid path whose file name the daemon quotes cut to 64 bytes,
     * inside a 2-byte character: the half character becomes '?'. */
    char path[128] = "snap-";
    for (int i = 0; i < 40; i++)
        strcat(path, "\xc3\xa9");
    strcat(path, ".tsdfsnap");
    pack_raw_request(&sb, "save", 4, "path", path, strlen(path));
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    assert_non_null(strstr(rep->message, "reserved"));
    assert_non_null(strstr(rep->message, "\xc3\xa9?'"));

    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(rep);
}

/* ---- mutated messages: every one answered, nothing crashes -------------- */

static void test_mutated_messages(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_buf valid;
    tsdf_request *req = calloc(1, sizeof *req);
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(req);
    assert_non_null(rep);
    assert_non_null(st);
    frames_make(&fs, "sphere", 16, 12, 1);
    tsdf_request_init(req, TSDF_MSG_INTEGRATE);
    req->id = 99;
    req->u.frame.frame = fs.frames[0];
    snprintf(req->u.frame.sensor.name, sizeof req->u.frame.sensor.name, "fuzz");
    req->u.frame.sensor.is_id = 0;
    tsdf_buf_init(&valid);
    assert_int_equal(tsdf_proto_encode_request(req, &valid), TSDF_OK);

    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);
    nng_socket push = raw_push(&h);
    uint8_t *buf = malloc(valid.len + 64);
    assert_non_null(buf);
    uint32_t x = 2024;
    const int rounds = 1500;
    int ok = 0, errors = 0;
    for (int r = 0; r < rounds; r++) {
        size_t len = valid.len;
        memcpy(buf, valid.data, len);
        x = x * 1664525u + 1013904223u;
        int flips = 1 + (int)((x >> 24) % 8);
        for (int k = 0; k < flips; k++) {
            x = x * 1664525u + 1013904223u;
            buf[(x >> 8) % len] = (uint8_t)(x >> 20);
        }
        x = x * 1664525u + 1013904223u;
        if ((x >> 28) == 0) /* sometimes truncate too */
            len = (x >> 8) % len;
        raw_roundtrip(s, buf, len, rep);
        if (rep->status == TSDF_OK)
            ok++;
        else
            errors++;
        if (r % 4 == 0)
            assert_int_equal(nng_send(push, buf, len, 0), 0);
    }
    printf("mutated messages: %d accepted, %d refused with an error reply\n", ok, errors);
    assert_int_equal(ok + errors, rounds);
    assert_true(errors > 0);

    /* Still alive and consistent once the pushed ones are through. */
    tsdf_client *c = open_client(&h, 0);
    tsdf_rep_ping ping;
    assert_int_equal(tsdf_client_ping(c, &ping, 10000), TSDF_OK);
    for (int waited = 0; waited < 60000; waited += 50) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        if (stat_get(st, "frames.in_flight") == 0 && stat_get(st, "requests.total") >= rounds)
            break;
        sleep_ms(50);
    }
    assert_reconciled(st);
    tsdf_client_close(c);
    nng_close(push);
    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 60000), 0);
    free(buf);
    tsdf_buf_fini(&valid);
    frames_free(&fs);
    free(req);
    free(rep);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_error_replies_are_utf8),
        cmocka_unit_test(test_mutated_messages),
    };
    return daemon_tests_run("daemon_malformed", tests, sizeof tests / sizeof tests[0]);
}
