/*
 * tsdf_proto.c - the wire codec (see tsdf_proto.h and PROTOCOL.md).
 *
 * Decoding runs in three steps, so that no byte sequence can make the codec
 * misbehave: (1) a small structural scan of the raw bytes that bounds sizes,
 * counts and nesting before msgpack-c allocates anything; (2) msgpack-c
 * unpacks the one value into a zone; (3) the typed walk below reads every
 * known key, checks its msgpack type and value, and copies it into the
 * struct. Encoding writes through msgpack_packer into a tsdf_buf and then
 * decodes its own output, so the encoder enforces exactly the decoder's rules.
 */
#include "tsdf_proto.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "tsdf_pose.h"

/* Payloads are sent as the host's bytes; only little-endian hosts match the
 * wire format. A big-endian port would add byte swaps here. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tsdf_proto: the wire payloads are little-endian; this host is not"
#endif

/* The most msgpack values one message may hold. It bounds the msgpack zone
 * (about 24 bytes a value), which otherwise grows with the message size even
 * for a message of nothing but nils. Legitimate messages use a few hundred. */
#define PROTO_MAX_OBJECTS 65536u

/* ---- names -------------------------------------------------------------- */

static const char *const type_names[] = {
    [TSDF_MSG_NONE] = "none",       [TSDF_MSG_FRAME] = "frame", [TSDF_MSG_INTEGRATE] = "integrate",
    [TSDF_MSG_RAYCAST] = "raycast", [TSDF_MSG_MESH] = "mesh",   [TSDF_MSG_STATS] = "stats",
    [TSDF_MSG_SAVE] = "save",       [TSDF_MSG_LOAD] = "load",   [TSDF_MSG_RESET] = "reset",
    [TSDF_MSG_MAPS] = "maps",       [TSDF_MSG_PING] = "ping",   [TSDF_MSG_ERROR] = "error",
};
#define TYPE_COUNT (sizeof(type_names) / sizeof(type_names[0]))

const char *tsdf_msg_type_name(tsdf_msg_type t)
{
    if ((unsigned)t >= TYPE_COUNT)
        return "none";
    return type_names[t];
}

int tsdf_msg_type_parse(const char *name, size_t len, tsdf_msg_type *out)
{
    if (name == NULL || out == NULL)
        return TSDF_EINVAL;
    for (unsigned t = TSDF_MSG_FRAME; t < TYPE_COUNT; t++) {
        if (strlen(type_names[t]) == len && memcmp(type_names[t], name, len) == 0) {
            *out = (tsdf_msg_type)t;
            return TSDF_OK;
        }
    }
    return TSDF_EPROTO_TYPE;
}

int tsdf_proto_check_name(const char *name, size_t len)
{
    if (name == NULL || len == 0)
        return TSDF_EINVAL;
    if (len > TSDF_PROTO_MAX_NAME_LEN)
        return TSDF_ETOO_LARGE;
    /* Map names become file names of snapshots: no separators, no hidden
     * files, nothing a shell or a path could misread. */
    if (name[0] == '.')
        return TSDF_EINVAL;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok)
            return TSDF_EINVAL;
    }
    return TSDF_OK;
}

/* Sensor names are only labels in logs and stats: printable ASCII without
 * spaces is enough. */
static int check_sensor_name(const char *name, size_t len)
{
    if (len == 0)
        return TSDF_EINVAL;
    if (len > TSDF_PROTO_MAX_NAME_LEN)
        return TSDF_ETOO_LARGE;
    for (size_t i = 0; i < len; i++) {
        if (name[i] < 0x21 || name[i] > 0x7e)
            return TSDF_EINVAL;
    }
    return TSDF_OK;
}

/* ---- buffer ------------------------------------------------------------- */

void tsdf_buf_init(tsdf_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max_len = TSDF_PROTO_MAX_MESSAGE_BYTES;
}

void tsdf_buf_fini(tsdf_buf *b)
{
    free(b->data);
    tsdf_buf_init(b);
}

void tsdf_buf_clear(tsdf_buf *b)
{
    b->len = 0;
}

int tsdf_buf_append(tsdf_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return TSDF_OK;
    if (n > b->max_len || b->len > b->max_len - n)
        return TSDF_ETOO_LARGE;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        if (cap > b->max_len)
            cap = b->max_len;
        uint8_t *d = realloc(b->data, cap);
        if (d == NULL)
            return TSDF_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return TSDF_OK;
}

/* ---- error detail ------------------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
fail(tsdf_proto_error *err, int code, const char *key, const char *fmt, ...)
{
    if (err != NULL) {
        snprintf(err->key, sizeof(err->key), "%s", key ? key : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- step 1: structural scan -------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len;
    size_t pos;
    size_t objects;
} scanner;

static int scan_need(scanner *s, size_t n)
{
    return n <= s->len - s->pos ? TSDF_OK : TSDF_EFORMAT;
}

static uint64_t scan_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Checks one msgpack value at s->pos and moves past it. Containers may hold
 * at most TSDF_PROTO_MAX_MAP_ENTRIES entries and nest TSDF_PROTO_MAX_DEPTH
 * deep; every length must fit in the bytes that remain. */
static int scan_value(scanner *s, unsigned depth)
{
    if (depth > TSDF_PROTO_MAX_DEPTH)
        return TSDF_ETOO_LARGE;
    if (++s->objects > PROTO_MAX_OBJECTS)
        return TSDF_ETOO_LARGE;
    if (scan_need(s, 1) != TSDF_OK)
        return TSDF_EFORMAT;
    uint8_t b = s->p[s->pos++];
    uint64_t skip = 0, count = 0;
    int is_map = 0;
    unsigned lenbytes = 0;

    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return TSDF_OK; /* fixint, nil, bool */
    if ((b & 0xe0) == 0xa0) {
        skip = b & 0x1f; /* fixstr */
    } else if ((b & 0xf0) == 0x90) {
        count = b & 0x0f; /* fixarray */
        goto container;
    } else if ((b & 0xf0) == 0x80) {
        count = b & 0x0f; /* fixmap */
        is_map = 1;
        goto container;
    } else {
        switch (b) {
        case 0xc4:
        case 0xd9:
            lenbytes = 1;
            break; /* bin8, str8 */
        case 0xc5:
        case 0xda:
            lenbytes = 2;
            break; /* bin16, str16 */
        case 0xc6:
        case 0xdb:
            lenbytes = 4;
            break; /* bin32, str32 */
        case 0xcc:
        case 0xd0:
            skip = 1;
            break;
        case 0xcd:
        case 0xd1:
            skip = 2;
            break;
        case 0xca:
        case 0xce:
        case 0xd2:
            skip = 4;
            break;
        case 0xcb:
        case 0xcf:
        case 0xd3:
            skip = 8;
            break;
        case 0xd4:
            skip = 2;
            break; /* fixext: type byte + data */
        case 0xd5:
            skip = 3;
            break;
        case 0xd6:
            skip = 5;
            break;
        case 0xd7:
            skip = 9;
            break;
        case 0xd8:
            skip = 17;
            break;
        case 0xc7:
        case 0xc8:
        case 0xc9: { /* ext 8/16/32: length, type, data */
            unsigned n = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
            if (scan_need(s, n) != TSDF_OK)
                return TSDF_EFORMAT;
            skip = scan_be(s->p + s->pos, n) + 1;
            s->pos += n;
            break;
        }
        case 0xdc:
        case 0xdd: { /* array16/32 */
            unsigned n = b == 0xdc ? 2 : 4;
            if (scan_need(s, n) != TSDF_OK)
                return TSDF_EFORMAT;
            count = scan_be(s->p + s->pos, n);
            s->pos += n;
            goto container;
        }
        case 0xde:
        case 0xdf: { /* map16/32 */
            unsigned n = b == 0xde ? 2 : 4;
            if (scan_need(s, n) != TSDF_OK)
                return TSDF_EFORMAT;
            count = scan_be(s->p + s->pos, n);
            s->pos += n;
            is_map = 1;
            goto container;
        }
        default:
            return TSDF_EFORMAT; /* 0xc1 is never used */
        }
    }
    if (lenbytes) {
        if (scan_need(s, lenbytes) != TSDF_OK)
            return TSDF_EFORMAT;
        skip = scan_be(s->p + s->pos, lenbytes);
        s->pos += lenbytes;
    }
    if (skip > s->len - s->pos)
        return TSDF_EFORMAT;
    s->pos += (size_t)skip;
    return TSDF_OK;

container:
    if (count > TSDF_PROTO_MAX_MAP_ENTRIES)
        return TSDF_ETOO_LARGE;
    for (uint64_t i = 0; i < count * (is_map ? 2u : 1u); i++) {
        int rc = scan_value(s, depth + 1);
        if (rc != TSDF_OK)
            return rc;
    }
    return TSDF_OK;
}

/* ---- step 2: unpack ----------------------------------------------------- */

/* Scans and unpacks exactly one msgpack map from data; *res must be
 * initialised and is destroyed by the caller. */
static int unpack_map(const void *data, size_t len, msgpack_unpacked *res, tsdf_proto_error *err)
{
    if (data == NULL && len != 0)
        return fail(err, TSDF_EINVAL, "", "NULL message");
    if (len > TSDF_PROTO_MAX_MESSAGE_BYTES)
        return fail(err, TSDF_ETOO_LARGE, "", "message of %zu bytes exceeds the limit of %u", len,
                    TSDF_PROTO_MAX_MESSAGE_BYTES);
    scanner s = {data, len, 0, 0};
    int rc = scan_value(&s, 0);
    if (rc == TSDF_ETOO_LARGE)
        return fail(err, rc, "",
                    "message nests deeper than %u, has a container of more than %u "
                    "entries or more than %u values",
                    TSDF_PROTO_MAX_DEPTH, TSDF_PROTO_MAX_MAP_ENTRIES, PROTO_MAX_OBJECTS);
    if (rc != TSDF_OK)
        return fail(err, rc, "", "not a well-formed msgpack value");
    if (s.pos != len)
        return fail(err, TSDF_EFORMAT, "", "%zu trailing bytes after the message", len - s.pos);

    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(res, data, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return fail(err, TSDF_ENOMEM, "", "out of memory while unpacking");
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        return fail(err, TSDF_EFORMAT, "", "not a well-formed msgpack value");
    if (res->data.type != MSGPACK_OBJECT_MAP)
        return fail(err, TSDF_EFORMAT, "", "the message is not a msgpack map");
    return TSDF_OK;
}

/* ---- step 3: typed access ----------------------------------------------- */

typedef struct {
    const msgpack_object_map *m;
    tsdf_proto_error *err;
} reader;

/* Finds key; 1 found (*out set), 0 absent (nil counts as absent), or a
 * negative code when the key appears twice. */
static int find(const reader *r, const char *key, const msgpack_object **out)
{
    size_t klen = strlen(key);
    const msgpack_object *hit = NULL;
    for (uint32_t i = 0; i < r->m->size; i++) {
        const msgpack_object *k = &r->m->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size != klen ||
            memcmp(k->via.str.ptr, key, klen) != 0)
            continue;
        if (hit != NULL)
            return fail(r->err, TSDF_EPROTO_KEY, key, "%s: key appears twice", key);
        hit = &r->m->ptr[i].val;
    }
    if (hit == NULL || hit->type == MSGPACK_OBJECT_NIL)
        return 0;
    *out = hit;
    return 1;
}

static int missing(const reader *r, const char *key)
{
    return fail(r->err, TSDF_EPROTO_KEY, key, "%s: required key missing", key);
}

static int wrong_type(const reader *r, const char *key, const char *want)
{
    return fail(r->err, TSDF_EPROTO_KEY, key, "%s: expected %s", key, want);
}

/* The lookup every typed getter starts with. present: 0/1 out (NULL: the key
 * is required). Returns 1 when the key is there (o set), else what the getter
 * returns at once: TSDF_OK for an absent optional key, or an error. */
static int find_field(const reader *r, const char *key, int *present, const msgpack_object **o)
{
    int f = find(r, key, o);
    if (f < 0)
        return f;
    if (present)
        *present = f;
    if (f == 0)
        return present ? TSDF_OK : missing(r, key);
    return 1;
}

/* An unsigned integer no larger than max. present: 0/1 out (NULL: required). */
static int get_uint(const reader *r, const char *key, uint64_t max, uint64_t *out, int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return wrong_type(r, key, "an unsigned integer");
    if (o->via.u64 > max)
        return fail(r->err, TSDF_ETOO_LARGE, key, "%s: %llu exceeds %llu", key,
                    (unsigned long long)o->via.u64, (unsigned long long)max);
    *out = o->via.u64;
    return TSDF_OK;
}

/* double -> float without undefined behaviour: C leaves the conversion of a
 * value beyond the float range undefined, so saturate to infinity first. */
static float to_float(double d)
{
    if (isnan(d))
        return NAN;
    if (d > FLT_MAX)
        return INFINITY;
    if (d < -FLT_MAX)
        return -INFINITY;
    return (float)d;
}

static int obj_number(const msgpack_object *o, double *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = (double)o->via.u64;
        return 1;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (double)o->via.i64;
        return 1;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        *out = o->via.f64;
        return 1;
    default:
        return 0;
    }
}

/* A number (any msgpack int or float). finite_code: the code for NaN/inf
 * (0: allowed). The value is stored as double; callers narrow. */
static int get_number(const reader *r, const char *key, int finite_code, double *out, int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (!obj_number(o, out))
        return wrong_type(r, key, "a number");
    if (finite_code && !isfinite(to_float(*out)))
        return fail(r->err, finite_code, key, "%s: not a finite float32", key);
    return TSDF_OK;
}

static int get_float(const reader *r, const char *key, int finite_code, float *out, int *present)
{
    double d;
    int p = 0;
    int rc = get_number(r, key, finite_code, &d, &p);
    if (rc == TSDF_OK && p)
        *out = to_float(d);
    if (present)
        *present = p;
    else if (rc == TSDF_OK && !p)
        return missing(r, key);
    return rc;
}

static int get_bool(const reader *r, const char *key, int *out)
{
    const msgpack_object *o;
    int f = find(r, key, &o);
    if (f <= 0)
        return f;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return wrong_type(r, key, "a boolean");
    *out = o->via.boolean ? 1 : 0;
    return TSDF_OK;
}

/* A string copied into out[cap] (NUL-terminated). too_long: TSDF_ETOO_LARGE
 * fails, 0 truncates silently (for messages). */
static int get_str(const reader *r, const char *key, char *out, size_t cap, int truncate,
                   int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_STR)
        return wrong_type(r, key, "a string");
    size_t n = o->via.str.size;
    if (n + 1 > cap) {
        if (!truncate)
            return fail(r->err, TSDF_ETOO_LARGE, key, "%s: %zu bytes exceed the limit of %zu", key,
                        n, cap - 1);
        n = cap - 1;
    }
    if (memchr(o->via.str.ptr, '\0', n) != NULL)
        return fail(r->err, TSDF_EINVAL, key, "%s: contains a NUL byte", key);
    memcpy(out, o->via.str.ptr, n);
    out[n] = '\0';
    return TSDF_OK;
}

/* A binary payload (zero-copy). */
static int get_bin(const reader *r, const char *key, const void **ptr, size_t *len, int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_BIN)
        return wrong_type(r, key, "a bin");
    *ptr = o->via.bin.ptr;
    *len = o->via.bin.size;
    return TSDF_OK;
}

/* An array of exactly n numbers. */
static int get_numbers(const reader *r, const char *key, size_t n, double *out, int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return fail(r->err, TSDF_EPROTO_KEY, key, "%s: expected an array of %zu numbers", key, n);
    for (size_t i = 0; i < n; i++) {
        if (!obj_number(&o->via.array.ptr[i], &out[i]))
            return fail(r->err, TSDF_EPROTO_KEY, key, "%s: element %zu is not a number", key, i);
    }
    return TSDF_OK;
}

static int get_submap(const reader *r, const char *key, reader *sub, int *present)
{
    const msgpack_object *o;
    int f = find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_MAP)
        return wrong_type(r, key, "a map");
    sub->m = &o->via.map;
    sub->err = r->err;
    return TSDF_OK;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != TSDF_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

/* ---- shared field groups ------------------------------------------------ */

/* width/height with the engine's image limits. */
static int read_size(const reader *r, uint32_t *w, uint32_t *h)
{
    uint64_t w64, h64;
    TRY(get_uint(r, "width", UINT32_MAX, &w64, NULL));
    TRY(get_uint(r, "height", UINT32_MAX, &h64, NULL));
    if (w64 == 0 || h64 == 0)
        return fail(r->err, TSDF_EEMPTY_IMAGE, w64 == 0 ? "width" : "height", "image is %llux%llu",
                    (unsigned long long)w64, (unsigned long long)h64);
    if (w64 > TSDF_MAX_IMAGE_DIM || h64 > TSDF_MAX_IMAGE_DIM || w64 * h64 > TSDF_MAX_IMAGE_PIXELS)
        return fail(r->err, TSDF_ETOO_LARGE, w64 > h64 ? "width" : "height",
                    "image %llux%llu exceeds %u per side or %u pixels", (unsigned long long)w64,
                    (unsigned long long)h64, TSDF_MAX_IMAGE_DIM, TSDF_MAX_IMAGE_PIXELS);
    *w = (uint32_t)w64;
    *h = (uint32_t)h64;
    return TSDF_OK;
}

static int read_intrinsics(const reader *r, tsdf_intrinsics *K)
{
    TRY(get_float(r, "fx", TSDF_EBAD_INTRINSICS, &K->fx, NULL));
    TRY(get_float(r, "fy", TSDF_EBAD_INTRINSICS, &K->fy, NULL));
    TRY(get_float(r, "cx", TSDF_EBAD_INTRINSICS, &K->cx, NULL));
    TRY(get_float(r, "cy", TSDF_EBAD_INTRINSICS, &K->cy, NULL));
    if (!(K->fx > 0.0f) || !(K->fy > 0.0f))
        return fail(r->err, TSDF_EBAD_INTRINSICS, K->fx > 0.0f ? "fy" : "fx",
                    "focal lengths must be positive (fx %g, fy %g)", K->fx, K->fy);
    return TSDF_OK;
}

static int read_pose(const reader *r, float T[16])
{
    double d[16];
    TRY(get_numbers(r, "T_world_cam", 16, d, NULL));
    for (int i = 0; i < 16; i++)
        T[i] = to_float(d[i]);
    if (!tsdf_pose_is_rigid(T))
        return fail(r->err, TSDF_EBAD_POSE, "T_world_cam",
                    "T_world_cam is not a finite rigid transform (row-major, last row 0 0 0 1)");
    return TSDF_OK;
}

static int read_depth_range(const reader *r, float *min_m, float *max_m)
{
    TRY(get_float(r, "min_depth", TSDF_EBAD_DEPTH_RANGE, min_m, &(int){0}));
    TRY(get_float(r, "max_depth", TSDF_EBAD_DEPTH_RANGE, max_m, &(int){0}));
    if (!(*min_m >= 0.0f) || !(*max_m > *min_m))
        return fail(r->err, TSDF_EBAD_DEPTH_RANGE, "min_depth", "depth range [%g, %g] m is invalid",
                    *min_m, *max_m);
    return TSDF_OK;
}

static int read_map_name(const reader *r, char *map)
{
    int present = 0;
    TRY(get_str(r, "map", map, TSDF_PROTO_MAX_NAME_LEN + 1, 0, &present));
    if (!present) {
        strcpy(map, TSDF_PROTO_DEFAULT_MAP);
        return TSDF_OK;
    }
    int rc = tsdf_proto_check_name(map, strlen(map));
    if (rc != TSDF_OK)
        return fail(r->err, rc, "map",
                    "map: name \"%s\" is not 1..%u characters of "
                    "[A-Za-z0-9_.-] not starting with '.'",
                    map, TSDF_PROTO_MAX_NAME_LEN);
    return TSDF_OK;
}

static int read_path(const reader *r, char *path)
{
    int present = 0;
    TRY(get_str(r, "path", path, TSDF_PROTO_MAX_PATH_LEN + 1, 0, &present));
    if (present && path[0] == '\0')
        return fail(r->err, TSDF_EINVAL, "path", "path: empty (leave the key out instead)");
    return TSDF_OK;
}

/* ---- envelope ----------------------------------------------------------- */

static int read_envelope(const reader *r, tsdf_msg_type *type, uint64_t *id, int id_required)
{
    uint64_t v;
    TRY(get_uint(r, "v", UINT64_MAX, &v, NULL));
    if (v != TSDF_PROTO_VERSION)
        return fail(r->err, TSDF_EVERSION, "v", "protocol version %llu, this side speaks %d",
                    (unsigned long long)v, TSDF_PROTO_VERSION);
    const msgpack_object *o;
    int f = find_field(r, "type", NULL, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_STR)
        return wrong_type(r, "type", "a string");
    if (tsdf_msg_type_parse(o->via.str.ptr, o->via.str.size, type) != TSDF_OK)
        return fail(r->err, TSDF_EPROTO_TYPE, "type", "unknown message type \"%.*s\"",
                    (int)(o->via.str.size > 32 ? 32 : o->via.str.size), o->via.str.ptr);
    int present = 0;
    TRY(get_uint(r, "id", UINT64_MAX, id, &present));
    if (!present && id_required)
        return missing(r, "id");
    return TSDF_OK;
}

int tsdf_proto_peek(const void *data, size_t len, tsdf_msg_type *type, uint64_t *id)
{
    if (type == NULL || id == NULL)
        return TSDF_EINVAL;
    *type = TSDF_MSG_NONE;
    *id = 0;
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = unpack_map(data, len, &res, NULL);
    if (rc == TSDF_OK) {
        reader r = {&res.data.via.map, NULL};
        /* Read the id first so that an error reply can echo it even when
         * the version or type is bad. */
        int present = 0;
        (void)get_uint(&r, "id", UINT64_MAX, id, &present);
        rc = read_envelope(&r, type, id, 0);
    }
    msgpack_unpacked_destroy(&res);
    return rc;
}

/* ---- requests ----------------------------------------------------------- */

void tsdf_request_init(tsdf_request *r, tsdf_msg_type type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    strcpy(r->map, TSDF_PROTO_DEFAULT_MAP);
    if (type == TSDF_MSG_FRAME || type == TSDF_MSG_INTEGRATE) {
        tsdf_req_frame *f = &r->u.frame;
        f->sensor.is_id = 1;
        f->frame.depth_format = TSDF_DEPTH_U16;
        f->frame.depth_scale = TSDF_PROTO_DEFAULT_DEPTH_SCALE;
        f->frame.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
        f->frame.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
        tsdf_pose_identity(f->frame.T_world_cam);
    } else if (type == TSDF_MSG_RAYCAST) {
        r->u.raycast.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
        r->u.raycast.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
        tsdf_pose_identity(r->u.raycast.T_world_cam);
    }
}

static int read_frame(const reader *r, tsdf_req_frame *f)
{
    tsdf_frame *fr = &f->frame;
    const msgpack_object *o;
    int s = find(r, "sensor", &o);
    if (s < 0)
        return s;
    if (s == 1) {
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            f->sensor.is_id = 1;
            f->sensor.id = o->via.u64;
        } else if (o->type == MSGPACK_OBJECT_STR) {
            int rc = check_sensor_name(o->via.str.ptr, o->via.str.size);
            if (rc != TSDF_OK)
                return fail(r->err, rc, "sensor",
                            "sensor: name must be 1..%u printable characters without spaces",
                            TSDF_PROTO_MAX_NAME_LEN);
            f->sensor.is_id = 0;
            memcpy(f->sensor.name, o->via.str.ptr, o->via.str.size);
            f->sensor.name[o->via.str.size] = '\0';
        } else {
            return wrong_type(r, "sensor", "a string or an unsigned integer");
        }
    }
    int present = 0;
    TRY(get_uint(r, "seq", UINT64_MAX, &f->seq, &present));
    TRY(get_uint(r, "stamp_ns", UINT64_MAX, &f->stamp_ns, &present));
    TRY(read_size(r, &fr->width, &fr->height));
    TRY(read_intrinsics(r, &fr->K));

    char fmt[8] = "u16";
    TRY(get_str(r, "depth_format", fmt, sizeof(fmt), 1, &present));
    if (strcmp(fmt, "u16") == 0)
        fr->depth_format = TSDF_DEPTH_U16;
    else if (strcmp(fmt, "f32") == 0)
        fr->depth_format = TSDF_DEPTH_F32;
    else
        return fail(r->err, TSDF_EPROTO_KEY, "depth_format",
                    "depth_format: \"%s\" is neither \"u16\" nor \"f32\"", fmt);

    size_t pixels = (size_t)fr->width * fr->height;
    size_t bps = fr->depth_format == TSDF_DEPTH_U16 ? 2 : 4;
    const void *p;
    size_t n;
    TRY(get_bin(r, "depth", &p, &n, NULL));
    if (n != pixels * bps)
        return fail(r->err, TSDF_EBAD_SIZE, "depth", "depth: %zu bytes, expected %zu (%ux%u %s)", n,
                    pixels * bps, fr->width, fr->height, fmt);
    fr->depth = p;
    fr->depth_size_bytes = n;

    if (fr->depth_format == TSDF_DEPTH_U16) {
        TRY(get_float(r, "depth_scale", TSDF_EBAD_DEPTH_RANGE, &fr->depth_scale, &present));
        if (!(fr->depth_scale > 0.0f))
            return fail(r->err, TSDF_EBAD_DEPTH_RANGE, "depth_scale",
                        "depth_scale: %g m per unit must be positive", fr->depth_scale);
    }
    TRY(read_depth_range(r, &fr->min_depth_m, &fr->max_depth_m));
    TRY(read_pose(r, fr->T_world_cam));

    TRY(get_bin(r, "rgb", &p, &n, &present));
    if (present) {
        if (n != pixels * 3)
            return fail(r->err, TSDF_EBAD_SIZE, "rgb", "rgb: %zu bytes, expected %zu (%ux%u RGB8)",
                        n, pixels * 3, fr->width, fr->height);
        fr->rgb = p;
        fr->rgb_size_bytes = n;
    }
    return TSDF_OK;
}

static int read_raycast(const reader *r, tsdf_req_raycast *q)
{
    TRY(read_size(r, &q->width, &q->height));
    TRY(read_intrinsics(r, &q->K));
    TRY(read_pose(r, q->T_world_cam));
    TRY(read_depth_range(r, &q->min_depth_m, &q->max_depth_m));
    TRY(get_bool(r, "rgb", &q->want_rgb));
    /* Refuse a raycast whose reply could not be sent: depth (4) + normals
     * (12) [+ rgb (3)] bytes a pixel, plus room for the envelope. */
    uint64_t bytes = (uint64_t)q->width * q->height * (16u + (q->want_rgb ? 3u : 0u)) + 4096u;
    if (bytes > TSDF_PROTO_MAX_MESSAGE_BYTES)
        return fail(r->err, TSDF_ETOO_LARGE, "width", "a %ux%u raycast reply would exceed %u bytes",
                    q->width, q->height, TSDF_PROTO_MAX_MESSAGE_BYTES);
    return TSDF_OK;
}

static int read_mesh_req(const reader *r, tsdf_req_mesh *q)
{
    double b[6];
    int present = 0;
    TRY(get_numbers(r, "box", 6, b, &present));
    if (present) {
        for (int i = 0; i < 3; i++) {
            q->box.min[i] = to_float(b[i]);
            q->box.max[i] = to_float(b[i + 3]);
            if (!isfinite(q->box.min[i]) || !isfinite(q->box.max[i]) ||
                q->box.max[i] < q->box.min[i])
                return fail(r->err, TSDF_EINVAL, "box",
                            "box: must be finite [minx,miny,minz,maxx,maxy,maxz] with max >= min");
        }
        q->use_box = 1;
    }
    TRY(get_uint(r, "since_version", UINT64_MAX, &q->since_version, &present));
    return TSDF_OK;
}

static int decode_request(const reader *r, tsdf_request *out)
{
    tsdf_msg_type type = TSDF_MSG_NONE;
    uint64_t id = 0;
    int present = 0;
    /* The id first, so that even a request with a bad version or type can
     * be answered with its id. */
    (void)get_uint(r, "id", UINT64_MAX, &id, &present);
    out->id = id;
    int rc = read_envelope(r, &type, &id, 0);
    out->type = type;
    if (rc != TSDF_OK)
        return rc;
    if (type == TSDF_MSG_ERROR)
        return fail(r->err, TSDF_EPROTO_TYPE, "type", "\"error\" is a reply type");
    tsdf_request_init(out, type);
    out->id = id;
    if (!present && type != TSDF_MSG_FRAME)
        return missing(r, "id");

    if (type != TSDF_MSG_MAPS && type != TSDF_MSG_PING)
        TRY(read_map_name(r, out->map));
    switch (type) {
    case TSDF_MSG_FRAME:
    case TSDF_MSG_INTEGRATE:
        return read_frame(r, &out->u.frame);
    case TSDF_MSG_RAYCAST:
        return read_raycast(r, &out->u.raycast);
    case TSDF_MSG_MESH:
        return read_mesh_req(r, &out->u.mesh);
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        return read_path(r, out->u.path.path);
    default:
        return TSDF_OK;
    }
}

/* Decodes one message with body(), the request or the reply decoder: both
 * share the frame (argument checks, cleared error and output, the unpacked
 * top-level map and its zone). out_size bytes at out are zeroed first. */
static int decode_message(const void *data, size_t len, void *out, size_t out_size,
                          tsdf_proto_error *err, int (*body)(const reader *r, void *out))
{
    if (out == NULL)
        return TSDF_EINVAL;
    if (err != NULL) {
        err->key[0] = '\0';
        err->message[0] = '\0';
    }
    memset(out, 0, out_size);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = unpack_map(data, len, &res, err);
    if (rc == TSDF_OK) {
        reader r = {&res.data.via.map, err};
        rc = body(&r, out);
    }
    /* The zone holds only the object tree; payload pointers point into data,
     * so they stay valid after the zone is gone. */
    msgpack_unpacked_destroy(&res);
    return rc;
}

static int decode_request_body(const reader *r, void *out)
{
    return decode_request(r, out);
}

int tsdf_proto_decode_request(const void *data, size_t len, tsdf_request *out,
                              tsdf_proto_error *err)
{
    return decode_message(data, len, out, sizeof(*out), err, decode_request_body);
}

/* ---- replies ------------------------------------------------------------ */

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
}

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

static int read_engine_stats(const reader *r, tsdf_volume_stats *st)
{
    char name[8] = "";
    int present = 0;
    TRY(get_str(r, "backend", name, sizeof(name), 1, &present));
    if (!present || strcmp(name, "auto") == 0)
        st->backend = TSDF_BACKEND_AUTO;
    else if (strcmp(name, "cpu") == 0)
        st->backend = TSDF_BACKEND_CPU;
    else if (strcmp(name, "cuda") == 0)
        st->backend = TSDF_BACKEND_CUDA;
    else
        return fail(r->err, TSDF_EPROTO_KEY, "backend", "backend: unknown name \"%s\"", name);
    for (size_t i = 0; i < ENGINE_FIELD_COUNT; i++) {
        const stat_field *f = &engine_fields[i];
        char *dst = (char *)st + f->offset;
        if (f->kind == ST_F64) {
            double d = 0.0;
            TRY(get_number(r, f->key, 0, &d, &present));
            memcpy(dst, &d, sizeof(d));
        } else {
            uint64_t u = 0;
            TRY(get_uint(r, f->key, f->kind == ST_U32 ? UINT32_MAX : UINT64_MAX, &u, &present));
            if (f->kind == ST_U32) {
                uint32_t u32 = (uint32_t)u;
                memcpy(dst, &u32, sizeof(u32));
            } else {
                memcpy(dst, &u, sizeof(u));
            }
        }
    }
    int has_color = 0;
    TRY(get_bool(r, "has_color", &has_color));
    st->has_color = has_color;

    const msgpack_object *o;
    int f = find(r, "probe_hist", &o);
    if (f < 0)
        return f;
    if (f == 1) {
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != TSDF_PROBE_HIST_BINS)
            return fail(r->err, TSDF_EPROTO_KEY, "probe_hist",
                        "probe_hist: expected an array of %d unsigned integers",
                        TSDF_PROBE_HIST_BINS);
        for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++) {
            const msgpack_object *e = &o->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return fail(r->err, TSDF_EPROTO_KEY, "probe_hist",
                            "probe_hist: element %d is not an unsigned integer", i);
            st->probe_hist[i] = e->via.u64;
        }
    }
    return TSDF_OK;
}

static int read_daemon_stats(const reader *r, tsdf_rep_stats *s)
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
            return fail(r->err, TSDF_ETOO_LARGE, "daemon",
                        "daemon: a key is empty, longer than %u bytes or holds a NUL",
                        TSDF_PROTO_MAX_STATS_KEY_LEN);
        if (s->extra_count >= TSDF_PROTO_MAX_STATS_EXTRA)
            return fail(r->err, TSDF_ETOO_LARGE, "daemon", "daemon: more than %u counters",
                        TSDF_PROTO_MAX_STATS_EXTRA);
        memcpy(e.key, k->via.str.ptr, k->via.str.size);
        e.key[k->via.str.size] = '\0';
        s->extra[s->extra_count++] = e;
    }
    return TSDF_OK;
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

static int read_timeline(const reader *r, tsdf_rep_stats *s)
{
    const msgpack_object *o;
    int f = find(r, "timeline", &o);
    if (f <= 0)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wrong_type(r, "timeline", "an array of maps");
    if (o->via.array.size > TSDF_PROTO_MAX_TIMELINE)
        return fail(r->err, TSDF_ETOO_LARGE, "timeline", "timeline: more than %u frames",
                    TSDF_PROTO_MAX_TIMELINE);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_MAP)
            return wrong_type(r, "timeline", "an array of maps");
        reader sub = {&e->via.map, r->err};
        tsdf_frame_timeline *t = &s->timeline[i];
        memset(t, 0, sizeof(*t));
        TRY(get_uint(&sub, "frame", UINT64_MAX, &t->frame, NULL));
        for (size_t k = 0; k < TIMELINE_FIELD_COUNT; k++) {
            double d = 0.0;
            TRY(get_number(&sub, timeline_fields[k].key, TSDF_EPROTO_KEY, &d, NULL));
            memcpy((char *)t + timeline_fields[k].offset, &d, sizeof(d));
        }
    }
    s->timeline_count = o->via.array.size;
    return TSDF_OK;
}

static int read_stats_rep(const reader *r, tsdf_rep_stats *s)
{
    reader sub;
    int present = 0;
    TRY(get_submap(r, "engine", &sub, &present));
    if (present) {
        s->has_engine = 1;
        TRY(read_engine_stats(&sub, &s->engine));
    }
    TRY(get_submap(r, "daemon", &sub, &present));
    if (present)
        TRY(read_daemon_stats(&sub, s));
    TRY(read_timeline(r, s));
    return TSDF_OK;
}

static int read_raycast_rep(const reader *r, tsdf_rep_raycast *q)
{
    TRY(read_size(r, &q->width, &q->height));
    size_t pixels = (size_t)q->width * q->height;
    size_t n;
    int present = 0;
    TRY(get_bin(r, "depth", &q->depth_m, &n, NULL));
    if (n != pixels * 4)
        return fail(r->err, TSDF_EBAD_SIZE, "depth", "depth: %zu bytes, expected %zu", n,
                    pixels * 4);
    TRY(get_bin(r, "normals", &q->normals, &n, NULL));
    if (n != pixels * 12)
        return fail(r->err, TSDF_EBAD_SIZE, "normals", "normals: %zu bytes, expected %zu", n,
                    pixels * 12);
    const void *rgb = NULL;
    TRY(get_bin(r, "rgb", &rgb, &n, &present));
    if (present) {
        if (n != pixels * 3)
            return fail(r->err, TSDF_EBAD_SIZE, "rgb", "rgb: %zu bytes, expected %zu", n,
                        pixels * 3);
        q->rgb = rgb;
    }
    return TSDF_OK;
}

static int read_mesh_rep(const reader *r, tsdf_rep_mesh *q)
{
    const uint64_t max_items = TSDF_PROTO_MAX_MESSAGE_BYTES / 12u;
    int present = 0;
    size_t n;
    TRY(get_uint(r, "version", UINT64_MAX, &q->version, &present));
    TRY(get_uint(r, "vertex_count", max_items, &q->vertex_count, NULL));
    TRY(get_uint(r, "triangle_count", max_items, &q->triangle_count, NULL));
    size_t vbytes = (size_t)q->vertex_count * 12u;
    TRY(get_bin(r, "positions", &q->positions, &n, NULL));
    if (n != vbytes)
        return fail(r->err, TSDF_EBAD_SIZE, "positions", "positions: %zu bytes, expected %zu", n,
                    vbytes);
    TRY(get_bin(r, "normals", &q->normals, &n, NULL));
    if (n != vbytes)
        return fail(r->err, TSDF_EBAD_SIZE, "normals", "normals: %zu bytes, expected %zu", n,
                    vbytes);
    const void *colors = NULL;
    TRY(get_bin(r, "colors", &colors, &n, &present));
    if (present) {
        if (n != (size_t)q->vertex_count * 3u)
            return fail(r->err, TSDF_EBAD_SIZE, "colors", "colors: %zu bytes, expected %zu", n,
                        (size_t)q->vertex_count * 3u);
        q->colors = colors;
    }
    TRY(get_bin(r, "indices", &q->indices, &n, NULL));
    if (n != (size_t)q->triangle_count * 12u)
        return fail(r->err, TSDF_EBAD_SIZE, "indices", "indices: %zu bytes, expected %zu", n,
                    (size_t)q->triangle_count * 12u);
    /* A bad index would make a consumer read outside the vertex arrays. */
    const uint8_t *ip = q->indices;
    for (uint64_t i = 0; i < q->triangle_count * 3u; i++) {
        uint32_t idx;
        memcpy(&idx, ip + 4u * i, 4);
        if (idx >= q->vertex_count)
            return fail(r->err, TSDF_EBAD_SIZE, "indices",
                        "indices: entry %llu is %u, vertex_count is %llu", (unsigned long long)i,
                        idx, (unsigned long long)q->vertex_count);
    }
    return TSDF_OK;
}

static int read_maps_rep(const reader *r, tsdf_rep_maps *q)
{
    const msgpack_object *o;
    int f = find_field(r, "maps", NULL, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wrong_type(r, "maps", "an array of strings");
    if (o->via.array.size > TSDF_PROTO_MAX_MAPS)
        return fail(r->err, TSDF_ETOO_LARGE, "maps", "maps: more than %u names",
                    TSDF_PROTO_MAX_MAPS);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_STR)
            return fail(r->err, TSDF_EPROTO_KEY, "maps", "maps: element %u is not a string", i);
        int rc = tsdf_proto_check_name(e->via.str.ptr, e->via.str.size);
        if (rc != TSDF_OK)
            return fail(r->err, rc, "maps", "maps: element %u is not a valid map name", i);
        memcpy(q->names[i], e->via.str.ptr, e->via.str.size);
        q->names[i][e->via.str.size] = '\0';
    }
    q->count = o->via.array.size;
    return TSDF_OK;
}

static int decode_reply(const reader *r, tsdf_reply *out)
{
    tsdf_msg_type type = TSDF_MSG_NONE;
    uint64_t id = 0;
    int rc = read_envelope(r, &type, &id, 1);
    out->type = type;
    out->id = id;
    if (rc != TSDF_OK)
        return rc;
    if (type == TSDF_MSG_FRAME)
        return fail(r->err, TSDF_EPROTO_TYPE, "type", "frame messages are never answered");

    const msgpack_object *o;
    int f = find_field(r, "status", NULL, &o);
    if (f != 1)
        return f;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == 0) {
        out->status = TSDF_OK;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN) {
        out->status = (int)o->via.i64;
    } else {
        return fail(r->err, TSDF_EPROTO_KEY, "status", "status: expected 0 or a negative code");
    }
    if (out->status != TSDF_OK) {
        /* An empty name or message counts as absent, as in the encoder: an
         * error reply always carries both, so it reads the same after a
         * round trip. */
        int present = 0;
        TRY(get_str(r, "error", out->error, sizeof(out->error), 1, &present));
        if (!present || out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", tsdf_errname(out->status));
        TRY(get_str(r, "message", out->message, sizeof(out->message), 1, &present));
        if (!present || out->message[0] == '\0')
            snprintf(out->message, sizeof(out->message), "%s", tsdf_strerror(out->status));
        return TSDF_OK;
    }
    switch (type) {
    case TSDF_MSG_INTEGRATE: {
        int present = 0;
        TRY(get_uint(r, "seq", UINT64_MAX, &out->u.integrate.seq, &present));
        TRY(get_uint(r, "version", UINT64_MAX, &out->u.integrate.version, &present));
        return get_number(r, "integrate_ms", 0, &out->u.integrate.integrate_ms, &present);
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
        TRY(get_str(r, "path", out->u.path.path, sizeof(out->u.path.path), 0, &present));
        return get_uint(r, "version", UINT64_MAX, &out->u.path.version, &present);
    }
    case TSDF_MSG_MAPS:
        return read_maps_rep(r, &out->u.maps);
    case TSDF_MSG_PING: {
        int present = 0;
        TRY(get_str(r, "server", out->u.ping.server, sizeof(out->u.ping.server), 1, &present));
        return get_uint(r, "uptime_ms", UINT64_MAX, &out->u.ping.uptime_ms, &present);
    }
    case TSDF_MSG_ERROR:
        return fail(r->err, TSDF_EPROTO_KEY, "status", "an \"error\" reply must carry an error");
    default:
        return TSDF_OK;
    }
}

static int decode_reply_body(const reader *r, void *out)
{
    return decode_reply(r, out);
}

int tsdf_proto_decode_reply(const void *data, size_t len, tsdf_reply *out, tsdf_proto_error *err)
{
    return decode_message(data, len, out, sizeof(*out), err, decode_reply_body);
}

/* ---- encoding ----------------------------------------------------------- */

typedef struct {
    msgpack_packer pk;
    tsdf_buf *b;
    int err;
} writer;

static int write_cb(void *data, const char *p, size_t n)
{
    writer *w = data;
    if (w->err != TSDF_OK)
        return -1;
    int rc = tsdf_buf_append(w->b, p, n);
    if (rc != TSDF_OK) {
        w->err = rc;
        return -1;
    }
    return 0;
}

static void w_key(writer *w, const char *k)
{
    size_t n = strlen(k);
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, k, n);
}

static void w_str(writer *w, const char *k, const char *v)
{
    w_key(w, k);
    size_t n = strlen(v);
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, v, n);
}

static void w_uint(writer *w, const char *k, uint64_t v)
{
    w_key(w, k);
    msgpack_pack_uint64(&w->pk, v);
}

static void w_float(writer *w, const char *k, float v)
{
    w_key(w, k);
    msgpack_pack_float(&w->pk, v);
}

static void w_double(writer *w, const char *k, double v)
{
    w_key(w, k);
    msgpack_pack_double(&w->pk, v);
}

static void w_bin(writer *w, const char *k, const void *p, size_t n)
{
    w_key(w, k);
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

static void w_bool(writer *w, const char *k, int v)
{
    w_key(w, k);
    if (v)
        msgpack_pack_true(&w->pk);
    else
        msgpack_pack_false(&w->pk);
}

static void w_floats(writer *w, const char *k, const float *v, size_t n)
{
    w_key(w, k);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_float(&w->pk, v[i]);
}

static void w_envelope(writer *w, tsdf_msg_type type, uint64_t id)
{
    w_uint(w, "v", TSDF_PROTO_VERSION);
    w_str(w, "type", tsdf_msg_type_name(type));
    w_uint(w, "id", id);
}

static void w_intrinsics(writer *w, const tsdf_intrinsics *K)
{
    w_float(w, "fx", K->fx);
    w_float(w, "fy", K->fy);
    w_float(w, "cx", K->cx);
    w_float(w, "cy", K->cy);
}

/* The image checks an encoder must make BEFORE it reads width*height
 * samples from the caller's pointers. */
static int check_image(uint32_t w, uint32_t h)
{
    if (w == 0 || h == 0)
        return TSDF_EEMPTY_IMAGE;
    if (w > TSDF_MAX_IMAGE_DIM || h > TSDF_MAX_IMAGE_DIM || (uint64_t)w * h > TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    return TSDF_OK;
}

static int encode_request_body(writer *w, const tsdf_request *q)
{
    int has_map = q->type != TSDF_MSG_MAPS && q->type != TSDF_MSG_PING;
    uint32_t n = 3 + (has_map ? 1 : 0);
    switch (q->type) {
    case TSDF_MSG_FRAME:
    case TSDF_MSG_INTEGRATE: {
        const tsdf_frame *f = &q->u.frame.frame;
        TRY(check_image(f->width, f->height));
        if (f->depth == NULL ||
            (f->depth_format != TSDF_DEPTH_U16 && f->depth_format != TSDF_DEPTH_F32))
            return TSDF_EINVAL;
        int u16 = f->depth_format == TSDF_DEPTH_U16;
        n += 14 + (u16 ? 1 : 0) + (f->rgb ? 1 : 0);
        msgpack_pack_map(&w->pk, n);
        w_envelope(w, q->type, q->id);
        w_str(w, "map", q->map);
        if (q->u.frame.sensor.is_id) {
            w_uint(w, "sensor", q->u.frame.sensor.id);
        } else {
            w_str(w, "sensor", q->u.frame.sensor.name);
        }
        w_uint(w, "seq", q->u.frame.seq);
        w_uint(w, "stamp_ns", q->u.frame.stamp_ns);
        w_uint(w, "width", f->width);
        w_uint(w, "height", f->height);
        w_intrinsics(w, &f->K);
        w_str(w, "depth_format", u16 ? "u16" : "f32");
        w_bin(w, "depth", f->depth, (size_t)f->width * f->height * (u16 ? 2u : 4u));
        if (u16)
            w_float(w, "depth_scale", f->depth_scale);
        w_float(w, "min_depth", f->min_depth_m);
        w_float(w, "max_depth", f->max_depth_m);
        w_floats(w, "T_world_cam", f->T_world_cam, 16);
        if (f->rgb)
            w_bin(w, "rgb", f->rgb, (size_t)f->width * f->height * 3u);
        return TSDF_OK;
    }
    case TSDF_MSG_RAYCAST: {
        const tsdf_req_raycast *r = &q->u.raycast;
        msgpack_pack_map(&w->pk, n + 10);
        w_envelope(w, q->type, q->id);
        w_str(w, "map", q->map);
        w_uint(w, "width", r->width);
        w_uint(w, "height", r->height);
        w_intrinsics(w, &r->K);
        w_floats(w, "T_world_cam", r->T_world_cam, 16);
        w_float(w, "min_depth", r->min_depth_m);
        w_float(w, "max_depth", r->max_depth_m);
        w_bool(w, "rgb", r->want_rgb);
        return TSDF_OK;
    }
    case TSDF_MSG_MESH: {
        const tsdf_req_mesh *m = &q->u.mesh;
        msgpack_pack_map(&w->pk, n + 1 + (m->use_box ? 1 : 0));
        w_envelope(w, q->type, q->id);
        w_str(w, "map", q->map);
        if (m->use_box) {
            float b[6] = {m->box.min[0], m->box.min[1], m->box.min[2],
                          m->box.max[0], m->box.max[1], m->box.max[2]};
            w_floats(w, "box", b, 6);
        }
        w_uint(w, "since_version", m->since_version);
        return TSDF_OK;
    }
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD: {
        int has_path = q->u.path.path[0] != '\0';
        msgpack_pack_map(&w->pk, n + (has_path ? 1 : 0));
        w_envelope(w, q->type, q->id);
        w_str(w, "map", q->map);
        if (has_path)
            w_str(w, "path", q->u.path.path);
        return TSDF_OK;
    }
    case TSDF_MSG_STATS:
    case TSDF_MSG_RESET:
    case TSDF_MSG_MAPS:
    case TSDF_MSG_PING:
        msgpack_pack_map(&w->pk, n);
        w_envelope(w, q->type, q->id);
        if (has_map)
            w_str(w, "map", q->map);
        return TSDF_OK;
    default:
        return TSDF_EPROTO_TYPE;
    }
}

static int encode_reply_body(writer *w, const tsdf_reply *r);

/* Runs an encoder body, then decodes the result so that nothing leaves this
 * side that the other side would refuse. On any error out is rolled back. */
static int encode_checked(tsdf_buf *out, int is_request, const void *src)
{
    if (out == NULL || src == NULL)
        return TSDF_EINVAL;
    size_t start = out->len;
    writer w;
    w.b = out;
    w.err = TSDF_OK;
    msgpack_packer_init(&w.pk, &w, write_cb);
    int rc;
    if (is_request) {
        const tsdf_request *q = src;
        /* Strings are fixed arrays: make sure they are terminated before
         * strlen runs over them. */
        if (memchr(q->map, '\0', sizeof(q->map)) == NULL ||
            memchr(q->u.path.path, '\0', sizeof(q->u.path.path)) == NULL)
            return TSDF_EINVAL;
        rc = encode_request_body(&w, q);
    } else {
        rc = encode_reply_body(&w, src);
    }
    if (rc == TSDF_OK)
        rc = w.err;
    if (rc == TSDF_OK) {
        void *tmp = malloc(is_request ? sizeof(tsdf_request) : sizeof(tsdf_reply));
        if (tmp == NULL) {
            rc = TSDF_ENOMEM;
        } else {
            rc = is_request
                     ? tsdf_proto_decode_request(out->data + start, out->len - start, tmp, NULL)
                     : tsdf_proto_decode_reply(out->data + start, out->len - start, tmp, NULL);
            free(tmp);
        }
    }
    if (rc != TSDF_OK)
        out->len = start;
    return rc;
}

int tsdf_proto_encode_request(const tsdf_request *req, tsdf_buf *out)
{
    return encode_checked(out, 1, req);
}

static void w_engine_stats(writer *w, const tsdf_volume_stats *st)
{
    w_key(w, "engine");
    msgpack_pack_map(&w->pk, (uint32_t)ENGINE_FIELD_COUNT + 3);
    w_str(w, "backend", backend_wire_name(st->backend));
    for (size_t i = 0; i < ENGINE_FIELD_COUNT; i++) {
        const stat_field *f = &engine_fields[i];
        const char *src = (const char *)st + f->offset;
        if (f->kind == ST_F64) {
            double d;
            memcpy(&d, src, sizeof(d));
            w_double(w, f->key, d);
        } else if (f->kind == ST_U32) {
            uint32_t u;
            memcpy(&u, src, sizeof(u));
            w_uint(w, f->key, u);
        } else {
            uint64_t u;
            memcpy(&u, src, sizeof(u));
            w_uint(w, f->key, u);
        }
    }
    w_bool(w, "has_color", st->has_color);
    w_key(w, "probe_hist");
    msgpack_pack_array(&w->pk, TSDF_PROBE_HIST_BINS);
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
        msgpack_pack_uint64(&w->pk, st->probe_hist[i]);
}

static int encode_reply_body(writer *w, const tsdf_reply *r)
{
    if (r->type == TSDF_MSG_NONE || r->type == TSDF_MSG_FRAME || (unsigned)r->type >= TYPE_COUNT)
        return TSDF_EPROTO_TYPE;
    if (r->status > 0)
        return TSDF_EINVAL;
    if (r->status != TSDF_OK) {
        msgpack_pack_map(&w->pk, 6);
        w_envelope(w, r->type, r->id);
        w_key(w, "status");
        msgpack_pack_int(&w->pk, r->status);
        w_str(w, "error", r->error[0] ? r->error : tsdf_errname(r->status));
        w_str(w, "message", r->message[0] ? r->message : tsdf_strerror(r->status));
        return TSDF_OK;
    }
    const uint32_t env = 4;
    switch (r->type) {
    case TSDF_MSG_INTEGRATE:
        msgpack_pack_map(&w->pk, env + 3);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_rep_raycast *q = &r->u.raycast;
        TRY(check_image(q->width, q->height));
        if (q->depth_m == NULL || q->normals == NULL)
            return TSDF_EINVAL;
        msgpack_pack_map(&w->pk, env + 4 + (q->rgb ? 1 : 0));
        break;
    }
    case TSDF_MSG_MESH: {
        const tsdf_rep_mesh *q = &r->u.mesh;
        if ((q->vertex_count && (q->positions == NULL || q->normals == NULL)) ||
            (q->triangle_count && q->indices == NULL))
            return TSDF_EINVAL;
        if (q->vertex_count > TSDF_PROTO_MAX_MESSAGE_BYTES / 12u ||
            q->triangle_count > TSDF_PROTO_MAX_MESSAGE_BYTES / 12u)
            return TSDF_ETOO_LARGE;
        msgpack_pack_map(&w->pk, env + 6 + (q->colors ? 1 : 0));
        break;
    }
    case TSDF_MSG_STATS:
        if (r->u.stats.timeline_count > TSDF_PROTO_MAX_TIMELINE)
            return TSDF_ETOO_LARGE;
        msgpack_pack_map(&w->pk, env + 1 + (r->u.stats.has_engine ? 1 : 0) +
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
        if (memchr(r->u.ping.server, '\0', sizeof(r->u.ping.server)) == NULL)
            return TSDF_EINVAL;
        msgpack_pack_map(&w->pk, env + 2);
        break;
    case TSDF_MSG_ERROR:
        return TSDF_EINVAL; /* an error reply needs a status */
    default:
        msgpack_pack_map(&w->pk, env);
        break;
    }
    w_envelope(w, r->type, r->id);
    w_key(w, "status");
    msgpack_pack_int(&w->pk, 0);

    switch (r->type) {
    case TSDF_MSG_INTEGRATE:
        w_uint(w, "seq", r->u.integrate.seq);
        w_uint(w, "version", r->u.integrate.version);
        w_double(w, "integrate_ms", r->u.integrate.integrate_ms);
        break;
    case TSDF_MSG_RAYCAST: {
        const tsdf_rep_raycast *q = &r->u.raycast;
        size_t px = (size_t)q->width * q->height;
        w_uint(w, "width", q->width);
        w_uint(w, "height", q->height);
        w_bin(w, "depth", q->depth_m, px * 4u);
        w_bin(w, "normals", q->normals, px * 12u);
        if (q->rgb)
            w_bin(w, "rgb", q->rgb, px * 3u);
        break;
    }
    case TSDF_MSG_MESH: {
        const tsdf_rep_mesh *q = &r->u.mesh;
        /* Empty arrays may come with NULL pointers; send empty bins. */
        static const uint8_t none[1];
        size_t vb = (size_t)q->vertex_count * 12u;
        w_uint(w, "version", q->version);
        w_uint(w, "vertex_count", q->vertex_count);
        w_uint(w, "triangle_count", q->triangle_count);
        w_bin(w, "positions", vb ? q->positions : none, vb);
        w_bin(w, "normals", vb ? q->normals : none, vb);
        if (q->colors)
            w_bin(w, "colors", q->colors, (size_t)q->vertex_count * 3u);
        w_bin(w, "indices", q->triangle_count ? q->indices : none, (size_t)q->triangle_count * 12u);
        break;
    }
    case TSDF_MSG_STATS: {
        const tsdf_rep_stats *s = &r->u.stats;
        if (s->extra_count > TSDF_PROTO_MAX_STATS_EXTRA)
            return TSDF_ETOO_LARGE;
        if (s->has_engine)
            w_engine_stats(w, &s->engine);
        w_key(w, "daemon");
        msgpack_pack_map(&w->pk, s->extra_count);
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            if (memchr(e->key, '\0', sizeof(e->key)) == NULL)
                return TSDF_EINVAL;
            if (e->is_float)
                w_double(w, e->key, e->f);
            else {
                w_key(w, e->key);
                msgpack_pack_int64(&w->pk, e->i);
            }
        }
        /* Only from a backend that records timelines: older readers skip
         * the key, and its absence means "not available". */
        if (s->timeline_count > 0) {
            w_key(w, "timeline");
            msgpack_pack_array(&w->pk, s->timeline_count);
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                msgpack_pack_map(&w->pk, 1 + (uint32_t)TIMELINE_FIELD_COUNT);
                w_uint(w, "frame", t->frame);
                for (size_t k = 0; k < TIMELINE_FIELD_COUNT; k++) {
                    double d;
                    memcpy(&d, (const char *)t + timeline_fields[k].offset, sizeof(d));
                    w_double(w, timeline_fields[k].key, d);
                }
            }
        }
        break;
    }
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        w_str(w, "path", r->u.path.path);
        w_uint(w, "version", r->u.path.version);
        break;
    case TSDF_MSG_MAPS:
        w_key(w, "maps");
        msgpack_pack_array(&w->pk, r->u.maps.count);
        for (uint32_t i = 0; i < r->u.maps.count; i++) {
            const char *name = r->u.maps.names[i];
            if (memchr(name, '\0', TSDF_PROTO_MAX_NAME_LEN + 1) == NULL)
                return TSDF_EINVAL;
            size_t n = strlen(name);
            msgpack_pack_str(&w->pk, n);
            msgpack_pack_str_body(&w->pk, name, n);
        }
        break;
    case TSDF_MSG_PING:
        w_str(w, "server", r->u.ping.server);
        w_uint(w, "uptime_ms", r->u.ping.uptime_ms);
        break;
    default:
        break;
    }
    return TSDF_OK;
}

int tsdf_proto_encode_reply(const tsdf_reply *rep, tsdf_buf *out)
{
    return encode_checked(out, 0, rep);
}
