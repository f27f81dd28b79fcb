/*
 * test_daemon_streams.c - end-to-end tests of tsdfd's frame queue: a real
 * daemon (tests/daemon_harness.c on ipc:// sockets, the CPU backend unless
 * TSDF_TEST_DAEMON_BACKEND=cuda) fed by real clients (libtsdf), and the
 * counters that account for every frame.
 *
 *  - concurrent streams: 4 client threads mix send_frame and integrate;
 *    every counter reconciles exactly (block and drop_oldest policies);
 *  - a small [queue] max_bytes_mb budget: frames dropped for memory are
 *    counted, the counters reconcile and the queued bytes return to 0;
 *  - SIGTERM drains the queue and exits 0 with reconciled counters;
 *  - sensors with long names keep all their counters in the stats reply.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"

#include <inttypes.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- concurrent streams ------------------------------------------------- */

#define STREAM_THREADS 4

typedef struct {
    const tsdfd_harness *h;
    const frame_set *fs;
    int index;
    int frames;     /* frames this thread sends */
    int send_every; /* i % send_every != 0: send_frame; == 0: integrate */
    /* results, read by the main thread after join */
    int sent; /* send_frame calls that returned OK */
    int send_failed;
    int integrate_calls;
    int acked_ok;      /* integrate replies with status 0 */
    int acked_dropped; /* integrate replies DROPPED (drop_oldest evicted the frame) */
    int acked_other;   /* any other status */
    int last_other_status;
} stream_arg;

static void *stream_main(void *arg)
{
    stream_arg *a = arg;
    char sensor[32];
    tsdf_client *c = NULL;
    tsdf_client_options o;

    tsdf_client_options_default(&o);
    o.default_timeout_ms = 60000;
    if (tsdf_client_open(a->h->req_url, a->h->frames_url, &o, &c) != TSDF_OK) {
        a->send_failed = a->frames;
        return NULL;
    }
    snprintf(sensor, sizeof sensor, "robot%d", a->index);
    for (int i = 0; i < a->frames; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = "default";
        f.sensor = sensor;
        f.seq = (uint64_t)i;
        f.frame = &a->fs->frames[(uint32_t)(a->index * 5 + i) % a->fs->count];
        if (i % a->send_every != 0) {
            /* Block on a full PUSH buffer: that is the backpressure path. */
            if (tsdf_client_send_frame(c, &f, 60000) == TSDF_OK)
                a->sent++;
            else
                a->send_failed++;
        } else {
            tsdf_rep_integrate rep;
            a->integrate_calls++;
            int rc = tsdf_client_integrate(c, &f, 60000, &rep);
            if (rc == TSDF_OK)
                a->acked_ok++;
            else if (rc == TSDF_EDROPPED)
                a->acked_dropped++;
            else {
                a->acked_other++;
                a->last_other_status = rc;
            }
        }
    }
    /* Close only after the daemon received every frame: closing a PUSH
     * socket discards what is still in its buffer. */
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    char key[64];
    snprintf(key, sizeof key, "sensor.%s.received", sensor);
    for (int waited = 0; st != NULL && waited < 60000; waited += 20) {
        int64_t got = 0;
        if (tsdf_client_stats(c, "default", st, 10000) == TSDF_OK && stat_find(st, key, &got) &&
            got >= a->frames)
            break;
        sleep_ms(20);
    }
    free(st);
    tsdf_client_close(c);
    return NULL;
}

static void run_streams(const tsdfd_harness *h, const frame_set *fs, int frames, int send_every,
                        stream_arg *args)
{
    pthread_t t[STREAM_THREADS];
    for (int i = 0; i < STREAM_THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].h = h;
        args[i].fs = fs;
        args[i].index = i;
        args[i].frames = frames;
        args[i].send_every = send_every;
        assert_int_equal(pthread_create(&t[i], NULL, stream_main, &args[i]), 0);
    }
    for (int i = 0; i < STREAM_THREADS; i++)
        pthread_join(t[i], NULL);
}

static void test_concurrent_streams_block(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    stream_arg args[STREAM_THREADS];
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    const int frames = 24;
    (void)state;

    assert_non_null(st);
    frames_make(&fs, "sphere", 160, 120, 24);
    assert_int_equal(start_daemon(&h, "[queue]\nlength = 4\npolicy = block\n", NULL), 0);

    /* Garbage on the frames socket: counted as received and rejected. */
    nng_socket push = raw_push(&h);
    for (int i = 0; i < 3; i++)
        assert_int_equal(nng_send(push, "\xc1\xc1garbage", 9, 0), 0);

    run_streams(&h, &fs, frames, 2, args);

    int sent = 0, acked = 0, integrate_calls = 0;
    for (int i = 0; i < STREAM_THREADS; i++) {
        assert_int_equal(args[i].send_failed, 0);
        assert_int_equal(args[i].acked_other, 0);
        assert_int_equal(args[i].acked_dropped, 0); /* block never drops */
        sent += args[i].sent;
        acked += args[i].acked_ok;
        integrate_calls += args[i].integrate_calls;
    }
    assert_int_equal(sent + integrate_calls, STREAM_THREADS * frames);
    assert_int_equal(acked, integrate_calls);

    tsdf_client *c = open_client(&h, 0);
    wait_settled(c, "default", STREAM_THREADS * frames + 3, st);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "frames.received"), STREAM_THREADS * frames + 3);
    assert_int_equal(stat_get(st, "frames.integrated"), STREAM_THREADS * frames);
    assert_int_equal(stat_get(st, "frames.dropped"), 0);
    assert_int_equal(stat_get(st, "rejected.decode_error"), 3);
    assert_int_equal(stat_get(st, "frames.rejected"), 3);
    /* Every acked frame is integrated, and so is every streamed one. */
    assert_int_equal(stat_get(st, "frames.integrated"), acked + sent);
    for (int i = 0; i < STREAM_THREADS; i++) {
        char key[64];
        snprintf(key, sizeof key, "sensor.robot%d.received", i);
        assert_int_equal(stat_get(st, key), frames);
        snprintf(key, sizeof key, "sensor.robot%d.integrated", i);
        assert_int_equal(stat_get(st, key), frames);
        snprintf(key, sizeof key, "sensor.robot%d.dropped", i);
        assert_int_equal(stat_get(st, key), 0);
    }
    assert_int_equal(stat_get(st, "sensor.(no sensor).rejected"), 3);
    /* Only real sensors count, not the "(no sensor)" bucket. */
    assert_int_equal(stat_get(st, "sensors.count"), STREAM_THREADS);
    /* Blocked streams waited for room; none gave up (nothing failed). */
    assert_int_equal(stat_get(st, "queue.push_timeouts"), 0);
    /* The engine agrees with the daemon's count. */
    assert_true(st->has_engine);
    assert_int_equal(st->engine.frames_integrated, (uint64_t)(STREAM_THREADS * frames));
    assert_true(stat_get(st, "queue.depth_max") <= 4);
    assert_int_equal(stat_get(st, "queue.capacity"), 4);

    tsdf_client_close(c);
    nng_close(push);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

static void test_concurrent_streams_drop_oldest(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    stream_arg args[STREAM_THREADS];
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    const int frames = 40;
    (void)state;

    assert_non_null(st);
    /* Large frames and a queue of one: the streams outrun the worker. */
    frames_make(&fs, "room", 320, 240, 16);
    assert_int_equal(start_daemon(&h, "[queue]\nlength = 1\npolicy = drop_oldest\n", NULL), 0);

    run_streams(&h, &fs, frames, 4, args);

    int sent = 0, acked_ok = 0, acked_dropped = 0, integrate_calls = 0;
    for (int i = 0; i < STREAM_THREADS; i++) {
        assert_int_equal(args[i].send_failed, 0);
        if (args[i].acked_other != 0)
            fail_msg("thread %d: integrate returned %s", i,
                     tsdf_errname(args[i].last_other_status));
        sent += args[i].sent;
        acked_ok += args[i].acked_ok;
        acked_dropped += args[i].acked_dropped;
        integrate_calls += args[i].integrate_calls;
    }
    assert_int_equal(acked_ok + acked_dropped, integrate_calls);

    tsdf_client *c = open_client(&h, 0);
    wait_settled(c, "default", STREAM_THREADS * frames, st);
    assert_reconciled(st);
    int64_t received = stat_get(st, "frames.received");
    int64_t integrated = stat_get(st, "frames.integrated");
    int64_t dropped = stat_get(st, "dropped.queue_full");
    assert_int_equal(received, STREAM_THREADS * frames);
    assert_int_equal(stat_get(st, "frames.rejected"), 0);
    assert_int_equal(integrated + dropped, received);
    /* Each drop is one eviction by the queue. */
    assert_int_equal(stat_get(st, "queue.dropped_oldest"), dropped);
    /* Acked frames were integrated or reported dropped, never lost. */
    assert_true(acked_ok <= integrated);
    assert_true(acked_dropped <= dropped);
    int64_t sum_received = 0, sum_integrated = 0, sum_dropped = 0;
    for (int i = 0; i < STREAM_THREADS; i++) {
        char key[64];
        snprintf(key, sizeof key, "sensor.robot%d.received", i);
        int64_t r = stat_get(st, key);
        assert_int_equal(r, frames);
        sum_received += r;
        snprintf(key, sizeof key, "sensor.robot%d.integrated", i);
        sum_integrated += stat_get(st, key);
        snprintf(key, sizeof key, "sensor.robot%d.dropped", i);
        sum_dropped += stat_get(st, key);
    }
    assert_int_equal(sum_received, received);
    assert_int_equal(sum_integrated, integrated);
    assert_int_equal(sum_dropped, dropped);
    assert_int_equal(st->engine.frames_integrated, (uint64_t)integrated);
    printf("drop_oldest: %" PRId64 " received, %" PRId64 " integrated, %" PRId64
           " dropped (acked ok %d, acked dropped %d)\n",
           received, integrated, dropped, acked_ok, acked_dropped);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- the byte budget of queued frames ----------------------------------- */

static void test_queue_byte_budget(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    stream_arg args[STREAM_THREADS];
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    const int frames = 40;
    static const char *const set_args[] = {"--set", "queue.max_bytes_mb=16", NULL};
    (void)state;

    assert_non_null(st);
    /* 640x480 float frames (~1.2 MB messages, plus the aligned depth copy):
     * a 16 MiB budget holds a handful, far below the 64 frames of the
     * queue, so the budget and not the length is what fills. */
    frames_make(&fs, "room", 640, 480, 16);
    /* The message limit must let the 18 MB frame below reach the budget. */
    assert_int_equal(start_daemon(&h,
                                  "[server]\nmax_message_mb = 32\n"
                                  "[queue]\nlength = 64\npolicy = drop_oldest\n",
                                  set_args),
                     0);

    /* A frame larger than the whole budget is refused (for memory) at once. */
    tsdf_client *c = open_client(&h, 0);
    tsdf_frame big = fs.frames[0];
    big.width = 4096;
    big.height = 1100; /* 18 MB of depth > 16 MiB */
    float *big_depth = calloc((size_t)big.width * big.height, sizeof(float));
    assert_non_null(big_depth);
    big.depth = big_depth;
    tsdf_client_frame bf;
    memset(&bf, 0, sizeof bf);
    bf.map = "default";
    bf.sensor = "bigcam";
    bf.frame = &big;
    tsdf_rep_integrate irep;
    assert_int_equal(tsdf_client_integrate(c, &bf, 30000, &irep), TSDF_ETOO_LARGE);
    free(big_depth);

    /* Four robots outrun the worker of the one map. */
    run_streams(&h, &fs, frames, 4, args);
    int acked_ok = 0, acked_dropped = 0, integrate_calls = 0;
    for (int i = 0; i < STREAM_THREADS; i++) {
        assert_int_equal(args[i].send_failed, 0);
        if (args[i].acked_other != 0)
            fail_msg("thread %d: integrate returned %s", i,
                     tsdf_errname(args[i].last_other_status));
        acked_ok += args[i].acked_ok;
        acked_dropped += args[i].acked_dropped;
        integrate_calls += args[i].integrate_calls;
    }
    assert_int_equal(acked_ok + acked_dropped, integrate_calls);

    wait_settled(c, "default", STREAM_THREADS * frames + 1, st);
    assert_reconciled(st);
    int64_t received = stat_get(st, "frames.received");
    int64_t integrated = stat_get(st, "frames.integrated");
    int64_t dropped = stat_get(st, "frames.dropped");
    int64_t memory = stat_get(st, "dropped.memory");
    assert_int_equal(received, STREAM_THREADS * frames + 1);
    assert_int_equal(received, integrated + dropped + stat_get(st, "frames.rejected"));
    assert_int_equal(stat_get(st, "frames.rejected"), 0);
    /* Only the budget dropped frames: the queue's length was never reached. */
    assert_int_equal(stat_get(st, "dropped.queue_full"), 0);
    assert_int_equal(stat_get(st, "queue.dropped_oldest"), 0);
    assert_int_equal(memory, dropped);
    assert_true(memory >= 1); /* at least the oversized frame */
    assert_int_equal(stat_get(st, "sensor.bigcam.dropped"), 1);
    /* Every memory drop is one eviction or one refusal by the queue. */
    assert_int_equal(stat_get(st, "queue.dropped_memory") + stat_get(st, "queue.refused_memory"),
                     memory);
    assert_int_equal(stat_get(st, "queue.refused_memory"), 1);
    assert_true(acked_dropped <= memory);
    assert_true(acked_ok <= integrated);
    assert_int_equal(st->engine.frames_integrated, (uint64_t)integrated);
    /* Nothing is queued any more: the byte count is back to exactly 0. */
    assert_int_equal(stat_get(st, "queue.bytes"), 0);
    assert_int_equal(stat_get(st, "queue.map_bytes"), 0);
    assert_int_equal(stat_get(st, "queue.max_bytes"), 16 << 20);
    /* The frames' depth went through page-locked buffers on CUDA only
     * ([queue] pinned_mb); they are kept for reuse once back. */
    if (test_backend() == TSDF_BACKEND_CUDA)
        assert_true(stat_get(st, "queue.pinned_bytes") > 0);
    else
        assert_int_equal(stat_get(st, "queue.pinned_bytes"), 0);
    printf("byte budget: %" PRId64 " received, %" PRId64 " integrated, %" PRId64
           " dropped for memory (%" PRId64 " evicted; acked ok %d, acked dropped %d)\n",
           received, integrated, memory, stat_get(st, "queue.dropped_memory"), acked_ok,
           acked_dropped);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

/* ---- SIGTERM drains ----------------------------------------------------- */

static void test_sigterm_drains_queue(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    (void)state;

    frames_make(&fs, "room", 640, 480, 8);
    assert_int_equal(start_daemon(&h, "[queue]\nlength = 64\ndrain_timeout_ms = 100000\n", NULL),
                     0);
    tsdf_client *c = open_client(&h, 1);
    tsdf_client_options o;
    (void)o;
    const int n = 30;
    for (int i = 0; i < n; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.frame = &fs.frames[i % fs.count];
        f.sensor = "burst";
        assert_int_equal(tsdf_client_send_frame(c, &f, 30000), TSDF_OK);
    }
    /* Wait until the daemon has received every frame (frames still in nng's
     * buffers at SIGTERM are the senders' loss, not the daemon's), then
     * stop while most are still queued: they are integrated before exit. */
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    assert_non_null(st);
    int64_t in_flight = -1;
    for (int waited = 0; waited < 60000; waited += 5) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        if (stat_get(st, "frames.received") == n) {
            in_flight = stat_get(st, "frames.in_flight");
            break;
        }
        sleep_ms(5);
    }
    assert_true(in_flight >= 0);
    printf("SIGTERM with %" PRId64 " of %d frames still queued or integrating\n", in_flight, n);
    free(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 120000), 0);

    /* The last log line accounts for every frame. */
    FILE *lf = fopen(h.log_path, "r");
    assert_non_null(lf);
    char line[1024];
    long long received = -1, integrated = -1, dropped = -1, rejected = -1;
    while (fgets(line, sizeof line, lf) != NULL) {
        const char *p = strstr(line, "stopped: ");
        if (p == NULL)
            continue;
        p = strstr(p, "frames received");
        assert_non_null(p);
        assert_int_equal(sscanf(p,
                                "frames received %lld integrated %lld dropped %lld rejected %lld",
                                &received, &integrated, &dropped, &rejected),
                         4);
    }
    fclose(lf);
    assert_int_equal(received, n);
    assert_int_equal(integrated, n);
    assert_int_equal(dropped, 0);
    assert_int_equal(rejected, 0);
    frames_free(&fs);
}

/* ---- stats keys of long sensor names ------------------------------------ */

/* A regression from the code review: the stats reply left out every counter
 * of a sensor whose name made a key longer than TSDF_PROTO_MAX_STATS_KEY_LEN
 * (names over 29 bytes). */

static int integrate_as(tsdf_client *c, const tsdf_frame *frame, const char *sensor)
{
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.frame = frame;
    f.sensor = sensor;
    f.seq = 1;
    return tsdf_client_integrate(c, &f, 20000, NULL);
}

static void test_stats_keep_long_sensor_names(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    (void)state;

    frames_make(&fs, "sphere", 64, 48, 1);
    if (start_daemon(&h, NULL, NULL) != 0)
        fail_msg("the daemon did not start");
    tsdf_client *c = open_client(&h, 0);

    /* 29 bytes: the longest name that fits every key in full. */
    const char *fits = "robot-07.front-depth-camera-x";
    /* Two long names that differ only after their 20th byte. */
    const char *long1 = "warehouse-east-robot-0001.front-depth-camera";
    const char *long2 = "warehouse-east-robot-0002.front-depth-camera-with-a-64-byte-nam";
    assert_int_equal(strlen(fits), 29);
    assert_int_equal(strlen(long2), 63);
    assert_int_equal(integrate_as(c, &fs.frames[0], fits), TSDF_OK);
    assert_int_equal(integrate_as(c, &fs.frames[0], long1), TSDF_OK);
    assert_int_equal(integrate_as(c, &fs.frames[0], long2), TSDF_OK);
    assert_int_equal(integrate_as(c, &fs.frames[0], long2), TSDF_OK);

    tsdf_rep_stats *s = malloc(sizeof *s);
    assert_non_null(s);
    assert_int_equal(tsdf_client_stats(c, NULL, s, 20000), TSDF_OK);

    char key[96];
    snprintf(key, sizeof key, "sensor.%s.integrated", fits);
    assert_int_equal(stat_get(s, key), 1);
    /* Each long sensor has its own four counters under a shortened,
     * distinct label that starts with the name. */
    int long_labels = 0;
    int64_t received[2] = {0, 0};
    for (uint32_t i = 0; i < s->extra_count; i++) {
        const char *k = s->extra[i].key;
        const char *suffix = ".received";
        size_t kl = strlen(k), sl = strlen(suffix);
        if (strncmp(k, "sensor.warehouse-east-robot", 27) != 0 || kl < sl ||
            strcmp(k + kl - sl, suffix) != 0)
            continue;
        assert_non_null(strchr(k, '~'));
        char base[64];
        snprintf(base, sizeof base, "%.*s", (int)(kl - sl), k);
        static const char *const rest[] = {"integrated", "dropped", "rejected"};
        for (int r = 0; r < 3; r++) {
            int64_t v = -1;
            snprintf(key, sizeof key, "%s.%s", base, rest[r]);
            assert_true(stat_find(s, key, &v));
            assert_true(v >= 0);
        }
        assert_true(long_labels < 2);
        received[long_labels++] = s->extra[i].i;
    }
    assert_int_equal(long_labels, 2);
    assert_int_equal(received[0] + received[1], 3);
    assert_true(received[0] != received[1]);
    free(s);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 20000), 0);
    frames_free(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_streams_block),
        cmocka_unit_test(test_concurrent_streams_drop_oldest),
        cmocka_unit_test(test_queue_byte_budget),
        cmocka_unit_test(test_sigterm_drains_queue),
        cmocka_unit_test(test_stats_keep_long_sensor_names),
    };
    return daemon_tests_run("daemon_streams", tests, sizeof tests / sizeof tests[0]);
}
