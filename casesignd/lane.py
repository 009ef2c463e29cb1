"""Worker processes the event loop calls directly: the kiosk's CPU lane.

A ``ProcessPoolExecutor`` hands each call through a queue, a feeder thread and a
manager thread in the daemon, each waiting for the GIL the event loop holds: for a
one-page document that costs more than the work. Here each process has a socket
of its own; a call is one length-prefixed pickle written and one read back, both
on the event loop, with no helper thread.

A process that dies (an out-of-memory kill, a crash in a parser) fails its call with
``worker_lost`` and is replaced; a call that runs past its limit has its process
killed and replaced, so no document can keep the lane. A process ends when the
daemon does: its socket reads end-of-file.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import pickle
import socket
import struct
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

from .errors import TransientJobError

_HEADER = struct.Struct("!Q")


class WorkerLost(TransientJobError):
    """The worker process died or was stopped during the call."""

    code = "worker_lost"


class _Worker:
    def __init__(self, ctx: BaseContext, initializer: Callable[..., None] | None,
                 initargs: tuple[Any, ...]) -> None:
        parent, child = socket.socketpair()
        self.proc = ctx.Process(target=_serve, args=(child, initializer, initargs),
                                name="casesignd-lane", daemon=True)
        self.proc.start()
        child.close()
        parent.setblocking(False)
        self.sock = parent
        self.channel: _Channel | None = None

    async def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if self.channel is None:
            _, self.channel = await asyncio.get_running_loop().connect_accepted_socket(
                _Channel, self.sock)
        payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        return pickle.loads(await self.channel.exchange(payload))

    def kill(self) -> None:
        if self.channel is None or not self.channel.close():
            with contextlib.suppress(OSError):
                self.sock.close()
        with contextlib.suppress(OSError, ValueError):
            self.proc.kill()
            self.proc.join(timeout=5)


class Lane:
    """``size`` worker processes; :meth:`run` waits for a free one."""

    def __init__(self, size: int, ctx: BaseContext, *,
                 initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = ()) -> None:
        self.size = size
        self._ctx = ctx
        self._init = (initializer, initargs)
        self._idle: asyncio.Queue[_Worker] | None = None
        self._all: set[_Worker] = set()
        self._closed = False

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, *self._init)
        self._all.add(worker)
        return worker

    def _queue(self) -> asyncio.Queue[_Worker]:
        if self._closed:
            raise WorkerLost("the daemon is stopping", detail={"reason": "closed"})
        if self._idle is None:
            self._idle = asyncio.Queue()
            for _ in range(self.size):
                self._idle.put_nowait(self._spawn())
        return self._idle

    async def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """``fn(*args)`` in a worker process; its exception is raised here."""
        idle = self._queue()
        worker = await idle.get()
        ok = False
        try:
            async with asyncio.timeout(timeout_s):
                result = await worker.call(fn, args)
            ok = True
        except TimeoutError:
            raise WorkerLost(f"the worker ran past {timeout_s:g} s and was stopped",
                             detail={"reason": "timeout"}) from None
        finally:
            if ok:
                idle.put_nowait(worker)
            else:
                # Dead, stopped, or cancelled mid-call (its answer would be read by the
                # next call): replaced either way.
                self._all.discard(worker)
                worker.kill()
                if not self._closed:  # no new process while the daemon stops
                    idle.put_nowait(self._spawn())
        tag, value = result
        if tag == "error":
            raise value
        return value

    def close(self) -> None:
        self._closed = True
        for worker in list(self._all):
            worker.kill()
        self._all.clear()
        self._idle = None


class _Channel(asyncio.Protocol):
    """The event loop's end of a worker's socket: registered for reading once, for the
    process's life, rather than once per read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) < _HEADER.size:
            return
        end = _HEADER.size + _HEADER.unpack_from(self.buf)[0]
        if len(self.buf) >= end and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(bytes(self.buf[_HEADER.size:end]))
            del self.buf[:end]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(WorkerLost("the worker process ended during the call",
                                                 detail={"reason": "exited"}))

    async def exchange(self, payload: bytes) -> bytes:
        """Send one frame and wait for the one that answers it."""
        if self.lost or self.transport is None:
            raise WorkerLost("the worker process has ended", detail={"reason": "exited"})
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(_HEADER.pack(len(payload)) + payload)
        return await self.waiter

    def close(self) -> bool:
        """Close from any thread (the daemon closes the lane from one as it stops).
        False when the socket is left to the caller to close: the loop is gone."""
        if self.transport is None:
            return False
        self.lost = True
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            here = False
        if here:
            self.transport.abort()
            return True
        if self.loop.is_closed():
            return False
        # The socket stays open until the loop has unregistered it: its number must
        # not be reused while the loop still watches it.
        self.loop.call_soon_threadsafe(self.transport.abort)
        return True


# --- in the worker process ----------------------------------------------------------


def _serve(sock: socket.socket, initializer: Callable[..., None] | None,
           initargs: tuple[Any, ...]) -> None:
    if initializer is not None:
        initializer(*initargs)
    # The collector runs between calls, never during one: a collection that scans the
    # process's whole heap in the middle of a call (tens of milliseconds for a parser's
    # objects) would land on one caller's latency. What the process keeps from start-up
    # and from its first call (modules, the key, lazily built tables) is frozen out of
    # the collector's sight, so a collection costs about what the call left behind.
    gc.disable()
    _settle()
    with sock:
        _answer(sock)
        _settle()
        while True:
            _answer(sock)
            gc.collect()


def _settle() -> None:
    gc.collect()
    gc.freeze()


def _answer(sock: socket.socket) -> None:
    try:
        head = _recv_exact(sock, _HEADER.size)
        fn, args = pickle.loads(_recv_exact(sock, _HEADER.unpack(head)[0]))
    except EOFError:
        os._exit(0)  # the daemon is gone
    try:
        out: tuple[str, Any] = ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - handed back to the caller
        out = ("error", e)
    try:
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - an unpicklable result or exception
        data = pickle.dumps(("error", RuntimeError(f"{type(e).__name__}: {e}")))
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError
        got += k
    return bytes(buf)
