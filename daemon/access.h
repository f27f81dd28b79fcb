/*
 * access.h - who may change the daemon's state: the write permission of
 * each connection, decided when it connects, and the check of every
 * request and streamed frame against it.
 *
 * Reads (ping, maps, stats, mesh, raycast) are open to every client that
 * could connect. Everything else writes (integrate, streamed frames,
 * reset, load, save, and any request type added later: the read set is an
 * allow-list, so a new type needs write access until it is listed here).
 * Who may write:
 *   - ipc://, inproc:// and plain tcp:// clients: always (their sockets are
 *     guarded by file modes, loopback or allow_insecure_remote);
 *   - TLS clients: every one when [tls] writers is empty, else those whose
 *     certificate CN is in the list (tls_peer.h reads it).
 * The decision is made once per connection (nng pipe) in the pipe
 * callback, while the pipe is open, and kept for a while after it closes,
 * because its last messages may still wait in the sockets' buffers. A
 * message whose pipe has no decision is treated as read-only (fail closed).
 *
 * A refused request gets an error reply FORBIDDEN (type and id echoed); a
 * refused frame is dropped and counted as received + rejected "forbidden"
 * under "(no sensor)", so that a read-only client cannot create sensor
 * counters either.
 *
 * Ownership: access_create allocates, access_destroy frees (after the
 * sockets are closed). Threads: every other function is thread-safe (one
 * mutex around the table; nng's pipe callbacks call in on its threads).
 */
#ifndef TSDFD_ACCESS_H
#define TSDFD_ACCESS_H

#include <nng/nng.h>

#include "config.h"
#include "dstats.h"
#include "tsdf_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct access_policy access_policy;

/* cfg and ds must outlive the policy. Returns TSDF_OK or TSDF_ENOMEM. */
int access_create(const tsdfd_config *cfg, dstats *ds, access_policy **out);
void access_destroy(access_policy *a);

/* Pipe callbacks (NNG_PIPE_EV_ADD_PRE, NNG_PIPE_EV_REM_POST). */
void access_pipe_added(access_policy *a, nng_pipe p);
void access_pipe_removed(access_policy *a, nng_pipe p);

/* 1 when a request of type t changes state (see above). */
int access_needs_write(tsdf_msg_type t);

/* Request path: 1 when msg may not run; then msg is freed, out holds the
 * FORBIDDEN error reply (or is empty when even that cannot be encoded) and
 * the request is counted as failed. 0: go on with handle_request. */
int access_refuse_request(access_policy *a, nng_msg *msg, tsdf_buf *out);

/* Frame path: 1 when the frame was dropped (msg freed, counted). */
int access_refuse_frame(access_policy *a, nng_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_ACCESS_H */
