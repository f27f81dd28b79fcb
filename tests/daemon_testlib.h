/*
 * daemon_testlib.h - what the end-to-end daemon tests share: the backend
 * under test, starting a daemon, synthetic frame sets, stats look-ups and
 * the counter reconciliation, raw nng sockets with msgpack builders for
 * bytes the client library would refuse to send, and the main() of an
 * end-to-end program.
 *
 * Every function fails the running cmocka test (fail_msg / assert_*) instead
 * of returning an error, unless it says otherwise.
 */
#ifndef TSDF_TESTS_DAEMON_TESTLIB_H
#define TSDF_TESTS_DAEMON_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <nng/nng.h>

#include "testutil.h"

#include "daemon_harness.h"
#include "tsdf_client.h"
#include "tsdf_proto.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

/* The backend of the daemon and of the in-process reference: CPU, unless
 * TSDF_TEST_DAEMON_BACKEND=cuda. */
tsdf_backend test_backend(void);

/* tsdfd_harness_start with [volume] backend = test_backend() first. */
int start_daemon(tsdfd_harness *h, const char *extra_ini, const char *const *args);

typedef struct {
    tsdf_synth_sequence seq;
    uint32_t count;
    float **depth; /* count images */
    tsdf_frame *frames;
} frame_set;

/* count frames of a synthetic scene at w x h, spread over its trajectory. */
void frames_make(frame_set *fs, const char *scene, uint32_t w, uint32_t h, uint32_t count);
void frames_free(frame_set *fs);

void sleep_ms(int ms);

/* f's depth (f32 metres) as u16 millimetres (0: no measurement) in *out,
 * a copy of f otherwise; the returned samples are the caller's to free. */
uint16_t *frame_to_mm(const tsdf_frame *f, tsdf_frame *out);

/* Maps ref and map of the daemon hold the same volume: the same mesh
 * (array for array on the CPU backend; on CUDA, whose meshes follow the
 * blocks' pool order, the same vertices and triangles in any order), the
 * same block and frame counts, no rejected frame. */
void assert_same_map(tsdf_client *c, const char *ref, const char *map);

/* Sorts n vertices (x, y, z floats) of positions in place, so that meshes
 * whose vertices come in another order (the GPU allocates blocks in a
 * thread-dependent order) compare as sets. */
void sort_vertices(float *positions, size_t n);

/* Entries of dir other than . and ..; with only_snapshots, just the
 * snapshot files (snap-*.tsdfsnap). -1 when dir cannot be read. */
int count_entries(const char *dir, int only_snapshots);

/* The value of a daemon stats entry: 1 and *v when present. */
int stat_find(const tsdf_rep_stats *s, const char *key, int64_t *v);
/* The value of a daemon stats entry that must be present. */
int64_t stat_get(const tsdf_rep_stats *s, const char *key);

/* Starts b on the state directory of h (stopped) with load_on_start, so that
 * it restores h's newest snapshot, and extra_ini (may be NULL) after. */
void restart_on(const tsdfd_harness *h, tsdfd_harness *b, const char *extra_ini);

/* Crashes h's daemon (SIGKILL, nothing saved) and starts a new one on its
 * state directory that restores the newest snapshot (load_on_start) into b. */
void crash_and_restart(tsdfd_harness *h, tsdfd_harness *b);

/* Integrates one frame into map, acknowledged (30 s); returns its status. */
int integrate_into(tsdf_client *c, const char *map, const tsdf_frame *frame);

/* A libtsdf client of h (with its PUSH socket when with_push). */
tsdf_client *open_client(const tsdfd_harness *h, int with_push);

/* Polls stats until expect_received frames were received and none is in
 * flight, then leaves the reply in *st. */
void wait_settled(tsdf_client *c, const char *map, int64_t expect_received, tsdf_rep_stats *st);

extern const char *const drop_reasons[3];
extern const char *const reject_reasons[7];
/* received == integrated + dropped + rejected, each total the sum of its
 * reasons. */
void assert_reconciled(const tsdf_rep_stats *st);

/* Raw nng sockets (10 s send and receive timeouts) dialed to h. */
nng_socket raw_req(const tsdfd_harness *h);
nng_socket raw_push(const tsdfd_harness *h);
/* Sends bytes on a raw REQ socket and decodes the reply into *rep. Every
 * str of the reply must be valid UTF-8 as sent, before the codec (which
 * repairs free text) sees it: strict peers refuse the whole reply otherwise. */
void raw_roundtrip(nng_socket s, const void *data, size_t len, tsdf_reply *rep);

void pk_str(msgpack_packer *pk, const char *s);

/* What pack_request builds: a request of `type`, an integrate or frame
 * with a 4 x 2 u16 depth image unless told otherwise. */
typedef struct {
    const char *type; /* "integrate" */
    int version;      /* 1 */
    int omit_depth;   /* leave out "depth" */
    int bad_pose;     /* a pose with scale 2 */
    int depth_delta;  /* bytes added to the depth payload */
    uint32_t width;   /* 4 */
    uint32_t height;  /* 2 */
    float fx;         /* 100 */
    float fy;         /* 100 */
    float cx, cy;     /* width / 2, 1 */
    const char *fmt;  /* "u16" */
    const char *map;  /* "default" */
    int id_as_string; /* "id": "seven" */
    size_t pad_bytes; /* an extra bin key of this many bytes (oversize) */
} pk_opts;

pk_opts pk_defaults(void);
/* Builds the request into *sb (initialised here; destroy it). */
void pack_request(msgpack_sbuffer *sb, const pk_opts *o, uint64_t id);
/* Sends a built request and checks the error reply's status and type. */
void expect_error(nng_socket s, const pk_opts *o, uint64_t id, int want_status,
                  tsdf_msg_type want_type);

/* What main() of an end-to-end program does: exits 77 (skipped) where
 * TSDF_TEST_DAEMON_BACKEND=cuda asks for a GPU that is not usable, runs
 * only the tests that match TSDF_TEST_FILTER=<glob> when it is set (to loop
 * one suspected of flakiness), runs the count tests as the group `group`,
 * and waits for nng's threads before returning cmocka's result. */
int daemon_tests_run(const char *group, const struct CMUnitTest *tests, size_t count);

#endif /* TSDF_TESTS_DAEMON_TESTLIB_H */
