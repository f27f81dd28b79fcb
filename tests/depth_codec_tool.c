/*
 * depth_codec_tool.c - the C depth codec (proto/tsdf_depth_codec.h) on
 * standard input and output, so that other implementations (the Python
 * package's tests) can check theirs against it both ways:
 *
 *   depth_codec_tool encode ENC FMT W H LEVEL < samples > payload
 *   depth_codec_tool decode ENC FMT W H       < payload > samples
 *
 * ENC raw | png | zstd | rvl, FMT u16 | f32, samples little-endian and
 * row-major, LEVEL 0 for the encoding's default. Exit 0, 1 when the codec
 * refuses (its reason on stderr), 2 for a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_depth_codec.h"
#include "tsdf_error.h"

/* All of standard input, at most max bytes (more is an error). */
static unsigned char *read_all(size_t max, size_t *n)
{
    size_t cap = 1 << 16;
    unsigned char *b = malloc(cap);
    *n = 0;
    while (b != NULL) {
        if (*n == cap) {
            if (cap > max) {
                free(b);
                return NULL;
            }
            unsigned char *g = realloc(b, cap * 2);
            if (g == NULL) {
                free(b);
                return NULL;
            }
            b = g;
            cap *= 2;
        }
        size_t got = fread(b + *n, 1, cap - *n, stdin);
        *n += got;
        if (got == 0)
            break;
    }
    return b;
}

int main(int argc, char **argv)
{
    tsdf_depth_encoding e;
    if (argc < 6 || (strcmp(argv[1], "encode") != 0 && strcmp(argv[1], "decode") != 0) ||
        tsdf_depth_encoding_parse(argv[2], strlen(argv[2]), &e) != TSDF_OK ||
        (strcmp(argv[3], "u16") != 0 && strcmp(argv[3], "f32") != 0)) {
        fprintf(stderr, "usage: depth_codec_tool encode|decode ENC u16|f32 W H [LEVEL]\n");
        return 2;
    }
    const int encode = strcmp(argv[1], "encode") == 0;
    const tsdf_depth_format fmt = strcmp(argv[3], "u16") == 0 ? TSDF_DEPTH_U16 : TSDF_DEPTH_F32;
    const uint32_t w = (uint32_t)strtoul(argv[4], NULL, 10),
                   h = (uint32_t)strtoul(argv[5], NULL, 10);
    const int level = encode && argc > 6 ? atoi(argv[6]) : 0;
    const size_t bytes = (size_t)w * h * (fmt == TSDF_DEPTH_U16 ? 2u : 4u);
    size_t n = 0;
    unsigned char *in = read_all(TSDF_PROTO_MAX_MESSAGE_BYTES, &n);
    if (in == NULL) {
        fprintf(stderr, "depth_codec_tool: cannot read the input\n");
        return 1;
    }
    int rc;
    if (encode) {
        tsdf_buf out;
        tsdf_buf_init(&out);
        rc = n == bytes ? tsdf_depth_encode(e, level, fmt, w, h, in, &out) : TSDF_EBAD_SIZE;
        if (rc == TSDF_OK)
            fwrite(out.data, 1, out.len, stdout);
        else
            fprintf(stderr, "depth_codec_tool: encode: %s\n", tsdf_strerror(rc));
        tsdf_buf_fini(&out);
    } else {
        tsdf_proto_error err;
        unsigned char *out = malloc(bytes ? bytes : 1);
        rc = out != NULL ? tsdf_depth_decode(e, fmt, w, h, in, n, out, bytes, &err) : TSDF_ENOMEM;
        if (rc == TSDF_OK)
            fwrite(out, 1, bytes, stdout);
        else
            fprintf(stderr, "depth_codec_tool: decode: %s: %s\n", tsdf_errname(rc),
                    rc == TSDF_ENOMEM ? "no memory" : err.message);
        free(out);
    }
    free(in);
    return rc == TSDF_OK ? 0 : 1;
}
