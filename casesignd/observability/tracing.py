"""OpenTelemetry traces, optional: with ``[tracing] otlp_endpoint`` set, every request
continues the caller's W3C ``traceparent`` (or starts a trace) in a span exported over
OTLP/HTTP; left empty, nothing of OpenTelemetry is imported and no middleware is
installed, so tracing off costs nothing.

Span attributes follow the rule of metrics and logs: ids, kinds, codes, sizes and
timings, never names, file names, case data or tokens. A span is named after the
route's template (``POST /v1/jobs``), never the path a caller sent.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from aiohttp import web

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
    def client_span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """A span around an outgoing call (None when off); :meth:`traceparent` of it
        goes out with the call, so the callee continues the trace."""
        if self.tracer is None:
            yield None
            return
        from opentelemetry.trace import SpanKind

        with self.tracer.start_as_current_span(name, kind=SpanKind.CLIENT,
                                               attributes=attributes) as span:
            yield span

    @staticmethod
    def traceparent(span: Any) -> str:
        """The W3C ``traceparent`` naming ``span`` as the parent."""
        c = span.get_span_context()
        return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"

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
