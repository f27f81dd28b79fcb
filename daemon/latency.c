#define _POSIX_C_SOURCE 200809L

#include "latency.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tsdf_error.h"

int lat_window_init(lat_window *w, size_t capacity)
{
    if (!w || capacity == 0 || capacity > LAT_WINDOW_MAX_CAPACITY)
        return TSDF_EINVAL;
    memset(w, 0, sizeof *w);
    w->ring = calloc(capacity, sizeof *w->ring);
    w->scratch = calloc(capacity, sizeof *w->scratch);
    if (!w->ring || !w->scratch)
        goto fail_alloc;
    if (pthread_mutex_init(&w->lock, NULL) != 0)
        goto fail_alloc;
    w->capacity = capacity;
    return TSDF_OK;

fail_alloc:
    free(w->ring);
    free(w->scratch);
    memset(w, 0, sizeof *w);
    return TSDF_ENOMEM;
}

void lat_window_fini(lat_window *w)
{
    if (!w || !w->ring)
        return;
    pthread_mutex_destroy(&w->lock);
    free(w->ring);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

void lat_window_add(lat_window *w, double ms)
{
    if (!w || !w->ring || !isfinite(ms) || ms < 0.0)
        return;
    pthread_mutex_lock(&w->lock);
    w->ring[w->next] = ms;
    w->next = (w->next + 1) % w->capacity;
    if (w->filled < w->capacity)
        w->filled++;
    w->count++;
    w->sum_ms += ms;
    pthread_mutex_unlock(&w->lock);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample such that at least q of the samples are
 * at or below it. Exact on small windows, where interpolation would invent
 * values no request ever took. */
static double nearest_rank(const double *sorted, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

void lat_window_summary(lat_window *w, lat_summary *out)
{
    if (!out)
        return;
    out->p50_ms = out->p99_ms = out->max_ms = NAN;
    out->count = 0;
    out->sum_ms = 0.0;
    if (!w || !w->ring)
        return;
    pthread_mutex_lock(&w->lock);
    size_t n = w->filled;
    memcpy(w->scratch, w->ring, n * sizeof *w->scratch);
    out->count = w->count;
    out->sum_ms = w->sum_ms;
    /* Sorting under the lock keeps scratch private to this call; the ring
     * is bounded by LAT_WINDOW_MAX_CAPACITY so the hold time is too. */
    if (n > 0) {
        qsort(w->scratch, n, sizeof *w->scratch, cmp_double);
        out->p50_ms = nearest_rank(w->scratch, n, 0.5);
        out->p99_ms = nearest_rank(w->scratch, n, 0.99);
        out->max_ms = w->scratch[n - 1];
    }
    pthread_mutex_unlock(&w->lock);
}

double lat_elapsed_ms(const struct timespec *start, const struct timespec *end)
{
    return (double)(end->tv_sec - start->tv_sec) * 1e3 +
           (double)(end->tv_nsec - start->tv_nsec) / 1e6;
}
