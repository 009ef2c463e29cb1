"""The webhook sender: the daemon's task that delivers the outbox's rows
(:mod:`casesignd.store.outbox`) at least once.

Each turn it leases the due deliveries (on PostgreSQL one daemon holds each at a
time), sends each as a Standard Webhooks request whose body is the job resource as
``GET /v1/jobs/{id}`` answers it now (a fresh download link), and writes what the
answer decides (:func:`casesignd.webhooks.endpoints.decide`) under the lease. A crash between
the send and the write sends it again: receivers deduplicate by ``webhook-id``.

Only the config names where a request goes. Redirects are not followed (a 3xx is a
permanent answer), and a host resolving to a link-local or metadata address is
refused unless its endpoint's ``allow_addresses`` names it: the check is in the
resolver the connection uses, so the address checked is the address connected to.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from prometheus_client import Counter, Gauge

from casesignd.config import Config
from casesignd.core import audit
from casesignd.core.calls import NO_CALL, Call, trace_headers
from casesignd.core.logs import log_event
from casesignd.core.webhook_events import Webhook
from casesignd.engine import jobs
from casesignd.observability.metrics import Metrics
from casesignd.observability.tracing import Tracing
from casesignd.store import Job, Store
from casesignd.store.outbox import Delivery, webhook_of
from casesignd.webhooks import endpoints as webhooks

log = logging.getLogger("casesignd.webhooks.sender")

# How often an idle sender looks for due deliveries, and how many it sends at once.
POLL_S = 0.5
BATCH = 16
# The most one tenant may have in flight: a tenant whose receiver hangs holds at most
# these places until its attempts time out, and the rest keep sending others'.
PER_TENANT = 12
OUTCOMES = ("delivered", "retry", "dead", "skipped")
# The largest answer body read (to keep its connection); a larger one is never read.
ANSWER_READ_BYTES = 64 * 1024


class SenderServices(Protocol):
    config: Config
    metrics: Metrics
    store: Store
    node: str
    tracing: Tracing

    def link(self, artifact_id: str, tenant: str) -> tuple[str, int]: ...


class AddressRefused(OSError):
    """An endpoint's host resolved to an address it may not reach."""


class CheckingResolver(AbstractResolver):
    """The system resolver, refusing link-local and metadata addresses but those the
    config allows for that host (``allow_addresses``)."""

    def __init__(self, allowed: dict[str, list[str]],
                 inner: AbstractResolver | None = None) -> None:
        self.inner = inner or ThreadedResolver()
        self.allowed = allowed

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        for r in found:
            if webhooks.refused_address(r["host"], self.allowed.get(host, [])):
                raise AddressRefused(f"{host} resolves to a refused address")
        return found

    async def close(self) -> None:
        await self.inner.close()


def allowed_addresses(cfg: Config) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in cfg.tenants:
        for w in t.webhooks:
            host = urlsplit(w.url).hostname or ""
            out.setdefault(host, []).extend(w.allow_addresses)
    return out


class Sender:
    """Delivers the outbox's rows; :meth:`run` is the daemon's task."""

    def __init__(self, s: SenderServices, *, lease_s: float | None = None) -> None:
        self.s = s
        self.owner = f"webhooks:{s.node}"
        self.lease_s = lease_s
        self.session: aiohttp.ClientSession | None = None
        self.resolver: CheckingResolver | None = None
        self.task: asyncio.Task[None] | None = None
        self.live = False  # between the daemon's start and its stop
        # Set when a job that names an endpoint ends here: a turn at once, not at the
        # next look (other daemons' jobs are found by looking, every POLL_S).
        self.due = asyncio.Event()
        self.oldest_pending: float | None = None
        r = s.metrics.registry
        self.sent = Counter("casesignd_webhook_deliveries_total",
                            "Webhook delivery attempts, by what each decided.", ("outcome",),
                            registry=r)
        for o in OUTCOMES:
            self.sent.labels(o)
        # Read at scrape time from what the sender last counted: a scrape never waits
        # on the store.
        self.oldest = Gauge("casesignd_webhook_oldest_undelivered_age_seconds",
                            "Age of the oldest delivery not yet delivered nor dead.", registry=r)
        self.oldest.set_function(lambda: 0.0 if self.oldest_pending is None
                                 else max(0.0, time.time() - self.oldest_pending))

    def start(self) -> None:
        """The daemon has started (its store is open): send once the config names an
        endpoint."""
        self.live = True
        self.follow_config()

    def follow_config(self) -> None:
        """After the start and each reload: the addresses the config allows now, and the
        sender's task running once any tenant names an endpoint, so that a reload
        adding the first one starts it (one removing them all leaves it running: it
        settles what is left as the config says)."""
        if self.resolver is not None:
            self.resolver.allowed = allowed_addresses(self.s.config)
        if self.live and self.task is None and any(t.webhooks for t in self.s.config.tenants):
            self.task = asyncio.get_running_loop().create_task(self.run(),
                                                                 name="casesignd-webhooks")

    def wake(self, job: Job) -> None:
        """``job`` ended and its end is written: if it names an endpoint, its delivery is
        due now (the recorder calls this)."""
        if webhook_of(job.input) is not None:
            self.due.set()

    async def stop(self) -> None:
        """Stop sending (the daemon stops); a delivery cut off is sent again later."""
        self.live = False
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=10)
            self.task = None

    async def run(self) -> None:
        self.resolver = CheckingResolver(allowed_addresses(self.s.config))
        connector = aiohttp.TCPConnector(resolver=self.resolver, limit=BATCH)
        self.session = aiohttp.ClientSession(connector=connector)
        # Sends in flight and their tenants. A place freed is taken again at once: a
        # slow attempt holds its own place only, never a batch's.
        flying: dict[asyncio.Future[Any], str] = {}
        looked = 0.0
        try:
            while True:
                self.due.clear()
                taken = []
                if len(flying) < BATCH:
                    try:
                        taken = await self.take(BATCH - len(flying), flying.values())
                        if time.monotonic() - looked >= POLL_S:
                            _counts, self.oldest_pending = await self.s.store.delivery_stats()
                            looked = time.monotonic()
                    except Exception as e:  # noqa: BLE001 - the task must outlive a bad turn
                        log_event(log, "webhook.turn_failed", level=logging.WARNING,
                                  error=type(e).__name__)
                for d in taken:
                    flying[asyncio.get_running_loop().create_task(self.send(d))] = d.tenant
                if taken and len(flying) < BATCH:
                    continue  # more may be due
                due = asyncio.ensure_future(self.due.wait())
                done, _ = await asyncio.wait([*flying, due], timeout=POLL_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                due.cancel()
                for t in done:
                    if flying.pop(t, None) is not None and not t.cancelled() and t.exception():
                        log_event(log, "webhook.send_failed", level=logging.WARNING,
                                  error=type(t.exception()).__name__)
        finally:
            for t in flying:
                t.cancel()
            await asyncio.gather(*flying, return_exceptions=True)
            await self.session.close()

    async def take(self, places: int, flying: Iterable[str] = ()) -> list[Delivery]:
        """Lease up to ``places`` due deliveries, a tenant with sends in flight
        (``flying``: one tenant per send) taking only what is left of its share."""
        # A lease outlasts the longest attempt the config allows now (a reload changes it).
        lease_s = self.lease_s or webhooks.lease_s(
            w for t in self.s.config.tenants for w in t.webhooks)
        rooms: dict[str, int] = {}
        for tenant in flying:
            rooms[tenant] = rooms.get(tenant, PER_TENANT) - 1
        return await self.s.store.take_deliveries(self.owner, lease_s, places,
                                                  per_tenant=PER_TENANT, rooms=rooms)

    async def send(self, d: Delivery) -> None:
        """One attempt of ``d``, and its outcome written under its lease."""
        w = self.s.config.webhook(d.tenant, d.endpoint)
        if w is None:
            await self._settle(d, "dead", error="endpoint_unknown")
            return
        if d.event not in w.events:
            await self._settle(d, "skipped", error="event_not_wanted")
            return
        job = await self.s.store.get_job(d.tenant, d.job_id)
        if job is None:  # removed by retention before it could be told
            await self._settle(d, "dead", error="job_gone")
            return
        body = audit.canonical(jobs.resource(self.s, job))
        try:
            secrets = webhooks.secrets_of(self.s.config.credential(w.secret_file))
        except (OSError, ValueError):  # unreadable, empty, or no secret: wait for a good one
            await self._settle(d, "pending", error="secret_unreadable",
                               next_at=time.time() + w.max_delay_s)
            return
        # Under the job's trace: the request that admitted it, its attempts.
        with self.s.tracing.call("webhook.deliver", job.traceparent, {
                "casesignd.delivery_id": d.delivery_id, "casesignd.job_id": d.job_id,
                "casesignd.webhook.event": d.event, "casesignd.attempt": d.attempts,
                "http.request.body.size": len(body)}) as call:
            status, error = await self._post(w, d, body, secrets, call)
            call.note("http.response.status_code", status or 0)
            if error:
                call.note("error.type", error)
        if error == "address_refused":
            await self._settle(d, "dead", error=error)
            return
        decision = webhooks.decide(status, d.attempts, w)
        await self._settle(d, decision.state if decision.state != "retry" else "pending",
                           status=status, error=error, next_at=time.time() + decision.delay_s,
                           outcome=decision.state)

    async def _post(self, w: Webhook, d: Delivery, body: bytes,
                    secrets: list[str], call: Call = NO_CALL) -> tuple[int | None, str | None]:
        """(status, None), or (None, why) without an answer."""
        assert self.session is not None
        host = urlsplit(w.url).hostname or ""
        try:
            if webhooks.refused_address(host, w.allow_addresses):
                return None, "address_refused"  # an address literal: no resolver runs
        except ValueError:
            pass  # a name: the resolver checks what it resolves to
        try:
            async with self.session.post(
                    w.url, data=body, headers={
                        **webhooks.headers(d.delivery_id, time.time(), body, secrets),
                        # What happened; the body is the job as it is now.
                        "casesignd-event": d.event,
                        # The receiver continues the trace, when tracing is on.
                        **trace_headers(call)},
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=w.timeout_s)) as resp:
                # The status is the answer. A small body with its length is read, so
                # the connection is kept for the next request; any other is left
                # unread and the connection closed: an endless or huge one must
                # neither fill memory nor hold the attempt until its timeout.
                if resp.content_length is not None and resp.content_length <= ANSWER_READ_BYTES:
                    await resp.read()
                return resp.status, None
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, AddressRefused) or isinstance(e.__cause__, AddressRefused):
                return None, "address_refused"
            return None, "connection_error"
        except TimeoutError:
            return None, "timeout"
        except aiohttp.ClientError as e:
            return None, type(e).__name__

    async def _settle(self, d: Delivery, state: str, *, status: int | None = None,
                      error: str | None = None, next_at: float = 0.0,
                      outcome: str | None = None) -> None:
        ok = await self.s.store.settle_delivery(d, state, next_at=next_at, status=status,
                                                error=error)
        outcome = outcome or state
        self.sent.labels(outcome).inc()
        log_event(log, "webhook.attempt", delivery_id=d.delivery_id, job_id=d.job_id,
                  webhook_event=d.event, attempt=d.attempts, status=status, outcome=outcome,
                  code=error, fenced=not ok)

