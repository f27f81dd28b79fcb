/*
 * conns.h - the table of the request and frame sockets' admitted
 * connections: which are idle, which one goes when the limit is reached,
 * and which have been idle too long ([server] max_connections and
 * idle_timeout_s).
 *
 * A connection is busy while a request it sent is being handled (from its
 * receive to its reply's send), idle otherwise; its activity is the time
 * its last request or frame arrived, or its last reply left. Policy, as
 * Valkey's maxclients and timeout: a connection idle for idle_timeout is
 * closed (conns_expired); one that arrives when the table is full takes
 * the place of the connection idle the longest, and is refused only when
 * every admitted connection is busy. So no client that holds connections
 * open without using them can lock out the others, and a request in
 * progress is never cut off.
 *
 * The table knows pipes by their nng id only; closing them is the
 * caller's (server.c), outside the table's lock.
 *
 * Ownership: the caller owns the struct (conns_init / conns_fini).
 * Threads: every function may be called from any thread (one mutex).
 * Times: CLOCK_MONOTONIC nanoseconds.
 */
#ifndef TSDFD_CONNS_H
#define TSDFD_CONNS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t id;     /* nng pipe id */
    uint32_t busy;   /* requests of it in progress */
    int64_t last_ns; /* its last activity */
} conns_entry;

typedef struct {
    pthread_mutex_t lock;
    conns_entry *e; /* max entries, count used, in no order */
    uint32_t count, max;
} conns;

/* What conns_admit decided. */
typedef enum {
    CONNS_ADMITTED = 0, /* there was room */
    CONNS_REPLACED,     /* admitted in the place of *evict, which the caller closes */
    CONNS_REFUSED,      /* every admitted connection is busy: the caller closes id */
} conns_admission;

/* A table of at most max connections. TSDF_OK or TSDF_ENOMEM. */
int conns_init(conns *t, uint32_t max);
void conns_fini(conns *t);

/* A connection arrives (nng's ADD_PRE). On CONNS_REPLACED *evict is the
 * pipe that lost its place (already out of the table). */
conns_admission conns_admit(conns *t, uint32_t id, int64_t now_ns, uint32_t *evict);

/* A connection went (REM_POST). 1 when it was in the table (admitted and
 * not since replaced or expired), else 0. */
int conns_remove(conns *t, uint32_t id);

/* A request of id was received (begin) or its reply sent (end); a frame
 * of id was received (touch). Ids not in the table are ignored. */
void conns_begin(conns *t, uint32_t id, int64_t now_ns);
void conns_end(conns *t, uint32_t id, int64_t now_ns);
void conns_touch(conns *t, uint32_t id, int64_t now_ns);

/* Takes out of the table every connection idle since before
 * now_ns - idle_ns (none when idle_ns is 0), at most max of them, their
 * ids into out, oldest first; returns how many. */
size_t conns_expired(conns *t, int64_t now_ns, int64_t idle_ns, uint32_t *out, size_t max);

/* Connections in the table now. */
uint32_t conns_count(conns *t);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_CONNS_H */
