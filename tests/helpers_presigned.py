"""Contracts that carry signatures already, forms, and what may come after a signature.

Documents are signed by another signer with pyHanko (approval signatures, and a
certification with DocMDP), forms come from reportlab, LibreOffice and pdflatex, and
the later updates are pyHanko's: a changed field value, an approval signature, a
document security store, a document timestamp. Keys are generated at test time.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from casesignd.ops import devpki
from tests.helpers_corpus import libreoffice_html

FIELD = "buyer"  # the text field of every form here (hyperref drops underscores)
PASSWORD = b"other-signer"


@dataclass(frozen=True)
class OtherSigner:
    """A signer other than the service, with its CA (the service's or its own)."""

    p12: Path
    ca_cert: x509.Certificate

    def pyhanko(self) -> Any:
        from pyhanko.sign import signers

        return signers.SimpleSigner.load_pkcs12(str(self.p12), passphrase=PASSWORD)


def other_signer(directory: Path, ca: devpki.Identity | None = None) -> OtherSigner:
    ca = ca or devpki.make_ca("another CA")
    p12 = directory / "other-signer.p12"
    if not p12.exists():
        devpki.write_pkcs12(p12, devpki.issue(ca, "another signer", kind="rsa"), PASSWORD)
    return OtherSigner(p12, ca.cert)


def pyhanko_sign(data: bytes, signer: OtherSigner, field: str, certify: str | None = None, *,
                 visible: bool = False, precreated: bool = False) -> bytes:
    """``data`` signed by ``signer`` in a new invisible field: an approval signature,
    or a certification with the DocMDP permission ``certify`` names (an MDPPerm).
    ``visible``: the field has a box on page 1; ``precreated``: the (visible) field is
    made by an update of its own first, and the signature fills it."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers

    spec = fields.SigFieldSpec(field, on_page=0, box=(72, 72, 272, 122)) if visible or precreated else None
    if precreated:
        writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
        fields.append_signature_field(writer, spec)
        buf = io.BytesIO()
        writer.write(buf)
        data, spec = buf.getvalue(), None
    meta = signers.PdfSignatureMetadata(
        field_name=field, certify=certify is not None,
        **({"docmdp_permissions": fields.MDPPerm[certify]} if certify else {}))
    writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    return signers.PdfSigner(meta, signer=signer.pyhanko(), new_field_spec=spec).sign_pdf(writer).getvalue()


def handmade_sign(data: bytes, signer: OtherSigner, field: str, *, acroform_direct: bool = False) -> bytes:
    """``data`` signed the way a small tool signs, written here by hand: one incremental
    update with a classic cross-reference table (whatever the file used before), an
    invisible signature field, the /AcroForm direct in the catalog when
    ``acroform_direct`` (or when it was), /SigFlags 3, and a CMS made by OpenSSL
    (``adbe.pkcs7.detached``, PDF 32000-1 §12.8.3.3) over the ByteRange."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.serialization import pkcs7, pkcs12
    from pypdf import PdfReader
    from pypdf import generic as g

    key, cert, _chain = pkcs12.load_key_and_certificates(signer.p12.read_bytes(), PASSWORD)
    assert key is not None and cert is not None
    reader = PdfReader(io.BytesIO(data))
    trailer = reader.trailer
    root_ref = trailer.raw_get("/Root")
    catalog = g.DictionaryObject(root_ref.get_object())
    page = reader.pages[0]
    page_ref = page.indirect_reference
    size = int(trailer["/Size"])
    sig_num, field_num = size, size + 1
    objects: dict[int, tuple[int, Any]] = {}  # number -> (generation, object)

    def ref(num: int) -> g.IndirectObject:
        return g.IndirectObject(num, 0, reader)

    acro_raw = catalog.raw_get("/AcroForm") if "/AcroForm" in catalog else None
    acro = g.DictionaryObject(acro_raw.get_object()) if acro_raw is not None else g.DictionaryObject()
    acro[g.NameObject("/Fields")] = g.ArrayObject([*acro.get("/Fields", []), ref(field_num)])
    acro[g.NameObject("/SigFlags")] = g.NumberObject(3)
    if isinstance(acro_raw, g.IndirectObject) and not acroform_direct:
        objects[acro_raw.idnum] = (acro_raw.generation, acro)
    else:
        catalog[g.NameObject("/AcroForm")] = acro
    objects[root_ref.idnum] = (root_ref.generation, catalog)
    annots_raw = page.raw_get("/Annots") if "/Annots" in page else None
    annots = g.ArrayObject([*(annots_raw.get_object() if annots_raw is not None else []), ref(field_num)])
    if isinstance(annots_raw, g.IndirectObject):
        objects[annots_raw.idnum] = (annots_raw.generation, annots)
    else:
        new_page = g.DictionaryObject(page)
        new_page[g.NameObject("/Annots")] = annots
        objects[page_ref.idnum] = (page_ref.generation, new_page)
    objects[field_num] = (0, g.DictionaryObject({  # the field and its widget (§12.5.6.19)
        g.NameObject("/FT"): g.NameObject("/Sig"), g.NameObject("/T"): g.TextStringObject(field),
        g.NameObject("/V"): ref(sig_num), g.NameObject("/Type"): g.NameObject("/Annot"),
        g.NameObject("/Subtype"): g.NameObject("/Widget"), g.NameObject("/P"): page_ref,
        g.NameObject("/F"): g.NumberObject(132), g.NameObject("/Rect"): g.ArrayObject([g.NumberObject(0)] * 4)}))

    out = bytearray(data if data.endswith(b"\n") else data + b"\n")
    offsets: dict[int, tuple[int, int]] = {}
    for num, (gen, obj) in sorted(objects.items()):
        buf = io.BytesIO()
        obj.write_to_stream(buf)
        offsets[num] = (len(out), gen)
        out += b"%d %d obj\n" % (num, gen) + buf.getvalue() + b"\nendobj\n"
    contents_hex = 2 * 8192
    offsets[sig_num] = (len(out), 0)
    when = dt.datetime.now(dt.UTC).strftime("D:%Y%m%d%H%M%SZ").encode()
    out += (b"%d 0 obj\n<</Type /Sig /Filter /Adobe.PPKLite /SubFilter /adbe.pkcs7.detached"
            b" /M (%s) /ByteRange [0 0000000000 0000000000 0000000000] /Contents <" % (sig_num, when))
    start = len(out) - 1
    out += b"0" * contents_hex + b">>>\nendobj\n"
    end = start + contents_hex + 2
    xref_at = len(out)
    prev = int(data[data.rindex(b"startxref"):].split()[1])
    out += b"xref\n0 1\n0000000000 65535 f\r\n"
    for num, (off, gen) in sorted(offsets.items()):
        out += b"%d 1\n%010d %05d n\r\n" % (num, off, gen)
    old_id = trailer.get("/ID")
    first = bytes(old_id[0].original_bytes) if old_id else os.urandom(16)
    info_raw = trailer.raw_get("/Info") if "/Info" in trailer else None
    info = b" /Info %d %d R" % (info_raw.idnum, info_raw.generation) \
        if isinstance(info_raw, g.IndirectObject) else b""
    out += (b"trailer\n<</Size %d /Root %d %d R /Prev %d%s /ID [<%s> <%s>]>>\nstartxref\n%d\n%%%%EOF\n"
            % (field_num + 1, root_ref.idnum, root_ref.generation, prev, info,
               first.hex().encode(), os.urandom(16).hex().encode(), xref_at))
    byte_range = b"[0 %d %d %d]" % (start, end, len(out) - end)
    at = out.index(b"[0 0000000000 0000000000 0000000000]", offsets[sig_num][0])
    out[at:at + 36] = byte_range.ljust(36)
    cms = pkcs7.PKCS7SignatureBuilder().set_data(bytes(out[:start] + out[end:])).add_signer(
        cert, key, hashes.SHA256()).sign(serialization.Encoding.DER,
                                          [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary])
    out[start + 1:start + 1 + 2 * len(cms)] = cms.hex().encode()
    return bytes(out)


# --- forms ---------------------------------------------------------------------------


def reportlab_form_pdf(path: Path) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.drawString(72, 770, "Buyer name:")
    c.acroForm.textfield(name=FIELD, x=160, y=760, width=200, height=20, value="J. Doe")
    c.showPage()
    c.save()
    return path


def libreoffice_form_pdf(directory: Path) -> Path | None:
    """An HTML form converted by LibreOffice: a text field with an appearance stream."""
    if shutil.which("soffice") is None:
        return None
    return libreoffice_html(directory, "form", (
        "<html><body><h1>Service agreement</h1><form><p>Buyer name: "
        f'<input type="text" name="{FIELD}" value="J. Doe" size="30"></p></form></body></html>'))


def pdflatex_form_pdf(directory: Path) -> Path | None:
    """hyperref's text field (no appearance stream: /NeedAppearances)."""
    if shutil.which("pdflatex") is None:
        return None
    # hyperref loads Zapf Dingbats for check boxes; a TeX without its metrics gets cmr.
    (directory / "form.tex").write_text(
        "\\documentclass{article}\\usepackage{hyperref}"
        "\\DeclareFontFamily{U}{pzd}{}\\DeclareFontShape{U}{pzd}{m}{n}{<->cmr10}{}"
        "\\begin{document}Service agreement.\\begin{Form}"
        f"\\TextField[name={FIELD},width=6cm,value={{J. Doe}}]{{Buyer name:}}"
        "\\end{Form}\\end{document}\n")
    subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "form.tex"],
                   cwd=directory, check=True, timeout=120, capture_output=True)
    return directory / "form.pdf"


def form_pdfs(directory: Path) -> dict[str, Path]:
    """The forms this machine can make, by producer, as the producer wrote them.
    LibreOffice and hyperref ask viewers to draw the fields (/NeedAppearances): the
    service's rewrite draws them once before it signs (casesignd.pdf.draw)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {"reportlab": reportlab_form_pdf(directory / "reportlab-form.pdf")}
    for name, make in (("libreoffice", libreoffice_form_pdf), ("pdflatex", pdflatex_form_pdf)):
        sub = directory / name
        sub.mkdir(parents=True, exist_ok=True)
        try:
            made = make(sub)
            if made is not None:
                out[name] = made
        except (subprocess.SubprocessError, OSError):
            continue
    return out



# --- the same documents laid out otherwise ---------------------------------------------


def layouts(plain: Path, form: Path, directory: Path) -> dict[str, Path]:
    """``plain`` and ``form`` as other producers lay them out: object streams and
    cross-reference streams (qpdf), page 1's /Annots direct or indirect (holding a
    text annotation), an /EmbeddedFiles name tree, the form's /AcroForm direct in the
    catalog."""
    import pikepdf

    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, src in (("objstm", plain), ("objstm_form", form)):
        out[name] = directory / f"{name}.pdf"
        subprocess.run(["qpdf", "--object-streams=generate", str(src), str(out[name])],
                       check=True, timeout=60, capture_output=True)

    def edit(name: str, src: Path, change: Any) -> None:
        with pikepdf.open(src) as pdf:
            change(pdf)
            out[name] = directory / f"{name}.pdf"
            pdf.save(out[name])

    def annots(indirect: bool) -> Any:
        def change(pdf: Any) -> None:
            note = pdf.make_indirect(pikepdf.Dictionary(
                Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text, Rect=[10, 10, 30, 30],
                Contents=pikepdf.String("a note")))
            array = pikepdf.Array([note])
            pdf.pages[0].obj.Annots = pdf.make_indirect(array) if indirect else array
        return change

    def attach(pdf: Any) -> None:
        pdf.attachments["terms.txt"] = pikepdf.AttachedFileSpec(pdf, b"terms", mime_type="text/plain")

    def direct_acroform(pdf: Any) -> None:
        acro = pdf.Root.AcroForm
        pdf.Root.AcroForm = pikepdf.Dictionary({k: acro[k] for k in acro})

    edit("annots_direct", plain, annots(False))
    edit("annots_indirect", plain, annots(True))
    edit("names", plain, attach)
    edit("direct_acroform_form", form, direct_acroform)
    return out


# --- what may come after a signature ---------------------------------------------------


def set_field_value(data: bytes, field: str, value: str) -> bytes:
    """An incremental update that changes the value of the top-level field ``field``."""
    from pyhanko.pdf_utils.generic import pdf_string
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    for ref in writer.root["/AcroForm"]["/Fields"]:
        node = ref.get_object()
        if node.get("/T") == field:
            node["/V"] = pdf_string(value)
            writer.update_container(node)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def add_dss(data: bytes, certs: list[x509.Certificate]) -> bytes:
    """An incremental update adding a document security store (PAdES B-LT's)."""
    from asn1crypto import x509 as ax509
    from pyhanko.sign.validation.dss import DocumentSecurityStore

    buf = io.BytesIO(data)
    DocumentSecurityStore.add_dss(buf, sig_contents=None, certs=[
        ax509.Certificate.load(c.public_bytes(serialization.Encoding.DER)) for c in certs])
    return buf.getvalue()


def add_document_timestamp(data: bytes, tsa_url: str) -> bytes:
    """An incremental update adding a document timestamp (PAdES B-LTA's)."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import signers, timestamps

    writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    stamper = signers.PdfTimeStamper(timestamps.HTTPTimeStamper(tsa_url))
    return stamper.timestamp_pdf(writer, "sha256").getvalue()


def regular_statuses(path: Path, trust: list[x509.Certificate]) -> list[Any]:
    """pyHanko's status of every signature in ``path`` but document timestamps, in
    file order, with its default difference analysis."""
    from asn1crypto import x509 as ax509
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    roots = [ax509.Certificate.load(c.public_bytes(serialization.Encoding.DER)) for c in trust]
    with open(path, "rb") as f:
        reader = PdfFileReader(f, strict=False)
        return [validate_pdf_signature(sig, ValidationContext(trust_roots=roots, allow_fetching=False))
                for sig in reader.embedded_regular_signatures]


def last_signature(path: Path) -> tuple[Any, Any]:
    """The field and the signature dictionary of the last signature, read by pypdf."""
    from pypdf import PdfReader

    reader = PdfReader(path)
    field = reader.trailer["/Root"]["/AcroForm"]["/Fields"][-1].get_object()
    return field, field["/V"].get_object()
