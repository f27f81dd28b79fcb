/*
 * prom.h - a builder for the Prometheus text exposition format (0.0.4).
 *
 * The daemon's render function appends one metric family after another
 * into a prom_buf; metrics_http serves the result on GET /metrics. This
 * file knows nothing of tsdfd's own families: those are the rows of the
 * counter table (metrics.h).
 *
 *   prom_buf b;
 *   prom_buf_init(&b);
 *   prom_counter(&b, "tsdfd_frames_received_total", "Frames received.", NULL, 42);
 *   prom_gauge(&b, "tsdfd_hash_load_factor", "Blocks / slots.", "map=\"default\"", 0.31);
 *   ... use b.data (NUL-terminated), b.len ...
 *   prom_buf_fini(&b);
 *
 * Families: the # HELP and # TYPE lines of a metric name are written the
 * first time the name is used, and never again. The format requires all
 * samples of one family to be contiguous, so a caller must emit every
 * labelled series of a name before starting the next name; going back to a
 * name that was already closed is refused with TSDF_EINVAL (it is a bug in
 * the render code, caught at the first scrape instead of by the scraper).
 *
 * Labels: the `labels` argument is the text between the braces, already
 * formatted (`map="default"` or `map="a",reason="queue_full"`), or NULL/""
 * for none. Values of labels that come from outside (map and sensor names)
 * must go through prom_label_escape first.
 *
 * Errors are sticky: after the first failure (bad name, out of memory) every
 * later call is a no-op returning that same error, and prom_buf_error()
 * reports it, so a render function may append many lines and check once.
 *
 * Ownership: caller-owned struct; init, fini. Threads: one thread per buffer.
 */
#ifndef TSDF_DAEMON_PROM_H
#define TSDF_DAEMON_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "latency.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest text a buffer grows to; a render past this fails with
 * TSDF_ETOO_LARGE rather than eating the host's memory. */
#define PROM_BUF_MAX_BYTES (16u * 1024u * 1024u)
/* Longest metric name accepted (Prometheus has no limit; ours keeps the
 * family table small). */
#define PROM_NAME_MAX 128

typedef struct {
    char *data; /* NUL-terminated text; NULL until the first append */
    size_t len; /* bytes of text, excluding the NUL */
    size_t cap;
    int err; /* sticky: TSDF_OK or the first error */
    /* Names of the families written so far, in order; the last one is the
     * family still open for more series. */
    char (*families)[PROM_NAME_MAX];
    size_t family_count, family_cap;
} prom_buf;

void prom_buf_init(prom_buf *b);
void prom_buf_fini(prom_buf *b);
/* Empties the text and the family list, keeps the memory; clears the error. */
void prom_buf_reset(prom_buf *b);
/* TSDF_OK or the first error any append met. */
int prom_buf_error(const prom_buf *b);

/* Appends a counter sample `name{labels} value`. The name must end in
 * "_total" (the convention promtool checks). Returns TSDF_OK, TSDF_EINVAL
 * (bad name or a family re-opened), TSDF_ENOMEM, TSDF_ETOO_LARGE. */
int prom_counter(prom_buf *b, const char *name, const char *help, const char *labels, double value);

/* Appends a gauge sample. Same returns as prom_counter. */
int prom_gauge(prom_buf *b, const char *name, const char *help, const char *labels, double value);

/* Appends a summary in seconds from a lat_summary in milliseconds:
 *   name{labels,quantile="0.5"} p50   name{labels,quantile="0.99"} p99
 *   name_sum{labels} sum              name_count{labels} count
 * Quantiles of an empty window are NaN, as Prometheus expects. The name
 * should end in "_seconds". */
int prom_summary(prom_buf *b, const char *name, const char *help, const char *labels,
                 const lat_summary *s);

/* Appends a histogram: n buckets with inclusive upper bounds `le[i]`
 * (ascending, finite) holding counts[i] observations each (NOT cumulative:
 * the function accumulates), plus an overflow count for the +Inf bucket,
 * and the sum of all observations. Writes name_bucket{labels,le=...},
 * name_sum and name_count. */
int prom_histogram(prom_buf *b, const char *name, const char *help, const char *labels,
                   const double *le, const uint64_t *counts, size_t n, uint64_t overflow,
                   double sum);

/* Declares the family `name` of `type` ("counter", "gauge", ...) with its
 * HELP and TYPE lines but no sample yet, so that a family whose series
 * appear later (per sensor) exists from the first scrape on; samples of
 * the same family may follow at once. Same returns as prom_counter. */
int prom_family(prom_buf *b, const char *name, const char *type, const char *help);

/* Escapes a label value for use between double quotes (backslash, quote
 * and newline become \\, \" and \n). Writes at most dst_len bytes including
 * the NUL; returns TSDF_OK or TSDF_ETOO_LARGE (dst then holds a truncated,
 * still valid, escape). */
int prom_label_escape(char *dst, size_t dst_len, const char *value);

/* 1 if name matches [a-zA-Z_:][a-zA-Z0-9_:]* and fits PROM_NAME_MAX. */
int prom_name_valid(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_PROM_H */
