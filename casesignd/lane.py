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

    def kill(self) -> None:
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
                result = await _call(worker.sock, fn, args)
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


async def _call(sock: socket.socket, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    loop = asyncio.get_running_loop()
    payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
    await loop.sock_sendall(sock, _HEADER.pack(len(payload)) + payload)
    head = await _read_exact(loop, sock, _HEADER.size)
    return pickle.loads(await _read_exact(loop, sock, _HEADER.unpack(head)[0]))


async def _read_exact(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = await loop.sock_recv_into(sock, view[got:])
        if not k:
            raise WorkerLost("the worker process ended during the call",
                             detail={"reason": "exited"})
        got += k
    return bytes(buf)


# --- in the worker process ----------------------------------------------------------


def _serve(sock: socket.socket, initializer: Callable[..., None] | None,
           initargs: tuple[Any, ...]) -> None:
    if initializer is not None:
        initializer(*initargs)
    with sock:
        while True:
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
