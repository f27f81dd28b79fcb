/*
 * bench_clock.h - what every benchmark times and sorts with: the
 * monotonic clock in milliseconds, and the order of doubles for qsort
 * (percentiles of the samples).
 */
#ifndef TSDF_BENCH_CLOCK_H
#define TSDF_BENCH_CLOCK_H

#include <time.h>

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif /* TSDF_BENCH_CLOCK_H */
