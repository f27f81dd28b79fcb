/*
 * server.h - the daemon's nng sockets and the threads that serve them.
 *
 *   REP  (requests): listens on cfg->listen[]; served through
 *        cfg->request_contexts nng contexts, each with its own nng_aio and
 *        its own thread, so that that many requests run at once (a mesh of
 *        one map does not hold up a ping or a raycast of another).
 *   PULL (frames):   listens on cfg->frames_listen[]; cfg->decode_threads
 *        threads receive and decode frames and queue them on their map.
 *        With the block policy a decoder waits while the map's queue is
 *        full, so it stops pulling, nng's buffers fill, and the senders'
 *        PUSH sockets block: backpressure reaches the robots.
 * Both sockets refuse messages above max_message_mb + a small envelope
 * margin (NNG_OPT_RECVMAXSZ): nng drops the connection of such a sender.
 * Messages between max_message_mb and that margin get a TOO_LARGE reply.
 * At most cfg->max_connections connections are open over both sockets, so
 * in-flight receives hold at most max_connections such messages. One more
 * takes the place of the connection idle longest (no request in progress;
 * dstats conns_idle_closed), or is closed as it connects when every one is
 * busy (conns_refused). A connection idle for cfg->idle_timeout_s is
 * closed by server_sweep (conns.h).
 *
 * Ownership: server_start allocates *out; server_stop closes the sockets,
 * joins every thread and frees it. Threads: call both from the main thread.
 */
#ifndef TSDFD_SERVER_H
#define TSDFD_SERVER_H

#include <stddef.h>

#include "handlers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct server server;

/* Opens and binds both sockets and starts the threads. Returns TSDF_OK, or
 * TSDF_ENNG / TSDF_EBUSY (address in use) / TSDF_EINVAL (bad URL) /
 * TSDF_ENOMEM with err naming the URL and nng's reason. */
int server_start(daemon_ctx *d, server **out, char *err, size_t err_len);

/* Closes both sockets (pending receives end), waits for the requests in
 * progress and the decoders, and frees s. NULL is a no-op. */
void server_stop(server *s);

/* Closes the connections idle for [server] idle_timeout_s (none when it
 * is 0). The main thread's cron, about once a second. */
void server_sweep(server *s);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_SERVER_H */
