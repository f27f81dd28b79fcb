/*
 * test_snapshot.c - snapshot files (daemon/snapshot.c): round trips, the
 * atomic write, pruning, and refusal of every truncated or bit-flipped file;
 * plus the code review's regressions (sequence names beyond UINT64_MAX - 1,
 * snap_list keeping the newest when full, a FIFO refused at once).
 */
#define _GNU_SOURCE

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "snapshot.h"
#include "testutil.h"
#include "tsdf_error.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "tsdf_voxel_layout.h"

/* Random blocks into *s (allocated here) of layout and colour. */
static void fill_set(tsdf_block_set *s, size_t blocks, uint64_t version, tsdf_layout layout,
                     float unit, int with_rgb, int32_t x0)
{
    tsdf_block_set_init(s);
    s->layout = layout;
    s->sdf_unit_m = unit;
    if (blocks == 0)
        return; /* no arrays: what an empty export hands over */
    assert_int_equal(tsdf_block_set_alloc(s, blocks, layout, unit, with_rgb), TSDF_OK);
    for (size_t i = 0; i < blocks; i++) {
        s->coords[3 * i + 0] = (int32_t)i + x0;
        s->coords[3 * i + 1] = -(int32_t)(tsdf_test_rng() % 1000);
        s->coords[3 * i + 2] = (int32_t)(tsdf_test_rng() % 1000);
        s->versions[i] = tsdf_test_rng() % (version + 1);
        for (unsigned j = 0; j < TSDF_BLOCK_VOXELS; j++) {
            tsdf_vox v = {(float)((double)(tsdf_test_rng() % 2001) / 1000.0 - 1.0) * 0.08f,
                          (float)(tsdf_test_rng() % 65)};
            tsdf_block_set_put(s, i, j, v);
        }
        for (size_t j = 0; with_rgb && j < TSDF_BLOCK_RGB_BYTES; j++)
            s->rgb[i * TSDF_BLOCK_RGB_BYTES + j] = (uint8_t)tsdf_test_rng();
    }
}

/* A map of `blocks` random blocks in the default layout (s16) with colour,
 * none spilled. */
static void fill_map_as(snap_map *m, const char *name, size_t blocks, uint64_t version,
                        tsdf_layout layout, int with_rgb, size_t spilled)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    tsdf_volume_params_default(&m->params);
    m->params.voxel_size_m = 0.02f;
    m->params.memory_cap_bytes = 1ull << 33;
    m->params.layout = layout;
    m->version = version;
    const float unit = tsdf_quant_for(m->params.trunc_vox * m->params.voxel_size_m).unit_m;
    fill_set(&m->blocks, blocks, version, layout, unit, with_rgb, -7);
    fill_set(&m->spilled, spilled, version, layout, unit, with_rgb, 5000);
}

static void fill_map(snap_map *m, const char *name, size_t blocks, uint64_t version)
{
    fill_map_as(m, name, blocks, version, TSDF_LAYOUT_S16, 1, 0);
}

static void free_maps(snap_map *maps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tsdf_block_set_fini(&maps[i].blocks);
        tsdf_block_set_fini(&maps[i].spilled);
    }
}

static void assert_sets_equal(const tsdf_block_set *a, const tsdf_block_set *b)
{
    size_t c = a->count;
    assert_int_equal(c, b->count);
    if (c == 0)
        return;
    assert_int_equal(a->layout, b->layout);
    assert_memory_equal(a->coords, b->coords, 3 * c * sizeof(int32_t));
    assert_memory_equal(a->versions, b->versions, c * sizeof(uint64_t));
    assert_memory_equal(a->geom, b->geom, tsdf_block_set_geom_bytes(a));
    assert_int_equal(a->rgb != NULL, b->rgb != NULL);
    if (a->rgb != NULL)
        assert_memory_equal(a->rgb, b->rgb, c * TSDF_BLOCK_RGB_BYTES);
}

static void assert_maps_equal(const snap_map *a, const snap_map *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(a[i].name, b[i].name);
        assert_int_equal(a[i].version, b[i].version);
        assert_memory_equal(&a[i].params.voxel_size_m, &b[i].params.voxel_size_m, sizeof(float));
        assert_true(a[i].params.trunc_vox == b[i].params.trunc_vox);
        assert_true(a[i].params.max_weight == b[i].params.max_weight);
        assert_true(a[i].params.max_load_factor == b[i].params.max_load_factor);
        assert_int_equal(a[i].params.initial_capacity_blocks, b[i].params.initial_capacity_blocks);
        assert_int_equal(a[i].params.memory_cap_bytes, b[i].params.memory_cap_bytes);
        assert_int_equal(a[i].params.backend, b[i].params.backend);
        assert_int_equal(a[i].params.cuda_device, b[i].params.cuda_device);
        assert_int_equal(a[i].params.layout, b[i].params.layout);
        assert_sets_equal(&a[i].blocks, &b[i].blocks);
        assert_sets_equal(&a[i].spilled, &b[i].spilled);
    }
}

/* A fresh, empty directory under the test's scratch dir. */
static const char *fresh_dir(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tsdf_test_tmpdir(), name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
    return path;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void spit(const char *path, const unsigned char *p, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, len, f), len);
    fclose(f);
}

static void test_round_trip(void **state)
{
    const char *dir = fresh_dir("roundtrip");
    snap_map maps[3];
    fill_map(&maps[0], "default", 40, 1234);
    fill_map(&maps[1], "empty", 0, 0);
    fill_map(&maps[2], "robot-2/kitchen", 3, 77);
    maps[2].params.backend = TSDF_BACKEND_CUDA;
    maps[2].params.cuda_device = 1;

    char path[4096];
    assert_int_equal(snap_write(dir, maps, 3, path, sizeof path), TSDF_OK);
    assert_non_null(strstr(path, "/snap-"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, snap_file_size(maps, 3));
    assert_int_equal(st.st_mode & 0777, 0640);
    /* Nothing but the snapshot: the temporary file was renamed away. */
    assert_int_equal(count_entries(dir), 1);

    snap_map *got = NULL;
    size_t n = 99;
    assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
    assert_int_equal(n, 3);
    assert_maps_equal(maps, got, 3);
    snap_maps_free(got, n);

    /* A file of no maps is valid too (a daemon that has none yet). */
    assert_int_equal(snap_write(dir, NULL, 0, path, sizeof path), TSDF_OK);
    assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
    assert_int_equal(n, 0);
    snap_maps_free(got, n);
    free_maps(maps, 3);
}

static void test_write_refuses_bad_input(void **state)
{
    const char *dir = fresh_dir("badinput");
    snap_map maps[2];
    fill_map(&maps[0], "same", 1, 1);
    fill_map(&maps[1], "same", 1, 1);
    char path[4096];
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_EINVAL);
    maps[1].name[0] = '\0';
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_EINVAL);
    memset(maps[1].name, 'x', sizeof maps[1].name); /* not terminated */
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_EINVAL);
    snprintf(maps[1].name, sizeof maps[1].name, "other");
    int32_t *coords = maps[1].blocks.coords;
    maps[1].blocks.coords = NULL;
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_EINVAL);
    maps[1].blocks.coords = coords;
    assert_int_equal(snap_write(dir, maps, SNAP_MAX_MAPS + 1, path, sizeof path), TSDF_EINVAL);
    assert_int_equal(snap_write(NULL, maps, 2, path, sizeof path), TSDF_EINVAL);
    char tiny[8];
    assert_int_equal(snap_write(dir, maps, 2, tiny, sizeof tiny), TSDF_ETOO_LARGE);
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_OK);

    /* A "directory" that is a file: the write fails cleanly with EIO. */
    char file_dir[4200];
    snprintf(file_dir, sizeof file_dir, "%s/not-a-dir", dir);
    spit(file_dir, (const unsigned char *)"x", 1);
    assert_int_equal(snap_write(file_dir, maps, 2, path, sizeof path), TSDF_EIO);
    free_maps(maps, 2);
}

static void test_list_prune_and_order(void **state)
{
    const char *dir = fresh_dir("prune");
    snap_map m;
    char paths[5][4096];
    for (int i = 0; i < 5; i++) {
        fill_map(&m, "default", 1, (uint64_t)i + 1);
        assert_int_equal(snap_write(dir, &m, 1, paths[i], sizeof paths[i]), TSDF_OK);
        free_maps(&m, 1);
    }
    char names[8][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    assert_int_equal(snap_list(dir, names, 8, &count), TSDF_OK);
    assert_int_equal(count, 5);
    /* Newest first, and "newest" is the order they were written in. */
    for (int i = 0; i < 5; i++)
        assert_non_null(strstr(paths[4 - i], names[i]));

    /* A crash mid-write leaves a temporary file; prune removes it. */
    char stale[4200];
    snprintf(stale, sizeof stale, "%s/.snap-abcdef.tmp", dir);
    spit(stale, (const unsigned char *)"partial", 7);
    struct timespec old_times[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, stale, old_times, 0), 0);
    /* A fresh temporary file may be a save that has not locked it yet. */
    char fresh[4200];
    snprintf(fresh, sizeof fresh, "%s/.snap-ghijkl.tmp", dir);
    spit(fresh, (const unsigned char *)"writing", 7);
    /* Files that are not snapshots are left alone. */
    char other[4200];
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    spit(other, (const unsigned char *)"keep me", 7);

    assert_int_equal(snap_prune(dir, 2), 3 + 1);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(fresh, F_OK), 0);
    unlink(fresh);
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(snap_list(dir, names, 8, &count), TSDF_OK);
    assert_int_equal(count, 2);
    assert_non_null(strstr(paths[4], names[0]));
    assert_non_null(strstr(paths[3], names[1]));
    assert_int_equal(snap_prune(dir, 2), 0);
    assert_int_equal(snap_prune(dir, 0), 0); /* keep 0: keep all */
    assert_int_equal(snap_list(dir, names, 8, &count), TSDF_OK);
    assert_int_equal(count, 2);

    /* snap_save prunes after it writes. */
    fill_map(&m, "default", 2, 9);
    char p[4096];
    assert_int_equal(snap_save(dir, &m, 1, 1, p, sizeof p), TSDF_OK);
    free_maps(&m, 1);
    assert_int_equal(snap_list(dir, names, 8, &count), TSDF_OK);
    assert_int_equal(count, 1);
    assert_non_null(strstr(p, names[0]));

    assert_int_equal(snap_list(fresh_dir("missing"), names, 8, &count), TSDF_ENOT_FOUND);
}

/* Every refusal must be one of the documented codes and return nothing. */
static void assert_refused(const char *path, const char *what, size_t at)
{
    snap_map *got = (snap_map *)(uintptr_t)1;
    size_t n = 12345;
    int r = snap_read(path, &got, &n);
    if (!(r == TSDF_EFORMAT || r == TSDF_ECHECKSUM || r == TSDF_EVERSION))
        fail_msg("%s at %zu: snap_read returned %d (%s)", what, at, r, tsdf_strerror(r));
    assert_null(got);
    assert_int_equal(n, 0);
}

static void test_every_truncation_is_refused(void **state)
{
    const char *dir = fresh_dir("trunc");
    snap_map maps[2];
    fill_map(&maps[0], "a", 2, 5);
    fill_map(&maps[1], "b", 1, 6);
    char path[4096], bad[4200];
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_OK);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    /* Every proper prefix of the file, from empty to one byte short. */
    tsdf_log_set_level(TSDF_LOG_ERROR); /* thousands of refusals: keep the log short */
    for (size_t cut = 0; cut < len; cut++) {
        spit(bad, bytes, cut);
        assert_refused(bad, "truncated", cut);
    }
    /* And a file with extra bytes appended. */
    unsigned char *longer = malloc(len + 16);
    memcpy(longer, bytes, len);
    memset(longer + len, 0, 16);
    spit(bad, longer, len + 16);
    assert_refused(bad, "extended", len);
    /* The intact copy still reads. */
    spit(bad, bytes, len);
    snap_map *got;
    size_t n;
    assert_int_equal(snap_read(bad, &got, &n), TSDF_OK);
    assert_maps_equal(maps, got, 2);
    snap_maps_free(got, n);
    tsdf_log_set_level(TSDF_LOG_INFO);
    free(longer);
    free(bytes);
    free_maps(maps, 2);
}

static void test_every_header_bit_and_random_bits_flipped(void **state)
{
    const char *dir = fresh_dir("flip");
    snap_map maps[2];
    fill_map(&maps[0], "a", 3, 5);
    fill_map(&maps[1], "b", 2, 6);
    char path[4096], bad[4200];
    assert_int_equal(snap_write(dir, maps, 2, path, sizeof path), TSDF_OK);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    tsdf_log_set_level(TSDF_LOG_ERROR);
    /* Every bit of the header (32 + 2 * 160 + 4 bytes) and of the trailer. */
    size_t header = 32 + 2 * 160 + 4;
    for (size_t bit = 0; bit < 8 * header; bit++) {
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        spit(bad, bytes, len);
        assert_refused(bad, "header bit flip", bit);
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    for (size_t bit = 8 * (len - 20); bit < 8 * len; bit++) {
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        spit(bad, bytes, len);
        assert_refused(bad, "trailer bit flip", bit);
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    /* 3000 random single-bit flips anywhere (payload mostly). */
    for (int k = 0; k < 3000; k++) {
        size_t bit = (size_t)(tsdf_test_rng() % (8 * len));
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        spit(bad, bytes, len);
        assert_refused(bad, "random bit flip", bit);
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    tsdf_log_set_level(TSDF_LOG_INFO);
    free(bytes);
    free_maps(maps, 2);
}

static void test_distinct_codes(void **state)
{
    const char *dir = fresh_dir("codes");
    snap_map m;
    fill_map(&m, "a", 1, 1);
    char path[4096], bad[4200];
    assert_int_equal(snap_write(dir, &m, 1, path, sizeof path), TSDF_OK);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    snap_map *got;
    size_t n;

    bytes[8] = 3; /* format version 3, which does not exist yet */
    spit(bad, bytes, len);
    assert_int_equal(snap_read(bad, &got, &n), TSDF_EVERSION);
    bytes[8] = 0; /* nor did 0 ever */
    spit(bad, bytes, len);
    assert_int_equal(snap_read(bad, &got, &n), TSDF_EVERSION);
    bytes[8] = 2;

    bytes[0] = 'X'; /* magic */
    spit(bad, bytes, len);
    assert_int_equal(snap_read(bad, &got, &n), TSDF_EFORMAT);
    bytes[0] = 'T';

    bytes[len / 2] ^= 0x10; /* payload */
    spit(bad, bytes, len);
    assert_int_equal(snap_read(bad, &got, &n), TSDF_ECHECKSUM);
    bytes[len / 2] ^= 0x10;

    spit(bad, bytes, len - 1);
    assert_int_equal(snap_read(bad, &got, &n), TSDF_EFORMAT);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/none.tsdfsnap", dir);
    assert_int_equal(snap_read(missing, &got, &n), TSDF_ENOT_FOUND);
    assert_int_equal(snap_read(dir, &got, &n), TSDF_EIO); /* a directory */
    assert_int_equal(snap_read(NULL, &got, &n), TSDF_EINVAL);
    free(bytes);
    free_maps(&m, 1);
}

static void test_find_latest_valid_skips_corrupt(void **state)
{
    const char *dir = fresh_dir("latest");
    snap_map older, newer;
    fill_map(&older, "default", 4, 10);
    fill_map(&newer, "default", 5, 20);
    char p_old[4096], p_new[4096], found[4096];
    assert_int_equal(snap_write(dir, &older, 1, p_old, sizeof p_old), TSDF_OK);
    assert_int_equal(snap_write(dir, &newer, 1, p_new, sizeof p_new), TSDF_OK);

    snap_map *got;
    size_t n;
    assert_int_equal(snap_find_latest_valid(dir, found, sizeof found, &got, &n), TSDF_OK);
    assert_string_equal(found, p_new);
    assert_int_equal(n, 1);
    assert_maps_equal(&newer, got, 1);
    snap_maps_free(got, n);

    /* Corrupt the newest: the older one is used. */
    size_t len;
    unsigned char *bytes = slurp(p_new, &len);
    bytes[len - 100] ^= 1;
    spit(p_new, bytes, len);
    free(bytes);
    assert_int_equal(snap_find_latest_valid(dir, found, sizeof found, &got, &n), TSDF_OK);
    assert_string_equal(found, p_old);
    assert_maps_equal(&older, got, 1);
    snap_maps_free(got, n);

    /* Truncate the older one too: none left. */
    assert_int_equal(truncate(p_old, 100), 0);
    got = (snap_map *)(uintptr_t)1;
    assert_int_equal(snap_find_latest_valid(dir, found, sizeof found, &got, &n), TSDF_ENOT_FOUND);
    assert_null(got);
    assert_int_equal(n, 0);
    assert_int_equal(snap_find_latest_valid(fresh_dir("nodir"), NULL, 0, &got, &n),
                     TSDF_ENOT_FOUND);
    free_maps(&older, 1);
    free_maps(&newer, 1);
}

#define WRITERS 4
#define SAVES_EACH 6

static void *writer_main(void *arg)
{
    const char *dir = arg;
    snap_map m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "default");
    tsdf_volume_params_default(&m.params);
    tsdf_block_set_init(&m.blocks);
    tsdf_block_set_init(&m.spilled);
    assert_int_equal(tsdf_block_set_alloc(&m.blocks, 3, TSDF_LAYOUT_S16, 1e-6f, 0), TSDF_OK);
    m.spilled.layout = TSDF_LAYOUT_S16;
    m.spilled.sdf_unit_m = 1e-6f;
    m.blocks.coords[4] = 1; /* three distinct blocks: (i, 0, 0), (0, 1, 0), (0, 2, 0) */
    m.blocks.coords[7] = 2;
    intptr_t failures = 0;
    for (int i = 0; i < SAVES_EACH; i++) {
        m.blocks.coords[0] = i;
        failures += snap_save(dir, &m, 1, 2, NULL, 0) != TSDF_OK;
    }
    tsdf_block_set_fini(&m.blocks);
    return (void *)failures;
}

/* An autosave and a client's save may run at once: every save must
 * succeed (no name collision, no prune deleting a file being written), and
 * the directory must end up with exactly `keep` valid files. */
static void test_concurrent_saves(void **state)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", fresh_dir("concurrent"));
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer_main, dir), 0);
    for (int i = 0; i < WRITERS; i++) {
        void *failures;
        pthread_join(t[i], &failures);
        assert_int_equal((intptr_t)failures, 0);
    }
    char names[64][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    assert_int_equal(snap_list(dir, names, 64, &count), TSDF_OK);
    assert_int_equal(count, 2);
    assert_int_equal(count_entries(dir), 2); /* no temporary file left */
    for (size_t i = 0; i < count; i++) {
        char path[8192];
        snap_map *got;
        size_t n;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
        snap_maps_free(got, n);
    }
}

/* The real use: export a fused volume, save, load, import into a new
 * volume, and get the very same blocks back. */
static void test_engine_round_trip(void **state)
{
    tsdf_volume_params p;
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = 0.02f;
    tsdf_volume *v = NULL;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);

    tsdf_scene scene;
    tsdf_scene_init(&scene);
    const float c[3] = {0, 0, 0};
    assert_int_equal(tsdf_scene_add_sphere(&scene, c, 0.3f, NULL), TSDF_OK);
    enum { W = 80, H = 60 };
    tsdf_intrinsics K = {.fx = 70, .fy = 70, .cx = 40, .cy = 30};
    float *depth = calloc(W * H, sizeof *depth);
    assert_non_null(depth);
    const float eye[3] = {0, -1.2f, 0.2f};
    tsdf_frame f;
    memset(&f, 0, sizeof f);
    assert_int_equal(tsdf_synth_look_at(eye, c, NULL, f.T_world_cam), TSDF_OK);
    assert_int_equal(tsdf_scene_render(&scene, W, H, &K, f.T_world_cam, depth, NULL), TSDF_OK);
    f.width = W;
    f.height = H;
    f.K = K;
    f.depth_format = TSDF_DEPTH_F32;
    f.depth = depth;
    f.min_depth_m = 0.1f;
    f.max_depth_m = 5.0f;
    assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);

    snap_map m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "default");
    m.params = *tsdf_volume_get_params(v);
    tsdf_block_set_init(&m.blocks);
    assert_int_equal(tsdf_volume_export_blocks(v, &m.blocks), TSDF_OK);
    assert_true(m.blocks.count > 10);
    tsdf_volume_stats st;
    assert_int_equal(tsdf_volume_get_stats(v, &st), TSDF_OK);
    m.version = st.version;

    const char *dir = fresh_dir("engine");
    char path[4096];
    assert_int_equal(snap_write(dir, &m, 1, path, sizeof path), TSDF_OK);
    snap_map *got;
    size_t n;
    assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
    assert_int_equal(n, 1);
    assert_maps_equal(&m, got, 1);

    tsdf_volume *w = NULL;
    assert_int_equal(tsdf_volume_create(&got[0].params, &w), TSDF_OK);
    assert_int_equal(tsdf_volume_import_blocks(w, &got[0].blocks), TSDF_OK);
    tsdf_block_set again;
    tsdf_block_set_init(&again);
    assert_int_equal(tsdf_volume_export_blocks(w, &again), TSDF_OK);
    assert_int_equal(again.count, m.blocks.count);
    assert_memory_equal(again.coords, m.blocks.coords, 3 * again.count * sizeof(int32_t));
    assert_memory_equal(again.geom, m.blocks.geom, tsdf_block_set_geom_bytes(&again));

    tsdf_block_set_fini(&again);
    snap_maps_free(got, n);
    tsdf_block_set_fini(&m.blocks);
    tsdf_volume_destroy(w);
    tsdf_volume_destroy(v);
    free(depth);
}

/* ---- regressions from the code review ----------------------------------- */

/* A fresh directory that exists (fresh_dir only clears the path), for the
 * cases that create files in it by hand. */
static const char *made_dir(const char *name)
{
    const char *dir = fresh_dir(name);
    assert_int_equal(mkdir(dir, 0750), 0);
    return dir;
}

static void copy_file(const char *from, const char *to)
{
    size_t len;
    unsigned char *bytes = slurp(from, &len);
    spit(to, bytes, len);
    free(bytes);
}

/* A stale snapshot whose name carries a sequence with no successor in 64
 * bits (a client may `save` under any name in the state directory) made the
 * daemon's next sequence wrap, so that stale file stayed the "newest" and
 * every restart restored it. It must neither win "newest" over later saves
 * nor survive pruning as such. */
static void check_overflowing_name(const char *big_name)
{
    const char *dir = made_dir("seqwrap");
    snap_map m, *got = NULL;
    size_t n = 0;
    char first[4096], second[4096], latest[4096], stale[4200];

    fill_map(&m, "default", 0, 1);
    assert_int_equal(snap_write(dir, &m, 1, first, sizeof first), TSDF_OK);
    snprintf(stale, sizeof stale, "%s/%s", dir, big_name);
    copy_file(first, stale);
    assert_int_equal(unlink(first), 0);

    fill_map(&m, "default", 0, 2);
    assert_int_equal(snap_write(dir, &m, 1, second, sizeof second), TSDF_OK);
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_int_equal(n, 1);
    assert_string_equal(latest, second);
    assert_int_equal(got[0].version, 2);
    snap_maps_free(got, n);

    /* Pruning to one file keeps the daemon's own newest save. */
    assert_true(snap_prune(dir, 1) >= 0);
    assert_int_equal(access(second, F_OK), 0);

    /* The largest sequence that still has a successor, or any other far
     * ahead of the clock, neither wins "newest" nor raises the daemon's
     * next sequence: that next name is one snap_list lists, first. */
    char edge[4200], third[4096];
    snprintf(edge, sizeof edge, "%s/snap-18446744073709551614.tsdfsnap", dir);
    copy_file(stale, edge);
    assert_int_equal(unlink(stale), 0);
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_string_equal(latest, second);
    snap_maps_free(got, n);
    fill_map(&m, "default", 0, 3);
    assert_int_equal(snap_write(dir, &m, 1, third, sizeof third), TSDF_OK);
    assert_null(strstr(third, "18446744073709551615"));
    char names[8][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    assert_int_equal(snap_list(dir, names, 8, &count), TSDF_OK);
    assert_true(count >= 3);
    assert_non_null(strstr(third, names[0]));
    assert_string_equal(names[count - 1], "snap-18446744073709551614.tsdfsnap");
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_string_equal(latest, third);
    assert_int_equal(got[0].version, 3);
    snap_maps_free(got, n);
    /* Pruning keeps the daemon's newest and drops the planted one first. */
    assert_true(snap_prune(dir, 2) >= 1);
    assert_int_equal(access(third, F_OK), 0);
    assert_int_equal(access(second, F_OK), 0);
    assert_int_equal(access(edge, F_OK), -1);
}

/* Only when nothing plausible is left does a far-future file serve (a
 * clock set back by more than a day must not make a good snapshot
 * unreachable). */
/* Version 2 keeps each map's layout and colour as they are, and its
 * spilled blocks beside the resident ones; a map of s16 without colour
 * takes 2068 bytes a block (20 of coordinates and version, 2048 of
 * geometry), a third of version 1's 6164. */
static void test_layouts_colour_and_spilled_round_trip(void **state)
{
    const char *dir = fresh_dir("layouts");
    snap_map maps[4];
    (void)state;
    fill_map_as(&maps[0], "s16-grey", 5, 9, TSDF_LAYOUT_S16, 0, 0);
    fill_map_as(&maps[1], "s16-colour", 4, 10, TSDF_LAYOUT_S16, 1, 3);
    fill_map_as(&maps[2], "f32-grey", 3, 11, TSDF_LAYOUT_F32, 0, 2);
    fill_map_as(&maps[3], "f32-colour", 2, 12, TSDF_LAYOUT_F32, 1, 0);
    char path[4096];
    assert_int_equal(snap_write(dir, maps, 4, path, sizeof path), TSDF_OK);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, snap_file_size(maps, 4));
    assert_int_equal(snap_file_size(&maps[0], 1), 32 + 160 + 4 + 20 + 5 * 2068);
    assert_int_equal(snap_file_size(&maps[1], 1), 32 + 160 + 4 + 20 + 7 * (2068 + 1536));
    assert_int_equal(snap_file_size(&maps[2], 1), 32 + 160 + 4 + 20 + 5 * (20 + 4096));
    snap_map *got = NULL;
    size_t n = 0;
    assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
    assert_int_equal(n, 4);
    assert_maps_equal(maps, got, 4);
    assert_null(got[0].blocks.rgb);
    assert_non_null(got[1].spilled.rgb);
    snap_maps_free(got, n);

    /* A map whose spilled blocks are of another layout is refused. */
    maps[2].spilled.layout = TSDF_LAYOUT_S16;
    assert_int_equal(snap_write(dir, &maps[2], 1, NULL, 0), TSDF_EINVAL);
    maps[2].spilled.layout = TSDF_LAYOUT_F32;

    /* A block both resident and spilled (or twice in one set) would come
     * back over the newer copy: the reader refuses such a file whole. */
    memcpy(&maps[2].spilled.coords[3], &maps[2].blocks.coords[0], 3 * sizeof(int32_t));
    assert_int_equal(snap_write(dir, &maps[2], 1, path, sizeof path), TSDF_OK);
    tsdf_log_set_level(TSDF_LOG_ERROR);
    assert_int_equal(snap_read(path, &got, &n), TSDF_EFORMAT);
    assert_null(got);
    assert_int_equal(n, 0);
    memcpy(&maps[2].spilled.coords[3], &maps[2].spilled.coords[0], 3 * sizeof(int32_t));
    assert_int_equal(snap_write(dir, &maps[2], 1, path, sizeof path), TSDF_OK);
    assert_int_equal(snap_read(path, &got, &n), TSDF_EFORMAT);
    tsdf_log_set_level(TSDF_LOG_INFO);
    free_maps(maps, 4);
}

/* The frames the version 1 fixture was made from (tests/data/README.md)
 * into a CPU volume of `layout`. */
static tsdf_volume *fixture_volume(tsdf_layout layout)
{
    tsdf_synth_sequence seq;
    tsdf_volume_params p;
    tsdf_volume *v = NULL;
    float depth[80 * 60];
    uint8_t rgb[80 * 60 * 3];
    assert_int_equal(tsdf_synth_sequence_init(&seq, "sphere"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 80, 60), TSDF_OK);
    tsdf_volume_params_default(&p);
    p.backend = TSDF_BACKEND_CPU;
    p.voxel_size_m = 0.03f;
    p.layout = layout;
    assert_int_equal(tsdf_volume_create(&p, &v), TSDF_OK);
    for (uint32_t i = 0; i < 6; i++) {
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, i, depth, rgb, &f), TSDF_OK);
        assert_int_equal(tsdf_volume_integrate(v, &f), TSDF_OK);
    }
    return v;
}

/* A snapshot of format version 1, written by tsdfd before the storage
 * layer (tests/data/snapshot-v1-sphere.tsdfsnap), still loads: it comes as
 * f32 blocks with colour, equal voxel for voxel to what the engine
 * integrates from the same frames now; imported into an s16 volume it
 * equals that volume's own integration within the quantum, weights and
 * colours exactly. */
static void test_version1_file_still_loads(void **state)
{
    const char *path = tsdf_test_source_path("tests/data/snapshot-v1-sphere.tsdfsnap");
    snap_map *got = NULL;
    size_t n = 0;
    (void)state;
    assert_int_equal(snap_read(path, &got, &n), TSDF_OK);
    assert_int_equal(n, 1);
    assert_string_equal(got[0].name, "sphere");
    assert_int_equal(got[0].version, 6);
    assert_int_equal(got[0].params.layout, 0); /* the file does not say */
    assert_int_equal(got[0].blocks.count, 34);
    assert_int_equal(got[0].blocks.layout, TSDF_LAYOUT_F32);
    assert_non_null(got[0].blocks.rgb);
    assert_int_equal(got[0].spilled.count, 0);

    tsdf_volume *f32 = fixture_volume(TSDF_LAYOUT_F32);
    tsdf_block_set now;
    tsdf_block_set_init(&now);
    assert_int_equal(tsdf_volume_export_blocks(f32, &now), TSDF_OK);
    assert_int_equal(now.count, got[0].blocks.count);
    assert_memory_equal(now.coords, got[0].blocks.coords, 3 * now.count * sizeof(int32_t));
    assert_memory_equal(now.versions, got[0].blocks.versions, now.count * sizeof(uint64_t));
    assert_memory_equal(now.geom, got[0].blocks.geom, tsdf_block_set_geom_bytes(&now));
    assert_memory_equal(now.rgb, got[0].blocks.rgb, now.count * TSDF_BLOCK_RGB_BYTES);
    tsdf_block_set_fini(&now);
    tsdf_volume_destroy(f32);

    tsdf_volume *s16 = fixture_volume(TSDF_LAYOUT_S16), *loaded = NULL;
    tsdf_volume_params p = *tsdf_volume_get_params(s16);
    assert_int_equal(tsdf_volume_create(&p, &loaded), TSDF_OK);
    assert_int_equal(tsdf_volume_import_blocks(loaded, &got[0].blocks), TSDF_OK);
    tsdf_block_set a, b;
    tsdf_block_set_init(&a);
    tsdf_block_set_init(&b);
    assert_int_equal(tsdf_volume_export_blocks(s16, &a), TSDF_OK);
    assert_int_equal(tsdf_volume_export_blocks(loaded, &b), TSDF_OK);
    assert_int_equal(a.count, b.count);
    assert_int_equal(b.layout, TSDF_LAYOUT_S16);
    const float unit = a.sdf_unit_m;
    size_t differ = 0;
    for (size_t i = 0; i < a.count; i++) {
        for (unsigned k = 0; k < TSDF_BLOCK_VOXELS; k++) {
            tsdf_vox x = tsdf_block_set_get(&a, i, k), y = tsdf_block_set_get(&b, i, k);
            assert_true(x.weight == y.weight);
            /* Integrated in s16, every frame rounds; converted once from
             * f32, once: they differ by a few units at most. */
            assert_true(fabsf(x.sdf_m - y.sdf_m) <= 8.0f * unit);
            differ += x.sdf_m != y.sdf_m;
        }
    }
    assert_memory_equal(a.rgb, b.rgb, a.count * TSDF_BLOCK_RGB_BYTES);
    print_message("version 1 fixture into s16: %zu of %zu voxels differ, by at most 8 units of "
                  "%.3g m\n",
                  differ, a.count * TSDF_BLOCK_VOXELS, (double)unit);
    tsdf_block_set_fini(&a);
    tsdf_block_set_fini(&b);
    tsdf_volume_destroy(s16);
    tsdf_volume_destroy(loaded);
    snap_maps_free(got, n);
}

static void test_future_snapshot_is_the_last_resort(void **state)
{
    (void)state;
    const char *dir = made_dir("future");
    snap_map m, *got = NULL;
    size_t n = 0;
    char first[4096], future[4200], latest[4096];

    fill_map(&m, "default", 0, 7);
    assert_int_equal(snap_write(dir, &m, 1, first, sizeof first), TSDF_OK);
    snprintf(future, sizeof future, "%s/snap-10000000000000000000.tsdfsnap", dir);
    assert_int_equal(rename(first, future), 0);
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_string_equal(latest, future);
    assert_int_equal(got[0].version, 7);
    snap_maps_free(got, n);
}

/* Client-chosen files: written atomically under exactly their name, never
 * under a name of the daemon's own files. */
static void test_write_file_refuses_reserved_names(void **state)
{
    (void)state;
    const char *dir = made_dir("clientnames");
    snap_map m, *got = NULL;
    size_t n = 0;
    char p[4200];

    fill_map(&m, "default", 2, 5);
    static const char *const reserved[] = {"snap-18446744073709551614.tsdfsnap", "snap-1.tsdfsnap",
                                           "snap-.tsdfsnap", ".snap-x.tmp", ".snap-"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        assert_true(snap_name_is_reserved(reserved[i]));
        snprintf(p, sizeof p, "%s/%s", dir, reserved[i]);
        assert_int_equal(snap_write_file(p, &m, 1), TSDF_EINVAL);
        assert_int_equal(access(p, F_OK), -1);
    }
    snprintf(p, sizeof p, "%s/", dir);
    assert_int_equal(snap_write_file(p, &m, 1), TSDF_EINVAL);
    assert_false(snap_name_is_reserved("snap-1.tsdfsnap.bak"));
    assert_false(snap_name_is_reserved("mysnap-1.tsdfsnap"));
    snprintf(p, sizeof p, "%s/robot.tsdfsnap", dir);
    assert_int_equal(snap_write_file(p, &m, 1), TSDF_OK);
    assert_int_equal(snap_read(p, &got, &n), TSDF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(got[0].version, 5);
    snap_maps_free(got, n);
    /* No snapshot of the daemon's appeared on the way (the old code wrote
     * one and renamed it). */
    char names[4][SNAP_FILE_NAME_LEN];
    size_t count = 9;
    assert_int_equal(snap_list(dir, names, 4, &count), TSDF_OK);
    assert_int_equal(count, 0);
    free_maps(&m, 1);
}

static void test_snapshot_sequence_beyond_u64_is_not_newest(void **state)
{
    (void)state;
    check_overflowing_name("snap-99999999999999999999.tsdfsnap");
    check_overflowing_name("snap-18446744073709551615.tsdfsnap");
}

/* snap_list kept the first `max` names in readdir order instead of the
 * newest ones when a directory held more than `max`. */
static void test_snap_list_keeps_the_newest_when_full(void **state)
{
    (void)state;
    const char *dir = made_dir("listfull");
    /* 40 files created in a scrambled order, so that no directory order
     * happens to put the newest first. */
    enum { FILES = 40, MAX = 8 };
    for (int k = 0; k < FILES; k++) {
        int seq = 1 + (k * 17) % FILES;
        char p[4200];
        snprintf(p, sizeof p, "%s/snap-%020d.tsdfsnap", dir, seq);
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        fclose(f);
    }
    char names[MAX][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    assert_int_equal(snap_list(dir, names, MAX, &count), TSDF_OK);
    assert_int_equal(count, MAX);
    for (int i = 0; i < MAX; i++) {
        char want[SNAP_FILE_NAME_LEN];
        snprintf(want, sizeof want, "snap-%020d.tsdfsnap", FILES - i);
        assert_string_equal(names[i], want);
    }
    /* max 0 lists nothing and touches no buffer. */
    assert_int_equal(snap_list(dir, NULL, 0, &count), TSDF_OK);
    assert_int_equal(count, 0);
}

/* snap_read (a client's `load PATH`) opened a FIFO before checking that it
 * is a regular file, and so blocked its request context forever. */
static void test_snap_read_refuses_a_fifo_at_once(void **state)
{
    (void)state;
    const char *dir = made_dir("fifo");
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/snap-00000000000000000001.tsdfsnap", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snap_map *got = NULL;
    size_t n = 0;
    /* Before the fix open(2) blocked until a writer came: the alarm turns
     * that hang into a failure (SIGALRM ends the program). */
    alarm(10);
    assert_int_equal(snap_read(fifo, &got, &n), TSDF_EIO);
    assert_null(got);
    /* The directory scan refuses it too, and reports "none". */
    char latest[4096];
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_ENOT_FOUND);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_write_refuses_bad_input),
        cmocka_unit_test(test_list_prune_and_order),
        cmocka_unit_test(test_every_truncation_is_refused),
        cmocka_unit_test(test_every_header_bit_and_random_bits_flipped),
        cmocka_unit_test(test_distinct_codes),
        cmocka_unit_test(test_find_latest_valid_skips_corrupt),
        cmocka_unit_test(test_concurrent_saves),
        cmocka_unit_test(test_engine_round_trip),
        cmocka_unit_test(test_layouts_colour_and_spilled_round_trip),
        cmocka_unit_test(test_version1_file_still_loads),
        cmocka_unit_test(test_snapshot_sequence_beyond_u64_is_not_newest),
        cmocka_unit_test(test_future_snapshot_is_the_last_resort),
        cmocka_unit_test(test_write_file_refuses_reserved_names),
        cmocka_unit_test(test_snap_list_keeps_the_newest_when_full),
        cmocka_unit_test(test_snap_read_refuses_a_fifo_at_once),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tsdf_test_tmpdir());
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tsdf_test_tmpdir());
    return r;
}
