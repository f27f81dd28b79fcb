#!/usr/bin/python3
"""png_pixels.py - counts the pixels of a PNG screenshot that differ from a
background colour, inside a rectangle, for tests/test_live_view.sh.

    png_pixels.py FILE X0 Y0 R,G,B   prints: <differing> <total> <width>x<height>

Pure Python (zlib and struct only): Debian's python3 has no PIL by
default. Reads 8-bit RGB and RGBA, non-interlaced, as Chromium writes them.
A pixel differs when |dr| + |dg| + |db| > 40.
"""
import struct
import sys
import zlib


def read_png(path):
    with open(path, 'rb') as f:
        data = f.read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise ValueError(path + ': not a PNG')
    pos, idat, width = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b'IHDR':
            width, height, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError(path + ': only 8-bit RGB or RGBA, not interlaced')
            bpp = 3 if ctype == 2 else 4
        elif kind == b'IDAT':
            idat.append(body)
        elif kind == b'IEND':
            break
    raw = zlib.decompress(b''.join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ftype == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def main():
    path, x0, y0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bg = [int(v) for v in sys.argv[4].split(',')]
    width, height, bpp, rows = read_png(path)
    differing = total = 0
    for y in range(y0, height):
        line = rows[y]
        for x in range(x0, width):
            i = x * bpp
            total += 1
            if abs(line[i] - bg[0]) + abs(line[i + 1] - bg[1]) + abs(line[i + 2] - bg[2]) > 40:
                differing += 1
    print(differing, total, '%dx%d' % (width, height))


if __name__ == '__main__':
    main()
