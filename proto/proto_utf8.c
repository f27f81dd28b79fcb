/*
 * proto_utf8.c - UTF-8 checks for the wire codec (see proto_utf8.h).
 */
#include "proto_utf8.h"

#include <stdint.h>
#include <string.h>

/* Reads one sequence at p (n > 0 bytes available). Returns its length and
 * sets *cp when it is valid; returns 0 when it is not, with *bad set to the
 * length of its maximal invalid subpart (at least 1). The ranges of the
 * second byte are those of Unicode's table 3-7: they exclude overlong forms
 * (after E0 and F0), surrogates (after ED) and code points past U+10FFFF
 * (after F4). */
static size_t utf8_seq(const unsigned char *p, size_t n, uint32_t *cp, size_t *bad)
{
    unsigned char b = p[0], lo = 0x80, hi = 0xbf;
    size_t len;
    uint32_t c;

    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b >= 0xc2 && b <= 0xdf) {
        len = 2;
        c = b & 0x1fu;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3;
        c = b & 0x0fu;
        if (b == 0xe0)
            lo = 0xa0;
        else if (b == 0xed)
            hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4;
        c = b & 0x07u;
        if (b == 0xf0)
            lo = 0x90;
        else if (b == 0xf4)
            hi = 0x8f;
    } else {
        *bad = 1; /* a continuation byte, C0, C1 or F5..FF */
        return 0;
    }
    for (size_t k = 1; k < len; k++) {
        if (k >= n || p[k] < lo || p[k] > hi) {
            *bad = k;
            return 0;
        }
        c = (c << 6) | (p[k] & 0x3fu);
        lo = 0x80;
        hi = 0xbf;
    }
    *cp = c;
    return len;
}

int proto_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t len = utf8_seq(p + i, n - i, &cp, &bad);
        if (len == 0)
            return 0;
        i += len;
    }
    return 1;
}

size_t proto_utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    size_t n = strlen(s), i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t len = utf8_seq(p + i, n - i, &cp, &bad);
        /* Controls would let a message rewrite a log line or drive the
         * terminal that shows it (C1 0x9b is a CSI, like ESC [). */
        if (len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
            p[o++] = '?';
            i += len ? len : bad;
            continue;
        }
        /* o <= i throughout, so the copy only ever moves bytes down. */
        memmove(p + o, p + i, len);
        o += len;
        i += len;
    }
    /* Clear what the repair freed too, not only the terminator: a struct
     * that holds the text then has no trace of the bytes it replaced, and
     * decoding its re-encoding gives the same bytes, not just the same
     * string (the reply fuzz target compares whole structs). */
    memset(p + o, 0, n - o + 1);
    return o;
}
