"""Reading a PDF for :mod:`casesignd.verify`: its signature fields across revisions,
each one through pyHanko (:mod:`casesignd.verify_ades`), and the report of each.

pyHanko lists the signatures of the last revision's form, and only those of a
/SubFilter it knows; a signature an earlier revision had and a later one removed (the
field taken out of the form, the value cleared) would go unseen, so every revision's
form is read and such a signature is reported, failed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from asn1crypto import x509 as ax509
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields as pfields
from pyhanko.sign.ades.report import AdESSubIndic
from pyhanko.sign.general import find_cms_attribute_iter
from pyhanko.sign.validation import EmbeddedPdfSignature
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.status import SignatureStatus
from pyhanko_certvalidator.fetchers.aiohttp_fetchers import AIOHttpFetcherBackend

from . import verify_ades as ades
from .errors import EncryptedPdf, MalformedPdf
from .verify_report import (
    DOC_TIMESTAMP,
    PASSED,
    SIGNATURE,
    SignatureReport,
    VerifyOptions,
    VerifyReport,
    level_of,
    modification_of,
    verdict,
)

_SIG_SUBFILTERS = ("/adbe.pkcs7.detached", "/ETSI.CAdES.detached")
_PADES = "/ETSI.CAdES.detached"
_MAX_LOGGED_PROBLEMS = 4


def verify_stream(stream: BinaryIO, options: VerifyOptions) -> VerifyReport:
    """Every signature of the PDF in ``stream``, in signing order."""
    reader = _open(stream)
    with ades.quiet_pyhanko():
        found = _collect(reader)
        return VerifyReport(asyncio.run(_validate_all(reader, found, options)))


def _open(stream: BinaryIO) -> PdfFileReader:
    try:
        reader = PdfFileReader(stream, strict=True)
        if reader.encrypted:
            # Encrypted for confidentiality without a user password: the empty one
            # opens it (PDF 32000-1 §7.6.4.3). Otherwise nothing can be checked.
            try:
                opened = reader.decrypt(b"").status.name != "FAILED"
            except Exception:  # noqa: BLE001 - a security handler pyHanko cannot run
                opened = False
            if not opened:
                raise EncryptedPdf("the PDF is encrypted and opens only with a password")
        reader.root  # noqa: B018 - a PDF whose catalog does not resolve is no PDF
        return reader
    except EncryptedPdf:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the parser trips on: not a PDF
        raise MalformedPdf(f"cannot read the PDF: {type(e).__name__}: {e}") from e


@dataclass
class _Found:
    """A signature field with a value, as found in some revision."""

    name: str
    field_ref: generic.IndirectObject
    value_ref: generic.Reference | None
    dropped: bool = False  # in an earlier revision's form, gone from the last one
    revision: int = 0  # the revision it signs (0: the oldest)
    embedded: EmbeddedPdfSignature | None = None
    error: str | None = None


def _sig_fields(handler: object) -> Iterator[tuple[str, generic.IndirectObject,
                                                   generic.Reference | None]]:
    for name, _value, field_ref in pfields.enumerate_sig_fields(handler, filled_status=True):  # type: ignore[arg-type]
        raw = field_ref.get_object().raw_get("/V")
        yield str(name), field_ref, raw.reference if isinstance(raw, generic.IndirectObject) else None


def _collect(reader: PdfFileReader) -> list[_Found]:
    """The last revision's signature fields, and those an earlier revision had that
    the last one lost (a field removed, a value cleared). pyHanko lists only the last
    revision's, and only those of a /SubFilter it knows."""
    try:
        found = [_Found(n, f, v) for n, f, v in _sig_fields(reader)]
        seen = {f.value_ref for f in found}
        for rev in range(reader.xrefs.total_revisions - 1):
            for n, field, v in _sig_fields(reader.get_historical_resolver(rev)):
                if v is not None and v not in seen:
                    seen.add(v)
                    found.append(_Found(n, field, v, dropped=True, revision=rev))
    except Exception as e:  # noqa: BLE001 - a form the parser cannot walk
        raise MalformedPdf(f"cannot read the form: {type(e).__name__}: {e}") from e
    for f in found:
        try:
            f.embedded = EmbeddedPdfSignature(reader, f.field_ref.get_object(), f.name)
            f.revision = f.embedded.signed_revision
        except Exception as e:  # noqa: BLE001 - reported as that signature's failure
            f.error = f"the signature cannot be read: {type(e).__name__}: {e}"
    return sorted(found, key=lambda f: f.revision)


async def _validate_all(reader: PdfFileReader, found: list[_Found],
                        options: VerifyOptions) -> tuple[SignatureReport, ...]:
    backend = AIOHttpFetcherBackend(per_request_timeout=options.fetch_timeout_s)
    try:
        dss = ades.read_dss(reader)
        policy = ades.Policy(tuple(ax509.Certificate.load(der) for der in options.trust_roots),
                             options.fetch, options.fetch_timeout_s, dss.knowledge(), backend)
        reports: dict[int, SignatureReport] = {}
        # Document timestamps first: a signature's B-LTA rests on a later one.
        stamps: list[tuple[int, SignatureReport]] = []
        for i, f in enumerate(found):
            if f.embedded is not None and f.embedded.sig_object_type == "/DocTimeStamp":
                reports[i] = await _doc_timestamp(reader, f, policy)
                stamps.append((f.revision, reports[i]))
        for i, f in enumerate(found):
            if i not in reports:
                reports[i] = await _signature(reader, f, policy, dss, stamps)
        return tuple(reports[i] for i in range(len(found)))
    finally:
        await backend.close()


async def _signature(reader: PdfFileReader, f: _Found, policy: ades.Policy, dss: ades.Dss,
                     stamps: list[tuple[int, SignatureReport]]) -> SignatureReport:
    sig = f.embedded
    # Revisions are counted from 1, the original document, as a reader shows them.
    problems = ([f"the signature of revision {f.revision + 1} was removed from the form "
                 "by a later revision"] if f.dropped else [])
    if sig is None:
        return _unreadable(f, SIGNATURE, [*problems, f.error or ""])
    subfilter = str(sig.sig_object.get("/SubFilter", ""))
    if subfilter not in _SIG_SUBFILTERS:
        return _unreadable(f, SIGNATURE, [*problems, f"/SubFilter {subfilter or '(none)'} is "
                                          "not a signature format this validator knows"])
    try:
        changes = ades.modification(reader, sig)
        evidence = await ades.validate_signature(sig, policy)
    except SignatureValidationError as e:
        return _unreadable(f, SIGNATURE, [*problems, e.failure_message], e.ades_subindication)
    except Exception as e:  # noqa: BLE001 - one signature's damage fails it alone
        return _unreadable(f, SIGNATURE, [*problems, f"cannot validate: {type(e).__name__}: {e}"])
    status, ts = evidence.status, evidence.timestamp_status
    ts_ok = ts is not None and ts.intact and ts.valid and ts.trusted
    lt = lta = False
    if ts_ok and status is not None and status.validation_path is not None:
        paths = (status.validation_path, ts.validation_path)  # type: ignore[union-attr]
        lt = dss.covers(paths, sig.signed_data)
        lta = lt and any(rev > f.revision and t.passed and ades.read_dss(
            reader.get_historical_resolver(rev)).covers(paths, sig.signed_data)
            for rev, t in stamps)
    pades = subfilter == _PADES and _names_its_certificate(sig)
    level = level_of(pades, bool(status and status.intact), ts_ok, lt, lta)
    return _report(f, SIGNATURE, evidence, changes, problems, level=level,
                   timestamp_time=getattr(ts, "timestamp", None) if ts_ok else None,
                   no_anchors=not policy.roots)


async def _doc_timestamp(reader: PdfFileReader, f: _Found, policy: ades.Policy) -> SignatureReport:
    sig = f.embedded
    assert sig is not None
    if str(sig.sig_object.get("/SubFilter", "")) != "/ETSI.RFC3161":
        return _unreadable(f, DOC_TIMESTAMP, ["a document timestamp must be /ETSI.RFC3161"])
    try:
        changes = ades.modification(reader, sig)
        evidence = await ades.validate_timestamp(sig, policy)
    except SignatureValidationError as e:
        return _unreadable(f, DOC_TIMESTAMP, [e.failure_message], e.ades_subindication)
    except Exception as e:  # noqa: BLE001 - one timestamp's damage fails it alone
        return _unreadable(f, DOC_TIMESTAMP, [f"cannot validate: {type(e).__name__}: {e}"])
    status = evidence.status
    when = getattr(status, "timestamp", None) if status is not None and status.trusted else None
    return _report(f, DOC_TIMESTAMP, evidence, changes, [], level=None, timestamp_time=when,
                   no_anchors=not policy.roots)


# --- the report -----------------------------------------------------------------------


def _report(f: _Found, kind: str, evidence: ades.Evidence, changes: ades.Changes,
            problems: list[str], *, level: str | None, timestamp_time: dt.datetime | None,
            no_anchors: bool) -> SignatureReport:
    status = evidence.status
    level_name = changes.level.name if changes.level is not None else None
    mod = "other" if f.dropped else modification_of(level_name, changes.docmdp_ok,
                                                    changes.uncovered_bytes > 0)
    indication, sub = verdict(evidence.subindic.status.name,
                              evidence.subindic.standard_name, mod, anchored=not no_anchors)
    words = [*problems, *changes.problems]
    if indication != PASSED:
        if no_anchors:
            words.append("no trust anchors were given (--trust or validation.trust_roots)")
        words += evidence.problems[:_MAX_LOGGED_PROBLEMS]
    revoked = bool(status is not None and status.revoked) or sub in (
        "REVOKED", "REVOKED_NO_POE", "REVOKED_CA_NO_POE")
    return SignatureReport(
        field=f.name, kind=kind, intact=bool(status and status.intact),
        valid=bool(status and status.valid), trusted=bool(status and status.trusted),
        revoked=revoked, level=level, modification=mod, signer=_signer_of(f, status),
        signing_time=_claimed_time(f.embedded) if kind == SIGNATURE else None,
        timestamp_time=timestamp_time, indication=indication, sub_indication=sub,
        problems=tuple(words))


def _unreadable(f: _Found, kind: str, problems: list[str],
                subindic: AdESSubIndic | None = None) -> SignatureReport:
    # Not validated at all: a failure of the format, unless pyHanko named a worse one.
    indication, sub = verdict(subindic.status.name if subindic else None,
                              subindic.standard_name if subindic else None, "other")
    return SignatureReport(
        field=f.name, kind=kind, intact=False, valid=False, trusted=False, revoked=False,
        level=None, modification="other", signer=_signer_of(f, None),
        signing_time=_claimed_time(f.embedded) if kind == SIGNATURE else None,
        timestamp_time=None, indication=indication, sub_indication=sub,
        problems=tuple(p for p in problems if p))


def _signer_of(f: _Found, status: SignatureStatus | None) -> str:
    """The signer certificate's subject (RFC 4514); "" when the CMS names none."""
    from cryptography import x509

    try:
        cert = status.signing_cert if status is not None else f.embedded.signer_cert  # type: ignore[union-attr]
        return x509.load_der_x509_certificate(cert.dump()).subject.rfc4514_string()
    except Exception:  # noqa: BLE001 - a CMS without a usable signer certificate
        return ""


def _claimed_time(sig: EmbeddedPdfSignature | None) -> dt.datetime | None:
    try:
        return sig.self_reported_timestamp if sig is not None else None
    except Exception:  # noqa: BLE001 - a claim that cannot be read is no claim
        return None


def _names_its_certificate(sig: EmbeddedPdfSignature) -> bool:
    # ETSI EN 319 122-1 §5.2.2: a CAdES signature names its certificate.
    attrs = sig.signer_info["signed_attrs"]
    return any(next(find_cms_attribute_iter(attrs, name), None) is not None
               for name in ("signing_certificate_v2", "signing_certificate"))
