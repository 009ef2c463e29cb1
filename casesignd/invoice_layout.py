"""Invoice templates and rendering (reportlab platypus).

Templates are versioned code. :data:`TEMPLATES` maps a ``template_version`` to a
:class:`Template`; a job renders with the version it was admitted with. A
version's code path is frozen once released: ``invoice-v4`` gets its own
``_v4_*`` functions and its own registry entry, and never edits ``_v3_*``. The
shared helpers below (fonts, the numbered canvas, money) may only grow.

Rendering is deterministic: reportlab's invariant mode fixes the creation date
and the document ID, so the same input and issuer give the same bytes. The issue
date comes from the input (``order.issued_on``), never from the clock.

Every glyph comes from the TrueType fonts shipped under ``casesignd/fonts``
(DejaVu Sans), embedded as subsets; the standard 14 PDF fonts are never used, so
viewers cannot substitute them (PDF 32000-1 section 9.6.2 lets a reader pick its
own face for a non-embedded standard font).

:func:`render_to_file` runs in the CPU process pool: it is a top-level picklable
function, and fonts and styles are set up once per process, on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from . import money
from .errors import PermanentJobError

FONTS_DIR = Path(__file__).resolve().parent / "fonts"
FONT_REGULAR = "DejaVuSans"
FONT_BOLD = "DejaVuSans-Bold"
_FONT_FILES = {FONT_REGULAR: "DejaVuSans.ttf", FONT_BOLD: "DejaVuSans-Bold.ttf"}


# --- shared, append-only helpers -----------------------------------------------------


@functools.cache
def register_fonts() -> None:
    """Register the shipped TrueType fonts with reportlab, once per process."""
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


class NumberedCanvas(Canvas):
    """A canvas that knows the page count when it draws each page's footer.

    Pages are kept until ``save`` so "Page X of Y" can be written with the final
    Y: layout runs once, only the footer is drawn late.
    """

    footer_font = FONT_REGULAR
    footer_size = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The canvas's initial font would otherwise be Helvetica, a standard-14
        # font that reportlab declares on every page without embedding it.
        if not kwargs.get("initialFontName"):
            kwargs["initialFontName"] = FONT_REGULAR
            kwargs["initialFontSize"] = 9
            kwargs["initialLeading"] = 11
        super().__init__(*args, **kwargs)
        self._pages: list[dict[str, Any]] = []
        self.page_count = 0

    def showPage(self) -> None:  # noqa: N802 - reportlab's name
        self._pages.append(dict(self.__dict__))
        self._startPage()

    def save(self) -> None:
        pages = self._pages
        for state in pages:
            # The saved state carries the attributes of its own page (page_count too).
            self.__dict__.update(state)
            self._draw_page_number(len(pages))
            super().showPage()
        self.page_count = len(pages)
        super().save()

    def _draw_page_number(self, count: int) -> None:
        width, _ = self._pagesize
        self.setFont(self.footer_font, self.footer_size)
        self.drawRightString(width - 18 * mm, 10 * mm, f"Page {self._pageNumber} of {count}")


def _fits(text: str, font: str, size: float, width: float) -> bool:
    return pdfmetrics.stringWidth(text, font, size) <= width


def _para(text: str, style: ParagraphStyle) -> Paragraph:
    return Paragraph(escape(text), style)


# --- invoice-v3 (released: do not change its output) ---------------------------------

_V3_MARGIN = 18 * mm
_V3_COLS = (12 * mm, None, 20 * mm, 36 * mm, 38 * mm)  # #, description, qty, unit, amount
_V3_PAD = 4  # points of cell padding each side
_V3_BODY = 9
_V3_GREY = colors.HexColor("#555555")
# Table cells default to Helvetica (a standard-14 font) even when they hold
# paragraphs; naming the font keeps every declared font embedded.
_V3_TABLE_FONT = [("FONT", (0, 0), (-1, -1), FONT_REGULAR, _V3_BODY)]


@functools.cache
def _v3_styles() -> dict[str, ParagraphStyle]:
    register_fonts()
    base = ParagraphStyle("v3-body", fontName=FONT_REGULAR, fontSize=_V3_BODY, leading=11)
    return {
        "body": base,
        "bold": ParagraphStyle("v3-bold", parent=base, fontName=FONT_BOLD),
        "title": ParagraphStyle(
            "v3-title", parent=base, fontName=FONT_BOLD, fontSize=18, leading=22,
            alignment=TA_RIGHT,
        ),
        "right": ParagraphStyle("v3-right", parent=base, alignment=TA_RIGHT),
        "right_bold": ParagraphStyle(
            "v3-right-bold", parent=base, fontName=FONT_BOLD, alignment=TA_RIGHT
        ),
        "label": ParagraphStyle(
            "v3-label", parent=base, fontSize=7.5, leading=9, textColor=_V3_GREY
        ),
    }  # fmt: skip


def _v3_widths(frame_width: float) -> list[float]:
    fixed = sum(w for w in _V3_COLS if w is not None)
    return [frame_width - fixed if w is None else w for w in _V3_COLS]


def _v3_cell(text: str, width: float, key: str = "right") -> str | Paragraph:
    """A cell: a plain string when it fits on one line, else a wrapping paragraph.

    Plain strings are several times cheaper to lay out than paragraphs; the table
    style must give the string cell the same font as the ``key`` style.
    """
    style = _v3_styles()[key]
    if "\n" not in text and _fits(text, style.fontName, style.fontSize, width - 2 * _V3_PAD):
        return text
    return _para(text, style)


def _v3_header(invoice: dict[str, Any], issuer: dict[str, Any], width: float) -> list[Any]:
    order = invoice["order"]
    left = [(str(issuer.get("name", "")), "bold")]
    left += [(str(line), "body") for line in issuer.get("address", [])]
    right = [
        ("INVOICE", "title"),
        (f"Invoice no. {order['order_id']}", "right"),
        (f"Issue date {order['issued_on']}", "right"),
    ]
    n = max(len(left), len(right))
    left += [("", "body")] * (n - len(left))
    right += [("", "right")] * (n - len(right))
    widths = [width * 0.55, width * 0.45]
    rows, cmds = [], [*_V3_TABLE_FONT, ("VALIGN", (0, 0), (-1, -1), "TOP"),
                      ("TOPPADDING", (0, 0), (-1, -1), 1),
                      ("BOTTOMPADDING", (0, 0), (-1, -1), 1)]  # fmt: skip
    for r, pair in enumerate(zip(left, right, strict=True)):
        row = []
        for c, (text, key) in enumerate(pair):
            style = _v3_styles()[key]
            row.append(_v3_cell(text, widths[c], key))
            cmds.append(("FONT", (c, r), (c, r), style.fontName, style.fontSize, style.leading))
            cmds.append(("ALIGN", (c, r), (c, r), "RIGHT" if style.alignment == TA_RIGHT else "LEFT"))
        rows.append(row)
    head = Table(rows, colWidths=widths, style=TableStyle(cmds))
    name_w = width
    bill_to = Table(
        [["BILL TO"], [_v3_cell(order["student_name"], name_w, "bold")]],
        colWidths=[name_w],
        style=TableStyle([
            ("FONT", (0, 0), (0, 0), FONT_REGULAR, 7.5, 9),
            ("TEXTCOLOR", (0, 0), (0, 0), _V3_GREY),
            ("FONT", (0, 1), (0, 1), FONT_BOLD, _V3_BODY, 11),
            ("TOPPADDING", (0, 0), (-1, -1), 1),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
        ]),
    )  # fmt: skip
    return [head, Spacer(1, 8 * mm), bill_to, Spacer(1, 6 * mm)]


def _v3_items(
    invoice: dict[str, Any], lines: Sequence[Decimal], width: float
) -> Table:
    order = invoice["order"]
    cur = order["currency"]
    widths = _v3_widths(width)
    rows: list[list[Any]] = [["#", "Description", "Qty", "Unit price", "Amount"]]
    for i, (item, amount) in enumerate(zip(order["items"], lines, strict=True), start=1):
        rows.append([
            _v3_cell(str(i), widths[0], "body"),
            _v3_cell(item["description"], widths[1], "body"),
            _v3_cell(f"{item['quantity']:,}", widths[2]),
            _v3_cell(money.format_amount(Decimal(item["unit_price"]), cur), widths[3]),
            _v3_cell(money.format_amount(amount, cur), widths[4]),
        ])  # fmt: skip
    style = TableStyle([
        ("FONT", (0, 0), (-1, 0), FONT_BOLD, _V3_BODY),
        ("FONT", (0, 1), (-1, -1), FONT_REGULAR, _V3_BODY),
        ("LINEBELOW", (0, 0), (-1, 0), 0.8, colors.black),
        ("LINEBELOW", (0, 1), (-1, -1), 0.25, colors.HexColor("#BBBBBB")),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
        ("LEFTPADDING", (0, 0), (-1, -1), _V3_PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _V3_PAD),
    ])  # fmt: skip
    # repeatRows=1: the header row is drawn again on every page the table splits to.
    return Table(rows, colWidths=widths, repeatRows=1, style=style, splitByRow=1)


def _v3_totals(invoice: dict[str, Any], totals: money.Totals, width: float) -> Table:
    cur = invoice["order"]["currency"]
    tax = invoice.get("tax") or {}
    rows: list[list[Any]] = [["Subtotal", money.format_amount(totals.subtotal, cur)]]
    if totals.tax is not None:
        label = f"{tax.get('label') or 'Tax'} {money.format_rate(Decimal(tax['rate']))}"
        rows.append([label, money.format_amount(totals.tax, cur)])
    rows.append(["Total", money.format_amount(totals.total, cur)])
    label_w, amount_w = width * 0.25, width * 0.30
    last = len(rows) - 1
    rows = [[_v3_cell(a, label_w, "right_bold" if i == last else "right"),
             _v3_cell(b, amount_w, "right_bold" if i == last else "right")]
            for i, (a, b) in enumerate(rows)]  # fmt: skip
    return Table(
        rows,
        colWidths=[label_w, amount_w],
        hAlign="RIGHT",
        style=TableStyle([
            ("FONT", (0, 0), (-1, -1), FONT_REGULAR, _V3_BODY),
            ("FONT", (0, -1), (-1, -1), FONT_BOLD, _V3_BODY),
            ("ALIGN", (0, 0), (-1, -1), "RIGHT"),
            ("LINEABOVE", (0, -1), (-1, -1), 0.8, colors.black),
            ("LEFTPADDING", (0, 0), (-1, -1), _V3_PAD),
            ("RIGHTPADDING", (0, 0), (-1, -1), _V3_PAD),
        ]),
    )  # fmt: skip


def _v3_render(invoice: dict[str, Any], issuer: dict[str, Any], out: Any) -> int:
    register_fonts()
    order = invoice["order"]
    cur = order["currency"]
    tax = invoice.get("tax") or {}
    rate = Decimal(tax["rate"]) if tax.get("rate") else None
    items = [(it["quantity"], Decimal(it["unit_price"])) for it in order["items"]]
    totals = money.totals(items, cur, rate)

    doc = SimpleDocTemplate(
        out,
        pagesize=A4,
        leftMargin=_V3_MARGIN,
        rightMargin=_V3_MARGIN,
        topMargin=_V3_MARGIN,
        bottomMargin=_V3_MARGIN,
        title=f"Invoice {order['order_id']}",
        author=str(issuer.get("name", "")),
        subject=f"Invoice {order['order_id']} for {order['student_name']}",
        creator="casesignd invoice-v3",
        producer="casesignd",
        invariant=1,  # fixed dates and document ID: same input, same bytes
    )
    width = doc.width
    story = [
        *_v3_header(invoice, issuer, width),
        _v3_items(invoice, totals.lines, width),
        Spacer(1, 4 * mm),
        _v3_totals(invoice, totals, width),
    ]

    def footer(canv: Canvas, _doc: Any) -> None:
        canv.saveState()
        canv.setFont(FONT_REGULAR, 8)
        canv.drawString(_V3_MARGIN, 10 * mm, f"Invoice {order['order_id']}")
        canv.restoreState()

    made: list[NumberedCanvas] = []

    def canvasmaker(*args: Any, **kwargs: Any) -> NumberedCanvas:
        made.append(NumberedCanvas(*args, **kwargs))
        return made[-1]

    doc.build(story, onFirstPage=footer, onLaterPages=footer, canvasmaker=canvasmaker)
    return made[-1].page_count


# --- the registry -------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """A released invoice layout.

    ``render(invoice, issuer, out)`` draws the normalized job input ``invoice``
    (see :func:`casesignd.invoice.admit`) to ``out`` (a path or a binary file) and
    returns the page count.
    """

    version: str
    render: Callable[[dict[str, Any], dict[str, Any], Any], int]
    description: str = ""


TEMPLATES: dict[str, Template] = {
    "invoice-v3": Template(
        "invoice-v3",
        _v3_render,
        "A4, issuer and bill-to header, itemized table with repeated header, "
        "subtotal, optional tax, total, Page X of Y",
    ),
}


def render_to_file(order: dict[str, Any], template_version: str, out_path: str, issuer: dict[str, Any]) -> int:
    """Render the invoice to ``out_path`` with ``template_version``; return its pages.

    ``order`` is the normalized job input (``Admission.normalized`` /
    ``ctx.input``: ``{"order": {...}, "tax": {...}, ...}``). ``issuer`` is
    ``{"name": str, "address": [str, ...]}``. Top-level and picklable: it runs in
    the CPU process pool.
    """
    template = TEMPLATES.get(template_version)
    if template is None:
        raise PermanentJobError(
            f"unknown template {template_version!r}", code="unknown_template",
            field="template_version",
        )  # fmt: skip
    return template.render(order, issuer, out_path)


def render_to_bytes(order: dict[str, Any], template_version: str, issuer: dict[str, Any]) -> tuple[bytes, int]:
    """Like :func:`render_to_file`, into memory: ``(pdf_bytes, pages)``."""
    import io

    template = TEMPLATES.get(template_version)
    if template is None:
        raise PermanentJobError(
            f"unknown template {template_version!r}", code="unknown_template",
            field="template_version",
        )  # fmt: skip
    buf = io.BytesIO()
    pages = template.render(order, issuer, buf)
    return buf.getvalue(), pages
