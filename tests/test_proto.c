/*
 * test_proto.c - the wire codec: every message type round-trips, every
 * validation rule yields its specific code, and truncated, mutated or random
 * bytes never crash the decoder and never decode as valid when truncated.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto_samples.h"
#include "tsdf_pose.h"
#include "tsdf_proto.h"

#define W 8
#define H 6

static uint16_t g_depth_u16[W * H];
static float g_depth_f32[W * H];
static uint8_t g_rgb[W * H * 3];

static void fill_payloads(void)
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
static void test_pose(float T[16])
{
    float c = cosf(0.5235988f), s = sinf(0.5235988f);
    float M[16] = {c, -s, 0, 1.5f, s, c, 0, -0.25f, 0, 0, 1, 0.75f, 0, 0, 0, 1};
    memcpy(T, M, sizeof(M));
}

static void make_frame_request(tsdf_request *q, tsdf_msg_type type)
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

static void encode_req(const tsdf_request *q, tsdf_buf *b)
{
    tsdf_buf_init(b);
    assert_int_equal(tsdf_proto_encode_request(q, b), TSDF_OK);
    assert_true(b->len > 0);
}

/* ---- round trips: requests --------------------------------------------- */

/* 1 when the encoded bytes hold the text s (a key name, say). */
static int buf_contains(const tsdf_buf *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->data + i, s, n) == 0)
            return 1;
    return 0;
}

static void test_roundtrip_frame_u16(void **state)
{
    (void)state;
    tsdf_request q, d;
    make_frame_request(&q, TSDF_MSG_FRAME);
    tsdf_buf b;
    encode_req(&q, &b);
    tsdf_proto_error err;
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, &err), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_FRAME);
    assert_int_equal(d.id, 42);
    assert_string_equal(d.map, "kitchen_1");
    assert_int_equal(d.u.frame.sensor.is_id, 1);
    assert_int_equal(d.u.frame.sensor.id, 7);
    assert_true(d.u.frame.seq == 123456789012ull);
    assert_true(d.u.frame.stamp_ns == 1700000000123456789ull);
    const tsdf_frame *f = &d.u.frame.frame;
    assert_int_equal(f->width, W);
    assert_int_equal(f->height, H);
    assert_true(f->K.fx == 5.5f && f->K.fy == 6.5f && f->K.cx == 3.5f && f->K.cy == 2.5f);
    assert_memory_equal(f->T_world_cam, q.u.frame.frame.T_world_cam, sizeof(float) * 16);
    assert_int_equal(f->depth_format, TSDF_DEPTH_U16);
    assert_true(f->depth_scale == 0.0002f);
    assert_true(f->min_depth_m == 0.2f && f->max_depth_m == 4.0f);
    assert_memory_equal(f->depth, g_depth_u16, sizeof(g_depth_u16));
    assert_non_null(f->rgb);
    assert_memory_equal(f->rgb, g_rgb, sizeof(g_rgb));
    /* Zero-copy: the payload lies inside the message. */
    assert_true((const uint8_t *)f->depth >= b.data &&
                (const uint8_t *)f->depth + sizeof(g_depth_u16) <= b.data + b.len);
    tsdf_buf_fini(&b);
}

static void test_roundtrip_integrate_f32(void **state)
{
    (void)state;
    tsdf_request q, d;
    make_frame_request(&q, TSDF_MSG_INTEGRATE);
    q.u.frame.sensor.is_id = 0;
    strcpy(q.u.frame.sensor.name, "front/cam0");
    q.u.frame.frame.depth_format = TSDF_DEPTH_F32;
    q.u.frame.frame.depth = g_depth_f32;
    q.u.frame.frame.rgb = NULL;
    tsdf_buf b;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_INTEGRATE);
    assert_int_equal(d.u.frame.sensor.is_id, 0);
    assert_string_equal(d.u.frame.sensor.name, "front/cam0");
    assert_int_equal(d.u.frame.frame.depth_format, TSDF_DEPTH_F32);
    assert_memory_equal(d.u.frame.frame.depth, g_depth_f32, sizeof(g_depth_f32));
    assert_null(d.u.frame.frame.rgb);
    tsdf_buf_fini(&b);
}

static void test_roundtrip_small_requests(void **state)
{
    (void)state;
    tsdf_request q, d;
    tsdf_buf b;

    tsdf_request_init(&q, TSDF_MSG_RAYCAST);
    q.id = 9;
    q.u.raycast.width = 64;
    q.u.raycast.height = 48;
    q.u.raycast.K = (tsdf_intrinsics){50, 51, 31.5f, 23.5f};
    test_pose(q.u.raycast.T_world_cam);
    q.u.raycast.min_depth_m = 0.3f;
    q.u.raycast.max_depth_m = 3.0f;
    q.u.raycast.want_rgb = 1;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_RAYCAST);
    assert_int_equal(d.id, 9);
    assert_string_equal(d.map, "default");
    assert_int_equal(d.u.raycast.width, 64);
    assert_int_equal(d.u.raycast.height, 48);
    assert_true(d.u.raycast.K.fy == 51.0f);
    assert_memory_equal(d.u.raycast.T_world_cam, q.u.raycast.T_world_cam, 64);
    assert_true(d.u.raycast.min_depth_m == 0.3f && d.u.raycast.max_depth_m == 3.0f);
    assert_int_equal(d.u.raycast.want_rgb, 1);
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 10;
    q.u.mesh.use_box = 1;
    q.u.mesh.box = (tsdf_aabb){{-1, -2, -3}, {1, 2, 3.5f}};
    q.u.mesh.since_version = 77;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_MESH);
    assert_int_equal(d.u.mesh.use_box, 1);
    assert_true(d.u.mesh.box.min[1] == -2.0f && d.u.mesh.box.max[2] == 3.5f);
    assert_int_equal(d.u.mesh.since_version, 77);
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 11;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.u.mesh.use_box, 0);
    assert_int_equal(d.u.mesh.since_version, 0);
    assert_int_equal(d.u.mesh.by_block, 0);
    /* A mesh request that does not ask for parts has the bytes it had
     * before by_block existed. */
    assert_false(buf_contains(&b, "by_block"));
    size_t whole_len = b.len;
    tsdf_buf_fini(&b);

    q.u.mesh.by_block = 1;
    q.u.mesh.since_version = 78;
    encode_req(&q, &b);
    assert_true(buf_contains(&b, "by_block"));
    assert_int_equal(b.len, whole_len + strlen("by_block") + 2); /* fixstr head, true */
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.u.mesh.by_block, 1);
    assert_int_equal(d.u.mesh.since_version, 78);
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_SAVE);
    q.id = 12;
    strcpy(q.map, "m2");
    strcpy(q.u.path.path, "/var/lib/tsdfd/m2.tsdf");
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_SAVE);
    assert_string_equal(d.map, "m2");
    assert_string_equal(d.u.path.path, "/var/lib/tsdfd/m2.tsdf");
    tsdf_buf_fini(&b);

    tsdf_request_init(&q, TSDF_MSG_LOAD);
    q.id = 13;
    encode_req(&q, &b);
    assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
    assert_int_equal(d.type, TSDF_MSG_LOAD);
    assert_string_equal(d.u.path.path, "");
    tsdf_buf_fini(&b);

    const tsdf_msg_type plain[] = {TSDF_MSG_STATS, TSDF_MSG_RESET, TSDF_MSG_DELETE, TSDF_MSG_MAPS,
                                   TSDF_MSG_PING};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        tsdf_request_init(&q, plain[i]);
        q.id = 100 + i;
        strcpy(q.map, "other");
        encode_req(&q, &b);
        assert_int_equal(tsdf_proto_decode_request(b.data, b.len, &d, NULL), TSDF_OK);
        assert_int_equal(d.type, plain[i]);
        assert_int_equal(d.id, 100 + i);
        if (plain[i] == TSDF_MSG_STATS || plain[i] == TSDF_MSG_RESET || plain[i] == TSDF_MSG_DELETE)
            assert_string_equal(d.map, "other");
        tsdf_msg_type t;
        uint64_t id;
        assert_int_equal(tsdf_proto_peek(b.data, b.len, &t, &id), TSDF_OK);
        assert_int_equal(t, plain[i]);
        assert_int_equal(id, 100 + i);
        tsdf_buf_fini(&b);
    }
}

/* ---- round trips: replies ---------------------------------------------- */

static void roundtrip_reply(const tsdf_reply *r, tsdf_reply *d, tsdf_buf *b)
{
    tsdf_buf_init(b);
    assert_int_equal(tsdf_proto_encode_reply(r, b), TSDF_OK);
    assert_int_equal(tsdf_proto_decode_reply(b->data, b->len, d, NULL), TSDF_OK);
    assert_int_equal(d->type, r->type);
    assert_int_equal(d->id, r->id);
    assert_int_equal(d->status, r->status);
}

static void test_roundtrip_replies(void **state)
{
    (void)state;
    tsdf_reply *r = calloc(1, sizeof(*r));
    tsdf_reply *d = calloc(1, sizeof(*d));
    assert_non_null(r);
    assert_non_null(d);
    tsdf_buf b;

    tsdf_reply_init(r, TSDF_MSG_INTEGRATE, 5);
    r->u.integrate.seq = 99;
    r->u.integrate.version = 1234;
    r->u.integrate.integrate_ms = 2.5;
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.integrate.seq, 99);
    assert_int_equal(d->u.integrate.version, 1234);
    assert_true(d->u.integrate.integrate_ms == 2.5);
    tsdf_buf_fini(&b);

    float depth[W * H], normals[W * H * 3];
    for (int i = 0; i < W * H; i++) {
        depth[i] = (i % 5 == 0) ? NAN : 0.5f + (float)i;
        normals[3 * i] = 0, normals[3 * i + 1] = 0, normals[3 * i + 2] = -1;
    }
    tsdf_reply_init(r, TSDF_MSG_RAYCAST, 6);
    r->u.raycast.width = W;
    r->u.raycast.height = H;
    r->u.raycast.depth_m = depth;
    r->u.raycast.normals = normals;
    r->u.raycast.rgb = g_rgb;
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.raycast.width, W);
    assert_int_equal(d->u.raycast.height, H);
    assert_memory_equal(d->u.raycast.depth_m, depth, sizeof(depth));
    assert_memory_equal(d->u.raycast.normals, normals, sizeof(normals));
    assert_memory_equal(d->u.raycast.rgb, g_rgb, sizeof(g_rgb));
    tsdf_buf_fini(&b);

    proto_sample_mesh_quad(r, 7);
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.mesh.version, 55);
    assert_int_equal(d->u.mesh.vertex_count, 4);
    assert_int_equal(d->u.mesh.triangle_count, 2);
    assert_memory_equal(d->u.mesh.positions, g_quad_pos, sizeof(g_quad_pos));
    assert_memory_equal(d->u.mesh.normals, g_quad_nrm, sizeof(g_quad_nrm));
    assert_memory_equal(d->u.mesh.colors, g_quad_col, sizeof(g_quad_col));
    assert_memory_equal(d->u.mesh.indices, g_quad_idx, sizeof(g_quad_idx));
    /* A mesh of no parts and no removed blocks says nothing of them: the
     * reply to an old-style request is what it was. */
    assert_int_equal(d->u.mesh.has_blocks, 0);
    assert_int_equal(d->u.mesh.has_removed, 0);
    assert_null(d->u.mesh.block_vertex_start);
    assert_null(d->u.mesh.removed_coords);
    assert_false(buf_contains(&b, "block_"));
    assert_false(buf_contains(&b, "removed"));
    assert_false(buf_contains(&b, "full"));
    tsdf_buf_fini(&b);

    /* An empty mesh travels as empty bins. */
    tsdf_reply_init(r, TSDF_MSG_MESH, 8);
    r->u.mesh.version = 3;
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.mesh.vertex_count, 0);
    assert_int_equal(d->u.mesh.triangle_count, 0);
    assert_null(d->u.mesh.colors);
    tsdf_buf_fini(&b);

    /* By block, incremental: three parts (the last without triangles, a
     * block whose old part the client clears) and two removed blocks. */
    proto_sample_mesh_parts(r, 21);
    roundtrip_reply(r, d, &b);
    const tsdf_rep_mesh *dm = &d->u.mesh;
    assert_int_equal(dm->has_blocks, 1);
    assert_int_equal(dm->block_count, 3);
    assert_memory_equal(dm->block_coords, g_parts_coords, sizeof(g_parts_coords));
    assert_memory_equal(dm->block_vertex_start, g_parts_vstart, sizeof(g_parts_vstart));
    assert_memory_equal(dm->block_triangle_start, g_parts_tstart, sizeof(g_parts_tstart));
    assert_memory_equal(dm->indices, g_parts_idx, sizeof(g_parts_idx));
    assert_int_equal(dm->has_removed, 1);
    assert_int_equal(dm->removed_count, 2);
    assert_memory_equal(dm->removed_coords, g_parts_removed, sizeof(g_parts_removed));
    assert_int_equal(dm->full, 0);
    tsdf_buf_fini(&b);

    /* Parts of nothing: the engine leaves the starts NULL, the wire says
     * [0]; a full mesh with nothing removed. */
    tsdf_reply_init(r, TSDF_MSG_MESH, 9);
    r->u.mesh.version = 4;
    r->u.mesh.has_blocks = 1;
    r->u.mesh.has_removed = 1;
    r->u.mesh.full = 1;
    roundtrip_reply(r, d, &b);
    assert_int_equal(dm->has_blocks, 1);
    assert_int_equal(dm->block_count, 0);
    assert_non_null(dm->block_vertex_start);
    uint32_t first;
    memcpy(&first, dm->block_vertex_start, 4);
    assert_int_equal(first, 0);
    memcpy(&first, dm->block_triangle_start, 4);
    assert_int_equal(first, 0);
    assert_int_equal(dm->has_removed, 1);
    assert_int_equal(dm->removed_count, 0);
    assert_int_equal(dm->full, 1);
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_STATS, 9);
    r->u.stats.has_engine = 1;
    tsdf_volume_stats *st = &r->u.stats.engine;
    st->backend = TSDF_BACKEND_CUDA;
    st->blocks_allocated = 1000;
    st->capacity_slots = 65536;
    st->load_factor = 1000.0 / 65536.0;
    st->max_probe = 4;
    st->mean_probe = 0.25;
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
        st->probe_hist[i] = (uint64_t)(100 - i);
    st->growth_events = 2;
    st->frames_integrated = 300;
    st->frames_rejected = 3;
    st->insert_failures = 1;
    st->memory_bytes = 1ull << 33;
    st->memory_cap_bytes = 1ull << 34;
    st->version = 301;
    st->has_color = 1;
    st->last_upload_ms = 0.1;
    st->last_alloc_ms = 0.2;
    st->last_update_ms = 0.3;
    st->last_raycast_ms = 0.4;
    st->last_mesh_ms = 0.5;
    st->layout = TSDF_LAYOUT_S16;
    st->pool_capacity_blocks = 1088;
    st->blocks_erased = 42;
    r->u.stats.extra_count = 3;
    r->u.stats.extra[0] = (tsdf_stat_entry){"frames_received", 0, 777, 0};
    r->u.stats.extra[1] = (tsdf_stat_entry){"queue_latency_p99_ms", 1, 0, 12.75};
    r->u.stats.extra[2] = (tsdf_stat_entry){"signed", 0, -5, 0};
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.stats.has_engine, 1);
    assert_memory_equal(&d->u.stats.engine, st, sizeof(*st));
    assert_int_equal(d->u.stats.engine.layout, TSDF_LAYOUT_S16);
    assert_int_equal(d->u.stats.engine.pool_capacity_blocks, 1088);
    assert_int_equal(d->u.stats.engine.blocks_erased, 42);
    assert_true(buf_contains(&b, "s16"));
    assert_int_equal(d->u.stats.extra_count, 3);
    assert_string_equal(d->u.stats.extra[0].key, "frames_received");
    assert_int_equal(d->u.stats.extra[0].is_float, 0);
    assert_int_equal(d->u.stats.extra[0].i, 777);
    assert_int_equal(d->u.stats.extra[1].is_float, 1);
    assert_true(d->u.stats.extra[1].f == 12.75);
    assert_int_equal(d->u.stats.extra[2].i, -5);
    /* Without a backend timeline the key is absent and decodes as none. */
    assert_int_equal(d->u.stats.timeline_count, 0);
    assert_false(buf_contains(&b, "timeline"));
    /* Without params neither (an older daemon's reply). */
    assert_int_equal(d->u.stats.has_params, 0);
    assert_false(buf_contains(&b, "voxel_size_m"));
    tsdf_buf_fini(&b);

    /* The map's voxel parameters travel in "params". */
    r->u.stats.has_params = 1;
    r->u.stats.params = (tsdf_map_params){0.02f, 3.0f, 100.0f, 1ull << 30, TSDF_LAYOUT_F32};
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.stats.has_params, 1);
    assert_true(d->u.stats.params.voxel_size_m == 0.02f);
    assert_true(d->u.stats.params.trunc_vox == 3.0f);
    assert_true(d->u.stats.params.max_weight == 100.0f);
    assert_int_equal(d->u.stats.params.memory_cap_bytes, 1ull << 30);
    assert_int_equal(d->u.stats.params.layout, TSDF_LAYOUT_F32);
    assert_memory_equal(&d->u.stats.engine, st, sizeof(*st));
    tsdf_buf_fini(&b);
    /* A layout of no known name is not written, and reads as 0. */
    r->u.stats.params.layout = (tsdf_layout)7;
    st->layout = (tsdf_layout)0;
    roundtrip_reply(r, d, &b);
    assert_false(buf_contains(&b, "layout"));
    assert_int_equal(d->u.stats.params.layout, 0);
    assert_int_equal(d->u.stats.engine.layout, 0);
    assert_int_equal(d->u.stats.engine.blocks_erased, 42);
    tsdf_buf_fini(&b);
    st->layout = TSDF_LAYOUT_S16;
    r->u.stats.has_params = 0;

    /* The CUDA backend's frame timelines travel as an array of maps. */
    r->u.stats.timeline_count = TSDF_PROTO_MAX_TIMELINE;
    for (uint32_t i = 0; i < TSDF_PROTO_MAX_TIMELINE; i++) {
        tsdf_frame_timeline *t = &r->u.stats.timeline[i];
        t->frame = 100 + i;
        t->upload_start_ms = 10.0 * i + 0.125;
        t->upload_end_ms = 10.0 * i + 1.25;
        t->alloc_start_ms = 10.0 * i + 1.5;
        t->alloc_end_ms = 10.0 * i + 2.0;
        t->update_start_ms = 10.0 * i + 2.5;
        t->update_end_ms = 10.0 * i + 12.75;
    }
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.stats.timeline_count, TSDF_PROTO_MAX_TIMELINE);
    assert_memory_equal(d->u.stats.timeline, r->u.stats.timeline, sizeof(r->u.stats.timeline));
    assert_int_equal(d->u.stats.extra_count, 3);
    tsdf_buf_fini(&b);
    /* More than the bound is refused by the encoder. */
    r->u.stats.timeline_count = TSDF_PROTO_MAX_TIMELINE + 1;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_ETOO_LARGE);
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_SAVE, 10);
    strcpy(r->u.path.path, "/tmp/x.tsdf");
    r->u.path.version = 17;
    roundtrip_reply(r, d, &b);
    assert_string_equal(d->u.path.path, "/tmp/x.tsdf");
    assert_int_equal(d->u.path.version, 17);
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_MAPS, 11);
    r->u.maps.count = 3;
    strcpy(r->u.maps.names[0], "default");
    strcpy(r->u.maps.names[1], "kitchen");
    strcpy(r->u.maps.names[2], "lab-2.b");
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->u.maps.count, 3);
    assert_string_equal(d->u.maps.names[2], "lab-2.b");
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_PING, 12);
    strcpy(r->u.ping.server, "tsdfd 0.1.0");
    r->u.ping.uptime_ms = 123456;
    roundtrip_reply(r, d, &b);
    assert_string_equal(d->u.ping.server, "tsdfd 0.1.0");
    assert_int_equal(d->u.ping.uptime_ms, 123456);
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_RESET, 13);
    roundtrip_reply(r, d, &b);
    tsdf_buf_fini(&b);

    /* Error replies: the code and its name travel, also for the reply to
     * an unreadable request. */
    tsdf_reply_init(r, TSDF_MSG_INTEGRATE, 14);
    tsdf_reply_set_error(r, TSDF_EBAD_POSE, "pose row %d is off", 2);
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->status, TSDF_EBAD_POSE);
    assert_int_equal(d->status, -4);
    assert_string_equal(d->error, "BAD_POSE");
    assert_string_equal(d->message, "pose row 2 is off");
    tsdf_buf_fini(&b);

    tsdf_reply_init(r, TSDF_MSG_ERROR, 0);
    tsdf_reply_set_error(r, TSDF_EFORMAT, NULL);
    roundtrip_reply(r, d, &b);
    assert_int_equal(d->status, TSDF_EFORMAT);
    assert_string_equal(d->message, tsdf_strerror(TSDF_EFORMAT));
    tsdf_buf_fini(&b);

    free(r);
    free(d);
}

/* ---- building invalid messages ----------------------------------------- */

/* Rewrites the msgpack map in src: drops key `drop` (may be NULL) and, when
 * put_key is set, appends put_key with a value written by put. */
typedef void (*value_fn)(msgpack_packer *pk);

static size_t g_out_len;
static uint8_t *g_out;

static void rebuild(const tsdf_buf *src, const char *drop, const char *put_key, value_fn put)
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
static int req_with(const tsdf_buf *src, const char *key, value_fn put, tsdf_proto_error *err)
{
    rebuild(src, key, put ? key : NULL, put);
    tsdf_request *d = malloc(sizeof(*d));
    int rc = tsdf_proto_decode_request(g_out, g_out_len, d, err);
    free(d);
    return rc;
}

static void v_u0(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0);
}
static void v_u2(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 2);
}
static void v_u9000(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 9000);
}
static void v_u5000(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 5000);
}
static void v_neg(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, -3);
}
static void v_f0(msgpack_packer *pk)
{
    msgpack_pack_float(pk, 0.0f);
}
static void v_fnan(msgpack_packer *pk)
{
    msgpack_pack_float(pk, NAN);
}
static void v_finf(msgpack_packer *pk)
{
    msgpack_pack_double(pk, INFINITY);
}
static void v_fhuge(msgpack_packer *pk)
{
    msgpack_pack_double(pk, 1e300); /* finite as a double, not as a float */
}
static void v_pose_huge(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 16);
    for (int i = 0; i < 16; i++)
        msgpack_pack_double(pk, i == 3 ? 1e300 : (i % 5 == 0 ? 1.0 : 0.0));
}
static void v_f10(msgpack_packer *pk)
{
    msgpack_pack_float(pk, 10.0f);
}
static void v_nil(msgpack_packer *pk)
{
    msgpack_pack_nil(pk);
}
static void v_true(msgpack_packer *pk)
{
    msgpack_pack_true(pk);
}
static void v_str_bogus(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "bogus", 5);
}
static void v_str_u8(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 2);
    msgpack_pack_str_body(pk, "u8", 2);
}
static void v_str_f32(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "f32", 3);
}
static void v_str_long(msgpack_packer *pk)
{
    char s[80];
    memset(s, 'a', sizeof(s));
    msgpack_pack_str(pk, sizeof(s));
    msgpack_pack_str_body(pk, s, sizeof(s));
}
/* Not UTF-8: a stray FF and a surrogate. */
static void v_str_bad_utf8(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "a\xff\xed\xa0\x80", 5);
}
/* Valid UTF-8 with a terminal escape in it. */
static void v_str_ctrl(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 6);
    msgpack_pack_str_body(pk, "a\x1b[2Jb", 6);
}
static void v_str_dotdot(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 6);
    msgpack_pack_str_body(pk, "../etc", 6);
}
static void v_str_empty(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 0);
}
static void v_str_space(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "a b", 3);
}
static void v_bin_short(msgpack_packer *pk)
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
static void v_pose_scaled(msgpack_packer *pk)
{
    float T[16] = {2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
static void v_pose_mirror(msgpack_packer *pk)
{
    float T[16] = {-1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
static void v_pose_lastrow(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5f, 1};
    v_pose_n(pk, T, 16);
}
static void v_pose_nan(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, NAN, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 16);
}
static void v_pose_15(msgpack_packer *pk)
{
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    v_pose_n(pk, T, 15);
}
static void v_pose_str(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 16);
    for (int i = 0; i < 16; i++)
        v_str_bogus(pk);
}
static void v_box_inverted(msgpack_packer *pk)
{
    float b[6] = {1, 1, 1, 0, 2, 2};
    v_pose_n(pk, b, 6);
}

static void v_str_zstd(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "zstd", 4);
}
static void v_str_png(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 3);
    msgpack_pack_str_body(pk, "png", 3);
}
static void v_bin_empty(msgpack_packer *pk)
{
    msgpack_pack_bin(pk, 0);
}

/* The last rebuild as a buffer of its own (to change a second key). */
static tsdf_buf take_rebuilt(void)
{
    tsdf_buf b = {g_out, g_out_len, g_out_len, g_out_len};
    g_out = NULL;
    return b;
}

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
    tsdf_buf b2 = {g_out, g_out_len, g_out_len, g_out_len};
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

/* ---- robustness -------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

static int known_code(int rc)
{
    return rc == TSDF_OK || (rc < 0 && strcmp(tsdf_errname(rc), "UNKNOWN") != 0);
}

/* Every valid message of every type, as requests and as replies. */
static int sample_messages(tsdf_buf *out, int max)
{
    int n = 0;
    tsdf_request q;
    tsdf_msg_type rt[] = {TSDF_MSG_FRAME, TSDF_MSG_INTEGRATE, TSDF_MSG_RAYCAST, TSDF_MSG_MESH,
                          TSDF_MSG_STATS, TSDF_MSG_SAVE,      TSDF_MSG_LOAD,    TSDF_MSG_RESET,
                          TSDF_MSG_MAPS,  TSDF_MSG_PING};
    for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]) && n < max; i++) {
        if (rt[i] == TSDF_MSG_FRAME || rt[i] == TSDF_MSG_INTEGRATE) {
            make_frame_request(&q, rt[i]);
        } else {
            tsdf_request_init(&q, rt[i]);
            q.id = i;
            if (rt[i] == TSDF_MSG_RAYCAST) {
                q.u.raycast.width = 4;
                q.u.raycast.height = 3;
                q.u.raycast.K = (tsdf_intrinsics){4, 4, 2, 1.5f};
            }
            if (rt[i] == TSDF_MSG_SAVE)
                strcpy(q.u.path.path, "/tmp/a");
            if (rt[i] == TSDF_MSG_MESH)
                q.u.mesh.use_box = 1;
        }
        tsdf_buf_init(&out[n]);
        assert_int_equal(tsdf_proto_encode_request(&q, &out[n]), TSDF_OK);
        n++;
    }
    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 30;
    q.u.mesh.by_block = 1;
    q.u.mesh.since_version = 9;
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_request(&q, &out[n++]), TSDF_OK);
    tsdf_reply *r = calloc(1, sizeof(*r));
    float pos[9] = {0}, nrm[9] = {0};
    uint32_t idx[3] = {0, 1, 2};
    float depth[12] = {0}, normals[36] = {0};
    tsdf_reply_init(r, TSDF_MSG_MESH, 1);
    r->u.mesh = (tsdf_rep_mesh){.version = 1,
                                .vertex_count = 3,
                                .triangle_count = 1,
                                .positions = pos,
                                .normals = nrm,
                                .colors = g_rgb,
                                .indices = idx};
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    proto_sample_mesh_parts(r, 21);
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    tsdf_reply_init(r, TSDF_MSG_RAYCAST, 2);
    r->u.raycast = (tsdf_rep_raycast){4, 3, depth, normals, NULL};
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    tsdf_reply_init(r, TSDF_MSG_STATS, 3);
    r->u.stats.has_engine = 1;
    r->u.stats.engine.layout = TSDF_LAYOUT_S16;
    r->u.stats.has_params = 1;
    r->u.stats.params.layout = TSDF_LAYOUT_F32;
    r->u.stats.extra_count = 1;
    r->u.stats.extra[0] = (tsdf_stat_entry){"x", 1, 0, 1.5};
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    tsdf_reply_init(r, TSDF_MSG_MAPS, 4);
    r->u.maps.count = 2;
    strcpy(r->u.maps.names[0], "a");
    strcpy(r->u.maps.names[1], "b");
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    tsdf_reply_init(r, TSDF_MSG_INTEGRATE, 5);
    tsdf_reply_set_error(r, TSDF_EQUEUE_FULL, NULL);
    tsdf_buf_init(&out[n]);
    assert_int_equal(tsdf_proto_encode_reply(r, &out[n++]), TSDF_OK);
    free(r);
    return n;
}

static void test_truncated_never_valid(void **state)
{
    (void)state;
    tsdf_buf msgs[24];
    int n = sample_messages(msgs, 24);
    tsdf_request *q = malloc(sizeof(*q));
    tsdf_reply *r = malloc(sizeof(*r));
    size_t tried = 0;
    for (int m = 0; m < n; m++) {
        for (size_t len = 0; len < msgs[m].len; len++) {
            /* Copy into an exact-size heap block so that ASan sees any read
             * past the truncated end. */
            uint8_t *p = malloc(len ? len : 1);
            memcpy(p, msgs[m].data, len);
            int a = tsdf_proto_decode_request(p, len, q, NULL);
            int b = tsdf_proto_decode_reply(p, len, r, NULL);
            tsdf_msg_type t;
            uint64_t id;
            int c = tsdf_proto_peek(p, len, &t, &id);
            assert_true(a < 0 && b < 0 && c < 0);
            free(p);
            tried++;
        }
        tsdf_buf_fini(&msgs[m]);
    }
    assert_true(tried > 1000);
    free(q);
    free(r);
}

/* What a consumer of a decoded mesh relies on: indices below vertex_count,
 * and with parts, starts from 0 to the counts, never decreasing, every
 * triangle inside its own part, and the arrays inside the message. */
static void assert_mesh_consistent(const tsdf_rep_mesh *m, const uint8_t *msg, size_t len)
{
    for (uint64_t i = 0; i < m->triangle_count * 3; i++) {
        uint32_t v;
        memcpy(&v, (const uint8_t *)m->indices + 4 * i, 4);
        assert_true(v < m->vertex_count);
    }
    if (m->has_removed) {
        const uint8_t *p = m->removed_coords;
        assert_true(p >= msg && p + m->removed_count * 12 <= msg + len);
    }
    if (!m->has_blocks)
        return;
    const uint8_t *c = m->block_coords, *vs = m->block_vertex_start, *ts = m->block_triangle_start;
    assert_true(c >= msg && c + m->block_count * 12 <= msg + len);
    assert_true(vs >= msg && vs + (m->block_count + 1) * 4 <= msg + len);
    assert_true(ts >= msg && ts + (m->block_count + 1) * 4 <= msg + len);
    uint32_t v0, t0;
    memcpy(&v0, vs, 4);
    memcpy(&t0, ts, 4);
    assert_int_equal(v0, 0);
    assert_int_equal(t0, 0);
    for (uint64_t k = 0; k < m->block_count; k++) {
        uint32_t v1, t1;
        memcpy(&v0, vs + 4 * k, 4);
        memcpy(&v1, vs + 4 * (k + 1), 4);
        memcpy(&t0, ts + 4 * k, 4);
        memcpy(&t1, ts + 4 * (k + 1), 4);
        assert_true(v0 <= v1 && t0 <= t1);
        for (uint64_t i = 3 * (uint64_t)t0; i < 3 * (uint64_t)t1; i++) {
            uint32_t v;
            memcpy(&v, (const uint8_t *)m->indices + 4 * i, 4);
            assert_true(v >= v0 && v < v1);
        }
    }
    uint32_t vend, tend;
    memcpy(&vend, vs + 4 * m->block_count, 4);
    memcpy(&tend, ts + 4 * m->block_count, 4);
    assert_int_equal(vend, m->vertex_count);
    assert_int_equal(tend, m->triangle_count);
}

static void test_mutated_and_random_bytes(void **state)
{
    (void)state;
    tsdf_buf msgs[24];
    int n = sample_messages(msgs, 24);
    tsdf_request *q = malloc(sizeof(*q));
    tsdf_reply *r = malloc(sizeof(*r));
    int ok_after_mutation = 0, errors = 0;
    for (int iter = 0; iter < 20000; iter++) {
        const tsdf_buf *src = &msgs[iter % n];
        uint8_t *p = malloc(src->len);
        memcpy(p, src->data, src->len);
        int flips = 1 + (int)(rnd() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = rnd() % src->len;
            switch (rnd() % 3) {
            case 0:
                p[at] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1:
                p[at] = (uint8_t)rnd();
                break;
            default:
                p[at] = (uint8_t[]){0x00, 0xff, 0xc0, 0xc1, 0xdf, 0xdd, 0xc6, 0x7f}[rnd() % 8];
                break;
            }
        }
        int a = tsdf_proto_decode_request(p, src->len, q, NULL);
        int b = tsdf_proto_decode_reply(p, src->len, r, NULL);
        assert_true(known_code(a) && known_code(b));
        /* Whatever decodes must satisfy the invariants a consumer relies on. */
        if (a == TSDF_OK && (q->type == TSDF_MSG_FRAME || q->type == TSDF_MSG_INTEGRATE)) {
            assert_true(tsdf_pose_is_rigid(q->u.frame.frame.T_world_cam));
            assert_true(q->u.frame.frame.width * q->u.frame.frame.height <= TSDF_MAX_IMAGE_PIXELS);
            const uint8_t *d = q->u.frame.frame.depth;
            assert_true(d >= p && d <= p + src->len);
        }
        if (b == TSDF_OK && r->status == TSDF_OK && r->type == TSDF_MSG_MESH)
            assert_mesh_consistent(&r->u.mesh, p, src->len);
        ok_after_mutation += (a == TSDF_OK) + (b == TSDF_OK);
        errors += (a != TSDF_OK) + (b != TSDF_OK);
        free(p);
    }
    /* Mutations inside payloads keep messages valid; most others do not. */
    assert_true(errors > 20000);
    assert_true(ok_after_mutation > 0);

    for (int iter = 0; iter < 20000; iter++) {
        size_t len = rnd() % 96;
        uint8_t *p = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
            p[i] = (uint8_t)rnd();
        /* Half of them start as a map so that the typed walk runs too. */
        if (len && (iter & 1))
            p[0] = (uint8_t)(0x80 | (rnd() & 0x0f));
        int a = tsdf_proto_decode_request(p, len, q, NULL);
        int b = tsdf_proto_decode_reply(p, len, r, NULL);
        assert_true(known_code(a) && known_code(b));
        assert_true(a != TSDF_OK);
        free(p);
    }
    for (int m = 0; m < n; m++)
        tsdf_buf_fini(&msgs[m]);
    free(q);
    free(r);
}

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

static void test_names_and_helpers(void **state)
{
    (void)state;
    tsdf_msg_type t;
    for (int i = TSDF_MSG_FRAME; i < TSDF_MSG_TYPE_COUNT; i++) {
        const char *name = tsdf_msg_type_name((tsdf_msg_type)i);
        assert_int_equal(tsdf_msg_type_parse(name, strlen(name), &t), TSDF_OK);
        assert_int_equal(t, i);
    }
    assert_int_equal(tsdf_msg_type_parse("pin", 3, &t), TSDF_EPROTO_TYPE);
    assert_int_equal(tsdf_msg_type_parse("pings", 5, &t), TSDF_EPROTO_TYPE);
    assert_string_equal(tsdf_msg_type_name((tsdf_msg_type)99), "none");
    assert_int_equal(tsdf_proto_check_name("default", 7), TSDF_OK);
    assert_int_equal(tsdf_proto_check_name(".hidden", 7), TSDF_EINVAL);
    assert_int_equal(tsdf_proto_check_name("a b", 3), TSDF_EINVAL);
    char longname[70];
    memset(longname, 'x', sizeof(longname));
    /* 63 bytes: the longest name a snapshot file holds (with its NUL). */
    assert_int_equal(tsdf_proto_check_name(longname, 63), TSDF_OK);
    assert_int_equal(tsdf_proto_check_name(longname, 64), TSDF_ETOO_LARGE);

    float T[16];
    tsdf_pose_identity(T);
    assert_true(tsdf_pose_is_rigid(T));
    test_pose(T);
    assert_true(tsdf_pose_is_rigid(T));
    T[0] *= 1.01f;
    assert_false(tsdf_pose_is_rigid(T));
    assert_false(tsdf_pose_is_rigid(NULL));
}

int main(void)
{
    fill_payloads();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_frame_u16),
        cmocka_unit_test(test_roundtrip_integrate_f32),
        cmocka_unit_test(test_roundtrip_small_requests),
        cmocka_unit_test(test_roundtrip_replies),
        cmocka_unit_test(test_validation_frame),
        cmocka_unit_test(test_depth_encoding_key),
        cmocka_unit_test(test_validation_other),
        cmocka_unit_test(test_validation_envelope_and_structure),
        cmocka_unit_test(test_encode_checks),
        cmocka_unit_test(test_reply_validation),
        cmocka_unit_test(test_mesh_parts_validation),
        cmocka_unit_test(test_truncated_never_valid),
        cmocka_unit_test(test_mutated_and_random_bytes),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_names_and_helpers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_out);
    return rc;
}
