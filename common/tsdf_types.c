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
    tsdf_mesh_init(m);
}
