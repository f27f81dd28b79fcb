/*
 * test_snapshot_fault.c - crash safety of the snapshots, end to end.
 *
 * Runs the real daemon (tsdfd, CPU backend, ipc:// sockets in a scratch
 * directory) with autosave every second and restore at start, streams
 * synthetic frames into it with the client library, and kills it with
 * SIGKILL at random moments (5 rounds, fixed seed). After every kill:
 *   - every snap-*.tsdfsnap in the state directory must pass snap_read:
 *     the write-temp/fsync/rename protocol never exposes a torn file under
 *     a snapshot name, whenever the kill lands (mid-write included);
 *   - the restarted daemon must restore exactly the newest valid snapshot:
 *     its map, saved again through the client (`save` to a file), must
 *     equal that snapshot's map voxel by voxel (same blocks, same sdf,
 *     weight and colour of every voxel, same volume parameters).
 *
 *   test_snapshot_fault [path/to/tsdfd]
 *
 * The daemon is the argument, else $TSDFD, else the build tree's tsdfd
 * (TSDFD_BIN); the test is skipped (77) when none is executable.
 */
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "snapshot.h"
#include "testutil.h"
#include "tsdf_client.h"
#include "tsdf_error.h"
#include "tsdf_synth.h"
#include "tsdf_voxel_layout.h"

#ifndef TSDFD_BIN
#define TSDFD_BIN ""
#endif

#define ROUNDS 5
#define SEED 20261130u

static const char *tsdfd_path;
static char dir[4096], state_dir[4200], req_url[4300], push_url[4300], log_path[4200];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec t = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Starts the daemon with its output appended to log_path. */
static pid_t start_daemon(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        char *argv[] = {(char *)tsdfd_path,
                        "--backend",
                        "cpu",
                        "--state-dir",
                        state_dir,
                        "--listen",
                        req_url,
                        "--frames-listen",
                        push_url,
                        "--metrics",
                        "off",
                        "--set",
                        "snapshot.autosave_period_s=1",
                        "--set",
                        "snapshot.load_on_start=true",
                        "--set",
                        "snapshot.save_on_stop=false",
                        "--set",
                        "snapshot.keep=3",
                        "--set",
                        "volume.voxel_size_m=0.02",
                        NULL};
        execv(tsdfd_path, argv);
        _exit(127);
    }
    return pid;
}

/* Waits until the daemon answers a ping; returns a connected client. */
static tsdf_client *wait_ready(pid_t pid)
{
    double t0 = now_s();
    while (now_s() - t0 < 30.0) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            fail_msg("tsdfd exited during start-up (status %d); see %s", status, log_path);
        tsdf_client *c = NULL;
        if (tsdf_client_open(req_url, push_url, NULL, &c) == TSDF_OK) {
            if (tsdf_client_ping(c, NULL, 1000) == TSDF_OK)
                return c;
            tsdf_client_close(c);
        }
        sleep_s(0.05);
    }
    fail_msg("tsdfd not ready after 30 s; see %s", log_path);
    return NULL;
}

typedef struct {
    tsdf_client *client;
    tsdf_synth_sequence seq;
    atomic_int stop;
    uint32_t next_frame; /* continues across rounds */
    uint64_t integrated;
} streamer;

/* Integrates frames one after the other until told to stop or the daemon
 * dies under it (then every call fails, which is expected). */
static void *stream_main(void *arg)
{
    streamer *s = arg;
    size_t px = (size_t)s->seq.width * s->seq.height;
    float *depth = malloc(px * sizeof *depth);
    uint8_t *rgb = malloc(px * 3);
    if (!depth || !rgb)
        goto done;
    while (!atomic_load(&s->stop)) {
        tsdf_frame f;
        uint32_t i = s->next_frame % s->seq.frame_count;
        if (tsdf_synth_sequence_frame(&s->seq, i, depth, rgb, &f) != TSDF_OK)
            break;
        /* A different millimetre offset per frame keeps every observed
         * voxel changing even once its weight is clamped, so that two
         * snapshots taken at different times differ and "restored the
         * newest" is distinguishable from "restored an older one". */
        float offset_m = 0.001f * (float)(s->next_frame % 5);
        for (size_t p = 0; p < px; p++) {
            if (depth[p] > 0.0f)
                depth[p] += offset_m;
        }
        tsdf_client_frame cf = {
            .map = "default", .sensor = "cam0", .seq = s->next_frame, .frame = &f};
        int r = tsdf_client_integrate(s->client, &cf, 2000, NULL);
        if (r == TSDF_OK) {
            s->integrated++;
            s->next_frame++;
        } else {
            sleep_s(0.01); /* the daemon is gone (killed): wait for the stop flag */
        }
    }
done:
    free(depth);
    free(rgb);
    return NULL;
}

static const snap_map *find_map(const snap_map *maps, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(maps[i].name, name) == 0)
            return &maps[i];
    }
    return NULL;
}

/* Voxel by voxel: the same blocks (exported sorted by key, so in the same
 * order) holding the same voxels. Block versions are not compared: an
 * import stamps every block with the importing volume's new version. */
static void assert_same_map(const snap_map *want, const snap_map *got)
{
    assert_int_equal(want->blocks.count, got->blocks.count);
    assert_true(want->params.voxel_size_m == got->params.voxel_size_m);
    assert_true(want->params.trunc_vox == got->params.trunc_vox);
    assert_true(want->params.max_weight == got->params.max_weight);
    size_t c = want->blocks.count;
    if (c == 0)
        return;
    assert_int_equal(want->blocks.layout, got->blocks.layout);
    assert_memory_equal(want->blocks.coords, got->blocks.coords, 3 * c * sizeof(int32_t));
    assert_memory_equal(want->blocks.geom, got->blocks.geom,
                        tsdf_block_set_geom_bytes(&want->blocks));
    assert_int_equal(want->blocks.rgb != NULL, got->blocks.rgb != NULL);
    if (want->blocks.rgb != NULL)
        assert_memory_equal(want->blocks.rgb, got->blocks.rgb, c * TSDF_BLOCK_RGB_BYTES);
}

/* 1 when the state directory holds a temporary file: a save is running. */
static int save_in_progress(void)
{
    DIR *d = opendir(state_dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL)
        found = strncmp(de->d_name, ".snap-", 6) == 0;
    closedir(d);
    return found;
}

static int maps_equal(const snap_map *a, const snap_map *b)
{
    size_t c = a->blocks.count;
    return c == b->blocks.count &&
           (c == 0 ||
            (a->blocks.layout == b->blocks.layout &&
             memcmp(a->blocks.coords, b->blocks.coords, 3 * c * sizeof(int32_t)) == 0 &&
             memcmp(a->blocks.geom, b->blocks.geom, tsdf_block_set_geom_bytes(&a->blocks)) == 0));
}

/* The second newest valid snapshot's "default" map differs from the
 * newest's: then restoring the newest is a real, checkable choice. */
static int newest_differs_from_older(const snap_map *newest)
{
    char names[64][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    if (snap_list(state_dir, names, 64, &count) != TSDF_OK || count < 2)
        return 0;
    char path[8192];
    snap_map *older = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", state_dir, names[1]);
    if (snap_read(path, &older, &n) != TSDF_OK)
        return 0;
    const snap_map *o = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(older[i].name, "default") == 0)
            o = &older[i];
    }
    int differs = o != NULL && !maps_equal(newest, o);
    snap_maps_free(older, n);
    return differs;
}

/* Every file under a snapshot name must be complete and valid. */
static size_t assert_all_snapshots_valid(void)
{
    char names[64][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    int r = snap_list(state_dir, names, 64, &count);
    if (r == TSDF_ENOT_FOUND)
        return 0;
    assert_int_equal(r, TSDF_OK);
    for (size_t i = 0; i < count; i++) {
        char path[8192];
        snap_map *maps = NULL;
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", state_dir, names[i]);
        r = snap_read(path, &maps, &n);
        if (r != TSDF_OK)
            fail_msg("%s is under a snapshot name but invalid: %s", path, tsdf_strerror(r));
        snap_maps_free(maps, n);
    }
    return count;
}

static void test_sigkill_rounds(void **state)
{
    streamer s;
    memset(&s, 0, sizeof s);
    assert_int_equal(tsdf_synth_sequence_init(&s.seq, "demo"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&s.seq, 160, 120), TSDF_OK);
    unsigned seed = SEED;
    int restored_nonempty = 0, distinct_rounds = 0, kills_mid_write = 0;

    pid_t pid = start_daemon();
    s.client = wait_ready(pid);
    for (int round = 1; round <= ROUNDS; round++) {
        /* Stream, then kill at a random moment: at least one autosave period
         * in, and anywhere relative to the autosave that may be running. */
        atomic_store(&s.stop, 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, stream_main, &s), 0);
        double wait = 1.3 + (double)(rand_r(&seed) % 2000) / 1000.0;
        sleep_s(wait);
        /* Even rounds aim at the worst moment: while an autosave is
         * writing (its temporary file exists), within 3 s more. */
        int mid_write = 0;
        if (round % 2 == 0) {
            double t0 = now_s();
            while (!(mid_write = save_in_progress()) && now_s() - t0 < 3.0)
                sleep_s(0.0005);
        }
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        atomic_store(&s.stop, 1);
        pthread_join(t, NULL);
        tsdf_client_close(s.client);

        size_t files = assert_all_snapshots_valid();
        snap_map *want = NULL;
        size_t want_n = 0;
        char want_path[4300] = "";
        int r = snap_find_latest_valid(state_dir, want_path, sizeof want_path, &want, &want_n);
        assert_true(r == TSDF_OK || r == TSDF_ENOT_FOUND);
        printf("round %d: killed after %.2f s%s, %llu frames integrated so far, %zu "
               "snapshot(s); newest valid: %s\n",
               round, wait, mid_write ? " while a snapshot was being written" : "",
               (unsigned long long)s.integrated, files, r == TSDF_OK ? want_path : "none");
        kills_mid_write += mid_write;
        fflush(stdout);

        pid = start_daemon();
        s.client = wait_ready(pid);

        /* What the daemon holds now, saved to a file of our own (the daemon
         * writes only inside its state directory: a relative name). */
        char got_name[64], got_path[4300];
        snprintf(got_name, sizeof got_name, "restored-%d.snap", round);
        snprintf(got_path, sizeof got_path, "%s/%s", state_dir, got_name);
        tsdf_rep_path rp;
        int sr = tsdf_client_save(s.client, "default", got_name, &rp, 30000);
        if (sr != TSDF_OK)
            fail_msg("save to %s: %s (%s)", got_name, tsdf_strerror(sr),
                     tsdf_client_last_message());
        assert_string_equal(rp.path, got_path);
        snap_map *got = NULL;
        size_t got_n = 0;
        assert_int_equal(snap_read(got_path, &got, &got_n), TSDF_OK);
        const snap_map *g = find_map(got, got_n, "default");
        if (r == TSDF_OK) {
            const snap_map *w = find_map(want, want_n, "default");
            assert_non_null(w);
            assert_non_null(g);
            assert_same_map(w, g);
            if (w->blocks.count > 0)
                restored_nonempty++;
            distinct_rounds += newest_differs_from_older(w);
            printf("round %d: restored %zu blocks, equal voxel by voxel to %s\n", round,
                   g->blocks.count, want_path);
        } else {
            /* Nothing saved yet: the daemon must start empty. */
            assert_true(g == NULL || g->blocks.count == 0);
        }
        snap_maps_free(got, got_n);
        snap_maps_free(want, want_n);
        unlink(got_path);
    }
    /* An orderly stop at the end: SIGTERM, exit status 0. */
    tsdf_client_close(s.client);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The test means something only if real maps were restored, if the
     * newest snapshot was distinguishable from older ones, and if kills
     * landed in the middle of writes. */
    printf("%d rounds restored a non-empty map, %d with a newest snapshot unlike the one "
           "before, %d kills during a write\n",
           restored_nonempty, distinct_rounds, kills_mid_write);
    assert_true(restored_nonempty >= ROUNDS - 1);
    assert_true(distinct_rounds >= ROUNDS - 2);
    assert_true(kills_mid_write >= 1);
}

int main(int argc, char **argv)
{
    tsdfd_path = argc > 1 ? argv[1] : getenv("TSDFD");
    if (!tsdfd_path || !*tsdfd_path)
        tsdfd_path = TSDFD_BIN;
    if (!*tsdfd_path || access(tsdfd_path, X_OK) != 0)
        tsdf_test_skip_program("no tsdfd binary (argument, $TSDFD or %s)",
                               *TSDFD_BIN ? TSDFD_BIN : "the build tree");
    snprintf(dir, sizeof dir, "%s", tsdf_test_tmpdir());
    snprintf(state_dir, sizeof state_dir, "%s/state", dir);
    snprintf(req_url, sizeof req_url, "ipc://%s/req.sock", dir);
    snprintf(push_url, sizeof push_url, "ipc://%s/frames.sock", dir);
    snprintf(log_path, sizeof log_path, "%s/tsdfd.log", dir);
    tsdf_log_set_level(TSDF_LOG_ERROR); /* snap_read's refusals, if any, are asserted */

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_rounds),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r != 0) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "tail -n 40 '%s'", log_path);
        fprintf(stderr, "--- tsdfd log (last lines) ---\n");
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    } else {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    return r;
}
