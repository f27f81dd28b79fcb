#define _POSIX_C_SOURCE 200809L

#include "prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"

void prom_buf_init(prom_buf *b)
{
    memset(b, 0, sizeof *b);
}

void prom_buf_fini(prom_buf *b)
{
    if (!b)
        return;
    free(b->data);
    free(b->families);
    memset(b, 0, sizeof *b);
}

void prom_buf_reset(prom_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
    b->family_count = 0;
    b->err = TSDF_OK;
}

int prom_buf_error(const prom_buf *b)
{
    return b->err;
}

static int fail(prom_buf *b, int err)
{
    if (b->err == TSDF_OK)
        b->err = err;
    return b->err;
}

static int reserve(prom_buf *b, size_t extra)
{
    if (extra > PROM_BUF_MAX_BYTES || b->len + extra + 1 > PROM_BUF_MAX_BYTES)
        return fail(b, TSDF_ETOO_LARGE);
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return TSDF_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap *= 2;
    if (cap > PROM_BUF_MAX_BYTES)
        cap = PROM_BUF_MAX_BYTES;
    char *p = realloc(b->data, cap);
    if (!p)
        return fail(b, TSDF_ENOMEM);
    b->data = p;
    b->cap = cap;
    return TSDF_OK;
}

static int appendf(prom_buf *b, const char *fmt, ...)
{
    if (b->err)
        return b->err;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fail(b, TSDF_EINTERNAL);
    if (reserve(b, (size_t)n) != TSDF_OK)
        return b->err;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return TSDF_OK;
}

int prom_name_valid(const char *name)
{
    if (!name || !*name || strlen(name) >= PROM_NAME_MAX)
        return 0;
    for (const char *p = name; *p; p++) {
        int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == ':';
        int digit = *p >= '0' && *p <= '9';
        if (!alpha && !(digit && p != name))
            return 0;
    }
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Formats a sample value the way Prometheus parses it: the shortest
 * decimal that reads back as the same double, and NaN/+Inf/-Inf spelled as
 * the Go parser expects. */
static void format_value(char *dst, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(dst, len, "NaN");
    } else if (isinf(v)) {
        snprintf(dst, len, v > 0 ? "+Inf" : "-Inf");
    } else {
        snprintf(dst, len, "%.15g", v);
        if (strtod(dst, NULL) != v)
            snprintf(dst, len, "%.17g", v);
    }
}

/* HELP text escapes backslash and newline (the format's only two). */
static int append_help(prom_buf *b, const char *help)
{
    for (const char *p = help; *p && !b->err; p++) {
        if (*p == '\\')
            appendf(b, "\\\\");
        else if (*p == '\n')
            appendf(b, "\\n");
        else
            appendf(b, "%c", *p);
    }
    return b->err;
}

/* Opens the family `name` of `type` unless it is the one still open; the
 * HELP and TYPE lines come out exactly once per name. */
static int open_family(prom_buf *b, const char *name, const char *type, const char *help)
{
    if (b->err)
        return b->err;
    if (!prom_name_valid(name))
        return fail(b, TSDF_EINVAL);
    if (b->family_count > 0 && strcmp(b->families[b->family_count - 1], name) == 0)
        return TSDF_OK;
    for (size_t i = 0; i + 1 < b->family_count; i++) {
        /* A family that was closed and is asked for again would split its
         * samples, which the text format forbids. */
        if (strcmp(b->families[i], name) == 0)
            return fail(b, TSDF_EINVAL);
    }
    if (b->family_count == b->family_cap) {
        size_t cap = b->family_cap ? b->family_cap * 2 : 64;
        void *p = realloc(b->families, cap * sizeof *b->families);
        if (!p)
            return fail(b, TSDF_ENOMEM);
        b->families = p;
        b->family_cap = cap;
    }
    snprintf(b->families[b->family_count++], PROM_NAME_MAX, "%s", name);
    appendf(b, "# HELP %s ", name);
    append_help(b, help ? help : "");
    appendf(b, "\n# TYPE %s %s\n", name, type);
    return b->err;
}

/* One sample line: name{labels[,extra]} value. */
static int sample(prom_buf *b, const char *name, const char *suffix, const char *labels,
                  const char *extra, double v)
{
    char val[64];
    format_value(val, sizeof val, v);
    int has_labels = labels && *labels;
    int has_extra = extra && *extra;
    if (!has_labels && !has_extra)
        return appendf(b, "%s%s %s\n", name, suffix, val);
    return appendf(b, "%s%s{%s%s%s} %s\n", name, suffix, has_labels ? labels : "",
                   has_labels && has_extra ? "," : "", has_extra ? extra : "", val);
}

int prom_family(prom_buf *b, const char *name, const char *type, const char *help)
{
    if (!type || (strcmp(type, "counter") != 0 && strcmp(type, "gauge") != 0 &&
                  strcmp(type, "summary") != 0 && strcmp(type, "histogram") != 0))
        return fail(b, TSDF_EINVAL);
    if (strcmp(type, "counter") == 0 && !ends_with(name, "_total"))
        return fail(b, TSDF_EINVAL);
    return open_family(b, name, type, help);
}

int prom_counter(prom_buf *b, const char *name, const char *help, const char *labels, double value)
{
    if (b->err)
        return b->err;
    if (!prom_name_valid(name) || !ends_with(name, "_total"))
        return fail(b, TSDF_EINVAL);
    if (open_family(b, name, "counter", help))
        return b->err;
    return sample(b, name, "", labels, NULL, value);
}

int prom_gauge(prom_buf *b, const char *name, const char *help, const char *labels, double value)
{
    if (open_family(b, name, "gauge", help))
        return b->err;
    return sample(b, name, "", labels, NULL, value);
}

int prom_summary(prom_buf *b, const char *name, const char *help, const char *labels,
                 const lat_summary *s)
{
    if (!s)
        return fail(b, TSDF_EINVAL);
    if (open_family(b, name, "summary", help))
        return b->err;
    sample(b, name, "", labels, "quantile=\"0.5\"", s->p50_ms / 1e3);
    sample(b, name, "", labels, "quantile=\"0.99\"", s->p99_ms / 1e3);
    sample(b, name, "_sum", labels, NULL, s->sum_ms / 1e3);
    return sample(b, name, "_count", labels, NULL, (double)s->count);
}

int prom_histogram(prom_buf *b, const char *name, const char *help, const char *labels,
                   const double *le, const uint64_t *counts, size_t n, uint64_t overflow,
                   double sum)
{
    if (n > 0 && (!le || !counts))
        return fail(b, TSDF_EINVAL);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(le[i]) || (i > 0 && le[i] <= le[i - 1]))
            return fail(b, TSDF_EINVAL);
    }
    if (open_family(b, name, "histogram", help))
        return b->err;
    uint64_t cumulative = 0;
    char extra[96], val[64];
    for (size_t i = 0; i < n; i++) {
        cumulative += counts[i];
        format_value(val, sizeof val, le[i]);
        snprintf(extra, sizeof extra, "le=\"%s\"", val);
        sample(b, name, "_bucket", labels, extra, (double)cumulative);
    }
    cumulative += overflow;
    sample(b, name, "_bucket", labels, "le=\"+Inf\"", (double)cumulative);
    sample(b, name, "_sum", labels, NULL, sum);
    return sample(b, name, "_count", labels, NULL, (double)cumulative);
}

int prom_label_escape(char *dst, size_t dst_len, const char *value)
{
    if (!dst || dst_len == 0)
        return TSDF_EINVAL;
    size_t o = 0;
    for (const char *p = value ? value : ""; *p; p++) {
        const char *rep = NULL;
        char one[2] = {*p, '\0'};
        if (*p == '\\')
            rep = "\\\\";
        else if (*p == '"')
            rep = "\\\"";
        else if (*p == '\n')
            rep = "\\n";
        else
            rep = one;
        size_t m = strlen(rep);
        /* Never split an escape: a half-written one would change the meaning
         * of the closing quote. */
        if (o + m + 1 > dst_len) {
            /* Nor a UTF-8 sequence: drop its continuation bytes and lead. */
            size_t end = o;
            while (end > 0 && ((unsigned char)dst[end - 1] & 0xC0) == 0x80)
                end--;
            if (end > 0 && ((unsigned char)dst[end - 1] & 0xC0) == 0xC0) {
                unsigned char lead = (unsigned char)dst[end - 1];
                size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
                if (o - (end - 1) < want)
                    o = end - 1;
            }
            dst[o] = '\0';
            return TSDF_ETOO_LARGE;
        }
        memcpy(dst + o, rep, m);
        o += m;
    }
    dst[o] = '\0';
    return TSDF_OK;
}
