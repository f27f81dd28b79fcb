/*
 * test_cuda_pipeline.c - the CUDA backend's frame pipeline: per-frame CUDA
 * events in the right order, the upload of frame N+1 overlapping the update
 * of frame N (pinned double-buffered staging on its own stream), the stats
 * timings, and the memory cap (a frame that does not fit fails with
 * TSDF_ECAPACITY at the same frame as on the CPU, is counted, and leaves the
 * volume unchanged).
 * Exits 77 without a usable GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "testutil.h"
#include "tsdf_backend.h"
#include "tsdf_synth.h"
#include "tsdf_volume.h"
#include "tsdf_voxel_layout.h"

enum { FRAMES = 16 };

/* Frames of the room sequence at 640x480, rendered once. */
typedef struct {
    tsdf_synth_sequence seq;
    float *depth; /* FRAMES images */
    tsdf_frame f[FRAMES];
} frames;

static void frames_make(frames *fs)
{
    assert_int_equal(tsdf_synth_sequence_init(&fs->seq, "room"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&fs->seq, 640, 480), TSDF_OK);
    size_t n = (size_t)640 * 480;
    fs->depth = malloc(FRAMES * n * sizeof(float));
    assert_non_null(fs->depth);
    for (uint32_t i = 0; i < FRAMES; i++)
        assert_int_equal(
            tsdf_synth_sequence_frame(&fs->seq, i * 3, fs->depth + i * n, NULL, &fs->f[i]),
            TSDF_OK);
}

static void test_timeline_overlap(void **state)
{
    (void)state;
    frames fs;
    frames_make(&fs);
    /* A heavy update (4 mm voxels, a 12.8 cm band: tens of thousands of
     * blocks per frame) so that frame N's update is still running when
     * frame N+1 has been copied and its upload starts. */
    tsdf_volume_params p;
    tsdf_volume_params_default(&p);
    p.voxel_size_m = 0.004f;
    p.trunc_vox = 32.0f;
    p.backend = TSDF_BACKEND_CUDA;
    void *v = NULL;
    assert_int_equal(tsdf_cuda_ops.create(&p, &v), TSDF_OK);
    /* Warm up (allocation of the table, scratch and staging), then the
     * measured frames back to back. */
    assert_int_equal(tsdf_cuda_ops.integrate(v, &fs.f[0]), TSDF_OK);
    assert_int_equal(tsdf_cuda_ops.sync(v), TSDF_OK);
    for (int i = 0; i < FRAMES; i++)
        assert_int_equal(tsdf_cuda_ops.integrate(v, &fs.f[i]), TSDF_OK);
    tsdf_frame_timeline tl[FRAMES];
    size_t n = 0;
    assert_int_equal(tsdf_cuda_timeline(v, tl, FRAMES, &n), TSDF_OK);
    assert_int_equal(n, FRAMES);
    int overlaps = 0;
    for (size_t i = 0; i < n; i++) {
        const tsdf_frame_timeline *t = &tl[i];
        printf("frame %2lu: upload %.3f-%.3f  alloc %.3f-%.3f  update %.3f-%.3f ms\n",
               (unsigned long)t->frame, t->upload_start_ms, t->upload_end_ms, t->alloc_start_ms,
               t->alloc_end_ms, t->update_start_ms, t->update_end_ms);
        assert_true(t->upload_start_ms >= 0.0);
        assert_true(t->upload_start_ms <= t->upload_end_ms);
        assert_true(t->upload_end_ms <= t->alloc_start_ms);
        assert_true(t->alloc_start_ms <= t->alloc_end_ms);
        assert_true(t->alloc_end_ms <= t->update_start_ms);
        assert_true(t->update_start_ms < t->update_end_ms);
        if (i > 0) {
            assert_int_equal(t->frame, tl[i - 1].frame + 1);
            /* The compute stream keeps frames in order... */
            assert_true(t->alloc_start_ms >= tl[i - 1].update_end_ms);
            /* ...while the upload stream runs ahead of it. */
            overlaps += t->upload_start_ms < tl[i - 1].update_end_ms;
        }
    }
    printf("uploads of frame N+1 that started before the update of frame N ended: %d of %d\n",
           overlaps, FRAMES - 1);
    assert_true(overlaps >= 1);

    tsdf_volume_stats st;
    assert_int_equal(tsdf_cuda_ops.stats(v, &st, 1), TSDF_OK);
    printf("last frame: upload %.4f ms, allocate %.4f ms, update %.4f ms, %lu blocks\n",
           st.last_upload_ms, st.last_alloc_ms, st.last_update_ms,
           (unsigned long)st.blocks_allocated);
    assert_true(st.last_upload_ms > 0.0);
    assert_true(st.last_alloc_ms > 0.0);
    assert_true(st.last_update_ms > 0.0);
    assert_int_equal(st.frames_integrated, FRAMES + 1);
    assert_string_equal(tsdf_cuda_ops.name, "cuda");
    tsdf_cuda_ops.destroy(v);
    free(fs.depth);
}

/* The memory cap: both backends refuse the same frame, count it, and keep
 * their content. */
static void test_capacity(void **state)
{
    (void)state;
    frames fs;
    frames_make(&fs);
    /* An uncapped reference run says how many blocks each frame leaves;
     * the cap is set halfway into the first frame that adds many. */
    uint64_t blocks[FRAMES], slots[FRAMES];
    {
        tsdf_volume_params p;
        tsdf_volume *ref = NULL;
        tsdf_volume_params_default(&p);
        p.initial_capacity_blocks = 4096;
        p.backend = TSDF_BACKEND_CPU;
        assert_int_equal(tsdf_volume_create(&p, &ref), TSDF_OK);
        for (int i = 0; i < FRAMES; i++) {
            tsdf_volume_stats st;
            assert_int_equal(tsdf_volume_integrate(ref, &fs.f[i]), TSDF_OK);
            assert_int_equal(tsdf_volume_get_stats(ref, &st), TSDF_OK);
            blocks[i] = st.blocks_allocated;
            slots[i] = st.capacity_slots;
        }
        tsdf_volume_destroy(ref);
    }
    int expect = -1;
    for (int i = 1; i < FRAMES && expect < 0; i++)
        if (blocks[i] > blocks[i - 1] + 100)
            expect = i;
    assert_true(expect > 0);
    const uint64_t block_bytes = tsdf_pool_block_bytes(TSDF_LAYOUT_S16, 0);
    const uint64_t cap =
        slots[expect] * (sizeof(uint64_t) + sizeof(uint32_t)) +
        (blocks[expect - 1] + (blocks[expect] - blocks[expect - 1]) / 2) * block_bytes;
    tsdf_volume *vol[2];
    for (int b = 0; b < 2; b++) {
        tsdf_volume_params p;
        tsdf_volume_params_default(&p);
        p.initial_capacity_blocks = 4096;
        p.memory_cap_bytes = cap;
        p.backend = b ? TSDF_BACKEND_CUDA : TSDF_BACKEND_CPU;
        assert_int_equal(tsdf_volume_create(&p, &vol[b]), TSDF_OK);
    }
    int fail_at[2] = {-1, -1};
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < FRAMES && fail_at[b] < 0; i++) {
            tsdf_block_set before, after;
            tsdf_block_set_init(&before);
            tsdf_block_set_init(&after);
            assert_int_equal(tsdf_volume_export_blocks(vol[b], &before), TSDF_OK);
            int rc = tsdf_volume_integrate(vol[b], &fs.f[i]);
            if (rc == TSDF_ECAPACITY) {
                fail_at[b] = i;
                assert_int_equal(tsdf_volume_export_blocks(vol[b], &after), TSDF_OK);
                assert_int_equal(before.count, after.count);
                assert_memory_equal(before.coords, after.coords,
                                    3 * before.count * sizeof(int32_t));
                assert_memory_equal(before.geom, after.geom, tsdf_block_set_geom_bytes(&before));
            } else {
                assert_int_equal(rc, TSDF_OK);
            }
            tsdf_block_set_fini(&before);
            tsdf_block_set_fini(&after);
        }
    }
    tsdf_volume_stats s[2];
    for (int b = 0; b < 2; b++)
        assert_int_equal(tsdf_volume_get_stats(vol[b], &s[b]), TSDF_OK);
    printf("memory cap %.1f MiB: cpu refuses frame %d (%lu blocks held, %lu failed), cuda frame %d "
           "(%lu blocks held, %lu failed)\n",
           cap / 1048576.0, fail_at[0], (unsigned long)s[0].blocks_allocated,
           (unsigned long)s[0].insert_failures, fail_at[1], (unsigned long)s[1].blocks_allocated,
           (unsigned long)s[1].insert_failures);
    assert_int_equal(fail_at[0], expect);
    assert_int_equal(fail_at[1], expect);
    assert_int_equal(s[1].frames_rejected, 1);
    assert_int_equal(s[0].blocks_allocated, s[1].blocks_allocated);
    assert_int_equal(s[0].insert_failures, s[1].insert_failures);
    assert_int_equal(s[1].frames_integrated, (uint64_t)fail_at[1]);
    for (int b = 0; b < 2; b++)
        tsdf_volume_destroy(vol[b]);
    free(fs.depth);
}

int main(void)
{
    if (!tsdf_cuda_available())
        tsdf_test_skip_program("no usable GPU");
    tsdf_test_trace_on_signal();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeline_overlap),
        cmocka_unit_test(test_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
