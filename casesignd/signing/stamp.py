"""The visible signature: a stamp that says in words who signed, for whom, when and
under which policy, drawn as the signature widget's appearance (PDF 32000-1 §12.5.5,
§12.7.4.5).

The stamp is drawn the way the invoices are (:mod:`casesignd.text.shaping`): the same
fonts (DejaVu Sans, Droid Sans Fallback for the East Asian blocks), Arabic shaping and
the bidirectional algorithm, so a signer's name in any script the invoices support
reads as typed. reportlab lays it out on a page the size of the box, in its invariant
mode (same lines, same bytes) with its fonts embedded and subset to the glyphs used
(§9.6.4, §9.9); that page becomes a form XObject (§8.10) whose objects the signing
update carries, renumbered, so the stamp is part of the signed revision.

The text is fitted to the box: the largest size from :data:`MAX_SIZE_PT` down to
:data:`MIN_SIZE_PT` at which the wrapped lines fit; at the smallest size, lines that
would run out of the box are left out and the last one kept ends with an ellipsis.
Nothing is ever drawn outside the box, and the form's /BBox clips it besides.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Sequence
from typing import Any

from pypdf import PdfReader
from pypdf import generic as g

from casesignd.pdf.syntax import serialize

MAX_SIZE_PT = 10.0
MIN_SIZE_PT = 4.0
PADDING_PT = 2.0
LEADING = 1.2  # line height, as a multiple of the size


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
        wrapped = [piece for line in lines
                   for piece in shaping.wrap_lines(shaping.shaped(line), False, size,
                                                        max(limit_w, 1.0))]
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


def draw(lines: Sequence[str], width: float, height: float) -> bytes:
    """The stamp as a one-page PDF of ``width`` x ``height`` points (deterministic)."""
    from reportlab.pdfgen.canvas import Canvas

    from casesignd.text import faces, shaping

    faces.register_fonts() if _latin_only(lines) else shaping.register()
    size, wrapped = layout(lines, width, height)
    out = io.BytesIO()
    # Its first font DejaVu Sans: reportlab's default, Helvetica, would be a font the
    # stamp names without embedding (§9.6.2), drawn as each viewer substitutes it.
    canv = Canvas(out, pagesize=(width, height), invariant=1, pageCompression=1,
                  initialFontName=faces.FONT_REGULAR, initialFontSize=size)
    canv.setLineWidth(0.75)
    canv.setStrokeColorRGB(0.1, 0.2, 0.5)
    canv.rect(0.5, 0.5, width - 1, height - 1, stroke=1, fill=0)
    canv.setFillColorRGB(0.05, 0.1, 0.3)
    y = height - PADDING_PT - size
    for line in wrapped:
        base = shaping.direction(line)
        x = width - PADDING_PT if base == "R" else PADDING_PT
        shaping.draw_line(canv, x, y, line, False, size,
                               "RIGHT" if base == "R" else "LEFT", base)
        y -= size * LEADING
    canv.showPage()
    canv.save()
    return out.getvalue()


def _latin_only(lines: Sequence[str]) -> bool:
    return all(ord(c) < 0x2E80 for line in lines for c in line)


def as_xobject(pdf: bytes, new_num: Any, matrix: tuple[int, int, int, int] = (1, 0, 0, 1)
               ) -> tuple[int, list[tuple[int, bytes]]]:
    """The first page of ``pdf`` as a form XObject and every object it uses, numbered
    by ``new_num`` (a function giving the next free object number): (the form's
    number, [(number, the object's body)]). Streams keep their encoded bytes.
    ``matrix``: the form's rotation (its /Matrix, §8.10.1)."""
    reader = PdfReader(io.BytesIO(pdf))
    page = reader.pages[0]
    numbers: dict[int, int] = {}
    bodies: list[tuple[int, bytes]] = []
    form_num = new_num()

    def copy(obj: Any) -> Any:
        if isinstance(obj, g.IndirectObject):
            if obj.idnum not in numbers:
                numbers[obj.idnum] = new_num()
                target = obj.get_object()
                bodies.append((numbers[obj.idnum], _body(target, copy)))
            return g.IndirectObject(numbers[obj.idnum], 0, None)  # type: ignore[arg-type]
        if isinstance(obj, g.DictionaryObject):
            return g.DictionaryObject({k: copy(v) for k, v in obj.items()})
        if isinstance(obj, g.ArrayObject):
            return g.ArrayObject([copy(v) for v in obj])
        return obj

    contents: Any = page["/Contents"].get_object()
    if isinstance(contents, g.ArrayObject):  # reportlab writes one stream; join if not
        data = b"\n".join(c.get_object().get_data() for c in contents)
        head = g.DictionaryObject()
    else:
        data = contents._data
        head = g.DictionaryObject({k: v for k, v in contents.items() if k == "/Filter"})
    box = [float(v) for v in page.mediabox]
    head.update({
        g.NameObject("/Type"): g.NameObject("/XObject"),
        g.NameObject("/Subtype"): g.NameObject("/Form"),
        g.NameObject("/BBox"): g.ArrayObject([g.FloatObject(v) for v in box]),
        g.NameObject("/Matrix"): g.ArrayObject([g.NumberObject(v) for v in (*matrix, 0, 0)]),
        g.NameObject("/Resources"): copy(page["/Resources"]),
        g.NameObject("/Length"): g.NumberObject(len(data)),
    })
    bodies.insert(0, (form_num, _stream(head, data)))
    return form_num, bodies


def _stream(head: g.DictionaryObject, data: bytes) -> bytes:
    return serialize(head) + b"\nstream\n" + data + b"\nendstream"


def _body(obj: Any, copy: Any) -> bytes:
    if isinstance(obj, g.StreamObject):
        head = copy(g.DictionaryObject(obj))
        head[g.NameObject("/Length")] = g.NumberObject(len(obj._data))
        return _stream(head, obj._data)
    return serialize(copy(obj))
