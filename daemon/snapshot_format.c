/*
 * snapshot_format.c - the bytes of a snapshot file: version 2 written,
 * versions 1 and 2 read (see snapshot_format.h and docs/OPERATIONS.md,
 * "File format").
 *
 * Version 2 stores each map's voxels as its volume stores them: the
 * geometry in the map's layout (4 bytes a voxel for s16, 8 for f32) and a
 * colour channel only when the map has colour, so a snapshot of an s16 map
 * without colour takes a third of what version 1 took. It also carries the
 * map's spilled blocks (evicted to disk, not in the volume). Version 1
 * files (12-byte voxels: f32 sdf, f32 weight, rgb, pad) are read into f32
 * block sets with colour when any voxel has some, and their maps take the
 * daemon's configured layout (layout 0 here).
 */
#define _GNU_SOURCE

#include "snapshot_format.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "log.h"
#include "tsdf_error.h"
#include "tsdf_math.h"
#include "tsdf_voxel_layout.h"

#define FILE_MAGIC "TSDFSNAP"
#define TAIL_MAGIC "TSDFTAIL"
#define FIXED_HEADER_BYTES 32u
#define HEADER_CRC_BYTES 4u
#define TRAILER_BYTES 20u
#define RECORD_HEAD_BYTES 20u /* coordinates (12) and version (8) of a block record */

/* Format version 1: 136-byte map entries, 12-byte voxels. */
#define V1_ENTRY_BYTES 136u
#define V1_VOXEL_BYTES 12u
#define V1_RECORD_BYTES (RECORD_HEAD_BYTES + TSDF_BLOCK_VOXELS * V1_VOXEL_BYTES) /* 6164 */
/* Format version 2: 160-byte map entries, records of the map's layout. */
#define V2_ENTRY_BYTES 160u
#define V2_FLAG_RGB 1u

/* ---- little-endian encoding ------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(p, v);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static float get_f32(const uint8_t *p)
{
    uint32_t v = get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* zlib's crc32 takes a uInt length; feed large buffers in pieces. */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return crc;
}

int snapfmt_refuse(const char *path, int err, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    TSDF_LOG(TSDF_LOG_WARN, "snapshot: %s refused (%s): %s", path, tsdf_errname(err), why);
    return err;
}

/* ---- what a map's records look like -------------------------------------- */

/* Whether a map's records carry a colour channel: when either of its sets
 * has one (a set without writes black). */
static int map_has_rgb(const snap_map *m)
{
    return m->blocks.rgb != NULL || m->spilled.rgb != NULL;
}

static size_t record_bytes(tsdf_layout layout, int with_rgb)
{
    return RECORD_HEAD_BYTES + tsdf_layout_block_bytes(layout) +
           (with_rgb ? TSDF_BLOCK_RGB_BYTES : 0);
}

static size_t map_record_bytes(const snap_map *m)
{
    return record_bytes(m->blocks.layout, map_has_rgb(m));
}

static uint64_t map_payload_bytes(const snap_map *m)
{
    return (uint64_t)(m->blocks.count + m->spilled.count) * map_record_bytes(m);
}

static size_t header_bytes(size_t n)
{
    return FIXED_HEADER_BYTES + n * V2_ENTRY_BYTES + HEADER_CRC_BYTES;
}

uint64_t snap_file_size(const snap_map *maps, size_t n)
{
    uint64_t size = header_bytes(n) + TRAILER_BYTES;
    for (size_t i = 0; i < n; i++)
        size += map_payload_bytes(&maps[i]);
    return size;
}

static int set_ok(const tsdf_block_set *s, tsdf_layout layout, float unit)
{
    if (s->count == 0)
        return 1;
    return s->coords != NULL && s->geom != NULL && s->layout == layout &&
           (layout != TSDF_LAYOUT_S16 || s->sdf_unit_m == unit);
}

int snapfmt_check_maps(const snap_map *maps, size_t n)
{
    if (n > SNAP_MAX_MAPS || (n > 0 && !maps))
        return TSDF_EINVAL;
    for (size_t i = 0; i < n; i++) {
        const snap_map *m = &maps[i];
        size_t len = strnlen(m->name, SNAP_NAME_LEN);
        if (len == 0 || len >= SNAP_NAME_LEN)
            return TSDF_EINVAL;
        /* Both sets in one layout (the map's), each with its arrays. */
        const tsdf_layout l = m->blocks.layout;
        if (tsdf_layout_voxel_bytes(l) == 0 || !set_ok(&m->blocks, l, m->blocks.sdf_unit_m) ||
            !set_ok(&m->spilled, l, m->blocks.sdf_unit_m))
            return TSDF_EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(m->name, maps[j].name) == 0)
                return TSDF_EINVAL;
        }
    }
    return TSDF_OK;
}

/* ---- writing ---------------------------------------------------------- */

static void encode_record(uint8_t *rec, const tsdf_block_set *s, size_t i, int with_rgb)
{
    const size_t gb = tsdf_layout_block_bytes(s->layout);
    for (int k = 0; k < 3; k++)
        put_u32(rec + 4 * k, (uint32_t)s->coords[3 * i + k]);
    put_u64(rec + 12, s->versions ? s->versions[i] : 0);
    /* The channels are little-endian already (tsdf_voxel_layout.h). */
    memcpy(rec + RECORD_HEAD_BYTES, (const uint8_t *)s->geom + i * gb, gb);
    if (with_rgb) {
        uint8_t *c = rec + RECORD_HEAD_BYTES + gb;
        if (s->rgb != NULL)
            memcpy(c, s->rgb + i * TSDF_BLOCK_RGB_BYTES, TSDF_BLOCK_RGB_BYTES);
        else
            memset(c, 0, TSDF_BLOCK_RGB_BYTES);
    }
}

static void encode_entry(uint8_t *e, const snap_map *m, uint32_t payload_crc)
{
    memset(e, 0, V2_ENTRY_BYTES);
    memcpy(e, m->name, strnlen(m->name, SNAP_NAME_LEN - 1));
    const tsdf_volume_params *p = &m->params;
    put_f32(e + 64, p->voxel_size_m);
    put_f32(e + 68, p->trunc_vox);
    put_f32(e + 72, p->max_weight);
    put_u32(e + 76, p->initial_capacity_blocks);
    put_f32(e + 80, p->max_load_factor);
    put_u32(e + 84, (uint32_t)p->backend);
    put_u64(e + 88, p->memory_cap_bytes);
    put_u32(e + 96, (uint32_t)p->cuda_device);
    put_u32(e + 100, (uint32_t)m->blocks.layout);
    put_u64(e + 104, m->version);
    put_u64(e + 112, (uint64_t)m->blocks.count);
    put_u64(e + 120, map_payload_bytes(m));
    put_u32(e + 128, payload_crc);
    put_u32(e + 132, map_has_rgb(m) ? V2_FLAG_RGB : 0);
    put_u64(e + 136, (uint64_t)m->spilled.count);
    put_f32(e + 144, m->blocks.layout == TSDF_LAYOUT_S16 ? m->blocks.sdf_unit_m : 0.0f);
    /* e + 148 .. 159: reserved, zero */
}

static int write_all(FILE *f, const void *p, size_t len)
{
    return fwrite(p, 1, len, f) == len ? TSDF_OK : TSDF_EIO;
}

/* Writes one set's records, updating both checksums. */
static int write_set(FILE *f, const tsdf_block_set *s, int with_rgb, uint8_t *rec, size_t rec_len,
                     uint32_t *crc, uint32_t *all_crc)
{
    for (size_t b = 0; b < s->count; b++) {
        encode_record(rec, s, b, with_rgb);
        *crc = crc_update(*crc, rec, rec_len);
        *all_crc = crc_update(*all_crc, rec, rec_len);
        if (write_all(f, rec, rec_len) != TSDF_OK)
            return TSDF_EIO;
    }
    return TSDF_OK;
}

/* The header goes first as a placeholder: the payload checksums it holds
 * are known only after the payloads are written, so it is rewritten in
 * place at the end, and the whole-file checksum is put together from the
 * pieces with crc32_combine. */
int snapfmt_write(FILE *f, const snap_map *maps, size_t n)
{
    size_t hdr_len = header_bytes(n);
    uint8_t *hdr = calloc(1, hdr_len);
    uint8_t *rec = malloc(record_bytes(TSDF_LAYOUT_F32, 1));
    uint32_t *payload_crc = calloc(n ? n : 1, sizeof *payload_crc);
    int r = TSDF_ENOMEM;
    if (!hdr || !rec || !payload_crc)
        goto done;

    r = write_all(f, hdr, hdr_len);
    uint32_t all_payload_crc = (uint32_t)crc32(0, NULL, 0);
    uint64_t all_payload_len = 0;
    for (size_t i = 0; i < n && r == TSDF_OK; i++) {
        const snap_map *m = &maps[i];
        const int rgb = map_has_rgb(m);
        const size_t rec_len = map_record_bytes(m);
        uint32_t crc = (uint32_t)crc32(0, NULL, 0);
        r = write_set(f, &m->blocks, rgb, rec, rec_len, &crc, &all_payload_crc);
        if (r == TSDF_OK)
            r = write_set(f, &m->spilled, rgb, rec, rec_len, &crc, &all_payload_crc);
        payload_crc[i] = crc;
        all_payload_len += map_payload_bytes(m);
    }
    if (r != TSDF_OK)
        goto done;

    memcpy(hdr, FILE_MAGIC, 8);
    put_u32(hdr + 8, SNAP_FORMAT_VERSION);
    put_u32(hdr + 12, (uint32_t)n);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    put_u64(hdr + 16, (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
    /* hdr + 24 .. 31: reserved, zero */
    for (size_t i = 0; i < n; i++)
        encode_entry(hdr + FIXED_HEADER_BYTES + i * V2_ENTRY_BYTES, &maps[i], payload_crc[i]);
    size_t crc_at = hdr_len - HEADER_CRC_BYTES;
    put_u32(hdr + crc_at, crc_update((uint32_t)crc32(0, NULL, 0), hdr, crc_at));

    if (fseek(f, 0, SEEK_SET) != 0 || write_all(f, hdr, hdr_len) != TSDF_OK ||
        fseek(f, 0, SEEK_END) != 0) {
        r = TSDF_EIO;
        goto done;
    }

    uint8_t tail[TRAILER_BYTES];
    uint64_t total = hdr_len + all_payload_len + TRAILER_BYTES;
    memcpy(tail, TAIL_MAGIC, 8);
    put_u64(tail + 8, total);
    uint32_t file_crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, hdr_len);
    file_crc = (uint32_t)crc32_combine(file_crc, all_payload_crc, (z_off_t)all_payload_len);
    file_crc = crc_update(file_crc, tail, 16);
    put_u32(tail + 16, file_crc);
    r = write_all(f, tail, TRAILER_BYTES);

done:
    free(hdr);
    free(rec);
    free(payload_crc);
    return r;
}

/* ---- reading ---------------------------------------------------------- */

void snap_maps_free(snap_map *maps, size_t n)
{
    if (!maps)
        return;
    for (size_t i = 0; i < n; i++) {
        tsdf_block_set_fini(&maps[i].blocks);
        tsdf_block_set_fini(&maps[i].spilled);
    }
    free(maps);
}

static int read_exact(FILE *f, void *p, size_t len)
{
    return fread(p, 1, len, f) == len ? TSDF_OK : TSDF_EIO;
}

/* What a map entry says about its payload, beside the map itself. */
typedef struct {
    uint64_t resident, spilled; /* block counts */
    uint64_t payload_len;
    uint32_t payload_crc;
    int with_rgb;
    size_t record_len;
} entry_info;

/* Decodes and checks one directory entry of format `format`. */
static int decode_entry(const char *path, uint32_t format, const uint8_t *e, snap_map *m,
                        entry_info *info)
{
    if (memchr(e, '\0', SNAP_NAME_LEN) == NULL || e[0] == '\0')
        return snapfmt_refuse(path, TSDF_EFORMAT, "map name empty or not terminated");
    memcpy(m->name, e, SNAP_NAME_LEN);
    tsdf_volume_params *p = &m->params;
    p->voxel_size_m = get_f32(e + 64);
    p->trunc_vox = get_f32(e + 68);
    p->max_weight = get_f32(e + 72);
    p->initial_capacity_blocks = get_u32(e + 76);
    p->max_load_factor = get_f32(e + 80);
    uint32_t backend = get_u32(e + 84);
    p->memory_cap_bytes = get_u64(e + 88);
    p->cuda_device = (int32_t)get_u32(e + 96);
    m->version = get_u64(e + 104);
    info->resident = get_u64(e + 112);
    info->payload_len = get_u64(e + 120);
    info->payload_crc = get_u32(e + 128);
    if (backend > TSDF_BACKEND_CUDA)
        return snapfmt_refuse(path, TSDF_EFORMAT, "map %s: unknown backend %u", m->name, backend);
    p->backend = (tsdf_backend)backend;
    if (!(isfinite(p->voxel_size_m) && p->voxel_size_m > 0) ||
        !(isfinite(p->trunc_vox) && p->trunc_vox > 0) ||
        !(isfinite(p->max_weight) && p->max_weight > 0) ||
        !(isfinite(p->max_load_factor) && p->max_load_factor > 0))
        return snapfmt_refuse(path, TSDF_EFORMAT, "map %s: volume parameters out of range",
                              m->name);
    tsdf_layout layout = TSDF_LAYOUT_F32;
    float unit = 0.0f;
    if (format == 1) {
        /* The map's layout is the daemon's to choose (see the top). */
        p->layout = (tsdf_layout)0;
        info->spilled = 0;
        info->with_rgb = 1;
        info->record_len = V1_RECORD_BYTES;
    } else {
        uint32_t l = get_u32(e + 100), flags = get_u32(e + 132);
        if (l != TSDF_LAYOUT_F32 && l != TSDF_LAYOUT_S16)
            return snapfmt_refuse(path, TSDF_EFORMAT, "map %s: unknown voxel layout %u", m->name,
                                  l);
        if ((flags & ~V2_FLAG_RGB) != 0)
            return snapfmt_refuse(path, TSDF_EFORMAT, "map %s: unknown flags %#x", m->name, flags);
        layout = (tsdf_layout)l;
        p->layout = layout;
        unit = get_f32(e + 144);
        if (layout == TSDF_LAYOUT_S16 && !(isfinite(unit) && unit > 0.0f))
            return snapfmt_refuse(path, TSDF_EFORMAT, "map %s: s16 layout without a unit", m->name);
        info->spilled = get_u64(e + 136);
        info->with_rgb = (flags & V2_FLAG_RGB) != 0;
        info->record_len = record_bytes(layout, info->with_rgb);
    }
    m->blocks.layout = m->spilled.layout = layout;
    m->blocks.sdf_unit_m = m->spilled.sdf_unit_m = unit;
    /* An import continues the map's versions above the snapshot's. */
    m->blocks.version = m->version;
    const uint64_t blocks = info->resident + info->spilled;
    if (info->resident > UINT64_MAX / 2 || info->spilled > UINT64_MAX / 2 ||
        blocks > UINT64_MAX / info->record_len || info->payload_len != blocks * info->record_len)
        return snapfmt_refuse(path, TSDF_EFORMAT,
                              "map %s: %" PRIu64 " blocks do not fill %" PRIu64 " payload bytes",
                              m->name, blocks, info->payload_len);
    return TSDF_OK;
}

static void decode_v1_record(const uint8_t *rec, tsdf_block_set *s, size_t i)
{
    for (int k = 0; k < 3; k++)
        s->coords[3 * i + k] = (int32_t)get_u32(rec + 4 * k);
    s->versions[i] = get_u64(rec + 12);
    tsdf_geom_f32 *g = (tsdf_geom_f32 *)s->geom + i * TSDF_BLOCK_VOXELS;
    uint8_t *c = s->rgb + i * TSDF_BLOCK_RGB_BYTES;
    const uint8_t *p = rec + RECORD_HEAD_BYTES;
    for (size_t j = 0; j < TSDF_BLOCK_VOXELS; j++, p += V1_VOXEL_BYTES) {
        g[j].sdf_m = get_f32(p);
        g[j].weight = get_f32(p + 4);
        memcpy(c + 3 * j, p + 8, 3);
    }
}

static void decode_v2_record(const uint8_t *rec, tsdf_block_set *s, size_t i)
{
    const size_t gb = tsdf_layout_block_bytes(s->layout);
    for (int k = 0; k < 3; k++)
        s->coords[3 * i + k] = (int32_t)get_u32(rec + 4 * k);
    s->versions[i] = get_u64(rec + 12);
    memcpy((uint8_t *)s->geom + i * gb, rec + RECORD_HEAD_BYTES, gb);
    if (s->rgb != NULL)
        memcpy(s->rgb + i * TSDF_BLOCK_RGB_BYTES, rec + RECORD_HEAD_BYTES + gb,
               TSDF_BLOCK_RGB_BYTES);
}

/* A version 1 map "has colour" when a voxel has some: the format kept none
 * apart. An all-black channel is dropped. */
static void drop_black_rgb(tsdf_block_set *s)
{
    if (s->rgb == NULL)
        return;
    for (size_t i = 0; i < s->count * TSDF_BLOCK_RGB_BYTES; i++)
        if (s->rgb[i] != 0)
            return;
    free(s->rgb);
    s->rgb = NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* TSDF_OK when no block of m is there twice, in its resident set or its
 * spilled one or in both (a spilled block that is also resident would
 * overwrite the newer one when it came back). */
static int check_unique_blocks(const char *path, const snap_map *m)
{
    const size_t n = m->blocks.count + m->spilled.count;
    if (n < 2)
        return TSDF_OK;
    uint64_t *keys = malloc(n * sizeof(*keys));
    if (keys == NULL)
        return TSDF_ENOMEM;
    const tsdf_block_set *sets[2] = {&m->blocks, &m->spilled};
    size_t k = 0;
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->count; i++) {
            const int32_t *c = &sets[s]->coords[3 * i];
            /* The packed key keeps 21 bits a coordinate; one outside that
             * range is the import's to refuse, and is left out here. */
            if (tsdf_block_coord_valid(c[0], c[1], c[2]))
                keys[k++] = tsdf_block_key(c[0], c[1], c[2]);
        }
    qsort(keys, k, sizeof(*keys), cmp_u64);
    int r = TSDF_OK;
    for (size_t i = 1; i < k && r == TSDF_OK; i++)
        if (keys[i] == keys[i - 1]) {
            int32_t x, y, z;
            tsdf_block_key_unpack(keys[i], &x, &y, &z);
            r = snapfmt_refuse(path, TSDF_EFORMAT, "map %s: block (%d, %d, %d) appears twice",
                               m->name, x, y, z);
        }
    free(keys);
    return r;
}

/* Reads one map's payload (its entry checked) into its two sets. */
static int read_payload(const char *path, FILE *f, uint32_t format, snap_map *m,
                        const entry_info *info, uint8_t *rec, uint32_t *file_crc)
{
    tsdf_block_set *sets[2] = {&m->blocks, &m->spilled};
    const uint64_t counts[2] = {info->resident, info->spilled};
    uint32_t pcrc = (uint32_t)crc32(0, NULL, 0);
    for (int k = 0; k < 2; k++) {
        tsdf_block_set *s = sets[k];
        const tsdf_layout layout = s->layout;
        const float unit = s->sdf_unit_m;
        int r = tsdf_block_set_alloc(s, (size_t)counts[k], layout, unit, info->with_rgb);
        if (r != TSDF_OK)
            return r;
        for (size_t b = 0; b < s->count; b++) {
            if (read_exact(f, rec, info->record_len) != TSDF_OK)
                return snapfmt_refuse(path, TSDF_EIO, "read failed in map %s", m->name);
            pcrc = crc_update(pcrc, rec, info->record_len);
            *file_crc = crc_update(*file_crc, rec, info->record_len);
            if (format == 1)
                decode_v1_record(rec, s, b);
            else
                decode_v2_record(rec, s, b);
        }
        if (format == 1)
            drop_black_rgb(s);
    }
    m->blocks.version = m->version;
    if (pcrc != info->payload_crc)
        return snapfmt_refuse(path, TSDF_ECHECKSUM, "map %s: payload crc32 %08x, expected %08x",
                              m->name, pcrc, info->payload_crc);
    return check_unique_blocks(path, m);
}

int snapfmt_read(const char *path, FILE *f, uint64_t file_size, snap_map **out, size_t *out_n)
{
    uint8_t fixed[FIXED_HEADER_BYTES];
    if (file_size < FIXED_HEADER_BYTES + HEADER_CRC_BYTES + TRAILER_BYTES)
        return snapfmt_refuse(path, TSDF_EFORMAT, "%" PRIu64 " bytes: too short for a snapshot",
                              file_size);
    if (read_exact(f, fixed, sizeof fixed) != TSDF_OK)
        return snapfmt_refuse(path, TSDF_EIO, "cannot read the header: %s", strerror(errno));
    if (memcmp(fixed, FILE_MAGIC, 8) != 0)
        return snapfmt_refuse(path, TSDF_EFORMAT, "no TSDFSNAP magic");
    const uint32_t format = get_u32(fixed + 8);
    if (format != 1 && format != SNAP_FORMAT_VERSION)
        return snapfmt_refuse(path, TSDF_EVERSION, "format version %u, this build reads 1 and %u",
                              format, SNAP_FORMAT_VERSION);
    const size_t entry_len = format == 1 ? V1_ENTRY_BYTES : V2_ENTRY_BYTES;
    uint32_t n = get_u32(fixed + 12);
    if (n > SNAP_MAX_MAPS)
        return snapfmt_refuse(path, TSDF_EFORMAT, "%u maps, more than %u", n, SNAP_MAX_MAPS);
    size_t hdr_len = FIXED_HEADER_BYTES + (size_t)n * entry_len + HEADER_CRC_BYTES;
    if (file_size < hdr_len + TRAILER_BYTES)
        return snapfmt_refuse(path, TSDF_EFORMAT, "truncated inside the header");

    int r = TSDF_ENOMEM;
    uint8_t *hdr = malloc(hdr_len);
    uint8_t *rec =
        malloc(record_bytes(TSDF_LAYOUT_F32, 1) > V1_RECORD_BYTES ? record_bytes(TSDF_LAYOUT_F32, 1)
                                                                  : V1_RECORD_BYTES);
    snap_map *maps = calloc(n ? n : 1, sizeof *maps);
    entry_info *info = calloc(n ? n : 1, sizeof *info);
    if (!hdr || !rec || !maps || !info)
        goto fail;
    memcpy(hdr, fixed, FIXED_HEADER_BYTES);
    if (read_exact(f, hdr + FIXED_HEADER_BYTES, hdr_len - FIXED_HEADER_BYTES) != TSDF_OK) {
        r = snapfmt_refuse(path, TSDF_EIO, "cannot read the header: %s", strerror(errno));
        goto fail;
    }
    size_t crc_at = hdr_len - HEADER_CRC_BYTES;
    uint32_t crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, crc_at);
    if (crc != get_u32(hdr + crc_at)) {
        r = snapfmt_refuse(path, TSDF_ECHECKSUM, "header crc32 %08x, expected %08x", crc,
                           get_u32(hdr + crc_at));
        goto fail;
    }

    /* The header is intact; now its sizes must add up to the file's size
     * exactly, before anything is allocated from them. */
    uint64_t expect = hdr_len + TRAILER_BYTES;
    for (uint32_t i = 0; i < n; i++) {
        r = decode_entry(path, format, hdr + FIXED_HEADER_BYTES + (size_t)i * entry_len, &maps[i],
                         &info[i]);
        if (r != TSDF_OK)
            goto fail;
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(maps[i].name, maps[j].name) == 0) {
                r = snapfmt_refuse(path, TSDF_EFORMAT, "map %s appears twice", maps[i].name);
                goto fail;
            }
        }
        if (info[i].payload_len > file_size || expect > file_size - info[i].payload_len) {
            r = snapfmt_refuse(path, TSDF_EFORMAT,
                               "truncated: the header describes more bytes than the "
                               "file's %" PRIu64,
                               file_size);
            goto fail;
        }
        expect += info[i].payload_len;
    }
    if (expect != file_size) {
        r = snapfmt_refuse(path, TSDF_EFORMAT,
                           "file has %" PRIu64 " bytes, header describes %" PRIu64, file_size,
                           expect);
        goto fail;
    }

    uint32_t file_crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, hdr_len);
    for (uint32_t i = 0; i < n; i++) {
        r = read_payload(path, f, format, &maps[i], &info[i], rec, &file_crc);
        if (r != TSDF_OK)
            goto fail;
    }

    uint8_t tail[TRAILER_BYTES];
    if (read_exact(f, tail, TRAILER_BYTES) != TSDF_OK) {
        r = snapfmt_refuse(path, TSDF_EIO, "cannot read the trailer");
        goto fail;
    }
    if (memcmp(tail, TAIL_MAGIC, 8) != 0 || get_u64(tail + 8) != file_size) {
        r = snapfmt_refuse(path, TSDF_EFORMAT, "trailer missing or of the wrong size");
        goto fail;
    }
    file_crc = crc_update(file_crc, tail, 16);
    if (file_crc != get_u32(tail + 16)) {
        r = snapfmt_refuse(path, TSDF_ECHECKSUM, "file crc32 %08x, expected %08x", file_crc,
                           get_u32(tail + 16));
        goto fail;
    }

    free(hdr);
    free(rec);
    free(info);
    *out = maps;
    *out_n = n;
    return TSDF_OK;

fail:
    if (maps)
        snap_maps_free(maps, n);
    free(hdr);
    free(rec);
    free(info);
    return r;
}
