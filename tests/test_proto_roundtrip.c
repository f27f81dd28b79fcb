/*
 * test_proto_roundtrip.c - the wire codec's round trips: every request and
 * reply type encodes and decodes to what it was (frames zero-copy), the
 * keys that are optional are written only when used, and the message type
 * names, name checks and the pose check behave.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto_samples.h"
#include "proto_testlib.h"
#include "tsdf_pose.h"
#include "tsdf_proto.h"

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
    /* No ring socket: the key is left out, as daemons before it sent. */
    assert_false(buf_contains(&b, "ring_socket"));
    assert_string_equal(d->ring_socket, "");
    tsdf_buf_fini(&b);
    /* A ring socket travels whole, up to a Unix socket path's length. */
    memset(r->ring_socket, 'r', TSDF_PROTO_MAX_RING_SOCKET_LEN);
    r->ring_socket[0] = '/';
    r->ring_socket[TSDF_PROTO_MAX_RING_SOCKET_LEN] = '\0';
    roundtrip_reply(r, d, &b);
    assert_string_equal(d->ring_socket, r->ring_socket);
    assert_int_equal(d->u.ping.uptime_ms, 123456);
    /* A path that is not UTF-8 is left out; the ping itself still reads
     * (it is a health check). */
    uint8_t *at = NULL;
    for (size_t i = 0; at == NULL && i + TSDF_PROTO_MAX_RING_SOCKET_LEN <= b.len; i++)
        if (memcmp(b.data + i, r->ring_socket, TSDF_PROTO_MAX_RING_SOCKET_LEN) == 0)
            at = b.data + i;
    assert_non_null(at);
    at[5] = 0xff;
    assert_int_equal(tsdf_proto_decode_reply(b.data, b.len, d, NULL), TSDF_OK);
    assert_string_equal(d->ring_socket, "");
    assert_string_equal(d->u.ping.server, "tsdfd 0.1.0");
    tsdf_buf_fini(&b);
    /* Unterminated: refused rather than sent cut. */
    memset(r->ring_socket, 'r', sizeof r->ring_socket);
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_reply(r, &b), TSDF_EINVAL);
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

/* ---- names and helpers ------------------------------------------------- */

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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_frame_u16),
        cmocka_unit_test(test_roundtrip_integrate_f32),
        cmocka_unit_test(test_roundtrip_small_requests),
        cmocka_unit_test(test_roundtrip_replies),
        cmocka_unit_test(test_names_and_helpers),
    };
    return proto_tests_run("proto_roundtrip", tests, sizeof tests / sizeof tests[0]);
}
