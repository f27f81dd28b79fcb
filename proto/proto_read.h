/*
 * proto_read.h - the decoding half of the wire codec, internal to proto/:
 * the bounded scan and unpack of one message, and the typed getters that the
 * request and reply decoders (proto_request.c, proto_reply.c) are written
 * with. Not installed; nothing outside proto/ includes it.
 *
 * Every getter takes the key it reads, checks the msgpack type and range of
 * its value and, on failure, fills the reader's tsdf_proto_error (when not
 * NULL) and returns the code. An optional key is read with a non-NULL
 * present (set to 0 or 1); a NULL present makes the key required. A nil
 * value counts as absent and a key that appears twice is an error.
 */
#ifndef TSDF_PROTO_READ_H
#define TSDF_PROTO_READ_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "tsdf_proto.h"

/* The codec's internals are hidden from libtsdf.so, which exports the tsdf_
 * API alone, as it did while all of this was static in one file. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* Returns the code of expr from the calling function unless it is TSDF_OK.
 * The decoders and encoders are chains of checks; this keeps each one line. */
#define PROTO_TRY(expr)                                                                            \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != TSDF_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

/* One msgpack map being read, and where its faults are reported. */
typedef struct {
    const msgpack_object_map *m;
    tsdf_proto_error *err; /* may be NULL: codes only */
} proto_reader;

/* Fills *err (when not NULL) with key and the formatted message, made valid
 * and printable UTF-8; returns code, so that a decoder can write
 * `return proto_fail(...)`. */
int proto_fail(tsdf_proto_error *err, int code, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Decodes one message with body(), the request or the reply decoder: both
 * share the frame (argument checks, cleared error and output, the bounded
 * scan and unpack of the top-level map and its zone). out_size bytes at out
 * are zeroed first. Payload pointers that body() stores point into data. */
int proto_decode_message(const void *data, size_t len, void *out, size_t out_size,
                         tsdf_proto_error *err, int (*body)(const proto_reader *r, void *out));

/* The envelope: "v" must be TSDF_PROTO_VERSION (missing, not an unsigned
 * integer or another number: TSDF_EVERSION), "type" a known type name;
 * "id" is read into *id and must be present when id_required. Whatever
 * fails, *type and *id hold the type and id when they could be read (left
 * unchanged otherwise), so that an error reply can echo them. */
int proto_read_envelope(const proto_reader *r, tsdf_msg_type *type, uint64_t *id, int id_required);

/* Finds key; 1 found (*out set), 0 absent (nil counts as absent), or a
 * negative code when the key appears twice. */
int proto_find(const proto_reader *r, const char *key, const msgpack_object **out);

/* The lookup every typed getter starts with. present: 0/1 out (NULL: the key
 * is required). Returns 1 when the key is there (o set), else what the getter
 * returns at once: TSDF_OK for an absent optional key, or an error. */
int proto_find_field(const proto_reader *r, const char *key, int *present,
                     const msgpack_object **o);

/* TSDF_EPROTO_KEY with the usual messages for a missing key or a value of
 * the wrong msgpack type (want: "a string", "an array of maps", ...). */
int proto_missing(const proto_reader *r, const char *key);
int proto_wrong_type(const proto_reader *r, const char *key, const char *want);

/* An unsigned integer no larger than max (TSDF_ETOO_LARGE beyond). */
int proto_get_uint(const proto_reader *r, const char *key, uint64_t max, uint64_t *out,
                   int *present);

/* A number (any msgpack int or float). finite_code: the code for NaN/inf
 * (0: allowed). The value is stored as double; callers narrow. */
int proto_get_number(const proto_reader *r, const char *key, int finite_code, double *out,
                     int *present);
/* The same, narrowed to float with proto_to_float. */
int proto_get_float(const proto_reader *r, const char *key, int finite_code, float *out,
                    int *present);

/* An optional boolean; *out is left alone when the key is absent. */
int proto_get_bool(const proto_reader *r, const char *key, int *out);

/* A string copied into out[cap] (NUL-terminated). truncate: 0 for an
 * identifier, which fails with TSDF_ETOO_LARGE when it does not fit and
 * TSDF_EINVAL when it is not valid UTF-8; 1 for free text (messages), which
 * is truncated silently and made valid, printable UTF-8 (proto_utf8.h). A
 * NUL byte inside the string is TSDF_EINVAL. */
int proto_get_str(const proto_reader *r, const char *key, char *out, size_t cap, int truncate,
                  int *present);

/* A binary payload (zero-copy: *ptr points into the message). */
int proto_get_bin(const proto_reader *r, const char *key, const void **ptr, size_t *len,
                  int *present);

/* An array of exactly n numbers. */
int proto_get_numbers(const proto_reader *r, const char *key, size_t n, double *out, int *present);

/* A nested map, read with *sub (which reports into r's error). */
int proto_get_submap(const proto_reader *r, const char *key, proto_reader *sub, int *present);

/* "width"/"height" with the engine's image limits (TSDF_EEMPTY_IMAGE,
 * TSDF_ETOO_LARGE); shared by frames, raycast requests and raycast replies. */
int proto_read_size(const proto_reader *r, uint32_t *w, uint32_t *h);

/* double -> float without undefined behaviour: C leaves the conversion of a
 * value beyond the float range undefined, so this saturates to infinity. */
float proto_to_float(double d);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* TSDF_PROTO_READ_H */
