"""Visible signatures in the signature fields of real producers' forms: a reportlab
form and a LibreOffice Writer form, each with two empty fields, signed "Seller" and
then "Buyer", each valid in pyHanko and pdfsig, the first kept at form filling, each
stamp's words inside its field's rectangle (``pdftotext -bbox``). And a form that is
both rewritten (its look left to viewers, drawn once by the rewrite) and stamped:
poppler and MuPDF draw the signed page as the received one but in the fields the
rewrite drew and in the stamp's box, and as the rewrite but in the stamp's box.

Neither producer makes an empty signature field: reportlab's acroform has text, check
box, radio, list and choice fields only, and LibreOffice's PDF export (7.4) writes a
/Sig field only when it signs the export itself. So the form is the producer's, and
its two signature fields are added with pikepdf, the way an author's tool places them:
a merged field and widget (PDF 32000-1 §12.7.4.5) in the form's /Fields and the
page's /Annots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel

from casesignd.pdf import normalize
from casesignd.pdf import render as pdfrender
from casesignd.signing import pipeline
from tests.helpers_pki import Pki, nss_db, pdfsig, pki, pyhanko_statuses, sample_meta
from tests.helpers_presigned import libreoffice_form_pdf, reportlab_form_pdf
from tests.integration.test_pades_fields import BUYER_BOX, SELLER_BOX
from tests.integration.test_pades_stamp import _fractions, _inside, _words

__all__ = ["pki"]  # fixtures

SUBJECT = "Signed by CN=casesignd test signer EC"
WHEN = "Date 2026-12-05 07:00:00+01:00"
SELLER_LINES = (SUBJECT, "On behalf of Acme Ltd (seller)", WHEN, "Policy contract-v1")
BUYER_LINES = (SUBJECT, "On behalf of Jane Doe (buyer)", WHEN, "Policy contract-v1")


def with_signature_fields(src: Path, dst: Path) -> Path:
    """``src`` with the empty signature fields "Seller" and "Buyer" on its first page."""
    import pikepdf

    with pikepdf.open(src) as pdf:
        page = pdf.pages[0].obj
        if "/AcroForm" not in pdf.Root:
            pdf.Root.AcroForm = pdf.make_indirect(pikepdf.Dictionary(Fields=pikepdf.Array()))
        if "/Annots" not in page:
            page.Annots = pikepdf.Array()
        for name, box in (("Seller", SELLER_BOX), ("Buyer", BUYER_BOX)):
            field = pdf.make_indirect(pikepdf.Dictionary(
                Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Widget, FT=pikepdf.Name.Sig,
                T=pikepdf.String(name), Rect=pikepdf.Array(box), F=4, P=page))
            pdf.Root.AcroForm.Fields.append(field)
            page.Annots.append(field)
        pdf.save(dst)
    return dst


def _reportlab(tmp: Path) -> Path:
    return with_signature_fields(reportlab_form_pdf(tmp / "form.pdf"), tmp / "fields.pdf")


def _libreoffice(tmp: Path) -> Path:
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice (soffice) is not installed: Debian's libreoffice-writer-nogui")
    made = libreoffice_form_pdf(tmp / "lo")
    assert made is not None
    return with_signature_fields(made, tmp / "fields.pdf")


PRODUCERS = {"reportlab": _reportlab, "libreoffice": _libreoffice}


def _sign(src: Path, dst: Path, pki: Pki, field: str, lines: tuple[str, ...]) -> Path:
    pipeline.sign_file(src, dst, pki.signer("ec"), meta=sample_meta(into_field=field, stamp=lines))
    return dst


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_seller_then_buyer_stamped_in_a_producers_own_fields(
    producer: str, pki: Pki, tmp_path: Path
) -> None:
    (tmp_path / "lo").mkdir()
    src = PRODUCERS[producer](tmp_path)
    seller = _sign(src, tmp_path / "seller.pdf", pki, "Seller", SELLER_LINES)
    both = _sign(seller, tmp_path / "both.pdf", pki, "Buyer", BUYER_LINES)
    first, second = pyhanko_statuses(both, [pki.ca.cert])
    assert first.bottom_line and second.bottom_line
    assert first.docmdp_ok and first.modification_level <= ModificationLevel.FORM_FILLING
    assert pdfsig(both, nss_db(tmp_path, pki.ca.cert)).count("Signature is Valid") == 2
    words = _words(both, 1)
    for box, own, other in ((SELLER_BOX, "Acme", "Jane"), (BUYER_BOX, "Jane", "Acme")):
        inside = [w[0] for w in words if _inside(w, box)]
        assert {"Signed", own, "contract-v1"} <= set(inside), (box, inside)
        assert other not in inside


def test_a_form_rewritten_and_stamped_changes_only_in_its_drawn_fields_and_its_stamp(
    pki: Pki, tmp_path: Path
) -> None:
    from tests.helpers_forms import viewer_drawn_forms

    src = viewer_drawn_forms(tmp_path / "forms").built["reportlab"]  # /NeedAppearances
    rewrite, _warnings, drawn = normalize.rewrite(src, tmp_path / "rewrite.pdf")
    assert drawn.viewer_drawn  # the rewrite draws what viewers would have
    box = (300.0, 40.0, 540.0, 110.0)
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta(place=(1, box),
                                                                    stamp=SELLER_LINES))
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.bottom_line
    from pypdf import PdfReader

    reader = PdfReader(out)
    crop = tuple(float(v) for v in reader.pages[0].cropbox)
    stamp = _fractions(box, crop, 0)
    fields = pdfrender.drawn_boxes(PdfReader(rewrite), drawn.viewer_drawn).get(1, [])
    assert fields
    # Against the rewrite: the stamp's box is the one region that changes.
    for masks, changed in (({}, True), ({1: [stamp]}, False)):
        for engine, result in pdfrender.compare(rewrite, out, pages=1, workdir=None,
                                                masks=masks).items():
            assert not result.failed, (engine, result)
            assert (result.page == 1) is changed, (engine, masks, result)
    # Against what was received: the fields the viewers drew their own way, and the stamp.
    for engine, result in pdfrender.compare(src, out, pages=1, workdir=None,
                                            masks={1: [*fields, stamp]}).items():
        assert result.page is None and not result.failed, (engine, result)
    assert any(w[0] == "Signed" and _inside(w, box) for w in _words(out, 1))
