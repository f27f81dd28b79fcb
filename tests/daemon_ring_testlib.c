/* daemon_ring_testlib.c - what the shared-memory ring tests share
 * (daemon_ring_testlib.h). */
#define _GNU_SOURCE

#include "daemon_ring_testlib.h"

#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char ring_ini[] = "[server]\nring_socket = @DIR@/rings.sock\n";

void ring_path(const tsdfd_harness *h, char *out, size_t n)
{
    snprintf(out, n, "%s/rings.sock", h->dir);
}

tsdf_rep_stats *stats_of(tsdf_client *c, const char *map)
{
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    assert_int_equal(tsdf_client_stats(c, map, st, 30000), TSDF_OK);
    return st;
}

tsdf_rep_stats *settled_stats(tsdf_client *c, const char *map, int64_t expect)
{
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    wait_settled(c, map, expect, st);
    return st;
}

void integrate_ok(tsdf_client *c, const char *map, const tsdf_frame *f, uint64_t seq)
{
    tsdf_client_frame cf = {map, "cam0", 0, seq, 0, f, TSDF_DEPTH_ENC_RAW, 0};
    int rc = tsdf_client_integrate(c, &cf, 30000, NULL);
    if (rc != TSDF_OK)
        fail_msg("integrate into %s: %s (%s)", map, tsdf_strerror(rc), tsdf_client_last_message());
}

/* The raycast of f's camera (its pose, intrinsics and size). */
void camera_of(const tsdf_frame *f, tsdf_raycast_params *rp)
{
    memset(rp, 0, sizeof *rp);
    rp->width = f->width;
    rp->height = f->height;
    rp->K = f->K;
    memcpy(rp->T_world_cam, f->T_world_cam, sizeof rp->T_world_cam);
    rp->min_depth_m = 0.1f;
    rp->max_depth_m = 5.0f;
}

/* One raycast of map by c as opts say, into depth (and normals, rgb). */
void raycast_ok(tsdf_client *c, const char *map, const tsdf_raycast_params *rp,
                const tsdf_client_raycast_options *o, float *depth, float *normals, uint8_t *rgb,
                tsdf_client_raycast_info *info)
{
    tsdf_raycast_output out = {depth, o->want_normals ? normals : NULL, rgb};
    int rc = tsdf_client_raycast_ex(c, map, rp, o, &out, info, 30000);
    if (rc != TSDF_OK)
        fail_msg("raycast of %s: %s (%s)", map, tsdf_strerror(rc), tsdf_client_last_message());
}

/* A memfd of bytes, sealed against shrinking when seal; -1 on failure. */
int make_memfd(size_t bytes, int seal)
{
    int fd = memfd_create("test-ring", MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0));
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    if (seal)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    return fd;
}

/* Attaches fd at path; the daemon's answer in *rep, the connection in *sock. */
void handshake(const char *path, int fd, uint64_t bytes, int *sock, tsdf_ring_attach_reply *rep)
{
    char why[160];
    int rc = client_ring_handshake(path, fd, bytes, 10000, sock, rep, why, sizeof why);
    if (rc != TSDF_OK)
        fail_msg("ring handshake: %s (%s)", tsdf_strerror(rc), why);
}

/* An integrate request of f into map that names (token, offset) with
 * ring_seq seq (0: none), sent on s; returns the reply's status and its
 * message in msg. */
int ring_request_seq(nng_socket s, const char *map, const tsdf_frame *f, uint64_t token,
                     uint64_t offset, uint64_t seq, tsdf_msg_type type, char *msg, size_t msg_len)
{
    tsdf_request *q = malloc(sizeof *q);
    assert_non_null(q);
    tsdf_request_init(q, type);
    q->id = 7;
    snprintf(q->map, sizeof q->map, "%s", map);
    q->u.frame.sensor.is_id = 1;
    q->u.frame.frame = *f;
    q->u.frame.has_ring = 1;
    q->u.frame.ring_token = token;
    q->u.frame.ring_offset = offset;
    q->u.frame.ring_seq = seq;
    tsdf_buf b;
    tsdf_buf_init(&b);
    int rc = tsdf_proto_encode_request(q, &b);
    free(q);
    if (type == TSDF_MSG_FRAME) {
        /* Refused by the encoder already: a frame may not name a ring. */
        tsdf_buf_fini(&b);
        return rc;
    }
    assert_int_equal(rc, TSDF_OK);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    raw_roundtrip(s, b.data, b.len, rep);
    tsdf_buf_fini(&b);
    int status = rep->status;
    snprintf(msg, msg_len, "%s", status != TSDF_OK ? rep->message : "");
    free(rep);
    return status;
}

int ring_request(nng_socket s, const char *map, const tsdf_frame *f, uint64_t token,
                 uint64_t offset, tsdf_msg_type type, char *msg, size_t msg_len)
{
    return ring_request_seq(s, map, f, token, offset, 0, type, msg, msg_len);
}

/* A raycast request that names (token, offset) of ring s's connection,
 * with ring_seq seq (0: none), sent on q; the reply in *rep. */
void ring_raycast_seq(nng_socket q, const tsdf_raycast_params *rp, int normals, uint64_t token,
                      uint64_t offset, uint64_t seq, tsdf_reply *rep)
{
    tsdf_request *r = malloc(sizeof *r);
    assert_non_null(r);
    tsdf_request_init(r, TSDF_MSG_RAYCAST);
    r->id = 9;
    snprintf(r->map, sizeof r->map, "m");
    tsdf_req_raycast *c = &r->u.raycast;
    c->width = rp->width;
    c->height = rp->height;
    c->K = rp->K;
    memcpy(c->T_world_cam, rp->T_world_cam, sizeof c->T_world_cam);
    c->min_depth_m = rp->min_depth_m;
    c->max_depth_m = rp->max_depth_m;
    c->want_normals = normals;
    c->has_ring = 1;
    c->ring_token = token;
    c->ring_offset = offset;
    c->ring_seq = seq;
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_proto_encode_request(r, &b), TSDF_OK);
    free(r);
    raw_roundtrip(q, b.data, b.len, rep);
    tsdf_buf_fini(&b);
}

void ring_raycast(nng_socket q, const tsdf_raycast_params *rp, int normals, uint64_t token,
                  uint64_t offset, tsdf_reply *rep)
{
    ring_raycast_seq(q, rp, normals, token, offset, 0, rep);
}
