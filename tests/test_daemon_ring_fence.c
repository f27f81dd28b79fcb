/*
 * test_daemon_ring_fence.c - fences on a shared-memory ring (PROTOCOL.md
 * 6.10, item 5) against a real tsdfd: requests below a ring's fence are
 * refused without touching the ring, the fence never goes down, fences of
 * another version or on a connection without a ring are refused; and
 * libtsdf takes back the ring slot of a frame that timed out.
 */
#define _GNU_SOURCE

#include "testutil.h"

#include "daemon_ring_testlib.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A fence of `fence` (version `version`) on ring connection sock; the
 * daemon's answer in *rep. */
static void send_fence(int sock, uint64_t fence, uint32_t version, tsdf_ring_attach_reply *rep)
{
    tsdf_ring_fence_msg m = {TSDF_RING_FENCE_MAGIC, version, fence};
    assert_int_equal(send(sock, &m, sizeof m, MSG_NOSIGNAL), (ssize_t)sizeof m);
    struct pollfd p = {.fd = sock, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_int_equal(recv(sock, rep, sizeof *rep, 0), (ssize_t)sizeof *rep);
    assert_int_equal(rep->magic, TSDF_RING_MAGIC);
}

/* Fences (PROTOCOL.md 6.10, item 5): once the daemon has answered one,
 * a frame or a raycast that names the ring with a lower ring_seq (or
 * none) is refused with TIMEOUT and reads or writes nothing; the fence
 * never goes down; a fence on a connection without a ring, or of
 * another version, is refused. */
static void test_ring_fences(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16], msg[TSDF_PROTO_MAX_MESSAGE_LEN + 1];
    const size_t px = (size_t)IMG_W * IMG_H, bytes = px * 16u;
    frames_make(&fs, "room", IMG_W, IMG_H, N_FRAMES);
    tsdf_frame u16;
    uint16_t *mm = frame_to_mm(&fs.frames[0], &u16);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < fs.count; i++)
        integrate_ok(c, "m", &fs.frames[i], i);
    nng_socket q = raw_req(&h);
    int fd = make_memfd(bytes, 1), sock = -1;
    tsdf_ring_attach_reply ar, fr;
    handshake(path, fd, bytes, &sock, &ar);
    assert_int_equal(ar.status, TSDF_OK);
    uint8_t *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(base != MAP_FAILED);
    memcpy(base, mm, U16_BYTES);

    /* Before any fence every seq goes, none included. */
    assert_int_equal(ring_request(q, "r", &u16, ar.token, 0, TSDF_MSG_INTEGRATE, msg, sizeof msg),
                     TSDF_OK);
    send_fence(sock, 10, TSDF_RING_VERSION, &fr);
    assert_int_equal(fr.status, TSDF_OK);
    assert_true(fr.token == ar.token);
    for (uint64_t seq = 0; seq <= 10; seq += 5) {
        int rc =
            ring_request_seq(q, "r", &u16, ar.token, 0, seq, TSDF_MSG_INTEGRATE, msg, sizeof msg);
        if (seq < 10) {
            assert_int_equal(rc, TSDF_ETIMEOUT);
            assert_int_equal(strncmp(msg, "ring_seq", 8), 0);
        } else if (rc != TSDF_OK) {
            fail_msg("seq 10 after a fence at 10: %s (%s)", tsdf_strerror(rc), msg);
        }
    }
    /* A lower or repeated fence leaves it at 10. */
    send_fence(sock, 3, TSDF_RING_VERSION, &fr);
    assert_int_equal(fr.status, TSDF_OK);
    send_fence(sock, 10, TSDF_RING_VERSION, &fr);
    assert_int_equal(fr.status, TSDF_OK);
    assert_int_equal(
        ring_request_seq(q, "r", &u16, ar.token, 0, 9, TSDF_MSG_INTEGRATE, msg, sizeof msg),
        TSDF_ETIMEOUT);
    /* Another version: refused, the fence unchanged, the ring kept. */
    send_fence(sock, 100, TSDF_RING_VERSION + 1, &fr);
    assert_int_equal(fr.status, TSDF_EVERSION);
    assert_int_equal(
        ring_request_seq(q, "r", &u16, ar.token, 0, 11, TSDF_MSG_INTEGRATE, msg, sizeof msg),
        TSDF_OK);
    tsdf_rep_stats *st = settled_stats(c, "r", 0);
    /* Three frames through the ring; the three fenced ones never read it. */
    assert_int_equal(stat_get(st, "rings.frames"), 3);
    free(st);

    /* A raycast below the fence: refused, nothing written; above: there. */
    tsdf_raycast_params rp;
    camera_of(&fs.frames[1], &rp);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    memset(base, 0xab, bytes);
    ring_raycast_seq(q, &rp, 1, ar.token, 0, 7, rep);
    assert_int_equal(rep->status, TSDF_ETIMEOUT);
    assert_int_equal(strncmp(rep->message, "ring_seq", 8), 0);
    for (size_t i = 0; i < bytes; i++)
        if (base[i] != 0xab)
            fail_msg("byte %zu of the ring written by a fenced raycast", i);
    ring_raycast_seq(q, &rp, 1, ar.token, 0, 12, rep);
    assert_int_equal(rep->status, TSDF_OK);
    assert_true(rep->u.raycast.in_ring);
    float *want = malloc(px * 16u);
    assert_non_null(want);
    const tsdf_client_raycast_options o = {.want_normals = 1};
    tsdf_client_raycast_info info;
    raycast_ok(c, "m", &rp, &o, want, want + px, NULL, &info);
    assert_memory_equal(base, want, px * 16u);
    free(want);
    free(rep);

    /* A fence on a connection that attached no ring: refused, and that
     * connection closed (it holds no ring slot). */
    int bare = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert_int_equal(connect(bare, (struct sockaddr *)&a, sizeof a), 0);
    send_fence(bare, 5, TSDF_RING_VERSION, &fr);
    assert_int_equal(fr.status, TSDF_EINVAL);
    char byte;
    struct pollfd p = {.fd = bare, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_int_equal(recv(bare, &byte, 1, 0), 0);
    close(bare);

    munmap(base, bytes);
    close(sock);
    close(fd);
    nng_close(q);
    tsdf_client_close(c);
    free(mm);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* Whether process pid is stopped (state T in /proc) within a minute. */
static int wait_stopped(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    for (int i = 0; i < 6000; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f != NULL)
            fclose(f);
        buf[n] = '\0';
        /* "pid (comm) state ...": the state follows the last ')'. */
        const char *p = strrchr(buf, ')');
        if (p != NULL && p[1] == ' ' && p[2] == 'T')
            return 1;
        sleep_ms(10);
    }
    return 0;
}

/* libtsdf's ring slot of a frame that timed out comes back: with the
 * daemon stopped (SIGSTOP) a frame times out and its one slot is retired;
 * the daemon, continued, still reads that frame out of the ring; the next
 * frame finds no free slot, fences, and goes through the ring again. */
static void test_ring_slot_comes_back(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    frames_make(&fs, "room", IMG_W, IMG_H, 3);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    tsdf_client *c = open_client(&h, 0), *plain = open_client(&h, 0);
    assert_int_equal(tsdf_client_attach_ring(c, path, U16_BYTES, 1), TSDF_OK);
    tsdf_frame u16[3];
    uint16_t *mm[3];
    for (int i = 0; i < 3; i++)
        mm[i] = frame_to_mm(&fs.frames[i], &u16[i]);
    integrate_ok(c, "m", &u16[0], 0);

    assert_int_equal(kill(h.pid, SIGSTOP), 0);
    assert_true(wait_stopped(h.pid));
    tsdf_client_frame cf = {"m", "cam0", 0, 1, 0, &u16[1], TSDF_DEPTH_ENC_RAW, 0};
    int rc = tsdf_client_integrate(c, &cf, 300, NULL);
    assert_int_equal(kill(h.pid, SIGCONT), 0);
    assert_int_equal(rc, TSDF_ETIMEOUT);
    /* The frame the client gave up on is still read from the ring (no
     * fence yet) and integrated. */
    tsdf_rep_stats *st = settled_stats(plain, "m", 2);
    assert_int_equal(stat_get(st, "rings.frames"), 2);

    /* The only slot is retired: this frame fences, and takes it. */
    integrate_ok(c, "m", &u16[2], 2);
    wait_settled(plain, "m", 3, st);
    assert_int_equal(stat_get(st, "rings.frames"), 3);
    assert_int_equal(stat_get(st, "frames.integrated"), 3);
    free(st);
    for (int i = 0; i < 3; i++)
        free(mm[i]);
    tsdf_client_close(c);
    tsdf_client_close(plain);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_fences),
        cmocka_unit_test(test_ring_slot_comes_back),
    };
    return daemon_tests_run("daemon_ring_fence", tests, sizeof tests / sizeof tests[0]);
}
