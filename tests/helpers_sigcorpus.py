"""A corpus of signed PDFs for the validator, built at test time, each with the verdict
it should get (issue 41): signatures by pyHanko and by casesignd, PKCS#7 detached and a
hand-built adbe.pkcs7.sha1 one, a document timestamp, a hybrid-reference file, a form
fill under a FieldMDP lock, DSS and VRI updates, shadow attacks (hide, replace,
hide-and-replace) and an annotation overlay, ByteRanges that overlap, run past the end
or leave a gap, a corrupt CMS, a SignedData followed by other bytes, a CMS without its
signer's certificate, a timestamp token in a /Sig dictionary, a damaged DSS stream and
a trailer with ``/Encrypt null``. endesive's signatures are not among them: its
dependency oscrypto cannot find this system's OpenSSL 3 (LibraryNotFoundError).

Everything is made under the caller's directory with the test PKI; nothing is
committed. ``build_corpus(pki, directory)`` returns ``{name: (path, Expect)}``; the
expectations are those of a validator given the test CA as its only anchor, offline.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from asn1crypto import cms as acms
from asn1crypto import keys as akeys
from asn1crypto import x509 as ax509
from cryptography.hazmat.primitives import serialization
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.generic import pdf_name, pdf_string
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign import fields, signers
from pyhanko.sign.signers.cms_embedder import PdfCMSEmbedder, SigIOSetup, SigObjSetup
from pyhanko.sign.timestamps.dummy_client import DummyTimeStamper
from pyhanko.sign.validation.dss import DocumentSecurityStore

from tests.helpers_pki import Pki, hybrid_pdf, reportlab_pdf, sample_meta
from tests.helpers_verify import add_overlay, pyhanko_signer, rewrite_page, update_pdf

PASSED, FAILED, INDETERMINATE = "TOTAL-PASSED", "TOTAL-FAILED", "INDETERMINATE"


@dataclass(frozen=True)
class Expect:
    """The verdict on the file's first signature (in signing order)."""

    indication: str
    sub_indication: str | None
    intact: bool | None
    valid: bool | None
    modification: str | None


OK = Expect(PASSED, None, True, True, "none")
UNCHECKED = Expect(INDETERMINATE, "FORMAT_FAILURE", None, None, None)
TAMPERED = Expect(FAILED, "FORMAT_FAILURE", True, True, "other")


def _asn1(cert: object) -> ax509.Certificate:
    return ax509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))  # type: ignore[attr-defined]


def timestamper(pki: Pki) -> DummyTimeStamper:
    """pyHanko's in-process TSA with the test PKI's TSA certificate."""
    key = akeys.PrivateKeyInfo.load(pki.tsa.key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return DummyTimeStamper(_asn1(pki.tsa.cert), key, certs_to_embed=[_asn1(pki.ca.cert)])


def sign(src: Path, dst: Path, pki: Pki, *, field: str = "Sig1", pkcs7: bool = False,
         md: str | None = None, stamped: bool = False, lock: fields.FieldMDPSpec | None = None) -> Path:
    """A pyHanko approval signature in a new field (PAdES, or adbe.pkcs7.detached)."""
    meta = signers.PdfSignatureMetadata(
        field_name=field, md_algorithm=md,
        subfilter=(fields.SigSeedSubFilter.ADOBE_PKCS7_DETACHED if pkcs7
                   else fields.SigSeedSubFilter.PADES))
    spec = fields.SigFieldSpec(field, field_mdp_spec=lock) if lock is not None else None
    with open(src, "rb") as inf, open(dst, "wb") as out:
        w = IncrementalPdfFileWriter(inf, strict=False)
        signers.sign_pdf(w, meta, signer=pyhanko_signer(pki), new_field_spec=spec,
                         timestamper=timestamper(pki) if stamped else None, output=out)
    return dst


def doc_timestamp(src: Path, dst: Path, pki: Pki) -> Path:
    """A document timestamp (ETSI.RFC3161) appended to ``src``."""
    with open(src, "rb") as inf, open(dst, "wb") as out:
        w = IncrementalPdfFileWriter(inf, strict=False)
        signers.PdfTimeStamper(timestamper(pki)).timestamp_pdf(w, "sha256", output=out)
    return dst


def embed_cms(src: Path, dst: Path, field: str, subfilter: str, md: str,
              make: Callable[[bytes], acms.ContentInfo]) -> Path:
    """A signature by hand: a /Sig with ``subfilter`` in a new ``field``, whose /Contents
    is ``make(digest)``, ``digest`` being the ``md`` digest of the signed bytes."""
    with open(src, "rb") as inf:
        w = IncrementalPdfFileWriter(inf, strict=False)
        embed = PdfCMSEmbedder().write_cms(field_name=field, writer=w)
        next(embed)
        placeholder = signers.SignatureObject(bytes_reserved=8192)
        placeholder["/SubFilter"] = pdf_name(subfilter)
        embed.send(SigObjSetup(sig_placeholder=placeholder))
        prep, out = embed.send(SigIOSetup(md_algorithm=md, in_place=False, output=io.BytesIO()))
        embed.send(make(prep.document_digest))
    dst.write_bytes(out.getvalue())
    return dst


def sign_pkcs7_sha1(src: Path, dst: Path, pki: Pki) -> Path:
    """adbe.pkcs7.sha1 by hand (PDF 32000-1 §12.8.3.3.1): the CMS encapsulates the SHA-1
    digest of the signed byte ranges and signs that."""
    signer = pyhanko_signer(pki)
    return embed_cms(src, dst, "Sig1", "/adbe.pkcs7.sha1", "sha1", lambda digest: asyncio.run(
        signer.async_sign_general_data(digest, "sha1", detached=False)))


def timestamp_as_signature(src: Path, dst: Path, pki: Pki) -> Path:
    """A /Sig signature dictionary whose /SubFilter is ETSI.RFC3161: its /Contents is a
    timestamp token over the signed bytes, as some signers write one."""
    return embed_cms(src, dst, "Stamp", "/ETSI.RFC3161", "sha256", lambda digest: asyncio.run(
        timestamper(pki).async_timestamp(digest, "sha256")))


def form_pdf(src: Path, dst: Path, names: tuple[str, ...], background: bool = False) -> Path:
    """``src`` with empty text fields ``names``, one below the other (``background``:
    each declares a white background, /MK /BG)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        refs = []
        for i, name in enumerate(names):
            y = 600 - 40 * i
            refs.append(w.add_object(generic.DictionaryObject({
                pdf_name("/FT"): pdf_name("/Tx"), pdf_name("/T"): pdf_string(name),
                pdf_name("/Type"): pdf_name("/Annot"), pdf_name("/Subtype"): pdf_name("/Widget"),
                pdf_name("/P"): page_ref, pdf_name("/F"): generic.NumberObject(4),
                pdf_name("/Rect"): generic.ArrayObject(map(generic.NumberObject, (72, y, 300, y + 20))),
                **({pdf_name("/MK"): generic.DictionaryObject({pdf_name("/BG"): generic.ArrayObject(
                    [generic.NumberObject(1)])})} if background else {}),
            })))
        w.root["/AcroForm"] = w.add_object(generic.DictionaryObject(
            {pdf_name("/Fields"): generic.ArrayObject(refs)}))
        w.update_root()
        page = page_ref.get_object()
        page["/Annots"] = generic.ArrayObject(refs)
        w.update_container(page)
    return update_pdf(src, dst, change)


def fill(src: Path, dst: Path, name: str, value: str, appearance: bytes | None = None) -> Path:
    """An update that fills the text field ``name`` (and, given, its appearance)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        for ref in w.root["/AcroForm"]["/Fields"]:
            tx = ref.get_object()
            if tx.get("/T") == name:
                tx["/V"] = pdf_string(value)
                if appearance is not None:
                    ap = generic.StreamObject({
                        pdf_name("/Type"): pdf_name("/XObject"),
                        pdf_name("/Subtype"): pdf_name("/Form"),
                        pdf_name("/BBox"): generic.ArrayObject(map(generic.NumberObject, (0, 0, 228, 20))),
                    }, stream_data=appearance)
                    tx["/AP"] = generic.DictionaryObject({pdf_name("/N"): w.add_object(ap)})
                w.update_container(tx)
    return update_pdf(src, dst, change)


def sig_field_overlay(src: Path, dst: Path) -> Path:
    """An update that adds an empty signature field whose widget paints a white box with
    "PAID" over the page (pyHanko's rules accept a new signature field)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        ap = w.add_object(generic.StreamObject({
            pdf_name("/Type"): pdf_name("/XObject"), pdf_name("/Subtype"): pdf_name("/Form"),
            pdf_name("/BBox"): generic.ArrayObject(map(generic.NumberObject, (0, 0, 340, 50))),
        }, stream_data=b"1 g 0 0 340 50 re f 0 g BT /Helvetica 24 Tf 10 15 Td (PAID) Tj ET"))
        fields.append_signature_field(w, fields.SigFieldSpec("Overlay", box=(60, 780, 400, 830)))
        # pyHanko made the field; its widget gets the overlay's appearance.
        for ref in w.root["/AcroForm"]["/Fields"]:
            obj = ref.get_object()
            if obj.get("/T") == "Overlay":
                obj["/AP"] = generic.DictionaryObject({pdf_name("/N"): ap})
                w.update_container(obj)
    return update_pdf(src, dst, change)


def add_dss(src: Path, dst: Path, pki: Pki, *, vri: bool = False) -> Path:
    """An update with a DSS holding the chain (and, with ``vri``, a VRI entry for the
    first signature, keyed as ETSI EN 319 142-1 §5.4.2.3 says)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        contents = None
        if vri:
            sig = w.prev.embedded_signatures[0]
            contents = sig.sig_object.raw_get("/Contents").original_bytes
        DocumentSecurityStore.supply_dss_in_writer(
            w, contents, certs=[_asn1(pki.ec.cert), _asn1(pki.ca.cert)])
    return update_pdf(src, dst, change)


# --- damage done to the bytes ---------------------------------------------------------


def _contents_span(data: bytes) -> tuple[int, int]:
    """Where the first signature's /Contents hex string lies (between < and >)."""
    m = re.search(rb"/Contents\s*<([0-9a-fA-F]+)>", data)
    assert m is not None
    return m.start(1), m.end(1)


def replace_cms(src: Path, dst: Path, der: bytes) -> Path:
    """``src`` with its first signature's CMS replaced by ``der`` (zero-padded)."""
    data = src.read_bytes()
    a, b = _contents_span(data)
    hexed = der.hex().encode()
    assert len(hexed) <= b - a
    dst.write_bytes(data[:a] + hexed + b"0" * (b - a - len(hexed)) + data[b:])
    return dst


def _cms_of(path: Path) -> bytes:
    data = path.read_bytes()
    a, b = _contents_span(data)
    info = acms.ContentInfo.load(bytes.fromhex(data[a:b].decode()))
    return info.dump()


def without_certificates(src: Path, dst: Path) -> Path:
    """The CMS with its certificates left out: the signer cannot be found."""
    data = src.read_bytes()
    a, b = _contents_span(data)
    info = acms.ContentInfo.load(bytes.fromhex(data[a:b].decode()).rstrip(b"\0"))
    signed = info["content"]
    signed["certificates"] = acms.CertificateSet([])
    return replace_cms(src, dst, acms.ContentInfo({"content_type": "signed_data",
                                                   "content": signed}).dump(force=True))


def set_byte_range(src: Path, dst: Path, make: Callable[[list[int], int], list[int]]) -> Path:
    """The first /ByteRange rewritten by ``make(old, file_length)``, in the same width."""
    data = src.read_bytes()
    m = re.search(rb"/ByteRange\s*\[([^\]]*)\]", data)
    assert m is not None
    old = [int(x) for x in m.group(1).split()]
    new = " ".join(str(x) for x in make(old, len(data))).encode()
    width = m.end(1) - m.start(1)
    assert len(new) <= width
    dst.write_bytes(data[:m.start(1)] + new.ljust(width) + data[m.end(1):])
    return dst


def damaged_dss(src: Path, dst: Path, pki: Pki) -> Path:
    """An update with a DSS whose certificate stream claims /FlateDecode but holds bytes
    zlib cannot inflate (and the chain, intact, beside it)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        DocumentSecurityStore.supply_dss_in_writer(
            w, None, certs=[_asn1(pki.ec.cert), _asn1(pki.ca.cert)])
        dss = w.root["/DSS"]
        broken = w.add_object(generic.StreamObject(
            {pdf_name("/Filter"): pdf_name("/FlateDecode")}, encoded_data=b"\x78\x9c" + b"\xff" * 40))
        dss["/Certs"].append(broken)
    return update_pdf(src, dst, change)


def encrypt_null(src: Path, dst: Path) -> Path:
    """An update that changes nothing but carries ``/Encrypt null`` in its trailer."""
    data = src.read_bytes()
    prev = int(re.findall(rb"startxref\s+(\d+)", data)[-1])
    size = int(re.findall(rb"/Size\s+(\d+)", data)[-1])
    root = re.findall(rb"/Root\s+(\d+\s+\d+\s+R)", data)[-1]
    at = len(data) + 1
    tail = (b"\nxref\n0 0\ntrailer\n<< /Size %d /Root %s /Prev %d /Encrypt null >>\n"
            b"startxref\n%d\n%%%%EOF\n" % (size, root, prev, at))
    dst.write_bytes(data + tail)
    return dst


# --- shadow attacks (Mainka, Mladenov, Rohlmann: "Shadow Attacks", NDSS 2021) ----------


def covered_pdf(src: Path, dst: Path) -> Path:
    """``src`` whose page draws a second content stream: a white box with "100 EUR"
    over the text "1,000,000 EUR" (the hidden content a shadow attack reveals)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        page = page_ref.get_object()
        hidden = w.add_object(generic.StreamObject(
            stream_data=b"BT /F1 24 Tf 72 500 Td (1,000,000 EUR) Tj ET"))
        cover = w.add_object(generic.StreamObject(
            stream_data=b"1 g 60 480 400 60 re f 0 g BT /F1 24 Tf 72 500 Td (100 EUR) Tj ET"))
        first = page.raw_get("/Contents")
        page["/Contents"] = generic.ArrayObject([first, hidden, cover])
        w.update_container(page)
    return update_pdf(src, dst, change)


def shadow_hide(src: Path, dst: Path) -> Path:
    """Hide: the update empties the covering stream (same object, new revision)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page = w.root["/Pages"]["/Kids"][0]
        cover_ref = page.raw_get("/Contents").raw_get(2)
        cover = cover_ref.get_object()
        cover._data = b""  # the stream now draws nothing
        cover._encoded_data = None
        w.mark_update(cover_ref)
    return update_pdf(src, dst, change)


def shadow_hide_and_replace(src: Path, dst: Path) -> Path:
    """Hide-and-replace: the update points the page at the hidden stream alone."""
    def change(w: IncrementalPdfFileWriter) -> None:
        page = w.root["/Pages"]["/Kids"][0]
        page["/Contents"] = page.raw_get("/Contents").raw_get(1)
        w.update_container(page)
    return update_pdf(src, dst, change)


def shadow_replace_by_field(src: Path, dst: Path) -> Path:
    """Replace: a form field's new appearance paints a box over the page's text (a
    change pyHanko's diff analysis accepts as form filling)."""
    return fill(src, dst, "Note", "x",
                appearance=b"1 g 0 0 228 20 re f 0 g BT /Helvetica 12 Tf 2 5 Td (PAID) Tj ET")


# --- the corpus ------------------------------------------------------------------------


def build_corpus(pki: Pki, d: Path) -> dict[str, tuple[Path, Expect]]:
    """Every file of the corpus with the verdict it should get."""
    from casesignd.signing import pipeline

    d.mkdir(parents=True, exist_ok=True)
    base = reportlab_pdf(d / "base.pdf")
    pades = sign(base, d / "pades.pdf", pki)
    out: dict[str, tuple[Path, Expect]] = {"pyhanko_pades": (pades, OK)}

    def add(name: str, path: Path, expect: Expect) -> None:
        out[name] = (path, expect)

    casesignd = d / "casesignd.pdf"
    pipeline.sign_file(base, casesignd, pki.signer("ec"), meta=sample_meta())
    add("casesignd_pades", casesignd, OK)
    add("pyhanko_pkcs7", sign(base, d / "pkcs7.pdf", pki, pkcs7=True), OK)
    # SHA-1 is weak under the algorithm policy (ETSI TS 119 102-1 §5.2.8): checked,
    # intact, and undecided.
    weak = Expect(INDETERMINATE, "CRYPTO_CONSTRAINTS_FAILURE", True, True, "none")
    add("pkcs7_sha1", sign_pkcs7_sha1(base, d / "pkcs7-sha1.pdf", pki), weak)
    add("pkcs7_detached_sha1", sign(base, d / "pkcs7-sha1md.pdf", pki, pkcs7=True, md="sha1"), weak)
    stamped = sign(base, d / "b-t.pdf", pki, stamped=True)
    add("pades_b_t", stamped, OK)
    add("doc_timestamp", doc_timestamp(stamped, d / "dts.pdf", pki),
        Expect(PASSED, None, True, True, "lta_updates"))
    add("hybrid_reference", sign(hybrid_pdf(d / "hybrid.pdf"), d / "hybrid-signed.pdf", pki), OK)
    # The empty update is an xref section of its own: pyHanko's LTA_UPDATES.
    add("encrypt_null", encrypt_null(pades, d / "encrypt-null.pdf"),
        Expect(PASSED, None, True, True, "lta_updates"))

    form = form_pdf(base, d / "form.pdf", ("Name", "Note"))
    lock = fields.FieldMDPSpec(fields.FieldMDPAction.INCLUDE, ["Name"])
    locked = sign(form, d / "form-signed.pdf", pki, lock=lock)
    add("fieldmdp_fill_unlocked", fill(locked, d / "fill-unlocked.pdf", "Note", "ok"),
        Expect(PASSED, None, True, True, "form_filling"))
    add("fieldmdp_fill_locked", fill(locked, d / "fill-locked.pdf", "Name", "Mallory"), TAMPERED)
    add("shadow_replace_field", shadow_replace_by_field(locked, d / "shadow-replace.pdf"), TAMPERED)

    lta = Expect(PASSED, None, True, True, "lta_updates")
    add("dss_update", add_dss(pades, d / "dss.pdf", pki), lta)
    add("vri_update", add_dss(pades, d / "vri.pdf", pki, vri=True), lta)
    add("damaged_dss", damaged_dss(pades, d / "dss-damaged.pdf", pki), lta)

    covered = sign(covered_pdf(base, d / "covered.pdf"), d / "covered-signed.pdf", pki)
    add("shadow_hide", shadow_hide(covered, d / "shadow-hide.pdf"), TAMPERED)
    add("shadow_hide_and_replace",
        shadow_hide_and_replace(covered, d / "shadow-hide-replace.pdf"), TAMPERED)
    add("rewritten_page", rewrite_page(pades, d / "rewritten.pdf"), TAMPERED)
    add("annotation_overlay", add_overlay(pades, d / "overlay.pdf"), TAMPERED)
    add("sig_field_overlay", sig_field_overlay(pades, d / "sigfield-overlay.pdf"), TAMPERED)

    # A ByteRange that does not describe the file (ETSI TS 119 102-1 §5.2.2, format
    # checking): fails, whatever the digest says.
    bad_form = Expect(FAILED, "FORMAT_FAILURE", None, None, None)
    add("byterange_overlap", set_byte_range(
        pades, d / "br-overlap.pdf", lambda r, n: [0, r[2] + 10, r[2], r[3]]), bad_form)
    add("byterange_past_end", set_byte_range(
        pades, d / "br-past-end.pdf", lambda r, n: [0, r[1], r[2], r[3] + 1000]), bad_form)
    add("byterange_gap", set_byte_range(
        pades, d / "br-gap.pdf", lambda r, n: [0, r[1] - 10, r[2], r[3]]), bad_form)

    add("corrupt_cms", replace_cms(pades, d / "corrupt-cms.pdf", b"\x04\x03abc" * 40), UNCHECKED)
    # A SignedData followed by bytes that are not padding: what is signed is not what
    # a reader of the whole /Contents sees (RFC 5652 §5.1, DER).
    cms = _cms_of(pades)
    add("cms_trailing_bytes", replace_cms(pades, d / "cms-trailing.pdf", cms + b"\x30\x03abc"),
        bad_form)
    add("rfc3161_on_sig", timestamp_as_signature(base, d / "rfc3161-sig.pdf", pki), OK)
    add("no_signer_certificate", without_certificates(pades, d / "no-cert.pdf"),
        Expect(INDETERMINATE, "NO_SIGNING_CERTIFICATE_FOUND", None, None, "none"))
    return out


def damage(data: bytes, at: int, xor: int = 0x55) -> bytes:
    """``data`` with the byte at ``at`` (modulo its length) changed."""
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (xor or 1)]) + data[i + 1:]


def regions(data: bytes) -> dict[str, tuple[int, int]]:
    """Where a fuzzer does the most harm: the first /Contents, the last DSS-like
    stream, the cross-reference sections and trailers."""
    a, b = _contents_span(data)
    out = {"contents": (a, b), "whole": (0, len(data))}
    xref = data.rfind(b"xref")
    out["xref"] = (max(0, xref), len(data))
    dss = data.rfind(b"/DSS")
    if dss >= 0:
        out["dss"] = (dss, min(len(data), dss + 2000))
    return out


def many_signatures(src: Path, dst: Path, count: int) -> Path:
    """The security probe's document: an update of ``count`` signature fields, each
    carrying a copy of the first signature (its /Contents and /ByteRange)."""
    def change(w: IncrementalPdfFileWriter) -> None:
        first = w.prev.embedded_signatures[0].sig_object
        page_ref = w.root["/Pages"].raw_get("/Kids")[0]
        acro = w.root["/AcroForm"]
        for i in range(count):
            value = w.add_object(generic.DictionaryObject({
                pdf_name("/Type"): pdf_name("/Sig"), pdf_name("/Filter"): first["/Filter"],
                pdf_name("/SubFilter"): first["/SubFilter"],
                pdf_name("/ByteRange"): first.raw_get("/ByteRange"),
                pdf_name("/Contents"): first.raw_get("/Contents"),
            }))
            acro["/Fields"].append(w.add_object(generic.DictionaryObject({
                pdf_name("/FT"): pdf_name("/Sig"), pdf_name("/T"): pdf_string(f"Copy{i}"),
                pdf_name("/V"): value, pdf_name("/Type"): pdf_name("/Annot"),
                pdf_name("/Subtype"): pdf_name("/Widget"), pdf_name("/P"): page_ref,
                pdf_name("/Rect"): generic.ArrayObject([generic.NumberObject(0)] * 4),
            })))
        w.update_container(acro)
    return update_pdf(src, dst, change)


def large_contents(src: Path, dst: Path, nbytes: int) -> Path:
    """An update with one more signature field whose /Contents holds ``nbytes``."""
    def change(w: IncrementalPdfFileWriter) -> None:
        value = w.add_object(generic.DictionaryObject({
            pdf_name("/Type"): pdf_name("/Sig"), pdf_name("/Filter"): pdf_name("/Adobe.PPKLite"),
            pdf_name("/SubFilter"): pdf_name("/ETSI.CAdES.detached"),
            pdf_name("/ByteRange"): generic.ArrayObject([generic.NumberObject(0)] * 4),
            pdf_name("/Contents"): generic.ByteStringObject(b"\x30\x82" + b"\x01" * nbytes),
        }))
        acro = w.root["/AcroForm"]
        acro["/Fields"].append(w.add_object(generic.DictionaryObject({
            pdf_name("/FT"): pdf_name("/Sig"), pdf_name("/T"): pdf_string("Large"),
            pdf_name("/V"): value,
        })))
        w.update_container(acro)
    return update_pdf(src, dst, change)


def dss_bomb(src: Path, dst: Path, inflated_bytes: int) -> Path:
    """An update with a DSS certificate stream that inflates to ``inflated_bytes``."""
    import zlib

    def change(w: IncrementalPdfFileWriter) -> None:
        bomb = w.add_object(generic.StreamObject(
            {pdf_name("/Filter"): pdf_name("/FlateDecode")},
            encoded_data=zlib.compress(b"\0" * inflated_bytes, 9)))
        w.root["/DSS"] = w.add_object(generic.DictionaryObject(
            {pdf_name("/Certs"): generic.ArrayObject([bomb])}))
        w.update_root()
    return update_pdf(src, dst, change)
