/*
 * volume_testlib.c - the helpers of the volume API tests (volume_testlib.h).
 */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include "tsdf_dataset.h"
#include "tsdf_voxel_layout.h"
#include "volume_testlib.h"

const tsdf_intrinsics K_TEST = {150.0f, 150.0f, 79.5f, 59.5f};

void pose_translation(float T[16], float tx, float ty, float tz)
{
    memset(T, 0, 16 * sizeof(float));
    T[0] = T[5] = T[10] = T[15] = 1.0f;
    T[3] = tx;
    T[7] = ty;
    T[11] = tz;
}

/* A fronto-parallel wall: the camera looks along world +z (identity
 * rotation) at the plane z = plane_z_m, so every pixel measures the same
 * depth plane_z_m - tz. */
void plane_frame(tsdf_frame *f, float *depth, float plane_z_m, float tx, float ty, float tz)
{
    for (int i = 0; i < W * H; i++)
        depth[i] = plane_z_m - tz;
    memset(f, 0, sizeof(*f));
    f->width = W;
    f->height = H;
    f->K = K_TEST;
    pose_translation(f->T_world_cam, tx, ty, tz);
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = depth;
    f->depth_scale = 1.0f;
    f->min_depth_m = 0.1f;
    f->max_depth_m = 5.0f;
    f->rgb = NULL;
}

/* A CPU volume of these parameters, the rest default. */
static tsdf_volume *cpu_volume_with(float voxel_m, float max_weight, tsdf_layout layout,
                                    uint64_t cap_bytes, uint32_t capacity)
{
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = voxel_m;
    p.max_weight = max_weight;
    p.layout = layout;
    p.memory_cap_bytes = cap_bytes;
    p.initial_capacity_blocks = capacity;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    assert_non_null(v);
    assert_int_equal(tsdf_volume_backend(v), TSDF_BACKEND_CPU);
    return v;
}

tsdf_volume *make_volume(float voxel_m, float max_weight, uint64_t cap_bytes, uint32_t capacity)
{
    tsdf_volume_params d;
    tsdf_volume_params_default(&d);
    return cpu_volume_with(voxel_m, max_weight, d.layout, cap_bytes, capacity);
}

tsdf_volume *make_volume_as(float voxel_m, float max_weight, tsdf_layout layout)
{
    tsdf_volume_params d;
    tsdf_volume_params_default(&d);
    return cpu_volume_with(voxel_m, max_weight, layout, d.memory_cap_bytes,
                           d.initial_capacity_blocks);
}

tsdf_volume_stats get_stats(tsdf_volume *v)
{
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(v, &st), TSDF_OK);
    return st;
}

/* Two block sets hold the same blocks with bit-identical voxels. */
void assert_sets_equal(const tsdf_block_set *a, const tsdf_block_set *b)
{
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->layout, b->layout);
    assert_int_equal(a->rgb != NULL, b->rgb != NULL);
    if (a->count == 0)
        return;
    assert_memory_equal(a->coords, b->coords, 3 * a->count * sizeof(int32_t));
    assert_memory_equal(a->geom, b->geom, tsdf_block_set_geom_bytes(a));
    if (a->rgb != NULL)
        assert_memory_equal(a->rgb, b->rgb, a->count * TSDF_BLOCK_RGB_BYTES);
}

/* Voxel i of a set, counting through its blocks (block i / 512). */
tsdf_vox vox_at(const tsdf_block_set *s, size_t i)
{
    return tsdf_block_set_get(s, i / TSDF_BLOCK_VOXELS, (unsigned)(i % TSDF_BLOCK_VOXELS));
}

void vox_put(tsdf_block_set *s, size_t i, tsdf_vox x)
{
    tsdf_block_set_put(s, i / TSDF_BLOCK_VOXELS, (unsigned)(i % TSDF_BLOCK_VOXELS), x);
}

struct tsdf_dataset *open_kitchen_or_skip(uint32_t *width, uint32_t *height, uint32_t *frames)
{
    const char *dir = tsdf_test_data_dir();
    tsdf_dataset *ds = NULL;
    tsdf_dataset_info info;
    if (dir == NULL) {
        print_message("7-Scenes data not found (set TSDF_DATA_DIR): kitchen case skipped\n");
        skip();
    }
    assert_int_equal(tsdf_dataset_open(dir, &ds), TSDF_OK);
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    *width = info.width;
    *height = info.height;
    *frames = info.frame_count;
    return ds;
}
