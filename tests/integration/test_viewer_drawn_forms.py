"""Forms that leave their look to viewers (/NeedAppearances, or states without /AS)
are drawn once by the rewrite and signed: the signature validates, poppler shows the
pages as it showed the received form, and the form's states follow its values. The
same form carrying a signature cannot be rewritten, and is refused viewer_drawn_form.
Forms from reportlab, pdflatex (hyperref) and LibreOffice, and one assembled by hand."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest
from pyhanko.sign.validation.status import SignatureCoverageLevel

from casesignd.core.errors import CasesignError
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import pipeline
from tests.helpers_forms import (
    Forms,
    asks_viewers_again,
    difference,
    render,
    viewer_drawn_forms,
    widget_boxes,
)
from tests.helpers_pki import Pki, pki, pyhanko_statuses, sample_meta
from tests.helpers_presigned import OtherSigner, other_signer, pyhanko_sign

__all__ = ["pki"]  # fixtures

NAMES = ["reportlab", "checkbox_without_state", "pdflatex_hyperref", "libreoffice"]
# Of a page's pixels, the share that may look different at all: within the fields,
# poppler draws a received form its own way (its check mark, its text position) where
# the rewrite shows the producer's or qpdf's drawing.
MAX_CHANGED_SHARE = 0.0025


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> Forms:
    return viewer_drawn_forms(tmp_path_factory.mktemp("viewer_drawn"))


@pytest.fixture(scope="module")
def other(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> OtherSigner:
    return other_signer(tmp_path_factory.mktemp("other"), pki.ca)


@pytest.fixture(scope="module")
def signed(forms: Forms, pki: Pki, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, tuple[Path, pipeline.Checked]]:
    out_dir = tmp_path_factory.mktemp("signed")
    done = {}
    for name, src in forms.built.items():
        if name not in NAMES:
            continue
        out = out_dir / f"{name}.pdf"
        outcome = pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta())
        done[name] = (out, outcome.checked)
    return done


def _form(forms: Forms, name: str) -> Path:
    if name not in forms.built:
        pytest.skip(f"{name}: {forms.missing.get(name, 'not built')}")
    return forms.built[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_form_is_drawn_and_signed(name: str, forms: Forms, signed, pki: Pki) -> None:
    _form(forms, name)
    out, checked = signed[name]
    assert checked.normalized
    reasons = checked.audit_detail()["normalize_reasons"]
    assert any(r.startswith("the form's appearances were generated") for r in reasons)
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.intact and status.valid and status.bottom_line
    assert status.coverage == SignatureCoverageLevel.ENTIRE_FILE
    with pikepdf.open(out) as pdf:
        assert "/NeedAppearances" not in pdf.Root.AcroForm
        for page in pdf.pages:
            for annot in page.obj.get("/Annots", []):
                if str(annot.get("/Subtype")) != "/Widget" or str(annot.get("/FT")) == "/Sig":
                    continue
                normal = annot.AP.N
                if isinstance(normal, pikepdf.Stream):
                    continue
                # A button: every state drawn, and the one shown chosen by the value.
                assert all(isinstance(state, pikepdf.Stream) for state in normal.values())
                assert str(annot.AS) in normal
                value = annot.get("/V", annot.get("/Parent", {}).get("/V"))
                assert str(annot.AS) == (str(value) if str(value) in normal else "/Off")


@pytest.mark.parametrize("name", NAMES)
def test_the_pages_look_as_the_received_form_did(name: str, forms: Forms, signed) -> None:
    src = _form(forms, name)
    out, _checked = signed[name]
    before, after = render(src), render(out)
    assert before and len(before) == len(after)
    boxes = widget_boxes(out)
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        d = difference(a, b, boxes.get(i, []))
        # Outside the fields, nothing changed; within them, little.
        assert d.outside == 0, (name, i, d)
        assert d.total <= MAX_CHANGED_SHARE * d.pixels, (name, i, d)


@pytest.mark.parametrize("name", NAMES)
def test_the_form_with_a_signature_in_it_is_refused(
    name: str, forms: Forms, other: OtherSigner, tmp_path: Path
) -> None:
    src = _form(forms, name)
    presigned = tmp_path / "presigned.pdf"
    data = pyhanko_sign(src.read_bytes(), other, "Earlier")
    with pikepdf.open(src) as pdf:
        if "/NeedAppearances" in pdf.Root.AcroForm:
            # pyHanko clears the flag as it signs; a form filler after it sets it again.
            data = asks_viewers_again(data)
    presigned.write_bytes(data)
    with pytest.raises(CasesignError) as info:
        pipeline.check_file(presigned, PdfLimits(), tmp_path)
    assert (info.value.code, info.value.reason) == ("ambiguous_pdf", "viewer_drawn_form")


def test_a_multiline_value_no_one_here_lays_out_is_refused(forms: Forms, tmp_path: Path) -> None:
    # qpdf draws one line where viewers wrap the value: signing that would drop words.
    src = _form(forms, "pdflatex_multiline")
    with pytest.raises(CasesignError) as info:
        pipeline.check_file(src, PdfLimits(), tmp_path)
    assert (info.value.code, info.value.reason) == ("ambiguous_pdf", "viewer_drawn_form")
