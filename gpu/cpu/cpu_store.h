/*
 * cpu_store.h - the block store of the CPU backend: which blocks exist,
 * where their voxels are, and how blocks come and go.
 *
 * A cpu_hash maps packed block keys (tsdf_block_key) to pool indices. The
 * pool is a set of parallel arrays indexed by pool index: each block's key
 * (TSDF_KEY_EMPTY for a free slot), its version, its geometry channel (the
 * volume's layout, tsdf_voxel_layout.h) and, once the volume has colour,
 * its colour channel. Erased blocks leave the table (backward shift, no
 * tombstones) and their pool slots go onto a free stack that new blocks
 * take first; the pool grows in steps (cpu_store_reserve), never shrinks
 * but on clear.
 *
 * Memory cap: cpu_store_reserve refuses growth whose content (table and
 * pool, see cpu_store_bytes) would pass the cap, and never grows the pool
 * past it, so the content stays within the cap unless it was already above
 * it (a cap lowered later: nothing is dropped).
 *
 * Ownership: caller-owned struct, cpu_store_init / cpu_store_fini.
 * Threads: one thread at a time (the volume's).
 */
#ifndef TSDF_CPU_STORE_H
#define TSDF_CPU_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_hash.h"
#include "tsdf_voxel_layout.h"

/* The most blocks a CPU store holds (32-bit pool indices, with room). */
#define CPU_STORE_MAX_BLOCKS (1u << 30)

typedef struct {
    tsdf_layout layout;
    tsdf_quant quant;
    size_t geom_block_bytes; /* tsdf_layout_block_bytes(layout) */
    uint64_t initial_slots;  /* the table's capacity at init and after clear */
    cpu_hash table;          /* block key -> pool index */

    uint64_t *keys;      /* pool_cap: the block's key, TSDF_KEY_EMPTY when free */
    uint64_t *versions;  /* pool_cap */
    void *geom;          /* pool_cap * geom_block_bytes */
    uint8_t *rgb;        /* pool_cap * TSDF_BLOCK_RGB_BYTES, or NULL: no colour yet */
    uint32_t *free_list; /* pool_cap: a stack of free pool indices */
    uint32_t free_count;
    uint32_t used;     /* pool slots handed out so far (live or free): 0 .. used-1 */
    uint32_t pool_cap; /* pool slots allocated */

    uint64_t erased_total;  /* blocks erased since init */
    uint64_t growth_before; /* growth events of tables replaced by clear */
} cpu_store;

/* An empty store of layout and quant (s16), a table of initial_slots
 * (rounded up to a power of two) under max_load. TSDF_ENOMEM, TSDF_EINVAL. */
int cpu_store_init(cpu_store *s, tsdf_layout layout, tsdf_quant quant, uint64_t initial_slots,
                   float max_load);
void cpu_store_fini(cpu_store *s);

/* Drops every block: the table returns to its initial capacity and the
 * pool is freed (colour with it). TSDF_ENOMEM leaves the store as it was. */
int cpu_store_clear(cpu_store *s);

/* Blocks present. */
static inline uint64_t cpu_store_count(const cpu_store *s)
{
    return s->table.count;
}

/* The bytes the store holds now: table slots and pool slots (in use and
 * spare), each pool slot its key, version, free-list entry, geometry and
 * (when the store has colour) colour. */
uint64_t cpu_store_bytes(const cpu_store *s);

/* The pool index of key, or -1 when absent (or out of range). */
int32_t cpu_store_find(cpu_store *s, uint64_t key);

/* Makes room for `more` new blocks (with colour when with_rgb, which then
 * also gives the store its colour channel): grows the table (rehash) and
 * the pool first. Refuses with TSDF_ECAPACITY, changing nothing, when the
 * table and the pool the blocks need exactly would pass cap_bytes (0: no
 * cap) or CPU_STORE_MAX_BLOCKS; TSDF_ENOMEM. When the pool must grow it
 * grows by a sixteenth of its size or by `headroom` slots beyond the need,
 * whichever is more (integration asks for twice its largest frame, so that
 * growth is rare; a bulk write for none), but never past what the cap
 * leaves. */
int cpu_store_reserve(cpu_store *s, uint64_t more, int with_rgb, uint64_t cap_bytes,
                      uint64_t headroom);

/* Adds key (absent; room reserved) as a block of empty voxels carrying
 * version, in a free slot if there is one; returns its pool index, or
 * TSDF_EINTERNAL (a broken invariant: no room, a full table). */
int64_t cpu_store_add(cpu_store *s, uint64_t key, uint64_t version);

/* Removes key: 1 when it was there (its slot is free now), 0 when absent. */
int cpu_store_erase(cpu_store *s, uint64_t key);

/* Gives the store a colour channel of zeros for every slot (no-op when it
 * has one). TSDF_ENOMEM. */
int cpu_store_enable_rgb(cpu_store *s);

/* Channels of the block at pool index i. */
static inline void *cpu_store_geom(const cpu_store *s, uint32_t i)
{
    return (uint8_t *)s->geom + (size_t)i * s->geom_block_bytes;
}

static inline uint8_t *cpu_store_rgb(const cpu_store *s, uint32_t i)
{
    return s->rgb != NULL ? s->rgb + (size_t)i * TSDF_BLOCK_RGB_BYTES : NULL;
}

#endif /* TSDF_CPU_STORE_H */
