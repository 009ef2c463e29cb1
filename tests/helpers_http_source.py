"""A scriptable local HTTP source for fetch tests: an aiohttp server on 127.0.0.1.

Each path gets a list of steps, one per request; the last step repeats. For example
``server.script("/doc.pdf", [Status(503), Status(503), Body(data)])`` answers 503
twice and then the bytes. Steps:

- ``Body(data, headers)``: 200 with ``data``;
- ``Status(code, headers, body)``: any status (429 with ``Retry-After``, 404, 302...);
- ``Hang(seconds)``: send nothing for ``seconds`` (longer than the read timeout);
- ``Trickle(data, chunk_bytes, delay_s)``: 200, the body sent slowly;
- ``Cut(data, after_bytes)``: 200 with a Content-Length for all of ``data``, then
  the connection is closed after ``after_bytes``.

Use the ``http_source`` fixture (import ``http_source_fixture`` into the test module); ``server.hits``
counts requests per path and ``server.base_url`` is the root URL.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from aiohttp import web


@dataclass
class Body:
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Status:
    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Hang:
    seconds: float = 3600.0


@dataclass
class Trickle:
    data: bytes
    chunk_bytes: int = 1024
    delay_s: float = 0.01


@dataclass
class Cut:
    data: bytes
    after_bytes: int


Step = Body | Status | Hang | Trickle | Cut


class ScriptedServer:
    """The server behind the fixture; script paths before the code under test runs."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Step]] = {}
        self.hits: dict[str, int] = defaultdict(int)
        self.raw_paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    def script(self, path: str, steps: list[Step]) -> None:
        self.scripts[path] = list(steps)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.raw_paths.append(request.raw_path)
        self.headers.append(dict(request.headers))
        n = self.hits[path]
        self.hits[path] += 1
        steps = self.scripts.get(path)
        if not steps:
            return web.Response(status=404)
        step = steps[min(n, len(steps) - 1)]
        if isinstance(step, Body):
            return web.Response(body=step.data, headers=step.headers)
        if isinstance(step, Status):
            return web.Response(status=step.code, headers=step.headers, body=step.body)
        if isinstance(step, Hang):
            await asyncio.sleep(step.seconds)
            return web.Response(status=504)
        resp = web.StreamResponse()
        resp.content_length = len(step.data)
        await resp.prepare(request)
        if isinstance(step, Trickle):
            for i in range(0, len(step.data), step.chunk_bytes):
                await resp.write(step.data[i : i + step.chunk_bytes])
                await asyncio.sleep(step.delay_s)
            await resp.write_eof()
            return resp
        await resp.write(step.data[: step.after_bytes])
        # Drop the connection mid-body: the client sees a short payload.
        request.transport.close()
        return resp


@pytest.fixture(name="http_source")
async def http_source_fixture():
    server = ScriptedServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
