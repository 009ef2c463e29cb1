"""Validate the signatures of a PDF without pyHanko: integrity, signature, chain, timestamp.

For each signature field (PDF 32000-1 §12.7.4.5, §12.8.1):

- the /ByteRange is sane: starts at 0, its gap is exactly the /Contents hex
  string, it ends at a revision's end; the last signature must reach the end of
  the file (``covers_whole_file``);
- the message-digest attribute equals the hash of the ranges (``intact``);
- the signature over the signed attributes verifies with the signer's key, and the
  signing-certificate(-v2) attribute names that certificate (RFC 5035);
- with trust anchors, the chain from the signer to an anchor verifies, each
  certificate valid at the signing time (timestamp time if there is one, else now);
- a signature timestamp (RFC 3161 Appendix A) covers the signature value and is
  signed by its TSA.

``valid`` is the verdict a command line exits on: integrity, the cryptography and
the structure are sound, and, when trust anchors were given, the signer chains to
one. ``trusted`` says which (None when no anchors were given), and ``problems``
says why not.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asn1crypto import cms as acms
from asn1crypto import tsp as _tsp  # noqa: F401 - registers TSTInfo and ESS attribute types
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from pypdf import PdfReader
from pypdf import generic as g
from pypdf.errors import PyPdfError

from .errors import MalformedPdf

MAX_CONTENTS_BYTES = 4 * 1024 * 1024
APPENDED = "the file was changed after the last signature"
_HASHES = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}
_CRYPTO_HASHES = {"sha256": hashes.SHA256, "sha384": hashes.SHA384, "sha512": hashes.SHA512}
_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?([Zz+-])?(\d{2})?'?(\d{2})?")


@dataclass
class SigReport:
    """The verdict on one signature."""

    field_name: str
    valid: bool
    intact: bool
    trusted: bool | None
    covers_whole_file: bool
    signer_subject: str
    signing_time: dt.datetime | None  # the claimed /M
    timestamped: bool
    problems: list[str] = field(default_factory=list)
    timestamp_time: dt.datetime | None = None

    @property
    def ok(self) -> bool:
        """The same as ``valid`` (which already accounts for trust when it was asked)."""
        return self.valid

    def describe(self) -> str:
        """One line for people: verdict, field, signer, time, coverage, problems."""
        verdict = "VALID" if self.valid else "INVALID"
        trust = {None: "trust not checked", True: "trusted", False: "untrusted"}[self.trusted]
        when = self.signing_time.isoformat() if self.signing_time else "no time"
        ts = f"timestamp {self.timestamp_time.isoformat()}" if self.timestamp_time else "no timestamp"
        cover = "whole file" if self.covers_whole_file else "earlier revision"
        line = f"{verdict} {self.field_name}: {self.signer_subject}, {when}, {ts}, {trust}, {cover}"
        return line + (f" — {'; '.join(self.problems)}" if self.problems else "")


# --- pure helpers ----------------------------------------------------------------


def _get(d: Any, key: str, default: Any = None) -> Any:
    """``d[key]`` with an indirect reference resolved (pypdf's ``get`` keeps it raw)."""
    v = d.get(key, default)
    return v.get_object() if isinstance(v, g.IndirectObject) else v


def parse_pdf_date(text: str) -> dt.datetime | None:
    """A PDF date (§7.9.4) as an aware datetime; None when unparseable."""
    m = _PDF_DATE.match(text.strip())
    if not m:
        return None
    y, mo, d, h, mi, s, sign, oh, om = m.groups()
    try:
        tz = dt.UTC
        if sign in ("+", "-"):
            delta = dt.timedelta(hours=int(oh or 0), minutes=int(om or 0))
            tz = dt.timezone(delta if sign == "+" else -delta)
        return dt.datetime(
            int(y), int(mo or 1), int(d or 1), int(h or 0), int(mi or 0), int(s or 0), tzinfo=tz
        )
    except ValueError:
        return None


def byte_range_problems(br: list[int], size: int, is_last: bool) -> list[str]:
    """Structural problems of a /ByteRange [a b c d] in a file of ``size`` bytes."""
    if len(br) != 4 or any(x < 0 for x in br):
        return ["ByteRange is not four non-negative integers"]
    a, b, c, d = br
    out = []
    if a != 0:
        out.append("ByteRange does not start at 0")
    if c <= b:
        out.append("ByteRange ranges overlap")
    if c + d > size:
        out.append("ByteRange extends past the end of the file")
    elif is_last and c + d != size:
        out.append(APPENDED)
    return out


# --- the file ----------------------------------------------------------------------


def _sig_fields(reader: PdfReader) -> list[tuple[str, g.DictionaryObject]]:
    root = reader.trailer["/Root"]
    acro = _get(root, "/AcroForm")
    if acro is None:
        return []
    out: list[tuple[str, g.DictionaryObject]] = []

    def walk(refs: Any, prefix: str, inherited_ft: Any, depth: int) -> None:
        if depth > 32:
            return
        for ref in refs or []:
            node = ref.get_object()
            if not isinstance(node, g.DictionaryObject):
                continue
            name = str(_get(node, "/T", ""))
            full = f"{prefix}.{name}" if prefix and name else (name or prefix)
            ft = _get(node, "/FT", inherited_ft)
            if "/Kids" in node and "/V" not in node:
                walk(node["/Kids"], full, ft, depth + 1)
            elif ft == "/Sig" and isinstance(_get(node, "/V"), g.DictionaryObject):
                out.append((full, node["/V"]))

    walk(_get(acro.get_object(), "/Fields"), "", None, 0)
    return out


def _hash_ranges(f: Any, br: list[int], algo: str) -> bytes:
    h = _HASHES[algo]()
    for start, length in ((br[0], br[1]), (br[2], br[3])):
        f.seek(start)
        left = length
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise MalformedPdf("ByteRange past the end of the file")
            h.update(chunk)
            left -= len(chunk)
    return h.digest()


def _contents_from_gap(f: Any, br: list[int]) -> bytes | None:
    # The gap must be exactly "<hex>" (§12.8.1): no other byte may go unsigned.
    gap = br[2] - br[1]
    if gap < 2 or gap > 2 * MAX_CONTENTS_BYTES + 2:
        return None
    f.seek(br[1])
    raw = f.read(gap)
    if raw[:1] != b"<" or raw[-1:] != b">":
        return None
    try:
        return bytes.fromhex(raw[1:-1].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


# --- CMS ----------------------------------------------------------------------------


def _verify_raw(cert: x509.Certificate, signature: bytes, data: bytes, sig_algo: str, digest: str) -> bool:
    key = cert.public_key()
    h = _CRYPTO_HASHES.get(digest, hashes.SHA256)()
    try:
        if isinstance(key, rsa.RSAPublicKey):
            if sig_algo == "rsassa_pss":
                key.verify(signature, data, padding.PSS(padding.MGF1(h), padding.PSS.AUTO), h)
            else:
                key.verify(signature, data, padding.PKCS1v15(), h)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, ec.ECDSA(h))
        else:
            return False
    except (InvalidSignature, ValueError):
        return False
    return True


def _attr(attrs: Any, name: str) -> Any:
    for a in attrs or []:
        if a["type"].native == name:
            return a["values"][0]
    return None


def _signer_cert(signed_data: Any, signer_info: Any) -> x509.Certificate | None:
    sid = signer_info["sid"]
    for c in signed_data["certificates"] or []:
        if c.name != "certificate":
            continue
        cert = c.chosen
        if sid.name == "issuer_and_serial_number":
            if (
                cert.issuer == sid.chosen["issuer"]
                and cert.serial_number == sid.chosen["serial_number"].native
            ):
                return x509.load_der_x509_certificate(cert.dump())
        elif cert.key_identifier == sid.chosen.native:
            return x509.load_der_x509_certificate(cert.dump())
    return None


def _all_certs(signed_data: Any) -> list[x509.Certificate]:
    return [
        x509.load_der_x509_certificate(c.chosen.dump())
        for c in signed_data["certificates"] or []
        if c.name == "certificate"
    ]


def check_signer_info(
    signed_data: Any, digest: bytes, problems: list[str], what: str = "signature"
) -> tuple[bool, bool, x509.Certificate | None]:
    """(intact, signature_ok, signer cert) of the first SignerInfo against ``digest``."""
    signer_info = signed_data["signer_infos"][0]
    cert = _signer_cert(signed_data, signer_info)
    attrs = signer_info["signed_attrs"]
    md = _attr(attrs, "message_digest")
    intact = md is not None and md.native == digest
    if md is None:
        problems.append(f"{what}: no message-digest attribute")
    elif not intact:
        problems.append(f"{what}: message digest does not match the signed bytes")
    if cert is None:
        problems.append(f"{what}: signer certificate not in the CMS")
        return intact, False, None
    signed = b"\x31" + attrs.dump()[1:]  # RFC 5652 §5.4: verified as a SET OF
    algo = signer_info["signature_algorithm"].signature_algo
    digest_algo = signer_info["digest_algorithm"]["algorithm"].native
    ok = _verify_raw(cert, signer_info["signature"].native, signed, algo, digest_algo)
    if not ok:
        problems.append(f"{what}: the signature does not verify with the signer's key")
    scv2 = _attr(attrs, "signing_certificate_v2")
    if scv2 is not None:
        want = scv2["certs"][0]
        halg = want["hash_algorithm"]["algorithm"].native
        from cryptography.hazmat.primitives.serialization import Encoding

        if want["cert_hash"].native != _HASHES.get(halg, hashlib.sha256)(cert.public_bytes(Encoding.DER)).digest():
            problems.append(f"{what}: signing-certificate-v2 names another certificate")
    elif _attr(attrs, "signing_certificate") is None:
        problems.append(f"{what}: no signing-certificate attribute (PAdES requires one)")
    return intact, ok, cert


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _is_tsa(cert: x509.Certificate) -> bool:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return x509.oid.ExtendedKeyUsageOID.TIME_STAMPING in eku


def chain_trusted(
    cert: x509.Certificate,
    pool: list[x509.Certificate],
    anchors: list[x509.Certificate],
    at: dt.datetime,
    problems: list[str],
) -> bool:
    """Whether ``cert`` chains to one of ``anchors`` through ``pool``, all valid at ``at``."""
    anchor_set = {a.fingerprint(hashes.SHA256()) for a in anchors}
    current = cert
    for _ in range(12):
        if not current.not_valid_before_utc <= at <= current.not_valid_after_utc:
            problems.append(f"certificate {current.subject.rfc4514_string()} not valid at {at:%Y-%m-%d}")
            return False
        if current.fingerprint(hashes.SHA256()) in anchor_set:
            return True
        for issuer in [*anchors, *pool]:
            if issuer.subject != current.issuer or issuer == current:
                continue
            if issuer.fingerprint(hashes.SHA256()) not in anchor_set and not _is_ca(issuer):
                continue  # RFC 5280 §4.2.1.9: only a CA certificate may issue
            try:
                current.verify_directly_issued_by(issuer)
            except (ValueError, TypeError, InvalidSignature):
                continue
            current = issuer
            break
        else:
            problems.append(f"no trusted issuer for {current.subject.rfc4514_string()}")
            return False
    problems.append("certificate chain too long")
    return False


def _check_timestamp(
    token_der: Any, signature: bytes, anchors: list[x509.Certificate] | None, problems: list[str]
) -> dt.datetime | None:
    try:
        token = acms.ContentInfo.load(token_der.dump() if hasattr(token_der, "dump") else token_der)
        sd = token["content"]
        tst = sd["encap_content_info"]["content"].parsed
        tst_der = sd["encap_content_info"]["content"].contents
        mi = tst["message_imprint"]
        halg = mi["hash_algorithm"]["algorithm"].native
        if mi["hashed_message"].native != _HASHES.get(halg, hashlib.sha256)(signature).digest():
            problems.append("timestamp does not cover the signature value")
            return None
        digest_algo = sd["signer_infos"][0]["digest_algorithm"]["algorithm"].native
        digest = _HASHES.get(digest_algo, hashlib.sha256)(tst_der).digest()
        before = len(problems)
        intact, ok, cert = check_signer_info(sd, digest, problems, what="timestamp")
        if cert is not None and not _is_tsa(cert):
            problems.append("timestamp: the TSA certificate lacks id-kp-timeStamping (RFC 3161 §2.3)")
        when = tst["gen_time"].native
        crypto_ok = intact and ok and len(problems) == before
        if anchors is not None and cert is not None:
            trust_problems: list[str] = []
            if not chain_trusted(cert, _all_certs(sd), anchors, when, trust_problems):
                problems.extend(f"timestamp {p}" for p in trust_problems)
                return None
        return when if crypto_ok else None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        problems.append(f"timestamp token unreadable: {e}")
        return None


def _check_one(
    f: Any, size: int, name: str, sig: g.DictionaryObject, is_last: bool, anchors: list[x509.Certificate] | None
) -> SigReport:
    problems: list[str] = []
    claimed = parse_pdf_date(str(_get(sig, "/M", "")))
    report = SigReport(name, False, False, None if anchors is None else False, False, "", claimed, False, problems)
    try:
        br = [int(x) for x in _get(sig, "/ByteRange", [])]
    except (TypeError, ValueError):
        br = []
    problems.extend(byte_range_problems(br, size, is_last))
    if [p for p in problems if p != APPENDED]:
        return report
    der = _contents_from_gap(f, br)
    if der is None:
        problems.append("the ByteRange gap is not exactly the /Contents string")
        return report
    report.covers_whole_file = br[2] + br[3] == size
    if not report.covers_whole_file:
        f.seek(max(0, br[2] + br[3] - 16))
        if b"%%EOF" not in f.read(16):
            problems.append("signed range does not end at a revision boundary")
    try:
        ci = acms.ContentInfo.load(der, strict=False)
        signed_data = ci["content"]
        signer_info = signed_data["signer_infos"][0]
        algo = signer_info["digest_algorithm"]["algorithm"].native
        if algo not in _HASHES:
            problems.append(f"unsupported digest algorithm {algo}")
            return report
        digest = _hash_ranges(f, br, algo)
        intact, sig_ok, cert = check_signer_info(signed_data, digest, problems)
        report.intact = intact
        if cert is not None:
            report.signer_subject = cert.subject.rfc4514_string()
        token = _attr(signer_info["unsigned_attrs"], "signature_time_stamp_token")
        if token is not None:
            report.timestamp_time = _check_timestamp(token, signer_info["signature"].native, anchors, problems)
            report.timestamped = report.timestamp_time is not None
        if anchors is not None and cert is not None:
            at = report.timestamp_time or dt.datetime.now(dt.UTC)
            report.trusted = chain_trusted(cert, _all_certs(signed_data), anchors, at, problems)
        sound = intact and sig_ok and not [p for p in problems if not _is_trust_problem(p)]
        report.valid = sound and report.trusted is not False
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        problems.append(f"CMS unreadable: {type(e).__name__}: {e}")
    return report


def _is_trust_problem(problem: str) -> bool:
    return problem.removeprefix("timestamp ").startswith(
        ("no trusted issuer", "certificate ", "certificate chain")
    )


def verify_pdf(path: Path, trust: list[x509.Certificate] | None) -> list[SigReport]:
    """Check every signature of the PDF at ``path``; ``trust`` are the anchors (None: skip).

    Raises MalformedPdf when the file cannot be read as a PDF at all.
    """
    with open(path, "rb") as f:
        try:
            reader = PdfReader(f, strict=False)
            fields = _sig_fields(reader)
        except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedPdf(f"cannot read the PDF: {type(e).__name__}: {e}") from e
        size = f.seek(0, 2)

        def end_of(sig: g.DictionaryObject) -> int:
            try:
                br = [int(x) for x in _get(sig, "/ByteRange", [])]
                return br[2] + br[3]
            except (TypeError, ValueError, IndexError):
                return -1

        last = max((end_of(sig) for _, sig in fields), default=-1)
        return [
            _check_one(f, size, name, sig, end_of(sig) == last, trust) for name, sig in fields
        ]
