/*
 * maps.h - the registry of named maps. One map = one volume + one bounded
 * job queue + one integration worker thread (worker.h), so that maps of
 * different sites never mix and integrate concurrently.
 *
 * Maps are created at start (declared in the config), on first use
 * (auto_create_maps) or by a load, at most max_maps of them, and live until
 * a client deletes them (maps_delete) or the daemon stops. A dmap is
 * reference counted: the registry holds one reference while the map is
 * listed, and maps_get, maps_get_with and maps_list hand the caller one
 * more per map, which the caller gives back with maps_put (maps_put_list)
 * once it no longer touches the map. The last reference frees it.
 *
 * Threads: maps_get / maps_list / maps_count / maps_put / maps_delete may
 * be called from any thread (one registry mutex). Only a map's worker touches its volume
 * between worker_start and worker_join.
 */
#ifndef TSDFD_MAPS_H
#define TSDFD_MAPS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dstats.h"
#include "pose_ring.h"
#include "queue.h"
#include "tsdf_proto.h"
#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Map names are wire names (tsdf_proto_check_name): the protocol's one
 * limit, which a snapshot file's name field is sized for. */
#define MAPS_NAME_MAX TSDF_PROTO_MAX_NAME_LEN

struct map_registry;

typedef struct dmap {
    char name[MAPS_NAME_MAX + 1];
    struct map_registry *reg;
    tsdf_volume *vol; /* owned; only the worker touches it while it runs */
    frame_queue queue;
    pthread_t thread;
    int thread_started;
    atomic_int abort_drain;            /* set: drop the frames left instead of integrating */
    atomic_int deleting;               /* set by maps_delete before abort_drain */
    atomic_uint_least64_t version;     /* the volume's version after the worker's last job */
    atomic_uint_least64_t frames_done; /* frames integrated by this map */
    /* frames_done as it was when the map was last exported into a snapshot
     * the daemon restores at start (an autosave, a save without a path, the
     * save at stop): frames_done - frames_saved frames would be lost by a
     * crash now. Raised by persist.c only. */
    atomic_uint_least64_t frames_saved;
    /* Request contexts waiting on this map's worker now (handlers.c). */
    atomic_uint queries_waiting;
    /* References (see the top of this file); the last maps_put frees. */
    atomic_uint refs;
    /* The volume's statistics as last taken by the worker (after queries,
     * and after frames at most every MAPS_STATS_PERIOD_MS), for readers
     * that must not wait for the worker (the /metrics render). */
    pthread_mutex_t stats_lock;
    tsdf_volume_stats cached_stats;
    int64_t frame_stats_at_ns; /* CLOCK_MONOTONIC of the last refresh after a frame; worker only */
    int stats_stale;           /* a frame ran since that refresh; worker only */
    /* The poses of the frames integrated, per sensor (recorded by the
     * worker, read by the live view; cleared by a reset or an import). */
    pose_ring poses;
    /* The volume memory budget (volume_budget below); worker only once the
     * worker runs. */
    uint64_t own_cap_bytes;   /* [volume] memory_cap_mb: this map's own cap; 0 = none */
    uint64_t published_bytes; /* this map's share of volume_budget.used_bytes */
    uint64_t cap_set_bytes;   /* the cap the volume was last given */
    /* Progress, for the watchdog and the bounded stop: CLOCK_MONOTONIC ns
     * when the worker took the job it is on (0: idle), and that job's
     * job_kind. Written by the worker, read by any thread. */
    atomic_int_least64_t busy_since_ns;
    atomic_int busy_kind;
    atomic_int worker_exited; /* set by the worker as its last step */
    /* Main thread: the worker did not finish by the stop deadline. The map
     * is left out of the final save and its volume, queue and this struct
     * are never freed (the thread may still use them). */
    int stuck;
    /* Eviction (evict.h): the spill store (mode spill, else NULL), where the
     * map's latest frame was and how far it reached, and the frames since
     * the last check; worker only. The counters are read anywhere. */
    struct spill_store *spill;
    int have_pose;
    float pose_m[3];
    float reach_m;
    uint32_t frames_since_check;
    atomic_uint_least64_t blocks_evicted;  /* removed from the volume by eviction */
    atomic_uint_least64_t blocks_restored; /* brought back from the spill store */
    atomic_uint_least64_t blocks_spilled;  /* in the spill store now */
} dmap;

#define MAPS_STATS_PERIOD_MS 200

/* The layout a map of params p gets: p's own, or, when p does not say
 * (0: a snapshot of format version 1), the configured one -- f32 when
 * p's max_weight is not the integer s16 needs. */
tsdf_layout maps_layout_for(const tsdfd_config *cfg, const tsdf_volume_params *p);

/* Copies m's cached volume statistics; any thread, never waits for the worker. */
void maps_cached_stats(dmap *m, tsdf_volume_stats *out);

/*
 * The daemon-wide budget of volume memory ([volume] memory_budget_mb). Each
 * worker publishes its volume's memory (tsdf_volume_memory_bytes) into
 * used_bytes after every job, and before every frame and import gives its
 * volume the cap that is left: its own cap, lowered to limit_bytes minus
 * what the other maps hold. The engine then refuses, whole and counted
 * (CAPACITY), any frame whose blocks would not fit, growth steps of the
 * pool and the table included, and keeps everything already integrated;
 * frames that need no new block still go in, and queries are untouched.
 * Maps that grow at the same moment each see the others' memory as last
 * published, so together they can pass the limit by at most the growth of
 * those concurrent frames, after which their next frames are refused.
 */
typedef struct {
    uint64_t limit_bytes;                 /* resolved at start (never 0) */
    atomic_uint_least64_t used_bytes;     /* every map's published memory */
    atomic_uint_least64_t refused_frames; /* CAPACITY because of the budget, not a map's own cap */
} volume_budget;

/* The budget [volume] memory_budget_mb = auto (0) gives: half the host's
 * physical memory for CPU volumes, three quarters of the device's for
 * CUDA volumes (the rest is the frames' scratch, the queries' buffers and
 * the CUDA context). A machine that cannot say falls back to 4 GiB. */
uint64_t maps_auto_budget_bytes(tsdf_backend backend, int cuda_device);

typedef struct map_registry {
    pthread_mutex_t lock;
    const tsdfd_config *cfg;
    dstats *stats;
    dmap **maps; /* max_maps slots */
    size_t count;
    tsdf_backend backend;  /* the backend new volumes use (auto resolved at init) */
    queue_budget budget;   /* [queue] max_bytes_mb over every map's queued frames */
    volume_budget vbudget; /* [volume] memory_budget_mb over every map's volume */
    /* Spill chunk files found damaged and dropped, every map together
     * (spill.h); raised by the maps' workers, read anywhere. */
    atomic_uint_least64_t spill_chunks_damaged;
} map_registry;

/* Gives m's volume the cap the budget leaves it (when that changed) and
 * returns 1 when that cap is the budget's rather than the map's own (a
 * CAPACITY refusal is then the budget's). Called by m's worker before a
 * frame or an import. A failure to set the cap (CUDA: a frame settled
 * then had failed) is logged; the cap is set regardless. */
int maps_apply_budget(dmap *m);

/* The cap maps_apply_budget would give m's volume now (never 0). */
uint64_t maps_budget_cap(dmap *m, int *by_budget);

/* Publishes the memory m's volume holds now into the budget. m's worker,
 * after every job (or the creator, before the worker starts). */
void maps_publish_memory(dmap *m);

/* Prepares the registry: resolves backend auto (logging the choice) and
 * creates the declared maps. TSDF_ENO_GPU / TSDF_ENOT_BUILT when cuda is
 * asked for and absent, engine errors of the first volume, TSDF_ENOMEM. */
int maps_init(map_registry *r, const tsdfd_config *cfg, dstats *stats);

/* Closes every queue and stops the workers within a bound: for at most
 * drain_timeout_ms (one deadline for all maps) they integrate what is
 * queued; then the frames left are dropped (counted as "shutdown"), the
 * queries left are answered SHUTDOWN without being run, and each worker
 * gets stop_timeout_ms more to finish the job it is on. A worker that does
 * not is logged with its map and job, marked stuck and left running. The
 * volumes stay in place (for a final save). Returns the count of stuck
 * workers. Main thread only. */
size_t maps_stop(map_registry *r, uint32_t drain_timeout_ms, uint32_t stop_timeout_ms);

/* Destroys every map (after maps_stop). When a worker is stuck nothing is
 * freed, since its thread may still use its map, the registry's byte
 * budget and the counters: TSDF_EBUSY, and the caller must leave the
 * dstats alone too (the process is about to exit anyway). */
int maps_fini(map_registry *r);

/* Finds map `name`; with create (and auto_create_maps) makes it when absent.
 * On TSDF_OK *out carries a reference for the caller (maps_put).
 * TSDF_EINVAL (bad name), TSDF_ENOT_FOUND (absent, no create),
 * TSDF_ELIMIT (max_maps reached), engine errors of tsdf_volume_create. */
int maps_get(map_registry *r, const char *name, int create, dmap **out);

/* Creates a map with explicit volume parameters (load of a snapshot); like
 * maps_get with create, but params instead of the configured ones. */
int maps_get_with(map_registry *r, const char *name, const tsdf_volume_params *params, dmap **out);

/* Copies up to max map pointers (in creation order), each with a
 * reference for the caller (maps_put_list); returns the count. */
size_t maps_list(map_registry *r, dmap **out, size_t max);

/* The number of maps now. */
size_t maps_count(map_registry *r);

/* Gives back a reference of maps_get / maps_get_with / maps_list. NULL is
 * a no-op. */
void maps_put(dmap *m);
void maps_put_list(dmap **maps, size_t n);

/* Deletes map `name`: it leaves the registry at once (its slot and name
 * are free for a new map), its queue is closed, the frames still queued
 * are dropped (counted as rejected "no_map", the outcome of a frame for a
 * map that does not exist) and its queries answered NOT_FOUND, and the
 * worker gets until stop_timeout_ms to finish the job it is on. Then its
 * volume is destroyed, its memory leaves the budget, and the struct goes
 * with the last reference. Returns TSDF_OK, TSDF_ENOT_FOUND, or
 * TSDF_EBUSY when the worker did not finish in time (the map is gone from
 * the registry all the same; its memory is freed when the worker ends,
 * never, or at exit). Not on a map's worker. */
int maps_delete(map_registry *r, const char *name, uint32_t stop_timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_MAPS_H */
