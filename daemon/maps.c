/*
 * maps.c - the named maps registry (see maps.h).
 */
#include "maps.h"

#include "evict.h"
#include "log.h"
#include "tsdf_error.h"
#include "tsdf_proto.h"
#include "worker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Query lane size: every request context may have one query in flight on a
 * map, plus room for the daemon's own (autosave, shutdown save). */
static size_t query_capacity(const tsdfd_config *cfg)
{
    return (size_t)cfg->request_contexts + 8;
}

static int map_create_locked(map_registry *r, const char *name, const tsdf_volume_params *params,
                             dmap **out)
{
    const tsdfd_config *cfg = r->cfg;
    tsdf_volume_params p = *params;
    int rc;

    if (r->count >= cfg->max_maps)
        return TSDF_ELIMIT;
    dmap *m = calloc(1, sizeof *m);
    if (m == NULL)
        return TSDF_ENOMEM;
    memcpy(m->name, name, strlen(name) + 1);
    m->reg = r;
    atomic_init(&m->refs, 1); /* the registry's */
    p.backend = r->backend;
    p.cuda_device = cfg->volume.cuda_device;
    p.layout = maps_layout_for(cfg, &p);
    /* A machine's cores, not a map's content: from the configuration, also
     * for a map restored from a snapshot. */
    p.cpu_threads = cfg->volume.cpu_threads;
    /* The configured cap, also for a map loaded from a snapshot that was
     * saved under another one, so that a lowered memory_cap_mb holds from
     * the next start on; the volume starts under what the budget leaves. */
    m->own_cap_bytes = cfg->volume.memory_cap_bytes;
    p.memory_cap_bytes = maps_budget_cap(m, NULL);
    rc = tsdf_volume_create(&p, &m->vol);
    if (rc != TSDF_OK)
        goto fail_volume;
    m->cap_set_bytes = p.memory_cap_bytes;
    if ((rc = evict_open(m, &p)) != TSDF_OK)
        goto fail_spill;
    maps_publish_memory(m);
    /* The first statistics are taken here, before the worker owns the
     * volume, so that the metrics show the map from its creation on. */
    if (pthread_mutex_init(&m->stats_lock, NULL) != 0) {
        rc = TSDF_ENOMEM;
        goto fail_stats;
    }
    tsdf_volume_get_stats(m->vol, &m->cached_stats);
    rc = pose_ring_init(&m->poses);
    if (rc != TSDF_OK)
        goto fail_poses;
    rc = queue_init(&m->queue, cfg->queue_length, query_capacity(cfg),
                    cfg->queue_policy == CFG_POLICY_DROP_OLDEST ? QUEUE_DROP_OLDEST : QUEUE_BLOCK);
    if (rc != TSDF_OK)
        goto fail_queue;
    rc = queue_attach_budget(&m->queue, &r->budget);
    if (rc != TSDF_OK)
        goto fail_worker;
    rc = worker_start(m);
    if (rc != TSDF_OK)
        goto fail_worker;
    r->maps[r->count++] = m;
    TSDF_LOG(TSDF_LOG_INFO,
             "map %s: created (%s backend, voxel %.4g m, layout %s, queue %u, %s, eviction %s)",
             name, tsdf_backend_name(tsdf_volume_backend(m->vol)), (double)p.voxel_size_m,
             tsdf_layout_name(p.layout), cfg->queue_length, cfg_policy_name(cfg->queue_policy),
             cfg_evict_mode_name(cfg->evict_mode));
    *out = m;
    return TSDF_OK;

fail_worker:
    queue_fini(&m->queue);
fail_queue:
    pose_ring_fini(&m->poses);
fail_poses:
    pthread_mutex_destroy(&m->stats_lock);
fail_stats:
    atomic_fetch_sub(&r->vbudget.used_bytes, m->published_bytes);
    evict_close(m, 1);
fail_spill:
    tsdf_volume_destroy(m->vol);
fail_volume:
    free(m);
    TSDF_LOG(TSDF_LOG_ERROR, "map %s: cannot create: %s", name, tsdf_strerror(rc));
    return rc;
}

static dmap *find_locked(map_registry *r, const char *name)
{
    for (size_t i = 0; i < r->count; i++)
        if (strcmp(r->maps[i]->name, name) == 0)
            return r->maps[i];
    return NULL;
}

static int check_map_name(const char *name)
{
    size_t len = strlen(name);
    if (len > MAPS_NAME_MAX)
        return TSDF_ETOO_LARGE;
    return tsdf_proto_check_name(name, len);
}

tsdf_layout maps_layout_for(const tsdfd_config *cfg, const tsdf_volume_params *p)
{
    if (p->layout == TSDF_LAYOUT_F32 || p->layout == TSDF_LAYOUT_S16)
        return p->layout;
    /* Not said (a snapshot of format version 1): the configured layout,
     * unless its weights cannot be s16's integers. */
    if (cfg->volume.layout == TSDF_LAYOUT_S16 && floorf(p->max_weight) != p->max_weight)
        return TSDF_LAYOUT_F32;
    return cfg->volume.layout;
}

/* ---- the volume memory budget ------------------------------------------- */

uint64_t maps_auto_budget_bytes(tsdf_backend backend, int cuda_device)
{
    if (backend == TSDF_BACKEND_CUDA) {
        uint64_t total = 0;
        if (tsdf_cuda_device_memory(cuda_device, &total) == TSDF_OK && total > 0)
            return total / 4 * 3;
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0)
            return (uint64_t)pages * (uint64_t)page / 2;
    }
    return 4ull << 30;
}

uint64_t maps_budget_cap(dmap *m, int *by_budget)
{
    volume_budget *b = &m->reg->vbudget;
    uint64_t used = atomic_load(&b->used_bytes);
    /* The map's own share is what it may replace; the others' stays. */
    uint64_t others = used > m->published_bytes ? used - m->published_bytes : 0;
    uint64_t room = b->limit_bytes > others ? b->limit_bytes - others : 0;
    uint64_t cap = m->own_cap_bytes;
    int budget = cap == 0 || room < cap;
    if (budget)
        cap = room;
    /* A cap of 0 means none to the engine. Without any room a cap of one
     * byte refuses every new block and keeps what the volume holds. */
    if (cap == 0)
        cap = 1;
    if (by_budget != NULL)
        *by_budget = budget;
    return cap;
}

int maps_apply_budget(dmap *m)
{
    int by_budget;
    uint64_t cap = maps_budget_cap(m, &by_budget);
    /* Only a change costs a call, so a lone map sets its cap once. */
    if (cap != m->cap_set_bytes) {
        int rc = tsdf_volume_set_memory_cap(m->vol, cap);
        if (rc != TSDF_OK)
            TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "memory cap", "map %s: setting the cap: %s",
                                 m->name, tsdf_strerror(rc));
        m->cap_set_bytes = cap;
    }
    return by_budget;
}

void maps_publish_memory(dmap *m)
{
    uint64_t now = tsdf_volume_memory_bytes(m->vol);
    if (now == m->published_bytes)
        return;
    /* Unsigned wrap-around makes this a subtraction when the volume shrank
     * (reset, import); the sum stays the sum of every map's share. */
    atomic_fetch_add(&m->reg->vbudget.used_bytes, now - m->published_bytes);
    m->published_bytes = now;
}

int maps_init(map_registry *r, const tsdfd_config *cfg, dstats *stats)
{
    int rc;

    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->stats = stats;
    r->maps = calloc(cfg->max_maps, sizeof *r->maps);
    if (r->maps == NULL)
        return TSDF_ENOMEM;
    rc = queue_budget_init(&r->budget, (uint64_t)cfg->queue_max_bytes_mb << 20, cfg->max_maps);
    if (rc != TSDF_OK) {
        free(r->maps);
        r->maps = NULL;
        return rc;
    }
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        queue_budget_fini(&r->budget);
        free(r->maps);
        r->maps = NULL;
        return TSDF_ENOMEM;
    }
    r->backend = cfg->volume.backend;
    if (r->backend == TSDF_BACKEND_AUTO) {
        r->backend = tsdf_cuda_available() ? TSDF_BACKEND_CUDA : TSDF_BACKEND_CPU;
        TSDF_LOG(TSDF_LOG_INFO, "backend auto: chose %s (%s)", tsdf_backend_name(r->backend),
                 r->backend == TSDF_BACKEND_CUDA ? "a usable CUDA device is present"
                                                 : "no usable CUDA device");
    } else {
        TSDF_LOG(TSDF_LOG_INFO, "backend %s (from the configuration)",
                 tsdf_backend_name(r->backend));
    }
    atomic_init(&r->vbudget.used_bytes, 0);
    atomic_init(&r->vbudget.refused_frames, 0);
    r->vbudget.limit_bytes = cfg->volume_memory_budget_bytes;
    if (r->vbudget.limit_bytes == 0)
        r->vbudget.limit_bytes = maps_auto_budget_bytes(r->backend, cfg->volume.cuda_device);
    TSDF_LOG(TSDF_LOG_INFO, "volume memory: %llu MiB for all maps (%s), %llu MiB per map%s",
             (unsigned long long)(r->vbudget.limit_bytes >> 20),
             cfg->volume_memory_budget_bytes != 0 ? "configured" : "auto",
             (unsigned long long)(cfg->volume.memory_cap_bytes >> 20),
             cfg->volume.memory_cap_bytes != 0 ? "" : " (no cap of its own)");
    for (size_t i = 0; i < cfg->maps_count; i++) {
        dmap *m;
        rc = maps_get_with(r, cfg->maps[i], &cfg->volume, &m);
        if (rc != TSDF_OK)
            return rc;
        maps_put(m);
    }
    return TSDF_OK;
}

/* Finds name, or creates it with create_params (NULL: do not create, report
 * TSDF_ENOT_FOUND). */
static int get_or_create(map_registry *r, const char *name, const tsdf_volume_params *create_params,
                         dmap **out)
{
    int rc = check_map_name(name);
    if (rc != TSDF_OK)
        return rc;
    pthread_mutex_lock(&r->lock);
    dmap *m = find_locked(r, name);
    if (m != NULL) {
        *out = m;
    } else if (create_params == NULL) {
        rc = TSDF_ENOT_FOUND;
    } else {
        /* Volume creation runs under the registry lock: it is rare (once per
         * map) and keeps two first users of one name from racing. */
        rc = map_create_locked(r, name, create_params, out);
    }
    if (rc == TSDF_OK)
        atomic_fetch_add(&(*out)->refs, 1);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int maps_get_with(map_registry *r, const char *name, const tsdf_volume_params *params, dmap **out)
{
    return get_or_create(r, name, params, out);
}

int maps_get(map_registry *r, const char *name, int create, dmap **out)
{
    int may_create = create && r->cfg->auto_create_maps;
    return get_or_create(r, name, may_create ? &r->cfg->volume : NULL, out);
}

void maps_cached_stats(dmap *m, tsdf_volume_stats *out)
{
    pthread_mutex_lock(&m->stats_lock);
    *out = m->cached_stats;
    pthread_mutex_unlock(&m->stats_lock);
}

size_t maps_list(map_registry *r, dmap **out, size_t max)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->count < max ? r->count : max;
    memcpy(out, r->maps, n * sizeof *out);
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add(&out[i]->refs, 1);
    pthread_mutex_unlock(&r->lock);
    return n;
}

size_t maps_count(map_registry *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->count;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* Frees what the map holds; its worker has ended (or never started). */
static void map_free(dmap *m)
{
    if (m->vol != NULL) {
        atomic_fetch_sub(&m->reg->vbudget.used_bytes, m->published_bytes);
        tsdf_volume_destroy(m->vol);
    }
    /* A deleted map's spilled blocks go with it; a stopping daemon's are
     * in its last snapshot, and the next start empties the store anyway. */
    evict_close(m, atomic_load(&m->deleting));
    queue_fini(&m->queue);
    pose_ring_fini(&m->poses);
    pthread_mutex_destroy(&m->stats_lock);
    free(m);
}

void maps_put(dmap *m)
{
    if (m != NULL && atomic_fetch_sub(&m->refs, 1) == 1)
        map_free(m);
}

void maps_put_list(dmap **maps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        maps_put(maps[i]);
}

/* A deleted map's leftovers: frames count as for a map that does not
 * exist, queries are answered NOT_FOUND without being run. */
static void drop_deleted(void *item, void *arg)
{
    dmap *m = arg;
    worker_job *j = item;
    dstats_frame_outcome(m->reg->stats, j->sensor, DS_REJ_NO_MAP);
    job_complete(j, TSDF_ENOT_FOUND);
}

int maps_delete(map_registry *r, const char *name, uint32_t stop_timeout_ms)
{
    pthread_mutex_lock(&r->lock);
    dmap *m = find_locked(r, name);
    if (m == NULL) {
        pthread_mutex_unlock(&r->lock);
        return TSDF_ENOT_FOUND;
    }
    size_t i = 0;
    while (r->maps[i] != m)
        i++;
    memmove(&r->maps[i], &r->maps[i + 1], (r->count - i - 1) * sizeof *r->maps);
    r->count--;
    pthread_mutex_unlock(&r->lock);

    /* Nothing new reaches the queue now; what is queued is not worth
     * integrating into a map that is going away. */
    atomic_store(&m->deleting, 1);
    atomic_store(&m->abort_drain, 1);
    queue_close(&m->queue);
    int rc = worker_join(m, worker_now_ns() + (int64_t)stop_timeout_ms * 1000000LL);
    queue_drain_frames(&m->queue, drop_deleted, m);
    void *item;
    int is_query;
    while (queue_pop(&m->queue, &item, &is_query, 0) == TSDF_OK) {
        if (is_query)
            job_complete(item, TSDF_ENOT_FOUND);
        else
            drop_deleted(item, m);
    }
    if (rc != TSDF_OK) {
        /* The worker still runs and may use everything of the map: keep
         * the registry's reference, so the struct is never freed under it. */
        TSDF_LOG(TSDF_LOG_ERROR, "map %s: deleted, but its worker is stuck: its memory stays held",
                 name);
        return TSDF_EBUSY;
    }
    maps_put(m); /* the registry's reference */
    return TSDF_OK;
}

/* Shutdown drain: the frames left once the drain timed out are dropped and
 * counted, and their waiters (if any) told so. */
static void drop_left(void *item, void *arg)
{
    dmap *m = arg;
    worker_job *j = item;
    dstats_frame_outcome(m->reg->stats, j->sensor, DS_DROP_SHUTDOWN);
    job_complete(j, TSDF_ESHUTDOWN);
}

size_t maps_stop(map_registry *r, uint32_t drain_timeout_ms, uint32_t stop_timeout_ms)
{
    size_t stuck = 0;
    if (r->maps == NULL)
        return 0;
    pthread_mutex_lock(&r->lock);
    size_t n = r->count;
    pthread_mutex_unlock(&r->lock);
    /* Close every queue first, and give all maps one drain deadline and one
     * stop deadline, so that the maps drain and finish in parallel and the
     * whole stop takes at most drain_timeout_ms + stop_timeout_ms, however
     * many maps there are and whichever of them is stuck. */
    for (size_t i = 0; i < n; i++)
        queue_close(&r->maps[i]->queue);
    int64_t deadline = worker_now_ns() + (int64_t)drain_timeout_ms * 1000000LL;
    for (size_t i = 0; i < n; i++)
        worker_drain(r->maps[i], deadline);
    deadline = worker_now_ns() + (int64_t)stop_timeout_ms * 1000000LL;
    for (size_t i = 0; i < n; i++) {
        dmap *m = r->maps[i];
        if (worker_join(m, deadline) != TSDF_OK)
            stuck++;
        /* What a stuck worker left queued, or (a bug of ours) anything a
         * finished one did: the queue is thread-safe, so taking items here
         * is safe even while a stuck worker may still pop. */
        queue_drain_frames(&m->queue, drop_left, m);
        void *item;
        int is_query;
        while (queue_pop(&m->queue, &item, &is_query, 0) == TSDF_OK) {
            dstats_query_abandoned(r->stats);
            job_complete(item, TSDF_ESHUTDOWN);
        }
    }
    return stuck;
}

int maps_fini(map_registry *r)
{
    if (r->maps == NULL)
        return TSDF_OK;
    /* A stuck worker's thread still runs and may touch its map, the byte
     * budget's lock and the counters at any time: free nothing. The
     * process exits right after this, so the leak is deliberate. */
    for (size_t i = 0; i < r->count; i++) {
        if (r->maps[i]->stuck) {
            TSDF_LOG(TSDF_LOG_WARN, "map %s: its worker is stuck: the maps are not freed",
                     r->maps[i]->name);
            return TSDF_EBUSY;
        }
    }
    /* Every other thread has stopped: the registry's references are the
     * last ones. */
    for (size_t i = 0; i < r->count; i++)
        maps_put(r->maps[i]);
    pthread_mutex_destroy(&r->lock);
    queue_budget_fini(&r->budget);
    free(r->maps);
    memset(r, 0, sizeof *r);
    return TSDF_OK;
}
