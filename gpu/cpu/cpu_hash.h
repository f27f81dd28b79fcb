/*
 * cpu_hash.h - the host hash table of the CPU backend: packed block keys
 * (tsdf_block_key) -> 32-bit values (block pool indices), open addressing
 * with linear probing in a power-of-two table, hashed by tsdf_key_hash.
 *
 * The table never drops a key. It grows by rehashing into a table twice as
 * large BEFORE an insert would take the load factor above max_load, so a
 * probe always finds an empty slot; a probe that nevertheless wraps around
 * the whole table returns TSDF_EINTERNAL and is counted in probe_failures.
 * Erase removes a key by backward shifting (Knuth's algorithm R for linear
 * probing): the keys after it in its probe run move back into the hole
 * where that keeps them reachable from their home slot, so the table never
 * holds tombstones and every probe stays as short as if the erased key had
 * never been inserted.
 *
 * Ownership: caller-owned struct, cpu_hash_init / cpu_hash_fini.
 * Threads: not thread-safe; one thread at a time, but for concurrent
 * cpu_hash_lookup calls on a table that nothing changes meanwhile.
 */
#ifndef TSDF_CPU_HASH_H
#define TSDF_CPU_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

typedef struct {
    uint64_t *keys;    /* capacity slots, TSDF_KEY_EMPTY when free */
    uint32_t *values;  /* capacity slots */
    uint64_t capacity; /* a power of two */
    uint64_t count;    /* keys present */
    float max_load;    /* count / capacity never exceeds this */
    uint64_t growth_events;
    uint64_t probe_failures;
} cpu_hash;

/* Bytes a table of `capacity` slots takes. */
uint64_t cpu_hash_bytes(uint64_t capacity);

/* The smallest power of two >= n (n <= 2^62). */
uint64_t cpu_hash_pow2(uint64_t n);

/* The capacity the table will have after growing (doubling from its current
 * capacity) until `count` keys fit under max_load. */
uint64_t cpu_hash_capacity_for(const cpu_hash *h, uint64_t count);

/* An empty table of cpu_hash_pow2(capacity) slots. TSDF_ENOMEM,
 * TSDF_EINVAL (capacity 0 or max_load outside (0, 1)). */
int cpu_hash_init(cpu_hash *h, uint64_t capacity, float max_load);
void cpu_hash_fini(cpu_hash *h);

/* Removes every key, keeping the allocation. */
void cpu_hash_clear(cpu_hash *h);

/* 1 and *value when key is present, 0 when absent, TSDF_EINTERNAL when the
 * probe wrapped around a full table (counted). */
int cpu_hash_find(cpu_hash *h, uint64_t key, uint32_t *value);

/* cpu_hash_find without its failure count: a pure read, which any number
 * of threads may do at once while no thread changes the table. 1 and
 * *value when key is present, else 0 (also for a probe that wrapped
 * around a full table, which the table's growth rule rules out). */
int cpu_hash_lookup(const cpu_hash *h, uint64_t key, uint32_t *value);

/* Grows (rehashes) now so that `count` keys fit under max_load; TSDF_ENOMEM
 * leaves the table as it was. */
int cpu_hash_reserve(cpu_hash *h, uint64_t count);

/* Inserts key -> value when key is absent (*inserted = 1) or leaves the
 * table as it is and returns the present value in *value_out when it is
 * there (*inserted = 0). Grows first when needed. value_out and inserted may
 * be NULL. TSDF_EINVAL for TSDF_KEY_EMPTY, TSDF_ENOMEM, TSDF_EINTERNAL. */
int cpu_hash_insert(cpu_hash *h, uint64_t key, uint32_t value, uint32_t *value_out, int *inserted);

/* Removes key; 1 (and its value in *value_out, optional) when it was
 * there, 0 when absent, TSDF_EINTERNAL when the probe wrapped around a full
 * table (counted). */
int cpu_hash_erase(cpu_hash *h, uint64_t key, uint32_t *value_out);

/* Probe statistics computed from the table: the displacement of each key
 * from its home slot. hist may be NULL; otherwise TSDF_PROBE_HIST_BINS bins,
 * the last one counting displacements >= TSDF_PROBE_HIST_BINS - 1. */
void cpu_hash_probe_stats(const cpu_hash *h, uint32_t *max_probe, double *mean_probe,
                          uint64_t *hist);

#endif /* TSDF_CPU_HASH_H */
