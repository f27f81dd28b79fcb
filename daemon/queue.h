/*
 * queue.h - the bounded job queue in front of one map's integration worker.
 *
 * Two lanes share one lock:
 *   - the frame lane: at most `capacity` frames, with a backpressure policy
 *     for a full lane: QUEUE_BLOCK (the producer waits, with a timeout) or
 *     QUEUE_DROP_OLDEST (the oldest frame of the same sensor is dropped, else
 *     the oldest frame overall, and handed back to the producer to count and
 *     release);
 *   - the query lane: raycast, mesh, stats, save, ... bounded by
 *     `query_capacity` (the daemon sizes it from the number of request
 *     contexts, so it never fills in normal use), served before the next
 *     frame so that a query waits for at most one integration.
 *
 * Items are opaque pointers; the queue never frees them. Whoever pops an
 * item, or receives it back as dropped, owns it.
 *
 * Threads: every function is thread-safe (one mutex, two condition
 * variables); any number of producers and consumers.
 * Time: every wait is bounded by a timeout in milliseconds (negative = wait
 * until something changes or the queue closes).
 */
#ifndef TSDFD_QUEUE_H
#define TSDFD_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QUEUE_BLOCK = 0,
    QUEUE_DROP_OLDEST = 1,
} queue_policy;

/* Counters of one queue (monotonic since init, except depth). */
typedef struct {
    uint64_t frames_pushed;  /* accepted into the frame lane */
    uint64_t frames_popped;  /* handed to the consumer */
    uint64_t dropped_oldest; /* evicted by QUEUE_DROP_OLDEST */
    uint64_t push_timeouts;  /* QUEUE_BLOCK pushes that gave up (TSDF_EQUEUE_FULL) */
    uint64_t push_closed;    /* pushes refused because the queue was closed */
    uint64_t queries_pushed;
    uint64_t queries_refused; /* query lane full (TSDF_EBUSY) */
    uint64_t blocked_waits;   /* pushes that had to wait for room */
    size_t depth;             /* frames queued now */
    size_t depth_max;         /* high-water mark */
    size_t queries_depth;
} queue_stats;

/* One queued frame: the item and the sensor it came from (for drop_oldest). */
typedef struct {
    void *item;
    uint64_t sensor_key;
} queue_slot;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty; /* a frame or a query arrived, or close */
    pthread_cond_t not_full;  /* a frame left the lane, or close */
    queue_slot *frames;       /* ring of capacity slots */
    size_t capacity, head, count;
    void **queries; /* ring of query_capacity slots */
    size_t query_capacity, qhead, qcount;
    queue_policy policy;
    int closed;
    queue_stats stats;
} frame_queue;

/* Prepares *q (caller-owned) for capacity frames (>= 1) and query_capacity
 * queries (>= 1). TSDF_EINVAL, TSDF_ENOMEM. */
int queue_init(frame_queue *q, size_t capacity, size_t query_capacity, queue_policy policy);

/* Frees the rings. Items still queued are not freed (drain them first with
 * queue_pop). Safe on a zeroed struct. */
void queue_fini(frame_queue *q);

/*
 * Appends a frame. On TSDF_OK the queue holds item.
 * QUEUE_BLOCK and full: waits up to timeout_ms for room; TSDF_EQUEUE_FULL
 * when none came (item stays with the caller). timeout_ms 0 = do not wait.
 * QUEUE_DROP_OLDEST and full: never waits; evicts the oldest frame of the
 * same sensor_key, else the oldest frame, stores it in *dropped (caller now
 * owns it and counts it) and queues item. *dropped is NULL otherwise.
 * TSDF_ESHUTDOWN when the queue is closed (item stays with the caller).
 */
int queue_push_frame(frame_queue *q, void *item, uint64_t sensor_key, int timeout_ms,
                     void **dropped);

/* Appends a query; never waits. TSDF_EBUSY when the query lane is full,
 * TSDF_ESHUTDOWN when closed. */
int queue_push_query(frame_queue *q, void *item);

/*
 * Takes the next job: any query first, else the oldest frame. *is_query says
 * which. Waits up to timeout_ms; TSDF_ETIMEOUT when nothing came.
 * After queue_close it keeps returning what is queued and then TSDF_ECLOSED.
 */
int queue_pop(frame_queue *q, void **item, int *is_query, int timeout_ms);

/* Refuses every later push and wakes all waiters. Idempotent. */
void queue_close(frame_queue *q);

/* Removes every queued frame (not the queries) into the caller's callback,
 * e.g. to count them as dropped at a shutdown whose drain timed out. */
void queue_drain_frames(frame_queue *q, void (*fn)(void *item, void *arg), void *arg);

/* A consistent copy of the counters. */
void queue_get_stats(frame_queue *q, queue_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_QUEUE_H */
