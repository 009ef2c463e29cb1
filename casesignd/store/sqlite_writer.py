"""The SQLite store's one writing connection, on its own thread, committing in groups
(:class:`~.groupcommit.GroupCommit`): every operation waiting in its queue runs in one
``BEGIN IMMEDIATE`` transaction. While one commit is syncing, the next batch gathers,
so durability (``synchronous=FULL`` in WAL mode: the WAL is fsynced at every commit,
so an acknowledged job survives power loss) costs one fsync per batch rather than per
job. The checkpointer copies the WAL into the database from a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casesignd.core import audit
from casesignd.core.errors import StoreUnavailable
from casesignd.store.groupcommit import GroupCommit, Ran
from casesignd.store.outbox import delivery_row
from casesignd.store.records import Subject
from casesignd.store.sqlfiles import load_statements, migrations
from casesignd.store.tx import Op, event_row


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

    @property
    def waiting_pending(self) -> int:
        """Always 0: triggers keep SQLite's count of waiting jobs in step with every
        statement (0002_waiting_counter.sql)."""
        return 0

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
        self, job: Subject, type: str, actor: str, detail: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> None:
        ev = event_row(job, type, actor, detail, attempt, self.now)
        ev["seq"] = seq = self.chain[0] + 1
        ev["prev_hash"] = self.chain[1]
        ev["hash"] = audit.event_hash(ev)
        self.events.append(ev)
        self.chain[0], self.chain[1] = seq, ev["hash"]
        delivery = delivery_row(job, type, self.now)
        if delivery is not None:  # the webhook outbox: with the state change
            self.conn.execute(self.q["insert_delivery"], delivery)

    def flush(self) -> None:
        """Insert the operation's events (no statement of an operation reads them)."""
        if self.events:
            self.conn.executemany(self.q["insert_event"], self.events)
            self.events.clear()


def _unavailable(e: sqlite3.Error) -> StoreUnavailable:
    return StoreUnavailable("the job store cannot take writes", detail={"sqlite": str(e)})


@dataclass(slots=True)
class _Batch:
    now: float
    chain: list[Any]  # the chain's head before the transaction, for a rollback


class Writer(GroupCommit[_Batch]):
    """The one writing connection, on its own thread, committing in groups."""

    ENGINE_ERRORS = (sqlite3.Error,)

    def __init__(self, path: Path, busy_timeout_ms: int, clock: Callable[[], float]):
        super().__init__()
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self.statements = (load_statements() | load_statements("sql/lifecycle.sql")
                           | load_statements("sql/claims.sql")
                           | load_statements("sql/tenants.sql"))
        self.chain: list[Any] = [0, audit.GENESIS]
        self.thread = threading.Thread(target=self._run, name="casesignd-store-writer", daemon=True)
        self.ready: asyncio.Future[None] | None = None
        self._conn: sqlite3.Connection | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        self.ready = loop.create_future()
        self.loop = loop
        self.thread.start()
        return self.ready

    def stop(self) -> None:
        self._queue.put(None)
        self.thread.join(timeout=30)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: the WAL is fsynced at every commit, so an acknowledged job is on disk.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # What a removal frees is overwritten with zeros, not left in free pages: an
        # erased document is then in no page of the file (CONTRACT.md, "Data lifecycle").
        conn.execute("PRAGMA secure_delete = ON")
        # The checkpointer copies the WAL into the database from its own thread; the
        # writer checkpoints only if that falls far behind.
        conn.execute(f"PRAGMA wal_autocheckpoint = {Checkpointer.WRITER_PAGES}")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version, script in migrations():
            if version > current:
                conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")

    def _run(self) -> None:
        ready = self.ready
        assert ready is not None  # made by start(), before the thread
        try:
            conn = self._connect()
            self._migrate(conn)
            head = conn.execute(self.statements["chain_head"]).fetchone()
            if head:
                self.chain = [head["seq"], head["hash"]]
        except BaseException as e:  # noqa: BLE001 - handed to the opener
            self.loop.call_soon_threadsafe(self._resolve, ready, None, e)
            return
        self._conn = conn
        self.loop.call_soon_threadsafe(self._resolve, ready, None, None)
        self._serve()
        conn.close()

    # --- one transaction (GroupCommit) -----------------------------------------------

    def _begin(self) -> _Batch:
        assert self._conn is not None
        chain = list(self.chain)
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise _unavailable(e) from e
        return _Batch(self.clock(), chain)

    def _run_ops(self, batch: _Batch, ops: list[Op]) -> Ran:
        assert self._conn is not None
        results: list[Any] = []
        for i, op in enumerate(ops):
            try:
                tx = SqliteTx(self._conn, self.statements, self.chain, batch.now)
                results.append(op(tx))
                tx.flush()
            except BaseException as e:  # noqa: BLE001 - each op's failure is its own
                return results, i, e
        return results, None, None

    def _end(self, batch: _Batch) -> None:
        assert self._conn is not None
        self._conn.execute("COMMIT")

    def _rollback(self, batch: _Batch) -> None:
        assert self._conn is not None
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        self.chain[:] = batch.chain

    def _translate(self, error: BaseException) -> BaseException:
        return _unavailable(error) if isinstance(error, sqlite3.Error) else error


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




# Tries of a truncating checkpoint while readers still use old WAL frames, and the
# pause between them.
TRUNCATE_TRIES = 50
TRUNCATE_PAUSE_S = 0.05


def truncate_wal(path: Path, busy_timeout_ms: int) -> bool:
    """Copy the whole WAL into the database and truncate it to nothing, so that the old
    page images it holds (an erased document's among them) are in no file; whether it
    did. Blocking. A reader in an old snapshot makes it wait and try again; the
    writer's own transactions wait on its busy timeout."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        for _ in range(TRUNCATE_TRIES):
            with contextlib.suppress(sqlite3.OperationalError):
                busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    return True
            time.sleep(TRUNCATE_PAUSE_S)
        return False
    finally:
        conn.close()
