"""The PAdES baseline levels, and what a signing policy asks of them, as values.

ETSI EN 319 142-1 §6: B-B (a signature), B-T (and a signature timestamp, RFC 3161),
B-LT (and the validation data of every chain in the document's /DSS) and B-LTA
(and a document timestamp over all of it). Signing code takes a
:class:`SigningPolicy`; the caller builds it from the configured policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from casesignd.pdf.limits import PdfLimits

LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")


@dataclass(frozen=True)
class SigningPolicy:
    """What one policy asks of a signature: its version, the level it meets
    (``signature_level``, one of :data:`LEVELS`), the TSA that timestamps it from B-T
    up, and the limits the document's checks keep to."""

    version: str
    signature_level: str = "B-B"
    tsa_url: str = ""
    tsa_timeout_s: float = 10.0
    limits: PdfLimits = field(default_factory=PdfLimits)

    def at_least(self, level: str) -> bool:
        """Whether this policy's signatures meet ``level`` or a higher one."""
        return LEVELS.index(self.signature_level) >= LEVELS.index(level)


def highest(policies: list[SigningPolicy]) -> SigningPolicy:
    """The policy that signs at the highest level (the first of those)."""
    return max(policies, key=lambda p: LEVELS.index(p.signature_level))
