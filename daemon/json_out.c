/*
 * json_out.c - a small JSON writer (see json_out.h).
 */
#include "json_out.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"

void json_init(json_out *j, size_t max_bytes)
{
    memset(j, 0, sizeof *j);
    j->max_bytes = max_bytes;
}

void json_fini(json_out *j)
{
    free(j->data);
    memset(j, 0, sizeof *j);
}

int json_error(const json_out *j)
{
    return j->err;
}

char *json_take(json_out *j, size_t *len)
{
    char *p = j->err == TSDF_OK ? j->data : NULL;
    if (p == NULL)
        free(j->data);
    if (len != NULL)
        *len = p != NULL ? j->len : 0;
    j->data = NULL;
    json_fini(j);
    return p;
}

static void put(json_out *j, const char *s, size_t n)
{
    if (j->err != TSDF_OK)
        return;
    if (j->len + n + 1 > j->max_bytes) {
        j->err = TSDF_ETOO_LARGE;
        return;
    }
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 4096;
        while (cap < j->len + n + 1)
            cap *= 2;
        char *p = realloc(j->data, cap);
        if (p == NULL) {
            j->err = TSDF_ENOMEM;
            return;
        }
        j->data = p;
        j->cap = cap;
    }
    memcpy(j->data + j->len, s, n);
    j->len += n;
    j->data[j->len] = '\0';
}

/* The comma before an item (a value, a key, or a nested container). */
static void item(json_out *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->has_items[j->depth])
        put(j, ",", 1);
    j->has_items[j->depth] = 1;
}

static void open_level(json_out *j, const char *c)
{
    item(j);
    if (j->depth >= JSON_OUT_MAX_DEPTH) {
        if (j->err == TSDF_OK)
            j->err = TSDF_EINVAL;
        return;
    }
    put(j, c, 1);
    j->has_items[++j->depth] = 0;
}

static void close_level(json_out *j, const char *c)
{
    if (j->depth == 0) {
        if (j->err == TSDF_OK)
            j->err = TSDF_EINVAL;
        return;
    }
    j->depth--;
    put(j, c, 1);
}

void json_begin_object(json_out *j)
{
    open_level(j, "{");
}

void json_end_object(json_out *j)
{
    close_level(j, "}");
}

void json_begin_array(json_out *j)
{
    open_level(j, "[");
}

void json_end_array(json_out *j)
{
    close_level(j, "]");
}

static void quoted(json_out *j, const char *s)
{
    put(j, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(j, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            put(j, esc, 6);
        } else {
            put(j, (const char *)p, 1);
        }
    }
    put(j, "\"", 1);
}

void json_key(json_out *j, const char *key)
{
    item(j);
    quoted(j, key);
    put(j, ":", 1);
    j->after_key = 1;
}

void json_string(json_out *j, const char *s)
{
    item(j);
    quoted(j, s);
}

void json_u64(json_out *j, uint64_t v)
{
    char b[24];
    item(j);
    put(j, b, (size_t)snprintf(b, sizeof b, "%" PRIu64, v));
}

void json_i64(json_out *j, int64_t v)
{
    char b[24];
    item(j);
    put(j, b, (size_t)snprintf(b, sizeof b, "%" PRId64, v));
}

void json_double(json_out *j, double v)
{
    char b[32];
    item(j);
    if (!isfinite(v)) {
        put(j, "null", 4);
        return;
    }
    /* Nine significant digits carry a float exactly, and poses and
     * positions are floats. */
    put(j, b, (size_t)snprintf(b, sizeof b, "%.9g", v));
}

void json_bool(json_out *j, int v)
{
    item(j);
    put(j, v ? "true" : "false", v ? 4 : 5);
}

void json_kv_string(json_out *j, const char *key, const char *s)
{
    json_key(j, key);
    json_string(j, s);
}

void json_kv_u64(json_out *j, const char *key, uint64_t v)
{
    json_key(j, key);
    json_u64(j, v);
}

void json_kv_double(json_out *j, const char *key, double v)
{
    json_key(j, key);
    json_double(j, v);
}

void json_kv_bool(json_out *j, const char *key, int v)
{
    json_key(j, key);
    json_bool(j, v);
}
