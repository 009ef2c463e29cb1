"""An OTLP/HTTP receiver on loopback for the tests: a real aiohttp server on its own
thread that decodes each export with ``opentelemetry-proto`` and keeps the spans."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.daemon import free_port


class OtlpReceiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.spans: list[Any] = []  # opentelemetry.proto.trace.v1.Span
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner: web.AppRunner | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def _export(self, request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest()
        req.ParseFromString(await request.read())
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def wait(self, pred: Any, timeout_s: float = 30.0) -> list[Any]:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            found = [s for s in self.spans if pred(s)]
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError([s.name for s in self.spans])

    def close(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out
