/*
 * test_daemon_ring.c - frames through a shared-memory ring (PROTOCOL.md
 * 6.10) against a real tsdfd: the same frames through a ring and in the
 * request build identical volumes and are counted (rings.frames); what
 * must be refused is (an unsealed or a missing descriptor, an unknown
 * token, a slot outside the ring, another process's ring, a ring named
 * over the frames socket), with the volume untouched; a ring is detached
 * with its connection; and a client whose daemon lost its ring (a
 * restart) goes back to sending frames in the request by itself;
 * tsdfctl replay --ring streams through a ring; and a raycast read in
 * place (tsdf_client_raycast_view) holds the bytes the copying call
 * writes, in the ring or the reply; connections that never attach are
 * closed at [server] ring_attach_timeout_ms, so they cannot hold every
 * slot.
 */
#define _GNU_SOURCE

#include "testutil.h"

#include "daemon_ring_testlib.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_ring_integrates_identically(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    frames_make(&fs, "room", IMG_W, IMG_H, N_FRAMES);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    tsdf_client *ring = open_client(&h, 0), *plain = open_client(&h, 0);
    /* Two slots of one f32 frame each: the u16 frames fit too. */
    assert_int_equal(tsdf_client_attach_ring(ring, path, (size_t)IMG_W * IMG_H * 4u, 2), TSDF_OK);
    assert_int_equal(tsdf_client_attach_ring(ring, path, U16_BYTES, 2), TSDF_EBUSY);

    tsdf_frame u16[N_FRAMES];
    uint16_t *mm[N_FRAMES];
    for (uint32_t i = 0; i < fs.count; i++) {
        mm[i] = frame_to_mm(&fs.frames[i], &u16[i]);
        integrate_ok(ring, "ring_u16", &u16[i], i);
        integrate_ok(plain, "raw_u16", &u16[i], i);
        integrate_ok(ring, "ring_f32", &fs.frames[i], i);
        integrate_ok(plain, "raw_f32", &fs.frames[i], i);
    }
    /* A frame's outcome is counted after its ack (daemon/worker.c
     * record_frame): wait for the last one. */
    tsdf_rep_stats *st = settled_stats(plain, NULL, 4 * N_FRAMES);
    /* Every frame of the ring client went through the ring. */
    assert_int_equal(stat_get(st, "rings.frames"), 2 * N_FRAMES);
    assert_int_equal(stat_get(st, "rings.attached"), 1);
    assert_true(stat_get(st, "rings.bytes") >= 2 * IMG_W * IMG_H * 4);
    assert_int_equal(stat_get(st, "frames.integrated"), 4 * N_FRAMES);
    assert_reconciled(st);
    free(st);
    assert_same_map(plain, "raw_u16", "ring_u16");
    assert_same_map(plain, "raw_f32", "ring_f32");

    /* Closing the client detaches its ring. */
    tsdf_client_close(ring);
    int64_t attached = 1;
    for (int i = 0; i < 6000 && attached != 0; i++) {
        st = stats_of(plain, NULL);
        attached = stat_get(st, "rings.attached");
        free(st);
        if (attached != 0)
            sleep_ms(10);
    }
    assert_int_equal(attached, 0);
    for (uint32_t i = 0; i < fs.count; i++)
        free(mm[i]);
    tsdf_client_close(plain);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* The pixels of depth with a surface. */
static size_t hits(const float *depth, size_t px)
{
    size_t n = 0;
    for (size_t i = 0; i < px; i++)
        n += depth[i] == depth[i];
    return n;
}

/* The pages of this process's libtsdf rings (mappings of the memfd
 * "tsdf-frame-ring") in memory: 0 until something was written into them,
 * which for a ring that only takes raycasts is the daemon. */
static size_t ring_pages_resident(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    size_t pages = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, "tsdf-frame-ring") == NULL || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        size_t n = (hi - lo) / page;
        unsigned char *vec = malloc(n);
        assert_non_null(vec);
        assert_int_equal(mincore((void *)lo, hi - lo, vec), 0);
        for (size_t i = 0; i < n; i++)
            pages += vec[i] & 1u;
        free(vec);
    }
    fclose(f);
    return pages;
}

/* The lines of h's daemon log that hold s. */
static int log_count(const tsdfd_harness *h, const char *s)
{
    FILE *f = fopen(h->log_path, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, s) != NULL;
    fclose(f);
    return n;
}

/* What the raycast tests look at: a daemon with rings, maps "m" (no
 * colour) and "c" (colour) of the room's frames, and three clients:
 * plain (no ring), ring (six slots of a depth image: depth and normals
 * take four) and small (two such slots: too few for depth and normals,
 * 16 bytes a pixel, in all). */
typedef struct {
    frame_set fs;
    tsdfd_harness h;
    tsdf_client *plain, *ring, *small;
    uint8_t *colour;
} raycast_setup;

static void raycast_setup_start(raycast_setup *t)
{
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    const size_t px = (size_t)IMG_W * IMG_H;
    frames_make(&t->fs, "room", IMG_W, IMG_H, N_FRAMES);
    assert_int_equal(start_daemon(&t->h, ring_ini, NULL), 0);
    ring_path(&t->h, path, sizeof path);
    t->plain = open_client(&t->h, 0);
    t->ring = open_client(&t->h, 0);
    t->small = open_client(&t->h, 0);
    t->colour = malloc(px * 3u);
    assert_non_null(t->colour);
    for (size_t i = 0; i < px * 3u; i++)
        t->colour[i] = (uint8_t)(i * 7u);
    for (uint32_t i = 0; i < t->fs.count; i++) {
        integrate_ok(t->plain, "m", &t->fs.frames[i], i);
        tsdf_frame f = t->fs.frames[i];
        f.rgb = t->colour;
        f.rgb_size_bytes = px * 3u;
        integrate_ok(t->plain, "c", &f, i);
    }
    assert_int_equal(tsdf_client_attach_ring(t->ring, path, px * 4u, 6), TSDF_OK);
    assert_int_equal(tsdf_client_attach_ring(t->small, path, px * 4u, 2), TSDF_OK);
}

static void raycast_setup_stop(raycast_setup *t)
{
    free(t->colour);
    tsdf_client_close(t->small);
    tsdf_client_close(t->ring);
    tsdf_client_close(t->plain);
    assert_int_equal(tsdfd_harness_stop(&t->h, 30000), 0);
    frames_free(&t->fs);
}

/* libtsdf's raycasts through a ring: the same image as in the reply, with
 * and without normals, at full and half size, with colour from a map that
 * has it and zeros from one that has none, and in the reply when the
 * image is larger than the whole ring; the rings' pages, untouched by
 * this process, are written by the daemon. */
static void test_ring_raycast_identical(void **state)
{
    (void)state;
    raycast_setup t;
    const size_t px = (size_t)IMG_W * IMG_H;
    raycast_setup_start(&t);
    tsdf_client *plain = t.plain, *ring = t.ring, *small = t.small;

    float *buf = malloc(3 * px * 16u);
    uint8_t *rgb = malloc(3 * px * 3u);
    assert_true(buf != NULL && rgb != NULL);
    float *d[3] = {buf, buf + 4 * px, buf + 8 * px},
          *nr[3] = {buf + px, buf + 5 * px, buf + 9 * px};
    uint8_t *c[3] = {rgb, rgb + px * 3u, rgb + px * 6u};
    tsdf_client *who[3] = {plain, ring, small};
    tsdf_raycast_params rp;
    camera_of(&t.fs.frames[N_FRAMES / 2], &rp);
    /* Untouched by this process. On CUDA the daemon allocated both rings
     * whole when they attached (to page-lock them for the device's
     * copies); on the CPU backend nothing has written them yet. */
    if (test_backend() == TSDF_BACKEND_CUDA)
        assert_true(ring_pages_resident() * (size_t)sysconf(_SC_PAGESIZE) >= 8 * px * 4u);
    else
        assert_int_equal(ring_pages_resident(), 0);
    /* k: bit 0 normals, bit 1 half size; from 3 on colour asked for, of
     * the map without it (3) and of the one with it (4..7). */
    for (int k = 0; k < 8; k++) {
        const tsdf_client_raycast_options o = {
            .want_normals = k & 1, .want_rgb = k >= 3, .scale = k & 2 ? 2u : 1u};
        const char *map = k >= 4 ? "c" : "m";
        tsdf_client_raycast_info info[3];
        memset(rgb, 0x5a, 3 * px * 3u);
        for (int w = 0; w < 3; w++)
            raycast_ok(who[w], map, &rp, &o, d[w], nr[w], o.want_rgb ? c[w] : NULL, &info[w]);
        const size_t n = (size_t)info[0].width * info[0].height;
        assert_true(hits(d[0], n) > n / 4);
        assert_int_equal(info[0].has_rgb, k >= 4);
        for (int w = 1; w < 3; w++) {
            assert_int_equal(info[w].width, info[0].width);
            assert_int_equal(info[w].height, info[0].height);
            assert_int_equal(info[w].version, info[0].version);
            assert_int_equal(info[w].has_rgb, info[0].has_rgb);
            assert_memory_equal(d[w], d[0], n * 4u);
            if (o.want_normals)
                assert_memory_equal(nr[w], nr[0], n * 12u);
            if (o.want_rgb)
                assert_memory_equal(c[w], c[0], n * 3u);
        }
    }
    /* At least one image of each ring client: its depth's pages. */
    assert_true(ring_pages_resident() * (size_t)sysconf(_SC_PAGESIZE) >= 2 * px * 4u);
    /* On CUDA both rings were mapped for the device, which copied their
     * images there; on the CPU neither (pwrite). */
    assert_int_equal(log_count(&t.h, "images written by the GPU"),
                     test_backend() == TSDF_BACKEND_CUDA ? 2 : 0);
    free(rgb);
    free(buf);
    raycast_setup_stop(&t);
}

/* Whether p lies in one of this process's ring mappings. */
static int in_ring_mapping(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int in = 0;
    while (!in && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, "tsdf-frame-ring") != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    }
    fclose(f);
    return in;
}

/* A view's floats: where they are aligned for them, and equal to what
 * the copying call wrote. */
static void assert_view_equal(const tsdf_client_view *v, const tsdf_client_raycast_info *want,
                              const float *depth, const float *normals, const uint8_t *rgb,
                              int want_normals)
{
    const size_t n = (size_t)want->width * want->height;
    assert_int_equal(v->info.width, want->width);
    assert_int_equal(v->info.height, want->height);
    assert_int_equal(v->info.version, want->version);
    assert_int_equal(v->info.has_rgb, want->has_rgb);
    assert_non_null(v->depth_m);
    assert_int_equal((uintptr_t)v->depth_m % _Alignof(float), 0);
    assert_memory_equal(v->depth_m, depth, n * 4u);
    if (want_normals) {
        assert_non_null(v->normals);
        assert_int_equal((uintptr_t)v->normals % _Alignof(float), 0);
        assert_memory_equal(v->normals, normals, n * 12u);
    } else {
        assert_null(v->normals);
    }
    if (want->has_rgb) {
        assert_non_null(v->rgb);
        assert_memory_equal(v->rgb, rgb, n * 3u);
    } else {
        assert_null(v->rgb);
    }
}

/* tsdf_client_raycast_view gives the bytes tsdf_client_raycast_ex copies,
 * in place: through the socket (aligned or copied), in the ring, and
 * through the socket for a ring without room; a view holds its slots
 * until released, so a second one held with it comes through the socket,
 * and the one after the release through the ring again. A failed view is
 * zeroed and holds nothing. */
static void test_ring_raycast_view(void **state)
{
    (void)state;
    raycast_setup t;
    const size_t px = (size_t)IMG_W * IMG_H;
    raycast_setup_start(&t);
    tsdf_client *plain = t.plain, *ring = t.ring, *small = t.small;
    float *depth = malloc(px * 4u), *normals = malloc(px * 12u);
    uint8_t *rgb = malloc(px * 3u);
    assert_true(depth != NULL && normals != NULL && rgb != NULL);
    tsdf_raycast_params rp;
    camera_of(&t.fs.frames[N_FRAMES / 2], &rp);
    tsdf_client *who[3] = {plain, ring, small};
    /* k: bit 0 normals, bit 1 half size, bit 2 colour of the map with it. */
    for (int k = 0; k < 8; k++) {
        const tsdf_client_raycast_options o = {
            .want_normals = k & 1, .want_rgb = (k & 4) != 0, .scale = k & 2 ? 2u : 1u};
        const char *map = k & 4 ? "c" : "m";
        tsdf_client_raycast_info want;
        raycast_ok(plain, map, &rp, &o, depth, normals, o.want_rgb ? rgb : NULL, &want);
        assert_true(hits(depth, (size_t)want.width * want.height) > 0);
        for (int w = 0; w < 3; w++) {
            tsdf_client_view v;
            int rc = tsdf_client_raycast_view(who[w], map, &rp, &o, &v, 30000);
            if (rc != TSDF_OK)
                fail_msg("view %d of %s: %s (%s)", w, map, tsdf_strerror(rc),
                         tsdf_client_last_message());
            assert_view_equal(&v, &want, depth, normals, rgb, o.want_normals);
            /* In the ring where the image fits in its free slots. */
            const size_t n = (size_t)want.width * want.height,
                         bytes = n * (4u + (o.want_normals ? 12u : 0u) + (o.want_rgb ? 3u : 0u));
            const int fits = w == 1 || (w == 2 && bytes <= 2 * px * 4u);
            assert_int_equal(in_ring_mapping(v.depth_m), fits);
            tsdf_client_view_release(&v);
            assert_null(v.hold);
            assert_null(v.depth_m);
        }
    }
    /* Two views held at once from the ring client: the first in the ring,
     * the second through the socket; released, the next in the ring. */
    const tsdf_client_raycast_options wn = {.want_normals = 1};
    tsdf_client_raycast_info want;
    raycast_ok(plain, "m", &rp, &wn, depth, normals, NULL, &want);
    tsdf_client_view a, b, c;
    assert_int_equal(tsdf_client_raycast_view(ring, "m", &rp, &wn, &a, 30000), TSDF_OK);
    assert_int_equal(tsdf_client_raycast_view(ring, "m", &rp, &wn, &b, 30000), TSDF_OK);
    assert_view_equal(&a, &want, depth, normals, NULL, 1);
    assert_view_equal(&b, &want, depth, normals, NULL, 1);
    assert_true(in_ring_mapping(a.depth_m));
    assert_false(in_ring_mapping(b.depth_m));
    tsdf_client_view_release(&a);
    tsdf_client_view_release(&b);
    assert_int_equal(tsdf_client_raycast_view(ring, "m", &rp, &wn, &c, 30000), TSDF_OK);
    assert_view_equal(&c, &want, depth, normals, NULL, 1);
    assert_true(in_ring_mapping(c.depth_m));
    tsdf_client_view_release(&c);

    /* A failure leaves a zeroed view; releasing it (or NULL) does nothing. */
    tsdf_client_view z;
    memset(&z, 0x5a, sizeof z);
    assert_int_equal(tsdf_client_raycast_view(ring, "no-such-map", &rp, &wn, &z, 30000),
                     TSDF_ENOT_FOUND);
    assert_null(z.hold);
    assert_null(z.depth_m);
    tsdf_client_view_release(&z);
    tsdf_client_view_release(NULL);
    memset(&z, 0x5a, sizeof z);
    assert_int_equal(tsdf_client_raycast_view(NULL, "m", &rp, &wn, &z, 30000), TSDF_EINVAL);
    assert_null(z.hold);
    assert_null(z.depth_m);
    assert_int_equal(tsdf_client_raycast_view(ring, "m", &rp, &wn, NULL, 30000), TSDF_EINVAL);

    free(rgb);
    free(normals);
    free(depth);
    raycast_setup_stop(&t);
}

static void test_ring_refusals(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16], msg[TSDF_PROTO_MAX_MESSAGE_LEN + 1];
    frames_make(&fs, "room", IMG_W, IMG_H, 1);
    tsdf_frame u16;
    uint16_t *mm = frame_to_mm(&fs.frames[0], &u16);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    tsdf_client *c = open_client(&h, 0);
    nng_socket s = raw_req(&h);
    int sock = -1;
    tsdf_ring_attach_reply rep;

    /* A memfd that could shrink under the daemon's mapping: refused. */
    int fd = make_memfd(U16_BYTES, 0);
    handshake(path, fd, U16_BYTES, &sock, &rep);
    assert_int_equal(rep.status, TSDF_EINVAL);
    assert_non_null(strstr(rep.reason, "F_SEAL_SHRINK"));
    close(sock);
    close(fd);
    /* Not shared memory at all (closed on a thread of its own: the close
     * of a file elsewhere may wait on its filesystem): refused. */
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    handshake(path, fd, U16_BYTES, &sock, &rep);
    assert_int_equal(rep.status, TSDF_EINVAL);
    assert_non_null(strstr(rep.reason, "memfd"));
    close(sock);
    close(fd);
    /* Larger than the file: refused. */
    fd = make_memfd(U16_BYTES, 1);
    handshake(path, fd, 2 * U16_BYTES, &sock, &rep);
    assert_int_equal(rep.status, TSDF_EINVAL);
    close(sock);

    /* A good ring, with the frame's samples in it at offset 0. */
    handshake(path, fd, U16_BYTES, &sock, &rep);
    assert_int_equal(rep.status, TSDF_OK);
    assert_true(rep.token != 0);
    uint8_t *base = mmap(NULL, U16_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(base != MAP_FAILED);
    memcpy(base, mm, U16_BYTES);

    /* Unknown token, a slot past the end, overflowing offsets: refused,
     * and nothing reaches the map. */
    assert_int_equal(
        ring_request(s, "r", &u16, rep.token ^ 1u, 0, TSDF_MSG_INTEGRATE, msg, sizeof msg),
        TSDF_ENOT_FOUND);
    assert_int_equal(strncmp(msg, "ring_token", 10), 0);
    assert_int_equal(ring_request(s, "r", &u16, rep.token, 2, TSDF_MSG_INTEGRATE, msg, sizeof msg),
                     TSDF_EBAD_SIZE);
    assert_int_equal(
        ring_request(s, "r", &u16, rep.token, UINT64_MAX - 8, TSDF_MSG_INTEGRATE, msg, sizeof msg),
        TSDF_EBAD_SIZE);
    /* Frames pushed without a reply may not name a ring. */
    assert_int_equal(ring_request(s, "r", &u16, rep.token, 0, TSDF_MSG_FRAME, msg, sizeof msg),
                     TSDF_EPROTO_KEY);

    /* Another process may not use this process's ring: this program again
     * (a fresh process, as nng does not survive a fork), see main. */
    char token[24];
    snprintf(token, sizeof token, "%" PRIu64, rep.token);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/proc/self/exe", "test_daemon_ring", "--other-process", h.req_url, token,
              (char *)NULL);
        _exit(127);
    }
    int wst = 0;
    assert_int_equal(waitpid(child, &wst, 0), child);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("another process's request with this ring: exit status %d",
                 WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);

    tsdf_rep_stats *st = stats_of(c, NULL);
    assert_int_equal(stat_get(st, "rings.refused"), 3);
    assert_int_equal(stat_get(st, "rings.frames"), 0);
    assert_int_equal(stat_get(st, "frames.integrated"), 0);
    free(st);

    /* The right process, token and slot: integrated. */
    int ok = ring_request(s, "r", &u16, rep.token, 0, TSDF_MSG_INTEGRATE, msg, sizeof msg);
    if (ok != TSDF_OK)
        fail_msg("ring frame: %s (%s)", tsdf_strerror(ok), msg);
    st = settled_stats(c, NULL, 0);
    assert_int_equal(stat_get(st, "rings.frames"), 1);
    assert_int_equal(stat_get(st, "frames.integrated"), 1);
    free(st);

    /* Its connection closed, the ring is gone. */
    close(sock);
    int status = TSDF_OK;
    for (int i = 0; i < 6000 && status != TSDF_ENOT_FOUND; i++) {
        status = ring_request(s, "r", &u16, rep.token, 0, TSDF_MSG_INTEGRATE, msg, sizeof msg);
        if (status != TSDF_ENOT_FOUND)
            sleep_ms(10);
    }
    assert_int_equal(status, TSDF_ENOT_FOUND);

    munmap(base, U16_BYTES);
    close(fd);
    nng_close(s);
    tsdf_client_close(c);
    free(mm);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* The protocol of a raycast into a ring (PROTOCOL.md 6.10): the reply
 * names the slot and carries no array, the image is there as the reply
 * would have carried it; outside the ring, or with a token that is not
 * the sender's ring, refused before anything is written. */
static void test_ring_raycast_protocol(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    const size_t px = (size_t)IMG_W * IMG_H, bytes = 64 + px * 16u;
    frames_make(&fs, "room", IMG_W, IMG_H, N_FRAMES);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    tsdf_client *c = open_client(&h, 0);
    for (uint32_t i = 0; i < fs.count; i++)
        integrate_ok(c, "m", &fs.frames[i], i);
    int fd = make_memfd(bytes, 1), sock = -1;
    tsdf_ring_attach_reply ar;
    handshake(path, fd, bytes, &sock, &ar);
    assert_int_equal(ar.status, TSDF_OK);
    uint8_t *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(base != MAP_FAILED);
    memset(base, 0xab, bytes);
    nng_socket q = raw_req(&h);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);

    float *want = malloc(px * 16u);
    assert_non_null(want);
    tsdf_raycast_params rp;
    camera_of(&fs.frames[1], &rp);
    const tsdf_client_raycast_options o = {.want_normals = 1};
    tsdf_client_raycast_info info;
    raycast_ok(c, "m", &rp, &o, want, want + px, NULL, &info);

    /* Depth and normals at offset 64. */
    ring_raycast(q, &rp, 1, ar.token, 64, rep);
    assert_int_equal(rep->status, TSDF_OK);
    assert_true(rep->u.raycast.in_ring);
    assert_int_equal(rep->u.raycast.ring_offset, 64);
    assert_true(rep->u.raycast.ring_normals);
    assert_false(rep->u.raycast.ring_rgb);
    assert_null(rep->u.raycast.depth_m);
    assert_int_equal(rep->u.raycast.version, info.version);
    assert_memory_equal(base + 64, want, px * 16u);
    for (int i = 0; i < 64; i++)
        assert_int_equal(base[i], 0xab);

    /* Refused before the raycast: nothing written. */
    memset(base, 0xab, bytes);
    ring_raycast(q, &rp, 1, ar.token, 65, rep); /* one byte past the end */
    assert_int_equal(rep->status, TSDF_EBAD_SIZE);
    assert_int_equal(strncmp(rep->message, "ring_offset", 11), 0);
    ring_raycast(q, &rp, 1, ar.token, UINT64_MAX - 8, rep);
    assert_int_equal(rep->status, TSDF_EBAD_SIZE);
    ring_raycast(q, &rp, 1, ar.token ^ 1u, 0, rep);
    assert_int_equal(rep->status, TSDF_ENOT_FOUND);
    assert_int_equal(strncmp(rep->message, "ring_token", 10), 0);
    for (size_t i = 0; i < bytes; i++)
        if (base[i] != 0xab)
            fail_msg("byte %zu of the ring written by a refused raycast", i);
    /* Depth alone fits at 65. */
    ring_raycast(q, &rp, 0, ar.token, 65, rep);
    assert_int_equal(rep->status, TSDF_OK);
    assert_false(rep->u.raycast.ring_normals);
    assert_memory_equal(base + 65, want, px * 4u);

    /* A ring sealed against writing takes frames but no image. */
    int ro = make_memfd(bytes, 1), ro_sock = -1;
    assert_int_equal(fcntl(ro, F_ADD_SEALS, F_SEAL_WRITE), 0);
    handshake(path, ro, bytes, &ro_sock, &ar);
    assert_int_equal(ar.status, TSDF_OK);
    ring_raycast(q, &rp, 0, ar.token, 0, rep);
    assert_int_equal(rep->status, TSDF_EINVAL);
    assert_int_equal(strncmp(rep->message, "ring_token", 10), 0);
    assert_non_null(strstr(rep->message, "writing"));
    close(ro_sock);
    close(ro);

    free(want);
    free(rep);
    nng_close(q);
    munmap(base, bytes);
    close(sock);
    close(fd);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* A daemon without a ring socket refuses a ring's frame, and libtsdf's
 * frames go in the request again after its daemon restarted. */
static void test_ring_lost_falls_back(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness a, b;
    char path[TSDFD_HARNESS_PATH_LEN + 16], ini[4 * TSDFD_HARNESS_PATH_LEN];
    frames_make(&fs, "room", IMG_W, IMG_H, 2);
    tsdf_frame u16[2];
    uint16_t *mm0 = frame_to_mm(&fs.frames[0], &u16[0]), *mm1 = frame_to_mm(&fs.frames[1], &u16[1]);
    assert_int_equal(start_daemon(&a, ring_ini, NULL), 0);
    ring_path(&a, path, sizeof path);
    tsdf_client *c = open_client(&a, 0);
    assert_int_equal(tsdf_client_attach_ring(c, path, U16_BYTES, 1), TSDF_OK);
    /* A client whose ring only ever takes raycasts. */
    tsdf_client *viewer = open_client(&a, 0);
    assert_int_equal(tsdf_client_attach_ring(viewer, path, U16_BYTES, 1), TSDF_OK);
    integrate_ok(c, "m", &u16[0], 0);
    assert_int_equal(tsdfd_harness_stop(&a, 30000), 0);

    /* The next daemon on the same request socket, without rings. */
    snprintf(ini, sizeof ini, "[server]\nlisten = ipc://@DIR@/req.sock, %s\nring_socket =\n",
             a.req_url);
    assert_int_equal(start_daemon(&b, ini, NULL), 0);
    integrate_ok(c, "m", &u16[1], 1);
    tsdf_rep_stats *st = stats_of(c, "m");
    assert_int_equal(stat_get(st, "frames.integrated"), 1);
    assert_int_equal(stat_get(st, "rings.frames"), 0);
    /* The refused attempt is counted as a rejected frame, then the frame
     * itself arrives in its request. */
    assert_int_equal(stat_get(st, "frames.received"), 2);
    assert_int_equal(stat_get(st, "frames.rejected"), 1);
    assert_reconciled(st);
    free(st);

    /* A raycast whose image the lost ring was to take comes in its reply
     * (80 x 60 depth fits the one slot). */
    float depth[IMG_W * IMG_H];
    tsdf_raycast_params rp;
    camera_of(&fs.frames[1], &rp);
    const tsdf_client_raycast_options half = {.scale = 2};
    tsdf_raycast_output out = {depth, NULL, NULL};
    tsdf_client_raycast_info info;
    assert_int_equal(tsdf_client_raycast_ex(viewer, "m", &rp, &half, &out, &info, 30000), TSDF_OK);
    assert_int_equal(info.width, IMG_W / 2);
    assert_true(hits(depth, (size_t)info.width * info.height) > 0);
    /* What the refusal it fell back on says. */
    nng_socket q = raw_req(&b);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    ring_raycast(q, &rp, 0, 1, 0, rep);
    assert_int_equal(rep->status, TSDF_ENOT_FOUND);
    assert_non_null(strstr(rep->message, "no ring socket"));
    free(rep);
    nng_close(q);

    tsdf_client_close(viewer);
    tsdf_client_close(c);
    free(mm0);
    free(mm1);
    assert_int_equal(tsdfd_harness_stop(&b, 30000), 0);
    frames_free(&fs);
}

/* The other process of test_ring_refusals: sends one frame naming the
 * ring token on url; exits 0 when the daemon refuses it as another
 * process's ring, else 1 with what it said. */
static int other_process(const char *url, const char *token_text)
{
    frame_set fs;
    frames_make(&fs, "room", IMG_W, IMG_H, 1);
    tsdf_frame u16;
    uint16_t *mm = frame_to_mm(&fs.frames[0], &u16);
    tsdfd_harness h;
    memset(&h, 0, sizeof h);
    snprintf(h.req_url, sizeof h.req_url, "%s", url);
    nng_socket s = raw_req(&h);
    char msg[TSDF_PROTO_MAX_MESSAGE_LEN + 1];
    uint64_t token = strtoull(token_text, NULL, 10);
    int st = ring_request(s, "r", &u16, token, 0, TSDF_MSG_INTEGRATE, msg, sizeof msg);
    nng_close(s);
    free(mm);
    frames_free(&fs);
    if (st == TSDF_EFORBIDDEN && strncmp(msg, "ring_token", 10) == 0)
        return 0;
    fprintf(stderr, "other process: %s (%s)\n", tsdf_strerror(st), msg);
    return 1;
}

/* The ping reply of h's daemon, raw (libtsdf's tsdf_rep_ping has no room
 * for the ring socket: its size is part of the ABI). */
static void raw_ping(const tsdfd_harness *h, tsdf_reply *rep)
{
    tsdf_request q;
    tsdf_request_init(&q, TSDF_MSG_PING);
    q.id = 9;
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_request(&q, &b), TSDF_OK);
    nng_socket s = raw_req(h);
    raw_roundtrip(s, b.data, b.len, rep);
    nng_close(s);
    tsdf_buf_fini(&b);
    assert_int_equal(rep->status, TSDF_OK);
}

/* A daemon with a ring socket (given, or by default beside its ipc://
 * request socket) names it in its ping reply, and a client attaches there
 * without being told the path; one without says so. */
static void test_ring_advertised(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    frames_make(&fs, "room", IMG_W, IMG_H, 2);
    assert_int_equal(start_daemon(&h, ring_ini, NULL), 0);
    ring_path(&h, path, sizeof path);
    raw_ping(&h, rep);
    assert_string_equal(rep->ring_socket, path);
    tsdf_client *c = open_client(&h, 0);
    assert_int_equal(tsdf_client_attach_ring(c, NULL, (size_t)IMG_W * IMG_H * 4u, 2), TSDF_OK);
    integrate_ok(c, "advertised", &fs.frames[0], 0);
    integrate_ok(c, "advertised", &fs.frames[1], 1);
    tsdf_rep_stats *st = settled_stats(c, NULL, 2);
    assert_int_equal(stat_get(st, "rings.frames"), 2);
    assert_int_equal(stat_get(st, "rings.attached"), 1);
    free(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);

    /* ring_socket = auto, the default: rings.sock beside the request
     * socket. */
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    raw_ping(&h, rep);
    ring_path(&h, path, sizeof path);
    assert_string_equal(rep->ring_socket, path);
    c = open_client(&h, 0);
    assert_int_equal(tsdf_client_attach_ring(c, NULL, U16_BYTES, 2), TSDF_OK);
    tsdf_client_close(c);
    /* A client not over ipc:// cannot share the host's paths: refused
     * before anything is sent (lazily connected, to nothing). */
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.lazy_connect = 1;
    assert_int_equal(tsdf_client_open("tcp://127.0.0.1:9", NULL, &o, &c), TSDF_OK);
    assert_int_equal(tsdf_client_attach_ring(c, NULL, U16_BYTES, 2), TSDF_EINVAL);
    assert_non_null(strstr(tsdf_client_last_message(), "ipc://"));
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);

    /* No ring socket: the key is absent, and attaching by it fails with
     * a reason, without a ring. */
    assert_int_equal(start_daemon(&h, "[server]\nring_socket =\n", NULL), 0);
    raw_ping(&h, rep);
    assert_string_equal(rep->ring_socket, "");
    c = open_client(&h, 0);
    assert_int_equal(tsdf_client_attach_ring(c, NULL, U16_BYTES, 2), TSDF_ENOT_FOUND);
    assert_non_null(strstr(tsdf_client_last_message(), "ring_socket"));
    integrate_ok(c, "plain", &fs.frames[0], 0);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    free(rep);
    frames_free(&fs);
}

#ifdef TSDFCTL_BIN
/* tsdfctl replay --ack of 5 sphere frames into map, with `ring` as its
 * --ring (NULL: none given); returns its exit status. */
static int replay(const tsdfd_harness *h, const char *map, const char *ring)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl(TSDFCTL_BIN, "tsdfctl", "--url", h->req_url, "--timeout-ms", "60000", "replay",
              "--synthetic", "sphere", "--ack", "--size", "80", "60", "--max-frames", "5", "--map",
              map, ring != NULL ? "--ring" : (char *)NULL, ring, (char *)NULL);
        _exit(127);
    }
    int wst = 0;
    assert_int_equal(waitpid(child, &wst, 0), child);
    assert_true(WIFEXITED(wst));
    return WEXITSTATUS(wst);
}

/* The frames of map integrated, and how many of the daemon's came
 * through a ring. */
static void replayed(const tsdfd_harness *h, const char *map, int64_t *integrated,
                     int64_t *through_rings)
{
    tsdf_client *c = open_client(h, 0);
    tsdf_rep_stats *st = stats_of(c, map);
    *integrated = stat_get(st, "map.frames_integrated");
    *through_rings = stat_get(st, "rings.frames");
    free(st);
    tsdf_client_close(c);
}
#endif

/* tsdfctl replay --ack: through the ring the daemon names (by default, or
 * --ring auto), through the requests with --ring off or from a daemon
 * that names none. */
static void test_tsdfctl_replay_ring(void **state)
{
    (void)state;
#ifndef TSDFCTL_BIN
    skip();
#else
    tsdfd_harness h;
    int64_t n = 0, rings = 0;
    assert_int_equal(start_daemon(&h, NULL, NULL), 0); /* ring_socket = auto */
    assert_int_equal(replay(&h, "auto", "auto"), 0);
    replayed(&h, "auto", &n, &rings);
    assert_int_equal(n, 5);
    assert_int_equal(rings, 5);
    assert_int_equal(replay(&h, "default", NULL), 0);
    replayed(&h, "default", &n, &rings);
    assert_int_equal(n, 5);
    assert_int_equal(rings, 10);
    assert_int_equal(replay(&h, "off", "off"), 0);
    replayed(&h, "off", &n, &rings);
    assert_int_equal(n, 5);
    assert_int_equal(rings, 10);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);

    /* A daemon without rings: the default goes through the requests; a
     * ring asked for by name fails. */
    assert_int_equal(start_daemon(&h, "[server]\nring_socket =\n", NULL), 0);
    assert_int_equal(replay(&h, "plain", NULL), 0);
    replayed(&h, "plain", &n, &rings);
    assert_int_equal(n, 5);
    assert_int_equal(rings, 0);
    assert_int_not_equal(replay(&h, "asked", "auto"), 0);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
#endif
}

/* A connection to the ring socket that sends nothing. */
static int idle_ring_conn(const char *path)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%.107s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Waits (60 s at most) until the daemon closes fd: a read gives 0. */
static void wait_closed_by_daemon(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, 60000);
    assert_int_equal(n, 1);
    char b;
    assert_int_equal(recv(fd, &b, 1, MSG_DONTWAIT), 0);
}

/* Every slot of the ring socket ([server] max_connections of them) held
 * by connections that attach nothing: before the attach deadline, no
 * client could attach a ring until they went. Now each is closed, and
 * counted, once the deadline passes, and a ring attaches. */
static void test_ring_attach_deadline(void **state)
{
    (void)state;
    tsdfd_harness h;
    char path[TSDFD_HARNESS_PATH_LEN + 16];
    int idle[4];
    assert_int_equal(
        start_daemon(&h, "[server]\nmax_connections = 4\nring_attach_timeout_ms = 200\n", NULL), 0);
    ring_path(&h, path, sizeof path);
    for (int i = 0; i < 4; i++)
        idle[i] = idle_ring_conn(path);
    for (int i = 0; i < 4; i++) {
        wait_closed_by_daemon(idle[i]);
        close(idle[i]);
    }
    int fd = make_memfd(U16_BYTES, 1), sock = -1;
    tsdf_ring_attach_reply rep;
    handshake(path, fd, U16_BYTES, &sock, &rep);
    assert_int_equal(rep.status, TSDF_OK);
    tsdf_client *c = open_client(&h, 0);
    tsdf_rep_stats *st = stats_of(c, "default");
    assert_true(stat_get(st, "rings.refused") >= 4);
    assert_int_equal(stat_get(st, "rings.attached"), 1);
    /* An attached ring has no deadline: its connection stays open. */
    struct pollfd p = {.fd = sock, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0);
    free(st);
    close(sock);
    close(fd);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--other-process") == 0)
        return other_process(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_integrates_identically),
        cmocka_unit_test(test_ring_refusals),
        cmocka_unit_test(test_ring_attach_deadline),
        cmocka_unit_test(test_ring_raycast_identical),
        cmocka_unit_test(test_ring_raycast_view),
        cmocka_unit_test(test_ring_raycast_protocol),
        cmocka_unit_test(test_ring_lost_falls_back),
        cmocka_unit_test(test_ring_advertised),
        cmocka_unit_test(test_tsdfctl_replay_ring),
    };
    return daemon_tests_run("daemon_ring", tests, sizeof tests / sizeof tests[0]);
}
