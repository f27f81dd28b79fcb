/*
 * latency.h - sliding windows of latency samples for the stats and /metrics.
 *
 * A lat_window keeps the last `capacity` samples (milliseconds) in a ring,
 * plus an all-time count and sum. The quantiles of a summary are computed
 * over the samples in the ring only, so they follow the recent behaviour of
 * the daemon; count and sum cover every sample ever added, as a Prometheus
 * summary's _count and _sum must (they are monotonic).
 *
 * Ownership: the caller allocates the struct; lat_window_init allocates the
 * ring and lat_window_fini frees it.
 *
 * Threads: lat_window_add and lat_window_summary may be called from any
 * thread at the same time (a mutex guards the ring); init and fini must not
 * race with any other call on the same window.
 */
#ifndef TSDF_DAEMON_LATENCY_H
#define TSDF_DAEMON_LATENCY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest ring lat_window_init accepts: a summary copies and sorts the
 * ring under the lock, so the ring is kept small enough to make that cheap. */
#define LAT_WINDOW_MAX_CAPACITY 65536u

typedef struct {
    double p50_ms;  /* median over the window; NaN when the window is empty */
    double p99_ms;  /* 99th percentile over the window; NaN when empty */
    double max_ms;  /* largest sample in the window; NaN when empty */
    uint64_t count; /* samples added since init (all time) */
    double sum_ms;  /* sum of all samples since init (all time) */
} lat_summary;

typedef struct {
    pthread_mutex_t lock;
    double *ring;    /* capacity samples, ms */
    double *scratch; /* capacity doubles: the sorted copy a summary works on */
    size_t capacity;
    size_t filled; /* valid samples in ring, <= capacity */
    size_t next;   /* ring index the next sample goes to */
    uint64_t count;
    double sum_ms;
} lat_window;

/* Prepares *w for `capacity` samples (1 .. LAT_WINDOW_MAX_CAPACITY).
 * Returns TSDF_OK, TSDF_EINVAL (bad capacity or NULL), TSDF_ENOMEM. On
 * failure *w needs no fini. */
int lat_window_init(lat_window *w, size_t capacity);

/* Frees the ring. Safe on a zeroed struct and after a failed init. */
void lat_window_fini(lat_window *w);

/* Records one sample in milliseconds. Negative and non-finite samples are a
 * caller bug that must not poison the quantiles: they are ignored. */
void lat_window_add(lat_window *w, double ms);

/* Fills *out: quantiles by the nearest-rank method over the window,
 * count and sum over all time. */
void lat_window_summary(lat_window *w, lat_summary *out);

/* Milliseconds elapsed from start to end (CLOCK_MONOTONIC timespecs); a
 * small helper so that every stage measures the same way. */
double lat_elapsed_ms(const struct timespec *start, const struct timespec *end);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_LATENCY_H */
