/*
 * test_watchdog.c - the stall decision behind the systemd watchdog
 * (daemon/watchdog.c): a worker on one job longer than stall_timeout_ms is
 * stalled, an idle one never is, and 0 turns the check off; the registry
 * scan counts the stalled maps and names the longest-stalled one.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "maps.h"
#include "watchdog.h"
#include "worker.h"

#include <stdio.h>
#include <string.h>

#define MS 1000000LL

static void test_worker_stalled(void **state)
{
    const int64_t now = 1000000 * MS;
    (void)state;
    /* Idle. */
    assert_false(watchdog_worker_stalled(0, now, 1000));
    /* Busy, within and past the limit. */
    assert_false(watchdog_worker_stalled(now - 999 * MS, now, 1000));
    assert_false(watchdog_worker_stalled(now - 1000 * MS, now, 1000));
    assert_true(watchdog_worker_stalled(now - 1001 * MS, now, 1000));
    assert_true(watchdog_worker_stalled(now - 3600000 * MS, now, 60000));
    /* 0: never stalled, however long. */
    assert_false(watchdog_worker_stalled(now - 3600000 * MS, now, 0));
    /* A job taken after the reading of now (another thread) is not stalled. */
    assert_false(watchdog_worker_stalled(now + 5 * MS, now, 1000));
}

/* A registry of three maps, by hand (no volumes, no workers): idle, busy
 * for 2 s on a raycast, busy for 5 s on a mesh. */
static void test_find_stalls(void **state)
{
    static dmap maps[3];
    dmap *slots[3] = {&maps[0], &maps[1], &maps[2]};
    map_registry r;
    watchdog_stall w;
    const int64_t now = 1000000 * MS;
    (void)state;

    memset(&r, 0, sizeof r);
    memset(maps, 0, sizeof maps);
    assert_int_equal(pthread_mutex_init(&r.lock, NULL), 0);
    r.maps = slots;
    r.count = 3;
    /* The registry's reference of each map (maps.h): maps_list hands out
     * one more, and its caller's maps_put gives it back. */
    for (int i = 0; i < 3; i++)
        atomic_store(&maps[i].refs, 1);
    snprintf(maps[0].name, sizeof maps[0].name, "idle");
    snprintf(maps[1].name, sizeof maps[1].name, "slow");
    atomic_store(&maps[1].busy_since_ns, now - 2000 * MS);
    atomic_store(&maps[1].busy_kind, JOB_RAYCAST);
    snprintf(maps[2].name, sizeof maps[2].name, "wedged");
    atomic_store(&maps[2].busy_since_ns, now - 5000 * MS);
    atomic_store(&maps[2].busy_kind, JOB_MESH);

    assert_int_equal(watchdog_find_stalls(&r, now, 10000, &w), 0);
    assert_int_equal(watchdog_find_stalls(&r, now, 3000, &w), 1);
    assert_string_equal(w.map, "wedged");
    assert_string_equal(w.job, "mesh");
    assert_int_equal(w.busy_ms, 5000);
    assert_int_equal(watchdog_find_stalls(&r, now, 1000, NULL), 2);
    assert_int_equal(watchdog_find_stalls(&r, now, 1000, &w), 2);
    assert_string_equal(w.map, "wedged");
    assert_int_equal(watchdog_find_stalls(&r, now, 0, &w), 0);
    /* The wedged worker finishes its job: only the slow one is left. */
    atomic_store(&maps[2].busy_since_ns, 0);
    assert_int_equal(watchdog_find_stalls(&r, now, 1000, &w), 1);
    assert_string_equal(w.map, "slow");
    assert_string_equal(w.job, "raycast");
    for (int i = 0; i < 3; i++)
        assert_int_equal(atomic_load(&maps[i].refs), 1);
    pthread_mutex_destroy(&r.lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_stalled),
        cmocka_unit_test(test_find_stalls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
