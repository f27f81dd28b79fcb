/*
 * test_conns.c - the table of admitted connections (daemon/conns.c): room
 * admits, a full table gives the place of the connection idle longest to a
 * new one, a table whose connections are all busy refuses, a busy
 * connection never expires, idle ones expire oldest first and only past
 * the timeout, and a connection taken out is not counted again at its
 * REM_POST.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "conns.h"
#include "tsdf_error.h"

#define S 1000000000LL /* a second, ns */

static void test_full_table_replaces_the_longest_idle(void **state)
{
    (void)state;
    conns t;
    uint32_t evict = 0;
    assert_int_equal(conns_init(&t, 3), TSDF_OK);
    assert_int_equal(conns_admit(&t, 10, 1 * S, &evict), CONNS_ADMITTED);
    assert_int_equal(conns_admit(&t, 11, 2 * S, &evict), CONNS_ADMITTED);
    assert_int_equal(conns_admit(&t, 12, 3 * S, &evict), CONNS_ADMITTED);
    assert_int_equal(conns_count(&t), 3);
    /* 10 is the oldest, but a request of it is in progress; 11 was used
     * last at 2 s, 12 at 3 s. */
    conns_begin(&t, 10, 4 * S);
    assert_int_equal(conns_admit(&t, 13, 5 * S, &evict), CONNS_REPLACED);
    assert_int_equal(evict, 11);
    assert_int_equal(conns_count(&t), 3);
    /* 11's REM_POST comes later: it is no longer counted. */
    assert_int_equal(conns_remove(&t, 11), 0);
    /* A frame of 12 makes 13 the longest idle. */
    conns_touch(&t, 12, 6 * S);
    assert_int_equal(conns_admit(&t, 14, 7 * S, &evict), CONNS_REPLACED);
    assert_int_equal(evict, 13);
    /* Every connection busy: a new one is refused, none replaced. */
    conns_begin(&t, 12, 8 * S);
    conns_begin(&t, 14, 8 * S);
    evict = 0;
    assert_int_equal(conns_admit(&t, 15, 9 * S, &evict), CONNS_REFUSED);
    assert_int_equal(evict, 0);
    assert_int_equal(conns_count(&t), 3);
    assert_int_equal(conns_remove(&t, 15), 0);
    /* Its reply sent, 14 is idle again and the next to go. */
    conns_end(&t, 14, 10 * S);
    assert_int_equal(conns_admit(&t, 16, 11 * S, &evict), CONNS_REPLACED);
    assert_int_equal(evict, 14);
    assert_int_equal(conns_remove(&t, 10), 1);
    assert_int_equal(conns_count(&t), 2);
    conns_fini(&t);
}

static void test_idle_connections_expire_oldest_first(void **state)
{
    (void)state;
    conns t;
    uint32_t out[8], evict;
    assert_int_equal(conns_init(&t, 8), TSDF_OK);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(conns_admit(&t, 100 + i, (int64_t)(10 - i) * S, &evict), CONNS_ADMITTED);
    /* Activity at 10, 9, 8, 7, 6 s for ids 100..104; 101 is busy. */
    conns_begin(&t, 101, 9 * S);
    /* A timeout of 0 closes nothing. */
    assert_int_equal(conns_expired(&t, 1000 * S, 0, out, 8), 0);
    /* At 17 s with 10 s: those idle since 7 s or before, oldest first. */
    assert_int_equal(conns_expired(&t, 17 * S, 10 * S, out, 8), 2);
    assert_int_equal(out[0], 104);
    assert_int_equal(out[1], 103);
    assert_int_equal(conns_count(&t), 3);
    assert_int_equal(conns_remove(&t, 104), 0);
    /* Much later, at most max at a time; the busy one never. */
    assert_int_equal(conns_expired(&t, 1000 * S, 10 * S, out, 1), 1);
    assert_int_equal(out[0], 102);
    assert_int_equal(conns_expired(&t, 1000 * S, 10 * S, out, 8), 1);
    assert_int_equal(out[0], 100);
    assert_int_equal(conns_expired(&t, 1000 * S, 10 * S, out, 8), 0);
    assert_int_equal(conns_count(&t), 1);
    /* Its reply sent at 1000 s, it is idle from then on. */
    conns_end(&t, 101, 1000 * S);
    assert_int_equal(conns_expired(&t, 1005 * S, 10 * S, out, 8), 0);
    assert_int_equal(conns_expired(&t, 1010 * S, 10 * S, out, 8), 1);
    assert_int_equal(out[0], 101);
    /* Unknown ids are ignored. */
    conns_begin(&t, 999, 1 * S);
    conns_end(&t, 999, 1 * S);
    assert_int_equal(conns_count(&t), 0);
    conns_fini(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_table_replaces_the_longest_idle),
        cmocka_unit_test(test_idle_connections_expire_oldest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
