/*
 * test_hash.c - the CPU backend's block hash table (gpu/cpu/cpu_hash.c) and the
 * key packing of gpu/shared/tsdf_math.h.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cpu_hash.h"
#include "tsdf_math.h"

/* xorshift64*: a deterministic generator, so failures reproduce. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static int32_t rng_coord(uint64_t *s)
{
    return (int32_t)(rng_next(s) % (uint64_t)(2 * TSDF_KEY_OFFSET)) - TSDF_KEY_OFFSET;
}

static void test_key_pack_roundtrip(void **state)
{
    const int32_t cases[][3] = {
        {0, 0, 0},
        {-1, -1, -1},
        {TSDF_BLOCK_COORD_MIN, TSDF_BLOCK_COORD_MAX, 0},
        {TSDF_BLOCK_COORD_MAX, TSDF_BLOCK_COORD_MIN, -7},
        {12345, -54321, 777},
    };
    uint64_t s = 42;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t x, y, z;
        uint64_t k = tsdf_block_key(cases[i][0], cases[i][1], cases[i][2]);
        assert_true(k != TSDF_KEY_EMPTY);
        assert_int_equal(k >> 63, 0);
        tsdf_block_key_unpack(k, &x, &y, &z);
        assert_int_equal(x, cases[i][0]);
        assert_int_equal(y, cases[i][1]);
        assert_int_equal(z, cases[i][2]);
    }
    for (int i = 0; i < 100000; i++) {
        int32_t c[3] = {rng_coord(&s), rng_coord(&s), rng_coord(&s)}, x, y, z;
        assert_true(tsdf_block_coord_valid(c[0], c[1], c[2]));
        tsdf_block_key_unpack(tsdf_block_key(c[0], c[1], c[2]), &x, &y, &z);
        assert_int_equal(x, c[0]);
        assert_int_equal(y, c[1]);
        assert_int_equal(z, c[2]);
    }
    assert_false(tsdf_block_coord_valid(TSDF_BLOCK_COORD_MAX + 1, 0, 0));
    assert_false(tsdf_block_coord_valid(0, TSDF_BLOCK_COORD_MIN - 1, 0));
    /* Floor division by 8 for negatives. */
    assert_int_equal(tsdf_floor_div8(-1), -1);
    assert_int_equal(tsdf_floor_div8(-8), -1);
    assert_int_equal(tsdf_floor_div8(-9), -2);
    assert_int_equal(tsdf_floor_div8(7), 0);
    assert_int_equal(tsdf_floor_div8(8), 1);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* 1M random keys from a small table: growth on the way, no key lost, every
 * value found, absent keys absent, load factor bounded, probe stats sane. */
static void test_million_random_keys(void **state)
{
    const size_t n = 1000000;
    uint64_t *keys = malloc(n * sizeof(*keys)), *sorted = malloc(n * sizeof(*sorted));
    uint64_t s = 0x9e3779b97f4a7c15ull, hist[TSDF_PROBE_HIST_BINS], hist_sum = 0;
    size_t unique = 0;
    cpu_hash h;
    uint32_t max_probe;
    double mean_probe;
    (void)state;
    assert_non_null(keys);
    assert_non_null(sorted);
    assert_int_equal(cpu_hash_init(&h, 1024, 0.5f), TSDF_OK);
    assert_int_equal(h.capacity, 1024);

    for (size_t i = 0; i < n; i++) {
        int inserted = 0;
        uint32_t got = 0;
        keys[i] = tsdf_block_key(rng_coord(&s), rng_coord(&s), rng_coord(&s));
        assert_int_equal(cpu_hash_insert(&h, keys[i], (uint32_t)i, &got, &inserted), TSDF_OK);
        unique += inserted;
        if (inserted)
            assert_int_equal(got, (uint32_t)i);
        /* The load factor never passes the maximum, not even transiently. */
        assert_true((double)h.count <= 0.5 * (double)h.capacity);
    }
    memcpy(sorted, keys, n * sizeof(*keys));
    qsort(sorted, n, sizeof(*sorted), cmp_u64);
    {
        size_t distinct = n != 0;
        for (size_t i = 1; i < n; i++)
            distinct += sorted[i] != sorted[i - 1];
        assert_int_equal(unique, distinct);
    }
    assert_int_equal(h.count, unique);
    /* 1M keys at load <= 0.5 need 2^21 slots, grown from 2^10: 11 growths. */
    assert_int_equal(h.capacity, 1u << 21);
    assert_int_equal(h.growth_events, 11);

    for (size_t i = 0; i < n; i++) {
        uint32_t v = UINT32_MAX;
        assert_int_equal(cpu_hash_find(&h, keys[i], &v), 1);
        /* The value is the index of the key's first insertion. */
        assert_int_equal(keys[v], keys[i]);
        assert_true(v <= i);
    }
    /* Keys from another stream are (with overwhelming probability) absent;
     * the few that collide with the first stream must be found. */
    for (int i = 0; i < 100000; i++) {
        uint64_t k = tsdf_block_key(rng_coord(&s), rng_coord(&s), rng_coord(&s));
        int present = bsearch(&k, sorted, n, sizeof(*sorted), cmp_u64) != NULL;
        assert_int_equal(cpu_hash_find(&h, k, NULL), present);
    }

    cpu_hash_probe_stats(&h, &max_probe, &mean_probe, hist);
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
        hist_sum += hist[i];
    assert_int_equal(hist_sum, h.count);
    /* Linear probing at load 0.48 with a good hash: mean displacement about
     * 0.5 slots, worst case a few dozen. */
    print_message("1M keys: capacity %llu load %.3f mean probe %.3f max probe %u\n",
                  (unsigned long long)h.capacity, (double)h.count / (double)h.capacity, mean_probe,
                  max_probe);
    assert_true(mean_probe < 1.5);
    assert_true(max_probe < 100);
    assert_true(hist[0] > h.count / 2);
    assert_int_equal(h.probe_failures, 0);

    cpu_hash_fini(&h);
    free(keys);
    free(sorted);
}

/* Keys chosen so that their hashes share the low 12 bits: in any table of up
 * to 4096 slots they all have the same home slot, the worst case for linear
 * probing. They must all go in and come back out. */
static void test_adversarial_colliding_keys(void **state)
{
    const size_t n = 3000;
    uint64_t *keys = malloc(n * sizeof(*keys));
    size_t found = 0;
    uint64_t target = 0;
    cpu_hash h;
    uint32_t max_probe;
    double mean_probe;
    (void)state;
    assert_non_null(keys);
    /* Walk keys in order and keep those whose hash has the same low bits. */
    for (uint64_t c = 0; found < n; c++) {
        uint64_t k = tsdf_block_key((int32_t)(c & 0xffff), (int32_t)(c >> 16), 3);
        uint64_t hv = tsdf_key_hash(k) & 0xfff;
        if (found == 0)
            target = hv;
        if (hv == target)
            keys[found++] = k;
    }
    assert_int_equal(cpu_hash_init(&h, 16, 0.75f), TSDF_OK);
    for (size_t i = 0; i < n; i++) {
        int inserted = 0;
        assert_int_equal(cpu_hash_insert(&h, keys[i], (uint32_t)i, NULL, &inserted), TSDF_OK);
        assert_true(inserted);
        /* While the table is <= 4096 slots every key lands in one run. */
        if (h.capacity <= 4096) {
            cpu_hash_probe_stats(&h, &max_probe, NULL, NULL);
            assert_int_equal(max_probe, h.count - 1);
        }
    }
    assert_int_equal(h.count, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        assert_int_equal(cpu_hash_find(&h, keys[i], &v), 1);
        assert_int_equal(v, (uint32_t)i);
    }
    cpu_hash_probe_stats(&h, &max_probe, &mean_probe, NULL);
    print_message("colliding keys: capacity %llu mean probe %.2f max probe %u\n",
                  (unsigned long long)h.capacity, mean_probe, max_probe);
    assert_true(max_probe < n);
    assert_int_equal(h.probe_failures, 0);
    cpu_hash_fini(&h);
    free(keys);
}

/* Growth happens exactly when one more key would pass the load factor. */
static void test_growth_at_max_load(void **state)
{
    cpu_hash h;
    uint64_t s = 7;
    int inserted;
    (void)state;
    assert_int_equal(cpu_hash_init(&h, 1000, 0.75f), TSDF_OK);
    assert_int_equal(h.capacity, 1024);
    assert_int_equal(cpu_hash_capacity_for(&h, 768), 1024);
    assert_int_equal(cpu_hash_capacity_for(&h, 769), 2048);
    assert_int_equal(cpu_hash_capacity_for(&h, 3073), 8192);
    while (h.count < 768) {
        uint64_t k = tsdf_block_key(rng_coord(&s), rng_coord(&s), rng_coord(&s));
        assert_int_equal(cpu_hash_insert(&h, k, 1, NULL, &inserted), TSDF_OK);
    }
    assert_int_equal(h.capacity, 1024);
    assert_int_equal(h.growth_events, 0);
    assert_int_equal(cpu_hash_insert(&h, tsdf_block_key(1, 2, 3), 5, NULL, &inserted), TSDF_OK);
    assert_true(inserted);
    assert_int_equal(h.capacity, 2048);
    assert_int_equal(h.growth_events, 1);

    /* A present key keeps its value; the empty sentinel is refused. */
    {
        uint32_t got = 0;
        assert_int_equal(cpu_hash_insert(&h, tsdf_block_key(1, 2, 3), 99, &got, &inserted),
                         TSDF_OK);
        assert_false(inserted);
        assert_int_equal(got, 5);
        assert_int_equal(cpu_hash_insert(&h, TSDF_KEY_EMPTY, 1, NULL, &inserted), TSDF_EINVAL);
        assert_int_equal(h.count, 769);
    }
    /* reserve grows ahead of time, once. */
    assert_int_equal(cpu_hash_reserve(&h, 5000), TSDF_OK);
    assert_int_equal(h.capacity, 8192);
    assert_int_equal(h.growth_events, 2);
    assert_int_equal(cpu_hash_find(&h, tsdf_block_key(1, 2, 3), NULL), 1);

    cpu_hash_clear(&h);
    assert_int_equal(h.count, 0);
    assert_int_equal(cpu_hash_find(&h, tsdf_block_key(1, 2, 3), NULL), 0);
    cpu_hash_fini(&h);

    assert_int_equal(cpu_hash_init(&h, 0, 0.5f), TSDF_EINVAL);
    assert_int_equal(cpu_hash_init(&h, 16, 1.0f), TSDF_EINVAL);
}

/* A table with no empty slot cannot arise (growth prevents it), but a probe
 * that wraps around one must report, not spin or give a wrong answer. The
 * test fills the arrays behind the table's back to make that state. */
static void test_full_table_probe_reports(void **state)
{
    cpu_hash h;
    uint32_t v;
    (void)state;
    assert_int_equal(cpu_hash_init(&h, 8, 0.5f), TSDF_OK);
    for (uint64_t i = 0; i < h.capacity; i++) {
        h.keys[i] = tsdf_block_key((int32_t)i, 0, 0);
        h.values[i] = (uint32_t)i;
    }
    h.count = h.capacity;
    assert_int_equal(cpu_hash_find(&h, tsdf_block_key(100, 0, 0), &v), TSDF_EINTERNAL);
    assert_int_equal(h.probe_failures, 1);
    /* Present keys are still found. */
    assert_int_equal(cpu_hash_find(&h, tsdf_block_key(5, 0, 0), &v), 1);
    assert_int_equal(v, 5);
    cpu_hash_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_pack_roundtrip),
        cmocka_unit_test(test_million_random_keys),
        cmocka_unit_test(test_adversarial_colliding_keys),
        cmocka_unit_test(test_growth_at_max_load),
        cmocka_unit_test(test_full_table_probe_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
