/*
 * test_worker.c - the map workers' bounds (daemon/worker.c):
 *  - a query whose waiter gave up before the worker took it is not run
 *    (a reset stays undone) and is counted as abandoned, while a query
 *    with a waiter runs;
 *  - the stop has a deadline: a worker that does not finish its job in
 *    time is reported stuck (TSDF_ETIMEOUT, dmap.stuck) within the bound
 *    instead of being joined forever, and one that finishes is joined.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "config.h"
#include "dstats.h"
#include "log.h"
#include "maps.h"
#include "worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS 1000000LL

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Integrates one frame of a wall 1 m ahead into map m and waits for it. */
static void integrate_wall(dmap *m)
{
    enum { W = 64, H = 48 };
    static float depth[W * H];
    worker_job *j = job_new(JOB_FRAME, 1);
    tsdf_frame *f;
    assert_non_null(j);
    for (int i = 0; i < W * H; i++)
        depth[i] = 1.0f;
    f = &j->req.u.frame.frame;
    f->width = W;
    f->height = H;
    f->K.fx = f->K.fy = 60.0f;
    f->K.cx = 31.5f;
    f->K.cy = 23.5f;
    f->T_world_cam[0] = f->T_world_cam[5] = f->T_world_cam[10] = f->T_world_cam[15] = 1.0f;
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = depth;
    f->min_depth_m = 0.1f;
    f->max_depth_m = 5.0f;
    assert_int_equal(queue_push_frame_sized(&m->queue, j, 0, 0, 1000, NULL, NULL, NULL), TSDF_OK);
    assert_int_equal(job_wait(j, 10000), TSDF_OK);
    assert_int_equal(j->status, TSDF_OK);
    job_free(j);
}

static uint64_t blocks_of(dmap *m)
{
    worker_job *j = job_new(JOB_STATS, 1);
    assert_non_null(j);
    assert_int_equal(queue_push_query(&m->queue, j), TSDF_OK);
    assert_int_equal(job_wait(j, 10000), TSDF_OK);
    assert_int_equal(j->status, TSDF_OK);
    uint64_t n = j->vstats.blocks_allocated;
    job_free(j);
    return n;
}

static void test_abandoned_query_is_not_run(void **state)
{
    static tsdfd_config cfg;
    static map_registry r;
    static dstats ds;
    ds_totals t;
    dmap *m;
    (void)state;

    tsdf_log_set_level(TSDF_LOG_ERROR);
    cfg_defaults(&cfg);
    cfg.volume.backend = TSDF_BACKEND_CPU;
    cfg.volume.initial_capacity_blocks = 1024;
    assert_int_equal(dstats_init(&ds, 4, 16), TSDF_OK);
    assert_int_equal(maps_init(&r, &cfg, &ds), TSDF_OK);
    assert_int_equal(maps_get(&r, "default", 0, &m), TSDF_OK);

    integrate_wall(m);
    uint64_t blocks = blocks_of(m);
    assert_true(blocks > 0);

    /* A reset whose request timed out while it was queued (job_wait set
     * abandoned): the worker must drop it, and the wall stays. */
    worker_job *j = job_new(JOB_RESET, 1);
    assert_non_null(j);
    j->abandoned = 1;
    assert_int_equal(queue_push_query(&m->queue, j), TSDF_OK);
    for (int waited = 0; waited < 60000; waited += 10) {
        dstats_get_totals(&ds, &t);
        if (t.queries_abandoned > 0)
            break;
        sleep_ms(10);
    }
    dstats_get_totals(&ds, &t);
    assert_int_equal(t.queries_abandoned, 1);
    assert_int_equal(blocks_of(m), blocks);

    /* The same reset, waited for, runs. */
    j = job_new(JOB_RESET, 1);
    assert_non_null(j);
    assert_int_equal(queue_push_query(&m->queue, j), TSDF_OK);
    assert_int_equal(job_wait(j, 10000), TSDF_OK);
    assert_int_equal(j->status, TSDF_OK);
    job_free(j);
    assert_int_equal(blocks_of(m), 0);
    dstats_get_totals(&ds, &t);
    assert_int_equal(t.queries_abandoned, 1);

    maps_put(m); /* maps_get's reference */
    assert_int_equal(maps_stop(&r, 1000, 1000), 0);
    assert_int_equal(maps_fini(&r), TSDF_OK);
    dstats_fini(&ds);
}

/* A stand-in worker thread: on a job until the test releases it (stuck),
 * or only until the stop asks it to finish (a well-behaved one). */
typedef struct {
    dmap *m;
    atomic_int release;
    int obey_stop;
} fake_worker;

static void *fake_worker_main(void *arg)
{
    fake_worker *f = arg;
    while (!atomic_load(&f->release) && !(f->obey_stop && atomic_load(&f->m->abort_drain)))
        sleep_ms(2);
    atomic_store(&f->m->busy_since_ns, 0);
    atomic_store(&f->m->worker_exited, 1);
    return NULL;
}

static double now_s(void)
{
    return (double)worker_now_ns() / 1e9;
}

static void start_fake(dmap *m, fake_worker *f, int obey_stop)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", obey_stop ? "busy" : "wedged");
    assert_int_equal(queue_init(&m->queue, 4, 4, QUEUE_BLOCK), TSDF_OK);
    f->m = m;
    atomic_store(&f->release, 0);
    f->obey_stop = obey_stop;
    atomic_store(&m->busy_kind, JOB_RAYCAST);
    atomic_store(&m->busy_since_ns, worker_now_ns());
    assert_int_equal(pthread_create(&m->thread, NULL, fake_worker_main, f), 0);
    m->thread_started = 1;
}

static void test_join_has_a_deadline(void **state)
{
    static dmap m;
    static fake_worker f;
    (void)state;

    tsdf_log_set_level(TSDF_LOG_ERROR);
    /* Wedged: the join gives up at its deadline, not never. */
    start_fake(&m, &f, 0);
    double t0 = now_s();
    worker_drain(&m, worker_now_ns() + 100 * MS);
    assert_int_equal(worker_join(&m, worker_now_ns() + 300 * MS), TSDF_ETIMEOUT);
    double dt = now_s() - t0;
    /* Not before the deadline, and not never (the fake worker is wedged
     * until released): the upper bound is generous, not a speed. */
    assert_true(dt >= 0.29 && dt < 60.0);
    assert_int_equal(m.stuck, 1);
    assert_int_equal(m.thread_started, 1);
    /* Asked again (the failure path's second stop), it does not wait for
     * its deadline: one an hour away would show. */
    t0 = now_s();
    assert_int_equal(worker_join(&m, worker_now_ns() + 3600000 * MS), TSDF_ETIMEOUT);
    assert_true(now_s() - t0 < 600.0);
    atomic_store(&f.release, 1);
    pthread_join(m.thread, NULL);
    queue_fini(&m.queue);

    /* A worker that finishes its job when the stop begins is joined. */
    start_fake(&m, &f, 1);
    t0 = now_s();
    worker_drain(&m, worker_now_ns() + 100 * MS);
    /* Joined as soon as it finishes, not at the (hour-long) deadline. */
    assert_int_equal(worker_join(&m, worker_now_ns() + 3600000 * MS), TSDF_OK);
    assert_true(now_s() - t0 < 600.0);
    assert_int_equal(m.stuck, 0);
    assert_int_equal(m.thread_started, 0);
    queue_fini(&m.queue);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abandoned_query_is_not_run),
        cmocka_unit_test(test_join_has_a_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
