/*
 * test_daemon_persist.c - end-to-end tests of a real tsdfd's snapshots:
 *
 *  - autosave, save_on_stop and load_on_start: a second daemon on the same
 *    state directory serves the same mesh, and map versions continue;
 *  - save and load as proto/PROTOCOL.md (6.4) describes them: without a
 *    path (every map, pruned to keep) and with one;
 *  - client names may not pose as the daemon's own snapshot files, and one
 *    already planted does not win the restore.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- persistence: autosave, save_on_stop, load_on_start ----------------- */

/* Waits (120 s at most) until the daemon has saved n more times: each time
 * snapshot.last_save_age_ms falls, at least one save happened. */
static void wait_autosaves(tsdf_client *c, int n)
{
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    int64_t last = -1;
    int seen = 0;
    for (int waited = 0; seen < n; waited += 20) {
        assert_int_equal(tsdf_client_stats(c, NULL, st, 10000), TSDF_OK);
        int64_t age = stat_get(st, "snapshot.last_save_age_ms");
        if (age >= 0 && (last < 0 || age < last))
            seen++;
        last = age;
        if (waited > 120000)
            fail_msg("%d autosaves in 120 s, expected %d", seen, n);
        sleep_ms(20);
    }
    free(st);
}

static void test_persistence_across_restarts(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    (void)state;

    frames_make(&fs, "box", 128, 96, 8);
    assert_int_equal(start_daemon(&a,
                                  "[snapshot]\nsave_on_stop = true\nautosave_period_s = 1\n"
                                  "keep = 2\n[volume]\nmaps = default, siteB\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&a, 0);
    for (uint32_t i = 0; i < fs.count; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = "siteB";
        f.frame = &fs.frames[i];
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
    }
    tsdf_mesh before;
    uint64_t version_before = 0;
    tsdf_mesh_init(&before);
    assert_int_equal(tsdf_client_mesh(c, "siteB", NULL, &before, &version_before, 60000), TSDF_OK);
    assert_true(before.triangle_count > 0);
    assert_int_equal(version_before, fs.count);
    /* The other map stays empty: maps do not mix. */
    tsdf_mesh other;
    tsdf_mesh_init(&other);
    assert_int_equal(tsdf_client_mesh(c, "default", NULL, &other, NULL, 60000), TSDF_OK);
    assert_int_equal(other.triangle_count, 0);
    tsdf_client_mesh_release(&other);
    /* Autosave runs every second and keeps at most 2 files: after three
     * of them (seen in the stats, not guessed from the clock), two. */
    wait_autosaves(c, 3);
    assert_int_equal(count_entries(a.state_dir, 1), 2);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    /* A second daemon on the same state dir loads the newest snapshot. */
    restart_on(&a, &b, NULL);
    c = open_client(&b, 0);
    tsdf_rep_maps maps;
    assert_int_equal(tsdf_client_maps(c, &maps, 10000), TSDF_OK);
    assert_int_equal(maps.count, 2);
    tsdf_mesh after;
    tsdf_mesh_init(&after);
    assert_int_equal(tsdf_client_mesh(c, "siteB", NULL, &after, NULL, 60000), TSDF_OK);
    assert_int_equal(after.vertex_count, before.vertex_count);
    assert_int_equal(after.triangle_count, before.triangle_count);
    if (test_backend() == TSDF_BACKEND_CUDA) {
        sort_vertices(after.positions, after.vertex_count);
        sort_vertices(before.positions, before.vertex_count);
    }
    for (size_t i = 0; i < 3 * before.vertex_count; i++)
        assert_true(fabsf(after.positions[i] - before.positions[i]) <= 1e-6f);
    tsdf_client_mesh_release(&after);
    tsdf_client_mesh_release(&before);

    /* Versions continue across the restart: a frame integrated now is
     * found by `mesh since` the version a client saw before it (the map's
     * version used to restart at 1, so such a mesh came back empty). */
    uint64_t version_after = 0;
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = "siteB";
    f.frame = &fs.frames[0];
    assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = version_before;
    tsdf_mesh_init(&after);
    assert_int_equal(tsdf_client_mesh(c, "siteB", &mp, &after, &version_after, 60000), TSDF_OK);
    assert_true(version_after > version_before + 1);
    assert_true(after.triangle_count > 0);
    tsdf_client_mesh_release(&after);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
}

/* ---- save and load as proto/PROTOCOL.md (6.4) describes them ------------ */

static uint64_t map_blocks(tsdf_client *c, const char *map, tsdf_rep_stats *st)
{
    assert_int_equal(tsdf_client_stats(c, map, st, 30000), TSDF_OK);
    assert_true(st->has_engine);
    return st->engine.blocks_allocated;
}

static void test_save_load_semantics(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_path sp, lp;
    char newest[TSDF_PROTO_MAX_PATH_LEN + 1];
    (void)state;

    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    frames_make(&fs, "box", 128, 96, 6);
    assert_int_equal(start_daemon(&h, "[snapshot]\nkeep = 2\n[volume]\nmaps = a, b\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    const char *maps[2] = {"a", "b"};
    for (int m = 0; m < 2; m++) {
        for (uint32_t i = 0; i < fs.count; i++) {
            tsdf_client_frame f;
            memset(&f, 0, sizeof f);
            f.map = maps[m];
            f.frame = &fs.frames[i];
            assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
        }
    }
    uint64_t blocks_a = map_blocks(c, "a", st);
    uint64_t blocks_b = map_blocks(c, "b", st);
    assert_true(blocks_a > 0);
    assert_true(blocks_b > 0);
    /* The frame timeline is the CUDA backend's: absent on the CPU one, the
     * last frames of the map (oldest first) on CUDA. */
    if (test_backend() == TSDF_BACKEND_CUDA) {
        assert_true(st->timeline_count > 0);
        assert_int_equal(st->timeline[st->timeline_count - 1].frame, st->engine.frames_integrated);
    } else {
        assert_int_equal(st->timeline_count, 0);
    }

    /* save without a path: a new snapshot of every map in state_dir each
     * time, pruned to keep = 2. The reply's version is that of `map`. */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tsdf_client_save(c, "a", NULL, &sp, 60000), TSDF_OK);
        assert_non_null(strstr(sp.path, h.state_dir));
        assert_non_null(strstr(sp.path, "/snap-"));
        assert_int_equal(sp.version, (uint64_t)fs.count);
    }
    snprintf(newest, sizeof newest, "%s", sp.path);
    assert_int_equal(count_entries(h.state_dir, 1), 2);
    assert_int_equal(access(newest, R_OK), 0);

    /* load without a path: only the named map, from the newest snapshot;
     * the other map stays as it is (here: empty). */
    assert_int_equal(tsdf_client_reset(c, "a", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_reset(c, "b", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_load(c, "a", NULL, &lp, 60000), TSDF_OK);
    assert_string_equal(lp.path, newest);
    assert_true(lp.version > 0);
    assert_int_equal(map_blocks(c, "a", st), blocks_a);
    assert_int_equal(map_blocks(c, "b", st), 0);
    /* The save asked for by map "a" holds map "b" too. */
    assert_int_equal(tsdf_client_load(c, "b", NULL, &lp, 60000), TSDF_OK);
    assert_int_equal(map_blocks(c, "b", st), blocks_b);
    /* A map the snapshot does not hold: NOT_FOUND, and it is not created. */
    assert_int_equal(tsdf_client_load(c, "nosuch", NULL, &lp, 60000), TSDF_ENOT_FOUND);
    tsdf_rep_maps ml;
    assert_int_equal(tsdf_client_maps(c, &ml, 10000), TSDF_OK);
    assert_int_equal(ml.count, 2);

    /* save with a (relative) path: every map into that file, nothing pruned. */
    assert_int_equal(tsdf_client_reset(c, "b", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_save(c, "b", "one.snap", &sp, 60000), TSDF_OK);
    assert_non_null(strstr(sp.path, h.state_dir));
    assert_non_null(strstr(sp.path, "/one.snap"));
    assert_int_equal(count_entries(h.state_dir, 1), 2);
    assert_int_equal(tsdf_client_reset(c, "a", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_load(c, "a", "one.snap", &lp, 60000), TSDF_OK);
    assert_string_equal(lp.path, sp.path);
    assert_int_equal(map_blocks(c, "a", st), blocks_a);
    assert_int_equal(map_blocks(c, "b", st), 0);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* A client saved under the daemon's own name with the largest sequence
 * (snap-18446744073709551614.tsdfsnap), after which the daemon's sequence
 * wrapped or named files it then refused, so every restart restored the
 * planted, stale state. Client names may not pose as the daemon's, and a
 * file already planted (by an older build) no longer wins the restore. */
static void copy_file_bytes(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void test_client_cannot_pin_the_restored_snapshot(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    tsdf_rep_path sp;
    char ini[2048], planted[TSDFD_HARNESS_PATH_LEN + 64];
    (void)state;

    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    frames_make(&fs, "box", 128, 96, 6);
    assert_int_equal(start_daemon(&a, "[snapshot]\nsave_on_stop = true\nkeep = 3\n", NULL), 0);
    tsdf_client *c = open_client(&a, 0);
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = "default";
    f.frame = &fs.frames[0];
    assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);

    /* Names of the daemon's own files are refused, wherever they point. */
    static const char *const reserved[] = {
        "snap-18446744073709551614.tsdfsnap", "snap-00000000000000000001.tsdfsnap",
        "sub/snap-x.tsdfsnap", ".snap-abc.tmp", "snap-.tsdfsnap"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        assert_int_equal(tsdf_client_save(c, "default", reserved[i], &sp, 60000), TSDF_EINVAL);
        assert_non_null(strstr(tsdf_client_last_message(), "reserved"));
    }
    assert_int_equal(count_entries(a.state_dir, 1), 0);
    /* An ordinary name still saves. */
    assert_int_equal(tsdf_client_save(c, "default", "mine.tsdfsnap", &sp, 60000), TSDF_OK);

    /* An older build let such a file in: plant one holding the 1-frame state. */
    assert_int_equal(tsdf_client_save(c, "default", NULL, &sp, 60000), TSDF_OK);
    uint64_t stale_blocks = map_blocks(c, "default", st);
    snprintf(planted, sizeof planted, "%s/snap-18446744073709551614.tsdfsnap", a.state_dir);
    copy_file_bytes(sp.path, planted);
    assert_int_equal(unlink(sp.path), 0);

    for (uint32_t i = 1; i < fs.count; i++) {
        f.frame = &fs.frames[i];
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, NULL), TSDF_OK);
    }
    uint64_t fresh_blocks = map_blocks(c, "default", st);
    assert_true(fresh_blocks > stale_blocks);
    /* The daemon's next save gets an ordinary, later name. */
    assert_int_equal(tsdf_client_save(c, "default", NULL, &sp, 60000), TSDF_OK);
    assert_null(strstr(sp.path, "1844674407370955161"));
    assert_non_null(strstr(sp.path, "/snap-"));
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    /* Restarts restore the truly newest state, twice over (the final save
     * of the first restart must not lose to the planted file either). */
    snprintf(ini, sizeof ini,
             "[server]\nstate_dir = %s\n[snapshot]\nload_on_start = true\nsave_on_stop = true\n"
             "keep = 3\n",
             a.state_dir);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(start_daemon(&b, ini, NULL), 0);
        c = open_client(&b, 0);
        assert_int_equal(map_blocks(c, "default", st), fresh_blocks);
        tsdf_client_close(c);
        assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    }
    frames_free(&fs);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_persistence_across_restarts),
        cmocka_unit_test(test_save_load_semantics),
        cmocka_unit_test(test_client_cannot_pin_the_restored_snapshot),
    };
    return daemon_tests_run("daemon_persist", tests, sizeof tests / sizeof tests[0]);
}
