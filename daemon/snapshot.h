/*
 * snapshot.h - crash-safe snapshot files of every map of the daemon.
 *
 * One snapshot file holds every map: its name, volume parameters (its
 * voxel layout among them), version and blocks, those in the volume and
 * those spilled out of it by eviction. The format (version 2, all integers
 * and floats little-endian, zlib crc32 checksums over the header, each
 * map's payload and the whole file; version 1 files are still read) is
 * described byte by byte in docs/OPERATIONS.md ("File format"). Files are
 * named snap-<20-digit sequence>.tsdfsnap in the state
 * directory; a larger sequence is newer (the sequence is the write time in
 * microseconds, raised above every existing file so that a clock stepping
 * back never makes a new snapshot look old). A sequence more than a day
 * ahead of the clock is not one this daemon wrote with a sane clock: such a
 * file ranks below every other one in listings, restore and prune, and never
 * raises the next sequence, so no file can pin the restore or make the
 * sequence run out. Clients save only under names that cannot pose as the
 * daemon's (snap_write_file).
 *
 * Crash safety: snap_write writes a hidden temporary file in the same
 * directory, flushes and fsyncs it, renames it over its final name and
 * fsyncs the directory. A crash at any moment therefore leaves either the
 * complete new file or no new file (plus, at worst, a stale .snap-*.tmp
 * that snap_prune removes); never a half-written snapshot under a snapshot
 * name. snap_read checks everything before it returns anything, so a
 * damaged file is refused as a whole, never partially loaded.
 *
 * This module is pure file I/O: it takes block sets the caller exported
 * (tsdf_volume_export_blocks) and returns block sets for the caller to
 * import (tsdf_volume_import_blocks); it never touches a volume.
 *
 * Threads: every function may run on any thread (the daemon runs saves off
 * its event loop), and saves into one directory may run concurrently (an
 * autosave and a client's save): each gets its own sequence number, and
 * snap_prune never deletes the temporary file of a save in progress (it is
 * locked with flock). One daemon per state directory.
 *
 * Errors: TSDF_OK or negative tsdf_errno codes. Reading distinguishes
 * TSDF_EIO (cannot open or read), TSDF_EFORMAT (not a snapshot, truncated,
 * sizes that do not add up, bad names or parameters), TSDF_ECHECKSUM (a
 * crc32 mismatch: bit rot or a torn write) and TSDF_EVERSION (a snapshot of
 * a format this build does not read). Every refusal is logged with the path
 * and the reason.
 */
#ifndef TSDF_DAEMON_SNAPSHOT_H
#define TSDF_DAEMON_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format written; version 1 is read too (snapshot_format.c). */
#define SNAP_FORMAT_VERSION 2u
/* Maps per file; far above the daemon's max_maps, and a bound on what a
 * damaged header can make the reader allocate. */
#define SNAP_MAX_MAPS 1024u
/* Snapshot files considered in a directory (newest first); more are ignored
 * with a warning (snap_prune keeps the directory far below this). */
#define SNAP_MAX_FILES 4096u
/* The map name field of format v1: 64 bytes, the name and at least one
 * NUL, so names of at most 63 bytes: the protocol's limit
 * (TSDF_PROTO_MAX_NAME_LEN) is sized for it, which persist.c asserts. */
#define SNAP_NAME_LEN 64

typedef struct {
    char name[SNAP_NAME_LEN]; /* NUL-terminated, non-empty */
    /* The volume's parameters. Read from a version 1 file, layout is 0:
     * such a file does not say, and the caller picks one (the blocks come
     * as f32 and convert on import). */
    tsdf_volume_params params;
    tsdf_block_set blocks; /* in the volume, as exported: sorted by block key */
    /* Spilled out of the volume by eviction (daemon/spill.h), in the same
     * layout: part of the map, brought back when a frame sees them. */
    tsdf_block_set spilled;
    uint64_t version; /* the volume's version when exported */
} snap_map;

/*
 * Writes maps[0 .. n-1] into a new snapshot file in dir (created, mode
 * 0750, if missing; n may be 0) atomically, as described above. The maps
 * stay the caller's. On success path_out (if not NULL) receives the final
 * path. Returns TSDF_OK, TSDF_EINVAL (NULL arguments, an empty or too long
 * name, two maps with one name, a block set with NULL arrays, n >
 * SNAP_MAX_MAPS), TSDF_ETOO_LARGE (path_out or the path too short), TSDF_EIO
 * (any failed system call: the temporary file is removed and any older
 * snapshot stays as it was), TSDF_ENOMEM.
 */
int snap_write(const char *dir, const snap_map *maps, size_t n, char *path_out, size_t path_len);

/*
 * Writes maps into the file at path (a name a client chose), atomically and
 * durably as snap_write does: a temporary file in path's directory (created,
 * mode 0750, if missing) is renamed onto path. Returns snap_write's codes;
 * TSDF_EINVAL also when path's last component is empty or reserved for the
 * daemon's own files (snap_name_is_reserved): a client's name can never pose
 * as one of the daemon's snapshots, which restore and prune go by.
 */
int snap_write_file(const char *path, const snap_map *maps, size_t n);

/* 1 when a file name (no directory) has the form of the daemon's own files:
 * snap-*.tsdfsnap (snapshots) or .snap-* (their temporary files). */
int snap_name_is_reserved(const char *name);

/* snap_write, then snap_prune(dir, keep). A failed prune is logged, not
 * returned: the new snapshot is safely written either way. */
int snap_save(const char *dir, const snap_map *maps, size_t n, size_t keep, char *path_out,
              size_t path_len);

/*
 * Reads and validates the snapshot at path. On TSDF_OK *maps (malloc'ed
 * array of *n maps, each with malloc'ed block arrays) belongs to the
 * caller: release it with snap_maps_free. On any error *maps is NULL and
 * *n is 0: nothing of a damaged file is ever returned.
 */
int snap_read(const char *path, snap_map **maps, size_t *n);

/* Frees what snap_read returned (the block sets and the array). NULL is
 * a no-op. */
void snap_maps_free(snap_map *maps, size_t n);

/* Deletes all but the newest `keep` snapshot files of dir (keep 0: delete
 * none), and any stale temporary file a crash left behind (unlocked and
 * untouched for a minute: a save in progress keeps its file). Returns the
 * number of files deleted, or TSDF_EIO (dir unreadable) / TSDF_EINVAL. */
int snap_prune(const char *dir, size_t keep);

/*
 * Finds the newest snapshot in dir that snap_read accepts: tries the files
 * newest first, logs and skips each one it refuses. On TSDF_OK path_out
 * (if not NULL) holds its path and *maps / *n its content (free with
 * snap_maps_free). Returns TSDF_ENOT_FOUND when dir is missing or holds no
 * valid snapshot, TSDF_ENOMEM, TSDF_ETOO_LARGE (path_out too short).
 */
int snap_find_latest_valid(const char *dir, char *path_out, size_t len, snap_map **maps, size_t *n);

/* Lists the snapshot files of dir (names only, not paths), newest first
 * (those with a sequence more than a day ahead of the clock last),
 * into names[0 .. max-1] (each SNAP_FILE_NAME_LEN bytes); *count receives
 * how many. When dir holds more than max, the newest max are listed and the
 * rest counted in a warning. Returns TSDF_OK, TSDF_ENOT_FOUND (no dir), TSDF_EIO. */
#define SNAP_FILE_NAME_LEN 40
int snap_list(const char *dir, char (*names)[SNAP_FILE_NAME_LEN], size_t max, size_t *count);

/* The size in bytes a snapshot of these maps takes (for disk-space checks
 * and tests). */
uint64_t snap_file_size(const snap_map *maps, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_SNAPSHOT_H */
