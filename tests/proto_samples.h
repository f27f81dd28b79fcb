/*
 * proto_samples.h - wire samples that the codec's tests (test_proto_*.c) and
 * the fuzz seeds (fuzz/make_corpus.c) share, so that the seeds are the
 * messages the tests hold the codec to.
 *
 * Header-only: fuzz/ builds without the test library.
 */
#ifndef TSDF_TESTS_PROTO_SAMPLES_H
#define TSDF_TESTS_PROTO_SAMPLES_H

#include <stdint.h>

#include "tsdf_proto.h"

/* A whole mesh of two triangles on four coloured vertices. */
static const float g_quad_pos[4 * 3] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
static const float g_quad_nrm[4 * 3] = {0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0};
static const uint8_t g_quad_col[4 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const uint32_t g_quad_idx[2 * 3] = {0, 1, 2, 0, 2, 3};

/* Makes *r the reply of id with that mesh, at map version 55. */
static inline void proto_sample_mesh_quad(tsdf_reply *r, uint64_t id)
{
    tsdf_reply_init(r, TSDF_MSG_MESH, id);
    r->u.mesh = (tsdf_rep_mesh){.version = 55,
                                .vertex_count = 4,
                                .triangle_count = 2,
                                .positions = g_quad_pos,
                                .normals = g_quad_nrm,
                                .colors = g_quad_col,
                                .indices = g_quad_idx};
}

/* A by_block mesh of three parts: two triangles in block (0, 0, 0), one in
 * (1, 0, 0), none in (-1, 2, -3) (a block whose old part the client
 * clears); and two blocks removed since the version asked for. */
static const int32_t g_parts_coords[3 * 3] = {0, 0, 0, 1, 0, 0, -1, 2, -3};
static const uint32_t g_parts_vstart[4] = {0, 4, 7, 7};
static const uint32_t g_parts_tstart[4] = {0, 2, 3, 3};
static const uint32_t g_parts_idx[3 * 3] = {0, 1, 2, 0, 2, 3, 4, 5, 6};
static const float g_parts_pos[7 * 3] = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1,
                                         0, 8, 0, 0, 9, 0, 0, 9, 1, 0};
static const int32_t g_parts_removed[2 * 3] = {5, 5, 5, -7, 0, 1};

/* Makes *r the reply of id with that mesh (its normals are its positions:
 * the codec does not look into them). */
static inline void proto_sample_mesh_parts(tsdf_reply *r, uint64_t id)
{
    tsdf_reply_init(r, TSDF_MSG_MESH, id);
    r->u.mesh = (tsdf_rep_mesh){.version = 60,
                                .vertex_count = 7,
                                .triangle_count = 3,
                                .positions = g_parts_pos,
                                .normals = g_parts_pos,
                                .indices = g_parts_idx,
                                .has_blocks = 1,
                                .block_count = 3,
                                .block_coords = g_parts_coords,
                                .block_vertex_start = g_parts_vstart,
                                .block_triangle_start = g_parts_tstart,
                                .has_removed = 1,
                                .removed_count = 2,
                                .removed_coords = g_parts_removed};
}

#endif /* TSDF_TESTS_PROTO_SAMPLES_H */
