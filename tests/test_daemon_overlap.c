/*
 * test_daemon_overlap.c - the CUDA daemon path overlaps the upload of a frame
 * with the update of the previous one, shown by the engine's CUDA event
 * timestamps as the daemon reports them (stats reply, "timeline").
 *
 * A real tsdfd (tests/daemon_harness.h) on the CUDA backend receives 640x480
 * synthetic frames of the room scene (0.4 cm voxels, a wide truncation band:
 * enough work per update, see below), fire-and-forget on its
 * PUSH/PULL socket, faster than it integrates them, so its queue is never
 * empty: the worker starts frame N+1 (its upload on the upload stream) while
 * the update kernel of frame N still runs on the compute stream. The test
 * prints the timeline of the last frames and asserts that for at least one
 * N, upload_start(N+1) < update_end(N), and that each frame's own stages
 * are in order (an update never starts before its depth is uploaded).
 *
 * GPU test (label gpu): exits 77 ("SKIPPED: no usable GPU") without one.
 */
#define _POSIX_C_SOURCE 200809L

#include "daemon_harness.h"
#include "testutil.h"
#include "tsdf_client.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FRAME_W 640
#define FRAME_H 480
#define FRAME_COUNT 48
/* Event timestamps have about 0.5 us resolution. */
#define EVENT_EPS_MS 0.002

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void print_timeline(const tsdf_rep_stats *s)
{
    printf("frame | upload start..end | alloc start..end | update start..end (ms since the "
           "volume's epoch) | upload ms | update ms | next upload starts before this update "
           "ends\n");
    for (uint32_t i = 0; i < s->timeline_count; i++) {
        const tsdf_frame_timeline *t = &s->timeline[i];
        const char *overlap = "";
        if (i + 1 < s->timeline_count)
            overlap = s->timeline[i + 1].upload_start_ms < t->update_end_ms ? "yes" : "no";
        printf("%5llu | %9.3f..%9.3f | %9.3f..%9.3f | %9.3f..%9.3f | %7.3f | %7.3f | %s\n",
               (unsigned long long)t->frame, t->upload_start_ms, t->upload_end_ms,
               t->alloc_start_ms, t->alloc_end_ms, t->update_start_ms, t->update_end_ms,
               t->upload_end_ms - t->upload_start_ms, t->update_end_ms - t->update_start_ms,
               overlap);
    }
}

static void test_upload_overlaps_update(void **state)
{
    tsdfd_harness h;
    tsdf_synth_sequence seq;
    (void)state;

    /* Room scene, 640x480, u16 millimetres (half the bytes of float, so
     * frames arrive faster than the GPU fuses them). */
    assert_int_equal(tsdf_synth_sequence_init(&seq, "room"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, FRAME_W, FRAME_H), TSDF_OK);
    size_t px = (size_t)FRAME_W * FRAME_H;
    float *depth_m = malloc(px * sizeof(float));
    uint16_t *depth_mm = malloc(FRAME_COUNT * px * sizeof(uint16_t));
    tsdf_frame *frames = calloc(FRAME_COUNT, sizeof *frames);
    assert_non_null(depth_m);
    assert_non_null(depth_mm);
    assert_non_null(frames);
    for (uint32_t i = 0; i < FRAME_COUNT; i++) {
        uint32_t k = (uint32_t)((uint64_t)i * seq.frame_count / FRAME_COUNT);
        assert_int_equal(tsdf_synth_sequence_frame(&seq, k, depth_m, NULL, &frames[i]), TSDF_OK);
        tsdf_depth_m_to_mm(depth_m, px, depth_mm + i * px);
        frames[i].depth_format = TSDF_DEPTH_U16;
        frames[i].depth = depth_mm + i * px;
        frames[i].depth_scale = 0.001f;
        frames[i].depth_size_bytes = px * sizeof(uint16_t);
    }

    /* Enough GPU work per update. On an H200 the update of a 640x480 frame
     * at 1 cm voxels and a 4-voxel band takes about 0.015 ms
     * (bench/RESULTS.md, a few thousand blocks per frame), less than the
     * worker's host work between two frames (freeing the message, counters,
     * the engine's copy into its pinned staging buffer: about 0.1 ms), so
     * the next upload could only start after it. 0.4 cm voxels and a
     * 32-voxel band touch some 35 000 blocks per frame of this scene (about
     * 10x), an update of roughly 0.2 ms: the upload of N+1 is then issued
     * while it runs. A table large enough never to grow (a growth syncs);
     * a queue holding every frame, so none is dropped. */
    assert_int_equal(tsdfd_harness_start(&h,
                                         "[volume]\nbackend = cuda\nvoxel_size_m = 0.004\n"
                                         "trunc_vox = 32\ninitial_capacity_blocks = 4194304\n"
                                         "[queue]\nlength = 128\npolicy = block\n",
                                         NULL),
                     0);
    tsdf_client_options o;
    tsdf_client_options_default(&o);
    o.default_timeout_ms = 30000;
    o.push_send_buffer = FRAME_COUNT;
    tsdf_client *c = NULL;
    assert_int_equal(tsdf_client_open(h.req_url, h.frames_url, &o, &c), TSDF_OK);

    for (uint32_t i = 0; i < FRAME_COUNT; i++) {
        tsdf_client_frame f;
        memset(&f, 0, sizeof f);
        f.sensor = "cam0";
        f.seq = i;
        f.frame = &frames[i];
        assert_int_equal(tsdf_client_send_frame(c, &f, 30000), TSDF_OK);
    }

    tsdf_rep_stats *st = malloc(sizeof *st);
    assert_non_null(st);
    int settled = 0;
    for (int waited = 0; waited < 120000 && !settled; waited += 50) {
        assert_int_equal(tsdf_client_stats(c, "default", st, 30000), TSDF_OK);
        settled = st->has_engine &&
                  st->engine.frames_integrated + st->engine.frames_rejected >= FRAME_COUNT;
        if (!settled)
            sleep_ms(50);
    }
    if (!settled)
        tsdfd_harness_dump_log(&h);
    assert_true(settled);
    assert_int_equal(st->engine.backend, TSDF_BACKEND_CUDA);
    assert_int_equal(st->engine.frames_integrated, FRAME_COUNT);
    assert_true(st->engine.blocks_allocated > 0);

    print_timeline(st);
    /* The engine keeps the last 16 frames; the reply carries all of them,
     * oldest first, ending with the last frame integrated. */
    assert_int_equal(st->timeline_count, TSDF_PROTO_MAX_TIMELINE);
    assert_int_equal(st->timeline[st->timeline_count - 1].frame, FRAME_COUNT);
    int overlaps = 0;
    for (uint32_t i = 0; i < st->timeline_count; i++) {
        const tsdf_frame_timeline *t = &st->timeline[i];
        if (i > 0)
            assert_int_equal(t->frame, st->timeline[i - 1].frame + 1);
        /* Each frame's stages in order: alloc waits for the upload, the
         * update follows the allocation on the compute stream. */
        assert_true(t->upload_start_ms >= 0.0);
        assert_true(t->upload_end_ms >= t->upload_start_ms - EVENT_EPS_MS);
        assert_true(t->alloc_start_ms >= t->upload_end_ms - EVENT_EPS_MS);
        assert_true(t->alloc_end_ms >= t->alloc_start_ms - EVENT_EPS_MS);
        assert_true(t->update_start_ms >= t->alloc_end_ms - EVENT_EPS_MS);
        assert_true(t->update_end_ms >= t->update_start_ms - EVENT_EPS_MS);
        if (i + 1 < st->timeline_count && st->timeline[i + 1].upload_start_ms < t->update_end_ms)
            overlaps++;
    }
    printf("%d of %u consecutive frame pairs: upload of N+1 started before update of N ended\n",
           overlaps, st->timeline_count - 1);
    assert_true(overlaps >= 1);

    free(st);
    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 60000), 0);
    free(frames);
    free(depth_mm);
    free(depth_m);
}

int main(void)
{
    if (!tsdf_cuda_available())
        tsdf_test_skip_program("no usable GPU");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_overlaps_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
