"""One test per rule casesignd adds on top of pyHanko's difference analysis
(:mod:`casesignd.verify.rules`), each on a file built here, and beside it what plain
pyHanko's analysis says of the same file where the rule changes the answer."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields
from pyhanko.sign.diff_analysis import DEFAULT_DIFF_POLICY, ModificationLevel
from pyhanko.sign.validation import validate_pdf_signature

from casesignd.verify import rules
from tests.helpers_pki import Pki, pki, reportlab_pdf
from tests.helpers_sigcorpus import (
    add_dss,
    covered_pdf,
    fill,
    form_pdf,
    shadow_hide,
    shadow_hide_and_replace,
    sig_field_overlay,
    sign,
)
from tests.helpers_verify import add_overlay, add_text_field

__all__ = ["pki"]  # fixture

LOCK = fields.FieldMDPSpec(fields.FieldMDPAction.INCLUDE, ["Name"])


@pytest.fixture(scope="module")
def files(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rules")
    base = reportlab_pdf(d / "base.pdf")
    out = {"signed": sign(base, d / "signed.pdf", pki)}
    out["locked"] = sign(form_pdf(base, d / "form.pdf", ("Name", "Note")), d / "locked.pdf",
                         pki, lock=LOCK)
    out["bg"] = sign(form_pdf(base, d / "form-bg.pdf", ("Name", "Note"), background=True),
                     d / "bg.pdf", pki)
    out["covered"] = sign(covered_pdf(base, d / "covered.pdf"), d / "covered-signed.pdf", pki)
    return out


def _explain(path: Path, lock: fields.FieldMDPSpec | None = LOCK,
             docmdp: fields.MDPPerm | None = None) -> ModificationLevel | None:
    with open(path, "rb") as f:
        reader = PdfFileReader(f, strict=False)
        return rules.explain_revisions(reader, _signed(reader), lock, docmdp)


def _overlays(path: Path) -> list[str]:
    with open(path, "rb") as f:
        reader = PdfFileReader(f, strict=False)
        return rules.overlays(reader, _signed(reader))


def _signed(reader: PdfFileReader) -> int:
    return reader.embedded_signatures[0].signed_revision


def _pyhanko(path: Path) -> ModificationLevel | None:
    logging.getLogger("pyhanko").setLevel(logging.CRITICAL)
    with open(path, "rb") as f:
        sig = PdfFileReader(f, strict=False).embedded_signatures[0]
        return validate_pdf_signature(sig, diff_policy=DEFAULT_DIFF_POLICY).modification_level


def test_a_form_fill_outside_the_lock_is_form_filling(files, tmp_path) -> None:
    # The widgets carry /P back to their page, as Acrobat's do: pyHanko cannot tell
    # how the filled field is reached and calls the fill OTHER.
    filled = fill(files["locked"], tmp_path / "filled.pdf", "Note", "ok")
    assert _pyhanko(filled) == ModificationLevel.OTHER
    assert _explain(filled) == ModificationLevel.FORM_FILLING
    assert _overlays(filled) == []


def test_a_locked_field_stays_locked(files, tmp_path) -> None:
    assert _explain(fill(files["locked"], tmp_path / "locked.pdf", "Name", "Mallory")) is None


def test_docmdp_no_changes_allows_no_fill(files, tmp_path) -> None:
    filled = fill(files["locked"], tmp_path / "filled.pdf", "Note", "ok")
    assert _explain(filled, docmdp=fields.MDPPerm.NO_CHANGES) is None
    assert _explain(filled, docmdp=fields.MDPPerm.FILL_FORMS) == ModificationLevel.FORM_FILLING


@pytest.mark.parametrize("vri", [False, True])
def test_dss_and_vri_updates_are_lta_updates(files, pki, tmp_path, vri) -> None:
    updated = add_dss(files["signed"], tmp_path / "dss.pdf", pki, vri=vri)
    assert _explain(updated, lock=None) == ModificationLevel.LTA_UPDATES


@pytest.mark.parametrize("attack", [shadow_hide, shadow_hide_and_replace])
def test_shadow_attacks_are_not_explained(files, tmp_path, attack) -> None:
    # Hide rewrites the covering stream; hide-and-replace points the page elsewhere.
    assert _explain(attack(files["covered"], tmp_path / "attack.pdf"), lock=None) is None


def test_a_new_text_field_is_not_explained(files, tmp_path) -> None:
    # New content, not a fill: only a later signer's own signature field may be added.
    added = add_text_field(files["signed"], tmp_path / "added.pdf", "Total", "1,000,000")
    assert _explain(added, lock=None) is None


def test_a_catalog_version_is_an_lta_update(files, tmp_path) -> None:
    from pyhanko.pdf_utils.generic import pdf_name

    from tests.helpers_verify import update_pdf

    def bump(w) -> None:  # type: ignore[no-untyped-def]
        w.root["/Version"] = pdf_name("/2.0")
        w.update_root()

    bumped = update_pdf(files["signed"], tmp_path / "v.pdf", bump)
    assert _explain(bumped, lock=None) == ModificationLevel.LTA_UPDATES


def test_an_annotation_is_not_explained(files, tmp_path) -> None:
    assert _explain(add_overlay(files["signed"], tmp_path / "annot.pdf"), lock=None) is None


def test_a_fill_whose_appearance_paints_a_box_is_an_overlay(files, tmp_path) -> None:
    # Replace: the field's new appearance covers the page with a box and other text.
    box = b"1 g 0 0 228 20 re f 0 g BT /Helvetica 12 Tf 2 5 Td (PAID) Tj ET"
    replaced = fill(files["locked"], tmp_path / "replaced.pdf", "Note", "x", appearance=box)
    assert _explain(replaced) == ModificationLevel.FORM_FILLING
    (why,) = _overlays(replaced)
    assert "Note" in why and "overlay" in why
    # Text alone is what a viewer draws for a filled field.
    text = b"/Tx BMC BT /Helvetica 12 Tf 2 5 Td (ok) Tj ET EMC"
    assert _overlays(fill(files["locked"], tmp_path / "text.pdf", "Note", "ok", appearance=text)) == []


def test_a_checkbox_switched_to_an_appearance_it_had_is_no_overlay(pki, tmp_path) -> None:
    from pyhanko.pdf_utils.generic import pdf_name
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    base = form_pdf(reportlab_pdf(tmp_path / "b.pdf"), tmp_path / "f.pdf", ("Box",))
    with open(base, "rb") as inf:  # the box gets its two appearances, both painted
        w = IncrementalPdfFileWriter(inf, strict=False)
        box = w.root["/AcroForm"]["/Fields"][0]
        on, off = (w.add_object(generic.StreamObject(
            {pdf_name("/BBox"): generic.ArrayObject(map(generic.NumberObject, (0, 0, 20, 20)))},
            stream_data=b"0 0 20 20 re f" if state else b"1 g 0 0 20 20 re f"))
            for state in (True, False))
        box["/FT"] = pdf_name("/Btn")
        box["/AP"] = generic.DictionaryObject({pdf_name("/N"): generic.DictionaryObject(
            {pdf_name("/Yes"): on, pdf_name("/Off"): off})})
        box["/AS"] = pdf_name("/Off")
        w.update_container(box)
        with open(tmp_path / "boxed.pdf", "wb") as out:
            w.write(out)
    signed = sign(tmp_path / "boxed.pdf", tmp_path / "s.pdf", pki)
    with open(signed, "rb") as inf:
        w = IncrementalPdfFileWriter(inf, strict=False)
        box = w.root["/AcroForm"]["/Fields"][0]
        box["/V"], box["/AS"] = pdf_name("/Yes"), pdf_name("/Yes")
        w.update_container(box)
        with open(tmp_path / "ticked.pdf", "wb") as out:
            w.write(out)
    assert _explain(tmp_path / "ticked.pdf", lock=None) == ModificationLevel.FORM_FILLING
    assert _overlays(tmp_path / "ticked.pdf") == []


def test_a_declared_background_is_no_overlay(files, tmp_path) -> None:
    box = b"1 g 0 0 228 20 re f 0 g BT /Helvetica 12 Tf 2 5 Td (ok) Tj ET"
    assert _overlays(fill(files["bg"], tmp_path / "bg.pdf", "Note", "ok", appearance=box)) == []


def test_an_empty_signature_field_that_paints_is_an_overlay(files, tmp_path) -> None:
    # pyHanko's rules accept a new signature field, whatever its widget shows.
    overlaid = sig_field_overlay(files["signed"], tmp_path / "sigfield.pdf")
    assert _pyhanko(overlaid) == ModificationLevel.FORM_FILLING
    assert _overlays(overlaid)


def test_a_later_visible_signature_is_no_overlay(files, pki, tmp_path) -> None:
    with_second = tmp_path / "second.pdf"
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import signers

    from tests.helpers_verify import pyhanko_signer

    with open(files["signed"], "rb") as inf, open(with_second, "wb") as out:
        w = IncrementalPdfFileWriter(inf, strict=False)
        signers.sign_pdf(w, signers.PdfSignatureMetadata(field_name="Second"),
                         signer=pyhanko_signer(pki),
                         new_field_spec=fields.SigFieldSpec("Second", box=(72, 72, 272, 122)),
                         output=out)
    assert _overlays(with_second) == []


@pytest.mark.parametrize(
    ("content", "want"),
    [
        (b"BT /F1 12 Tf (re f) Tj ET", False),  # the operators are inside a string
        (b"BT /F1 12 Tf <7265206620> Tj ET", False),
        (b"0 0 10 10 re f", True),
        (b"0 0 10 10 re\nf*", True),
        (b"q /Im1 Do Q", True),
        (b"/Sh1 sh", True),
        (b"0 0 10 10 re S", False),  # a stroked outline hides nothing
        (b"BI /W 1 /H 1 ID x EI", True),
    ],
)
def test_paints(content, want) -> None:
    assert rules.paints(generic.StreamObject(stream_data=content)) is want
