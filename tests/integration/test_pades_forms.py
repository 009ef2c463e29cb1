"""The service's signature locks the form (FieldMDP, PDF 32000-1 §12.8.2.4): a field
value changed after it fails pyHanko's difference analysis, while what PAdES and
further signers legitimately add later (an approval signature in a new field, a DSS,
a document timestamp) does not. Forms from reportlab, LibreOffice and pdflatex."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation.status import SignatureCoverageLevel

from casesignd.signing import pipeline
from tests.helpers_pki import Pki, pki, pyhanko_statuses, reportlab_pdf, sample_meta
from tests.helpers_presigned import (
    FIELD,
    OtherSigner,
    add_document_timestamp,
    add_dss,
    form_pdfs,
    last_signature,
    other_signer,
    pyhanko_sign,
    regular_statuses,
    set_field_value,
)
from tests.helpers_tsa import LocalTsa
from tests.helpers_tsa import tsa as tsa_server

__all__ = ["pki", "tsa_server"]  # fixtures

PRODUCERS = ["reportlab", "libreoffice", "pdflatex"]


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return form_pdfs(tmp_path_factory.mktemp("forms"))


@pytest.fixture(scope="module")
def other(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> OtherSigner:
    return other_signer(tmp_path_factory.mktemp("other"), pki.ca)


def _form(forms: dict[str, Path], producer: str) -> Path:
    if producer not in forms:
        pytest.skip(f"{producer} unavailable on this machine")
    return forms[producer]


def _signed(src: Path, pki: Pki, tmp_path: Path) -> bytes:
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(src, out, pki.signer("ec"), meta=sample_meta())
    return out.read_bytes()


def _ours(data: bytes, pki: Pki, tmp_path: Path, name: str) -> object:
    """pyHanko's status of the service's signature in ``data`` (the first one)."""
    path = tmp_path / name
    path.write_bytes(data)
    return regular_statuses(path, [pki.ca.cert])[0]


@pytest.mark.parametrize("producer", PRODUCERS)
def test_the_signature_locks_the_form_fields(
    producer: str, forms: dict[str, Path], pki: Pki, tmp_path: Path
) -> None:
    signed = tmp_path / "signed.pdf"
    signed.write_bytes(_signed(_form(forms, producer), pki, tmp_path))
    field, sig = last_signature(signed)
    assert dict(field["/Lock"]) == {"/Type": "/SigFieldLock", "/Action": "/Include",
                                    "/Fields": [FIELD]}
    (ref,) = sig["/Reference"]
    assert ref["/Type"] == "/SigRef" and ref["/TransformMethod"] == "/FieldMDP"
    assert dict(ref["/TransformParams"]) == {"/Type": "/TransformParams", "/Action": "/Include",
                                             "/Fields": [FIELD], "/V": "/1.2"}
    (status,) = pyhanko_statuses(signed, [pki.ca.cert])
    assert status.bottom_line and status.coverage == SignatureCoverageLevel.ENTIRE_FILE


@pytest.mark.parametrize("producer", PRODUCERS)
def test_a_changed_field_value_breaks_the_services_signature(
    producer: str, forms: dict[str, Path], pki: Pki, other: OtherSigner, tmp_path: Path
) -> None:
    form = _form(forms, producer)
    changed = set_field_value(_signed(form, pki, tmp_path), FIELD, "Mallory")
    ours = _ours(changed, pki, tmp_path, "changed.pdf")
    # The bytes it signed are intact; what came after is a change it forbids.
    assert ours.intact and ours.valid
    assert not ours.docmdp_ok and ours.modification_level == ModificationLevel.OTHER
    assert "locked" in str(ours.diff_result)
    # Without a lock the same change is form filling, which an approval signature allows.
    unlocked = set_field_value(pyhanko_sign(form.read_bytes(), other, "Unlocked"), FIELD, "Mallory")
    theirs = _ours(unlocked, pki, tmp_path, "unlocked.pdf")
    assert theirs.docmdp_ok and theirs.modification_level == ModificationLevel.FORM_FILLING


@pytest.mark.parametrize("producer", PRODUCERS)
def test_later_signatures_and_long_term_data_keep_the_services_signature(
    producer: str, forms: dict[str, Path], pki: Pki, other: OtherSigner, tsa_server: LocalTsa,
    tmp_path: Path,
) -> None:
    signed = _signed(_form(forms, producer), pki, tmp_path)
    later = {
        "approval": (pyhanko_sign(signed, other, "Later"), ModificationLevel.FORM_FILLING),
        "dss": (add_dss(signed, [pki.ca.cert]), ModificationLevel.LTA_UPDATES),
        "timestamp": (add_document_timestamp(signed, tsa_server.url), ModificationLevel.LTA_UPDATES),
    }
    for what, (data, level) in later.items():
        ours = _ours(data, pki, tmp_path, f"{what}.pdf")
        assert ours.bottom_line and ours.docmdp_ok, (what, ours.diff_result)
        assert ours.modification_level == level, (what, ours.diff_result)


def test_a_document_without_fields_gets_no_lock(pki: Pki, tmp_path: Path) -> None:
    signed = tmp_path / "signed.pdf"
    signed.write_bytes(_signed(reportlab_pdf(tmp_path / "plain.pdf"), pki, tmp_path))
    field, sig = last_signature(signed)
    assert "/Lock" not in field and "/Reference" not in sig
