/*
 * test_rings_lease.c - daemon/rings.c's leases (rings_lease): the bytes a
 * ring mapped for the device hands out, and what waits for a lease. The
 * rings run with RINGS_MAPPED (mapped as for the GPU, not page-locked: no
 * device here), and this program writes where a lease points, as the
 * device's copies would. Checked:
 *   - a lease points at the ring's bytes at the request's offset (the
 *     client's own mapping sees what is written there); an offset not
 *     aligned for floats, or a ring sealed against writing, gets no
 *     pointer (the caller falls back to pwrite), and a seq below the fence
 *     is refused;
 *   - a fence that comes while a lease is in flight is answered only
 *     after the lease ended, and requests below it are refused then;
 *   - a ring whose connection closes during a lease is gone at once for
 *     new requests (NOT_FOUND, rings.attached 0), while the lease's bytes
 *     stay mapped until it ends.
 */
#define _GNU_SOURCE

#include "testutil.h"

#include "client_ring.h"
#include "rings.h"
#include "tsdf_error.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define RING_BYTES (1u << 20)

typedef struct {
    char dir[64];
    char path[128];
    rings *r;
    int fd, sock;
    uint8_t *view; /* the client's own mapping of the ring */
    uint64_t token;
} lease_fixture;

static void fixture_start(lease_fixture *f, unsigned seals)
{
    char err[160];
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/tsdf-rings-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/rings.sock", f->dir);
    int rc = rings_start(f->path, 0600, -1, 4, 16u * RING_BYTES, 60000, RINGS_MAPPED, &f->r, err,
                         sizeof err);
    if (rc != TSDF_OK)
        fail_msg("rings_start: %s", err);
    f->fd = memfd_create("test-lease", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(f->fd >= 0);
    assert_int_equal(ftruncate(f->fd, RING_BYTES), 0);
    f->view = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
    assert_true(f->view != MAP_FAILED);
    if (seals & F_SEAL_WRITE) {
        /* A write seal needs no writable mapping of the file. */
        assert_int_equal(munmap(f->view, RING_BYTES), 0);
        f->view = NULL;
    }
    assert_int_equal(fcntl(f->fd, F_ADD_SEALS, F_SEAL_SHRINK | seals), 0);
    tsdf_ring_attach_reply rep;
    char why[160];
    rc = client_ring_handshake(f->path, f->fd, RING_BYTES, 10000, &f->sock, &rep, why, sizeof why);
    if (rc != TSDF_OK)
        fail_msg("handshake: %s (%s)", tsdf_strerror(rc), why);
    assert_int_equal(rep.status, TSDF_OK);
    f->token = rep.token;
}

static void fixture_stop(lease_fixture *f)
{
    if (f->sock >= 0)
        close(f->sock);
    rings_stop(f->r);
    if (f->view != NULL)
        munmap(f->view, RING_BYTES);
    close(f->fd);
    rmdir(f->dir);
}

static rings_ref ref_of(const lease_fixture *f, uint64_t offset, uint64_t seq)
{
    rings_ref r = {f->token, (uint64_t)getpid(), offset, seq};
    return r;
}

/* A lease of bytes at offset for seq that must be granted: its pointer. */
static uint8_t *lease_ok(const lease_fixture *f, uint64_t offset, uint64_t seq, uint64_t bytes,
                         rings_lease_t *l)
{
    void *p = NULL;
    const rings_ref at = ref_of(f, offset, seq);
    assert_int_equal(rings_lease(f->r, &at, bytes, l, &p), TSDF_OK);
    assert_non_null(p);
    assert_non_null(l->conn);
    return p;
}

static void send_fence(int sock, uint64_t fence)
{
    tsdf_ring_fence_msg m = {TSDF_RING_FENCE_MAGIC, TSDF_RING_VERSION, fence};
    assert_int_equal(send(sock, &m, sizeof m, MSG_NOSIGNAL), (ssize_t)sizeof m);
}

/* Whether the daemon's answer arrives on sock within ms; read when it does. */
static int answered(int sock, int ms, tsdf_ring_attach_reply *rep)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return 0;
    assert_int_equal(recv(sock, rep, sizeof *rep, 0), (ssize_t)sizeof *rep);
    return 1;
}

static void test_lease_points_into_the_ring(void **state)
{
    (void)state;
    lease_fixture f;
    fixture_start(&f, 0);
    rings_lease_t l;
    void *p = lease_ok(&f, 4096, 1, 4096, &l);
    memcpy(p, "from the device", 16);
    rings_lease_end(f.r, &l);
    assert_memory_equal(f.view + 4096, "from the device", 16);
    assert_null(l.conn);
    rings_lease_end(f.r, &l); /* nothing held: nothing done */

    /* Not aligned for floats: no pointer, nothing held. */
    const rings_ref odd = ref_of(&f, 4098, 1);
    assert_int_equal(rings_lease(f.r, &odd, 64, &l, &p), TSDF_OK);
    assert_null(p);
    assert_null(l.conn);
    /* Past the end, another process, an unknown token: rings_write's codes. */
    const rings_ref past = ref_of(&f, RING_BYTES - 8, 1);
    assert_int_equal(rings_lease(f.r, &past, 64, &l, &p), TSDF_EBAD_SIZE);
    rings_ref other = ref_of(&f, 0, 1);
    other.pid++;
    assert_int_equal(rings_lease(f.r, &other, 64, &l, &p), TSDF_EFORBIDDEN);
    rings_ref unknown = ref_of(&f, 0, 1);
    unknown.token ^= 1;
    assert_int_equal(rings_lease(f.r, &unknown, 64, &l, &p), TSDF_ENOT_FOUND);
    assert_null(p);
    fixture_stop(&f);

    /* A ring sealed against writing takes no image (INVAL), mapped or not. */
    fixture_start(&f, F_SEAL_WRITE);
    const rings_ref ro = ref_of(&f, 0, 1);
    assert_int_equal(rings_lease(f.r, &ro, 64, &l, &p), TSDF_EINVAL);
    assert_null(p);
    fixture_stop(&f);
}

static void test_fence_waits_for_the_lease(void **state)
{
    (void)state;
    lease_fixture f;
    fixture_start(&f, 0);
    rings_lease_t l;
    uint8_t *p = lease_ok(&f, 0, 5, 1024, &l);
    const rings_ref at = ref_of(&f, 0, 5);
    send_fence(f.sock, 10);
    tsdf_ring_attach_reply rep;
    /* The device may still be writing seq 5's image: no answer yet. */
    assert_false(answered(f.sock, 300, &rep));
    /* The fence took effect at once for new requests. */
    rings_lease_t l2;
    void *p2 = NULL;
    assert_int_equal(rings_lease(f.r, &at, 1024, &l2, &p2), TSDF_ETIMEOUT);
    assert_null(p2);
    memset(p, 0x5a, 1024);
    rings_lease_end(f.r, &l);
    assert_true(answered(f.sock, 10000, &rep));
    assert_int_equal(rep.status, TSDF_OK);
    assert_true(rep.token == f.token);
    /* Without a lease in flight a fence is answered at once. */
    send_fence(f.sock, 12);
    assert_true(answered(f.sock, 10000, &rep));
    assert_int_equal(rep.status, TSDF_OK);
    fixture_stop(&f);
}

static void test_close_during_a_lease(void **state)
{
    (void)state;
    lease_fixture f;
    fixture_start(&f, 0);
    rings_lease_t l;
    uint8_t *p = lease_ok(&f, 8192, 1, 4096, &l);
    const rings_ref at = ref_of(&f, 8192, 1);
    close(f.sock);
    f.sock = -1;
    rings_stats st;
    for (int i = 0; i < 6000; i++) {
        rings_get_stats(f.r, &st);
        if (st.attached == 0)
            break;
        usleep(10000);
    }
    assert_int_equal(st.attached, 0);
    assert_int_equal(st.bytes, 0);
    /* Gone for new requests, still mapped for the lease in flight. */
    void *p2 = NULL;
    rings_lease_t l2;
    assert_int_equal(rings_lease(f.r, &at, 64, &l2, &p2), TSDF_ENOT_FOUND);
    memcpy(p, "late", 4);
    rings_lease_end(f.r, &l);
    assert_memory_equal(f.view + 8192, "late", 4);
    fixture_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_points_into_the_ring),
        cmocka_unit_test(test_fence_waits_for_the_lease),
        cmocka_unit_test(test_close_during_a_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
