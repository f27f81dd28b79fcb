/*
 * conns.c - the admitted connections and their idleness (see conns.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "conns.h"

#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"

int conns_init(conns *t, uint32_t max)
{
    memset(t, 0, sizeof *t);
    t->e = calloc(max ? max : 1, sizeof *t->e);
    if (t->e == NULL)
        return TSDF_ENOMEM;
    if (pthread_mutex_init(&t->lock, NULL) != 0) {
        free(t->e);
        t->e = NULL;
        return TSDF_ENOMEM;
    }
    t->max = max;
    return TSDF_OK;
}

void conns_fini(conns *t)
{
    if (t->e == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->e);
    t->e = NULL;
}

/* The index of id, or -1. Under the lock. */
static long find(const conns *t, uint32_t id)
{
    for (uint32_t i = 0; i < t->count; i++)
        if (t->e[i].id == id)
            return (long)i;
    return -1;
}

/* Removes entry i (order does not matter). Under the lock. */
static void take(conns *t, uint32_t i)
{
    t->e[i] = t->e[--t->count];
}

/* The idle entry with the oldest activity, or -1. Under the lock. */
static long oldest_idle(const conns *t)
{
    long best = -1;
    for (uint32_t i = 0; i < t->count; i++)
        if (t->e[i].busy == 0 && (best < 0 || t->e[i].last_ns < t->e[best].last_ns))
            best = (long)i;
    return best;
}

conns_admission conns_admit(conns *t, uint32_t id, int64_t now_ns, uint32_t *evict)
{
    conns_admission a = CONNS_ADMITTED;
    pthread_mutex_lock(&t->lock);
    if (t->count == t->max) {
        long old = oldest_idle(t);
        if (old < 0) {
            pthread_mutex_unlock(&t->lock);
            return CONNS_REFUSED;
        }
        *evict = t->e[old].id;
        take(t, (uint32_t)old);
        a = CONNS_REPLACED;
    }
    t->e[t->count++] = (conns_entry){.id = id, .busy = 0, .last_ns = now_ns};
    pthread_mutex_unlock(&t->lock);
    return a;
}

int conns_remove(conns *t, uint32_t id)
{
    pthread_mutex_lock(&t->lock);
    long i = find(t, id);
    if (i >= 0)
        take(t, (uint32_t)i);
    pthread_mutex_unlock(&t->lock);
    return i >= 0;
}

/* Adds delta to id's busy count and marks its activity. */
static void mark(conns *t, uint32_t id, int delta, int64_t now_ns)
{
    pthread_mutex_lock(&t->lock);
    long i = find(t, id);
    if (i >= 0) {
        conns_entry *e = &t->e[i];
        if (delta > 0)
            e->busy++;
        else if (delta < 0 && e->busy > 0)
            e->busy--;
        e->last_ns = now_ns;
    }
    pthread_mutex_unlock(&t->lock);
}

void conns_begin(conns *t, uint32_t id, int64_t now_ns)
{
    mark(t, id, 1, now_ns);
}

void conns_end(conns *t, uint32_t id, int64_t now_ns)
{
    mark(t, id, -1, now_ns);
}

void conns_touch(conns *t, uint32_t id, int64_t now_ns)
{
    mark(t, id, 0, now_ns);
}

size_t conns_expired(conns *t, int64_t now_ns, int64_t idle_ns, uint32_t *out, size_t max)
{
    size_t n = 0;
    if (idle_ns <= 0)
        return 0;
    pthread_mutex_lock(&t->lock);
    while (n < max) {
        long old = oldest_idle(t);
        if (old < 0 || now_ns - t->e[old].last_ns < idle_ns)
            break;
        out[n++] = t->e[old].id;
        take(t, (uint32_t)old);
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

uint32_t conns_count(conns *t)
{
    pthread_mutex_lock(&t->lock);
    uint32_t n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}
