/*
 * tsdf_mesh_vertex.h - the marching-cubes vertex maths, written once for the
 * CPU reference (cpu_mesh.c) and the CUDA kernels (cuda_mesh.cu).
 *
 * A vertex sits on a crossed cell edge from voxel g0 one step along an axis
 * to voxel g1: at tsdf_mc_edge_t of the two sdf values along the edge; its
 * normal interpolates, by the same t, the sdf gradients at g0 and g1
 * (central differences, one-sided where a neighbour is unknown), falling
 * back to the edge's own direction; its colour interpolates the two voxel
 * colours.
 *
 * How a voxel is found is the including file's business. Before including
 * this header it defines TSDF_MESH_SOURCE, the type of what a lookup needs
 * (the CPU: the mesher with its block cache; CUDA: a const cuda_table_view),
 * and after it defines, in the same translation unit, the lookup declared
 * below: tsdf_mesh_source_voxel(src, x, y, z, &vox) returns 1 and the value
 * of the voxel at global voxel coordinate (x, y, z), or 0 when its block is
 * not allocated or out of the key range.
 *
 * Functions are TSDF_LOOKUP_FN (__device__ under nvcc, see tsdf_math.h). The
 * CUDA backend is compiled with --fmad=false, so both sides evaluate every
 * float expression alike, in the same order: the same vertex, bit for bit.
 */
#ifndef TSDF_MESH_VERTEX_H
#define TSDF_MESH_VERTEX_H

#include <stdint.h>

#include "tsdf_math.h"

#ifndef TSDF_MESH_SOURCE
#error "define TSDF_MESH_SOURCE (the voxel lookup's state) before including tsdf_mesh_vertex.h"
#endif

/* The voxels a block's cells read: the block and the first layer of its
 * +x, +y, +z neighbours, TSDF_MESH_CELL_SPAN per axis, which both
 * backends gather once per block before classifying its cells. */
#define TSDF_MESH_CELL_SPAN (TSDF_BLOCK_DIM + 1)
#define TSDF_MESH_CELL_VOXELS (TSDF_MESH_CELL_SPAN * TSDF_MESH_CELL_SPAN * TSDF_MESH_CELL_SPAN)

/* Where corner k (bit 0: +x, bit 1: +y, bit 2: +z) of the cell at (x, y, z)
 * of a block lies in that gather, x fastest. */
TSDF_HD int tsdf_mesh_cell_corner(int x, int y, int z, int k)
{
    return (x + (k & 1)) + TSDF_MESH_CELL_SPAN *
                               ((y + ((k >> 1) & 1)) + TSDF_MESH_CELL_SPAN * (z + ((k >> 2) & 1)));
}

/* Defined by the includer (see the top of this file). */
TSDF_LOOKUP_FN int tsdf_mesh_source_voxel(TSDF_MESH_SOURCE *src, int32_t x, int32_t y, int32_t z,
                                          tsdf_vox *out);

/* The sdf of voxel (x, y, z) when it is allocated and observed. */
TSDF_LOOKUP_FN int tsdf_mesh_known_sdf(TSDF_MESH_SOURCE *src, int32_t x, int32_t y, int32_t z,
                                       float *sdf)
{
    tsdf_vox vx;
    if (!tsdf_mesh_source_voxel(src, x, y, z, &vx) || !tsdf_vox_known(vx))
        return 0;
    *sdf = vx.sdf_m;
    return 1;
}

/* The sdf gradient at voxel g (whose sdf is s0) by central differences,
 * one-sided where a neighbour is unknown, 0 on an axis where both are. */
TSDF_LOOKUP_FN void tsdf_mesh_voxel_gradient(TSDF_MESH_SOURCE *src, const int32_t g[3], float s0,
                                             float out[3])
{
    for (int a = 0; a < 3; a++) {
        int32_t p[3] = {g[0], g[1], g[2]}, q[3] = {g[0], g[1], g[2]};
        float sp = 0.0f, sm = 0.0f;
        int hp, hm;
        p[a] += 1;
        q[a] -= 1;
        hp = tsdf_mesh_known_sdf(src, p[0], p[1], p[2], &sp);
        hm = tsdf_mesh_known_sdf(src, q[0], q[1], q[2], &sm);
        if (hp && hm)
            out[a] = 0.5f * (sp - sm);
        else if (hp)
            out[a] = sp - s0;
        else if (hm)
            out[a] = s0 - sm;
        else
            out[a] = 0.0f;
    }
}

/* The vertex on the crossed edge from voxel g0 (value v0, colour rgb0) one
 * step along axis to the next voxel (v1, rgb1), for voxels voxel_size_m
 * apart: its position (m), unit normal and, when rgb is not NULL, colour
 * (rgb0 and rgb1 must then point at the two voxels' RGB8). */
TSDF_LOOKUP_FN void tsdf_mesh_edge_vertex(TSDF_MESH_SOURCE *src, const int32_t g0[3], int axis,
                                          tsdf_vox v0, tsdf_vox v1, const uint8_t *rgb0,
                                          const uint8_t *rgb1, float voxel_size_m, float pos[3],
                                          float nrm[3], uint8_t *rgb)
{
    const float s = voxel_size_m;
    int32_t g1[3] = {g0[0], g0[1], g0[2]};
    float t, n0[3], n1[3];

    g1[axis] += 1;
    t = tsdf_mc_edge_t(v0.sdf_m, v1.sdf_m);
    for (int a = 0; a < 3; a++)
        pos[a] = tsdf_voxel_center(g0[a], s);
    pos[axis] += t * s;

    tsdf_mesh_voxel_gradient(src, g0, v0.sdf_m, n0);
    tsdf_mesh_voxel_gradient(src, g1, v1.sdf_m, n1);
    for (int a = 0; a < 3; a++)
        nrm[a] = n0[a] + (n1[a] - n0[a]) * t;
    if (!tsdf_normalize3(nrm)) {
        /* No gradient around: the edge itself says which way is out. */
        nrm[0] = nrm[1] = nrm[2] = 0.0f;
        nrm[axis] = v1.sdf_m > v0.sdf_m ? 1.0f : -1.0f;
    }
    if (rgb != NULL) {
        for (int c = 0; c < 3; c++)
            rgb[c] = (uint8_t)((float)rgb0[c] + ((float)rgb1[c] - (float)rgb0[c]) * t + 0.5f);
    }
}

#endif /* TSDF_MESH_VERTEX_H */
