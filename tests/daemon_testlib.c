/*
 * daemon_testlib.c - helpers of the end-to-end daemon tests (see
 * daemon_testlib.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <dirent.h>
#include <math.h>
#include <inttypes.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* ---- backend under test ------------------------------------------------- */

/* The daemon and the in-process reference use the CPU backend, unless
 * TSDF_TEST_DAEMON_BACKEND=cuda asks for the CUDA one (run on a GPU host;
 * the program skips where no GPU is usable). */
tsdf_backend test_backend(void)
{
    const char *b = getenv("TSDF_TEST_DAEMON_BACKEND");
    return (b != NULL && strcmp(b, "cuda") == 0) ? TSDF_BACKEND_CUDA : TSDF_BACKEND_CPU;
}

int start_daemon(tsdfd_harness *h, const char *extra_ini, const char *const *args)
{
    char ini[4096];
    snprintf(ini, sizeof ini, "[volume]\nbackend = %s\n%s", tsdf_backend_name(test_backend()),
             extra_ini != NULL ? extra_ini : "");
    return tsdfd_harness_start(h, ini, args);
}

/* ---- synthetic frames ---------------------------------------------------- */

void frames_make(frame_set *fs, const char *scene, uint32_t w, uint32_t h, uint32_t count)
{
    assert_int_equal(tsdf_synth_sequence_init(&fs->seq, scene), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&fs->seq, w, h), TSDF_OK);
    if (count > fs->seq.frame_count)
        count = fs->seq.frame_count;
    fs->count = count;
    fs->depth = calloc(count, sizeof *fs->depth);
    fs->frames = calloc(count, sizeof *fs->frames);
    assert_non_null(fs->depth);
    assert_non_null(fs->frames);
    for (uint32_t i = 0; i < count; i++) {
        /* Spread the frames over the whole trajectory. */
        uint32_t k = (uint32_t)((uint64_t)i * fs->seq.frame_count / count);
        fs->depth[i] = malloc((size_t)w * h * sizeof(float));
        assert_non_null(fs->depth[i]);
        assert_int_equal(tsdf_synth_sequence_frame(&fs->seq, k, fs->depth[i], NULL, &fs->frames[i]),
                         TSDF_OK);
    }
}

void frames_free(frame_set *fs)
{
    for (uint32_t i = 0; i < fs->count; i++)
        free(fs->depth[i]);
    free(fs->depth);
    free(fs->frames);
    memset(fs, 0, sizeof *fs);
}

/* ---- helpers ------------------------------------------------------------ */

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The first n floats of x and y in lexicographic order. */
static int cmp_floats(const float *x, const float *y, int n)
{
    for (int k = 0; k < n; k++)
        if (x[k] != y[k])
            return x[k] < y[k] ? -1 : 1;
    return 0;
}

static int cmp_vertex(const void *a, const void *b)
{
    return cmp_floats(a, b, 3);
}

/* The first n floats of x and y by their bits: a total order (-0 and +0
 * apart, NaNs in place), so that sorting two equal multisets gives the
 * same bytes. */
static int cmp_float_bits(const float *x, const float *y, int n)
{
    for (int k = 0; k < n; k++) {
        uint32_t a, b;
        memcpy(&a, &x[k], sizeof a);
        memcpy(&b, &y[k], sizeof b);
        if (a != b)
            return a < b ? -1 : 1;
    }
    return 0;
}

void sort_vertices(float *positions, size_t n)
{
    qsort(positions, n, 3 * sizeof(float), cmp_vertex);
}

int count_entries(const char *dir, int only_snapshots)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (only_snapshots && (strncmp(name, "snap-", 5) != 0 || len < 14 ||
                               strcmp(name + len - 9, ".tsdfsnap") != 0))
            continue;
        n++;
    }
    closedir(d);
    return n;
}

int stat_find(const tsdf_rep_stats *s, const char *key, int64_t *v)
{
    for (uint32_t i = 0; i < s->extra_count; i++) {
        if (strcmp(s->extra[i].key, key) == 0) {
            *v = s->extra[i].is_float ? (int64_t)s->extra[i].f : s->extra[i].i;
            return 1;
        }
    }
    return 0;
}

int64_t stat_get(const tsdf_rep_stats *s, const char *key)
{
    int64_t v = 0;
    if (!stat_find(s, key, &v))
        fail_msg("stats reply has no key '%s'", key);
    return v;
}

tsdf_client *open_client(const tsdfd_harness *h, int with_push)
{
    tsdf_client_options o;
    tsdf_client *c = NULL;
    tsdf_client_options_default(&o);
    o.default_timeout_ms = 30000;
    o.push_send_buffer = 4;
    int rc = tsdf_client_open(h->req_url, with_push ? h->frames_url : NULL, &o, &c);
    if (rc != TSDF_OK)
        fail_msg("tsdf_client_open(%s): %s", h->req_url, tsdf_strerror(rc));
    return c;
}

/* Polls stats until `expect_received` frames were received and none is in
 * flight (queued or being integrated), then leaves the reply in *st. */
void wait_settled(tsdf_client *c, const char *map, int64_t expect_received, tsdf_rep_stats *st)
{
    for (int waited = 0; waited < 60000; waited += 50) {
        int rc = tsdf_client_stats(c, map, st, 10000);
        assert_int_equal(rc, TSDF_OK);
        if (stat_get(st, "frames.received") >= expect_received &&
            stat_get(st, "frames.in_flight") == 0)
            return;
        sleep_ms(50);
    }
    fail_msg("frames did not settle: received %" PRId64 " of %" PRId64 ", in flight %" PRId64,
             stat_get(st, "frames.received"), expect_received, stat_get(st, "frames.in_flight"));
}

const char *const drop_reasons[3] = {"dropped.queue_full", "dropped.shutdown", "dropped.memory"};
const char *const reject_reasons[7] = {
    "rejected.decode_error", "rejected.invalid_frame", "rejected.capacity",     "rejected.no_map",
    "rejected.engine_error", "rejected.forbidden",     "rejected.depth_decode",
};

/* received == integrated + dropped + rejected, and each total is the sum
 * of its reasons. */
void assert_reconciled(const tsdf_rep_stats *st)
{
    int64_t received = stat_get(st, "frames.received");
    int64_t integrated = stat_get(st, "frames.integrated");
    int64_t dropped = stat_get(st, "frames.dropped");
    int64_t rejected = stat_get(st, "frames.rejected");
    int64_t sum = 0;
    assert_int_equal(received, integrated + dropped + rejected);
    for (size_t i = 0; i < sizeof drop_reasons / sizeof drop_reasons[0]; i++)
        sum += stat_get(st, drop_reasons[i]);
    assert_int_equal(sum, dropped);
    sum = 0;
    for (size_t i = 0; i < sizeof reject_reasons / sizeof reject_reasons[0]; i++)
        sum += stat_get(st, reject_reasons[i]);
    assert_int_equal(sum, rejected);
}

/* Raw nng sockets for bytes the client library would refuse to send. */
nng_socket raw_req(const tsdfd_harness *h)
{
    nng_socket s;
    assert_int_equal(nng_req0_open(&s), 0);
    assert_int_equal(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000), 0);
    assert_int_equal(nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 10000), 0);
    assert_int_equal(nng_dial(s, h->req_url, NULL, 0), 0);
    return s;
}

nng_socket raw_push(const tsdfd_harness *h)
{
    nng_socket s;
    assert_int_equal(nng_push0_open(&s), 0);
    assert_int_equal(nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 10000), 0);
    assert_int_equal(nng_dial(s, h->frames_url, NULL, 0), 0);
    return s;
}

/* Sends bytes on a raw REQ socket and decodes the reply into *rep. */
void raw_roundtrip(nng_socket s, const void *data, size_t len, tsdf_reply *rep)
{
    nng_msg *m;
    tsdf_proto_error perr;
    assert_int_equal(nng_msg_alloc(&m, 0), 0);
    assert_int_equal(nng_msg_append(m, data, len), 0);
    assert_int_equal(nng_sendmsg(s, m, 0), 0);
    nng_msg *r;
    int rv = nng_recvmsg(s, &r, 0);
    if (rv != 0)
        fail_msg("no reply to a %zu-byte request: %s", len, nng_strerror(rv));
    if (!tsdf_test_msgpack_strs_valid(nng_msg_body(r), nng_msg_len(r)))
        fail_msg("a reply to a %zu-byte request holds a str that is not UTF-8", len);
    int rc = tsdf_proto_decode_reply(nng_msg_body(r), nng_msg_len(r), rep, &perr);
    nng_msg_free(r);
    if (rc != TSDF_OK)
        fail_msg("reply does not decode: %s (%s)", tsdf_errname(rc), perr.message);
}

/* ---- msgpack builders for malformed requests ---------------------------- */

void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

pk_opts pk_defaults(void)
{
    pk_opts o;
    memset(&o, 0, sizeof o);
    o.type = "integrate";
    o.version = 1;
    o.width = 4;
    o.height = 2;
    o.fx = 100.0f;
    o.fy = 100.0f;
    o.cx = 2.0f;
    o.cy = 1.0f;
    o.fmt = "u16";
    o.map = "default";
    return o;
}

void pack_request(msgpack_sbuffer *sb, const pk_opts *o, uint64_t id)
{
    msgpack_packer pk;
    const uint32_t h = o->height;
    int integrate = strcmp(o->type, "integrate") == 0 || strcmp(o->type, "frame") == 0;
    size_t n = 3 + (integrate ? 13 - (o->omit_depth ? 1 : 0) : 0) + (o->pad_bytes ? 1 : 0);

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    pk_str(&pk, "v");
    msgpack_pack_int(&pk, o->version);
    pk_str(&pk, "type");
    pk_str(&pk, o->type);
    pk_str(&pk, "id");
    if (o->id_as_string)
        pk_str(&pk, "seven");
    else
        msgpack_pack_uint64(&pk, id);
    if (integrate) {
        pk_str(&pk, "map");
        pk_str(&pk, o->map);
        pk_str(&pk, "sensor");
        pk_str(&pk, "raw");
        pk_str(&pk, "width");
        msgpack_pack_uint32(&pk, o->width);
        pk_str(&pk, "height");
        msgpack_pack_uint32(&pk, h);
        pk_str(&pk, "fx");
        msgpack_pack_float(&pk, o->fx);
        pk_str(&pk, "fy");
        msgpack_pack_float(&pk, o->fy);
        pk_str(&pk, "cx");
        msgpack_pack_float(&pk, o->cx);
        pk_str(&pk, "cy");
        msgpack_pack_float(&pk, o->cy);
        pk_str(&pk, "depth_format");
        pk_str(&pk, o->fmt);
        pk_str(&pk, "min_depth");
        msgpack_pack_float(&pk, 0.1f);
        pk_str(&pk, "max_depth");
        msgpack_pack_float(&pk, 5.0f);
        pk_str(&pk, "T_world_cam");
        msgpack_pack_array(&pk, 16);
        for (int i = 0; i < 16; i++) {
            float v = (i % 5 == 0) ? 1.0f : 0.0f;
            if (o->bad_pose && i == 0)
                v = 2.0f;
            msgpack_pack_float(&pk, v);
        }
        if (!o->omit_depth) {
            size_t bytes = (size_t)o->width * h * 2 + (size_t)o->depth_delta;
            uint16_t *d = calloc(bytes / 2 + 1, 2);
            assert_non_null(d);
            for (size_t i = 0; i < bytes / 2; i++)
                d[i] = 1000;
            pk_str(&pk, "depth");
            msgpack_pack_bin(&pk, bytes);
            msgpack_pack_bin_body(&pk, d, bytes);
            free(d);
        }
    }
    if (o->pad_bytes) {
        char *pad = calloc(1, o->pad_bytes);
        assert_non_null(pad);
        pk_str(&pk, "pad");
        msgpack_pack_bin(&pk, o->pad_bytes);
        msgpack_pack_bin_body(&pk, pad, o->pad_bytes);
        free(pad);
    }
}

/* Sends a built request and checks the error reply. */
void expect_error(nng_socket s, const pk_opts *o, uint64_t id, int want_status,
                  tsdf_msg_type want_type)
{
    msgpack_sbuffer sb;
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    pack_request(&sb, o, id);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    if (rep->status != want_status)
        fail_msg("type %s: status %d (%s: %s), expected %d (%s)", o->type, rep->status, rep->error,
                 rep->message, want_status, tsdf_errname(want_status));
    assert_int_equal(rep->type, want_type);
    assert_string_equal(rep->error, tsdf_errname(want_status));
    if (want_type != TSDF_MSG_ERROR && !o->id_as_string)
        assert_int_equal(rep->id, id);
    free(rep);
}

void restart_on(const tsdfd_harness *h, tsdfd_harness *b, const char *extra_ini)
{
    char ini[4096];
    snprintf(ini, sizeof ini, "[server]\nstate_dir = %s\n[snapshot]\nload_on_start = true\n%s",
             h->state_dir, extra_ini != NULL ? extra_ini : "");
    assert_int_equal(start_daemon(b, ini, NULL), 0);
}

void crash_and_restart(tsdfd_harness *h, tsdfd_harness *b)
{
    assert_int_equal(kill(h->pid, SIGKILL), 0);
    assert_int_equal(waitpid(h->pid, NULL, 0), h->pid);
    h->pid = 0;
    restart_on(h, b, NULL);
}

int integrate_into(tsdf_client *c, const char *map, const tsdf_frame *frame)
{
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = map;
    f.frame = frame;
    return tsdf_client_integrate(c, &f, 30000, NULL);
}

/* ---- main --------------------------------------------------------------- */

int daemon_tests_run(const char *group, const struct CMUnitTest *tests, size_t count)
{
    if (test_backend() == TSDF_BACKEND_CUDA && !tsdf_cuda_available())
        tsdf_test_skip_program("TSDF_TEST_DAEMON_BACKEND=cuda but no usable GPU");
    const char *filter = getenv("TSDF_TEST_FILTER");
    if (filter != NULL && filter[0] != '\0')
        cmocka_set_test_filter(filter);
    int rc = _cmocka_run_group_tests(group, tests, count, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}

/* The synthetic frames as u16 millimetres (0 = no measurement). */
uint16_t *frame_to_mm(const tsdf_frame *f, tsdf_frame *out)
{
    size_t px = (size_t)f->width * f->height;
    uint16_t *mm = malloc(px * sizeof *mm);
    assert_non_null(mm);
    const float *d = f->depth;
    for (size_t i = 0; i < px; i++) {
        float v = d[i] * 1000.0f;
        mm[i] = isfinite(v) && v > 0.0f && v < 65535.0f ? (uint16_t)lrintf(v) : 0;
    }
    *out = *f;
    out->depth_format = TSDF_DEPTH_U16;
    out->depth = mm;
    out->depth_scale = 0.001f;
    out->depth_size_bytes = 0;
    return mm;
}

static void mesh_of(tsdf_client *c, const char *map, tsdf_mesh *m)
{
    tsdf_mesh_init(m);
    int rc = tsdf_client_mesh(c, map, NULL, m, NULL, 30000);
    if (rc != TSDF_OK)
        fail_msg("mesh of %s: %s (%s)", map, tsdf_strerror(rc), tsdf_client_last_message());
}

static int cmp_floats6(const void *a, const void *b)
{
    return cmp_float_bits(a, b, 6);
}

static int cmp_floats9(const void *a, const void *b)
{
    return cmp_float_bits(a, b, 9);
}

/* m's vertices (position and normal) and its triangles (their corners'
 * positions, in the rotation whose bits sort first, which keeps the
 * winding), each sorted by their bits: what two meshes of the same
 * volume share whatever order their vertices and triangles came in. */
static void mesh_canonical(const tsdf_mesh *m, float **verts, float **tris)
{
    *verts = malloc((m->vertex_count ? m->vertex_count : 1) * 6 * sizeof(float));
    *tris = malloc((m->triangle_count ? m->triangle_count : 1) * 9 * sizeof(float));
    assert_true(*verts != NULL && *tris != NULL);
    for (size_t i = 0; i < m->vertex_count; i++) {
        memcpy(*verts + 6 * i, m->positions + 3 * i, 3 * sizeof(float));
        memcpy(*verts + 6 * i + 3, m->normals + 3 * i, 3 * sizeof(float));
    }
    qsort(*verts, m->vertex_count, 6 * sizeof(float), cmp_floats6);
    for (size_t t = 0; t < m->triangle_count; t++) {
        float rot[3][9];
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 3; k++)
                memcpy(&rot[r][3 * k],
                       m->positions + 3 * (size_t)m->indices[3 * t + (size_t)((r + k) % 3)],
                       3 * sizeof(float));
        int first = 0;
        for (int r = 1; r < 3; r++)
            if (cmp_float_bits(rot[r], rot[first], 9) < 0)
                first = r;
        memcpy(*tris + 9 * t, rot[first], 9 * sizeof(float));
    }
    qsort(*tris, m->triangle_count, 9 * sizeof(float), cmp_floats9);
}

void assert_same_map(tsdf_client *c, const char *ref, const char *map)
{
    tsdf_mesh a, b;
    mesh_of(c, ref, &a);
    mesh_of(c, map, &b);
    assert_true(a.vertex_count > 1000);
    if (a.vertex_count != b.vertex_count || a.triangle_count != b.triangle_count)
        fail_msg("%s: %zu vertices %zu triangles, %s: %zu / %zu", ref, (size_t)a.vertex_count,
                 (size_t)a.triangle_count, map, (size_t)b.vertex_count, (size_t)b.triangle_count);
    if (test_backend() == TSDF_BACKEND_CPU) {
        /* The CPU reference meshes in block order: array for array. */
        assert_memory_equal(a.positions, b.positions, a.vertex_count * 3 * sizeof(float));
        assert_memory_equal(a.normals, b.normals, a.vertex_count * 3 * sizeof(float));
        assert_memory_equal(a.indices, b.indices, a.triangle_count * 3 * sizeof(uint32_t));
    } else {
        /* A CUDA volume's blocks lie in the pool in the order the device
         * inserted them, which differs from map to map: the same
         * vertices and triangles, in any order. */
        float *va, *ta, *vb, *tb;
        mesh_canonical(&a, &va, &ta);
        mesh_canonical(&b, &vb, &tb);
        assert_memory_equal(va, vb, a.vertex_count * 6 * sizeof(float));
        assert_memory_equal(ta, tb, a.triangle_count * 9 * sizeof(float));
        free(va);
        free(ta);
        free(vb);
        free(tb);
    }
    tsdf_client_mesh_release(&a);
    tsdf_client_mesh_release(&b);

    tsdf_rep_stats *sa = malloc(sizeof *sa), *sb = malloc(sizeof *sb);
    assert_non_null(sa);
    assert_non_null(sb);
    assert_int_equal(tsdf_client_stats(c, ref, sa, 30000), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, map, sb, 30000), TSDF_OK);
    assert_int_equal(sa->engine.blocks_allocated, sb->engine.blocks_allocated);
    assert_int_equal(sa->engine.frames_integrated, sb->engine.frames_integrated);
    assert_int_equal(sb->engine.frames_rejected, 0);
    free(sa);
    free(sb);
}
