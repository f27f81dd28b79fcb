/*
 * test_daemon_maps.c - the life of a map in a real daemon (CPU backend,
 * private ipc:// sockets): the max_maps limit, deleting a map (its slot,
 * its name and its memory come free; a deleted map stays deleted across a
 * restart), deleting a map while frames stream into it, and keeping unknown
 * map names from taking slots (auto_create_maps = false); and loading a
 * snapshot of format version 1.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

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
            if (rc != TSDF_OK && rc != TSDF_ENOT_FOUND)
                s->failed_other++;
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
    int deleted = 0;
    for (int k = 0; k < 10; k++) {
        sleep_ms(50);
        int rc = tsdf_client_delete(c, "busy", 30000);
        assert_true(rc == TSDF_OK || rc == TSDF_ENOT_FOUND);
        deleted += rc == TSDF_OK;
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
    assert_true(deleted >= 1);
    assert_reconciled(st);
    assert_true(stat_get(st, "rejected.no_map") >= 0);
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
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
        cmocka_unit_test(test_no_auto_create_keeps_junk_out),
        cmocka_unit_test(test_version1_snapshot_loads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
