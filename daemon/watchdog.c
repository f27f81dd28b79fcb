/*
 * watchdog.c - stalled workers (see watchdog.h).
 */
#include "watchdog.h"

#include "worker.h"

#include <stdio.h>
#include <string.h>

int watchdog_worker_stalled(int64_t busy_since_ns, int64_t now_ns, uint32_t stall_timeout_ms)
{
    if (stall_timeout_ms == 0 || busy_since_ns == 0)
        return 0;
    return now_ns - busy_since_ns > (int64_t)stall_timeout_ms * 1000000LL;
}

size_t watchdog_find_stalls(map_registry *r, int64_t now_ns, uint32_t stall_timeout_ms,
                            watchdog_stall *longest)
{
    dmap *all[TSDF_PROTO_MAX_MAPS];
    size_t n = maps_list(r, all, TSDF_PROTO_MAX_MAPS), stalled = 0;
    int64_t worst = -1;

    for (size_t i = 0; i < n; i++) {
        int64_t since = atomic_load(&all[i]->busy_since_ns);
        if (!watchdog_worker_stalled(since, now_ns, stall_timeout_ms))
            continue;
        stalled++;
        if (longest != NULL && now_ns - since > worst) {
            worst = now_ns - since;
            snprintf(longest->map, sizeof longest->map, "%s", all[i]->name);
            longest->job = job_kind_name((job_kind)atomic_load(&all[i]->busy_kind));
            longest->busy_ms = worst / 1000000;
        }
    }
    maps_put_list(all, n);
    return stalled;
}
