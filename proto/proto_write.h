/*
 * proto_write.h - the encoding half of the wire codec, internal to proto/:
 * a msgpack writer into a tsdf_buf, its key/value helpers, and the
 * encode frame that every public encoder goes through (check the struct,
 * write, roll back on failure). Not installed; nothing outside proto/
 * includes it.
 *
 * The helpers do not return codes: the first failure (the buffer's
 * max_len, out of memory, a string that is not valid UTF-8) is kept in
 * proto_writer.err and every later write is dropped, so a body can write a
 * whole message and check once.
 */
#ifndef TSDF_PROTO_WRITE_H
#define TSDF_PROTO_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "tsdf_proto.h"

/* The codec's internals are hidden from libtsdf.so, which exports the tsdf_
 * API alone, as it did while all of this was static in one file. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

typedef struct {
    msgpack_packer pk; /* for containers and values the helpers lack */
    tsdf_buf *b;       /* the caller's buffer, appended to */
    size_t start;      /* b->len when this message began */
    int err;           /* TSDF_OK, or the first failure */
} proto_writer;

/* Bytes of this message written so far (its offset of the next byte). */
size_t proto_w_offset(const proto_writer *w);

/* A str value alone (an array element); TSDF_EINVAL in err when s is not
 * valid UTF-8, which holds for every string below too. */
void proto_w_str_value(proto_writer *w, const char *s);
/* A map key; the value must follow. */
void proto_w_key(proto_writer *w, const char *k);
/* One key and its value. v and k are NUL-terminated. */
void proto_w_str(proto_writer *w, const char *k, const char *v);
void proto_w_uint(proto_writer *w, const char *k, uint64_t v);
void proto_w_float(proto_writer *w, const char *k, float v);
void proto_w_double(proto_writer *w, const char *k, double v);
void proto_w_bin(proto_writer *w, const char *k, const void *p, size_t n);
void proto_w_bool(proto_writer *w, const char *k, int v);
/* An array of n float32. */
void proto_w_floats(proto_writer *w, const char *k, const float *v, size_t n);
/* "v", "type" and "id": the first three entries of every message. */
void proto_w_envelope(proto_writer *w, tsdf_msg_type type, uint64_t id);

/* The image checks an encoder must make BEFORE it reads width*height
 * samples from the caller's pointers: TSDF_EEMPTY_IMAGE, TSDF_ETOO_LARGE. */
int proto_check_image(uint32_t w, uint32_t h);

/* Appends one message to out: check(src) first, with the decoder's rules
 * applied to the struct (so that nothing leaves this side that the other
 * side would refuse, without decoding what was written), then body(w, src)
 * writes it. On any error out->len is rolled back to what it was.
 * TSDF_EINVAL for a NULL out or src. */
int proto_encode(tsdf_buf *out, const void *src, int (*check)(const void *src),
                 int (*body)(proto_writer *w, const void *src));

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* TSDF_PROTO_WRITE_H */
