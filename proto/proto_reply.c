/*
 * proto_reply.c - replies on the wire: tsdf_reply's constructors, its
 * decoder and its encoder, with the tables of the stats reply that both
 * directions share so that they cannot drift apart.
 */
#include "tsdf_proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_read.h"
#include "proto_utf8.h"
#include "proto_write.h"

/* ---- constructors ------------------------------------------------------- */

void tsdf_reply_init(tsdf_reply *r, tsdf_msg_type type, uint64_t id)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    r->id = id;
}

void tsdf_reply_set_error(tsdf_reply *r, int status, const char *fmt, ...)
{
    r->status = status;
    snprintf(r->error, sizeof(r->error), "%s", tsdf_errname(status));
    if (fmt == NULL) {
        snprintf(r->message, sizeof(r->message), "%s", tsdf_strerror(status));
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
    /* The daemon formats the client's own bytes into messages (map names,
     * paths, the type it could not parse), and the buffer may cut a
     * character in two. A str that is not UTF-8 makes strict decoders drop
     * the whole reply, so the message is repaired here, once, for every
     * caller; controls go too, as the message also ends up in logs. */
    proto_utf8_sanitize(r->message);
}

/* ---- the stats tables --------------------------------------------------- */

/* Key order and names of the engine stats map, shared by encoder and decoder. */
typedef enum { ST_U64, ST_U32, ST_F64 } stat_kind;
typedef struct {
    const char *key;
    stat_kind kind;
    size_t offset;
} stat_field;

static const stat_field engine_fields[] = {
    {"blocks_allocated", ST_U64, offsetof(tsdf_volume_stats, blocks_allocated)},
    {"capacity_slots", ST_U64, offsetof(tsdf_volume_stats, capacity_slots)},
    {"load_factor", ST_F64, offsetof(tsdf_volume_stats, load_factor)},
    {"max_probe", ST_U32, offsetof(tsdf_volume_stats, max_probe)},
    {"mean_probe", ST_F64, offsetof(tsdf_volume_stats, mean_probe)},
    {"growth_events", ST_U64, offsetof(tsdf_volume_stats, growth_events)},
    {"frames_integrated", ST_U64, offsetof(tsdf_volume_stats, frames_integrated)},
    {"frames_rejected", ST_U64, offsetof(tsdf_volume_stats, frames_rejected)},
    {"insert_failures", ST_U64, offsetof(tsdf_volume_stats, insert_failures)},
    {"memory_bytes", ST_U64, offsetof(tsdf_volume_stats, memory_bytes)},
    {"memory_cap_bytes", ST_U64, offsetof(tsdf_volume_stats, memory_cap_bytes)},
    {"version", ST_U64, offsetof(tsdf_volume_stats, version)},
    {"pool_capacity_blocks", ST_U64, offsetof(tsdf_volume_stats, pool_capacity_blocks)},
    {"blocks_erased", ST_U64, offsetof(tsdf_volume_stats, blocks_erased)},
    {"last_upload_ms", ST_F64, offsetof(tsdf_volume_stats, last_upload_ms)},
    {"last_alloc_ms", ST_F64, offsetof(tsdf_volume_stats, last_alloc_ms)},
    {"last_update_ms", ST_F64, offsetof(tsdf_volume_stats, last_update_ms)},
    {"last_raycast_ms", ST_F64, offsetof(tsdf_volume_stats, last_raycast_ms)},
    {"last_mesh_ms", ST_F64, offsetof(tsdf_volume_stats, last_mesh_ms)},
};
#define ENGINE_FIELD_COUNT (sizeof(engine_fields) / sizeof(engine_fields[0]))

static const char *backend_wire_name(tsdf_backend b)
{
    switch (b) {
    case TSDF_BACKEND_CPU:
        return "cpu";
    case TSDF_BACKEND_CUDA:
        return "cuda";
    default:
        return "auto";
    }
}

/* "layout" is written only for a layout this side knows, and read back as
 * 0 when absent or unknown: a newer daemon may store voxels in a layout
 * this reader has no name for, and a stats reply is for showing, so that
 * must not make the whole reply unreadable. Shared by "engine" and
 * "params". */
static int layout_known(tsdf_layout l)
{
    return l == TSDF_LAYOUT_F32 || l == TSDF_LAYOUT_S16;
}

static int read_layout(const proto_reader *r, tsdf_layout *out)
{
    char name[8] = "";
    int present = 0;
    PROTO_TRY(proto_get_str(r, "layout", name, sizeof(name), 1, &present));
    if (!present || tsdf_layout_parse(name, out) != TSDF_OK)
        *out = (tsdf_layout)0;
    return TSDF_OK;
}

static void w_layout(proto_writer *w, tsdf_layout l)
{
    if (layout_known(l))
        proto_w_str(w, "layout", tsdf_layout_name(l));
}

/* Key names of a timeline entry, shared by encoder and decoder. */
static const struct {
    const char *key;
    size_t offset;
} timeline_fields[] = {
    {"upload_start_ms", offsetof(tsdf_frame_timeline, upload_start_ms)},
    {"upload_end_ms", offsetof(tsdf_frame_timeline, upload_end_ms)},
    {"alloc_start_ms", offsetof(tsdf_frame_timeline, alloc_start_ms)},
    {"alloc_end_ms", offsetof(tsdf_frame_timeline, alloc_end_ms)},
    {"update_start_ms", offsetof(tsdf_frame_timeline, update_start_ms)},
    {"update_end_ms", offsetof(tsdf_frame_timeline, update_end_ms)},
};
#define TIMELINE_FIELD_COUNT (sizeof(timeline_fields) / sizeof(timeline_fields[0]))

/* ---- decoding ----------------------------------------------------------- */

static int read_engine_stats(const proto_reader *r, tsdf_volume_stats *st)
{
    char name[8] = "";
    int present = 0;
    PROTO_TRY(proto_get_str(r, "backend", name, sizeof(name), 1, &present));
    if (!present || strcmp(name, "auto") == 0)
        st->backend = TSDF_BACKEND_AUTO;
    else if (strcmp(name, "cpu") == 0)
        st->backend = TSDF_BACKEND_CPU;
    else if (strcmp(name, "cuda") == 0)
        st->backend = TSDF_BACKEND_CUDA;
    else
        return proto_fail(r->err, TSDF_EPROTO_KEY, "backend", "backend: unknown name \"%s\"", name);
    for (size_t i = 0; i < ENGINE_FIELD_COUNT; i++) {
        const stat_field *f = &engine_fields[i];
        char *dst = (char *)st + f->offset;
        if (f->kind == ST_F64) {
            double d = 0.0;
            PROTO_TRY(proto_get_number(r, f->key, 0, &d, &present));
            memcpy(dst, &d, sizeof(d));
        } else {
            uint64_t u = 0;
            PROTO_TRY(proto_get_uint(r, f->key, f->kind == ST_U32 ? UINT32_MAX : UINT64_MAX, &u,
                                     &present));
            if (f->kind == ST_U32) {
                uint32_t u32 = (uint32_t)u;
                memcpy(dst, &u32, sizeof(u32));
            } else {
                memcpy(dst, &u, sizeof(u));
            }
        }
    }
    int has_color = 0;
    PROTO_TRY(proto_get_bool(r, "has_color", &has_color));
    st->has_color = has_color;
    PROTO_TRY(read_layout(r, &st->layout));

    const msgpack_object *o;
    int f = proto_find(r, "probe_hist", &o);
    if (f < 0)
        return f;
    if (f == 1) {
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != TSDF_PROBE_HIST_BINS)
            return proto_fail(r->err, TSDF_EPROTO_KEY, "probe_hist",
                              "probe_hist: expected an array of %d unsigned integers",
                              TSDF_PROBE_HIST_BINS);
        for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++) {
            const msgpack_object *e = &o->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return proto_fail(r->err, TSDF_EPROTO_KEY, "probe_hist",
                                  "probe_hist: element %d is not an unsigned integer", i);
            st->probe_hist[i] = e->via.u64;
        }
    }
    return TSDF_OK;
}

static int read_daemon_stats(const proto_reader *r, tsdf_rep_stats *s)
{
    const msgpack_object_map *m = r->m;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        const msgpack_object *v = &m->ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR)
            continue;
        /* Values of other types are ignored: a newer daemon may add them. */
        tsdf_stat_entry e;
        memset(&e, 0, sizeof(e));
        switch (v->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            if (v->via.u64 > INT64_MAX) {
                e.is_float = 1;
                e.f = (double)v->via.u64;
            } else {
                e.i = (int64_t)v->via.u64;
            }
            break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            e.i = v->via.i64;
            break;
        case MSGPACK_OBJECT_BOOLEAN:
            e.i = v->via.boolean ? 1 : 0;
            break;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            e.is_float = 1;
            e.f = v->via.f64;
            break;
        default:
            continue;
        }
        if (k->via.str.size == 0 || k->via.str.size > TSDF_PROTO_MAX_STATS_KEY_LEN ||
            memchr(k->via.str.ptr, '\0', k->via.str.size) != NULL)
            return proto_fail(r->err, TSDF_ETOO_LARGE, "daemon",
                              "daemon: a key is empty, longer than %u bytes or holds a NUL",
                              TSDF_PROTO_MAX_STATS_KEY_LEN);
        if (!proto_utf8_valid(k->via.str.ptr, k->via.str.size))
            return proto_fail(r->err, TSDF_EINVAL, "daemon", "daemon: a key is not valid UTF-8");
        if (s->extra_count >= TSDF_PROTO_MAX_STATS_EXTRA)
            return proto_fail(r->err, TSDF_ETOO_LARGE, "daemon", "daemon: more than %u counters",
                              TSDF_PROTO_MAX_STATS_EXTRA);
        memcpy(e.key, k->via.str.ptr, k->via.str.size);
        e.key[k->via.str.size] = '\0';
        s->extra[s->extra_count++] = e;
    }
    return TSDF_OK;
}

static int read_timeline(const proto_reader *r, tsdf_rep_stats *s)
{
    const msgpack_object *o;
    int f = proto_find(r, "timeline", &o);
    if (f <= 0)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return proto_wrong_type(r, "timeline", "an array of maps");
    if (o->via.array.size > TSDF_PROTO_MAX_TIMELINE)
        return proto_fail(r->err, TSDF_ETOO_LARGE, "timeline", "timeline: more than %u frames",
                          TSDF_PROTO_MAX_TIMELINE);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_MAP)
            return proto_wrong_type(r, "timeline", "an array of maps");
        proto_reader sub = {&e->via.map, r->err};
        tsdf_frame_timeline *t = &s->timeline[i];
        memset(t, 0, sizeof(*t));
        PROTO_TRY(proto_get_uint(&sub, "frame", UINT64_MAX, &t->frame, NULL));
        for (size_t k = 0; k < TIMELINE_FIELD_COUNT; k++) {
            double d = 0.0;
            PROTO_TRY(proto_get_number(&sub, timeline_fields[k].key, TSDF_EPROTO_KEY, &d, NULL));
            memcpy((char *)t + timeline_fields[k].offset, &d, sizeof(d));
        }
    }
    s->timeline_count = o->via.array.size;
    return TSDF_OK;
}

/* "params": every key optional for a reader (an absent one reads 0). */
static int read_map_params(const proto_reader *r, tsdf_map_params *p)
{
    int present = 0;
    PROTO_TRY(proto_get_float(r, "voxel_size_m", TSDF_EPROTO_KEY, &p->voxel_size_m, &present));
    PROTO_TRY(proto_get_float(r, "trunc_vox", TSDF_EPROTO_KEY, &p->trunc_vox, &present));
    PROTO_TRY(proto_get_float(r, "max_weight", TSDF_EPROTO_KEY, &p->max_weight, &present));
    PROTO_TRY(proto_get_uint(r, "memory_cap_bytes", UINT64_MAX, &p->memory_cap_bytes, &present));
    return read_layout(r, &p->layout);
}

static int read_stats_rep(const proto_reader *r, tsdf_rep_stats *s)
{
    proto_reader sub;
    int present = 0;
    PROTO_TRY(proto_get_submap(r, "engine", &sub, &present));
    if (present) {
        s->has_engine = 1;
        PROTO_TRY(read_engine_stats(&sub, &s->engine));
    }
    PROTO_TRY(proto_get_submap(r, "params", &sub, &present));
    if (present) {
        s->has_params = 1;
        PROTO_TRY(read_map_params(&sub, &s->params));
    }
    PROTO_TRY(proto_get_submap(r, "daemon", &sub, &present));
    if (present)
        PROTO_TRY(read_daemon_stats(&sub, s));
    PROTO_TRY(read_timeline(r, s));
    return TSDF_OK;
}

/* The arrays of a raycast reply in the sender's ring ("ring_offset" and
 * "ring_bytes", PROTOCOL.md 6.10): ring_bytes says which of them are
 * there, as the four layouts differ in size; no array may come in the
 * message too. */
static int read_raycast_ring(const proto_reader *r, tsdf_rep_raycast *q)
{
    const uint64_t px = (uint64_t)q->width * q->height;
    uint64_t bytes = 0;
    int present = 0;
    const msgpack_object *o;
    PROTO_TRY(proto_get_uint(r, "ring_offset", UINT64_MAX, &q->ring_offset, NULL));
    PROTO_TRY(proto_get_uint(r, "ring_bytes", UINT64_MAX, &bytes, NULL));
    static const char *const arrays[3] = {"depth", "normals", "rgb"};
    for (int i = 0; i < 3; i++) {
        int s = proto_find(r, arrays[i], &o);
        if (s < 0)
            return s;
        if (s == 1)
            return proto_fail(r->err, TSDF_EPROTO_KEY, arrays[i],
                              "%s: a raycast reply in a shared ring carries no arrays", arrays[i]);
    }
    for (int k = 0; k < 4 && !present; k++) {
        if (bytes == tsdf_proto_raycast_image_bytes(px, k & 1, k & 2)) {
            q->ring_normals = k & 1;
            q->ring_rgb = (k & 2) != 0;
            present = 1;
        }
    }
    if (!present)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "ring_bytes",
                          "ring_bytes: %llu is no layout of a %ux%u image",
                          (unsigned long long)bytes, q->width, q->height);
    q->in_ring = 1;
    return TSDF_OK;
}

static int read_raycast_rep(const proto_reader *r, tsdf_rep_raycast *q)
{
    PROTO_TRY(proto_read_size(r, &q->width, &q->height));
    size_t pixels = (size_t)q->width * q->height;
    size_t n;
    int present = 0;
    const msgpack_object *o;
    PROTO_TRY(proto_get_uint(r, "version", UINT64_MAX, &q->version, &present));
    int s = proto_find(r, "ring_offset", &o);
    if (s < 0)
        return s;
    if (s == 1)
        return read_raycast_ring(r, q);
    PROTO_TRY(proto_get_bin(r, "depth", &q->depth_m, &n, NULL));
    if (n != pixels * 4)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "depth", "depth: %zu bytes, expected %zu", n,
                          pixels * 4);
    /* Absent when the request said "normals": false. */
    const void *normals = NULL;
    PROTO_TRY(proto_get_bin(r, "normals", &normals, &n, &present));
    if (present) {
        if (n != pixels * 12)
            return proto_fail(r->err, TSDF_EBAD_SIZE, "normals", "normals: %zu bytes, expected %zu",
                              n, pixels * 12);
        q->normals = normals;
    }
    const void *rgb = NULL;
    PROTO_TRY(proto_get_bin(r, "rgb", &rgb, &n, &present));
    if (present) {
        if (n != pixels * 3)
            return proto_fail(r->err, TSDF_EBAD_SIZE, "rgb", "rgb: %zu bytes, expected %zu", n,
                              pixels * 3);
        q->rgb = rgb;
    }
    return TSDF_OK;
}

/* One uint32 LE of an unaligned bin. */
static uint32_t bin_u32(const void *p, size_t i)
{
    uint32_t v;
    memcpy(&v, (const uint8_t *)p + 4u * i, 4);
    return v;
}

/* The starts of block_count parts in `count` items (vertices or
 * triangles): block_count + 1 uint32, from 0, never decreasing, ending at
 * count, so that the parts are consecutive and cover every item once. */
static int check_part_starts(tsdf_proto_error *err, const char *key, const void *p,
                             uint64_t block_count, uint64_t count, const char *count_key)
{
    if (bin_u32(p, 0) != 0)
        return proto_fail(err, TSDF_EBAD_SIZE, key, "%s: entry 0 is %u, expected 0", key,
                          bin_u32(p, 0));
    for (uint64_t i = 1; i <= block_count; i++) {
        uint32_t prev = bin_u32(p, i - 1), cur = bin_u32(p, i);
        if (cur < prev)
            return proto_fail(err, TSDF_EBAD_SIZE, key,
                              "%s: entry %llu (%u) is below entry %llu (%u)", key,
                              (unsigned long long)i, cur, (unsigned long long)(i - 1), prev);
    }
    if (bin_u32(p, block_count) != count)
        return proto_fail(err, TSDF_EBAD_SIZE, key, "%s: last entry %u, %s is %llu", key,
                          bin_u32(p, block_count), count_key, (unsigned long long)count);
    return TSDF_OK;
}

/* What a mesh's arrays must say beyond their sizes, checked by the decoder
 * on what it read and by the encoder on what it is about to write: every
 * index below vertex_count (a bad one would make a consumer read outside
 * the vertex arrays), and with parts their starts consistent and every
 * triangle's indices among its own part's vertices (a consumer that
 * replaces parts reads part i's vertices by its starts alone, so a
 * triangle that reached into another part's vertices would tie two parts
 * together that the client replaces apart). The sizes are the caller's to
 * have checked; starts NULL with no parts stand for the one entry 0. */
static int check_mesh_content(const tsdf_rep_mesh *q, tsdf_proto_error *err)
{
    for (uint64_t i = 0; i < q->triangle_count * 3u; i++) {
        uint32_t idx = bin_u32(q->indices, i);
        if (idx >= q->vertex_count)
            return proto_fail(err, TSDF_EBAD_SIZE, "indices",
                              "indices: entry %llu is %u, vertex_count is %llu",
                              (unsigned long long)i, idx, (unsigned long long)q->vertex_count);
    }
    if (!q->has_blocks)
        return TSDF_OK;
    static const uint32_t no_parts[1] = {0};
    uint64_t blocks = q->block_count;
    const void *vs = q->block_vertex_start, *ts = q->block_triangle_start;
    if (blocks == 0 && vs == NULL)
        vs = no_parts;
    if (blocks == 0 && ts == NULL)
        ts = no_parts;
    PROTO_TRY(
        check_part_starts(err, "block_vertex_start", vs, blocks, q->vertex_count, "vertex_count"));
    PROTO_TRY(check_part_starts(err, "block_triangle_start", ts, blocks, q->triangle_count,
                                "triangle_count"));
    for (uint64_t b = 0; b < blocks; b++) {
        uint32_t v0 = bin_u32(vs, b), v1 = bin_u32(vs, b + 1);
        for (uint64_t i = 3u * (uint64_t)bin_u32(ts, b); i < 3u * (uint64_t)bin_u32(ts, b + 1);
             i++) {
            uint32_t idx = bin_u32(q->indices, i);
            if (idx < v0 || idx >= v1)
                return proto_fail(err, TSDF_EBAD_SIZE, "indices",
                                  "indices: entry %llu is %u, outside the vertices %u..%u of its "
                                  "block's part %llu",
                                  (unsigned long long)i, idx, v0, v1, (unsigned long long)b);
        }
    }
    return TSDF_OK;
}

/* The parts of a by_block mesh: all three bins or none, of sizes that
 * agree (their content: check_mesh_content). */
static int read_mesh_blocks(const proto_reader *r, tsdf_rep_mesh *q)
{
    static const char *const keys[3] = {"block_coords", "block_vertex_start",
                                        "block_triangle_start"};
    const void *p[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    int present[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        PROTO_TRY(proto_get_bin(r, keys[i], &p[i], &n[i], &present[i]));
    if (!present[0] && !present[1] && !present[2])
        return TSDF_OK;
    for (int i = 0; i < 3; i++) {
        if (!present[i])
            return proto_fail(r->err, TSDF_EPROTO_KEY, keys[i],
                              "%s: required with %s (the parts of a by_block mesh)", keys[i],
                              keys[present[0] ? 0 : 1]);
    }
    if (n[0] % 12u != 0)
        return proto_fail(r->err, TSDF_EBAD_SIZE, keys[0],
                          "block_coords: %zu bytes, not a multiple of 12 (3 int32 a block)", n[0]);
    uint64_t blocks = n[0] / 12u;
    for (int i = 1; i < 3; i++) {
        if (n[i] != (blocks + 1u) * 4u)
            return proto_fail(r->err, TSDF_EBAD_SIZE, keys[i],
                              "%s: %zu bytes, expected %llu (block_count %llu + 1 uint32)", keys[i],
                              n[i], (unsigned long long)((blocks + 1u) * 4u),
                              (unsigned long long)blocks);
    }
    q->has_blocks = 1;
    q->block_count = blocks;
    q->block_coords = p[0];
    q->block_vertex_start = p[1];
    q->block_triangle_start = p[2];
    return TSDF_OK;
}

/* "removed" and "full", the answer to an incremental mesh: both or none. */
static int read_mesh_removed(const proto_reader *r, tsdf_rep_mesh *q)
{
    const void *p = NULL;
    size_t n = 0;
    int present = 0, full = -1;
    PROTO_TRY(proto_get_bin(r, "removed", &p, &n, &present));
    PROTO_TRY(proto_get_bool(r, "full", &full));
    if (!present && full < 0)
        return TSDF_OK;
    if (!present || full < 0)
        return proto_fail(r->err, TSDF_EPROTO_KEY, present ? "full" : "removed",
                          "%s: required with %s (the answer to since_version)",
                          present ? "full" : "removed", present ? "removed" : "full");
    if (n % 12u != 0)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "removed",
                          "removed: %zu bytes, not a multiple of 12 (3 int32 a block)", n);
    q->has_removed = 1;
    q->removed_count = n / 12u;
    q->removed_coords = p;
    q->full = full;
    return TSDF_OK;
}

static int read_mesh_rep(const proto_reader *r, tsdf_rep_mesh *q)
{
    const uint64_t max_items = TSDF_PROTO_MAX_MESSAGE_BYTES / 12u;
    int present = 0;
    size_t n;
    PROTO_TRY(proto_get_uint(r, "version", UINT64_MAX, &q->version, &present));
    PROTO_TRY(proto_get_uint(r, "vertex_count", max_items, &q->vertex_count, NULL));
    PROTO_TRY(proto_get_uint(r, "triangle_count", max_items, &q->triangle_count, NULL));
    size_t vbytes = (size_t)q->vertex_count * 12u;
    PROTO_TRY(proto_get_bin(r, "positions", &q->positions, &n, NULL));
    if (n != vbytes)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "positions", "positions: %zu bytes, expected %zu",
                          n, vbytes);
    PROTO_TRY(proto_get_bin(r, "normals", &q->normals, &n, NULL));
    if (n != vbytes)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "normals", "normals: %zu bytes, expected %zu", n,
                          vbytes);
    const void *colors = NULL;
    PROTO_TRY(proto_get_bin(r, "colors", &colors, &n, &present));
    if (present) {
        if (n != (size_t)q->vertex_count * 3u)
            return proto_fail(r->err, TSDF_EBAD_SIZE, "colors", "colors: %zu bytes, expected %zu",
                              n, (size_t)q->vertex_count * 3u);
        q->colors = colors;
    }
    PROTO_TRY(proto_get_bin(r, "indices", &q->indices, &n, NULL));
    if (n != (size_t)q->triangle_count * 12u)
        return proto_fail(r->err, TSDF_EBAD_SIZE, "indices", "indices: %zu bytes, expected %zu", n,
                          (size_t)q->triangle_count * 12u);
    PROTO_TRY(read_mesh_blocks(r, q));
    PROTO_TRY(check_mesh_content(q, r->err));
    return read_mesh_removed(r, q);
}

static int read_maps_rep(const proto_reader *r, tsdf_rep_maps *q)
{
    const msgpack_object *o;
    int f = proto_find_field(r, "maps", NULL, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return proto_wrong_type(r, "maps", "an array of strings");
    if (o->via.array.size > TSDF_PROTO_MAX_MAPS)
        return proto_fail(r->err, TSDF_ETOO_LARGE, "maps", "maps: more than %u names",
                          TSDF_PROTO_MAX_MAPS);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_STR)
            return proto_fail(r->err, TSDF_EPROTO_KEY, "maps", "maps: element %u is not a string",
                              i);
        int rc = tsdf_proto_check_name(e->via.str.ptr, e->via.str.size);
        if (rc != TSDF_OK)
            return proto_fail(r->err, rc, "maps", "maps: element %u is not a valid map name", i);
        memcpy(q->names[i], e->via.str.ptr, e->via.str.size);
        q->names[i][e->via.str.size] = '\0';
    }
    q->count = o->via.array.size;
    return TSDF_OK;
}

static int decode_reply(const proto_reader *r, tsdf_reply *out)
{
    tsdf_msg_type type = TSDF_MSG_NONE;
    uint64_t id = 0;
    int rc = proto_read_envelope(r, &type, &id, 1);
    out->type = type;
    out->id = id;
    if (rc != TSDF_OK)
        return rc;
    if (type == TSDF_MSG_FRAME)
        return proto_fail(r->err, TSDF_EPROTO_TYPE, "type", "frame messages are never answered");

    const msgpack_object *o;
    int f = proto_find_field(r, "status", NULL, &o);
    if (f != 1)
        return f;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == 0) {
        out->status = TSDF_OK;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN) {
        out->status = (int)o->via.i64;
    } else {
        return proto_fail(r->err, TSDF_EPROTO_KEY, "status",
                          "status: expected 0 or a negative code");
    }
    if (out->status != TSDF_OK) {
        /* An empty name or message counts as absent, as in the encoder: an
         * error reply always carries both, so it reads the same after a
         * round trip. */
        int present = 0;
        PROTO_TRY(proto_get_str(r, "error", out->error, sizeof(out->error), 1, &present));
        if (!present || out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", tsdf_errname(out->status));
        PROTO_TRY(proto_get_str(r, "message", out->message, sizeof(out->message), 1, &present));
        if (!present || out->message[0] == '\0')
            snprintf(out->message, sizeof(out->message), "%s", tsdf_strerror(out->status));
        return TSDF_OK;
    }
    switch (type) {
    case TSDF_MSG_INTEGRATE: {
        int present = 0;
        PROTO_TRY(proto_get_uint(r, "seq", UINT64_MAX, &out->u.integrate.seq, &present));
        PROTO_TRY(proto_get_uint(r, "version", UINT64_MAX, &out->u.integrate.version, &present));
        return proto_get_number(r, "integrate_ms", 0, &out->u.integrate.integrate_ms, &present);
    }
    case TSDF_MSG_RAYCAST:
        return read_raycast_rep(r, &out->u.raycast);
    case TSDF_MSG_MESH:
        return read_mesh_rep(r, &out->u.mesh);
    case TSDF_MSG_STATS:
        return read_stats_rep(r, &out->u.stats);
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD: {
        int present = 0;
        PROTO_TRY(
            proto_get_str(r, "path", out->u.path.path, sizeof(out->u.path.path), 0, &present));
        return proto_get_uint(r, "version", UINT64_MAX, &out->u.path.version, &present);
    }
    case TSDF_MSG_MAPS:
        return read_maps_rep(r, &out->u.maps);
    case TSDF_MSG_PING: {
        int present = 0;
        PROTO_TRY(proto_get_str(r, "server", out->u.ping.server, sizeof(out->u.ping.server), 1,
                                &present));
        PROTO_TRY(proto_get_uint(r, "uptime_ms", UINT64_MAX, &out->u.ping.uptime_ms, &present));
        /* Optional (daemons before it never send it); never truncated: a
         * cut path would name another socket. One too long or not UTF-8
         * is left out rather than failing the ping, a health check. */
        if (proto_get_str(r, "ring_socket", out->ring_socket, sizeof(out->ring_socket), 0,
                          &present) != TSDF_OK)
            out->ring_socket[0] = '\0';
        return TSDF_OK;
    }
    case TSDF_MSG_ERROR:
        return proto_fail(r->err, TSDF_EPROTO_KEY, "status",
                          "an \"error\" reply must carry an error");
    default:
        return TSDF_OK;
    }
}

static int decode_reply_body(const proto_reader *r, void *out)
{
    return decode_reply(r, out);
}

int tsdf_proto_decode_reply(const void *data, size_t len, tsdf_reply *out, tsdf_proto_error *err)
{
    return proto_decode_message(data, len, out, sizeof(*out), err, decode_reply_body);
}

/* ---- encoding ----------------------------------------------------------- */

static void w_engine_stats(proto_writer *w, const tsdf_volume_stats *st)
{
    proto_w_key(w, "engine");
    msgpack_pack_map(&w->pk, (uint32_t)ENGINE_FIELD_COUNT + 3 + (layout_known(st->layout) ? 1 : 0));
    proto_w_str(w, "backend", backend_wire_name(st->backend));
    w_layout(w, st->layout);
    for (size_t i = 0; i < ENGINE_FIELD_COUNT; i++) {
        const stat_field *f = &engine_fields[i];
        const char *src = (const char *)st + f->offset;
        if (f->kind == ST_F64) {
            double d;
            memcpy(&d, src, sizeof(d));
            proto_w_double(w, f->key, d);
        } else if (f->kind == ST_U32) {
            uint32_t u;
            memcpy(&u, src, sizeof(u));
            proto_w_uint(w, f->key, u);
        } else {
            uint64_t u;
            memcpy(&u, src, sizeof(u));
            proto_w_uint(w, f->key, u);
        }
    }
    proto_w_bool(w, "has_color", st->has_color);
    proto_w_key(w, "probe_hist");
    msgpack_pack_array(&w->pk, TSDF_PROBE_HIST_BINS);
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
        msgpack_pack_uint64(&w->pk, st->probe_hist[i]);
}

/* What a mesh reply's encoder checks before it reads any payload: every
 * payload with a non-zero count has a pointer (TSDF_EINVAL), and all of
 * them together fit in one message (TSDF_ETOO_LARGE, before msgpack would
 * find out by filling the buffer up to its limit). Each count is bounded
 * on its own first, so that the sum cannot overflow. */
static int check_mesh_rep(const tsdf_rep_mesh *q)
{
    const uint64_t limit = TSDF_PROTO_MAX_MESSAGE_BYTES;
    if ((q->vertex_count && (q->positions == NULL || q->normals == NULL)) ||
        (q->triangle_count && q->indices == NULL))
        return TSDF_EINVAL;
    if ((q->block_count && (!q->has_blocks || q->block_coords == NULL ||
                            q->block_vertex_start == NULL || q->block_triangle_start == NULL)) ||
        (q->removed_count && (!q->has_removed || q->removed_coords == NULL)))
        return TSDF_EINVAL;
    if (q->vertex_count > limit / 12u || q->triangle_count > limit / 12u ||
        q->block_count > limit / 12u || q->removed_count > limit / 12u)
        return TSDF_ETOO_LARGE;
    uint64_t bytes = q->vertex_count * (24u + (q->colors ? 3u : 0u)) + q->triangle_count * 12u +
                     q->removed_count * 12u;
    if (q->has_blocks)
        bytes += q->block_count * 12u + (q->block_count + 1u) * 8u;
    if (bytes > limit)
        return TSDF_ETOO_LARGE;
    /* The engine made the parts and indices, but the reader refuses a mesh
     * that breaks these rules whole: find it here, without decoding. */
    return check_mesh_content(q, NULL);
}

static int encode_reply_body(proto_writer *w, const void *src)
{
    const tsdf_reply *r = src;
    if (r->type == TSDF_MSG_NONE || r->type == TSDF_MSG_FRAME ||
        (unsigned)r->type >= TSDF_MSG_TYPE_COUNT)
        return TSDF_EPROTO_TYPE;
    if (r->status > 0)
        return TSDF_EINVAL;
    if (r->status != TSDF_OK) {
        msgpack_pack_map(&w->pk, 6);
        proto_w_envelope(w, r->type, r->id);
        proto_w_key(w, "status");
        msgpack_pack_int(&w->pk, r->status);
        proto_w_str(w, "error", r->error[0] ? r->error : tsdf_errname(r->status));
        proto_w_str(w, "message", r->message[0] ? r->message : tsdf_strerror(r->status));
        return TSDF_OK;
    }
    const uint32_t env = 4;
    switch (r->type) {
    case TSDF_MSG_INTEGRATE:
        msgpack_pack_map(&w->pk, env + 3);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_rep_raycast *q = &r->u.raycast;
        PROTO_TRY(proto_check_image(q->width, q->height));
        if (q->in_ring)
            msgpack_pack_map(&w->pk, env + 5);
        else if (q->depth_m == NULL)
            return TSDF_EINVAL;
        else
            msgpack_pack_map(&w->pk, env + 4 + (q->normals ? 1 : 0) + (q->rgb ? 1 : 0));
        break;
    }
    case TSDF_MSG_MESH: {
        const tsdf_rep_mesh *q = &r->u.mesh;
        PROTO_TRY(check_mesh_rep(q));
        msgpack_pack_map(&w->pk, env + 6 + (q->colors ? 1 : 0) + (q->has_blocks ? 3 : 0) +
                                     (q->has_removed ? 2 : 0));
        break;
    }
    case TSDF_MSG_STATS:
        if (r->u.stats.timeline_count > TSDF_PROTO_MAX_TIMELINE)
            return TSDF_ETOO_LARGE;
        msgpack_pack_map(&w->pk, env + 1 + (r->u.stats.has_engine ? 1 : 0) +
                                     (r->u.stats.has_params ? 1 : 0) +
                                     (r->u.stats.timeline_count > 0 ? 1 : 0));
        break;
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        if (memchr(r->u.path.path, '\0', sizeof(r->u.path.path)) == NULL)
            return TSDF_EINVAL;
        msgpack_pack_map(&w->pk, env + 2);
        break;
    case TSDF_MSG_MAPS:
        if (r->u.maps.count > TSDF_PROTO_MAX_MAPS)
            return TSDF_ETOO_LARGE;
        msgpack_pack_map(&w->pk, env + 1);
        break;
    case TSDF_MSG_PING:
        if (memchr(r->u.ping.server, '\0', sizeof(r->u.ping.server)) == NULL ||
            memchr(r->ring_socket, '\0', sizeof(r->ring_socket)) == NULL)
            return TSDF_EINVAL;
        msgpack_pack_map(&w->pk, env + 2 + (r->ring_socket[0] != '\0'));
        break;
    case TSDF_MSG_ERROR:
        return TSDF_EINVAL; /* an error reply needs a status */
    default:
        msgpack_pack_map(&w->pk, env);
        break;
    }
    proto_w_envelope(w, r->type, r->id);
    proto_w_key(w, "status");
    msgpack_pack_int(&w->pk, 0);

    switch (r->type) {
    case TSDF_MSG_INTEGRATE:
        proto_w_uint(w, "seq", r->u.integrate.seq);
        proto_w_uint(w, "version", r->u.integrate.version);
        proto_w_double(w, "integrate_ms", r->u.integrate.integrate_ms);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_rep_raycast *q = &r->u.raycast;
        size_t px = (size_t)q->width * q->height;
        proto_w_uint(w, "version", q->version);
        proto_w_uint(w, "width", q->width);
        proto_w_uint(w, "height", q->height);
        if (q->in_ring) {
            proto_w_uint(w, "ring_offset", q->ring_offset);
            proto_w_uint(w, "ring_bytes",
                         tsdf_proto_raycast_image_bytes(px, q->ring_normals, q->ring_rgb));
            break;
        }
        proto_w_bin(w, "depth", q->depth_m, px * 4u);
        if (q->normals)
            proto_w_bin(w, "normals", q->normals, px * 12u);
        if (q->rgb)
            proto_w_bin(w, "rgb", q->rgb, px * 3u);
        break;
    }
    case TSDF_MSG_MESH: {
        const tsdf_rep_mesh *q = &r->u.mesh;
        /* Empty arrays may come with NULL pointers; send empty bins. */
        static const uint8_t none[1];
        size_t vb = (size_t)q->vertex_count * 12u;
        proto_w_uint(w, "version", q->version);
        proto_w_uint(w, "vertex_count", q->vertex_count);
        proto_w_uint(w, "triangle_count", q->triangle_count);
        proto_w_bin(w, "positions", vb ? q->positions : none, vb);
        proto_w_bin(w, "normals", vb ? q->normals : none, vb);
        if (q->colors)
            proto_w_bin(w, "colors", q->colors, (size_t)q->vertex_count * 3u);
        proto_w_bin(w, "indices", q->triangle_count ? q->indices : none,
                    (size_t)q->triangle_count * 12u);
        if (q->has_blocks) {
            /* The engine leaves the starts of a mesh of no parts NULL; on
             * the wire they are still the one entry 0. */
            static const uint32_t no_parts[1] = {0};
            size_t sb = ((size_t)q->block_count + 1u) * 4u;
            int bare = q->block_count == 0 && q->block_vertex_start == NULL;
            proto_w_bin(w, "block_coords", q->block_count ? q->block_coords : none,
                        (size_t)q->block_count * 12u);
            proto_w_bin(w, "block_vertex_start", bare ? no_parts : q->block_vertex_start, sb);
            bare = q->block_count == 0 && q->block_triangle_start == NULL;
            proto_w_bin(w, "block_triangle_start", bare ? no_parts : q->block_triangle_start, sb);
        }
        if (q->has_removed) {
            proto_w_bin(w, "removed", q->removed_count ? q->removed_coords : none,
                        (size_t)q->removed_count * 12u);
            proto_w_bool(w, "full", q->full);
        }
        break;
    }
    case TSDF_MSG_STATS: {
        const tsdf_rep_stats *s = &r->u.stats;
        if (s->extra_count > TSDF_PROTO_MAX_STATS_EXTRA)
            return TSDF_ETOO_LARGE;
        if (s->has_engine)
            w_engine_stats(w, &s->engine);
        /* A key of its own rather than more engine keys: the engine's
         * statistics are the volume's, these are the map's settings. */
        if (s->has_params) {
            proto_w_key(w, "params");
            msgpack_pack_map(&w->pk, 4 + (layout_known(s->params.layout) ? 1 : 0));
            proto_w_float(w, "voxel_size_m", s->params.voxel_size_m);
            proto_w_float(w, "trunc_vox", s->params.trunc_vox);
            proto_w_float(w, "max_weight", s->params.max_weight);
            proto_w_uint(w, "memory_cap_bytes", s->params.memory_cap_bytes);
            w_layout(w, s->params.layout);
        }
        proto_w_key(w, "daemon");
        msgpack_pack_map(&w->pk, s->extra_count);
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            if (memchr(e->key, '\0', sizeof(e->key)) == NULL)
                return TSDF_EINVAL;
            if (e->is_float)
                proto_w_double(w, e->key, e->f);
            else {
                proto_w_key(w, e->key);
                msgpack_pack_int64(&w->pk, e->i);
            }
        }
        /* Only from a backend that records timelines: older readers skip
         * the key, and its absence means "not available". */
        if (s->timeline_count > 0) {
            proto_w_key(w, "timeline");
            msgpack_pack_array(&w->pk, s->timeline_count);
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                msgpack_pack_map(&w->pk, 1 + (uint32_t)TIMELINE_FIELD_COUNT);
                proto_w_uint(w, "frame", t->frame);
                for (size_t k = 0; k < TIMELINE_FIELD_COUNT; k++) {
                    double d;
                    memcpy(&d, (const char *)t + timeline_fields[k].offset, sizeof(d));
                    proto_w_double(w, timeline_fields[k].key, d);
                }
            }
        }
        break;
    }
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        proto_w_str(w, "path", r->u.path.path);
        proto_w_uint(w, "version", r->u.path.version);
        break;
    case TSDF_MSG_MAPS:
        proto_w_key(w, "maps");
        msgpack_pack_array(&w->pk, r->u.maps.count);
        for (uint32_t i = 0; i < r->u.maps.count; i++) {
            const char *name = r->u.maps.names[i];
            if (memchr(name, '\0', TSDF_PROTO_MAX_NAME_LEN + 1) == NULL)
                return TSDF_EINVAL;
            proto_w_str_value(w, name);
        }
        break;
    case TSDF_MSG_PING:
        proto_w_str(w, "server", r->u.ping.server);
        proto_w_uint(w, "uptime_ms", r->u.ping.uptime_ms);
        if (r->ring_socket[0] != '\0')
            proto_w_str(w, "ring_socket", r->ring_socket);
        break;
    default:
        break;
    }
    return TSDF_OK;
}

static int check_reply(const void *src)
{
    (void)src; /* encode_reply_body checks the struct as it goes */
    return TSDF_OK;
}

/* The small replies of the control plane (stats, maps, ping, save, load)
 * carry many rules (counter keys, names, strings) for a few hundred
 * bytes: for them the encoder still decodes what it wrote. The replies of
 * the data path (integrate, raycast, mesh, errors) are checked on the
 * struct only, so that a raycast's or mesh's megabytes are not read back. */
static int decoded_after_encode(const tsdf_reply *rep)
{
    if (rep->status != TSDF_OK)
        return 0;
    switch (rep->type) {
    case TSDF_MSG_STATS:
    case TSDF_MSG_MAPS:
    case TSDF_MSG_PING:
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        return 1;
    default:
        return 0;
    }
}

int tsdf_proto_encode_reply(const tsdf_reply *rep, tsdf_buf *out)
{
    size_t start = out != NULL ? out->len : 0;
    int rc = proto_encode(out, rep, check_reply, encode_reply_body);
    if (rc != TSDF_OK || !decoded_after_encode(rep))
        return rc;
    tsdf_reply *scratch = malloc(sizeof(*scratch));
    if (scratch == NULL)
        rc = TSDF_ENOMEM;
    else
        rc = tsdf_proto_decode_reply(out->data + start, out->len - start, scratch, NULL);
    free(scratch);
    if (rc != TSDF_OK)
        out->len = start;
    return rc;
}

/* Everything of a reply but its bins and the tables below: the envelope,
 * an error's message, a path, the keys. */
#define REPLY_OVERHEAD_BYTES (4096u + TSDF_PROTO_MAX_PATH_LEN)

size_t tsdf_proto_reply_bound(const tsdf_reply *rep)
{
    size_t n = REPLY_OVERHEAD_BYTES;
    if (rep == NULL || rep->status != TSDF_OK)
        return n;
    switch (rep->type) {
    case TSDF_MSG_RAYCAST: {
        const tsdf_rep_raycast *q = &rep->u.raycast;
        if (q->width > TSDF_MAX_IMAGE_DIM || q->height > TSDF_MAX_IMAGE_DIM)
            return n;
        size_t px = (size_t)q->width * q->height;
        if (q->in_ring)
            return n;
        return n + tsdf_proto_raycast_image_bytes(px, q->normals != NULL, q->rgb != NULL);
    }
    case TSDF_MSG_MESH: {
        const tsdf_rep_mesh *q = &rep->u.mesh;
        const uint64_t limit = TSDF_PROTO_MAX_MESSAGE_BYTES;
        /* Counts beyond a message are refused before anything is written. */
        if (q->vertex_count > limit || q->triangle_count > limit || q->block_count > limit ||
            q->removed_count > limit)
            return n;
        return n +
               (size_t)(q->vertex_count * (24u + (q->colors ? 3u : 0u)) + q->triangle_count * 12u +
                        q->removed_count * 12u + (q->has_blocks ? q->block_count * 20u + 8u : 0u));
    }
    case TSDF_MSG_STATS:
        /* Each daemon entry: a key of at most 48 bytes and a value of 9;
         * each timeline entry 7 keys and doubles; the engine's 40-odd. */
        return n + TSDF_PROTO_MAX_STATS_EXTRA * 64u + TSDF_PROTO_MAX_TIMELINE * 256u + 8192u;
    case TSDF_MSG_MAPS:
        return n + TSDF_PROTO_MAX_MAPS * (TSDF_PROTO_MAX_NAME_LEN + 2u);
    default:
        return n;
    }
}
