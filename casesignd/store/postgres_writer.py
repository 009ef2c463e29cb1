"""The PostgreSQL store's writing connection, on its own thread, committing in groups,
and its migrations.

As the SQLite store's writer does (:class:`~.groupcommit.GroupCommit`), one thread
owns the daemon's writing connection and runs every operation waiting in its queue in
one transaction; a deadlock with another daemon's transaction (PostgreSQL aborts one
of the two) runs the whole batch again. A thread with psycopg's blocking connection,
not an asyncio task: a statement then costs a third of what the asyncio connection's
wake-ups cost. The hot operations (admit, claim, renew, the end of an attempt) are
steps (:class:`~.tx.Step`), whose first statements the writer sends together, one
round trip for a run of them (pipeline mode).

The audit chain is one for every daemon. An operation's events are kept aside while
it runs; just before COMMIT the writer locks the chain's head row (``SELECT ... FOR
UPDATE``), chains the batch's events after the head it finds, inserts them and moves
the head, in one statement, pipelined with the batch's changes to the jobs per state
and the COMMIT. Two writers therefore chain one after the other, never after the
same event, and the lock is held only for the tail of a transaction.

Times: every statement gets the transaction's ``now`` as a parameter, the database's
``now()`` (one clock for every daemon's leases) read as the transaction begins, or an
injected clock's (tests).

Wake-ups stay polling. A LISTEN/NOTIFY seam would sit in :meth:`Writer._end`,
after a commit that queued jobs, debounced: NOTIFY takes a database-wide lock at
commit, and PgBouncer in transaction mode breaks LISTEN.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg
from psycopg.rows import DictRow

from casesignd.core import audit
from casesignd.core.errors import StoreUnavailable
from casesignd.store.groupcommit import Done, GroupCommit, Ran
from casesignd.store.outbox import delivery_row
from casesignd.store.records import Subject
from casesignd.store.sqlfiles import migrations
from casesignd.store.tx import Op, Step, event_row

PgConnection = psycopg.Connection[DictRow]
Connect = Callable[[], PgConnection]

# A deadlock or a serialization failure aborts the transaction but is no fault of any
# operation in it: the batch runs again (up to Writer.MAX_RERUNS times).
TRANSIENT = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


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
    "erase_cancel": None,
}
# The statements that remove jobs: each job they return is counted out of its state.
STATE_REMOVALS = frozenset({"expire_jobs"})


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
        if name in STATE_REMOVALS:
            for row in rows:
                self.counts[row["state"]] = self.counts.get(row["state"], 0) - 1
        elif name in STATE_CHANGES:
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

    def event(self, job: Subject, type: str, actor: str, detail: dict[str, Any] | None = None,
              attempt: int | None = None) -> None:
        self.events.append(event_row(job, type, actor, detail, attempt, self.now))
        delivery = delivery_row(job, type, self.now)
        if delivery is not None:  # the webhook outbox: with the state change
            self.conn.execute(self.q["insert_delivery"], delivery)


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


@dataclass(slots=True)
class _Batch:
    conn: PgConnection
    now: float
    # Kept aside until the commit: the events, chained only under the head's lock
    # (_append), and the jobs per state moved.
    events: list[dict[str, Any]]
    counts: dict[str, int]


class Writer(GroupCommit[_Batch]):
    """The daemon's one writing connection, on its own thread, committing in groups."""

    # The statements of a batch cost the same round trips whether the batch is large
    # or small, its commit does not: a shorter gathering than SQLite's.
    GATHER_S = 0.0005
    MAX_RERUNS = 8
    ENGINE_ERRORS = (psycopg.Error,)

    def __init__(self, connect: Connect, statements: dict[str, str],
                 clock: Callable[[], float] | None) -> None:
        super().__init__()
        self._connect = connect
        self.q = statements
        self.clock = clock
        self._conn: PgConnection | None = None
        self._thread: threading.Thread | None = None
        self._begin_sql = "BEGIN" if clock is not None else f"BEGIN; {statements['now']}"

    def start(self) -> int:
        """Connect, migrate, and start the thread; answers the schema version. Blocking."""
        conn = self._session(self._connect())
        try:
            version = migrate(conn, self.q)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._thread = threading.Thread(target=self._serve, name="casesignd-store-writer",
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
            left: list[Done] = []
            with contextlib.suppress(queue.Empty):
                while True:
                    item = self._queue.get_nowait()
                    if item is not None:
                        left.append((item, None, StoreUnavailable("the job store is closed")))
            self._deliver(left)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _closed(self) -> bool:
        return self._thread is None

    def _session(self, conn: PgConnection) -> PgConnection:
        conn.execute(self.q["session"])
        return conn

    def _connection(self) -> PgConnection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            self._conn = None
            self._conn = self._session(self._connect())
        return self._conn

    def _start_tx(self, conn: PgConnection) -> float:
        cur = conn.execute(self._begin_sql)
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

    # --- one transaction (GroupCommit) -----------------------------------------------

    def _begin(self) -> _Batch:
        try:
            conn = self._connection()
            now = self._start_tx(conn)
        except psycopg.Error as e:
            raise unavailable(e) from e
        return _Batch(conn, now, [], {})

    def _end(self, batch: _Batch) -> None:
        self._append(batch.conn, batch.events, batch.counts)

    def _rollback(self, batch: _Batch) -> None:
        with contextlib.suppress(psycopg.Error):
            batch.conn.execute("ROLLBACK")

    def _translate(self, error: BaseException) -> BaseException:
        return unavailable(error) if isinstance(error, psycopg.Error) else error

    def _transient(self, error: BaseException) -> bool:
        return isinstance(error, TRANSIENT)

    def _fails_all(self, error: BaseException, batch: _Batch) -> bool:
        return isinstance(error, psycopg.Error) and (
            batch.conn.broken or isinstance(error, psycopg.OperationalError))

    def _run_ops(self, batch: _Batch, ops: list[Op]) -> Ran:
        """Run ``ops`` in order in the open transaction, consecutive steps with their
        first statements pipelined."""
        conn = batch.conn

        def tx_for() -> PgTx:
            return PgTx(conn, self.q, batch.now, batch.events, batch.counts)

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
            firsts: list[tuple[str, dict[str, Any]]] = []
            txs: list[PgTx] = []
            ahead = 0
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
