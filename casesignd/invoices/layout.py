"""Invoice templates and rendering (reportlab platypus).

Templates are versioned code (the registry is :mod:`casesignd.invoices.templates`);
a job renders with the version it was admitted with. A version's code path is
frozen once released: ``invoice-v4`` has its own module
(:mod:`casesignd.invoices.v4`) and never edits ``_v3_*``. The shared helpers
below (the numbered canvas, money) may only grow; the fonts are
:mod:`casesignd.text.faces`'s.

Rendering is deterministic: reportlab's invariant mode fixes the creation date
and the document ID, so the same input and issuer give the same bytes. The issue
date comes from the input (``order.issued_on``), never from the clock.

Every glyph comes from the TrueType fonts shipped under ``casesignd/text/fonts``
(DejaVu Sans, :mod:`casesignd.text.faces`), embedded as subsets; the standard 14
PDF fonts are never used, so viewers cannot substitute them (PDF 32000-1 section
9.6.2 lets a reader pick its own face for a non-embedded standard font).

Rendering runs in the CPU process pool; fonts and styles are set up once per
process, on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from casesignd.invoices import money
from casesignd.text.faces import FONT_BOLD, FONT_REGULAR, register_fonts

# --- shared, append-only helpers -----------------------------------------------------


class NumberedCanvas(Canvas):
    """A canvas that knows the page count when it draws each page's footer.

    Pages are kept until ``save`` so "Page X of Y" can be written with the final
    Y: layout runs once, only the footer is drawn late. The position is
    invoice-v3's; a later template that wants another subclasses and overrides
    ``_draw_page_number``.
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


def fit_size(text: str, font: str, size: float, width: float, min_size: float) -> float:
    """The largest font size <= ``size`` (not below ``min_size``) at which ``text`` fits."""
    w = pdfmetrics.stringWidth(text, font, size)
    if w <= width:
        return size
    return max(min_size, size * width / w)


def _widest(texts: Sequence[str], font: str, size: float) -> float:
    return max((pdfmetrics.stringWidth(t, font, size) for t in set(texts)), default=0.0)


def _para(text: str, style: ParagraphStyle) -> Paragraph:
    return Paragraph(escape(text), style)


# --- invoice-v3 (released: do not change its output) ---------------------------------

_V3_MARGIN = 18 * mm
_V3_PAD = 4  # points of cell padding each side
_V3_BODY = 9
_V3_MIN_SIZE = 4.0  # amounts shrink down to this size rather than wrap
_V3_GREY = colors.HexColor("#555555")
# Item table columns: #, description (the rest), qty, unit price, amount. The money
# columns grow (up to the cap) to fit the widest amount of the invoice at 9 pt.
_V3_NUM_W, _V3_QTY_W = 12 * mm, 20 * mm
_V3_UNIT_W, _V3_UNIT_MAX_W = 36 * mm, 46 * mm
_V3_AMOUNT_W, _V3_AMOUNT_MAX_W = 38 * mm, 52 * mm
_V3_LABEL_W = 28 * mm
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
    }


def _v3_cell(text: str, width: float, key: str = "body") -> str | Paragraph:
    """A text cell: a plain string when it fits on one line, else a wrapping paragraph.

    Plain strings are several times cheaper to lay out than paragraphs; the table
    style must give the string cell the same font as the ``key`` style.
    """
    style = _v3_styles()[key]
    if _fits(text, style.fontName, style.fontSize, width - 2 * _V3_PAD):
        return text
    return _para(text, style)


def _v3_shrink(
    cmds: list[Any], cell: tuple[int, int], text: str, font: str, width: float
) -> str:
    """A one-line cell (amounts, IDs): add a smaller FONT for ``cell`` if needed."""
    size = fit_size(text, font, _V3_BODY, width - 2 * _V3_PAD, _V3_MIN_SIZE)
    if size < _V3_BODY:
        cmds.append(("FONT", cell, cell, font, size, size * 1.2))
    return text


def _v3_header(invoice: dict[str, Any], issuer: dict[str, Any], width: float) -> list[Any]:
    order = invoice["order"]
    left_w, right_w = width * 0.6, width * 0.4
    lines = [str(issuer.get("name", ""))] + [str(a) for a in issuer.get("address", [])]
    rows = [[_v3_cell(text, left_w, "bold" if r == 0 else "body"), ""]
            for r, text in enumerate(lines)]  # fmt: skip
    rows[0][1] = "INVOICE"
    head = Table(
        rows,
        colWidths=[left_w, right_w],
        style=TableStyle([
            *_V3_TABLE_FONT,
            ("FONT", (0, 0), (0, 0), FONT_BOLD, _V3_BODY),
            ("FONT", (1, 0), (1, 0), FONT_BOLD, 18, 22),
            ("ALIGN", (1, 0), (1, 0), "RIGHT"),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ("TOPPADDING", (0, 0), (-1, -1), 1),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
        ]),
    )  # fmt: skip
    value_w = width - _V3_LABEL_W
    cmds: list[Any] = [
        *_V3_TABLE_FONT,
        ("TEXTCOLOR", (0, 0), (0, -1), _V3_GREY),
        ("FONT", (1, 0), (1, 0), FONT_BOLD, _V3_BODY),
        ("FONT", (1, 2), (1, 2), FONT_BOLD, _V3_BODY),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
    ]
    meta = [
        ["Invoice no.", _v3_shrink(cmds, (1, 0), order["order_id"], FONT_BOLD, value_w)],
        ["Issue date", order["issued_on"]],
        ["Bill to", _v3_cell(order["student_name"], value_w, "bold")],
    ]
    meta_table = Table(meta, colWidths=[_V3_LABEL_W, value_w], style=TableStyle(cmds))
    return [head, Spacer(1, 8 * mm), meta_table, Spacer(1, 6 * mm)]


def v3_widths(frame_width: float, unit_text_w: float, amount_text_w: float) -> list[float]:
    """Column widths of the item table (pure)."""
    unit = min(max(_V3_UNIT_W, unit_text_w + 2 * _V3_PAD), _V3_UNIT_MAX_W)
    amount = min(max(_V3_AMOUNT_W, amount_text_w + 2 * _V3_PAD), _V3_AMOUNT_MAX_W)
    description = frame_width - _V3_NUM_W - _V3_QTY_W - unit - amount
    return [_V3_NUM_W, description, _V3_QTY_W, unit, amount]


def _v3_items(
    invoice: dict[str, Any], units: Sequence[str], amounts: Sequence[str], widths: list[float]
) -> Table:
    order = invoice["order"]
    cmds: list[Any] = [
        ("FONT", (0, 0), (-1, 0), FONT_BOLD, _V3_BODY),
        ("FONT", (0, 1), (-1, -1), FONT_REGULAR, _V3_BODY),
        ("LINEBELOW", (0, 0), (-1, 0), 0.8, colors.black),
        ("LINEBELOW", (0, 1), (-1, -1), 0.25, colors.HexColor("#BBBBBB")),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
        ("LEFTPADDING", (0, 0), (-1, -1), _V3_PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _V3_PAD),
    ]
    rows: list[list[Any]] = [["#", "Description", "Qty", "Unit price", "Amount"]]
    for r, (item, unit, amount) in enumerate(zip(order["items"], units, amounts, strict=True), 1):
        rows.append([
            _v3_shrink(cmds, (0, r), str(r), FONT_REGULAR, widths[0]),
            _v3_cell(item["description"], widths[1]),
            _v3_shrink(cmds, (2, r), f"{item['quantity']:,}", FONT_REGULAR, widths[2]),
            _v3_shrink(cmds, (3, r), unit, FONT_REGULAR, widths[3]),
            _v3_shrink(cmds, (4, r), amount, FONT_REGULAR, widths[4]),
        ])  # fmt: skip
    # repeatRows=1: the header row is drawn again on every page the table splits to.
    return Table(rows, colWidths=widths, repeatRows=1, style=TableStyle(cmds), splitByRow=1)


def _v3_totals(invoice: dict[str, Any], totals: money.Totals, amount_w: float) -> Table:
    cur = invoice["order"]["currency"]
    tax = invoice.get("tax") or {}
    rows: list[list[str]] = [["Subtotal", money.format_amount(totals.subtotal, cur)]]
    if totals.tax is not None:
        label = f"{tax.get('label') or 'Tax'} {money.format_rate(Decimal(tax['rate']))}"
        rows.append([label, money.format_amount(totals.tax, cur)])
    rows.append(["Total", money.format_amount(totals.total, cur)])
    label_w = 50 * mm
    last = len(rows) - 1
    cmds: list[Any] = [
        ("FONT", (0, 0), (-1, -1), FONT_REGULAR, _V3_BODY),
        ("FONT", (0, -1), (-1, -1), FONT_BOLD, _V3_BODY),
        ("ALIGN", (0, 0), (-1, -1), "RIGHT"),
        ("LINEABOVE", (0, -1), (-1, -1), 0.8, colors.black),
        ("LEFTPADDING", (0, 0), (-1, -1), _V3_PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _V3_PAD),
    ]
    for r, row in enumerate(rows):
        font = FONT_BOLD if r == last else FONT_REGULAR
        row[0] = _v3_shrink(cmds, (0, r), row[0], font, label_w)
        row[1] = _v3_shrink(cmds, (1, r), row[1], font, amount_w)
    return Table(rows, colWidths=[label_w, amount_w], hAlign="RIGHT", style=TableStyle(cmds))


def v3_render(invoice: dict[str, Any], issuer: dict[str, Any], out: Any) -> int:
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
    units = [money.format_amount(Decimal(it["unit_price"]), cur) for it in order["items"]]
    amounts = [money.format_amount(a, cur) for a in totals.lines]
    widths = v3_widths(width, _widest(units, FONT_REGULAR, _V3_BODY),
                        _widest(amounts, FONT_REGULAR, _V3_BODY))  # fmt: skip
    story = [
        *_v3_header(invoice, issuer, width),
        _v3_items(invoice, units, amounts, widths),
        Spacer(1, 4 * mm),
        _v3_totals(invoice, totals, widths[-1]),
    ]
    footer_text = f"Invoice {order['order_id']}"
    # Leave room on the right for "Page X of Y".
    footer_size = fit_size(footer_text, FONT_REGULAR, 8, width - 40 * mm, _V3_MIN_SIZE)

    def footer(canv: Canvas, _doc: Any) -> None:
        canv.saveState()
        canv.setFont(FONT_REGULAR, footer_size)
        canv.drawString(_V3_MARGIN, 10 * mm, footer_text)
        canv.restoreState()

    made: list[NumberedCanvas] = []

    def canvasmaker(*args: Any, **kwargs: Any) -> NumberedCanvas:
        made.append(NumberedCanvas(*args, **kwargs))
        return made[-1]

    doc.build(story, onFirstPage=footer, onLaterPages=footer, canvasmaker=canvasmaker)
    return made[-1].page_count
