"""The signing ladder: B-B → B-T → B-LT → B-LTA, one sequence for every signature.

Once a document has passed the checks its path makes before signing (fetched with
its digest, scanned), every signature the service makes climbs the same rungs here:
a batch ``sign_case`` job (a file in its temp area, or a stored contract signed in
memory), a kiosk request, a signed invoice, and the renewal of a B-LTA artifact.

0. **policy in force** (:func:`policy_in_force`): a job whose policy is gone from the
   configuration (or no longer at the level it needs) is refused ``unknown_policy``;
1. **before the key** (:meth:`casesignd.signing.longterm.LongTerm.before_signing`):
   the signing certificate's validity and key usage, and from B-LT up its chain's
   revocation data, or a refusal;
2. **B-B**: the document's checks, its preparation and the key's signature in one
   call to a CPU process (:mod:`casesignd.signing.worker`); a key that cannot leave
   this process (a PKCS#11 token's) signs here, in a thread, under a key slot;
3. **B-T** (the policy names a TSA): an RFC 3161 timestamp token on the signature
   value (:mod:`casesignd.signing.tsa`), then the CMS SignedData (RFC 5652,
   :mod:`casesignd.signing.cms`) in the signature's /Contents;
4. **B-LT** and **B-LTA**: the validation data of every chain in a /DSS update, and
   for B-LTA a document timestamp over it (:meth:`LongTerm.complete`); renewal
   (:meth:`Ladder.extend`) repeats this rung over a B-LTA document.

A level that cannot be reached is an error, never a lower level. What an attempt
brings (its phase clocks, its lease, its CPU processes and key slots) comes in as
:class:`Steps`: a batch job's and a kiosk request's differ only there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from casesignd.core.calls import Calls
from casesignd.core.errors import PermanentJobError
from casesignd.core.outcomes import Artifact, InFlight
from casesignd.core.sealed import SealedPath, SealKey
from casesignd.pdf.limits import PdfLimits
from casesignd.signing import cms, pades, pipeline, sealed_output, tsa, worker
from casesignd.signing.keys import KeySigner, configured
from casesignd.signing.levels import SigningPolicy
from casesignd.signing.longterm import Appended, LongTerm
from casesignd.signing.placement import subject_of
from casesignd.signing.revocation import ChainEvidence
from casesignd.signing.sealed_output import SealedSigned

T = TypeVar("T")


class _Leveled(Protocol):
    def at_least(self, level: str) -> bool: ...


P = TypeVar("P", bound=_Leveled)


def policy_in_force(policy: P | None, at_least: str | None = None) -> P:
    """``policy`` (a job's, looked up in the configuration as it is now), or the
    refusal of a job whose policy is gone, or is no longer at ``at_least``."""
    if policy is None or (at_least is not None and not policy.at_least(at_least)):
        where = f" at {at_least}" if at_least is not None else ""
        raise PermanentJobError(f"the job's policy is no longer configured{where}",
                                code="unknown_policy")
    return policy


class SigningServices(Protocol):
    """What the ladder uses of the daemon (casesignd.daemon.lifecycle.Services): its key
    (None: none configured), the key's CMS template and the room its CMS takes, and
    the long-term levels."""

    @property
    def signer(self) -> KeySigner | None: ...

    @property
    def longterm(self) -> LongTerm: ...

    @property
    def calls(self) -> Calls:
        """The spans of outgoing calls (the TSA's, OCSP's and CRLs')."""

    def cms_template(self) -> cms.SignerInfoTemplate: ...
    def contents_bytes(self, timestamped: bool) -> int: ...


class Steps(Protocol):
    """One attempt's side of the ladder (a job's, or a kiosk request's)."""

    def phase(self, name: str) -> AbstractAsyncContextManager[None]:
        """Time a phase of the attempt (sign, timestamp, ltv)."""

    def record_phase(self, name: str, took: float) -> None:
        """A phase timed elsewhere: ``took`` seconds."""

    async def check_lease(self) -> None:
        """Raise if the attempt no longer holds its lease (the key is not used then)."""

    def key_slot(self) -> AbstractAsyncContextManager[None]:
        """Hold a key slot, for a signature made in this process (a token's key)."""

    async def in_process(self, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
        """``fn(*args)`` in one of the attempt's CPU processes (under a key slot where
        that process needs one to sign); its result and the seconds it took."""


@dataclass(frozen=True)
class Stored:
    """A stored object, read by the CPU process where it is stored (a batch job's
    contract): its path, and the digest and size it must have."""

    path: str
    sha256: str
    size: int
    # The object's data key when the store may hold it sealed at rest: the process
    # opens it in place (the key crosses over the process's pipe, never to disk).
    key: SealKey | None = None


@dataclass(frozen=True)
class SignedPdf:
    """A file signed in place: its checks, and what its level added after the
    signature (the file is extended in place: no tail). ``published``: the artifact
    the CPU process wrote whole into the file in flight it was given (then nothing is
    at the destination, and the tail is empty)."""

    checked: pipeline.Checked
    appended: Appended
    published: Artifact | None = None


@dataclass(frozen=True)
class SignedBytes:
    """A document signed in memory: its checks, the document the signature's update
    goes after (the one given, or its clean rewrite), what follows it (the signing
    update, and from B-LT up the validation data) with the level reached, and the
    signed document's SHA-256 when the CPU process could compute it."""

    checked: pipeline.Checked
    base: bytes
    appended: Appended
    sha256: str | None


class Ladder:
    """The rungs of every signature, over the daemon's signing services."""

    def __init__(self, services: SigningServices) -> None:
        self.services = services

    def signer(self) -> KeySigner:
        """The daemon's key, or the refusal ``signing_key_unavailable``."""
        return configured(self.services.signer)

    def signer_subject(self) -> str:
        """The signing certificate's subject (a visible stamp names it); refuses as
        :meth:`signer` does."""
        return subject_of(getattr(self.signer(), "cert", None))

    async def sign_file(self, steps: Steps, src: Path | SealedPath, dst: Path | SealedPath, *,
                        meta: pades.SignatureMeta, attachments: list[pades.Attachment],
                        policy: SigningPolicy | None, expect_sha256: str | None = None,
                        publish_to: InFlight | None = None) -> SignedPdf:
        """Sign ``src`` into ``dst`` at ``policy``'s level (B-B without a policy).
        ``expect_sha256``: the digest ``src`` must have, checked before the key is used.
        A sealed ``dst`` (a temp area's) holds the body: the signed document is that
        body and then ``appended.tail`` (:class:`casesignd.signing.sealed_output.SealedSigned`);
        a plain ``dst`` is the whole document, ``appended.tail`` empty. ``publish_to``
        (with a sealed ``dst``): an artifact's file in flight the CPU process writes the
        signed document into when it finishes the signature itself (B-B, its key
        there): ``published`` then says so."""
        signer = self.signer()
        limits = policy.limits if policy is not None else PdfLimits()
        timestamped = policy is not None and bool(policy.tsa_url)
        chain = await self._before_signing(steps, policy)
        async with steps.phase("sign"):
            await steps.check_lease()
            work: worker.SignedFile
            work, _took = await steps.in_process(
                worker.sign_prepared_file, src, dst, limits, attachments, meta,
                self.services.contents_bytes(timestamped), not timestamped, expect_sha256,
                None if timestamped else publish_to)
            if work.published is not None:
                return SignedPdf(work.checked, Appended(b"", "B-B"), work.published)
            template = self.services.cms_template()
            signature = await self._signature(steps, signer, work.signature, work.signed_attrs)
            update = work.update
            if not timestamped and work.signature is None:
                # The process could not finish what it did not sign.
                der = cms.assemble(template, work.signed_attrs, signature, None)
                update = await asyncio.to_thread(sealed_output.finish, work.prepared, der)
        if policy is None or not timestamped:
            return SignedPdf(work.checked, Appended(update, "B-B"))
        async with steps.phase("timestamp"):
            token = await self._timestamp(policy, signature)
        async with steps.phase("sign"):
            der = cms.assemble(template, work.signed_attrs, signature, token)
            update = await asyncio.to_thread(sealed_output.finish, work.prepared, der)
        if not policy.at_least("B-LT"):
            return SignedPdf(work.checked, Appended(update, policy.signature_level))
        async with steps.phase("ltv"):
            document = SealedSigned(dst, update) if isinstance(dst, SealedPath) else dst
            appended = await self.services.longterm.complete(policy, document, token, chain,
                                                             self.services.calls.current())
        return SignedPdf(work.checked, dataclasses.replace(appended, tail=update + appended.tail))

    async def sign_bytes(self, steps: Steps, document: bytes | Stored, *,
                         meta: pades.SignatureMeta, policy: SigningPolicy,
                         limits: PdfLimits | None = None) -> SignedBytes:
        """Sign a document held in memory (``document``, or a :class:`Stored` object the
        CPU process reads) at ``policy``'s level; ``limits`` for its checks (default:
        the policy's). Its phases: ``validate`` (the checks, in the process), ``sign``
        (the key's use), and as the policy asks ``timestamp`` (the TSA's token) and
        ``ltv`` (the chains' revocation data, the /DSS and the document timestamp)."""
        signer = self.signer()
        timestamped = bool(policy.tsa_url)
        chain = await self._before_signing(steps, policy)
        limits = limits if limits is not None else policy.limits
        contents_bytes = self.services.contents_bytes(timestamped)
        await steps.check_lease()
        work: worker.SignedWork
        if isinstance(document, Stored):
            work, took = await steps.in_process(
                worker.sign_stored, document.path, document.sha256, document.size, limits,
                meta, contents_bytes, not timestamped, document.key)
        else:
            work, took = await steps.in_process(worker.sign_document, document, limits, meta,
                                                contents_bytes, not timestamped)
        steps.record_phase("validate", took - work.sign_s)
        start = time.perf_counter()
        signature = await self._signature(steps, signer, work.signature, work.signed_attrs)
        steps.record_phase("sign", time.perf_counter() - start + work.sign_s)
        # The update goes after the document the checks passed: the one given, or its
        # clean rewrite (a stored object's process hands back what it read).
        base = work.base if work.base is not None else document
        assert isinstance(base, bytes)
        appended = await self._update(steps, work, base, signature, policy, chain)
        return SignedBytes(work.checked, base, appended, work.sha256)

    async def extend(self, steps: Steps, document: Path | SealedSigned, policy: SigningPolicy
                     ) -> tuple[float, bytes]:
        """Renew a B-LTA ``document`` (the last rung again): when the chain of its new
        document timestamp expires (epoch seconds), and what follows ``document`` now
        (b"" for a file, extended in place)."""
        await steps.check_lease()
        async with steps.phase("ltv"):
            return await self.services.longterm.extend(document, policy,
                                                       self.services.calls.current())

    async def _before_signing(self, steps: Steps, policy: SigningPolicy | None
                              ) -> ChainEvidence | None:
        """Rung 1; from B-LT up an ``ltv`` phase, since it may fetch the signer's
        revocation data (kept fresh ahead, so it seldom does)."""
        longterm = self.services.longterm
        if policy is None or not policy.at_least("B-LT"):
            return await longterm.before_signing(policy)
        async with steps.phase("ltv"):
            return await longterm.before_signing(policy, self.services.calls.current())

    async def _timestamp(self, policy: SigningPolicy, signature: bytes) -> bytes:
        """B-T: the TSA's token on the signature value (RFC 3161), off the event loop;
        its request a span under the phase current here (the thread has none)."""
        return await asyncio.to_thread(tsa.timestamp_blocking, policy.tsa_url, signature,
                                       policy.tsa_timeout_s, self.services.calls,
                                       self.services.calls.current())

    async def _signature(self, steps: Steps, signer: KeySigner, made: bytes | None,
                         signed_attrs: bytes) -> bytes:
        """The signature the CPU process made, or, for a key that cannot leave this
        process (a token's), one made here, in a thread, under a key slot."""
        if made is not None:
            return made
        async with steps.key_slot():
            await steps.check_lease()
            return await asyncio.to_thread(pipeline.sign_with, signer, signed_attrs)

    async def _update(self, steps: Steps, work: worker.SignedWork, base: bytes,
                      signature: bytes, policy: SigningPolicy, chain: ChainEvidence | None
                      ) -> Appended:
        """What follows ``base``: the signing update with the CMS in place (as the CPU
        process made it already, or made here with its timestamp token from B-T up:
        the ``timestamp`` phase), then from B-LT up the validation data and the
        document timestamp (the ``ltv`` phase)."""
        if work.update is not None:
            return Appended(work.update, policy.signature_level)
        token = None
        if policy.tsa_url:
            async with steps.phase("timestamp"):
                token = await self._timestamp(policy, signature)
        cms_der = cms.assemble(self.services.cms_template(), work.signed_attrs, signature, token)
        assert work.prepared is not None  # handed back whenever the update is not made
        update = work.prepared.signed(cms_der)
        if not policy.at_least("B-LT"):
            return Appended(update, policy.signature_level)
        async with steps.phase("ltv"):
            appended = await self.services.longterm.complete(
                policy, base + update, token, chain, self.services.calls.current())
        return dataclasses.replace(appended, tail=update + appended.tail)

