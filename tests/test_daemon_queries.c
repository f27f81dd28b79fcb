/*
 * test_daemon_queries.c - end to end, raycasts of the size a client asks
 * for and the order of queries and frames (PROTOCOL.md 6.2 and 6.9): depth
 * alone, with normals, at a fraction of the size (each equal to the
 * engine's own raycast of that camera), bad values refused with their
 * codes; a query served ahead of a long queue of its map's frames by
 * default, and after exactly the frames queued before it with "after":
 * "queued".
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Depth (and normals, when both are given) of the daemon's raycast equal
 * the engine's, pixel by pixel; returns the pixels that hit. */
static size_t compare_raycast(const float *dd, const float *dn, const float *ed, const float *en,
                              size_t px)
{
    size_t hits = 0;
    for (size_t i = 0; i < px; i++) {
        if (isnan(ed[i])) {
            assert_true(isnan(dd[i]));
            continue;
        }
        hits++;
        if (fabsf(dd[i] - ed[i]) > 1e-6f)
            fail_msg("pixel %zu: daemon depth %.9g, engine %.9g", i, dd[i], ed[i]);
        for (int k = 0; dn != NULL && k < 3; k++)
            assert_true(fabsf(dn[3 * i + k] - en[3 * i + k]) <= 1e-6f);
    }
    return hits;
}

static void test_raycast_sizes(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_volume *vol = NULL;
    tsdf_volume_params p;
    (void)state;

    frames_make(&fs, "sphere", 160, 120, 8);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    tsdf_volume_params_default(&p);
    p.backend = test_backend();
    assert_int_equal(tsdf_volume_create(&p, &vol), TSDF_OK);
    for (uint32_t i = 0; i < fs.count; i++) {
        assert_int_equal(integrate_into(c, "r", &fs.frames[i]), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(vol, &fs.frames[i]), TSDF_OK);
    }
    uint64_t version = tsdf_volume_version(vol);

    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = fs.seq.width;
    rp.height = fs.seq.height;
    rp.K = fs.seq.K;
    memcpy(rp.T_world_cam, fs.frames[2].T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    size_t px = (size_t)rp.width * rp.height;
    float *dd = malloc(px * 4), *dn = malloc(px * 12), *ed = malloc(px * 4), *en = malloc(px * 12);
    uint8_t *rgb = malloc(px * 3);
    assert_non_null(dd);
    assert_non_null(dn);
    assert_non_null(ed);
    assert_non_null(en);
    assert_non_null(rgb);
    tsdf_raycast_output eout = {ed, en, NULL};
    assert_int_equal(tsdf_volume_raycast(vol, &rp, &eout), TSDF_OK);

    /* Depth and normals, full size: the reply says which version it shows. */
    tsdf_client_raycast_options o = {.want_normals = 1};
    tsdf_client_raycast_info info;
    tsdf_raycast_output dout = {dd, dn, NULL};
    assert_int_equal(tsdf_client_raycast_ex(c, "r", &rp, &o, &dout, &info, 60000), TSDF_OK);
    assert_int_equal(info.width, rp.width);
    assert_int_equal(info.height, rp.height);
    assert_int_equal(info.version, version);
    assert_int_equal(info.has_rgb, 0);
    assert_true(compare_raycast(dd, dn, ed, en, px) > px / 20);

    /* Depth alone: the same depth; the normals buffer is not touched. */
    memset(dd, 0, px * 4);
    memset(dn, 0x7f, px * 12);
    dout.rgb = rgb;
    memset(rgb, 9, px * 3);
    o = (tsdf_client_raycast_options){.want_rgb = 1};
    assert_int_equal(tsdf_client_raycast_ex(c, "r", &rp, &o, &dout, &info, 60000), TSDF_OK);
    assert_true(compare_raycast(dd, NULL, ed, en, px) > px / 20);
    for (size_t i = 0; i < px * 12; i++)
        assert_int_equal(((uint8_t *)dn)[i], 0x7f);
    /* rgb asked for, but the map has no colour: none comes, zeros. */
    assert_int_equal(info.has_rgb, 0);
    assert_int_equal(rgb[0], 0);
    assert_int_equal(rgb[px * 3 - 1], 0);

    /* Half and a third of the size: the engine's raycast of the coarser
     * camera, whose pixel centres are those of 2 x 2 (3 x 3) fine ones. */
    for (uint32_t s = 2; s <= 3; s++) {
        tsdf_raycast_params sp = rp;
        sp.width = rp.width / s;
        sp.height = rp.height / s;
        sp.K.fx = rp.K.fx / (float)s;
        sp.K.fy = rp.K.fy / (float)s;
        sp.K.cx = (rp.K.cx + 0.5f) / (float)s - 0.5f;
        sp.K.cy = (rp.K.cy + 0.5f) / (float)s - 0.5f;
        size_t spx = (size_t)sp.width * sp.height;
        assert_int_equal(tsdf_volume_raycast(vol, &sp, &eout), TSDF_OK);
        o = (tsdf_client_raycast_options){.want_normals = 1, .scale = s};
        dout.rgb = NULL;
        assert_int_equal(tsdf_client_raycast_ex(c, "r", &rp, &o, &dout, &info, 60000), TSDF_OK);
        assert_int_equal(info.width, sp.width);
        assert_int_equal(info.height, sp.height);
        assert_true(compare_raycast(dd, dn, ed, en, spx) > spx / 20);
    }

    /* The old call asks for normals only when it takes them. */
    tsdf_raycast_output plain = {dd, NULL, NULL};
    assert_int_equal(tsdf_client_raycast(c, "r", &rp, 0, &plain, NULL, 60000), TSDF_OK);
    assert_int_equal(tsdf_volume_raycast(vol, &rp, &eout), TSDF_OK);
    assert_true(compare_raycast(dd, NULL, ed, en, px) > px / 20);

    /* Bad values: refused by the client before sending, and by the daemon
     * when a client sends them anyway. */
    o = (tsdf_client_raycast_options){.scale = 9};
    assert_int_equal(tsdf_client_raycast_ex(c, "r", &rp, &o, &dout, &info, 60000), TSDF_EINVAL);
    o = (tsdf_client_raycast_options){.want_normals = 1};
    dout.normals = NULL;
    assert_int_equal(tsdf_client_raycast_ex(c, "r", &rp, &o, &dout, &info, 60000), TSDF_EINVAL);

    nng_socket s = raw_req(&h);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    const char *bad[][2] = {{"scale", "0"},   {"scale", "9"},    {"scale", "x"},
                            {"normals", "1"}, {"after", "soon"}, {"scale", "200"}};
    const int want[] = {TSDF_EINVAL,     TSDF_EINVAL,     TSDF_EPROTO_KEY,
                        TSDF_EPROTO_KEY, TSDF_EPROTO_KEY, TSDF_EINVAL};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 12);
        pk_str(&pk, "v"), msgpack_pack_uint8(&pk, 1);
        pk_str(&pk, "type"), pk_str(&pk, "raycast");
        pk_str(&pk, "id"), msgpack_pack_uint8(&pk, 5);
        pk_str(&pk, "map"), pk_str(&pk, "r");
        pk_str(&pk, "width"), msgpack_pack_uint32(&pk, 20);
        pk_str(&pk, "height"), msgpack_pack_uint32(&pk, 20);
        pk_str(&pk, "fx"), msgpack_pack_float(&pk, 20);
        pk_str(&pk, "fy"), msgpack_pack_float(&pk, 20);
        pk_str(&pk, "cx"), msgpack_pack_float(&pk, 9.5f);
        pk_str(&pk, "cy"), msgpack_pack_float(&pk, 9.5f);
        pk_str(&pk, "T_world_cam");
        msgpack_pack_array(&pk, 16);
        for (int i = 0; i < 16; i++)
            msgpack_pack_float(&pk, i % 5 == 0 ? 1.0f : 0.0f);
        pk_str(&pk, bad[k][0]);
        if (bad[k][1][0] >= '0' && bad[k][1][0] <= '9')
            msgpack_pack_uint32(&pk, (uint32_t)atoi(bad[k][1]));
        else
            pk_str(&pk, bad[k][1]);
        raw_roundtrip(s, sb.data, sb.size, rep);
        msgpack_sbuffer_destroy(&sb);
        assert_int_equal(rep->type, TSDF_MSG_RAYCAST);
        if (rep->status != want[k])
            fail_msg("%s = %s: status %d, expected %d (%s)", bad[k][0], bad[k][1], rep->status,
                     want[k], rep->message);
    }
    nng_close(s);
    free(rep);

    tsdf_client_close(c);
    tsdf_volume_destroy(vol);
    free(dd);
    free(dn);
    free(ed);
    free(en);
    free(rgb);
    frames_free(&fs);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
}

/* Streams n frames of fs to map over PUSH, fire and forget. */
static void stream(tsdf_client *c, const char *map, const frame_set *fs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = map;
        f.seq = i;
        f.frame = &fs->frames[i % fs->count];
        assert_int_equal(tsdf_client_send_frame(c, &f, 10000), TSDF_OK);
    }
}

/* Polls the map's stats until all n streamed frames are queued or done;
 * returns how many were still queued then. */
static int64_t wait_queued(tsdf_client *c, const char *map, int64_t n)
{
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    for (int tries = 0; tries < 60000; tries++) {
        assert_int_equal(tsdf_client_stats(c, map, st, 10000), TSDF_OK);
        int64_t done = 0, depth = 0;
        if (stat_find(st, "map.frames_integrated", &done) && stat_find(st, "queue.depth", &depth) &&
            done + depth >= n) {
            free(st);
            return depth;
        }
        sleep_ms(1);
    }
    free(st);
    fail_msg("the %lld frames never reached the queue", (long long)n);
    return 0;
}

static uint64_t settled_version(tsdf_client *c, const char *map, int64_t n)
{
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    wait_settled(c, map, n, st);
    assert_int_equal(stat_get(st, "map.frames_integrated"), n);
    uint64_t v = st->engine.version;
    free(st);
    return v;
}

/* Frames of 640 x 480 take the CPU backend milliseconds each, so that a
 * stream of them is still queued when a query arrives. */
#define ORDER_FRAMES 24

static void test_query_order(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    (void)state;

    frames_make(&fs, "room", 640, 480, 6);
    assert_int_equal(start_daemon(&h, "[queue]\nlength = 64\n", NULL), 0);
    tsdf_client *c = open_client(&h, 1);
    assert_int_equal(integrate_into(c, "o", &fs.frames[0]), TSDF_OK);
    uint64_t base = settled_version(c, "o", 1);

    /* The default: a mesh is served ahead of the frames still queued. Its
     * version is that of the frames integrated before it, fewer than all. */
    stream(c, "o", &fs, ORDER_FRAMES);
    int64_t queued = wait_queued(c, "o", 1 + ORDER_FRAMES);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    uint64_t mv = 0;
    assert_int_equal(tsdf_client_mesh(c, "o", NULL, &m, &mv, 60000), TSDF_OK);
    tsdf_mesh_fini(&m);
    uint64_t all = settled_version(c, "o", 1 + ORDER_FRAMES);
    assert_true(mv >= base);
    if (test_backend() == TSDF_BACKEND_CPU) {
        /* A GPU may integrate the whole stream before the mesh arrives. */
        assert_true(queued > 0);
        assert_true(mv < all);
    }

    /* "after": "queued": exactly the frames queued before the query, all
     * of them, although the worker had many left when it arrived. */
    stream(c, "o", &fs, ORDER_FRAMES);
    queued = wait_queued(c, "o", 1 + 2 * ORDER_FRAMES);
    assert_int_equal(tsdf_client_mesh_ex(c, "o", NULL, 1, &m, &mv, 60000), TSDF_OK);
    tsdf_mesh_fini(&m);
    all = settled_version(c, "o", 1 + 2 * ORDER_FRAMES);
    assert_int_equal(mv, all);
    if (test_backend() == TSDF_BACKEND_CPU)
        assert_true(queued > 0);

    /* The same for a raycast, whose reply carries its version. */
    stream(c, "o", &fs, ORDER_FRAMES);
    wait_queued(c, "o", 1 + 3 * ORDER_FRAMES);
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = 64;
    rp.height = 48;
    rp.K = (tsdf_intrinsics){50, 50, 31.5f, 23.5f};
    memcpy(rp.T_world_cam, fs.frames[1].T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    float depth[64 * 48];
    tsdf_raycast_output out = {depth, NULL, NULL};
    tsdf_client_raycast_options o = {.after_queued = 1};
    tsdf_client_raycast_info info;
    assert_int_equal(tsdf_client_raycast_ex(c, "o", &rp, &o, &out, &info, 60000), TSDF_OK);
    all = settled_version(c, "o", 1 + 3 * ORDER_FRAMES);
    assert_int_equal(info.version, all);

    tsdf_client_close(c);
    frames_free(&fs);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raycast_sizes),
        cmocka_unit_test(test_query_order),
    };
    return daemon_tests_run("daemon_queries", tests, sizeof tests / sizeof tests[0]);
}
