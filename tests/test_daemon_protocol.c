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

static void integrate_all(tsdf_client *c, const char *map, frame_set *fs)
{
    for (uint32_t i = 0; i < fs->count; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = map;
        f.frame = &fs->frames[i];
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
    }
}

static tsdf_raycast_params view_of(const frame_set *fs)
{
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = fs->seq.width;
    rp.height = fs->seq.height;
    rp.K = fs->seq.K;
    memcpy(rp.T_world_cam, fs->frames[0].T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    return rp;
}

/* 6.2: "rgb ... present only when asked for and the map has colour". */
static void test_raycast_rgb_only_with_colour(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    (void)state;

    frames_make(&fs, "sphere", 64, 48, 4);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    integrate_all(c, "grey", &fs);
    /* The same frames with colour into another map. */
    size_t px = (size_t)fs.seq.width * fs.seq.height;
    uint8_t *rgb = malloc(px * 3);
    assert_non_null(rgb);
    memset(rgb, 200, px * 3);
    for (uint32_t i = 0; i < fs.count; i++) {
        tsdf_frame fr = fs.frames[i];
        fr.rgb = rgb;
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = "colour";
        f.frame = &fr;
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
    }

    tsdf_raycast_params rp = view_of(&fs);
    float *depth = malloc(px * sizeof(float));
    uint8_t *out_rgb = malloc(px * 3);
    assert_non_null(depth);
    assert_non_null(out_rgb);
    tsdf_raycast_output ro = {depth, NULL, out_rgb};
    int has_rgb = -1;
    assert_int_equal(tsdf_client_raycast(c, "grey", &rp, 1, &ro, &has_rgb, 60000), TSDF_OK);
    assert_int_equal(has_rgb, 0);
    has_rgb = -1;
    assert_int_equal(tsdf_client_raycast(c, "colour", &rp, 1, &ro, &has_rgb, 60000), TSDF_OK);
    assert_int_equal(has_rgb, 1);
    size_t lit = 0;
    for (size_t i = 0; i < px; i++)
        lit += out_rgb[3 * i] != 0;
    assert_true(lit > 0);
    /* Not asked for: never sent. */
    has_rgb = -1;
    assert_int_equal(tsdf_client_raycast(c, "colour", &rp, 0, &ro, &has_rgb, 60000), TSDF_OK);
    assert_int_equal(has_rgb, 0);

    free(depth);
    free(out_rgb);
    free(rgb);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* 2: the longest name the decoder accepts is a map that can be created,
 * saved and loaded; one byte more is TOO_LARGE everywhere. */
static void test_longest_map_name(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    char name[TSDF_PROTO_MAX_NAME_LEN + 2];
    tsdf_reply *rep = malloc(sizeof *rep);
    (void)state;

    assert_non_null(rep);
    assert_int_equal(TSDF_PROTO_MAX_NAME_LEN, 63);
    memset(name, 'n', TSDF_PROTO_MAX_NAME_LEN);
    name[TSDF_PROTO_MAX_NAME_LEN] = '\0';
    frames_make(&fs, "sphere", 64, 48, 2);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    integrate_all(c, name, &fs);
    tsdf_rep_maps maps;
    assert_int_equal(tsdf_client_maps(c, &maps, 10000), TSDF_OK);
    assert_int_equal(maps.count, 2);
    assert_string_equal(maps.names[1], name);
    tsdf_rep_path saved, loaded;
    assert_int_equal(tsdf_client_save(c, name, NULL, &saved, 60000), TSDF_OK);
    assert_int_equal(tsdf_client_load(c, name, NULL, &loaded, 60000), TSDF_OK);

    /* 64 bytes: the client refuses it, and so does the daemon when a raw
     * peer sends it, with the request's type and id. */
    strcat(name, "n");
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = name;
    f.frame = &fs.frames[0];
    assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_ETOO_LARGE);
    nng_socket s = raw_req(&h);
    pk_opts o = pk_defaults();
    o.map = name;
    expect_error(s, &o, 64, TSDF_ETOO_LARGE, TSDF_MSG_INTEGRATE);
    nng_close(s);

    free(rep);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

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

static void expect_params(tsdf_client *c, const char *map, tsdf_rep_stats *st, tsdf_map_params want)
{
    assert_int_equal(tsdf_client_stats(c, map, st, 30000), TSDF_OK);
    assert_true(st->has_params);
    assert_true(st->params.voxel_size_m == want.voxel_size_m);
    assert_true(st->params.trunc_vox == want.trunc_vox);
    assert_true(st->params.max_weight == want.max_weight);
    assert_int_equal(st->params.memory_cap_bytes, want.memory_cap_bytes);
    assert_int_equal(st->params.layout, want.layout);
    /* The volume's own statistics say the same layout. */
    assert_int_equal(st->engine.layout, want.layout);
}

/* 6.6 "params": what a map was made with, and what a load gave it. */
static void test_stats_report_map_params(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    char ini[1024];
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "sphere", 64, 48, 2);
    assert_int_equal(start_daemon(&a,
                                  "[volume]\nvoxel_size_m = 0.02\ntrunc_vox = 3\nmax_weight = 50\n"
                                  "memory_cap_mb = 64\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&a, 0);
    integrate_all(c, "coarse", &fs);
    expect_params(c, "coarse", st,
                  (tsdf_map_params){0.02f, 3.0f, 50.0f, 64ull << 20, TSDF_LAYOUT_S16});
    assert_int_equal(tsdf_client_save(c, "coarse", NULL, NULL, 60000), TSDF_OK);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    /* A daemon of default parameters on the same state dir: the loaded map
     * keeps the snapshot's voxel parameters, but the cap is the daemon's
     * own ([volume] memory_cap_mb, 4096 by default) as for every map; a
     * new map gets the daemon's parameters. */
    snprintf(ini, sizeof ini, "[server]\nstate_dir = %s\n", a.state_dir);
    assert_int_equal(start_daemon(&b, ini, NULL), 0);
    c = open_client(&b, 0);
    assert_int_equal(tsdf_client_load(c, "coarse", NULL, NULL, 60000), TSDF_OK);
    expect_params(c, "coarse", st,
                  (tsdf_map_params){0.02f, 3.0f, 50.0f, 4096ull << 20, TSDF_LAYOUT_S16});
    tsdf_volume_params def;
    tsdf_volume_params_default(&def);
    expect_params(c, "default", st,
                  (tsdf_map_params){def.voxel_size_m, def.trunc_vox, def.max_weight, 4096ull << 20,
                                    def.layout});
    /* No such map: neither engine nor params. */
    assert_int_equal(tsdf_client_stats(c, "nosuchmap", st, 30000), TSDF_OK);
    assert_false(st->has_engine);
    assert_false(st->has_params);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* The parts of a by_block mesh through libtsdf: consecutive, covering the
 * mesh, each block once, every triangle on its part's vertices, and every
 * vertex within its block's cells (8 voxels a side from voxel 8 b, whose
 * centres sit half a voxel in, plus the one voxel the cells of the block's
 * top faces reach into the next). */
static void check_parts(const tsdf_mesh *m, float voxel_size_m)
{
    assert_true(m->block_count > 0);
    assert_non_null(m->block_coords);
    assert_int_equal(m->block_vertex_start[0], 0);
    assert_int_equal(m->block_triangle_start[0], 0);
    assert_int_equal(m->block_vertex_start[m->block_count], m->vertex_count);
    assert_int_equal(m->block_triangle_start[m->block_count], m->triangle_count);
    const float edge_m = 8.0f * voxel_size_m, slack_m = 1e-4f;
    for (size_t b = 0; b < m->block_count; b++) {
        const int32_t *bc = &m->block_coords[3 * b];
        uint32_t v0 = m->block_vertex_start[b], v1 = m->block_vertex_start[b + 1];
        uint32_t t0 = m->block_triangle_start[b], t1 = m->block_triangle_start[b + 1];
        assert_true(v0 <= v1 && t0 <= t1);
        for (size_t o = 0; o < b; o++)
            assert_false(memcmp(&m->block_coords[3 * o], bc, 12) == 0);
        for (size_t i = 3 * (size_t)t0; i < 3 * (size_t)t1; i++)
            assert_true(m->indices[i] >= v0 && m->indices[i] < v1);
        for (uint32_t v = v0; v < v1; v++) {
            for (int k = 0; k < 3; k++) {
                float lo = (float)bc[k] * edge_m + 0.5f * voxel_size_m;
                float p = m->positions[3 * v + k];
                assert_true(p >= lo - slack_m && p <= lo + edge_m + slack_m);
            }
        }
    }
}

/* 6.3: a by_block mesh is the whole mesh in one part per block, and an
 * incremental mesh says which blocks went or that it replaces everything;
 * a request that asks for neither gets a reply without their keys. 6.6:
 * the storage keys of stats. */
static void test_mesh_by_block_and_since(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_mesh whole, parts, inc;
    uint64_t v_whole = 0, v_parts = 0, v_inc = 0;
    (void)state;

    assert_non_null(st);
    assert_non_null(rep);
    tsdf_mesh_init(&whole);
    tsdf_mesh_init(&parts);
    tsdf_mesh_init(&inc);
    frames_make(&fs, "sphere", 64, 48, 6);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(integrate_into(c, "parts", &fs.frames[i]), TSDF_OK);

    assert_int_equal(tsdf_client_stats(c, "parts", st, 30000), TSDF_OK);
    assert_true(st->has_engine && st->has_params);
    assert_int_equal(st->engine.layout, TSDF_LAYOUT_S16);
    assert_int_equal(st->params.layout, TSDF_LAYOUT_S16);
    assert_true(st->engine.blocks_allocated > 0);
    assert_true(st->engine.pool_capacity_blocks >= st->engine.blocks_allocated);
    assert_int_equal(st->engine.blocks_erased, 0);

    assert_int_equal(tsdf_client_mesh(c, "parts", NULL, &whole, &v_whole, 60000), TSDF_OK);
    assert_true(whole.triangle_count > 100);
    assert_int_equal(whole.block_count, 0);
    assert_null(whole.block_coords);
    assert_int_equal(whole.removed_count, 0);
    assert_int_equal(whole.full, 0);

    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.by_block = 1;
    assert_int_equal(tsdf_client_mesh(c, "parts", &mp, &parts, &v_parts, 60000), TSDF_OK);
    assert_int_equal(v_parts, v_whole);
    /* The same triangles; vertices are copied per part, so at least as many. */
    assert_int_equal(parts.triangle_count, whole.triangle_count);
    assert_true(parts.vertex_count >= whole.vertex_count);
    assert_true(parts.block_count <= st->engine.blocks_allocated);
    check_parts(&parts, st->params.voxel_size_m);

    /* Nothing changed since: empty, nothing removed, not full; by block
     * and whole alike. */
    mp.since_version = v_parts;
    assert_int_equal(tsdf_client_mesh(c, "parts", &mp, &inc, &v_inc, 60000), TSDF_OK);
    assert_int_equal(v_inc, v_parts);
    assert_int_equal(inc.triangle_count, 0);
    assert_int_equal(inc.block_count, 0);
    assert_int_equal(inc.removed_count, 0);
    assert_int_equal(inc.full, 0);
    mp.by_block = 0;
    assert_int_equal(tsdf_client_mesh(c, "parts", &mp, &inc, &v_inc, 60000), TSDF_OK);
    assert_int_equal(inc.triangle_count, 0);
    assert_int_equal(inc.removed_count, 0);
    assert_int_equal(inc.full, 0);

    /* Two more frames: the parts of the blocks they changed, still not full. */
    for (uint32_t i = 4; i < 6; i++)
        assert_int_equal(integrate_into(c, "parts", &fs.frames[i]), TSDF_OK);
    mp.by_block = 1;
    assert_int_equal(tsdf_client_mesh(c, "parts", &mp, &inc, &v_inc, 60000), TSDF_OK);
    assert_true(v_inc > v_parts);
    assert_int_equal(inc.full, 0);
    assert_int_equal(inc.removed_count, 0);
    assert_true(inc.triangle_count > 0);
    check_parts(&inc, st->params.voxel_size_m);

    /* What travels is what was asked for: no parts and no removed keys for
     * a plain request, removed and full for an incremental one. */
    nng_socket s = raw_req(&h);
    tsdf_request q;
    tsdf_buf b;
    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 31;
    strcpy(q.map, "parts");
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    raw_roundtrip(s, b.data, b.len, rep);
    assert_int_equal(rep->status, TSDF_OK);
    assert_true(rep->u.mesh.triangle_count > 0);
    assert_false(rep->u.mesh.has_blocks);
    assert_false(rep->u.mesh.has_removed);
    q.u.mesh.since_version = v_inc;
    tsdf_buf_clear(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    raw_roundtrip(s, b.data, b.len, rep);
    assert_false(rep->u.mesh.has_blocks);
    assert_true(rep->u.mesh.has_removed);
    assert_int_equal(rep->u.mesh.removed_count, 0);
    assert_false(rep->u.mesh.full);
    tsdf_buf_fini(&b);
    nng_close(s);

    /* A reset since: the daemon cannot say which blocks went, so the mesh
     * (of the now empty map) replaces everything. */
    assert_int_equal(tsdf_client_reset(c, "parts", 30000), TSDF_OK);
    mp.since_version = v_parts;
    assert_int_equal(tsdf_client_mesh(c, "parts", &mp, &inc, &v_inc, 60000), TSDF_OK);
    assert_int_equal(inc.full, 1);
    assert_int_equal(inc.triangle_count, 0);
    assert_int_equal(inc.block_count, 0);

    tsdf_client_mesh_release(&whole);
    tsdf_client_mesh_release(&parts);
    tsdf_client_mesh_release(&inc);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(rep);
    free(st);
}

static void expect_path_refused(tsdf_client *c, int load, const char *path, int code,
                                const char *why)
{
    int rc = load ? tsdf_client_load(c, "default", path, NULL, 30000)
                  : tsdf_client_save(c, "default", path, NULL, 30000);
    if (rc != code)
        fail_msg("%s %s: %s, expected %s", load ? "load" : "save", path, tsdf_errname(rc),
                 tsdf_errname(code));
    const char *msg = tsdf_client_last_message();
    if (strstr(msg, why) == NULL)
        fail_msg("%s %s: message \"%s\" does not say \"%s\"", load ? "load" : "save", path, msg,
                 why);
}

/* 6.4: a path the daemon refuses says which rule it broke. */
static void test_refused_paths_say_why(void **state)
{
    tsdfd_harness h;
    char path[1024], link[1024];
    (void)state;

    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    expect_path_refused(c, 0, "../x.tsdf", TSDF_EINVAL, "'..' is not allowed");
    expect_path_refused(c, 1, "a/../b.tsdf", TSDF_EINVAL, "'..' is not allowed");
    expect_path_refused(c, 0, "/etc/x.tsdf", TSDF_EINVAL, "outside the state directory");
    snprintf(link, sizeof link, "%s/out", h.state_dir);
    assert_int_equal(symlink("/tmp", link), 0);
    expect_path_refused(c, 0, "out/x.tsdf", TSDF_EINVAL, "symbolic link");
    snprintf(path, sizeof path, "%s/out/x.tsdf", h.state_dir);
    expect_path_refused(c, 1, path, TSDF_EINVAL, "symbolic link");
    /* Load without a path looks at the daemon's own snapshots only. */
    assert_int_equal(tsdf_client_save(c, "default", "mine.tsdf", NULL, 30000), TSDF_OK);
    expect_path_refused(c, 1, NULL, TSDF_ENOT_FOUND, "snap-*.tsdfsnap");
    expect_path_refused(c, 1, "nosuch.tsdf", TSDF_ENOT_FOUND, "no file");
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raycast_rgb_only_with_colour),
        cmocka_unit_test(test_longest_map_name),
        cmocka_unit_test(test_error_replies_echo_type_and_id),
        cmocka_unit_test(test_stats_report_map_params),
        cmocka_unit_test(test_mesh_by_block_and_since),
        cmocka_unit_test(test_refused_paths_say_why),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
