/*
 * snapshot_format.h - the bytes of a snapshot file (docs/OPERATIONS.md,
 * "File format"): writing version 2, reading versions 1 and 2. Internal to
 * the snapshot module: snapshot.c names, lists, prunes and atomically
 * writes the files; this part only turns maps into bytes and back.
 *
 * Threads: reentrant. Errors as snapshot.h; every refusal is logged with
 * the path and the reason.
 */
#ifndef TSDF_DAEMON_SNAPSHOT_FORMAT_H
#define TSDF_DAEMON_SNAPSHOT_FORMAT_H

#include <stdint.h>
#include <stdio.h>

#include "snapshot.h"

/* TSDF_OK when maps can be written: at most SNAP_MAX_MAPS, names non-empty,
 * fitting and distinct, block sets with arrays, a known layout. */
int snapfmt_check_maps(const snap_map *maps, size_t n);

/* Writes the whole file (format version 2) to f, positioned at 0. */
int snapfmt_write(FILE *f, const snap_map *maps, size_t n);

/* Reads and validates a whole file of file_size bytes from f (positioned
 * at 0); *out as snap_read. */
int snapfmt_read(const char *path, FILE *f, uint64_t file_size, snap_map **out, size_t *out_n);

/* Logs why path was refused and returns err. */
int snapfmt_refuse(const char *path, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* TSDF_DAEMON_SNAPSHOT_FORMAT_H */
