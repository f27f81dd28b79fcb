/*
 * fuzz_depth.c - libFuzzer target: the decoders of compressed depth on the
 * wire (tsdf_depth_decode of proto/tsdf_depth_codec.h: png, zstd, rvl and
 * raw), which take a frame's payload from the network.
 *
 * An input is a 6-byte header, then the payload:
 *   byte 0      the encoding (mod TSDF_DEPTH_ENC_COUNT)
 *   byte 1      the sample format (bit 0: f32, else u16)
 *   bytes 2..3  width - 1, bytes 4..5 height - 1 (little-endian, mod 128:
 *               small images keep a run fast; the limits are the frame's
 *               business and tested in tests/test_depth_codec.c)
 *
 * Invariants beyond "no crash": known codes only, a terminated error
 * detail with a message on every error; png and rvl refuse f32 with
 * TSDF_EINVAL; a payload that decodes re-encodes with the same encoding and
 * decodes again to the same samples (the codecs are lossless); raw decodes
 * only a payload of exactly width x height samples.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tsdf_depth_codec.h"
#include "tsdf_error.h"
#include "tsdf_proto.h"

#define FUZZ_DEPTH_MAX_DIM 128u

static uint8_t g_out[FUZZ_DEPTH_MAX_DIM * FUZZ_DEPTH_MAX_DIM * 4];
static uint8_t g_again[FUZZ_DEPTH_MAX_DIM * FUZZ_DEPTH_MAX_DIM * 4];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6)
        return 0;
    tsdf_depth_encoding enc = (tsdf_depth_encoding)(data[0] % TSDF_DEPTH_ENC_COUNT);
    tsdf_depth_format fmt = (data[1] & 1) ? TSDF_DEPTH_F32 : TSDF_DEPTH_U16;
    uint32_t w = 1 + ((uint32_t)(data[2] | data[3] << 8) % FUZZ_DEPTH_MAX_DIM);
    uint32_t h = 1 + ((uint32_t)(data[4] | data[5] << 8) % FUZZ_DEPTH_MAX_DIM);
    size_t bytes = (size_t)w * h * (fmt == TSDF_DEPTH_F32 ? 4u : 2u);
    const uint8_t *payload = data + 6;
    size_t n = size - 6;

    tsdf_proto_error err;
    memset(&err, 0, sizeof err);
    int rc = tsdf_depth_decode(enc, fmt, w, h, payload, n, g_out, bytes, &err);
    if (fuzz_check_result(rc, err.key, sizeof err.key, err.message, sizeof err.message)) {
        if (!tsdf_depth_encoding_allows(enc, fmt))
            FUZZ_CHECK(rc == TSDF_EINVAL);
        return 0;
    }
    FUZZ_CHECK(tsdf_depth_encoding_allows(enc, fmt));
    if (enc == TSDF_DEPTH_ENC_RAW)
        FUZZ_CHECK(n == bytes);

    /* Lossless: what decoded encodes and decodes again to the same bytes. */
    tsdf_buf b;
    tsdf_buf_init(&b);
    FUZZ_CHECK(tsdf_depth_encode(enc, 0, fmt, w, h, g_out, &b) == TSDF_OK);
    FUZZ_CHECK(tsdf_depth_decode(enc, fmt, w, h, b.data, b.len, g_again, bytes, NULL) == TSDF_OK);
    FUZZ_CHECK(memcmp(g_out, g_again, bytes) == 0);
    tsdf_buf_fini(&b);
    return 0;
}
