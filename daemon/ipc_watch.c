/*
 * ipc_watch.c - keeps the daemon's ipc:// listeners accepting (see
 * ipc_watch.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "ipc_watch.h"

#include "log.h"
#include "tsdf_error.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* How long a probe waits for the handshake and for the pipe callback. */
#define IPC_PROBE_TIMEOUT_MS 1000

/* Probes in a row that nng did not hand over before a restart. */
#define IPC_PROBE_MISSES 2

typedef struct {
    nng_socket sock;
    char url[256];
    uint16_t peer_proto;
    tsdf_listen_opts opts;
    nng_listener listener;        /* the watch thread's alone after start */
    _Atomic uint32_t listener_id; /* read by the pipe callback */
    _Atomic uint64_t handed_over; /* ADD_PRE seen on this listener */
    _Atomic int probing;          /* a probe of this listener is out */
    unsigned misses;
} watched;

struct ipc_watch {
    watched w[IPC_WATCH_MAX];
    _Atomic size_t n; /* published after its entry: the pipe callback reads it */
    unsigned period_ms;
    pthread_t thread;
    int started;
    pthread_mutex_t lock; /* probe ids, stop */
    pthread_cond_t wake;
    int stop;
    uint32_t probe_ids[IPC_WATCH_MAX];
    size_t probe_count;
    _Atomic uint64_t restarts;
};

int ipc_watch_create(ipc_watch **out)
{
    ipc_watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return TSDF_ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        pthread_condattr_destroy(&ca);
        free(w);
        return TSDF_ENOMEM;
    }
    if (pthread_cond_init(&w->wake, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return TSDF_ENOMEM;
    }
    pthread_condattr_destroy(&ca);
    *out = w;
    return TSDF_OK;
}

int ipc_watch_add(ipc_watch *w, nng_socket sock, nng_listener l, const char *url,
                  uint16_t peer_proto, const tsdf_listen_opts *opts)
{
    if (strncmp(url, "ipc://", 6) != 0)
        return TSDF_OK;
    /* A path that sockaddr_un cannot hold cannot be probed. */
    if (strlen(url + 6) >= sizeof(((struct sockaddr_un *)0)->sun_path) ||
        strlen(url) >= sizeof w->w[0].url)
        return TSDF_OK;
    const size_t n = atomic_load(&w->n);
    if (n == IPC_WATCH_MAX || w->started)
        return TSDF_EINVAL;
    watched *e = &w->w[n];
    memset(e, 0, sizeof *e);
    e->sock = sock;
    strcpy(e->url, url);
    e->peer_proto = peer_proto;
    e->opts = *opts;
    e->listener = l;
    atomic_store(&e->listener_id, (uint32_t)nng_listener_id(l));
    atomic_store(&w->n, n + 1);
    return TSDF_OK;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends or receives all n bytes (the socket has its timeouts); 0 on
 * success. */
static int xfer(int fd, uint8_t *buf, size_t n, int sending)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = sending ? send(fd, buf + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, buf + done, n - done, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

/* One probe of e: 1 when nng handed the connection to the socket, 0
 * when the listener did its part of the handshake but nng did not hand
 * the connection over (what a stopped listener does), -1 when nothing was
 * learnt (no descriptor, the connection or the handshake did not complete
 * in time: a busy daemon, not the stopped listener). */
static int probe(watched *e)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, e->url + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {IPC_PROBE_TIMEOUT_MS / 1000, (IPC_PROBE_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const uint64_t before = atomic_load(&e->handed_over);
    int seen = -1;
    atomic_store(&e->probing, 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        /* The SP handshake of a peer of the socket: "\0SP\0", its
         * protocol number, two zero bytes; then the listener's. */
        uint8_t hs[8] = {
            0, 'S', 'P', 0, (uint8_t)(e->peer_proto >> 8), (uint8_t)(e->peer_proto & 0xff), 0, 0};
        if (xfer(fd, hs, sizeof hs, 1) == 0 && xfer(fd, hs, sizeof hs, 0) == 0) {
            /* Closed only after the socket saw it: a connection closed
             * during nng's handshake is what stops a listener. */
            const int64_t until = now_ms() + IPC_PROBE_TIMEOUT_MS;
            while (!(seen = atomic_load(&e->handed_over) != before) && now_ms() < until) {
                struct timespec nap = {0, 2 * 1000 * 1000};
                nanosleep(&nap, NULL);
            }
            /* 0 here: the handshake came back, the connection did not. */
        }
    }
    close(fd);
    atomic_store(&e->probing, 0);
    return seen;
}

static void restart(ipc_watch *w, watched *e)
{
    char err[256] = "";
    nng_listener nl;
    TSDF_LOG(TSDF_LOG_WARN,
             "%s: the listener accepts connections but no longer hands them over (nng 1.5 "
             "stops an ipc listener after a client closes during the handshake); listening "
             "again",
             e->url);
    nng_listener_close(e->listener);
    int rc = tsdf_transport_listen(e->sock, e->url, &e->opts, &nl, err, sizeof err);
    if (rc != TSDF_OK) {
        /* Tried again at the next probe. */
        TSDF_LOG(TSDF_LOG_ERROR, "%s: cannot listen again: %s", e->url, err);
        return;
    }
    e->listener = nl;
    atomic_store(&e->listener_id, (uint32_t)nng_listener_id(nl));
    atomic_fetch_add(&w->restarts, 1);
}

static void *watch_main(void *arg)
{
    ipc_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)(w->period_ms / 1000);
        until.tv_nsec += (long)(w->period_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!w->stop && pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT) {
        }
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->lock);
        for (size_t i = 0; i < atomic_load(&w->n); i++) {
            watched *e = &w->w[i];
            const int r = probe(e);
            if (r > 0) {
                e->misses = 0;
            } else if (r == 0 && ++e->misses >= IPC_PROBE_MISSES) {
                restart(w, e);
                e->misses = 0;
            }
        }
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int ipc_watch_start(ipc_watch *w, unsigned period_ms)
{
    if (atomic_load(&w->n) == 0)
        return TSDF_OK;
    w->period_ms = period_ms ? period_ms : 1;
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0)
        return TSDF_ENOMEM;
    w->started = 1;
    return TSDF_OK;
}

static int is_own_probe(nng_pipe p)
{
    uint64_t pid = 0;
    return nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) == 0 && pid == (uint64_t)getpid();
}

int ipc_watch_pipe_added(ipc_watch *w, nng_pipe p)
{
    const size_t n = w == NULL ? 0 : atomic_load(&w->n);
    if (n == 0)
        return 0;
    const uint32_t lid = (uint32_t)nng_listener_id(nng_pipe_listener(p));
    int probing = 0;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&w->w[i].listener_id) == lid) {
            atomic_fetch_add(&w->w[i].handed_over, 1);
            probing = atomic_load(&w->w[i].probing);
        }
    }
    /* A probe: this process at the other end, while a probe is out. */
    if (!probing || !is_own_probe(p))
        return 0;
    pthread_mutex_lock(&w->lock);
    int kept = w->probe_count < IPC_WATCH_MAX;
    if (kept)
        w->probe_ids[w->probe_count++] = nng_pipe_id(p);
    pthread_mutex_unlock(&w->lock);
    /* One beyond the table (never: probes run one at a time) is counted
     * as a connection, so that its REM_POST pairs up. */
    return kept;
}

int ipc_watch_pipe_removed(ipc_watch *w, nng_pipe p)
{
    if (w == NULL || atomic_load(&w->n) == 0)
        return 0;
    const uint32_t id = nng_pipe_id(p);
    int found = 0;
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->probe_count; i++) {
        if (w->probe_ids[i] == id) {
            w->probe_ids[i] = w->probe_ids[--w->probe_count];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return found;
}

uint64_t ipc_watch_restarts(const ipc_watch *w)
{
    return w == NULL ? 0 : atomic_load(&w->restarts);
}

void ipc_watch_stop(ipc_watch *w)
{
    if (w == NULL || !w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->started = 0;
}

void ipc_watch_destroy(ipc_watch *w)
{
    if (w == NULL)
        return;
    ipc_watch_stop(w);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
