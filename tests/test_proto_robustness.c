/*
 * test_proto_robustness.c - the wire codec against bytes no peer should
 * send: every truncation of every sample message is refused by both
 * decoders and by peek, and mutated or random bytes never crash them, yield
 * only known codes, and what still decodes keeps the invariants a consumer
 * relies on (a rigid pose, a bounded image, indices inside their parts).
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "proto_samples.h"
#include "proto_testlib.h"
#include "tsdf_pose.h"
#include "tsdf_proto.h"

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
    r->u.raycast =
        (tsdf_rep_raycast){.width = 4, .height = 3, .depth_m = depth, .normals = normals};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_never_valid),
        cmocka_unit_test(test_mutated_and_random_bytes),
    };
    return proto_tests_run("proto_robustness", tests, sizeof tests / sizeof tests[0]);
}
