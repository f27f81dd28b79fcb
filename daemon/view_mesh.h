/*
 * view_mesh.h - the live view's binary form of a mesh by block: what
 * GET /api/mesh answers (docs/OPERATIONS.md, "Live view").
 *
 * The page keeps one geometry per voxel block and replaces parts as they
 * come (tsdf_mesh in tsdf_types.h: by_block, since_version), so the form
 * carries exactly the engine's parts, each self-contained, laid out so a
 * browser can take typed-array views of it without copying (every section
 * starts on a 4-byte boundary). All numbers are little-endian.
 *
 *   header, VIEW_MESH_HEADER_BYTES (40):
 *     0  "TSMB"                 magic
 *     4  u32 format             VIEW_MESH_FORMAT (1)
 *     8  u64 version            the map's version the mesh is at: the next
 *                               request's since
 *    16  u64 since              the version asked for (0: the whole map)
 *    24  u32 flags              VIEW_MESH_FULL: drop every block held first;
 *                               VIEW_MESH_COLORS: parts carry colours;
 *                               VIEW_MESH_INDEX32: indices are u32, not u16
 *    28  u32 block_count
 *    32  u32 removed_count
 *    36  u32 reserved (0)
 *   removed blocks: removed_count x (i32 x, i32 y, i32 z) block coordinates
 *   parts: block_count x
 *     i32 x, y, z               the block's coordinates
 *     u32 vertex_count, triangle_count
 *     f32 positions[3 * vertex_count]      metres, world frame
 *     i8  normals[3 * vertex_count]        unit normal * 127, padded to 4
 *     u8  colors[3 * vertex_count]         RGB, only with VIEW_MESH_COLORS,
 *                                          padded to 4
 *     u16 indices[3 * triangle_count]      into this part's own vertices
 *                                          (u32 with VIEW_MESH_INDEX32),
 *                                          padded to 4
 *
 * A part with no triangle says that its block holds no surface any more:
 * the client drops what it held for it.
 *
 * Threads: pure functions, any thread.
 */
#ifndef TSDFD_VIEW_MESH_H
#define TSDFD_VIEW_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIEW_MESH_FORMAT 1u
#define VIEW_MESH_HEADER_BYTES 40u

enum {
    VIEW_MESH_FULL = 1u << 0,
    VIEW_MESH_COLORS = 1u << 1,
    VIEW_MESH_INDEX32 = 1u << 2,
};

/* The bytes view_mesh_encode writes for m (0 when m is not by block). */
size_t view_mesh_encoded_bytes(const tsdf_mesh *m);

/* Encodes the by-block mesh m, made at map version `version` for a request
 * since `since`, into *out (malloc'ed; the caller frees it) of *out_len
 * bytes. TSDF_ETOO_LARGE when that would pass max_bytes (nothing is
 * allocated), TSDF_EINVAL when m has triangles but no parts (not by
 * block) or an index outside its part, TSDF_ENOMEM. */
int view_mesh_encode(const tsdf_mesh *m, uint64_t version, uint64_t since, size_t max_bytes,
                     uint8_t **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_VIEW_MESH_H */
