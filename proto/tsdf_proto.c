/*
 * tsdf_proto.c - the wire codec (see tsdf_proto.h and PROTOCOL.md): the
 * names of message types, the name rules, and the output buffer.
 *
 * The codec is split by idea, one file each:
 *   proto_read.c    bounded scan and unpack, typed getters, the envelope
 *   proto_write.c   the msgpack writer and the encode frame
 *   proto_check.c   the checks of a request struct, the decoder's rules
 *   proto_request.c requests: defaults, decoder, encoder
 *   proto_reply.c   replies: constructors, decoder, encoder, stats tables
 */
#include "tsdf_proto.h"

#include <stdlib.h>
#include <string.h>

/* Payloads are sent as the host's bytes; only little-endian hosts match the
 * wire format. A big-endian port would add byte swaps here. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tsdf_proto: the wire payloads are little-endian; this host is not"
#endif

/* ---- names -------------------------------------------------------------- */

/* The rows of TSDF_MSG_TYPES, by value. */
static const char *const type_names[] = {
#define TYPE_NAME_(name, value, wire, request) [value] = wire,
    TSDF_MSG_TYPES(TYPE_NAME_)
#undef TYPE_NAME_
};
static const unsigned char type_is_request[] = {
#define TYPE_REQUEST_(name, value, wire, request) [value] = request,
    TSDF_MSG_TYPES(TYPE_REQUEST_)
#undef TYPE_REQUEST_
};
#define TYPE_COUNT (sizeof(type_names) / sizeof(type_names[0]))

/* Every type has its wire name: the values run 0 .. count - 1. */
_Static_assert(TYPE_COUNT == TSDF_MSG_TYPE_COUNT, "type_names must name every tsdf_msg_type");

int tsdf_msg_type_is_request(tsdf_msg_type t)
{
    return (unsigned)t < TYPE_COUNT && type_is_request[t];
}

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

/* ---- buffer ------------------------------------------------------------- */

void tsdf_buf_init(tsdf_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max_len = TSDF_PROTO_MAX_MESSAGE_BYTES;
    b->fixed = 0;
}

void tsdf_buf_init_fixed(tsdf_buf *b, void *mem, size_t cap)
{
    b->data = mem;
    b->len = 0;
    b->cap = cap;
    b->max_len = cap;
    b->fixed = 1;
}

void tsdf_buf_fini(tsdf_buf *b)
{
    if (!b->fixed)
        free(b->data);
    tsdf_buf_init(b);
}

void tsdf_buf_clear(tsdf_buf *b)
{
    b->len = 0;
}

int tsdf_buf_reserve(tsdf_buf *b, size_t n)
{
    if (n > b->max_len || b->len > b->max_len - n)
        return TSDF_ETOO_LARGE;
    if (b->len + n > b->cap) {
        /* The caller's memory cannot grow: it was sized for the message. */
        if (b->fixed)
            return TSDF_ETOO_LARGE;
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
    return TSDF_OK;
}

int tsdf_buf_append(tsdf_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return TSDF_OK;
    int rc = tsdf_buf_reserve(b, n);
    if (rc != TSDF_OK)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return TSDF_OK;
}
