/*
 * cpu_pool.c - the CPU backend's worker threads (see cpu_pool.h).
 *
 * A job is published under the lock with a new generation number; workers
 * sleep on `wake` until the generation moves, then take chunks from an
 * atomic counter until none is left, and the last one to finish signals
 * `done`. The caller takes chunks like a worker and then waits for the
 * others, so a job costs one broadcast and one wake-up when the pool is
 * busy, and nothing but the work itself when it has one thread.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_pool.h"
#include "tsdf_error.h"

struct cpu_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_t *workers;
    unsigned threads; /* caller included */
    unsigned started; /* workers running */
    unsigned long long generation;
    int stopping;

    /* The job of the current generation; read by workers after `wake`. */
    cpu_pool_fn fn;
    void *arg;
    size_t n, chunk, chunks;
    atomic_size_t next;         /* the next chunk to hand out */
    unsigned busy;              /* workers still on this generation (under lock) */
    atomic_size_t first_failed; /* the lowest failed chunk, or SIZE_MAX */
    int error;                  /* its error (under lock) */
};

typedef struct {
    cpu_pool *pool;
    unsigned index;
} worker_arg;

unsigned cpu_pool_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : (unsigned)n;
}

/* Takes and runs chunks of the current job until none is left. */
static void work(cpu_pool *p, unsigned worker)
{
    for (;;) {
        size_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (c >= p->chunks)
            return;
        size_t b = c * p->chunk, e = b + p->chunk < p->n ? b + p->chunk : p->n;
        int rc = p->fn(p->arg, b, e, worker);
        if (rc != 0) {
            pthread_mutex_lock(&p->lock);
            if (c < atomic_load(&p->first_failed)) {
                atomic_store(&p->first_failed, c);
                p->error = rc;
            }
            pthread_mutex_unlock(&p->lock);
        }
    }
}

static void *worker_main(void *argp)
{
    worker_arg *wa = argp;
    cpu_pool *p = wa->pool;
    unsigned self = wa->index;
    unsigned long long seen = 0;
    free(wa);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->generation == seen && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        work(p, self);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void stop_workers(cpu_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->workers[i], NULL);
    p->started = 0;
}

int cpu_pool_create(unsigned threads, cpu_pool **out)
{
    cpu_pool *p;
    int rc = TSDF_ENOMEM;

    *out = NULL;
    if (threads > CPU_POOL_MAX_THREADS)
        return TSDF_EINVAL;
    if (threads == 0) {
        threads = cpu_pool_online_cores();
        if (threads > CPU_POOL_MAX_THREADS)
            threads = CPU_POOL_MAX_THREADS;
    }
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return TSDF_ENOMEM;
    p->threads = threads;
    atomic_init(&p->next, 0);
    atomic_init(&p->first_failed, SIZE_MAX);
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        goto fail_lock;
    if (pthread_cond_init(&p->wake, NULL) != 0)
        goto fail_wake;
    if (pthread_cond_init(&p->done, NULL) != 0)
        goto fail_done;
    if (threads > 1 && (p->workers = calloc(threads - 1, sizeof(*p->workers))) == NULL)
        goto fail_workers;
    for (unsigned i = 0; i + 1 < threads; i++) {
        worker_arg *wa = malloc(sizeof(*wa));
        if (wa == NULL)
            goto fail_threads;
        wa->pool = p;
        wa->index = i + 1; /* 0 is the caller */
        if (pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            goto fail_threads;
        }
        p->started++;
    }
    *out = p;
    return TSDF_OK;

fail_threads:
    stop_workers(p);
    free(p->workers);
fail_workers:
    pthread_cond_destroy(&p->done);
fail_done:
    pthread_cond_destroy(&p->wake);
fail_wake:
    pthread_mutex_destroy(&p->lock);
fail_lock:
    free(p);
    return rc;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (p == NULL)
        return;
    stop_workers(p);
    free(p->workers);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

unsigned cpu_pool_threads(const cpu_pool *p)
{
    return p->threads;
}

int cpu_pool_run(cpu_pool *p, size_t n, size_t chunk, cpu_pool_fn fn, void *arg)
{
    if (n == 0)
        return TSDF_OK;
    if (chunk == 0)
        chunk = 1;
    size_t chunks = n / chunk + (n % chunk != 0);
    /* One thread, or one chunk: nothing to share, so no hand-off. The
     * chunks still run in order, each with its own call, so fn sees the
     * same ranges as on a pool of many. */
    if (p->started == 0 || chunks == 1) {
        int first = TSDF_OK;
        for (size_t c = 0; c < chunks; c++) {
            size_t b = c * chunk, e = b + chunk < n ? b + chunk : n;
            int rc = fn(arg, b, e, 0);
            if (rc != TSDF_OK && first == TSDF_OK)
                first = rc;
        }
        return first;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    p->chunks = chunks;
    atomic_store(&p->next, 0);
    atomic_store(&p->first_failed, SIZE_MAX);
    p->error = TSDF_OK;
    p->busy = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    work(p, 0);

    pthread_mutex_lock(&p->lock);
    while (p->busy != 0)
        pthread_cond_wait(&p->done, &p->lock);
    int rc = p->error;
    pthread_mutex_unlock(&p->lock);
    return rc;
}
