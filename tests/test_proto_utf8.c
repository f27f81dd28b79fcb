/*
 * test_proto_utf8.c - the wire codec and UTF-8: error messages are repaired
 * to valid, printable text (each invalid sequence one '?'), no encoder
 * writes an invalid str, the request decoder refuses identifiers that are
 * not UTF-8, and free text from a peer is repaired on decode.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "proto_testlib.h"
#include "tsdf_proto.h"

/* ---- UTF-8 ------------------------------------------------------------- */

/* 1 when s holds no C0 control, DEL or C1 control (U+0080..U+009F). */
static int printable(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i] != '\0'; i++) {
        if (p[i] < 0x20 || p[i] == 0x7f || (p[i] == 0xc2 && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f))
            return 0;
    }
    return 1;
}

/* Formats text into an error reply and checks what a strict peer would
 * see: the message is valid and printable, and so is every str on the
 * wire, and the reply decodes to the same message. Returns the message. */
static const char *error_reply_of(tsdf_reply *r, const char *text)
{
    static tsdf_reply d;
    tsdf_buf b;
    tsdf_reply_init(r, TSDF_MSG_SAVE, 3);
    tsdf_reply_set_error(r, TSDF_EINVAL, "save: [%s]", text);
    assert_true(tsdf_test_utf8_valid(r->message, strlen(r->message)));
    assert_true(printable(r->message));
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    assert_true(tsdf_test_msgpack_strs_valid(b.data, b.len));
    assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, &d, NULL), TSDF_OK);
    assert_string_equal(d.message, r->message);
    tsdf_buf_fini(&b);
    return r->message;
}

static void test_utf8(void **state)
{
    (void)state;
    tsdf_reply *r = calloc(1, sizeof(*r));
    tsdf_reply *d = calloc(1, sizeof(*d));
    assert_non_null(r);
    assert_non_null(d);

    /* A message repaired on decode leaves no trace of what it replaced:
     * the decoded struct re-encodes and decodes to the same bytes (the
     * reply fuzz target found a reply whose stale tail bytes differed). */
    {
        static const unsigned char found[] =
            "\x86\xa1\x76\x01\xa4\x74\x79\x70\x65\xa5\x65\x72\x72\x6f\x72\xa2"
            "\x69\x64\x00\xa6\x73\x74\x61\x74\x75\x73\xf2\xa5\x65\x72\x9e\x6f"
            "\x72\xa6\x46\x4f\x52\x4d\x41\x54\xa7\x6d\x65\x73\x73\x61\x67\x65"
            "\xb9\x74\x75\x73\xf2\xa5\xb9\x74\x75\x73\xf2\xa5\x65\x72\x72\x6f"
            "\x72\xa6\x20\x6d\x65\x73\x73\x61\x85\x65";
        tsdf_buf b;
        tsdf_buf_init(&b);
        memset(r, 0, sizeof *r);
        memset(d, 0, sizeof *d);
        /* sizeof - 1: the literal's own NUL is not part of the message. */
        assert_int_equal(tsdf_proto_decode_reply(found, sizeof found - 1, r, NULL), TSDF_OK);
        assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
        assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, d, NULL), TSDF_OK);
        assert_memory_equal(r, d, sizeof *r);
        tsdf_buf_fini(&b);
    }

    /* Each invalid sequence (its maximal subpart) becomes one '?'. */
    assert_string_equal(error_reply_of(r, "a\xff"
                                          "b"),
                        "save: [a?b]");
    assert_string_equal(error_reply_of(r, "\x80"
                                          "x"),
                        "save: [?x]");
    assert_string_equal(error_reply_of(r, "\xc0\xaf"), "save: [??]");           /* overlong '/' */
    assert_string_equal(error_reply_of(r, "\xe0\x80\xaf"), "save: [???]");      /* overlong */
    assert_string_equal(error_reply_of(r, "\xed\xa0\x80"), "save: [???]");      /* surrogate */
    assert_string_equal(error_reply_of(r, "\xf4\x90\x80\x80"), "save: [????]"); /* > U+10FFFF */
    assert_string_equal(error_reply_of(r, "\xe2\x82"
                                          "x"),
                        "save: [?x]"); /* cut short */
    assert_string_equal(error_reply_of(r, "\xf0\x9f\x98"), "save: [?]");
    /* Controls, DEL and C1 (0x9b is a CSI) would drive a terminal. */
    assert_string_equal(error_reply_of(r, "a\nb\x1b[31mc\x7f"
                                          "d\xc2\x9b"
                                          "e"),
                        "save: [a?b?[31mc?d?e]");
    /* Valid text passes untouched: 2-, 3- and 4-byte characters. */
    assert_string_equal(error_reply_of(r, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                        "save: [caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80]");

    /* The fixed buffer cuts a 3-byte character at its end: the two bytes
     * left become one '?' and the message stays inside the buffer. */
    char text[TSDF_PROTO_MAX_MESSAGE_LEN + 8];
    size_t pre = TSDF_PROTO_MAX_MESSAGE_LEN - strlen("save: [") - 2;
    memset(text, 'a', pre);
    strcpy(text + pre, "\xe2\x82\xac]");
    const char *m = error_reply_of(r, text);
    assert_int_equal(strlen(m), TSDF_PROTO_MAX_MESSAGE_LEN - 1);
    assert_int_equal(m[strlen(m) - 1], '?');
    assert_int_equal(m[strlen(m) - 2], 'a');

    /* No encoder writes an invalid str, even when a caller bypasses
     * tsdf_reply_set_error or fills an identifier itself. */
    tsdf_buf b;
    tsdf_buf_init(&b);
    tsdf_reply_init(r, TSDF_MSG_PING, 4);
    r->status = TSDF_EINVAL;
    strcpy(r->message, "raw \xff");
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    tsdf_reply_init(r, TSDF_MSG_SAVE, 5);
    strcpy(r->u.path.path, "/tmp/\xc3(");
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    tsdf_reply_init(r, TSDF_MSG_STATS, 6);
    r->u.stats.extra_count = 1;
    r->u.stats.extra[0] = (tsdf_stat_entry){"sensor.\xed\xbf\xbf", 0, 1, 0};
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    assert_int_equal(b.len, 0);
    tsdf_request q;
    tsdf_request_init(&q, TSDF_MSG_LOAD);
    q.id = 7;
    strcpy(q.u.path.path, "/tmp/\xe0\x9f\xbf");
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    assert_int_equal(b.len, 0);
    tsdf_buf_fini(&b); /* encode_req below starts a new buffer */

    /* The decoder refuses identifiers that are not UTF-8 (so they cannot
     * be echoed into replies), and its error detail is printable even when
     * it quotes the peer's bytes. */
    tsdf_proto_error err;
    q.u.path.path[0] = '\0';
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "path", v_str_bad_utf8, &err), TSDF_EINVAL);
    assert_string_equal(err.key, "path");
    assert_int_equal(req_with(&b, "map", v_str_bad_utf8, &err), TSDF_EINVAL);
    assert_true(tsdf_test_utf8_valid(err.message, strlen(err.message)));
    assert_int_equal(req_with(&b, "type", v_str_bad_utf8, &err), TSDF_EPROTO_TYPE);
    assert_true(tsdf_test_utf8_valid(err.message, strlen(err.message)));
    tsdf_buf_fini(&b);
    make_frame_request(&q, TSDF_MSG_FRAME);
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "depth_format", v_str_ctrl, &err), TSDF_EPROTO_KEY);
    assert_true(printable(err.message));
    tsdf_buf_fini(&b);

    /* Free text from a peer is repaired on decode, not refused. */
    tsdf_reply_init(r, TSDF_MSG_PING, 8);
    tsdf_reply_set_error(r, TSDF_EINVAL, "x");
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    rebuild(&b, "message", "message", v_str_bad_utf8);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, NULL), TSDF_OK);
    assert_string_equal(d->message, "a????");
    rebuild(&b, "message", "message", v_str_ctrl);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, NULL), TSDF_OK);
    assert_string_equal(d->message, "a?[2Jb");
    tsdf_buf_fini(&b);
    tsdf_reply_init(r, TSDF_MSG_SAVE, 9);
    strcpy(r->u.path.path, "/tmp/x");
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    rebuild(&b, "path", "path", v_str_bad_utf8);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EINVAL);
    tsdf_buf_fini(&b);

    free(r);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8),
    };
    return proto_tests_run("proto_utf8", tests, sizeof tests / sizeof tests[0]);
}
