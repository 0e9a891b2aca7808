"""The blank-screenshot test reads PNG scanlines without unfiltering them."""

from __future__ import annotations

import struct
import zlib

import pytest

from verifier.chromium.png import png_is_blank

#: Bytes per pixel by PNG colour type (8-bit samples).
BPP = {0: 1, 2: 3, 4: 2, 6: 4}


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _filter(kind: int, row: bytes, prior: bytes, bpp: int) -> bytes:
    out = bytearray()
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prior[i]
        c = prior[i - bpp] if i >= bpp else 0
        predictor = [0, a, b, (a + b) // 2, _paeth(a, b, c)][kind]
        out.append((x - predictor) % 256)
    return bytes(out)


def encode_png(pixels: list[list[bytes]], *, colour_type: int, filters: list[int]) -> bytes:
    """A PNG of ``pixels`` (rows of pixel byte strings), filtering row i with filters[i]."""
    height, width, bpp = len(pixels), len(pixels[0]), BPP[colour_type]
    raw, prior = bytearray(), bytes(width * bpp)
    for y, row_pixels in enumerate(pixels):
        row = b"".join(row_pixels)
        kind = filters[y % len(filters)]
        raw += bytes([kind]) + _filter(kind, row, prior, bpp)
        prior = row

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )


def uniform(colour: bytes, width: int = 7, height: int = 5) -> list[list[bytes]]:
    return [[colour] * width for _ in range(height)]


COLOURS = {0: b"\x9c", 2: b"\xff\x80\x01", 4: b"\x10\xfe", 6: b"\x0b\x10\x20\xff"}


@pytest.mark.parametrize("colour_type", sorted(COLOURS))
@pytest.mark.parametrize("filters", [[0], [1], [2], [3], [4], [4, 3, 2, 1, 0], [3, 4, 1, 0, 2]])
def test_uniform_image_is_blank(colour_type: int, filters: list[int]) -> None:
    png = encode_png(uniform(COLOURS[colour_type]), colour_type=colour_type, filters=filters)
    assert png_is_blank(png) is True


@pytest.mark.parametrize("filters", [[0], [1], [2], [3], [4], [2, 4, 3]])
@pytest.mark.parametrize(("x", "y"), [(0, 0), (6, 0), (0, 1), (3, 2), (6, 4)])
def test_one_different_pixel_is_not_blank(filters: list[int], x: int, y: int) -> None:
    pixels = uniform(b"\x00\x00\x00")
    pixels[y][x] = b"\x00\x00\x01"
    assert png_is_blank(encode_png(pixels, colour_type=2, filters=filters)) is False


@pytest.mark.parametrize("value", [0, 1, 127, 128, 255])
def test_edge_values_with_average_and_paeth(value: int) -> None:
    colour = bytes([value, 255 - value, value // 2, 255])
    for filters in ([3], [4], [3, 4]):
        png = encode_png(uniform(colour), colour_type=6, filters=filters)
        assert png_is_blank(png) is True


def test_unreadable_pngs_are_undecided() -> None:
    png = encode_png(uniform(b"\x01\x02\x03"), colour_type=2, filters=[0])
    sixteen_bit = png[:24] + b"\x10" + png[25:]
    assert png_is_blank(b"not a png") is None
    assert png_is_blank(png[:40]) is None
    assert png_is_blank(sixteen_bit) is None
