"""Group commit, as both SQL stores' writers do it: :class:`GroupCommit`.

One thread owns the store's writing connection. It takes every operation waiting in
its queue and runs them in one transaction; an operation that raises is taken out
and the others run again in a fresh transaction, so it leaves nothing behind (no
savepoint per operation on the common path). A failure that is no operation's fault
(a deadlock with another daemon's transaction, which PostgreSQL aborts) runs the
whole batch again, a few times at most. Each waiting caller's event loop is woken
once per batch.

An engine's writer says how a transaction begins, runs its operations, commits and
rolls back, and which of its errors are whose (:mod:`.sqlite_writer`,
:mod:`.postgres_writer`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import queue
import time
from typing import Any, ClassVar, Generic, TypeVar

from casesignd.core.errors import StoreUnavailable
from casesignd.store.tx import Op

Item = tuple[Op, "asyncio.Future[Any]", asyncio.AbstractEventLoop]
# An item, and its result or what it raised.
Done = tuple[Item, Any, BaseException | None]
# What ran: the results, in order, up to the operation that raised, its index and
# what it raised (None, None when every one ran).
Ran = tuple[list[Any], int | None, BaseException | None]

B = TypeVar("B")  # what an engine keeps of the transaction one attempt at a batch opened


class GroupCommit(Generic[B], abc.ABC):
    """A writer's queue, its batches and their commits."""

    MAX_BATCH = 512
    # A commit that follows the last one within BUSY_S waits up to GATHER_S for more.
    BUSY_S = 0.02
    GATHER_S = 0.001
    # A batch runs again after a transient failure (see _transient) this many times.
    MAX_RERUNS = 0
    # The engine's own errors: a failed commit fails the batch with them, translated.
    ENGINE_ERRORS: ClassVar[tuple[type[BaseException], ...]] = ()

    def __init__(self) -> None:
        self.batches = 0
        self.reruns = 0  # batches run again after a transient failure
        # queue.Queue, not SimpleQueue: on CPython 3.11, SimpleQueue.get(timeout=...)
        # can wait for ever once its deadline passes between two checks (the gather
        # window below is a millisecond), and the writer then stalls with a batch
        # gathered and never committed.
        self._queue: queue.Queue[Item | None] = queue.Queue()

    # --- what an engine says ------------------------------------------------------------

    @abc.abstractmethod
    def _begin(self) -> B:
        """Open a transaction; StoreUnavailable when none can be opened."""

    @abc.abstractmethod
    def _run_ops(self, batch: B, ops: list[Op]) -> Ran:
        """Run ``ops`` in order in the open transaction."""

    @abc.abstractmethod
    def _end(self, batch: B) -> None:
        """Commit the transaction."""

    @abc.abstractmethod
    def _rollback(self, batch: B) -> None:
        """Roll the transaction back, and whatever it changed in memory."""

    @abc.abstractmethod
    def _translate(self, error: BaseException) -> BaseException:
        """What a caller hears of ``error``: an engine's error as StoreUnavailable."""

    def _transient(self, error: BaseException) -> bool:
        """No operation's fault: the batch runs again (up to MAX_RERUNS times)."""
        return False

    def _fails_all(self, error: BaseException, batch: B) -> bool:
        """An operation's failure that every operation of the batch shares (the
        connection is gone)."""
        return False

    def _closed(self) -> bool:
        """Submitted operations are refused."""
        return False

    # --- the queue ----------------------------------------------------------------------

    def submit(self, op: Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._closed():
            fut.set_exception(StoreUnavailable("the job store is closed"))
        else:
            self._queue.put((op, fut, loop))
        return fut

    def _serve(self) -> None:
        """Commit batches off the queue until a None in it says stop (on the thread)."""
        last_commit = 0.0
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            # Busy (the last commit was under BUSY_S ago): gather for up to GATHER_S
            # more, so that one commit carries the operations of several jobs. A commit
            # writes every page it touched (the row, its indexes, the events, the
            # counters) into the WAL, so on a fast disk, where the fsync no longer gives
            # the next batch time to gather, committing each operation alone would write
            # the same index pages again and again. Idle, an operation commits at once.
            window_end = time.monotonic() + self.GATHER_S \
                if time.monotonic() - last_commit < self.BUSY_S else 0.0
            stop = False
            while len(batch) < self.MAX_BATCH:
                try:
                    left = window_end - time.monotonic()
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(batch)
            last_commit = time.monotonic()
            if stop:
                return

    def _commit(self, batch: list[Item]) -> None:
        """Run a batch in one transaction; see the module's docstring."""
        done: list[Done] = []
        pending = list(batch)
        reruns = 0
        while pending:
            try:
                tx = self._begin()
            except StoreUnavailable as e:
                done.extend((item, None, e) for item in pending)
                break
            results, failed, failure = self._run_ops(tx, [op for op, _f, _l in pending])
            if failed is None:
                try:
                    self._end(tx)
                except self.ENGINE_ERRORS as e:
                    self._rollback(tx)
                    if self._transient(e) and reruns < self.MAX_RERUNS:
                        reruns += 1
                        self.reruns += 1
                        continue
                    err = self._translate(e)
                    done.extend((item, None, err) for item in pending)
                    break
                done.extend((item, r, None) for item, r in zip(pending, results, strict=True))
                break
            self._rollback(tx)
            assert failure is not None
            if self._transient(failure) and reruns < self.MAX_RERUNS:
                reruns += 1
                self.reruns += 1
                continue
            if self._fails_all(failure, tx):
                err = self._translate(failure)
                done.extend((item, None, err) for item in pending)
                break
            done.append((pending[failed], None, self._translate(failure)))
            del pending[failed]
        self.batches += 1
        self._deliver(done)

    # --- answers ------------------------------------------------------------------------

    @staticmethod
    def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    @classmethod
    def _resolve_all(cls, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
        for fut, result, error in outcomes:
            cls._resolve(fut, result, error)

    def _deliver(self, outcomes: list[Done]) -> None:
        # One wake-up of each event loop per batch, not one per operation.
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for (_op, fut, loop), result, error in outcomes:
            by_loop.setdefault(loop, []).append((fut, result, error))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                loop.call_soon_threadsafe(self._resolve_all, items)
