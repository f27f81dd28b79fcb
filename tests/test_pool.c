/*
 * test_pool.c - the CPU backend's thread pool (gpu/cpu/cpu_pool.c): every
 * item runs exactly once whatever the thread and chunk counts, zero items
 * run nothing, errors come back from the lowest failed chunk, and bad
 * sizes are refused.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cpu_pool.h"
#include "tsdf_error.h"

typedef struct {
    atomic_int *hits; /* per item: how many times it ran */
    atomic_int calls;
    unsigned threads;
    atomic_int bad_worker; /* a worker index outside [0, threads) was seen */
    size_t fail_from;      /* chunks starting at or past this fail... */
    size_t fail_every;     /* ...when their start is a multiple of this (0: never) */
} job;

static int count_items(void *arg, size_t b, size_t e, unsigned worker)
{
    job *j = arg;
    atomic_fetch_add(&j->calls, 1);
    if (worker >= j->threads)
        atomic_store(&j->bad_worker, 1);
    for (size_t i = b; i < e; i++)
        atomic_fetch_add(&j->hits[i], 1);
    if (j->fail_every != 0 && b >= j->fail_from && b % j->fail_every == 0)
        return b == j->fail_from ? TSDF_ENOMEM : TSDF_EINTERNAL;
    return TSDF_OK;
}

static void run_and_check(cpu_pool *p, size_t n, size_t chunk)
{
    job j;
    memset(&j, 0, sizeof j);
    j.hits = calloc(n + 1, sizeof *j.hits);
    assert_non_null(j.hits);
    j.threads = cpu_pool_threads(p);
    assert_int_equal(cpu_pool_run(p, n, chunk, count_items, &j), TSDF_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(atomic_load(&j.hits[i]), 1);
    size_t c = chunk == 0 ? 1 : chunk;
    assert_int_equal(atomic_load(&j.calls), (int)(n / c + (n % c != 0)));
    assert_int_equal(atomic_load(&j.bad_worker), 0);
    free(j.hits);
}

static void test_every_item_once(void **state)
{
    static const unsigned threads[] = {1, 2, 3, 7};
    static const size_t sizes[] = {1, 2, 5, 64, 1000, 4097};
    static const size_t chunks[] = {0, 1, 3, 64, 5000};
    (void)state;
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        cpu_pool *p = NULL;
        assert_int_equal(cpu_pool_create(threads[t], &p), TSDF_OK);
        assert_int_equal(cpu_pool_threads(p), threads[t]);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
                run_and_check(p, sizes[s], chunks[c]);
        cpu_pool_destroy(p);
    }
}

/* Many short jobs back to back: a worker that missed a wake-up or ran a
 * job twice would show up here as a hang or a wrong count. */
static void test_many_jobs(void **state)
{
    cpu_pool *p = NULL;
    (void)state;
    assert_int_equal(cpu_pool_create(3, &p), TSDF_OK);
    for (int i = 0; i < 2000; i++)
        run_and_check(p, (size_t)(i % 17) + 1, 1);
    cpu_pool_destroy(p);
}

static int must_not_run(void *arg, size_t b, size_t e, unsigned worker)
{
    (void)b;
    (void)e;
    (void)worker;
    *(int *)arg = 1;
    return TSDF_EINTERNAL;
}

static void test_zero_items(void **state)
{
    cpu_pool *p = NULL;
    int ran = 0;
    (void)state;
    assert_int_equal(cpu_pool_create(2, &p), TSDF_OK);
    assert_int_equal(cpu_pool_run(p, 0, 8, must_not_run, &ran), TSDF_OK);
    assert_int_equal(ran, 0);
    cpu_pool_destroy(p);
}

/* More threads than items: the spare workers find nothing to take. */
static void test_more_threads_than_items(void **state)
{
    cpu_pool *p = NULL;
    (void)state;
    assert_int_equal(cpu_pool_create(7, &p), TSDF_OK);
    run_and_check(p, 1, 1);
    run_and_check(p, 2, 1);
    run_and_check(p, 3, 1);
    cpu_pool_destroy(p);
}

/* The error of the lowest failed chunk, on every thread count; the other
 * chunks still ran. */
static void test_errors(void **state)
{
    static const unsigned threads[] = {1, 2, 7};
    (void)state;
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        cpu_pool *p = NULL;
        job j;
        assert_int_equal(cpu_pool_create(threads[t], &p), TSDF_OK);
        for (int rep = 0; rep < 50; rep++) {
            memset(&j, 0, sizeof j);
            j.hits = calloc(200, sizeof *j.hits);
            assert_non_null(j.hits);
            j.threads = threads[t];
            /* Chunks of 4: those at 40, 80, 120, 160 fail; 40 says ENOMEM. */
            j.fail_from = 40;
            j.fail_every = 40;
            assert_int_equal(cpu_pool_run(p, 200, 4, count_items, &j), TSDF_ENOMEM);
            for (size_t i = 0; i < 200; i++)
                assert_int_equal(atomic_load(&j.hits[i]), 1);
            free(j.hits);
        }
        /* A job after a failed one starts clean. */
        run_and_check(p, 100, 7);
        cpu_pool_destroy(p);
    }
}

static void test_sizes(void **state)
{
    cpu_pool *p = (cpu_pool *)1;
    (void)state;
    assert_int_equal(cpu_pool_create(CPU_POOL_MAX_THREADS + 1, &p), TSDF_EINVAL);
    assert_null(p);
    /* 0: every online core. */
    assert_int_equal(cpu_pool_create(0, &p), TSDF_OK);
    assert_int_equal(cpu_pool_threads(p), cpu_pool_online_cores());
    assert_true(cpu_pool_online_cores() >= 1);
    run_and_check(p, 10, 1);
    cpu_pool_destroy(p);
    cpu_pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once), cmocka_unit_test(test_many_jobs),
        cmocka_unit_test(test_zero_items),      cmocka_unit_test(test_more_threads_than_items),
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
