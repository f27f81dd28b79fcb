/*
 * tsdf_ply.h - writes a mesh (common/tsdf_types.h) as a binary PLY file.
 *
 * File output lives here, beside the other file formats of the frame
 * sources, and not in the engine, which does no I/O.
 *
 * Threads: reentrant. Ownership: the mesh stays the caller's.
 */
#ifndef TSDF_PLY_H
#define TSDF_PLY_H

#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes m as binary little-endian PLY (vertex x y z nx ny nz [red green
 * blue], face vertex_indices as uchar count + int indices) to path,
 * through a temporary file renamed into place. TSDF_EINVAL (NULL arguments,
 * an index out of range), TSDF_EIO on failure. */
int tsdf_mesh_write_ply(const tsdf_mesh *m, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_PLY_H */
