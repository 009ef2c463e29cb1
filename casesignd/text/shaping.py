"""Text as invoice-v4 and the signature stamp draw it: which font draws each character,
lines, and their visual order.

invoice-v3 draws every glyph with DejaVu Sans. invoice-v4 adds Droid Sans
Fallback for the East Asian blocks (Han, kana, Hangul, the full-width forms
such as U+FFE5, the yen sign ja-JP writes), and lays out right-to-left text:

- **Order.** A line is broken in logical order (as typed), then each line is put
  in visual order by the Unicode bidirectional algorithm (python-bidi), its
  paragraph direction taken from its first strong character (UAX #9 P2-P3), so
  an Arabic name reads right to left on an English invoice and a Latin order ID
  left to right on an Arabic one. Directional marks are dropped after ordering:
  they have no glyph.
- **Shaping.** Arabic letters take their joining forms (initial, medial, final,
  lam-alef ligatures) from arabic-reshaper before ordering; DejaVu Sans carries
  those presentation forms. Scripts that need more shaping than that (Devanagari
  and the other Indic scripts) are not in either font, so admission refuses them.
- **Fonts.** A character is drawn with DejaVu Sans when it has a glyph there,
  else with Droid Sans Fallback inside the East Asian blocks; :func:`coverage`
  is what admission accepts. A line is drawn as runs of one font each.

:class:`Text` is the flowable that draws such a text in a table cell: wrapped to
the cell's width, or on one line shrunk to fit (amounts, IDs).
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from typing import Any

from bidi import get_base_level, get_display
from bidi.mirror import MIRRORED
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import Flowable

from casesignd.text.faces import (
    FONT_BOLD,
    FONT_REGULAR,
    FONTS_DIR,
    font_coverage,
    register_fonts,
)

FONT_EAST_ASIAN = "DroidSansFallback"
_EAST_ASIAN_FILE = "DroidSansFallback.ttf"
# The blocks Droid Sans Fallback draws for invoice-v4: Hangul Jamo, CJK symbols and
# punctuation, kana, Hangul compatibility jamo, kana extensions, CJK extension A, CJK
# unified ideographs, Hangul syllables, half- and full-width forms.
EAST_ASIAN_BLOCKS = ((0x1100, 0x11FF), (0x3000, 0x30FF), (0x3130, 0x318F), (0x31F0, 0x31FF),
                     (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xFF00, 0xFFEF))
_RTL_CLASSES = frozenset({"R", "AL", "RLE", "RLO", "RLI"})
_ARABIC = re.compile("[\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff]")
_EAST_ASIAN_CHAR = re.compile("[" + "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in EAST_ASIAN_BLOCKS)
                              + "]")
# Marks that steer the bidirectional algorithm and draw nothing.
_BIDI_CONTROLS = dict.fromkeys(map(ord, "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e"
                                   "\u2066\u2067\u2068\u2069"))
# Of arabic-reshaper's ligatures only the four lam-alef ones, which Arabic writing
# requires and DejaVu Sans has; the others (U+FDF2 for "allah", say) are optional,
# and DejaVu Sans lacks most of them.
_LAM_ALEF = ("ARABIC LIGATURE LAM WITH ALEF", "ARABIC LIGATURE LAM WITH ALEF WITH HAMZA ABOVE",
             "ARABIC LIGATURE LAM WITH ALEF WITH HAMZA BELOW",
             "ARABIC LIGATURE LAM WITH ALEF WITH MADDA ABOVE")


class _Flags:
    """The reshaper's settings with their values kept: it reads five of them on every
    call through ConfigParser, which is most of its cost for a short text."""

    def __init__(self, section: Any) -> None:
        self._section = section
        self._values: dict[str, bool] = {}

    def getboolean(self, key: str) -> bool:
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = bool(self._section.getboolean(key))
        return value

    def get(self, key: str) -> Any:
        return self._section.get(key)


@functools.cache
def _reshaper() -> Any:
    """arabic-reshaper, made on first use (it imports fontTools: about 70 ms)."""
    import arabic_reshaper
    import arabic_reshaper.ligatures

    ligatures = {name: name in _LAM_ALEF for name, _ in arabic_reshaper.ligatures.LIGATURES}
    reshaper = arabic_reshaper.ArabicReshaper(configuration={
        "delete_harakat": False, "support_ligatures": True, **ligatures})
    reshaper.configuration = _Flags(reshaper.configuration)
    return reshaper


def _in_east_asian_block(cp: int) -> bool:
    return any(a <= cp <= b for a, b in EAST_ASIAN_BLOCKS)


@functools.cache
def register() -> None:
    """Register the East Asian face with reportlab, once per process.

    It is parsed (about 0.2 s: 3.4 MB, 33,000 glyphs) only when a text needs it, so a
    daemon whose invoices have no such characters never loads it."""
    register_fonts()
    pdfmetrics.registerFont(TTFont(FONT_EAST_ASIAN, str(FONTS_DIR / _EAST_ASIAN_FILE)))


@functools.cache
def _east_asian_glyphs() -> frozenset[int]:
    register()
    cmap = pdfmetrics.getFont(FONT_EAST_ASIAN).face.charToGlyph
    return frozenset(cp for cp in cmap if _in_east_asian_block(cp))


def warm() -> None:
    """Load what admission of any text may need (the East Asian face's glyphs), so
    that the first such text does not pay for it where it is admitted (the event loop).
    Blocking: about 0.2 s."""
    _joinable()
    _east_asian_glyphs()


def _drawable(cp: int) -> bool:
    return cp in font_coverage() or (_in_east_asian_block(cp) and cp in _east_asian_glyphs())


@functools.lru_cache(maxsize=4096)
def shaped(text: str) -> str:
    """``text`` with Arabic letters in their joining forms (logical order kept)."""
    return str(_reshaper().reshape(text)) if _ARABIC.search(text) else text


@functools.cache
def _joinable() -> tuple[frozenset[str], frozenset[str]]:
    """The Arabic letters arabic-reshaper shapes, and those of them the fonts have every
    joining form of (the lam-alef ligatures checked too)."""
    import arabic_reshaper.letters
    import arabic_reshaper.ligatures

    covered = font_coverage()  # DejaVu Sans: the East Asian face has no Arabic
    letters = arabic_reshaper.letters.LETTERS_ARABIC
    ligatures = dict(arabic_reshaper.ligatures.LIGATURES)
    assert all(ord(f) in covered for name in _LAM_ALEF for f in ligatures[name][1] if f)
    return frozenset(letters), frozenset(
        ch for ch, forms in letters.items()
        if ord(ch) in covered and all(ord(f) in covered for f in forms if f))


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that invoice-v4 cannot draw, else None.

    An Arabic letter is drawable when the fonts have each of its joining forms, so
    this needs no shaping."""
    covered, (letters, joinable) = font_coverage(), _joinable()
    for ch in text:
        cp = ord(ch)
        if ch in letters:
            if ch not in joinable:
                return ch
        elif cp not in covered and cp not in _BIDI_CONTROLS and not _drawable(cp):
            return ch
    return None


def direction(text: str) -> str:
    """The paragraph direction of a whole text, 'L' or 'R' (UAX #9 P2-P3)."""
    if not any(unicodedata.bidirectional(ch) in _RTL_CLASSES for ch in text):
        return "L"
    return "R" if get_base_level(text) % 2 else "L"


_LEVEL = re.compile(r"Level\(\s*(\d+),\s*\)")


def _levels(text: str, base: str) -> list[int] | None:
    """Each character's resolved embedding level, from python-bidi's own analysis
    (its debug report, levels by UTF-8 byte); None if the report cannot be read."""
    report = str(get_display(text, base_dir=base, debug=True))
    block = re.search(r"levels: \[(.*?)\n    \],", report, re.S)
    if block is None:
        return None
    by_byte = [int(n) for n in _LEVEL.findall(block.group(1))]
    out, at = [], 0
    for ch in text:
        if at >= len(by_byte):
            return None
        out.append(by_byte[at])
        at += len(ch.encode())
    return out if at == len(by_byte) else None


def _reordered(text: str, levels: list[int], base_level: int) -> list[int]:
    """Logical indices in visual order (UAX #9 L1 for the line's trailing white
    space, then L2)."""
    levels = list(levels)
    i = len(text)
    while i > 0 and text[i - 1].isspace():
        i -= 1
        levels[i] = base_level
    order = list(range(len(text)))
    lowest_odd = min((lv for lv in levels if lv % 2), default=None)
    if lowest_odd is None:
        return order
    for level in range(max(levels), lowest_odd - 1, -1):
        i = 0
        while i < len(order):
            if levels[order[i]] >= level:
                j = i
                while j < len(order) and levels[order[j]] >= level:
                    j += 1
                order[i:j] = order[i:j][::-1]
                i = j
            else:
                i += 1
    return order


def visual(line: str, base: str | None = None) -> str:
    """One line in drawing order: shaped, bidi-ordered with paragraph direction
    ``base`` (the line's own when None), mirrored, without directional marks.

    python-bidi orders the line but leaves UAX #9 L4 (mirrored glyphs) to its
    caller: a bracket at a right-to-left level is drawn as its mirror, so that
    "(Mohamed)" inside Arabic reads "(Mohamed)", not ")Mohamed(". The mirroring is
    applied only where the order made here from python-bidi's levels is its own."""
    if base != "R" and not any(unicodedata.bidirectional(ch) in _RTL_CLASSES for ch in line):
        return line.translate(_BIDI_CONTROLS)
    text = shaped(line)
    base = base or direction(text)
    shown = str(get_display(text, base_dir=base))
    if not any(ch in MIRRORED for ch in text):
        return shown.translate(_BIDI_CONTROLS)
    levels = _levels(text, base)
    if levels is None:
        return shown.translate(_BIDI_CONTROLS)
    order = _reordered(text, levels, 1 if base == "R" else 0)
    if "".join(text[i] for i in order) != shown:
        return shown.translate(_BIDI_CONTROLS)
    return "".join(MIRRORED.get(text[i], text[i]) if levels[i] % 2 else text[i]
                   for i in order).translate(_BIDI_CONTROLS)


def _font_of(ch: str, bold: bool) -> str:
    if ord(ch) in font_coverage():
        return FONT_BOLD if bold else FONT_REGULAR
    return FONT_EAST_ASIAN


def runs(text: str, bold: bool) -> list[tuple[str, str]]:
    """``text`` as (font name, chunk) runs of one font each."""
    if not _EAST_ASIAN_CHAR.search(text):  # all of it in DejaVu Sans (admission saw to it)
        return [(FONT_BOLD if bold else FONT_REGULAR, text)]
    register()
    out: list[tuple[str, str]] = []
    for ch in text:
        font = _font_of(ch, bold)
        if out and out[-1][0] == font:
            out[-1] = (font, out[-1][1] + ch)
        else:
            out.append((font, ch))
    return out


@functools.lru_cache(maxsize=8192)
def width(text: str, bold: bool, size: float) -> float:
    """The drawn width of ``text`` (logical order; shaping changes Arabic widths)."""
    register_fonts()  # once per process; a cached call after that
    return sum(pdfmetrics.stringWidth(chunk, font, size)
               for font, chunk in runs(shaped(text).translate(_BIDI_CONTROLS), bold))


def _tokens(text: str) -> list[tuple[str, bool]]:
    """Breakable pieces as (piece, space before): words, and East Asian characters."""
    out: list[tuple[str, bool]] = []
    for m in re.finditer(r"(\s*)(\S+)", text):
        space, word = bool(m.group(1)) and bool(out), m.group(2)
        if _EAST_ASIAN_CHAR.search(word):
            parts = [p for p in re.split(f"({_EAST_ASIAN_CHAR.pattern})", word) if p]
            out.append((parts[0], space))
            out.extend((p, False) for p in parts[1:])
        else:
            out.append((word, space))
    return out


def _split_long(word: str, bold: bool, size: float, limit: float) -> list[str]:
    """A word wider than ``limit`` in pieces that fit, never splitting off a mark.

    Each piece is the longest prefix that fits, found by bisection (a width is
    measured shaped, so a per-character sum would be wrong for Arabic)."""
    starts = [i for i, ch in enumerate(word) if i and unicodedata.combining(ch) == 0]
    pieces, at = [], 0
    while at < len(word):
        cuts = starts[bisect.bisect_right(starts, at):] + [len(word)]
        lo, hi = 0, len(cuts) - 1  # the longest cuts[k] whose piece fits; at least one
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if width(word[at:cuts[mid]], bold, size) <= limit:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(word[at:cuts[lo]])
        at = cuts[lo]
    return pieces


def wrap_lines(text: str, bold: bool, size: float, limit: float) -> list[str]:
    """``text`` broken into lines no wider than ``limit``, in logical order."""
    lines: list[str] = []
    current = ""
    for word, space in _tokens(text):
        candidate = f"{current} {word}" if current and space else current + word
        if width(candidate, bold, size) <= limit:
            current = candidate
            continue
        if current:
            lines.append(current)
        current = word
        if width(current, bold, size) > limit:
            *done, current = _split_long(current, bold, size, limit)
            lines.extend(done)
    if current or not lines:
        lines.append(current)
    return lines


def fit(text: str, bold: bool, size: float, limit: float, min_size: float) -> float:
    """The largest size <= ``size`` (not below ``min_size``) at which ``text`` fits."""
    w = width(text, bold, size)
    return size if w <= limit else max(min_size, size * limit / w)


def draw_line(canv: Any, x: float, y: float, line: str, bold: bool, size: float,
              align: str, base: str | None = None) -> None:
    """Draw one logical ``line`` at baseline ``y``: from ``x`` (LEFT) or up to it
    (RIGHT), in paragraph direction ``base`` (the line's own when None)."""
    pieces = runs(visual(line, base), bold)
    total = sum(pdfmetrics.stringWidth(chunk, font, size) for font, chunk in pieces)
    at = x - total if align == "RIGHT" else x - total / 2 if align == "CENTER" else x
    for font, chunk in pieces:
        canv.setFont(font, size)
        canv.drawString(at, y, chunk)
        at += pdfmetrics.stringWidth(chunk, font, size)


class Text(Flowable):  # type: ignore[misc]  # reportlab is untyped
    """A text in a table cell: wrapped to the width, or one line shrunk to fit."""

    def __init__(self, text: str, *, size: float, bold: bool = False, align: str = "LEFT",
                 one_line: bool = False, min_size: float = 4.0, color: Any = None) -> None:
        super().__init__()
        self.text, self.size, self.bold, self.align = text, size, bold, align
        self.one_line, self.min_size, self.color = one_line, min_size, color
        self._lines: list[str] = [text]
        self._size = size
        self._wrapped: float | None = None
        # One paragraph direction for all its lines: a wrapped line that starts with
        # a Latin word is still part of a right-to-left paragraph.
        self._base = direction(text)

    def wrap(self, avail_width: float, avail_height: float) -> tuple[float, float]:
        self._width = avail_width
        if self._wrapped != avail_width:  # a table asks again with the same width
            self._wrapped = avail_width
            if self.one_line:
                self._size = fit(self.text, self.bold, self.size, avail_width, self.min_size)
                self._lines = [self.text]
            else:
                self._lines = wrap_lines(self.text, self.bold, self.size, avail_width)
        return avail_width, len(self._lines) * self._size * 1.22

    def draw(self) -> None:
        leading = self._size * 1.22
        x = self._width if self.align == "RIGHT" else self._width / 2 \
            if self.align == "CENTER" else 0.0
        if self.color is not None:
            self.canv.setFillColor(self.color)
        for i, line in enumerate(self._lines):
            y = (len(self._lines) - i - 1) * leading + self._size * 0.25
            draw_line(self.canv, x, y, line, self.bold, self._size, self.align, self._base)
