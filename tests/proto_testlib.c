/*
 * proto_testlib.c - what the wire codec's tests share (see proto_testlib.h).
 */
#include "testutil.h"

#include "proto_testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sample frames ------------------------------------------------------ */

uint16_t g_depth_u16[W * H];
float g_depth_f32[W * H];
uint8_t g_rgb[W * H * 3];

void fill_payloads(void)
{
    for (int i = 0; i < W * H; i++) {
        g_depth_u16[i] = (uint16_t)(1000 + i);
        g_depth_f32[i] = 1.0f + 0.01f * (float)i;
        g_rgb[3 * i] = (uint8_t)i;
        g_rgb[3 * i + 1] = (uint8_t)(2 * i);
        g_rgb[3 * i + 2] = (uint8_t)(3 * i);
    }
}

/* A rotation of 30 degrees about z with a translation: a non-trivial pose. */
void test_pose(float T[16])
{
    float c = cosf(0.5235988f), s = sinf(0.5235988f);
    float M[16] = {c, -s, 0, 1.5f, s, c, 0, -0.25f, 0, 0, 1, 0.75f, 0, 0, 0, 1};
    memcpy(T, M, sizeof(M));
}

void make_frame_request(tsdf_request *q, tsdf_msg_type type)
{
    tsdf_request_init(q, type);
    q->id = 42;
    strcpy(q->map, "kitchen_1");
    q->u.frame.sensor.is_id = 1;
    q->u.frame.sensor.id = 7;
    q->u.frame.seq = 123456789012ull;
    q->u.frame.stamp_ns = 1700000000123456789ull;
    tsdf_frame *f = &q->u.frame.frame;
    f->width = W;
    f->height = H;
    f->K = (tsdf_intrinsics){5.5f, 6.5f, 3.5f, 2.5f};
    test_pose(f->T_world_cam);
    f->depth_format = TSDF_DEPTH_U16;
    f->depth = g_depth_u16;
    f->depth_scale = 0.0002f;
    f->min_depth_m = 0.2f;
    f->max_depth_m = 4.0f;
    f->rgb = g_rgb;
}

void encode_req(const tsdf_request *q, tsdf_buf *b)
{
    tsdf_buf_init(b);
    assert_int_equal(tsdf_proto_encode_request(q, b), TSDF_OK);
    assert_true(b->len > 0);
}

/* ---- building invalid messages ----------------------------------------- */

size_t g_out_len;
uint8_t *g_out;

void rebuild(const tsdf_buf *src, const char *drop, const char *put_key, value_fn put)
{
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&res, (const char *)src->data, src->len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(res.data.type, MSGPACK_OBJECT_MAP);
    const msgpack_object_map *m = &res.data.via.map;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        int is_drop = drop && k->via.str.size == strlen(drop) &&
                      memcmp(k->via.str.ptr, drop, k->via.str.size) == 0;
        n += is_drop ? 0 : 1;
    }
    msgpack_pack_map(&pk, n + (put_key ? 1 : 0));
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (drop && k->via.str.size == strlen(drop) &&
            memcmp(k->via.str.ptr, drop, k->via.str.size) == 0)
            continue;
        msgpack_pack_object(&pk, *k);
        msgpack_pack_object(&pk, m->ptr[i].val);
    }
    if (put_key) {
        msgpack_pack_str(&pk, strlen(put_key));
        msgpack_pack_str_body(&pk, put_key, strlen(put_key));
        put(&pk);
    }
    free(g_out);
    g_out = malloc(sb.size);
    assert_non_null(g_out);
    memcpy(g_out, sb.data, sb.size);
    g_out_len = sb.size;
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_destroy(&res);
}

/* Replaces key with a new value (drop + put). */
int req_with(const tsdf_buf *src, const char *key, value_fn put, tsdf_proto_error *err)
{
    rebuild(src, key, put ? key : NULL, put);
    tsdf_request *d = malloc(sizeof(*d));
    int rc = tsdf_proto_decode_request(g_out, g_out_len, d, err);
    free(d);
    return rc;
}

void v_u0(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0);
}
void v_u2(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 2);
}
void v_u9000(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 9000);
}
void v_u5000(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 5000);
}
void v_neg(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, -3);
}
void v_f0(msgpack_packer *pk)
{
    msgpack_pack_float(pk, 0.0f);
}
void v_fnan(msgpack_packer *pk)
{
    msgpack_pack_float(pk, NAN);
}
void v_finf(msgpack_packer *pk)
{
    msgpack_pack_double(pk, INFINITY);
}
void v_fhuge(msgpack_packer *pk)
{
    msgpack_pack_double(pk, 1e300); /* finite as a double, not as a float */
}
void v_pose_huge(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 16);
    for (int i = 0; i < 16; i++)
        msgpack_pack_double(pk, i == 3 ? 1e300 : (i % 5 == 0 ? 1.0 : 0.0));
}
void v_f10(msgpack_packer *pk)
{
    msgpack_pack_float(pk, 10.0f);
}
void v_nil(msgpack_packer *pk)
{
    msgpack_pack_nil(pk);
}
void v_true(msgpack_packer *pk)
{
    msgpack_pack_true(pk);
}
void v_str_bogus(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "bogus", 5);
}
void v_str_u8(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 2);
    msgpack_pack_str_body(pk, "u8", 2);
}
void v_str_f32(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "f32", 3);
}
void v_str_long(msgpack_packer *pk)
{
    char s[80];
    memset(s, 'a', sizeof(s));
    msgpack_pack_str(pk, sizeof(s));
    msgpack_pack_str_body(pk, s, sizeof(s));
}
/* Not UTF-8: a stray FF and a surrogate. */
void v_str_bad_utf8(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "a\xff\xed\xa0\x80", 5);
}
/* Valid UTF-8 with a terminal escape in it. */
void v_str_ctrl(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 6);
    msgpack_pack_str_body(pk, "a\x1b[2Jb", 6);
}
void v_str_dotdot(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 6);
    msgpack_pack_str_body(pk, "../etc", 6);
}
void v_str_empty(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 0);
}
void v_str_space(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "a b", 3);
}
void v_bin_short(msgpack_packer *pk)
{
    msgpack_pack_bin(pk, 10);
    msgpack_pack_bin_body(pk, g_rgb, 10);
}
static void v_pose_n(msgpack_packer *pk, const float *T, int n)
{
    msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        msgpack_pack_float(pk, T[i]);
}
void v_pose_scaled(msgpack_packer *pk)
{
    float T[16] = {2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
void v_pose_mirror(msgpack_packer *pk)
{
    float T[16] = {-1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
void v_pose_lastrow(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5f, 1};
    v_pose_n(pk, T, 16);
}
void v_pose_nan(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, NAN, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
void v_pose_15(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 15);
}
void v_pose_str(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 16);
    for (int i = 0; i < 16; i++)
        v_str_bogus(pk);
}
void v_box_inverted(msgpack_packer *pk)
{
    float b[6] = {1, 1, 1, 0, 2, 2};
    v_pose_n(pk, b, 6);
}

void v_str_zstd(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "zstd", 4);
}
void v_str_png(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "png", 3);
}

void v_str_frame(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "frame", 5);
}
void v_bin_empty(msgpack_packer *pk)
{
    msgpack_pack_bin(pk, 0);
}

/* The last rebuild as a buffer of its own (to change a second key). */
tsdf_buf take_rebuilt(void)
{
    tsdf_buf b = {g_out, g_out_len, g_out_len, g_out_len, 0};
    g_out = NULL;
    return b;
}

/* ---- main --------------------------------------------------------------- */

int proto_tests_run(const char *group, const struct CMUnitTest *tests, size_t count)
{
    fill_payloads();
    int rc = _cmocka_run_group_tests(group, tests, count, NULL, NULL);
    free(g_out);
    g_out = NULL;
    return rc;
}
