/*
 * json_out.h - a small JSON writer for the live view's state replies.
 *
 *   json_out j;
 *   json_init(&j, 1 << 20);
 *   json_begin_object(&j);
 *   json_key(&j, "maps"); json_begin_array(&j); ... json_end_array(&j);
 *   json_end_object(&j);
 *   if (json_error(&j) == TSDF_OK) use j.data, j.len
 *   json_fini(&j);
 *
 * Commas and quoting are the writer's: a caller states keys and values in
 * order. Strings are escaped as RFC 8259 asks (quote, backslash and the
 * control characters); a number that is not finite is written as null,
 * which JSON has no number for.
 *
 * Errors are sticky, as in prom.h: after the first failure (out of memory,
 * past max_bytes, nesting deeper than JSON_OUT_MAX_DEPTH) every call is a
 * no-op and json_error reports it.
 *
 * Ownership: caller-owned struct; init, fini (or json_take, which hands
 * the text over). Threads: one thread per writer.
 */
#ifndef TSDFD_JSON_OUT_H
#define TSDFD_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JSON_OUT_MAX_DEPTH 16

typedef struct {
    char *data; /* NUL-terminated text; NULL until the first write */
    size_t len, cap, max_bytes;
    int err;
    int depth;
    int after_key;                         /* a key was written: its value comes next */
    int has_items[JSON_OUT_MAX_DEPTH + 1]; /* per level: a comma before the next item */
} json_out;

void json_init(json_out *j, size_t max_bytes);
void json_fini(json_out *j);
/* TSDF_OK, or the first error: TSDF_ENOMEM, TSDF_ETOO_LARGE, TSDF_EINVAL. */
int json_error(const json_out *j);
/* Hands the text over (malloc'ed, the caller frees it) and empties j;
 * NULL when there was an error. */
char *json_take(json_out *j, size_t *len);

void json_begin_object(json_out *j);
void json_end_object(json_out *j);
void json_begin_array(json_out *j);
void json_end_array(json_out *j);
void json_key(json_out *j, const char *key);
void json_string(json_out *j, const char *s);
void json_u64(json_out *j, uint64_t v);
void json_i64(json_out *j, int64_t v);
void json_double(json_out *j, double v);
void json_bool(json_out *j, int v);

/* A key and its value in one call, for the long flat objects of the view. */
void json_kv_string(json_out *j, const char *key, const char *s);
void json_kv_u64(json_out *j, const char *key, uint64_t v);
void json_kv_double(json_out *j, const char *key, double v);
void json_kv_bool(json_out *j, const char *key, int v);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_JSON_OUT_H */
