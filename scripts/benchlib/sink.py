"""A loopback HTTP server for the benchmarks, on a thread of its own: it answers every
POST at once and hands each request's arrival time, headers and body to a callback,
as a collector or a webhook receiver beside the daemon would (its CPU is the bench
process's, not the daemon's)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

Seen = Callable[[float, Any, bytes], None]  # (arrival, headers, body)


class Sink:
    """POSTs to ``path`` on 127.0.0.1 answered ``status`` (with ``body``); each one
    passed to ``seen``. Use as a context manager; ``url`` is where it listens."""

    def __init__(self, path: str, seen: Seen, status: int = 200, body: bytes = b"",
                 content_type: str = "application/octet-stream") -> None:
        self.path, self.seen = path, seen
        self.status, self.body, self.content_type = status, body, content_type
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None

    async def _post(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen(time.time(), request.headers, body)
        if self.status == 204:
            return web.Response(status=204)
        return web.Response(status=self.status, body=self.body, content_type=self.content_type)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post(self.path, self._post)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}{self.path}"

    def __enter__(self) -> Sink:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
