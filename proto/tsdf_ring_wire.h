/*
 * tsdf_ring_wire.h - the messages of the ring socket, where a local client
 * hands the daemon a shared-memory frame ring (PROTOCOL.md 6.10): one
 * attach message with the ring's memfd as its only SCM_RIGHTS descriptor,
 * one reply; then any number of fences, each answered the same way.
 * Native byte order and layout: both ends are on one host.
 */
#ifndef TSDF_RING_WIRE_H
#define TSDF_RING_WIRE_H

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

/* The attach message on the ring socket, client to daemon, with the memfd
 * as its one SCM_RIGHTS descriptor; and the daemon's answer. */
#define TSDF_RING_MAGIC 0x47525354u /* "TSRG" */
#define TSDF_RING_VERSION 1u

typedef struct {
    uint32_t magic;   /* TSDF_RING_MAGIC */
    uint32_t version; /* TSDF_RING_VERSION */
    uint64_t bytes;   /* of the memfd to map, from offset 0 */
} tsdf_ring_attach_msg;

/* A fence, client to daemon on the connection of an attached ring, no
 * descriptor: from its answer on, the daemon refuses every request that
 * names the ring with a "ring_seq" below `fence` (reading or writing
 * nothing), so the sender may reuse the slots of requests it gave up on
 * (PROTOCOL.md 6.10, item 5). A fence never lowers the ring's. */
#define TSDF_RING_FENCE_MAGIC 0x46525354u /* "TSRF" */

typedef struct {
    uint32_t magic;   /* TSDF_RING_FENCE_MAGIC */
    uint32_t version; /* TSDF_RING_VERSION */
    uint64_t fence;   /* the lowest ring_seq still honoured */
} tsdf_ring_fence_msg;

/* The answer to an attach or a fence. */
typedef struct {
    uint32_t magic;  /* TSDF_RING_MAGIC */
    int32_t status;  /* TSDF_OK or why the ring was refused */
    uint64_t token;  /* TSDF_OK: what integrate requests name */
    char reason[64]; /* not TSDF_OK: a short message, NUL-terminated */
} tsdf_ring_attach_reply;

/* h set up for one message of len bytes at buf with room for control
 * data (descriptors) in ctl: what both ends pass to sendmsg / recvmsg. */
static inline void tsdf_ring_msghdr(struct msghdr *h, struct iovec *iov, void *buf, size_t len,
                                    void *ctl, size_t ctl_len)
{
    memset(h, 0, sizeof *h);
    memset(ctl, 0, ctl_len);
    iov->iov_base = buf;
    iov->iov_len = len;
    h->msg_iov = iov;
    h->msg_iovlen = 1;
    h->msg_control = ctl;
    h->msg_controllen = ctl_len;
}

#endif
