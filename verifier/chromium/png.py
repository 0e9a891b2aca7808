"""Just enough PNG reading to tell whether a screenshot is one flat colour.

Pillow would do, but is not a dependency; Chromium's screenshots are 8-bit, non-interlaced
RGB or RGBA, which is all this reader needs to handle.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["png_is_blank"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_is_blank(png: bytes) -> bool | None:
    """Whether every pixel of an 8-bit, non-interlaced PNG has the same colour.

    Reads the filtered scanlines without unfiltering them: given that the row above is one
    colour ``c``, a row is all ``c`` exactly when its filtered bytes equal what each PNG
    filter produces for such a row, so one comparison per row decides it.

    Args:
        png: The PNG file's bytes.

    Returns:
        True if blank, False if not, None for a layout this reader does not handle.
    """
    if not png.startswith(_PNG_SIGNATURE):
        return None
    header, idat, pos = b"", [], len(_PNG_SIGNATURE)
    while pos + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        if kind == b"IHDR":
            header = png[pos + 8 : pos + 8 + length]
        elif kind == b"IDAT":
            idat.append(png[pos + 8 : pos + 8 + length])
        pos += 12 + length
    if len(header) != 13:
        return None
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour_type)
    if depth != 8 or interlace or bpp is None:
        return None
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error:
        return None
    stride = 1 + width * bpp
    if len(raw) != stride * height or height == 0:
        return None
    expected = _uniform_rows(raw[1 : 1 + bpp], width)
    for row in range(height):
        line = raw[row * stride : (row + 1) * stride]
        rows = expected[min(row, 1)]
        if line[0] >= len(rows) or line[1:] != rows[line[0]]:
            return False
    return True


def _uniform_rows(colour: bytes, width: int) -> tuple[list[bytes], list[bytes]]:
    """Filtered bytes of a row of one ``colour``, by filter type: first row, then later rows."""
    zero = bytes(len(colour))
    half = bytes(c - c // 2 for c in colour)
    rest = width - 1
    first = [colour * width, colour + zero * rest, colour * width, colour + half * rest]
    later = [colour * width, colour + zero * rest, zero * width, half + zero * rest]
    first.append(first[1])  # Paeth predicts the left pixel (or zero) in a first row.
    later.append(zero * width)  # Paeth predicts the same colour everywhere below it.
    return first, later
