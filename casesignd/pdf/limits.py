"""What one document's checks may spend, and what they report.

:class:`PdfLimits` (a policy's, built by the caller) bounds a document: pages, bytes,
objects, depth, decoded and inflated bytes, CPU time. :class:`Budget` is what one document still may
spend while it is checked; :class:`PdfReport` is what the checks learned.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from casesignd.core.errors import AmbiguousPdf, CasesignError, LimitExceeded, MalformedPdf
from casesignd.pdf import rules as pdfrules
from casesignd.pdf.frame import DAMAGE, Finding

MiB = 1024 * 1024


@dataclass(frozen=True)
class PdfLimits:
    """What a PDF may cost and hold, and whether it may be rewritten; a signing
    policy's are built from it by :func:`casesignd.job_kinds.signing.pdf_limits`."""

    max_pages: int = 5000
    max_bytes: int = 256 * MiB
    forbid_active_content: bool = True
    max_decoded_stream_bytes: int = 256 * MiB
    max_objects: int = 1_000_000
    # Nesting of direct objects (arrays in dictionaries in arrays ...), and of the page tree.
    max_depth: int = 64
    # All streams of one document together, embedded PDFs and images included (an
    # image by the size its dictionary gives).
    max_decoded_bytes: int = 1024 * MiB
    # What the checks themselves may inflate of one document (the work they do; images
    # are never inflated). 0: as much as max_decoded_bytes.
    max_inflated_bytes: int = 0
    # CPU time of one document's checks (the thread's clock, so a busy machine does
    # not count against the document).
    max_check_cpu_s: float = 20.0
    allowed_actions: frozenset[str] = pdfrules.DEFAULT_ALLOWED_ACTIONS
    # URL schemes a clicked link or form button may lead to (lower case).
    link_schemes: frozenset[str] = pdfrules.DEFAULT_LINK_SCHEMES
    # "never" | "when_needed" | "always": see casesignd.signing.pipeline.
    normalize: str = "when_needed"
    # A document certified against any change (DocMDP P=1) is refused before any
    # content check: it is to be signed. False where nothing is added (a check of
    # a document for its own sake).
    refuse_certified: bool = True

    def bounded(self, *, cpu_s: float, inflated_bytes: int) -> PdfLimits:
        """These limits with the checks' CPU time and inflated bytes capped (the kiosk's)."""
        return dataclasses.replace(self, max_check_cpu_s=min(self.max_check_cpu_s, cpu_s),
                                   max_inflated_bytes=min(self.inflation_budget, inflated_bytes))

    @property
    def inflation_budget(self) -> int:
        return self.max_inflated_bytes or self.max_decoded_bytes


@dataclass(frozen=True)
class PdfReport:
    """What inspection learned about an acceptable PDF."""

    pages: int
    producer: str | None
    pdf_version: str
    has_signatures: bool
    has_xref_stream: bool
    encrypted: bool = False
    size: int = 0
    objects: int = 0
    # /P of a certification signature (DocMDP, PDF 32000-1 §12.8.2.2): 1 forbids any
    # change, so a further signature would invalidate the certification.
    docmdp_permission: int | None = None
    # Repairs the parser made silently (pypdf warnings), for the operator's log.
    warnings: tuple[str, ...] = ()
    # Why readers may repair this document or read it differently (empty: they agree).
    findings: tuple[Finding, ...] = ()
    # Links and form buttons that leave the document (URI, SubmitForm actions), counted
    # for the audit trail; their targets are never kept.
    external_links: int = 0

    @property
    def damaged(self) -> bool:
        return any(f.kind == DAMAGE for f in self.findings)

    def refusal(self) -> CasesignError:
        """The error that refuses this document as it is, for its findings."""
        reasons = [f.reason for f in self.findings]
        if all(f.kind == DAMAGE for f in self.findings):
            first = self.findings[0]
            return MalformedPdf("the PDF is damaged: " + "; ".join(reasons[:3]),
                                detail={"findings": reasons}, reason=first.word,
                                where=dict(first.where))
        # The first ambiguity names the refusal: damage alone could have been repaired.
        first = next(f for f in self.findings if f.kind != DAMAGE)
        return AmbiguousPdf("readers could show this PDF differently: " + "; ".join(reasons[:3]),
                            detail={"findings": reasons}, reason=first.word,
                            where=dict(first.where))



class Budget:
    """What one document (with the PDFs embedded in it) may still spend: decoded
    bytes, bytes the checks inflate, and CPU time on this thread's clock."""

    def __init__(self, limits: PdfLimits) -> None:
        self.limits = limits
        self.decoded_left = limits.max_decoded_bytes
        self.inflate_left = limits.inflation_budget
        self.cpu_until = time.thread_time() + limits.max_check_cpu_s

    def tick(self) -> None:
        if time.thread_time() > self.cpu_until:
            raise LimitExceeded(
                f"checking the PDF takes more than {self.limits.max_check_cpu_s:g} s of CPU time",
                detail={"max_check_cpu_s": self.limits.max_check_cpu_s}, reason="check_time")

    def stream_limit(self) -> int:
        return min(self.limits.max_decoded_stream_bytes, self.decoded_left, self.inflate_left)

    def spend(self, decoded: int, *, inflated: bool = True) -> None:
        self.decoded_left -= decoded
        if inflated:
            self.inflate_left -= decoded
        if self.decoded_left < 0 or self.inflate_left < 0:
            raise LimitExceeded(
                "the PDF's streams decompress to more than the allowed size in all "
                "(a decompression bomb?)",
                detail={"max_decoded_bytes": self.limits.max_decoded_bytes},
                reason="decompression_bomb")
