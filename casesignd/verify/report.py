"""What :mod:`casesignd.verify.validate` is asked and answers: the options, the report of each
signature and of the document, and the pure decisions that make the verdict (the
indication, the modification word, the PAdES level). No pyHanko here: the daemon
imports it to build a request, a worker process runs the validation.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from casesignd.verify.budget import VerifyBudget

PASSED, FAILED, INDETERMINATE = "TOTAL-PASSED", "TOTAL-FAILED", "INDETERMINATE"
FETCH_MODES = ("never", "missing", "always")
SIGNATURE, DOC_TIMESTAMP = "signature", "document_timestamp"
MODIFICATIONS = ("none", "lta_updates", "form_filling", "annotations", "other")


_BUDGET = VerifyBudget()


@dataclass(frozen=True)
class VerifyOptions:
    """How to validate: trust anchors (DER certificates), where revocation data may
    come from, how long fetching it may take, and what one document may cost
    (:mod:`casesignd.verify.budget`)."""

    trust_roots: tuple[bytes, ...] = ()
    fetch: str = "missing"
    fetch_timeout_s: float = 5.0
    max_signatures: int = _BUDGET.max_signatures
    max_cpu_s: float = _BUDGET.max_cpu_s
    max_cpu_per_signature_s: float = _BUDGET.max_cpu_per_signature_s
    max_decoded_bytes: int = _BUDGET.max_decoded_bytes
    max_contents_bytes: int = _BUDGET.max_contents_bytes

    @classmethod
    def within(cls, budget: VerifyBudget, trust_roots: tuple[bytes, ...], fetch: str,
               fetch_timeout_s: float) -> VerifyOptions:
        """The options with ``budget``'s limits."""
        return cls(trust_roots, fetch, fetch_timeout_s, budget.max_signatures, budget.max_cpu_s,
                   budget.max_cpu_per_signature_s, budget.max_decoded_bytes,
                   budget.max_contents_bytes)

    def __post_init__(self) -> None:
        if self.fetch not in FETCH_MODES:
            raise ValueError(f"fetch must be one of {', '.join(FETCH_MODES)}, got {self.fetch!r}")


@dataclass(frozen=True)
class SignatureReport:
    """The verdict on one signature or document timestamp."""

    field: str
    kind: str  # "signature" or "document_timestamp"
    # The three checks below are None when they could not be made (a CMS that cannot be
    # parsed, a /SubFilter no validator knows, signed bytes not in the file): a
    # signature that was not checked is neither intact nor tampered with.
    intact: bool | None  # the signed bytes hash to the signed digest
    valid: bool | None  # the signature value verifies with the signer's key
    trusted: bool | None  # the signer chains to a trust anchor, within the validation policy
    revoked: bool  # the signer's (or a CA's) certificate is revoked
    level: str | None  # B-B, B-T, B-LT, B-LTA; None for a timestamp or a non-PAdES signature
    # none, lta_updates, form_filling, annotations, other; None when later revisions
    # could not be compared with the signed one
    modification: str | None
    signer: str  # the certificate's subject (RFC 4514), "" when unreadable
    signing_time: dt.datetime | None  # claimed by the signer (/M or signing-time)
    timestamp_time: dt.datetime | None  # of the validated timestamp
    indication: str  # TOTAL-PASSED, TOTAL-FAILED, INDETERMINATE
    sub_indication: str | None  # ETSI TS 119 102-1 name; None when passed
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.indication == PASSED

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["problems"] = list(self.problems)
        for key in ("signing_time", "timestamp_time"):
            out[key] = _rfc3339(out[key])
        return out

    def describe(self) -> str:
        """One line for people: verdict, field, signer, level, modification, times, why."""
        verdict = self.indication + (f"/{self.sub_indication}" if self.sub_indication else "")
        what = "document timestamp" if self.kind == DOC_TIMESTAMP else (self.level or "no level")
        times = [f"signed {_rfc3339(self.signing_time)}"] if self.signing_time else []
        if self.timestamp_time:
            times.append(f"timestamp {_rfc3339(self.timestamp_time)}")
        line = (f"{verdict} {self.field}: {self.signer or 'unknown signer'}, {what}, "
                f"modification {self.modification or 'unknown'}"
                + "".join(f", {t}" for t in times))
        return line + (f" — {'; '.join(self.problems)}" if self.problems else "")


@dataclass(frozen=True)
class VerifyReport:
    """Every signature of a document, in signing order; ``passed`` only when there is at
    least one and every one is TOTAL-PASSED. ``findings`` are what a strict reader
    would have refused and other readers read (a hybrid-reference file, ``/Encrypt
    null``, a damaged document security store): said, not held against a signature."""

    signatures: tuple[SignatureReport, ...]
    findings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return bool(self.signatures) and all(s.passed for s in self.signatures)

    def to_json(self) -> dict[str, object]:
        return {"signatures": [s.to_json() for s in self.signatures], "passed": self.passed,
                "findings": list(self.findings)}


def _rfc3339(when: object) -> str | None:
    if not isinstance(when, dt.datetime):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


# --- pure decisions ------------------------------------------------------------------


def verdict(status: str | None, sub_indication: str | None, modification: str,
            anchored: bool = True) -> tuple[str, str | None]:
    """The indication and sub-indication from pyHanko's AdES result (its status
    ``PASSED``, ``FAILED`` or ``INDETERMINATE`` and its sub-indication's ETSI name).
    A permanent failure stays what it is; a later revision that changes what a reader
    sees fails with FORMAT_FAILURE; without any trust anchor no chain can be found,
    whatever pyHanko tripped on first (a self-signed signer is its
    CHAIN_CONSTRAINTS_FAILURE). ``status`` None (the AdES process did not run: the
    signature could not be read) is undecided, not failed: nothing was found wrong
    (ETSI TS 119 102-1 §5.2.2, FORMAT_FAILURE, unless a finer reason is known)."""
    if status is None:
        return INDETERMINATE, sub_indication if sub_indication else "FORMAT_FAILURE"
    if status == "FAILED":
        return FAILED, sub_indication
    if modification == "other":
        return FAILED, "FORMAT_FAILURE"
    if not anchored:
        return INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND"
    if status == "PASSED":
        return PASSED, None
    return INDETERMINATE, sub_indication


def byte_range_fault(byte_range: object, file_bytes: int, contents_bytes: int) -> str | None:
    """Why a signature's /ByteRange does not describe its file (PDF 32000-1 §12.8.1:
    two ranges from the start of the file, around the /Contents hex string and its
    delimiters, within the file), or None. ``contents_bytes`` is the decoded
    /Contents length."""
    if not (isinstance(byte_range, list | tuple) and len(byte_range) == 4
            and all(isinstance(x, int) and x >= 0 for x in byte_range)):
        return "the /ByteRange is not four offsets"
    start1, len1, start2, len2 = byte_range
    if start1 != 0:
        return "the /ByteRange does not start at the beginning of the file"
    if start2 < len1:
        return "the /ByteRange's two ranges overlap"
    if start2 + len2 > file_bytes:
        return "the /ByteRange runs past the end of the file"
    if start2 - len1 != 2 * contents_bytes + 2:
        return ("the /ByteRange leaves bytes besides /Contents unsigned"
                if start2 - len1 > 2 * contents_bytes + 2
                else "the /ByteRange signs part of /Contents")
    return None


def modification_of(level: str | None, docmdp_ok: bool | None, uncovered_tail: bool) -> str:
    """What later revisions did, in the report's words, from pyHanko's modification
    level (``NONE`` ... ``OTHER``; None when its rules refused a change): a change the
    signature's DocMDP did not allow, or bytes no revision explains, is ``other``."""
    if uncovered_tail or docmdp_ok is False or level is None:
        return "other"
    word = level.lower()
    return word if word in MODIFICATIONS else "other"


def level_of(pades: bool, intact: bool, timestamped: bool, lt: bool, lta: bool) -> str | None:
    """The highest PAdES baseline level met (ETSI EN 319 142-1 §6): each needs the one
    below it."""
    if not (pades and intact):
        return None
    met = "B-B"
    for ok, level in ((timestamped, "B-T"), (lt, "B-LT"), (lta, "B-LTA")):
        if not ok:
            break
        met = level
    return met


