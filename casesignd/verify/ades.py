"""One signature through pyHanko's AdES validation, for :mod:`casesignd.verify.validate`.

What this module owns: the validation policy (trust anchors only, revocation checked
where a certificate declares a source, certificates never fetched), the fetching
rules (``never``, ``missing``, ``always``, each bounded by ``fetch_timeout_s``), the
difference analysis of later revisions, the document security store (its
validation data, and whether it holds what PAdES B-LT needs), and pyHanko's log
records, which become the report's problems instead of lines on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from asn1crypto import cms as acms
from asn1crypto import crl as acrl
from asn1crypto import ocsp as aocsp
from asn1crypto import x509 as ax509
from cryptography.exceptions import InvalidSignature
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.decode_limits import DecodePurpose
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.ades.report import AdESFailure, AdESIndeterminate, AdESStatus, AdESSubIndic
from pyhanko.sign.diff_analysis import DEFAULT_DIFF_POLICY, DiffResult, ModificationLevel
from pyhanko.sign.fields import MDPPerm
from pyhanko.sign.general import find_cms_attribute_iter
from pyhanko.sign.validation import EmbeddedPdfSignature
from pyhanko.sign.validation.ades import (
    AdESBasicValidationResult,
    ades_basic_validation,
    ades_lta_validation,
    ades_timestamp_validation,
    ades_with_time_validation,
)
from pyhanko.sign.validation.generic_cms import message_imprint_checker
from pyhanko.sign.validation.pdf_embedded import read_certification_data
from pyhanko.sign.validation.policy_decl import (
    CertificateFetchingRule,
    LocalKnowledge,
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko.sign.validation.settings import KeyUsageConstraints
from pyhanko.sign.validation.status import SignatureCoverageLevel, SignatureStatus
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.fetchers.aiohttp_fetchers import AIOHttpFetcherBackend
from pyhanko_certvalidator.path import ValidationPath
from pyhanko_certvalidator.policy_decl import (
    CertRevTrustPolicy,
    RevocationCheckingPolicy,
    RevocationCheckingRule,
)
from pyhanko_certvalidator.registry import SimpleTrustManager
from pyhanko_certvalidator.revinfo.archival import CRLContainer, OCSPContainer
from pyhanko_certvalidator.sig_validate import DefaultSignatureValidator

from casesignd.verify import rules

# Left undecided by the document's own data, and perhaps decided by fresh revocation data.
_FETCH_MAY_HELP = frozenset({
    AdESIndeterminate.CERTIFICATE_CHAIN_GENERAL_FAILURE, AdESIndeterminate.TRY_LATER,
    AdESIndeterminate.REVOCATION_OUT_OF_BOUNDS_NO_POE,
})
# Undecided at the current time for want of a proof of existence: what the long-term
# validation's evidence (EN 319 102-1 §5.6.3: DSS, document timestamps) may settle.
_LTA_MAY_HELP = frozenset({
    AdESIndeterminate.REVOKED_NO_POE, AdESIndeterminate.REVOKED_CA_NO_POE,
    AdESIndeterminate.OUT_OF_BOUNDS_NO_POE, AdESIndeterminate.OUT_OF_BOUNDS_NOT_REVOKED,
    AdESIndeterminate.CRYPTO_CONSTRAINTS_FAILURE_NO_POE,
    AdESIndeterminate.REVOCATION_OUT_OF_BOUNDS_NO_POE, AdESIndeterminate.TRY_LATER,
})
# What may follow the last revision's %%EOF (PDF 32000-1 §7.5.5: an end-of-line).
_TRAILING_OK = b" \t\r\n\x00\x0c"
# pyHanko's note on every B-T signature without a later document timestamp: no fault.
_NOT_PROBLEMS = ("No document timestamps after signature",)
_PYHANKO_LOGGERS = ("pyhanko", "pyhanko_certvalidator")


@dataclass
class Evidence:
    """What pyHanko's AdES process said about one signature or timestamp."""

    subindic: AdESSubIndic
    status: SignatureStatus | None = None
    # The signature timestamp's status, when it validated (B-T).
    timestamp_status: SignatureStatus | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Policy:
    """The document's validation settings, shared by its signatures."""

    roots: tuple[ax509.Certificate, ...]
    fetch: str  # never, missing, always
    fetch_timeout_s: float
    knowledge: LocalKnowledge  # the last revision's DSS
    backend: AIOHttpFetcherBackend

    def spec(self, online: bool) -> SignatureValidationSpec:
        # Revocation is checked where a certificate names a source (RFC 5280 §4.2.1.13,
        # RFC 5280 §4.2.2.1); certificates come from the document and the anchors only.
        rule = RevocationCheckingRule.CHECK_IF_DECLARED
        fetching = RevinfoOnlineFetchingRule.LOCAL_ONLY
        if online:
            fetching = (RevinfoOnlineFetchingRule.ALWAYS_FETCH if self.fetch == "always"
                        else RevinfoOnlineFetchingRule.NO_HISTORICAL_FETCH)
        return SignatureValidationSpec(
            cert_validation_policy=CertValidationPolicySpec(
                trust_manager=SimpleTrustManager.build(trust_roots=list(self.roots)),
                revinfo_policy=CertRevTrustPolicy(RevocationCheckingPolicy(rule, rule)),
                signature_validator=_KEY_SAFE_VALIDATOR),
            revinfo_gathering_policy=RevocationInfoGatheringSpec(
                online_fetching_rule=fetching, fetcher_backend=self.backend,
                certificate_fetching_rule=CertificateFetchingRule.NEVER_FETCH),
            local_knowledge=self.knowledge,
            # A document signer's key signs (RFC 5280 §4.2.1.3): digitalSignature or
            # nonRepudiation, either will do.
            key_usage_settings=KeyUsageConstraints(
                key_usage={"digital_signature", "non_repudiation"}))


class _KeySafeValidator(DefaultSignatureValidator):
    """pyhanko-certvalidator asserts that a certificate's signature algorithm fits its
    issuer's key: a look-alike issuer with a key of another type (an EC signer
    "issued" under the name of an RSA anchor) raises AssertionError out of the whole
    validation. Here it is what it is: a certificate signature that does not verify."""

    def validate_signature(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().validate_signature(*args, **kwargs)
        except (AssertionError, TypeError) as e:
            raise InvalidSignature(f"the issuer's key cannot have made it: {e}") from e


_KEY_SAFE_VALIDATOR = _KeySafeValidator()


# --- validation -----------------------------------------------------------------------


def has_signature_timestamp(sig: EmbeddedPdfSignature) -> bool:
    """Whether the CMS carries an RFC 3161 signature timestamp (RFC 5652 unsigned
    attribute, RFC 3161 Appendix A)."""
    attrs = sig.signer_info["unsigned_attrs"]
    return next(find_cms_attribute_iter(attrs, "signature_time_stamp_token"), None) is not None


async def validate_signature(sig: EmbeddedPdfSignature, policy: Policy, *,
                             encapsulated: bool = False) -> Evidence:
    """A /Sig signature: without a signature timestamp the basic validation (ETSI EN
    319 102-1 §5.3); with one the validation with time (§5.5), and when that is
    INDETERMINATE for want of a proof of existence (an expired or revoked certificate,
    stale revocation data) the one for long-term signatures (§5.6.3), which takes the
    DSS and the document timestamps as evidence. Call :func:`modification` first:
    pyHanko's long-term validation reads the difference analysis it leaves.

    Only then: pyHanko's long-term validation also runs its past-validation step on a
    signature that already passed, and turns PASSED into NO_POE when that step finds no
    revocation data to slide the control time with (a chain that declares none).

    ``encapsulated`` (adbe.pkcs7.sha1, PDF 32000-1 §12.8.3.3.1): the CMS signs the SHA-1
    digest of the signed bytes, carried as its content; the basic validation checks
    the signature over that content, and the content must be the bytes' digest."""
    timestamped = has_signature_timestamp(sig) and not encapsulated

    async def run(online: bool) -> Evidence:
        spec = policy.spec(online)
        with _captured() as logged:
            res: AdESBasicValidationResult
            if encapsulated:
                res = await ades_basic_validation(sig.signed_data, spec)
                if _encapsulated_digest(sig) != _range_digest(sig, "sha1"):
                    status = res.api_status
                    if status is not None:
                        status = dataclasses.replace(status, intact=False)
                    return Evidence(AdESFailure.HASH_FAILURE, status, None, [
                        "the SHA-1 digest the signature carries is not that of the signed bytes"])
            elif not timestamped:
                res = await ades_basic_validation(sig.signed_data, spec,
                                                  raw_digest=sig.compute_digest())
            else:
                res = await ades_with_time_validation(sig.signed_data, spec,
                                                      raw_digest=sig.compute_digest())
                if res.ades_subindic in _LTA_MAY_HELP:
                    res = await ades_lta_validation(
                        sig, PdfSignatureValidationSpec(spec, diff_policy=DEFAULT_DIFF_POLICY))
            ts = getattr(res.api_status, "timestamp_validity", None)
            if timestamped and ts is None:
                # The signature's chain stopped the process before its timestamp was
                # looked at; the timestamp may still be sound (the level says so).
                ts = await _signature_timestamp(sig, spec)
        return Evidence(res.ades_subindic, res.api_status, ts, _words(res.failure_msg, logged))

    return await _with_fetching(run, sig, policy)


def _encapsulated_digest(sig: EmbeddedPdfSignature) -> bytes | None:
    content = sig.signed_data["encap_content_info"]["content"]
    return content.native if content is not None and content.native is not None else None


def _range_digest(sig: EmbeddedPdfSignature, algorithm: str) -> bytes:
    """The digest of the bytes the /ByteRange names (checked to lie within the file)."""
    h = hashlib.new(algorithm)
    stream = sig.reader.stream
    offsets = [int(x) for x in sig.byte_range]
    for start, length in zip(offsets[::2], offsets[1::2], strict=True):
        stream.seek(start)
        h.update(stream.read(length))
    return h.digest()


async def _signature_timestamp(sig: EmbeddedPdfSignature,
                               spec: SignatureValidationSpec) -> SignatureStatus | None:
    """The first signature timestamp token over ``sig``'s value that validates (§5.4)."""
    imprint = message_imprint_checker(sig.signer_info)
    for attr in find_cms_attribute_iter(sig.signer_info["unsigned_attrs"],
                                        "signature_time_stamp_token"):
        res = await ades_timestamp_validation(attr["content"], spec, imprint)
        if res.ades_subindic.status == AdESStatus.PASSED:
            return res.api_status
    return None


async def validate_timestamp(sig: EmbeddedPdfSignature, policy: Policy) -> Evidence:
    """A /DocTimeStamp: its token over the signed bytes, at the current time (§5.4)."""

    async def run(online: bool) -> Evidence:
        with _captured() as logged:
            res = await ades_timestamp_validation(sig.signed_data, policy.spec(online),
                                                  sig.compute_digest)
        return Evidence(res.ades_subindic, res.api_status, None, _words(res.failure_msg, logged))

    return await _with_fetching(run, sig, policy)


Run = Callable[[bool], Awaitable[Evidence]]


async def _with_fetching(run: Run, sig: EmbeddedPdfSignature, policy: Policy) -> Evidence:
    """``run(online)`` as the policy says: the document's data alone; then, for
    ``missing``, online once more when that left the chain undecided and its
    certificates name a revocation source; for ``always``, online only."""
    if policy.fetch == "always":
        fetched = await _bounded(run, policy)
        if fetched is not None:
            return fetched
    else:
        local = await run(False)
        if (policy.fetch == "never" or local.subindic not in _FETCH_MAY_HELP
                or not _names_revocation_sources(sig)):
            return local
        fetched = await _bounded(run, policy)
        if fetched is not None:
            return fetched
    # Out of time online: what the document's own data say, and why no more.
    local = await run(False)
    local.problems.insert(0, _timed_out(policy))
    return local


async def _bounded(run: Run, policy: Policy) -> Evidence | None:
    """``run(True)``, or None when it takes longer than ``fetch_timeout_s``."""
    try:
        async with asyncio.timeout(policy.fetch_timeout_s):
            return await run(True)
    except TimeoutError:
        return None


def _timed_out(policy: Policy) -> str:
    return f"revocation data could not be fetched within {policy.fetch_timeout_s:g} s"


def _names_revocation_sources(sig: EmbeddedPdfSignature) -> bool:
    """Whether a certificate of the signature, or of its timestamps, names a CRL or
    OCSP source (RFC 5280 §4.2.1.13, §4.2.2.1): only then can fetching help."""
    certs = [sig.signer_cert, *sig.other_embedded_certs]
    for attr in find_cms_attribute_iter(sig.signer_info["unsigned_attrs"],
                                        "signature_time_stamp_token"):
        certs += [c.chosen for c in attr["content"]["certificates"] or []
                  if c.name == "certificate"]
    return any(c.crl_distribution_points or c.ocsp_urls for c in certs)


# --- what later revisions did -----------------------------------------------------------


@dataclass(frozen=True)
class Changes:
    """The difference analysis of the revisions after a signature (pyHanko's
    DEFAULT_DIFF_POLICY), and the bytes after the last revision."""

    level: ModificationLevel | None  # None: a change pyHanko's rules do not accept
    docmdp_ok: bool | None  # within the signature's DocMDP permissions
    uncovered_bytes: int  # after the signed range, explained by no revision
    problems: tuple[str, ...] = ()


def modification(reader: PdfFileReader, sig: EmbeddedPdfSignature) -> Changes:
    """What the revisions after ``sig`` changed: pyHanko's difference analysis, then
    casesignd's rules on top of it (:mod:`casesignd.verify.rules`)."""
    sig.compute_integrity_info(diff_policy=DEFAULT_DIFF_POLICY)
    summary = sig.summarise_integrity_info()
    diff = summary["diff_result"]
    docmdp_ok = summary["docmdp_ok"]
    problems: list[str] = []
    level = diff.modification_level if isinstance(diff, DiffResult) else None
    if diff is not None and (level is None or level == ModificationLevel.OTHER):
        explained = rules.explain_revisions(reader, sig.signed_revision, sig.fieldmdp,
                                            _docmdp(reader, sig))
        if explained is not None:
            level, docmdp_ok, diff = explained, True, None
    if diff is not None and level is None:
        problems.append("a later revision changes what a reader sees: "
                        + " ".join(str(diff).split()))
    if docmdp_ok is False and level is not None:
        allowed = sig.docmdp_level.name.lower() if sig.docmdp_level else "none"
        problems.append(f"a later revision does {level.name.lower()}, which the signature's "
                        f"DocMDP permissions ({allowed}) do not allow")
    covered = rules.overlays(reader, sig.signed_revision)
    if covered:
        level = None
        problems += covered
    tail = _uncovered_tail(reader, sig)
    if tail:
        problems.append(f"{tail} bytes after the last revision are covered by no signature")
    return Changes(level, docmdp_ok, tail, tuple(problems))


def _docmdp(reader: PdfFileReader, sig: EmbeddedPdfSignature) -> MDPPerm | None:
    """The strictest DocMDP that binds the revisions after ``sig``: the document's
    certification (PDF 32000-1 §12.8.2.2) or the signature's own FieldMDP /P."""
    levels = [sig.docmdp_level]
    with contextlib.suppress(Exception):
        cert = read_certification_data(reader)
        levels.append(cert.permission if cert is not None else None)
    known = [lv for lv in levels if lv is not None]
    return min(known) if known else None


def _uncovered_tail(reader: PdfFileReader, sig: EmbeddedPdfSignature) -> int:
    """Bytes after the signed range when no later revision follows it: pyHanko has no
    revision to compare them with, and would call the signature unmodified."""
    if sig.coverage != SignatureCoverageLevel.ENTIRE_REVISION:
        return 0
    if sig.signed_revision != reader.xrefs.total_revisions - 1:
        return 0
    _, _, start2, len2 = (int(x) for x in sig.byte_range)
    stream = reader.stream
    stream.seek(start2 + len2)
    rest = stream.read()
    return len(rest) if rest.strip(_TRAILING_OK) else 0


# --- the document security store ------------------------------------------------------


@dataclass(frozen=True)
class Dss:
    """The DSS of one revision (ETSI EN 319 142-1 §5.4.2): certificates, CRLs, OCSP."""

    certs: tuple[ax509.Certificate, ...] = ()
    crls: tuple[acrl.CertificateList, ...] = ()
    ocsps: tuple[aocsp.OCSPResponse, ...] = ()

    def knowledge(self) -> LocalKnowledge:
        return LocalKnowledge(
            known_ocsps=[c for r in self.ocsps for c in OCSPContainer.load_multi(r)],
            known_crls=[CRLContainer(c) for c in self.crls],
            known_certs=list(self.certs))

    def covers(self, paths: tuple[ValidationPath | None, ...], signed_data: acms.SignedData) -> bool:
        """B-LT's validation data (ETSI EN 319 142-1 §6.3): every certificate of each
        path but its anchor is in the DSS or the signature, and the DSS has revocation
        data for each one that names a revocation source."""
        if not (self.certs or self.crls or self.ocsps):
            return False
        held = {c.dump() for c in self.certs}
        held |= {c.chosen.dump() for c in signed_data["certificates"] or []
                 if c.name == "certificate"}
        for path in paths:
            if path is None:
                return False
            for cert in path.iter_certs(include_root=False):
                if cert.dump() not in held:
                    return False
                if (cert.crl_distribution_points or cert.ocsp_urls) and not self._revinfo_for(cert):
                    return False
        return True

    def _revinfo_for(self, cert: ax509.Certificate) -> bool:
        if any(c["tbs_cert_list"]["issuer"] == cert.issuer for c in self.crls):
            return True
        for resp in self.ocsps:
            with contextlib.suppress(KeyError, ValueError, TypeError, AttributeError):
                basic = resp["response_bytes"]["response"].parsed
                for single in basic["tbs_response_data"]["responses"]:
                    if single["cert_id"]["serial_number"].native == cert.serial_number:
                        return True
        return False


def read_dss(handler: object, findings: list[str] | None = None) -> Dss:
    """The DSS as ``handler`` (the reader, or one revision of it) sees it. An entry that
    cannot be read (a stream that does not inflate, DER that does not parse) is left
    out and said in ``findings``: the DSS is evidence a signature may use, and a
    damaged entry is evidence missing, not a document that cannot be read."""
    try:
        dss = handler.root["/DSS"]  # type: ignore[attr-defined]
    except KeyError:
        return Dss()
    except Exception:  # noqa: BLE001 - a catalog entry that does not resolve
        dss = None
    if not isinstance(dss, generic.DictionaryObject):
        _note(findings, "the document security store is not a dictionary; it was ignored")
        return Dss()
    loaded: dict[str, list[Any]] = {}
    for key, kind, load in (("/Certs", DecodePurpose.CERTIFICATE, ax509.Certificate.load),
                            ("/CRLs", DecodePurpose.CRL, acrl.CertificateList.load),
                            ("/OCSPs", DecodePurpose.OCSP_RESPONSE, aocsp.OCSPResponse.load)):
        out = loaded[key] = []
        try:
            entries = list(dss.get(key, generic.ArrayObject()))
        except Exception:  # noqa: BLE001 - an array that does not resolve
            _note(findings, f"the document security store's {key} cannot be read; it was ignored")
            continue
        for entry in entries:
            try:
                stream = entry.get_object()
                if not isinstance(stream, generic.StreamObject):
                    raise TypeError
                value = load(stream.read_data(kind))
                value.native  # noqa: B018 - parse it all now, not halfway through a check
                out.append(value)
            except Exception:  # noqa: BLE001 - zlib.error, DER errors, decode limits
                _note(findings, f"an entry of the document security store's {key} cannot be "
                      "decoded (not a stream, a damaged stream or DER); it was ignored")
    return Dss(tuple(loaded["/Certs"]), tuple(loaded["/CRLs"]), tuple(loaded["/OCSPs"]))


def _note(findings: list[str] | None, text: str) -> None:
    if findings is not None and text not in findings:
        findings.append(text)


# --- pyHanko's words -------------------------------------------------------------------


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage().splitlines()[0])


@contextlib.contextmanager
def quiet_pyhanko() -> Iterator[None]:
    """pyHanko logs why a check failed, with tracebacks: those records become the
    report's problems (:func:`_captured`), never lines on stderr or in a log."""
    loggers = [logging.getLogger(n) for n in _PYHANKO_LOGGERS]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    sink = logging.NullHandler()
    for lg in loggers:
        lg.propagate = False
        lg.setLevel(logging.WARNING)
        lg.addHandler(sink)
    try:
        yield
    finally:
        for lg, (propagate, level) in zip(loggers, saved, strict=True):
            lg.removeHandler(sink)
            lg.propagate, lg.level = propagate, level


@contextlib.contextmanager
def _captured() -> Iterator[list[str]]:
    collector = _Collector()
    loggers = [logging.getLogger(n) for n in _PYHANKO_LOGGERS]
    for lg in loggers:
        lg.addHandler(collector)
    try:
        yield collector.messages
    finally:
        for lg in loggers:
            lg.removeHandler(collector)


def _words(failure: str | None, logged: list[str]) -> list[str]:
    found = [failure, *logged]
    return list(dict.fromkeys(m for m in found if m and not m.startswith(_NOT_PROBLEMS)))
