/*
 * bench_transport.c - the floor under an acknowledged frame's round trip:
 * nng request/reply of a frame-sized message over ipc:// or tcp://
 * loopback, answered at once with a 24-byte reply by a thread that does
 * nothing else. The daemon's acknowledged integrate does this plus its
 * own work (decode, the depth copy, the integration, the reply's
 * encoding), so its round trip cannot be shorter; issue #10 asks for one
 * client's p50 <= 0.3 ms with 640x480 16-bit frames.
 *
 *   bench_transport [--bytes N] [--reps R] [--transport ipc|tcp] [--shm]
 *
 * defaults: --bytes 614400 (640x480 u16 depth), --reps 2000, --transport
 * ipc. Each request carries its sequence number first and ends with a
 * stamp of it; the server replies with the number, the stamp and the
 * length it received (reading the whole message would add its own time),
 * and the program refuses to print a time when any reply does not match
 * (exit 1). Also printed, for scale: a memcpy of the same bytes
 * (the client copies the frame into its message once).
 *
 * --shm: the frame does not travel through the socket. Client and server
 * map one shared memory file (memfd) of RING slots, each in its own view,
 * as two processes would; the client copies the frame into the next slot
 * and sends a 24-byte request naming it (sequence number, slot, length),
 * and the server reads the number and the stamp from the slot. What the
 * daemon's frames would cost if they came through such a ring: the
 * socket's own floor, no frame bytes through nng's single I/O thread.
 *
 * --reply: the other direction, a raycast's: 24-byte requests and replies
 * of --bytes (a 640x480 image is 1,228,800 bytes of depth, 4,915,200 with
 * normals). The server writes the sequence number and a stamp into its
 * image and sends it in the reply (one copy into the message, as the
 * daemon encodes a reply), and the client copies it out of the reply into
 * its own buffer (as libtsdf does). With --shm the server writes the
 * image into the slot the request names with pwrite (as the daemon does,
 * never mapping the ring) and replies with 24 bytes, and the client copies
 * the image out of its mapping. Printed beside the round trip: the
 * client's copy out.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "bench_clock.h"

/* Slots of the --shm ring: the client fills the next one while the
 * server may still read the last (a pipelining client would). */
#define RING 4

typedef struct {
    nng_socket rep;
    uint32_t reps;
    const uint8_t *ring; /* --shm: the server's view of the ring, else NULL */
    size_t slot_bytes;
    int rc;
    uint8_t *image; /* --reply: the image the server sends back, else NULL */
    int ring_fd;    /* --reply --shm: the ring, written with pwrite */
} server_arg;

/* --reply: the server's image for the request in m ({seq, slot, length}),
 * stamped with its sequence number and a stamp of it, into m (replacing
 * the request) or, with a ring, into the slot with a 24-byte reply. */
static int reply_image(server_arg *s, nng_msg *m)
{
    uint64_t h[3];
    if (nng_msg_len(m) != sizeof h)
        return NNG_EINVAL;
    memcpy(h, nng_msg_body(m), sizeof h);
    if (h[1] >= RING || h[2] != s->slot_bytes)
        return NNG_EINVAL;
    const uint64_t stamp = ~h[0] * 0x9e3779b97f4a7c15ull;
    memcpy(s->image, &h[0], 8);
    memcpy(s->image + s->slot_bytes - 8, &stamp, 8);
    nng_msg_clear(m);
    if (s->ring_fd < 0)
        return nng_msg_append(m, s->image, s->slot_bytes);
    for (size_t done = 0; done < s->slot_bytes;) {
        ssize_t k = pwrite(s->ring_fd, s->image + done, s->slot_bytes - done,
                           (off_t)(h[1] * s->slot_bytes + done));
        if (k <= 0)
            return NNG_EINTERNAL;
        done += (size_t)k;
    }
    return nng_msg_append(m, h, sizeof h);
}

/* Where a request's frame is: the message itself, or with --shm the slot
 * it names ({seq, slot, length}, 24 bytes); NULL when it names none. */
static const uint8_t *request_frame(const server_arg *s, nng_msg *m, size_t *len)
{
    *len = nng_msg_len(m);
    if (s->ring == NULL)
        return nng_msg_body(m);
    uint64_t h[3];
    if (*len != sizeof h)
        return NULL;
    memcpy(h, nng_msg_body(m), sizeof h);
    if (h[1] >= RING || h[2] != s->slot_bytes)
        return NULL;
    *len = (size_t)h[2];
    return s->ring + h[1] * s->slot_bytes;
}

/* Answers every request with its frame's sequence number, last 8 bytes
 * and length. */
static void *serve(void *arg)
{
    server_arg *s = arg;
    for (uint32_t i = 0; i < s->reps; i++) {
        nng_msg *m;
        int rv = nng_recvmsg(s->rep, &m, 0);
        if (rv != 0) {
            fprintf(stderr, "bench_transport: server recv: %s\n", nng_strerror(rv));
            s->rc = 1;
            return NULL;
        }
        if (s->image != NULL) {
            if ((rv = reply_image(s, m)) != 0 || (rv = nng_sendmsg(s->rep, m, 0)) != 0) {
                fprintf(stderr, "bench_transport: server reply: %s\n", nng_strerror(rv));
                nng_msg_free(m);
                s->rc = 1;
                return NULL;
            }
            continue;
        }
        uint64_t out[3] = {UINT64_MAX, 0, 0};
        size_t len;
        const uint8_t *frame = request_frame(s, m, &len);
        if (frame != NULL && len >= 16) {
            memcpy(&out[0], frame, 8);
            memcpy(&out[1], frame + len - 8, 8);
            out[2] = len;
        }
        nng_msg_clear(m);
        if ((rv = nng_msg_append(m, out, sizeof out)) != 0 ||
            (rv = nng_sendmsg(s->rep, m, 0)) != 0) {
            fprintf(stderr, "bench_transport: server send: %s\n", nng_strerror(rv));
            nng_msg_free(m);
            s->rc = 1;
            return NULL;
        }
    }
    return NULL;
}

/* One row of percentiles of v[skip .. skip + n), sorted. */
static void print_row(const char *name, const double *v, uint32_t skip, uint32_t n)
{
    printf("  %-34s %9.4f %9.4f %9.4f %9.4f\n", name, v[skip + n / 2], v[skip + n * 9 / 10],
           v[skip + n * 99 / 100], v[skip + n - 1]);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_transport [--bytes N] [--reps R] [--transport ipc|tcp] [--shm] "
                    "[--reply]\n");
}

int main(int argc, char **argv)
{
    size_t bytes = 614400;
    uint32_t reps = 2000;
    const char *transport = "ipc";
    int shm = 0, reply = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(argv[i], "--shm") == 0) {
            shm = 1;
            continue;
        }
        if (strcmp(argv[i], "--reply") == 0) {
            reply = 1;
            continue;
        }
        if (strcmp(argv[i], "--bytes") == 0 && v) {
            unsigned long long n = strtoull(v, &end, 10);
            if (*end || n < 16 || n > (1ull << 28)) {
                usage();
                return 2;
            }
            bytes = (size_t)n;
        } else if (strcmp(argv[i], "--reps") == 0 && v) {
            unsigned long n = strtoul(v, &end, 10);
            if (*end || n < 10 || n > 1000000) {
                usage();
                return 2;
            }
            reps = (uint32_t)n;
        } else if (strcmp(argv[i], "--transport") == 0 && v &&
                   (strcmp(v, "ipc") == 0 || strcmp(v, "tcp") == 0)) {
            transport = v;
        } else {
            usage();
            return 2;
        }
        i++;
    }

    char url[128];
    if (strcmp(transport, "ipc") == 0)
        snprintf(url, sizeof url, "ipc:///tmp/bench-transport-%ld.sock", (long)getpid());
    else
        snprintf(url, sizeof url, "tcp://127.0.0.1:0"); /* a free port, read back below */

    nng_socket rep, req;
    nng_listener l;
    int rv;
    /* No receive limit (nng's default is 1 MiB), set before the pipes exist. */
    if ((rv = nng_rep0_open(&rep)) != 0 || (rv = nng_req0_open(&req)) != 0 ||
        (rv = nng_socket_set_size(rep, NNG_OPT_RECVMAXSZ, 0)) != 0 ||
        (rv = nng_socket_set_size(req, NNG_OPT_RECVMAXSZ, 0)) != 0 ||
        /* A server thread that failed never answers: fail, do not hang. */
        (rv = nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, 10000)) != 0 ||
        (rv = nng_listen(rep, url, &l, 0)) != 0) {
        fprintf(stderr, "bench_transport: %s: %s\n", url, nng_strerror(rv));
        return 1;
    }
    if (strcmp(transport, "tcp") == 0) {
        int port = 0;
        if ((rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0) {
            fprintf(stderr, "bench_transport: bound port: %s\n", nng_strerror(rv));
            return 1;
        }
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    }
    if ((rv = nng_dial(req, url, NULL, 0)) != 0) {
        fprintf(stderr, "bench_transport: %s: %s\n", url, nng_strerror(rv));
        return 1;
    }
    /* --shm: one memfd, mapped once for each side. */
    uint8_t *ring_client = NULL, *ring_server = NULL;
    int ring_fd = -1;
    if (shm) {
        int fd = memfd_create("bench-transport-ring", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)(RING * bytes)) != 0) {
            fprintf(stderr, "bench_transport: shared ring: %s\n", strerror(errno));
            return 1;
        }
        ring_client = mmap(NULL, RING * bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ring_server = mmap(NULL, RING * bytes, PROT_READ, MAP_SHARED, fd, 0);
        /* --reply: the server writes into the ring through the file. */
        if (reply)
            ring_fd = fd;
        else
            close(fd);
        if (ring_client == MAP_FAILED || ring_server == MAP_FAILED) {
            fprintf(stderr, "bench_transport: mapping the ring: %s\n", strerror(errno));
            return 1;
        }
    }
    /* The frame the client sends, or with --reply the image the server
     * sends: pseudo-random bytes; and the client's copy of the image. */
    uint8_t *frame = malloc(bytes), *got = reply ? malloc(bytes) : NULL;
    double *rt = calloc(reps, sizeof *rt), *cp = calloc(reps, sizeof *cp);
    if (frame == NULL || rt == NULL || cp == NULL || (reply && got == NULL)) {
        fprintf(stderr, "bench_transport: out of memory\n");
        return 1;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < bytes; i++) {
        x = x * 1664525u + 1013904223u;
        frame[i] = (uint8_t)(x >> 24);
    }

    server_arg sa = {rep, reps, ring_server, bytes, 0, reply ? frame : NULL, ring_fd};
    pthread_t th;
    if (pthread_create(&th, NULL, serve, &sa) != 0) {
        fprintf(stderr, "bench_transport: cannot start the server thread\n");
        return 1;
    }
    uint32_t bad = 0;
    for (uint32_t i = 0; reply && i < reps; i++) {
        const uint64_t seq = i, stamp = ~seq * 0x9e3779b97f4a7c15ull, h[3] = {seq, i % RING, bytes};
        double t0 = now_ms();
        nng_msg *m;
        if ((rv = nng_msg_alloc(&m, 0)) != 0 || (rv = nng_msg_append(m, h, sizeof h)) != 0 ||
            (rv = nng_sendmsg(req, m, 0)) != 0 || (rv = nng_recvmsg(req, &m, 0)) != 0) {
            fprintf(stderr, "bench_transport: round trip %u: %s\n", i, nng_strerror(rv));
            return 1;
        }
        double t1 = now_ms();
        const uint8_t *src = NULL;
        if (!shm && nng_msg_len(m) == bytes)
            src = nng_msg_body(m);
        else if (shm && nng_msg_len(m) == sizeof h && memcmp(nng_msg_body(m), h, sizeof h) == 0)
            src = ring_client + h[1] * bytes;
        if (src != NULL)
            memcpy(got, src, bytes);
        double t2 = now_ms();
        uint64_t back[2] = {UINT64_MAX, 0};
        if (src != NULL) {
            memcpy(&back[0], got, 8);
            memcpy(&back[1], got + bytes - 8, 8);
        }
        if (back[0] != seq || back[1] != stamp)
            bad++;
        nng_msg_free(m);
        rt[i] = t2 - t0;
        cp[i] = t2 - t1;
    }
    for (uint32_t i = 0; !reply && i < reps; i++) {
        const uint64_t seq = i, stamp = ~seq * 0x9e3779b97f4a7c15ull;
        memcpy(frame, &seq, 8);
        memcpy(frame + bytes - 8, &stamp, 8);
        double t0 = now_ms();
        nng_msg *m;
        if ((rv = nng_msg_alloc(&m, 0)) != 0) {
            fprintf(stderr, "bench_transport: message: %s\n", nng_strerror(rv));
            return 1;
        }
        if (shm) {
            const uint64_t h[3] = {seq, i % RING, bytes};
            memcpy(ring_client + h[1] * bytes, frame, bytes);
            rv = nng_msg_append(m, h, sizeof h);
        } else {
            rv = nng_msg_append(m, frame, bytes);
        }
        if (rv != 0) {
            fprintf(stderr, "bench_transport: message: %s\n", nng_strerror(rv));
            return 1;
        }
        double t1 = now_ms();
        if ((rv = nng_sendmsg(req, m, 0)) != 0 || (rv = nng_recvmsg(req, &m, 0)) != 0) {
            fprintf(stderr, "bench_transport: round trip %u: %s\n", i, nng_strerror(rv));
            return 1;
        }
        double t2 = now_ms();
        uint64_t back[3] = {UINT64_MAX, 0, 0};
        if (nng_msg_len(m) == sizeof back)
            memcpy(back, nng_msg_body(m), sizeof back);
        if (back[0] != seq || back[1] != stamp || back[2] != bytes)
            bad++;
        nng_msg_free(m);
        rt[i] = t2 - t0;
        cp[i] = t1 - t0;
    }
    pthread_join(th, NULL);
    nng_close(req);
    nng_close(rep);
    if (bad != 0 || sa.rc != 0) {
        fprintf(stderr, "bench_transport: %u of %u replies did not match what was sent\n", bad,
                reps);
        return 1;
    }
    /* The first tenth warms the sockets and the allocator up. */
    const uint32_t skip = reps / 10, n = reps - skip;
    qsort(rt + skip, n, sizeof *rt, cmp_double);
    qsort(cp + skip, n, sizeof *cp, cmp_double);
    if (reply && shm)
        printf("bench_transport: %s, 24-byte requests naming a slot of a shared ring of %d, "
               "%zu-byte images written there (pwrite), 24-byte replies, %u round trips (the "
               "first %u not counted), every image checked\n",
               transport, RING, bytes, reps, skip);
    else if (reply)
        printf("bench_transport: %s, 24-byte requests, %zu-byte replies, %u round trips (the "
               "first %u not counted), every reply checked\n",
               transport, bytes, reps, skip);
    else if (shm)
        printf("bench_transport: %s, %zu-byte frames through a shared ring of %d slots, "
               "24-byte requests naming the slot, 24-byte replies, %u round trips (the first %u "
               "not counted), every reply checked\n",
               transport, bytes, RING, reps, skip);
    else
        printf("bench_transport: %s, %zu-byte requests, 24-byte replies, %u round trips "
               "(the first %u not counted), every reply checked\n",
               transport, bytes, reps, skip);
    printf("  %-34s %9s %9s %9s %9s\n", "(ms)", "p50", "p90", "p99", "max");
    print_row("round trip", rt, skip, n);
    print_row(reply ? (shm ? "of it, the copy out of the slot" : "of it, the copy out of the reply")
              : shm ? "of it, the copy into the slot"
                    : "of it, the copy into the message",
              cp, skip, n);
    if (shm) {
        munmap(ring_client, RING * bytes);
        munmap(ring_server, RING * bytes);
    }
    if (ring_fd >= 0)
        close(ring_fd);
    free(got);
    free(frame);
    free(rt);
    free(cp);
    return 0;
}
