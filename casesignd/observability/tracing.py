"""OpenTelemetry traces, optional: with ``[tracing] otlp_endpoint`` set, every request
continues the caller's W3C ``traceparent`` (or starts a trace) in a span exported over
OTLP/HTTP; left empty, nothing of OpenTelemetry is imported and no middleware is
installed, so tracing off costs nothing.

A job keeps the ``traceparent`` of the request that admitted it; each attempt at it
(:mod:`casesignd.engine.attempt`, the worker pool's and the kiosk's alike) is a span
under it (:class:`AttemptSpans`), on whichever node claims it and after a restart,
with a child span for its queue wait (from the stored clocks) and one per phase.

Span attributes follow the rule of metrics and logs: ids, kinds, codes, sizes and
timings, never names, file names, case data or tokens; a tenant goes by its hash, as
in the logs (``tenant_hash``). A span is named after the route's template
(``POST /v1/jobs``), never the path a caller sent. No exception is recorded on a
span: its message may hold what a caller sent.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

from casesignd.core.calls import NO_CALL, Attribute, Call
from casesignd.core.hashing import sha256_hex

# W3C Trace Context, section 3.2: version 00, a 16-byte trace id and an 8-byte parent
# id in lowercase hex, neither all zeros, and the flags.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(value: str | None) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a ``traceparent`` header, or None when it
    is not a valid one (then the request starts a trace of its own) (pure)."""
    m = _TRACEPARENT.match((value or "").strip())
    if m is None or m.group(1) == "ff":
        return None
    trace_id, span_id = int(m.group(2), 16), int(m.group(3), 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(m.group(4), 16)


class Tracing:
    """The daemon's tracer: off (every method a no-op) unless an endpoint is set."""

    def __init__(self, otlp_endpoint: str, *, node: str = "") -> None:
        self.endpoint = otlp_endpoint
        self.node = node
        self.provider: Any = None
        self.tracer: Any = None

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint)

    def start(self) -> None:
        """Build the exporter (imported here, only when configured)."""
        if not self.enabled or self.provider is not None:
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from casesignd import __version__

        self.provider = TracerProvider(resource=Resource.create({
            "service.name": "casesignd", "service.version": __version__,
            "service.instance.id": self.node}))
        # The exporter posts from the processor's own thread, never the event loop.
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.endpoint, timeout=5), schedule_delay_millis=500))
        self.tracer = self.provider.get_tracer("casesignd")

    def stop(self) -> None:
        """Send what is left and stop the exporter."""
        if self.provider is not None:
            self.provider.shutdown()
            self.provider = self.tracer = None

    @contextlib.contextmanager
    def call(self, name: str, parent: str | None,
             attributes: Mapping[str, Attribute]) -> Iterator[Call]:
        """A client span around one outgoing call (:class:`casesignd.core.calls.Calls`),
        under ``parent`` (a ``traceparent``; None: a trace of its own), never under
        whatever is current: safe from any thread. Off, the call gets no span."""
        if self.tracer is None:
            yield NO_CALL
            return
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind, Status, StatusCode

        span = self.tracer.start_span(
            name, context=self.parent(parent) or Context(), kind=SpanKind.CLIENT,
            attributes=dict(attributes), record_exception=False,
            set_status_on_exception=False)
        try:
            yield _SpanCall(span, self.traceparent(span))
        except BaseException as e:
            # The code or the class, never the message: it may hold what was sent.
            span.set_attribute("error.type", _error_type(e))
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            span.end()

    def current(self) -> str | None:
        """The ``traceparent`` of the span current in this task (a job phase's, a
        request's), to hand on explicitly; None when off or none is."""
        if self.tracer is None:
            return None
        from opentelemetry import trace

        span = trace.get_current_span()
        return self.traceparent(span) if span.get_span_context().is_valid else None

    @staticmethod
    def traceparent(span: Any) -> str:
        """The W3C ``traceparent`` naming ``span`` as the parent."""
        c = span.get_span_context()
        return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"

    def of_request(self, request: web.Request) -> str | None:
        """The ``traceparent`` of ``request``'s server span, to store with the job it
        admits (None when tracing is off)."""
        span = request.get("span")
        return self.traceparent(span) if span is not None else None

    def attempt(self, traceparent: str | None, *, kind: str, attributes: dict[str, Any],
                due_at: float, claimed_at: float) -> AttemptSpans | None:
        """The spans of one job attempt, under the trace stored with its job (None when
        off): the attempt's span runs from when its job was due (``due_at``, Unix
        seconds) to its outcome, and its first child is the queue wait until
        ``claimed_at``, both from the store's clocks."""
        if self.tracer is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        due_ns, claimed_ns = _ns(min(due_at, claimed_at)), _ns(claimed_at)
        span = self.tracer.start_span(
            f"job {kind}", context=self.parent(traceparent), kind=SpanKind.CONSUMER,
            attributes=attributes, start_time=due_ns, record_exception=False,
            set_status_on_exception=False)
        under = trace.set_span_in_context(span)
        self.tracer.start_span("queue wait", context=under, start_time=due_ns,
                               record_exception=False).end(end_time=claimed_ns)
        return AttemptSpans(self.tracer, span, under)

    def parent(self, traceparent: str | None) -> Any:
        """The OpenTelemetry context a ``traceparent`` names, or None (a new trace)."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        trace_id, span_id, flags = parsed
        ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 1))
        return trace.set_span_in_context(NonRecordingSpan(ctx))

    def middleware(self) -> Any:
        """A server span per request, under the caller's ``traceparent``; its own
        ``traceparent`` is answered in ``traceresponse`` (W3C Trace Context Level 2)."""
        from opentelemetry.trace import SpanKind

        @web.middleware
        async def traced(request: web.Request, handler: Any) -> web.StreamResponse:
            if self.tracer is None:
                return await handler(request)
            resource = request.match_info.route.resource  # the template, not the path
            route = resource.canonical if resource is not None else "unmatched"
            with self.tracer.start_as_current_span(
                    f"{request.method} {route}", kind=SpanKind.SERVER,
                    context=self.parent(request.headers.get("traceparent")),
                    attributes={"http.request.method": request.method, "http.route": route,
                                "http.request.body.size": request.content_length or 0},
            ) as span:
                request["span"] = span
                resp = await handler(request)
                span.set_attribute("http.response.status_code", resp.status)
                if resp.status >= 500:
                    from opentelemetry.trace import Status, StatusCode

                    span.set_status(Status(StatusCode.ERROR))
                resp.headers["traceresponse"] = self.traceparent(span)
                return resp

        return traced


def tenant_hash(tenant: str) -> str:
    """What a span says of a tenant: the first 16 hex digits of its SHA-256, as the
    logs' ``tenant_hash`` field (pure)."""
    return sha256_hex(tenant.encode())[:16]


def _error_type(e: BaseException) -> str:
    code = getattr(e, "code", None)
    return code if isinstance(code, str) else type(e).__name__


class _SpanCall:
    """A :class:`casesignd.core.calls.Call` over an SDK span (thread-safe)."""

    def __init__(self, span: Any, traceparent: str) -> None:
        self.span = span
        self.traceparent = traceparent

    def note(self, key: str, value: Attribute) -> None:
        self.span.set_attribute(key, value)


def _ns(unix_s: float) -> int:
    return int(unix_s * 1e9)


class AttemptSpans:
    """The open span of one job attempt (see :meth:`Tracing.attempt`) and its phases'."""

    def __init__(self, tracer: Any, span: Any, context: Any) -> None:
        self.tracer = tracer
        self.span = span
        self.context = context

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase's span, current while it runs: the calls it makes are its children."""
        with self.tracer.start_as_current_span(
                f"phase {name}", context=self.context, attributes={"casesignd.phase": name},
                record_exception=False, set_status_on_exception=False):
            yield

    def timed(self, name: str, took: float) -> None:
        """A phase timed elsewhere (in a worker process): ``took`` seconds up to now."""
        end = time.time_ns()
        self.tracer.start_span(
            f"phase {name}", context=self.context, attributes={"casesignd.phase": name},
            start_time=end - int(took * 1e9), record_exception=False).end(end_time=end)

    def end(self, outcome: str, code: str | None = None, **attributes: str | int) -> None:
        """End the attempt's span with its outcome (succeeded, retry, failed, stale...),
        its error code if any, and further ids or sizes."""
        span = self.span
        span.set_attribute("casesignd.outcome", outcome)
        for key, value in attributes.items():
            span.set_attribute(f"casesignd.{key}", value)
        if code is not None:
            span.set_attribute("error.type", code)
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR))
        span.end()
