"""Signing into the document's own empty signature fields (PDF 32000-1 §12.7.4.5):
"Seller" in one job, "Buyer" in the next, each in its field's own rectangle, each
valid and trusted in pyHanko and pdfsig, the first kept at form filling by the second.
Fields made by pyHanko on a reportlab form, and by hand the way Acrobat nests a
field's widget under it (/Kids) with the author's own /Lock."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pypdf import PdfReader

from casesignd.core.errors import PermanentJobError
from casesignd.signing import pipeline
from tests.helpers_pki import Pki, nss_db, pdfsig, pki, pyhanko_statuses, sample_meta
from tests.helpers_presigned import FIELD, reportlab_form_pdf

__all__ = ["pki"]  # fixtures

SELLER_BOX = (72, 100, 272, 160)
BUYER_BOX = (320, 100, 520, 160)


def pyhanko_fields(path: Path) -> Path:
    """A reportlab form (one text field) with two empty signature fields pyHanko adds."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields

    form = reportlab_form_pdf(path.with_name("form.pdf"))
    writer = IncrementalPdfFileWriter(io.BytesIO(form.read_bytes()), strict=False)
    fields.append_signature_field(writer, fields.SigFieldSpec("Seller", on_page=0, box=SELLER_BOX))
    fields.append_signature_field(writer, fields.SigFieldSpec("Buyer", on_page=0, box=BUYER_BOX))
    buf = io.BytesIO()
    writer.write(buf)
    path.write_bytes(buf.getvalue())
    return path


def nested_fields(path: Path) -> Path:
    """Signature fields whose widgets are their kids, the Buyer's with its own /Lock
    (Table 233) on the text field, written with pypdf from a reportlab form."""
    from pypdf import PdfWriter
    from pypdf import generic as g

    writer = PdfWriter(clone_from=reportlab_form_pdf(path.with_name("form.pdf")))
    page = writer.pages[0]
    acro = writer._root_object["/AcroForm"]
    for name, box in (("Seller", SELLER_BOX), ("Buyer", BUYER_BOX)):
        field = g.DictionaryObject({g.NameObject("/FT"): g.NameObject("/Sig"),
                                    g.NameObject("/T"): g.TextStringObject(name)})
        if name == "Buyer":
            field[g.NameObject("/Lock")] = writer._add_object(g.DictionaryObject({
                g.NameObject("/Type"): g.NameObject("/SigFieldLock"),
                g.NameObject("/Action"): g.NameObject("/Include"),
                g.NameObject("/Fields"): g.ArrayObject([g.TextStringObject(FIELD)])}))
        field_ref = writer._add_object(field)
        widget = g.DictionaryObject({
            g.NameObject("/Type"): g.NameObject("/Annot"),
            g.NameObject("/Subtype"): g.NameObject("/Widget"),
            g.NameObject("/Rect"): g.ArrayObject([g.FloatObject(v) for v in box]),
            g.NameObject("/F"): g.NumberObject(4),
            g.NameObject("/P"): page.indirect_reference,
            g.NameObject("/Parent"): field_ref})
        widget_ref = writer._add_object(widget)
        field[g.NameObject("/Kids")] = g.ArrayObject([widget_ref])
        acro["/Fields"].append(field_ref)
        page["/Annots"].append(widget_ref)
    writer.write(path)
    return path


MAKERS = {"pyhanko": pyhanko_fields, "nested": nested_fields}


def _sign(src: Path, dst: Path, pki: Pki, field: str) -> Path:
    pipeline.sign_file(src, dst, pki.signer("ec"), meta=sample_meta(into_field=field))
    return dst


def _field(path: Path, name: str) -> tuple[object, object]:
    """(field, widget) of the field ``name``, read by pypdf."""
    for ref in PdfReader(path).trailer["/Root"]["/AcroForm"]["/Fields"]:
        field = ref.get_object()
        if field.get("/T") == name:
            kids = field.get("/Kids")
            return field, kids[0].get_object() if kids else field
    raise AssertionError(f"no field {name}")


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_seller_then_buyer_each_in_its_own_field(maker: str, pki: Pki, tmp_path: Path) -> None:
    src = MAKERS[maker](tmp_path / "fields.pdf")
    before = len(PdfReader(src).trailer["/Root"]["/AcroForm"]["/Fields"])
    seller = _sign(src, tmp_path / "seller.pdf", pki, "Seller")
    both = _sign(seller, tmp_path / "both.pdf", pki, "Buyer")
    # No new field: each signature is in the author's, in its own rectangle.
    assert len(PdfReader(both).trailer["/Root"]["/AcroForm"]["/Fields"]) == before
    for name, box in (("Seller", SELLER_BOX), ("Buyer", BUYER_BOX)):
        field, widget = _field(both, name)
        assert "/V" in field
        assert [float(v) for v in widget["/Rect"]] == [float(v) for v in box]
    first, second = pyhanko_statuses(both, [pki.ca.cert])
    assert first.bottom_line and second.bottom_line
    # The second job's signature fills a field: form filling for the first.
    assert first.docmdp_ok and first.modification_level <= ModificationLevel.FORM_FILLING
    if maker == "nested":
        # poppler (22.12) reads a signature field whose widget is its kid as unsigned,
        # pyHanko's own signature in it too (poppler work item 1684): pyHanko speaks here.
        return
    nssdir = nss_db(tmp_path, pki.ca.cert)
    report = pdfsig(both, nssdir)
    assert report.count("Signature is Valid") == 2, report
    if nssdir is not None:
        # pdfsig's NSS trusts one certificate once per run: the same signer's second
        # signature reads "Unknown issue" there, as two service signatures on main do.
        assert "Certificate is Trusted" in report, report


def test_the_fields_own_lock_is_kept_and_recorded(pki: Pki, tmp_path: Path) -> None:
    signed = _sign(nested_fields(tmp_path / "fields.pdf"), tmp_path / "buyer.pdf", pki, "Buyer")
    field, _widget = _field(signed, "Buyer")
    lock = field["/Lock"].get_object()
    assert lock["/Action"] == "/Include" and list(lock["/Fields"]) == [FIELD]
    (ref,) = field["/V"].get_object()["/Reference"]
    params = ref.get_object()["/TransformParams"]
    assert params["/Action"] == "/Include" and list(params["/Fields"]) == [FIELD]
    (status,) = pyhanko_statuses(signed, [pki.ca.cert])
    assert status.bottom_line


@pytest.mark.parametrize(("name", "code"), [
    ("Witness", "signature_field_not_found"),
    (FIELD, "signature_field_not_found"),  # a text field is no signature field
    ("Seller", "signature_field_already_signed"),
])
def test_a_missing_or_signed_field_is_refused_before_the_key(
    name: str, code: str, pki: Pki, tmp_path: Path
) -> None:
    seller = _sign(pyhanko_fields(tmp_path / "fields.pdf"), tmp_path / "seller.pdf", pki, "Seller")

    class Untouchable:  # the key is never reached
        def __getattr__(self, name: str) -> object:
            raise AssertionError("the key was used")

    out = tmp_path / "refused.pdf"
    with pytest.raises(PermanentJobError) as refused:
        pipeline.sign_file(seller, out, Untouchable(), meta=sample_meta(into_field=name))
    assert refused.value.code == code and refused.value.reason == code
    assert refused.value.where == {"field": name}
    assert not out.exists()
