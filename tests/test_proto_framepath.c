/*
 * test_proto_framepath.c - what the codec does for the frame path and for
 * raycast replies of the size asked for: a raw depth payload starts at a
 * multiple of TSDF_PROTO_PAYLOAD_ALIGN in its message (whatever came
 * before it), encoders write into a fixed buffer of the bound they give
 * and no further, the struct check gives the decoder's codes without any
 * decoding, and the raycast keys "normals", "scale" and "after" (and the
 * mesh's "after") round-trip, are written only when not the default, and
 * are refused with their own codes when bad.
 */
#include "testutil.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "proto_testlib.h"
#include "tsdf_proto.h"

/* The offset of the bytes of bin key in a message (its value's body). */
static size_t bin_offset(const tsdf_buf *b, const char *key)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&u, (const char *)b->data, b->len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    const msgpack_object_map *m = &u.data.via.map;
    size_t at = SIZE_MAX;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->via.str.size == strlen(key) && memcmp(k->via.str.ptr, key, k->via.str.size) == 0) {
            assert_int_equal(m->ptr[i].val.type, MSGPACK_OBJECT_BIN);
            at = (size_t)((const uint8_t *)m->ptr[i].val.via.bin.ptr - b->data);
        }
    }
    msgpack_unpacked_destroy(&u);
    assert_true(at != SIZE_MAX);
    return at;
}

static void test_depth_aligned(void **state)
{
    (void)state;
    static uint16_t big[640 * 480];
    tsdf_request q;
    tsdf_request *d = malloc(sizeof(*d));
    assert_non_null(d);
    /* Every length of sensor name moves what precedes the depth by a byte;
     * the small, the bin 16 and the bin 32 payload each stay aligned. */
    for (int size = 0; size < 3; size++) {
        for (int len = 0; len < 20; len++) {
            make_frame_request(&q, TSDF_MSG_FRAME);
            if (size == 1) {
                q.u.frame.frame.width = 100, q.u.frame.frame.height = 100;
                q.u.frame.frame.K = (tsdf_intrinsics){80, 80, 50, 50};
                q.u.frame.frame.rgb = NULL;
                q.u.frame.frame.depth = big;
            } else if (size == 2) {
                q.u.frame.frame.width = 640, q.u.frame.frame.height = 480;
                q.u.frame.frame.K = (tsdf_intrinsics){525, 525, 319.5f, 239.5f};
                q.u.frame.frame.rgb = NULL;
                q.u.frame.frame.depth = big;
            }
            if (len > 0) {
                q.u.frame.sensor.is_id = 0;
                memset(q.u.frame.sensor.name, 'a', (size_t)len);
                q.u.frame.sensor.name[len] = '\0';
            }
            tsdf_buf b;
            encode_req(&q, &b);
            assert_int_equal(bin_offset(&b, "depth") % TSDF_PROTO_PAYLOAD_ALIGN, 0);
            assert_true(b.len <= tsdf_proto_request_bound(&q));
            /* The pad is an unknown key to the decoder: the frame is intact. */
            assert_int_equal(tsdf_proto_decode_request(b.data, b.len, d, NULL), TSDF_OK);
            size_t n = (size_t)q.u.frame.frame.width * q.u.frame.frame.height * 2u;
            assert_int_equal(d->u.frame.frame.depth_size_bytes, n);
            assert_memory_equal(d->u.frame.frame.depth, q.u.frame.frame.depth, n);
            tsdf_buf_fini(&b);
        }
    }
    /* The alignment counts from the message's start, not the buffer's. */
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_buf_append(&b, "xyz", 3), TSDF_OK);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    tsdf_buf m = {b.data + 3, b.len - 3, b.len - 3, b.len - 3, 1};
    assert_int_equal(bin_offset(&m, "depth") % TSDF_PROTO_PAYLOAD_ALIGN, 0);
    tsdf_buf_fini(&b);
    free(d);
}

static void test_fixed_buffer(void **state)
{
    (void)state;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    size_t bound = tsdf_proto_request_bound(&q);
    uint8_t *mem = malloc(bound);
    assert_non_null(mem);
    tsdf_buf b;
    tsdf_buf_init_fixed(&b, mem, bound);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    assert_true(b.data == mem);
    size_t len = b.len;
    tsdf_request d;
    assert_int_equal(tsdf_proto_decode_request(mem, len, &d, NULL), TSDF_OK);
    /* One byte short: refused, nothing kept, the caller's memory not
     * grown or freed (fini forgets it). */
    tsdf_buf_init_fixed(&b, mem, len - 1);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    assert_int_equal(b.len, 0);
    assert_true(b.data == mem);
    tsdf_buf_fini(&b);
    assert_null(b.data);
    assert_int_equal(b.fixed, 0);

    /* A reply's bound holds what it writes. */
    static float depth[W * H], normals[W * H * 3];
    tsdf_reply *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    tsdf_reply_init(r, TSDF_MSG_RAYCAST, 9);
    r->u.raycast = (tsdf_rep_raycast){
        .width = W, .height = H, .depth_m = depth, .normals = normals, .rgb = g_rgb, .version = 77};
    bound = tsdf_proto_reply_bound(r);
    assert_true(bound <= 4096u + 1024u + W * H * 19u);
    uint8_t *rm = malloc(bound);
    assert_non_null(rm);
    tsdf_buf_init_fixed(&b, rm, bound);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    tsdf_reply *dr = calloc(1, sizeof(*dr));
    assert_non_null(dr);
    assert_int_equal(tsdf_proto_decode_reply(rm, b.len, dr, NULL), TSDF_OK);
    assert_int_equal(dr->u.raycast.version, 77);
    assert_non_null(dr->u.raycast.normals);
    free(rm);
    free(dr);
    free(r);
    free(mem);
}

/* The struct check and the decoder agree on each fault, and the check
 * decodes nothing: it takes a struct no message was made from. */
static void test_check_request(void **state)
{
    (void)state;
    tsdf_request q;
    make_frame_request(&q, TSDF_MSG_FRAME);
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_OK);
    q.u.frame.frame.depth_scale = 0;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EBAD_DEPTH_RANGE);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.min_depth_m = 3, q.u.frame.frame.max_depth_m = 2;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EBAD_DEPTH_RANGE);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.sensor.is_id = 0;
    strcpy(q.u.frame.sensor.name, "a b");
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EINVAL);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.width = 9000;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_ETOO_LARGE);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.K.cx = 1.0f / 0.0f;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EBAD_INTRINSICS);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.depth_encoding = TSDF_DEPTH_ENC_PNG;
    q.u.frame.frame.depth_format = TSDF_DEPTH_F32;
    q.u.frame.depth_coded = "x";
    q.u.frame.depth_coded_bytes = 1;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EPROTO_KEY);
    make_frame_request(&q, TSDF_MSG_FRAME);
    memset(q.map, 'a', sizeof(q.map));
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EINVAL);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.type = TSDF_MSG_ERROR;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EPROTO_TYPE);
    tsdf_request_init(&q, TSDF_MSG_SAVE);
    strcpy(q.u.path.path, "\xff");
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EINVAL);
    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.u.mesh.after = (tsdf_query_after)7;
    assert_int_equal(tsdf_proto_check_request(&q), TSDF_EINVAL);
    assert_int_equal(tsdf_proto_check_request(NULL), TSDF_EINVAL);
}

static void make_raycast(tsdf_request *q)
{
    tsdf_request_init(q, TSDF_MSG_RAYCAST);
    q->id = 5;
    q->u.raycast.width = 64;
    q->u.raycast.height = 48;
    q->u.raycast.K = (tsdf_intrinsics){50, 50, 31.5f, 23.5f};
}

static int contains(const tsdf_buf *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++) {
        if (memcmp(b->data + i, s, n) == 0)
            return 1;
    }
    return 0;
}

static void test_raycast_options(void **state)
{
    (void)state;
    tsdf_request q, d;
    tsdf_buf b;
    tsdf_proto_error err;

    /* The defaults: normals, full size, after the integrated frames, and
     * none of the three keys on the wire (what older clients sent). */
    make_raycast(&q);
    assert_int_equal(q.u.raycast.want_normals, 1);
    assert_int_equal(q.u.raycast.scale, 1);
    encode_req(&q, &b);
    assert_false(contains(&b, "normals"));
    assert_false(contains(&b, "scale"));
    assert_false(contains(&b, "after"));
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.u.raycast.want_normals, 1);
    assert_int_equal(d.u.raycast.scale, 1);
    assert_int_equal(d.u.raycast.after, TSDF_AFTER_INTEGRATED);
    /* Each bad value has its code and names its key. */
    assert_int_equal(req_with(&b, "normals", v_u2, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "normals");
    assert_int_equal(req_with(&b, "normals", v_nil, &err), TSDF_OK);
    assert_int_equal(req_with(&b, "scale", v_u0, &err), TSDF_EINVAL);
    assert_string_equal(err.key, "scale");
    assert_int_equal(req_with(&b, "scale", v_u9000, &err), TSDF_EINVAL);
    assert_int_equal(req_with(&b, "scale", v_neg, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "scale", v_f10, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "scale", v_str_bogus, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "scale", v_u2, &err), TSDF_OK);
    assert_int_equal(req_with(&b, "after", v_str_bogus, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "after");
    assert_int_equal(req_with(&b, "after", v_u2, &err), TSDF_EPROTO_KEY);
    assert_int_equal(req_with(&b, "after", v_nil, &err), TSDF_OK);
    tsdf_buf_fini(&b);

    /* Depth alone at a quarter of the size, after the queued frames. */
    make_raycast(&q);
    q.u.raycast.want_normals = 0;
    q.u.raycast.scale = 4;
    q.u.raycast.after = TSDF_AFTER_QUEUED;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.u.raycast.want_normals, 0);
    assert_int_equal(d.u.raycast.scale, 4);
    assert_int_equal(d.u.raycast.after, TSDF_AFTER_QUEUED);
    tsdf_buf_fini(&b);

    /* A scale that leaves no pixel, or beyond the limit, is refused by the
     * encoder as by the decoder. */
    make_raycast(&q);
    q.u.raycast.width = 7;
    q.u.raycast.K = (tsdf_intrinsics){50, 50, 3, 23.5f};
    q.u.raycast.scale = 8;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    q.u.raycast.scale = TSDF_PROTO_MAX_RAYCAST_SCALE + 1;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    q.u.raycast.scale = 0;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    assert_int_equal(b.len, 0);

    /* The reply size counts only what is asked for: 4096 x 4096 fits
     * neither with normals nor as depth alone (64 MiB and its envelope),
     * 2048 x 2048 with normals just not, as depth alone easily. */
    make_raycast(&q);
    q.u.raycast.width = 4096;
    q.u.raycast.height = 4096;
    q.u.raycast.K = (tsdf_intrinsics){3200, 3200, 2048, 2048};
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    q.u.raycast.want_normals = 0;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    q.u.raycast.scale = 2;
    q.u.raycast.want_normals = 1;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    assert_int_equal(tsdf_proto_raycast_reply_bytes(&q.u.raycast), 2048u * 2048u * 16u + 4096u);
    q.u.raycast.want_normals = 0;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    tsdf_buf_fini(&b);

    /* The scaled camera: each coarse pixel centre is the centre of the
     * scale x scale fine pixels it stands for, at the same field of view. */
    make_raycast(&q);
    q.u.raycast.width = 65; /* rounded down */
    q.u.raycast.scale = 2;
    uint32_t w, h;
    tsdf_intrinsics K;
    tsdf_proto_raycast_scaled(&q.u.raycast, &w, &h, &K);
    assert_int_equal(w, 32);
    assert_int_equal(h, 24);
    assert_true(K.fx == 25.0f && K.fy == 25.0f);
    assert_true(K.cx == 15.5f && K.cy == 11.5f);
}

static void test_mesh_after_and_replies(void **state)
{
    (void)state;
    tsdf_request q, d;
    tsdf_buf b;
    tsdf_proto_error err;
    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 6;
    encode_req(&q, &b);
    assert_false(contains(&b, "after"));
    assert_int_equal(req_with(&b, "after", v_str_bogus, &err), TSDF_EPROTO_KEY);
    tsdf_buf_fini(&b);
    q.u.mesh.after = TSDF_AFTER_QUEUED;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.u.mesh.after, TSDF_AFTER_QUEUED);
    tsdf_buf_fini(&b);

    /* A raycast reply of depth alone: no normals key, and the decoder
     * takes it (NULL normals); a reply from before "version" reads 0. */
    static float depth[W * H], normals[W * H * 3];
    tsdf_reply *r = calloc(1, sizeof(*r)), *dr = calloc(1, sizeof(*dr));
    assert_non_null(r);
    assert_non_null(dr);
    tsdf_reply_init(r, TSDF_MSG_RAYCAST, 9);
    r->u.raycast = (tsdf_rep_raycast){.width = W, .height = H, .depth_m = depth, .version = 3};
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    assert_false(contains(&b, "normals"));
    assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, dr, NULL), TSDF_OK);
    assert_null(dr->u.raycast.normals);
    assert_int_equal(dr->u.raycast.version, 3);
    tsdf_buf_clear(&b);
    /* Normals of the wrong size are still refused. */
    r->u.raycast =
        (tsdf_rep_raycast){.width = W, .height = H, .depth_m = depth, .normals = normals};
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    assert_int_equal(tsdf_proto_decode_reply(b.data, b.len - 1, dr, NULL), TSDF_EFORMAT);
    tsdf_buf_fini(&b);
    free(r);
    free(dr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depth_aligned),          cmocka_unit_test(test_fixed_buffer),
        cmocka_unit_test(test_check_request),          cmocka_unit_test(test_raycast_options),
        cmocka_unit_test(test_mesh_after_and_replies),
    };
    return proto_tests_run("proto_framepath", tests, sizeof(tests) / sizeof(tests[0]));
}
