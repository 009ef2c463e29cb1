"""The exception tree.

Every error the service raises on purpose is a :class:`CasesignError` carrying what
its caller decides on: a stable snake_case ``code`` (documented in docs/api.md and
the OpenAPI document), an optional ``field`` at fault, and for retryable errors an
optional ``delay_s`` hint. What a code means to the rest of the service, the HTTP
``status`` it answers with, whether the job engine may retry it (``retryable``) and
the ``category`` a failed job records, is read from the one table of codes
(:mod:`casesignd.core.codes`): a class names its code and nothing else, so the two
cannot disagree. Library errors are translated at the boundary:
``raise MalformedPdf(...) from e``.
"""

from __future__ import annotations

from typing import Any

from casesignd.core.codes import INTERNAL, PERMANENT, RETRIES, row_of

# Failure categories recorded on a failed job (the job resource's error.category).
PERMANENT_INPUT = PERMANENT  # the input is wrong; retrying cannot help
RETRIES_EXHAUSTED = RETRIES  # a transient failure outlived the attempt budget
LOST = "lost"  # the job's lease was lost too often (repeated crashes)

__all__ = ["INTERNAL", "LOST", "PERMANENT_INPUT", "RETRIES_EXHAUSTED", "CasesignError"]


class CasesignError(Exception):
    """Base of every deliberate error. Subclasses name their ``code``; its status,
    retryability and category come from :data:`casesignd.core.codes.CODES`."""

    code: str = "internal_error"
    # False for a wait on a shared resource (temp space): the job waits its turn and
    # the wait does not use up its attempts.
    counts_as_attempt: bool = True
    # A refused document's finer reason (a word of casesignd.core.codes.REASONS) and where
    # in the document it is (page, object, attachment, field): both go to the client,
    # and neither carries the document's text, its URLs or names of people.
    reason: str | None = None

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        field: str | None = None,
        delay_s: float | None = None,
        headers: dict[str, str] | None = None,
        detail: dict[str, Any] | None = None,
        reason: str | None = None,
        where: dict[str, Any] | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message or self.code.replace("_", " ")
        self.field = field
        self.delay_s = delay_s
        self.headers = headers or {}
        # Operator-facing detail: goes to the log, never to the client.
        self.detail = detail or {}
        if reason is not None:
            self.reason = reason
        self.where = where or {}
        super().__init__(self.message)

    @property
    def status(self) -> int:
        """The HTTP status this error answers with (the table's)."""
        return row_of(self.code).status

    @property
    def retryable(self) -> bool:
        """Whether the job engine retries a job that failed with it (the table's)."""
        return row_of(self.code).retryable

    @property
    def category(self) -> str:
        """The category a job that fails with it records (the table's)."""
        return row_of(self.code).category


# --- request errors (API boundary) -------------------------------------------------


class BadRequest(CasesignError):
    code = "bad_request"


class Unauthorized(CasesignError):
    code = "unauthorized"


class Forbidden(CasesignError):
    code = "forbidden"


class NotFound(CasesignError):
    code = "not_found"


class Conflict(CasesignError):
    code = "conflict"


class RequestTimeout(CasesignError):
    """The client did not send its request (headers and body) within server.request_timeout_s."""

    code = "request_timeout"


class TooLarge(CasesignError):
    code = "too_large"


class UnsupportedMediaType(CasesignError):
    code = "unsupported_media_type"


class ValidationError(CasesignError):
    """Input refused by validation; ``field`` names the path (``items[3].unit_price``)."""

    code = "invalid_field"


class Busy(CasesignError):
    """Capacity is taken right now; the client should come back after ``Retry-After``."""

    code = "busy"


class QueueFull(Busy):
    code = "queue_full"


class RateLimited(Busy):
    """Past a tenant's jobs admitted per window (``[tenants.limits] admit_rate``)."""

    code = "rate_limited"


class TenantQueueFull(Busy):
    """Past a tenant's jobs waiting at once (``[tenants.limits] max_queued``)."""

    code = "tenant_queue_full"


class QuotaExceeded(Busy):
    """Past a tenant's bytes uploaded per window (``[tenants.limits] upload_bytes``)."""

    code = "quota_exceeded"


class TooManyUploads(Busy):
    """Past server.max_uploads (or one tenant's server.max_uploads_per_tenant) object
    uploads at once."""

    code = "too_many_uploads"


class UploadQuota(Busy):
    """The bytes of the uploads in flight would pass storage.upload_quota_bytes."""

    code = "upload_quota"


class ShuttingDown(Busy):
    code = "shutting_down"


class StoreUnavailable(Busy):
    code = "store_unavailable"


class DeadlineExceeded(CasesignError):
    code = "deadline_exceeded"


# --- job errors (raised inside a worker) --------------------------------------------


class PermanentJobError(CasesignError):
    """The job's input cannot succeed: fail at once, never retry."""

    code = "invalid_input"


class TransientJobError(CasesignError):
    """Something outside the job failed for now: retry with backoff."""

    code = "transient_failure"


class MalformedPdf(PermanentJobError):
    code = "malformed_pdf"
    reason = "damaged"


class AmbiguousPdf(PermanentJobError):
    """Readers would show the document differently (a parser differential), and it
    cannot be rewritten into one unambiguous document: it carries a signature, the
    policy's ``normalize`` is ``never``, or the readers disagree on what it shows."""

    code = "ambiguous_pdf"
    reason = "readers_disagree"


class EncryptedPdf(PermanentJobError):
    code = "encrypted_pdf"
    reason = "password_encryption"


class ActiveContent(PermanentJobError):
    code = "active_content"


class MalwareDetected(PermanentJobError):
    code = "malware_detected"


class DigestMismatch(PermanentJobError):
    code = "digest_mismatch"


class SizeMismatch(DigestMismatch):
    """The bytes are not the declared size (checked while streaming, before the digest)."""

    code = "size_mismatch"


class LimitExceeded(PermanentJobError):
    code = "limit_exceeded"


class ScanLimitExceeded(LimitExceeded):
    """The file is larger than the malware scanner will examine (clamd StreamMaxLength),
    so it cannot be declared clean; permanent until the operator raises the limit."""

    code = "scan_limit_exceeded"


class MediaTypeMismatch(PermanentJobError):
    """The content is of another media type than the item declares."""

    code = "media_type_mismatch"


class MediaTypeNotAllowed(PermanentJobError):
    """The declared media type is not among the policy's allowed evidence types."""

    code = "media_type_not_allowed"


class SourceUnavailable(TransientJobError):
    code = "source_unavailable"


class TempQuota(TransientJobError):
    code = "temp_quota"
    counts_as_attempt = False


class TempBroken(TransientJobError):
    """A sealed temporary file failed authentication (altered, cut or swapped on the
    temp volume): the attempt stops before anything it read is signed or served, and
    the job retries from its source."""

    code = "io_error"


class ScannerUnavailable(TransientJobError):
    code = "scanner_unavailable"


class RendererUnavailable(TransientJobError):
    """A page renderer that checks a rewritten document (poppler's pdftoppm, MuPDF's
    mutool: casesignd.pdf.render) is not installed. The service's fault, not the
    document's: the job waits for the operator rather than being refused or passed."""

    code = "renderer_unavailable"


class TsaUnavailable(TransientJobError):
    code = "tsa_unavailable"


class RevocationUnavailable(TransientJobError):
    """No OCSP response or CRL could be had for a certificate of a chain: the job waits
    and retries; it is never signed at a lower level."""

    code = "revocation_unavailable"


class CertificateUntrusted(TransientJobError):
    """The signing or a TSA's certificate does not chain to ``[validation] trust_roots``:
    the operator's to fix, so the job waits rather than being signed lower."""

    code = "certificate_untrusted"


class CertificateRevoked(PermanentJobError):
    """The signing certificate (or one of its chain) is revoked."""

    code = "certificate_revoked"


class CertificateExpired(PermanentJobError):
    """The signing certificate (or one of its chain) is not yet or no longer valid, or
    lacks the key usage a signature needs."""

    code = "certificate_expired"


class SigningError(CasesignError):
    """The signing key or token failed; retryable because tokens come back."""

    code = "signing_failed"


class ConfigError(Exception):
    """A configuration problem: ``key`` names the setting, the message says what is wrong."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class SignatureTooLarge(CasesignError):
    """The CMS does not fit the /Contents placeholder: a sizing fault of the service."""

    code = "signature_too_large"


class CertifiedPdf(PermanentJobError):
    """A certification signature's DocMDP permissions (PDF 32000-1 §12.8.2.2) forbid the update."""

    code = "certified_pdf"
