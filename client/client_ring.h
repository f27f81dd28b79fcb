/*
 * client_ring.h - libtsdf's side of a shared-memory frame ring
 * (PROTOCOL.md 6.10; the daemon's side is daemon/rings.c). Internal.
 *
 * A sealed memfd of `slots` slots of slot_bytes each, mapped here and
 * handed to the daemon over its ring socket, which answers a token. An
 * integrate then copies the frame's depth into a free slot and names
 * (token, offset) instead of carrying the samples; the slot is free again
 * once the daemon has answered, because the daemon copies the samples out
 * before it answers. A raycast names a run of free slots that its image
 * fits in, and the daemon writes the image there before it answers. A
 * slot whose request got no answer (timeout, broken connection) is
 * retired: the daemon may still read or write it. Each request carries
 * the seq of its span; when no run of free slots is left, a fence at the
 * lowest seq still in flight makes the daemon refuse the retired ones'
 * requests from then on, and their slots are free again (PROTOCOL.md
 * 6.10, item 5).
 */
#ifndef TSDF_CLIENT_RING_H
#define TSDF_CLIENT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_ring_wire.h"

/* At most this many slots (one bit each in the free mask). */
#define CLIENT_RING_MAX_SLOTS 64u

typedef struct client_ring client_ring;

/* Creates, seals and maps the ring and attaches it at the unix socket
 * path. TSDF_EINVAL (sizes), TSDF_ECONNREFUSED (no ring socket there),
 * TSDF_ETIMEOUT, or the daemon's refusal (message in *why). */
int client_ring_attach(const char *path, size_t slot_bytes, unsigned slots, int timeout_ms,
                       client_ring **out, char *why, size_t why_len);

/* The attach exchange alone: connects to the ring socket at path, sends
 * fd (a memfd of at least `bytes`) and reads the daemon's answer into
 * *rep. TSDF_OK with the connection in *sock (the ring lives while it is
 * open) whatever rep->status says; else a local failure (why). Tests use
 * it to hand the daemon descriptors that client_ring_attach would not. */
int client_ring_handshake(const char *path, int fd, uint64_t bytes, int timeout_ms, int *sock,
                          tsdf_ring_attach_reply *rep, char *why, size_t why_len);

/* Detaches (closes the ring socket's connection) and unmaps. */
void client_ring_close(client_ring *r);

/* Consecutive slots of a ring, taken for one request. */
typedef struct {
    int slot;        /* the first; -1: none */
    unsigned count;  /* how many */
    uint64_t token;  /* the ring's token, for the request */
    uint64_t offset; /* the first slot's byte offset */
    uint64_t seq;    /* the request's "ring_seq": 1, 2, ... in the order taken */
} client_ring_span;

/* Takes the fewest consecutive free slots that hold bytes, into *sp.
 * TSDF_OK, or -1 (sp->slot -1) when no such run is free (after a fence
 * that frees retired slots, where there are any), bytes is 0 or more than
 * the ring, or the ring is broken (client_ring_break). */
int client_ring_take(client_ring *r, size_t bytes, client_ring_span *sp);

/* client_ring_take, then the copy of bytes from src into the span. */
int client_ring_put(client_ring *r, const void *src, size_t bytes, client_ring_span *sp);

/* The ring's bytes at offset, as the daemon wrote them (a raycast's
 * image; valid while the span that holds them is taken). */
const void *client_ring_data(const client_ring *r, uint64_t offset);

/* Frees sp's slots after the daemon answered its request (answered = 1),
 * or retires them until a fence frees them (0). Nothing for a span of no
 * slot. */
void client_ring_release(client_ring *r, const client_ring_span *sp, int answered);

/* The daemon no longer knows the ring (it restarted, or detached it):
 * client_ring_put refuses from now on. */
void client_ring_break(client_ring *r);

#endif
