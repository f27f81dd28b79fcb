/*
 * evict.h - a map's eviction policy ([eviction] in the configuration):
 * which blocks leave the volume, where they go, and when they come back.
 *
 *   mode off     nothing leaves (the map grows with all it ever saw);
 *   mode drop    every check_frames frames, the blocks farther than
 *                radius_m from the map's latest frame are removed;
 *   mode spill   the same, but they go to the map's spill store
 *                (spill.h, <state_dir>/spill/<map>/), and before every
 *                frame the spilled blocks that frame can reach come back
 *                (tsdf_volume_write_blocks), so a robot that returns finds
 *                its map as it left it.
 * Never removed: blocks the latest frame could reach (within its depth
 * range along its widest ray, plus the truncation band and a block), so
 * a radius smaller than the camera's range does not evict what is seen.
 * With on_full = evict a frame refused for memory (CAPACITY: the map's cap
 * or the daemon-wide budget) makes room: the blocks beyond that frame's
 * reach go (as mode says), and the frame is integrated again, once.
 * Removed blocks are listed in incremental meshes (tsdf_mesh.removed);
 * brought back, they are changed blocks there.
 *
 * Snapshots keep spilled blocks beside resident ones (snap_map.spilled):
 * an export reads them here, an import writes them back into a fresh store
 * (or, in a map that does not spill, into its volume, so none is lost).
 *
 * Threads: every function runs on the map's worker (or, for
 * evict_open / evict_close, where the map is made and freed, before and
 * after the worker runs). The counters in dmap are atomics, read anywhere.
 */
#ifndef TSDFD_EVICT_H
#define TSDFD_EVICT_H

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dmap;

/* Opens m's spill store when the mode is spill, for volumes of p (m->spill;
 * NULL in the other modes). A failure is logged and returned. */
int evict_open(struct dmap *m, const tsdf_volume_params *p);

/* Closes the store; with remove_files (a deleted map) its files go too. */
void evict_close(struct dmap *m, int remove_files);

/* Before frame f: the spilled blocks f can reach come back. TSDF_OK, or
 * the error that kept them out (TSDF_ECAPACITY: no room for them); the
 * frame must then not be integrated (it would make fresh blocks where the
 * spilled ones belong), and the blocks stay spilled. */
int evict_before_frame(struct dmap *m, const tsdf_frame *f);

/* After frame f was integrated: notes where it was; every check_frames
 * frames removes the blocks beyond radius_m (and f's reach). */
void evict_after_frame(struct dmap *m, const tsdf_frame *f);

/* f was refused for memory: with on_full = evict, removes the blocks beyond
 * f's reach. 1 when any went (integrate f again), else 0. */
int evict_make_room(struct dmap *m, const tsdf_frame *f);

/* A copy of the spilled blocks into *out (empty without a store), for a
 * snapshot. */
int evict_export_spilled(struct dmap *m, tsdf_block_set *out);

/* After an import: in replaces what was spilled (into the store, reopened
 * for volumes of p when they changed; without a store into the volume). */
int evict_import_spilled(struct dmap *m, const tsdf_block_set *in, const tsdf_volume_params *p);

/* After a reset: nothing is spilled any more. */
void evict_reset(struct dmap *m);

/* How far frame f can change the volume from its camera, metres: its
 * depth range along its widest ray, the truncation band and a block. */
float evict_frame_reach(const tsdf_frame *f, const tsdf_volume_params *p);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_EVICT_H */
