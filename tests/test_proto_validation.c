/*
 * test_proto_validation.c - the wire codec's request decoder: every
 * validation rule of a frame, an integrate and the other requests yields
 * its specific code (and names its key), the depth_encoding key carries
 * compressed depth, and the envelope and structure limits (trailing bytes,
 * nesting, container and bin sizes) hold before any payload is read.
 */
#define _GNU_SOURCE /* memmem */
#include "testutil.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "proto_check.h"
#include "proto_testlib.h"
#include "tsdf_proto.h"

/* "depth_encoding": the codec carries compressed depth without looking
 * into it; decoding it is the receiver's step (test_depth_codec.c). */
static void test_depth_encoding_key(void **state)
{
    (void)state;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    tsdf_buf b;
    encode_req(&q, &b);
    tsdf_proto_error err;
    tsdf_request *d = malloc(sizeof(*d));
    assert_non_null(d);

    /* Raw frames carry no key, so older daemons read them. */
    for (size_t i = 0; i + 14 <= b.len; i++)
        assert_false(memcmp(b.data + i, "depth_encoding", 14) == 0);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, NULL), TSDF_OK);
    assert_int_equal(d->u.frame.depth_encoding, TSDF_DEPTH_ENC_RAW);
    assert_null(d->u.frame.depth_coded);
    assert_int_equal(req_with(&b, "depth_encoding", v_nil, &err), TSDF_OK);
    assert_int_equal(req_with(&b, "depth_encoding", v_str_bogus, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "depth_encoding");
    assert_int_equal(req_with(&b, "depth_encoding", v_u2, &err), TSDF_EPROTO_KEY);

    /* zstd: any non-empty bytes pass the codec, of any length. */
    rebuild(&b, "depth_encoding", "depth_encoding", v_str_zstd);
    tsdf_buf z = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_request(z.data, z.len, d, &err), TSDF_OK);
    assert_int_equal(d->u.frame.depth_encoding, TSDF_DEPTH_ENC_ZSTD);
    assert_null(d->u.frame.frame.depth);
    assert_int_equal(d->u.frame.frame.depth_size_bytes, 0);
    assert_int_equal(d->u.frame.depth_coded_bytes, W * H * 2);
    assert_int_equal(req_with(&z, "depth", v_bin_short, &err), TSDF_OK);
    assert_int_equal(req_with(&z, "depth", v_bin_empty, &err), TSDF_EBAD_SIZE);
    assert_int_equal(req_with(&z, "depth_format", v_str_f32, &err), TSDF_OK);
    free(z.data);
    /* png (and rvl) carry u16 only. */
    rebuild(&b, "depth_encoding", "depth_encoding", v_str_png);
    tsdf_buf p = take_rebuilt();
    assert_int_equal(req_with(&p, "depth_format", v_str_f32, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "depth_encoding");
    free(p.data);

    /* The encoder writes the compressed payload and the key. */
    tsdf_buf_clear(&b);
    q.u.frame.depth_encoding = TSDF_DEPTH_ENC_RVL;
    q.u.frame.depth_coded = "\x01\x02\x03";
    q.u.frame.depth_coded_bytes = 3;
    q.u.frame.frame.depth = NULL;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, NULL), TSDF_OK);
    assert_int_equal(d->u.frame.depth_encoding, TSDF_DEPTH_ENC_RVL);
    assert_int_equal(d->u.frame.depth_coded_bytes, 3);
    assert_memory_equal(d->u.frame.depth_coded, "\x01\x02\x03", 3);
    size_t len = b.len;
    q.u.frame.frame.depth_format = TSDF_DEPTH_F32;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EPROTO_KEY);
    q.u.frame.frame.depth_format = TSDF_DEPTH_U16;
    q.u.frame.depth_coded_bytes = 0;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    q.u.frame.depth_coded_bytes = 3;
    q.u.frame.depth_encoding = (tsdf_depth_encoding)9;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    assert_int_equal(b.len, len);
    free(d);
    tsdf_buf_fini(&b);
}

/* "ring_token" and "ring_offset" (PROTOCOL.md 6.10): an integrate names
 * a slot of its sender's shared ring instead of carrying raw depth; both
 * keys or neither, never with "depth" or a compressed encoding, and never
 * in a pushed frame. */
static void test_ring_keys(void **state)
{
    (void)state;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    q.u.frame.has_ring = 1;
    q.u.frame.ring_token = 0x0123456789abcdefull;
    q.u.frame.ring_offset = 614400;
    tsdf_buf b;
    encode_req(&q, &b);
    tsdf_proto_error err;
    tsdf_request *d = malloc(sizeof(*d));
    assert_non_null(d);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.frame.has_ring);
    assert_true(d->u.frame.ring_token == 0x0123456789abcdefull);
    assert_int_equal(d->u.frame.ring_offset, 614400);
    assert_null(d->u.frame.frame.depth);
    assert_int_equal(d->u.frame.frame.depth_size_bytes, 0);
    /* The samples are not in the message: no "depth" key (a fixstr of 5),
     * which the same request without the ring has. */
    static const uint8_t depth_key[6] = {0xa5, 'd', 'e', 'p', 't', 'h'};
    q.u.frame.has_ring = 0;
    tsdf_buf with;
    encode_req(&q, &with);
    assert_non_null(memmem(with.data, with.len, depth_key, sizeof depth_key));
    assert_null(memmem(b.data, b.len, depth_key, sizeof depth_key));
    tsdf_buf_fini(&with);
    q.u.frame.has_ring = 1;

    assert_int_equal(req_with(&b, "depth", v_bin_short, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "depth");
    assert_int_equal(req_with(&b, "depth_encoding", v_str_zstd, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "depth_encoding");
    assert_int_equal(req_with(&b, "ring_offset", v_neg, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "ring_token", v_str_bogus, &err), TSDF_EPROTO_KEY);
    rebuild(&b, "ring_offset", NULL, NULL);
    tsdf_buf t = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_request(t.data, t.len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "ring_offset");
    free(t.data);

    /* A pushed frame gets no reply: it may not name a slot. */
    q.type = TSDF_MSG_FRAME;
    tsdf_buf_clear(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EPROTO_KEY);
    q.type = TSDF_MSG_INTEGRATE;
    tsdf_buf_fini(&b);
    encode_req(&q, &b);
    rebuild(&b, "type", "type", v_str_frame);
    tsdf_buf f = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_request(f.data, f.len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "ring_token");
    free(f.data);
    /* Compressed depth cannot be in a ring. */
    q.u.frame.depth_encoding = TSDF_DEPTH_ENC_ZSTD;
    tsdf_buf_clear(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    free(d);
    tsdf_buf_fini(&b);
}

/* "ring_seq" (PROTOCOL.md 6.10, item 5): the sender's number for a
 * request that names its ring, which the ring's fences compare. Written
 * only when not 0 (a request without it is byte for byte what senders
 * before it sent), read back on a frame and a raycast, and refused
 * without the ring's other keys. */
static void test_ring_seq(void **state)
{
    (void)state;
    static const char seq_key[] = "ring_seq";
    tsdf_request *d = malloc(sizeof(*d));
    assert_non_null(d);
    tsdf_proto_error err;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    q.u.frame.has_ring = 1;
    q.u.frame.ring_token = 9;
    q.u.frame.ring_offset = 0;
    tsdf_buf b;
    encode_req(&q, &b);
    assert_null(memmem(b.data, b.len, seq_key, strlen(seq_key)));
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.frame.ring_seq == 0);
    q.u.frame.ring_seq = 0x1122334455667788ull;
    tsdf_buf_fini(&b);
    encode_req(&q, &b);
    assert_non_null(memmem(b.data, b.len, seq_key, strlen(seq_key)));
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.frame.ring_seq == 0x1122334455667788ull);
    assert_true(d->u.frame.has_ring);
    assert_int_equal(req_with(&b, "ring_seq", v_neg, &err), TSDF_EPROTO_KEY);
    /* Without ring_token and ring_offset it means nothing: refused. */
    rebuild(&b, "ring_token", NULL, NULL);
    tsdf_buf t = take_rebuilt();
    rebuild(&t, "ring_offset", "depth", v_bin_short);
    tsdf_buf u = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_request(u.data, u.len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "ring_seq");
    free(t.data);
    free(u.data);

    tsdf_request_init(&q, TSDF_MSG_RAYCAST);
    q.u.raycast.width = W;
    q.u.raycast.height = H;
    q.u.raycast.K = (tsdf_intrinsics){10.0f, 10.0f, W / 2.0f, H / 2.0f};
    q.u.raycast.has_ring = 1;
    q.u.raycast.ring_token = 9;
    q.u.raycast.ring_offset = 64;
    q.u.raycast.ring_seq = 3;
    tsdf_buf_fini(&b);
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.raycast.ring_seq == 3);
    assert_int_equal(d->u.raycast.ring_offset, 64);
    q.u.raycast.ring_seq = 0;
    tsdf_buf_fini(&b);
    encode_req(&q, &b);
    assert_null(memmem(b.data, b.len, seq_key, strlen(seq_key)));
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.raycast.ring_seq == 0);
    free(d);
    tsdf_buf_fini(&b);
}

/* A raycast into the sender's ring (PROTOCOL.md 6.10): the request's two
 * ring keys (both or neither), and a reply that names the slot and the
 * bytes written there instead of carrying its arrays. */
static void test_raycast_ring_keys(void **state)
{
    (void)state;
    tsdf_request q;
    tsdf_request_init(&q, TSDF_MSG_RAYCAST);
    q.id = 5;
    q.u.raycast.width = W;
    q.u.raycast.height = H;
    q.u.raycast.K = (tsdf_intrinsics){10.0f, 10.0f, W / 2.0f, H / 2.0f};
    q.u.raycast.has_ring = 1;
    q.u.raycast.ring_token = 0xfedcba9876543210ull;
    q.u.raycast.ring_offset = 4096;
    tsdf_buf b;
    encode_req(&q, &b);
    tsdf_proto_error err;
    tsdf_request *d = malloc(sizeof(*d));
    tsdf_reply *r = malloc(sizeof(*r)), *dr = malloc(sizeof(*dr));
    assert_true(d != NULL && r != NULL && dr != NULL);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_true(d->u.raycast.has_ring);
    assert_true(d->u.raycast.ring_token == 0xfedcba9876543210ull);
    assert_int_equal(d->u.raycast.ring_offset, 4096);
    rebuild(&b, "ring_token", NULL, NULL);
    tsdf_buf t = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_request(t.data, t.len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "ring_token");
    free(t.data);
    /* Without the keys the request is what it was before them. */
    q.u.raycast.has_ring = 0;
    tsdf_buf_fini(&b);
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, &err), TSDF_OK);
    assert_false(d->u.raycast.has_ring);
    assert_null(memmem(b.data, b.len, "ring_", 5));

    /* The reply: each of the four layouts round-trips. */
    for (int k = 0; k < 4; k++) {
        tsdf_reply_init(r, TSDF_MSG_RAYCAST, 5);
        r->u.raycast = (tsdf_rep_raycast){.width = W,
                                          .height = H,
                                          .version = 3,
                                          .in_ring = 1,
                                          .ring_offset = 128,
                                          .ring_normals = k & 1,
                                          .ring_rgb = (k & 2) != 0};
        tsdf_buf_clear(&b);
        assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
        assert_true(b.len < 256);
        assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, dr, &err), TSDF_OK);
        assert_true(dr->u.raycast.in_ring);
        assert_int_equal(dr->u.raycast.ring_offset, 128);
        assert_int_equal(dr->u.raycast.ring_normals, k & 1);
        assert_int_equal(dr->u.raycast.ring_rgb, (k & 2) != 0);
        assert_null(dr->u.raycast.depth_m);
        assert_int_equal(dr->u.raycast.version, 3);
    }
    /* A size that is no layout of the image, or an array in the message
     * as well: refused. */
    rebuild(&b, "ring_bytes", "ring_bytes", v_u2);
    t = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_reply(t.data, t.len, dr, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "ring_bytes");
    free(t.data);
    rebuild(&b, NULL, "depth", v_bin_short);
    t = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_reply(t.data, t.len, dr, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "depth");
    free(t.data);
    rebuild(&b, "ring_bytes", NULL, NULL);
    t = take_rebuilt();
    assert_int_equal(tsdf_proto_decode_reply(t.data, t.len, dr, &err), TSDF_EPROTO_KEY);
    free(t.data);
    free(d);
    free(r);
    free(dr);
    tsdf_buf_fini(&b);
}

static void test_validation_frame(void **state)
{
    (void)state;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    tsdf_buf b;
    encode_req(&q, &b);
    tsdf_proto_error err;

    /* Sanity: a plain rebuild decodes. */
    assert_int_equal(req_with(&b, "nonexistent", NULL, NULL), TSDF_OK);
    /* Unknown keys are ignored; nil is "absent". */
    rebuild(&b, NULL, "future_key", v_str_bogus);
    tsdf_request d;
    assert_int_equal(tsdf_proto_decode_request(g_out, g_out_len, &d, NULL), TSDF_OK);
    assert_int_equal(req_with(&b, "rgb", v_nil, NULL), TSDF_OK);
    assert_int_equal(req_with(&b, "min_depth", v_nil, NULL), TSDF_OK);

    /* Envelope: a missing or non-integer v is a version this side does
     * not speak, and type and id are still read for the error reply. */
    assert_int_equal(req_with(&b, "v", NULL, &err), TSDF_EVERSION);
    assert_string_equal(err.key, "v");
    assert_int_equal(req_with(&b, "v", v_u2, &err), TSDF_EVERSION);
    assert_int_equal(req_with(&b, "v", v_str_f32, &err), TSDF_EVERSION);
    assert_int_equal(req_with(&b, "v", v_f10, &err), TSDF_EVERSION);
    assert_int_equal(req_with(&b, "v", v_neg, &err), TSDF_EVERSION);
    rebuild(&b, "v", "v", v_str_f32);
    assert_int_equal(tsdf_proto_decode_request(g_out, g_out_len, &d, &err), TSDF_EVERSION);
    assert_int_equal(d.type, TSDF_MSG_INTEGRATE);
    assert_int_equal(d.id, 42);
    {
        tsdf_msg_type pt;
        uint64_t pid;
        assert_int_equal(tsdf_proto_peek(g_out, g_out_len, &pt, &pid), TSDF_EVERSION);
        assert_int_equal(pt, TSDF_MSG_INTEGRATE);
        assert_int_equal(pid, 42);
    }
    /* An unknown type leaves the id readable. */
    rebuild(&b, "type", "type", v_str_bogus);
    assert_int_equal(tsdf_proto_decode_request(g_out, g_out_len, &d, &err), TSDF_EPROTO_TYPE);
    assert_int_equal(d.type, TSDF_MSG_NONE);
    assert_int_equal(d.id, 42);
    assert_int_equal(req_with(&b, "type", v_str_bogus, &err), TSDF_EPROTO_TYPE);
    assert_int_equal(req_with(&b, "type", v_u2, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "id", NULL, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "id", v_neg, &err), TSDF_EPROTO_KEY);
    /* Duplicate keys are refused. */
    rebuild(&b, NULL, "width", v_u2);
    assert_int_equal(tsdf_proto_decode_request(g_out, g_out_len, &d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "width");

    /* Sizes. */
    assert_int_equal(req_with(&b, "width", v_u0, &err), TSDF_EEMPTY_IMAGE);
    assert_int_equal(req_with(&b, "height", v_u0, &err), TSDF_EEMPTY_IMAGE);
    assert_int_equal(req_with(&b, "width", v_u9000, &err), TSDF_ETOO_LARGE);
    rebuild(&b, "width", "width", v_u5000);
    tsdf_buf b2 = {g_out, g_out_len, g_out_len, g_out_len, 0};
    g_out = NULL;
    assert_int_equal(req_with(&b2, "height", v_u5000, &err), TSDF_ETOO_LARGE); /* 25 Mpx */
    free(b2.data);
    assert_int_equal(req_with(&b, "width", v_f10, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "depth", v_bin_short, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "depth");
    assert_non_null(strstr(err.message, "expected 96"));
    assert_int_equal(req_with(&b, "depth", v_str_bogus, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "depth", NULL, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "rgb", v_bin_short, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "rgb");
    assert_int_equal(req_with(&b, "depth_format", v_str_u8, &err), TSDF_EPROTO_KEY);
    /* f32 declared but a u16 payload: the size gives it away. */
    assert_int_equal(req_with(&b, "depth_format", v_str_f32, &err), TSDF_EBAD_SIZE);
    /* Without depth_format the default is u16. */
    assert_int_equal(req_with(&b, "depth_format", NULL, &err), TSDF_OK);

    /* Intrinsics. */
    assert_int_equal(req_with(&b, "fx", v_f0, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "fy", v_neg, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "cx", v_fnan, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "cy", v_finf, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "fx", v_fhuge, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "fx", v_true, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "fx", NULL, &err), TSDF_EPROTO_KEY);

    /* Pose. */
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_scaled, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_mirror, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_lastrow, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_nan, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_huge, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "max_depth", v_fhuge, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_15, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_str, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "T_world_cam", NULL, &err), TSDF_EPROTO_KEY);

    /* Depth range and scale. */
    assert_int_equal(req_with(&b, "max_depth", v_f0, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "min_depth", v_neg, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "min_depth", v_f10, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "max_depth", v_fnan, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "depth_scale", v_f0, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "depth_scale", v_finf, &err), TSDF_EBAD_DEPTH_RANGE);

    /* Names. */
    assert_int_equal(req_with(&b, "map", v_str_long, &err), TSDF_ETOO_LARGE);
    assert_int_equal(req_with(&b, "map", v_str_dotdot, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "map", v_str_empty, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "map", v_u2, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "sensor", v_str_long, &err), TSDF_ETOO_LARGE);
    assert_int_equal(req_with(&b, "sensor", v_str_space, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "sensor", v_neg, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "seq", v_f10, &err), TSDF_EPROTO_KEY);

    /* A frame needs no id; an integrate does. */
    tsdf_buf_fini(&b);
    make_frame_request(&q, TSDF_MSG_FRAME);
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "id", NULL, &err), TSDF_OK);
    tsdf_buf_fini(&b);
}

static void test_validation_other(void **state)
{
    (void)state;
    tsdf_request q;
    tsdf_buf b;
    tsdf_proto_error err;

    tsdf_request_init(&q, TSDF_MSG_RAYCAST);
    q.id = 1;
    q.u.raycast.width = 64;
    q.u.raycast.height = 48;
    q.u.raycast.K = (tsdf_intrinsics){50, 50, 32, 24};
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "T_world_cam", v_pose_scaled, &err), TSDF_EBAD_POSE);
    assert_int_equal(req_with(&b, "fx", v_f0, &err), TSDF_EBAD_INTRINSICS);
    assert_int_equal(req_with(&b, "max_depth", v_f0, &err), TSDF_EBAD_DEPTH_RANGE);
    assert_int_equal(req_with(&b, "rgb", v_u2, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "width", v_u0, &err), TSDF_EEMPTY_IMAGE);
    /* 5000 x 48 is a valid image but fine; 4096 x 4096 would not fit a reply. */
    tsdf_buf_fini(&b);
    q.u.raycast.width = 4096;
    q.u.raycast.height = 4096;
    /* The 64 x 48 camera's focal length would span 179 degrees here (and be
     * BAD_INTRINSICS): scale it with the image so only the size is wrong. */
    q.u.raycast.K = (tsdf_intrinsics){3200, 3200, 2048, 2048};
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    assert_int_equal(b.len, 0);
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 2;
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "box", v_box_inverted, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "box", v_pose_15, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "since_version", v_neg, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "by_block", v_u2, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "by_block");
    assert_int_equal(req_with(&b, "by_block", v_str_bogus, &err), TSDF_EPROTO_KEY);
    /* nil is absent: a whole mesh. */
    assert_int_equal(req_with(&b, "by_block", v_nil, &err), TSDF_OK);
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_LOAD);
    q.id = 3;
    encode_req(&q, &b);
    assert_int_equal(req_with(&b, "path", v_str_empty, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "path", v_u2, &err), TSDF_EPROTO_KEY);
    tsdf_buf_fini(&b);

    /* The reply-only type is not a request. */
    tsdf_request_init(&q, TSDF_MSG_PING);
    q.id = 4;
    encode_req(&q, &b);
    static const char err_type[] = "error";
    (void)err_type;
    assert_int_equal(req_with(&b, "type", v_str_bogus, &err), TSDF_EPROTO_TYPE);
    tsdf_buf_fini(&b);
}

static void test_validation_envelope_and_structure(void **state)
{
    (void)state;
    tsdf_request d;
    tsdf_proto_error err;
    uint8_t arr[] = {0x91, 0x01};            /* [1] */
    uint8_t trailing[] = {0x80, 0x00};       /* {} then an extra byte */
    uint8_t bad[] = {0xc1};                  /* never-used byte */
    uint8_t str_trunc[] = {0xd9, 0x10, 'a'}; /* str8 of 16 with 1 byte */
    assert_int_equal(tsdf_proto_decode_request(arr, sizeof(arr), &d, &err), TSDF_EFORMAT);
    assert_int_equal(tsdf_proto_decode_request(trailing, sizeof(trailing), &d, &err), TSDF_EFORMAT);
    assert_int_equal(tsdf_proto_decode_request(bad, sizeof(bad), &d, &err), TSDF_EFORMAT);
    assert_int_equal(tsdf_proto_decode_request(str_trunc, sizeof(str_trunc), &d, &err),
                     TSDF_EFORMAT);
    assert_int_equal(tsdf_proto_decode_request(arr, 0, &d, &err), TSDF_EFORMAT);
    assert_int_equal(tsdf_proto_decode_request(NULL, 0, &d, &err), TSDF_EFORMAT);
    /* The length limit is checked before any byte is read. */
    assert_int_equal(tsdf_proto_decode_request(arr, TSDF_PROTO_MAX_MESSAGE_BYTES + 1u, &d, &err),
                     TSDF_ETOO_LARGE);

    /* Nesting deeper than the limit. */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof(deep));
    deep[63] = 0x01;
    assert_int_equal(tsdf_proto_decode_request(deep, sizeof(deep), &d, &err), TSDF_ETOO_LARGE);
    /* A container claiming more entries than the limit. */
    uint8_t big[] = {0xde, 0x01, 0x2c}; /* map16 of 300 */
    assert_int_equal(tsdf_proto_decode_request(big, sizeof(big), &d, &err), TSDF_ETOO_LARGE);
    /* A container claiming 2^32-1 entries with no bytes behind it. */
    uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(tsdf_proto_decode_request(huge, sizeof(huge), &d, &err), TSDF_ETOO_LARGE);
    /* A bin claiming more bytes than there are. */
    uint8_t binlie[] = {0x81, 0xa1, 'x', 0xc6, 0x7f, 0xff, 0xff, 0xff, 0x00};
    assert_int_equal(tsdf_proto_decode_request(binlie, sizeof(binlie), &d, &err), TSDF_EFORMAT);

    /* Peek echoes the id of a request with a bad type. */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str(&pk, 1);
    msgpack_pack_str_body(&pk, "v", 1);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_str(&pk, 4);
    msgpack_pack_str_body(&pk, "type", 4);
    msgpack_pack_str(&pk, 6);
    msgpack_pack_str_body(&pk, "launch", 6);
    msgpack_pack_str(&pk, 2);
    msgpack_pack_str_body(&pk, "id", 2);
    msgpack_pack_uint32(&pk, 31337);
    tsdf_msg_type t;
    uint64_t id;
    assert_int_equal(tsdf_proto_peek(sb.data, sb.size, &t, &id), TSDF_EPROTO_TYPE);
    assert_int_equal(id, 31337);
    assert_int_equal(t, TSDF_MSG_NONE);
    assert_int_equal(tsdf_proto_decode_request(sb.data, sb.size, &d, &err), TSDF_EPROTO_TYPE);
    assert_int_equal(d.id, 31337);
    assert_string_equal(err.key, "type");
    msgpack_sbuffer_destroy(&sb);
}

/* Map and sensor names share one limit, 63 bytes: at it they are taken,
 * one byte more is TOO_LARGE (a sensor's used to be 64). */
static void test_name_limits_are_one(void **state)
{
    (void)state;
    char name[TSDF_PROTO_MAX_NAME_LEN + 2];
    memset(name, 'n', sizeof name);
    assert_int_equal(TSDF_PROTO_MAX_NAME_LEN, 63);
    assert_int_equal(tsdf_proto_check_name(name, TSDF_PROTO_MAX_NAME_LEN), TSDF_OK);
    assert_int_equal(tsdf_proto_check_name(name, TSDF_PROTO_MAX_NAME_LEN + 1), TSDF_ETOO_LARGE);
    assert_int_equal(proto_check_sensor_name(name, TSDF_PROTO_MAX_NAME_LEN), TSDF_OK);
    assert_int_equal(proto_check_sensor_name(name, TSDF_PROTO_MAX_NAME_LEN + 1), TSDF_ETOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_frame),
        cmocka_unit_test(test_name_limits_are_one),
        cmocka_unit_test(test_depth_encoding_key),
        cmocka_unit_test(test_ring_keys),
        cmocka_unit_test(test_raycast_ring_keys),
        cmocka_unit_test(test_ring_seq),
        cmocka_unit_test(test_validation_other),
        cmocka_unit_test(test_validation_envelope_and_structure),
    };
    return proto_tests_run("proto_validation", tests, sizeof tests / sizeof tests[0]);
}
