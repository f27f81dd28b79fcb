/*
 * fuzz_png.c - libFuzzer target: the PNG reader of the depth images
 * (tsdf_png_info, tsdf_png_read_gray16 over libpng, scenes/tsdf_png.c).
 *
 * The reader takes a path, so each input goes through a scratch file
 * (tmpfs where there is one). Every input is read as it is and, when that
 * changes it, with its chunk CRCs repaired (fuzz_png_repair), so that
 * mutations reach the header and image checks behind libpng's CRC check.
 *
 * Invariants beyond "no crash": known codes only; what read_gray16
 * accepts, info describes as 16-bit single-channel of the same size, within
 * the limits and the buffer; TSDF_EBAD_SIZE only for an image larger than
 * the buffer; and an image that reads writes back with the project's writer
 * and reads again to the same samples.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tsdf_error.h"
#include "tsdf_png.h"
#include "tsdf_types.h"

/* Samples the reader may fill: 1 Mi keeps a run within milliseconds. */
#define FUZZ_PNG_CAPACITY (1u << 20)
/* Images up to this many pixels are also written back and compared. */
#define FUZZ_PNG_ROUNDTRIP_PIXELS (1u << 16)

static uint16_t g_pixels[FUZZ_PNG_CAPACITY];
static uint16_t g_again[FUZZ_PNG_ROUNDTRIP_PIXELS];

static void read_one(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("in.png", data, size);
    uint32_t iw = 0, ih = 0;
    int depth = 0, channels = 0;
    int info_rc = tsdf_png_info(path, &iw, &ih, &depth, &channels);
    FUZZ_CHECK(fuzz_known_code(info_rc));

    uint32_t w = 0, h = 0;
    int rc = tsdf_png_read_gray16(path, g_pixels, FUZZ_PNG_CAPACITY, &w, &h);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc == TSDF_EBAD_SIZE) {
        FUZZ_CHECK(info_rc == TSDF_OK);
        FUZZ_CHECK((uint64_t)w * h > FUZZ_PNG_CAPACITY);
    }
    if (rc != TSDF_OK)
        return;
    FUZZ_CHECK(info_rc == TSDF_OK);
    FUZZ_CHECK(iw == w && ih == h && depth == 16 && channels == 1);
    FUZZ_CHECK(w > 0 && h > 0 && w <= TSDF_MAX_IMAGE_DIM && h <= TSDF_MAX_IMAGE_DIM);
    FUZZ_CHECK((uint64_t)w * h <= FUZZ_PNG_CAPACITY);

    size_t n = (size_t)w * h;
    if (n > FUZZ_PNG_ROUNDTRIP_PIXELS)
        return;
    const char *copy = fuzz_path("copy.png");
    FUZZ_CHECK(tsdf_png_write_gray16(copy, g_pixels, w, h) == TSDF_OK);
    uint32_t w2 = 0, h2 = 0;
    FUZZ_CHECK(tsdf_png_read_gray16(copy, g_again, FUZZ_PNG_ROUNDTRIP_PIXELS, &w2, &h2) == TSDF_OK);
    FUZZ_CHECK(w2 == w && h2 == h);
    FUZZ_CHECK(memcmp(g_again, g_pixels, n * sizeof *g_pixels) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_one(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    FUZZ_CHECK(fixed != NULL);
    memcpy(fixed, data, size);
    fuzz_png_repair(fixed, size);
    if (memcmp(fixed, data, size) != 0)
        read_one(fixed, size);
    free(fixed);
    return 0;
}
