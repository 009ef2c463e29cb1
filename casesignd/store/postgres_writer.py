"""The PostgreSQL store's writing connection, committing in groups, and its migrations.

One asyncio task owns the daemon's writing connection. It takes every operation
waiting in its queue and runs them in one transaction (group commit), as the SQLite
store's writer thread does: an operation that raises is taken out and the others run
again in a fresh transaction, so it leaves nothing behind; a deadlock with another
daemon's transaction (PostgreSQL aborts one of the two) runs the whole batch again.

The audit chain is one for every daemon. An operation's events are kept aside while
it runs; just before COMMIT the writer locks the chain's head row (``SELECT ... FOR
UPDATE``), chains the batch's events after the head it finds, inserts them and moves
the head, in one statement. Two writers therefore chain one after the other, never
after the same event, and the lock is held only for the tail of a transaction.

Times: every statement gets the transaction's ``now`` as a parameter, read from the
database (``now()``, one clock for every daemon's leases) when the transaction begins,
or from an injected clock (tests).

Wake-ups stay polling: a LISTEN/NOTIFY seam would sit in :meth:`Writer._commit`,
after a commit that queued jobs (debounced: NOTIFY takes a database-wide lock at
commit).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .. import audit
from ..errors import StoreUnavailable
from .records import Job, new_id
from .sqlite_writer import migrations

PgConnection = AsyncConnection[DictRow]
Connect = Callable[[], Awaitable[PgConnection]]

# A deadlock or a serialization failure aborts the transaction but is no fault of any
# operation in it: the batch runs again, up to this many times.
TRANSIENT = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
MAX_RETRIES = 8


def unavailable(e: BaseException, what: str = "the job store cannot take writes") -> StoreUnavailable:
    return StoreUnavailable(what, detail={"postgres": str(e).strip()})


class Tx:
    """One operation's view of the writer's transaction."""

    __slots__ = ("conn", "q", "now", "events")

    def __init__(self, conn: PgConnection, q: dict[str, str], now: float,
                 events: list[dict[str, Any]]) -> None:
        self.conn = conn
        self.q = q
        self.now = now
        # Chained when the batch commits (see Writer._append): a seq is known only
        # under the head's lock.
        self.events = events

    async def one(self, name: str, **params: Any) -> DictRow | None:
        cur = await self.conn.execute(self.q[name], params)
        return await cur.fetchone()

    async def all(self, name: str, **params: Any) -> list[DictRow]:
        cur = await self.conn.execute(self.q[name], params)
        return await cur.fetchall()

    async def run(self, name: str, **params: Any) -> int:
        """Execute a statement that returns no rows; how many rows it changed."""
        cur = await self.conn.execute(self.q[name], params)
        return cur.rowcount

    def event(self, job: Job, type: str, actor: str, detail: dict[str, Any] | None = None,
              attempt: int | None = None) -> None:
        self.events.append({
            "event_id": new_id("evt", self.now),
            "job_id": job.job_id,
            "tenant": job.tenant,
            "case_id": job.case_id,
            "type": type,
            "actor": actor,
            "at": audit.rfc3339(self.now),
            "attempt": job.attempt if attempt is None else attempt,
            "input_digest": job.input_digest,
            "policy_version": job.version,
            "detail": audit.canonical(detail or {}).decode(),
        })


Op = Callable[[Tx], Awaitable[Any]]
_Item = tuple[Op, "asyncio.Future[Any]"]


async def migrate(conn: PgConnection, q: dict[str, str]) -> int:
    """Apply the numbered migrations (sql/postgres/NNNN_*.sql) the database lacks, in
    one transaction under an advisory lock, so daemons starting together apply them
    once; answers the schema version. A database newer than this code is refused."""
    known = migrations("sql/postgres")
    latest = known[-1][0] if known else 0
    await conn.execute("BEGIN")
    try:
        await conn.execute(q["migration_lock"])
        await conn.execute(q["schema_version_table"])
        cur = await conn.execute(q["schema_version"])
        row = await cur.fetchone()
        current = int(row["version"]) if row else 0
        if current > latest:
            raise StoreUnavailable(
                f"the job store's schema is version {current}; this casesignd knows up to "
                f"{latest}", detail={"reason": "schema_newer"})
        for version, script in known:
            if version > current:
                await conn.execute(script)  # no parameters: several statements at once
                await conn.execute(q["record_version"], {"version": version})
                current = version
        await conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")
        raise
    return current


class Writer:
    """The daemon's one writing connection, committing in groups."""

    MAX_BATCH = 512

    def __init__(self, connect: Connect, statements: dict[str, str],
                 clock: Callable[[], float] | None) -> None:
        self._connect = connect
        self.q = statements
        self.clock = clock
        self.batches = 0
        self.reruns = 0  # batches run again after a deadlock or serialization failure
        self._conn: PgConnection | None = None
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._begin = "BEGIN" if clock is not None else f"BEGIN; {statements['now']}"

    async def start(self) -> int:
        """Connect, migrate, and start committing; answers the schema version."""
        conn = await self._connect()
        try:
            version = await migrate(conn, self.q)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._task = asyncio.create_task(self._run(), name="casesignd-store-writer")
        return version

    async def stop(self) -> None:
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def submit(self, op: Op) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._task is None or self._task.done():
            fut.set_exception(StoreUnavailable("the job store is closed"))
        else:
            self._queue.put_nowait((op, fut))
        return fut

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            # Let the callers that the last commit answered submit their next
            # operation (a claim after a finish) before this batch closes.
            await asyncio.sleep(0)
            batch = [item]
            stop = False
            while len(batch) < self.MAX_BATCH and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            await self._commit(batch)
            if stop:
                return

    async def _connection(self) -> PgConnection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await self._conn.close()
            self._conn = None
            self._conn = await self._connect()
        return self._conn

    async def _start_tx(self, conn: PgConnection) -> float:
        cur = await conn.execute(self._begin)
        if self.clock is not None:
            return self.clock()
        cur.nextset()
        row = await cur.fetchone()
        assert row is not None
        return float(row["now"])

    async def _append(self, conn: PgConnection, events: list[dict[str, Any]]) -> None:
        """Chain ``events`` after the head, under its lock, and move the head."""
        cur = await conn.execute(self.q["lock_chain_head"])
        head = await cur.fetchone()
        assert head is not None
        seq, prev = int(head["seq"]), str(head["hash"])
        columns: dict[str, list[Any]] = {k: [] for k in audit.FIELDS}
        for ev in events:
            seq += 1
            ev["seq"], ev["prev_hash"] = seq, prev
            ev["hash"] = prev = audit.event_hash(ev)
            for k in audit.FIELDS:
                columns[k].append(ev[k])
        async with conn.pipeline():
            await conn.execute(self.q["append_events"], {**columns, "head_seq": seq, "head_hash": prev})
            await conn.execute("COMMIT")

    @staticmethod
    def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    async def _rollback(self, conn: PgConnection) -> None:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")

    async def _commit(self, batch: list[_Item]) -> None:
        """Run a batch in one transaction; see the module's docstring."""
        pending = list(batch)
        retries = 0
        while pending:
            try:
                conn = await self._connection()
                now = await self._start_tx(conn)
            except psycopg.Error as e:
                for _op, fut in pending:
                    self._resolve(fut, None, unavailable(e))
                break
            events: list[dict[str, Any]] = []
            results: list[Any] = []
            failed: int | None = None
            failure: BaseException | None = None
            for i, (op, _fut) in enumerate(pending):
                try:
                    results.append(await op(Tx(conn, self.q, now, events)))
                except asyncio.CancelledError:
                    await self._rollback(conn)
                    for _op, fut in pending:
                        self._resolve(fut, None, StoreUnavailable("the job store is closing"))
                    raise
                except Exception as e:  # noqa: BLE001 - each op's failure is its own
                    failed, failure = i, e
                    break
            if failed is None:
                try:
                    if events:
                        await self._append(conn, events)
                    else:
                        await conn.execute("COMMIT")
                except psycopg.Error as e:
                    await self._rollback(conn)
                    if isinstance(e, TRANSIENT) and retries < MAX_RETRIES:
                        retries += 1
                        self.reruns += 1
                        continue
                    for _op, fut in pending:
                        self._resolve(fut, None, unavailable(e))
                    break
                for (_op, fut), result in zip(pending, results, strict=True):
                    self._resolve(fut, result, None)
                break
            await self._rollback(conn)
            assert failure is not None
            if isinstance(failure, psycopg.Error):
                if isinstance(failure, TRANSIENT) and retries < MAX_RETRIES:
                    retries += 1
                    self.reruns += 1
                    continue
                if conn.broken or isinstance(failure, psycopg.OperationalError):
                    for _op, fut in pending:
                        self._resolve(fut, None, unavailable(failure))
                    break
                failure = unavailable(failure)
            self._resolve(pending[failed][1], None, failure)
            del pending[failed]
        self.batches += 1
