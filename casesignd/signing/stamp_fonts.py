"""The stamp's fonts as PDF objects: subsets of the shipped TrueType faces (PDF 32000-1
§9.6.4, §9.8, §9.9, §9.10.3), each made once per glyph set and kept.

A stamp draws a few dozen glyphs of DejaVu Sans (and of Droid Sans Fallback for East
Asian text). Each face it uses is embedded as simple TrueType fonts of at most 255
glyphs (char code 0 is .notdef), their glyphs in code point order, so the same glyphs
give the same subset, whatever order the text used them in. The date's digits are
always in the first face's subset (:data:`ALWAYS`): the time changes every second,
and with it the stamp's glyphs would, so a subset made for one signature serves the
next. A subset's objects (the font, its descriptor, the font file and its ToUnicode
map) are made once per process for each glyph set and kept, up to
:data:`CACHE_SUBSETS` of them; a signature only numbers them.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import FF_NONSYMBOLIC, FF_SYMBOLIC, makeToUnicodeCMap

# What the stamp's date line may draw besides its label (stamp_lines' "Date ..."):
# kept in the subset whether this second's time uses them or not.
ALWAYS = "0123456789-:+ "
GLYPHS_PER_SUBSET = 255  # char codes 1..255 of a simple font; 0 is .notdef
CACHE_SUBSETS = 128  # about 10-25 KB each once compressed


@dataclass(frozen=True)
class Subset:
    """Some glyphs of one face: char code ``i + 1`` draws code point ``codes[i]``."""

    font: str
    codes: tuple[int, ...]


def subsets(font: str, used: Iterable[int], always: str = "") -> list[Subset]:
    """The subsets of ``font`` that draw the code points ``used`` (and ``always``)."""
    codes = sorted(set(used) | {ord(c) for c in always})
    return [Subset(font, tuple(codes[i:i + GLYPHS_PER_SUBSET]))
            for i in range(0, len(codes), GLYPHS_PER_SUBSET)] or [Subset(font, ())]


def encoding(subs: list[Subset]) -> dict[str, tuple[int, int]]:
    """Each character's (index of its subset in ``subs``, char code)."""
    return {chr(cp): (k, i + 1) for k, sub in enumerate(subs) for i, cp in enumerate(sub.codes)}


@functools.lru_cache(maxsize=CACHE_SUBSETS)
def _parts(sub: Subset) -> tuple[bytes, bytes, bytes, bytes]:
    """The subset's objects with their references left out: the font dictionary's
    head, the descriptor's head, the font file and the ToUnicode streams (deterministic)."""
    face = pdfmetrics.getFont(sub.font).face
    positions = [0, *sub.codes]
    tag = "".join(chr(65 + b % 26) for b in hashlib.sha256(
        repr((sub.font, sub.codes)).encode()).digest()[:6])
    base = f"{tag}+{(face.name + face.subfontNameX).decode('latin-1')}"
    widths = " ".join(_num(face.getCharWidth(cp)) for cp in positions)
    font = (f"<</Type /Font /Subtype /TrueType /BaseFont /{base} /FirstChar 0"
            f" /LastChar {len(positions) - 1} /Widths [{widths}]").encode()
    flags = face.flags & ~FF_NONSYMBOLIC | FF_SYMBOLIC  # §9.8.2: its own built-in encoding
    descriptor = (f"<</Type /FontDescriptor /FontName /{base} /Flags {flags}"
                  f" /FontBBox [{' '.join(_num(v) for v in face.bbox)}]"
                  f" /ItalicAngle {_num(face.italicAngle)} /Ascent {_num(face.ascent)}"
                  f" /Descent {_num(face.descent)} /CapHeight {_num(face.capHeight)}"
                  f" /StemV {_num(face.stemV)} /MissingWidth {_num(face.defaultWidth)}").encode()
    program = face.makeSubset(positions)
    file = stream(program, {"Length1": str(len(program))})
    cmap = stream(makeToUnicodeCMap(base, positions).encode())
    return font, descriptor, file, cmap


def objects(sub: Subset, new_num: Callable[[], int]) -> tuple[int, list[tuple[int, bytes]]]:
    """The subset as PDF objects numbered by ``new_num``: (the font's number, [(number,
    body)])."""
    font, descriptor, file, cmap = _parts(sub)
    font_num, desc_num, file_num, cmap_num = new_num(), new_num(), new_num(), new_num()
    return font_num, [
        (font_num, font + b" /ToUnicode %d 0 R /FontDescriptor %d 0 R>>" % (cmap_num, desc_num)),
        (desc_num, descriptor + b" /FontFile2 %d 0 R>>" % file_num),
        (file_num, file),
        (cmap_num, cmap),
    ]


def stream(data: bytes, entries: dict[str, str] | None = None, head: str = "") -> bytes:
    """A Flate-compressed stream object's body (§7.3.8, §7.4.4); ``head`` more entries
    written as they are."""
    more = "".join(f" /{k} {v}" for k, v in (entries or {}).items())
    return framed(deflated(data), head + more)


def framed(packed: bytes, head: str = "") -> bytes:
    """A stream object's body around ``packed``, data :func:`deflated` already;
    ``head`` its dictionary's other entries, written as they are."""
    return (f"<<{head} /Filter /FlateDecode /Length {len(packed)}>>\nstream\n".encode()
            + packed + b"\nendstream")


def deflated(data: bytes) -> bytes:
    """``data`` Flate-compressed (zlib format, level 6) with a window and hash tables
    no larger than it needs. zlib's defaults (a 32 KiB window, 128 KiB of hash
    tables) are made afresh for each call: for a stamp's few hundred bytes of text,
    setting them up cost ten times the compression (0.1-0.2 ms a signature)."""
    window = min(15, max(10, (len(data) - 1).bit_length()))
    packer = zlib.compressobj(6, zlib.DEFLATED, window, min(8, window - 7))
    return packer.compress(data) + packer.flush()


def _num(value: float) -> str:
    """A number as PDF syntax (§7.3.3): an integer when it is one, else three decimals."""
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
