"""The visible signature: a stamp that says in words who signed, for whom, when and
under which policy, drawn as the signature widget's appearance (PDF 32000-1 §12.5.5,
§12.7.4.5).

The stamp is drawn the way the invoices are (:mod:`casesignd.text.shaping`): the same
fonts (DejaVu Sans, Droid Sans Fallback for the East Asian blocks), Arabic shaping and
the bidirectional algorithm, so a signer's name in any script the invoices support
reads as typed. The stamp is written straight as a form XObject (§8.10), its content
stream's text in the fonts of :mod:`casesignd.signing.stamp_fonts`, embedded and subset
to the glyphs used (§9.6.4, §9.9); the signing update carries those objects, so the
stamp is part of the signed revision. What does not change from one signature to the
next is made once per process and kept: a font subset's objects, each line's wrapping
and runs, and the whole drawing for the same lines (a policy's stamps within one
second); a signature then only numbers its objects (about 0.01 ms; 0.15 ms for a new
date line, against 3 ms for a page laid out by reportlab and read back by pypdf, the
way the stamp was first drawn).

A tenant's logo, when its policy asks, is drawn in the left part of the box
(:func:`logo_box`, an image XObject of :mod:`casesignd.signing.stamp_image`), the words
beside it.

The text is fitted to the box: the largest size from :data:`MAX_SIZE_PT` down to
:data:`MIN_SIZE_PT` at which the wrapped lines fit; at the smallest size, lines that
would run out of the box are left out and the last one kept ends with an ellipsis.
Nothing is ever drawn outside the box, and the form's /BBox clips it besides.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from casesignd.pdf.syntax import real_text
from casesignd.signing import stamp_fonts, stamp_image

MAX_SIZE_PT = 10.0
MIN_SIZE_PT = 4.0
PADDING_PT = 2.0
LEADING = 1.2  # line height, as a multiple of the size
LOGO_SHARE = 0.35  # of the stamp's width, at most, for the tenant's logo


def stamp_lines(*, subject: str, parties: Sequence[tuple[str, str]], signing_time: dt.datetime,
                policy_version: str, reason: str = "", location: str = "") -> tuple[str, ...]:
    """What the stamp says (pure): ``subject`` the service certificate's subject,
    ``parties`` (name, role) on whose behalf, the time with its UTC offset."""
    when = signing_time.isoformat(sep=" ", timespec="seconds")
    lines = [f"Signed by {subject}"]
    if parties:
        lines.append("On behalf of " + ", ".join(f"{name} ({role})" for name, role in parties))
    lines.append(f"Date {when}")
    if policy_version:
        lines.append(f"Policy {policy_version}")
    if reason:
        lines.append(f"Reason {reason}")
    if location:
        lines.append(f"Location {location}")
    return tuple(lines)


def layout(lines: Sequence[str], width: float, height: float) -> tuple[float, list[str]]:
    """The size and the wrapped lines (logical order) that fit a ``width`` x
    ``height`` box (pure, given the fonts)."""
    from casesignd.text import shaping

    limit_w, limit_h = width - 2 * PADDING_PT, height - 2 * PADDING_PT
    size = MAX_SIZE_PT
    while True:
        wrapped = [piece for line in lines for piece in _wrapped(line, size, max(limit_w, 1.0))]
        if len(wrapped) * size * LEADING <= limit_h or size <= MIN_SIZE_PT:
            break
        size = max(MIN_SIZE_PT, size - 0.5)
    room = max(0, int(limit_h // (size * LEADING)))
    if len(wrapped) > room:
        wrapped = wrapped[:room]
        if wrapped:
            last = wrapped[-1]
            while last and shaping.width(last + "…", False, size) > limit_w:
                last = last[:-1]
            wrapped[-1] = last + "…"
    return size, wrapped


# A policy's stamps repeat most of their lines (who signed, the policy, the reason, the
# place; the date within its second): each line is wrapped, and each wrapped line
# placed, once per process for each size and width tried, and kept.
LINES_KEPT = 1024


@functools.lru_cache(maxsize=LINES_KEPT)
def _wrapped(line: str, size: float, limit: float) -> tuple[str, ...]:
    """One of the stamp's lines wrapped to ``limit`` points at ``size`` (pure)."""
    from casesignd.text import shaping

    return tuple(shaping.wrap_lines(shaping.shaped(line), False, size, limit))


class _Recorder:
    """What :func:`casesignd.text.shaping.draw_line` asks of a canvas, recorded: each
    run of one font, where it starts and in which size."""

    def __init__(self) -> None:
        self.runs: list[tuple[float, float, str, float, str]] = []
        self._font = ("", 0.0)

    def setFont(self, name: str, size: float) -> None:  # noqa: N802  (reportlab's name)
        self._font = (name, size)

    def drawString(self, x: float, y: float, text: str) -> None:  # noqa: N802
        self.runs.append((x, y, self._font[0], self._font[1], text))


def _runs(lines: Sequence[str], width: float, height: float
          ) -> list[tuple[float, float, str, float, str]]:
    """The stamp's text as runs of one font each, placed (pure, given the fonts)."""
    size, wrapped = layout(lines, width, height)
    runs: list[tuple[float, float, str, float, str]] = []
    y = height - PADDING_PT - size
    for line in wrapped:
        runs.extend((x, y, font, size, text) for x, font, text in _placed(line, size, width))
        y -= size * LEADING
    return runs


@functools.lru_cache(maxsize=LINES_KEPT)
def _placed(line: str, size: float, width: float) -> tuple[tuple[float, str, str], ...]:
    """A wrapped line's runs of one font, as (x, font, text), aligned in a stamp
    ``width`` points wide (pure, given the fonts)."""
    from casesignd.text import faces, shaping

    faces.register_fonts()  # the East Asian face is registered by shaping when a text needs it
    canv = _Recorder()
    base = shaping.direction(line)
    x = width - PADDING_PT if base == "R" else PADDING_PT
    shaping.draw_line(canv, x, 0.0, line, False, size, "RIGHT" if base == "R" else "LEFT", base)
    return tuple((x, font, text) for x, _y, font, _size, text in canv.runs)


def logo_box(logo_px: tuple[int, int], width: float, height: float
             ) -> tuple[float, float, float, float] | None:
    """Where a logo of ``logo_px`` (width, height) pixels goes in a ``width`` x ``height``
    stamp: (x, y, w, h) in points, its proportions kept, in the left part of the box
    (at most :data:`LOGO_SHARE` of its width) and centred on its height; None when the
    box has no room for it (pure)."""
    room_w, room_h = width * LOGO_SHARE - PADDING_PT, height - 2 * PADDING_PT
    if room_w < 1 or room_h < 1:
        return None
    scale = min(room_w / logo_px[0], room_h / logo_px[1])
    w, h = logo_px[0] * scale, logo_px[1] * scale
    return PADDING_PT, (height - h) / 2, w, h


def form(lines: Sequence[str], width: float, height: float, new_num: Callable[[], int],
         matrix: tuple[int, int, int, int] = (1, 0, 0, 1), logo: bytes = b""
         ) -> tuple[int, list[tuple[int, bytes]]]:
    """The stamp as a form XObject of ``width`` x ``height`` points and the fonts it
    uses, numbered by ``new_num`` (a function giving the next free object number):
    (the form's number, [(number, the object's body)]). ``matrix``: the form's rotation
    (its /Matrix, §8.10.1); ``logo``: a PNG or JPEG drawn in the box's left part
    (:func:`logo_box`), the text beside it. Deterministic: same inputs, same bytes.
    The drawing is made once per process for the same inputs (:func:`_drawing`); a
    signature only numbers its objects."""
    drawing = _drawing(tuple(lines), width, height, matrix,
                       stamp_image.image(logo) if logo else None)
    form_num = new_num()
    bodies: list[tuple[int, bytes]] = []
    fonts = []
    for k, sub in enumerate(drawing.subsets):
        font_num, objs = stamp_fonts.objects(sub, new_num)
        fonts.append(b"/F%d %d 0 R" % (k + 1, font_num))
        bodies.extend(objs)
    images = ""
    if drawing.image is not None:
        image_num, objs = stamp_image.objects(drawing.image, new_num)
        images = f" /XObject <</Logo {image_num} 0 R>>"
        bodies.extend(objs)
    head = f"{drawing.head} /Resources <</Font <<{b' '.join(fonts).decode()}>>{images}>>"
    return form_num, [(form_num, stamp_fonts.framed(drawing.packed, head)), *bodies]


@dataclass(frozen=True)
class _Drawing:
    """A stamp's form XObject but for its object numbers: the start of its dictionary
    (before /Resources), its compressed content stream, the font subsets it shows and
    the logo it draws (None: none)."""

    head: str
    packed: bytes
    subsets: tuple[stamp_fonts.Subset, ...]
    image: stamp_image.Image | None


# The stamps of one policy within one second (the date line's) are drawn alike.
DRAWINGS_KEPT = 64


@functools.lru_cache(maxsize=DRAWINGS_KEPT)
def _drawing(lines: tuple[str, ...], width: float, height: float,
             matrix: tuple[int, int, int, int], image: stamp_image.Image | None) -> _Drawing:
    """What :func:`form` draws, without object numbers (pure, given the fonts)."""
    placed = logo_box((image.width, image.height), width, height) if image else None
    left = placed[0] + placed[2] if placed else 0.0
    runs = [(x + left, y, font, size, text)
            for x, y, font, size, text in _runs(lines, width - left, height)]
    used: dict[str, set[int]] = {}
    for _x, _y, font, _size, text in runs:
        used.setdefault(font, set()).update(map(ord, text))
    glyphs = tuple(sorted((font, frozenset(codes)) for font, codes in used.items()))
    ops = [b"q 0.75 w 0.1 0.2 0.5 RG 0.5 0.5 %s %s re S Q" % (_n(width - 1), _n(height - 1)),
           b"0.05 0.1 0.3 rg BT"]
    ops.extend(b"1 0 0 1 %s %s Tm" % (_n(x), _n(y)) + _shown(font, size, text, glyphs)
               for x, y, font, size, text in runs)
    ops.append(b"ET")
    if placed:  # §8.9.5: an image fills the unit square, scaled to its place by cm
        x, y, w, h = placed
        ops.append(b"q %s 0 0 %s %s %s cm /Logo Do Q" % (_n(w), _n(h), _n(x), _n(y)))
    head = (f" /Type /XObject /Subtype /Form /BBox [0 0 {real_text(width).decode()}"
            f" {real_text(height).decode()}]"
            f" /Matrix [{' '.join(str(v) for v in matrix)} 0 0]")
    return _Drawing(head, stamp_fonts.deflated(b"\n".join(ops)), _encoded(glyphs)[0],
                    image if placed else None)


@functools.lru_cache(maxsize=LINES_KEPT)
def _encoded(glyphs: tuple[tuple[str, frozenset[int]], ...]
             ) -> tuple[tuple[stamp_fonts.Subset, ...], dict[str, dict[str, tuple[int, int]]]]:
    """The font subsets that draw ``glyphs`` ((font, code points) by font name), and
    each font's characters as (index of the subset, char code) (pure)."""
    from casesignd.text import faces

    subsets: list[stamp_fonts.Subset] = []
    codes: dict[str, dict[str, tuple[int, int]]] = {}
    for font, used in glyphs:
        subs = stamp_fonts.subsets(font, used,
                                   stamp_fonts.ALWAYS if font == faces.FONT_REGULAR else "")
        codes[font] = {ch: (len(subsets) + k, code)
                       for ch, (k, code) in stamp_fonts.encoding(subs).items()}
        subsets.extend(subs)
    return tuple(subsets), codes


@functools.lru_cache(maxsize=LINES_KEPT)
def _shown(font: str, size: float, text: str, glyphs: tuple[tuple[str, frozenset[int]], ...]
           ) -> bytes:
    """A run's text shown in the subsets of :func:`_encoded` (``glyphs``): one
    Tf ... Tj per subset the run goes through (§9.4.3)."""
    codes = _encoded(glyphs)[1][font]
    shown = b""
    at = -1
    for ch in text:
        k, code = codes[ch]
        if k != at:
            shown += (b"> Tj" if at >= 0 else b"") + b" /F%d %s Tf <" % (k + 1, _n(size))
            at = k
        shown += b"%02X" % code
    return shown + (b"> Tj" if at >= 0 else b"")


def draw(lines: Sequence[str], width: float, height: float, logo: bytes = b"") -> bytes:
    """The stamp alone, as a one-page PDF of ``width`` x ``height`` points
    (deterministic): what :func:`form` draws, for a look at it."""
    numbers = iter(range(5, 1_000_000))  # 1-4: the catalog, pages, page and its content
    form_num, bodies = form(lines, width, height, lambda: next(numbers), logo=logo)
    objs = [(1, b"<</Type /Catalog /Pages 2 0 R>>"),
            (2, b"<</Type /Pages /Kids [4 0 R] /Count 1>>"),
            (3, stamp_fonts.stream(b"q /Stamp Do Q")),
            (4, b"<</Type /Page /Parent 2 0 R /MediaBox [0 0 %s %s] /Contents 3 0 R"
                b" /Resources <</XObject <</Stamp %d 0 R>>>>>>" % (_n(width), _n(height), form_num)),
            *sorted(bodies)]
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for num, body in objs:
        offsets.append(len(out))
        out += b"%d 0 obj\n" % num + body + b"\nendobj\n"
    xref, size = len(out), len(objs) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % at for at in offsets)
    out += b"trailer\n<</Size %d /Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def _n(value: float) -> bytes:
    """A number as content stream syntax (§7.3.3): at most three decimals."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return b"0" if text in ("-0", "") else text.encode()
