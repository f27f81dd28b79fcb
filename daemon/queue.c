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

/* Removes the frame at ring offset i (0 = oldest), keeping the order of the
 * rest. O(count), and count is bounded by the configured capacity. */
static void *remove_at(frame_queue *q, size_t i)
{
    void *item = q->frames[(q->head + i) % q->capacity].item;
    for (size_t k = i; k + 1 < q->count; k++)
        q->frames[(q->head + k) % q->capacity] = q->frames[(q->head + k + 1) % q->capacity];
    q->count--;
    return item;
}

int queue_push_frame(frame_queue *q, void *item, uint64_t sensor_key, int timeout_ms,
                     void **dropped)
{
    struct timespec deadline;
    int have_deadline = 0;

    if (dropped != NULL)
        *dropped = NULL;
    pthread_mutex_lock(&q->lock);
    if (!q->closed && q->count == q->capacity) {
        if (q->policy == QUEUE_DROP_OLDEST) {
            size_t victim = 0;
            for (size_t i = 0; i < q->count; i++) {
                if (q->frames[(q->head + i) % q->capacity].sensor_key == sensor_key) {
                    victim = i;
                    break;
                }
            }
            void *old = remove_at(q, victim);
            q->stats.dropped_oldest++;
            if (dropped != NULL)
                *dropped = old;
        } else {
            q->stats.blocked_waits++;
            while (!q->closed && q->count == q->capacity) {
                if (timeout_ms == 0)
                    break;
                if (timeout_ms < 0) {
                    pthread_cond_wait(&q->not_full, &q->lock);
                    continue;
                }
                if (!have_deadline) {
                    deadline_after(&deadline, timeout_ms);
                    have_deadline = 1;
                }
                if (pthread_cond_timedwait(&q->not_full, &q->lock, &deadline) == ETIMEDOUT)
                    break;
            }
            if (!q->closed && q->count == q->capacity) {
                q->stats.push_timeouts++;
                pthread_mutex_unlock(&q->lock);
                return TSDF_EQUEUE_FULL;
            }
        }
    }
    if (q->closed) {
        q->stats.push_closed++;
        pthread_mutex_unlock(&q->lock);
        return TSDF_ESHUTDOWN;
    }
    q->frames[(q->head + q->count) % q->capacity] = (queue_slot){item, sensor_key};
    q->count++;
    q->stats.frames_pushed++;
    if (q->count > q->stats.depth_max)
        q->stats.depth_max = q->count;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
    return TSDF_OK;
}

int queue_push_query(frame_queue *q, void *item)
{
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        return TSDF_ESHUTDOWN;
    }
    if (q->qcount == q->query_capacity) {
        q->stats.queries_refused++;
        pthread_mutex_unlock(&q->lock);
        return TSDF_EBUSY;
    }
    q->queries[(q->qhead + q->qcount) % q->query_capacity] = item;
    q->qcount++;
    q->stats.queries_pushed++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
    return TSDF_OK;
}

int queue_pop(frame_queue *q, void **item, int *is_query, int timeout_ms)
{
    struct timespec deadline;
    int have_deadline = 0;

    pthread_mutex_lock(&q->lock);
    while (q->qcount == 0 && q->count == 0) {
        if (q->closed) {
            pthread_mutex_unlock(&q->lock);
            return TSDF_ECLOSED;
        }
        if (timeout_ms == 0) {
            pthread_mutex_unlock(&q->lock);
            return TSDF_ETIMEOUT;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&q->not_empty, &q->lock);
            continue;
        }
        if (!have_deadline) {
            deadline_after(&deadline, timeout_ms);
            have_deadline = 1;
        }
        if (pthread_cond_timedwait(&q->not_empty, &q->lock, &deadline) == ETIMEDOUT &&
            q->qcount == 0 && q->count == 0) {
            int closed = q->closed;
            pthread_mutex_unlock(&q->lock);
            return closed ? TSDF_ECLOSED : TSDF_ETIMEOUT;
        }
    }
    if (q->qcount > 0) {
        *item = q->queries[q->qhead];
        q->qhead = (q->qhead + 1) % q->query_capacity;
        q->qcount--;
        *is_query = 1;
    } else {
        *item = q->frames[q->head].item;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        q->stats.frames_popped++;
        *is_query = 0;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return TSDF_OK;
}

void queue_close(frame_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->lock);
}

void queue_drain_frames(frame_queue *q, void (*fn)(void *item, void *arg), void *arg)
{
    for (;;) {
        void *item;
        pthread_mutex_lock(&q->lock);
        if (q->count == 0) {
            pthread_mutex_unlock(&q->lock);
            return;
        }
        item = q->frames[q->head].item;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        pthread_cond_broadcast(&q->not_full);
        pthread_mutex_unlock(&q->lock);
        /* The callback runs unlocked: it may log or take other locks. */
        fn(item, arg);
    }
}

void queue_get_stats(frame_queue *q, queue_stats *out)
{
    pthread_mutex_lock(&q->lock);
    *out = q->stats;
    out->depth = q->count;
    out->queries_depth = q->qcount;
    pthread_mutex_unlock(&q->lock);
}
