"""invoice-v4: invoice-v3's layout, written as the tenant's locale and branding say.

What it prints beyond invoice-v3, all from the job's issuer snapshot
(:meth:`casesignd.invoices.branding.InvoiceSettings.snapshot`, taken at admission):

- the issuer's logo, name, address and tax identifiers, and the customer's tax
  identifier when the order has one;
- every number as the locale writes it (:mod:`casesignd.invoices.locales`): amounts with
  the currency's symbol, grouping, decimal mark and CLDR minor unit, quantities,
  the tax rate, the issue date;
- the labels the tenant set (English by default) and its footer lines;
- right to left, mirrored, when the locale's script is (ar, he, fa, ...): columns
  from the right, the issuer on the right, amounts aligned left; each text in its
  own visual order (:mod:`casesignd.text.shaping`).

It is deterministic like invoice-v3 (reportlab's invariant mode; the date from
the input), and frozen once released: a change of output is a new version.
"""

from __future__ import annotations

import functools
import io
from decimal import Decimal
from typing import Any

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.units import mm
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import Image, SimpleDocTemplate, Spacer, Table, TableStyle

from casesignd.core.errors import PermanentJobError
from casesignd.core.hashing import sha256_hex
from casesignd.invoices import locales, money
from casesignd.invoices.layout import NumberedCanvas, v3_widths
from casesignd.text.faces import FONT_REGULAR, register_fonts
from casesignd.text.shaping import Text, draw_line, fit, width

_MARGIN = 18 * mm
_PAD = 4
_BODY = 9
_MIN_SIZE = 4.0
_GREY = colors.HexColor("#555555")
_LABEL_W = 28 * mm
_LOGO_W, _LOGO_H = 40 * mm, 18 * mm
_FOOTER_LEADING = 10
# Table cells default to Helvetica (a standard-14 font) even when they hold only
# flowables; naming the font keeps every declared font embedded.
_TABLE_FONT = ("FONT", (0, 0), (-1, -1), FONT_REGULAR, _BODY)


class _Side:
    """Left and right as the page's direction has them."""

    def __init__(self, rtl: bool) -> None:
        self.rtl = rtl
        self.start = "RIGHT" if rtl else "LEFT"  # where a line of text begins
        self.end = "LEFT" if rtl else "RIGHT"

    def row(self, cells: list[Any]) -> list[Any]:
        return cells[::-1] if self.rtl else cells


@functools.lru_cache(maxsize=16)
def _logo_image_bytes(path: str, sha256: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        data = b""
    if sha256_hex(data) != sha256:
        raise PermanentJobError("the invoice's logo is not kept any more", code="logo_missing")
    return data


def _logo(issuer: dict[str, Any], side: _Side) -> list[Any]:
    logo = (issuer.get("snapshot") or {}).get("logo")
    if not logo:
        return []
    data = _logo_image_bytes(str(issuer.get("logo_path", "")), logo["sha256"])
    scale = min(_LOGO_W / logo["width"], _LOGO_H / logo["height"])
    img = Image(io.BytesIO(data), width=logo["width"] * scale, height=logo["height"] * scale)
    img.hAlign = side.start
    return [img, Spacer(1, 2 * mm)]


def _header(invoice: dict[str, Any], issuer: dict[str, Any], brand: dict[str, Any],
            side: _Side, labels: dict[str, str], loc: Any, width_: float) -> list[Any]:
    order = invoice["order"]
    left_w, right_w = width_ * 0.6, width_ * 0.4
    block: list[Any] = _logo(issuer, side)
    for i, line in enumerate([brand["name"], *brand["address"], *brand["tax_ids"]]):
        block.append(Text(line, size=_BODY, bold=i == 0, align=side.start))
    title = Text(labels["invoice"], size=18, bold=True, align=side.end, one_line=True)
    head = Table([side.row([block, title])], colWidths=side.row([left_w, right_w]),
                 style=TableStyle([_TABLE_FONT, ("VALIGN", (0, 0), (-1, -1), "TOP"),
                                   ("LEFTPADDING", (0, 0), (-1, -1), 0),
                                   ("RIGHTPADDING", (0, 0), (-1, -1), 0)]))
    label_w = min(max(_LABEL_W, max(width(labels[k], False, _BODY) for k in
                                    ("invoice_no", "issue_date", "bill_to", "customer_tax_id"))
                      + 12 + 2), width_ / 3)  # the table's 6 pt padding each side
    value_w = width_ - label_w
    rows = [(labels["invoice_no"], order["order_id"], True, True),
            (labels["issue_date"], locales.format_date(order["issued_on"], loc), False, True),
            (labels["bill_to"], order["student_name"], True, False)]
    if order.get("customer_tax_id"):
        rows.append((labels["customer_tax_id"], order["customer_tax_id"], False, True))
    meta = [side.row([Text(label, size=_BODY, align=side.start, color=_GREY),
                      Text(value, size=_BODY, bold=bold, align=side.start, one_line=one)])
             for label, value, bold, one in rows]
    meta_table = Table(meta, colWidths=side.row([label_w, value_w]),
                       style=TableStyle([_TABLE_FONT, ("VALIGN", (0, 0), (-1, -1), "TOP")]))
    return [head, Spacer(1, 8 * mm), meta_table, Spacer(1, 6 * mm)]


def _items(invoice: dict[str, Any], labels: dict[str, str], units: list[str],
           amounts: list[str], widths: list[float], side: _Side, loc: Any) -> Table:
    order = invoice["order"]

    def one(text: str, i: int, bold: bool = False) -> Text:
        """Column ``i``'s cell: # and the description from the start, numbers to the end;
        the description wraps, the others shrink to fit."""
        return Text(text, size=_BODY, bold=bold, one_line=i != 1,
                    align=side.start if i < 2 else side.end, min_size=_MIN_SIZE)

    header = [labels[k] for k in ("number", "description", "quantity", "unit_price", "amount")]
    rows: list[list[Any]] = [side.row([one(t, i, bold=True) for i, t in enumerate(header)])]
    for r, (item, unit, amount) in enumerate(zip(order["items"], units, amounts, strict=True), 1):
        cells = [locales.format_quantity(r, loc), item["description"],
                 locales.format_quantity(item["quantity"], loc), unit, amount]
        rows.append(side.row([one(t, i) for i, t in enumerate(cells)]))
    cmds: list[Any] = [
        _TABLE_FONT,
        ("LINEBELOW", (0, 0), (-1, 0), 0.8, colors.black),
        ("LINEBELOW", (0, 1), (-1, -1), 0.25, colors.HexColor("#BBBBBB")),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("LEFTPADDING", (0, 0), (-1, -1), _PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _PAD),
    ]
    return Table(rows, colWidths=side.row(widths), repeatRows=1, style=TableStyle(cmds),
                 splitByRow=1)


def _totals(lines: list[tuple[str, str]], amount_w: float, side: _Side) -> Table:
    label_w = 50 * mm
    last = len(lines) - 1
    rows = [side.row([Text(label, size=_BODY, bold=r == last, align=side.end, one_line=True),
                      Text(value, size=_BODY, bold=r == last, align=side.end, one_line=True)])
            for r, (label, value) in enumerate(lines)]
    cmds: list[Any] = [
        _TABLE_FONT,
        ("LINEABOVE", (0, -1), (-1, -1), 0.8, colors.black),
        ("LEFTPADDING", (0, 0), (-1, -1), _PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _PAD),
    ]
    return Table(rows, colWidths=side.row([label_w, amount_w]), hAlign=side.end,
                 style=TableStyle(cmds))


def v4_render(invoice: dict[str, Any], issuer: dict[str, Any], out: Any) -> int:
    """Draw ``invoice`` (a job's normalized input) to ``out``; the page count.

    ``issuer`` is ``{"snapshot": the job's issuer snapshot, "logo_path": str}``.
    """
    register_fonts()  # the East Asian face too, when a text needs it (casesignd.text.shaping.runs)
    order = invoice["order"]
    brand = issuer["snapshot"]
    cur, units_ = order["currency"], int(invoice["units"])
    loc = locales.locale_of(brand["locale"])
    side = _Side(locales.is_rtl(loc))
    labels = brand["labels"]
    tax = invoice.get("tax") or {}
    rate = Decimal(tax["rate"]) if tax.get("rate") else None
    items = [(it["quantity"], Decimal(it["unit_price"])) for it in order["items"]]
    totals = money.totals(items, cur, rate, units_)

    def fmt(value: Decimal) -> str:
        return locales.format_money(value, cur, units_, loc)

    footer_lines = list(brand["footer"])
    bottom = _MARGIN + len(footer_lines) * _FOOTER_LEADING
    doc = SimpleDocTemplate(
        out, pagesize=A4, leftMargin=_MARGIN, rightMargin=_MARGIN, topMargin=_MARGIN,
        bottomMargin=bottom, title=f"Invoice {order['order_id']}", author=brand["name"],
        subject=f"Invoice {order['order_id']} for {order['student_name']}",
        creator="casesignd invoice-v4", producer="casesignd", lang=brand["locale"],
        invariant=1,  # fixed dates and document ID: same input, same bytes
    )
    frame_w = doc.width
    unit_texts = [fmt(Decimal(it["unit_price"])) for it in order["items"]]
    amount_texts = [fmt(a) for a in totals.lines]
    # invoice-v3's columns: the money columns grow, within bounds, to their widest text.
    widths = v3_widths(frame_w, max((width(t, False, _BODY) for t in set(unit_texts)), default=0),
                     max((width(t, False, _BODY) for t in set(amount_texts)), default=0))
    sums = [(labels["subtotal"], fmt(totals.subtotal))]
    if totals.tax is not None and rate is not None:
        sums.append((f"{tax.get('label') or 'Tax'} {locales.format_rate(rate, loc)}",
                     fmt(totals.tax)))
    sums.append((labels["total"], fmt(totals.total)))
    story = [
        *_header(invoice, issuer, brand, side, labels, loc, frame_w),
        _items(invoice, labels, unit_texts, amount_texts, widths, side, loc),
        Spacer(1, 4 * mm),
        _totals(sums, widths[-1], side),
    ]
    page_width = A4[0]

    def footer(canv: Canvas, _doc: Any) -> None:
        canv.saveState()
        for i, line in enumerate(footer_lines):
            y = 10 * mm + (len(footer_lines) - i) * _FOOTER_LEADING
            size = fit(line, False, 8, frame_w, _MIN_SIZE)
            draw_line(canv, page_width / 2, y, line, False, size, "CENTER")
        canv.restoreState()

    made: list[NumberedCanvas] = []
    page_label = labels["page"]

    def canvasmaker(*args: Any, **kwargs: Any) -> NumberedCanvas:
        canv = _Canvas(*args, **kwargs)
        canv.page_label, canv.rtl = page_label, side.rtl
        made.append(canv)
        return canv

    doc.build(story, onFirstPage=footer, onLaterPages=footer, canvasmaker=canvasmaker)
    return made[-1].page_count


class _Canvas(NumberedCanvas):
    """invoice-v3's numbered canvas with the tenant's page label, on the page's end side."""

    page_label = "Page {page} of {pages}"
    rtl = False

    def _draw_page_number(self, count: int) -> None:
        page_width, _ = self._pagesize
        text = self.page_label.format(page=self._pageNumber, pages=count)
        if self.rtl:
            draw_line(self, _MARGIN, 10 * mm, text, False, 8, "LEFT")
        else:
            draw_line(self, page_width - _MARGIN, 10 * mm, text, False, 8, "RIGHT")
