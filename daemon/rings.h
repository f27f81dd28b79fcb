/*
 * rings.h - shared-memory frame rings: depth frames that do not travel
 * through the request socket (PROTOCOL.md 6.10).
 *
 * A local client creates a memfd, seals it against shrinking, and passes
 * it over a unix socket of its own ([server] ring_socket, SOCK_SEQPACKET,
 * SCM_RIGHTS). The daemon keeps the descriptor and answers a token; an
 * integrate request then names the token and a byte offset instead of
 * carrying the depth, and the request thread reads the samples from the
 * descriptor once (pread, into the frame's page-locked buffer on CUDA).
 * Its CPU never touches a mapping of a ring: a page fault there (a hole
 * the client left, memory the kernel cannot commit) would be a SIGBUS in
 * the daemon, where pread gives zeros or an error code. On the CUDA
 * backend a writable ring is also mapped and page-locked at attach
 * (rings_start's RINGS_GPU), and a raycast's image goes there from the
 * GPU by the device's copy engine (rings_lease), which cannot fault; a
 * fence is answered, and a detached ring unmapped, once the images in
 * flight into it are written. nng 1.5
 * reads every socket of a process on one thread, which a 614 KB frame per
 * request saturates near 10,000 frames/s (bench/RESULTS.md, 2026-12-03
 * evening); a ring takes the frames' bytes off that thread.
 *
 * Safety: only a shmem memfd sealed against shrinking is taken, and
 * checked with F_GET_SEALS before any call that reaches a filesystem;
 * other descriptors a client sends are closed on a detached thread (a
 * FUSE file's close can wait forever on its server); the token is
 * 64 random bits and only honoured for requests whose ipc:// connection
 * comes from the process that attached the ring (SO_PEERCRED against
 * NNG_OPT_IPC_PEER_PID); every read is bounds-checked; the rings' total
 * size is bounded ([server] ring_max_mb); a refused attach closes its
 * connection, and refusals are logged rate-limited. A ring is detached
 * when its connection closes; a read in progress finishes first.
 */
#ifndef TSDFD_RINGS_H
#define TSDFD_RINGS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "tsdf_ring_wire.h"

typedef struct rings rings;

/* How rings_start treats a writable ring when it attaches. */
typedef enum {
    RINGS_PWRITE = 0, /* written with pwrite only (the CPU backend) */
    RINGS_GPU = 1,    /* allocated whole, mapped and page-locked for the device */
    RINGS_MAPPED = 2  /* tests only: allocated and mapped, not page-locked (no device) */
} rings_direct;

/* Listens on path (a stale socket file there is replaced) with the given
 * file mode and group (-1: unchanged), and serves attachments on a thread
 * of its own: at most max_rings at once, max_bytes of rings in all. With
 * RINGS_GPU (the CUDA backend) each writable ring is allocated whole,
 * mapped and page-locked (tsdf_host_register) when it attaches, for
 * rings_lease; a ring where that fails is written with pwrite. A
 * connection that attaches no ring within attach_timeout_ms is closed and
 * counted as refused, so that idle connections cannot hold every slot. */
int rings_start(const char *path, int mode, long gid, uint32_t max_rings, uint64_t max_bytes,
                uint32_t attach_timeout_ms, rings_direct direct, rings **out, char *err,
                size_t err_len);

/* Stops the thread, closes every connection and every ring. */
void rings_stop(rings *r);

/* The socket path the rings listen on ("" for r NULL; absolute, see
 * cfg_ring_socket_path): what a ping reply advertises (PROTOCOL.md 6.8). */
const char *rings_path(const rings *r);

/* Where a request names a ring: the ring's token, the process on the
 * request's connection, the byte offset and the request's ring_seq (0
 * when it sent none). */
typedef struct {
    uint64_t token;
    uint64_t pid;
    uint64_t offset;
    uint64_t seq;
} rings_ref;

/* Copies bytes at ref's offset of its ring into dst, when ref's process
 * attached it. TSDF_ENOT_FOUND: no such ring (never attached, or its
 * connection closed); TSDF_EFORBIDDEN: another process's ring;
 * TSDF_ETIMEOUT: ref's seq is below the ring's fence (its sender gave up
 * on the request and may have reused the bytes); TSDF_EBAD_SIZE:
 * [offset, offset + bytes) is not inside the ring. */
int rings_read(rings *r, const rings_ref *ref, void *dst, size_t bytes);

/* Whether rings_read (write 0) or rings_write (1) of bytes at ref would be
 * allowed: the same codes, nothing copied. */
int rings_check(rings *r, const rings_ref *ref, uint64_t bytes, int write);

/* Writes the n pieces of iov one after the other from ref's offset (a
 * raycast's arrays, PROTOCOL.md 6.10): rings_read's codes, TSDF_EINVAL
 * for a ring sealed against writing (or sent read-only), and TSDF_EIO
 * when the file takes fewer bytes. The fence is looked at again: a
 * raycast's image is written long after its request was checked. */
int rings_write(rings *r, const rings_ref *ref, const struct iovec *iov, int n);

/* A lease of rings_lease (conn NULL: none held). */
typedef struct {
    void *conn;
} rings_lease_t;

/* Where the device may write bytes at ref of a ring mapped for it
 * (RINGS_GPU): TSDF_OK with *p there and *lease held until
 * rings_lease_end, which the caller calls once the device's copies there
 * are complete. The fence and the other checks of rings_write are made
 * now, for the whole write; a lease holds no lock, but a fence on its
 * ring is answered, and a detached ring's mapping dropped, only after
 * the ring's leases ended. TSDF_OK with *p NULL: the ring is not mapped
 * for the device, or ref's offset is not aligned for floats (use
 * rings_write; nothing is held). Else rings_write's codes, nothing held.
 * Only the device may write at *p: the daemon's CPU must not touch it. */
int rings_lease(rings *r, const rings_ref *ref, uint64_t bytes, rings_lease_t *lease, void **p);

/* Ends a lease (nothing for one not held). */
void rings_lease_end(rings *r, rings_lease_t *lease);

/* 1 when r maps writable rings for the device (RINGS_GPU, RINGS_MAPPED):
 * a raycast into one then needs no buffer of its own unless its lease
 * falls back (0 for NULL). */
int rings_mapped(const rings *r);

typedef struct {
    uint64_t attached; /* rings attached now */
    uint64_t bytes;    /* their size in all */
    uint64_t refused;  /* connections and attachments refused so far */
    uint64_t frames;   /* frames whose depth was read from a ring so far */
} rings_stats;

/* All 0 for NULL (no ring socket). */
void rings_get_stats(rings *r, rings_stats *out);

#endif
