/*
 * spill.h - where a map's evicted blocks wait on disk until a frame sees
 * their space again.
 *
 * A spill store is one directory of the state directory per map
 * (<state_dir>/spill/<map>/). Blocks are grouped into chunks of
 * SPILL_CHUNK_BLOCKS blocks a side (1.28 m at 1 cm voxels), one file a
 * chunk, in the snapshot format (snapshot_format.c: a one-map file whose
 * map is the chunk), so every file is checksummed and validated when it
 * is read back. The store keeps an index of its chunks and of their
 * blocks' keys in memory (8 bytes a block, against 2 KiB or more on disk),
 * so it knows which blocks a frame can reach without reading a file, and
 * reads one only to take blocks back.
 *
 * Durability: the files are a cache of part of the map, not its record.
 * A snapshot holds a map's spilled blocks beside its resident ones (the
 * export reads them here), and a restore writes them into a fresh store;
 * so the files are written without fsync and a store is emptied when it
 * is opened (what a crash left is older than the snapshot restored).
 *
 * Damage: a chunk file is opened relative to the store's directory (held
 * open from spill_open), never through a symbolic link, and read back only
 * when it is a regular file whose length and checksums hold and whose
 * blocks are exactly the ones the index lists for it. A file that fails
 * any of that (truncated, flipped, replaced, a link) costs its own blocks
 * and nothing else: the chunk leaves the store and its file is removed,
 * logged with its path and counted (spill_take_damaged); its space is then
 * unobserved, so frames there integrate as into space never seen, and
 * spill_read_all, spill_take_near and spill_put go on with the other
 * chunks and succeed.
 *
 * Ownership: spill_open makes the store, spill_close frees it (the files
 * stay; spill_clear removes them). Threads: one thread at a time (the
 * map's worker). Errors: TSDF_OK or negative tsdf_errno codes; TSDF_EIO
 * for a failed system call, TSDF_ENOMEM, TSDF_EBUSY when the process is
 * out of file descriptors (a damaged file is never an error).
 */
#ifndef TSDFD_SPILL_H
#define TSDFD_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks a chunk spans on each axis. */
#define SPILL_CHUNK_BLOCKS 16

typedef struct spill_store spill_store;

/* Opens (creating it, mode 0750, and its parents below the state
 * directory) the store of a map in dir, for blocks of params' layout and
 * voxel size, and empties it. On TSDF_OK *out owns the store. */
int spill_open(const char *dir, const tsdf_volume_params *params, spill_store **out);

/* Frees the store (its files stay). NULL is a no-op. */
void spill_close(spill_store *s);

/* Blocks held, and chunk files. */
uint64_t spill_blocks(const spill_store *s);
size_t spill_chunks(const spill_store *s);

/* The chunks found damaged (and dropped) since the last call; 0 for NULL. */
uint64_t spill_take_damaged(spill_store *s);

/* Adds the blocks of *in (the store's layout), replacing any it holds
 * under the same coordinates. On failure the store holds what it held
 * before, for every chunk not yet rewritten (a chunk is rewritten whole,
 * through a temporary file renamed into place). */
int spill_put(spill_store *s, const tsdf_block_set *in);

/* Moves the blocks within radius_m of center_m (the nearest point of a
 * block, the metric of the volume's TSDF_SELECT_*_RADIUS rules) out of the
 * store into *out, sorted by key (replacing what it held; empty when
 * none); *out then belongs to the caller. A chunk emptied loses its file;
 * one partly taken is rewritten with the rest (should that write fail, it
 * comes back whole: more than asked, none lost). Only chunks holding a
 * wanted block are read. On failure the store is as it was. */
int spill_take_near(spill_store *s, const float center_m[3], float radius_m, tsdf_block_set *out);

/* Copies every block the store holds into *out (sorted by block key),
 * leaving the store as it is: for snapshots. */
int spill_read_all(spill_store *s, tsdf_block_set *out);

/* Removes every block and file. */
int spill_clear(spill_store *s);

/* Closes the store and removes its directory. */
void spill_destroy(spill_store *s);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_SPILL_H */
