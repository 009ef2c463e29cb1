"""The visible stamp (casesignd.signing.stamp): drawn in the field's own rectangle or in a box
on a page, its words found there by ``pdftotext -bbox``, and the page drawn by poppler
and MuPDF unchanged everywhere but the stamp's box — on rotated pages, pages whose
boxes do not start at 0,0 or are inherited, and in right-to-left and CJK scripts."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

from casesignd.core.errors import PermanentJobError
from casesignd.pdf import render as pdfrender
from casesignd.signing import pipeline, stamp
from tests.helpers_pki import Pki, pki, pyhanko_statuses, reportlab_pdf, sample_meta
from tests.integration.test_pades_fields import SELLER_BOX, pyhanko_fields

__all__ = ["pki"]  # fixtures

LINES = ("Signed by CN=casesignd test signer EC", "On behalf of Acme Ltd (seller)",
         "Date 2026-12-05 07:00:00+01:00", "Policy contract-v1")
BOX = (300.0, 40.0, 540.0, 110.0)


def _words(path: Path, page: int) -> list[tuple[str, float, float, float, float]]:
    """pdftotext -bbox's words of ``page``: (word, x1, y1, x2, y2) in PDF user space
    (it reports them from the top left of the media box, which starts at 0,0 here)."""
    html = subprocess.run(["pdftotext", "-bbox", "-f", str(page), "-l", str(page), str(path), "-"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    height = float(re.search(r'<page width="[\d.]+" height="([\d.]+)"', html).group(1))
    return [(w, float(x1), height - float(y2), float(x2), height - float(y1))
            for x1, y1, x2, y2, w in re.findall(
                r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>',
                html)]


def _inside(word: tuple[str, float, float, float, float], box: tuple[float, ...]) -> bool:
    _w, x1, y1, x2, y2 = word
    return box[0] - 0.5 <= x1 and x2 <= box[2] + 0.5 and box[1] - 0.5 <= y1 and y2 <= box[3] + 0.5


def _fractions(box: tuple[float, ...], crop: tuple[float, ...], rotate: int) -> pdfrender.Box:
    """``box`` (user space) as fractions of the page as drawn, turned by ``rotate``."""
    left, bottom, right, top = crop
    w, h = right - left, top - bottom
    xs = ((box[0] - left) / w, (box[2] - left) / w)
    ys = ((box[1] - bottom) / h, (box[3] - bottom) / h)
    if rotate == 0:
        return (xs[0], 1 - ys[1], xs[1], 1 - ys[0])
    if rotate == 90:
        return (ys[0], xs[0], ys[1], xs[1])
    if rotate == 180:
        return (1 - xs[1], ys[0], 1 - xs[0], ys[1])
    return (1 - ys[1], 1 - xs[1], 1 - ys[0], 1 - xs[0])


def _unchanged_but(src: Path, signed: Path, page: int, box: pdfrender.Box) -> None:
    """poppler and MuPDF draw ``signed`` as ``src`` outside ``box``, and not inside it."""
    for engine, result in pdfrender.compare(src, signed, pages=page, workdir=None,
                                            masks={page: [box]}).items():
        assert result.page is None and not result.failed, (engine, result)
    for engine, result in pdfrender.compare(src, signed, pages=page, workdir=None).items():
        assert result.page == page, (engine, "the stamp was not drawn", result)


def test_the_stamp_is_drawn_in_the_fields_own_rectangle(pki: Pki, tmp_path: Path) -> None:
    src = pyhanko_fields(tmp_path / "fields.pdf")
    out = tmp_path / "seller.pdf"
    pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta(into_field="Seller", stamp=LINES))
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.bottom_line
    words = [w for w in _words(out, 1) if w[0] in ("Signed", "Acme", "contract-v1")]
    assert {w[0] for w in words} == {"Signed", "Acme", "contract-v1"}
    assert all(_inside(w, SELLER_BOX) for w in words), words
    crop = (0.0, 0.0, 595.2756, 841.8898)
    _unchanged_but(src, out, 1, _fractions(SELLER_BOX, crop, 0))


@pytest.mark.parametrize("rotate", [0, 90, 180, 270])
def test_a_stamp_on_the_last_page_of_a_rotated_page_with_an_offset_inherited_box(
    rotate: int, pki: Pki, tmp_path: Path
) -> None:
    plain = reportlab_pdf(tmp_path / "plain.pdf", pages=2)
    src = tmp_path / "turned.pdf"
    _turned_offset(plain, src, rotate)
    box = (BOX[0] + 20, BOX[1] + 30, BOX[2] + 20, BOX[3] + 30)
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta(place=(-1, box), stamp=LINES))
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.bottom_line
    _unchanged_but(src, out, 2, _fractions(box, (20.0, 30.0, 595.2756, 841.8898), rotate))
    if rotate == 0:
        assert any(w[0] == "Signed" and _inside(w, box) for w in _words(out, 2))


def _turned_offset(src: Path, dst: Path, rotate: int) -> None:
    """``src`` with its pages' /Rotate and a crop box from (20, 30), both set on the
    page tree's root and inherited by the pages (§7.7.3.4)."""
    from pypdf import PdfWriter
    from pypdf import generic as g

    writer = PdfWriter(clone_from=src)
    root = writer._root_object["/Pages"]
    root[g.NameObject("/Rotate")] = g.NumberObject(rotate)
    root[g.NameObject("/CropBox")] = g.ArrayObject(
        [g.FloatObject(v) for v in (20, 30, 595.2756, 841.8898)])
    for page in writer.pages:
        for key in ("/Rotate", "/CropBox"):
            page.pop(key, None)
    writer.write(dst)


@pytest.mark.parametrize("box", [(500.0, 40.0, 700.0, 100.0), (10.0, 10.0, 200.0, 80.0),
                                 (100.0, 100.0, 100.5, 160.0)])
def test_a_box_off_the_page_is_refused_before_the_key(box: tuple[float, ...], tmp_path: Path) -> None:
    plain = reportlab_pdf(tmp_path / "plain.pdf")
    src = tmp_path / "offset.pdf"
    _turned_offset(plain, src, 0)  # its crop box starts at 20,30: (10, 10) is off it

    class Untouchable:
        def __getattr__(self, name: str) -> object:
            raise AssertionError("the key was used")

    with pytest.raises(PermanentJobError) as refused:
        pipeline.sign_file(src, tmp_path / "out.pdf", Untouchable(),
                           meta=sample_meta(place=(1, box), stamp=LINES))
    assert refused.value.code == "signature_box_off_page" and refused.value.where == {"page": 1}
    with pytest.raises(PermanentJobError) as no_page:
        pipeline.sign_file(src, tmp_path / "out.pdf", Untouchable(),
                           meta=sample_meta(place=(3, BOX), stamp=LINES))
    assert no_page.value.code == "signature_box_off_page"


@pytest.mark.parametrize("who", ["محمد علي", "山田太郎", "Zoë Ångström"])
def test_any_script_the_invoices_draw_is_drawn_fitted_embedded_and_the_same_each_time(
    who: str, pki: Pki, tmp_path: Path
) -> None:
    lines = (*LINES, f"On behalf of {who} (buyer) " * 30)
    drawn = stamp.draw(lines, 180, 50)
    assert drawn == stamp.draw(lines, 180, 50)
    size, wrapped = stamp.layout(lines, 180, 50)
    assert len(wrapped) * size * stamp.LEADING <= 50 - 2 * stamp.PADDING_PT
    assert wrapped[-1].endswith("…")  # too much text: cut, never out of the box
    (tmp_path / "stamp.pdf").write_bytes(drawn)
    fonts = subprocess.run(["pdffonts", str(tmp_path / "stamp.pdf")], capture_output=True,
                           text=True, timeout=60, check=True).stdout.splitlines()[2:]
    assert fonts and all(re.search(r"\+\S+\s.*\byes\s+yes\b", f) for f in fonts), fonts
    src = reportlab_pdf(tmp_path / "plain.pdf")
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(src, out, pki.signer("ec"),
                       meta=sample_meta(place=(1, BOX), stamp=(f"On behalf of {who} (buyer)",)))
    # pdftotext gives Arabic in its drawn (shaped, visual) order: compare the letters.
    wanted = {"".join(sorted(part)) for part in who.split()}
    found = {"".join(sorted(unicodedata.normalize("NFKC", w[0]))) for w in _words(out, 1)
             if _inside(w, BOX)}
    assert wanted <= found, (wanted, found)


def test_a_stamp_from_kept_fonts_is_the_stamp_made_afresh_and_the_next_second_keeps_them(
) -> None:
    from casesignd.signing import stamp_fonts

    def objects(lines: tuple[str, ...]) -> list[tuple[int, bytes]]:
        numbers = iter(range(10, 1000))
        return stamp.form(lines, 180, 50, lambda: next(numbers))[1]

    def forget() -> None:  # everything the process keeps of stamps drawn before
        for kept in (stamp._drawing, stamp._wrapped, stamp._placed, stamp._shown,
                     stamp._encoded, stamp_fonts._parts):
            kept.cache_clear()

    first = objects(LINES)
    forget()
    assert objects(LINES) == first
    stamp_fonts._parts.cache_clear()
    assert objects(LINES) == first
    drawn = stamp._drawing.cache_info().hits
    assert objects(LINES) == first
    assert stamp._drawing.cache_info().hits == drawn + 1  # the same words: drawn once
    later = (*LINES[:2], "Date 2026-12-05 07:00:01+01:00", *LINES[3:])
    before, wrapped = stamp_fonts._parts.cache_info(), stamp._wrapped.cache_info()
    assert objects(later)[1:] == first[1:]  # only the form's own stream differs
    assert stamp_fonts._parts.cache_info().hits > before.hits
    assert stamp._wrapped.cache_info().hits > wrapped.hits  # the lines that stayed
    assert stamp_fonts._parts.cache_info().maxsize == stamp_fonts.CACHE_SUBSETS
    forget()
    assert objects(later)[1:] == first[1:]


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_logo_is_fitted_beside_the_words_and_drawn_the_same_each_time(fmt: str) -> None:
    import io

    from PIL import Image

    from casesignd.signing import stamp_image

    pixels = Image.new("RGBA" if fmt == "PNG" else "RGB", (300, 100), (200, 0, 0))
    buf = io.BytesIO()
    pixels.save(buf, format=fmt)
    first = stamp.draw(LINES, 240, 70, logo=buf.getvalue())
    stamp_image.image.cache_clear()
    assert stamp.draw(LINES, 240, 70, logo=buf.getvalue()) == first
    assert first != stamp.draw(LINES, 240, 70)
    x, y, w, h = stamp.logo_box((300, 100), 240, 70)
    assert x >= stamp.PADDING_PT and x + w <= 240 * stamp.LOGO_SHARE and y >= 0 and y + h <= 70
    assert abs(w / h - 3) < 1e-9  # its proportions kept
    assert stamp.logo_box((300, 100), 4, 70) is None  # no room: no logo
