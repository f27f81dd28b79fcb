/*
 * test_frame_pool.c - the page-locked depth buffers (daemon/frame_pool.h)
 * and the frame path through them (job_prepare_images): buffers are reused,
 * the byte bound holds and past it the caller is told to fall back, kept
 * buffers make room for a larger one, many threads share a pool, and a
 * frame's depth lands in a pool buffer whatever its alignment, with the
 * same samples, and its colour image in another, and both go back when
 * the job is freed.
 *
 * Without a GPU the pool's memory is ordinary (tsdf_host_alloc), which is
 * all these tests need: what is page-locked is the backend's business
 * (tests/test_cuda_volume.c uploads from page-locked frames).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>

#include <cmocka.h>

#include "frame_pool.h"
#include "tsdf_error.h"
#include "worker.h"

#define MIB ((uint64_t)1 << 20)
#define FRAME_BYTES ((size_t)640 * 480 * 2)

static frame_pool_stats stats_of(frame_pool *p)
{
    frame_pool_stats st;
    memset(&st, 0xff, sizeof st);
    frame_pool_get_stats(p, &st);
    return st;
}

static void test_create_args(void **state)
{
    (void)state;
    frame_pool *p = (frame_pool *)&p;
    assert_int_equal(frame_pool_create(MIB, NULL), TSDF_EINVAL);
    assert_int_equal(frame_pool_create(0, &p), TSDF_EINVAL);
    assert_null(p);
    assert_null(frame_pool_get(NULL, 100));
    frame_pool_put(NULL, NULL);
    frame_pool_destroy(NULL);
    assert_int_equal(frame_pool_create(MIB, &p), TSDF_OK);
    assert_null(frame_pool_get(p, 0));
    frame_pool_put(p, NULL);
    frame_pool_destroy(p);
}

static void test_reuse(void **state)
{
    (void)state;
    frame_pool *p;
    assert_int_equal(frame_pool_create(64 * MIB, &p), TSDF_OK);
    uint8_t *a = frame_pool_get(p, FRAME_BYTES);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 64u, 0);
    memset(a, 0x5a, FRAME_BYTES); /* all of it is ours */
    frame_pool_stats st = stats_of(p);
    size_t cap = (FRAME_BYTES + FRAME_POOL_GRANULE - 1) / FRAME_POOL_GRANULE * FRAME_POOL_GRANULE;
    assert_int_equal(st.bytes_out, cap);
    assert_int_equal(st.bytes_kept, 0);
    assert_int_equal(st.limit_bytes, 64 * MIB);
    frame_pool_put(p, a);
    st = stats_of(p);
    assert_int_equal(st.bytes_out, 0);
    assert_int_equal(st.bytes_kept, cap);
    /* The same size, and a smaller one, get the kept buffer back. */
    assert_ptr_equal(frame_pool_get(p, FRAME_BYTES), a);
    frame_pool_put(p, a);
    assert_ptr_equal(frame_pool_get(p, 1000), a);
    uint8_t *b = frame_pool_get(p, FRAME_BYTES);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    st = stats_of(p);
    assert_int_equal(st.gets, 4);
    assert_int_equal(st.allocations, 2);
    assert_int_equal(st.fallbacks, 0);
    assert_int_equal(st.bytes_out, 2 * cap);
    frame_pool_put(p, a);
    frame_pool_put(p, b);
    frame_pool_destroy(p);
}

static void test_limit(void **state)
{
    (void)state;
    frame_pool *p;
    assert_int_equal(frame_pool_create(MIB, &p), TSDF_OK);
    /* 600 KB take 640 KiB: one fits in 1 MiB, two do not. */
    void *a = frame_pool_get(p, 600 * 1000);
    assert_non_null(a);
    assert_null(frame_pool_get(p, 600 * 1000));
    /* Larger than the whole bound: never. */
    assert_null(frame_pool_get(p, 2 * MIB));
    frame_pool_stats st = stats_of(p);
    assert_int_equal(st.fallbacks, 2);
    assert_int_equal(st.bytes_out, 640 * 1024);
    frame_pool_put(p, a);
    assert_ptr_equal(frame_pool_get(p, 600 * 1000), a);
    frame_pool_put(p, a);
    /* A larger request than the kept buffer: the kept one is freed to
     * make room (320 + 960 KiB > 1 MiB). */
    void *big = frame_pool_get(p, 900 * 1024);
    assert_non_null(big);
    st = stats_of(p);
    assert_int_equal(st.bytes_kept, 0);
    assert_int_equal(st.bytes_out, 960 * 1024);
    assert_true(st.bytes_out + st.bytes_kept <= st.limit_bytes);
    frame_pool_put(p, big);
    frame_pool_destroy(p);
}

/* Frames and raycast images share the pool: each request gets the
 * smallest kept buffer that fits, and one that cannot fit even with every
 * kept buffer freed leaves them kept. */
static void test_best_fit(void **state)
{
    (void)state;
    frame_pool *p;
    assert_int_equal(frame_pool_create(8 * MIB, &p), TSDF_OK);
    void *frame = frame_pool_get(p, 600 * 1000); /* 640 KiB */
    void *image = frame_pool_get(p, 4915200);    /* 4.75 MiB */
    assert_non_null(frame);
    assert_non_null(image);
    frame_pool_put(p, frame);
    frame_pool_put(p, image); /* kept first in line now */
    assert_ptr_equal(frame_pool_get(p, 600 * 1000), frame);
    assert_ptr_equal(frame_pool_get(p, 4915200), image);
    frame_pool_put(p, image);
    /* 640 KiB out, 4800 KiB kept: 7.5 MiB cannot fit in 8 MiB even with
     * the kept one freed, so it stays. */
    assert_null(frame_pool_get(p, (size_t)(7.5 * MIB)));
    frame_pool_stats st = stats_of(p);
    assert_int_equal(st.bytes_kept, 4800 * 1024);
    assert_int_equal(st.fallbacks, 1);
    assert_ptr_equal(frame_pool_get(p, 4915200), image);
    frame_pool_put(p, image);
    frame_pool_put(p, frame);
    frame_pool_destroy(p);
}

/* A raycast's outputs in one pooled buffer (ccfacc5): depth, then
 * normals, then colour, exactly the image's bytes, back in the pool with
 * the job; no pool, or no room, leaves them to the worker's malloc. */
static void test_raycast_outputs(void **state)
{
    (void)state;
    frame_pool *p;
    assert_int_equal(frame_pool_create(8 * MIB, &p), TSDF_OK);
    static const struct {
        int normals, rgb;
        uint32_t scale;
    } cases[] = {{1, 1, 1}, {1, 0, 1}, {0, 1, 1}, {0, 0, 1}, {1, 1, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        worker_job *j = job_new(JOB_RAYCAST, 0);
        assert_non_null(j);
        tsdf_req_raycast *rq = &j->req.u.raycast;
        rq->width = 640;
        rq->height = 480;
        rq->K.fx = rq->K.fy = 525.0f;
        rq->K.cx = 319.5f;
        rq->K.cy = 239.5f;
        rq->want_normals = cases[c].normals;
        rq->want_rgb = cases[c].rgb;
        rq->scale = cases[c].scale;
        job_raycast_outputs(j, p);
        const size_t px = (size_t)(640 / cases[c].scale) * (480 / cases[c].scale);
        const uint8_t *base = j->out_buf;
        assert_non_null(base);
        assert_ptr_equal(j->out_pool, p);
        assert_ptr_equal(j->depth_m, base);
        if (cases[c].normals)
            assert_ptr_equal(j->normals, base + px * 4);
        else
            assert_null(j->normals);
        if (cases[c].rgb)
            assert_ptr_equal(j->rgb, base + px * (cases[c].normals ? 16 : 4));
        else
            assert_null(j->rgb);
        const size_t bytes =
            (size_t)tsdf_proto_raycast_image_bytes(px, cases[c].normals, cases[c].rgb);
        assert_int_equal(bytes, px * (4 + 12 * !!cases[c].normals + 3 * !!cases[c].rgb));
        /* Every byte of the layout is the job's to write. */
        memset(j->out_buf, 0xa5, bytes);
        assert_true(stats_of(p).bytes_out >= bytes);
        job_free(j);
        assert_int_equal(stats_of(p).bytes_out, 0);
    }
    /* No pool, and an image larger than the pool: the worker mallocs. */
    worker_job *j = job_new(JOB_RAYCAST, 0);
    j->req.u.raycast.width = 4096;
    j->req.u.raycast.height = 4096;
    j->req.u.raycast.want_normals = 1;
    job_raycast_outputs(j, NULL);
    assert_null(j->out_buf);
    assert_null(j->depth_m);
    job_raycast_outputs(j, p);
    assert_null(j->out_buf);
    assert_null(j->depth_m);
    job_free(j);
    frame_pool_destroy(p);
}

typedef struct {
    frame_pool *p;
    uint32_t seed;
    size_t got, refused;
} churn_arg;

static uint32_t next_rand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void *churn(void *arg)
{
    churn_arg *c = arg;
    void *held[4] = {NULL, NULL, NULL, NULL};
    size_t sizes[4] = {0, 0, 0, 0};
    uint8_t tags[4] = {0, 0, 0, 0};
    for (int i = 0; i < 2000; i++) {
        int k = (int)(next_rand(&c->seed) % 4u);
        if (held[k] != NULL) {
            /* What we wrote is still there: nobody else had the buffer. */
            uint8_t *b = held[k];
            if (b[0] != (uint8_t)k || b[sizes[k] - 1] != tags[k])
                return (void *)1;
            frame_pool_put(c->p, held[k]);
            held[k] = NULL;
            continue;
        }
        size_t n = 1 + next_rand(&c->seed) % (300 * 1024);
        uint8_t *b = frame_pool_get(c->p, n);
        if (b == NULL) {
            c->refused++;
            continue;
        }
        c->got++;
        b[0] = (uint8_t)k;
        tags[k] = (uint8_t)(c->seed >> 24);
        b[n - 1] = tags[k];
        held[k] = b;
        sizes[k] = n;
    }
    for (int k = 0; k < 4; k++)
        frame_pool_put(c->p, held[k]);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    frame_pool *p;
    /* Room for about half of what eight threads may hold at once. */
    assert_int_equal(frame_pool_create(5 * MIB, &p), TSDF_OK);
    pthread_t t[8];
    churn_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (churn_arg){p, (uint32_t)(i * 7919 + 1), 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, churn, &a[i]), 0);
    }
    size_t got = 0, refused = 0;
    for (int i = 0; i < 8; i++) {
        void *rv;
        assert_int_equal(pthread_join(t[i], &rv), 0);
        assert_null(rv);
        got += a[i].got;
        refused += a[i].refused;
    }
    frame_pool_stats st = stats_of(p);
    assert_int_equal(st.bytes_out, 0);
    assert_true(st.bytes_kept <= 5 * MIB);
    assert_int_equal(st.gets, got);
    assert_int_equal(st.fallbacks, refused);
    assert_true(got > 1000);
    frame_pool_destroy(p);
}

/* A frame job whose 640x480 u16 depth starts `offset` bytes into src. */
static worker_job *frame_job(uint8_t *src, size_t offset)
{
    worker_job *j = job_new(JOB_FRAME, 0);
    assert_non_null(j);
    tsdf_frame *f = &j->req.u.frame.frame;
    f->width = 640;
    f->height = 480;
    f->depth_format = TSDF_DEPTH_U16;
    f->depth = src + offset;
    f->depth_size_bytes = FRAME_BYTES;
    j->req.u.frame.depth_encoding = TSDF_DEPTH_ENC_RAW;
    return j;
}

static void test_prepare_depth(void **state)
{
    (void)state;
    uint8_t *src = malloc(FRAME_BYTES + 8);
    assert_non_null(src);
    for (size_t i = 0; i < FRAME_BYTES + 8; i++)
        src[i] = (uint8_t)(i * 131u + 7u);
    frame_pool *p;
    /* Room for exactly two frames. */
    assert_int_equal(frame_pool_create(2 * 640 * 1024, &p), TSDF_OK);

    /* Aligned and misaligned, both land in the pool with the same bytes. */
    worker_job *a = frame_job(src, 0), *b = frame_job(src, 1);
    assert_int_equal(job_prepare_images(a, p, NULL), TSDF_OK);
    assert_int_equal(job_prepare_images(b, p, NULL), TSDF_OK);
    assert_ptr_equal(a->depth_pool, p);
    assert_ptr_equal(b->depth_pool, p);
    assert_ptr_equal(a->req.u.frame.frame.depth, a->depth_aligned);
    assert_ptr_not_equal(a->depth_aligned, src);
    assert_memory_equal(a->depth_aligned, src, FRAME_BYTES);
    assert_memory_equal(b->depth_aligned, src + 1, FRAME_BYTES);
    assert_int_equal(stats_of(p).bytes_out, 2 * 640 * 1024);

    /* The pool is full: an aligned depth stays where it is, a misaligned
     * one gets ordinary memory; neither is refused. */
    worker_job *c = frame_job(src, 4), *d = frame_job(src, 3);
    assert_int_equal(job_prepare_images(c, p, NULL), TSDF_OK);
    assert_ptr_equal(c->req.u.frame.frame.depth, src + 4);
    assert_null(c->depth_aligned);
    assert_int_equal(job_prepare_images(d, p, NULL), TSDF_OK);
    assert_non_null(d->depth_aligned);
    assert_null(d->depth_pool);
    assert_int_equal((uintptr_t)d->req.u.frame.frame.depth % 4u, 0);
    assert_memory_equal(d->depth_aligned, src + 3, FRAME_BYTES);
    assert_int_equal(stats_of(p).fallbacks, 2);

    /* Without a pool an aligned depth is read in place, as before. */
    worker_job *e = frame_job(src, 8);
    assert_int_equal(job_prepare_images(e, NULL, NULL), TSDF_OK);
    assert_ptr_equal(e->req.u.frame.frame.depth, src + 8);

    /* A compressed payload that does not decode is refused and its
     * buffer given back. */
    job_free(a);
    worker_job *g = frame_job(src, 0);
    g->req.u.frame.depth_encoding = TSDF_DEPTH_ENC_ZSTD;
    g->req.u.frame.depth_coded = src;
    g->req.u.frame.depth_coded_bytes = 1000;
    g->req.u.frame.frame.depth = NULL;
    assert_int_equal(job_prepare_images(g, p, NULL), TSDF_EDEPTH_DECODE);
    assert_null(g->depth_aligned);
    assert_int_equal(stats_of(p).bytes_out, 640 * 1024);

    job_free(b);
    job_free(c);
    job_free(d);
    job_free(e);
    job_free(g);
    frame_pool_stats st = stats_of(p);
    assert_int_equal(st.bytes_out, 0);
    assert_int_equal(st.bytes_kept, 2 * 640 * 1024);
    frame_pool_destroy(p);
    free(src);
}

/* A colour image goes into a pool buffer of its own beside the depth, the
 * same bytes, and back with its job; without room it stays in place. */
static void test_prepare_rgb(void **state)
{
    (void)state;
    const size_t rgb_bytes = (size_t)640 * 480 * 3;
    uint8_t *src = malloc(FRAME_BYTES + 8), *rgb = malloc(rgb_bytes);
    assert_non_null(src);
    assert_non_null(rgb);
    for (size_t i = 0; i < FRAME_BYTES + 8; i++)
        src[i] = (uint8_t)(i * 7u + 1u);
    for (size_t i = 0; i < rgb_bytes; i++)
        rgb[i] = (uint8_t)(i * 13u + 5u);
    frame_pool *p;
    /* Room for one depth (640 KiB) and one colour image (960 KiB). */
    assert_int_equal(frame_pool_create((640 + 960) * 1024, &p), TSDF_OK);

    worker_job *a = frame_job(src, 1);
    a->req.u.frame.frame.rgb = rgb;
    a->req.u.frame.frame.rgb_size_bytes = rgb_bytes;
    assert_int_equal(job_prepare_images(a, p, NULL), TSDF_OK);
    assert_non_null(a->rgb_pinned);
    assert_ptr_equal(a->rgb_pool, p);
    assert_ptr_equal(a->req.u.frame.frame.rgb, a->rgb_pinned);
    assert_memory_equal(a->rgb_pinned, rgb, rgb_bytes);
    assert_memory_equal(a->depth_aligned, src + 1, FRAME_BYTES);
    assert_int_equal(stats_of(p).bytes_out, (640 + 960) * 1024);

    /* The pool is full: this one's colour stays in its message. */
    worker_job *b = frame_job(src, 3);
    b->req.u.frame.frame.rgb = rgb;
    assert_int_equal(job_prepare_images(b, p, NULL), TSDF_OK);
    assert_null(b->rgb_pinned);
    assert_ptr_equal(b->req.u.frame.frame.rgb, rgb);

    job_free(a);
    job_free(b);
    frame_pool_stats st = stats_of(p);
    assert_int_equal(st.bytes_out, 0);
    assert_int_equal(st.bytes_kept, (640 + 960) * 1024);
    frame_pool_destroy(p);
    free(src);
    free(rgb);
}

/* A depth the request thread copied into the job's own buffer (a shared
 * ring's, job_depth_buffer) is page-locked from the pool when it has room
 * and stays where it is: job_prepare_images copies it no second time. */
static void test_depth_buffer(void **state)
{
    (void)state;
    frame_pool *p;
    /* Room for one frame. */
    assert_int_equal(frame_pool_create(640 * 1024, &p), TSDF_OK);
    worker_job *a = frame_job(NULL, 0), *b = frame_job(NULL, 0);
    a->req.u.frame.frame.depth = b->req.u.frame.frame.depth = NULL;
    void *pa = job_depth_buffer(a, p);
    assert_non_null(pa);
    assert_ptr_equal(a->depth_pool, p);
    assert_int_equal(job_depth_bytes(a), FRAME_BYTES);
    assert_int_equal(a->req.u.frame.frame.depth_size_bytes, FRAME_BYTES);
    memset(pa, 0x5a, FRAME_BYTES);
    assert_int_equal(job_prepare_images(a, p, NULL), TSDF_OK);
    assert_ptr_equal(a->req.u.frame.frame.depth, pa);
    assert_ptr_equal(a->depth_aligned, pa);
    assert_int_equal(stats_of(p).bytes_out, 640 * 1024);
    assert_int_equal(stats_of(p).fallbacks, 0);
    /* No room left: ordinary memory, kept as well. */
    void *pb = job_depth_buffer(b, p);
    assert_non_null(pb);
    assert_null(b->depth_pool);
    assert_int_equal(job_prepare_images(b, p, NULL), TSDF_OK);
    assert_ptr_equal(b->req.u.frame.frame.depth, pb);
    job_free(a);
    job_free(b);
    assert_int_equal(stats_of(p).bytes_out, 0);
    frame_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_args),     cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_limit),           cmocka_unit_test(test_threads),
        cmocka_unit_test(test_prepare_depth),   cmocka_unit_test(test_prepare_rgb),
        cmocka_unit_test(test_depth_buffer),    cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_raycast_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
