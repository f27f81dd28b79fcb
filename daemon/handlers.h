/*
 * handlers.h - what the daemon does with each message: decode, validate,
 * hand map work to the map's worker, wait, encode the reply.
 *
 * Every request gets a reply, also a malformed one (an error reply with the
 * codec's code and message: FORMAT, VERSION, PROTO_TYPE, PROTO_KEY,
 * BAD_SIZE, BAD_POSE, TOO_LARGE, ...), and nothing a client sends can stop
 * the daemon: errors are counted (dstats) and logged rate-limited.
 *
 * Threads: handle_request and handle_frame run on the server's threads
 * (request contexts and frame decoders), many at once; the context is
 * shared and read-only except for its thread-safe members.
 */
#ifndef TSDFD_HANDLERS_H
#define TSDFD_HANDLERS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "config.h"
#include "dstats.h"
#include "frame_pool.h"
#include "maps.h"
#include "prom.h"
#include "rings.h"
#include "tsdf_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const tsdfd_config *cfg;
    map_registry *maps;
    dstats *stats;
    int64_t start_ns;    /* CLOCK_MONOTONIC at start, for ping's uptime */
    atomic_int stopping; /* set at shutdown: frames wait no longer for room */
    /* CLOCK_MONOTONIC of the last snapshot the daemon restores at start
     * (autosave, save without a path, save at stop); 0: none yet. */
    atomic_int_least64_t last_save_ns;
    /* Request contexts waiting on a worker now, by job_kind (handlers.c),
     * and the queries refused because a limit was reached. */
    atomic_uint queries_waiting_kind[8];
    atomic_uint_least64_t queries_busy_map, queries_busy_kind;
    size_t max_message_bytes;
    size_t max_reply_bytes; /* [server] max_reply_mb, within the protocol's 64 MiB */
    /* Page-locked buffers for the frames' depth, when the volumes run on
     * CUDA and [queue] pinned_mb is not 0 (frame_pool.h); else NULL. */
    frame_pool *frame_buffers;
    /* The shared-memory frame rings ([server] ring_socket, rings.h); NULL
     * when off. */
    rings *rings;
    /* Wakes the main loop so it refreshes STATUS= at once (a uv_async_send
     * behind it; callable from any thread); NULL in tests. */
    void (*wake)(void *arg);
    void *wake_arg;
} daemon_ctx;

/* What handle_request leaves to its caller: the reply to send, and the
 * request's statistics, which handlers_request_done records once the reply
 * is on its way (no statistics work between a result and its reply). */
typedef struct {
    nng_msg *reply; /* owned by the caller now; NULL: nothing to send */
    int type;       /* the request's type, for dstats_request; 0: unreadable */
    int failed;     /* the reply is an error */
    int timed;      /* 1: add the request's latency to its type's window */
    int64_t t0_ns;  /* when handling began (worker_now_ns) */
} handler_result;

/* Handles one request message. Takes ownership of msg (frees it, or hands
 * it to a job whose payload points into it). Always leaves a reply in
 * res->reply, encoded straight into the message's body, unless even an
 * error reply cannot be made (then it is NULL and the caller sends
 * nothing). Call handlers_request_done(d, res) after sending. */
void handle_request(daemon_ctx *d, nng_msg *msg, handler_result *res);

/* Records what handle_request left for after the reply: the request's
 * count and latency. */
void handlers_request_done(daemon_ctx *d, const handler_result *res);

/* Encodes rep into a new nng message of tsdf_proto_reply_bound bytes
 * (trimmed to what was written), at most max_bytes (0: the protocol's
 * 64 MiB); when that fails (a reply beyond the limit, no memory), an error
 * reply with that code instead, naming the limit. NULL when not even that
 * can be made. */
nng_msg *handlers_reply_msg(const tsdf_reply *rep, size_t max_bytes);

/* Handles one fire-and-forget frame message from the PULL socket. Takes
 * ownership of msg. Counts the frame received and, unless it is queued, its
 * outcome. With the block policy it waits (in slices, until room or
 * shutdown) so the decoder stops pulling while the map's queue is full. */
void handle_frame(daemon_ctx *d, nng_msg *msg);

/* The final save at stop, after every worker has been joined (so this
 * thread owns the volumes and exports them directly): every map but those
 * whose worker is stuck into a new snapshot in the state dir, keeping
 * snapshot_keep files. Main thread. */
int handlers_save_on_stop(daemon_ctx *d);

/* Frames integrated into map m (NULL: all maps) since their last snapshot
 * that the daemon restores at start: what a crash now would lose. */
uint64_t handlers_frames_unsaved(daemon_ctx *d, dmap *m);

/* Saves every map into a new snapshot in dir (the state dir when NULL),
 * keeping snapshot_keep files; path_out receives the file. Map versions are
 * those at export. Any thread but a map worker. */
int handlers_save_all(daemon_ctx *d, const char *dir, char *path_out, size_t path_len);

/* Loads maps from a snapshot file (path NULL: the newest valid one in the
 * state dir). only_map NULL: every map in the file; else just that one
 * (TSDF_ENOT_FOUND when the file lacks it). version_out: the loaded map's
 * version (only_map) or 0. */
int handlers_load(daemon_ctx *d, const char *path, const char *only_map, char *path_out,
                  size_t path_len, uint64_t *version_out);

/* The /metrics render (a metrics_render_fn; arg: the daemon_ctx): the
 * counter table (metrics.h) over live counters and every map's cached
 * volume statistics, so that it never waits for a map's worker. One call
 * at a time per buffer; any thread but a map worker (the loop thread in
 * the daemon). Returns prom_buf_error(b), or TSDF_ENOMEM. */
int handlers_render_metrics(void *arg, prom_buf *b);

/* One line of counters for the periodic stats log and STATUS=. */
void handlers_status_line(daemon_ctx *d, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_HANDLERS_H */
