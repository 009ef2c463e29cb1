"""Worker processes the event loop calls directly: the CPU lanes of the kiosk and of
the batch jobs.

A ``ProcessPoolExecutor`` hands each call through a queue, a feeder thread and a
manager thread in the daemon, each waiting for the GIL the event loop holds: for a
one-page document that costs more than the work. Here each process has a socket
of its own; calls go as one length-prefixed pickle and each answer comes back as
one, both on the event loop, with no helper thread. The batch lane hands a process
several waiting calls at once (see :class:`Lane`).

A process that dies (an out-of-memory kill, a crash in a parser) fails its call with
``worker_lost`` and is replaced; a call that runs past its limit has its process
killed and replaced, so no document can keep the lane. A process ends when the
daemon does: its socket reads end-of-file.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import os
import pickle
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any, cast

from casesignd.core.errors import TransientJobError

_HEADER = struct.Struct("!Q")
ProcessContext = ForkServerContext | SpawnContext  # what can start a lane's processes


class WorkerLost(TransientJobError):
    """The worker process died or was stopped during the call."""

    code = "worker_lost"


class _Worker:
    def __init__(self, ctx: ProcessContext, initializer: Callable[..., None] | None,
                 initargs: tuple[Any, ...]) -> None:
        parent, child = socket.socketpair()
        self.proc = ctx.Process(target=_serve, args=(child, initializer, initargs),
                                name="casesignd-lane", daemon=True)
        self.proc.start()
        child.close()
        parent.setblocking(False)
        self.sock = parent
        self.channel: _Channel | None = None

    async def open(self) -> _Channel:
        if self.channel is None:
            _, self.channel = await asyncio.get_running_loop().connect_accepted_socket(
                _Channel, self.sock)
        return self.channel

    def kill(self) -> None:
        if self.channel is None or not self.channel.close():
            with contextlib.suppress(OSError):
                self.sock.close()
        with contextlib.suppress(OSError, ValueError):
            self.proc.kill()
            self.proc.join(timeout=5)


@dataclass(eq=False)
class _Call:
    """One call waiting for, or at, a worker process; ``done`` receives its tagged
    answer."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    timeout_s: float
    done: asyncio.Future[tuple[str, Any]]
    worker: _Worker | None = None  # the process it was sent to, until it is answered


class Lane:
    """``size`` worker processes; :meth:`run` waits for a free one.

    Each process has a driver on the event loop that takes waiting calls and hands
    them over. With ``batch`` above 1, a driver hands over up to that many calls in
    one frame when several are waiting (a fair share of them when other processes
    are free too): the process answers each as soon as it is done, in order, so a
    batch saves hand-offs (one wake-up of the process, one of the loop while it is
    busy) and keeps the process's caches warm, without making a call wait for the
    others' answers. Each call's time limit counts from the answer before it."""

    def __init__(self, size: int, ctx: ProcessContext, *,
                 initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = (), batch: int = 1) -> None:
        self.size = size
        self.batch = max(1, batch)
        self._ctx = ctx
        self._init = (initializer, initargs)
        self._waiting: collections.deque[_Call] = collections.deque()
        self._sleepers: collections.deque[asyncio.Future[None]] = collections.deque()
        self._drivers: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._all: set[_Worker] = set()
        self._free = size  # drivers not in an exchange
        self._closed = False

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, *self._init)
        self._all.add(worker)
        return worker

    def _start(self) -> None:
        if self._closed:
            raise WorkerLost("the daemon is stopping", detail={"reason": "closed"})
        if not self._drivers:
            self._loop = asyncio.get_running_loop()
            for _ in range(self.size):
                task = self._loop.create_task(self._drive(self._spawn()),
                                              name="casesignd-lane-driver")
                self._drivers.add(task)
                task.add_done_callback(self._drivers.discard)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """``fn(*args)`` in a worker process; its exception is raised here."""
        self._start()
        call = _Call(fn, args, timeout_s, asyncio.get_running_loop().create_future())
        self._waiting.append(call)
        if self._sleepers:
            self._sleepers.popleft().set_result(None)
        try:
            tag, value = await call.done
        except asyncio.CancelledError:
            # Cancelled at a process: stopped, so that it does not go on with work no
            # one waits for (the other calls it holds fail and are tried again).
            if call.worker is not None:
                call.worker.kill()
            with contextlib.suppress(ValueError):
                self._waiting.remove(call)
            raise
        if tag == "error":
            raise value
        return value

    async def _drive(self, worker: _Worker) -> None:
        """Hand waiting calls to ``worker``, replacing it when it is lost, until the
        lane closes (or the loop ends: then the process is stopped)."""
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                while not self._waiting and not self._closed:
                    wake: asyncio.Future[None] = loop.create_future()
                    self._sleepers.append(wake)
                    try:
                        await wake
                    finally:
                        with contextlib.suppress(ValueError):
                            self._sleepers.remove(wake)
                # A fair share of what waits among the processes free to take it.
                share = min(self.batch, -(-len(self._waiting) // max(1, self._free)))
                calls: list[_Call] = []
                while self._waiting and len(calls) < share:
                    call = self._waiting.popleft()
                    if not call.done.done():
                        calls.append(call)
                if not calls:
                    continue
                self._free -= 1
                try:
                    kept = await self._exchange(worker, calls)
                finally:
                    self._free += 1
                if not kept:
                    self._all.discard(worker)
                    worker.kill()
                    if self._closed:
                        break
                    worker = await self._respawn()
        finally:
            self._all.discard(worker)
            worker.kill()
            self._fail_waiting()

    async def _respawn(self) -> _Worker:
        """A new process in place of a lost one; while none can be started, what waits
        fails, and it is tried again each second."""
        while True:
            try:
                return self._spawn()
            except OSError as e:
                self._fail_waiting(WorkerLost(f"no worker process could be started: "
                                              f"{e.strerror}", detail={"reason": "spawn"}))
                await asyncio.sleep(1.0)

    async def _exchange(self, worker: _Worker, calls: list[_Call]) -> bool:
        """Send ``calls`` in one frame and hand out their answers; False when the
        process was lost or stopped (the calls not answered fail)."""
        at = 0
        try:
            channel = await worker.open()
            for call in calls:
                call.worker = worker
            channel.send(pickle.dumps([(c.fn, c.args) for c in calls],
                                      protocol=pickle.HIGHEST_PROTOCOL))
            for call in calls:
                async with asyncio.timeout(call.timeout_s):
                    data = await channel.receive()
                call.worker = None
                if not call.done.done():
                    call.done.set_result(pickle.loads(data))
                at += 1  # the calls before ``at`` are answered
            return True
        except TimeoutError:
            error: Exception = WorkerLost(f"the worker ran past {calls[at].timeout_s:g} s and was stopped",
                               detail={"reason": "timeout"})
        except WorkerLost as e:
            error = e
        except Exception as e:  # noqa: BLE001 - an unpicklable call: its caller hears why
            error = e
        for i, call in enumerate(calls[at:]):
            call.worker = None
            if not call.done.done():
                call.done.set_result(("error", error if i == 0 else WorkerLost(
                    "the worker was stopped during another call", detail={"reason": "exited"})))
        return False

    def _fail_waiting(self, error: WorkerLost | None = None) -> None:
        """Fail every call not yet sent (with ``error``; by default: the lane closed)."""
        error = error or WorkerLost("the daemon is stopping", detail={"reason": "closed"})
        while self._waiting:
            call = self._waiting.popleft()
            if not call.done.done():
                call.done.set_result(("error", error))

    def close(self) -> None:
        """Stop every process (from any thread); waiting calls fail."""
        self._closed = True
        for worker in list(self._all):
            worker.kill()
        self._all.clear()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        while self._sleepers:
            wake = self._sleepers.popleft()
            if not wake.done():
                wake.set_result(None)
        self._fail_waiting()


class _Channel(asyncio.Protocol):
    """The event loop's end of a worker's socket: registered for reading once, for the
    process's life, rather than once per read. Frames are read as they arrive and
    handed out in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.frames: collections.deque[bytes] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though not always asyncio's class: uvloop's is its own.
        self.transport = cast(asyncio.Transport, transport)
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= _HEADER.size:
            end = _HEADER.size + _HEADER.unpack_from(self.buf)[0]
            if len(self.buf) < end:
                break
            self.frames.append(bytes(self.buf[_HEADER.size:end]))
            del self.buf[:end]
        if self.frames and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def send(self, payload: bytes) -> None:
        if self.lost or self.transport is None:
            raise WorkerLost("the worker process has ended", detail={"reason": "exited"})
        self.transport.write(_HEADER.pack(len(payload)) + payload)

    async def receive(self) -> bytes:
        """The next frame the process sent."""
        while not self.frames:
            if self.lost:
                raise WorkerLost("the worker process ended during the call",
                                 detail={"reason": "exited"})
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return self.frames.popleft()

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
            _collect()


def _settle() -> None:
    gc.collect()
    gc.freeze()


def _collect() -> None:
    """Collect what the last frame of calls left behind. All of it is in the youngest
    generation (the collector ran last before the frame), so that generation alone is
    collected after each frame; the older ones, where what the process keeps lives
    (the verdicts of up to a thousand documents), as often as the collector's own
    thresholds would (10 and 10: every 11th and 121st time). A full collection after
    every frame traversed those survivors each time, their memory mostly cold by
    then: a millisecond of CPU per collection, about 0.4 ms per one-page job."""
    _young, middle_due, old_due = gc.get_count()
    _t0, t1, t2 = gc.get_threshold()
    gc.collect(2 if old_due >= t2 else 1 if middle_due >= t1 else 0)


def _answer(sock: socket.socket) -> None:
    """Read one frame of calls and answer each, in order, as soon as it is done."""
    try:
        head = _recv_exact(sock, _HEADER.size)
        calls = pickle.loads(_recv_exact(sock, _HEADER.unpack(head)[0]))
    except EOFError:
        os._exit(0)  # the daemon is gone
    for fn, args in calls:
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
