/*
 * test_spill.c - the spill store (daemon/spill.c): blocks evicted from a
 * real volume go to chunk files and come back intact by distance (exactly
 * the blocks within the radius, the chunks they share split); a later
 * put replaces blocks of the same coordinates and keeps the others; read
 * all leaves the store as it is; open empties what a crash left; clear
 * and destroy remove the files.
 *
 * A damaged chunk file -- truncated, a byte flipped, replaced by garbage,
 * by a symbolic link to a valid chunk, by a FIFO, or by another chunk's
 * valid file -- costs exactly its own blocks: read all, take near and put
 * still succeed with every other block, the file is removed and the
 * damage is counted.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- damaged chunk files ------------------------------------------------ */

typedef enum {
    DAMAGE_TRUNCATE, /* cut to half its length */
    DAMAGE_FLIP,     /* one byte of its payload changed */
    DAMAGE_GARBAGE,  /* the same length of other bytes */
    DAMAGE_SYMLINK,  /* a link to a copy of itself outside the store */
    DAMAGE_FIFO,     /* not a regular file */
    DAMAGE_SWAPPED,  /* a valid file of another chunk in its place */
    DAMAGE_COUNT
} damage_kind;

static const char *const damage_names[DAMAGE_COUNT] = {"truncated", "flipped", "garbage",
                                                       "symlink",   "fifo",    "swapped"};

/* What the damaged store is asked next. */
typedef enum { OP_READ_ALL, OP_TAKE_NEAR, OP_PUT, OP_COUNT } damage_op;

static const char *const op_names[OP_COUNT] = {"read all", "take near", "put"};

static void copy_file(const char *from, const char *to)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

/* The chunk files of dir, sorted by name, into names (at most max). */
static size_t chunk_files(const char *dir, char names[][64], size_t max)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max)
        if (de->d_name[0] == 'c')
            snprintf(names[n++], 64, "%.63s", de->d_name);
    closedir(d);
    qsort(names, n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

static void damage_file(const char *dir, const char *name, const char *other, damage_kind kind)
{
    char path[4200], aside[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(stat(path, &st), 0);
    switch (kind) {
    case DAMAGE_TRUNCATE:
        assert_int_equal(truncate(path, st.st_size / 2), 0);
        break;
    case DAMAGE_FLIP: {
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, st.st_size / 2, SEEK_SET), 0);
        int c = fgetc(f);
        assert_int_equal(fseek(f, st.st_size / 2, SEEK_SET), 0);
        fputc(c ^ 0x5a, f);
        assert_int_equal(fclose(f), 0);
        break;
    }
    case DAMAGE_GARBAGE: {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        for (off_t i = 0; i < st.st_size; i++)
            fputc((int)((i * 2654435761u) >> 13) & 0xff, f);
        assert_int_equal(fclose(f), 0);
        break;
    }
    case DAMAGE_SYMLINK:
        /* A link to a valid copy of the very file: only the refusal to
         * follow links keeps it out. */
        snprintf(aside, sizeof aside, "%s/../../aside-%s", dir, name);
        copy_file(path, aside);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink(aside, path), 0);
        break;
    case DAMAGE_FIFO:
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mkfifo(path, 0600), 0);
        break;
    case DAMAGE_SWAPPED:
        snprintf(aside, sizeof aside, "%s/%s", dir, other);
        copy_file(aside, path);
        break;
    default:
        fail();
    }
}

/* The chunk of a chunk file's name, as spill.c names them. */
static void chunk_of_name(const char *name, int32_t c[3])
{
    assert_int_equal(sscanf(name, "c%d_%d_%d", &c[0], &c[1], &c[2]), 3);
}

static int in_chunk(const int32_t b[3], const int32_t c[3])
{
    return (b[0] >> 4) == c[0] && (b[1] >> 4) == c[1] && (b[2] >> 4) == c[2];
}

/* out's blocks outside chunk c, in out's order (sorted by key). */
static void blocks_outside(const tsdf_block_set *out, const int32_t c[3], tsdf_block_set *rest)
{
    size_t n = 0;
    for (size_t i = 0; i < out->count; i++)
        n += !in_chunk(&out->coords[3 * i], c);
    assert_int_equal(tsdf_block_set_alloc(rest, n, out->layout, out->sdf_unit_m, out->rgb != NULL),
                     TSDF_OK);
    const size_t gb = tsdf_layout_block_bytes(out->layout);
    size_t k = 0;
    for (size_t i = 0; i < out->count; i++) {
        if (in_chunk(&out->coords[3 * i], c))
            continue;
        memcpy(&rest->coords[3 * k], &out->coords[3 * i], 3 * sizeof(int32_t));
        rest->versions[k] = out->versions[i];
        memcpy((uint8_t *)rest->geom + k * gb, (const uint8_t *)out->geom + i * gb, gb);
        if (out->rgb != NULL)
            memcpy(rest->rgb + k * TSDF_BLOCK_RGB_BYTES, out->rgb + i * TSDF_BLOCK_RGB_BYTES,
                   TSDF_BLOCK_RGB_BYTES);
        k++;
    }
    rest->count = k;
}

/* Spills out, damages one chunk file in one way, asks the store op, and
 * checks that exactly that chunk's blocks are gone. */
static void damage_case(const char *dir, const tsdf_volume_params *p, const tsdf_block_set *out,
                        damage_kind kind, damage_op op)
{
    spill_store *s = NULL;
    char names[256][64];
    assert_int_equal(spill_open(dir, p, &s), TSDF_OK);
    assert_int_equal(spill_put(s, out), TSDF_OK);
    const size_t chunks = spill_chunks(s);
    size_t n = chunk_files(dir, names, 256);
    assert_int_equal(n, chunks);
    assert_true(n >= 3);
    /* The middle chunk, so that others lie on both sides of it. */
    const char *victim = names[n / 2], *other = names[n / 2 + 1];
    int32_t c[3];
    chunk_of_name(victim, c);
    tsdf_block_set rest, got;
    tsdf_block_set_init(&rest);
    tsdf_block_set_init(&got);
    blocks_outside(out, c, &rest);
    const size_t lost = out->count - rest.count;
    assert_true(lost > 0);
    damage_file(dir, victim, other, kind);

    switch (op) {
    case OP_READ_ALL:
        assert_int_equal(spill_read_all(s, &got), TSDF_OK);
        assert_same_blocks(&got, &rest);
        break;
    case OP_TAKE_NEAR: {
        /* Centred on the damaged chunk, reaching everything. */
        const float block_m = TSDF_BLOCK_DIM * p->voxel_size_m;
        const float centre[3] = {(float)c[0] * 16 * block_m, (float)c[1] * 16 * block_m,
                                 (float)c[2] * 16 * block_m};
        assert_int_equal(spill_take_near(s, centre, 1e6f, &got), TSDF_OK);
        assert_same_blocks(&got, &rest);
        assert_int_equal(spill_blocks(s), 0);
        break;
    }
    case OP_PUT: {
        /* The first of the victim's blocks, spilled anew: it goes in, and
         * the store holds it beside every undamaged block. */
        tsdf_block_set one;
        tsdf_block_set_init(&one);
        size_t first = 0;
        while (!in_chunk(&out->coords[3 * first], c))
            first++;
        assert_int_equal(tsdf_block_set_alloc(&one, 1, out->layout, out->sdf_unit_m, 0), TSDF_OK);
        memcpy(one.coords, &out->coords[3 * first], 3 * sizeof(int32_t));
        one.versions[0] = 777;
        assert_int_equal(spill_put(s, &one), TSDF_OK);
        assert_int_equal(spill_blocks(s), rest.count + 1);
        assert_int_equal(spill_read_all(s, &got), TSDF_OK);
        assert_int_equal(got.count, rest.count + 1);
        size_t found = 0;
        for (size_t i = 0; i < got.count; i++)
            if (in_chunk(&got.coords[3 * i], c)) {
                assert_int_equal(got.versions[i], 777);
                found++;
            }
        assert_int_equal(found, 1);
        tsdf_block_set_fini(&one);
        break;
    }
    default:
        fail();
    }
    assert_int_equal(spill_take_damaged(s), 1);
    assert_int_equal(spill_take_damaged(s), 0);
    if (op == OP_READ_ALL) {
        /* The damaged file is gone, the others are as they were. */
        assert_int_equal(spill_chunks(s), chunks - 1);
        assert_int_equal(spill_blocks(s), rest.count);
        assert_int_equal(files_in(dir), chunks - 1);
        /* And asking again finds nothing more wrong. */
        tsdf_block_set again;
        tsdf_block_set_init(&again);
        assert_int_equal(spill_read_all(s, &again), TSDF_OK);
        assert_same_blocks(&again, &rest);
        assert_int_equal(spill_take_damaged(s), 0);
        tsdf_block_set_fini(&again);
    }
    print_message("%s, %s chunk %s, %s: %zu of %zu blocks lost, the rest intact\n",
                  tsdf_layout_name(p->layout), damage_names[kind], victim, op_names[op], lost,
                  out->count);
    tsdf_block_set_fini(&got);
    tsdf_block_set_fini(&rest);
    spill_destroy(s);
}

static void damaged_chunks(tsdf_layout layout)
{
    const char *dir = fresh_dir(layout == TSDF_LAYOUT_S16 ? "damage-s16" : "damage-f32");
    tsdf_volume *v = room_volume(layout);
    tsdf_block_select q;
    tsdf_block_set out;
    size_t erased = 0;
    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    q.center_m[2] = 0.3f;
    q.radius_m = 1.0f;
    tsdf_block_set_init(&out);
    assert_int_equal(tsdf_volume_evict(v, &q, &out, &erased), TSDF_OK);
    assert_true(out.rgb != NULL); /* a colour channel, so every kind of record is damaged */
    tsdf_log_set_level(TSDF_LOG_ERROR);
    for (int k = 0; k < DAMAGE_COUNT; k++)
        for (int op = 0; op < OP_COUNT; op++)
            damage_case(dir, tsdf_volume_get_params(v), &out, (damage_kind)k, (damage_op)op);
    tsdf_log_set_level(TSDF_LOG_INFO);
    tsdf_block_set_fini(&out);
    tsdf_volume_destroy(v);
}

static void test_spill_damaged_chunk_costs_its_blocks_alone(void **state)
{
    (void)state;
    damaged_chunks(TSDF_LAYOUT_S16);
    damaged_chunks(TSDF_LAYOUT_F32);
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
        cmocka_unit_test(test_spill_damaged_chunk_costs_its_blocks_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
