"""Reading a PDF for :mod:`casesignd.verify.validate`: its signature fields across revisions,
each one through pyHanko (:mod:`casesignd.verify.ades`), and the report of each.

pyHanko lists the signatures of the last revision's form, and only those of a
/SubFilter it knows; a signature an earlier revision had and a later one removed (the
field taken out of the form, the value cleared) would go unseen, so every revision's
form is read and such a signature is reported, failed.

The document is read as other validators read it: pyHanko's tolerant reader
(``strict=False``), with the same revision and difference analysis. What the strict
reader would have refused (a hybrid-reference file, ``/Encrypt null``, a damaged
document security store) is a finding of the report, not a refusal; only what no
reader can read is ``malformed_pdf``. A signature that cannot be checked (a CMS that
does not parse, a /SubFilter no validator knows, signed bytes not in the file) is
INDETERMINATE with the ETSI TS 119 102-1 sub-indication that fits, and its checks are
null: TOTAL-FAILED is kept for what was checked and found wrong (§5.2.2 format
checking, §5.2.7 the cryptographic verification, the later revisions' changes).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from asn1crypto import cms as acms
from asn1crypto import x509 as ax509
from pyhanko.pdf_utils import generic, misc
from pyhanko.pdf_utils.decode_limits import DecodeLimits, DocumentDecodeBudget
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields as pfields
from pyhanko.sign.ades.report import AdESIndeterminate, AdESSubIndic
from pyhanko.sign.general import find_cms_attribute_iter
from pyhanko.sign.validation import EmbeddedPdfSignature
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.status import SignatureStatus
from pyhanko_certvalidator.fetchers.aiohttp_fetchers import AIOHttpFetcherBackend

from casesignd.core.errors import EncryptedPdf, LimitExceeded, MalformedPdf
from casesignd.verify import ades
from casesignd.verify.budget import SignatureOutOfCpu, cpu_budget, signature_budget
from casesignd.verify.report import (
    DOC_TIMESTAMP,
    FAILED,
    INDETERMINATE,
    PASSED,
    SIGNATURE,
    SignatureReport,
    VerifyOptions,
    VerifyReport,
    byte_range_fault,
    level_of,
    modification_of,
    verdict,
)

_SHA1 = "/adbe.pkcs7.sha1"
_SIG_SUBFILTERS = ("/adbe.pkcs7.detached", "/ETSI.CAdES.detached", _SHA1)
_PADES = "/ETSI.CAdES.detached"
_RFC3161 = "/ETSI.RFC3161"
_MAX_LOGGED_PROBLEMS = 4


def verify_stream(stream: BinaryIO, options: VerifyOptions) -> VerifyReport:
    """Every signature of the PDF in ``stream``, in signing order, within the
    options' budgets (:mod:`casesignd.verify.budget`): LimitExceeded past one."""
    try:
        with cpu_budget(options.max_cpu_s):
            reader, findings = _open(stream, options)
            with ades.quiet_pyhanko():
                found = _collect(reader, options)
                reports = asyncio.run(_validate_all(reader, found, options, findings))
                return VerifyReport(reports, tuple(findings))
    except MemoryError:
        raise LimitExceeded("validating its signatures needs more memory than a verify "
                            "process has", reason="memory_budget") from None
    except misc.PdfDecodeLimitError:
        raise LimitExceeded("its streams decode to more than the verify budget allows",
                            reason="decompression_bomb") from None


class _TolerantReader(PdfFileReader):
    """pyHanko's reader, with a trailer's ``/Encrypt null`` read as no /Encrypt: a
    dictionary entry whose value is null is as if it were absent (PDF 32000-1 §7.3.7)."""

    @property
    def encrypt_dict(self) -> generic.DictionaryObject | None:
        if _encrypt_is_null(self):
            return None
        return super().encrypt_dict


def _encrypt_is_null(reader: PdfFileReader) -> bool:
    try:
        return isinstance(reader.trailer.raw_get("/Encrypt"), generic.NullObject)
    except (KeyError, misc.PdfError):
        return False


# A signature's /Contents as written (PDF 32000-1 §12.8.1: a hex string in the file,
# never in an object stream, for its offsets are those /ByteRange leaves out).
_CONTENTS = re.compile(rb"/Contents\s*<([0-9A-Fa-f\s]*)>")


def _check_contents_sizes(stream: BinaryIO, max_contents_bytes: int) -> None:
    """Refuse a document with a signature /Contents over the budget before pyHanko's
    parser, which reads hex strings a byte at a time, spends seconds and hundreds of
    megabytes on it."""
    stream.seek(0)
    data = stream.read()
    for m in _CONTENTS.finditer(data):
        if (m.end(1) - m.start(1)) // 2 > max_contents_bytes:
            raise LimitExceeded(f"a signature's /Contents is larger than {max_contents_bytes} "
                                "bytes (validation.budget.max_contents_bytes)",
                                reason="contents_too_large")


def _open(stream: BinaryIO, options: VerifyOptions) -> tuple[PdfFileReader, list[str]]:
    _check_contents_sizes(stream, options.max_contents_bytes)
    limits = DecodeLimits(document_budget=DocumentDecodeBudget(
        base_allowance=options.max_decoded_bytes, max_ratio=0))
    try:
        reader = _TolerantReader(stream, strict=False, decode_limits=limits)
        if reader.encrypted:
            # Encrypted for confidentiality without a user password: the empty one
            # opens it (PDF 32000-1 §7.6.4.3). Otherwise nothing can be checked.
            try:
                opened = reader.decrypt(b"").status.name != "FAILED"
            except Exception:  # noqa: BLE001 - a security handler pyHanko cannot run
                opened = False
            if not opened:
                raise EncryptedPdf("the PDF is encrypted and opens only with a password")
        if not isinstance(reader.root, generic.DictionaryObject):
            raise misc.PdfReadError("the catalog is not a dictionary")
    except (EncryptedPdf, MemoryError, misc.PdfDecodeLimitError):
        raise
    except RecursionError:
        raise MalformedPdf("cannot read the PDF: its objects are nested too deeply",
                           reason="damaged") from None
    except misc.PdfError as e:
        raise MalformedPdf(f"cannot read the PDF: {e}", reason="damaged") from None
    except Exception:  # noqa: BLE001 - whatever the parser trips on: not a PDF
        raise MalformedPdf("cannot read the PDF: no cross-reference or catalog a reader "
                           "can find", reason="not_a_pdf") from None
    return reader, _strictness(reader, stream)


def _strictness(reader: PdfFileReader, stream: BinaryIO) -> list[str]:
    """What pyHanko's strict reader would have refused, as findings."""
    findings = []
    if reader.xrefs.hybrid_xrefs_present:
        findings.append("a hybrid-reference file (PDF 32000-1 §7.5.8.4): its cross-reference "
                        "streams were read, as PDF 1.5 readers do")
    if _encrypt_is_null(reader):
        findings.append("the trailer's /Encrypt is null: read as not encrypted")
    else:
        try:
            stream.seek(0)
            strict = PdfFileReader(stream, strict=True)
            strict.root  # noqa: B018 - the catalog resolves for a strict reader too
        except misc.PdfError as e:
            findings.append(f"a strict reader refuses it ({e}); read as other readers do")
        except Exception:  # noqa: BLE001 - the tolerant reader read it: no refusal
            findings.append("a strict reader refuses it; read as other readers do")
    return findings


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


def _collect(reader: PdfFileReader, options: VerifyOptions) -> list[_Found]:
    """The last revision's signature fields, and those an earlier revision had that
    the last one lost (a field removed, a value cleared). pyHanko lists only the last
    revision's, and only those of a /SubFilter it knows. More than the budget's
    signatures are refused before any CMS is parsed."""
    found: list[_Found] = []

    def add(item: _Found) -> None:
        found.append(item)
        if len(found) > options.max_signatures:
            raise LimitExceeded(f"more than {options.max_signatures} signatures "
                                "(validation.budget.max_signatures)",
                                reason="too_many_signatures")

    try:
        for n, field, v in _sig_fields(reader):
            add(_Found(n, field, v))
        seen = {item.value_ref for item in found}
        for rev in range(reader.xrefs.total_revisions - 1):
            for n, field, v in _sig_fields(reader.get_historical_resolver(rev)):
                if v is not None and v not in seen:
                    seen.add(v)
                    add(_Found(n, field, v, dropped=True, revision=rev))
    except (MemoryError, misc.PdfDecodeLimitError, LimitExceeded):
        raise
    except RecursionError:
        raise MalformedPdf("cannot read the form: its fields are nested too deeply",
                           reason="damaged") from None
    except Exception:  # noqa: BLE001 - a form the parser cannot walk
        raise MalformedPdf("cannot read the form: a field or its value does not resolve",
                           reason="damaged") from None
    for f in found:
        if _contents_bytes(f) > options.max_contents_bytes:
            f.error = (f"the signature's /Contents is larger than the verify budget allows "
                       f"({options.max_contents_bytes} bytes): it was not parsed")
            continue
        try:
            f.embedded = EmbeddedPdfSignature(reader, f.field_ref.get_object(), f.name)
            f.revision = f.embedded.signed_revision
        except Exception:  # noqa: BLE001 - reported as that signature's failure
            f.error = ("the signature's /Contents is not a CMS SignedData that can be parsed "
                       "(RFC 5652 §5.1), or its /ByteRange names no revision")
    return sorted(found, key=lambda f: f.revision)


def _contents_bytes(f: _Found) -> int:
    try:
        return len(f.field_ref.get_object()["/V"].raw_get("/Contents"))
    except Exception:  # noqa: BLE001 - no /Contents: pyHanko says so when it reads it
        return 0


async def _validate_all(reader: PdfFileReader, found: list[_Found], options: VerifyOptions,
                        findings: list[str]) -> tuple[SignatureReport, ...]:
    backend = AIOHttpFetcherBackend(per_request_timeout=options.fetch_timeout_s)
    try:
        dss = ades.read_dss(reader, findings)
        try:
            knowledge = dss.knowledge()
        except Exception:  # noqa: BLE001 - revocation data that parses but cannot be used
            findings.append("the document security store's revocation data cannot be used; "
                            "it was ignored")
            knowledge = ades.Dss().knowledge()
        policy = ades.Policy(tuple(ax509.Certificate.load(der) for der in options.trust_roots),
                             options.fetch, options.fetch_timeout_s, knowledge, backend)
        reports: dict[int, SignatureReport] = {}
        # Document timestamps first: a signature's B-LTA rests on a later one.
        stamps: list[tuple[int, SignatureReport]] = []
        for i, f in enumerate(found):
            if f.embedded is not None and _sig_type(f.embedded) == "/DocTimeStamp":
                reports[i] = await _within(options, f, DOC_TIMESTAMP,
                                           _doc_timestamp(reader, f, policy))
                stamps.append((f.revision, reports[i]))
        for i, f in enumerate(found):
            if i not in reports:
                reports[i] = await _within(options, f, SIGNATURE,
                                           _signature(reader, f, policy, dss, stamps))
        return tuple(reports[i] for i in range(len(found)))
    finally:
        await backend.close()


async def _within(options: VerifyOptions, f: _Found, kind: str,
                  check: Coroutine[Any, Any, SignatureReport]) -> SignatureReport:
    """``check`` within one signature's CPU budget; past it, that signature is left
    unchecked (INDETERMINATE, GENERIC: the process stopped for a reason of its own,
    ETSI TS 119 102-1 §5.1) and the next one is validated."""
    try:
        with signature_budget(options.max_cpu_per_signature_s):
            return await check
    except SignatureOutOfCpu as e:
        return _unchecked(f, kind, [f"validating it took {e} (validation.budget."
                                    "max_cpu_per_signature_s): it was not checked"],
                          AdESIndeterminate.GENERIC)


def _sig_type(sig: EmbeddedPdfSignature) -> str:
    try:
        return str(sig.sig_object_type)
    except Exception:  # noqa: BLE001 - a /Type that does not resolve: a signature
        return "/Sig"


def _subfilter(sig: EmbeddedPdfSignature) -> str:
    try:
        return str(sig.sig_object.get("/SubFilter", ""))
    except Exception:  # noqa: BLE001 - a /SubFilter that does not resolve: none
        return ""


def _format_fault(reader: PdfFileReader, sig: EmbeddedPdfSignature) -> str | None:
    """Why the signature's form is wrong before any digest is taken (ETSI TS 119
    102-1 §5.2.2): a /ByteRange that does not describe the file, or CMS bytes with more
    than padding after them."""
    stream = reader.stream
    stream.seek(0, 2)
    try:
        byte_range = [int(x) for x in sig.byte_range]
    except Exception:  # noqa: BLE001 - a /ByteRange of anything but integers
        byte_range = []
    fault = byte_range_fault(byte_range, stream.tell(), len(sig.pkcs7_content))
    if fault is not None:
        return fault
    used = len(acms.ContentInfo.load(sig.pkcs7_content).dump())
    if sig.pkcs7_content[used:].strip(b"\x00"):
        return "the signature's /Contents holds bytes after its CMS"
    return None


async def _signature(reader: PdfFileReader, f: _Found, policy: ades.Policy, dss: ades.Dss,
                     stamps: list[tuple[int, SignatureReport]]) -> SignatureReport:
    sig = f.embedded
    # Revisions are counted from 1, the original document, as a reader shows them.
    problems = ([f"the signature of revision {f.revision + 1} was removed from the form "
                 "by a later revision"] if f.dropped else [])
    if sig is None:
        return _unchecked(f, SIGNATURE, [*problems, f.error or ""])
    subfilter = _subfilter(sig)
    if subfilter == _RFC3161:
        # A timestamp token in a signature dictionary: what it can prove is that the
        # bytes existed at its time; checked as a timestamp (ETSI TS 119 102-1 §5.4).
        return await _doc_timestamp(reader, f, policy, kind=SIGNATURE)
    if subfilter not in _SIG_SUBFILTERS:
        return _unchecked(f, SIGNATURE, [*problems, f"/SubFilter {subfilter or '(none)'} is "
                                         "not a signature format this validator knows"])
    fault = _format_fault(reader, sig)
    if fault is not None:
        return _unchecked(f, SIGNATURE, [*problems, fault], failed=True)
    changes, changes_problem = _changes(reader, sig)
    try:
        evidence = await ades.validate_signature(sig, policy, encapsulated=subfilter == _SHA1)
    except SignatureValidationError as e:
        return _unchecked(f, SIGNATURE, [*problems, e.failure_message], e.ades_subindication,
                          changes=changes)
    except (MemoryError, misc.PdfDecodeLimitError):
        raise  # the document's budget, not this signature's damage
    except Exception:  # noqa: BLE001 - one signature's damage leaves it unchecked alone
        return _unchecked(f, SIGNATURE, [*problems, _CANNOT_CHECK], changes=changes)
    status, ts = evidence.status, evidence.timestamp_status
    ts_ok = ts is not None and ts.intact and ts.valid and ts.trusted
    lt = lta = False
    pades = False
    try:
        if ts_ok and status is not None and status.validation_path is not None:
            paths = (status.validation_path, ts.validation_path)  # type: ignore[union-attr]
            lt = dss.covers(paths, sig.signed_data)
            lta = lt and any(rev > f.revision and t.passed and ades.read_dss(
                reader.get_historical_resolver(rev)).covers(paths, sig.signed_data)
                for rev, t in stamps)
        pades = subfilter == _PADES and _names_its_certificate(sig)
    except (MemoryError, misc.PdfDecodeLimitError):
        raise
    except Exception:  # noqa: BLE001 - evidence that cannot be read proves no level
        problems.append("the validation data for the level could not be read")
    level = level_of(pades, bool(status and status.intact), ts_ok, lt, lta)
    return _report(f, SIGNATURE, evidence, changes, [*problems, *changes_problem], level=level,
                   timestamp_time=getattr(ts, "timestamp", None) if ts_ok else None,
                   no_anchors=not policy.roots)


_CANNOT_CHECK = "the signature's CMS could not be processed (RFC 5652): it was not checked"


def _changes(reader: PdfFileReader, sig: EmbeddedPdfSignature) -> tuple[ades.Changes | None, list[str]]:
    """The difference analysis, or None (and why) when the revisions cannot be compared."""
    try:
        return ades.modification(reader, sig), []
    except SignatureValidationError as e:
        return None, [e.failure_message]
    except (MemoryError, misc.PdfDecodeLimitError):
        raise
    except Exception:  # noqa: BLE001 - a revision pyHanko cannot walk
        return None, ["the revisions after the signature could not be compared with it"]


async def _doc_timestamp(reader: PdfFileReader, f: _Found, policy: ades.Policy,
                         kind: str = DOC_TIMESTAMP) -> SignatureReport:
    sig = f.embedded
    assert sig is not None
    if _subfilter(sig) != _RFC3161:
        return _unchecked(f, kind, ["a document timestamp must be /ETSI.RFC3161"])
    fault = _format_fault(reader, sig)
    if fault is not None:
        return _unchecked(f, kind, [fault], failed=True)
    changes, changes_problem = _changes(reader, sig)
    try:
        evidence = await ades.validate_timestamp(sig, policy)
    except SignatureValidationError as e:
        return _unchecked(f, kind, [e.failure_message], e.ades_subindication, changes=changes)
    except (MemoryError, misc.PdfDecodeLimitError):
        raise
    except Exception:  # noqa: BLE001 - one timestamp's damage leaves it unchecked alone
        return _unchecked(f, kind, [_CANNOT_CHECK], changes=changes)
    status = evidence.status
    when = getattr(status, "timestamp", None) if status is not None and status.trusted else None
    return _report(f, kind, evidence, changes, changes_problem, level=None,
                   timestamp_time=when, no_anchors=not policy.roots)


# --- the report -----------------------------------------------------------------------


def _modification(f: _Found, changes: ades.Changes | None) -> str | None:
    if f.dropped:
        return "other"
    if changes is None:
        return None
    level_name = changes.level.name if changes.level is not None else None
    return modification_of(level_name, changes.docmdp_ok, changes.uncovered_bytes > 0)


def _report(f: _Found, kind: str, evidence: ades.Evidence, changes: ades.Changes | None,
            problems: list[str], *, level: str | None, timestamp_time: dt.datetime | None,
            no_anchors: bool) -> SignatureReport:
    status = evidence.status
    mod = _modification(f, changes)
    indication, sub = verdict(evidence.subindic.status.name,
                              evidence.subindic.standard_name, mod or "none",
                              anchored=not no_anchors)
    if mod is None and indication == PASSED:
        # The signature holds, but what later revisions did is unknown.
        indication, sub = INDETERMINATE, "FORMAT_FAILURE"
    words = [*problems, *(changes.problems if changes is not None else ())]
    if indication != PASSED:
        if no_anchors:
            words.append("no trust anchors were given (--trust or validation.trust_roots)")
        words += evidence.problems[:_MAX_LOGGED_PROBLEMS]
    revoked = bool(status is not None and status.revoked) or sub in (
        "REVOKED", "REVOKED_NO_POE", "REVOKED_CA_NO_POE")
    return SignatureReport(
        field=f.name, kind=kind, intact=status.intact if status else None,
        valid=status.valid if status else None, trusted=status.trusted if status else None,
        revoked=revoked, level=level, modification=mod, signer=_signer_of(f, status),
        signing_time=_claimed_time(f.embedded) if kind == SIGNATURE else None,
        timestamp_time=timestamp_time, indication=indication, sub_indication=sub,
        problems=tuple(words))


def _unchecked(f: _Found, kind: str, problems: list[str], subindic: AdESSubIndic | None = None,
               *, failed: bool = False, changes: ades.Changes | None = None) -> SignatureReport:
    """A signature whose checks did not run: INDETERMINATE with pyHanko's reason or
    FORMAT_FAILURE; ``failed`` when its form was checked and found wrong (TOTAL-FAILED,
    FORMAT_FAILURE, ETSI TS 119 102-1 §5.2.2)."""
    indication: str
    sub: str | None
    if failed:
        indication, sub = FAILED, "FORMAT_FAILURE"
    else:
        indication, sub = verdict(subindic.status.name if subindic else None,
                                  subindic.standard_name if subindic else None, "none")
    mod = None if failed else _modification(f, changes)
    if mod == "other" and indication != FAILED:
        indication, sub = FAILED, "FORMAT_FAILURE"
    if changes is not None:
        problems = [*problems, *changes.problems]
    return SignatureReport(
        field=f.name, kind=kind, intact=None, valid=None, trusted=None, revoked=False,
        level=None, modification=mod, signer=_signer_of(f, None),
        signing_time=_claimed_time(f.embedded) if kind == SIGNATURE else None,
        timestamp_time=None, indication=indication, sub_indication=sub,
        problems=tuple(dict.fromkeys(p for p in problems if p)))


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
