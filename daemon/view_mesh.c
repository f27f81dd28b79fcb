/*
 * view_mesh.c - the live view's binary form of a mesh by block (see
 * view_mesh.h).
 */
#include "view_mesh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"

static size_t pad4(size_t n)
{
    return (n + 3u) & ~(size_t)3u;
}

/* 1 when some part has more vertices than a u16 index can reach. */
static int needs_index32(const tsdf_mesh *m)
{
    for (size_t b = 0; b < m->block_count; b++)
        if (m->block_vertex_start[b + 1] - m->block_vertex_start[b] > 65535u)
            return 1;
    return 0;
}

static size_t part_bytes(size_t nv, size_t nt, int colors, int index32)
{
    return 20u + 12u * nv + pad4(3u * nv) + (colors ? pad4(3u * nv) : 0u) +
           pad4(3u * nt * (index32 ? 4u : 2u));
}

size_t view_mesh_encoded_bytes(const tsdf_mesh *m)
{
    if (m->triangle_count > 0 && m->block_count == 0)
        return 0;
    int colors = m->colors != NULL, index32 = needs_index32(m);
    size_t n = VIEW_MESH_HEADER_BYTES + 12u * m->removed_count;
    for (size_t b = 0; b < m->block_count; b++)
        n += part_bytes(m->block_vertex_start[b + 1] - m->block_vertex_start[b],
                        m->block_triangle_start[b + 1] - m->block_triangle_start[b], colors,
                        index32);
    return n;
}

/* Little-endian stores: the form is fixed whatever the host's order. */
static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    p = put_u32(p, (uint32_t)v);
    return put_u32(p, (uint32_t)(v >> 32));
}

static uint8_t *put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    return put_u32(p, v);
}

static int8_t snorm8(float v)
{
    if (!isfinite(v))
        return 0;
    float s = v * 127.0f;
    return (int8_t)lrintf(s > 127.0f ? 127.0f : s < -127.0f ? -127.0f : s);
}

/* Writes part b at p; returns the end, or NULL for an index outside the part. */
static uint8_t *put_part(uint8_t *p, const tsdf_mesh *m, size_t b, int index32)
{
    uint32_t v0 = m->block_vertex_start[b], nv = m->block_vertex_start[b + 1] - v0;
    uint32_t t0 = m->block_triangle_start[b], nt = m->block_triangle_start[b + 1] - t0;
    for (int k = 0; k < 3; k++)
        p = put_u32(p, (uint32_t)m->block_coords[3 * b + k]);
    p = put_u32(p, nv);
    p = put_u32(p, nt);
    for (size_t i = 0; i < 3u * nv; i++)
        p = put_f32(p, m->positions[3u * v0 + i]);
    uint8_t *start = p;
    for (size_t i = 0; i < 3u * nv; i++)
        *p++ = (uint8_t)snorm8(m->normals[3u * v0 + i]);
    p = start + pad4(3u * nv);
    if (m->colors != NULL) {
        memcpy(p, m->colors + 3u * v0, 3u * nv);
        p += pad4(3u * nv);
    }
    start = p;
    for (size_t i = 0; i < 3u * nt; i++) {
        uint32_t idx = m->indices[3u * t0 + i];
        if (idx < v0 || idx - v0 >= nv)
            return NULL;
        idx -= v0;
        if (index32) {
            p = put_u32(p, idx);
        } else {
            *p++ = (uint8_t)idx;
            *p++ = (uint8_t)(idx >> 8);
        }
    }
    return start + pad4(3u * nt * (index32 ? 4u : 2u));
}

int view_mesh_encode(const tsdf_mesh *m, uint64_t version, uint64_t since, size_t max_bytes,
                     uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    size_t n = view_mesh_encoded_bytes(m);
    if (n == 0)
        return TSDF_EINVAL;
    if (n > max_bytes)
        return TSDF_ETOO_LARGE;
    /* calloc: the padding bytes go out as zeros, never as heap contents. */
    uint8_t *buf = calloc(1, n);
    if (buf == NULL)
        return TSDF_ENOMEM;
    int index32 = needs_index32(m);
    uint32_t flags = (m->full ? VIEW_MESH_FULL : 0u) | (m->colors ? VIEW_MESH_COLORS : 0u) |
                     (index32 ? VIEW_MESH_INDEX32 : 0u);
    memcpy(buf, "TSMB", 4);
    uint8_t *p = put_u32(buf + 4, VIEW_MESH_FORMAT);
    p = put_u64(p, version);
    p = put_u64(p, since);
    p = put_u32(p, flags);
    p = put_u32(p, (uint32_t)m->block_count);
    p = put_u32(p, (uint32_t)m->removed_count);
    p = put_u32(p, 0);
    for (size_t i = 0; i < 3u * m->removed_count; i++)
        p = put_u32(p, (uint32_t)m->removed_coords[i]);
    for (size_t b = 0; b < m->block_count && p != NULL; b++)
        p = put_part(p, m, b, index32);
    if (p == NULL) {
        free(buf);
        return TSDF_EINVAL;
    }
    *out = buf;
    *out_len = n;
    return TSDF_OK;
}
