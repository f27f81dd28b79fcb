/* client_ring.c - libtsdf's side of a shared-memory frame ring (client_ring.h). */
#define _GNU_SOURCE
#include "client_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tsdf_ring_wire.h"
#include "tsdf_types.h"

struct client_ring {
    int sock; /* the ring socket's connection: the ring lives while it is open */
    uint8_t *base;
    size_t slot_bytes;
    unsigned slots;
    uint64_t token;
    atomic_uint_fast64_t free_mask; /* bit i: slot i is free */
    /* Bit i: slot i belongs to a request that got no answer; the daemon
     * may still read or write it until a fence above its seq. */
    atomic_uint_fast64_t retired;
    atomic_int broken;
    /* Takes and fences, one at a time (releases need no lock). */
    pthread_mutex_t lock;
    uint64_t last_seq;                        /* the last seq handed out */
    uint64_t slot_seq[CLIENT_RING_MAX_SLOTS]; /* the seq of the span in slot i */
    int no_fence; /* the daemon did not answer a fence: slots stay retired */
};

static int fail(char *why, size_t why_len, int rc, const char *msg)
{
    snprintf(why, why_len, "%s", msg);
    return rc;
}

/* Waits until fd is readable, at most timeout_ms. */
static int wait_readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return TSDF_OK;
        if (n == 0)
            return TSDF_ETIMEOUT;
        if (errno != EINTR)
            return TSDF_EIO;
    }
}

int client_ring_handshake(const char *path, int fd, uint64_t bytes, int timeout_ms, int *sock,
                          tsdf_ring_attach_reply *rep, char *why, size_t why_len)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (path == NULL || strlen(path) >= sizeof a.sun_path)
        return fail(why, why_len, TSDF_EINVAL, "ring socket path missing or too long");
    memcpy(a.sun_path, path, strlen(path) + 1);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(why, why_len, "ring socket %s: %s", path, strerror(errno));
        if (s >= 0)
            close(s);
        return TSDF_ECONNREFUSED;
    }
    tsdf_ring_attach_msg m = {TSDF_RING_MAGIC, TSDF_RING_VERSION, bytes};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov;
    struct msghdr h;
    tsdf_ring_msghdr(&h, &iov, &m, sizeof m, ctl, sizeof ctl);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    int rc = TSDF_EIO;
    if (sendmsg(s, &h, MSG_NOSIGNAL) != (ssize_t)sizeof m) {
        snprintf(why, why_len, "ring socket %s: %s", path, strerror(errno));
        goto fail;
    }
    if ((rc = wait_readable(s, timeout_ms > 0 ? timeout_ms : 5000)) != TSDF_OK) {
        snprintf(why, why_len, "ring socket %s: no answer", path);
        goto fail;
    }
    if (recv(s, rep, sizeof *rep, 0) != (ssize_t)sizeof *rep || rep->magic != TSDF_RING_MAGIC) {
        snprintf(why, why_len, "ring socket %s: not a ring answer", path);
        rc = TSDF_EFORMAT;
        goto fail;
    }
    rep->reason[sizeof rep->reason - 1] = '\0';
    *sock = s;
    return TSDF_OK;

fail:
    close(s);
    return rc;
}

/* The bits of n slots from slot on. */
static uint64_t span_bits(int slot, unsigned n)
{
    return (n >= 64 ? UINT64_MAX : (((uint64_t)1 << n) - 1u)) << slot;
}

int client_ring_attach(const char *path, size_t slot_bytes, unsigned slots, int timeout_ms,
                       client_ring **out, char *why, size_t why_len)
{
    if (slots == 0 || slots > CLIENT_RING_MAX_SLOTS || slot_bytes == 0 ||
        slot_bytes > ((size_t)1 << 30) / slots)
        return fail(why, why_len, TSDF_EINVAL, "1..64 slots of at most 1 GiB in all");
    /* Slots 64-byte aligned, so that every copy in and out is aligned. */
    slot_bytes = (slot_bytes + 63u) & ~(size_t)63u;
    const size_t bytes = slot_bytes * slots;

    client_ring *r = calloc(1, sizeof *r);
    if (r == NULL)
        return fail(why, why_len, TSDF_ENOMEM, "out of memory");
    r->sock = -1;
    r->base = MAP_FAILED;
    int rc = TSDF_EIO;
    int fd = memfd_create("tsdf-frame-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        /* The daemon takes only a ring that cannot shrink (PROTOCOL.md
         * 6.10); growing is sealed too, and the seals themselves are
         * final. */
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        snprintf(why, why_len, "cannot make the ring's memfd: %s", strerror(errno));
        goto fail;
    }
    r->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->base == MAP_FAILED) {
        snprintf(why, why_len, "cannot map the ring: %s", strerror(errno));
        rc = TSDF_ENOMEM;
        goto fail;
    }
    tsdf_ring_attach_reply rep;
    rc = client_ring_handshake(path, fd, bytes, timeout_ms, &r->sock, &rep, why, why_len);
    if (rc != TSDF_OK)
        goto fail;
    if (rep.status != TSDF_OK) {
        snprintf(why, why_len, "ring refused: %s", rep.reason);
        rc = rep.status;
        goto fail;
    }
    close(fd);
    r->slot_bytes = slot_bytes;
    r->slots = slots;
    r->token = rep.token;
    atomic_init(&r->free_mask, span_bits(0, slots));
    atomic_init(&r->retired, 0);
    atomic_init(&r->broken, 0);
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return TSDF_OK;

fail:
    if (fd >= 0)
        close(fd);
    if (r->sock >= 0)
        close(r->sock);
    if (r->base != MAP_FAILED)
        munmap(r->base, bytes);
    free(r);
    return rc;
}

void client_ring_close(client_ring *r)
{
    if (r == NULL)
        return;
    close(r->sock);
    munmap(r->base, r->slot_bytes * r->slots);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* How long a fence waits for the daemon's answer. */
#define FENCE_TIMEOUT_MS 1000

/* Sends the daemon a fence at seq and reads its answer (PROTOCOL.md 6.10,
 * item 5): TSDF_OK once requests below seq can no longer touch the ring. */
static int send_fence(client_ring *r, uint64_t seq)
{
    tsdf_ring_fence_msg m = {TSDF_RING_FENCE_MAGIC, TSDF_RING_VERSION, seq};
    if (send(r->sock, &m, sizeof m, MSG_NOSIGNAL) != (ssize_t)sizeof m)
        return TSDF_EIO;
    int rc = wait_readable(r->sock, FENCE_TIMEOUT_MS);
    if (rc != TSDF_OK)
        return rc;
    tsdf_ring_attach_reply rep;
    ssize_t n;
    while ((n = recv(r->sock, &rep, sizeof rep, 0)) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof rep || rep.magic != TSDF_RING_MAGIC)
        return TSDF_EFORMAT;
    if (rep.status != TSDF_OK)
        return rep.status;
    return rep.token == r->token ? TSDF_OK : TSDF_EFORMAT;
}

/* Frees the retired slots that no request in flight can reach any more:
 * a fence at the lowest seq still in flight (or past the last one handed
 * out) makes the daemon refuse every request below it, among them all
 * the retired slots' with a lower seq. 1 when some were freed. Lock held.
 * A daemon that does not answer a fence (one from before fences, or a
 * broken connection) is not asked again; its retired slots stay so. */
static int reclaim(client_ring *r)
{
    const uint64_t retired = atomic_load(&r->retired);
    if (retired == 0 || r->no_fence)
        return 0;
    /* Slots only leave "in flight" meanwhile (to free or retired), so
     * the lowest seq seen here is at most the true one: never a fence
     * above a request still waiting for its answer. */
    const uint64_t in_flight = span_bits(0, r->slots) & ~atomic_load(&r->free_mask) & ~retired;
    uint64_t fence = r->last_seq + 1;
    for (unsigned i = 0; i < r->slots; i++)
        if ((in_flight >> i & 1u) && r->slot_seq[i] < fence)
            fence = r->slot_seq[i];
    uint64_t freed = 0;
    for (unsigned i = 0; i < r->slots; i++)
        if ((retired >> i & 1u) && r->slot_seq[i] < fence)
            freed |= (uint64_t)1 << i;
    if (freed == 0)
        return 0;
    if (send_fence(r, fence) != TSDF_OK) {
        r->no_fence = 1;
        return 0;
    }
    atomic_fetch_and(&r->retired, ~freed);
    atomic_fetch_or(&r->free_mask, freed);
    return 1;
}

/* The lowest run of n free slots, taken (CAS: releases may set bits
 * meanwhile); -1 when there is none. Lock held. */
static int take_run(client_ring *r, size_t n)
{
    uint64_t mask = atomic_load(&r->free_mask);
    for (;;) {
        /* Bit i of runs: slots i .. i + n - 1 are all free. */
        uint64_t runs = mask;
        for (size_t i = 1; i < n && runs != 0; i++)
            runs &= mask >> i;
        if (runs == 0)
            return -1;
        int slot = __builtin_ctzll(runs);
        uint64_t bits = span_bits(slot, (unsigned)n);
        if (atomic_compare_exchange_weak(&r->free_mask, &mask, mask & ~bits))
            return slot;
    }
}

int client_ring_take(client_ring *r, size_t bytes, client_ring_span *sp)
{
    *sp = (client_ring_span){-1, 0, 0, 0, 0};
    if (r == NULL || bytes == 0 || atomic_load(&r->broken))
        return -1;
    const size_t n = (bytes + r->slot_bytes - 1) / r->slot_bytes;
    if (n > r->slots)
        return -1;
    pthread_mutex_lock(&r->lock);
    int slot = take_run(r, n);
    if (slot < 0 && reclaim(r))
        slot = take_run(r, n);
    if (slot >= 0) {
        sp->slot = slot;
        sp->count = (unsigned)n;
        sp->token = r->token;
        sp->offset = (uint64_t)slot * r->slot_bytes;
        sp->seq = ++r->last_seq;
        for (size_t i = 0; i < n; i++)
            r->slot_seq[(size_t)slot + i] = sp->seq;
    }
    pthread_mutex_unlock(&r->lock);
    return slot >= 0 ? TSDF_OK : -1;
}

int client_ring_put(client_ring *r, const void *src, size_t bytes, client_ring_span *sp)
{
    if (client_ring_take(r, bytes, sp) != TSDF_OK)
        return -1;
    memcpy(r->base + sp->offset, src, bytes);
    return TSDF_OK;
}

const void *client_ring_data(const client_ring *r, uint64_t offset)
{
    return r->base + offset;
}

void client_ring_release(client_ring *r, const client_ring_span *sp, int answered)
{
    if (r == NULL || sp->slot < 0)
        return;
    if (answered)
        atomic_fetch_or(&r->free_mask, span_bits(sp->slot, sp->count));
    else
        atomic_fetch_or(&r->retired, span_bits(sp->slot, sp->count));
}

void client_ring_break(client_ring *r)
{
    if (r != NULL)
        atomic_store(&r->broken, 1);
}
