/*
 * test_client_ring.c - libtsdf's side of a shared-memory ring
 * (client/client_ring.c) against a stand-in for the daemon's ring socket:
 * the slot runs client_ring_take hands out (the fewest consecutive free
 * slots that hold the bytes, the lowest such run, none that overlaps one
 * taken), release and retirement, a 64-slot ring taken whole, a broken
 * ring, the bytes put into a span read back where the daemon would find
 * them, and the fences that free retired slots (which seq, when none is
 * sent, a daemon that refuses them).
 */
#define _GNU_SOURCE

#include "testutil.h"

#include "client_ring.h"
#include "tsdf_types.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SLOT 128u /* a multiple of 64: slots keep this size */

typedef struct {
    int listen_fd;
    int conn;
    int fence_status;     /* the answer to a fence: TSDF_OK, or a refusal */
    uint64_t fence_token; /* the token an accepted fence's answer names */
    uint64_t fences[16];  /* the fences received, in order */
    unsigned nfences;
} fake_daemon;

/* Answers one attach with token 42, then each fence with fence_status,
 * until the client closes the connection (the ring lives while it is
 * open). */
static void *serve(void *arg)
{
    fake_daemon *f = arg;
    f->conn = accept(f->listen_fd, NULL, NULL);
    if (f->conn < 0)
        return NULL;
    tsdf_ring_attach_msg m;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov;
    struct msghdr h;
    tsdf_ring_msghdr(&h, &iov, &m, sizeof m, ctl, sizeof ctl);
    if (recvmsg(f->conn, &h, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof m)
        return NULL;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
    if (cm != NULL && cm->cmsg_type == SCM_RIGHTS) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm), sizeof fd);
        close(fd);
    }
    tsdf_ring_attach_reply r = {TSDF_RING_MAGIC, 0, 42, ""};
    send(f->conn, &r, sizeof r, MSG_NOSIGNAL);
    tsdf_ring_fence_msg fm;
    while (recv(f->conn, &fm, sizeof fm, 0) == (ssize_t)sizeof fm) {
        if (fm.magic == TSDF_RING_FENCE_MAGIC && f->nfences < 16)
            f->fences[f->nfences++] = fm.fence;
        tsdf_ring_attach_reply a = {TSDF_RING_MAGIC, f->fence_status,
                                    f->fence_status == TSDF_OK ? f->fence_token : 0u, ""};
        send(f->conn, &a, sizeof a, MSG_NOSIGNAL);
    }
    return NULL;
}

/* A ring of `slots` slots of SLOT bytes, attached to a stand-in daemon. */
static client_ring *attach(unsigned slots, fake_daemon *f, pthread_t *th, int fence_status)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(path, sizeof path, "%s/ring-%u.sock", tsdf_test_tmpdir(), slots);
    unlink(path);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    f->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    f->conn = -1;
    f->fence_status = fence_status;
    f->fence_token = 42;
    f->nfences = 0;
    assert_true(f->listen_fd >= 0);
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->listen_fd, 1), 0);
    assert_int_equal(pthread_create(th, NULL, serve, f), 0);
    client_ring *r = NULL;
    char why[160] = "";
    int rc = client_ring_attach(path, SLOT, slots, 5000, &r, why, sizeof why);
    if (rc != TSDF_OK)
        fail_msg("attach: %s (%s)", tsdf_strerror(rc), why);
    unlink(path);
    return r;
}

static void detach(client_ring *r, fake_daemon *f, pthread_t th)
{
    client_ring_close(r);
    pthread_join(th, NULL);
    if (f->conn >= 0)
        close(f->conn);
    close(f->listen_fd);
}

/* Takes bytes; the span's first slot (-1: none). */
static int take(client_ring *r, size_t bytes, client_ring_span *sp)
{
    int rc = client_ring_take(r, bytes, sp);
    assert_int_equal(rc == TSDF_OK, sp->slot >= 0);
    if (sp->slot >= 0) {
        assert_int_equal(sp->token, 42);
        assert_int_equal(sp->offset, (uint64_t)sp->slot * SLOT);
    }
    return sp->slot;
}

static void test_runs(void **state)
{
    (void)state;
    fake_daemon f;
    pthread_t th;
    /* A daemon from before fences refuses them (PROTOCOL.md 6.10). */
    client_ring *r = attach(8, &f, &th, TSDF_EINVAL);
    client_ring_span a, b, c, d, e;

    assert_int_equal(take(r, 1, &a), 0);
    assert_int_equal(a.count, 1);
    assert_int_equal(take(r, SLOT + 1, &b), 1); /* two slots: 1, 2 */
    assert_int_equal(b.count, 2);
    client_ring_release(r, &a, 1); /* 0 free again, alone */
    /* Three slots: not 0 (a run of one), the lowest run after the taken. */
    assert_int_equal(take(r, 3 * SLOT, &c), 3);
    assert_int_equal(c.count, 3);
    assert_int_equal(take(r, 2 * SLOT, &d), 6);
    /* Nothing of three left (0 alone is free), one slot is. */
    assert_int_equal(take(r, 3 * SLOT, &e), -1);
    assert_int_equal(take(r, SLOT, &e), 0);
    assert_int_equal(take(r, 1, &a), -1); /* all eight taken */
    /* A retired span stays taken while the daemon refuses fences;
     * released ones are free again. */
    client_ring_release(r, &b, 0);
    client_ring_release(r, &c, 1);
    client_ring_release(r, &d, 1);
    client_ring_release(r, &e, 1);
    /* Free now: 0, then 3..7 (1 and 2 retired): runs of one and five. */
    assert_int_equal(take(r, 6 * SLOT, &a), -1);
    assert_int_equal(take(r, 5 * SLOT - 1, &a), 3);
    assert_int_equal(a.count, 5);
    client_ring_release(r, &a, 1);
    /* The one fence asked for (when a take found no run) was refused,
     * and none is asked for again. */
    assert_int_equal(f.nfences, 1);
    assert_int_equal(take(r, 6 * SLOT, &a), -1);
    assert_int_equal(f.nfences, 1);
    /* No bytes, more than the ring, a span of no slot. */
    assert_int_equal(take(r, 0, &a), -1);
    assert_int_equal(take(r, 8 * SLOT + 1, &a), -1);
    client_ring_release(r, &a, 1);
    /* A broken ring hands out nothing. */
    client_ring_break(r);
    assert_int_equal(take(r, 1, &a), -1);
    detach(r, &f, th);
}

static void test_whole_ring_and_bytes(void **state)
{
    (void)state;
    fake_daemon f;
    pthread_t th;
    client_ring *r = attach(CLIENT_RING_MAX_SLOTS, &f, &th, TSDF_OK);
    client_ring_span all, one, two;
    assert_int_equal(take(r, CLIENT_RING_MAX_SLOTS * SLOT, &all), 0);
    assert_int_equal(all.count, CLIENT_RING_MAX_SLOTS);
    assert_int_equal(take(r, 1, &one), -1);
    client_ring_release(r, &all, 1);

    /* Bytes put into a span of two slots are where its offset says. */
    uint8_t src[SLOT + 40];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 13u + 5u);
    assert_int_equal(take(r, SLOT, &one), 0);
    assert_int_equal(client_ring_put(r, src, sizeof src, &two), TSDF_OK);
    assert_int_equal(two.slot, 1);
    assert_int_equal(two.count, 2);
    assert_memory_equal(client_ring_data(r, two.offset), src, sizeof src);
    /* The last slot of a full ring: a run of one at 63. */
    client_ring_release(r, &one, 1);
    client_ring_release(r, &two, 1);
    client_ring_span head, last;
    assert_int_equal(take(r, (CLIENT_RING_MAX_SLOTS - 1) * SLOT, &head), 0);
    assert_int_equal(take(r, SLOT, &last), CLIENT_RING_MAX_SLOTS - 1);
    assert_int_equal(take(r, 1, &one), -1);
    assert_int_equal(f.nfences, 0); /* nothing retired: no fence */
    detach(r, &f, th);
}

/* Retired slots come back through a fence at the lowest seq still in
 * flight: only those below it, only when no run is free, and one fence
 * for each such take. */
static void test_fences(void **state)
{
    (void)state;
    fake_daemon f;
    pthread_t th;
    client_ring *r = attach(4, &f, &th, TSDF_OK);
    client_ring_span s[6];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(take(r, SLOT, &s[i]), i);
        assert_true(s[i].seq == (uint64_t)i + 1); /* 1, 2, ... in order */
    }
    client_ring_release(r, &s[0], 0); /* seq 1: timed out */
    client_ring_release(r, &s[1], 0); /* seq 2: timed out */
    client_ring_release(r, &s[2], 1); /* seq 3: answered */
    /* A free slot is there: taken without a fence. */
    assert_int_equal(take(r, SLOT, &s[4]), 2);
    assert_true(s[4].seq == 5);
    assert_int_equal(f.nfences, 0);
    /* None free: a fence at 4 (slot 3, seq 4, the lowest in flight)
     * frees slots 0 and 1 (seq 1 and 2); the lowest is taken. */
    assert_int_equal(take(r, SLOT, &s[5]), 0);
    assert_true(s[5].seq == 6);
    assert_int_equal(f.nfences, 1);
    assert_true(f.fences[0] == 4);
    assert_int_equal(take(r, SLOT, &s[0]), 1);
    assert_int_equal(f.nfences, 1);

    /* Retired above the lowest seq in flight: not freed, no fence. Slot 2
     * (seq 5) times out while slot 3 (seq 4) still waits. */
    client_ring_release(r, &s[4], 0);
    assert_int_equal(take(r, SLOT, &s[1]), -1);
    assert_int_equal(f.nfences, 1);
    /* Slot 3 answered: a fence past every seq handed out (8) frees slot 2,
     * and with slot 3 free a span of two fits. */
    client_ring_release(r, &s[3], 1);
    client_ring_release(r, &s[5], 1);
    client_ring_release(r, &s[0], 1);
    assert_int_equal(take(r, 4 * SLOT, &s[1]), 0);
    assert_int_equal(f.nfences, 2);
    assert_true(f.fences[1] == 8);
    assert_int_equal(s[1].count, 4);
    client_ring_release(r, &s[1], 1);
    detach(r, &f, th);

    /* An answer that names another ring frees nothing, and fencing
     * stops. */
    r = attach(1, &f, &th, TSDF_OK);
    f.fence_token = 43;
    assert_int_equal(take(r, SLOT, &s[0]), 0);
    client_ring_release(r, &s[0], 0);
    assert_int_equal(take(r, SLOT, &s[0]), -1);
    assert_int_equal(f.nfences, 1);
    assert_int_equal(take(r, SLOT, &s[0]), -1);
    assert_int_equal(f.nfences, 1);
    detach(r, &f, th);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_whole_ring_and_bytes),
        cmocka_unit_test(test_fences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
