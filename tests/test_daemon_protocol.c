/*
 * test_daemon_protocol.c - the daemon answers as proto/PROTOCOL.md says, on
 * the points where a client written from the document alone found that it
 * did not (each test names the section it holds the daemon to).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How pack_head writes "v". */
typedef enum { V_ABSENT, V_ONE, V_STR, V_FLOAT } v_form;

/* Starts a request map of the envelope and `extra` more entries (the
 * caller packs them): v as told, type, and id (packed signed when
 * negative, which no reader takes for an id). */
static void pack_head(msgpack_sbuffer *sb, msgpack_packer *pk, v_form v, const char *type,
                      int64_t id, uint32_t extra)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, (v == V_ABSENT ? 2 : 3) + extra);
    if (v != V_ABSENT) {
        pk_str(pk, "v");
        if (v == V_ONE)
            msgpack_pack_uint64(pk, 1);
        else if (v == V_STR)
            pk_str(pk, "1");
        else
            msgpack_pack_double(pk, 1.0);
    }
    pk_str(pk, "type");
    pk_str(pk, type);
    pk_str(pk, "id");
    if (id < 0)
        msgpack_pack_int64(pk, id);
    else
        msgpack_pack_uint64(pk, (uint64_t)id);
}

static void expect_reply(nng_socket s, msgpack_sbuffer *sb, int status, tsdf_msg_type type,
                         uint64_t id)
{
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    raw_roundtrip(s, sb->data, sb->size, rep);
    msgpack_sbuffer_destroy(sb);
    if (rep->status != status)
        fail_msg("status %d (%s: %s), expected %s", rep->status, rep->error, rep->message,
                 tsdf_errname(status));
    assert_int_equal(rep->type, type);
    assert_int_equal(rep->id, id);
    free(rep);
}

/* 3: type and id are echoed whenever they could be read; a missing or
 * non-integer v is VERSION. */
static void test_error_replies_echo_type_and_id(void **state)
{
    tsdfd_harness h;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    (void)state;

    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);

    /* No v at all, v as a string, v as a float. */
    pack_head(&sb, &pk, V_ABSENT, "stats", 9, 0);
    expect_reply(s, &sb, TSDF_EVERSION, TSDF_MSG_STATS, 9);
    pack_head(&sb, &pk, V_STR, "ping", 10, 0);
    expect_reply(s, &sb, TSDF_EVERSION, TSDF_MSG_PING, 10);
    pack_head(&sb, &pk, V_FLOAT, "maps", 11, 0);
    expect_reply(s, &sb, TSDF_EVERSION, TSDF_MSG_MAPS, 11);
    /* A known version and type with a bad key: PROTO_KEY, both echoed. */
    pack_head(&sb, &pk, V_ONE, "mesh", 12, 1);
    pk_str(&pk, "box");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, 1.0);
    msgpack_pack_double(&pk, 2.0);
    expect_reply(s, &sb, TSDF_EPROTO_KEY, TSDF_MSG_MESH, 12);
    /* An unknown type: "error", but the id is still echoed. */
    pack_head(&sb, &pk, V_ONE, "teleport", 13, 0);
    expect_reply(s, &sb, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR, 13);
    /* An id that is not an unsigned integer cannot be echoed: 0. */
    pack_head(&sb, &pk, V_ONE, "ping", -3, 0);
    expect_reply(s, &sb, TSDF_EPROTO_KEY, TSDF_MSG_PING, 0);

    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_replies_echo_type_and_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
