"""What the job kinds hand to signing code: a job attempt as the signing ladder's
steps, and the configuration's settings as values.

:mod:`casesignd.signing` and :mod:`casesignd.pdf` read no configuration: their callers
(the job kinds, the daemon, the command line) build these values from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from casesignd.config import Config
from casesignd.core.errors import PermanentJobError
from casesignd.core.hashing import sha256_hex
from casesignd.core.policy import Policy
from casesignd.pdf.limits import PdfLimits
from casesignd.signing.levels import SigningPolicy

if TYPE_CHECKING:  # the key's and the long-term levels' stacks load when they are used
    from casesignd.engine.kinds import JobContext
    from casesignd.signing.keys import KeySettings
    from casesignd.signing.longterm import LongTermSettings

T = TypeVar("T")


class JobSteps:
    """A job attempt as the signing ladder's :class:`casesignd.signing.ladder.Steps`:
    its phases, its lease, the pool's CPU processes and the batch key slots (the
    kiosk's, for a job the kiosk path runs)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx

    def phase(self, name: str) -> AbstractAsyncContextManager[None]:
        return self.ctx.phase(name)

    def record_phase(self, name: str, took: float) -> None:
        self.ctx.record_phase(name, took)

    async def check_lease(self) -> None:
        await self.ctx.check_lease()

    def key_slot(self) -> AbstractAsyncContextManager[None]:
        return self.ctx.key_slot()

    async def in_process(self, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
        start = time.perf_counter()
        if self.ctx.kiosk:
            # The kiosk's processes take no slot themselves: the call holds one.
            async with self.ctx.key_slot():
                result = await self.ctx.cpu(fn, *args)
        else:
            result = await self.ctx.cpu(fn, *args)
        return result, time.perf_counter() - start


def pdf_limits(policy: Policy) -> PdfLimits:
    """The limits a signing policy sets on a document's checks."""
    return PdfLimits(
        max_pages=policy.max_pages,
        max_bytes=policy.max_document_bytes,
        forbid_active_content=policy.forbid_active_content,
        max_decoded_stream_bytes=policy.max_decoded_stream_bytes,
        max_objects=policy.max_pdf_objects,
        max_depth=policy.max_pdf_depth,
        max_decoded_bytes=policy.max_decoded_document_bytes,
        max_check_cpu_s=policy.max_check_cpu_s,
        allowed_actions=frozenset("/" + a for a in policy.allowed_actions),
        link_schemes=frozenset(s.lower() for s in policy.allowed_link_schemes),
        normalize=policy.normalize,
    )


def signing_policy(policy: Policy) -> SigningPolicy:
    """What ``policy`` asks of the signing ladder."""
    return SigningPolicy(version=policy.version, signature_level=policy.signature_level,
                         tsa_url=policy.tsa_url, tsa_timeout_s=policy.tsa_timeout_s,
                         limits=pdf_limits(policy))


def signing_policies(cfg: Config) -> Callable[[], list[SigningPolicy]]:
    """The configured policies as they are when asked (a reload replaces them)."""
    return lambda: [signing_policy(p) for p in cfg.policies]


def key_settings(cfg: Config) -> KeySettings:
    """Where ``[signing]`` says the key is, its paths resolved (credentials first)."""
    from casesignd.signing.keys import KeySettings, Pkcs11Settings

    s = cfg.signing
    p11 = s.pkcs11
    return KeySettings(
        pkcs12_path=cfg.credential(s.pkcs12_path) if s.pkcs12_path else None,
        pkcs12_password_file=cfg.credential(s.pkcs12_password_file)
        if s.pkcs12_password_file else None,
        chain_file=cfg.path(s.chain_file) if s.chain_file else None,
        pkcs11=None if p11 is None else Pkcs11Settings(
            module=p11.module, token_label=p11.token_label, key_label=p11.key_label,
            pin_file=cfg.credential(p11.pin_file),
            cert_file=cfg.path(p11.cert_file) if p11.cert_file else None))


def longterm_settings(cfg: Config) -> LongTermSettings:
    """``[validation]`` as the long-term levels take it."""
    from casesignd.signing.longterm import LongTermSettings

    v = cfg.validation
    return LongTermSettings(trust_roots=tuple(cfg.path(r) for r in v.trust_roots),
                            fetch_timeout_s=v.fetch_timeout_s, refresh_ahead_s=v.refresh_ahead_s)


class Logos(Protocol):
    """What a stamp's logo needs of the invoices' branding (the daemon's
    :class:`casesignd.invoices.branding.Branding` meets it)."""

    def for_tenant(self, tenant: str) -> Any: ...

    def logo_path(self, sha256: str) -> Path | None: ...


# Logos by SHA-256, as read from the branding's kept copies: a handful per daemon.
_LOGOS: dict[str, bytes] = {}
_LOGOS_KEPT = 16


async def stamp_logo(branding: Logos | None, tenant: str, policy: Policy) -> bytes:
    """The logo ``tenant``'s stamp shows under ``policy`` (PNG or JPEG bytes): its
    invoice branding's logo when the policy draws a visible stamp with ``stamp_logo``,
    else empty. Read once from the copy the branding keeps (off the event loop), and
    refused ``logo_missing`` if that copy is gone or changed."""
    if branding is None or not policy.stamp_logo or policy.appearance != "visible":
        return b""
    logo = branding.for_tenant(tenant).logo
    path = branding.logo_path(logo.sha256) if logo is not None else None
    if logo is None or path is None:
        return b""
    data = _LOGOS.get(logo.sha256)
    if data is None:
        data = await asyncio.to_thread(_read_logo, path, logo.sha256)
        if len(_LOGOS) >= _LOGOS_KEPT:
            _LOGOS.clear()
        _LOGOS[logo.sha256] = data
    return data


def _read_logo(path: Path, sha256: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    if sha256_hex(data) != sha256:
        raise PermanentJobError("the tenant's logo is not kept any more: reload the "
                                "configuration (SIGHUP)", code="logo_missing")
    return data
