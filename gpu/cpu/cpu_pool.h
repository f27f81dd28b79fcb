/*
 * cpu_pool.h - a fixed set of worker threads for the CPU backend: "run
 * fn over the items [0, n) in chunks, and return when all are done".
 *
 * The thread that calls cpu_pool_run works too, so a pool of T threads
 * starts T - 1 workers; a pool of one thread starts none and runs every
 * job inline. Chunks are handed out in ascending order from a shared
 * counter; which thread runs which chunk is not fixed, so a job whose
 * result must not depend on the thread count writes each chunk's output
 * to a place of its own and merges them in chunk order afterwards.
 *
 * Errors: fn returns TSDF_OK or a negative tsdf_errno code. A failed chunk
 * does not stop the others (they are independent by contract); run
 * returns the error of the lowest-numbered chunk that failed, so that the
 * answer does not depend on scheduling either.
 *
 * Ownership: cpu_pool_create / cpu_pool_destroy; the pool owns its
 * threads. Threads: one thread at a time calls cpu_pool_run on a pool (the
 * volume's thread); fn runs on that thread and on the workers at once, and
 * must not call cpu_pool_run on the same pool.
 */
#ifndef TSDF_CPU_POOL_H
#define TSDF_CPU_POOL_H

#include <stddef.h>

/* The most threads a pool runs; tsdf_volume_params_check enforces it too. */
#define CPU_POOL_MAX_THREADS 256

typedef struct cpu_pool cpu_pool;

/* Runs items [begin, end) of a job; worker is in [0, threads), a slot for
 * per-thread scratch (the caller is one of them). */
typedef int (*cpu_pool_fn)(void *arg, size_t begin, size_t end, unsigned worker);

/* The online cores of this machine (at least 1). */
unsigned cpu_pool_online_cores(void);

/* A pool of `threads` threads (0: cpu_pool_online_cores, capped at
 * CPU_POOL_MAX_THREADS). TSDF_EINVAL above CPU_POOL_MAX_THREADS,
 * TSDF_ENOMEM when memory or a thread cannot be had. */
int cpu_pool_create(unsigned threads, cpu_pool **out);

/* Stops and joins the workers. NULL is a no-op. */
void cpu_pool_destroy(cpu_pool *p);

/* Threads that work on a job, the caller included. */
unsigned cpu_pool_threads(const cpu_pool *p);

/* Calls fn(arg, b, e, worker) over [0, n) in chunks of `chunk` items (the
 * last may be shorter; chunk 0 is taken as 1) and returns when every chunk
 * is done. n 0 returns TSDF_OK without calling fn. */
int cpu_pool_run(cpu_pool *p, size_t n, size_t chunk, cpu_pool_fn fn, void *arg);

#endif /* TSDF_CPU_POOL_H */
