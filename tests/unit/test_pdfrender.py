"""Pages compared as pictures: the pure comparison and the verdict (casesignd.pdf.render)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from casesignd.pdf.render import (
    PAGES_RENDER_DIFFERENTLY,
    PIXEL_DELTA,
    READERS_DISAGREE,
    EngineResult,
    Tolerance,
    batches,
    changed_pixels,
    first_differing_page,
    same_page,
    verdict,
)

SIZE = (340, 440)  # a letter page at 40 dpi


def page(*marks: tuple[int, int, int], size: tuple[int, int] = SIZE) -> Image.Image:
    """A white gray page with single pixels (x, y, gray) set."""
    image = Image.new("L", size, 255)
    for x, y, gray in marks:
        image.putpixel((x, y), gray)
    return image


def text_page(text: str) -> Image.Image:
    image = Image.new("L", SIZE, 255)
    ImageDraw.Draw(image).text((40, 40), text, fill=0)
    return image


@pytest.mark.parametrize(("a", "b", "tolerance", "same"), [
    (page(), page(), Tolerance(), True),
    # a change of the delta or less is a rounding, not a change
    (page(), page((10, 10, 255 - PIXEL_DELTA)), Tolerance(), True),
    (page(), page((10, 10, 255 - PIXEL_DELTA - 1)), Tolerance(), False),
    # one pixel is enough by default: a changed digit moves two to four
    (page(), page((10, 10, 0)), Tolerance(), False),
    (page((5, 5, 0)), page((6, 5, 0)), Tolerance(), False),
    # an allowance of a fraction of the page (340 x 440 x 1e-5 = 1.5 pixels)
    (page(), page((10, 10, 0)), Tolerance(max_changed_fraction=1e-5), True),
    (page(), page((10, 10, 0), (20, 20, 0)), Tolerance(max_changed_fraction=1e-5), False),
    (page(), page((10, 10, 0)), Tolerance(pixel_delta=255), True),
    # another size is another page, whatever it shows
    (page(), page(size=(340, 441)), Tolerance(max_changed_fraction=1.0), False),
    (text_page("Salary 1000 EUR"), text_page("Salary 1000 EUR"), Tolerance(), True),
    (text_page("Salary 1000 EUR"), text_page("Salary 1900 EUR"), Tolerance(), False),
    (text_page("Pay 1,000"), text_page("Pay 1.000"), Tolerance(), False),
])
def test_same_page(a: Image.Image, b: Image.Image, tolerance: Tolerance, same: bool) -> None:
    assert same_page(a, b, tolerance) is same
    assert same_page(b, a, tolerance) is same


def test_changed_pixels_counts_past_the_delta() -> None:
    a = page()
    b = page((1, 1, 0), (2, 2, 200), (3, 3, 255 - PIXEL_DELTA))
    assert changed_pixels(a, b, PIXEL_DELTA) == 2
    assert changed_pixels(a, b, 0) == 3
    assert changed_pixels(a, b.convert("RGB"), PIXEL_DELTA) == 2  # compared in gray


BLANK, INKED = page(), page((100, 100, 0))


@pytest.mark.parametrize(("a", "b", "first"), [
    ([], [], None),
    ([BLANK], [BLANK], None),
    ([BLANK, BLANK, BLANK], [BLANK, BLANK, BLANK], None),
    ([BLANK, BLANK, BLANK], [BLANK, INKED, BLANK], 2),
    ([INKED, BLANK], [BLANK, INKED], 1),
    # a page one drawing has more: the first page past the shorter
    ([BLANK], [BLANK, BLANK], 2),
    ([BLANK, BLANK], [BLANK], 2),
    ([], [BLANK], 1),
    # a difference before the end counts first
    ([BLANK, INKED], [BLANK, BLANK, BLANK], 2),
    # a page not drawn (None) differs from one drawn, not from another not drawn
    ([BLANK, None, BLANK], [BLANK, BLANK, BLANK], 2),
    ([BLANK, None, BLANK], [BLANK, None, BLANK], None),
    ([BLANK, None, INKED], [BLANK, None, BLANK], 3),
])
def test_first_differing_page(a: list[Image.Image], b: list[Image.Image],
                              first: int | None) -> None:
    assert first_differing_page(a, b) == first


def test_first_differing_page_reads_files(tmp_path: Path) -> None:
    files = []
    for i, image in enumerate([BLANK, BLANK, INKED]):
        path = tmp_path / f"p{i}.pgm"
        image.save(path)
        files.append(path)
    assert first_differing_page(files[:2], [BLANK, BLANK]) is None
    assert first_differing_page(files, [BLANK, BLANK, BLANK]) == 3


def _engines(poppler: int | None, mupdf: int | None) -> dict[str, EngineResult]:
    return {"poppler": EngineResult("poppler", poppler), "mupdf": EngineResult("mupdf", mupdf)}


@pytest.mark.parametrize(("pypdf", "poppler", "mupdf", "outcome"), [
    # every reader agrees with the rewrite
    (None, None, None, None),
    # only pypdf reads it otherwise: qpdf, poppler and MuPDF agree
    (1, None, None, None),
    (3, None, None, None),
    # an engine draws the rewrite otherwise: a reader agrees with qpdf, the page differs
    (None, 2, None, (PAGES_RENDER_DIFFERENTLY, 2)),
    (None, None, 4, (PAGES_RENDER_DIFFERENTLY, 4)),
    (None, 3, 2, (PAGES_RENDER_DIFFERENTLY, 2)),
    (2, None, 5, (PAGES_RENDER_DIFFERENTLY, 5)),
    (2, 5, None, (PAGES_RENDER_DIFFERENTLY, 5)),
    # no reader agrees with qpdf's rewrite: no two readers agree
    (2, 3, 4, (READERS_DISAGREE, 2)),
    (4, 3, 1, (READERS_DISAGREE, 1)),
])
def test_verdict(pypdf: int | None, poppler: int | None, mupdf: int | None,
                 outcome: tuple[str, int] | None) -> None:
    assert verdict(pypdf, _engines(poppler, mupdf)) == outcome


def test_verdict_reasons_are_words_of_the_table() -> None:
    from casesignd.core.codes import REASONS

    assert REASONS[PAGES_RENDER_DIFFERENTLY].code == REASONS[READERS_DISAGREE].code == \
        "ambiguous_pdf"


@pytest.mark.parametrize(("modes", "missing", "check"), [
    (["never"], [], None),
    (["never", "never"], ["mutool"], None),  # nothing is ever rewritten: nothing needed
    (["when_needed"], [], {"ok": True}),
    (["never", "always"], ["mutool"], {"ok": False,
                                       "detail": "not installed: mutool (mupdf-tools)"}),
    (["when_needed"], ["pdftoppm", "mutool"], {
        "ok": False, "detail": "not installed: pdftoppm (poppler-utils), mutool (mupdf-tools)"}),
])
def test_readiness_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, modes: list[str],
                                         missing: list[str], check: dict | None) -> None:
    from casesignd.pdf import render as pdfrender

    monkeypatch.setattr(pdfrender.shutil, "which",
                        lambda name: None if name in missing else f"/usr/bin/{name}")
    assert pdfrender.readiness(modes) == check


@pytest.mark.parametrize(("pages", "size", "ranges"), [
    (1, 50, [(1, 2)]),
    (49, 50, [(1, 50)]),
    (50, 50, [(1, 51)]),  # never the page past the end alone
    (51, 50, [(1, 50), (51, 52)]),
    (100, 50, [(1, 50), (51, 101)]),
    (101, 50, [(1, 50), (51, 100), (101, 102)]),
    (5, 2, [(1, 2), (3, 4), (5, 6)]),
    (4, 2, [(1, 2), (3, 5)]),
])
def test_batches_cover_every_page_and_one_past(pages: int, size: int,
                                               ranges: list[tuple[int, int]]) -> None:
    assert batches(pages, size) == ranges
    drawn = [p for first, last in ranges for p in range(first, last + 1)]
    assert drawn == list(range(1, pages + 2))


@pytest.mark.parametrize(("names", "first", "last", "aligned"), [
    (["p-1.pgm", "p-2.pgm"], 1, 3, ["p-1.pgm", "p-2.pgm"]),
    (["p-01.pgm", "p-10.pgm", "p-02.pgm"], 1, 10,  # poppler pads, sorts as text
     ["p-01.pgm", "p-02.pgm", None, None, None, None, None, None, None, "p-10.pgm"]),
    (["p3.pgm", "p1.pgm"], 1, 3, ["p1.pgm", None, "p3.pgm"]),  # MuPDF skipped page 2
    (["p51.pgm", "p52.pgm"], 51, 101, ["p51.pgm", "p52.pgm"]),
    ([], 1, 2, []),
])
def test_drawings_are_aligned_by_page_number(names: list[str], first: int, last: int,
                                             aligned: list[str | None]) -> None:
    from casesignd.pdf.render import _aligned

    out = _aligned([Path(n) for n in names], first, last)
    assert [p.name if p is not None else None for p in out] == aligned


def test_a_field_the_rewrite_drew_is_left_out_and_nothing_else() -> None:
    field = (0.1, 0.1, 0.4, 0.15)  # left, top, right, bottom, as fractions
    inside = page((int(0.2 * SIZE[0]), int(0.12 * SIZE[1]), 0))
    outside = page((int(0.2 * SIZE[0]), int(0.5 * SIZE[1]), 0))
    assert same_page(page(), inside, masks=[field])
    assert not same_page(page(), outside, masks=[field])
    assert not same_page(page(), inside)
    # By page number, from the first page a batch holds.
    assert first_differing_page([page(), page()], [page(), inside], masks={2: [field]}) is None
    assert first_differing_page([page(), page()], [page(), inside], masks={3: [field]},
                                first=2) is None
    assert first_differing_page([page(), page()], [page(), inside], masks={1: [field]}) == 2


def test_the_boxes_of_drawn_widgets_are_where_the_renderers_draw_them(tmp_path: Path) -> None:
    from pypdf import PdfReader

    from casesignd.pdf.render import drawn_boxes
    from tests.helpers_corpus import _one_page

    widget = b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (a) /Rect [61.2 712.8 306 792] >>"
    path = tmp_path / "f.pdf"
    path.write_bytes(_one_page(page_extra=b"/Annots [6 0 R] ", more=[widget]))
    boxes = drawn_boxes(PdfReader(path), frozenset({(0, 0)}))
    assert boxes == {1: [pytest.approx((0.1, 0.0, 0.5, 0.1))]}
    assert drawn_boxes(PdfReader(path), frozenset({(0, 3)})) == {}  # no such widget


def _r(engine: str, page: int | None, failed: str = "") -> EngineResult:
    return EngineResult(engine, page, failed)


@pytest.mark.parametrize(("pypdf_page", "poppler", "mupdf", "expected"), [
    # an engine that cannot open the received document says nothing of it: the
    # others decide, two of them at least
    (None, _r("poppler", None), _r("mupdf", 1, "received: exit 1"), None),
    (None, _r("poppler", 1, "received: timeout"), _r("mupdf", None), None),
    (2, _r("poppler", None), _r("mupdf", 1, "received: exit 1"), (READERS_DISAGREE, 1)),
    (None, _r("poppler", 1, "received: exit 1"), _r("mupdf", 1, "received: exit 1"),
     (PAGES_RENDER_DIFFERENTLY, 1)),
    # one that opens it and draws it otherwise is heard whatever the others say
    (None, _r("poppler", 3), _r("mupdf", 1, "received: exit 1"), (PAGES_RENDER_DIFFERENTLY, 3)),
    # a rewrite an engine cannot draw is no rewrite to sign
    (None, _r("poppler", 1, "rewrite: exit 1"), _r("mupdf", None), (PAGES_RENDER_DIFFERENTLY, 1)),
])
def test_an_engine_that_cannot_open_the_received_document_abstains(
        pypdf_page, poppler, mupdf, expected) -> None:
    assert verdict(pypdf_page, {"poppler": poppler, "mupdf": mupdf}) == expected
