/*
 * watchdog.h - whether the daemon still makes progress, for systemd's
 * watchdog (WATCHDOG=1) and for the stats.
 *
 * A kick from the main loop's timer only proves that the loop runs. A map
 * whose worker is wedged on one job (issue 8: a raycast that marched for
 * hours) leaves the loop running while every request on that map times
 * out. So each worker publishes when it took the job it is on
 * (dmap.busy_since_ns, 0 while idle), and the loop kicks only while no
 * worker has been on one job longer than [server] stall_timeout_ms; with
 * the kicks gone, systemd restarts the daemon after WatchdogSec.
 *
 * Threads: any thread; only atomics and the registry's lock are read.
 */
#ifndef TSDFD_WATCHDOG_H
#define TSDFD_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "maps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a worker that took its job at busy_since_ns (CLOCK_MONOTONIC; 0:
 * idle) has been on it longer than stall_timeout_ms at now_ns; never when
 * stall_timeout_ms is 0. */
int watchdog_worker_stalled(int64_t busy_since_ns, int64_t now_ns, uint32_t stall_timeout_ms);

/* The longest-stalled worker, for the log. */
typedef struct {
    char map[MAPS_NAME_MAX + 1];
    const char *job; /* job_kind_name of its job */
    int64_t busy_ms;
} watchdog_stall;

/* Counts the maps of r whose worker is stalled at now_ns; longest (may be
 * NULL) receives the one on its job the longest, when there is one. */
size_t watchdog_find_stalls(map_registry *r, int64_t now_ns, uint32_t stall_timeout_ms,
                            watchdog_stall *longest);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_WATCHDOG_H */
