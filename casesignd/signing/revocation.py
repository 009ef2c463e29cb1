"""Chains and their revocation data, checked once and kept until just before they go stale.

From B-LT up (ETSI EN 319 142-1 §6.3) a signature carries the certificates and the
revocation data (OCSP responses or CRLs) of the signer's chain and of every
timestamp's chain. pyhanko-certvalidator builds each path to a configured trust
root and fetches that data from the certificates' own AIA and CRL distribution
points (OCSP with a nonce); this module keeps what it found per end-entity
certificate, as :class:`ChainEvidence`, and hands it out without a fetch while it
is good: a kiosk signature never waits for an OCSP responder. It is fetched again
``refresh_ahead_s`` before its earliest ``nextUpdate`` (halfway there when that is
sooner), in the background while the cached data is still good.

The verdicts are the service's error codes: a revoked certificate is
``certificate_revoked``, one outside its validity or without the key usage a
signature needs ``certificate_expired`` (both permanent, raised before the key is
used); data that cannot be had ``revocation_unavailable`` (retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import aiohttp
from asn1crypto import crl, ocsp, x509

from casesignd.core.calls import NO_CALLS, Call, Calls, server_of
from casesignd.core.errors import (
    CertificateExpired,
    CertificateRevoked,
    CertificateUntrusted,
    PermanentJobError,
    RevocationUnavailable,
)
from casesignd.core.logs import log_event

log = logging.getLogger("casesignd.signing.revocation")

# What a signing certificate's key usage must allow (RFC 5280 §4.2.1.3): either bit.
SIGNING_KEY_USAGES = frozenset({"digital_signature", "non_repudiation"})


@dataclass(frozen=True)
class ChainEvidence:
    """One end-entity certificate's path to a trust root and the revocation data that
    covers it, as found at ``checked_at``; good until ``good_until`` (the earliest
    nextUpdate), fetched again from ``refresh_at``."""

    cert: x509.Certificate
    certs: tuple[x509.Certificate, ...]  # the path, root included, and OCSP responders'
    ocsps: tuple[ocsp.OCSPResponse, ...]
    crls: tuple[crl.CertificateList, ...]
    checked_at: dt.datetime
    good_until: dt.datetime
    refresh_at: dt.datetime
    timestamping: bool  # a TSA's (checked for the timeStamping EKU)

    def good_at(self, when: dt.datetime) -> bool:
        return when < self.good_until


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def next_updates(ocsps: Iterable[ocsp.OCSPResponse],
                 crls: Iterable[crl.CertificateList]) -> list[dt.datetime]:
    """The nextUpdate of every OCSP single response and CRL that has one."""
    out = []
    for resp in ocsps:
        basic = resp["response_bytes"]["response"].parsed
        for single in basic["tbs_response_data"]["responses"]:
            nu = single["next_update"].native
            if nu is not None:
                out.append(_aware(nu))
    for c in crls:
        nu = c["tbs_cert_list"]["next_update"].native
        if nu is not None:
            out.append(_aware(nu))
    return out


def freshness(checked_at: dt.datetime, updates: list[dt.datetime],
              refresh_ahead_s: float) -> tuple[dt.datetime, dt.datetime]:
    """(good_until, refresh_at) for data checked at ``checked_at`` whose responses say
    ``updates``: good until the earliest nextUpdate (or ``refresh_ahead_s`` after the
    check when none says), fetched again ``refresh_ahead_s`` before that or halfway
    there, whichever comes later."""
    ahead = dt.timedelta(seconds=refresh_ahead_s)
    good_until = min(updates) if updates else checked_at + ahead
    halfway = checked_at + (good_until - checked_at) / 2
    return good_until, max(halfway, good_until - ahead)


def check_validity(cert: x509.Certificate, when: dt.datetime, what: str) -> None:
    """Refuse a certificate outside its validity period at ``when``."""
    validity = cert["tbs_certificate"]["validity"]
    if when < validity["not_before"].native:
        raise CertificateExpired(f"the {what} certificate is not valid before "
                                 f"{validity['not_before'].native.isoformat()}")
    if when > validity["not_after"].native:
        raise CertificateExpired(f"the {what} certificate expired on "
                                 f"{validity['not_after'].native.isoformat()}")


def check_signing_usage(cert: x509.Certificate) -> None:
    """Refuse a signing certificate whose key usage allows no signature."""
    usage = cert.key_usage_value
    if usage is not None and not SIGNING_KEY_USAGES & set(usage.native):
        raise CertificateExpired("the signing certificate's key usage allows no signature "
                                 "(digitalSignature or nonRepudiation)")


def fetch_kind(method: str, headers: Mapping[str, str]) -> str:
    """What a request of the certificate validator fetches, by the media types the RFCs
    name for it: ``ocsp`` (RFC 6960 Appendix A: a POST of application/ocsp-request),
    ``crl`` (RFC 2585: application/pkix-crl), else ``certificate`` (AIA caIssuers)
    (pure)."""
    if method == "POST" and headers.get("Content-Type") == "application/ocsp-request":
        return "ocsp"
    if "application/pkix-crl" in headers.get("Accept", ""):
        return "crl"
    return "certificate"


def traced_session(calls: Calls, parent: str | None) -> aiohttp.ClientSession:
    """The HTTP session of one check's fetches (pyhanko-certvalidator's own would do,
    but for this): each request is an ``ocsp.fetch``, ``crl.fetch`` or
    ``certificate.fetch`` span of ``calls`` under ``parent``, from its start to its
    answer's head, and carries its span's ``traceparent``. The CA bundle is the one
    the validator's own session trusts (certifi)."""
    import ssl

    import certifi

    traces = aiohttp.TraceConfig()

    async def started(_s: object, ctx: SimpleNamespace,
                      params: aiohttp.TraceRequestStartParams) -> None:
        kind = fetch_kind(params.method, params.headers)
        ctx.stack = contextlib.ExitStack()
        call: Call = ctx.stack.enter_context(calls.call(f"{kind}.fetch", parent, {
            "casesignd.call": kind, "http.request.method": params.method,
            **server_of(str(params.url))}))
        ctx.call = call
        if call.traceparent:
            params.headers["traceparent"] = call.traceparent

    async def answered(_s: object, ctx: SimpleNamespace,
                       params: aiohttp.TraceRequestEndParams) -> None:
        ctx.call.note("http.response.status_code", params.response.status)
        if params.response.content_length is not None:
            ctx.call.note("http.response.body.size", params.response.content_length)
        ctx.stack.close()

    async def failed(_s: object, ctx: SimpleNamespace,
                     params: aiohttp.TraceRequestExceptionParams) -> None:
        e = params.exception
        if isinstance(e, aiohttp.ClientResponseError):
            ctx.call.note("http.response.status_code", e.status)
        ctx.stack.__exit__(type(e), e, e.__traceback__)

    traces.on_request_start.append(started)
    traces.on_request_end.append(answered)
    traces.on_request_exception.append(failed)
    ssl_context = ssl.create_default_context(cafile=certifi.where())
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context),
                                 trace_configs=[traces])


class Revocation:
    """Checked chains by end-entity certificate, with their revocation data."""

    def __init__(self, trust_roots: list[x509.Certificate], *, fetch_timeout_s: float,
                 refresh_ahead_s: float, calls: Calls = NO_CALLS) -> None:
        self.trust_roots = trust_roots
        self.calls = calls  # each OCSP, CRL and certificate fetch is a span of these
        self.fetch_timeout_s = fetch_timeout_s
        self.refresh_ahead_s = refresh_ahead_s
        self._cache: dict[bytes, ChainEvidence] = {}
        self._locks: dict[bytes, asyncio.Lock] = {}
        self._refreshing: dict[bytes, asyncio.Task[None]] = {}
        self.fetches = 0  # paths checked online, for tests and metrics

    def cached(self, cert: x509.Certificate) -> ChainEvidence | None:
        return self._cache.get(cert.sha256)

    async def evidence(self, cert: x509.Certificate, others: Iterable[x509.Certificate] = (),
                       *, timestamping: bool = False, parent: str | None = None
                       ) -> ChainEvidence:
        """The checked path of ``cert`` (a signer's, or a TSA's with ``timestamping``)
        with its revocation data: cached while good, else checked online now, its
        fetches under ``parent`` (a ``traceparent``). A refresh in the background
        starts a trace of its own: it outlives the caller."""
        now = dt.datetime.now(dt.UTC)
        check_validity(cert, now, "TSA's" if timestamping else "signing")
        if not timestamping:
            check_signing_usage(cert)
        found = self._cache.get(cert.sha256)
        if found is not None and found.good_at(now):
            if now >= found.refresh_at:
                self._refresh_later(cert, list(others), timestamping)
            return found
        lock = self._locks.setdefault(cert.sha256, asyncio.Lock())
        async with lock:
            found = self._cache.get(cert.sha256)
            if found is not None and found.good_at(dt.datetime.now(dt.UTC)):
                return found
            return await self._check(cert, list(others), timestamping, parent)

    def _refresh_later(self, cert: x509.Certificate, others: list[x509.Certificate],
                       timestamping: bool) -> None:
        key = cert.sha256
        if key in self._refreshing:
            return

        async def refresh() -> None:
            try:
                async with self._locks.setdefault(key, asyncio.Lock()):
                    await self._check(cert, others, timestamping, None)
            except (PermanentJobError, RevocationUnavailable) as e:
                # The cached data stays in use while it is good; a revocation found
                # now is in the cache (the next use is refused).
                log_event(log, "revocation.refresh_failed", level=logging.WARNING, code=e.code)
            finally:
                self._refreshing.pop(key, None)

        self._refreshing[key] = asyncio.get_running_loop().create_task(refresh())

    async def refresh_due(self) -> None:
        """Check again every cached chain whose refresh time has come (a periodic task,
        so that data is fresh even when nothing is signed for a while)."""
        now = dt.datetime.now(dt.UTC)
        for found in list(self._cache.values()):
            if now >= found.refresh_at:
                with contextlib.suppress(PermanentJobError, RevocationUnavailable):
                    async with self._locks.setdefault(found.cert.sha256, asyncio.Lock()):
                        await self._check(found.cert, list(found.certs), found.timestamping,
                                          None)

    async def _check(self, cert: x509.Certificate, others: list[x509.Certificate],
                     timestamping: bool, parent: str | None) -> ChainEvidence:
        # Imported on first use (0.3 s): a daemon below B-LT never needs it.
        from pyhanko_certvalidator import CertificateValidator, ValidationContext
        from pyhanko_certvalidator import errors as cv_errors
        from pyhanko_certvalidator.fetchers.aiohttp_fetchers import AIOHttpFetcherBackend

        what = "TSA's" if timestamping else "signing"
        session = traced_session(self.calls, parent)
        backend = AIOHttpFetcherBackend(session, per_request_timeout=self.fetch_timeout_s)
        vc = ValidationContext(trust_roots=self.trust_roots, other_certs=others,
                               allow_fetching=True, revocation_mode="require",
                               fetcher_backend=backend)
        validator = CertificateValidator(cert, others, validation_context=vc)
        checked_at = dt.datetime.now(dt.UTC)
        self.fetches += 1
        try:
            async with asyncio.timeout(self.fetch_timeout_s * 4):
                if timestamping:
                    path = await validator.async_validate_usage(
                        set(), extended_key_usage={"time_stamping"})
                else:
                    path = await validator.async_validate_path()
        except cv_errors.RevokedError as e:
            self._cache.pop(cert.sha256, None)
            raise CertificateRevoked(f"the {what} certificate or its chain is revoked: {e}") from e
        except (cv_errors.ExpiredError, cv_errors.NotYetValidError) as e:
            raise CertificateExpired(f"the {what} certificate's chain is not valid now: {e}") from e
        except cv_errors.InvalidCertificateError as e:
            raise CertificateExpired(f"the {what} certificate cannot be used: {e}") from e
        except cv_errors.PathBuildingError as e:
            raise CertificateUntrusted(f"the {what} certificate does not chain to "
                                       f"[validation] trust_roots: {e}") from e
        except (cv_errors.InsufficientRevinfoError, cv_errors.PathValidationError,
                TimeoutError, OSError) as e:
            raise RevocationUnavailable(f"no revocation data for the {what} chain: "
                                        f"{type(e).__name__}: {e}") from e
        finally:
            await session.close()
        ocsps = tuple(vc.ocsps)
        crls = tuple(vc.crls)
        responders: list[x509.Certificate] = []
        for resp in ocsps:
            basic = resp["response_bytes"]["response"].parsed
            responders.extend(basic["certs"] or [])
        good_until, refresh_at = freshness(checked_at, next_updates(ocsps, crls),
                                           self.refresh_ahead_s)
        found = ChainEvidence(cert=cert, certs=tuple(path) + tuple(responders), ocsps=ocsps,
                              crls=crls, checked_at=checked_at, good_until=good_until,
                              refresh_at=refresh_at, timestamping=timestamping)
        self._cache[cert.sha256] = found
        log_event(log, "revocation.checked", ocsps=len(ocsps), crls=len(crls),
                  good_until=good_until.isoformat(timespec="seconds"))
        return found

    async def close(self) -> None:
        for task in list(self._refreshing.values()):
            task.cancel()
        for task in list(self._refreshing.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
