/*
 * queue.c - bounded two-lane job queue (see queue.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "queue.h"

#include "tsdf_error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int queue_init(frame_queue *q, size_t capacity, size_t query_capacity, queue_policy policy)
{
    pthread_condattr_t ca;

    if (q == NULL || capacity == 0 || query_capacity == 0 ||
        (policy != QUEUE_BLOCK && policy != QUEUE_DROP_OLDEST))
        return TSDF_EINVAL;
    memset(q, 0, sizeof *q);
    q->frames = calloc(capacity, sizeof *q->frames);
    if (q->frames == NULL)
        goto fail_frames;
    q->queries = calloc(query_capacity, sizeof *q->queries);
    if (q->queries == NULL)
        goto fail_queries;
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        goto fail_lock;
    /* Waits use CLOCK_MONOTONIC so a wall-clock step cannot stretch a timeout. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&q->not_empty, &ca) != 0)
        goto fail_not_empty;
    if (pthread_cond_init(&q->not_full, &ca) != 0)
        goto fail_not_full;
    pthread_condattr_destroy(&ca);
    q->capacity = capacity;
    q->query_capacity = query_capacity;
    q->policy = policy;
    q->mu = &q->lock;
    return TSDF_OK;

fail_not_full:
    pthread_cond_destroy(&q->not_empty);
fail_not_empty:
    pthread_condattr_destroy(&ca);
    pthread_mutex_destroy(&q->lock);
fail_lock:
    free(q->queries);
fail_queries:
    free(q->frames);
fail_frames:
    memset(q, 0, sizeof *q);
    return TSDF_ENOMEM;
}

void queue_fini(frame_queue *q)
{
    if (q == NULL || q->frames == NULL)
        return;
    if (q->budget != NULL) {
        queue_budget *b = q->budget;
        pthread_mutex_lock(&b->lock);
        for (size_t i = 0; i < q->count; i++)
            b->bytes -= q->frames[(q->head + i) % q->capacity].bytes;
        for (size_t i = 0; i < b->nqueues; i++) {
            if (b->queues[i] == q) {
                b->queues[i] = b->queues[--b->nqueues];
                break;
            }
        }
        pthread_cond_broadcast(&b->room);
        pthread_mutex_unlock(&b->lock);
    }
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->lock);
    free(q->queries);
    free(q->frames);
    memset(q, 0, sizeof *q);
}

static void deadline_after(struct timespec *ts, int timeout_ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Releases bytes of a frame that left q's lane; q->mu is held. */
static void release_bytes(frame_queue *q, size_t bytes)
{
    if (q->budget == NULL)
        return;
    q->stats.bytes -= bytes;
    q->budget->bytes -= bytes;
    if (bytes > 0)
        pthread_cond_broadcast(&q->budget->room);
}

/* Removes the frame at ring offset i (0 = oldest), keeping the order of the
 * rest, and releases its bytes. O(count), and count is bounded by the
 * configured capacity. */
static void *remove_at(frame_queue *q, size_t i)
{
    queue_slot s = q->frames[(q->head + i) % q->capacity];
    for (size_t k = i; k + 1 < q->count; k++)
        q->frames[(q->head + k) % q->capacity] = q->frames[(q->head + k + 1) % q->capacity];
    q->count--;
    release_bytes(q, s.bytes);
    pthread_cond_signal(&q->not_full);
    return s.item;
}

/* Takes the oldest frame of the lane; q->mu is held, q->count > 0. */
static void *take_head(frame_queue *q)
{
    queue_slot s = q->frames[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    release_bytes(q, s.bytes);
    return s.item;
}

/* The ring offset of the oldest frame of sensor_key in q, else 0. */
static size_t victim_in(const frame_queue *q, uint64_t sensor_key)
{
    for (size_t i = 0; i < q->count; i++) {
        if (q->frames[(q->head + i) % q->capacity].sensor_key == sensor_key)
            return i;
    }
    return 0;
}

/* Waits on cv until the deadline; returns nonzero when it passed.
 * timeout_ms 0 = do not wait, negative = no deadline. */
static int wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int timeout_ms,
                      struct timespec *deadline, int *have_deadline)
{
    if (timeout_ms == 0)
        return 1;
    if (timeout_ms < 0) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    if (!*have_deadline) {
        deadline_after(deadline, timeout_ms);
        *have_deadline = 1;
    }
    return pthread_cond_timedwait(cv, mu, deadline) == ETIMEDOUT;
}

int queue_budget_init(queue_budget *b, uint64_t limit_bytes, size_t max_queues)
{
    pthread_condattr_t ca;

    if (b == NULL || limit_bytes == 0 || max_queues == 0)
        return TSDF_EINVAL;
    memset(b, 0, sizeof *b);
    b->queues = calloc(max_queues, sizeof *b->queues);
    if (b->queues == NULL)
        return TSDF_ENOMEM;
    if (pthread_mutex_init(&b->lock, NULL) != 0)
        goto fail;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&b->room, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&b->lock);
        goto fail;
    }
    pthread_condattr_destroy(&ca);
    b->limit_bytes = limit_bytes;
    b->max_queues = max_queues;
    return TSDF_OK;

fail:
    free(b->queues);
    memset(b, 0, sizeof *b);
    return TSDF_ENOMEM;
}

void queue_budget_fini(queue_budget *b)
{
    if (b == NULL || b->queues == NULL)
        return;
    pthread_cond_destroy(&b->room);
    pthread_mutex_destroy(&b->lock);
    free(b->queues);
    memset(b, 0, sizeof *b);
}

uint64_t queue_budget_bytes(queue_budget *b)
{
    pthread_mutex_lock(&b->lock);
    uint64_t n = b->bytes;
    pthread_mutex_unlock(&b->lock);
    return n;
}

int queue_attach_budget(frame_queue *q, queue_budget *b)
{
    int rc = TSDF_OK;

    if (q == NULL || b == NULL || q->budget != NULL)
        return TSDF_EINVAL;
    pthread_mutex_lock(q->mu);
    if (q->count != 0 || q->closed)
        rc = TSDF_EINVAL;
    pthread_mutex_unlock(q->mu);
    if (rc != TSDF_OK)
        return rc;
    pthread_mutex_lock(&b->lock);
    if (b->nqueues == b->max_queues) {
        rc = TSDF_ELIMIT;
    } else {
        b->queues[b->nqueues++] = q;
        q->budget = b;
        q->mu = &b->lock;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

/* Evicts one frame to make budget room for a push to q from sensor_key:
 * q's oldest of that sensor, else q's oldest, else the oldest frame of any
 * other attached queue (by admission order). mu is held. NULL when every
 * queue is empty. */
static void *evict_for_memory(frame_queue *q, uint64_t sensor_key)
{
    frame_queue *from = NULL;

    if (q->count > 0) {
        from = q;
    } else {
        queue_budget *b = q->budget;
        for (size_t i = 0; i < b->nqueues; i++) {
            frame_queue *o = b->queues[i];
            if (o->count > 0 &&
                (from == NULL || o->frames[o->head].seq < from->frames[from->head].seq))
                from = o;
        }
    }
    if (from == NULL)
        return NULL;
    void *item = remove_at(from, from == q ? victim_in(q, sensor_key) : 0);
    from->stats.dropped_memory++;
    return item;
}

/* queue_push_frame_sized, and with stop != NULL queue_push_frame_until:
 * then timeout_ms is the slice after which *stop is looked at, and a slice
 * that passes without room is no timeout (the push waits on, or gives up
 * with TSDF_ESHUTDOWN once *stop is set, counting nothing). */
static int push_frame(frame_queue *q, void *item, uint64_t sensor_key, size_t bytes, int timeout_ms,
                      const atomic_int *stop, queue_drop_fn on_drop, void *arg,
                      queue_drop_reason *refused_why)
{
    struct timespec deadline;
    int have_deadline = 0, counted_wait = 0, rc = TSDF_OK;
    void *full_victim = NULL; /* handed to on_drop once the lock is released */
    queue_budget *b;

    pthread_mutex_lock(q->mu);
    b = q->budget;
    if (b != NULL && bytes > b->limit_bytes && !q->closed) {
        /* It could never fit: waiting or evicting would only lose frames. */
        q->stats.refused_memory++;
        rc = TSDF_ETOO_LARGE;
        goto refused_memory;
    }
    for (;;) {
        if (q->closed) {
            q->stats.push_closed++;
            rc = TSDF_ESHUTDOWN;
            goto out;
        }
        if (q->count == q->capacity) {
            if (q->policy == QUEUE_DROP_OLDEST) {
                if (full_victim != NULL) {
                    /* Only after a budget eviction let others in: hand the
                     * earlier victim over before taking another. */
                    pthread_mutex_unlock(q->mu);
                    if (on_drop != NULL)
                        on_drop(full_victim, QUEUE_DROP_FULL, arg);
                    full_victim = NULL;
                    pthread_mutex_lock(q->mu);
                    continue;
                }
                full_victim = remove_at(q, victim_in(q, sensor_key));
                q->stats.dropped_oldest++;
                continue;
            }
            if (!counted_wait) {
                q->stats.blocked_waits++;
                counted_wait = 1;
            }
            if (wait_until(&q->not_full, q->mu, timeout_ms, &deadline, &have_deadline) &&
                !q->closed && q->count == q->capacity) {
                if (stop != NULL && !atomic_load(stop)) {
                    have_deadline = 0; /* the next slice */
                    continue;
                }
                if (stop != NULL) {
                    rc = TSDF_ESHUTDOWN;
                    goto out;
                }
                q->stats.push_timeouts++;
                rc = TSDF_EQUEUE_FULL;
                if (refused_why != NULL)
                    *refused_why = QUEUE_DROP_FULL;
                goto out;
            }
            continue;
        }
        if (b != NULL && b->bytes + bytes > b->limit_bytes) {
            if (q->policy == QUEUE_DROP_OLDEST) {
                void *old = evict_for_memory(q, sensor_key);
                if (old == NULL) {
                    q->stats.refused_memory++;
                    rc = TSDF_EQUEUE_FULL;
                    goto refused_memory;
                }
                pthread_mutex_unlock(q->mu);
                if (on_drop != NULL) {
                    if (full_victim != NULL)
                        on_drop(full_victim, QUEUE_DROP_FULL, arg);
                    on_drop(old, QUEUE_DROP_MEMORY, arg);
                }
                full_victim = NULL;
                pthread_mutex_lock(q->mu);
                continue;
            }
            if (!counted_wait) {
                q->stats.blocked_waits++;
                counted_wait = 1;
            }
            if (wait_until(&b->room, q->mu, timeout_ms, &deadline, &have_deadline) && !q->closed &&
                b->bytes + bytes > b->limit_bytes) {
                if (stop != NULL && !atomic_load(stop)) {
                    have_deadline = 0;
                    continue;
                }
                if (stop != NULL) {
                    rc = TSDF_ESHUTDOWN;
                    goto out;
                }
                q->stats.refused_memory++;
                rc = TSDF_EQUEUE_FULL;
                goto refused_memory;
            }
            continue;
        }
        break;
    }
    q->frames[(q->head + q->count) % q->capacity] =
        (queue_slot){item, sensor_key, bytes, b != NULL ? b->seq++ : 0, q->admitted++};
    q->count++;
    q->stats.frames_pushed++;
    if (q->count > q->stats.depth_max)
        q->stats.depth_max = q->count;
    if (b != NULL) {
        q->stats.bytes += bytes;
        b->bytes += bytes;
        if (b->bytes > b->bytes_max)
            b->bytes_max = b->bytes;
    }
    pthread_cond_signal(&q->not_empty);
    goto out;
refused_memory:
    if (refused_why != NULL)
        *refused_why = QUEUE_DROP_MEMORY;
out:
    pthread_mutex_unlock(q->mu);
    if (full_victim != NULL && on_drop != NULL)
        on_drop(full_victim, QUEUE_DROP_FULL, arg);
    return rc;
}

int queue_push_frame_sized(frame_queue *q, void *item, uint64_t sensor_key, size_t bytes,
                           int timeout_ms, queue_drop_fn on_drop, void *arg,
                           queue_drop_reason *refused_why)
{
    return push_frame(q, item, sensor_key, bytes, timeout_ms, NULL, on_drop, arg, refused_why);
}

int queue_push_frame_until(frame_queue *q, void *item, uint64_t sensor_key, size_t bytes,
                           int slice_ms, const atomic_int *stop, queue_drop_fn on_drop, void *arg,
                           queue_drop_reason *refused_why)
{
    if (stop == NULL || slice_ms <= 0)
        return TSDF_EINVAL;
    return push_frame(q, item, sensor_key, bytes, slice_ms, stop, on_drop, arg, refused_why);
}

/* queue_push_frame's drop callback: keeps the one victim it can have. */
static void keep_dropped(void *item, queue_drop_reason why, void *arg)
{
    (void)why;
    if (arg != NULL)
        *(void **)arg = item;
}

int queue_push_frame(frame_queue *q, void *item, uint64_t sensor_key, int timeout_ms,
                     void **dropped)
{
    if (dropped != NULL)
        *dropped = NULL;
    return queue_push_frame_sized(q, item, sensor_key, 0, timeout_ms, keep_dropped, dropped, NULL);
}

int queue_push_query(frame_queue *q, void *item)
{
    return queue_push_query_after(q, item, 0);
}

int queue_push_query_after(frame_queue *q, void *item, int after_frames)
{
    pthread_mutex_lock(q->mu);
    if (q->closed) {
        pthread_mutex_unlock(q->mu);
        return TSDF_ESHUTDOWN;
    }
    if (q->qcount == q->query_capacity) {
        q->stats.queries_refused++;
        pthread_mutex_unlock(q->mu);
        return TSDF_EBUSY;
    }
    q->queries[(q->qhead + q->qcount) % q->query_capacity] =
        (queue_query){item, after_frames ? q->admitted : 0};
    q->qcount++;
    q->stats.queries_pushed++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(q->mu);
    return TSDF_OK;
}

/* The ring offset of the oldest query that may run now, or qcount when
 * every queued one waits for frames. The lane keeps admission order (an
 * eviction removes from the middle without reordering), so its head holds
 * the lowest lane_seq left. */
static size_t ready_query(const frame_queue *q)
{
    uint64_t oldest = q->count > 0 ? q->frames[q->head].lane_seq : UINT64_MAX;
    for (size_t i = 0; i < q->qcount; i++) {
        if (q->queries[(q->qhead + i) % q->query_capacity].barrier <= oldest)
            return i;
    }
    return q->qcount;
}

/* Removes the query at ring offset i (0 = oldest), keeping the others'
 * order; q->mu is held. */
static void *take_query(frame_queue *q, size_t i)
{
    void *item = q->queries[(q->qhead + i) % q->query_capacity].item;
    for (size_t k = i; k > 0; k--)
        q->queries[(q->qhead + k) % q->query_capacity] =
            q->queries[(q->qhead + k - 1) % q->query_capacity];
    q->qhead = (q->qhead + 1) % q->query_capacity;
    q->qcount--;
    return item;
}

int queue_pop(frame_queue *q, void **item, int *is_query, int timeout_ms)
{
    struct timespec deadline;
    int have_deadline = 0;

    pthread_mutex_lock(q->mu);
    while (q->qcount == 0 && q->count == 0) {
        if (q->closed) {
            pthread_mutex_unlock(q->mu);
            return TSDF_ECLOSED;
        }
        if (timeout_ms == 0) {
            pthread_mutex_unlock(q->mu);
            return TSDF_ETIMEOUT;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&q->not_empty, q->mu);
            continue;
        }
        if (!have_deadline) {
            deadline_after(&deadline, timeout_ms);
            have_deadline = 1;
        }
        if (pthread_cond_timedwait(&q->not_empty, q->mu, &deadline) == ETIMEDOUT &&
            q->qcount == 0 && q->count == 0) {
            int closed = q->closed;
            pthread_mutex_unlock(q->mu);
            return closed ? TSDF_ECLOSED : TSDF_ETIMEOUT;
        }
    }
    /* A query that waits for frames is never alone: its frames are there. */
    size_t i = ready_query(q);
    if (i < q->qcount) {
        *item = take_query(q, i);
        *is_query = 1;
    } else {
        *item = take_head(q);
        q->stats.frames_popped++;
        *is_query = 0;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(q->mu);
    return TSDF_OK;
}

void queue_close(frame_queue *q)
{
    pthread_mutex_lock(q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    if (q->budget != NULL)
        pthread_cond_broadcast(&q->budget->room);
    pthread_mutex_unlock(q->mu);
}

void queue_drain_frames(frame_queue *q, void (*fn)(void *item, void *arg), void *arg)
{
    for (;;) {
        void *item;
        pthread_mutex_lock(q->mu);
        if (q->count == 0) {
            pthread_mutex_unlock(q->mu);
            return;
        }
        item = take_head(q);
        pthread_cond_broadcast(&q->not_full);
        pthread_mutex_unlock(q->mu);
        /* The callback runs unlocked: it may log or take other locks. */
        fn(item, arg);
    }
}

void queue_get_stats(frame_queue *q, queue_stats *out)
{
    pthread_mutex_lock(q->mu);
    *out = q->stats;
    out->depth = q->count;
    out->queries_depth = q->qcount;
    pthread_mutex_unlock(q->mu);
}
