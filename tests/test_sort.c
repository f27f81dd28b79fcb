/*
 * test_sort.c - tsdf_sort_u64 (gpu/shared/tsdf_sort.h) against qsort: keys
 * of every kind the engine sorts (block keys that share their high bits,
 * duplicates, all equal, already sorted, reversed, full-width random) at
 * sizes on both sides of its qsort fallback and of a byte's 256 values.
 */
#include "testutil.h"

#include "tsdf_math.h"
#include "tsdf_sort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { FULL, BLOCKS, FEW, EQUAL, SORTED, REVERSED, KINDS };

static void fill(uint64_t *k, size_t n, int kind)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case FULL:
            k[i] = tsdf_test_rng();
            break;
        case BLOCKS: /* a room's blocks: small coordinates around 0 */
            k[i] = tsdf_block_key((int32_t)(tsdf_test_rng() % 64) - 32,
                                  (int32_t)(tsdf_test_rng() % 16) - 4,
                                  (int32_t)(tsdf_test_rng() % 64));
            break;
        case FEW: /* many duplicates */
            k[i] = tsdf_test_rng() % 7 * 0x0101010101010101ull;
            break;
        case EQUAL:
            k[i] = 0x8000000000000001ull;
            break;
        case SORTED:
            k[i] = (uint64_t)i * 977u;
            break;
        default: /* REVERSED, through the top bit */
            k[i] = UINT64_MAX - (uint64_t)i * 0x0100000000000001ull;
            break;
        }
    }
}

static void test_matches_qsort(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 2, 63, 64, 65, 255, 256, 257, 1000, 18400, 100000};
    const size_t most = 100000;
    uint64_t *a = malloc(most * sizeof(*a)), *b = malloc(most * sizeof(*b));
    assert_non_null(a);
    assert_non_null(b);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int kind = 0; kind < KINDS; kind++) {
            const size_t n = sizes[s];
            fill(a, n, kind);
            memcpy(b, a, n * sizeof(*a));
            tsdf_sort_u64(a, n);
            qsort(b, n, sizeof(*b), tsdf_sort_cmp_u64);
            if (n > 0 && memcmp(a, b, n * sizeof(*a)) != 0)
                fail_msg("%zu keys of kind %d: not qsort's order", n, kind);
        }
    }
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_qsort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
