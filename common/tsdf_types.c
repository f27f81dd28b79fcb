/*
 * tsdf_types.c - the helpers of the plain data types of tsdf_types.h.
 *
 * They live here, in the common library, because both the engine (which
 * fills meshes) and libtsdf (which hands meshes to its callers) need them,
 * and libtsdf is linked without the engine.
 */
#include "tsdf_types.h"

#include <stdlib.h>
#include <string.h>

void tsdf_mesh_init(tsdf_mesh *m)
{
    if (m != NULL)
        memset(m, 0, sizeof(*m));
}

void tsdf_mesh_fini(tsdf_mesh *m)
{
    if (m == NULL)
        return;
    free(m->positions);
    free(m->normals);
    free(m->colors);
    free(m->indices);
    free(m->block_coords);
    free(m->block_vertex_start);
    free(m->block_triangle_start);
    free(m->removed_coords);
    tsdf_mesh_init(m);
}

const char *tsdf_layout_name(tsdf_layout l)
{
    switch (l) {
    case TSDF_LAYOUT_F32:
        return "f32";
    case TSDF_LAYOUT_S16:
        return "s16";
    }
    return "unknown";
}

int tsdf_layout_parse(const char *name, tsdf_layout *out)
{
    if (name == NULL || out == NULL)
        return TSDF_EINVAL;
    if (strcmp(name, "f32") == 0)
        *out = TSDF_LAYOUT_F32;
    else if (strcmp(name, "s16") == 0)
        *out = TSDF_LAYOUT_S16;
    else
        return TSDF_EINVAL;
    return TSDF_OK;
}
