"""Contracts that carry signatures already, forms, and what may come after a signature.

Documents are signed by another signer with pyHanko (approval signatures, and a
certification with DocMDP), forms come from reportlab, LibreOffice and pdflatex, and
the later updates are pyHanko's: a changed field value, an approval signature, a
document security store, a document timestamp. Keys are generated at test time.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from casesignd import devpki
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


def pyhanko_sign(data: bytes, signer: OtherSigner, field: str, certify: str | None = None) -> bytes:
    """``data`` signed by ``signer`` in a new invisible field: an approval signature,
    or a certification with the DocMDP permission ``certify`` names (an MDPPerm)."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers

    meta = signers.PdfSignatureMetadata(
        field_name=field, certify=certify is not None,
        **({"docmdp_permissions": fields.MDPPerm[certify]} if certify else {}))
    writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    return signers.PdfSigner(meta, signer=signer.pyhanko()).sign_pdf(writer).getvalue()


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
    service's rewrite draws them once before it signs (casesignd.pdfdraw)."""
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
