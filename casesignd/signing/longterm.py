"""PAdES levels above B-T: the checks before a key is used, the /DSS and document timestamps.

ETSI EN 319 142-1 §6.3: a B-LT signature is a B-T signature followed by an
incremental update whose catalog holds a document security store (PDF 2.0
§12.8.4.3, ``/DSS`` with ``/Certs``, ``/OCSPs``, ``/CRLs``; no ``/VRI``, which is
optional) with the certificates and revocation data of the signer's chain and of
the signature timestamp's chain. A B-LTA signature adds, in the same update, a
document timestamp (``/Type /DocTimeStamp``, ``/SubFilter /ETSI.RFC3161``) over
the whole document, DSS included; should its TSA sign with a certificate the DSS
does not cover yet, one more update adds that chain's data. Renewal
(:meth:`LongTerm.extend`) repeats the second step over an existing B-LTA
document: fresh data for the last timestamp's chain, and a new timestamp over it.

The updates are written by pyHanko's incremental writer (``DocumentSecurityStore``,
``PdfTimeStamper``); the chains and their revocation data come from
:mod:`casesignd.signing.revocation`, cached, so that no signature waits for a fetch. The
timestamp request goes through :mod:`casesignd.signing.tsa` (its nonce and imprint checks
and its ``tsa_unavailable``). Every check that can refuse runs before the key is
used, and a level that cannot be reached is an error, never a lower level.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from asn1crypto import x509 as ax509
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from casesignd.core.errors import CasesignError, ConfigError, PermanentJobError
from casesignd.core.sealed import reading_sealed
from casesignd.signing import tsa
from casesignd.signing.levels import SigningPolicy, highest
from casesignd.signing.revocation import (
    ChainEvidence,
    Revocation,
    check_signing_usage,
    check_validity,
)
from casesignd.signing.sealed_output import SealedSigned

if TYPE_CHECKING:
    from casesignd.signing.longterm_write import Stamper

DTS_FIELD_PREFIX = "casesignd-timestamp"


def to_asn1(cert: x509.Certificate) -> ax509.Certificate:
    return ax509.Certificate.load(cert.public_bytes(Encoding.DER))


@dataclass(frozen=True)
class LongTermSettings:
    """What the long-term levels take from the configuration (``[validation]``): the
    PEM files of the trust roots chains are built to, one fetch's timeout, and how
    long before its nextUpdate kept revocation data is fetched again."""

    trust_roots: tuple[Path, ...] = ()
    fetch_timeout_s: float = 5.0
    refresh_ahead_s: float = 3600.0


def load_trust_roots(paths: tuple[Path, ...]) -> list[ax509.Certificate]:
    """The PEM certificates of ``[validation] trust_roots`` (``paths``, in order)."""
    roots: list[ax509.Certificate] = []
    for i, path in enumerate(paths):
        try:
            roots.extend(to_asn1(c) for c in x509.load_pem_x509_certificates(path.read_bytes()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"validation.trust_roots[{i}]",
                              f"cannot read certificates from {path}: {e}") from None
    return roots


@dataclass(frozen=True)
class Appended:
    """What follows a signed document: the bytes after it (for one held in memory; a
    file is extended in place), the level reached, and for B-LTA when the last
    document timestamp's chain expires (epoch seconds)."""

    tail: bytes
    level: str
    timestamp_expires_at: float | None = None


def chain_expires_at(chain: ChainEvidence) -> float:
    """When the first certificate a timestamp's validation needs expires (its path's,
    and its OCSP responders')."""
    return min(c["tbs_certificate"]["validity"]["not_after"].native.timestamp()
               for c in chain.certs)


class LongTerm:
    """The signing certificate's checks and the long-term validation data of its
    signatures; one per daemon."""

    # How often the revocation data kept for signing is looked at (each entry is
    # fetched again at its own refresh time).
    KEEP_FRESH_S = 60.0

    def __init__(self, settings: LongTermSettings,
                 policies: Callable[[], list[SigningPolicy]]) -> None:
        # The policies as they are now (a reload replaces them).
        self.policies = policies
        roots = load_trust_roots(settings.trust_roots)
        self.revocation = Revocation(roots, fetch_timeout_s=settings.fetch_timeout_s,
                                     refresh_ahead_s=settings.refresh_ahead_s) \
            if roots else None
        self.signer: ax509.Certificate | None = None
        self.chain: list[ax509.Certificate] = []
        # The signer's last verdict (a code), for /readyz: None while good.
        self.signer_problem: str | None = None
        self.signer_detail = ""
        # From B-LT up, /readyz waits for the first check of the signer's chain.
        self.checked = not self.needed
        # By TSA URL: when the chain of its last document timestamp expires.
        self._stamp_expiry: dict[str, float] = {}

    def timestamp_chain_expires_at(self, tsa_url: str) -> float | None:
        """When the chain of the last document timestamp from ``tsa_url`` expires (None:
        none made since the daemon started)."""
        return self._stamp_expiry.get(tsa_url)

    def use_signer(self, cert: x509.Certificate, chain: list[x509.Certificate]) -> None:
        """The signing certificate and the certificates that come with it."""
        self.signer = to_asn1(cert)
        self.chain = [to_asn1(c) for c in chain]

    async def keep_fresh(self) -> None:
        """The daemon's task: check the signer's chain now, then keep every cached
        chain's revocation data fresh, and check the signer again while it fails."""
        first = True
        while True:
            if self.signer is not None and (first or self.signer_problem is not None):
                with contextlib.suppress(CasesignError):
                    await self.check_signer()
                first = False
                self.checked = True
            if self.revocation is not None:
                await self.revocation.refresh_due()
            await asyncio.sleep(self.KEEP_FRESH_S)

    @property
    def needed(self) -> bool:
        """Whether any policy signs at B-LT or above (its chain is checked ahead)."""
        return any(p.at_least("B-LT") for p in self.policies())

    async def before_signing(self, policy: SigningPolicy | None) -> ChainEvidence | None:
        """Refuse a signing certificate that is outside its validity or lacks a signing
        key usage (at every level), or, from B-LT up, that is revoked or whose
        revocation data cannot be had. The chain's evidence, from B-LT up."""
        if self.signer is None:
            return None
        try:
            check_validity(self.signer, dt.datetime.now(dt.UTC), "signing")
            check_signing_usage(self.signer)
            if policy is None or not policy.at_least("B-LT") or self.revocation is None:
                found = None
            else:
                found = await self.revocation.evidence(self.signer, self.chain)
        except CasesignError as e:
            self.signer_problem, self.signer_detail = e.code, str(e)
            raise
        self.signer_problem = None
        self.signer_detail = ""
        return found

    async def check_signer(self) -> None:
        """The readiness check: the signer's chain as the highest policy needs it."""
        await self.before_signing(highest(self.policies()))

    async def complete(self, policy: SigningPolicy | None, document: bytes | Path | SealedSigned,
                       signature_token: bytes | None, signer: ChainEvidence | None) -> Appended:
        """After a B-T signature: from B-LT up, the DSS (and for B-LTA the document
        timestamp) as an incremental update on ``document``: a file is extended in
        place, bytes (and a sealed body with its tail) get the tail to append."""
        if policy is None or not policy.at_least("B-LT"):
            return Appended(b"", policy.signature_level if policy else "B-B")
        assert self.revocation is not None and signer is not None and signature_token is not None
        tsa_cert, tsa_others = tsa.token_signer(signature_token)
        stamp_chain = await self.revocation.evidence(tsa_cert, tsa_others, timestamping=True)
        lta = policy.at_least("B-LTA")
        stamper = self._stamper(policy) if lta else None
        tail = await asyncio.to_thread(self._update, document, [signer, stamp_chain], stamper,
                                       3 * len(signature_token))
        if stamper is None or stamper.last is None:
            return Appended(tail, policy.signature_level)
        more, chain = await self._cover_timestamp(document, tail, stamper.last, stamp_chain)
        expires_at = self._stamp_expiry[policy.tsa_url] = chain_expires_at(chain)
        return Appended(tail + more, policy.signature_level, expires_at)

    async def extend(self, document: Path, policy: SigningPolicy) -> float:
        """Renewal of a B-LTA document, in place: fresh data for the chain of its last
        document timestamp, and a new document timestamp over all of it."""
        from casesignd.signing.longterm_write import last_timestamp_token

        if self.revocation is None:
            raise ConfigError("validation.trust_roots", "renewal needs trust roots")
        last_token = await asyncio.to_thread(last_timestamp_token, str(document))
        if last_token is None:
            raise PermanentJobError("the artifact has no document timestamp (it is not B-LTA)",
                                    code="invalid_input")
        cert, others = tsa.token_signer(last_token)
        chain = await self.revocation.evidence(cert, others, timestamping=True)
        stamper = self._stamper(policy)
        await asyncio.to_thread(self._update, document, [chain], stamper, 3 * len(last_token))
        assert stamper.last is not None
        _more, chain = await self._cover_timestamp(document, b"", stamper.last, chain)
        expires_at = self._stamp_expiry[policy.tsa_url] = chain_expires_at(chain)
        return expires_at

    async def _cover_timestamp(self, document: bytes | Path | SealedSigned, tail: bytes,
                               token: bytes,
                               covered: ChainEvidence) -> tuple[bytes, ChainEvidence]:
        """The document timestamp's chain, and one more DSS update when its TSA signed
        with a certificate other than the one whose chain the DSS holds (the order
        is: signature, DSS and timestamp, DSS for the timestamp's chain)."""
        assert self.revocation is not None
        cert, others = tsa.token_signer(token)
        if cert.sha256 == covered.cert.sha256:
            return b"", covered
        chain = await self.revocation.evidence(cert, others, timestamping=True)
        whole = document if isinstance(document, Path) else (
            document.extended(tail) if isinstance(document, SealedSigned) else document + tail)
        return await asyncio.to_thread(self._update, whole, [chain], None, 0), chain

    @staticmethod
    def _stamper(policy: SigningPolicy) -> Stamper:
        # pyHanko's writer is imported on first use (0.4 s): a daemon that never signs
        # above B-T, and every command line call, does without it.
        from casesignd.signing.longterm_write import Stamper

        return Stamper(policy.tsa_url, policy.tsa_timeout_s)

    def _update(self, document: bytes | Path | SealedSigned, evidence: list[ChainEvidence],
                stamper: Stamper | None, reserve_hex: int) -> bytes:
        from casesignd.signing.longterm_write import dss_update

        field = f"{DTS_FIELD_PREFIX}-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
        reserve_hex = max(16384, reserve_hex)
        if isinstance(document, Path):
            with open(document, "r+b") as f:
                dss_update(f, evidence, stamper, reserve_hex, field)
            return b""
        if isinstance(document, SealedSigned):
            # Read through the sealed body, written past it (pyHanko's in-place update).
            with reading_sealed(), document.view() as view:
                dss_update(view, evidence, stamper, reserve_hex, field)  # type: ignore[arg-type]
                return view.appended()[len(document.tail):]
        buf = io.BytesIO(document)
        dss_update(buf, evidence, stamper, reserve_hex, field)
        return buf.getvalue()[len(document):]

    def readiness(self) -> dict[str, object]:
        """The /readyz entry for the signing certificate: not ready until its chain was
        checked (from B-LT up), nor while it is refused."""
        if self.signer_problem is not None:
            return {"ok": False, "detail": self.signer_problem}
        if not self.checked:
            return {"ok": False, "detail": "checking"}
        return {"ok": True}

    async def close(self) -> None:
        if self.revocation is not None:
            await self.revocation.close()
