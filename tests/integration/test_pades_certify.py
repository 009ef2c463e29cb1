"""Certification (DocMDP, PDF 32000-1 §12.8.2.2): the policy's first signature on a
document may certify it; later changes are then judged by its permission, and a
document that carries a signature already is not certified."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pypdf import PdfReader

from casesignd.core.errors import PermanentJobError
from casesignd.signing import pipeline
from tests.helpers_pki import Pki, nss_db, pdfsig, pki, pyhanko_statuses, reportlab_pdf, sample_meta
from tests.helpers_presigned import (
    FIELD,
    other_signer,
    pyhanko_sign,
    reportlab_form_pdf,
    set_field_value,
)

__all__ = ["pki"]  # fixtures


def _certified(src: Path, out: Path, pki: Pki, p: int) -> Path:
    pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta(certify=p))
    return out


@pytest.mark.parametrize("p", [1, 2, 3])
def test_the_first_signature_certifies_with_the_policys_permission(p: int, pki: Pki,
                                                                    tmp_path: Path) -> None:
    out = _certified(reportlab_form_pdf(tmp_path / "form.pdf"), tmp_path / "cert.pdf", pki, p)
    root = PdfReader(out).trailer["/Root"]
    sig = root["/Perms"]["/DocMDP"].get_object()
    docmdp = [r.get_object() for r in sig["/Reference"]
              if r.get_object()["/TransformMethod"] == "/DocMDP"]
    assert [r["/TransformParams"]["/P"] for r in docmdp] == [p]
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.bottom_line
    from pyhanko.pdf_utils.reader import PdfFileReader

    with open(out, "rb") as f:
        (embedded,) = PdfFileReader(f, strict=False).embedded_signatures
        assert embedded.docmdp_level is not None and int(embedded.docmdp_level.value) == p
    assert "Signature is Valid" in pdfsig(out, nss_db(tmp_path, pki.ca.cert))


def test_form_filling_after_a_p2_certification_is_form_filling(pki: Pki, tmp_path: Path) -> None:
    # A form field not locked by the certification: a new text field value would be
    # locked by the service's FieldMDP, so the form here has none of its own.
    out = _certified(reportlab_pdf(tmp_path / "plain.pdf"), tmp_path / "cert.pdf", pki, 2)
    later = pyhanko_sign(out.read_bytes(), other_signer(tmp_path, pki.ca), "Approval")
    filled = tmp_path / "filled.pdf"
    filled.write_bytes(later)
    first, _second = pyhanko_statuses(filled, [pki.ca.cert])
    assert first.bottom_line and first.docmdp_ok
    assert first.modification_level == ModificationLevel.FORM_FILLING


def test_a_change_after_a_p1_certification_fails(pki: Pki, tmp_path: Path) -> None:
    form = reportlab_form_pdf(tmp_path / "form.pdf")
    out = _certified(form, tmp_path / "cert.pdf", pki, 1)
    changed = tmp_path / "changed.pdf"
    changed.write_bytes(set_field_value(out.read_bytes(), FIELD, "Mallory"))
    (status,) = pyhanko_statuses(changed, [pki.ca.cert])
    assert status.intact and not status.docmdp_ok


def test_a_signed_document_is_not_certified(pki: Pki, tmp_path: Path) -> None:
    signed = tmp_path / "signed.pdf"
    signed.write_bytes(pyhanko_sign(reportlab_pdf(tmp_path / "plain.pdf").read_bytes(),
                                    other_signer(tmp_path, pki.ca), "Earlier"))
    with pytest.raises(PermanentJobError) as refused:
        pipeline.sign_file(signed, tmp_path / "out.pdf", pki.signer("ec"),
                           meta=sample_meta(certify=2))
    assert refused.value.code == "certification_not_first"
    assert not (tmp_path / "out.pdf").exists()


def test_the_services_own_long_term_updates_after_a_p1_certification_pass(
    pki: Pki, tmp_path: Path
) -> None:
    from tests.helpers_presigned import add_dss

    out = _certified(reportlab_pdf(tmp_path / "plain.pdf"), tmp_path / "cert.pdf", pki, 1)
    with_dss = tmp_path / "dss.pdf"
    with_dss.write_bytes(add_dss(out.read_bytes(), [pki.ca.cert]))
    (status,) = pyhanko_statuses(with_dss, [pki.ca.cert])
    assert status.bottom_line and status.docmdp_ok
    assert status.modification_level == ModificationLevel.LTA_UPDATES


def test_an_overlay_after_a_p1_certification_fails_casesignd_verify(pki: Pki, tmp_path: Path) -> None:
    import subprocess
    import sys

    from cryptography.hazmat.primitives.serialization import Encoding
    from pypdf import PdfWriter

    out = _certified(reportlab_pdf(tmp_path / "plain.pdf"), tmp_path / "cert.pdf", pki, 1)
    overlay = reportlab_pdf(tmp_path / "overlay.pdf", text="PAID IN FULL")
    writer = PdfWriter(out, incremental=True)
    writer.pages[0].merge_page(PdfReader(overlay).pages[0])
    changed = tmp_path / "overlaid.pdf"
    with open(changed, "wb") as f:
        writer.write(f)
    (tmp_path / "ca.pem").write_bytes(pki.ca.cert.public_bytes(Encoding.PEM))
    verify = [sys.executable, "-m", "casesignd", "verify", "--trust", str(tmp_path / "ca.pem")]
    ok = subprocess.run([*verify, str(out)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([*verify, str(changed)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0, bad.stdout + bad.stderr
