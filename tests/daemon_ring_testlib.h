/*
 * daemon_ring_testlib.h - what the shared-memory ring tests share
 * (tests/test_daemon_ring.c, tests/test_daemon_ring_fence.c): a daemon with
 * a ring socket, rings attached by hand, and raw requests that name them.
 */
#ifndef TSDF_DAEMON_RING_TESTLIB_H
#define TSDF_DAEMON_RING_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "client_ring.h"
#include "daemon_testlib.h"
#include "tsdf_proto.h"

#define IMG_W 160
#define IMG_H 120
#define N_FRAMES 6
#define U16_BYTES ((size_t)IMG_W * IMG_H * 2u)

/* The daemon's configuration: a ring socket in its folder. */
extern const char ring_ini[];

/* The ring socket's path of the daemon h started with ring_ini. */
void ring_path(const tsdfd_harness *h, char *out, size_t n);

/* c's stats of map (NULL: the daemon's), which the caller frees. */
tsdf_rep_stats *stats_of(tsdf_client *c, const char *map);

/* c's stats of map once the daemon received at least expect frames and
 * none is in flight (wait_settled), which the caller frees. */
tsdf_rep_stats *settled_stats(tsdf_client *c, const char *map, int64_t expect);

/* Integrates f into map through c (its ring when it has one), or fails. */
void integrate_ok(tsdf_client *c, const char *map, const tsdf_frame *f, uint64_t seq);

/* The raycast of f's camera (its pose, intrinsics and size). */
void camera_of(const tsdf_frame *f, tsdf_raycast_params *rp);

/* One raycast of map by c as o says, into depth (and normals, rgb). */
void raycast_ok(tsdf_client *c, const char *map, const tsdf_raycast_params *rp,
                const tsdf_client_raycast_options *o, float *depth, float *normals, uint8_t *rgb,
                tsdf_client_raycast_info *info);

/* A memfd of bytes, sealed against shrinking when seal is set. */
int make_memfd(size_t bytes, int seal);

/* Attaches fd at path; the daemon's answer in *rep, the connection in *sock. */
void handshake(const char *path, int fd, uint64_t bytes, int *sock, tsdf_ring_attach_reply *rep);

/* An integrate request (or a frame: the encoder refuses it) of f into map
 * that names (token, offset), with ring_seq seq (0: none), sent on s; the
 * reply's status, its message in msg. ring_request: without ring_seq. */
int ring_request_seq(nng_socket s, const char *map, const tsdf_frame *f, uint64_t token,
                     uint64_t offset, uint64_t seq, tsdf_msg_type type, char *msg, size_t msg_len);
int ring_request(nng_socket s, const char *map, const tsdf_frame *f, uint64_t token,
                 uint64_t offset, tsdf_msg_type type, char *msg, size_t msg_len);

/* A raycast request of map "m" from rp's camera that names (token,
 * offset), with ring_seq seq (0: none), sent on q; the reply in *rep.
 * ring_raycast: without ring_seq. */
void ring_raycast_seq(nng_socket q, const tsdf_raycast_params *rp, int normals, uint64_t token,
                      uint64_t offset, uint64_t seq, tsdf_reply *rep);
void ring_raycast(nng_socket q, const tsdf_raycast_params *rp, int normals, uint64_t token,
                  uint64_t offset, tsdf_reply *rep);

#endif
