"""The SQLite store's one writing connection, on its own thread, committing in groups.

The writer takes every operation waiting in its queue and runs them in one
``BEGIN IMMEDIATE`` transaction (group commit); an operation that raises is taken out
and the others run again in a fresh transaction, so it leaves nothing behind. While
one commit is syncing, the next batch gathers, so durability (``synchronous=FULL`` in
WAL mode: the WAL is fsynced at every commit, so an acknowledged job survives power
loss) costs one fsync per batch rather than per job. The checkpointer copies the WAL
into the database from a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import audit
from ..errors import StoreUnavailable
from .records import Job
from .sqlfiles import load_statements, migrations
from .tx import Op, event_row


class SqliteTx:
    """One operation's view of the writer's transaction, with the audit chain head
    (a :class:`~.tx.Tx`)."""

    def __init__(self, conn: sqlite3.Connection, q: dict[str, str], chain: list[Any], now: float):
        self.conn = conn
        self.q = q
        self.chain = chain  # [seq, hash], shared with the writer
        self.now = now
        # Chained here, inserted together by flush() when the operation ends: each
        # statement hands the GIL back and forth with the event loop.
        self.events: list[dict[str, Any]] = []

    def one(self, name: str, **params: Any) -> sqlite3.Row | None:
        return self.conn.execute(self.q[name], params).fetchone()

    def all(self, name: str, **params: Any) -> list[sqlite3.Row]:
        return self.conn.execute(self.q[name], params).fetchall()

    def run(self, name: str, **params: Any) -> int:
        return self.conn.execute(self.q[name], params).rowcount

    def insert(self, name: str, **params: Any) -> sqlite3.Row | None:
        try:
            return self.one(name, **params)
        except sqlite3.IntegrityError:
            return None  # the statement is undone, the transaction goes on

    def event(
        self, job: Job, type: str, actor: str, detail: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> None:
        ev = event_row(job, type, actor, detail, attempt, self.now)
        ev["seq"] = seq = self.chain[0] + 1
        ev["prev_hash"] = self.chain[1]
        ev["hash"] = audit.event_hash(ev)
        self.events.append(ev)
        self.chain[0], self.chain[1] = seq, ev["hash"]

    def flush(self) -> None:
        """Insert the operation's events (no statement of an operation reads them)."""
        if self.events:
            self.conn.executemany(self.q["insert_event"], self.events)
            self.events.clear()


class Writer:
    """The one writing connection, on its own thread, committing in groups."""

    MAX_BATCH = 512
    # A commit that follows the last one within BUSY_S waits up to GATHER_S for more.
    BUSY_S = 0.02
    GATHER_S = 0.001

    def __init__(self, path: Path, busy_timeout_ms: int, clock: Callable[[], float]):
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.statements = load_statements()
        self.chain: list[Any] = [0, audit.GENESIS]
        self.batches = 0
        self.thread = threading.Thread(target=self._run, name="casesignd-store-writer", daemon=True)
        self.ready: asyncio.Future[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        self.ready = loop.create_future()
        self.loop = loop
        self.thread.start()
        return self.ready

    def submit(self, op: Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.q.put((op, fut, loop))
        return fut

    def stop(self) -> None:
        self.q.put(None)
        self.thread.join(timeout=30)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: the WAL is fsynced at every commit, so an acknowledged job is on disk.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # The checkpointer copies the WAL into the database from its own thread; the
        # writer checkpoints only if that falls far behind.
        conn.execute(f"PRAGMA wal_autocheckpoint = {Checkpointer.WRITER_PAGES}")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version, script in migrations():
            if version > current:
                conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")

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

    def _run(self) -> None:
        try:
            conn = self._connect()
            self._migrate(conn)
            head = conn.execute(self.statements["chain_head"]).fetchone()
            if head:
                self.chain = [head["seq"], head["hash"]]
        except BaseException as e:  # noqa: BLE001 - handed to the opener
            self.loop.call_soon_threadsafe(self._resolve, self.ready, None, e)
            return
        self.loop.call_soon_threadsafe(self._resolve, self.ready, None, None)
        last_commit = 0.0
        while True:
            item = self.q.get()
            if item is None:
                break
            batch = [item]
            # Busy (the last commit was under BUSY_S ago): gather for up to GATHER_S
            # more, so that one commit carries the operations of several jobs. A commit writes
            # every page it touched (the row, its indexes, the events, the counters)
            # into the WAL, so on a fast disk, where the fsync no longer gives the
            # next batch time to gather, committing each operation alone would write
            # the same index pages again and again. Idle, an operation commits at once.
            window_end = time.monotonic() + self.GATHER_S \
                if time.monotonic() - last_commit < self.BUSY_S else 0.0
            stop = False
            while len(batch) < self.MAX_BATCH:
                try:
                    left = window_end - time.monotonic()
                    nxt = self.q.get(timeout=left) if left > 0 else self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(conn, batch)
            last_commit = time.monotonic()
            if stop:
                break
        conn.close()

    def _deliver(self, outcomes: list[tuple[Any, Any, BaseException | None]]) -> None:
        # One wake-up of each event loop per batch, not one per operation.
        by_loop: dict[Any, list[Any]] = {}
        for (_op, fut, loop), result, error in outcomes:
            by_loop.setdefault(loop, []).append((fut, result, error))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(self._resolve_all, items)

    def _commit(self, conn: sqlite3.Connection, batch: list[Any]) -> None:
        """Run a batch in one transaction. An operation that raises is taken out and the
        rest run again from a clean transaction: no savepoint per operation on the
        common path, and a failed operation never leaves half its writes behind."""
        done: list[tuple[Any, Any, BaseException | None]] = []
        pending = list(batch)
        while pending:
            start_chain = list(self.chain)
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                err = StoreUnavailable("the job store cannot take writes", detail={"sqlite": str(e)})
                done.extend((item, None, err) for item in pending)
                break
            now = self.clock()
            results: list[Any] = []
            failed: int | None = None
            failure: BaseException | None = None
            for i, (op, _fut, _loop) in enumerate(pending):
                try:
                    tx = SqliteTx(conn, self.statements, self.chain, now)
                    results.append(op(tx))
                    tx.flush()
                except BaseException as e:  # noqa: BLE001 - each op's failure is its own
                    failed, failure = i, e
                    break
            if failed is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                self.chain[:] = start_chain
                if isinstance(failure, sqlite3.Error):
                    failure = StoreUnavailable("the job store cannot take writes",
                                               detail={"sqlite": str(failure)})
                done.append((pending[failed], None, failure))
                del pending[failed]
                continue
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                self.chain[:] = start_chain
                err = StoreUnavailable("the job store cannot take writes", detail={"sqlite": str(e)})
                done.extend((item, None, err) for item in pending)
                break
            done.extend((item, r, None) for item, r in zip(pending, results, strict=True))
            break
        self.batches += 1
        self._deliver(done)


class Checkpointer:
    """Copies committed WAL frames into the database file, off the writer's thread.

    SQLite's automatic checkpoint runs inside the commit that crosses the threshold,
    so one commit in a thousand pages would carry the copy and an fsync of the
    database, and every operation queued behind it would wait. A PASSIVE checkpoint
    from another connection runs beside the writer and never blocks it; a page that
    many commits touched is copied once per pass."""

    INTERVAL_S = 0.25
    WRITER_PAGES = 20000  # the writer's own checkpoint, only if this falls behind

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="casesignd-store-checkpoint",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        except sqlite3.Error:
            return  # the writer checkpoints by itself
        with contextlib.closing(conn):
            while not self._stop.wait(self.INTERVAL_S):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


