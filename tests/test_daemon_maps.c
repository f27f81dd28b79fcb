/*
 * test_daemon_maps.c - the life of a map in a real daemon (CPU backend,
 * private ipc:// sockets): the max_maps limit, deleting a map (its slot,
 * its name and its memory come free; a deleted map stays deleted across a
 * restart), deleting a map while frames stream into it, and keeping unknown
 * map names from taking slots (auto_create_maps = false); and loading a
 * snapshot of format version 1. An integrate whose push waits for room
 * when its map is deleted is NOT_FOUND, counted as rejected no_map, not
 * "daemon is stopping".
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_map(tsdf_client *c, const char *name)
{
    tsdf_rep_maps *maps = malloc(sizeof *maps);
    assert_non_null(maps);
    assert_int_equal(tsdf_client_maps(c, maps, 10000), TSDF_OK);
    int found = 0;
    for (uint32_t i = 0; i < maps->count; i++)
        found |= strcmp(maps->names[i], name) == 0;
    free(maps);
    return found;
}

static void test_max_maps_is_enforced(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "sphere", 64, 48, 1);
    assert_int_equal(start_daemon(&h, "[volume]\nmax_maps = 2\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    static const char *const names[] = {"alpha", "beta", "gamma"};
    int expect[] = {TSDF_OK, TSDF_ELIMIT, TSDF_ELIMIT};
    for (int i = 0; i < 3; i++)
        assert_int_equal(integrate_into(c, names[i], &fs.frames[0]), expect[i]);
    tsdf_rep_maps maps;
    assert_int_equal(tsdf_client_maps(c, &maps, 10000), TSDF_OK);
    assert_int_equal(maps.count, 2); /* default + alpha */
    assert_int_equal(tsdf_client_stats(c, "alpha", st, 10000), TSDF_OK);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "rejected.no_map"), 2);
    assert_int_equal(stat_get(st, "frames.integrated"), 1);
    assert_int_equal(stat_get(st, "maps.count"), 2);
    assert_int_equal(st->engine.frames_integrated, 1);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* Junk maps (one-pixel frames with new names) used to fill max_maps for
 * good, and were saved and restored. A delete frees the slot, the name and
 * the memory at once, and keeps the map deleted across a restart. */
static void test_delete_frees_the_slot_for_good(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    char ini[1024];
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "sphere", 64, 48, 2);
    assert_int_equal(start_daemon(&a,
                                  "[volume]\nmax_maps = 4\n"
                                  "[snapshot]\nload_on_start = true\nsave_on_stop = true\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&a, 0);
    static const char *const junk[] = {"junk1", "junk2", "junk3"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(integrate_into(c, junk[i], &fs.frames[0]), TSDF_OK);
    assert_int_equal(integrate_into(c, "robot", &fs.frames[0]), TSDF_ELIMIT);
    assert_int_equal(tsdf_client_stats(c, NULL, st, 10000), TSDF_OK);
    int64_t memory_full = stat_get(st, "volume.memory_bytes");

    /* Delete: the map is gone, its name answers NOT_FOUND, its memory left
     * the budget, and its slot takes a new map. */
    assert_int_equal(tsdf_client_delete(c, "junk2", 30000), TSDF_OK);
    assert_false(has_map(c, "junk2"));
    assert_int_equal(tsdf_client_delete(c, "junk2", 30000), TSDF_ENOT_FOUND);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "junk2", NULL, &m, NULL, 10000), TSDF_ENOT_FOUND);
    assert_int_equal(tsdf_client_stats(c, NULL, st, 10000), TSDF_OK);
    assert_true(stat_get(st, "volume.memory_bytes") < memory_full);
    assert_int_equal(stat_get(st, "maps.count"), 3);
    assert_int_equal(integrate_into(c, "robot", &fs.frames[0]), TSDF_OK);
    assert_int_equal(integrate_into(c, "robot", &fs.frames[1]), TSDF_OK);
    /* The deleted name can be used again, for a new, empty map. */
    assert_int_equal(tsdf_client_delete(c, "junk1", 30000), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "junk3", st, 10000), TSDF_OK);
    assert_reconciled(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    /* The restart restores what was there at the stop: no junk1, no junk2. */
    snprintf(ini, sizeof ini,
             "[server]\nstate_dir = %s\n[volume]\nmax_maps = 4\n"
             "[snapshot]\nload_on_start = true\n",
             a.state_dir);
    assert_int_equal(start_daemon(&b, ini, NULL), 0);
    c = open_client(&b, 0);
    assert_false(has_map(c, "junk1"));
    assert_false(has_map(c, "junk2"));
    assert_true(has_map(c, "junk3"));
    assert_true(has_map(c, "robot"));
    assert_int_equal(tsdf_client_stats(c, "robot", st, 10000), TSDF_OK);
    assert_true(st->engine.blocks_allocated > 0);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* The snapshot a delete writes is what keeps the map deleted even when the
 * daemon then crashes, before any save at stop. */
static void test_delete_survives_a_crash(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    (void)state;

    frames_make(&fs, "sphere", 64, 48, 1);
    assert_int_equal(start_daemon(&a, "[snapshot]\nload_on_start = true\n", NULL), 0);
    tsdf_client *c = open_client(&a, 0);
    assert_int_equal(integrate_into(c, "keep", &fs.frames[0]), TSDF_OK);
    assert_int_equal(integrate_into(c, "drop", &fs.frames[0]), TSDF_OK);
    tsdf_rep_path sp;
    assert_int_equal(tsdf_client_save(c, NULL, NULL, &sp, 30000), TSDF_OK);
    assert_int_equal(tsdf_client_delete(c, "drop", 30000), TSDF_OK);
    tsdf_client_close(c);
    crash_and_restart(&a, &b);
    c = open_client(&b, 0);
    assert_true(has_map(c, "keep"));
    assert_false(has_map(c, "drop"));
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
}

typedef struct {
    const tsdfd_harness *h;
    const frame_set *fs;
    atomic_int stop;      /* set by the test: send no more */
    atomic_int done;      /* set here: sent and failed_other are final */
    atomic_int may_close; /* set by the test once the daemon has them all */
    int sent, failed_other;
} streamer;

/* Polls (60 s at most) until map exists and has integrated a frame. */
static void wait_map_integrated(tsdf_client *c, const char *map, tsdf_rep_stats *st)
{
    for (int waited = 0; waited < 60000; waited += 5) {
        int64_t n = 0;
        assert_int_equal(tsdf_client_stats(c, map, st, 10000), TSDF_OK);
        if (stat_find(st, "map.frames_integrated", &n) && n > 0)
            return;
        sleep_ms(5);
    }
    fail_msg("map %s integrated no frame in 60 s", map);
}

/* Pushes frames into map "busy" until told to stop; sends of a deleted
 * (and re-created) map are fine, anything else counts as a failure. */
static void *stream_main(void *arg)
{
    streamer *s = arg;
    tsdf_client *c = NULL;
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    if (tsdf_client_open(s->h->req_url, s->h->frames_url, &o, &c) != TSDF_OK) {
        s->failed_other++;
        atomic_store(&s->done, 1);
        return NULL;
    }
    for (uint32_t i = 0; !atomic_load(&s->stop); i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = "busy";
        f.frame = &s->fs->frames[i % s->fs->count];
        if (i % 4 == 0) {
            int rc = tsdf_client_integrate(c, &f, 30000, NULL);
            if (rc != TSDF_OK && rc != TSDF_ENOT_FOUND) {
                fprintf(stderr, "integrate during deletes: %s (%s)\n", tsdf_strerror(rc),
                        tsdf_client_last_message());
                s->failed_other++;
            }
        } else if (tsdf_client_send_frame(c, &f, 30000) != TSDF_OK) {
            s->failed_other++;
        }
        s->sent++;
    }
    /* nng drops what a PUSH socket still queues when it closes: keep it
     * open until the daemon has received every frame sent. */
    atomic_store(&s->done, 1);
    while (!atomic_load(&s->may_close))
        sleep_ms(5);
    tsdf_client_close(c);
    return NULL;
}

/* Deleting a map that two clients stream into: no crash, every frame is
 * accounted for (integrated into the old or the new map, or rejected
 * no_map), and the daemon goes on serving. */
static void test_delete_while_streaming(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    pthread_t t[2];
    streamer s[2];
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "box", 64, 48, 8);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    for (int i = 0; i < 2; i++) {
        memset(&s[i], 0, sizeof s[i]);
        s[i].h = &h;
        s[i].fs = &fs;
        assert_int_equal(pthread_create(&t[i], NULL, stream_main, &s[i]), 0);
    }
    /* Each delete waits until the streams have made the map again and
     * integrated into it, however slow the machine: so each one deletes a
     * map that is being streamed into. */
    int deleted = 0;
    for (int k = 0; k < 10; k++) {
        wait_map_integrated(c, "busy", st);
        int rc = tsdf_client_delete(c, "busy", 30000);
        assert_int_equal(rc, TSDF_OK);
        deleted++;
    }
    for (int i = 0; i < 2; i++)
        atomic_store(&s[i].stop, 1);
    for (int i = 0; i < 2; i++)
        while (!atomic_load(&s[i].done))
            sleep_ms(5);
    /* What was pushed last may still be in flight: wait for the counters to
     * settle (the streamers' sockets still open), then they reconcile. */
    wait_settled(c, NULL, s[0].sent + s[1].sent, st);
    for (int i = 0; i < 2; i++) {
        atomic_store(&s[i].may_close, 1);
        pthread_join(t[i], NULL);
        assert_int_equal(s[i].failed_other, 0);
    }
    printf("delete while streaming: %d deletes, %d + %d frames sent\n", deleted, s[0].sent,
           s[1].sent);
    assert_int_equal(deleted, 10);
    assert_reconciled(st);
    /* Frames that raced a delete are NOT_FOUND, rejected no_map
     * (PROTOCOL.md): never "daemon is stopping", dropped shutdown. */
    printf("delete while streaming: %lld rejected no_map\n",
           (long long)stat_get(st, "rejected.no_map"));
    assert_int_equal(stat_get(st, "dropped.shutdown"), 0);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- an integrate waiting for room when its map is deleted --------------- */

/* The side of a raycast that keeps the map's only worker thread busy for
 * seconds: 2048^2 rays of a 160-degree camera to the deepest legal depth,
 * each through the room's walls (tests/test_daemon_bounded.c). A delete
 * cancels it. */
#define BUSY_CAST_DIM 2048u

typedef struct {
    const tsdfd_harness *h;
    float *depth;
    atomic_int done;
    int rc;
} busy_cast;

static void *busy_cast_main(void *arg)
{
    busy_cast *b = arg;
    tsdf_client *c = open_client(b->h, 0);
    tsdf_raycast_params rp;
    tsdf_raycast_output out = {b->depth, NULL, NULL};
    memset(&rp, 0, sizeof rp);
    rp.width = rp.height = BUSY_CAST_DIM;
    rp.K.fx = rp.K.fy = (0.5f * (float)BUSY_CAST_DIM - 0.5f) / tanf(80.0f * 3.14159265f / 180.0f);
    rp.K.cx = rp.K.cy = 0.5f * (float)BUSY_CAST_DIM - 0.5f;
    rp.T_world_cam[0] = rp.T_world_cam[5] = rp.T_world_cam[10] = rp.T_world_cam[15] = 1.0f;
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = TSDF_MAX_RAY_M;
    /* The test's probe of the map's query place may hold it a moment
     * (BUSY): then again. */
    do
        b->rc = tsdf_client_raycast_ex(c, "room", &rp, NULL, &out, NULL, 600000);
    while (b->rc == TSDF_EBUSY);
    tsdf_client_close(c);
    atomic_store(&b->done, 1);
    return NULL;
}

typedef struct {
    const tsdfd_harness *h;
    const tsdf_frame *f;
    atomic_int done;
    int rc;
    char message[256];
} waiting_integrate;

static void *waiting_integrate_main(void *arg)
{
    waiting_integrate *w = arg;
    tsdf_client *c = open_client(w->h, 0);
    w->rc = integrate_into(c, "room", w->f);
    snprintf(w->message, sizeof w->message, "%s", tsdf_client_last_message());
    tsdf_client_close(c);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Polls the daemon's totals (no map: never waits for a worker) until
 * frames.received and frames.in_flight are as given; 60 s at most. */
static void wait_frames(tsdf_client *c, tsdf_rep_stats *st, int64_t received, int64_t in_flight)
{
    for (int waited = 0; waited < 60000; waited += 5) {
        assert_int_equal(tsdf_client_stats(c, NULL, st, 10000), TSDF_OK);
        if (stat_get(st, "frames.received") == received &&
            stat_get(st, "frames.in_flight") == in_flight)
            return;
        sleep_ms(5);
    }
    fail_msg("frames received %lld (want %lld), in flight %lld (want %lld)",
             (long long)stat_get(st, "frames.received"), (long long)received,
             (long long)stat_get(st, "frames.in_flight"), (long long)in_flight);
}

/* The map's worker is held by a long raycast; its queue (length 1) holds
 * a streamed frame, and an integrate waits for room. A delete then closes
 * the queue under the waiting push: that integrate is answered NOT_FOUND
 * and counted rejected no_map, as PROTOCOL.md says, where it used to be
 * SHUTDOWN ("daemon is shutting down") and a shutdown drop. */
static void test_integrate_waiting_on_a_deleted_map(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    pthread_t tc, ti;
    busy_cast cast = {0};
    waiting_integrate wi = {0};
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "room", 160, 120, 4);
    assert_int_equal(start_daemon(&h,
                                  "[volume]\ncpu_threads = 1\n"
                                  "[queue]\nlength = 1\npolicy = block\npush_timeout_ms = 600000\n"
                                  "[server]\nrequest_timeout_ms = 600000\nmax_message_mb = 32\n"
                                  "max_queries_per_map = 1\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&h, 1);
    for (uint32_t i = 0; i < fs.count; i++)
        assert_int_equal(integrate_into(c, "room", &fs.frames[i]), TSDF_OK);
    const int64_t base = (int64_t)fs.count;

    cast.h = &h;
    cast.depth = malloc((size_t)BUSY_CAST_DIM * BUSY_CAST_DIM * sizeof(float));
    assert_non_null(cast.depth);
    assert_int_equal(pthread_create(&tc, NULL, busy_cast_main, &cast), 0);
    /* The raycast holds the map's one query place (max_queries_per_map =
     * 1) from its admission to its end: another query of the map is BUSY
     * from then on, and the raycast is ahead of anything queued later. */
    for (int waited = 0;; waited += 5) {
        int rc = tsdf_client_stats(c, "room", st, 10000);
        if (rc == TSDF_EBUSY)
            break;
        assert_int_equal(rc, TSDF_OK);
        if (waited > 60000)
            fail_msg("the raycast was not admitted in 60 s");
        sleep_ms(5);
    }
    /* A streamed frame takes the queue's one place, behind the raycast. */
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = "room";
    f.frame = &fs.frames[0];
    assert_int_equal(tsdf_client_send_frame(c, &f, 30000), TSDF_OK);
    wait_frames(c, st, base + 1, 1);
    /* An integrate finds the queue full and waits for room. */
    wi.h = &h;
    wi.f = &fs.frames[1];
    assert_int_equal(pthread_create(&ti, NULL, waiting_integrate_main, &wi), 0);
    wait_frames(c, st, base + 2, 2);
    if (atomic_load(&cast.done))
        fail_msg("the raycast that holds the worker ended (%s) before the delete",
                 tsdf_strerror(cast.rc));
    assert_false(atomic_load(&wi.done));

    assert_int_equal(tsdf_client_delete(c, "room", 30000), TSDF_OK);
    pthread_join(ti, NULL);
    pthread_join(tc, NULL);
    print_message("integrate waiting on a deleted map: %s (%s); the raycast: %s\n",
                  tsdf_strerror(wi.rc), wi.message, tsdf_strerror(cast.rc));
    assert_int_equal(wi.rc, TSDF_ENOT_FOUND);
    /* The raycast the delete stopped: the map is gone, too. */
    assert_int_equal(cast.rc, TSDF_ENOT_FOUND);
    wait_settled(c, NULL, base + 2, st);
    assert_int_equal(stat_get(st, "rejected.no_map"), 2);
    assert_int_equal(stat_get(st, "dropped.shutdown"), 0);
    assert_reconciled(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(cast.depth);
    frames_free(&fs);
    free(st);
}

/* Where unknown names must not take slots, auto_create_maps = false: only
 * the declared maps (and loads) exist, and a frame for another name is
 * NOT_FOUND, counted, with no map made. With TLS, clients outside [tls]
 * writers cannot create maps either (tests/test_tls.c). */
static void test_no_auto_create_keeps_junk_out(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "sphere", 64, 48, 1);
    assert_int_equal(start_daemon(&h, "[volume]\nmaps = site\nauto_create_maps = false\n", NULL),
                     0);
    tsdf_client *c = open_client(&h, 0);
    for (int i = 0; i < 16; i++) {
        char name[16];
        snprintf(name, sizeof name, "junk%d", i);
        assert_int_equal(integrate_into(c, name, &fs.frames[0]), TSDF_ENOT_FOUND);
    }
    assert_int_equal(integrate_into(c, "site", &fs.frames[0]), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "site", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "maps.count"), 1);
    assert_int_equal(stat_get(st, "rejected.no_map"), 16);
    assert_reconciled(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* Copies the format version 1 fixture (tests/data/README.md) into dir. */
static void copy_v1_fixture(const char *dir, const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s'",
             tsdf_test_source_path("tests/data/snapshot-v1-sphere.tsdfsnap"), dir, name);
    assert_int_equal(system(cmd), 0);
}

/* A snapshot of format version 1 (written before the voxel layouts) loads
 * through a client's load request: its map takes the configured layout,
 * keeps the snapshot's voxel size and every block, and a restart after the
 * save (written in format 2) restores it so. */
static void v1_loads_as(const char *layout_ini, tsdf_layout want)
{
    tsdfd_harness a, b;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    tsdf_rep_path rp;
    char ini[1024];

    assert_non_null(st);
    snprintf(ini, sizeof ini, "[volume]\n%s\n[snapshot]\nsave_on_stop = true\n", layout_ini);
    assert_int_equal(start_daemon(&a, ini, NULL), 0);
    copy_v1_fixture(a.state_dir, "old.tsdfsnap");
    tsdf_client *c = open_client(&a, 0);
    assert_int_equal(tsdf_client_load(c, "sphere", "old.tsdfsnap", &rp, 30000), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "sphere", st, 10000), TSDF_OK);
    assert_true(st->has_params);
    assert_int_equal(st->params.layout, want);
    assert_int_equal(st->engine.layout, want);
    assert_true(st->params.voxel_size_m == 0.03f);
    assert_int_equal(st->engine.blocks_allocated, 34);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "sphere", NULL, &m, NULL, 30000), TSDF_OK);
    assert_true(m.triangle_count > 100);
    tsdf_mesh_fini(&m);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    restart_on(&a, &b, NULL);
    c = open_client(&b, 0);
    assert_int_equal(tsdf_client_stats(c, "sphere", st, 10000), TSDF_OK);
    assert_int_equal(st->params.layout, want);
    assert_int_equal(st->engine.blocks_allocated, 34);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    free(st);
}

static void test_version1_snapshot_loads(void **state)
{
    (void)state;
    v1_loads_as("layout = s16", TSDF_LAYOUT_S16);
    v1_loads_as("layout = f32", TSDF_LAYOUT_F32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_maps_is_enforced),
        cmocka_unit_test(test_delete_frees_the_slot_for_good),
        cmocka_unit_test(test_delete_survives_a_crash),
        cmocka_unit_test(test_delete_while_streaming),
        cmocka_unit_test(test_integrate_waiting_on_a_deleted_map),
        cmocka_unit_test(test_no_auto_create_keeps_junk_out),
        cmocka_unit_test(test_version1_snapshot_loads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
