/*
 * ipc_watch.h - keeps the daemon's ipc:// listeners accepting.
 *
 * With nng 1.5.2 (Debian 12), one client that connects to an ipc://
 * listener and closes before nng's handshake is done (`nc -U` and closed,
 * a health check, a client refused and giving up) stops that listener for
 * good: every later connection is accepted by the kernel and even
 * completes the handshake, but nng never hands it to the socket, so no
 * request on it is ever read. TCP listeners are not affected. A thread
 * here connects to each ipc:// listener once a period, does the SP
 * handshake as the socket's peer would, and waits for the socket's pipe
 * callback to see that connection; when two probes in a row are not
 * seen, it closes the listener and listens on the same URL again (the
 * connections already handed over stay; a client stuck on the dead
 * listener is closed with it and redials).
 *
 * The probes are not client connections: the pipe callback asks
 * ipc_watch_pipe_added / ipc_watch_pipe_removed and leaves them out of the
 * connection count and the access policy.
 */
#ifndef TSDFD_IPC_WATCH_H
#define TSDFD_IPC_WATCH_H

#include <stdint.h>

#include <nng/nng.h>

#include "tsdf_transport.h"

typedef struct ipc_watch ipc_watch;

/* The most listeners one watch keeps. */
#define IPC_WATCH_MAX 16

int ipc_watch_create(ipc_watch **out);

/* Watches listener l of sock on url (ignored unless url is ipc://);
 * peer_proto is the SP protocol number a peer of sock sends in its
 * handshake (0x30, REQ0, for a REP socket; 0x50, PUSH0, for PULL);
 * opts are what it was listened with, for a restart. Before start only. */
int ipc_watch_add(ipc_watch *w, nng_socket sock, nng_listener l, const char *url,
                  uint16_t peer_proto, const tsdf_listen_opts *opts);

/* Starts the probing thread: a probe of each listener every period_ms. */
int ipc_watch_start(ipc_watch *w, unsigned period_ms);

/* From the pipe callback, for every ADD_PRE: notes that p's listener
 * handed over a connection. 1 when p is one of the watch's own probes. */
int ipc_watch_pipe_added(ipc_watch *w, nng_pipe p);

/* From the pipe callback, for every REM_POST: 1 when p was a probe (its
 * ADD_PRE returned 1), which it then forgets. */
int ipc_watch_pipe_removed(ipc_watch *w, nng_pipe p);

/* Listener restarts so far. */
uint64_t ipc_watch_restarts(const ipc_watch *w);

/* Stops the thread: before the sockets close, so that no restart races
 * with the close. The pipe callback may still call in until they are. */
void ipc_watch_stop(ipc_watch *w);

/* Stops the thread if it runs, and frees the watch: once no pipe callback
 * runs any more (the sockets are closed). */
void ipc_watch_destroy(ipc_watch *w);

#endif /* TSDFD_IPC_WATCH_H */
