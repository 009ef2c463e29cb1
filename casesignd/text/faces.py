"""The shipped TrueType faces (DejaVu Sans, regular and bold, under ``fonts/``):
registered with reportlab once per process, and the code points both draw.

Every glyph casesignd draws comes from fonts it ships, embedded as subsets; the
standard 14 PDF fonts are never used, so viewers cannot substitute them (PDF
32000-1 section 9.6.2 lets a reader pick its own face for a non-embedded standard
font). The East Asian face, loaded only when a text needs it, is
:mod:`casesignd.text.shaping`'s.
"""

from __future__ import annotations

import functools
import zlib
from pathlib import Path

from reportlab.pdfbase import pdfdoc, pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont

FONTS_DIR = Path(__file__).resolve().parent / "fonts"
FONT_REGULAR = "DejaVuSans"
FONT_BOLD = "DejaVuSans-Bold"
_FONT_FILES = {FONT_REGULAR: "DejaVuSans.ttf", FONT_BOLD: "DejaVuSans-Bold.ttf"}


def _flate_level_1() -> None:
    """Make reportlab deflate its streams at zlib level 1 instead of the default 6.

    Most of a one-line invoice is the two font subsets (about 35 KB each before
    compression); level 1 deflates them several times faster for about 4 % more
    bytes. reportlab offers no setting, so the shared filter object gets an
    instance attribute; the output stays deterministic (PDF 32000-1 section 7.4.4:
    any valid zlib stream is a valid FlateDecode stream).
    """

    def encode(text: str | bytes) -> bytes:
        return zlib.compress(text.encode("utf8") if isinstance(text, str) else text, 1)

    pdfdoc.PDFZCompress.encode = encode  # type: ignore[method-assign]


@functools.cache
def register_fonts() -> None:
    """Register the shipped TrueType fonts with reportlab, once per process."""
    _flate_level_1()
    for name, filename in _FONT_FILES.items():
        pdfmetrics.registerFont(TTFont(name, str(FONTS_DIR / filename)))
    pdfmetrics.registerFontFamily(
        FONT_REGULAR, normal=FONT_REGULAR, bold=FONT_BOLD, italic=FONT_REGULAR,
        boldItalic=FONT_BOLD,
    )  # fmt: skip


@functools.cache
def font_coverage() -> frozenset[int]:
    """Code points every shipped font has a glyph for (admission refuses the rest)."""
    register_fonts()
    maps = [pdfmetrics.getFont(name).face.charToGlyph for name in _FONT_FILES]
    common = set(maps[0])
    for m in maps[1:]:
        common &= set(m)
    # Code point 0 maps to .notdef in some cmaps; it is never printable.
    common.discard(0)
    return frozenset(common)
