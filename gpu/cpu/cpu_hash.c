/*
 * cpu_hash.c - open-addressed hash table of the CPU backend (see cpu_hash.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_hash.h"
#include "tsdf_math.h"

uint64_t cpu_hash_bytes(uint64_t capacity)
{
    return capacity * (sizeof(uint64_t) + sizeof(uint32_t));
}

uint64_t cpu_hash_pow2(uint64_t n)
{
    uint64_t c = 1;
    while (c < n)
        c <<= 1;
    return c;
}

/* True when `count` keys fit in `capacity` slots under max_load. Computed in
 * double so that capacities near 2^32 do not lose the comparison. */
static int fits(uint64_t count, uint64_t capacity, float max_load)
{
    return (double)count <= (double)max_load * (double)capacity;
}

uint64_t cpu_hash_capacity_for(const cpu_hash *h, uint64_t count)
{
    uint64_t cap = h->capacity;
    while (!fits(count, cap, h->max_load))
        cap <<= 1;
    return cap;
}

static int alloc_arrays(uint64_t capacity, uint64_t **keys, uint32_t **values)
{
    *keys = malloc(capacity * sizeof(**keys));
    *values = malloc(capacity * sizeof(**values));
    if (*keys == NULL || *values == NULL) {
        free(*keys);
        free(*values);
        return TSDF_ENOMEM;
    }
    /* All-ones bytes make TSDF_KEY_EMPTY in every slot. */
    memset(*keys, 0xff, capacity * sizeof(**keys));
    return TSDF_OK;
}

int cpu_hash_init(cpu_hash *h, uint64_t capacity, float max_load)
{
    memset(h, 0, sizeof(*h));
    if (capacity == 0 || !(max_load > 0.0f && max_load < 1.0f) || capacity > (1ull << 40))
        return TSDF_EINVAL;
    h->capacity = cpu_hash_pow2(capacity);
    h->max_load = max_load;
    return alloc_arrays(h->capacity, &h->keys, &h->values);
}

void cpu_hash_fini(cpu_hash *h)
{
    free(h->keys);
    free(h->values);
    memset(h, 0, sizeof(*h));
}

void cpu_hash_clear(cpu_hash *h)
{
    memset(h->keys, 0xff, h->capacity * sizeof(*h->keys));
    h->count = 0;
}

/* Finds key's slot or the empty slot where it would go. Returns the slot,
 * or -1 when the probe went once around the table without finding either. */
static int64_t probe(const cpu_hash *h, uint64_t key)
{
    const uint64_t mask = h->capacity - 1;
    uint64_t slot = tsdf_key_hash(key) & mask;
    for (uint64_t n = 0; n < h->capacity; n++) {
        uint64_t k = h->keys[slot];
        if (k == key || k == TSDF_KEY_EMPTY)
            return (int64_t)slot;
        slot = (slot + 1) & mask;
    }
    return -1;
}

int cpu_hash_find(cpu_hash *h, uint64_t key, uint32_t *value)
{
    int64_t slot = probe(h, key);
    if (slot < 0) {
        h->probe_failures++;
        return TSDF_EINTERNAL;
    }
    if (h->keys[slot] != key)
        return 0;
    if (value != NULL)
        *value = h->values[slot];
    return 1;
}

int cpu_hash_lookup(const cpu_hash *h, uint64_t key, uint32_t *value)
{
    int64_t slot = probe(h, key);
    if (slot < 0 || h->keys[slot] != key)
        return 0;
    *value = h->values[slot];
    return 1;
}

static int rehash(cpu_hash *h, uint64_t new_capacity)
{
    uint64_t *keys;
    uint32_t *values;
    const uint64_t mask = new_capacity - 1;
    if (alloc_arrays(new_capacity, &keys, &values) != TSDF_OK)
        return TSDF_ENOMEM;
    for (uint64_t i = 0; i < h->capacity; i++) {
        uint64_t k = h->keys[i];
        if (k == TSDF_KEY_EMPTY)
            continue;
        /* The new table is at most half as full as the old one was, so
         * this probe ends. */
        uint64_t slot = tsdf_key_hash(k) & mask;
        while (keys[slot] != TSDF_KEY_EMPTY)
            slot = (slot + 1) & mask;
        keys[slot] = k;
        values[slot] = h->values[i];
    }
    free(h->keys);
    free(h->values);
    h->keys = keys;
    h->values = values;
    h->capacity = new_capacity;
    h->growth_events++;
    return TSDF_OK;
}

int cpu_hash_reserve(cpu_hash *h, uint64_t count)
{
    uint64_t cap = cpu_hash_capacity_for(h, count);
    if (cap == h->capacity)
        return TSDF_OK;
    return rehash(h, cap);
}

int cpu_hash_insert(cpu_hash *h, uint64_t key, uint32_t value, uint32_t *value_out, int *inserted)
{
    int64_t slot;
    int rc;
    if (inserted != NULL)
        *inserted = 0;
    if (key == TSDF_KEY_EMPTY)
        return TSDF_EINVAL;
    slot = probe(h, key);
    if (slot >= 0 && h->keys[slot] == key) {
        if (value_out != NULL)
            *value_out = h->values[slot];
        return TSDF_OK;
    }
    if (!fits(h->count + 1, h->capacity, h->max_load)) {
        if ((rc = cpu_hash_reserve(h, h->count + 1)) != TSDF_OK)
            return rc;
        slot = probe(h, key);
    }
    if (slot < 0) {
        h->probe_failures++;
        return TSDF_EINTERNAL;
    }
    h->keys[slot] = key;
    h->values[slot] = value;
    h->count++;
    if (value_out != NULL)
        *value_out = value;
    if (inserted != NULL)
        *inserted = 1;
    return TSDF_OK;
}

int cpu_hash_erase(cpu_hash *h, uint64_t key, uint32_t *value_out)
{
    const uint64_t mask = h->capacity - 1;
    int64_t found = probe(h, key);
    if (found < 0) {
        h->probe_failures++;
        return TSDF_EINTERNAL;
    }
    if (h->keys[found] != key)
        return 0;
    if (value_out != NULL)
        *value_out = h->values[found];
    /* The hole at i moves down the probe run: a later key j may fill it
     * unless its home slot lies cyclically in (i, j], where a probe for it
     * starts after the hole and would never look there. The run ends at
     * the first empty slot, which exists (the load stays below 1). */
    uint64_t i = (uint64_t)found, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t k = h->keys[j];
        if (k == TSDF_KEY_EMPTY)
            break;
        uint64_t home = tsdf_key_hash(k) & mask;
        /* Distances from i, cyclically: home in (i, j] keeps k where it is. */
        if (((home - i) & mask) != 0 && ((home - i) & mask) <= ((j - i) & mask))
            continue;
        h->keys[i] = k;
        h->values[i] = h->values[j];
        i = j;
    }
    h->keys[i] = TSDF_KEY_EMPTY;
    h->count--;
    return 1;
}

void cpu_hash_probe_stats(const cpu_hash *h, uint32_t *max_probe, double *mean_probe,
                          uint64_t *hist)
{
    const uint64_t mask = h->capacity - 1;
    uint64_t sum = 0, n = 0, maxd = 0;
    if (hist != NULL)
        memset(hist, 0, TSDF_PROBE_HIST_BINS * sizeof(*hist));
    for (uint64_t i = 0; i < h->capacity; i++) {
        uint64_t k = h->keys[i];
        if (k == TSDF_KEY_EMPTY)
            continue;
        uint64_t d = (i - (tsdf_key_hash(k) & mask)) & mask;
        sum += d;
        n++;
        if (d > maxd)
            maxd = d;
        if (hist != NULL)
            hist[d < TSDF_PROBE_HIST_BINS - 1 ? d : TSDF_PROBE_HIST_BINS - 1]++;
    }
    if (max_probe != NULL)
        *max_probe = maxd > UINT32_MAX ? UINT32_MAX : (uint32_t)maxd;
    if (mean_probe != NULL)
        *mean_probe = n != 0 ? (double)sum / (double)n : 0.0;
}
