/*
 * proto_write.c - the encoding half of the wire codec (see proto_write.h).
 *
 * Encoding checks the struct with the decoder's rules (proto_check.c for
 * requests, proto_reply.c for replies) and writes through msgpack_packer
 * into a tsdf_buf. It used to decode its own output instead: that read
 * every message twice on the sending side, a mesh's indices included.
 */
#include "proto_write.h"

#include <string.h>

#include "proto_utf8.h"

static int write_cb(void *data, const char *p, size_t n)
{
    proto_writer *w = data;
    if (w->err != TSDF_OK)
        return -1;
    int rc = tsdf_buf_append(w->b, p, n);
    if (rc != TSDF_OK) {
        w->err = rc;
        return -1;
    }
    return 0;
}

/* Every str the codec writes, key or value, passes here: msgpack defines
 * str as UTF-8 and strict decoders refuse a whole message over one bad
 * string, so nothing else leaves this side. */
void proto_w_str_value(proto_writer *w, const char *v)
{
    size_t n = strlen(v);
    if (!proto_utf8_valid(v, n)) {
        if (w->err == TSDF_OK)
            w->err = TSDF_EINVAL;
        return;
    }
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, v, n);
}

void proto_w_key(proto_writer *w, const char *k)
{
    proto_w_str_value(w, k);
}

void proto_w_str(proto_writer *w, const char *k, const char *v)
{
    proto_w_key(w, k);
    proto_w_str_value(w, v);
}

void proto_w_uint(proto_writer *w, const char *k, uint64_t v)
{
    proto_w_key(w, k);
    msgpack_pack_uint64(&w->pk, v);
}

void proto_w_float(proto_writer *w, const char *k, float v)
{
    proto_w_key(w, k);
    msgpack_pack_float(&w->pk, v);
}

void proto_w_double(proto_writer *w, const char *k, double v)
{
    proto_w_key(w, k);
    msgpack_pack_double(&w->pk, v);
}

void proto_w_bin(proto_writer *w, const char *k, const void *p, size_t n)
{
    proto_w_key(w, k);
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

void proto_w_bool(proto_writer *w, const char *k, int v)
{
    proto_w_key(w, k);
    if (v)
        msgpack_pack_true(&w->pk);
    else
        msgpack_pack_false(&w->pk);
}

void proto_w_floats(proto_writer *w, const char *k, const float *v, size_t n)
{
    proto_w_key(w, k);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_float(&w->pk, v[i]);
}

void proto_w_envelope(proto_writer *w, tsdf_msg_type type, uint64_t id)
{
    proto_w_uint(w, "v", TSDF_PROTO_VERSION);
    proto_w_str(w, "type", tsdf_msg_type_name(type));
    proto_w_uint(w, "id", id);
}

int proto_check_image(uint32_t w, uint32_t h)
{
    if (w == 0 || h == 0)
        return TSDF_EEMPTY_IMAGE;
    if (w > TSDF_MAX_IMAGE_DIM || h > TSDF_MAX_IMAGE_DIM || (uint64_t)w * h > TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    return TSDF_OK;
}

size_t proto_w_offset(const proto_writer *w)
{
    return w->b->len - w->start;
}

int proto_encode(tsdf_buf *out, const void *src, int (*check)(const void *src),
                 int (*body)(proto_writer *w, const void *src))
{
    if (out == NULL || src == NULL)
        return TSDF_EINVAL;
    int rc = check(src);
    if (rc != TSDF_OK)
        return rc;
    proto_writer w;
    w.b = out;
    w.start = out->len;
    w.err = TSDF_OK;
    msgpack_packer_init(&w.pk, &w, write_cb);
    rc = body(&w, src);
    if (rc == TSDF_OK)
        rc = w.err;
    if (rc != TSDF_OK)
        out->len = w.start;
    return rc;
}
