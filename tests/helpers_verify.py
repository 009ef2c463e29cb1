"""Documents for the validator's tests, made with pyHanko and the test PKI: signatures
by another signer, the incremental updates an attacker would append (a page's content
rewritten, a signature field dropped, a locked form field changed), a long-term
(B-LTA) document, and a look-alike of the test signer that no anchor vouches for.

Everything is made at test time under pytest's tmp paths; no key is committed.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from asn1crypto import x509 as ax509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.generic import pdf_name, pdf_string
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign import fields, signers
from pyhanko.sign.timestamps import HTTPTimeStamper
from pyhanko_certvalidator import ValidationContext

from casesignd.ops import devpki
from tests.helpers_pki import PASSWORD, Pki


def _asn1(cert: x509.Certificate) -> ax509.Certificate:
    return ax509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))


def pyhanko_signer(pki: Pki, kind: str = "ec") -> signers.SimpleSigner:
    signer = signers.SimpleSigner.load_pkcs12(str(pki.pkcs12(kind)), passphrase=PASSWORD)
    assert signer is not None
    return signer


def pyhanko_sign(src: Path, dst: Path, pki: Pki, *, field: str = "Approval", kind: str = "ec",
                 tsa_url: str | None = None, lta: bool = False, certify: bool = False,
                 docmdp: fields.MDPPerm | None = None,
                 lock: fields.FieldMDPSpec | None = None) -> Path:
    """An approval (or, with ``certify``, a certification) signature by pyHanko in a new
    field; ``tsa_url`` makes it B-T, ``lta`` B-LTA (DSS and a document timestamp);
    ``lock`` puts a FieldMDP lock on the new field."""
    meta_kw: dict[str, object] = {}
    if lta:
        meta_kw = {"embed_validation_info": True, "use_pades_lta": True,
                   "validation_context": ValidationContext(trust_roots=[_asn1(pki.ca.cert)],
                                                           allow_fetching=False)}
    if certify:
        meta_kw["certify"] = True
        meta_kw["docmdp_permissions"] = docmdp or fields.MDPPerm.NO_CHANGES
    meta = signers.PdfSignatureMetadata(field_name=field, subfilter=fields.SigSeedSubFilter.PADES,
                                        **meta_kw)  # type: ignore[arg-type]
    spec = fields.SigFieldSpec(field, field_mdp_spec=lock) if lock is not None else None
    with open(src, "rb") as inf, open(dst, "wb") as out:
        writer = IncrementalPdfFileWriter(inf, strict=False)
        signers.sign_pdf(writer, meta, signer=pyhanko_signer(pki, kind), new_field_spec=spec,
                         timestamper=HTTPTimeStamper(tsa_url) if tsa_url else None, output=out)
    return dst


def update_pdf(src: Path, dst: Path, change: object) -> Path:
    """``dst``: ``src`` with one incremental update, made by ``change(writer)``."""
    with open(src, "rb") as inf:
        writer = IncrementalPdfFileWriter(inf, strict=False)
        change(writer)  # type: ignore[operator]
        with open(dst, "wb") as out:
            writer.write(out)
    return dst


def rewrite_page(src: Path, dst: Path, text: str = "the price is now 1,000,000") -> Path:
    """An incremental update that replaces the first page's content stream."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        page = page_ref.get_object()
        content = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
        page["/Contents"] = w.add_object(generic.StreamObject(stream_data=content))
        w.update_container(page)
    return update_pdf(src, dst, change)


def add_overlay(src: Path, dst: Path) -> Path:
    """An incremental update that lays an annotation over the first page: an opaque
    white square with the text "paid" drawn in its appearance (a shadow attack's
    overlay: the page's content is untouched, what a reader sees is not)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        rect = generic.ArrayObject(map(generic.NumberObject, (60, 780, 400, 830)))
        appearance = generic.StreamObject({
            pdf_name("/Type"): pdf_name("/XObject"), pdf_name("/Subtype"): pdf_name("/Form"),
            pdf_name("/BBox"): generic.ArrayObject(map(generic.NumberObject, (0, 0, 340, 50))),
        }, stream_data=b"1 g 0 0 340 50 re f 0 g BT /Helvetica 24 Tf 10 15 Td (paid) Tj ET")
        annot = w.add_object(generic.DictionaryObject({
            pdf_name("/Type"): pdf_name("/Annot"), pdf_name("/Subtype"): pdf_name("/Square"),
            pdf_name("/Rect"): rect, pdf_name("/P"): page_ref, pdf_name("/F"): generic.NumberObject(4),
            pdf_name("/AP"): generic.DictionaryObject({pdf_name("/N"): w.add_object(appearance)}),
        }))
        page = page_ref.get_object()
        annots = page.get("/Annots", generic.ArrayObject())
        annots.append(annot)
        page["/Annots"] = annots
        w.update_container(page)
    return update_pdf(src, dst, change)


def drop_signature_field(src: Path, dst: Path, name: str) -> Path:
    """An incremental update that takes the signature field ``name`` out of the form and
    its widget off the page, as if the document had never carried it."""
    def change(w: IncrementalPdfFileWriter) -> None:
        acro = w.root["/AcroForm"]
        kept = generic.ArrayObject(r for r in acro["/Fields"] if r.get_object().get("/T") != name)
        acro["/Fields"] = kept
        w.update_container(acro)
        for page_ref in w.root["/Pages"]["/Kids"]:
            page = page_ref.get_object()
            if "/Annots" in page:
                page["/Annots"] = generic.ArrayObject(
                    a for a in page["/Annots"] if a.get_object().get("/T") != name)
                w.update_container(page)
    return update_pdf(src, dst, change)


def add_text_field(src: Path, dst: Path, name: str, value: str) -> Path:
    """An incremental update that adds a text field ``name`` holding ``value``."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        tx = generic.DictionaryObject({
            pdf_name("/FT"): pdf_name("/Tx"), pdf_name("/T"): pdf_string(name),
            pdf_name("/V"): pdf_string(value), pdf_name("/Type"): pdf_name("/Annot"),
            pdf_name("/Subtype"): pdf_name("/Widget"), pdf_name("/P"): page_ref,
            pdf_name("/Rect"): generic.ArrayObject(map(generic.NumberObject, (72, 600, 300, 620))),
            pdf_name("/F"): generic.NumberObject(4),
        })
        ref = w.add_object(tx)
        root = w.root
        if "/AcroForm" not in root:
            root["/AcroForm"] = w.add_object(generic.DictionaryObject(
                {pdf_name("/Fields"): generic.ArrayObject()}))
            w.update_root()
        acro = root["/AcroForm"]
        acro["/Fields"].append(ref)
        w.update_container(acro)
        page = page_ref.get_object()
        annots = page.get("/Annots", generic.ArrayObject())
        annots.append(ref)
        page["/Annots"] = annots
        w.update_container(page)
    return update_pdf(src, dst, change)


def set_text_field(src: Path, dst: Path, name: str, value: str) -> Path:
    """An incremental update that changes the value of the text field ``name``."""
    def change(w: IncrementalPdfFileWriter) -> None:
        for ref in w.root["/AcroForm"]["/Fields"]:
            tx = ref.get_object()
            if tx.get("/T") == name:
                tx["/V"] = pdf_string(value)
                w.update_container(tx)
                return
        raise KeyError(name)
    return update_pdf(src, dst, change)


def look_alike(pki: Pki, directory: Path) -> tuple[devpki.Identity, devpki.Identity]:
    """Two forgeries of the test signer, with its subject names: one self-signed, one
    issued by a look-alike of the test CA (its subject and key identifier style, its own
    key). PKCS#12 files for both are written to ``directory``."""
    key = devpki.new_key("ec")
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    subject = pki.ec.cert.subject
    usage = x509.KeyUsage(digital_signature=True, content_commitment=True,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=False, crl_sign=False, encipher_only=False,
                          decipher_only=False)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .sign(key, hashes.SHA256()))
    self_signed = devpki.Identity(key, cert, [])
    fake_ca = devpki.make_ca(pki.ca.cert.subject.get_attributes_for_oid(
        x509.oid.NameOID.COMMON_NAME)[0].value, kind="ec")
    issued = devpki.issue(fake_ca, pki.ec.cert.subject.get_attributes_for_oid(
        x509.oid.NameOID.COMMON_NAME)[0].value, kind="ec")
    assert fake_ca.cert.subject == pki.ca.cert.subject and issued.cert.subject == subject
    for ident, name in ((self_signed, "self-signed"), (issued, "fake-ca")):
        devpki.write_pkcs12(directory / f"{name}.p12", ident, PASSWORD)
    return self_signed, issued


def cli_verify(pdf: Path, *args: str, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> tuple[int, dict | None, str]:
    """``casesignd verify PDF --json ARGS``: exit code, the JSON report (None when
    stdout is not JSON), stderr."""
    proc = subprocess.run([sys.executable, "-m", "casesignd", "verify", str(pdf), "--json", *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    return proc.returncode, report, proc.stderr
