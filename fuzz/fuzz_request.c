/*
 * fuzz_request.c - libFuzzer target: the request decoder
 * (tsdf_proto_decode_request) and the envelope reader (tsdf_proto_peek),
 * the code every byte a client sends reaches first.
 *
 * Beyond "no crash" it checks that every code is a known one, that the
 * error detail is a terminated string, that peek agrees with a successful
 * decode, that payloads point inside the input, and that a decoded request
 * is one the encoder accepts and that survives a round trip unchanged:
 * decode(encode(decode(x))) == decode(x), and the second encoding is
 * byte-identical to the first.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "tsdf_proto.h"

/* Static: the structs are a few KiB, and the invariant compares them whole. */
static tsdf_request g_req, g_again;

static int inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
    const uint8_t *q = p;
    return q >= data && n <= size && q - data <= (ptrdiff_t)(size - n);
}

/* Checks that the payloads of a frame request lie in the message and
 * clears the pointers, so that two decodes of different buffers compare
 * equal with memcmp when their content is. */
static void check_and_clear_payloads(tsdf_request *r, const uint8_t *data, size_t size)
{
    if (r->type != TSDF_MSG_FRAME && r->type != TSDF_MSG_INTEGRATE)
        return;
    tsdf_frame *f = &r->u.frame.frame;
    size_t bps = f->depth_format == TSDF_DEPTH_U16 ? 2 : 4;
    FUZZ_CHECK(f->depth != NULL);
    FUZZ_CHECK(f->depth_size_bytes == (size_t)f->width * f->height * bps);
    FUZZ_CHECK(inside(f->depth, f->depth_size_bytes, data, size));
    if (f->rgb != NULL) {
        FUZZ_CHECK(f->rgb_size_bytes == (size_t)f->width * f->height * 3);
        FUZZ_CHECK(inside(f->rgb, f->rgb_size_bytes, data, size));
    }
    f->depth = NULL;
    f->rgb = NULL;
}

static int payloads_equal(const tsdf_request *a, const tsdf_request *b)
{
    if (a->type != TSDF_MSG_FRAME && a->type != TSDF_MSG_INTEGRATE)
        return 1;
    const tsdf_frame *fa = &a->u.frame.frame, *fb = &b->u.frame.frame;
    if (fa->depth_size_bytes != fb->depth_size_bytes ||
        memcmp(fa->depth, fb->depth, fa->depth_size_bytes) != 0)
        return 0;
    if ((fa->rgb == NULL) != (fb->rgb == NULL))
        return 0;
    return fa->rgb == NULL || (fa->rgb_size_bytes == fb->rgb_size_bytes &&
                               memcmp(fa->rgb, fb->rgb, fa->rgb_size_bytes) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsdf_msg_type peek_type;
    uint64_t peek_id;
    int peek_rc = tsdf_proto_peek(data, size, &peek_type, &peek_id);
    FUZZ_CHECK(fuzz_known_code(peek_rc));

    tsdf_proto_error err;
    int rc = tsdf_proto_decode_request(data, size, &g_req, &err);
    if (fuzz_check_result(rc, err.key, sizeof err.key, err.message, sizeof err.message))
        return 0;
    FUZZ_CHECK(peek_rc == TSDF_OK);
    FUZZ_CHECK(peek_type == g_req.type && peek_id == g_req.id);
    FUZZ_CHECK(g_req.type >= TSDF_MSG_FRAME && g_req.type <= TSDF_MSG_PING);
    FUZZ_CHECK(memchr(g_req.map, '\0', sizeof g_req.map) != NULL);

    tsdf_buf first, second;
    tsdf_buf_init(&first);
    tsdf_buf_init(&second);
    rc = tsdf_proto_encode_request(&g_req, &first);
    /* What the decoder accepts the encoder must accept: the client library
     * refuses to send anything the daemon would refuse, and vice versa. */
    FUZZ_CHECK(rc == TSDF_OK);
    rc = tsdf_proto_decode_request(first.data, first.len, &g_again, &err);
    FUZZ_CHECK(rc == TSDF_OK);
    FUZZ_CHECK(payloads_equal(&g_req, &g_again));
    FUZZ_CHECK(tsdf_proto_encode_request(&g_again, &second) == TSDF_OK);
    FUZZ_CHECK(second.len == first.len && memcmp(second.data, first.data, first.len) == 0);

    check_and_clear_payloads(&g_req, data, size);
    check_and_clear_payloads(&g_again, first.data, first.len);
    FUZZ_CHECK(memcmp(&g_req, &g_again, sizeof g_req) == 0);
    tsdf_buf_fini(&first);
    tsdf_buf_fini(&second);
    return 0;
}
