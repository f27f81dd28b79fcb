/*
 * test_daemon_depth.c - compressed depth end to end, against a real tsdfd:
 * the same frames sent raw, as png, zstd and rvl (acknowledged, and png
 * also streamed) build identical volumes (the same mesh, array for array,
 * and the same engine counters), and payloads that do not decode are
 * refused with DEPTH_DECODE, counted as rejected "depth_decode", and
 * create no map.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "daemon_testlib.h"
#include "tsdf_depth_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMG_W 160
#define IMG_H 120
#define N_FRAMES 8

static void integrate(tsdf_client *c, const char *map, const tsdf_frame *f, tsdf_depth_encoding e,
                      uint64_t seq)
{
    tsdf_client_frame cf = {map, "cam0", 0, seq, 0, f, e, 0};
    int rc = tsdf_client_integrate(c, &cf, 30000, NULL);
    if (rc != TSDF_OK)
        fail_msg("integrate %s into %s: %s (%s)", tsdf_depth_encoding_name(e), map,
                 tsdf_strerror(rc), tsdf_client_last_message());
}

static void test_compressed_integrates_identically(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    frames_make(&fs, "room", IMG_W, IMG_H, N_FRAMES);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 1);

    tsdf_frame u16[N_FRAMES];
    uint16_t *mm[N_FRAMES];
    for (uint32_t i = 0; i < fs.count; i++)
        mm[i] = frame_to_mm(&fs.frames[i], &u16[i]);
    for (uint32_t i = 0; i < fs.count; i++) {
        integrate(c, "raw", &u16[i], TSDF_DEPTH_ENC_RAW, i);
        integrate(c, "png", &u16[i], TSDF_DEPTH_ENC_PNG, i);
        integrate(c, "zstd", &u16[i], TSDF_DEPTH_ENC_ZSTD, i);
        integrate(c, "rvl", &u16[i], TSDF_DEPTH_ENC_RVL, i);
        integrate(c, "f32", &fs.frames[i], TSDF_DEPTH_ENC_RAW, i);
        integrate(c, "f32_zstd", &fs.frames[i], TSDF_DEPTH_ENC_ZSTD, i);
        /* Streamed: decoded on the frames socket's decoder thread. */
        tsdf_client_frame cf = {"png_stream", "cam0", 0, i, 0, &u16[i], TSDF_DEPTH_ENC_PNG, 1};
        assert_int_equal(tsdf_client_send_frame(c, &cf, 30000), TSDF_OK);
    }
    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    wait_settled(c, "png_stream", 7 * N_FRAMES, st);
    assert_int_equal(stat_get(st, "frames.integrated"), 7 * N_FRAMES);
    assert_int_equal(stat_get(st, "rejected.depth_decode"), 0);
    assert_reconciled(st);
    free(st);

    assert_same_map(c, "raw", "png");
    assert_same_map(c, "raw", "zstd");
    assert_same_map(c, "raw", "rvl");
    assert_same_map(c, "raw", "png_stream");
    assert_same_map(c, "f32", "f32_zstd");

    /* What cannot be sent is refused before it leaves. */
    tsdf_client_frame bad = {"png", "cam0", 0, 0, 0, &fs.frames[0], TSDF_DEPTH_ENC_PNG, 0};
    assert_int_equal(tsdf_client_integrate(c, &bad, 30000, NULL), TSDF_EINVAL);
    bad.depth_encoding = (tsdf_depth_encoding)42;
    assert_int_equal(tsdf_client_send_frame(c, &bad, 30000), TSDF_EINVAL);

    for (uint32_t i = 0; i < fs.count; i++)
        free(mm[i]);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

/* An integrate or frame message for map "never" whose depth is payload. */
static void bad_message(const frame_set *fs, tsdf_msg_type type, tsdf_depth_encoding e,
                        const void *payload, size_t n, tsdf_buf *out)
{
    tsdf_request *q = malloc(sizeof *q);
    assert_non_null(q);
    tsdf_request_init(q, type);
    q->id = 99;
    strcpy(q->map, "never");
    q->u.frame.frame = fs->frames[0];
    q->u.frame.frame.depth_format = TSDF_DEPTH_U16;
    q->u.frame.frame.depth_scale = 0.001f;
    q->u.frame.frame.depth = NULL;
    q->u.frame.depth_encoding = e;
    q->u.frame.depth_coded = payload;
    q->u.frame.depth_coded_bytes = n;
    tsdf_buf_init(out);
    assert_int_equal(tsdf_proto_encode_request(q, out), TSDF_OK);
    free(q);
}

static void test_bad_payloads_refused_and_counted(void **state)
{
    (void)state;
    frame_set fs;
    tsdfd_harness h;
    frames_make(&fs, "box", IMG_W, IMG_H, 1);
    assert_int_equal(start_daemon(&h, NULL, NULL), 0);
    tsdf_client *c = open_client(&h, 0);

    /* The payloads: garbage, a PNG of another size, a zstd bomb (a 32 MiB
     * frame in a few hundred bytes), RVL that stops short. */
    uint8_t junk[512];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 131 + 7);
    uint16_t small[10 * 10] = {0};
    tsdf_buf png_small, bomb, rvl_short;
    tsdf_buf_init(&png_small);
    tsdf_buf_init(&bomb);
    tsdf_buf_init(&rvl_short);
    assert_int_equal(
        tsdf_depth_encode(TSDF_DEPTH_ENC_PNG, 0, TSDF_DEPTH_U16, 10, 10, small, &png_small),
        TSDF_OK);
    void *zeros = calloc(16u << 20, 2);
    assert_non_null(zeros);
    assert_int_equal(
        tsdf_depth_encode(TSDF_DEPTH_ENC_ZSTD, 0, TSDF_DEPTH_U16, 4096, 4096, zeros, &bomb),
        TSDF_OK);
    free(zeros);
    assert_true(bomb.len < 8192);
    assert_int_equal(
        tsdf_depth_encode(TSDF_DEPTH_ENC_RVL, 0, TSDF_DEPTH_U16, 10, 10, small, &rvl_short),
        TSDF_OK);
    struct {
        tsdf_depth_encoding e;
        const void *p;
        size_t n;
    } cases[] = {
        {TSDF_DEPTH_ENC_ZSTD, junk, sizeof junk},
        {TSDF_DEPTH_ENC_PNG, junk, sizeof junk},
        {TSDF_DEPTH_ENC_RVL, junk, sizeof junk},
        {TSDF_DEPTH_ENC_PNG, png_small.data, png_small.len},
        {TSDF_DEPTH_ENC_ZSTD, bomb.data, bomb.len},
        {TSDF_DEPTH_ENC_RVL, rvl_short.data, rvl_short.len},
    };
    size_t ncases = sizeof cases / sizeof cases[0];

    nng_socket req = raw_req(&h);
    tsdf_reply *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    for (size_t i = 0; i < ncases; i++) {
        tsdf_buf m;
        bad_message(&fs, TSDF_MSG_INTEGRATE, cases[i].e, cases[i].p, cases[i].n, &m);
        raw_roundtrip(req, m.data, m.len, rep);
        if (rep->status != TSDF_EDEPTH_DECODE)
            fail_msg("case %zu (%s): status %d (%s: %s)", i, tsdf_depth_encoding_name(cases[i].e),
                     rep->status, rep->error, rep->message);
        assert_string_equal(rep->error, "DEPTH_DECODE");
        assert_int_equal(rep->type, TSDF_MSG_INTEGRATE);
        assert_int_equal(rep->id, 99);
        assert_non_null(strstr(rep->message, "depth"));
        tsdf_buf_fini(&m);
    }
    nng_close(req);
    /* The same payloads streamed: nothing to answer, but counted. */
    nng_socket push = raw_push(&h);
    for (size_t i = 0; i < ncases; i++) {
        tsdf_buf m;
        bad_message(&fs, TSDF_MSG_FRAME, cases[i].e, cases[i].p, cases[i].n, &m);
        assert_int_equal(nng_send(push, m.data, m.len, 0), 0);
        tsdf_buf_fini(&m);
    }

    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    wait_settled(c, "never", (int64_t)(2 * ncases), st);
    assert_int_equal(stat_get(st, "rejected.depth_decode"), (int64_t)(2 * ncases));
    assert_int_equal(stat_get(st, "frames.rejected"), (int64_t)(2 * ncases));
    assert_reconciled(st);
    /* Refused before the map lookup: no map was created for them. */
    assert_false(st->has_engine);
    tsdf_rep_maps *maps = malloc(sizeof *maps);
    assert_non_null(maps);
    assert_int_equal(tsdf_client_maps(c, maps, 30000), TSDF_OK);
    for (uint32_t i = 0; i < maps->count; i++)
        assert_string_not_equal(maps->names[i], "never");
    free(maps);
    free(st);
    free(rep);
    nng_close(push);
    tsdf_buf_fini(&png_small);
    tsdf_buf_fini(&bomb);
    tsdf_buf_fini(&rvl_short);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 30000), 0);
    frames_free(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compressed_integrates_identically),
        cmocka_unit_test(test_bad_payloads_refused_and_counted),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* nng frees the last of a closed socket's pipes on its own threads;
     * waiting for that keeps LeakSanitizer from reporting it at exit. */
    nng_fini();
    return rc;
}
