/*
 * test_client.c - libtsdf against a tiny in-test daemon stand-in: a REP
 * socket (and a PULL socket) on inproc:// that answers canned replies.
 * Checks that every call encodes what PROTOCOL.md says, decodes what comes
 * back, maps error replies and nng failures onto their codes, and honours
 * its timeout.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/reqrep0/rep.h>

#include "tsdf_client.h"
#include "tsdf_proto.h"
#include "tsdf_pose.h"

#define REQ_URL "inproc://tsdf-test-req"
#define PULL_URL "inproc://tsdf-test-pull"

typedef enum {
    MODE_OK,       /* a valid reply for every type */
    MODE_ERROR,    /* an error reply: BAD_POSE, "nope" */
    MODE_SILENT,   /* no reply at all */
    MODE_WRONG_ID, /* a valid reply with another id */
    MODE_GARBAGE,  /* bytes that are not msgpack */
    MODE_ODD_CODE, /* an error reply with a code this side does not know */
} server_mode;

typedef struct {
    nng_socket rep;
    pthread_t thread;
    pthread_mutex_t mu;
    server_mode mode;
    int requests;      /* requests received */
    tsdf_request last; /* the last request (payload pointers invalid) */
    uint8_t last_depth[64 * 48 * 4];
    size_t last_depth_len;
    int stop;
} fake_daemon;

static fake_daemon g_fd;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A tetrahedron: 4 vertices, 4 triangles. */
static const float tet_pos[12] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
static const float tet_nrm[12] = {-0.577f, -0.577f, -0.577f, 1, 0, 0, 0, 1, 0, 0, 0, 1};
static const uint8_t tet_col[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9};
static const uint32_t tet_idx[12] = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3};

static void answer(const tsdf_request *q, tsdf_reply *r, float *depth, float *normals, uint8_t *rgb)
{
    tsdf_reply_init(r, q->type, q->id);
    switch (q->type) {
    case TSDF_MSG_INTEGRATE:
        r->u.integrate.seq = q->u.frame.seq;
        r->u.integrate.version = 1000 + q->u.frame.seq;
        r->u.integrate.integrate_ms = 1.25;
        break;
    case TSDF_MSG_RAYCAST: {
        size_t px = (size_t)q->u.raycast.width * q->u.raycast.height;
        for (size_t i = 0; i < px; i++) {
            depth[i] = (i % 2) ? 1.5f : NAN;
            normals[3 * i] = 0, normals[3 * i + 1] = 0, normals[3 * i + 2] = -1;
            rgb[3 * i] = 10, rgb[3 * i + 1] = 20, rgb[3 * i + 2] = 30;
        }
        r->u.raycast.width = q->u.raycast.width;
        r->u.raycast.height = q->u.raycast.height;
        r->u.raycast.depth_m = depth;
        r->u.raycast.normals = normals;
        r->u.raycast.rgb = q->u.raycast.want_rgb ? rgb : NULL;
        break;
    }
    case TSDF_MSG_MESH:
        r->u.mesh = (tsdf_rep_mesh){.version = 77,
                                    .vertex_count = 4,
                                    .triangle_count = 4,
                                    .positions = tet_pos,
                                    .normals = tet_nrm,
                                    .colors = tet_col,
                                    .indices = tet_idx};
        if (q->u.mesh.since_version == 77)
            r->u.mesh = (tsdf_rep_mesh){.version = 77};
        break;
    case TSDF_MSG_STATS:
        r->u.stats.has_engine = 1;
        r->u.stats.engine.backend = TSDF_BACKEND_CPU;
        r->u.stats.engine.blocks_allocated = 321;
        r->u.stats.engine.version = 9;
        r->u.stats.extra_count = 2;
        r->u.stats.extra[0] = (tsdf_stat_entry){"frames.received", 0, 55, 0};
        r->u.stats.extra[1] = (tsdf_stat_entry){"latency.p50_ms", 1, 0, 3.5};
        break;
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        snprintf(r->u.path.path, sizeof(r->u.path.path), "%s",
                 q->u.path.path[0] ? q->u.path.path : "/var/lib/tsdfd/default.tsdf");
        r->u.path.version = 5;
        break;
    case TSDF_MSG_MAPS:
        r->u.maps.count = 2;
        strcpy(r->u.maps.names[0], "default");
        strcpy(r->u.maps.names[1], "lab");
        break;
    case TSDF_MSG_PING:
        strcpy(r->u.ping.server, "fake-tsdfd 1");
        r->u.ping.uptime_ms = 4242;
        break;
    default:
        break;
    }
}

static void *server_main(void *arg)
{
    fake_daemon *fd = arg;
    float *depth = malloc(64 * 48 * 4), *normals = malloc(64 * 48 * 12);
    uint8_t *rgb = malloc(64 * 48 * 3);
    tsdf_request *q = malloc(sizeof(*q));
    tsdf_reply *r = malloc(sizeof(*r));
    tsdf_buf out;
    tsdf_buf_init(&out);
    for (;;) {
        nng_msg *msg;
        int rv = nng_recvmsg(fd->rep, &msg, 0);
        if (rv != 0)
            break; /* closed */
        int rc = tsdf_proto_decode_request(nng_msg_body(msg), nng_msg_len(msg), q, NULL);
        pthread_mutex_lock(&fd->mu);
        server_mode mode = fd->mode;
        fd->requests++;
        if (rc == TSDF_OK) {
            fd->last = *q;
            fd->last_depth_len = 0;
            if (q->type == TSDF_MSG_INTEGRATE) {
                const tsdf_frame *f = &q->u.frame.frame;
                size_t n =
                    (size_t)f->width * f->height * (f->depth_format == TSDF_DEPTH_U16 ? 2u : 4u);
                if (n <= sizeof(fd->last_depth)) {
                    memcpy(fd->last_depth, f->depth, n);
                    fd->last_depth_len = n;
                }
            }
        }
        pthread_mutex_unlock(&fd->mu);

        tsdf_buf_clear(&out);
        if (rc != TSDF_OK) {
            tsdf_reply_init(r, TSDF_MSG_ERROR, 0);
            tsdf_reply_set_error(r, rc, NULL);
        } else if (mode == MODE_ERROR) {
            tsdf_reply_init(r, q->type, q->id);
            tsdf_reply_set_error(r, TSDF_EBAD_POSE, "nope");
        } else if (mode == MODE_ODD_CODE) {
            tsdf_reply_init(r, q->type, q->id);
            tsdf_reply_set_error(r, -999, "from the future");
        } else {
            answer(q, r, depth, normals, rgb);
            if (mode == MODE_WRONG_ID)
                r->id = q->id + 1;
        }
        if (mode == MODE_SILENT) {
            nng_msg_free(msg);
            continue;
        }
        /* No cmocka assertions in this thread (they would longjmp across
         * threads): a reply that cannot be built is simply not sent, and
         * the client's call then fails its test with a timeout. */
        int ok;
        if (mode == MODE_GARBAGE) {
            static const uint8_t junk[] = {0xc1, 0x00, 0x01};
            ok = tsdf_buf_append(&out, junk, sizeof(junk)) == TSDF_OK;
        } else {
            ok = tsdf_proto_encode_reply(r, &out) == TSDF_OK;
        }
        nng_msg_clear(msg);
        if (!ok || nng_msg_append(msg, out.data, out.len) != 0 || nng_sendmsg(fd->rep, msg, 0) != 0)
            nng_msg_free(msg);
    }
    tsdf_buf_fini(&out);
    free(depth);
    free(normals);
    free(rgb);
    free(q);
    free(r);
    return NULL;
}

static void server_start(fake_daemon *fd, const char *url)
{
    memset(fd, 0, sizeof(*fd));
    pthread_mutex_init(&fd->mu, NULL);
    assert_int_equal(nng_rep0_open(&fd->rep), 0);
    assert_int_equal(nng_listen(fd->rep, url, NULL, 0), 0);
    assert_int_equal(pthread_create(&fd->thread, NULL, server_main, fd), 0);
}

static void server_stop(fake_daemon *fd)
{
    nng_close(fd->rep);
    pthread_join(fd->thread, NULL);
    pthread_mutex_destroy(&fd->mu);
}

static void set_mode(server_mode m)
{
    pthread_mutex_lock(&g_fd.mu);
    g_fd.mode = m;
    pthread_mutex_unlock(&g_fd.mu);
}

static int setup(void **state)
{
    server_start(&g_fd, REQ_URL);
    tsdf_client *c;
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.default_timeout_ms = 2000;
    if (tsdf_client_open(REQ_URL, NULL, &o, &c) != TSDF_OK)
        return -1;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    tsdf_client_close(*state);
    server_stop(&g_fd);
    return 0;
}

/* ---- tests -------------------------------------------------------------- */

static uint16_t g_depth[8 * 6];

static void make_frame(tsdf_frame *f)
{
    memset(f, 0, sizeof(*f));
    for (int i = 0; i < 8 * 6; i++)
        g_depth[i] = (uint16_t)(500 + 10 * i);
    f->width = 8;
    f->height = 6;
    f->K = (tsdf_intrinsics){6, 6, 3.5f, 2.5f};
    tsdf_pose_identity(f->T_world_cam);
    f->T_world_cam[3] = 0.5f;
    f->depth_format = TSDF_DEPTH_U16;
    f->depth = g_depth;
    f->depth_scale = 0.001f;
    f->min_depth_m = 0.1f;
    f->max_depth_m = 5.0f;
}

static void test_ping_and_maps(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    tsdf_rep_ping p;
    assert_int_equal(tsdf_client_ping(c, &p, 10000), TSDF_OK);
    assert_string_equal(p.server, "fake-tsdfd 1");
    assert_int_equal(p.uptime_ms, 4242);
    assert_int_equal(g_fd.last.type, TSDF_MSG_PING);
    uint64_t first_id = g_fd.last.id;
    assert_int_equal(tsdf_client_ping(c, NULL, TSDF_CLIENT_TIMEOUT_DEFAULT), TSDF_OK);
    /* Every request gets a fresh id. */
    assert_true(g_fd.last.id != first_id);

    tsdf_rep_maps *m = malloc(sizeof(*m));
    assert_int_equal(tsdf_client_maps(c, m, 10000), TSDF_OK);
    assert_int_equal(m->count, 2);
    assert_string_equal(m->names[1], "lab");
    free(m);
}

static void test_integrate(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    tsdf_frame f;
    make_frame(&f);
    tsdf_client_frame cf = {"kitchen", "cam/left", 0, 17, 123456789, &f, TSDF_DEPTH_ENC_RAW, 0};
    tsdf_rep_integrate out;
    assert_int_equal(tsdf_client_integrate(c, &cf, 10000, &out), TSDF_OK);
    assert_int_equal(out.seq, 17);
    assert_int_equal(out.version, 1017);
    assert_true(out.integrate_ms == 1.25);
    /* What the server received is what was sent. */
    pthread_mutex_lock(&g_fd.mu);
    assert_int_equal(g_fd.last.type, TSDF_MSG_INTEGRATE);
    assert_string_equal(g_fd.last.map, "kitchen");
    assert_int_equal(g_fd.last.u.frame.sensor.is_id, 0);
    assert_string_equal(g_fd.last.u.frame.sensor.name, "cam/left");
    assert_int_equal(g_fd.last.u.frame.stamp_ns, 123456789);
    assert_true(g_fd.last.u.frame.frame.T_world_cam[3] == 0.5f);
    assert_int_equal(g_fd.last_depth_len, sizeof(g_depth));
    assert_memory_equal(g_fd.last_depth, g_depth, sizeof(g_depth));
    pthread_mutex_unlock(&g_fd.mu);

    /* Invalid frames are refused locally, before anything is sent. */
    int before = g_fd.requests;
    f.T_world_cam[0] = 2.0f;
    assert_int_equal(tsdf_client_integrate(c, &cf, 10000, NULL), TSDF_EBAD_POSE);
    make_frame(&f);
    f.K.fx = 0;
    assert_int_equal(tsdf_client_integrate(c, &cf, 10000, NULL), TSDF_EBAD_INTRINSICS);
    make_frame(&f);
    cf.map = "no/slashes";
    assert_int_equal(tsdf_client_integrate(c, &cf, 10000, NULL), TSDF_EINVAL);
    assert_true(strlen(tsdf_client_last_message()) > 0);
    assert_int_equal(g_fd.requests, before);
    assert_int_equal(tsdf_client_integrate(c, NULL, 10000, NULL), TSDF_EINVAL);
}

static void test_raycast(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    tsdf_raycast_params p;
    memset(&p, 0, sizeof(p));
    p.width = 16;
    p.height = 12;
    p.K = (tsdf_intrinsics){12, 12, 7.5f, 5.5f};
    tsdf_pose_identity(p.T_world_cam);
    p.min_depth_m = 0.2f;
    p.max_depth_m = 3.0f;
    float depth[16 * 12], normals[16 * 12 * 3];
    uint8_t rgb[16 * 12 * 3];
    tsdf_raycast_output out = {depth, normals, rgb};
    int has_rgb = -1;
    assert_int_equal(tsdf_client_raycast(c, "m1", &p, 1, &out, &has_rgb, 10000), TSDF_OK);
    assert_int_equal(has_rgb, 1);
    assert_true(isnan(depth[0]));
    assert_true(depth[1] == 1.5f);
    assert_true(normals[5] == -1.0f);
    assert_int_equal(rgb[4], 20);
    assert_string_equal(g_fd.last.map, "m1");
    assert_true(g_fd.last.u.raycast.max_depth_m == 3.0f);

    /* Without colour: the rgb buffer is cleared. */
    assert_int_equal(tsdf_client_raycast(c, NULL, &p, 0, &out, &has_rgb, 10000), TSDF_OK);
    assert_int_equal(has_rgb, 0);
    assert_int_equal(rgb[4], 0);
    assert_string_equal(g_fd.last.map, "default");

    /* Normals are asked for only by a caller that takes them; the keys
     * for depth alone and a scale reach the daemon as set. */
    assert_int_equal(g_fd.last.u.raycast.want_normals, 1);
    tsdf_raycast_output no_normals = {depth, NULL, NULL};
    assert_int_equal(tsdf_client_raycast(c, NULL, &p, 0, &no_normals, NULL, 10000), TSDF_OK);
    assert_int_equal(g_fd.last.u.raycast.want_normals, 0);
    assert_int_equal(g_fd.last.u.raycast.scale, 1);
    /* This fake answers as a daemon from before "scale": a full-size
     * reply to a scaled request is refused, nothing written. */
    tsdf_client_raycast_options o = {.want_normals = 1, .scale = 2, .after_queued = 1};
    tsdf_client_raycast_info info;
    depth[1] = -7.0f;
    assert_int_equal(tsdf_client_raycast_ex(c, NULL, &p, &o, &out, &info, 10000), TSDF_EBAD_SIZE);
    assert_true(depth[1] == -7.0f);
    assert_int_equal(g_fd.last.u.raycast.scale, 2);
    assert_int_equal(g_fd.last.u.raycast.after, TSDF_AFTER_QUEUED);
    o.scale = TSDF_CLIENT_MAX_RAYCAST_SCALE + 1;
    assert_int_equal(tsdf_client_raycast_ex(c, NULL, &p, &o, &out, &info, 10000), TSDF_EINVAL);
    o.scale = 1;
    out.normals = NULL;
    assert_int_equal(tsdf_client_raycast_ex(c, NULL, &p, &o, &out, &info, 10000), TSDF_EINVAL);
    out.normals = normals;

    p.T_world_cam[15] = 2.0f;
    assert_int_equal(tsdf_client_raycast(c, NULL, &p, 0, &out, NULL, 10000), TSDF_EBAD_POSE);
}

static void test_mesh(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    tsdf_mesh m;
    memset(&m, 0, sizeof(m));
    uint64_t version = 0;
    tsdf_mesh_params mp = {1, {{-1, -1, -1}, {2, 2, 2}}, 0, 0};
    assert_int_equal(tsdf_client_mesh(c, NULL, &mp, &m, &version, 10000), TSDF_OK);
    assert_int_equal(version, 77);
    assert_int_equal(m.vertex_count, 4);
    assert_int_equal(m.triangle_count, 4);
    assert_memory_equal(m.positions, tet_pos, sizeof(tet_pos));
    assert_memory_equal(m.normals, tet_nrm, sizeof(tet_nrm));
    assert_memory_equal(m.colors, tet_col, sizeof(tet_col));
    assert_memory_equal(m.indices, tet_idx, sizeof(tet_idx));
    assert_int_equal(g_fd.last.u.mesh.use_box, 1);
    assert_true(g_fd.last.u.mesh.box.max[2] == 2.0f);

    /* An incremental mesh with nothing new replaces the old arrays. */
    mp.use_box = 0;
    mp.since_version = 77;
    assert_int_equal(tsdf_client_mesh(c, NULL, &mp, &m, &version, 10000), TSDF_OK);
    assert_int_equal(m.vertex_count, 0);
    assert_int_equal(m.triangle_count, 0);
    assert_null(m.colors);
    assert_int_equal(g_fd.last.u.mesh.since_version, 77);
    tsdf_client_mesh_release(&m);
    assert_null(m.positions);

    mp.use_box = 1;
    mp.box.max[0] = -5; /* inverted */
    assert_int_equal(tsdf_client_mesh(c, NULL, &mp, &m, NULL, 10000), TSDF_EINVAL);
}

static void test_stats_save_load_reset(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    tsdf_rep_stats *s = malloc(sizeof(*s));
    assert_int_equal(tsdf_client_stats(c, "lab", s, 10000), TSDF_OK);
    assert_int_equal(s->has_engine, 1);
    assert_int_equal(s->engine.backend, TSDF_BACKEND_CPU);
    assert_int_equal(s->engine.blocks_allocated, 321);
    assert_int_equal(s->extra_count, 2);
    assert_string_equal(s->extra[1].key, "latency.p50_ms");
    assert_true(s->extra[1].f == 3.5);
    free(s);

    tsdf_rep_path p;
    assert_int_equal(tsdf_client_save(c, "lab", "/tmp/lab.tsdf", &p, 10000), TSDF_OK);
    assert_string_equal(p.path, "/tmp/lab.tsdf");
    assert_int_equal(g_fd.last.type, TSDF_MSG_SAVE);
    assert_int_equal(tsdf_client_load(c, NULL, NULL, &p, 10000), TSDF_OK);
    assert_string_equal(p.path, "/var/lib/tsdfd/default.tsdf");
    assert_int_equal(g_fd.last.type, TSDF_MSG_LOAD);
    assert_int_equal(tsdf_client_load(c, NULL, "", &p, 10000), TSDF_EINVAL);
    assert_int_equal(tsdf_client_reset(c, "lab", 10000), TSDF_OK);
    assert_int_equal(g_fd.last.type, TSDF_MSG_RESET);
    assert_string_equal(g_fd.last.map, "lab");
}

static void test_error_replies(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_ERROR);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_EBAD_POSE);
    assert_string_equal(tsdf_client_last_message(), "nope");
    assert_int_equal(tsdf_client_reset(c, NULL, 10000), TSDF_EBAD_POSE);
    tsdf_mesh m;
    memset(&m, 0, sizeof(m));
    assert_int_equal(tsdf_client_mesh(c, NULL, NULL, &m, NULL, 10000), TSDF_EBAD_POSE);
    assert_null(m.positions);

    /* A code this library does not know is passed through unchanged. */
    set_mode(MODE_ODD_CODE);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), -999);
    assert_string_equal(tsdf_client_last_message(), "from the future");

    set_mode(MODE_WRONG_ID);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_EFORMAT);
    set_mode(MODE_GARBAGE);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_EFORMAT);
    set_mode(MODE_OK);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
    assert_string_equal(tsdf_client_last_message(), "");
}

static void test_timeout(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_SILENT);
    int64_t t0 = now_ms();
    assert_int_equal(tsdf_client_ping(c, NULL, 150), TSDF_ETIMEOUT);
    int64_t dt = now_ms() - t0;
    /* Not before its time; and it does end (the server never answers):
     * the upper bound is a generous deadline, not a speed. */
    assert_true(dt >= 140 && dt < 60000);
    /* The client stays usable after a timeout. */
    set_mode(MODE_OK);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
}

typedef struct {
    tsdf_client *c;
    int ok;
} worker_arg;

static void *ping_worker(void *p)
{
    worker_arg *a = p;
    tsdf_rep_ping r;
    for (int i = 0; i < 50; i++)
        a->ok += tsdf_client_ping(a->c, &r, 2000) == TSDF_OK && r.uptime_ms == 4242;
    return NULL;
}

static void test_concurrent_calls(void **state)
{
    tsdf_client *c = *state;
    set_mode(MODE_OK);
    pthread_t t[4];
    worker_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (worker_arg){c, 0};
        assert_int_equal(pthread_create(&t[i], NULL, ping_worker, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].ok, 50);
    }
}

/* ---- without the fixture ------------------------------------------------ */

static void test_connect_refused_and_lazy(void **state)
{
    (void)state;
    tsdf_client *c = NULL;
    char url[512];
    snprintf(url, sizeof(url), "ipc://%s/nobody.sock", tsdf_test_tmpdir());
    assert_int_equal(tsdf_client_open(url, NULL, NULL, &c), TSDF_ECONNREFUSED);
    assert_null(c);
    assert_int_equal(tsdf_client_open("inproc://nobody-here", NULL, NULL, &c), TSDF_ECONNREFUSED);
    assert_int_equal(tsdf_client_open("bogus://x", NULL, NULL, &c), TSDF_EINVAL);
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.push_send_buffer = 0;
    assert_int_equal(tsdf_client_open(REQ_URL, NULL, &o, &c), TSDF_EINVAL);

    /* Lazy: open succeeds, calls time out until the daemon appears, then
     * work without reopening. */
    tsdf_client_options_default(&o);
    o.lazy_connect = 1;
    snprintf(url, sizeof(url), "ipc://%s/late.sock", tsdf_test_tmpdir());
    assert_int_equal(tsdf_client_open(url, NULL, &o, &c), TSDF_OK);
    assert_int_equal(tsdf_client_ping(c, NULL, 100), TSDF_ETIMEOUT);
    fake_daemon late;
    server_start(&late, url);
    late.mode = MODE_OK;
    int rc = TSDF_ETIMEOUT;
    for (int i = 0; i < 120 && rc != TSDF_OK; i++)
        rc = tsdf_client_ping(c, NULL, 500);
    assert_int_equal(rc, TSDF_OK);
    tsdf_client_close(c);
    server_stop(&late);
}

static void test_push_frames(void **state)
{
    (void)state;
    nng_socket pull;
    assert_int_equal(nng_pull0_open(&pull), 0);
    assert_int_equal(nng_listen(pull, PULL_URL, NULL, 0), 0);
    assert_int_equal(nng_socket_set_ms(pull, NNG_OPT_RECVTIMEO, 30000), 0);
    fake_daemon fd;
    server_start(&fd, "inproc://tsdf-test-req2");
    tsdf_client *c;
    assert_int_equal(tsdf_client_open("inproc://tsdf-test-req2", PULL_URL, NULL, &c), TSDF_OK);

    tsdf_frame f;
    make_frame(&f);
    tsdf_client_frame cf = {NULL, NULL, 3, 5, 6, &f, TSDF_DEPTH_ENC_RAW, 0};
    for (int i = 0; i < 3; i++) {
        cf.seq = (uint64_t)i;
        assert_int_equal(tsdf_client_send_frame(c, &cf, 10000), TSDF_OK);
    }
    tsdf_request *q = malloc(sizeof(*q));
    for (int i = 0; i < 3; i++) {
        nng_msg *m;
        assert_int_equal(nng_recvmsg(pull, &m, 0), 0);
        assert_int_equal(tsdf_proto_decode_request(nng_msg_body(m), nng_msg_len(m), q, NULL),
                         TSDF_OK);
        assert_int_equal(q->type, TSDF_MSG_FRAME);
        assert_int_equal(q->u.frame.seq, (uint64_t)i);
        assert_int_equal(q->u.frame.sensor.is_id, 1);
        assert_int_equal(q->u.frame.sensor.id, 3);
        assert_string_equal(q->map, "default");
        assert_memory_equal(q->u.frame.frame.depth, g_depth, sizeof(g_depth));
        nng_msg_free(m);
    }
    free(q);
    /* A bad frame is refused before it is queued. */
    f.depth = NULL;
    assert_int_equal(tsdf_client_send_frame(c, &cf, 0), TSDF_EINVAL);
    tsdf_client_close(c);
    nng_close(pull);

    /* A client without a push URL cannot send frames. */
    make_frame(&f);
    assert_int_equal(tsdf_client_open("inproc://tsdf-test-req2", NULL, NULL, &c), TSDF_OK);
    assert_int_equal(tsdf_client_send_frame(c, &cf, 0), TSDF_EINVAL);
    tsdf_client_close(c);

    /* Nobody pulls: the bounded buffer fills, then QUEUE_FULL at once or
     * TIMEOUT after waiting. */
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.lazy_connect = 1;
    o.push_send_buffer = 2;
    assert_int_equal(tsdf_client_open("inproc://tsdf-test-req2", "inproc://nobody-pulls", &o, &c),
                     TSDF_OK);
    int queued = 0, rc = TSDF_OK;
    for (int i = 0; i < 10 && rc == TSDF_OK; i++) {
        rc = tsdf_client_send_frame(c, &cf, 0);
        queued += rc == TSDF_OK;
    }
    assert_int_equal(rc, TSDF_EQUEUE_FULL);
    assert_true(queued >= 1 && queued <= 3);
    int64_t t0 = now_ms();
    assert_int_equal(tsdf_client_send_frame(c, &cf, 100), TSDF_ETIMEOUT);
    assert_true(now_ms() - t0 >= 90);
    tsdf_client_close(c);
    server_stop(&fd);
}

static void test_nng_error_mapping(void **state)
{
    (void)state;
    assert_int_equal(tsdf_client_nng_error(0), TSDF_OK);
    assert_int_equal(tsdf_client_nng_error(NNG_ETIMEDOUT), TSDF_ETIMEOUT);
    assert_int_equal(tsdf_client_nng_error(NNG_ECONNREFUSED), TSDF_ECONNREFUSED);
    assert_int_equal(tsdf_client_nng_error(NNG_ENOENT), TSDF_ECONNREFUSED);
    assert_int_equal(tsdf_client_nng_error(NNG_ECLOSED), TSDF_ECLOSED);
    assert_int_equal(tsdf_client_nng_error(NNG_EAGAIN), TSDF_EQUEUE_FULL);
    assert_int_equal(tsdf_client_nng_error(NNG_ENOMEM), TSDF_ENOMEM);
    assert_int_equal(tsdf_client_nng_error(NNG_EADDRINVAL), TSDF_EINVAL);
    assert_int_equal(tsdf_client_nng_error(NNG_EPROTO), TSDF_ENNG);
    assert_int_equal(tsdf_client_nng_error(NNG_EINTERNAL), TSDF_ENNG);
}

int main(void)
{
    const struct CMUnitTest fixture_tests[] = {
        cmocka_unit_test(test_ping_and_maps),
        cmocka_unit_test(test_integrate),
        cmocka_unit_test(test_raycast),
        cmocka_unit_test(test_mesh),
        cmocka_unit_test(test_stats_save_load_reset),
        cmocka_unit_test(test_error_replies),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_concurrent_calls),
    };
    const struct CMUnitTest plain_tests[] = {
        cmocka_unit_test(test_connect_refused_and_lazy),
        cmocka_unit_test(test_push_frames),
        cmocka_unit_test(test_nng_error_mapping),
    };
    int rc = cmocka_run_group_tests_name("client_fixture", fixture_tests, setup, teardown);
    rc += cmocka_run_group_tests_name("client_plain", plain_tests, NULL, NULL);
    return rc;
}
