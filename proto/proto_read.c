/*
 * proto_read.c - the decoding half of the wire codec (see proto_read.h).
 *
 * Decoding runs in three steps, so that no byte sequence can make the codec
 * misbehave: (1) a small structural scan of the raw bytes that bounds sizes,
 * counts and nesting before msgpack-c allocates anything; (2) msgpack-c
 * unpacks the one value into a zone; (3) the typed getters below read every
 * known key, check its msgpack type and value, and the request and reply
 * decoders copy it into their structs.
 */
#include "proto_read.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto_utf8.h"

/* The most msgpack values one message may hold. It bounds the msgpack zone
 * (about 24 bytes a value), which otherwise grows with the message size even
 * for a message of nothing but nils. Legitimate messages use a few hundred. */
#define PROTO_MAX_OBJECTS 65536u

/* ---- error detail ------------------------------------------------------- */

int proto_fail(tsdf_proto_error *err, int code, const char *key, const char *fmt, ...)
{
    if (err != NULL) {
        snprintf(err->key, sizeof(err->key), "%s", key ? key : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        /* Messages quote the peer's bytes (a type or name it sent) and end
         * up in logs and error replies: keep them valid and printable. */
        proto_utf8_sanitize(err->message);
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
        return proto_fail(err, TSDF_EINVAL, "", "NULL message");
    if (len > TSDF_PROTO_MAX_MESSAGE_BYTES)
        return proto_fail(err, TSDF_ETOO_LARGE, "", "message of %zu bytes exceeds the limit of %u",
                          len, TSDF_PROTO_MAX_MESSAGE_BYTES);
    scanner s = {data, len, 0, 0};
    int rc = scan_value(&s, 0);
    if (rc == TSDF_ETOO_LARGE)
        return proto_fail(err, rc, "",
                          "message nests deeper than %u, has a container of more than %u "
                          "entries or more than %u values",
                          TSDF_PROTO_MAX_DEPTH, TSDF_PROTO_MAX_MAP_ENTRIES, PROTO_MAX_OBJECTS);
    if (rc != TSDF_OK)
        return proto_fail(err, rc, "", "not a well-formed msgpack value");
    if (s.pos != len)
        return proto_fail(err, TSDF_EFORMAT, "", "%zu trailing bytes after the message",
                          len - s.pos);

    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(res, data, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return proto_fail(err, TSDF_ENOMEM, "", "out of memory while unpacking");
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        return proto_fail(err, TSDF_EFORMAT, "", "not a well-formed msgpack value");
    if (res->data.type != MSGPACK_OBJECT_MAP)
        return proto_fail(err, TSDF_EFORMAT, "", "the message is not a msgpack map");
    return TSDF_OK;
}

/* ---- step 3: typed access ----------------------------------------------- */

int proto_find(const proto_reader *r, const char *key, const msgpack_object **out)
{
    size_t klen = strlen(key);
    const msgpack_object *hit = NULL;
    for (uint32_t i = 0; i < r->m->size; i++) {
        const msgpack_object *k = &r->m->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size != klen ||
            memcmp(k->via.str.ptr, key, klen) != 0)
            continue;
        if (hit != NULL)
            return proto_fail(r->err, TSDF_EPROTO_KEY, key, "%s: key appears twice", key);
        hit = &r->m->ptr[i].val;
    }
    if (hit == NULL || hit->type == MSGPACK_OBJECT_NIL)
        return 0;
    *out = hit;
    return 1;
}

int proto_missing(const proto_reader *r, const char *key)
{
    return proto_fail(r->err, TSDF_EPROTO_KEY, key, "%s: required key missing", key);
}

int proto_wrong_type(const proto_reader *r, const char *key, const char *want)
{
    return proto_fail(r->err, TSDF_EPROTO_KEY, key, "%s: expected %s", key, want);
}

int proto_find_field(const proto_reader *r, const char *key, int *present, const msgpack_object **o)
{
    int f = proto_find(r, key, o);
    if (f < 0)
        return f;
    if (present)
        *present = f;
    if (f == 0)
        return present ? TSDF_OK : proto_missing(r, key);
    return 1;
}

int proto_get_uint(const proto_reader *r, const char *key, uint64_t max, uint64_t *out,
                   int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return proto_wrong_type(r, key, "an unsigned integer");
    if (o->via.u64 > max)
        return proto_fail(r->err, TSDF_ETOO_LARGE, key, "%s: %llu exceeds %llu", key,
                          (unsigned long long)o->via.u64, (unsigned long long)max);
    *out = o->via.u64;
    return TSDF_OK;
}

float proto_to_float(double d)
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

int proto_get_number(const proto_reader *r, const char *key, int finite_code, double *out,
                     int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (!obj_number(o, out))
        return proto_wrong_type(r, key, "a number");
    if (finite_code && !isfinite(proto_to_float(*out)))
        return proto_fail(r->err, finite_code, key, "%s: not a finite float32", key);
    return TSDF_OK;
}

int proto_get_float(const proto_reader *r, const char *key, int finite_code, float *out,
                    int *present)
{
    /* Set by proto_get_number whenever p is; initialised for a compiler
     * that cannot see that (a Release build warned). */
    double d = 0.0;
    int p = 0;
    int rc = proto_get_number(r, key, finite_code, &d, &p);
    if (rc == TSDF_OK && p)
        *out = proto_to_float(d);
    if (present)
        *present = p;
    else if (rc == TSDF_OK && !p)
        return proto_missing(r, key);
    return rc;
}

int proto_get_bool(const proto_reader *r, const char *key, int *out)
{
    const msgpack_object *o;
    int f = proto_find(r, key, &o);
    if (f <= 0)
        return f;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return proto_wrong_type(r, key, "a boolean");
    *out = o->via.boolean ? 1 : 0;
    return TSDF_OK;
}

int proto_get_str(const proto_reader *r, const char *key, char *out, size_t cap, int truncate,
                  int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_STR)
        return proto_wrong_type(r, key, "a string");
    size_t n = o->via.str.size;
    if (n + 1 > cap) {
        if (!truncate)
            return proto_fail(r->err, TSDF_ETOO_LARGE, key, "%s: %zu bytes exceed the limit of %zu",
                              key, n, cap - 1);
        n = cap - 1;
    }
    if (memchr(o->via.str.ptr, '\0', n) != NULL)
        return proto_fail(r->err, TSDF_EINVAL, key, "%s: contains a NUL byte", key);
    /* Identifiers (names, paths) must be what they claim, or they could be
     * echoed into replies as invalid str; free text is only shown, so it is
     * repaired instead, including a character that truncation cut. */
    if (!truncate && !proto_utf8_valid(o->via.str.ptr, n))
        return proto_fail(r->err, TSDF_EINVAL, key, "%s: not valid UTF-8", key);
    memcpy(out, o->via.str.ptr, n);
    out[n] = '\0';
    if (truncate)
        proto_utf8_sanitize(out);
    return TSDF_OK;
}

int proto_get_bin(const proto_reader *r, const char *key, const void **ptr, size_t *len,
                  int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_BIN)
        return proto_wrong_type(r, key, "a bin");
    *ptr = o->via.bin.ptr;
    *len = o->via.bin.size;
    return TSDF_OK;
}

int proto_get_numbers(const proto_reader *r, const char *key, size_t n, double *out, int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return proto_fail(r->err, TSDF_EPROTO_KEY, key, "%s: expected an array of %zu numbers", key,
                          n);
    for (size_t i = 0; i < n; i++) {
        if (!obj_number(&o->via.array.ptr[i], &out[i]))
            return proto_fail(r->err, TSDF_EPROTO_KEY, key, "%s: element %zu is not a number", key,
                              i);
    }
    return TSDF_OK;
}

int proto_get_submap(const proto_reader *r, const char *key, proto_reader *sub, int *present)
{
    const msgpack_object *o;
    int f = proto_find_field(r, key, present, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_wrong_type(r, key, "a map");
    sub->m = &o->via.map;
    sub->err = r->err;
    return TSDF_OK;
}

/* ---- field groups shared by requests and replies ------------------------ */

int proto_read_size(const proto_reader *r, uint32_t *w, uint32_t *h)
{
    uint64_t w64 = 0, h64 = 0; /* both set, or an error returned */
    PROTO_TRY(proto_get_uint(r, "width", UINT32_MAX, &w64, NULL));
    PROTO_TRY(proto_get_uint(r, "height", UINT32_MAX, &h64, NULL));
    if (w64 == 0 || h64 == 0)
        return proto_fail(r->err, TSDF_EEMPTY_IMAGE, w64 == 0 ? "width" : "height",
                          "image is %llux%llu", (unsigned long long)w64, (unsigned long long)h64);
    if (w64 > TSDF_MAX_IMAGE_DIM || h64 > TSDF_MAX_IMAGE_DIM || w64 * h64 > TSDF_MAX_IMAGE_PIXELS)
        return proto_fail(r->err, TSDF_ETOO_LARGE, w64 > h64 ? "width" : "height",
                          "image %llux%llu exceeds %u per side or %u pixels",
                          (unsigned long long)w64, (unsigned long long)h64, TSDF_MAX_IMAGE_DIM,
                          TSDF_MAX_IMAGE_PIXELS);
    *w = (uint32_t)w64;
    *h = (uint32_t)h64;
    return TSDF_OK;
}

/* ---- envelope ----------------------------------------------------------- */

/* Reads "type" and "id" without reporting anything, so that an error reply
 * can echo them whatever else is wrong with the message (PROTOCOL.md
 * section 3): *type and *id are left as they are when unreadable. */
static void read_identity(const proto_reader *r, tsdf_msg_type *type, uint64_t *id)
{
    proto_reader quiet = {r->m, NULL};
    const msgpack_object *o;
    uint64_t v = 0;
    int present = 0;
    if (proto_find(&quiet, "type", &o) == 1 && o->type == MSGPACK_OBJECT_STR)
        (void)tsdf_msg_type_parse(o->via.str.ptr, o->via.str.size, type);
    if (proto_get_uint(&quiet, "id", UINT64_MAX, &v, &present) == TSDF_OK && present)
        *id = v;
}

int proto_read_envelope(const proto_reader *r, tsdf_msg_type *type, uint64_t *id, int id_required)
{
    read_identity(r, type, id);
    /* A missing "v", or one that is no unsigned integer, is a peer of no
     * version this side speaks: VERSION, like a wrong number. */
    const msgpack_object *o;
    int f = proto_find(r, "v", &o);
    if (f < 0)
        return f;
    if (f == 0)
        return proto_fail(r->err, TSDF_EVERSION, "v",
                          "v: missing (the protocol version; this side speaks %d)",
                          TSDF_PROTO_VERSION);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return proto_fail(r->err, TSDF_EVERSION, "v",
                          "v: not an unsigned integer (the protocol version; this side speaks %d)",
                          TSDF_PROTO_VERSION);
    if (o->via.u64 != TSDF_PROTO_VERSION)
        return proto_fail(r->err, TSDF_EVERSION, "v", "protocol version %llu, this side speaks %d",
                          (unsigned long long)o->via.u64, TSDF_PROTO_VERSION);
    f = proto_find_field(r, "type", NULL, &o);
    if (f != 1)
        return f;
    if (o->type != MSGPACK_OBJECT_STR)
        return proto_wrong_type(r, "type", "a string");
    if (tsdf_msg_type_parse(o->via.str.ptr, o->via.str.size, type) != TSDF_OK)
        return proto_fail(r->err, TSDF_EPROTO_TYPE, "type", "unknown message type \"%.*s\"",
                          (int)(o->via.str.size > 32 ? 32 : o->via.str.size), o->via.str.ptr);
    int present = 0;
    PROTO_TRY(proto_get_uint(r, "id", UINT64_MAX, id, &present));
    if (!present && id_required)
        return proto_missing(r, "id");
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
        proto_reader r = {&res.data.via.map, NULL};
        rc = proto_read_envelope(&r, type, id, 0);
    }
    msgpack_unpacked_destroy(&res);
    return rc;
}

/* ---- one message -------------------------------------------------------- */

int proto_decode_message(const void *data, size_t len, void *out, size_t out_size,
                         tsdf_proto_error *err, int (*body)(const proto_reader *r, void *out))
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
        proto_reader r = {&res.data.via.map, err};
        rc = body(&r, out);
    }
    /* The zone holds only the object tree; payload pointers point into data,
     * so they stay valid after the zone is gone. */
    msgpack_unpacked_destroy(&res);
    return rc;
}
