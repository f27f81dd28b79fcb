/*
 * proto_testlib.h - what the wire codec's tests (tests/test_proto_*.c)
 * share: a sample frame request with its payloads, a rebuilder that turns
 * a valid message into an invalid one key by key, the values it can put,
 * and the main() of a codec test program.
 *
 * Every function fails the running cmocka test (assert_*) instead of
 * returning an error, unless it says otherwise. Single-threaded: the
 * rebuilt message is one static buffer.
 */
#ifndef TSDF_TESTS_PROTO_TESTLIB_H
#define TSDF_TESTS_PROTO_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "testutil.h"
#include "tsdf_proto.h"

/* ---- sample frames ------------------------------------------------------ */

/* The size of the sample frame, in pixels. */
#define W 8
#define H 6

/* Its payloads (u16 and f32 depth, rgb), filled by fill_payloads. */
extern uint16_t g_depth_u16[W * H];
extern float g_depth_f32[W * H];
extern uint8_t g_rgb[W * H * 3];

/* Fills the payloads with a ramp (proto_tests_run calls it first). */
void fill_payloads(void);

/* A rotation of 30 degrees about z with a translation: a non-trivial pose. */
void test_pose(float T[16]);

/* Makes *q a frame or integrate of id 42 into map "kitchen_1" from sensor
 * id 7: the W x H u16 depth and the rgb above, at test_pose. The request
 * points into the payloads (it owns nothing). */
void make_frame_request(tsdf_request *q, tsdf_msg_type type);

/* Initialises *b and encodes q into it, which must succeed (fini *b). */
void encode_req(const tsdf_request *q, tsdf_buf *b);

/* ---- building invalid messages ------------------------------------------ */

/* Rewrites the msgpack map in src: drops key `drop` (may be NULL) and, when
 * put_key is set, appends put_key with a value written by put. */
typedef void (*value_fn)(msgpack_packer *pk);

/* The message the last rebuild wrote (owned here; take_rebuilt takes it,
 * proto_tests_run frees what is left). */
extern size_t g_out_len;
extern uint8_t *g_out;

void rebuild(const tsdf_buf *src, const char *drop, const char *put_key, value_fn put);
/* Replaces key with a new value (drop + put; put NULL only drops it) and
 * returns the request decoder's code for the result. */
int req_with(const tsdf_buf *src, const char *key, value_fn put, tsdf_proto_error *err);
/* The last rebuild as a buffer of its own (to change a second key); the
 * caller frees its data. */
tsdf_buf take_rebuilt(void);

/* The values rebuild can put, named by what they write. */
void v_u0(msgpack_packer *pk);           /* uint 0 */
void v_u2(msgpack_packer *pk);           /* uint 2 */
void v_u9000(msgpack_packer *pk);        /* uint 9000 */
void v_u5000(msgpack_packer *pk);        /* uint 5000 */
void v_neg(msgpack_packer *pk);          /* int -3 */
void v_f0(msgpack_packer *pk);           /* float 0 */
void v_fnan(msgpack_packer *pk);         /* float NaN */
void v_finf(msgpack_packer *pk);         /* double +infinity */
void v_fhuge(msgpack_packer *pk);        /* double 1e300: finite, not as a float */
void v_f10(msgpack_packer *pk);          /* float 10 */
void v_nil(msgpack_packer *pk);          /* nil */
void v_true(msgpack_packer *pk);         /* true */
void v_str_bogus(msgpack_packer *pk);    /* "bogus" */
void v_str_u8(msgpack_packer *pk);       /* "u8" */
void v_str_f32(msgpack_packer *pk);      /* "f32" */
void v_str_long(msgpack_packer *pk);     /* 80 times 'a' */
void v_str_bad_utf8(msgpack_packer *pk); /* not UTF-8: a stray FF and a surrogate */
void v_str_ctrl(msgpack_packer *pk);     /* valid UTF-8 with a terminal escape */
void v_str_dotdot(msgpack_packer *pk);   /* "../etc" */
void v_str_empty(msgpack_packer *pk);    /* "" */
void v_str_space(msgpack_packer *pk);    /* "a b" */
void v_str_zstd(msgpack_packer *pk);     /* "zstd" */
void v_str_png(msgpack_packer *pk);      /* "png" */
void v_str_frame(msgpack_packer *pk);    /* "frame" */
void v_bin_short(msgpack_packer *pk);    /* a bin of 10 bytes */
void v_bin_empty(msgpack_packer *pk);    /* a bin of 0 bytes */
/* Poses of 16 floats unless said otherwise: scaled by 2, mirrored, with a
 * last row other than 0 0 0 1, with a NaN, with 1e300 (as doubles), of 15
 * floats, and of 16 strs. */
void v_pose_scaled(msgpack_packer *pk);
void v_pose_mirror(msgpack_packer *pk);
void v_pose_lastrow(msgpack_packer *pk);
void v_pose_nan(msgpack_packer *pk);
void v_pose_huge(msgpack_packer *pk);
void v_pose_15(msgpack_packer *pk);
void v_pose_str(msgpack_packer *pk);
/* A box of 6 floats whose minimum exceeds its maximum in x. */
void v_box_inverted(msgpack_packer *pk);

/* ---- main --------------------------------------------------------------- */

/* What main() of a codec test program does: fills the payloads, runs the
 * count tests as the group `group`, frees the last rebuilt message and
 * returns cmocka's result. */
int proto_tests_run(const char *group, const struct CMUnitTest *tests, size_t count);

#endif /* TSDF_TESTS_PROTO_TESTLIB_H */
