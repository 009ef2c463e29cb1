"""A contract that carries signatures already keeps them valid after the service signs
it: pyHanko's difference analysis classes everything the service's update adds as
form filling or better for each earlier signature, and poppler's pdfsig finds every
signature valid, with and without evidence, which is then bound by digest in the
signature dictionary instead of embedded.

The earlier signatures are pyHanko's (approval, visible, in a field made before,
certifications with DocMDP P=2 and P=3), the service's own (over a form too, whose
fields its lock covers), and a small signer written in the tests (a classic
cross-reference table after any kind, the /AcroForm direct or not); the documents are
laid out as producers do (object and cross-reference streams, a hybrid file, /Annots
direct or indirect, an /EmbeddedFiles tree, forms with a direct /AcroForm)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation.status import SignatureCoverageLevel

from casesignd.core.errors import CertifiedPdf
from casesignd.signing import pades, pipeline
from tests.helpers_pki import (
    Pki,
    embedded_files,
    hybrid_pdf,
    pdflatex_pdf,
    pdfsig,
    pki,
    reportlab_pdf,
    sample_meta,
)
from tests.helpers_presigned import (
    FIELD,
    OtherSigner,
    add_dss,
    form_pdfs,
    handmade_sign,
    last_signature,
    layouts,
    other_signer,
    pyhanko_sign,
    regular_statuses,
)

__all__ = ["pki"]  # fixtures

# name: (base, the earlier signatures, made in this order: (signer, field, option)).
# pyhanko's option: the DocMDP permission of a certification (an MDPPerm), "visible",
# or "precreated" (a visible field made by an update before it is signed); handmade's:
# "direct", the /AcroForm direct in the catalog; casesignd: the service itself.
APPROVAL = ("pyhanko", "Approval", None)
SERVICE = ("casesignd", "", None)
HANDMADE = ("handmade", "Other", None)
CASES = {
    "approval": ("plain", [APPROVAL]),
    "two_approvals": ("plain", [APPROVAL, ("pyhanko", "Second", None)]),
    "certified_p2": ("plain", [("pyhanko", "Certification", "FILL_FORMS")]),
    "certified_p2_then_approval": ("plain", [("pyhanko", "Certification", "FILL_FORMS"), APPROVAL]),
    "certified_p3": ("plain", [("pyhanko", "Certification", "ANNOTATE")]),
    "visible_approval": ("plain", [("pyhanko", "Approval", "visible")]),
    "precreated_field_approval": ("plain", [("pyhanko", "Approval", "precreated")]),
    "pdflatex_approval": ("pdflatex", [APPROVAL]),
    "form": ("reportlab_form", []),
    "form_approval": ("reportlab_form", [APPROVAL]),
    "form_certified_p2": ("reportlab_form", [("pyhanko", "Certification", "FILL_FORMS")]),
    "libreoffice_form_approval": ("libreoffice_form", [APPROVAL]),
    "pdflatex_form_approval": ("pdflatex_form", [APPROVAL]),
    "service": ("plain", [SERVICE]),
    "service_form": ("reportlab_form", [SERVICE]),
    "service_form_then_approval": ("reportlab_form", [SERVICE, APPROVAL]),
    "approval_then_service_form": ("reportlab_form", [APPROVAL, SERVICE]),
    "handmade": ("plain", [HANDMADE]),
    "handmade_direct_acroform": ("plain", [("handmade", "Other", "direct")]),
    "handmade_form": ("reportlab_form", [HANDMADE]),
    "objstm_approval": ("objstm", [APPROVAL]),
    "objstm_handmade": ("objstm", [HANDMADE]),
    "objstm_service_form": ("objstm_form", [SERVICE]),
    "hybrid_approval": ("hybrid", [APPROVAL]),
    "annots_direct_approval": ("annots_direct", [APPROVAL]),
    "annots_indirect_approval": ("annots_indirect", [APPROVAL]),
    "annots_direct_handmade": ("annots_direct", [HANDMADE]),
    "names_approval": ("names", [APPROVAL]),
    "direct_acroform_form_approval": ("direct_acroform_form", [APPROVAL]),
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
    out["hybrid"] = hybrid_pdf(directory / "hybrid.pdf")
    out.update(layouts(out["plain"], out["reportlab_form"], directory / "layouts"))
    return out


def _contract(case: str, bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path) -> Path:
    base, earlier = CASES[case]
    if base not in bases:
        pytest.skip(f"{base} unavailable on this machine")
    path = tmp_path / "contract.pdf"
    path.write_bytes(bases[base].read_bytes())
    for signer, field, option in earlier:
        if signer == "casesignd":
            pipeline.sign_file(path, tmp_path / "service.pdf", pki.signer("rsa"), meta=sample_meta())
            (tmp_path / "service.pdf").replace(path)
        elif signer == "handmade":
            path.write_bytes(handmade_sign(path.read_bytes(), other, field, acroform_direct=option == "direct"))
        else:
            look = {"visible": option == "visible", "precreated": option == "precreated"}
            certify = option if option not in look else None
            path.write_bytes(pyhanko_sign(path.read_bytes(), other, field, certify, **look))
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
    contract = _contract(case, bases, other, pki, tmp_path)
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
        assert files == embedded_files(contract)  # the document's own, if any: none added
    else:
        assert files == {a.name: a.path.read_bytes() for a in evidence}


def test_the_signed_form_is_locked_after_an_earlier_signature(
    bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path
) -> None:
    contract = _contract("form_approval", bases, other, pki, tmp_path)
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(contract, out, pki.signer("ec"), meta=sample_meta())
    field, _sig = last_signature(out)
    # The earlier signature field is not locked: only fields that are not signatures.
    assert list(field["/Lock"]["/Fields"]) == [FIELD]


def test_a_form_the_service_signed_stays_locked_by_that_signature(
    bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path
) -> None:
    """The service's second signature over a form leaves the field its first one locks
    to that lock, appearance and all (see casesignd.pdf.form): both signatures then
    survive what comes after, a document security store here."""
    contract = _contract("service_form", bases, other, pki, tmp_path)
    first, _sig = last_signature(contract)
    assert list(first["/Lock"]["/Fields"]) == [FIELD]
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(contract, out, pki.signer("ec"), meta=sample_meta())
    field, sig = last_signature(out)
    assert "/Lock" not in field and "/Reference" not in sig
    later = tmp_path / "dss.pdf"
    later.write_bytes(add_dss(out.read_bytes(), [pki.ca.cert]))
    statuses = regular_statuses(later, [pki.ca.cert])
    assert [s.modification_level for s in statuses] == [ModificationLevel.FORM_FILLING,
                                                        ModificationLevel.LTA_UPDATES]
    assert all(s.bottom_line for s in statuses), [s.pretty_print_details() for s in statuses]


def test_a_certification_against_any_change_is_refused(
    bases: dict[str, Path], other: OtherSigner, pki: Pki, tmp_path: Path
) -> None:
    contract = tmp_path / "certified.pdf"
    contract.write_bytes(pyhanko_sign(bases["plain"].read_bytes(), other, "Certification", "NO_CHANGES"))
    with pytest.raises(CertifiedPdf) as info:
        pipeline.sign_file(contract, tmp_path / "o.pdf", pki.signer("ec"), meta=sample_meta())
    assert info.value.code == "certified_no_changes"
    assert not (tmp_path / "o.pdf").exists()


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
