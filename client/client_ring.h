/*
 * client_ring.h - libtsdf's side of a shared-memory frame ring
 * (PROTOCOL.md 6.10; the daemon's side is daemon/rings.c). Internal.
 *
 * A sealed memfd of `slots` slots of slot_bytes each, mapped here and
 * handed to the daemon over its ring socket, which answers a token. An
 * integrate then copies the frame's depth into a free slot and names
 * (token, offset) instead of carrying the samples; the slot is free again
 * once the daemon has answered, because the daemon copies the samples out
 * before it answers. A slot whose request got no answer (timeout, broken
 * connection) is never used again: the daemon may still read it.
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

/* Copies bytes (<= the slot size) into a free slot: its index, the token
 * and the slot's offset. -1: none free, or too large, or the ring is
 * broken (client_ring_break). */
int client_ring_put(client_ring *r, const void *src, size_t bytes, uint64_t *token,
                    uint64_t *offset);

/* Frees slot after the daemon answered its request (answered = 1), or
 * retires it for good (0). */
void client_ring_release(client_ring *r, int slot, int answered);

/* The daemon no longer knows the ring (it restarted, or detached it):
 * client_ring_put refuses from now on. */
void client_ring_break(client_ring *r);

#endif
