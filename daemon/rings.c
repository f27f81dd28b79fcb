/* rings.c - shared-memory frame rings (rings.h). */
#define _GNU_SOURCE
#include "rings.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "tsdf_types.h"
#include "tsdf_volume.h"

/* statfs f_type of tmpfs and shmem (linux/magic.h TMPFS_MAGIC). */
#define TMPFS_MAGIC_NUMBER 0x01021994

/* One connection of the ring socket, and the ring it attached (if any). */
typedef struct {
    int fd;
    pid_t pid;         /* SO_PEERCRED at accept */
    int64_t accept_ms; /* CLOCK_MONOTONIC at accept: the attach deadline's start */
    uint64_t token;    /* 0: no ring yet */
    int memfd;         /* the ring, read with pread; -1: none */
    uint64_t bytes;
    int writable;   /* no write seal, opened read-write: raycast images may go in */
    uint64_t fence; /* requests with a ring_seq below it are refused */
    /* A writable ring mapped and page-locked for the GPU's copies
     * (map_for_gpu), or NULL. The daemon's CPU never reads or writes it. */
    void *gpu_map;
    /* rings_lease's in flight on gpu_map: the device may be writing
     * there. They hold no lock; what must wait for them waits here: */
    atomic_uint leases;
    /* the answer to a fence (the ring's token; 0: none), sent by the ring
     * thread once no lease is in flight (settle_leases), */
    uint64_t fence_answer;
    /* and a connection that closed with leases in flight: its slot and
     * mapping are kept until they end (fd and token are gone). */
    int closing;
} ring_conn;

struct rings {
    int listen_fd;
    int bound;   /* path is our socket: rings_stop removes it */
    int wake[2]; /* rings_stop writes one byte */
    int kick[2]; /* the last lease of a ring ends: settle_leases */
    pthread_t thread;
    int started;
    uint32_t max_rings;
    uint64_t max_bytes;
    uint32_t attach_timeout_ms; /* a connection without a ring this long is closed */
    rings_direct direct;        /* how writable rings are treated (rings_start) */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    /* Readers (request threads) hold it shared while they copy; the
     * ring thread holds it exclusively to add or drop a ring. */
    pthread_rwlock_t lock;
    ring_conn *conns;  /* max_rings entries; fd -1: free */
    uint32_t attached; /* both: under lock */
    uint64_t held;     /* the attached rings' bytes */
    atomic_uint_least64_t refused;
    atomic_uint_least64_t frames;
};

const char *rings_path(const rings *r)
{
    return r != NULL ? r->path : "";
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_reset(ring_conn *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->memfd = -1;
    atomic_init(&c->leases, 0);
}

/* A slot no connection holds, and no lease (a closing one is kept). */
static int conn_free(const ring_conn *c)
{
    return c->fd < 0 && !c->closing;
}

/* Drops c's mapping for the device; no lease may be in flight. */
static void conn_unmap(const rings *r, ring_conn *c)
{
    if (c->gpu_map == NULL)
        return;
    if (r->direct == RINGS_GPU)
        tsdf_host_unregister(c->gpu_map);
    munmap(c->gpu_map, (size_t)c->bytes);
    c->gpu_map = NULL;
}

/* Drops c's ring and closes its connection (exclusive lock held; the
 * caller logs, after unlocking). With leases in flight the mapping and
 * the slot stay, closing, until the last ends (settle_leases): the token
 * is gone at once, so no request finds the ring from now on. */
static void conn_close(rings *r, ring_conn *c)
{
    if (c->token != 0) {
        close(c->memfd);
        r->attached--;
        r->held -= c->bytes;
    }
    if (c->fd >= 0)
        close(c->fd);
    if (c->gpu_map != NULL && atomic_load(&c->leases) > 0) {
        c->fd = -1;
        c->memfd = -1;
        c->token = 0;
        c->fence_answer = 0;
        c->closing = 1;
        return;
    }
    conn_unmap(r, c);
    conn_reset(c);
}

static void *close_main(void *arg)
{
    close((int)(intptr_t)arg);
    return NULL;
}

/* Closes a descriptor a client sent. A memfd (F_GET_SEALS answers without
 * calling into any filesystem) is closed here; anything else may be a
 * file whose close waits on its filesystem (a FUSE server that never
 * answers a flush), so a detached thread closes it, not the ring thread. */
static void close_received(int fd)
{
    pthread_t t;
    pthread_attr_t a;
    if (fcntl(fd, F_GET_SEALS) >= 0 || pthread_attr_init(&a) != 0) {
        close(fd);
        return;
    }
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, close_main, (void *)(intptr_t)fd) != 0)
        close(fd);
    pthread_attr_destroy(&a);
}

static void reply(int fd, int status, uint64_t token, const char *reason)
{
    tsdf_ring_attach_reply a;
    memset(&a, 0, sizeof a);
    a.magic = TSDF_RING_MAGIC;
    a.status = status;
    a.token = token;
    if (reason != NULL)
        snprintf(a.reason, sizeof a.reason, "%s", reason);
    /* A client that does not read its answer only loses the answer. */
    ssize_t n = send(fd, &a, sizeof a, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
}

/* Why fd may not be taken as a ring of `bytes` (and *status the code);
 * NULL: it may. F_GET_SEALS first: it fails on anything but shared
 * memory without calling into a filesystem, which fstatfs would. */
static const char *check_memfd(int fd, uint64_t bytes, uint64_t room, int *status)
{
    *status = TSDF_EINVAL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return "not a sealable memfd";
    /* Only the kernel's shmem, not hugetlbfs. */
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC_NUMBER)
        return "not a memfd (shared memory)";
    if (!(seals & F_SEAL_SHRINK))
        return "not sealed against shrinking (F_SEAL_SHRINK)";
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return "not a regular file";
    if (bytes == 0 || (uint64_t)st.st_size < bytes)
        return "smaller than the size asked for";
    if (bytes > room) {
        *status = TSDF_ETOO_LARGE;
        return "over [server] ring_max_mb";
    }
    return NULL;
}

_Static_assert(sizeof(tsdf_ring_fence_msg) == sizeof(tsdf_ring_attach_msg),
               "a fence is read into the attach message's buffer");

/* A fence on c (tsdf_ring_fence_msg, read into the attach message's
 * buffer: the same size): from the answer on, requests that name c's
 * ring with a lower ring_seq are refused. A fence never lowers the ring's,
 * so a late or repeated one changes nothing. It answers like an attach:
 * the token, or why not. */
static void fence(rings *r, ring_conn *c, const tsdf_ring_attach_msg *m)
{
    tsdf_ring_fence_msg f;
    memcpy(&f, m, sizeof f);
    if (c->token == 0) {
        /* Like a refused attach: a connection without a ring holds no
         * slot. */
        reply(c->fd, TSDF_EINVAL, 0, "a fence before any ring was attached");
        pthread_rwlock_wrlock(&r->lock);
        conn_close(r, c);
        pthread_rwlock_unlock(&r->lock);
        return;
    }
    if (f.version != TSDF_RING_VERSION) {
        reply(c->fd, TSDF_EVERSION, 0, "unsupported ring protocol version");
        return;
    }
    pthread_rwlock_wrlock(&r->lock);
    if (f.fence > c->fence)
        c->fence = f.fence;
    const uint64_t token = c->token;
    /* A lease checked the fence before this one and the device may still
     * be writing its image: the sender may reuse the fenced slots once it
     * has the answer, so the answer waits for the lease (settle_leases). */
    const int wait = atomic_load(&c->leases) > 0;
    if (wait)
        c->fence_answer = token;
    pthread_rwlock_unlock(&r->lock);
    if (!wait)
        reply(c->fd, TSDF_OK, token, NULL);
}

/* After a ring's last lease ended (rings_lease_end kicked the thread):
 * the fence answers that waited for it, and the mappings of connections
 * that closed meanwhile. */
static void settle_leases(rings *r)
{
    char buf[64];
    while (read(r->kick[0], buf, sizeof buf) > 0) {
    }
    pthread_rwlock_wrlock(&r->lock);
    for (uint32_t i = 0; i < r->max_rings; i++) {
        ring_conn *c = &r->conns[i];
        if (atomic_load(&c->leases) > 0)
            continue;
        if (c->closing) {
            conn_unmap(r, c);
            conn_reset(c);
        } else if (c->fence_answer != 0) {
            reply(c->fd, TSDF_OK, c->fence_answer, NULL);
            c->fence_answer = 0;
        }
    }
    pthread_rwlock_unlock(&r->lock);
}

/* The ring's pages mapped and page-locked for the device's copies
 * (rings_start's RINGS_GPU), so that a raycast's image goes from the GPU
 * straight into the ring instead of through a page-locked buffer and a
 * pwrite. The whole file is allocated first (fallocate), so that the
 * driver finds no hole to fault in when it locks the pages; after that
 * the device's copies go to locked pages and cannot fault. The daemon's
 * CPU never touches the mapping: a fault there could raise SIGBUS (a
 * page the kernel cannot allocate under strict overcommit, after the
 * client punched a hole), where pread and pwrite give an error code. A
 * hole the client punches later only detaches its own pages from the
 * locked ones (it then reads zeros where the device wrote). NULL when any
 * step fails: the ring is then written with pwrite, as on the CPU
 * backend. */
static void *map_for_gpu(rings_direct direct, int fd, uint64_t bytes, pid_t pid)
{
    if (bytes == 0 || bytes > (uint64_t)SIZE_MAX || bytes > (uint64_t)INT64_MAX)
        return NULL;
    const char *why = NULL;
    void *p = MAP_FAILED;
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0)
        why = "fallocate";
    else if ((p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
        why = "mmap";
    else if (direct == RINGS_GPU && tsdf_host_register(p, (size_t)bytes) != TSDF_OK)
        why = "page-locking";
    if (why == NULL) {
        /* A client's data, up to ring_max_mb of it: not in a core dump. */
        (void)madvise(p, (size_t)bytes, MADV_DONTDUMP);
        return p;
    }
    if (p != MAP_FAILED)
        munmap(p, (size_t)bytes);
    TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "ring gpu map",
                         "frame ring of process %ld: %s failed; its images go through pwrite",
                         (long)pid, why);
    return NULL;
}

/* One attach message on c: take the memfd it carries. A refused one
 * closes a connection that has no ring (so that it does not hold a slot). */
static void attach(rings *r, ring_conn *c)
{
    tsdf_ring_attach_msg m;
    char ctl[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov;
    struct msghdr h;
    tsdf_ring_msghdr(&h, &iov, &m, sizeof m, ctl, sizeof ctl);
    ssize_t n = recvmsg(c->fd, &h, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    /* Every descriptor that came along, so that none leaks. */
    int fds[4], nfds = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&h); cm != NULL; cm = CMSG_NXTHDR(&h, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && nfds < 4; i++)
            memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
    }
    const pid_t pid = c->pid;
    const uint64_t had = c->token != 0 ? c->bytes : 0;
    if (n <= 0) {
        /* Closed, or broken: the ring goes with the connection. */
        for (int i = 0; i < nfds; i++)
            close_received(fds[i]);
        pthread_rwlock_wrlock(&r->lock);
        conn_close(r, c);
        pthread_rwlock_unlock(&r->lock);
        if (had != 0)
            TSDF_LOG(TSDF_LOG_INFO, "frame ring of process %ld detached (%llu bytes)", (long)pid,
                     (unsigned long long)had);
        return;
    }
    if ((size_t)n == sizeof m && !(h.msg_flags & MSG_TRUNC) && m.magic == TSDF_RING_FENCE_MAGIC) {
        for (int i = 0; i < nfds; i++)
            close_received(fds[i]);
        fence(r, c, &m);
        return;
    }
    const char *why = NULL;
    int status = TSDF_EINVAL;
    if ((size_t)n != sizeof m || (h.msg_flags & MSG_TRUNC) || m.magic != TSDF_RING_MAGIC)
        why = "not a ring attach message";
    else if (m.version != TSDF_RING_VERSION)
        why = "unsupported ring protocol version", status = TSDF_EVERSION;
    else if (h.msg_flags & MSG_CTRUNC || nfds != 1)
        why = "the message must carry exactly one descriptor";
    else if (c->token != 0)
        why = "this connection already has a ring";
    else
        why = check_memfd(fds[0], m.bytes, r->max_bytes - r->held, &status);
    uint64_t token = 0;
    while (why == NULL && token == 0)
        if (getrandom(&token, sizeof token, 0) != (ssize_t)sizeof token)
            why = "no random token", status = TSDF_EINTERNAL;
    /* The ring's descriptor is kept and read with pread, never through a
     * mapping by the CPU: a read of a hole gives zeros and a failure is a
     * return value, where a mapping's page fault could kill the daemon
     * (SIGBUS). Only the device writes into map_for_gpu's mapping. */
    for (int i = why == NULL ? 1 : 0; i < nfds; i++)
        close_received(fds[i]);
    if (why != NULL) {
        atomic_fetch_add(&r->refused, 1);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "frame ring refused",
                             "frame ring of process %ld refused: %s", (long)pid, why);
        reply(c->fd, status, 0, why);
        if (c->token == 0) {
            pthread_rwlock_wrlock(&r->lock);
            conn_close(r, c);
            pthread_rwlock_unlock(&r->lock);
        }
        return;
    }
    int seals = fcntl(fds[0], F_GET_SEALS), fl = fcntl(fds[0], F_GETFL);
    int write_seals = F_SEAL_WRITE;
#ifdef F_SEAL_FUTURE_WRITE
    write_seals |= F_SEAL_FUTURE_WRITE;
#endif
    const int writable =
        seals >= 0 && !(seals & write_seals) && fl >= 0 && (fl & O_ACCMODE) == O_RDWR;
    /* Before the ring is published (its token set): no reader sees it. */
    void *gpu_map =
        r->direct != RINGS_PWRITE && writable ? map_for_gpu(r->direct, fds[0], m.bytes, pid) : NULL;
    pthread_rwlock_wrlock(&r->lock);
    c->writable = writable;
    c->gpu_map = gpu_map;
    c->memfd = fds[0];
    c->bytes = m.bytes;
    c->token = token;
    r->attached++;
    r->held += m.bytes;
    pthread_rwlock_unlock(&r->lock);
    TSDF_LOG(TSDF_LOG_INFO, "frame ring of process %ld attached (%llu bytes%s)", (long)pid,
             (unsigned long long)m.bytes,
             gpu_map == NULL          ? ""
             : r->direct == RINGS_GPU ? ", images written by the GPU"
                                      : ", mapped");
    reply(c->fd, TSDF_OK, token, NULL);
}

static void accept_one(rings *r)
{
    int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cr;
    socklen_t len = sizeof cr;
    ring_conn *slot = NULL;
    for (uint32_t i = 0; i < r->max_rings && slot == NULL; i++)
        if (conn_free(&r->conns[i]))
            slot = &r->conns[i];
    if (slot == NULL || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        atomic_fetch_add(&r->refused, 1);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "ring socket full",
                             "ring socket: refused a connection (%u rings at most)", r->max_rings);
        close(fd);
        return;
    }
    /* The slot is free, so no reader looks at it: no lock needed. */
    slot->fd = fd;
    slot->pid = cr.pid;
    slot->accept_ms = now_ms();
}

/* Closes the connections that attached no ring within attach_timeout_ms
 * of their accept (so that connections that never attach cannot hold every
 * slot); returns the milliseconds until the next such deadline, -1 when
 * there is none. */
static int expire_unattached(rings *r)
{
    const int64_t now = now_ms();
    int64_t next = -1;
    uint32_t closed = 0;
    for (uint32_t i = 0; i < r->max_rings; i++) {
        ring_conn *c = &r->conns[i];
        if (c->fd < 0 || c->token != 0 || c->closing)
            continue;
        int64_t left = c->accept_ms + (int64_t)r->attach_timeout_ms - now;
        if (left > 0) {
            next = next < 0 || left < next ? left : next;
            continue;
        }
        /* No ring: no reader can be looking at the slot. */
        close(c->fd);
        conn_reset(c);
        closed++;
    }
    if (closed != 0) {
        atomic_fetch_add(&r->refused, closed);
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "ring attach deadline",
                             "ring socket: closed %u connections that attached no ring within "
                             "%u ms ([server] ring_attach_timeout_ms)",
                             closed, r->attach_timeout_ms);
    }
    return next < 0 ? -1 : next > INT32_MAX ? INT32_MAX : (int)next;
}

static void *ring_main(void *arg)
{
    rings *r = arg;
    struct pollfd *p = calloc((size_t)r->max_rings + 3, sizeof *p);
    ring_conn **who = calloc((size_t)r->max_rings + 3, sizeof *who);
    if (p == NULL || who == NULL) {
        TSDF_LOG(TSDF_LOG_ERROR, "ring socket: out of memory; no rings will attach");
        free(p);
        free(who);
        return NULL;
    }
    for (;;) {
        nfds_t n = 0;
        const int wait_ms = expire_unattached(r);
        p[n++] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
        p[n++] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = r->kick[0], .events = POLLIN};
        for (uint32_t i = 0; i < r->max_rings; i++) {
            if (r->conns[i].fd < 0)
                continue;
            who[n] = &r->conns[i];
            p[n++] = (struct pollfd){.fd = r->conns[i].fd, .events = POLLIN};
        }
        if (poll(p, n, wait_ms) < 0) {
            if (errno == EINTR)
                continue;
            TSDF_LOG(TSDF_LOG_ERROR, "ring socket: poll: %s", strerror(errno));
            break;
        }
        if (p[0].revents)
            break;
        if (p[2].revents)
            settle_leases(r);
        for (nfds_t i = 3; i < n; i++)
            if (p[i].revents)
                attach(r, who[i]);
        if (p[1].revents & POLLIN)
            accept_one(r);
    }
    free(p);
    free(who);
    return NULL;
}

int rings_start(const char *path, int mode, long gid, uint32_t max_rings, uint64_t max_bytes,
                uint32_t attach_timeout_ms, rings_direct direct, rings **out, char *err,
                size_t err_len)
{
    if (max_rings == 0) {
        snprintf(err, err_len, "frame rings: no room for any ring");
        return TSDF_EINVAL;
    }
    rings *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, err_len, "out of memory");
        return TSDF_ENOMEM;
    }
    r->listen_fd = -1;
    r->wake[0] = r->wake[1] = -1;
    r->kick[0] = r->kick[1] = -1;
    r->max_rings = max_rings;
    r->max_bytes = max_bytes;
    r->attach_timeout_ms = attach_timeout_ms;
    r->direct = direct;
    /* Writers first: under load the request threads' copies overlap, and
     * glibc's default would keep an attach or detach waiting for a gap. */
    pthread_rwlockattr_t la;
    pthread_rwlockattr_init(&la);
    pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&r->lock, &la);
    pthread_rwlockattr_destroy(&la);
    int rc = TSDF_EIO;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) {
        snprintf(err, err_len, "[server] ring_socket: path longer than %zu bytes",
                 sizeof a.sun_path - 1);
        rc = TSDF_ETOO_LARGE;
        goto fail;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->conns = malloc(max_rings * sizeof *r->conns);
    if (r->conns == NULL || pipe2(r->wake, O_CLOEXEC) != 0 ||
        pipe2(r->kick, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, err_len, "out of memory");
        rc = TSDF_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < max_rings; i++)
        conn_reset(&r->conns[i]);
    /* Its folder made as the ipc:// sockets' is (server.c): EEXIST is
     * fine, and any real problem shows in bind. */
    const char *slash = strrchr(path, '/');
    if (slash != NULL && slash != path) {
        char dir[sizeof a.sun_path];
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        (void)mkdir(dir, 0755);
    }
    /* A socket left by a daemon that did not stop cleanly is replaced; one
     * that answers belongs to a running daemon, and anything else is not
     * ours to remove. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof a) == 0;
        if (probe >= 0)
            close(probe);
        if (live) {
            snprintf(err, err_len, "[server] ring_socket %s: in use by a running process", path);
            rc = TSDF_EBUSY;
            goto fail;
        }
        unlink(path);
    }
    r->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (r->listen_fd >= 0 && bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) == 0)
        r->bound = 1;
    if (!r->bound || chmod(path, (mode_t)mode) != 0 ||
        (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) != 0) || listen(r->listen_fd, 64) != 0) {
        snprintf(err, err_len, "[server] ring_socket %s: %s", path, strerror(errno));
        goto fail;
    }
    if (pthread_create(&r->thread, NULL, ring_main, r) != 0) {
        snprintf(err, err_len, "cannot start the ring socket's thread");
        rc = TSDF_ENOMEM;
        goto fail;
    }
    r->started = 1;
    TSDF_LOG(TSDF_LOG_INFO, "frame rings on %s: up to %u, %llu MiB in all", path, max_rings,
             (unsigned long long)(max_bytes >> 20));
    *out = r;
    return TSDF_OK;

fail:
    rings_stop(r);
    return rc;
}

void rings_stop(rings *r)
{
    if (r == NULL)
        return;
    if (r->started) {
        ssize_t n = write(r->wake[1], "x", 1);
        (void)n;
        pthread_join(r->thread, NULL);
    }
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    if (r->bound)
        unlink(r->path);
    pthread_rwlock_wrlock(&r->lock);
    uint32_t leased = 0;
    for (uint32_t i = 0; r->conns != NULL && i < r->max_rings; i++) {
        ring_conn *c = &r->conns[i];
        if (c->fd >= 0 || c->closing)
            conn_close(r, c);
        leased += c->closing;
    }
    pthread_rwlock_unlock(&r->lock);
    if (leased > 0) {
        /* A worker still in a raycast into a ring (one the stop gave up
         * on, stuck on the device): its mapping, and what its lease's end
         * touches (this struct, the kick pipe), stay for the rest of the
         * process's life. */
        TSDF_LOG(TSDF_LOG_WARN,
                 "frame rings: %u ring(s) still written by the GPU at stop: left mapped", leased);
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (r->wake[i] >= 0)
            close(r->wake[i]);
        if (r->kick[i] >= 0)
            close(r->kick[i]);
    }
    pthread_rwlock_destroy(&r->lock);
    free(r->conns);
    free(r);
}

/* len bytes between buf and fd at off, whole: pread or pwrite again after
 * a short transfer or EINTR. */
static int ring_xfer(int fd, uint8_t *buf, size_t len, uint64_t off, int write)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = write ? pwrite(fd, buf + done, len - done, (off_t)(off + done))
                          : pread(fd, buf + done, len - done, (off_t)(off + done));
        if (k > 0)
            done += (size_t)k;
        else if (k < 0 && errno == EINTR)
            continue;
        else
            return TSDF_EIO;
    }
    return TSDF_OK;
}

/* The ring ref names, with its checks for bytes from ref's offset
 * (read, or write): *out and TSDF_OK, or the codes of rings_read. Under
 * the lock, held shared. */
static int ring_find(rings *r, const rings_ref *ref, uint64_t bytes, int write, ring_conn **out)
{
    *out = NULL;
    for (uint32_t i = 0; i < r->max_rings; i++) {
        ring_conn *c = &r->conns[i];
        if (c->token != ref->token)
            continue;
        if ((uint64_t)c->pid != ref->pid)
            return TSDF_EFORBIDDEN;
        if (ref->seq < c->fence)
            return TSDF_ETIMEOUT;
        if (ref->offset > c->bytes || bytes > c->bytes - ref->offset)
            return TSDF_EBAD_SIZE;
        if (write && !c->writable)
            return TSDF_EINVAL;
        *out = c;
        return TSDF_OK;
    }
    return TSDF_ENOT_FOUND;
}

/* The n pieces of iov, one after the other from offset of ring token of
 * process pid, for the request numbered seq: read into them, written from
 * them (write), or with io 0 only checked. The codes of rings_read. */
static int ring_io(rings *r, const rings_ref *ref, const struct iovec *iov, int n, int io,
                   int write)
{
    if (r == NULL || ref->token == 0)
        return TSDF_ENOT_FOUND;
    uint64_t offset = ref->offset;
    uint64_t bytes = 0;
    for (int k = 0; k < n; k++)
        bytes += iov[k].iov_len;
    ring_conn *c;
    pthread_rwlock_rdlock(&r->lock);
    int rc = ring_find(r, ref, bytes, write, &c);
    for (int k = 0; rc == TSDF_OK && io && k < n; offset += iov[k].iov_len, k++)
        rc = ring_xfer(c->memfd, iov[k].iov_base, iov[k].iov_len, offset, write);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

int rings_read(rings *r, const rings_ref *ref, void *dst, size_t bytes)
{
    struct iovec v = {dst, bytes};
    int rc = ring_io(r, ref, &v, 1, 1, 0);
    if (rc == TSDF_OK)
        atomic_fetch_add(&r->frames, 1);
    return rc;
}

int rings_check(rings *r, const rings_ref *ref, uint64_t bytes, int write)
{
    /* Only the length is looked at. */
    struct iovec v = {NULL, (size_t)bytes};
    return ring_io(r, ref, &v, 1, 0, write);
}

int rings_write(rings *r, const rings_ref *ref, const struct iovec *iov, int n)
{
    return ring_io(r, ref, iov, n, 1, 1);
}

int rings_lease(rings *r, const rings_ref *ref, uint64_t bytes, rings_lease_t *lease, void **p)
{
    *p = NULL;
    lease->conn = NULL;
    if (r == NULL || ref->token == 0)
        return TSDF_ENOT_FOUND;
    ring_conn *c;
    pthread_rwlock_rdlock(&r->lock);
    int rc = ring_find(r, ref, bytes, 1, &c);
    /* Floats at the offset: only where it is aligned for them. */
    if (rc == TSDF_OK && c->gpu_map != NULL && ref->offset % sizeof(float) == 0) {
        /* Counted under the lock, so that a fence or close that takes it
         * next sees the lease; it holds no lock itself. */
        atomic_fetch_add(&c->leases, 1);
        lease->conn = c;
        *p = (uint8_t *)c->gpu_map + ref->offset;
    }
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

void rings_lease_end(rings *r, rings_lease_t *lease)
{
    ring_conn *c = lease->conn;
    if (c == NULL)
        return;
    lease->conn = NULL;
    /* The last lease of the ring: a fence answer or a closed connection
     * may wait for it. */
    if (atomic_fetch_sub(&c->leases, 1) == 1) {
        ssize_t n = write(r->kick[1], "k", 1);
        (void)n; /* a full pipe holds a kick already */
    }
}

int rings_mapped(const rings *r)
{
    return r != NULL && r->direct != RINGS_PWRITE;
}

void rings_get_stats(rings *r, rings_stats *out)
{
    memset(out, 0, sizeof *out);
    if (r == NULL)
        return;
    pthread_rwlock_rdlock(&r->lock);
    out->attached = r->attached;
    out->bytes = r->held;
    pthread_rwlock_unlock(&r->lock);
    out->refused = atomic_load(&r->refused);
    out->frames = atomic_load(&r->frames);
}
