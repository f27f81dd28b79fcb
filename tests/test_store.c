/*
 * test_store.c - the storage layer on the CPU: the voxel layouts
 * (gpu/shared/tsdf_voxel_layout.h), the host table's erase (backward
 * shift, gpu/cpu/cpu_hash.c) and the block store with its free list
 * (gpu/cpu/cpu_store.c), checked against plain references:
 *  - a value stored and loaded comes back exactly (f32) or within half a
 *    unit of trunc / 32767 (s16), weights exactly, out-of-band values and
 *    NaN clamped, the same bits for the same value;
 *  - interleaved inserts and erases at load factors up to the maximum lose
 *    no key, duplicate none, and leave every probe as short as a fresh
 *    table of the same keys would;
 *  - erased blocks' pool slots are taken again before the pool grows, and
 *    the pool grows in steps of a sixteenth, not by doubling.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cpu_hash.h"
#include "cpu_store.h"
#include "tsdf_math.h"
#include "tsdf_voxel_layout.h"

static float rnd_unit(void)
{
    return (float)((double)(tsdf_test_rng() >> 11) / 9007199254740992.0); /* [0, 1) */
}

/* ---- layouts ---------------------------------------------------------------- */

static void test_layout_round_trips(void **state)
{
    (void)state;
    const float trunc_m = 0.04f;
    const tsdf_quant q = tsdf_quant_for(trunc_m);
    tsdf_geom_f32 f[64];
    tsdf_geom_s16 g[64];
    assert_int_equal(tsdf_layout_voxel_bytes(TSDF_LAYOUT_F32), 8);
    assert_int_equal(tsdf_layout_voxel_bytes(TSDF_LAYOUT_S16), 4);
    assert_int_equal(tsdf_layout_block_bytes(TSDF_LAYOUT_S16), 2048);
    assert_int_equal(tsdf_layout_block_bytes(TSDF_LAYOUT_F32), 4096);
    assert_int_equal(tsdf_layout_voxel_bytes((tsdf_layout)0), 0);
    assert_int_equal(sizeof(tsdf_geom_s16), 4);
    assert_string_equal(tsdf_layout_name(TSDF_LAYOUT_S16), "s16");
    tsdf_layout l;
    assert_int_equal(tsdf_layout_parse("f32", &l), TSDF_OK);
    assert_int_equal(l, TSDF_LAYOUT_F32);
    assert_int_equal(tsdf_layout_parse("s8", &l), TSDF_EINVAL);

    double worst = 0.0;
    for (int it = 0; it < 100000; it++) {
        tsdf_vox v = {(2.0f * rnd_unit() - 1.0f) * trunc_m, (float)(tsdf_test_rng() % 65536)};
        size_t i = (size_t)(tsdf_test_rng() % 64);
        tsdf_vox_store(TSDF_LAYOUT_F32, f, i, v, q);
        tsdf_vox a = tsdf_vox_load(TSDF_LAYOUT_F32, f, i, q);
        assert_true(a.sdf_m == v.sdf_m && a.weight == v.weight);
        tsdf_vox_store(TSDF_LAYOUT_S16, g, i, v, q);
        tsdf_vox b = tsdf_vox_load(TSDF_LAYOUT_S16, g, i, q);
        assert_true(b.weight == v.weight);
        assert_true(b.weight == tsdf_vox_load_weight(TSDF_LAYOUT_S16, g, i));
        double e = fabs((double)b.sdf_m - (double)v.sdf_m);
        if (e > worst)
            worst = e;
        /* Storing what was loaded gives the same bits back. */
        tsdf_geom_s16 before = g[i];
        tsdf_vox_store(TSDF_LAYOUT_S16, g, i, b, q);
        assert_memory_equal(&before, &g[i], sizeof before);
    }
    print_message("s16 round trip: worst sdf error %.3g m (unit %.3g m)\n", worst,
                  (double)q.unit_m);
    /* Half a unit, plus the float rounding of the unit times the code. */
    assert_true(worst <= 0.5 * (double)q.unit_m + 1e-8);

    /* The band's ends are exact; beyond them and NaN clamp; weights past
     * 16 bits stop at 65535. */
    const tsdf_vox edges[] = {{trunc_m, 1}, {-trunc_m, 2}, {0.0f, 0},   {10.0f, 3},
                              {-10.0f, 4},  {NAN, 5},      {0.0f, 1e6f}};
    const float want_sdf[] = {trunc_m, -trunc_m, 0.0f, trunc_m, -trunc_m, 0.0f, 0.0f};
    const float want_w[] = {1, 2, 0, 3, 4, 5, 65535};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        tsdf_vox_store(TSDF_LAYOUT_S16, g, 0, edges[k], q);
        tsdf_vox b = tsdf_vox_load(TSDF_LAYOUT_S16, g, 0, q);
        assert_true(fabsf(b.sdf_m - want_sdf[k]) <= 1e-7f);
        assert_true(b.weight == want_w[k]);
    }
    /* All-zero bits are an unobserved voxel in both layouts. */
    memset(f, 0, sizeof f);
    memset(g, 0, sizeof g);
    assert_false(tsdf_vox_known(tsdf_vox_load(TSDF_LAYOUT_F32, f, 3, q)));
    assert_false(tsdf_vox_known(tsdf_vox_load(TSDF_LAYOUT_S16, g, 3, q)));
}

/* The s16 layout refuses weights it cannot keep exactly. */
static void test_s16_params(void **state)
{
    (void)state;
    tsdf_volume_params p;
    tsdf_volume_params_default(&p);
    assert_int_equal(p.layout, TSDF_LAYOUT_S16);
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_OK);
    p.max_weight = 64.5f;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_EBAD_PARAMS);
    p.max_weight = 70000.0f;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_EBAD_PARAMS);
    p.max_weight = 0.5f;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_EBAD_PARAMS);
    p.layout = TSDF_LAYOUT_F32;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_OK);
    p.layout = (tsdf_layout)7;
    assert_int_equal(tsdf_volume_params_check(&p), TSDF_EBAD_PARAMS);
}

/* ---- the table's erase ----------------------------------------------------- */

/* Every probe ends at the key's slot: no key sits further from home than a
 * probe from home would look, i.e. no empty slot lies between a key and
 * its home slot (backward shifting keeps this; a plain "clear the slot"
 * erase would break it). */
static void assert_runs_intact(const cpu_hash *h)
{
    const uint64_t mask = h->capacity - 1;
    for (uint64_t i = 0; i < h->capacity; i++) {
        uint64_t k = h->keys[i];
        if (k == TSDF_KEY_EMPTY)
            continue;
        for (uint64_t s = tsdf_key_hash(k) & mask; s != i; s = (s + 1) & mask)
            assert_true(h->keys[s] != TSDF_KEY_EMPTY);
    }
}

static void erase_stress(float max_load)
{
    enum { UNIVERSE = 6000, ROUNDS = 60 };
    uint64_t *keys = malloc(UNIVERSE * sizeof(*keys));
    uint8_t *in = calloc(UNIVERSE, 1);
    uint32_t *val = calloc(UNIVERSE, sizeof(*val));
    assert_non_null(keys);
    assert_non_null(in);
    assert_non_null(val);
    for (size_t i = 0; i < UNIVERSE; i++)
        keys[i] =
            tsdf_block_key((int32_t)(i % 40) - 20, (int32_t)(i / 40 % 30), (int32_t)(i / 1200));
    cpu_hash h;
    assert_int_equal(cpu_hash_init(&h, 64, max_load), TSDF_OK);
    size_t count = 0;
    double max_seen = 0.0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 800; k++) {
            size_t i = (size_t)(tsdf_test_rng() % UNIVERSE);
            int inserted = 0;
            uint32_t got;
            uint32_t v = (uint32_t)tsdf_test_rng();
            assert_int_equal(cpu_hash_insert(&h, keys[i], v, &got, &inserted), TSDF_OK);
            assert_int_equal(inserted, !in[i]);
            if (inserted) {
                in[i] = 1;
                val[i] = v;
                count++;
            } else {
                assert_int_equal(got, val[i]);
            }
        }
        if ((double)h.count / (double)h.capacity > max_seen)
            max_seen = (double)h.count / (double)h.capacity;
        for (int k = 0; k < 700; k++) {
            size_t i = (size_t)(tsdf_test_rng() % UNIVERSE);
            uint32_t got = 0;
            int rc = cpu_hash_erase(&h, keys[i], &got);
            assert_int_equal(rc, in[i]);
            if (rc == 1) {
                assert_int_equal(got, val[i]);
                in[i] = 0;
                count--;
            }
        }
        assert_int_equal(h.count, count);
        assert_runs_intact(&h);
        for (size_t i = 0; i < UNIVERSE; i++) {
            uint32_t got;
            assert_int_equal(cpu_hash_find(&h, keys[i], &got), in[i]);
            if (in[i])
                assert_int_equal(got, val[i]);
        }
    }
    assert_int_equal(h.probe_failures, 0);
    print_message("erase stress at max load %.2f: %zu keys left, %llu slots, highest load %.3f\n",
                  (double)max_load, count, (unsigned long long)h.capacity, max_seen);
    assert_true(max_seen <= (double)max_load + 1e-9);
    assert_true(max_seen >= 0.5 * (double)max_load);
    cpu_hash_fini(&h);
    free(keys);
    free(in);
    free(val);
}

static void test_erase_stress(void **state)
{
    (void)state;
    erase_stress(0.5f);
    erase_stress(0.95f);
}

/* ---- the store's pool ---------------------------------------------------------- */

static void test_store_free_list_and_steps(void **state)
{
    (void)state;
    cpu_store s;
    assert_int_equal(cpu_store_init(&s, TSDF_LAYOUT_S16, tsdf_quant_for(0.04f), 64, 0.5f), TSDF_OK);
    /* 1000 blocks: the first pool is exactly what is needed. */
    assert_int_equal(cpu_store_reserve(&s, 1000, 0, 0, 0), TSDF_OK);
    assert_int_equal(s.pool_cap, 1000);
    for (int32_t i = 0; i < 1000; i++)
        assert_true(cpu_store_add(&s, tsdf_block_key(i, 0, 0), 1) >= 0);
    /* Erase every other: their slots go onto the free list. */
    for (int32_t i = 0; i < 1000; i += 2)
        assert_int_equal(cpu_store_erase(&s, tsdf_block_key(i, 0, 0)), 1);
    assert_int_equal(cpu_store_erase(&s, tsdf_block_key(0, 0, 0)), 0);
    assert_int_equal(cpu_store_count(&s), 500);
    assert_int_equal(s.free_count, 500);
    assert_int_equal(s.erased_total, 500);
    /* 500 new blocks take the free slots: the pool does not grow, and the
     * reused slots come back zeroed. */
    memset(cpu_store_geom(&s, s.free_list[s.free_count - 1]), 0x5a, s.geom_block_bytes);
    assert_int_equal(cpu_store_reserve(&s, 500, 0, 0, 0), TSDF_OK);
    assert_int_equal(s.pool_cap, 1000);
    for (int32_t i = 0; i < 500; i++) {
        int64_t idx = cpu_store_add(&s, tsdf_block_key(i, 1, 0), 2);
        assert_true(idx >= 0 && idx < 1000);
        const uint8_t *g = cpu_store_geom(&s, (uint32_t)idx);
        for (size_t b = 0; b < s.geom_block_bytes; b++)
            assert_int_equal(g[b], 0);
    }
    assert_int_equal(s.free_count, 0);
    assert_int_equal(s.used, 1000);
    /* One more block: a step of a sixteenth (62), not a doubling. */
    assert_int_equal(cpu_store_reserve(&s, 1, 0, 0, 0), TSDF_OK);
    assert_int_equal(s.pool_cap, 1001 + 1000 / 16);
    /* Every key still finds its block, each at a slot of its own. */
    uint8_t *taken = calloc(s.pool_cap, 1);
    assert_non_null(taken);
    for (int32_t i = 0; i < 1000; i++) {
        int32_t a = cpu_store_find(&s, tsdf_block_key(i, 0, 0));
        assert_int_equal(a >= 0, i % 2 == 1);
        if (a >= 0) {
            assert_false(taken[a]);
            taken[a] = 1;
        }
    }
    for (int32_t i = 0; i < 500; i++) {
        int32_t a = cpu_store_find(&s, tsdf_block_key(i, 1, 0));
        assert_true(a >= 0);
        assert_false(taken[a]);
        taken[a] = 1;
    }
    free(taken);
    /* Colour arrives: the channel is added for the whole pool, black. */
    uint64_t before = cpu_store_bytes(&s);
    assert_int_equal(cpu_store_reserve(&s, 0, 1, 0, 0), TSDF_OK);
    assert_non_null(s.rgb);
    assert_int_equal(cpu_store_bytes(&s) - before, (uint64_t)s.pool_cap * TSDF_BLOCK_RGB_BYTES);
    for (size_t b = 0; b < (size_t)s.pool_cap * TSDF_BLOCK_RGB_BYTES; b++)
        assert_int_equal(s.rgb[b], 0);
    /* A cap below what growth needs refuses it and changes nothing. */
    uint32_t cap_before = s.pool_cap;
    assert_int_equal(cpu_store_reserve(&s, 5000, 1, cpu_store_bytes(&s) + 1000, 0), TSDF_ECAPACITY);
    assert_int_equal(s.pool_cap, cap_before);
    assert_int_equal(cpu_store_clear(&s), TSDF_OK);
    assert_int_equal(cpu_store_count(&s), 0);
    assert_null(s.rgb);
    cpu_store_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_round_trips),
        cmocka_unit_test(test_s16_params),
        cmocka_unit_test(test_erase_stress),
        cmocka_unit_test(test_store_free_list_and_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
