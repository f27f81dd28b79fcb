/*
 * test_daemon.c - end-to-end tests of tsdfd: a real daemon (started by
 * tests/daemon_harness.c on ipc:// sockets with the CPU backend), real
 * clients (libtsdf) and raw nng sockets for malformed input.
 *
 *  - concurrent streams: 4 client threads mix send_frame and integrate;
 *    every counter reconciles exactly (block and drop_oldest policies);
 *  - the daemon's mesh and raycast equal the engine's own for the same
 *    frames fused in-process; save/reset/load round-trips the map;
 *  - malformed messages of every kind get the right error codes, and the
 *    daemon keeps serving;
 *  - a small [queue] max_bytes_mb budget: frames dropped for memory are
 *    counted, the counters reconcile and the queued bytes return to 0;
 *  - SIGTERM drains the queue and exits 0 with reconciled counters;
 *  - sensors with long names keep all their counters in the stats reply;
 *  - the 16x16 fx = 0.05 frame of issue 8 is BAD_INTRINSICS on the wire, and
 *    a tiny [volume] memory_budget_mb refuses frames (capacity) over two
 *    maps while queries answer;
 *  - raycasts of extreme intrinsics or of minutes of work leave the map
 *    answering at once, and SIGTERM after one exits in bounded time with
 *    its final save (issue 8).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_harness.h"
#include "daemon_testlib.h"
#include "tsdf_client.h"
#include "tsdf_proto.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

/* ---- 1. concurrent streams ---------------------------------------------- */

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

/* ---- 1b. the byte budget of queued frames -------------------------------- */

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
    printf("byte budget: %" PRId64 " received, %" PRId64 " integrated, %" PRId64
           " dropped for memory (%" PRId64 " evicted; acked ok %d, acked dropped %d)\n",
           received, integrated, memory, stat_get(st, "queue.dropped_memory"), acked_ok,
           acked_dropped);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

static int cmp_vertex(const void *a, const void *b)
{
    const float *x = a, *y = b;
    for (int k = 0; k < 3; k++)
        if (x[k] != y[k])
            return x[k] < y[k] ? -1 : 1;
    return 0;
}

static void sort_vertices(float *positions, size_t n)
{
    qsort(positions, n, 3 * sizeof(float), cmp_vertex);
}

/* ---- 2. the daemon's results equal the engine's ------------------------- */

static void test_mesh_and_raycast_match_engine(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_volume *vol = NULL;
    tsdf_volume_params p;
    (void)state;

    frames_make(&fs, "sphere", 160, 120, 16);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);

    tsdf_volume_params_default(&p);
    p.backend = test_backend();
    assert_int_equal(tsdf_volume_create(&p, &vol), TSDF_OK);
    uint64_t last_version = 0;
    for (uint32_t i = 0; i < fs.count; i++) {
        tsdf_client_frame f;
        tsdf_rep_integrate rep;
        memset(&f, 0, sizeof f);
        f.map = "site1";
        f.sensor_id = 3;
        f.seq = i;
        f.frame = &fs.frames[i];
        assert_int_equal(tsdf_client_integrate(c, &f, 60000, &rep), TSDF_OK);
        assert_int_equal(rep.seq, i);
        assert_true(rep.version > last_version);
        last_version = rep.version;
        assert_int_equal(tsdf_volume_integrate(vol, &fs.frames[i]), TSDF_OK);
    }
    tsdf_volume_stats vs;
    assert_int_equal(tsdf_volume_get_stats(vol, &vs), TSDF_OK);
    assert_int_equal(last_version, vs.version);

    /* A new map was made on first use, next to the declared default. */
    tsdf_rep_maps maps;
    assert_int_equal(tsdf_client_maps(c, &maps, 10000), TSDF_OK);
    assert_int_equal(maps.count, 2);
    assert_string_equal(maps.names[0], "default");
    assert_string_equal(maps.names[1], "site1");

    /* Mesh. */
    tsdf_mesh dm, em;
    uint64_t mesh_version = 0;
    tsdf_mesh_init(&dm);
    tsdf_mesh_init(&em);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, &mesh_version, 60000), TSDF_OK);
    assert_int_equal(tsdf_volume_mesh(vol, NULL, &em), TSDF_OK);
    assert_int_equal(mesh_version, vs.version);
    assert_true(em.triangle_count > 100);
    assert_int_equal(dm.vertex_count, em.vertex_count);
    assert_int_equal(dm.triangle_count, em.triangle_count);
    if (test_backend() == TSDF_BACKEND_CUDA) {
        /* The GPU allocates blocks in a thread-dependent order, so compare
         * the vertices as sets. */
        sort_vertices(dm.positions, dm.vertex_count);
        sort_vertices(em.positions, em.vertex_count);
    }
    for (size_t i = 0; i < 3 * em.vertex_count; i++)
        if (fabsf(dm.positions[i] - em.positions[i]) > 1e-6f)
            fail_msg("vertex coordinate %zu: daemon %.9g, engine %.9g", i, dm.positions[i],
                     em.positions[i]);
    if (test_backend() == TSDF_BACKEND_CPU)
        assert_memory_equal(dm.indices, em.indices, 3 * em.triangle_count * sizeof(uint32_t));
    tsdf_client_mesh_release(&dm);

    /* Incremental: nothing changed after the current version. */
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof mp);
    mp.since_version = mesh_version;
    assert_int_equal(tsdf_client_mesh(c, "site1", &mp, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.triangle_count, 0);
    tsdf_client_mesh_release(&dm);

    /* Raycast from a pose of the sequence. */
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = fs.seq.width;
    rp.height = fs.seq.height;
    rp.K = fs.seq.K;
    memcpy(rp.T_world_cam, fs.frames[3].T_world_cam, sizeof rp.T_world_cam);
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    size_t px = (size_t)rp.width * rp.height;
    float *dd = malloc(px * sizeof(float)), *ed = malloc(px * sizeof(float));
    float *dn = malloc(3 * px * sizeof(float)), *en = malloc(3 * px * sizeof(float));
    assert_non_null(dd);
    assert_non_null(ed);
    assert_non_null(dn);
    assert_non_null(en);
    tsdf_raycast_output dout = {dd, dn, NULL}, eout = {ed, en, NULL};
    assert_int_equal(tsdf_client_raycast(c, "site1", &rp, 0, &dout, NULL, 60000), TSDF_OK);
    assert_int_equal(tsdf_volume_raycast(vol, &rp, &eout), TSDF_OK);
    size_t hits = 0;
    for (size_t i = 0; i < px; i++) {
        if (isnan(ed[i])) {
            assert_true(isnan(dd[i]));
            continue;
        }
        hits++;
        if (fabsf(dd[i] - ed[i]) > 1e-6f)
            fail_msg("pixel %zu: daemon depth %.9g, engine %.9g", i, dd[i], ed[i]);
        for (int k = 0; k < 3; k++)
            assert_true(fabsf(dn[3 * i + k] - en[3 * i + k]) <= 1e-6f);
    }
    assert_true(hits > px / 20);

    /* Save, reset, load: the map comes back as it was. */
    tsdf_rep_path sp, lp;
    assert_int_equal(tsdf_client_save(c, "site1", NULL, &sp, 60000), TSDF_OK);
    assert_non_null(strstr(sp.path, h.state_dir));
    assert_int_equal(access(sp.path, R_OK), 0);
    assert_int_equal(tsdf_client_reset(c, "site1", 10000), TSDF_OK);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.vertex_count, 0);
    tsdf_client_mesh_release(&dm);
    assert_int_equal(tsdf_client_load(c, "site1", NULL, &lp, 60000), TSDF_OK);
    assert_string_equal(lp.path, sp.path);
    assert_int_equal(tsdf_client_mesh(c, "site1", NULL, &dm, NULL, 60000), TSDF_OK);
    assert_int_equal(dm.vertex_count, em.vertex_count);
    assert_int_equal(dm.triangle_count, em.triangle_count);
    if (test_backend() == TSDF_BACKEND_CUDA)
        sort_vertices(dm.positions, dm.vertex_count);
    for (size_t i = 0; i < 3 * em.vertex_count; i++)
        assert_true(fabsf(dm.positions[i] - em.positions[i]) <= 1e-6f);
    tsdf_client_mesh_release(&dm);
    /* Paths outside the state dir are refused. */
    assert_int_equal(tsdf_client_save(c, "site1", "/etc/tsdfd-evil.snap", NULL, 10000),
                     TSDF_EINVAL);
    assert_int_equal(tsdf_client_load(c, "site1", "../x.snap", NULL, 10000), TSDF_EINVAL);
    /* So are paths that leave it through a symbolic link planted inside. */
    {
        char link[TSDFD_HARNESS_PATH_LEN + 32];
        snprintf(link, sizeof link, "%s/escape", h.state_dir);
        assert_int_equal(symlink("/tmp", link), 0);
        assert_int_equal(tsdf_client_save(c, "site1", "escape/evil.snap", NULL, 10000),
                         TSDF_EINVAL);
        assert_int_equal(tsdf_client_load(c, "site1", "escape/evil.snap", NULL, 10000),
                         TSDF_EINVAL);
        assert_int_equal(unlink(link), 0);
    }
    /* An explicit file inside it works both ways. */
    char file[TSDFD_HARNESS_PATH_LEN + 32];
    snprintf(file, sizeof file, "%s/explicit.snap", h.state_dir);
    assert_int_equal(tsdf_client_save(c, "site1", file, &sp, 60000), TSDF_OK);
    assert_string_equal(sp.path, file);
    assert_int_equal(tsdf_client_load(c, "site1", "explicit.snap", &lp, 60000), TSDF_OK);

    tsdf_mesh_fini(&em);
    free(dd);
    free(ed);
    free(dn);
    free(en);
    tsdf_volume_destroy(vol);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* ---- 3. malformed input ------------------------------------------------- */

static void test_malformed_messages(void **state)
{
    tsdfd_harness h;
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    pk_opts o;
    (void)state;

    assert_non_null(rep);
    assert_non_null(st);
    assert_int_equal(start_daemon(&h, "[server]\nmax_message_mb = 1\n", NULL), 0);
    nng_socket s = raw_req(&h);

    /* Garbage bytes, an empty message, a msgpack value that is not a map,
     * and a map with trailing bytes: FORMAT, answered as type "error". */
    raw_roundtrip(s, "\xc1\xc1\xc1\xc1", 4, rep);
    assert_int_equal(rep->status, TSDF_EFORMAT);
    assert_int_equal(rep->type, TSDF_MSG_ERROR);
    raw_roundtrip(s, "", 0, rep);
    assert_int_equal(rep->status, TSDF_EFORMAT);
    raw_roundtrip(s, "\x93\x01\x02\x03", 4, rep); /* [1, 2, 3] */
    assert_int_equal(rep->status, TSDF_EFORMAT);
    {
        unsigned char noise[4096];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof noise; i++) {
            x = x * 1103515245u + 12345u;
            noise[i] = (unsigned char)(x >> 16);
        }
        raw_roundtrip(s, noise, sizeof noise, rep);
        assert_true(rep->status < 0);
    }
    {
        msgpack_sbuffer sb;
        o = pk_defaults();
        o.type = "ping";
        pack_request(&sb, &o, 5);
        msgpack_sbuffer_write(&sb, "\x00", 1);
        raw_roundtrip(s, sb.data, sb.size, rep);
        msgpack_sbuffer_destroy(&sb);
        assert_int_equal(rep->status, TSDF_EFORMAT);
    }

    /* Wrong types, versions and message types. */
    o = pk_defaults();
    o.type = "ping";
    o.id_as_string = 1;
    expect_error(s, &o, 0, TSDF_EPROTO_KEY, TSDF_MSG_PING);
    o = pk_defaults();
    o.type = "ping";
    o.version = 2;
    /* Another version: type and id are still echoed (PROTOCOL.md 3). */
    expect_error(s, &o, 11, TSDF_EVERSION, TSDF_MSG_PING);
    o = pk_defaults();
    o.type = "teleport";
    expect_error(s, &o, 12, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR);
    o = pk_defaults();
    o.type = "error";
    expect_error(s, &o, 13, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR);
    o = pk_defaults();
    o.type = "frame";                                          /* frames go to the PUSH socket */
    expect_error(s, &o, 14, TSDF_EPROTO_TYPE, TSDF_MSG_ERROR); /* frame has no reply type */

    /* Malformed integrates: each is a frame received and rejected. */
    o = pk_defaults();
    o.omit_depth = 1;
    expect_error(s, &o, 20, TSDF_EPROTO_KEY, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.bad_pose = 1;
    expect_error(s, &o, 21, TSDF_EBAD_POSE, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.depth_delta = 6;
    expect_error(s, &o, 22, TSDF_EBAD_SIZE, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.width = 10000;
    expect_error(s, &o, 23, TSDF_ETOO_LARGE, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.fx = -1.0f;
    expect_error(s, &o, 24, TSDF_EBAD_INTRINSICS, TSDF_MSG_INTEGRATE); /* invalid_frame */
    o = pk_defaults();
    o.fmt = "u8";
    expect_error(s, &o, 25, TSDF_EPROTO_KEY, TSDF_MSG_INTEGRATE); /* decode_error */
    o = pk_defaults();
    o.map = "no spaces!";
    expect_error(s, &o, 26, TSDF_EINVAL, TSDF_MSG_INTEGRATE); /* invalid_frame */

    /* Oversize: above the configured 1 MiB (but under nng's hard limit). */
    o = pk_defaults();
    o.type = "ping";
    o.pad_bytes = 1024 * 1024 + 1000;
    expect_error(s, &o, 30, TSDF_ETOO_LARGE, TSDF_MSG_PING);

    /* Valid requests the daemon must refuse. */
    tsdf_client *c = open_client(&h, 1);
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "nosuchmap", NULL, &m, NULL, 10000), TSDF_ENOT_FOUND);
    tsdf_raycast_params rp;
    memset(&rp, 0, sizeof rp);
    rp.width = 4096;
    rp.height = 4096;
    rp.K = (tsdf_intrinsics){500, 500, 2048, 2048};
    for (int i = 0; i < 16; i++)
        rp.T_world_cam[i] = (i % 5 == 0) ? 1.0f : 0.0f;
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = 5.0f;
    float *big = malloc((size_t)4096 * 4096 * sizeof(float));
    assert_non_null(big);
    tsdf_raycast_output ro = {big, NULL, NULL};
    int rc = tsdf_client_raycast(c, "default", &rp, 0, &ro, NULL, 10000);
    free(big);
    assert_int_equal(rc, TSDF_ETOO_LARGE);

    /* Garbage and a non-frame on the frames socket. */
    nng_socket push = raw_push(&h);
    assert_int_equal(nng_send(push, "\xc1\xff\x00", 3, 0), 0);
    {
        msgpack_sbuffer sb;
        o = pk_defaults();
        o.type = "ping";
        pack_request(&sb, &o, 40);
        assert_int_equal(nng_send(push, sb.data, sb.size, 0), 0);
        msgpack_sbuffer_destroy(&sb);
    }

    /* Still serving: ping, then a real frame integrates. */
    tsdf_rep_ping ping;
    assert_int_equal(tsdf_client_ping(c, &ping, 10000), TSDF_OK);
    assert_non_null(strstr(ping.server, "tsdfd"));
    frame_set fs;
    frames_make(&fs, "sphere", 64, 48, 1);
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.frame = &fs.frames[0];
    f.sensor = "good";
    tsdf_rep_integrate irep;
    assert_int_equal(tsdf_client_integrate(c, &f, 30000, &irep), TSDF_OK);

    /* 7 malformed integrates + 2 bad frames + 1 good frame. */
    wait_settled(c, "default", 10, st);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "frames.received"), 10);
    assert_int_equal(stat_get(st, "frames.integrated"), 1);
    assert_int_equal(stat_get(st, "rejected.decode_error"), 3 + 2);
    assert_int_equal(stat_get(st, "rejected.invalid_frame"), 4);
    assert_int_equal(stat_get(st, "sensor.good.integrated"), 1);
    assert_true(stat_get(st, "requests.errors") >= 16);

    frames_free(&fs);
    nng_close(push);
    nng_close(s);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(rep);
    free(st);
}

/* A request {v, type, id, key: value} with raw bytes for the strings. */
static void pack_raw_request(msgpack_sbuffer *sb, const char *type, size_t type_len,
                             const char *key, const char *value, size_t value_len)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pk_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    pk_str(&pk, "type");
    msgpack_pack_str(&pk, type_len);
    msgpack_pack_str_body(&pk, type, type_len);
    pk_str(&pk, "id");
    msgpack_pack_uint64(&pk, 77);
    pk_str(&pk, key);
    msgpack_pack_str(&pk, value_len);
    msgpack_pack_str_body(&pk, value, value_len);
}

/* Error replies quote what the client sent (names, paths, types); however
 * broken those bytes are, the reply stays valid UTF-8 (raw_roundtrip checks
 * every str) and its message printable. */
static void test_error_replies_are_utf8(void **state)
{
    tsdfd_harness h;
    tsdf_reply *rep = malloc(sizeof *rep);
    msgpack_sbuffer sb;
    (void)state;

    assert_non_null(rep);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);

    /* A map name that is not UTF-8, and one that is but holds an escape
     * character, which the message quotes. */
    pack_raw_request(&sb, "stats", 5, "map", "caf\xc3", 4);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    assert_int_equal(rep->type, TSDF_MSG_STATS);
    pack_raw_request(&sb, "stats", 5, "map", "caf\xc3\xa9\x1b[2J", 9);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    if (strstr(rep->message, "\"caf\xc3\xa9?[2J\"") == NULL)
        fail_msg("message: %s", rep->message);

    /* A type that is a truncated 3-byte sequence. */
    pack_raw_request(&sb, "\xe2\x82", 2, "map", "default", 7);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EPROTO_TYPE);

    /* A path that is not UTF-8 is refused before the daemon uses it. */
    pack_raw_request(&sb, "save", 4, "path", "m\xff.tsdf", 7);
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);

    /* A valid path whose file name the daemon quotes cut to 64 bytes,
     * inside a 2-byte character: the half character becomes '?'. */
    char path[128] = "snap-";
    for (int i = 0; i < 40; i++)
        strcat(path, "\xc3\xa9");
    strcat(path, ".tsdfsnap");
    pack_raw_request(&sb, "save", 4, "path", path, strlen(path));
    raw_roundtrip(s, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rep->status, TSDF_EINVAL);
    assert_non_null(strstr(rep->message, "reserved"));
    assert_non_null(strstr(rep->message, "\xc3\xa9?'"));

    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(rep);
}

/* ---- 4. SIGTERM drains -------------------------------------------------- */

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

/* ---- 5. persistence: autosave, save_on_stop, load_on_start ------------- */

/* Entries of dir other than . and ..; with only_snapshots, just the
 * snapshot files (snap-*.tsdfsnap). -1 when dir cannot be read. */
static int count_entries(const char *dir, int only_snapshots)
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
    /* Autosave runs every second and keeps at most 2 files. */
    sleep_ms(3500);
    int files = count_entries(a.state_dir, 0);
    assert_true(files >= 1);
    assert_true(files <= 2);
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

/* ---- 5b. save and load as proto/PROTOCOL.md (6.4) describes them -------- */

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

/* Messages arriving in part are held by nng with no time limit, one per
 * connection: the number of connections bounds what they may hold. One
 * beyond [server] max_connections is closed as it connects, counted, and
 * the connections already open keep being served. */
/* Polls c's stats (into *st) until the daemon counts at most n open
 * connections; 10 s at most. */
static void wait_connections_at_most(tsdf_client *c, tsdf_rep_stats *st, int64_t n)
{
    for (int waited = 0; waited < 10000; waited += 50) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        if (stat_get(st, "connections.open") <= n)
            return;
        sleep_ms(50);
    }
    fail_msg("the daemon still counts %lld connections, expected at most %lld",
             (long long)stat_get(st, "connections.open"), (long long)n);
}

static void test_connection_limit(void **state)
{
    tsdfd_harness h;
    nng_socket raw[2];
    tsdf_rep_stats *st = malloc(sizeof *st);
    (void)state;
    assert_non_null(st);

    assert_int_equal(start_daemon(&h, "[server]\nmax_connections = 3\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    /* The harness's ping client has closed, but the daemon may count its
     * close a moment later: until then it holds one of the three places,
     * and one of the connections below would be refused in its stead. */
    wait_connections_at_most(c, st, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(nng_req0_open(&raw[i]), 0);
        assert_int_equal(nng_dial(raw[i], h.req_url, NULL, 0), 0);
    }
    /* A dial returns once the client's side is up; the daemon may count the
     * connection a moment later. Wait until all three are counted. */
    for (int waited = 0; waited < 10000; waited += 20) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        if (stat_get(st, "connections.open") == 3)
            break;
        sleep_ms(20);
    }
    assert_int_equal(stat_get(st, "connections.open"), 3);
    tsdf_client_options o;
    tsdf_client *extra = NULL;
    tsdf_client_options_default(&o);
    int rc = tsdf_client_open(h.req_url, NULL, &o, &extra);
    if (rc == TSDF_OK) {
        assert_int_not_equal(tsdf_client_ping(extra, NULL, 1500), TSDF_OK);
        tsdf_client_close(extra);
    }
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_true(stat_get(st, "connections.refused") >= 1);
    /* Exactly the admitted ones: a refused connection is not counted. */
    assert_int_equal(stat_get(st, "connections.open"), 3);

    /* Room again once the idle connections go. */
    for (int i = 0; i < 2; i++)
        nng_close(raw[i]);
    /* The daemon sees the closes asynchronously: wait until only c is left
     * (a loaded machine may take a while), so the new client is not refused
     * for a connection that is already gone. */
    wait_connections_at_most(c, st, 1);
    extra = open_client(&h, 0);
    assert_int_equal(tsdf_client_ping(extra, NULL, 10000), TSDF_OK);
    tsdf_client_close(extra);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 20000), 0);
    free(st);
}

/* ---- 7. mutated messages: every one answered, nothing crashes ----------- */

static void test_mutated_messages(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_buf valid;
    tsdf_request *req = calloc(1, sizeof *req);
    tsdf_reply *rep = malloc(sizeof *rep);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;

    assert_non_null(req);
    assert_non_null(rep);
    assert_non_null(st);
    frames_make(&fs, "sphere", 16, 12, 1);
    tsdf_request_init(req, TSDF_MSG_INTEGRATE);
    req->id = 99;
    req->u.frame.frame = fs.frames[0];
    snprintf(req->u.frame.sensor.name, sizeof req->u.frame.sensor.name, "fuzz");
    req->u.frame.sensor.is_id = 0;
    tsdf_buf_init(&valid);
    assert_int_equal(tsdf_proto_encode_request(req, &valid), TSDF_OK);

    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);
    nng_socket push = raw_push(&h);
    uint8_t *buf = malloc(valid.len + 64);
    assert_non_null(buf);
    uint32_t x = 2024;
    const int rounds = 1500;
    int ok = 0, errors = 0;
    for (int r = 0; r < rounds; r++) {
        size_t len = valid.len;
        memcpy(buf, valid.data, len);
        x = x * 1664525u + 1013904223u;
        int flips = 1 + (int)((x >> 24) % 8);
        for (int k = 0; k < flips; k++) {
            x = x * 1664525u + 1013904223u;
            buf[(x >> 8) % len] = (uint8_t)(x >> 20);
        }
        x = x * 1664525u + 1013904223u;
        if ((x >> 28) == 0) /* sometimes truncate too */
            len = (x >> 8) % len;
        raw_roundtrip(s, buf, len, rep);
        if (rep->status == TSDF_OK)
            ok++;
        else
            errors++;
        if (r % 4 == 0)
            assert_int_equal(nng_send(push, buf, len, 0), 0);
    }
    printf("mutated messages: %d accepted, %d refused with an error reply\n", ok, errors);
    assert_int_equal(ok + errors, rounds);
    assert_true(errors > 0);

    /* Still alive and consistent once the pushed ones are through. */
    tsdf_client *c = open_client(&h, 0);
    tsdf_rep_ping ping;
    assert_int_equal(tsdf_client_ping(c, &ping, 10000), TSDF_OK);
    for (int waited = 0; waited < 60000; waited += 50) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
        if (stat_get(st, "frames.in_flight") == 0 && stat_get(st, "requests.total") >= rounds)
            break;
        sleep_ms(50);
    }
    assert_reconciled(st);
    tsdf_client_close(c);
    nng_close(push);
    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 60000), 0);
    free(buf);
    tsdf_buf_fini(&valid);
    frames_free(&fs);
    free(req);
    free(rep);
    free(st);
}

/* ---- 8. stats keys of long sensor names --------------------------------- */

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

/* ---- 7. bounded queries and a bounded stop (issue 8) ---------------------- */

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A short request timeout, so that a pathological query times out fast,
 * and room for the replies of the 1024 x 1024 raycasts below (16 MiB with
 * normals, above the default 8 MiB message limit). */
#define SHORT_TIMEOUT_INI "[server]\nrequest_timeout_ms = 200\nmax_message_mb = 32\n"

/* Raycast buffers for up to 1024 x 1024 pixels. */
typedef struct {
    float *depth, *normals;
} cast_buffers;

static void cast_buffers_init(cast_buffers *b)
{
    b->depth = malloc(1024u * 1024u * sizeof(float));
    b->normals = malloc(3u * 1024u * 1024u * sizeof(float));
    assert_non_null(b->depth);
    assert_non_null(b->normals);
}

static void cast_buffers_fini(cast_buffers *b)
{
    free(b->depth);
    free(b->normals);
}

/* A raycast from the origin along world +z; returns the client's code and
 * the seconds it took in *dt. */
static int raycast_from_origin(tsdf_client *c, uint32_t w, uint32_t h, float f_px, float max_m,
                               cast_buffers *b, double *dt)
{
    tsdf_raycast_params rp;
    tsdf_raycast_output out = {b->depth, b->normals, NULL};
    memset(&rp, 0, sizeof rp);
    rp.width = w;
    rp.height = h;
    rp.K.fx = rp.K.fy = f_px;
    rp.K.cx = 0.5f * (float)w - 0.5f;
    rp.K.cy = 0.5f * (float)h - 0.5f;
    rp.T_world_cam[0] = rp.T_world_cam[5] = rp.T_world_cam[10] = rp.T_world_cam[15] = 1.0f;
    rp.min_depth_m = 0.1f;
    rp.max_depth_m = max_m;
    double t0 = mono_s();
    int rc = tsdf_client_raycast(c, "default", &rp, 0, &out, NULL, 10000);
    *dt = mono_s() - t0;
    return rc;
}

/* 1024 x 1024 rays of a 160-degree camera to the deepest legal depth: each
 * ray is ~1000 m of block skips, minutes of work for the CPU backend, so
 * the request times out; the worker must stop it (not grind on). */
static int raycast_too_long(tsdf_client *c, cast_buffers *b, double *dt)
{
    float f_px = 511.5f / tanf(80.0f * 3.14159265f / 180.0f);
    return raycast_from_origin(c, 1024, 1024, f_px, TSDF_MAX_RAY_M, b, dt);
}

static void test_pathological_raycasts_leave_the_map_responsive(void **state)
{
    tsdfd_harness h;
    cast_buffers b;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    tsdf_rep_ping ping;
    tsdf_rep_path sp;
    double dt;
    (void)state;

    assert_non_null(st);
    cast_buffers_init(&b);
    /* 1 s rather than SHORT_TIMEOUT_INI's 200 ms: the stats query after the
     * cancelled raycast must get through even where a loaded CI machine
     * takes the worker a while to see the cancellation. */
    assert_int_equal(
        start_daemon(&h, "[server]\nrequest_timeout_ms = 1000\nmax_message_mb = 32\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);

    /* 16 x 16 pixels of fx = fy = 0.01: each ray ~1100 times longer than
     * its depth. It used to wedge the map for hours; now it is refused or
     * bounded, and answered at once either way. */
    int rc = raycast_from_origin(c, 16, 16, 0.01f, 5.0f, &b, &dt);
    printf("16x16 raycast of fx 0.01: %s in %.3f s\n", tsdf_errname(rc), dt);
    assert_true(rc == TSDF_OK || rc == TSDF_EBAD_INTRINSICS);
    assert_true(dt < 2.0);

    /* The GPU kernel cannot be cancelled (its bound is the march's), so the
     * timed-out raycast is a CPU case. */
    if (test_backend() == TSDF_BACKEND_CPU) {
        rc = raycast_too_long(c, &b, &dt);
        printf("1024x1024 raycast of 160 degrees to %g m: %s in %.3f s\n", (double)TSDF_MAX_RAY_M,
               tsdf_errname(rc), dt);
        assert_int_equal(rc, TSDF_ETIMEOUT);
        assert_true(dt < 3.0);
    }
    /* The map's worker is free again at once: a ping, a stats query (run
     * by the worker) and a save (an export by the worker) all succeed
     * within the request timeout. */
    double t0 = mono_s();
    assert_int_equal(tsdf_client_ping(c, &ping, 10000), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "default", st, 10000), TSDF_OK);
    assert_int_equal(tsdf_client_save(c, "default", NULL, &sp, 10000), TSDF_OK);
    assert_true(mono_s() - t0 < 2.0);
    assert_int_equal(stat_get(st, "workers.stalled"), 0);
    if (test_backend() == TSDF_BACKEND_CPU)
        assert_int_equal(stat_get(st, "queries.cancelled"), 1);
    assert_int_equal(stat_get(st, "queries.abandoned"), 0);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    cast_buffers_fini(&b);
    free(st);
}

/* SIGTERM right after a query that timed out: the daemon exits 0 within
 * request_timeout + drain_timeout + stop_timeout (+ the save) and writes
 * its final snapshot. Before the bounds the worker kept marching and the
 * daemon never exited, so the final save never happened. */
static void test_sigterm_after_a_timed_out_query_is_bounded(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    cast_buffers b;
    double dt;
    (void)state;

    frames_make(&fs, "sphere", 160, 120, 4);
    cast_buffers_init(&b);
    assert_int_equal(start_daemon(&h,
                                  SHORT_TIMEOUT_INI "stop_timeout_ms = 1000\n"
                                                    "[queue]\ndrain_timeout_ms = 1000\n"
                                                    "[snapshot]\nsave_on_stop = true\n",
                                  NULL),
                     0);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < fs.count; i++) {
        tsdf_client_frame f;
        tsdf_rep_integrate rep;
        memset(&f, 0, sizeof f);
        f.frame = &fs.frames[i];
        f.seq = i;
        assert_int_equal(tsdf_client_integrate(c, &f, 10000, &rep), TSDF_OK);
    }
    if (test_backend() == TSDF_BACKEND_CPU)
        assert_int_equal(raycast_too_long(c, &b, &dt), TSDF_ETIMEOUT);
    else
        assert_true(raycast_from_origin(c, 16, 16, 0.01f, 5.0f, &b, &dt) != TSDF_ETIMEOUT);
    tsdf_client_close(c);
    assert_int_equal(count_entries(h.state_dir, 1), 0);

    double t0 = mono_s();
    assert_int_equal(tsdfd_harness_stop(&h, 10000), 0);
    dt = mono_s() - t0;
    printf("SIGTERM to exit after a timed-out raycast: %.3f s\n", dt);
    assert_true(dt < 5.0);
    assert_int_equal(count_entries(h.state_dir, 1), 1);
    cast_buffers_fini(&b);
    frames_free(&fs);
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

/* ---- 7. memory: impossible cameras and the volume budget ---------------- */

/* The 700-byte frame of issue 8 (16x16 u16, fx = fy = 0.05: a field of
 * view of 179.6 degrees, which used to allocate 240 MiB) is refused as
 * BAD_INTRINSICS by an integrate and dropped, counted, from the stream. */
static void test_tiny_focal_length_refused(void **state)
{
    tsdfd_harness h;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    (void)state;
    assert_non_null(st);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    nng_socket s = raw_req(&h);
    nng_socket push = raw_push(&h);
    pk_opts o = pk_defaults();
    o.width = o.height = 16;
    o.fx = o.fy = 0.05f;
    o.cx = o.cy = 7.5f;
    expect_error(s, &o, 1, TSDF_EBAD_INTRINSICS, TSDF_MSG_INTEGRATE);
    {
        msgpack_sbuffer sb;
        o.type = "frame";
        pack_request(&sb, &o, 2);
        assert_true(sb.size < 1024);
        assert_int_equal(nng_send(push, sb.data, sb.size, 0), 0);
        msgpack_sbuffer_destroy(&sb);
    }
    tsdf_client *c = open_client(&h, 0);
    wait_settled(c, "default", 2, st);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "rejected.invalid_frame"), 2);
    assert_int_equal(stat_get(st, "frames.integrated"), 0);
    assert_true(st->has_engine);
    assert_int_equal(st->engine.blocks_allocated, 0);

    tsdf_client_close(c);
    nng_close(push);
    nng_close(s);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(st);
}

/* Streams the frames alternately into maps a and b, counting what each
 * got and how many were refused for capacity (anything else fails). */
static void stream_two_maps(tsdf_client *c, const frame_set *fs, int ok_map[2], int *ok,
                            int *refused)
{
    static const char *const names[2] = {"a", "b"};
    for (uint32_t i = 0; i < fs->count; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.map = names[i % 2];
        f.sensor = "cam";
        f.frame = &fs->frames[i];
        int rc = tsdf_client_integrate(c, &f, 30000, NULL);
        if (rc == TSDF_OK) {
            (*ok)++;
            ok_map[i % 2]++;
        } else if (rc == TSDF_ECAPACITY) {
            (*refused)++;
        } else {
            fail_msg("frame %u: %s", i, tsdf_errname(rc));
        }
    }
}

/* A daemon-wide volume budget of half what two maps of 4 cm voxels hold
 * without it (measured first, since each backend carries its own per-map
 * overhead: CUDA volumes hold per-frame scratch on the device, which the
 * budget counts too), each map with the default (4 GiB) cap of its own:
 * once the maps together hold what the budget allows, frames that need new
 * blocks are refused with CAPACITY, counted under rejected.capacity and
 * volume.budget_refused_frames, while stats and mesh queries answer, a
 * frame that needs no new block still integrates, and nothing integrated
 * is lost. */
static void test_volume_memory_budget(void **state)
{
    tsdfd_harness h;
    frame_set fs;
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    const char *const names[2] = {"a", "b"};
    char ini[512];
    (void)state;
    assert_non_null(st);
    frames_make(&fs, "room", 64, 48, 40);
    static const char grid[] = "voxel_size_m = 0.04\ninitial_capacity_blocks = 1024\n";

    /* What the two maps hold with room to spare. */
    int ok = 0, refused = 0;
    int ok_map[2] = {0, 0};
    snprintf(ini, sizeof ini, "[volume]\n%s", grid);
    assert_int_equal(start_daemon(&h, ini, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    stream_two_maps(c, &fs, ok_map, &ok, &refused);
    assert_int_equal(refused, 0);
    assert_int_equal(tsdf_client_stats(c, "a", st, 30000), TSDF_OK);
    uint64_t full = (uint64_t)stat_get(st, "volume.memory_bytes");
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    uint64_t budget_mb = (full / 2) >> 20;
    if (budget_mb == 0)
        budget_mb = 1;
    const uint64_t budget = budget_mb << 20;
    assert_true(budget < full);

    snprintf(ini, sizeof ini, "[volume]\n%smemory_budget_mb = %llu\n", grid,
             (unsigned long long)budget_mb);
    assert_int_equal(start_daemon(&h, ini, NULL), 0);
    c = open_client(&h, 0);
    ok = refused = 0;
    ok_map[0] = ok_map[1] = 0;
    stream_two_maps(c, &fs, ok_map, &ok, &refused);
    printf("volume budget %llu MiB (half of %.1f MiB): %d frames integrated (%d + %d), %d "
           "refused for capacity\n",
           (unsigned long long)budget_mb, (double)full / 1048576.0, ok, ok_map[0], ok_map[1],
           refused);
    assert_true(ok_map[0] >= 1 && ok_map[1] >= 1);
    assert_true(refused >= 1);

    /* All maps together (a, b and the declared, empty default) stay within
     * the budget (one client, one frame at a time: no concurrent growth),
     * and the stats say so. */
    uint64_t blocks[2], memory = 0;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tsdf_client_stats(c, k < 2 ? names[k] : "default", st, 30000), TSDF_OK);
        assert_true(st->has_engine);
        memory += st->engine.memory_bytes;
        if (k < 2) {
            blocks[k] = st->engine.blocks_allocated;
            assert_true(blocks[k] > 0);
        }
    }
    assert_true(memory <= budget);
    assert_reconciled(st);
    assert_int_equal(stat_get(st, "volume.memory_budget_bytes"), (int64_t)budget);
    assert_int_equal(stat_get(st, "volume.memory_bytes"), (int64_t)memory);
    assert_int_equal(stat_get(st, "rejected.capacity"), refused);
    assert_int_equal(stat_get(st, "volume.budget_refused_frames"), refused);
    assert_int_equal(stat_get(st, "frames.integrated"), ok);

    /* Queries still answer, from everything integrated. */
    tsdf_mesh m;
    tsdf_mesh_init(&m);
    assert_int_equal(tsdf_client_mesh(c, "a", NULL, &m, NULL, 30000), TSDF_OK);
    assert_true(m.triangle_count > 0);
    tsdf_client_mesh_release(&m);

    /* The first frame again needs no new block of map a: it integrates. */
    tsdf_client_frame f;
    memset(&f, 0, sizeof f);
    f.map = "a";
    f.sensor = "cam";
    f.frame = &fs.frames[0];
    assert_int_equal(tsdf_client_integrate(c, &f, 30000, NULL), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "a", st, 30000), TSDF_OK);
    assert_int_equal(st->engine.blocks_allocated, blocks[0]);
    assert_int_equal(st->engine.frames_integrated, (uint64_t)ok_map[0] + 1);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
    free(st);
}

int main(void)
{
    if (test_backend() == TSDF_BACKEND_CUDA && !tsdf_cuda_available())
        tsdf_test_skip_program("TSDF_TEST_DAEMON_BACKEND=cuda but no usable GPU");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_streams_block),
        cmocka_unit_test(test_concurrent_streams_drop_oldest),
        cmocka_unit_test(test_queue_byte_budget),
        cmocka_unit_test(test_mesh_and_raycast_match_engine),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_error_replies_are_utf8),
        cmocka_unit_test(test_sigterm_drains_queue),
        cmocka_unit_test(test_persistence_across_restarts),
        cmocka_unit_test(test_save_load_semantics),
        cmocka_unit_test(test_client_cannot_pin_the_restored_snapshot),
        cmocka_unit_test(test_connection_limit),
        cmocka_unit_test(test_mutated_messages),
        cmocka_unit_test(test_stats_keep_long_sensor_names),
        cmocka_unit_test(test_tiny_focal_length_refused),
        cmocka_unit_test(test_volume_memory_budget),
        cmocka_unit_test(test_pathological_raycasts_leave_the_map_responsive),
        cmocka_unit_test(test_sigterm_after_a_timed_out_query_is_bounded),
    };
    /* TSDF_TEST_FILTER=<glob> runs only the matching tests (e.g. to loop one
     * that is suspected of flakiness). */
    const char *filter = getenv("TSDF_TEST_FILTER");
    if (filter != NULL && filter[0] != '\0')
        cmocka_set_test_filter(filter);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
