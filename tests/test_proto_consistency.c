/*
 * test_proto_consistency.c - what the wire codec will not write and will
 * not read: the encoders refuse inconsistent requests and replies and leave
 * the buffer as it was; the reply decoder refuses bad sizes, indices and
 * statuses, every way the parts and removed blocks of a mesh can be wrong
 * (naming the key), and an engine layout of another type.
 */
#include "testutil.h"

#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto_samples.h"
#include "proto_testlib.h"
#include "tsdf_proto.h"

/* TSDF_MSG_TYPES is the one list: every type's wire name parses back to
 * it, and the requests are exactly the types a client sends and gets an
 * answer of its own type to, wherever they sit among the values (delete
 * comes after the reply-only error). */
static void test_message_types_are_one_list(void **state)
{
    (void)state;
    int requests = 0;
    for (int t = 0; t < TSDF_MSG_TYPE_COUNT; t++) {
        const char *name = tsdf_msg_type_name((tsdf_msg_type)t);
        tsdf_msg_type back = TSDF_MSG_NONE;
        if (t != TSDF_MSG_NONE) {
            assert_int_equal(tsdf_msg_type_parse(name, strlen(name), &back), TSDF_OK);
            assert_int_equal(back, t);
        }
        const int request = t != TSDF_MSG_NONE && t != TSDF_MSG_FRAME && t != TSDF_MSG_ERROR;
        assert_int_equal(tsdf_msg_type_is_request((tsdf_msg_type)t), request);
        requests += request;
    }
    assert_true(tsdf_msg_type_is_request(TSDF_MSG_DELETE));
    assert_false(tsdf_msg_type_is_request(TSDF_MSG_TYPE_COUNT));
    assert_int_equal(requests, TSDF_MSG_TYPE_COUNT - 3);
}

static void test_encode_checks(void **state)
{
    (void)state;
    tsdf_request q;
    tsdf_buf b;
    tsdf_buf_init(&b);
    uint8_t prefix[3] = {1, 2, 3};
    assert_int_equal(tsdf_buf_append(&b, prefix, 3), TSDF_OK);

    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.depth = NULL;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.width = 0;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EEMPTY_IMAGE);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.T_world_cam[0] = 3.0f;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EBAD_POSE);
    make_frame_request(&q, TSDF_MSG_FRAME);
    strcpy(q.map, "a/b");
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EINVAL);
    make_frame_request(&q, TSDF_MSG_FRAME);
    q.u.frame.frame.K.fx = -1;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_EBAD_INTRINSICS);
    /* Nothing of the failed encodes stayed in the buffer. */
    assert_int_equal(b.len, 3);

    /* The size limit of the buffer. */
    make_frame_request(&q, TSDF_MSG_FRAME);
    b.max_len = 64;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_ETOO_LARGE);
    assert_int_equal(b.len, 3);
    b.max_len = TSDF_PROTO_MAX_MESSAGE_BYTES;
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    assert_memory_equal(b.data, prefix, 3);
    tsdf_request d;
    assert_int_equal(tsdf_proto_decode_request(b.data + 3, b.len - 3, &d, NULL), TSDF_OK);
    tsdf_buf_fini(&b);

    /* Reply encoder consistency checks. */
    tsdf_reply *r = calloc(1, sizeof(*r));
    tsdf_buf_init(&b);
    tsdf_reply_init(r, TSDF_MSG_MESH, 1);
    r->u.mesh.vertex_count = 3;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    uint32_t idx[3] = {0, 1, 5};
    float pos[9] = {0}, nrm[9] = {0};
    r->u.mesh = (tsdf_rep_mesh){.version = 1,
                                .vertex_count = 3,
                                .triangle_count = 1,
                                .positions = pos,
                                .normals = nrm,
                                .indices = idx};
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EBAD_SIZE); /* index 5 >= 3 */
    /* Parts or removed blocks counted but not said to be there, or without
     * their arrays. */
    proto_sample_mesh_parts(r, 21);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    assert_true(b.len > 0);
    size_t ok_len = b.len;
    r->u.mesh.has_blocks = 0;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.block_triangle_start = NULL;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.has_removed = 0;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.removed_coords = NULL;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    /* Inconsistent parts fail the encoder's own decode, with the decoder's
     * code. */
    proto_sample_mesh_parts(r, 21);
    static const uint32_t bad_vstart[4] = {0, 4, 7, 6};
    r->u.mesh.block_vertex_start = bad_vstart;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EBAD_SIZE);
    /* The size check counts every array: counts that each fit in a
     * message but together do not are TOO_LARGE before any payload is read
     * (the pointers here hold far fewer bytes than the counts say). A
     * quarter of per_item vertices is half a message (24 bytes each); half
     * of per_item parts is 20 bytes each, five sixths of one; three
     * quarters of per_item removed blocks are three quarters of one. */
    const uint64_t per_item = TSDF_PROTO_MAX_MESSAGE_BYTES / 12u;
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.vertex_count = per_item / 4;
    r->u.mesh.block_count = per_item / 2;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_ETOO_LARGE);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.vertex_count = per_item / 4;
    r->u.mesh.removed_count = per_item / 4 * 3;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_ETOO_LARGE);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.block_count = per_item + 1;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_ETOO_LARGE);
    proto_sample_mesh_parts(r, 21);
    r->u.mesh.removed_count = per_item + 1;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_ETOO_LARGE);
    /* And the buffer's own limit still holds for what the check lets by. */
    proto_sample_mesh_parts(r, 21);
    tsdf_buf small;
    tsdf_buf_init(&small);
    small.max_len = ok_len - 1;
    assert_int_equal(tsdf_proto_encode_reply(r, &small), TSDF_ETOO_LARGE);
    assert_int_equal(small.len, 0);
    tsdf_buf_fini(&small);
    tsdf_buf_clear(&b);
    tsdf_reply_init(r, TSDF_MSG_FRAME, 1);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EPROTO_TYPE);
    tsdf_reply_init(r, TSDF_MSG_RAYCAST, 1);
    r->u.raycast.width = 4;
    r->u.raycast.height = 4;
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    tsdf_reply_init(r, TSDF_MSG_ERROR, 1);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
    assert_int_equal(b.len, 0);
    tsdf_buf_fini(&b);
    free(r);
}

static void test_reply_validation(void **state)
{
    (void)state;
    tsdf_reply *r = calloc(1, sizeof(*r));
    tsdf_reply *d = calloc(1, sizeof(*d));
    tsdf_buf b;
    tsdf_proto_error err;
    float pos[9] = {0}, nrm[9] = {0};
    uint32_t idx[3] = {0, 1, 2};
    tsdf_reply_init(r, TSDF_MSG_MESH, 1);
    r->u.mesh = (tsdf_rep_mesh){.version = 1,
                                .vertex_count = 3,
                                .triangle_count = 1,
                                .positions = pos,
                                .normals = nrm,
                                .indices = idx};
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);

    /* An index past the vertices, a short payload, a missing status. */
    rebuild(&b, "indices", "indices", v_bin_short);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EBAD_SIZE);
    rebuild(&b, "status", NULL, NULL);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    rebuild(&b, "status", "status", v_u2);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    rebuild(&b, "vertex_count", "vertex_count", v_u2);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EBAD_SIZE);
    rebuild(&b, "v", "v", v_u2);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EVERSION);
    tsdf_buf_fini(&b);

    uint32_t bad_idx[3] = {0, 1, 3};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const char *keys[] = {"v", "type", "id", "status", "vertex_count", "triangle_count"};
    msgpack_pack_map(&pk, 9);
    for (int i = 0; i < 6; i++) {
        msgpack_pack_str(&pk, strlen(keys[i]));
        msgpack_pack_str_body(&pk, keys[i], strlen(keys[i]));
        if (i == 1) {
            msgpack_pack_str(&pk, 4);
            msgpack_pack_str_body(&pk, "mesh", 4);
        } else {
            msgpack_pack_uint32(&pk, i == 0 ? 1u : i == 4 ? 3u : i == 5 ? 1u : 0u);
        }
    }
    const char *bins[] = {"positions", "normals", "indices"};
    for (int i = 0; i < 3; i++) {
        msgpack_pack_str(&pk, strlen(bins[i]));
        msgpack_pack_str_body(&pk, bins[i], strlen(bins[i]));
        msgpack_pack_bin(&pk, i == 2 ? sizeof(bad_idx) : sizeof(pos));
        msgpack_pack_bin_body(&pk, i == 2 ? (const void *)bad_idx : (const void *)pos,
                              i == 2 ? sizeof(bad_idx) : sizeof(pos));
    }
    assert_int_equal(tsdf_proto_decode_reply(sb.data, sb.size, d, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "indices");
    msgpack_sbuffer_destroy(&sb);

    /* An empty error name or message reads as an absent one (the default),
     * as the encoder writes it: found by fuzz/fuzz_reply.c, whose round
     * trip decoded "" the first time and "BAD_POSE" the second. */
    tsdf_reply_init(r, TSDF_MSG_INTEGRATE, 3);
    tsdf_reply_set_error(r, TSDF_EBAD_POSE, "row 2");
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    rebuild(&b, "error", "error", v_str_empty);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_OK);
    assert_string_equal(d->error, "BAD_POSE");
    assert_string_equal(d->message, "row 2");
    rebuild(&b, "message", "message", v_str_empty);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_OK);
    assert_string_equal(d->error, "BAD_POSE");
    assert_string_equal(d->message, tsdf_strerror(TSDF_EBAD_POSE));
    tsdf_buf_fini(&b);
    free(r);
    free(d);
}

/* The engine map v_engine_with writes: blocks_erased 9 and "layout"
 * written by g_engine_layout (NULL: no layout key), as a daemon other than
 * this codec could send it. */
static value_fn g_engine_layout;
static void v_engine_with(msgpack_packer *pk)
{
    msgpack_pack_map(pk, g_engine_layout ? 2 : 1);
    msgpack_pack_str(pk, 13);
    msgpack_pack_str_body(pk, "blocks_erased", 13);
    msgpack_pack_uint32(pk, 9);
    if (g_engine_layout) {
        msgpack_pack_str(pk, 6);
        msgpack_pack_str_body(pk, "layout", 6);
        g_engine_layout(pk);
    }
}

/* Decodes the stats reply in b with its engine map replaced by
 * v_engine_with's, "layout" written by put; returns the code. */
static int stats_with_layout(const tsdf_buf *b, value_fn put, tsdf_reply *d, tsdf_proto_error *err)
{
    g_engine_layout = put;
    rebuild(b, "engine", "engine", v_engine_with);
    return tsdf_proto_decode_reply(g_out, g_out_len, d, err);
}

/* The bin a value function writes next (rebuild's put takes no argument). */
static const void *g_put_bin;
static size_t g_put_bin_len;
static void v_bin_given(msgpack_packer *pk)
{
    msgpack_pack_bin(pk, g_put_bin_len);
    msgpack_pack_bin_body(pk, g_put_bin, g_put_bin_len);
}

/* Decodes the sample of proto_sample_mesh_parts with key replaced by a bin of n
 * bytes at p; returns the code, err says which key. */
static int parts_with_bin(const tsdf_buf *b, const char *key, const void *p, size_t n,
                          tsdf_proto_error *err)
{
    static tsdf_reply d;
    g_put_bin = p;
    g_put_bin_len = n;
    rebuild(b, key, key, v_bin_given);
    return tsdf_proto_decode_reply(g_out, g_out_len, &d, err);
}

/* Every way the parts and the removed blocks of a mesh reply can be wrong
 * is refused with its code and names its key; nothing the decoder accepts
 * lets a triangle reach outside its part. */
static void test_mesh_parts_validation(void **state)
{
    (void)state;
    tsdf_reply *r = calloc(1, sizeof(*r));
    tsdf_reply *d = calloc(1, sizeof(*d));
    tsdf_buf b;
    tsdf_proto_error err;
    assert_non_null(r);
    assert_non_null(d);
    proto_sample_mesh_parts(r, 21);
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);

    /* Each of the three bins alone is missing, of another type, or nil
     * (which is absent). */
    static const char *const part_keys[] = {"block_coords", "block_vertex_start",
                                            "block_triangle_start"};
    for (int i = 0; i < 3; i++) {
        rebuild(&b, part_keys[i], NULL, NULL);
        assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
        assert_string_equal(err.key, part_keys[i]);
        rebuild(&b, part_keys[i], part_keys[i], v_nil);
        assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
        assert_string_equal(err.key, part_keys[i]);
        rebuild(&b, part_keys[i], part_keys[i], v_str_bogus);
        assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
        assert_string_equal(err.key, part_keys[i]);
        rebuild(&b, part_keys[i], part_keys[i], v_u2);
        assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    }

    /* Sizes: coordinates not whole blocks, or for another count of parts
     * than the starts. */
    assert_int_equal(parts_with_bin(&b, "block_coords", g_parts_coords, 10, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "block_coords");
    assert_int_equal(parts_with_bin(&b, "block_coords", g_parts_coords, 24, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "block_vertex_start");
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", g_parts_vstart, 12, &err),
                     TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "block_vertex_start");
    assert_int_equal(parts_with_bin(&b, "block_triangle_start", g_parts_tstart, 15, &err),
                     TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "block_triangle_start");
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", g_parts_vstart, 0, &err),
                     TSDF_EBAD_SIZE);

    /* Starts that do not begin at 0, go back, or end elsewhere than the
     * counts. */
    static const uint32_t not_from_0[4] = {1, 4, 7, 7};
    static const uint32_t going_back[4] = {0, 5, 4, 7};
    static const uint32_t short_end[4] = {0, 4, 6, 6};
    static const uint32_t long_end[4] = {0, 2, 3, 4};
    static const uint32_t huge_end[4] = {0, 4, 7, UINT32_MAX};
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", not_from_0, 16, &err),
                     TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "block_vertex_start");
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", going_back, 16, &err),
                     TSDF_EBAD_SIZE);
    assert_non_null(strstr(err.message, "below"));
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", short_end, 16, &err), TSDF_EBAD_SIZE);
    assert_non_null(strstr(err.message, "vertex_count"));
    assert_int_equal(parts_with_bin(&b, "block_vertex_start", huge_end, 16, &err), TSDF_EBAD_SIZE);
    assert_int_equal(parts_with_bin(&b, "block_triangle_start", long_end, 16, &err),
                     TSDF_EBAD_SIZE);
    assert_non_null(strstr(err.message, "triangle_count"));
    assert_int_equal(parts_with_bin(&b, "block_triangle_start", going_back, 16, &err),
                     TSDF_EBAD_SIZE);

    /* Consistent starts, but a triangle of part 1 that uses a vertex of
     * part 0 (still below vertex_count), and part 0 one that uses part 1's. */
    static const uint32_t cross_back[9] = {0, 1, 2, 0, 2, 3, 4, 5, 3};
    static const uint32_t cross_on[9] = {0, 1, 4, 0, 2, 3, 4, 5, 6};
    assert_int_equal(parts_with_bin(&b, "indices", cross_back, sizeof(cross_back), &err),
                     TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "indices");
    assert_non_null(strstr(err.message, "part 1"));
    assert_int_equal(parts_with_bin(&b, "indices", cross_on, sizeof(cross_on), &err),
                     TSDF_EBAD_SIZE);
    assert_non_null(strstr(err.message, "part 0"));
    /* Starts that move a triangle into another part make its indices
     * foreign too. */
    static const uint32_t moved[4] = {0, 1, 3, 3};
    assert_int_equal(parts_with_bin(&b, "block_triangle_start", moved, 16, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "indices");

    /* removed and full: each without the other, of another type, or of a
     * size that is no whole blocks. */
    rebuild(&b, "removed", NULL, NULL);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "removed");
    rebuild(&b, "full", NULL, NULL);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "full");
    rebuild(&b, "full", "full", v_u2);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "full");
    rebuild(&b, "removed", "removed", v_str_bogus);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "removed");
    assert_int_equal(parts_with_bin(&b, "removed", g_parts_removed, 13, &err), TSDF_EBAD_SIZE);
    assert_string_equal(err.key, "removed");
    /* A repeated key is refused, as for every key. */
    g_put_bin = g_parts_removed;
    g_put_bin_len = 12;
    rebuild(&b, NULL, "removed", v_bin_given);
    assert_int_equal(tsdf_proto_decode_reply(g_out, g_out_len, d, &err), TSDF_EPROTO_KEY);
    /* No removed block at all is a valid answer. */
    assert_int_equal(parts_with_bin(&b, "removed", g_parts_removed, 0, &err), TSDF_OK);

    /* Without any of the new keys (an older daemon's reply, or one to an
     * old-style request) the same mesh decodes as a whole mesh. */
    tsdf_buf cur = b;
    static const char *const new_keys[] = {"block_coords", "block_vertex_start",
                                           "block_triangle_start", "removed", "full"};
    for (int i = 0; i < 5; i++) {
        rebuild(&cur, new_keys[i], NULL, NULL);
        if (i > 0)
            tsdf_buf_fini(&cur);
        cur = take_rebuilt();
    }
    assert_int_equal(tsdf_proto_decode_reply(cur.data, cur.len, d, &err), TSDF_OK);
    assert_int_equal(d->u.mesh.vertex_count, 7);
    assert_int_equal(d->u.mesh.triangle_count, 3);
    assert_int_equal(d->u.mesh.has_blocks, 0);
    assert_int_equal(d->u.mesh.has_removed, 0);
    assert_int_equal(d->u.mesh.full, 0);
    tsdf_buf_fini(&cur);
    tsdf_buf_fini(&b);

    /* Engine stats: a layout of another type is refused; one of no known
     * name (a newer daemon's) reads as 0, as does none. */
    tsdf_reply_init(r, TSDF_MSG_STATS, 22);
    r->u.stats.has_engine = 1;
    r->u.stats.engine.layout = TSDF_LAYOUT_F32;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_OK);
    assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, d, &err), TSDF_OK);
    assert_int_equal(d->u.stats.engine.layout, TSDF_LAYOUT_F32);
    assert_int_equal(stats_with_layout(&b, v_u2, d, &err), TSDF_EPROTO_KEY);
    assert_string_equal(err.key, "layout");
    assert_int_equal(stats_with_layout(&b, v_str_bogus, d, &err), TSDF_OK);
    assert_int_equal(d->u.stats.engine.layout, 0);
    assert_int_equal(d->u.stats.engine.blocks_erased, 9);
    assert_int_equal(stats_with_layout(&b, v_str_long, d, &err), TSDF_OK);
    assert_int_equal(d->u.stats.engine.layout, 0);
    assert_int_equal(stats_with_layout(&b, v_str_f32, d, &err), TSDF_OK);
    assert_int_equal(d->u.stats.engine.layout, TSDF_LAYOUT_F32);
    assert_int_equal(stats_with_layout(&b, NULL, d, &err), TSDF_OK);
    assert_int_equal(d->u.stats.engine.layout, 0);
    tsdf_buf_fini(&b);
    free(r);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_types_are_one_list),
        cmocka_unit_test(test_encode_checks),
        cmocka_unit_test(test_reply_validation),
        cmocka_unit_test(test_mesh_parts_validation),
    };
    return proto_tests_run("proto_consistency", tests, sizeof tests / sizeof tests[0]);
}
