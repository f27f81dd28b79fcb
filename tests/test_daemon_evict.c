/*
 * test_daemon_evict.c - eviction in a real daemon ([eviction], CPU backend,
 * private ipc:// sockets): a camera walks a long corridor and back.
 *
 *   spill    the map's memory stops growing once the corridor is longer
 *            than the radius, the blocks left behind are in the spill store
 *            (counted, and in the snapshot file beside the resident ones),
 *            and when the camera comes back they return bit for bit as
 *            they left; a restart keeps them spilled.
 *   drop     the same plateau, the blocks left behind are gone, and an
 *            incremental mesh lists them as removed.
 *   on_full  a map capped far below the corridor takes every frame when
 *            on_full = evict, and refuses frames (CAPACITY) when it is
 *            refuse.
 *   damage   one spill chunk file truncated, flipped, replaced by garbage
 *            or by a link costs its own blocks alone: frames near it,
 *            saves, the save at stop and the restore all succeed, and
 *            every other block is in the snapshot bit for bit.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"
#include "snapshot.h"
#include "tsdf_math.h"
#include "tsdf_voxel_layout.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define W 80
#define H 60
#define MAX_DEPTH_M 3.0f
#define VOXEL_M 0.04f
/* Camera x positions: out along the corridor in STEP_M steps. */
#define STEP_M 0.25f
#define FAR_X_M 24.0f
#define N_OUT ((int)(FAR_X_M / STEP_M) + 1)

#define VOLUME_INI                                                                                 \
    "[volume]\nvoxel_size_m = 0.04\nlayout = s16\n"                                                \
    "[eviction]\nradius_m = 3\ncheck_frames = 4\n"

/* A floor, and a box every 2 m on alternate sides, 26 m long. */
static void corridor(tsdf_scene *s)
{
    const float floor_p[3] = {0, 0, 0}, up[3] = {0, 0, 1};
    tsdf_scene_init(s);
    assert_int_equal(tsdf_scene_add_plane(s, floor_p, up, NULL), TSDF_OK);
    for (int i = 0; i < 13; i++) {
        const float c[3] = {1.0f + 2.0f * (float)i, i % 2 ? 1.2f : -1.2f, 0.5f};
        const float half[3] = {0.3f, 0.3f, 0.5f};
        assert_int_equal(tsdf_scene_add_box(s, c, half, NULL), TSDF_OK);
    }
}

typedef struct {
    tsdf_scene scene;
    float depth[W * H];
    float zeros[W * H];
    tsdf_frame frame;
} walker;

/* The frame of a camera at (x, 0, 1.2) looking down the corridor; with
 * blind, every sample is "no measurement". */
static const tsdf_frame *frame_at(walker *w, float x, int blind)
{
    const float eye[3] = {x, 0.0f, 1.2f}, target[3] = {x + 3.0f, 0.0f, 0.3f};
    tsdf_frame *f = &w->frame;
    memset(f, 0, sizeof *f);
    f->width = W;
    f->height = H;
    f->K.fx = f->K.fy = 60.0f;
    f->K.cx = (W - 1) / 2.0f;
    f->K.cy = (H - 1) / 2.0f;
    assert_int_equal(tsdf_synth_look_at(eye, target, NULL, f->T_world_cam), TSDF_OK);
    assert_int_equal(tsdf_scene_render(&w->scene, W, H, &f->K, f->T_world_cam, w->depth, NULL),
                     TSDF_OK);
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = blind ? w->zeros : w->depth;
    f->min_depth_m = 0.1f;
    f->max_depth_m = MAX_DEPTH_M;
    return f;
}

static int64_t map_blocks(tsdf_client *c, tsdf_rep_stats *st)
{
    assert_int_equal(tsdf_client_stats(c, "hall", st, 10000), TSDF_OK);
    assert_true(st->has_engine);
    return (int64_t)st->engine.blocks_allocated;
}

/* Walks out to FAR_X_M; returns the most blocks the map held while the
 * camera was in the first third, and (in *late_max) in the last third. */
static int64_t walk_out(tsdf_client *c, walker *w, tsdf_rep_stats *st, int64_t *late_max,
                        int *refused)
{
    int64_t early = 0, late = 0;
    *refused = 0;
    for (int i = 0; i < N_OUT; i++) {
        const float x = STEP_M * (float)i;
        int rc = integrate_into(c, "hall", frame_at(w, x, 0));
        if (rc == TSDF_ECAPACITY)
            (*refused)++;
        else
            assert_int_equal(rc, TSDF_OK);
        if (i % 4 != 3)
            continue;
        int64_t b = map_blocks(c, st);
        if (x < FAR_X_M / 3)
            early = b > early ? b : early;
        else if (x > 2 * FAR_X_M / 3)
            late = b > late ? b : late;
    }
    *late_max = late;
    return early;
}

/* Saves every map; the one map "hall" of the file is read into *out. */
static snap_map *save_and_read(tsdf_client *c, size_t *n)
{
    tsdf_rep_path sp;
    snap_map *maps = NULL;
    assert_int_equal(tsdf_client_save(c, NULL, NULL, &sp, 30000), TSDF_OK);
    assert_int_equal(snap_read(sp.path, &maps, n), TSDF_OK);
    return maps;
}

static const snap_map *find_hall(const snap_map *maps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(maps[i].name, "hall") == 0)
            return &maps[i];
    fail_msg("no map 'hall' in the snapshot");
    return NULL;
}

static long find_block(const tsdf_block_set *s, const int32_t key[3])
{
    for (size_t i = 0; i < s->count; i++)
        if (memcmp(&s->coords[3 * i], key, 3 * sizeof(int32_t)) == 0)
            return (long)i;
    return -1;
}

/* How far the centre of block i of s is from p, metres. */
static double block_dist(const tsdf_block_set *s, size_t i, const float p[3])
{
    const double b = TSDF_BLOCK_DIM * (double)VOXEL_M;
    double d2 = 0;
    for (int a = 0; a < 3; a++) {
        double c = ((double)s->coords[3 * i + a] + 0.5) * b - p[a];
        d2 += c * c;
    }
    return sqrt(d2);
}

static void test_spill_keeps_memory_flat_and_brings_blocks_back(void **state)
{
    tsdfd_harness h, b;
    walker *w = calloc(1, sizeof *w);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    int64_t late, early;
    int refused;
    size_t n_far, n_back;
    (void)state;

    assert_non_null(w);
    assert_non_null(st);
    corridor(&w->scene);
    assert_int_equal(start_daemon(&h, VOLUME_INI "mode = spill\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    early = walk_out(c, w, st, &late, &refused);
    assert_int_equal(refused, 0);

    /* The map stopped growing: the last third holds about what the first
     * did, though the camera saw twice as much corridor since. */
    print_message("spill: at most %lld blocks early, %lld late\n", (long long)early,
                  (long long)late);
    assert_true(early > 0);
    assert_true(late <= early + early / 4);
    int64_t evicted = stat_get(st, "map.blocks_evicted");
    int64_t spilled = stat_get(st, "map.blocks_spilled");
    assert_true(evicted > 0);
    assert_int_equal(spilled, evicted); /* none came back yet */
    assert_int_equal(stat_get(st, "map.blocks_restored"), 0);

    /* The snapshot holds both: what is resident and what was spilled. */
    snap_map *far = save_and_read(c, &n_far);
    const snap_map *hall_far = find_hall(far, n_far);
    assert_int_equal((int64_t)hall_far->spilled.count, spilled);
    assert_int_equal((int64_t)hall_far->blocks.count, map_blocks(c, st));
    assert_true(hall_far->spilled.count > hall_far->blocks.count);
    for (size_t i = 0; i < hall_far->spilled.count; i++)
        assert_int_equal(find_block(&hall_far->blocks, &hall_far->spilled.coords[3 * i]), -1);

    /* Back at the start, blind (no depth: nothing changes a voxel): the
     * blocks that frame can reach come back as they left. */
    assert_int_equal(integrate_into(c, "hall", frame_at(w, 0.0f, 1)), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "hall", st, 10000), TSDF_OK);
    int64_t restored = stat_get(st, "map.blocks_restored");
    assert_true(restored > 0);
    snap_map *back = save_and_read(c, &n_back);
    const snap_map *hall_back = find_hall(back, n_back);
    const float start[3] = {0.0f, 0.0f, 1.2f};
    const size_t geom = tsdf_block_set_geom_bytes(&hall_far->spilled) / hall_far->spilled.count;
    size_t compared = 0;
    for (size_t i = 0; i < hall_far->spilled.count; i++) {
        long j = find_block(&hall_back->blocks, &hall_far->spilled.coords[3 * i]);
        if (j < 0) {
            /* Still spilled: then out of the frame's reach. */
            assert_true(block_dist(&hall_far->spilled, i, start) > MAX_DEPTH_M);
            continue;
        }
        assert_memory_equal((const char *)hall_far->spilled.geom + i * geom,
                            (const char *)hall_back->blocks.geom + (size_t)j * geom, geom);
        compared++;
    }
    print_message("spill: %lld restored, %zu compared bit for bit\n", (long long)restored,
                  compared);
    assert_int_equal((int64_t)compared, restored);
    /* Every block is somewhere: none lost by the round trip. */
    assert_int_equal(hall_back->blocks.count + hall_back->spilled.count,
                     hall_far->blocks.count + hall_far->spilled.count);
    snap_maps_free(far, n_far);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);

    /* A restart from the snapshot keeps the spilled blocks spilled. */
    restart_on(&h, &b, VOLUME_INI "mode = spill\n");
    c = open_client(&b, 0);
    assert_int_equal(map_blocks(c, st), (int64_t)hall_back->blocks.count);
    assert_int_equal(stat_get(st, "map.blocks_spilled"), (int64_t)hall_back->spilled.count);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    snap_maps_free(back, n_back);
    free(st);
    free(w);
}

static void test_drop_keeps_memory_flat(void **state)
{
    tsdfd_harness h;
    walker *w = calloc(1, sizeof *w);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    int64_t late, early;
    int refused;
    (void)state;

    assert_non_null(w);
    assert_non_null(st);
    corridor(&w->scene);
    assert_int_equal(start_daemon(&h, VOLUME_INI "mode = drop\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    assert_int_equal(integrate_into(c, "hall", frame_at(w, 0.0f, 0)), TSDF_OK);
    map_blocks(c, st);
    const uint64_t v0 = st->engine.version;
    early = walk_out(c, w, st, &late, &refused);
    assert_int_equal(refused, 0);
    print_message("drop: at most %lld blocks early, %lld late\n", (long long)early,
                  (long long)late);
    assert_true(late <= early + early / 4);
    assert_true(stat_get(st, "map.blocks_evicted") > 0);
    assert_int_equal(stat_get(st, "map.blocks_spilled"), 0);

    /* A viewer that meshed the start learns which blocks went: an
     * incremental mesh lists them, all far behind the camera, none among
     * its parts. */
    {
        tsdf_mesh_params mp;
        tsdf_mesh m;
        memset(&mp, 0, sizeof mp);
        mp.since_version = v0;
        mp.by_block = 1;
        tsdf_mesh_init(&m);
        assert_int_equal(tsdf_client_mesh(c, "hall", &mp, &m, NULL, 30000), TSDF_OK);
        print_message("drop: the mesh since the start removes %zu blocks, has %zu parts\n",
                      m.removed_count, m.block_count);
        assert_int_equal(m.full, 0);
        assert_true(m.removed_count > 0);
        const float here[3] = {FAR_X_M, 0.0f, 1.2f};
        const double block_m = TSDF_BLOCK_DIM * (double)VOXEL_M;
        for (size_t i = 0; i < m.removed_count; i++) {
            double d2 = 0;
            for (int a = 0; a < 3; a++) {
                double d = ((double)m.removed_coords[3 * i + a] + 0.5) * block_m - here[a];
                d2 += d * d;
            }
            assert_true(sqrt(d2) > 3.0);
            for (size_t k = 0; k < m.block_count; k++)
                assert_memory_not_equal(&m.removed_coords[3 * i], &m.block_coords[3 * k],
                                        3 * sizeof(int32_t));
        }
        tsdf_mesh_fini(&m);
    }
    /* Back at the start: nothing there any more, nothing comes back. */
    assert_int_equal(integrate_into(c, "hall", frame_at(w, 0.0f, 1)), TSDF_OK);
    assert_int_equal(tsdf_client_stats(c, "hall", st, 10000), TSDF_OK);
    assert_int_equal(stat_get(st, "map.blocks_restored"), 0);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(st);
    free(w);
}

/* 2 MiB hold about a thousand blocks of 4 cm: what one frame can reach, not the
 * corridor. */
static void walk_capped(const char *on_full, int *refused, int64_t *evicted)
{
    tsdfd_harness h;
    walker *w = calloc(1, sizeof *w);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    char ini[1024];
    int64_t late;

    assert_non_null(w);
    assert_non_null(st);
    corridor(&w->scene);
    snprintf(ini, sizeof ini,
             VOLUME_INI "mode = drop\nradius_m = 1000\non_full = %s\n"
                        "[volume]\nmemory_cap_mb = 2\ninitial_capacity_blocks = 1024\n",
             on_full);
    assert_int_equal(start_daemon(&h, ini, NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    walk_out(c, w, st, &late, refused);
    assert_int_equal(tsdf_client_stats(c, "hall", st, 10000), TSDF_OK);
    assert_true(st->engine.memory_bytes <= (2u << 20));
    *evicted = stat_get(st, "map.blocks_evicted");
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(st);
    free(w);
}

static void test_on_full_evict_takes_every_frame(void **state)
{
    int refused;
    int64_t evicted;
    (void)state;

    walk_capped("evict", &refused, &evicted);
    print_message("on_full = evict: %d refused, %lld evicted\n", refused, (long long)evicted);
    assert_int_equal(refused, 0);
    assert_true(evicted > 0);
    /* The control: the same walk under the same cap refuses frames. */
    walk_capped("refuse", &refused, &evicted);
    print_message("on_full = refuse: %d refused, %lld evicted\n", refused, (long long)evicted);
    assert_true(refused > 0);
    assert_int_equal(evicted, 0);
}

/* ---- a damaged spill file ----------------------------------------------- */

typedef enum { CUT, FLIP, GARBAGE, LINK, DAMAGE_WAYS } damage_way;
static const char *const way_names[DAMAGE_WAYS] = {"truncated", "flipped", "garbage", "symlink"};

/* Damages file path in one way. */
static void damage(const char *path, damage_way way, const char *aside)
{
    struct stat st;
    char cmd[9000];
    assert_int_equal(lstat(path, &st), 0);
    if (way == CUT) {
        assert_int_equal(truncate(path, st.st_size / 3), 0);
    } else if (way == FLIP || way == GARBAGE) {
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        const long from = way == FLIP ? st.st_size / 2 : 0;
        const long to = way == FLIP ? from + 1 : st.st_size;
        for (long i = from; i < to; i++) {
            assert_int_equal(fseek(f, i, SEEK_SET), 0);
            int c = fgetc(f);
            assert_int_equal(fseek(f, i, SEEK_SET), 0);
            fputc((c ^ 0xa5 ^ (int)(i * 31)) & 0xff, f);
        }
        assert_int_equal(fclose(f), 0);
    } else {
        /* A link to an intact copy: only the refusal to follow it keeps
         * the copy out. */
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, aside);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink(aside, path), 0);
    }
}

/* One block of a snapshot, wherever it is (resident or spilled). */
typedef struct {
    uint64_t key;
    const tsdf_block_set *set;
    size_t i;
} snap_block;

static int cmp_snap_block(const void *a, const void *b)
{
    uint64_t x = ((const snap_block *)a)->key, y = ((const snap_block *)b)->key;
    return x < y ? -1 : x > y;
}

/* Every block of map m, resident and spilled, sorted by key (the caller
 * frees the array). */
static snap_block *all_blocks(const snap_map *m, size_t *n)
{
    const tsdf_block_set *sets[2] = {&m->blocks, &m->spilled};
    *n = m->blocks.count + m->spilled.count;
    snap_block *b = malloc((*n ? *n : 1) * sizeof *b);
    assert_non_null(b);
    size_t k = 0;
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->count; i++) {
            const int32_t *c = &sets[s]->coords[3 * i];
            b[k++] = (snap_block){tsdf_block_key(c[0], c[1], c[2]), sets[s], i};
        }
    qsort(b, *n, sizeof *b, cmp_snap_block);
    return b;
}

static int in_chunk(const int32_t b[3], const int32_t c[3])
{
    return (b[0] >> 4) == c[0] && (b[1] >> 4) == c[1] && (b[2] >> 4) == c[2];
}

/* after holds every block of before, bit for bit, but those that were
 * spilled in chunk c, which it lacks (resident blocks of the same space
 * stay); returns how many were lost. */
static size_t assert_lost_only_chunk(const snap_map *before, const snap_map *after,
                                     const int32_t c[3])
{
    size_t nb, na, lost = 0;
    snap_block *b = all_blocks(before, &nb), *a = all_blocks(after, &na);
    const size_t geom = tsdf_layout_block_bytes(before->blocks.layout);
    for (size_t i = 0; i < nb; i++) {
        const int32_t *coord = &b[i].set->coords[3 * b[i].i];
        snap_block *hit = bsearch(&b[i], a, na, sizeof *a, cmp_snap_block);
        if (b[i].set == &before->spilled && in_chunk(coord, c)) {
            assert_null(hit);
            lost++;
            continue;
        }
        assert_non_null(hit);
        assert_memory_equal((const char *)b[i].set->geom + b[i].i * geom,
                            (const char *)hit->set->geom + hit->i * geom, geom);
    }
    assert_int_equal(na, nb - lost);
    free(b);
    free(a);
    return lost;
}

/* The first spill chunk file of map hall by name, into name; its chunk
 * into c. 0 when there is none. */
static int first_chunk(const tsdfd_harness *h, char *path, size_t len, int32_t c[3])
{
    char dir[4200], best[256] = "";
    snprintf(dir, sizeof dir, "%s/spill/hall", h->state_dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] == 'c' && (best[0] == '\0' || strcmp(de->d_name, best) < 0))
            snprintf(best, sizeof best, "%s", de->d_name);
    closedir(d);
    if (best[0] == '\0')
        return 0;
    assert_int_equal(sscanf(best, "c%d_%d_%d", &c[0], &c[1], &c[2]), 3);
    snprintf(path, len, "%s/%s", dir, best);
    return 1;
}

/* Where a camera reaches a block of chunk c: the x of the first such
 * block of m (resident or spilled). */
static float chunk_block_x(const snap_map *m, const int32_t c[3])
{
    for (size_t i = 0; i < m->spilled.count; i++)
        if (in_chunk(&m->spilled.coords[3 * i], c))
            return ((float)m->spilled.coords[3 * i] + 0.5f) * TSDF_BLOCK_DIM * VOXEL_M;
    fail_msg("chunk %d,%d,%d holds no spilled block", c[0], c[1], c[2]);
    return 0;
}

static void test_damaged_spill_file_costs_its_blocks_alone(void **state)
{
    tsdfd_harness h, b;
    walker *w = calloc(1, sizeof *w);
    tsdf_rep_stats *st = calloc(1, sizeof *st);
    int64_t late;
    int refused;
    size_t n_prev, n_cur;
    (void)state;

    assert_non_null(w);
    assert_non_null(st);
    corridor(&w->scene);
    assert_int_equal(start_daemon(&h, VOLUME_INI "mode = spill\n", NULL), 0);
    tsdf_client *c = open_client(&h, 0);
    walk_out(c, w, st, &late, &refused);
    assert_int_equal(refused, 0);
    assert_true(stat_get(st, "map.blocks_spilled") > 0);
    assert_int_equal(stat_get(st, "spill.chunks_damaged"), 0);
    snap_map *prev = save_and_read(c, &n_prev);

    for (int way = 0; way < DAMAGE_WAYS; way++) {
        char path[4400], aside[4400];
        int32_t chunk[3];
        assert_true(first_chunk(&h, path, sizeof path, chunk));
        const float x = chunk_block_x(find_hall(prev, n_prev), chunk);
        snprintf(aside, sizeof aside, "%s/aside-%d", h.dir, way);
        damage(path, way, aside);
        /* Half the ways meet the damage in a frame that reaches the chunk
         * (its blocks would come back), half in a save that reads it. */
        snap_map *cur;
        if (way % 2 == 0) {
            assert_int_equal(integrate_into(c, "hall", frame_at(w, x, 1)), TSDF_OK);
            cur = save_and_read(c, &n_cur);
        } else {
            cur = save_and_read(c, &n_cur);
            assert_int_equal(integrate_into(c, "hall", frame_at(w, x, 1)), TSDF_OK);
        }
        assert_int_equal(tsdf_client_stats(c, "hall", st, 10000), TSDF_OK);
        assert_int_equal(stat_get(st, "spill.chunks_damaged"), way + 1);
        size_t lost = assert_lost_only_chunk(find_hall(prev, n_prev), find_hall(cur, n_cur), chunk);
        assert_true(lost > 0);
        struct stat ls;
        assert_int_not_equal(lstat(path, &ls), 0); /* the damaged file is gone */
        print_message("damage: %s chunk %d,%d,%d: %zu blocks lost, %zu kept bit for bit\n",
                      way_names[way], chunk[0], chunk[1], chunk[2], lost,
                      find_hall(cur, n_cur)->blocks.count + find_hall(cur, n_cur)->spilled.count);
        snap_maps_free(prev, n_prev);
        prev = cur;
        n_prev = n_cur;
        /* The lost space is unobserved: a frame that sees it now
         * integrates into fresh blocks there. */
        int64_t before = map_blocks(c, st);
        assert_int_equal(integrate_into(c, "hall", frame_at(w, x, 0)), TSDF_OK);
        assert_true(map_blocks(c, st) > before);
        snap_maps_free(prev, n_prev);
        prev = save_and_read(c, &n_prev);
    }
    tsdf_client_close(c);

    /* The save at stop succeeds (the exit status says so), and a restart
     * restores every block it held. */
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    const snap_map *last = find_hall(prev, n_prev);
    restart_on(&h, &b, VOLUME_INI "mode = spill\n");
    c = open_client(&b, 0);
    assert_int_equal(map_blocks(c, st), (int64_t)last->blocks.count);
    assert_int_equal(stat_get(st, "map.blocks_spilled"), (int64_t)last->spilled.count);
    assert_int_equal(stat_get(st, "spill.chunks_damaged"), 0);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    snap_maps_free(prev, n_prev);
    free(st);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spill_keeps_memory_flat_and_brings_blocks_back),
        cmocka_unit_test(test_drop_keeps_memory_flat),
        cmocka_unit_test(test_on_full_evict_takes_every_frame),
        cmocka_unit_test(test_damaged_spill_file_costs_its_blocks_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
