/*
 * test_daemon_faults.c - the daemon under load and faults, bounded in time
 * and count, on private ipc:// sockets:
 *
 *  - many clients stream at once (pushed frames and acknowledged
 *    integrates into shared maps): every frame is integrated and the
 *    counters reconcile exactly;
 *  - clients that vanish in the middle of a message, or send a request and
 *    never read the reply: the daemon frees their connections and keeps
 *    serving;
 *  - ten slow raycasts of one map: they get their share of the request
 *    contexts and BUSY beyond it, while ping and another map answer at once;
 *  - a full and a read-only state directory (small tmpfs mounts; skipped
 *    where the test may not mount): a save fails with IO and leaves no
 *    partial file, the daemon keeps serving, and a failed final save makes
 *    the exit status 1 without a hang;
 *  - a crash (SIGKILL) loses exactly the frames the stats reported as not
 *    yet in a snapshot a restart restores;
 *  - the CUDA backend asked for where no GPU is usable: the daemon refuses
 *    to start and says why.
 *
 * SIGKILL during saves and restart with restore is tests/test_snapshot_fault.c.
 */
#define _GNU_SOURCE

#include "testutil.h"

#include "daemon_testlib.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

/* ---- many clients ------------------------------------------------------- */

#define LOAD_CLIENTS 12
#define LOAD_MAPS 4
#define LOAD_FRAMES 30

typedef struct {
    const tsdfd_harness *h;
    const frame_set *fs;
    int index;
    int pushed, acked, failures;
} load_arg;

static void *load_main(void *arg)
{
    load_arg *a = arg;
    tsdf_client *c = NULL;
    tsdf_client_options o;
    char map[16], sensor[16];
    tsdf_client_options_default(&o);
    if (tsdf_client_open(a->h->req_url, a->h->frames_url, &o, &c) != TSDF_OK) {
        a->failures = LOAD_FRAMES;
        return NULL;
    }
    snprintf(map, sizeof map, "m%d", a->index % LOAD_MAPS);
    snprintf(sensor, sizeof sensor, "robot%d", a->index);
    for (int i = 0; i < LOAD_FRAMES; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = map;
        f.sensor = sensor;
        f.frame = &a->fs->frames[(uint32_t)(i + a->index) % a->fs->count];
        /* Every third frame waits for its ack; the others are pushed. */
        if (i % 3 == 0) {
            if (tsdf_client_integrate(c, &f, 60000, NULL) == TSDF_OK)
                a->acked++;
            else
                a->failures++;
        } else if (tsdf_client_send_frame(c, &f, 60000) == TSDF_OK) {
            a->pushed++;
        } else {
            a->failures++;
        }
    }
    /* tsdf_client_close may drop frames still in the PUSH buffer (see
     * tsdf_client.h): wait until the daemon has received them all. */
    tsdf_rep_stats *st = malloc(sizeof *st);
    char key[64];
    int64_t got = -1;
    snprintf(key, sizeof key, "sensor.%s.received", sensor);
    for (int waited = 0; st != NULL && waited < 20000; waited += 20) {
        if (tsdf_client_stats(c, map, st, 10000) == TSDF_OK && stat_find(st, key, &got) &&
            got == a->pushed + a->acked)
            break;
        sleep_ms(20);
    }
    if (got != a->pushed + a->acked)
        a->failures++;
    free(st);
    tsdf_client_close(c);
    return NULL;
}

static void test_many_clients_reconcile(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    pthread_t t[LOAD_CLIENTS];
    load_arg args[LOAD_CLIENTS];
    tsdf_rep_stats *st = malloc(sizeof *st);
    (void)state;
    assert_non_null(st);

    frames_make(&fs, "box", 96, 72, 8);
    assert_int_equal(start_daemon(&h, "[volume]\nmaps = m0, m1, m2, m3\n", NULL), 0);
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        args[i] = (load_arg){.h = &h, .fs = &fs, .index = i};
        assert_int_equal(pthread_create(&t[i], NULL, load_main, &args[i]), 0);
    }
    int pushed = 0, acked = 0;
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
        pushed += args[i].pushed;
        acked += args[i].acked;
    }
    tsdf_client *c = open_client(&h, 0);
    wait_settled(c, "m0", LOAD_CLIENTS * LOAD_FRAMES, st);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "frames.received"), pushed + acked);
    /* The block policy drops nothing: every frame is in a volume. */
    assert_int_equal(stat_get(st, "frames.integrated"), LOAD_CLIENTS * LOAD_FRAMES);
    uint64_t in_maps = 0;
    for (int m = 0; m < LOAD_MAPS; m++) {
        char map[16];
        snprintf(map, sizeof map, "m%d", m);
        assert_int_equal(tsdf_client_stats(c, map, st, 10000), TSDF_OK);
        in_maps += st->engine.frames_integrated;
    }
    assert_int_equal(in_maps, (uint64_t)(LOAD_CLIENTS * LOAD_FRAMES));
    printf("load: %d clients, %d frames pushed, %d acknowledged, all integrated\n", LOAD_CLIENTS,
           pushed, acked);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- clients that vanish -------------------------------------------------- */

/* A raw connection to an ipc:// socket that has done the SP handshake
 * (nng's ipc transport: an 8-byte header each way, 0 'S' 'P' 0 and the
 * sender's 16-bit protocol number), or -1. */
static int raw_ipc_connect(const char *url, uint16_t proto)
{
    struct sockaddr_un sa;
    const char *path = url + strlen("ipc://");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.107s", path);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const unsigned char hdr[8] = {0, 'S', 'P', 0, (unsigned char)(proto >> 8), (unsigned char)proto,
                                  0, 0};
    unsigned char peer[8];
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        write(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr ||
        recv(fd, peer, sizeof peer, MSG_WAITALL) != (ssize_t)sizeof peer || peer[1] != 'S') {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends an ipc frame header (type 1, 64-bit big-endian length) and then
 * only `sent` bytes of the announced body. */
static void send_partial(int fd, uint64_t announced, size_t sent)
{
    unsigned char h[9];
    h[0] = 1;
    for (int i = 0; i < 8; i++)
        h[1 + i] = (unsigned char)(announced >> (56 - 8 * i));
    assert_int_equal(write(fd, h, sizeof h), (ssize_t)sizeof h);
    char *body = calloc(1, sent ? sent : 1);
    assert_non_null(body);
    assert_int_equal(write(fd, body, sent), (ssize_t)sent);
    free(body);
}

#define SP_REQ 0x30  /* req0, the REP socket's peer */
#define SP_PUSH 0x50 /* push0, the PULL socket's peer */

/* Writes one whole REQ message (the 4-byte request id, top bit set, then
 * body) in the ipc transport's framing: a 1-byte type and a 64-bit
 * big-endian length. */
static void write_req_message(int fd, uint32_t id, const void *body, size_t body_len)
{
    const unsigned char idb[4] = {(unsigned char)(0x80 | (id >> 24)), (unsigned char)(id >> 16),
                                  (unsigned char)(id >> 8), (unsigned char)id};
    unsigned char f[9];
    uint64_t len = sizeof idb + body_len;
    f[0] = 1;
    for (int i = 0; i < 8; i++)
        f[1 + i] = (unsigned char)(len >> (56 - 8 * i));
    assert_int_equal(write(fd, f, sizeof f), (ssize_t)sizeof f);
    assert_int_equal(write(fd, idb, sizeof idb), (ssize_t)sizeof idb);
    assert_int_equal(write(fd, body, body_len), (ssize_t)body_len);
}

static void test_clients_vanish_mid_message(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_stats *st = malloc(sizeof *st);
    (void)state;
    assert_non_null(st);

    frames_make(&fs, "box", 64, 48, 2);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 1);

    /* A whole ping over the raw socket is answered: the framing is right,
     * so the partial messages below are what they claim to be. */
    {
        msgpack_sbuffer sb;
        pk_opts o = pk_defaults();
        o.type = "ping";
        pack_request(&sb, &o, 9);
        int fd = raw_ipc_connect(h.req_url, SP_REQ);
        assert_true(fd >= 0);
        write_req_message(fd, 1, sb.data, sb.size);
        unsigned char r[9];
        assert_int_equal(recv(fd, r, sizeof r, MSG_WAITALL), (ssize_t)sizeof r);
        assert_int_equal(r[0], 1);
        close(fd);
        msgpack_sbuffer_destroy(&sb);
    }

    /* Twenty requests and twenty frames that stop half way, their senders
     * gone; and requests whose senders never read the answer. */
    for (int i = 0; i < 20; i++) {
        int fd = raw_ipc_connect(h.req_url, SP_REQ);
        assert_true(fd >= 0);
        send_partial(fd, 4u << 20, 1000 + (size_t)i * 97);
        close(fd);
        fd = raw_ipc_connect(h.frames_url, SP_PUSH);
        assert_true(fd >= 0);
        send_partial(fd, 2u << 20, 5000);
        close(fd);
    }
    /* The senders that never read: whole requests written on a bare ipc
     * connection that is closed at once. (Cooked nng REQ sockets closed
     * with their request out can hang in nng 1.5.2, nanomsg/nng#648, and
     * raw ones leak the message still queued; neither is the daemon's
     * trouble.) */
    for (int i = 0; i < 8; i++) {
        msgpack_sbuffer sb;
        pk_opts o = pk_defaults();
        o.type = "stats";
        pack_request(&sb, &o, 100 + (uint64_t)i);
        int fd = raw_ipc_connect(h.req_url, SP_REQ);
        assert_true(fd >= 0);
        write_req_message(fd, 0x100u + (uint32_t)i, sb.data, sb.size);
        close(fd);
        msgpack_sbuffer_destroy(&sb);
    }

    /* The good client is served, and the vanished connections are gone. */
    for (uint32_t i = 0; i < fs.count; i++) {
        assert_int_equal(integrate_into(c, "default", &fs.frames[i]), TSDF_OK);
    }
    int64_t open_conns = -1;
    for (int waited = 0; waited < 60000; waited += 100) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        open_conns = stat_get(st, "connections.open");
        if (open_conns <= 2) /* the client's REQ and PUSH connections */
            break;
        sleep_ms(100);
    }
    assert_true(open_conns <= 2);
    assert_int_equal(stat_get(st, "frames.integrated"), fs.count);
    assert_reconciled(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- slow queries of one map ------------------------------------------------ */

typedef struct {
    const tsdfd_harness *h;
    int rc;
    atomic_int done;
} slow_arg;

/* A CPU raycast of 1024 x 1024 rays 900 m long: seconds of work, so it
 * holds its request context until the test deletes its map (which stops
 * it). */
static void *slow_raycast_main(void *arg)
{
    slow_arg *a = arg;
    tsdf_client *c = NULL;
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    a->rc = tsdf_client_open(a->h->req_url, NULL, &o, &c);
    if (a->rc != TSDF_OK)
        return NULL;
    enum { W = 1024, H = 1024 };
    float *depth = malloc((size_t)W * H * sizeof(float));
    tsdf_raycast_params p;
    tsdf_raycast_output out;
    memset(&p, 0, sizeof p);
    memset(&out, 0, sizeof out);
    p.width = W;
    p.height = H;
    p.K.fx = p.K.fy = 400.0f;
    p.K.cx = p.K.cy = 511.5f;
    for (int i = 0; i < 16; i++)
        p.T_world_cam[i] = (i % 5 == 0) ? 1.0f : 0.0f;
    p.min_depth_m = 0.1f;
    p.max_depth_m = 900.0f;
    out.depth_m = depth;
    a->rc = depth ? tsdf_client_raycast(c, "big", &p, 0, &out, NULL, 120000) : TSDF_ENOMEM;
    free(depth);
    tsdf_client_close(c);
    atomic_store(&a->done, 1);
    return NULL;
}

/* Ten slow queries of one map used to take every request context, so ping
 * failed for everyone until they timed out. Now a map and a kind of query
 * get only their share of the contexts: the rest are refused with BUSY at
 * once, and ping and the other maps are answered meanwhile -- while the
 * admitted ones still run, which the test sees (no clock: the raycasts
 * hold until the map is deleted). */
static void test_slow_queries_do_not_starve_the_rest(void **state)
{
    enum { SLOW = 10 };
    tsdfd_harness h;
    frame_set fs;
    pthread_t t[SLOW];
    slow_arg args[SLOW];
    tsdf_rep_stats *st = malloc(sizeof *st);
    (void)state;
    assert_non_null(st);

    frames_make(&fs, "room", 128, 96, 6);
    assert_int_equal(start_daemon(&h,
                                  "[server]\nrequest_contexts = 8\nrequest_timeout_ms = 600000\n"
                                  "max_message_mb = 32\n[volume]\nmaps = big, other\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < fs.count; i++) {
        assert_int_equal(integrate_into(c, "big", &fs.frames[i]), TSDF_OK);
    }
    for (int i = 0; i < SLOW; i++) {
        args[i].h = &h;
        args[i].rc = 1;
        atomic_init(&args[i].done, 0);
        assert_int_equal(pthread_create(&t[i], NULL, slow_raycast_main, &args[i]), 0);
    }
    /* The raycasts are in: 8 contexts, at most 2 of them for the map, the
     * rest refused BUSY at once (counted). */
    int64_t refused = 0;
    for (int waited = 0; refused < SLOW - 2; waited += 10) {
        assert_int_equal(tsdf_client_stats(c, "other", st, 10000), TSDF_OK);
        refused = stat_get(st, "queries.busy_map");
        if (waited > 60000)
            fail_msg("only %lld of the slow raycasts were refused in 60 s", (long long)refused);
        sleep_ms(10);
    }
    /* Ping and the other map are answered, again and again, while the
     * admitted raycasts still hold their contexts. */
    for (int k = 0; k < 5; k++) {
        assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
        assert_int_equal(tsdf_client_stats(c, "other", st, 10000), TSDF_OK);
        int running = 0;
        for (int i = 0; i < SLOW; i++)
            running += !atomic_load(&args[i].done);
        if (running == 0)
            fail_msg("no slow raycast runs any more: the check proves nothing");
    }
    /* The delete stops the raycasts that run (NOT_FOUND). */
    assert_int_equal(tsdf_client_delete(c, "big", 30000), TSDF_OK);
    int busy = 0, stopped = 0;
    for (int i = 0; i < SLOW; i++) {
        pthread_join(t[i], NULL);
        busy += args[i].rc == TSDF_EBUSY;
        stopped += args[i].rc == TSDF_ENOT_FOUND;
        /* A raycast may also have ended by itself (OK) before the delete. */
        if (args[i].rc != TSDF_EBUSY && args[i].rc != TSDF_ENOT_FOUND && args[i].rc != TSDF_OK)
            fail_msg("slow raycast %d: %s", i, tsdf_errname(args[i].rc));
    }
    printf("slow raycasts: %d busy at once, %d stopped by the delete\n", busy, stopped);
    assert_true(busy >= SLOW - 2);
    assert_int_equal(tsdf_client_stats(c, "other", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "queries.busy_map"), busy);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- a full or read-only state directory ----------------------------------- */

/* Mounts a tmpfs of size_kib (read-only when ro) at dir; 0 when the test
 * may not mount (not root, no mount namespace rights). */
static int mount_small_fs(const char *dir, unsigned size_kib, int ro)
{
    char opts[64];
    snprintf(opts, sizeof opts, "size=%uk,mode=0750", size_kib);
    if (mkdir(dir, 0750) != 0 && errno != EEXIST)
        return 0;
    return mount("tsdf-test", dir, "tmpfs", ro ? MS_RDONLY : 0, opts) == 0;
}

static int snapshot_files(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c 'snap' > /dev/null", dir);
    return system(cmd) == 0;
}

static void check_failed_saves(const char *what, unsigned size_kib, int ro)
{
    tsdfd_harness h;
    frame_set fs;
    char dir[600], ini[1024];
    tsdf_rep_path sp;

    snprintf(dir, sizeof dir, "%s/state-%s", tsdf_test_tmpdir(), what);
    if (!mount_small_fs(dir, size_kib, ro)) {
        printf("SKIPPED: cannot mount a tmpfs at %s (%s): not root?\n", dir, strerror(errno));
        skip();
    }
    frames_make(&fs, "box", 128, 96, 4);
    snprintf(ini, sizeof ini, "[server]\nstate_dir = %s\n[snapshot]\nsave_on_stop = true\n", dir);
    assert_int_equal(start_daemon(&h, ini, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < fs.count; i++) {
        assert_int_equal(integrate_into(c, "default", &fs.frames[i]), TSDF_OK);
    }
    /* Every block is 6 KiB: the snapshot does not fit (or cannot be made). */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tsdf_client_save(c, "default", NULL, &sp, 30000), TSDF_EIO);
        assert_int_equal(tsdf_client_save(c, "default", "mine.tsdfsnap", &sp, 30000), TSDF_EIO);
    }
    /* Nothing half-written stays behind, and the service goes on. */
    assert_false(snapshot_files(dir));
    assert_int_equal(tsdf_client_ping(c, NULL, 10000), TSDF_OK);
    assert_int_equal(integrate_into(c, "default", &fs.frames[0]), TSDF_OK);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "default", NULL, &m, NULL, 30000), TSDF_OK);
    assert_true(m.triangle_count > 0);
    tsdf_client_mesh_release(&m);
    tsdf_client_close(c);
    /* The final save fails too: exit status 1, promptly. */
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 1);
    assert_false(snapshot_files(dir));
    umount(dir);
    frames_free(&fs);
}

static void test_state_dir_full(void **state)
{
    (void)state;
    check_failed_saves("full", 64, 0);
}

static void test_state_dir_read_only(void **state)
{
    (void)state;
    check_failed_saves("ro", 64, 1);
}

/* ---- what a crash loses ---------------------------------------------------- */

static void integrate_frames(tsdf_client *c, const frame_set *fs, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        assert_int_equal(integrate_into(c, "default", &fs->frames[i]), TSDF_OK);
    }
}

/* An acknowledged frame is durable only once a snapshot that a restart
 * restores holds it. The stats say how many frames a crash would lose, and
 * after a SIGKILL exactly those are gone. */
static void test_crash_loses_exactly_the_unsaved_frames(void **state)
{
    tsdfd_harness a, b;
    frame_set fs;
    tsdf_rep_path sp;
    tsdf_rep_stats *st = malloc(sizeof *st);
    (void)state;
    assert_non_null(st);

    frames_make(&fs, "box", 128, 96, 8);
    assert_int_equal(start_daemon(&a, NULL, NULL), 0);
    tsdf_client *c = open_client(&a, 0);
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "snapshot.last_save_age_ms"), -1);

    integrate_frames(c, &fs, 0, 5);
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "frames.unsaved"), 5);
    assert_int_equal(stat_get(st, "map.frames_unsaved"), 5);
    assert_int_equal(tsdf_client_save(c, "default", NULL, &sp, 30000), TSDF_OK);
    uint64_t saved_blocks = 0;
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "frames.unsaved"), 0);
    assert_true(stat_get(st, "snapshot.last_save_age_ms") >= 0);
    saved_blocks = st->engine.blocks_allocated;

    /* Three more, acknowledged; a save to a client's own file does not
     * count, since a restart does not restore it. */
    integrate_frames(c, &fs, 5, 8);
    assert_int_equal(tsdf_client_save(c, "default", "mine.tsdfsnap", &sp, 30000), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "map.frames_unsaved"), 3);
    assert_true(st->engine.blocks_allocated > saved_blocks);
    tsdf_client_close(c);

    /* Crash, restart: the state of the save comes back, the three frames
     * after it do not. */
    crash_and_restart(&a, &b);
    c = open_client(&b, 0);
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(st->engine.blocks_allocated, saved_blocks);
    assert_int_equal(stat_get(st, "frames.unsaved"), 0);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- CUDA asked for without a GPU ------------------------------------------- */

static void test_cuda_without_gpu_refuses_to_start(void **state)
{
    tsdfd_harness h;
    (void)state;
    if (tsdf_cuda_available()) {
        printf("SKIPPED: a GPU is usable here\n");
        skip();
    }
    /* start_daemon puts the test backend first; the later line wins. */
    assert_int_equal(start_daemon(&h, "[volume]\nbackend = cuda\n", NULL), -1);
    FILE *f = fopen(h.log_path, "r");
    assert_non_null(f);
    char line[1024];
    int said_why = 0;
    while (fgets(line, sizeof line, f) != NULL)
        said_why |= strstr(line, "CUDA") != NULL || strstr(line, "cuda") != NULL;
    fclose(f);
    assert_true(said_why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_clients_reconcile),
        cmocka_unit_test(test_clients_vanish_mid_message),
        cmocka_unit_test(test_slow_queries_do_not_starve_the_rest),
        cmocka_unit_test(test_state_dir_full),
        cmocka_unit_test(test_state_dir_read_only),
        cmocka_unit_test(test_crash_loses_exactly_the_unsaved_frames),
        cmocka_unit_test(test_cuda_without_gpu_refuses_to_start),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
