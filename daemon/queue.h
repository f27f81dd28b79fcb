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
 * Optionally, queues share a queue_budget: a bound on the bytes held by the
 * frames queued in all of them together (each frame is pushed with its size
 * in bytes). The bytes of a frame are counted when it is admitted and
 * released when it leaves the frame lane by any path (popped, dropped,
 * drained), so the budget's count is exact and returns to 0 when every
 * queue is empty. When a push would exceed the budget, QUEUE_BLOCK waits
 * (like for a full lane) and QUEUE_DROP_OLDEST evicts the oldest frames
 * (the same sensor's first, then the queue's own oldest, then the oldest of
 * the other queues) or, when nothing can be evicted, refuses the frame.
 * Queues that share a budget also share its mutex (one lock for all of
 * them), so that an eviction from another map's queue needs no lock order.
 *
 * Items are opaque pointers; the queue never frees them. Whoever pops an
 * item, or receives it back as dropped, owns it.
 *
 * Threads: every function is thread-safe (one mutex, two condition
 * variables, plus the budget's condition variable; with a budget the mutex
 * is the budget's); any number of producers and consumers.
 * Time: every wait is bounded by a timeout in milliseconds (negative = wait
 * until something changes or the queue closes).
 */
#ifndef TSDFD_QUEUE_H
#define TSDFD_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
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
    uint64_t dropped_memory;  /* evicted from this queue to fit the byte budget */
    uint64_t refused_memory;  /* pushes refused for the byte budget (TSDF_EQUEUE_FULL) */
    uint64_t bytes;           /* bytes of the frames queued now (0 without a budget) */
    size_t depth;             /* frames queued now */
    size_t depth_max;         /* high-water mark */
    size_t queries_depth;
} queue_stats;

/* One queued frame: the item, the sensor it came from (for drop_oldest) and
 * the bytes it holds (for the budget). */
typedef struct {
    void *item;
    uint64_t sensor_key;
    size_t bytes;
    uint64_t seq;      /* admission order across the budget's queues */
    uint64_t lane_seq; /* admission order in this queue's lane (frame_queue.admitted) */
} queue_slot;

/* One queued query: the item and the frames it waits for. */
typedef struct {
    void *item;
    /* The query is taken only once no frame of lane_seq < barrier is left
     * in the lane (0: at once, ahead of every frame). */
    uint64_t barrier;
} queue_query;

struct frame_queue;

/*
 * A byte budget shared by several queues (caller-owned; outlives them).
 * limit_bytes: the most bytes the frames queued in all attached queues may
 * hold together. Threads: its lock is the lock of every attached queue.
 */
typedef struct queue_budget {
    pthread_mutex_t lock;
    pthread_cond_t room;         /* bytes were released, or a queue closed */
    uint64_t limit_bytes;        /* >= 1 */
    uint64_t bytes;              /* held by the frames queued now */
    uint64_t bytes_max;          /* high-water mark */
    uint64_t seq;                /* admissions so far (orders frames across queues) */
    struct frame_queue **queues; /* attached queues (for cross-queue eviction) */
    size_t nqueues, max_queues;
} queue_budget;

typedef struct frame_queue {
    pthread_mutex_t lock;     /* the queue's own lock (unused once a budget is attached) */
    pthread_mutex_t *mu;      /* &lock, or the budget's lock */
    queue_budget *budget;     /* NULL: no byte bound */
    pthread_cond_t not_empty; /* a frame or a query arrived, or close */
    pthread_cond_t not_full;  /* a frame left the lane, or close */
    queue_slot *frames;       /* ring of capacity slots */
    size_t capacity, head, count;
    uint64_t admitted;    /* frames ever admitted to the lane (the next lane_seq) */
    queue_query *queries; /* ring of query_capacity slots */
    size_t query_capacity, qhead, qcount;
    queue_policy policy;
    int closed;
    queue_stats stats;
} frame_queue;

/* Prepares *q (caller-owned) for capacity frames (>= 1) and query_capacity
 * queries (>= 1). TSDF_EINVAL, TSDF_ENOMEM. */
int queue_init(frame_queue *q, size_t capacity, size_t query_capacity, queue_policy policy);

/* Frees the rings and detaches the queue from its budget (releasing the
 * bytes of any frame still queued). Items still queued are not freed
 * (drain them first with queue_pop). Safe on a zeroed struct. */
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
/* (queue_push_frame is queue_push_frame_sized with bytes 0: such a frame
 * never needs budget room, so at most one frame is dropped.) */

/* Why queue_push_frame_sized handed a frame back as dropped. */
typedef enum {
    QUEUE_DROP_FULL = 0,   /* the frame lane was full (drop_oldest) */
    QUEUE_DROP_MEMORY = 1, /* evicted to fit the byte budget (drop_oldest) */
} queue_drop_reason;

/* Receives a dropped frame (its owner now); called with no queue lock held. */
typedef void (*queue_drop_fn)(void *item, queue_drop_reason why, void *arg);

/*
 * Prepares a budget of limit_bytes (>= 1) for at most max_queues attached
 * queues. TSDF_EINVAL, TSDF_ENOMEM. queue_budget_fini: every attached queue
 * must have been finalised first. Safe on a zeroed struct.
 */
int queue_budget_init(queue_budget *b, uint64_t limit_bytes, size_t max_queues);
void queue_budget_fini(queue_budget *b);

/* The bytes held by the frames queued now in all attached queues. */
uint64_t queue_budget_bytes(queue_budget *b);

/*
 * Attaches an initialised, still empty and unused queue to b (from then on
 * the queue uses b's lock; queue_fini detaches it). TSDF_EINVAL when q is
 * not empty, TSDF_ELIMIT when b has max_queues attached already.
 */
int queue_attach_budget(frame_queue *q, queue_budget *b);

/*
 * queue_push_frame with the frame's size in bytes, counted against the
 * queue's budget (if any). Every frame dropped to make room (lane full or
 * budget) goes to on_drop (may be NULL only without drop_oldest), called
 * with no lock held, possibly more than once, before this returns.
 * With a budget and a frame that cannot fit:
 *   QUEUE_BLOCK: waits up to timeout_ms for bytes to be released, then
 *     TSDF_EQUEUE_FULL (refused_memory counted);
 *   QUEUE_DROP_OLDEST: evicts the oldest frames of the same sensor in q,
 *     then q's oldest, then the oldest of the other attached queues, until
 *     it fits; TSDF_EQUEUE_FULL (refused_memory) when nothing is left to
 *     evict.
 * A frame larger than the whole budget is refused at once under both, with
 * TSDF_ETOO_LARGE (refused_memory counted), so that no one waits for it.
 * refused_why (may be NULL): on TSDF_EQUEUE_FULL or TSDF_ETOO_LARGE, whether
 * the lane (QUEUE_DROP_FULL) or the budget (QUEUE_DROP_MEMORY) had no room.
 */
int queue_push_frame_sized(frame_queue *q, void *item, uint64_t sensor_key, size_t bytes,
                           int timeout_ms, queue_drop_fn on_drop, void *arg,
                           queue_drop_reason *refused_why);

/*
 * queue_push_frame_sized for a sender that waits as long as it takes: under
 * QUEUE_BLOCK it waits for room in slices of slice_ms (> 0), looking at
 * *stop after each, until the frame is queued (TSDF_OK) or *stop is set
 * (TSDF_ESHUTDOWN, the item stays with the caller). A slice that ends
 * without room is not a timeout: push_timeouts and refused_memory count
 * only pushes that gave up on a deadline, and blocked_waits counts this
 * push once however many slices it waited. Everything else (drop_oldest,
 * the budget, on_drop, refused_why, a closed queue) is as for
 * queue_push_frame_sized. TSDF_EINVAL for a NULL stop or slice_ms <= 0.
 */
int queue_push_frame_until(frame_queue *q, void *item, uint64_t sensor_key, size_t bytes,
                           int slice_ms, const atomic_int *stop, queue_drop_fn on_drop, void *arg,
                           queue_drop_reason *refused_why);

/* Appends a query; never waits. TSDF_EBUSY when the query lane is full,
 * TSDF_ESHUTDOWN when closed. The query is served ahead of every frame
 * still queued (queue_push_query_after with after_frames 0). */
int queue_push_query(frame_queue *q, void *item);

/* queue_push_query; with after_frames 1 the query is taken only once every
 * frame in the lane now has left it (popped, dropped or drained): frames
 * admitted later do not hold it back, and other queries pass it while it
 * waits. */
int queue_push_query_after(frame_queue *q, void *item, int after_frames);

/*
 * Takes the next job: the oldest query whose frames have left the lane
 * (every query pushed without after_frames, at once), else the oldest
 * frame. *is_query says which. Waits up to timeout_ms; TSDF_ETIMEOUT when
 * nothing came. After queue_close it keeps returning what is queued and
 * then TSDF_ECLOSED.
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
