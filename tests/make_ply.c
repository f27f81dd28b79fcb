/*
 * make_ply.c - writes PLY meshes of fused synthetic scenes for
 * tests/test_ply_open3d.sh, which loads them with another program's reader
 * (Open3D) to check that tsdf_mesh_write_ply's output is standard PLY.
 *
 *   make_ply SPHERE_PLY DEMO_PLY [SPHERE_GRAY_PLY]
 *
 * Fuses, on the CPU backend with 1 cm voxels, the "sphere" sequence (at
 * 160 x 120; a closed surface) and the "demo" sequence (at its own 320 x 240;
 * an open surface with several objects), both with colour, and, when a third
 * path is given, the sphere again without colour (so the PLY has no colour
 * properties). Writes each mesh with tsdf_mesh_write_ply and prints one line
 * per mesh on stdout, "name vertices triangles":
 *
 *   sphere 17152 34300
 *   demo 238397 472408
 *   sphere_gray 17152 34300
 *
 * Exit status 0 on success, 1 on any failure (with a message on stderr),
 * 2 on bad usage. A test tool, not library code, so it may simply stop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"
#include "tsdf_synth.h"
#include "tsdf_ply.h"
#include "tsdf_volume.h"

#define MAKE_PLY_VOXEL_M 0.01f

/* Fuses every frame of sequence `seq_name` at width x height (0: the
 * sequence's own size), meshes the volume, writes the mesh to path and
 * prints its counts as `out_name`. Returns TSDF_OK or the first error. */
static int fuse_and_write(const char *seq_name, uint32_t width, uint32_t height, int with_rgb,
                          const char *out_name, const char *path)
{
    tsdf_synth_sequence seq;
    tsdf_volume_params p;
    tsdf_volume *vol = NULL;
    tsdf_mesh m;
    float *depth = NULL;
    uint8_t *rgb = NULL;
    const char *step = "sequence";
    int rc;

    tsdf_mesh_init(&m);
    rc = tsdf_synth_sequence_init(&seq, seq_name);
    if (rc == TSDF_OK && width != 0)
        rc = tsdf_synth_sequence_set_resolution(&seq, width, height);
    if (rc != TSDF_OK)
        goto done;

    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = MAKE_PLY_VOXEL_M;
    step = "volume";
    rc = tsdf_volume_create(&p, &vol);
    if (rc != TSDF_OK)
        goto done;

    step = "buffers";
    depth = malloc((size_t)seq.width * seq.height * sizeof(*depth));
    if (with_rgb)
        rgb = malloc((size_t)seq.width * seq.height * 3);
    if (depth == NULL || (with_rgb && rgb == NULL)) {
        rc = TSDF_ENOMEM;
        goto done;
    }

    step = "integrate";
    for (uint32_t i = 0; i < seq.frame_count && rc == TSDF_OK; i++) {
        tsdf_frame f;
        rc = tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f);
        if (rc == TSDF_OK)
            rc = tsdf_volume_integrate(vol, &f);
    }
    if (rc != TSDF_OK)
        goto done;

    step = "mesh";
    rc = tsdf_volume_mesh(vol, NULL, &m);
    if (rc != TSDF_OK)
        goto done;
    /* A mesh without colour where colour was fused (or the reverse) would
     * make the Open3D check test the wrong thing. */
    if ((m.colors != NULL) != (with_rgb != 0)) {
        rc = TSDF_EINVAL;
        goto done;
    }

    step = "write";
    rc = tsdf_mesh_write_ply(&m, path);
    if (rc != TSDF_OK)
        goto done;
    printf("%s %zu %zu\n", out_name, m.vertex_count, m.triangle_count);

done:
    if (rc != TSDF_OK)
        fprintf(stderr, "make_ply: %s (%s -> %s): %s: %s\n", out_name, seq_name, path, step,
                tsdf_strerror(rc));
    tsdf_mesh_fini(&m);
    tsdf_volume_destroy(vol);
    free(depth);
    free(rgb);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s SPHERE_PLY DEMO_PLY [SPHERE_GRAY_PLY]\n", argv[0]);
        return 2;
    }
    if (fuse_and_write("sphere", 160, 120, 1, "sphere", argv[1]) != TSDF_OK)
        return 1;
    if (fuse_and_write("demo", 0, 0, 1, "demo", argv[2]) != TSDF_OK)
        return 1;
    if (argc == 4 && fuse_and_write("sphere", 160, 120, 0, "sphere_gray", argv[3]) != TSDF_OK)
        return 1;
    /* The counts are read by a script: make sure they reach it. */
    if (fflush(stdout) != 0) {
        perror("make_ply: stdout");
        return 1;
    }
    return 0;
}
