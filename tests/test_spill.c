/*
 * test_spill.c - the spill store (daemon/spill.c): blocks evicted from a
 * real volume go to chunk files and come back intact by distance (exactly
 * the blocks within the radius, the chunks they share split); a later
 * put replaces blocks of the same coordinates and keeps the others; read
 * all leaves the store as it is; a damaged chunk file is refused, not
 * loaded; open empties what a crash left; clear and destroy remove the
 * files.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "spill.h"
#include "testutil.h"
#include "tsdf_math.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "tsdf_voxel_layout.h"

static const char *fresh_dir(const char *name)
{
    static char path[4096];
    char cmd[4200];
    snprintf(path, sizeof path, "%s/%s/spill/m", tsdf_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s'", tsdf_test_tmpdir(), name);
    assert_int_equal(system(cmd), 0);
    return path;
}

static size_t files_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A room fused into a volume of 2 cm voxels (with colour). */
static tsdf_volume *room_volume(tsdf_layout layout)
{
    tsdf_synth_sequence seq;
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    float *depth = malloc(160 * 120 * sizeof(float));
    uint8_t *rgb = malloc(160 * 120 * 3);
    assert_non_null(depth);
    assert_non_null(rgb);
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 160, 120), TSDF_OK);
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = 0.02f;
    p.layout = layout;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    for (uint32_t i = 0; i < 10; i++) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    free(depth);
    free(rgb);
    return v;
}

static void assert_same_blocks(const tsdf_block_set *a, const tsdf_block_set *b)
{
    assert_int_equal(a->count, b->count);
    if (a->count == 0)
        return;
    assert_int_equal(a->layout, b->layout);
    assert_memory_equal(a->coords, b->coords, 3 * a->count * sizeof(int32_t));
    assert_memory_equal(a->versions, b->versions, a->count * sizeof(uint64_t));
    assert_memory_equal(a->geom, b->geom, tsdf_block_set_geom_bytes(a));
    assert_int_equal(a->rgb != NULL, b->rgb != NULL);
    if (a->rgb != NULL)
        assert_memory_equal(a->rgb, b->rgb, a->count * TSDF_BLOCK_RGB_BYTES);
}

static void round_trip(tsdf_layout layout)
{
    const char *dir = fresh_dir(layout == TSDF_LAYOUT_S16 ? "s16" : "f32");
    tsdf_volume *v = room_volume(layout);
    spill_store *s = NULL;
    assert_int_equal(spill_open(dir, tsdf_volume_get_params(v), &s), TSDF_OK);

    /* Everything beyond 1 m of the room's centre is evicted and spilled. */
    tsdf_block_select q;
    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    q.center_m[2] = 0.3f;
    q.radius_m = 1.0f;
    tsdf_block_set out, back, all;
    tsdf_block_set_init(&out);
    tsdf_block_set_init(&back);
    tsdf_block_set_init(&all);
    size_t erased = 0;
    assert_int_equal(tsdf_volume_evict(v, &q, &out, &erased), TSDF_OK);
    assert_true(erased > 100);
    assert_int_equal(spill_put(s, &out), TSDF_OK);
    assert_int_equal(spill_blocks(s), out.count);
    assert_int_equal(files_in(dir), spill_chunks(s));
    assert_true(spill_chunks(s) > 1);
    print_message("%s: spilled %zu blocks into %zu chunk files\n", tsdf_layout_name(layout),
                  out.count, spill_chunks(s));

    /* Reading them all leaves them there, and they are what went. */
    assert_int_equal(spill_read_all(s, &all), TSDF_OK);
    assert_same_blocks(&out, &all);
    assert_int_equal(spill_blocks(s), out.count);

    /* Taking back what lies near one corner takes exactly the blocks
     * within the radius (by the volume's metric), splitting the chunks
     * they share with blocks beyond it. */
    const float block_m = TSDF_BLOCK_DIM * tsdf_volume_get_params(v)->voxel_size_m;
    const float corner[3] = {(float)out.coords[0] * block_m, (float)out.coords[1] * block_m,
                             (float)out.coords[2] * block_m};
    const size_t chunks_before = spill_chunks(s);
    size_t within = 0;
    for (size_t i = 0; i < out.count; i++)
        within += tsdf_block_dist2(&out.coords[3 * i], block_m, corner) <= 0.5f * 0.5f;
    assert_int_equal(spill_take_near(s, corner, 0.5f, &back), TSDF_OK);
    assert_true(back.count > 0 && back.count < out.count);
    assert_int_equal(back.count, within);
    for (size_t i = 0; i < back.count; i++)
        assert_true(tsdf_block_dist2(&back.coords[3 * i], block_m, corner) <= 0.5f * 0.5f);
    for (size_t i = 1; i < back.count; i++)
        assert_true(
            tsdf_block_key(back.coords[3 * i - 3], back.coords[3 * i - 2], back.coords[3 * i - 1]) <
            tsdf_block_key(back.coords[3 * i], back.coords[3 * i + 1], back.coords[3 * i + 2]));
    assert_int_equal(spill_blocks(s), out.count - back.count);
    assert_int_equal(files_in(dir), spill_chunks(s));
    assert_true(spill_chunks(s) <= chunks_before);
    /* What stayed is what did not come back, and it reads back intact. */
    {
        tsdf_block_set left;
        tsdf_block_set_init(&left);
        assert_int_equal(spill_read_all(s, &left), TSDF_OK);
        assert_int_equal(left.count, out.count - back.count);
        for (size_t i = 0; i < left.count; i++)
            assert_true(tsdf_block_dist2(&left.coords[3 * i], block_m, corner) > 0.5f * 0.5f);
        tsdf_block_set_fini(&left);
    }
    /* Nothing near: nothing taken, no file read or changed. */
    {
        const float far[3] = {100.0f, 100.0f, 100.0f};
        tsdf_block_set none;
        tsdf_block_set_init(&none);
        assert_int_equal(spill_take_near(s, far, 1.0f, &none), TSDF_OK);
        assert_int_equal(none.count, 0);
        assert_int_equal(spill_blocks(s), out.count - back.count);
        tsdf_block_set_fini(&none);
    }
    /* Written back into the volume, they are where they were. */
    assert_int_equal(tsdf_volume_write_blocks(v, &back), TSDF_OK);
    /* The rest, then, with a radius that reaches everything. */
    tsdf_block_set rest;
    tsdf_block_set_init(&rest);
    assert_int_equal(spill_take_near(s, corner, 1e6f, &rest), TSDF_OK);
    assert_int_equal(back.count + rest.count, out.count);
    assert_int_equal(spill_blocks(s), 0);
    assert_int_equal(files_in(dir), 0);

    /* A put over blocks already spilled replaces those and keeps the others. */
    assert_int_equal(spill_put(s, &out), TSDF_OK);
    tsdf_block_set one;
    tsdf_block_set_init(&one);
    assert_int_equal(tsdf_block_set_alloc(&one, 1, out.layout, out.sdf_unit_m, out.rgb != NULL),
                     TSDF_OK);
    memcpy(one.coords, out.coords, 3 * sizeof(int32_t));
    one.versions[0] = 12345;
    tsdf_block_set_put(&one, 0, 7, (tsdf_vox){0.01f, 3.0f});
    assert_int_equal(spill_put(s, &one), TSDF_OK);
    assert_int_equal(spill_blocks(s), out.count);
    tsdf_block_set_fini(&all);
    tsdf_block_set_init(&all);
    assert_int_equal(spill_read_all(s, &all), TSDF_OK);
    assert_int_equal(all.count, out.count);
    assert_int_equal(all.versions[0], 12345);
    assert_true(tsdf_block_set_get(&all, 0, 7).weight == 3.0f);
    assert_memory_equal(&all.coords[3], &out.coords[3], 3 * (out.count - 1) * sizeof(int32_t));

    /* A damaged chunk file is refused whole, never loaded. */
    {
        char path[4400];
        DIR *d = opendir(dir);
        struct dirent *de;
        path[0] = '\0';
        while ((de = readdir(d)) != NULL)
            if (de->d_name[0] != '.')
                snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        closedir(d);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        fseek(f, 300, SEEK_SET);
        fputc(0x5a, f);
        fclose(f);
        tsdf_log_set_level(TSDF_LOG_ERROR);
        tsdf_block_set tmp;
        tsdf_block_set_init(&tmp);
        int rc = spill_read_all(s, &tmp);
        assert_true(rc == TSDF_ECHECKSUM || rc == TSDF_EFORMAT);
        assert_int_equal(tmp.count, 0);
        tsdf_log_set_level(TSDF_LOG_INFO);
    }

    /* Opening the store again empties it: a snapshot holds what counts. */
    spill_close(s);
    assert_true(files_in(dir) > 0);
    assert_int_equal(spill_open(dir, tsdf_volume_get_params(v), &s), TSDF_OK);
    assert_int_equal(files_in(dir), 0);
    assert_int_equal(spill_put(s, &out), TSDF_OK);
    assert_int_equal(spill_clear(s), TSDF_OK);
    assert_int_equal(spill_blocks(s), 0);
    assert_int_equal(files_in(dir), 0);
    /* A set of another layout does not go in. */
    out.layout = layout == TSDF_LAYOUT_S16 ? TSDF_LAYOUT_F32 : TSDF_LAYOUT_S16;
    assert_int_equal(spill_put(s, &out), TSDF_EINVAL);
    out.layout = layout;
    spill_destroy(s);
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0);

    tsdf_block_set_fini(&one);
    tsdf_block_set_fini(&rest);
    tsdf_block_set_fini(&all);
    tsdf_block_set_fini(&back);
    tsdf_block_set_fini(&out);
    tsdf_volume_destroy(v);
}

static void test_spill_round_trip(void **state)
{
    (void)state;
    round_trip(TSDF_LAYOUT_S16);
    round_trip(TSDF_LAYOUT_F32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spill_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
