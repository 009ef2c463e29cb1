"""A webhook receiver on loopback for the tests: a real aiohttp server on its own
thread that verifies each request with the ``standardwebhooks`` library (as a
tenant's receiver would), keeps what it verified, and answers as a test tells it
(``answer``: a status, "redirect", or "endless": 200 and a body that never ends); :meth:`Receiver.down` and :meth:`Receiver.up`
take it off the port and back."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import threading
import time
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.daemon import free_port


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Receiver:
    def __init__(self, secret: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.verifier = Webhook(secret)
        self.answer: int | str = 204
        self.attempts: list[dict[str, str]] = []  # every request's headers
        self.raw: list[tuple[dict[str, str], bytes]] = []  # and with its body
        self.verified: dict[str, dict[str, Any]] = {}  # by webhook-id: the body
        self.events: dict[str, str] = {}  # by webhook-id: casesignd-event
        self.forged = 0
        self.delay_s = 0.0  # how long each answer takes, after the request is kept
        self.redirect_to = ""
        self.released = asyncio.Event()  # set when it goes down: every delay ends
        self.loop = asyncio.new_event_loop()
        self.runner: web.AppRunner | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.up()

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.attempts.append(dict(request.headers))
        self.raw.append((dict(request.headers), body))
        try:
            self.verifier.verify(body, dict(request.headers))
        except WebhookVerificationError:
            self.forged += 1
            return web.Response(status=401)
        if self.delay_s:
            # Cut short when the receiver goes down, so that a long delay never holds
            # the test's end.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), self.delay_s)
        if self.answer == "redirect":
            raise web.HTTPFound(self.redirect_to)
        if self.answer == "endless":
            return await self._endless(request)
        if isinstance(self.answer, int) and self.answer < 300:
            msg_id = request.headers["webhook-id"]
            self.verified[msg_id] = json.loads(body)  # deduplicated by id
            self.events[msg_id] = request.headers.get("casesignd-event", "")
        return web.Response(status=int(self.answer))

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        """200 at once, then a body that never ends (until the sender hangs up)."""
        msg_id = request.headers["webhook-id"]
        self.verified[msg_id] = json.loads(self.raw[-1][1])
        self.events[msg_id] = request.headers.get("casesignd-event", "")
        resp = web.StreamResponse(status=200)
        await resp.prepare(request)
        chunk = b"x" * (1 << 20)
        try:
            while True:
                await resp.write(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the sender went away, as it should
        return resp

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def up(self) -> None:
        async def start() -> None:
            app = web.Application()
            app.router.add_post("/hook", self._hook)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

        self._call(start())

    def down(self) -> None:
        self.loop.call_soon_threadsafe(self.released.set)
        if self.runner is not None:
            self._call(self.runner.cleanup())
            self.runner = None

    def close(self) -> None:
        self.down()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def wait(self, n: int, timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until ``n`` distinct deliveries verified; them."""
        end = time.monotonic() + timeout_s
        while len(self.verified) < n and time.monotonic() < end:
            time.sleep(0.05)
        assert len(self.verified) >= n, (len(self.verified), len(self.attempts))
        return self.verified


def endpoint(name: str, url: str, secret_file: str, **over: Any) -> dict[str, Any]:
    """A [[tenants.webhooks]] entry with fast retries for the tests."""
    return {"name": name, "url": url, "secret_file": secret_file, "timeout_s": 2.0,
            "base_delay_s": 0.1, "max_delay_s": 0.4, "max_attempts": 6, **over}
