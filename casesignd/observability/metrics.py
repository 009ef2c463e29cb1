"""Prometheus metrics: one registry per daemon, named methods for the engine to call.

Every family is prefixed ``casesignd_`` and carries its unit in its name. Label values
come only from small fixed sets (kinds, phases, outcomes, error codes, route
templates...): a tenant, case, order or person value must never become a label, both
for privacy and because every distinct value is a new time series. The
:class:`LabelGuard` enforces that: a value outside its set raises
:class:`LabelNotAllowed` in strict mode (tests) and is recorded as ``"other"``
otherwise (production), so a slip cannot leak personal data into the exposition.

Gauges that describe the store (jobs per state, the oldest queued job) are read at
scrape time from a :class:`StateCache` that the engine keeps fresh in its own task:
a scrape never waits on the database or blocks the event loop.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from casesignd import __version__
from casesignd.core import errors
from casesignd.core.codes import CODES
from casesignd.observability.tenant_gauges import TenantQueueAges

log = logging.getLogger(__name__)

OTHER = "other"

# Seconds, from a millisecond admission to a many-minute signing job (sources with
# retries, large packets); the upper buckets catch what the lease timeout allows.
TIME_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip

KINDS = ("sign_case", "render_invoice", "extend_signature")
PHASES = ("fetch", "validate", "scan", "sign", "timestamp", "ltv", "render", "publish")
JOB_OUTCOMES = ("succeeded", "failed", "canceled")
# /v1/sign answers: a signed document, an idempotent replay, or a refusal by kind.
KIOSK_OUTCOMES = (
    "succeeded", "replayed", "rejected", "busy", "deadline_exceeded", "in_progress", "failed",
)  # fmt: skip
# The store's job states (casesignd.engine.jobs.CLIENT_STATE maps them to what clients see:
# queued and retry_wait are "queued", running is "processing", succeeded is "ready").
JOB_STATES = ("queued", "retry_wait", "running", "succeeded", "failed", "canceled")
CLIENT_STATES = ("queued", "processing", "ready", "failed", "canceled")
ITEMS_BUCKETS = ("1", "2-10", "11-100", "101-1000", ">1000")
KEY_POOLS = ("batch", "kiosk")
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
IDEMPOTENT_PATHS = ("/v1/jobs", "/v1/sign")
# Route templates of the contract (CONTRACT.md, HTTP API); "unmatched" for a 404
# that matched no route, so a probed path never becomes a label.
ROUTES = (
    "/v1/cases/{case_id}/objects/{sha256}",
    "/v1/jobs",
    "/v1/jobs/{job_id}",
    "/v1/jobs/{job_id}/events",
    "/v1/jobs/{job_id}/retry",
    "/v1/jobs/{job_id}/cancel",
    "/v1/sign",
    "/v1/artifacts/{artifact_id}",
    "/v1/openapi.json",
    "/healthz",
    "/readyz",
    "/metrics",
    "unmatched",
)
# Why a source read was retried (besides error codes such as source_unavailable).
SOURCE_RETRY_REASONS = ("timeout", "connect", "http_429", "http_5xx", "truncated")
TEMPLATE_VERSIONS = ("invoice-v3", "invoice-v4")
# The data lifecycle (casesignd.engine.retention): what a removal removed, and why; the disk
# areas whose use is a gauge.
REMOVED = ("job", "artifact", "object", "delivery")
REMOVAL_REASONS = ("retention", "erasure")
DISK_AREAS = ("store", "objects", "artifacts", "temp", "state_volume", "temp_volume")
# The setting that refused or cut off an object upload (casesignd.http.uploads).
UPLOAD_REASONS = ("max_uploads", "max_uploads_per_tenant", "upload_quota_bytes",
                  "max_object_bytes", "upload_max_s", "request_timeout_s")

_STATUS = re.compile(r"^[1-5][0-9]{2}$")


class LabelNotAllowed(ValueError):
    """A label value outside its allowed set (raised only in strict mode)."""


def items_bucket(n: int) -> str:
    """The invoice size class of ``n`` line items: "1", "2-10", "11-100", "101-1000", ">1000"."""
    if n <= 1:
        return "1"
    if n <= 10:
        return "2-10"
    if n <= 100:
        return "11-100"
    if n <= 1000:
        return "101-1000"
    return ">1000"


def error_codes() -> set[str]:
    """Every error code the service has (:data:`casesignd.core.codes.CODES`): the bounded
    set a ``code`` or ``reason`` label may take."""
    return set(CODES)


class LabelGuard:
    """Allowed label values per domain; decides what a value is recorded as."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self._allowed: dict[str, set[str]] = {
            "kind": set(KINDS),
            "phase": set(PHASES),
            "outcome": set(JOB_OUTCOMES),
            "kiosk_outcome": set(KIOSK_OUTCOMES),
            "state": set(JOB_STATES) | set(CLIENT_STATES),
            "items_bucket": set(ITEMS_BUCKETS),
            "pool": set(KEY_POOLS),
            "method": set(METHODS),
            "route": set(ROUTES),
            "path": set(IDEMPOTENT_PATHS),
            "template_version": set(TEMPLATE_VERSIONS),
            "code": error_codes(),
            "source_reason": set(SOURCE_RETRY_REASONS),
            "removed": set(REMOVED),
            "removal_reason": set(REMOVAL_REASONS),
            "area": set(DISK_AREAS),
            "upload_reason": set(UPLOAD_REASONS),
        }
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def allow(self, domain: str, *values: str) -> None:
        """Extend a domain at startup (a new job kind, template or error code)."""
        with self._lock:
            self._allowed.setdefault(domain, set()).update(values)

    def check(self, domain: str, value: Any) -> str:
        """``value`` if allowed in ``domain``; else raise (strict) or ``"other"``."""
        text = str(value)
        if domain == "status":
            ok = _STATUS.match(text) is not None
        elif domain == "code":
            ok = self.check_code(text)
        elif domain == "source_reason":
            ok = text in self._allowed["source_reason"] or self.check_code(text)
        else:
            ok = text in self._allowed.get(domain, ())
        if ok or text == OTHER:
            return text
        if self.strict:
            raise LabelNotAllowed(f"label value not allowed for {domain}")
        key = (domain, text)
        if key not in self._warned and len(self._warned) < 100:
            # The value itself is not logged: it may be exactly what must not leak.
            self._warned.add(key)
            log.warning("metrics.label_refused", extra={"fields": {"reason": domain}})
        return OTHER

    def check_code(self, text: str) -> bool:
        """Whether ``text`` is a known error code (refreshing the set once if not)."""
        with self._lock:
            known = self._allowed["code"]
        if text not in known:
            # Codes of exception classes defined after startup.
            fresh = error_codes()
            with self._lock:
                known.update(fresh)
        return text in known


class StateCache:
    """Values the engine refreshes off the scrape path; gauges read the snapshot.

    Keys (all optional): ``jobs`` (``{state: count}``), ``oldest_queued_at_unix``
    (creation time of the oldest queued job, None when none is queued),
    ``inflight_bytes``, ``temp_used_bytes``, ``temp_free_bytes``, ``key_slots_in_use``
    (``{pool: count}``), ``workers_busy``, ``event_loop_tasks``, and ``disk_bytes`` and
    ``disk_limit_bytes`` (``{area: bytes}``, casesignd.engine.retention).
    """

    KEYS = frozenset({
        "jobs", "oldest_queued_at_unix", "inflight_bytes", "temp_used_bytes",
        "temp_free_bytes", "key_slots_in_use", "workers_busy", "disk_bytes", "disk_limit_bytes",
        "event_loop_tasks",
    })  # fmt: skip

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def update(self, **values: Any) -> None:
        """Replace some values; an unknown key is a programming error."""
        unknown = set(values) - self.KEYS
        if unknown:
            raise KeyError(f"unknown state keys: {sorted(unknown)}")
        with self._lock:
            self._values.update(values)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._values)


StateSource = Callable[[], Mapping[str, Any]]


class _StateCollector(Collector):
    """Builds the state gauges at scrape time from the registered sources."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return list(self._metrics._state_families())


class Metrics:
    """The daemon's metrics, on a private :class:`CollectorRegistry`.

    ``strict`` makes a disallowed label value raise instead of being recorded as
    ``"other"``: a test suite runs the whole daemon so (``casesignd.daemon.lifecycle.Extras``),
    so that a slip fails a test rather than hiding in ``"other"``.
    """

    def __init__(
        self,
        *,
        version: str = __version__,
        node: str = "local",
        strict: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.guard = LabelGuard(strict)
        # (metric, label values) -> its child, for values the guard let through as
        # they are: a kiosk request observes a dozen series, and labels() takes a lock
        # and builds a key each time.
        self._children: dict[tuple[int, tuple[Any, ...]], Any] = {}
        # The *_created series double the series count and no alert or dashboard uses
        # them; the switch is process-wide, and every registry here is ours.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._sources: list[StateSource] = []
        r = self.registry

        def hist(name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
            return Histogram(name, doc, labels, registry=r, buckets=TIME_BUCKETS_S)

        self.admission_seconds = hist(
            "casesignd_admission_seconds",
            "Time from request to durable acknowledgement.",
            ("kind",),
        )
        self.ack_paced_seconds = hist(  # the public name says "held": paced
            "casesignd_ack_held_seconds",
            "Time a new job's acknowledgement waited while the queue stood (pacing).", (),
        )  # fmt: skip
        self.queue_wait_seconds = hist(
            "casesignd_queue_wait_seconds", "Time a finished job spent queued.", ("kind",)
        )
        self.processing_seconds = hist(
            "casesignd_processing_seconds", "Time a finished job spent in workers.", ("kind",)
        )
        self.job_total_seconds = hist(
            "casesignd_job_total_seconds", "Admission to final state of a finished job.", ("kind",)
        )
        self.phase_seconds = hist(
            "casesignd_phase_seconds", "Time of one phase of one attempt.", ("kind", "phase")
        )
        self.invoice_render_seconds = hist(
            "casesignd_invoice_render_seconds",
            "Time to render one invoice, by template and number of items.",
            ("template_version", "items_bucket"),
        )
        self.http_request_seconds = hist(
            "casesignd_http_request_seconds",
            "HTTP request time by route template.",
            ("method", "route", "status"),
        )
        self.kiosk_seconds = hist(
            "casesignd_kiosk_seconds", "Time of a synchronous /v1/sign request.", ("outcome",)
        )
        self.jobs_admitted = Counter(
            "casesignd_jobs_admitted_total", "Jobs durably admitted.", ("kind",), registry=r
        )
        self.jobs_finished = Counter(
            "casesignd_jobs_finished_total", "Jobs that reached a final state.",
            ("kind", "outcome"), registry=r,
        )  # fmt: skip
        self.job_retries = Counter(
            "casesignd_job_retries_total",
            "Attempts scheduled again after a retryable error.",
            ("kind", "reason"),
            registry=r,
        )
        self.source_retries = Counter(
            "casesignd_source_retries_total", "Source reads retried.", ("reason",), registry=r
        )
        self.leases_expired = Counter(
            "casesignd_leases_expired_total", "Job leases that ran out.", registry=r
        )
        self.leases_reclaimed = Counter(
            "casesignd_leases_reclaimed_total", "Jobs requeued after their lease expired.", registry=r
        )
        self.stale_results = Counter(
            "casesignd_stale_results_total",
            "Results refused because their attempt had lost its lease.",
            registry=r,
        )
        self.rejections = Counter(
            "casesignd_rejections_total", "Requests refused, by error code.", ("code",), registry=r
        )
        self.removals = Counter(
            "casesignd_removed_total",
            "Jobs, artifacts and objects removed, by retention or an erasure.",
            ("what", "reason"), registry=r,
        )  # fmt: skip
        self.upload_refusals = Counter(
            "casesignd_upload_refusals_total",
            "Object uploads refused or cut off, by the setting that bounded them.",
            ("reason",), registry=r,
        )  # fmt: skip
        self.uploads_in_flight = Gauge(
            "casesignd_uploads_in_flight", "Object uploads whose body is arriving.", registry=r)
        self.upload_bytes_in_flight = Gauge(
            "casesignd_upload_inflight_bytes",
            "Bytes the uploads in flight are charged (out of storage.upload_quota_bytes).",
            registry=r,
        )
        self.idempotent_replays = Counter(
            "casesignd_idempotent_replays_total",
            "Requests answered from an earlier identical request.", ("path",), registry=r,
        )  # fmt: skip
        # The node label is the daemon's name (serve --node): with several daemons on one
        # store, it says which one a scrape came from; the job figures are the store's.
        self.build_info = Gauge(
            "casesignd_build_info", "Always 1; the labels say which build and which node.",
            ("version", "node"), registry=r,
        )  # fmt: skip
        self.build_info.labels(version=version, node=node).set(1)
        # Series for the fixed label sets exist from the start, at 0, so rate() and the
        # failure-ratio alerts see a value before the first job finishes.
        for kind in KINDS:
            self.jobs_admitted.labels(kind=kind)
            for outcome in JOB_OUTCOMES:
                self.jobs_finished.labels(kind=kind, outcome=outcome)
        for path in IDEMPOTENT_PATHS:
            self.idempotent_replays.labels(path=path)
        for reason in UPLOAD_REASONS:
            self.upload_refusals.labels(reason=reason)
        for outcome in KIOSK_OUTCOMES:
            # The kiosk refusal alert divides by the count of every outcome.
            self.kiosk_seconds.labels(outcome=outcome)
        r.register(_StateCollector(self))
        self.tenant_queue_ages = TenantQueueAges(clock)
        r.register(self.tenant_queue_ages)

    # --- label guard ---------------------------------------------------------------

    def allow(self, domain: str, *values: str) -> None:
        """Allow more label values at startup, e.g. ``allow("template_version", "invoice-v4")``."""
        # Kept children stay right: only values the guard let through are kept, and
        # allowing more never refuses one.
        self.guard.allow(domain, *values)

    def _l(self, domain: str, value: Any) -> str:
        return self.guard.check(domain, value)

    def _child(self, metric: Any, domains: tuple[str, ...], *values: Any) -> Any:
        """``metric.labels(*values)`` with each value checked in its domain (in the
        metric's label order)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            checked = tuple(self._l(d, v) for d, v in zip(domains, values, strict=True))
            child = metric.labels(*checked)
            if checked == tuple(str(v) for v in values):  # refused values are not kept
                self._children[key] = child
        return child

    # --- the engine's verbs -----------------------------------------------------------

    def job_admitted(self, kind: str, admission_s: float) -> None:
        """A job was stored durably and acknowledged after ``admission_s``."""
        self._child(self.jobs_admitted, ("kind",), kind).inc()
        self._child(self.admission_seconds, ("kind",), kind).observe(admission_s)

    def observe_clocks(
        self, kind: str, queue_wait_s: float, processing_s: float, total_s: float
    ) -> None:
        """The contract's timings of a job that reached a final state."""
        self._child(self.queue_wait_seconds, ("kind",), kind).observe(queue_wait_s)
        self._child(self.processing_seconds, ("kind",), kind).observe(processing_s)
        self._child(self.job_total_seconds, ("kind",), kind).observe(total_s)

    def observe_phase(self, kind: str, phase: str, seconds: float) -> None:
        """One phase (fetch, validate, scan, sign, timestamp, render, publish) of an attempt."""
        self._child(self.phase_seconds, ("kind", "phase"), kind, phase).observe(seconds)

    def observe_invoice_render(self, template_version: str, items: int, seconds: float) -> None:
        """One invoice rendered from ``items`` line items."""
        self.invoice_render_seconds.labels(
            template_version=self._l("template_version", template_version),
            items_bucket=items_bucket(items),
        ).observe(seconds)

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        """One HTTP request; ``route`` is the route template, never the raw path."""
        self._child(self.http_request_seconds, ("method", "route", "status"),
                    method, route, status).observe(seconds)

    def observe_kiosk(self, outcome: str, seconds: float) -> None:
        """One synchronous ``/v1/sign`` request and how it ended."""
        self._child(self.kiosk_seconds, ("kiosk_outcome",), outcome).observe(seconds)

    def job_finished(self, kind: str, outcome: str) -> None:
        """A job reached ``succeeded``, ``failed`` or ``canceled``."""
        self._child(self.jobs_finished, ("kind", "outcome"), kind, outcome).inc()

    def retry(self, kind: str, reason: str) -> None:
        """An attempt failed retryably; ``reason`` is the error code."""
        self.job_retries.labels(kind=self._l("kind", kind), reason=self._l("code", reason)).inc()

    def source_retry(self, reason: str) -> None:
        """A source read is retried (``timeout``, ``http_5xx``... or an error code)."""
        self.source_retries.labels(reason=self._l("source_reason", reason)).inc()

    def removed(self, what: str, reason: str, n: int = 1) -> None:
        """``n`` things (``job``, ``artifact``, ``object``, ``delivery``) removed by
        ``retention`` or an ``erasure``."""
        self.removals.labels(what=self._l("removed", what),
                             reason=self._l("removal_reason", reason)).inc(n)

    def lease_expired(self, n: int = 1) -> None:
        self.leases_expired.inc(n)

    def lease_reclaimed(self, n: int = 1) -> None:
        self.leases_reclaimed.inc(n)

    def stale_result(self) -> None:
        self.stale_results.inc()

    def rejection(self, code: str) -> None:
        """A request was answered with an error ``code``."""
        self.rejections.labels(code=self._l("code", code)).inc()

    def upload_refused(self, reason: str) -> None:
        """An object upload was refused or cut off; ``reason`` names the bounding setting."""
        self.upload_refusals.labels(reason=self._l("upload_reason", reason)).inc()

    def watch_uploads(self, count: Callable[[], float], nbytes: Callable[[], float]) -> None:
        """Read the uploads in flight and their bytes at scrape time (cheap callables)."""
        self.uploads_in_flight.set_function(count)
        self.upload_bytes_in_flight.set_function(nbytes)

    def ack_paced(self, waited_s: float) -> None:
        """A new job's acknowledgement waited ``waited_s`` for the queue to drain."""
        self.ack_paced_seconds.observe(waited_s)

    def idempotent_replay(self, path: str) -> None:
        """``/v1/jobs`` or ``/v1/sign`` answered a replay without doing the work again."""
        self.idempotent_replays.labels(path=self._l("path", path)).inc()

    # --- state gauges -------------------------------------------------------------

    def add_state_source(self, fn: StateSource) -> None:
        """Register a cheap, non-blocking callable (e.g. ``StateCache.snapshot``).

        It runs at every scrape; the merged result of all sources feeds the gauges.
        """
        self._sources.append(fn)

    def _state(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for fn in self._sources:
            try:
                merged.update(fn())
            except Exception:
                if self.guard.strict:
                    raise
                log.exception("metrics.state_source_failed")
        return merged

    def _state_families(self) -> Iterator[Metric]:
        s = self._state()
        jobs = GaugeMetricFamily("casesignd_jobs", "Jobs by store state.", labels=["state"])
        counts = {state: 0 for state in JOB_STATES}
        for state, n in (s.get("jobs") or {}).items():
            label = self._l("state", state)
            counts[label] = counts.get(label, 0) + n
        for state, n in counts.items():
            jobs.add_metric([state], n)
        yield jobs
        oldest = s.get("oldest_queued_at_unix")
        age = max(0.0, self._clock() - oldest) if oldest is not None else 0.0
        yield GaugeMetricFamily(
            "casesignd_oldest_queued_job_age_seconds",
            "Age of the oldest queued job; 0 when none is queued.",
            value=age,
        )
        for key, doc in (
            ("inflight_bytes", "Declared bytes of the jobs workers hold."),
            ("temp_used_bytes", "Bytes used on the temp volume."),
            ("temp_free_bytes", "Bytes free on the temp volume."),
            ("workers_busy", "Attempts at work: batch slots taken plus kiosk attempts."),
            ("event_loop_tasks", "Tasks on the daemon's event loop (a leak shows as growth)."),
        ):
            if key in s:
                yield GaugeMetricFamily(f"casesignd_{key}", doc, value=s[key])
        slots = GaugeMetricFamily(
            "casesignd_key_slots_in_use", "Signing-key slots in use by pool.", labels=["pool"]
        )
        in_use = {pool: 0 for pool in KEY_POOLS}
        for pool, n in (s.get("key_slots_in_use") or {}).items():
            in_use[self._l("pool", pool)] = n
        for pool, n in in_use.items():
            slots.add_metric([pool], n)
        yield slots
        for key, doc in (
            ("disk_bytes", "Bytes used, by area of the disk the daemon writes."),
            ("disk_limit_bytes", "What an area may use: its quota, or its volume's size."),
        ):
            family = GaugeMetricFamily(f"casesignd_{key}", doc, labels=["area"])
            for area, n in (s.get(key) or {}).items():
                family.add_metric([self._l("area", area)], n)
            yield family

    # --- exposition -----------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4


def aiohttp_middleware(metrics: Metrics) -> Any:
    """An aiohttp middleware observing ``casesignd_http_request_seconds``.

    The route label is the matched resource's template (``/v1/jobs/{job_id}``), or
    ``unmatched``. Errors raised as ``HTTPException`` or :class:`CasesignError` are
    counted with the status they are answered with, so this middleware may sit inside
    the one that renders error bodies.
    """

    @web.middleware
    async def observe(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        except errors.CasesignError as e:
            # An outer middleware turns it into its answer; count that status.
            status = e.status
            raise
        except ConnectionError:
            # The client went away: no answer reaches it, and it is no fault of ours
            # (nginx's 499, "client closed request"), so no 5xx alert counts it.
            status = 499
            raise
        finally:
            route = route_template(request)
            if route != "unmatched":
                # A matched resource's template is defined in code, never by a client.
                metrics.allow("route", route)
            metrics.observe_http(request.method, route, status, time.perf_counter() - start)

    return observe


def route_template(request: Any) -> str:
    """The route template an aiohttp request matched, or ``unmatched``."""
    try:
        resource = request.match_info.route.resource
    except AttributeError:
        return "unmatched"
    if resource is None:
        return "unmatched"
    return resource.canonical
