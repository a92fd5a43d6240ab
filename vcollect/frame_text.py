"""Labels drawn on video frames with a 5x7 bitmap font in numpy (no imaging library needed).

The font holds what episode labels need (digits, a few letters and signs); other characters are drawn as
blanks. A label goes in a dark strip added below the frame, so nothing of the frame is hidden.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["GLYPH_HEIGHT", "GLYPH_WIDTH", "label_strip", "text_mask", "text_width"]

GLYPH_WIDTH = 6
"""Pixels one character takes across (5 of glyph, 1 of space) at scale 1."""

GLYPH_HEIGHT = 8
"""Pixels one line takes down (7 of glyph, 1 of space) at scale 1."""

_GLYPHS = {
    "0": ("01110", "10001", "10011", "10101", "11001", "10001", "01110"),
    "1": ("00100", "01100", "00100", "00100", "00100", "00100", "01110"),
    "2": ("01110", "10001", "00001", "00010", "00100", "01000", "11111"),
    "3": ("11110", "00001", "00001", "01110", "00001", "00001", "11110"),
    "4": ("00010", "00110", "01010", "10010", "11111", "00010", "00010"),
    "5": ("11111", "10000", "11110", "00001", "00001", "10001", "01110"),
    "6": ("00110", "01000", "10000", "11110", "10001", "10001", "01110"),
    "7": ("11111", "00001", "00010", "00100", "01000", "01000", "01000"),
    "8": ("01110", "10001", "10001", "01110", "10001", "10001", "01110"),
    "9": ("01110", "10001", "10001", "01111", "00001", "00010", "01100"),
    ".": ("00000", "00000", "00000", "00000", "00000", "01100", "01100"),
    "-": ("00000", "00000", "00000", "11111", "00000", "00000", "00000"),
    "+": ("00000", "00100", "00100", "11111", "00100", "00100", "00000"),
    ":": ("00000", "01100", "01100", "00000", "01100", "01100", "00000"),
    "/": ("00001", "00010", "00010", "00100", "01000", "01000", "10000"),
    "=": ("00000", "00000", "11111", "00000", "11111", "00000", "00000"),
    "#": ("01010", "01010", "11111", "01010", "11111", "01010", "01010"),
    "e": ("00000", "00000", "01110", "10001", "11111", "10000", "01110"),
    "p": ("00000", "00000", "11110", "10001", "11110", "10000", "10000"),
    "t": ("01000", "01000", "11100", "01000", "01000", "01001", "00110"),
    "s": ("00000", "00000", "01111", "10000", "01110", "00001", "11110"),
    "r": ("00000", "00000", "10110", "11001", "10000", "10000", "10000"),
    "n": ("00000", "00000", "10110", "11001", "10001", "10001", "10001"),
    "R": ("11110", "10001", "10001", "11110", "10100", "10010", "10001"),
    "k": ("10000", "10000", "10010", "10100", "11000", "10100", "10010"),
    "x": ("00000", "00000", "10001", "01010", "00100", "01010", "10001"),
}

_ORDER = " " + "".join(_GLYPHS)
_ATLAS = np.zeros((len(_ORDER), GLYPH_HEIGHT, GLYPH_WIDTH), dtype=bool)
for _i, _char in enumerate(_ORDER[1:], start=1):
    _ATLAS[_i, :7, :5] = np.array([[c == "1" for c in row] for row in _GLYPHS[_char]])
_CODES = np.zeros(128, dtype=np.intp)  # ASCII code -> atlas row (0: blank)
_CODES[[ord(c) for c in _ORDER]] = np.arange(len(_ORDER))


def text_width(text: str, scale: int = 1) -> int:
    """Pixels ``text`` takes across at ``scale``."""
    return len(text) * GLYPH_WIDTH * scale


def text_mask(text: str, scale: int = 1) -> np.ndarray:
    """The pixels of ``text`` (one line) as a bool array of (8 * scale, 6 * scale * len(text)).

    Args:
        text: The line; characters outside the font are blank.
        scale: Pixels per font pixel (an int >= 1).

    Returns:
        True where the text is drawn.
    """
    codes = np.frombuffer(text.encode("ascii", "replace"), dtype=np.uint8)
    glyphs = _ATLAS[_CODES[np.minimum(codes, 127)]]  # (n, 8, 6)
    mask = glyphs.transpose(1, 0, 2).reshape(GLYPH_HEIGHT, -1)
    if scale > 1:
        mask = mask.repeat(scale, axis=0).repeat(scale, axis=1)
    return mask


def label_strip(lines: Sequence[str], width: int, scale: int = 1) -> np.ndarray:
    """A dark (h, width, 3) uint8 strip with ``lines`` written in white, one under the other; a line wider
    than ``width`` is cut at the right edge.

    Args:
        lines: The lines of text.
        width: The strip's width in pixels (the frame's).
        scale: Pixels per font pixel.

    Returns:
        The strip, (len(lines) * 8 * scale + scale) rows high.
    """
    line_h = GLYPH_HEIGHT * scale
    strip = np.full((len(lines) * line_h + scale, width, 3), 24, dtype=np.uint8)
    for i, line in enumerate(lines):
        mask = text_mask(line, scale)[:, : max(0, width - scale)]
        top = scale + i * line_h
        strip[top : top + mask.shape[0], scale : scale + mask.shape[1]][mask] = 255
    return strip
