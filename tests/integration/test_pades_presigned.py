"""A contract that carries signatures already keeps them valid after the service signs
it: pyHanko's difference analysis classes everything the service's update adds as
form filling or better for each earlier signature (approval signatures by another
signer, a certification with DocMDP P=2, forms), with and without evidence, which
is then bound by digest in the signature dictionary instead of embedded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation.status import SignatureCoverageLevel

from casesignd import pades, pipeline
from casesignd.errors import CertifiedPdf
from tests.helpers_pki import (
    Pki,
    embedded_files,
    pdflatex_pdf,
    pdfsig,
    pki,
    reportlab_pdf,
    sample_meta,
)
from tests.helpers_presigned import (
    FIELD,
    OtherSigner,
    form_pdfs,
    last_signature,
    other_signer,
    pyhanko_sign,
    regular_statuses,
)

__all__ = ["pki"]  # fixtures

# name: (base, the earlier signatures, made in this order: (field, certify or None))
CASES = {
    "approval": ("plain", [("Approval", None)]),
    "two_approvals": ("plain", [("Approval", None), ("Second", None)]),
    "certified_p2": ("plain", [("Certification", "FILL_FORMS")]),
    "certified_p2_then_approval": ("plain", [("Certification", "FILL_FORMS"), ("Approval", None)]),
    "pdflatex_approval": ("pdflatex", [("Approval", None)]),
    "form": ("reportlab_form", []),
    "form_approval": ("reportlab_form", [("Approval", None)]),
    "form_certified_p2": ("reportlab_form", [("Certification", "FILL_FORMS")]),
    "libreoffice_form_approval": ("libreoffice_form", [("Approval", None)]),
    "pdflatex_form_approval": ("pdflatex_form", [("Approval", None)]),
}


@pytest.fixture(scope="module")
def other(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> OtherSigner:
    return other_signer(tmp_path_factory.mktemp("other"), pki.ca)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("bases")
    out = {"plain": reportlab_pdf(directory / "plain.pdf", pages=2)}
    out.update({f"{k}_form": v for k, v in form_pdfs(directory / "forms").items()})
    tex = directory / "tex"
    tex.mkdir()
    try:
        made = pdflatex_pdf(tex)
    except Exception:  # noqa: BLE001 - a TeX that cannot build the file is a skip
        made = None
    if made is not None:
        out["pdflatex"] = made
    return out


def _contract(case: str, bases: dict[str, Path], other: OtherSigner, tmp_path: Path) -> Path:
    base, earlier = CASES[case]
    if base not in bases:
        pytest.skip(f"{base} unavailable on this machine")
    data = bases[base].read_bytes()
    for field, certify in earlier:
        data = pyhanko_sign(data, other, field, certify)
    path = tmp_path / "contract.pdf"
    path.write_bytes(data)
    return path


def _evidence(tmp_path: Path) -> list[pades.Attachment]:
    photo, note = tmp_path / "photo-1.jpg", tmp_path / "note.txt"
    photo.write_bytes(b"\xff\xd8\xff\xe0 not really a photo")
    note.write_bytes("delivered on time — ünïcode\n".encode())
    return [pades.Attachment(photo, "photo-1.jpg", "image/jpeg"),
            pades.Attachment(note, "note.txt", "text/plain")]


@pytest.mark.parametrize("with_evidence", [False, True], ids=["no_evidence", "evidence"])
@pytest.mark.parametrize("case", list(CASES))
def test_earlier_signatures_stay_valid(
    case: str, with_evidence: bool, bases: dict[str, Path], other: OtherSigner, pki: Pki,
    tmp_path: Path,
) -> None:
    contract = _contract(case, bases, other, tmp_path)
    evidence = _evidence(tmp_path) if with_evidence else []
    out = tmp_path / "signed.pdf"
    outcome = pipeline.sign_file(contract, out, pki.signer("ec"), meta=sample_meta(),
                                 attachments=evidence)
    assert not outcome.checked.normalized  # a signed document is never rewritten
    statuses = regular_statuses(out, [pki.ca.cert])
    *earlier, ours = statuses
    assert len(earlier) == len(CASES[case][1])
    for status in earlier:
        assert status.intact and status.valid and status.trusted, status.pretty_print_details()
        assert status.docmdp_ok, status.diff_result
        assert status.modification_level <= ModificationLevel.FORM_FILLING, status.diff_result
    assert ours.bottom_line and ours.coverage == SignatureCoverageLevel.ENTIRE_FILE
    assert pdfsig(out).count("Signature is Valid") == len(statuses)

    _field, sig = last_signature(out)
    case_dict = sig["/CasesignCase"]
    if not evidence:
        assert outcome.checked.evidence == "" and "/Evidence" not in case_dict
        return
    binding = "digest" if earlier else "embedded"
    assert outcome.checked.evidence == binding
    assert outcome.checked.audit_detail()["evidence"] == binding
    assert case_dict["/EvidenceBinding"] == "/" + binding.capitalize()
    assert [(e["/Name"], e["/MediaType"], e["/Size"], e["/SHA256"]) for e in case_dict["/Evidence"]] \
        == [(a.name, a.media_type, a.path.stat().st_size,
             hashlib.sha256(a.path.read_bytes()).hexdigest()) for a in evidence]
    files = embedded_files(out)
    if earlier:
        assert files == {}
    else:
        assert files == {a.name: a.path.read_bytes() for a in evidence}


def test_the_signed_form_is_locked_after_an_earlier_signature(
    bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path
) -> None:
    contract = _contract("form_approval", bases, other, tmp_path)
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(contract, out, pki.signer("ec"), meta=sample_meta())
    field, _sig = last_signature(out)
    # The earlier signature field is not locked: only fields that are not signatures.
    assert list(field["/Lock"]["/Fields"]) == [FIELD]


def test_a_signature_whose_lock_forbids_changes_is_refused(
    bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path
) -> None:
    """A signed field's /Lock with DocMDP P=1 (PDF 2.0 §12.7.5.5) forbids any change,
    as a certification with P=1 does: a further signature would break it."""
    import io

    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers

    writer = IncrementalPdfFileWriter(io.BytesIO(bases["plain"].read_bytes()), strict=False)
    fields.append_signature_field(writer, fields.SigFieldSpec(
        "Locking", field_mdp_spec=fields.FieldMDPSpec(fields.FieldMDPAction.ALL),
        doc_mdp_update_value=fields.MDPPerm.NO_CHANGES))
    data = signers.PdfSigner(signers.PdfSignatureMetadata(field_name="Locking"),
                             signer=other.pyhanko()).sign_pdf(writer).getvalue()
    contract = tmp_path / "locked.pdf"
    contract.write_bytes(data)
    with pytest.raises(CertifiedPdf) as info:
        pipeline.sign_file(contract, tmp_path / "o.pdf", pki.signer("ec"), meta=sample_meta())
    assert info.value.code == "certified_no_changes"
    assert not (tmp_path / "o.pdf").exists()
