"""The PostgreSQL store's writing connection, on its own thread, committing in groups,
and its migrations.

As the SQLite store's writer does, one thread owns the daemon's writing connection,
takes every operation waiting in its queue and runs them in one transaction (group
commit): an operation that raises is taken out and the others run again in a fresh
transaction, so it leaves nothing behind; a deadlock with another daemon's
transaction (PostgreSQL aborts one of the two) runs the whole batch again. A thread
with psycopg's blocking connection, not an asyncio task: a statement then costs a
third of what the asyncio connection's wake-ups cost. The hot operations (admit,
claim, renew, the end of an attempt) are steps (:class:`~.tx.Step`), whose first statements
the writer sends together, one round trip for a run of them (pipeline mode).

The audit chain is one for every daemon. An operation's events are kept aside while
it runs; just before COMMIT the writer locks the chain's head row (``SELECT ... FOR
UPDATE``), chains the batch's events after the head it finds, inserts them and moves
the head, in one statement, pipelined with the batch's changes to the jobs per state
and the COMMIT. Two writers therefore chain one after the other, never after the
same event, and the lock is held only for the tail of a transaction.

Times: every statement gets the transaction's ``now`` as a parameter, the database's
``now()`` (one clock for every daemon's leases) read as the transaction begins, or an
injected clock's (tests).

Wake-ups stay polling. A LISTEN/NOTIFY seam would sit in :meth:`Writer._commit`,
after a commit that queued jobs, debounced: NOTIFY takes a database-wide lock at
commit, and PgBouncer in transaction mode breaks LISTEN.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg
from psycopg.rows import DictRow

from .. import audit
from ..errors import StoreUnavailable
from .records import Job
from .sqlfiles import migrations
from .tx import Op, Step, event_row

PgConnection = psycopg.Connection[DictRow]
Connect = Callable[[], PgConnection]

# A deadlock or a serialization failure aborts the transaction but is no fault of any
# operation in it: the batch runs again, up to this many times.
TRANSIENT = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
MAX_RETRIES = 8


def unavailable(e: BaseException, what: str = "the job store cannot take writes") -> StoreUnavailable:
    return StoreUnavailable(what, detail={"postgres": str(e).strip()})


# The statements that change a job's state, and the state the jobs they return were
# in (None: inserted; a statement that cannot tell returns it as old_state). Every job
# they return is counted out of that state and into its own (job_counts), so the
# counts change in the statements that change the states; a test checks that every
# statement of queries.sql that sets a job's state is named here.
STATE_CHANGES: dict[str, str | None] = {
    "admit_job": None, "insert_job": None, "insert_flight_succeeded": None,
    "claim_batch": "queued", "claim_job": "queued",
    "finish": "running", "retry_later": "running", "fail": "running", "release": "running",
    "reclaim": "running", "promote_due": "retry_wait", "cancel": None, "replay": "failed",
}


class PgTx:
    """One operation's view of the writer's transaction (a :class:`~.tx.Tx`)."""

    __slots__ = ("conn", "q", "now", "events", "counts", "admitting")

    def __init__(self, conn: PgConnection, q: dict[str, str], now: float,
                 events: list[dict[str, Any]], counts: dict[str, int]) -> None:
        self.conn = conn
        self.q = q
        self.now = now
        self.admitting = 0  # admissions sent ahead of this one, results unread (Step)
        # Chained when the batch commits (Writer._append): a seq is known only under
        # the head's lock.
        self.events = events
        # Jobs per state that this transaction moved so far, added to job_counts
        # when it commits.
        self.counts = counts

    def _count(self, name: str, rows: list[DictRow]) -> None:
        if name in STATE_CHANGES:
            before = STATE_CHANGES[name]
            for row in rows:
                old = row.get("old_state", before)
                if old is not None:
                    self.counts[old] = self.counts.get(old, 0) - 1
                self.counts[row["state"]] = self.counts.get(row["state"], 0) + 1

    @property
    def waiting_pending(self) -> int:
        """Jobs this transaction added to the waiting states (queued, retry_wait), so
        far as it knows (see Step)."""
        return self.counts.get("queued", 0) + self.counts.get("retry_wait", 0) + self.admitting

    def one(self, name: str, **params: Any) -> DictRow | None:
        row = self.conn.execute(self.q[name], params).fetchone()
        if row is not None:
            self._count(name, [row])
        return row

    def all(self, name: str, **params: Any) -> list[DictRow]:
        rows = self.conn.execute(self.q[name], params).fetchall()
        self._count(name, rows)
        return rows

    def run(self, name: str, **params: Any) -> int:
        """Execute a statement that returns no rows; how many rows it changed."""
        return self.conn.execute(self.q[name], params).rowcount

    # Its statements say ON CONFLICT DO NOTHING: a key taken returns no row.
    insert = one

    def event(self, job: Job, type: str, actor: str, detail: dict[str, Any] | None = None,
              attempt: int | None = None) -> None:
        self.events.append(event_row(job, type, actor, detail, attempt, self.now))


_Item = tuple[Op, "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def migrate(conn: PgConnection, q: dict[str, str]) -> int:
    """Apply the numbered migrations (sql/postgres/NNNN_*.sql) the database lacks, in
    one transaction under an advisory lock, so daemons starting together apply them
    once; answers the schema version. A database newer than this code is refused."""
    known = migrations("sql/postgres")
    latest = known[-1][0] if known else 0
    conn.execute("BEGIN")
    try:
        conn.execute(q["migration_lock"])
        conn.execute(q["schema_version_table"])
        row = conn.execute(q["schema_version"]).fetchone()
        current = int(row["version"]) if row else 0
        if current > latest:
            raise StoreUnavailable(
                f"the job store's schema is version {current}; this casesignd knows up to "
                f"{latest}", detail={"reason": "schema_newer"})
        for version, script in known:
            if version > current:
                conn.execute(script)  # no parameters: several statements at once
                conn.execute(q["record_version"], {"version": version})
                current = version
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        raise
    return current


class Writer:
    """The daemon's one writing connection, on its own thread, committing in groups."""

    MAX_BATCH = 512
    # A commit that follows the last one within BUSY_S waits up to GATHER_S for more
    # (see SQLite's writer): the statements of a batch cost the same round trips
    # whether the batch is large or small, its commit does not.
    BUSY_S = 0.02
    GATHER_S = 0.0005

    def __init__(self, connect: Connect, statements: dict[str, str],
                 clock: Callable[[], float] | None) -> None:
        self._connect = connect
        self.q = statements
        self.clock = clock
        self.batches = 0
        self.reruns = 0  # batches run again after a deadlock or serialization failure
        self._conn: PgConnection | None = None
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._begin = "BEGIN" if clock is not None else f"BEGIN; {statements['now']}"

    def start(self) -> int:
        """Connect, migrate, and start the thread; answers the schema version. Blocking."""
        conn = self._session(self._connect())
        try:
            version = migrate(conn, self.q)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._thread = threading.Thread(target=self._run, name="casesignd-store-writer",
                                        daemon=True)
        self._thread.start()
        return version

    def stop(self) -> None:
        """Commit what is queued, then stop. Blocking."""
        if self._thread is not None:
            thread, self._thread = self._thread, None  # submit refuses from here on
            self._queue.put(None)
            thread.join(timeout=60)
            # Submitted while the thread was stopping: refused, not left waiting.
            left: list[tuple[_Item, Any, BaseException | None]] = []
            with contextlib.suppress(queue.Empty):
                while True:
                    item = self._queue.get_nowait()
                    if item is not None:
                        left.append((item, None, StoreUnavailable("the job store is closed")))
            self._deliver(left)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def submit(self, op: Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._thread is None:
            fut.set_exception(StoreUnavailable("the job store is closed"))
        else:
            self._queue.put((op, fut, loop))
        return fut

    def _session(self, conn: PgConnection) -> PgConnection:
        conn.execute(self.q["session"])
        return conn

    def _run(self) -> None:
        last_commit = 0.0
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
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

    def _connection(self) -> PgConnection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            self._conn = None
            self._conn = self._session(self._connect())
        return self._conn

    def _start_tx(self, conn: PgConnection) -> float:
        cur = conn.execute(self._begin)
        if self.clock is not None:
            return self.clock()
        cur.nextset()
        row = cur.fetchone()
        assert row is not None
        return float(row["now"])

    def _append(self, conn: PgConnection, events: list[dict[str, Any]],
                counts: dict[str, int]) -> None:
        """Chain ``events`` after the head, under its lock, move the head, add
        ``counts`` to the jobs per state, and commit."""
        moved = {k: v for k, v in counts.items() if v}
        if not events:
            with conn.pipeline():
                if moved:
                    conn.execute(self.q["count_states"], {"states": list(moved),
                                                          "deltas": list(moved.values())})
                conn.execute("COMMIT")
            return
        head = conn.execute(self.q["lock_chain_head"]).fetchone()
        assert head is not None
        seq, prev = int(head["seq"]), str(head["hash"])
        for ev in events:
            seq += 1
            ev["seq"], ev["prev_hash"] = seq, prev
            ev["hash"] = prev = audit.event_hash(ev)
        rows = msgspec.json.encode(events).decode()
        with conn.pipeline():
            conn.execute(self.q["append_events"], {"events": rows, "head_seq": seq, "head_hash": prev})
            if moved:
                conn.execute(self.q["count_states"], {"states": list(moved),
                                                      "deltas": list(moved.values())})
            conn.execute("COMMIT")

    @staticmethod
    def _rollback(conn: PgConnection) -> None:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")

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

    def _deliver(self, outcomes: list[tuple[_Item, Any, BaseException | None]]) -> None:
        # One wake-up of each event loop per batch, not one per operation.
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for (_op, fut, loop), result, error in outcomes:
            by_loop.setdefault(loop, []).append((fut, result, error))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                loop.call_soon_threadsafe(self._resolve_all, items)

    def _run_ops(self, conn: PgConnection, ops: list[Op], now: float,
                 events: list[dict[str, Any]], counts: dict[str, int]
                 ) -> tuple[list[Any], int | None, BaseException | None]:
        """Run ``ops`` in order in the open transaction, consecutive steps with their
        first statements pipelined: (results, the index of the op that raised and what
        it raised, or None)."""

        def tx_for() -> PgTx:
            return PgTx(conn, self.q, now, events, counts)

        results: list[Any] = []
        i = 0
        while i < len(ops):
            run = 0
            while i + run < len(ops) and isinstance(ops[i + run], Step):
                run += 1
            if run < 2:
                try:
                    results.append(ops[i](tx_for()))
                except Exception as e:  # noqa: BLE001 - each op's failure is its own
                    return results, i, e
                i += 1
                continue
            steps = [op for op in ops[i:i + run] if isinstance(op, Step)]
            firsts, txs, ahead = [], [], 0
            for step in steps:
                tx = tx_for()
                tx.admitting = ahead
                ahead += step.admits
                try:
                    firsts.append(step.first(tx))
                except Exception as e:  # noqa: BLE001
                    return results, i + len(txs), e
                txs.append(tx)
            cursors: list[psycopg.Cursor[DictRow]] = []
            try:
                with conn.pipeline():
                    for name, params in firsts:
                        cursors.append(conn.execute(self.q[name], params))
            except psycopg.Error as e:
                # The statements before the one that failed have their results.
                failed = next((k for k, cur in enumerate(cursors) if cur.pgresult is None), 0)
                return results, i + failed, e
            for k, (step, tx, cur) in enumerate(zip(steps, txs, cursors, strict=True)):
                try:
                    rows = cur.fetchall()
                    tx.admitting = 0
                    tx._count(firsts[k][0], rows)
                    results.append(step.then(tx, rows))
                except Exception as e:  # noqa: BLE001
                    return results, i + k, e
            i += run
        return results, None, None

    def _commit(self, batch: list[_Item]) -> None:
        """Run a batch in one transaction; see the module's docstring."""
        done: list[tuple[_Item, Any, BaseException | None]] = []
        pending = list(batch)
        retries = 0
        while pending:
            try:
                conn = self._connection()
                now = self._start_tx(conn)
            except (psycopg.Error, StoreUnavailable) as e:
                err = e if isinstance(e, StoreUnavailable) else unavailable(e)
                done.extend((item, None, err) for item in pending)
                break
            events: list[dict[str, Any]] = []
            counts: dict[str, int] = {}
            results, failed, failure = self._run_ops(
                conn, [op for op, _f, _l in pending], now, events, counts)
            if failed is None:
                try:
                    self._append(conn, events, counts)
                except psycopg.Error as e:
                    self._rollback(conn)
                    if isinstance(e, TRANSIENT) and retries < MAX_RETRIES:
                        retries += 1
                        self.reruns += 1
                        continue
                    done.extend((item, None, unavailable(e)) for item in pending)
                    break
                done.extend((item, r, None) for item, r in zip(pending, results, strict=True))
                break
            self._rollback(conn)
            assert failure is not None
            if isinstance(failure, psycopg.Error):
                if isinstance(failure, TRANSIENT) and retries < MAX_RETRIES:
                    retries += 1
                    self.reruns += 1
                    continue
                if conn.broken or isinstance(failure, psycopg.OperationalError):
                    done.extend((item, None, unavailable(failure)) for item in pending)
                    break
                failure = unavailable(failure)
            done.append((pending[failed], None, failure))
            del pending[failed]
        self.batches += 1
        self._deliver(done)
