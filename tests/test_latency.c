/*
 * test_latency.c - the sliding latency window (daemon/latency.c).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "latency.h"
#include "testutil.h"
#include "tsdf_error.h"

static void test_init_rejects_bad_capacity(void **state)
{
    lat_window w;
    assert_int_equal(lat_window_init(&w, 0), TSDF_EINVAL);
    assert_int_equal(lat_window_init(&w, LAT_WINDOW_MAX_CAPACITY + 1), TSDF_EINVAL);
    assert_int_equal(lat_window_init(NULL, 8), TSDF_EINVAL);
    /* fini of a zeroed window is harmless. */
    memset(&w, 0, sizeof w);
    lat_window_fini(&w);
}

static void test_empty_window_has_nan_quantiles(void **state)
{
    lat_window w;
    lat_summary s;
    assert_int_equal(lat_window_init(&w, 16), TSDF_OK);
    lat_window_summary(&w, &s);
    assert_true(isnan(s.p50_ms));
    assert_true(isnan(s.p99_ms));
    assert_true(isnan(s.max_ms));
    assert_int_equal(s.count, 0);
    assert_true(s.sum_ms == 0.0);
    lat_window_fini(&w);
}

static void test_quantiles_nearest_rank(void **state)
{
    lat_window w;
    lat_summary s;
    assert_int_equal(lat_window_init(&w, 1000), TSDF_OK);
    /* Added out of order: the summary must sort. */
    for (int i = 100; i >= 1; i--)
        lat_window_add(&w, (double)i);
    lat_window_summary(&w, &s);
    assert_true(s.p50_ms == 50.0);
    assert_true(s.p99_ms == 99.0);
    assert_true(s.max_ms == 100.0);
    assert_int_equal(s.count, 100);
    assert_true(s.sum_ms == 5050.0);

    lat_window_add(&w, 7.5);
    lat_window_summary(&w, &s);
    assert_int_equal(s.count, 101);
    assert_true(s.sum_ms == 5057.5);
    assert_true(s.p50_ms == 50.0); /* rank ceil(50.5) = 51 of 1, 2, .., 7, 7.5, 8, .. */
    lat_window_fini(&w);
}

static void test_window_slides_but_totals_do_not(void **state)
{
    lat_window w;
    lat_summary s;
    assert_int_equal(lat_window_init(&w, 10), TSDF_OK);
    for (int i = 1; i <= 100; i++)
        lat_window_add(&w, (double)i);
    lat_window_summary(&w, &s);
    /* The window holds 91..100; count and sum are all-time. */
    assert_true(s.p50_ms == 95.0);
    assert_true(s.p99_ms == 100.0);
    assert_true(s.max_ms == 100.0);
    assert_int_equal(s.count, 100);
    assert_true(s.sum_ms == 5050.0);
    lat_window_fini(&w);
}

static void test_single_sample(void **state)
{
    lat_window w;
    lat_summary s;
    assert_int_equal(lat_window_init(&w, 1), TSDF_OK);
    lat_window_add(&w, 3.25);
    lat_window_add(&w, 1.5);
    lat_window_summary(&w, &s);
    assert_true(s.p50_ms == 1.5 && s.p99_ms == 1.5 && s.max_ms == 1.5);
    assert_int_equal(s.count, 2);
    assert_true(s.sum_ms == 4.75);
    lat_window_fini(&w);
}

static void test_bad_samples_ignored(void **state)
{
    lat_window w;
    lat_summary s;
    assert_int_equal(lat_window_init(&w, 8), TSDF_OK);
    lat_window_add(&w, 2.0);
    lat_window_add(&w, -1.0);
    lat_window_add(&w, NAN);
    lat_window_add(&w, INFINITY);
    lat_window_summary(&w, &s);
    assert_int_equal(s.count, 1);
    assert_true(s.sum_ms == 2.0);
    assert_true(s.max_ms == 2.0);
    lat_window_fini(&w);
}

#define THREADS 4
#define PER_THREAD 20000

static void *adder(void *arg)
{
    lat_window *w = arg;
    for (int i = 0; i < PER_THREAD; i++)
        lat_window_add(w, 1.0 + (i % 4)); /* 1, 2, 3, 4: exact sums in double */
    return NULL;
}

static void test_concurrent_adds_are_all_counted(void **state)
{
    lat_window w;
    lat_summary s;
    pthread_t t[THREADS];
    assert_int_equal(lat_window_init(&w, 256), TSDF_OK);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, adder, &w), 0);
    /* Summaries taken while the writers run must stay consistent. */
    for (int k = 0; k < 200; k++) {
        lat_window_summary(&w, &s);
        if (s.count > 0)
            assert_true(s.max_ms >= 1.0 && s.max_ms <= 4.0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    lat_window_summary(&w, &s);
    assert_int_equal(s.count, (uint64_t)THREADS * PER_THREAD);
    assert_true(s.sum_ms == (double)THREADS * PER_THREAD / 4 * (1 + 2 + 3 + 4));
    assert_true(s.p50_ms >= 1.0 && s.p50_ms <= 4.0);
    lat_window_fini(&w);
}

static void test_elapsed_ms(void **state)
{
    struct timespec a = {.tv_sec = 10, .tv_nsec = 900000000};
    struct timespec b = {.tv_sec = 12, .tv_nsec = 150000000};
    assert_true(fabs(lat_elapsed_ms(&a, &b) - 1250.0) < 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_rejects_bad_capacity),
        cmocka_unit_test(test_empty_window_has_nan_quantiles),
        cmocka_unit_test(test_quantiles_nearest_rank),
        cmocka_unit_test(test_window_slides_but_totals_do_not),
        cmocka_unit_test(test_single_sample),
        cmocka_unit_test(test_bad_samples_ignored),
        cmocka_unit_test(test_concurrent_adds_are_all_counted),
        cmocka_unit_test(test_elapsed_ms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
