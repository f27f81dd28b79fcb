/*
 * test_queue.c - the bounded two-lane frame queue (daemon/queue.h) and the
 * drop counters it feeds (daemon/dstats.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "dstats.h"
#include "queue.h"
#include "tsdf_error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Items are small integers cast to pointers: the queue never dereferences them. */
#define ITEM(i) ((void *)(uintptr_t)(i))
#define VAL(p) ((int)(uintptr_t)(p))

static void test_init_rejects_bad_args(void **state)
{
    frame_queue q;
    (void)state;
    assert_int_equal(queue_init(&q, 0, 4, QUEUE_BLOCK), TSDF_EINVAL);
    assert_int_equal(queue_init(&q, 4, 0, QUEUE_BLOCK), TSDF_EINVAL);
    assert_int_equal(queue_init(&q, 4, 4, (queue_policy)7), TSDF_EINVAL);
}

static void test_fifo_and_bound_block(void **state)
{
    frame_queue q;
    void *item, *dropped;
    int is_query;
    queue_stats st;
    (void)state;

    assert_int_equal(queue_init(&q, 3, 2, QUEUE_BLOCK), TSDF_OK);
    for (int i = 1; i <= 3; i++)
        assert_int_equal(queue_push_frame(&q, ITEM(i), 0, 0, &dropped), TSDF_OK);
    /* Full, no wait: refused, nothing evicted. */
    assert_int_equal(queue_push_frame(&q, ITEM(4), 0, 0, &dropped), TSDF_EQUEUE_FULL);
    assert_null(dropped);
    queue_get_stats(&q, &st);
    assert_int_equal(st.depth, 3);
    assert_int_equal(st.depth_max, 3);
    assert_int_equal(st.frames_pushed, 3);
    assert_int_equal(st.push_timeouts, 1);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
        assert_int_equal(VAL(item), i);
        assert_false(is_query);
    }
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_ETIMEOUT);
    queue_get_stats(&q, &st);
    assert_int_equal(st.frames_popped, 3);
    assert_int_equal(st.depth, 0);
    queue_fini(&q);
}

static void test_block_times_out(void **state)
{
    frame_queue q;
    void *dropped;
    (void)state;

    assert_int_equal(queue_init(&q, 1, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    double t0 = now_ms();
    assert_int_equal(queue_push_frame(&q, ITEM(2), 0, 150, &dropped), TSDF_EQUEUE_FULL);
    double waited = now_ms() - t0;
    /* Not before its timeout; the upper bound is a deadline, not a speed. */
    assert_true(waited >= 140.0);
    assert_true(waited < 60000.0);
    queue_stats st;
    queue_get_stats(&q, &st);
    assert_int_equal(st.push_timeouts, 1);
    assert_int_equal(st.blocked_waits, 1);
    queue_fini(&q);
}

typedef struct {
    frame_queue *q;
    int delay_ms;
    int popped;
    /* When not 0: pop only once the queue counts this many blocked
     * pushes, so that the push is surely waiting (on any machine). */
    uint64_t after_blocked;
} popper_arg;

static void *popper(void *arg)
{
    popper_arg *a = arg;
    struct timespec ts = {0, (long)a->delay_ms * 1000000L};
    void *item;
    int is_query;
    nanosleep(&ts, NULL);
    /* A deadline (a minute of slices) for a push that never blocks. */
    for (int slice = 0; slice < 60000 / (a->delay_ms > 0 ? a->delay_ms : 1); slice++) {
        queue_stats st;
        queue_get_stats(a->q, &st);
        if (st.blocked_waits >= a->after_blocked)
            break;
        nanosleep(&ts, NULL);
    }
    if (queue_pop(a->q, &item, &is_query, 60000) == TSDF_OK)
        a->popped = VAL(item);
    return NULL;
}

static void test_block_waits_for_room(void **state)
{
    frame_queue q;
    void *dropped, *item;
    int is_query;
    pthread_t t;
    popper_arg a;
    (void)state;

    assert_int_equal(queue_init(&q, 1, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    a.q = &q;
    a.delay_ms = 100;
    a.popped = 0;
    a.after_blocked = 1;
    double t0 = now_ms();
    assert_int_equal(pthread_create(&t, NULL, popper, &a), 0);
    /* The consumer makes room once the push waits (100 ms at least): the
     * push waits, then succeeds. */
    assert_int_equal(queue_push_frame(&q, ITEM(2), 0, 600000, &dropped), TSDF_OK);
    double waited = now_ms() - t0;
    pthread_join(t, NULL);
    assert_int_equal(a.popped, 1);
    assert_true(waited >= 80.0);
    assert_true(waited < 600000.0);
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_int_equal(VAL(item), 2);
    queue_fini(&q);
}

typedef struct {
    atomic_int *stop;
    int delay_ms;
} stopper_arg;

static void *stopper(void *arg)
{
    stopper_arg *a = arg;
    struct timespec ts = {0, (long)a->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    atomic_store(a->stop, 1);
    return NULL;
}

/* The block policy's sender waits in slices (to notice a stop): slices
 * that pass without room are waiting, not timeouts. A plain replay used to
 * raise queue.push_timeouts with nothing dropped. */
static void test_block_until_counts_no_timeouts(void **state)
{
    frame_queue q;
    void *dropped, *item;
    int is_query;
    pthread_t t;
    popper_arg a;
    stopper_arg sa;
    atomic_int stop = 0;
    queue_stats st;
    (void)state;

    assert_int_equal(queue_init(&q, 1, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_frame_until(&q, ITEM(2), 0, 0, 10, NULL, NULL, NULL, NULL),
                     TSDF_EINVAL);
    assert_int_equal(queue_push_frame_until(&q, ITEM(2), 0, 0, 0, &stop, NULL, NULL, NULL),
                     TSDF_EINVAL);
    /* Room comes once the push waits, after at least a dozen 10 ms slices. */
    a.q = &q;
    a.delay_ms = 120;
    a.popped = 0;
    a.after_blocked = 1;
    assert_int_equal(pthread_create(&t, NULL, popper, &a), 0);
    assert_int_equal(queue_push_frame_until(&q, ITEM(2), 0, 0, 10, &stop, NULL, NULL, NULL),
                     TSDF_OK);
    pthread_join(t, NULL);
    assert_int_equal(a.popped, 1);
    queue_get_stats(&q, &st);
    assert_int_equal(st.push_timeouts, 0);
    assert_int_equal(st.blocked_waits, 1);
    /* Still full: a stop ends the wait, and that is no timeout either. */
    sa.stop = &stop;
    sa.delay_ms = 60;
    assert_int_equal(pthread_create(&t, NULL, stopper, &sa), 0);
    assert_int_equal(queue_push_frame_until(&q, ITEM(3), 0, 0, 10, &stop, NULL, NULL, NULL),
                     TSDF_ESHUTDOWN);
    pthread_join(t, NULL);
    queue_get_stats(&q, &st);
    assert_int_equal(st.push_timeouts, 0);
    assert_int_equal(st.blocked_waits, 2);
    assert_int_equal(st.frames_pushed, 2);
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_int_equal(VAL(item), 2);
    queue_fini(&q);
}

static void test_drop_oldest_same_sensor(void **state)
{
    frame_queue q;
    void *dropped, *item;
    int is_query;
    (void)state;

    assert_int_equal(queue_init(&q, 3, 1, QUEUE_DROP_OLDEST), TSDF_OK);
    /* Sensors: A=10, B=20. Queue: A1 B1 A2 */
    assert_int_equal(queue_push_frame(&q, ITEM(101), 10, 0, &dropped), TSDF_OK);
    assert_null(dropped);
    assert_int_equal(queue_push_frame(&q, ITEM(201), 20, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(102), 10, 0, &dropped), TSDF_OK);
    /* B2 evicts B1 (the oldest of its own sensor), not A1 (the oldest). */
    assert_int_equal(queue_push_frame(&q, ITEM(202), 20, 0, &dropped), TSDF_OK);
    assert_non_null(dropped);
    assert_int_equal(VAL(dropped), 201);
    /* C1 (sensor 30, none queued) evicts the oldest overall: A1. */
    assert_int_equal(queue_push_frame(&q, ITEM(301), 30, 0, &dropped), TSDF_OK);
    assert_int_equal(VAL(dropped), 101);
    /* The rest keeps its order: A2 B2 C1. */
    int expect[] = {102, 202, 301};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
        assert_int_equal(VAL(item), expect[i]);
    }
    queue_stats st;
    queue_get_stats(&q, &st);
    assert_int_equal(st.dropped_oldest, 2);
    assert_int_equal(st.frames_pushed, 5);
    assert_int_equal(st.push_timeouts, 0);
    queue_fini(&q);
}

static void test_queries_first_and_bounded(void **state)
{
    frame_queue q;
    void *dropped, *item;
    int is_query;
    (void)state;

    assert_int_equal(queue_init(&q, 4, 2, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_query(&q, ITEM(50)), TSDF_OK);
    assert_int_equal(queue_push_query(&q, ITEM(51)), TSDF_OK);
    assert_int_equal(queue_push_query(&q, ITEM(52)), TSDF_EBUSY);
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_true(is_query);
    assert_int_equal(VAL(item), 50);
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_true(is_query);
    assert_int_equal(VAL(item), 51);
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_false(is_query);
    assert_int_equal(VAL(item), 1);
    queue_stats st;
    queue_get_stats(&q, &st);
    assert_int_equal(st.queries_pushed, 2);
    assert_int_equal(st.queries_refused, 1);
    queue_fini(&q);
}

/* Pops the next job of q, which must be item want, a query or a frame. */
static void expect_pop(frame_queue *q, int want, int is_query)
{
    void *item;
    int got_query;
    assert_int_equal(queue_pop(q, &item, &got_query, 0), TSDF_OK);
    assert_int_equal(got_query, is_query);
    assert_int_equal(VAL(item), want);
}

/* A query pushed after_frames waits for exactly the frames queued before
 * it: later frames do not hold it back, an eviction counts as leaving, and
 * other queries pass it while it waits. */
static void test_query_after_frames(void **state)
{
    frame_queue q;
    void *dropped;
    (void)state;

    assert_int_equal(queue_init(&q, 4, 4, QUEUE_DROP_OLDEST), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 7, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(2), 8, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_query_after(&q, ITEM(50), 1), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(3), 9, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_query_after(&q, ITEM(51), 0), TSDF_OK);
    /* The plain query goes first, ahead of every frame and of 50. */
    expect_pop(&q, 51, 1);
    /* 50 waits for frames 1 and 2, not for 3. */
    expect_pop(&q, 1, 0);
    expect_pop(&q, 2, 0);
    expect_pop(&q, 50, 1);
    expect_pop(&q, 3, 0);

    /* With no frame queued it runs at once; a frame it waited for that is
     * dropped (drop_oldest, a full lane) releases it as a popped one does. */
    assert_int_equal(queue_push_query_after(&q, ITEM(52), 1), TSDF_OK);
    expect_pop(&q, 52, 1);
    assert_int_equal(queue_push_frame(&q, ITEM(10), 1, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_query_after(&q, ITEM(53), 1), TSDF_OK);
    for (int i = 11; i <= 14; i++)
        assert_int_equal(queue_push_frame(&q, ITEM(i), 1, 0, &dropped), TSDF_OK);
    assert_int_equal(VAL(dropped), 10);
    expect_pop(&q, 53, 1);
    for (int i = 11; i <= 14; i++)
        expect_pop(&q, i, 0);
    queue_fini(&q);
}

static void count_item(void *item, void *arg)
{
    int *sum = arg;
    *sum += VAL(item);
}

static void test_close_and_drain(void **state)
{
    frame_queue q;
    void *dropped, *item;
    int is_query;
    (void)state;

    assert_int_equal(queue_init(&q, 4, 2, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(2), 0, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(3), 0, 0, &dropped), TSDF_OK);
    queue_close(&q);
    assert_int_equal(queue_push_frame(&q, ITEM(4), 0, 0, &dropped), TSDF_ESHUTDOWN);
    assert_int_equal(queue_push_query(&q, ITEM(5)), TSDF_ESHUTDOWN);
    /* Still delivers what was queued... */
    assert_int_equal(queue_pop(&q, &item, &is_query, 0), TSDF_OK);
    assert_int_equal(VAL(item), 1);
    /* ...and the rest can be drained in one go. */
    int sum = 0;
    queue_drain_frames(&q, count_item, &sum);
    assert_int_equal(sum, 5);
    assert_int_equal(queue_pop(&q, &item, &is_query, 100), TSDF_ECLOSED);
    queue_stats st;
    queue_get_stats(&q, &st);
    assert_int_equal(st.push_closed, 1);
    queue_fini(&q);
}

typedef struct {
    frame_queue *q;
    int rc;
} blocked_arg;

static void *blocked_pusher(void *arg)
{
    blocked_arg *a = arg;
    void *dropped;
    a->rc = queue_push_frame(a->q, ITEM(9), 0, -1, &dropped);
    return NULL;
}

static void test_close_wakes_blocked_pusher(void **state)
{
    frame_queue q;
    void *dropped;
    pthread_t t;
    blocked_arg a;
    (void)state;

    assert_int_equal(queue_init(&q, 1, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_push_frame(&q, ITEM(1), 0, 0, &dropped), TSDF_OK);
    a.q = &q;
    a.rc = 1;
    assert_int_equal(pthread_create(&t, NULL, blocked_pusher, &a), 0);
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    queue_close(&q);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, TSDF_ESHUTDOWN);
    queue_fini(&q);
}

/* Many producers against one consumer: nothing lost, nothing doubled. */
typedef struct {
    frame_queue *q;
    int base;
    int n;
    long long dropped_sum;
    int dropped_count;
    int failures; /* pushes that did not return TSDF_OK (asserted on the main thread) */
    atomic_int done;
} producer_arg;

static void *producer(void *arg)
{
    producer_arg *a = arg;
    for (int i = 0; i < a->n; i++) {
        void *dropped = NULL;
        int rc = queue_push_frame(a->q, ITEM(a->base + i), (uint64_t)a->base, 5000, &dropped);
        if (rc != TSDF_OK)
            a->failures++;
        if (dropped != NULL) {
            a->dropped_sum += VAL(dropped);
            a->dropped_count++;
        }
    }
    atomic_store(&a->done, 1);
    return NULL;
}

static void run_concurrent(queue_policy policy)
{
    enum { P = 4, N = 2000 };
    frame_queue q;
    pthread_t t[P];
    producer_arg a[P];
    long long sum = 0, expect = 0, dropped_sum = 0;
    int got = 0, dropped_count = 0;

    assert_int_equal(queue_init(&q, 8, 1, policy), TSDF_OK);
    for (int p = 0; p < P; p++) {
        memset(&a[p], 0, sizeof a[p]);
        a[p].q = &q;
        a[p].base = (p + 1) * 100000;
        a[p].n = N;
        atomic_init(&a[p].done, 0);
        assert_int_equal(pthread_create(&t[p], NULL, producer, &a[p]), 0);
        for (int i = 0; i < N; i++)
            expect += (p + 1) * 100000 + i;
    }
    int done_producers = 0;
    while (done_producers < P) {
        void *item;
        int is_query;
        int rc = queue_pop(&q, &item, &is_query, 50);
        if (rc == TSDF_OK) {
            sum += VAL(item);
            got++;
            continue;
        }
        /* Idle: are all producers done? */
        done_producers = 0;
        for (int p = 0; p < P; p++)
            done_producers += atomic_load(&a[p].done);
    }
    for (int p = 0; p < P; p++)
        pthread_join(t[p], NULL);
    void *item;
    int is_query;
    while (queue_pop(&q, &item, &is_query, 0) == TSDF_OK) {
        sum += VAL(item);
        got++;
    }
    for (int p = 0; p < P; p++) {
        assert_int_equal(a[p].failures, 0);
        dropped_sum += a[p].dropped_sum;
        dropped_count += a[p].dropped_count;
    }
    queue_stats st;
    queue_get_stats(&q, &st);
    /* Every item was either consumed or handed back as dropped, once. */
    assert_int_equal(got + dropped_count, P * N);
    assert_true(sum + dropped_sum == expect);
    assert_int_equal(st.dropped_oldest, (uint64_t)dropped_count);
    assert_int_equal(st.frames_popped, (uint64_t)got);
    if (policy == QUEUE_BLOCK)
        assert_int_equal(dropped_count, 0);
    queue_fini(&q);
}

static void test_concurrent_block(void **state)
{
    (void)state;
    run_concurrent(QUEUE_BLOCK);
}

static void test_concurrent_drop_oldest(void **state)
{
    (void)state;
    run_concurrent(QUEUE_DROP_OLDEST);
}

/* ---- dstats: drops and rejections counted by reason and per sensor ------ */

static void test_dstats_reasons_and_sensors(void **state)
{
    dstats s;
    ds_totals t;
    ds_sensor sn;
    tsdf_proto_sensor a = {0}, b = {0}, c = {0};
    (void)state;

    assert_int_equal(dstats_init(&s, 2, 16), TSDF_OK);
    a.is_id = 0;
    strcpy(a.name, "robotA");
    b.is_id = 1;
    b.id = 7;
    c.is_id = 0;
    strcpy(c.name, "robotC");
    uint32_t ia = dstats_sensor_index(&s, &a);
    uint32_t ib = dstats_sensor_index(&s, &b);
    uint32_t ic = dstats_sensor_index(&s, &c); /* beyond max_sensors = 2 */
    assert_int_equal(dstats_sensor_index(&s, &a), ia);
    assert_int_not_equal(ia, ib);
    assert_int_equal(ic, DS_SENSOR_OTHER);

    for (int i = 0; i < 5; i++)
        dstats_frame_received(&s, ia);
    dstats_frame_outcome(&s, ia, DS_INTEGRATED);
    dstats_frame_outcome(&s, ia, DS_INTEGRATED);
    dstats_frame_outcome(&s, ia, dstats_outcome_for_error(TSDF_EQUEUE_FULL));
    dstats_frame_outcome(&s, ia, dstats_outcome_for_error(TSDF_EBAD_POSE));
    dstats_frame_outcome(&s, ia, dstats_outcome_for_error(TSDF_ECAPACITY));
    dstats_frame_received(&s, ib);
    dstats_frame_outcome(&s, ib, dstats_outcome_for_error(TSDF_EDROPPED));
    dstats_frame_received(&s, ic);
    dstats_frame_outcome(&s, ic, dstats_outcome_for_error(TSDF_EFORMAT));

    dstats_get_totals(&s, &t);
    assert_int_equal(t.received, 7);
    assert_int_equal(t.integrated, 2);
    assert_int_equal(t.dropped, 2);
    assert_int_equal(t.rejected, 3);
    assert_int_equal(t.received, t.integrated + t.dropped + t.rejected);
    assert_int_equal(t.outcome[DS_DROP_QUEUE_FULL], 2);
    assert_int_equal(t.outcome[DS_REJ_INVALID_FRAME], 1);
    assert_int_equal(t.outcome[DS_REJ_CAPACITY], 1);
    assert_int_equal(t.outcome[DS_REJ_DECODE_ERROR], 1);
    assert_int_equal(t.sensors_overflow, 1);

    assert_true(dstats_sensor_at(&s, ia, &sn));
    assert_string_equal(sn.name, "robotA");
    assert_int_equal(sn.received, 5);
    assert_int_equal(sn.outcome[DS_INTEGRATED], 2);
    assert_int_equal(sn.outcome[DS_DROP_QUEUE_FULL], 1);
    assert_true(dstats_sensor_at(&s, ib, &sn));
    assert_string_equal(sn.name, "id 7");
    assert_int_equal(sn.outcome[DS_DROP_QUEUE_FULL], 1);
    assert_true(dstats_sensor_at(&s, DS_SENSOR_OTHER, &sn));
    assert_string_equal(sn.name, "(other sensors)");
    assert_int_equal(sn.outcome[DS_REJ_DECODE_ERROR], 1);

    assert_string_equal(dstats_outcome_name(DS_DROP_QUEUE_FULL), "queue_full");
    assert_string_equal(dstats_outcome_name(DS_DROP_MEMORY), "memory");
    assert_true(DS_DROP_MEMORY >= DS_FIRST_DROP && DS_DROP_MEMORY < DS_FIRST_REJECT);
    assert_string_equal(dstats_outcome_name(DS_REJ_DECODE_ERROR), "decode_error");
    assert_string_equal(dstats_outcome_name(DS_REJ_INVALID_FRAME), "invalid_frame");
    assert_string_equal(dstats_outcome_name(DS_REJ_CAPACITY), "capacity");
    assert_string_equal(dstats_outcome_name(DS_REJ_FORBIDDEN), "forbidden");
    assert_string_equal(dstats_outcome_name(DS_REJ_DEPTH_DECODE), "depth_decode");
    assert_int_equal(dstats_outcome_for_error(TSDF_EDEPTH_DECODE), DS_REJ_DEPTH_DECODE);
    assert_int_equal(dstats_outcome_for_error(TSDF_EFORBIDDEN), DS_REJ_FORBIDDEN);
    assert_int_equal(dstats_outcome_for_error(TSDF_ESHUTDOWN), DS_DROP_SHUTDOWN);
    assert_int_equal(dstats_outcome_for_error(TSDF_ELIMIT), DS_REJ_NO_MAP);
    assert_int_equal(dstats_outcome_for_error(TSDF_ECUDA), DS_REJ_ENGINE);
    dstats_fini(&s);
}

/* ---- the byte budget shared by queues ----------------------------------- */

/* Records what a sized push dropped, in order. */
typedef struct {
    int items[16];
    queue_drop_reason why[16];
    int n;
} drop_log;

static void log_drop(void *item, queue_drop_reason why, void *arg)
{
    drop_log *l = arg;
    assert_true(l->n < 16);
    l->items[l->n] = VAL(item);
    l->why[l->n] = why;
    l->n++;
}

static uint64_t queue_bytes_of(frame_queue *q)
{
    queue_stats st;
    queue_get_stats(q, &st);
    return st.bytes;
}

static void test_budget_attach_rules(void **state)
{
    queue_budget b;
    frame_queue q1, q2, q3;
    void *dropped;
    (void)state;

    assert_int_equal(queue_budget_init(&b, 0, 2), TSDF_EINVAL);
    assert_int_equal(queue_budget_init(&b, 100, 0), TSDF_EINVAL);
    assert_int_equal(queue_budget_init(&b, 100, 2), TSDF_OK);
    assert_int_equal(queue_init(&q1, 4, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_init(&q2, 4, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_init(&q3, 4, 1, QUEUE_BLOCK), TSDF_OK);
    /* A queue that holds frames already cannot join: their bytes were never counted. */
    assert_int_equal(queue_push_frame(&q3, ITEM(1), 0, 0, &dropped), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q3, &b), TSDF_EINVAL);
    assert_int_equal(queue_attach_budget(&q1, &b), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q1, &b), TSDF_EINVAL);
    assert_int_equal(queue_attach_budget(&q2, &b), TSDF_OK);
    queue_fini(&q3);
    assert_int_equal(queue_init(&q3, 4, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q3, &b), TSDF_ELIMIT); /* max_queues = 2 */
    /* Finalising a queue detaches it and frees its place. */
    queue_fini(&q2);
    assert_int_equal(b.nqueues, 1);
    assert_int_equal(queue_attach_budget(&q3, &b), TSDF_OK);
    assert_int_equal(b.nqueues, 2);
    queue_fini(&q1);
    queue_fini(&q3);
    assert_int_equal(b.nqueues, 0);
    assert_int_equal(b.bytes, 0);
    queue_budget_fini(&b);
}

static void test_budget_block(void **state)
{
    queue_budget b;
    frame_queue q1, q2;
    queue_drop_reason why;
    queue_stats st;
    void *item;
    int is_query;
    (void)state;

    assert_int_equal(queue_budget_init(&b, 100, 4), TSDF_OK);
    assert_int_equal(queue_init(&q1, 8, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_init(&q2, 8, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q1, &b), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q2, &b), TSDF_OK);

    assert_int_equal(queue_push_frame_sized(&q1, ITEM(1), 0, 40, 0, NULL, NULL, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(2), 0, 40, 0, NULL, NULL, &why), TSDF_OK);
    assert_int_equal(queue_budget_bytes(&b), 80);
    assert_int_equal(queue_bytes_of(&q1), 40);
    assert_int_equal(queue_bytes_of(&q2), 40);
    /* The lanes have room but the budget has not: refused, for memory. */
    why = QUEUE_DROP_FULL;
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(3), 0, 30, 0, NULL, NULL, &why),
                     TSDF_EQUEUE_FULL);
    assert_int_equal(why, QUEUE_DROP_MEMORY);
    /* A bounded wait times out the same way. */
    double t0 = now_ms();
    why = QUEUE_DROP_FULL;
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(3), 0, 30, 100, NULL, NULL, &why),
                     TSDF_EQUEUE_FULL);
    assert_true(now_ms() - t0 >= 80.0);
    assert_int_equal(why, QUEUE_DROP_MEMORY);
    /* Larger than the whole budget: refused at once, whatever the timeout. */
    t0 = now_ms();
    why = QUEUE_DROP_FULL;
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(4), 0, 101, 600000, NULL, NULL, &why),
                     TSDF_ETOO_LARGE);
    assert_true(now_ms() - t0 < 60000.0); /* not the 600 s it may wait */
    assert_int_equal(why, QUEUE_DROP_MEMORY);
    queue_get_stats(&q1, &st);
    assert_int_equal(st.refused_memory, 3);
    assert_int_equal(st.frames_pushed, 1);
    assert_int_equal(st.push_timeouts, 0);
    assert_int_equal(queue_budget_bytes(&b), 80);

    /* Popping from the OTHER queue makes room: a waiting push gets in. */
    popper_arg a = {&q2, 100, 0, 0};
    pthread_t t;
    t0 = now_ms();
    assert_int_equal(pthread_create(&t, NULL, popper, &a), 0);
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(5), 0, 60, 600000, NULL, NULL, &why),
                     TSDF_OK);
    double waited = now_ms() - t0;
    pthread_join(t, NULL);
    assert_int_equal(a.popped, 2);
    assert_true(waited >= 80.0);
    assert_true(waited < 600000.0);
    assert_int_equal(queue_budget_bytes(&b), 100);
    assert_int_equal(b.bytes_max, 100);
    assert_int_equal(queue_bytes_of(&q1), 100);
    assert_int_equal(queue_bytes_of(&q2), 0);

    /* Every frame popped: the count is back to exactly 0. */
    assert_int_equal(queue_pop(&q1, &item, &is_query, 0), TSDF_OK);
    assert_int_equal(VAL(item), 1);
    assert_int_equal(queue_budget_bytes(&b), 60);
    assert_int_equal(queue_pop(&q1, &item, &is_query, 0), TSDF_OK);
    assert_int_equal(VAL(item), 5);
    assert_int_equal(queue_budget_bytes(&b), 0);
    assert_int_equal(queue_bytes_of(&q1), 0);
    queue_fini(&q1);
    queue_fini(&q2);
    queue_budget_fini(&b);
}

static void test_budget_drop_oldest(void **state)
{
    queue_budget b;
    frame_queue q1, q2;
    queue_drop_reason why;
    queue_stats st1, st2;
    drop_log log;
    void *item;
    int is_query;
    (void)state;

    assert_int_equal(queue_budget_init(&b, 100, 4), TSDF_OK);
    assert_int_equal(queue_init(&q1, 3, 1, QUEUE_DROP_OLDEST), TSDF_OK);
    assert_int_equal(queue_init(&q2, 3, 1, QUEUE_DROP_OLDEST), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q1, &b), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q2, &b), TSDF_OK);
    memset(&log, 0, sizeof log);

    /* q2: A(1) 30; q1: B(sensor 1) 30, C(sensor 2) 30. 90 bytes. */
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(1), 1, 30, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(2), 1, 30, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(3), 2, 30, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(log.n, 0);
    assert_int_equal(queue_budget_bytes(&b), 90);

    /* D (sensor 2, 30): the same sensor's oldest (C) makes room. */
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(4), 2, 30, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.items[0], 3);
    assert_int_equal(log.why[0], QUEUE_DROP_MEMORY);
    assert_int_equal(queue_budget_bytes(&b), 90);

    /* E (sensor 3, 60): no frame of that sensor; q1's oldest go, B then D. */
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(5), 3, 60, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(log.n, 3);
    assert_int_equal(log.items[1], 2);
    assert_int_equal(log.items[2], 4);
    assert_int_equal(log.why[2], QUEUE_DROP_MEMORY);
    assert_int_equal(queue_budget_bytes(&b), 90);
    assert_int_equal(queue_bytes_of(&q1), 60);

    /* F (sensor 1, 80): E goes, then -- q1 being empty -- A from the other map. */
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(6), 1, 80, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(log.n, 5);
    assert_int_equal(log.items[3], 5);
    assert_int_equal(log.items[4], 1);
    assert_int_equal(log.why[4], QUEUE_DROP_MEMORY);
    assert_int_equal(queue_budget_bytes(&b), 80);
    assert_int_equal(queue_bytes_of(&q2), 0);

    /* Larger than the budget: refused, nothing evicted for it. */
    why = QUEUE_DROP_FULL;
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(7), 1, 101, 0, log_drop, &log, &why),
                     TSDF_ETOO_LARGE);
    assert_int_equal(why, QUEUE_DROP_MEMORY);
    assert_int_equal(log.n, 5);

    /* A full lane still drops by count (reason "full"), with exact bytes. */
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(8), 1, 1, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(9), 1, 1, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(10), 2, 1, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(queue_push_frame_sized(&q2, ITEM(11), 2, 5, 0, log_drop, &log, &why), TSDF_OK);
    assert_int_equal(log.n, 6);
    assert_int_equal(log.items[5], 10);
    assert_int_equal(log.why[5], QUEUE_DROP_FULL);
    assert_int_equal(queue_bytes_of(&q2), 7);
    assert_int_equal(queue_budget_bytes(&b), 87);

    queue_get_stats(&q1, &st1);
    queue_get_stats(&q2, &st2);
    assert_int_equal(st1.dropped_memory, 4); /* C, B, D, E */
    assert_int_equal(st2.dropped_memory, 1); /* A */
    assert_int_equal(st2.refused_memory, 1);
    assert_int_equal(st2.dropped_oldest, 1);
    /* Every frame is accounted for: pushed = popped later + dropped + queued. */
    assert_int_equal(st1.frames_pushed + st2.frames_pushed, 10);
    assert_int_equal(st1.depth + st2.depth, 4);

    while (queue_pop(&q1, &item, &is_query, 0) == TSDF_OK)
        ;
    while (queue_pop(&q2, &item, &is_query, 0) == TSDF_OK)
        ;
    assert_int_equal(queue_budget_bytes(&b), 0);
    assert_int_equal(b.bytes_max, 90);
    queue_fini(&q1);
    queue_fini(&q2);
    queue_budget_fini(&b);
}

static void test_budget_released_on_every_exit(void **state)
{
    queue_budget b;
    frame_queue q1, q2;
    void *item;
    int is_query, drained = 0;
    (void)state;

    assert_int_equal(queue_budget_init(&b, 1000, 2), TSDF_OK);
    assert_int_equal(queue_init(&q1, 8, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_init(&q2, 8, 1, QUEUE_BLOCK), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q1, &b), TSDF_OK);
    assert_int_equal(queue_attach_budget(&q2, &b), TSDF_OK);
    for (int i = 1; i <= 4; i++) {
        assert_int_equal(queue_push_frame_sized(&q1, ITEM(i), 0, 10 * i, 0, NULL, NULL, NULL),
                         TSDF_OK);
        assert_int_equal(queue_push_frame_sized(&q2, ITEM(i), 0, 7 * i, 0, NULL, NULL, NULL),
                         TSDF_OK);
    }
    assert_int_equal(queue_budget_bytes(&b), 100 + 70);
    /* A query is not a frame: it holds no budget bytes. */
    assert_int_equal(queue_push_query(&q1, ITEM(99)), TSDF_OK);
    assert_int_equal(queue_budget_bytes(&b), 170);
    assert_int_equal(queue_pop(&q1, &item, &is_query, 0), TSDF_OK);
    assert_true(is_query);
    assert_int_equal(queue_budget_bytes(&b), 170);
    /* Popped (integrated or rejected by the worker). */
    assert_int_equal(queue_pop(&q1, &item, &is_query, 0), TSDF_OK);
    assert_false(is_query);
    assert_int_equal(queue_budget_bytes(&b), 160);
    /* A push refused because the queue is closed holds nothing. */
    queue_close(&q1);
    assert_int_equal(queue_push_frame_sized(&q1, ITEM(5), 0, 10, 0, NULL, NULL, NULL),
                     TSDF_ESHUTDOWN);
    assert_int_equal(queue_budget_bytes(&b), 160);
    /* Drained at shutdown. */
    queue_drain_frames(&q1, count_item, &drained);
    assert_int_equal(drained, 2 + 3 + 4); /* count_item sums the items */
    assert_int_equal(queue_bytes_of(&q1), 0);
    assert_int_equal(queue_budget_bytes(&b), 70);
    /* Finalised with frames still queued: their bytes are released too. */
    queue_fini(&q2);
    assert_int_equal(queue_budget_bytes(&b), 0);
    queue_fini(&q1);
    queue_budget_fini(&b);
}

/* Producers push frames of varied sizes into two queues sharing a small
 * budget while consumers pop them: the budget is never exceeded and every
 * frame is accounted for; once drained the count is exactly 0. */
typedef struct {
    frame_queue *q;
    int id;
    atomic_int *dropped;
    atomic_int *refused;
    atomic_int *pushed;
} budget_producer_arg;

static void count_budget_drop(void *item, queue_drop_reason why, void *arg)
{
    (void)item;
    (void)why;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void *budget_producer(void *arg)
{
    budget_producer_arg *a = arg;
    for (int i = 0; i < 2000; i++) {
        size_t bytes = (size_t)(1 + (i * 7 + a->id * 13) % 40);
        int rc = queue_push_frame_sized(a->q, ITEM(i + 1), (uint64_t)(i % 3), bytes, 2,
                                        count_budget_drop, a->dropped, NULL);
        if (rc == TSDF_OK)
            atomic_fetch_add(a->pushed, 1);
        else
            atomic_fetch_add(a->refused, 1);
    }
    return NULL;
}

typedef struct {
    frame_queue *q;
    queue_budget *b;
    atomic_int *stop;
    int popped;
    int over_limit;
} budget_consumer_arg;

static void *budget_consumer(void *arg)
{
    budget_consumer_arg *a = arg;
    void *item;
    int is_query;
    for (;;) {
        int rc = queue_pop(a->q, &item, &is_query, 5);
        if (rc == TSDF_OK)
            a->popped++;
        else if (atomic_load(a->stop))
            break;
        if (queue_budget_bytes(a->b) > a->b->limit_bytes)
            a->over_limit = 1;
    }
    return NULL;
}

static void run_budget_concurrent(queue_policy policy)
{
    queue_budget b;
    frame_queue q[2];
    atomic_int dropped = 0, refused = 0, pushed = 0, stop = 0;
    pthread_t prod[4], cons[2];
    budget_producer_arg pa[4];
    budget_consumer_arg ca[2];

    assert_int_equal(queue_budget_init(&b, 100, 2), TSDF_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(queue_init(&q[i], 16, 1, policy), TSDF_OK);
        assert_int_equal(queue_attach_budget(&q[i], &b), TSDF_OK);
        ca[i] = (budget_consumer_arg){&q[i], &b, &stop, 0, 0};
        assert_int_equal(pthread_create(&cons[i], NULL, budget_consumer, &ca[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pa[i] = (budget_producer_arg){&q[i % 2], i, &dropped, &refused, &pushed};
        assert_int_equal(pthread_create(&prod[i], NULL, budget_producer, &pa[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(prod[i], NULL);
    /* Let the consumers empty the queues, then stop them. */
    for (int waited = 0; waited < 60000 && queue_budget_bytes(&b) != 0; waited += 5) {
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(cons[i], NULL);

    assert_int_equal(queue_budget_bytes(&b), 0);
    assert_true(b.bytes_max <= b.limit_bytes);
    assert_false(ca[0].over_limit);
    assert_false(ca[1].over_limit);
    int popped = ca[0].popped + ca[1].popped;
    assert_int_equal(atomic_load(&pushed) + atomic_load(&refused), 4 * 2000);
    assert_int_equal(atomic_load(&pushed), popped + atomic_load(&dropped));
    if (policy == QUEUE_DROP_OLDEST)
        assert_int_equal(atomic_load(&refused), 0); /* every frame fits the budget */
    for (int i = 0; i < 2; i++) {
        queue_stats st;
        queue_get_stats(&q[i], &st);
        assert_int_equal(st.bytes, 0);
        assert_int_equal(st.depth, 0);
        queue_fini(&q[i]);
    }
    queue_budget_fini(&b);
}

static void test_budget_concurrent_block(void **state)
{
    (void)state;
    run_budget_concurrent(QUEUE_BLOCK);
}

static void test_budget_concurrent_drop_oldest(void **state)
{
    (void)state;
    run_budget_concurrent(QUEUE_DROP_OLDEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_rejects_bad_args),
        cmocka_unit_test(test_fifo_and_bound_block),
        cmocka_unit_test(test_block_times_out),
        cmocka_unit_test(test_block_waits_for_room),
        cmocka_unit_test(test_block_until_counts_no_timeouts),
        cmocka_unit_test(test_drop_oldest_same_sensor),
        cmocka_unit_test(test_queries_first_and_bounded),
        cmocka_unit_test(test_query_after_frames),
        cmocka_unit_test(test_close_and_drain),
        cmocka_unit_test(test_close_wakes_blocked_pusher),
        cmocka_unit_test(test_concurrent_block),
        cmocka_unit_test(test_concurrent_drop_oldest),
        cmocka_unit_test(test_dstats_reasons_and_sensors),
        cmocka_unit_test(test_budget_attach_rules),
        cmocka_unit_test(test_budget_block),
        cmocka_unit_test(test_budget_drop_oldest),
        cmocka_unit_test(test_budget_released_on_every_exit),
        cmocka_unit_test(test_budget_concurrent_block),
        cmocka_unit_test(test_budget_concurrent_drop_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
