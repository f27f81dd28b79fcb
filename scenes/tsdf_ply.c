/*
 * tsdf_ply.c - writes a tsdf_mesh as binary little-endian PLY 1.0, the
 * subset every mesh tool reads (Open3D, trimesh, MeshLab, Blender):
 *
 *   element vertex N: float x y z nx ny nz [uchar red green blue]
 *   element face M:   property list uchar int vertex_indices
 *
 * The file is written next to its final name and renamed into place, so a
 * reader never sees half a mesh and a failed write leaves no partial file.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tsdf_ply.h"

/* Little-endian stores, independent of the host's byte order. */
static unsigned char *put_u32le(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)((v >> 8) & 0xff);
    p[2] = (unsigned char)((v >> 16) & 0xff);
    p[3] = (unsigned char)((v >> 24) & 0xff);
    return p + 4;
}

static unsigned char *put_f32le(unsigned char *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof(v));
    return put_u32le(p, v);
}

static int write_body(FILE *fp, const tsdf_mesh *m)
{
    const int color = m->colors != NULL;
    unsigned char rec[32];

    if (fprintf(fp,
                "ply\nformat binary_little_endian 1.0\ncomment written by tsdfd\n"
                "element vertex %zu\n"
                "property float x\nproperty float y\nproperty float z\n"
                "property float nx\nproperty float ny\nproperty float nz\n",
                m->vertex_count) < 0)
        return TSDF_EIO;
    if (color && fprintf(fp, "property uchar red\nproperty uchar green\nproperty uchar blue\n") < 0)
        return TSDF_EIO;
    if (fprintf(fp, "element face %zu\nproperty list uchar int vertex_indices\nend_header\n",
                m->triangle_count) < 0)
        return TSDF_EIO;

    for (size_t i = 0; i < m->vertex_count; i++) {
        unsigned char *p = rec;
        for (int a = 0; a < 3; a++)
            p = put_f32le(p, m->positions[3 * i + a]);
        for (int a = 0; a < 3; a++)
            p = put_f32le(p, m->normals != NULL ? m->normals[3 * i + a] : 0.0f);
        if (color) {
            memcpy(p, &m->colors[3 * i], 3);
            p += 3;
        }
        if (fwrite(rec, 1, (size_t)(p - rec), fp) != (size_t)(p - rec))
            return TSDF_EIO;
    }
    for (size_t t = 0; t < m->triangle_count; t++) {
        unsigned char *p = rec;
        *p++ = 3;
        for (int a = 0; a < 3; a++)
            p = put_u32le(p, m->indices[3 * t + a]);
        if (fwrite(rec, 1, (size_t)(p - rec), fp) != (size_t)(p - rec))
            return TSDF_EIO;
    }
    return TSDF_OK;
}

int tsdf_mesh_write_ply(const tsdf_mesh *m, const char *path)
{
    char *tmp;
    size_t len;
    FILE *fp;
    int rc;

    if (m == NULL || path == NULL || (m->vertex_count != 0 && m->positions == NULL) ||
        (m->triangle_count != 0 && m->indices == NULL))
        return TSDF_EINVAL;
    /* PLY's "int" indices are signed 32-bit. */
    if (m->vertex_count > (size_t)INT32_MAX)
        return TSDF_ETOO_LARGE;
    for (size_t i = 0; i < 3 * m->triangle_count; i++)
        if (m->indices[i] >= m->vertex_count)
            return TSDF_EINVAL;

    len = strlen(path);
    tmp = malloc(len + 32);
    if (tmp == NULL)
        return TSDF_ENOMEM;
    snprintf(tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
    fp = fopen(tmp, "wb");
    if (fp == NULL) {
        free(tmp);
        return TSDF_EIO;
    }
    rc = write_body(fp, m);
    if (fclose(fp) != 0 && rc == TSDF_OK)
        rc = TSDF_EIO;
    if (rc == TSDF_OK && rename(tmp, path) != 0)
        rc = TSDF_EIO;
    if (rc != TSDF_OK)
        unlink(tmp);
    free(tmp);
    return rc;
}
