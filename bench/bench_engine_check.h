/*
 * bench_engine_check.h - how bench_engine tells that a timed result is the
 * right one where there is no CPU run beside it: a checksum of a volume's
 * blocks, and the parts of an incremental mesh compared with the same
 * blocks' parts of a whole mesh. Single-threaded like the benchmark.
 */
#ifndef BENCH_ENGINE_CHECK_H
#define BENCH_ENGINE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

/* FNV-1a 64 over len bytes, continuing from h (BENCH_FNV_OFFSET to
 * start): the checksums bench_engine prints, so that runs with other
 * thread counts, builds or backends can be compared bit for bit. */
#define BENCH_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t bench_fnv1a(uint64_t h, const void *data, size_t len);

/* A checksum of a mesh that does not depend on the order of its vertices
 * and triangles (the CUDA backend's order varies from run to run): the
 * sum of a hash of each vertex (position and normal) and of each triangle
 * (its corners' positions, in winding order). */
uint64_t bench_mesh_checksum(const tsdf_mesh *m);

/* What a volume holds, in three numbers. */
typedef struct {
    size_t blocks;
    uint64_t hash;      /* FNV-1a 64 over every block's coordinates, geometry and colour */
    size_t block_bytes; /* bytes of one block's voxels: geometry, and colour when present */
} bench_digest;

/* Exports every block of v (sorted by key, so the order of allocation does
 * not matter) and digests them into *d. The codes of
 * tsdf_volume_export_blocks. */
int bench_digest_volume(tsdf_volume *v, bench_digest *d);

/* 1 when two digests say the same volume. */
int bench_digest_equal(const bench_digest *a, const bench_digest *b);

/* Digests v and prints "check: WHAT vs synced after N frames: ... blocks,
 * checksum ..." against *ref, leaving the line open for the caller to end
 * when they agree (return 0); ends it with " -> FAIL" when they do not
 * (1). 2 when v cannot be exported (said on stderr). */
int bench_check_digest(tsdf_volume *v, const bench_digest *ref, const char *what, uint32_t frames);

/* What comparing an incremental by-block mesh with a whole by-block mesh
 * of the same volume found. */
typedef struct {
    size_t parts;        /* parts of the incremental mesh */
    size_t missing;      /* of those, parts whose block has no part in the whole mesh */
    size_t differ;       /* parts whose triangle count, vertex count or vertices differ */
    size_t uncovered;    /* changed blocks with no part in the incremental mesh */
    size_t triangles;    /* triangles of the incremental mesh */
    double max_pos_diff; /* largest |difference| of a part's summed vertex coordinates, m */
} bench_parts_diff;

/* Compares every part of inc with the part of the same block in whole
 * (both by_block, parts in ascending key order) -- the same triangle
 * count, the same vertex count, the same sum of vertex coordinates within
 * 1e-5 m a vertex -- and checks that each of the nchanged blocks in
 * changed (3 * nchanged coordinates, ascending key order as
 * tsdf_volume_select gives them) has a part in inc. Returns the number of
 * faults (missing + differ + uncovered); 0 means they agree. */
size_t bench_compare_parts(const tsdf_mesh *inc, const tsdf_mesh *whole, const int32_t *changed,
                           size_t nchanged, bench_parts_diff *out);

#endif /* BENCH_ENGINE_CHECK_H */
