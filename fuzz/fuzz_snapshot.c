/*
 * fuzz_snapshot.c - libFuzzer target: the snapshot reader (snap_read) and
 * what the daemon does next with a file it accepts (a fresh CPU volume
 * from the file's parameters, tsdf_volume_import_blocks, as worker.c's
 * import job does).
 *
 * snap_read takes a path, so each input goes through a scratch file (tmpfs
 * where there is one). Every input is read twice: as it is (the refusal
 * paths, the checksums) and with its checksums repaired (fuzz_snap_repair),
 * so that mutations reach the size and parameter checks behind the crc32s.
 *
 * Invariants beyond "no crash": known codes only; nothing returned on
 * error; a file that reads OK has consistent counts (its size is exactly
 * what snap_file_size says for what was read), terminated, distinct names,
 * sane parameters; it writes back (snap_write_file) and reads again to the
 * same content; and an import that succeeds keeps every block.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "log.h"
#include "snapshot.h"
#include "tsdf_error.h"
#include "tsdf_volume.h"
#include "tsdf_voxel_layout.h"

/* The daemon sizes a restored volume's table from the file; the harness
 * caps it so that each run stays fast (the blocks themselves are bounded
 * by the input's length). */
#define FUZZ_MAX_CAPACITY_BLOCKS 1024u

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Every refusal is logged at WARN: the fuzzer makes millions. */
    tsdf_log_set_level(TSDF_LOG_ERROR);
    return 0;
}

static int params_equal(const tsdf_volume_params *a, const tsdf_volume_params *b)
{
    return a->voxel_size_m == b->voxel_size_m && a->trunc_vox == b->trunc_vox &&
           a->max_weight == b->max_weight &&
           a->initial_capacity_blocks == b->initial_capacity_blocks &&
           a->max_load_factor == b->max_load_factor && a->backend == b->backend &&
           a->memory_cap_bytes == b->memory_cap_bytes && a->cuda_device == b->cuda_device;
}

static void check_set(const tsdf_block_set *s)
{
    FUZZ_CHECK(s->count == 0 || (s->coords && s->versions && s->geom));
    FUZZ_CHECK(s->layout == TSDF_LAYOUT_F32 || s->layout == TSDF_LAYOUT_S16);
}

/* format: the file's format version (snap_file_size is the size the
 * current one, 2, writes). */
static void check_maps(const snap_map *m, size_t n, size_t file_size, uint32_t format)
{
    FUZZ_CHECK(n <= SNAP_MAX_MAPS);
    FUZZ_CHECK(n == 0 || m != NULL);
    FUZZ_CHECK(format != SNAP_FORMAT_VERSION || snap_file_size(m, n) == file_size);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(memchr(m[i].name, '\0', SNAP_NAME_LEN) != NULL && m[i].name[0] != '\0');
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(m[i].name, m[j].name) != 0);
        const tsdf_volume_params *p = &m[i].params;
        FUZZ_CHECK(isfinite(p->voxel_size_m) && p->voxel_size_m > 0);
        FUZZ_CHECK(isfinite(p->trunc_vox) && p->trunc_vox > 0);
        FUZZ_CHECK(p->backend >= TSDF_BACKEND_AUTO && p->backend <= TSDF_BACKEND_CUDA);
        const tsdf_block_set *s = &m[i].blocks;
        check_set(s);
        check_set(&m[i].spilled);
        FUZZ_CHECK(m[i].spilled.layout == s->layout);
        FUZZ_CHECK(s->version == m[i].version);
    }
}

static void check_same_set(const tsdf_block_set *x, const tsdf_block_set *y)
{
    FUZZ_CHECK(x->count == y->count);
    if (x->count == 0)
        return;
    FUZZ_CHECK(x->layout == y->layout);
    FUZZ_CHECK(memcmp(x->coords, y->coords, x->count * 3 * sizeof *x->coords) == 0);
    FUZZ_CHECK(memcmp(x->versions, y->versions, x->count * sizeof *x->versions) == 0);
    FUZZ_CHECK(memcmp(x->geom, y->geom, tsdf_block_set_geom_bytes(x)) == 0);
    /* A set without colour is written black beside one with colour. */
    if (x->rgb != NULL && y->rgb != NULL)
        FUZZ_CHECK(memcmp(x->rgb, y->rgb, x->count * TSDF_BLOCK_RGB_BYTES) == 0);
}

static void check_same(const snap_map *a, const snap_map *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(strcmp(a[i].name, b[i].name) == 0);
        FUZZ_CHECK(params_equal(&a[i].params, &b[i].params));
        FUZZ_CHECK(a[i].version == b[i].version);
        check_same_set(&a[i].blocks, &b[i].blocks);
        check_same_set(&a[i].spilled, &b[i].spilled);
    }
}

/* The daemon's import of one map, on the CPU backend. */
static void import_map(const snap_map *m)
{
    tsdf_volume_params p = m->params;
    p.backend = TSDF_BACKEND_CPU;
    p.cuda_device = 0;
    /* A version 1 file leaves the layout to the daemon, as persist.c does. */
    if (p.layout == 0)
        p.layout = TSDF_LAYOUT_S16;
    if (p.initial_capacity_blocks > FUZZ_MAX_CAPACITY_BLOCKS)
        p.initial_capacity_blocks = FUZZ_MAX_CAPACITY_BLOCKS;
    tsdf_volume *v = NULL;
    int rc = tsdf_volume_create(&p, &v);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc != TSDF_OK)
        return;
    rc = tsdf_volume_import_blocks(v, &m->blocks);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc == TSDF_OK) {
        tsdf_block_set out;
        tsdf_block_set_init(&out);
        FUZZ_CHECK(tsdf_volume_export_blocks(v, &out) == TSDF_OK);
        FUZZ_CHECK(out.count == m->blocks.count);
        FUZZ_CHECK(m->blocks.count == 0 || out.version > m->blocks.version ||
                   m->blocks.version == UINT64_MAX);
        tsdf_block_set_fini(&out);
    }
    tsdf_volume_destroy(v);
}

static int read_one(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("in.tsdfsnap", data, size);
    snap_map *maps = (snap_map *)(uintptr_t)1;
    size_t n = 99;
    int rc = snap_read(path, &maps, &n);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc != TSDF_OK) {
        FUZZ_CHECK(maps == NULL && n == 0);
        return rc;
    }
    check_maps(maps, n, size, size >= 12 ? (uint32_t)data[8] : 0);

    const char *copy = fuzz_path("copy.tsdf");
    FUZZ_CHECK(snap_write_file(copy, maps, n) == TSDF_OK);
    snap_map *again = NULL;
    size_t n_again = 0;
    FUZZ_CHECK(snap_read(copy, &again, &n_again) == TSDF_OK);
    FUZZ_CHECK(n_again == n);
    check_same(maps, again, n);
    snap_maps_free(again, n_again);

    for (size_t i = 0; i < n; i++)
        import_map(&maps[i]);
    snap_maps_free(maps, n);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int raw = read_one(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    FUZZ_CHECK(fixed != NULL);
    memcpy(fixed, data, size);
    fuzz_snap_repair(fixed, size);
    if (memcmp(fixed, data, size) != 0) {
        /* Repairs touch only checksums and the trailer's size: in a file
         * that read they were all right already. */
        FUZZ_CHECK(raw != TSDF_OK);
        read_one(fixed, size);
    }
    free(fixed);
    return 0;
}
