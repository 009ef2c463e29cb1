"""The store on PostgreSQL: any number of daemons on one database.

The verbs and their semantics are the SQLite store's (:class:`~.verbs.SqlStore`; the
contract suite, tests/unit/test_store_contract.py, runs against both); what changes
is what holds them together across daemons, here and in queries.sql:

- claims lock the jobs they take with ``FOR UPDATE SKIP LOCKED``, so two daemons
  claiming at once take different jobs without waiting for each other, and every
  update of a running job is fenced on (job_id, attempt, lease_owner);
- ``reclaim_expired`` is one conditional statement that any daemon may run;
- idempotency keys and put-once signatures hold by UNIQUE constraints
  (``ON CONFLICT DO NOTHING``), never by a lock in one process;
- one audit chain, its head locked once per transaction just before it commits
  (:mod:`casesignd.store.postgres_writer`);
- lease times are the database's clock, one for every daemon.

Writes go through the writer's thread (group commit); reads use a small pool of
asyncio connections. The node's own session (its name's lock, its wake-ups) is
:mod:`casesignd.store.postgres_node`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from casesignd.core.errors import StoreUnavailable
from casesignd.core.tenant_limits import TenantLimits
from casesignd.store.claims import ShownPauses, Turns
from casesignd.store.postgres_keys import AdvisoryKeyLocks
from casesignd.store.postgres_node import CHANNEL, Announcer, NodeSession
from casesignd.store.postgres_writer import PgConnection, PgTx, Writer, unavailable
from casesignd.store.records import (
    Claimed,
    Job,
    KeyLocks,
    Lease,
    NewJob,
    in_progress,
    new_id,
    row_job,
)
from casesignd.store.sqlfiles import load_statements
from casesignd.store.tenants import RunningRoom, check_admission, limited
from casesignd.store.tx import Op, Row, Step
from casesignd.store.verbs import (
    Expired,
    SqlStore,
    admitted,
    claimed,
    job_of,
    queue_full,
    same_request,
)

# Jobs one reclaim or promotion takes at most (the next pass takes the rest).
SWEEP_CAP = 500
_SIG = ("artifact_id", "sha256", "size", "job_id", "created_at")


class PostgresStore(SqlStore):
    """The store on PostgreSQL; ``dsn`` is a libpq connection string or URI."""

    def __init__(self, dsn: str, *, password: str | None = None, node: str | None = None,
                 notify: bool = False, clock: Callable[[], float] | None = None,
                 readers: int = 4, connect_timeout_s: float = 10.0) -> None:
        self.dsn = dsn
        # Whose turn it is among the tenants, on this daemon (casesignd.store.claims).
        self.turns = Turns()
        self.shown = ShownPauses()  # the pauses job resources show (casesignd.store.claims)
        # A daemon's node name: held by a lock for its life (:meth:`open`); None for
        # tools (migrate, copy, check) that are no node.
        self.node = node
        # None: the database's clock (every daemon's leases on one clock); tests give one.
        self.clock = clock
        self.q = (load_statements("sql/postgres/queries.sql")
                  | load_statements("sql/postgres/lifecycle.sql")
                  | load_statements("sql/postgres/claims.sql")
                  | load_statements("sql/postgres/tenants.sql"))
        # What the dsn leaves out: a password from its file, a name in pg_stat_activity,
        # a bound on connecting.
        given = psycopg.conninfo.conninfo_to_dict(dsn)
        self._kwargs: dict[str, Any] = {}
        if password:
            self._kwargs["password"] = password
        if "application_name" not in given:
            # pg_stat_activity then says which node each connection is.
            self._kwargs["application_name"] = f"casesignd:{node}" if node else "casesignd"
        if "connect_timeout" not in given:
            self._kwargs["connect_timeout"] = max(1, int(connect_timeout_s))
        # A host that dies without a TCP reset: its sessions, and the node name and keys
        # they hold, end within about a minute rather than the kernel's two hours.
        for key, value in (("keepalives", 1), ("keepalives_idle", 30),
                           ("keepalives_interval", 10), ("keepalives_count", 3)):
            if key not in given:
                self._kwargs[key] = value
        self._writer: Writer = Writer(self._connect, self.q, clock)
        self._readers = readers
        self._timeout_s = connect_timeout_s
        self._pool: AsyncConnectionPool[AsyncConnection[DictRow]] | None = None
        self._session = NodeSession(self._connect_async, node, self.q["node_lock"], listen=notify) \
            if node is not None else None
        self._announcer = Announcer(self._notify) if notify else None
        # Signature and idempotency keys locked across the daemons (postgres_keys.py).
        self._key_locks = AdvisoryKeyLocks(self._connect_async, self.q)
        self.key_locks: KeyLocks | None = self._key_locks
        self.schema_version = 0

    # --- lifecycle -----------------------------------------------------------------

    def _connect(self) -> PgConnection:
        try:
            return psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row, **self._kwargs)
        except psycopg.Error as e:
            raise unavailable(e, "the job store cannot be reached") from e

    async def open(self) -> None:
        """Take the node's lock, apply migrations (under an advisory lock), start the
        writer, open the readers. A second live daemon of the same node name is refused
        (StoreUnavailable): its start-up would take back the first one's leases."""
        if self._session is not None:
            await self._session.take()
        try:
            await self._open_rest()
        except BaseException:
            if self._session is not None:
                await self._session.release()
            raise

    async def _connect_async(self) -> AsyncConnection[DictRow]:
        return await AsyncConnection.connect(self.dsn, autocommit=True, row_factory=dict_row,
                                             **self._kwargs)

    def on_announce(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` when another daemon announces queued jobs (``[store] notify``)."""
        if self._session is not None:
            self._session.on_wake(wake)

    def announce(self) -> None:
        """Jobs were queued: with ``[store] notify``, tell the other daemons (debounced);
        else they find them at their next poll."""
        if self._announcer is not None:
            self._announcer.announce()

    async def _notify(self) -> None:
        await self._rows("notify", channel=CHANNEL)

    async def _open_rest(self) -> None:
        self.schema_version = await asyncio.to_thread(self._writer.start)
        pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
            self.dsn, min_size=1, max_size=self._readers, open=False, timeout=self._timeout_s,
            kwargs={"autocommit": True, "row_factory": dict_row, **self._kwargs},
            configure=self._configure_reader, name="casesignd-readers")
        try:
            await pool.open(wait=True, timeout=self._timeout_s)
        except psycopg.Error as e:  # PoolTimeout is one
            await pool.close()
            await asyncio.to_thread(self._writer.stop)
            raise unavailable(e, "the job store cannot be reached") from e
        self._pool = pool

    async def _configure_reader(self, conn: AsyncConnection[DictRow]) -> None:
        await conn.execute(self.q["session"])  # plans by index, as the writer's

    async def close(self) -> None:
        await self._key_locks.close()
        await asyncio.to_thread(self._writer.stop)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._announcer is not None:
            await self._announcer.close()
        if self._session is not None:
            await self._session.release()

    async def migrate(self) -> int:
        """Apply the migrations and stop: the schema version."""
        self.schema_version = await asyncio.to_thread(self._writer.start)
        await asyncio.to_thread(self._writer.stop)
        return self.schema_version

    async def _write(self, op: Op) -> Any:
        return await self._writer.submit(op)

    async def scrub(self) -> None:
        """After an erasure, or a sweep that removed bytes or data keys the store kept:
        the tables of those bytes and keys (and their TOAST tables) vacuumed at once, so that the removed rows are
        in no live or dead tuple. Pages keep the freed space until reused, and WAL
        segments and base backups keep what they recorded (docs/operating.md)."""
        def vacuum() -> None:
            with self._connect() as conn:
                conn.execute("VACUUM (ANALYZE FALSE) artifact_data")
                conn.execute("VACUUM (ANALYZE FALSE) data_keys")

        try:
            await asyncio.to_thread(vacuum)
        except psycopg.Error as e:
            raise unavailable(e, "the job store could not vacuum what was removed") from e

    async def _rows(self, name: str, **params: Any) -> Sequence[DictRow]:
        if self._pool is None:
            raise StoreUnavailable("the job store is closed")
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(self.q[name], params)
                return await cur.fetchall()
        except psycopg.Error as e:
            raise unavailable(e, "the job store cannot be read") from e

    @staticmethod
    def _array(values: list[Any]) -> list[Any]:
        return values  # an array parameter (text[], bigint[])

    @property
    def reruns(self) -> int:
        """Batches run again after a deadlock with another daemon's transaction."""
        return self._writer.reruns

    # --- what is PostgreSQL's own --------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int,
                    limits: TenantLimits | None = None) -> tuple[Job, bool]:
        """Store a job durably, or return the job an identical request made before.

        Returns (job, created). Raises IdempotencyKeyReused when the key was used for
        a different request, QueueFull past the queue depth, Conflict ``in_progress``
        while a kiosk request on any daemon has locked the key, and past the tenant's
        ``limits`` TenantQueueFull or RateLimited. Two daemons admitting one key at
        once meet at the key's UNIQUE constraint: one inserts, the other waits for that
        commit and finds the row. Engine-specific: it inserts first, in one pipelined
        step (SQLite looks the key up first, under its one writer); a tenant with
        admission limits takes its turn on the tenant's lock, looks the key up, and is
        counted (casesignd.store.tenants) before that step."""

        def first(tx: PgTx) -> tuple[str, dict[str, Any]]:
            return "admit_job", {**new.__dict__, "job_id": new_id("job", new.created_at),
                                 "now": tx.now, "max_queue_depth": max_queue_depth,
                                 "waiting_pending": tx.waiting_pending,
                                 "admission_ms": max(0.0, (tx.now - new.created_at) * 1000.0)}

        def then(tx: PgTx, rows: Sequence[Row], again: bool = True) -> tuple[Job, bool]:
            if rows:
                return admitted(tx, row_job(rows[0]), actor), True
            row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
            if row is not None:
                return same_request(row, new)
            locked = tx.one("idem_key_locked", tenant=new.tenant, idem_key=new.idem_key)
            if locked is not None and locked["locked"]:
                raise in_progress()  # a kiosk request on some daemon locked the key
            if again:
                # A kiosk request's lock on the key, let go of since the insert looked:
                # the insert again, so that only a full queue is answered as one.
                name, params = first(tx)
                return then(tx, tx.all(name, **params), again=False)
            raise queue_full()

        step = Step(first, then, admits=True)
        if not limited(limits):
            return await self._write(step)
        assert limits is not None

        def counted(tx: PgTx) -> tuple[Job, bool]:
            tx.one("admission_lock", tenant=new.tenant)
            row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
            if row is not None:
                return same_request(row, new)
            check_admission(tx, new.tenant, limits)
            return step(tx)  # a refusal in it undoes the charge with the rest

        return await self._write(counted)

    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int, *, running_limits: dict[str, int] | None = None
                          ) -> list[Claimed]:
        """Take the leases of up to ``limit`` due queued jobs that fit the byte budget
        together, the tenants taking turns (casesignd.store.claims), in one statement,
        each with the signature recorded for its signature key. Engine-specific: one
        pipelined step that finds the tenants, locks the jobs it takes (FOR UPDATE
        SKIP LOCKED) and reads their signatures. With ``running_limits``, claims take
        turns on one lock across the daemons, count the jobs running per tenant, and
        pass over a tenant at its limit (casesignd.store.tenants); a statement then
        takes no more jobs than the least room any limited tenant has left."""

        def then(tx: PgTx, rows: Sequence[Row]) -> list[Claimed]:
            out = []
            for row in rows:
                recorded = None
                if row["sig_artifact_id"] is not None:
                    recorded = {"tenant": row["tenant"], "sig_key": row["sig_key"]} | {
                        k: row[f"sig_{k}"] for k in _SIG}
                self.turns.took(row["tenant"])  # in the statement's order: the same tags
                out.append(Claimed(claimed(tx, job_of(row), owner), recorded))
            return out

        def params(tx: PgTx, budget: int, n: int, skip: list[str]) -> dict[str, Any]:
            return {"owner": owner, "now": tx.now, "lease_s": lease_s, "budget": budget,
                    "kinds": kinds, "limit": n, "skip": skip, **self.turns.known()}

        if limit <= 0:
            return []
        if not running_limits:
            return await self._write(Step(
                lambda tx: ("claim_batch", params(tx, budget_bytes, limit, [])), then))
        limits = running_limits

        def within_room(tx: PgTx) -> list[Claimed]:
            tx.one("running_claims_lock")
            room = RunningRoom.of(tx, limits, sorted(limits))
            out: list[Claimed] = []
            budget = budget_bytes
            while len(out) < limit:
                n = room.most(limit - len(out))
                taken = then(tx, tx.all("claim_batch", **params(tx, budget, n, room.skip())))
                for c in taken:
                    room.took(c.job.tenant)
                    budget -= c.job.declared_bytes
                out += taken
                if len(taken) < n:
                    break
            return out

        return await self._write(within_room)

    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]:
        """Extend leases, in one statement; returns the ones that are no longer held.
        Engine-specific: one pipelined step for every lease."""

        def then(tx: PgTx, rows: Sequence[Row]) -> list[Lease]:
            held = {(r["job_id"], r["attempt"]) for r in rows}
            return [lease for lease in leases if (lease.job_id, lease.attempt) not in held]

        if not leases:
            return []
        return await self._write(Step(lambda tx: ("renew", {
            "now": tx.now, "lease_s": lease_s, "job_ids": [lease.job_id for lease in leases],
            "attempts": [lease.attempt for lease in leases],
            "owners": [lease.owner for lease in leases]}), then))

    def _take_expired(self, tx: PgTx, max_lost: int, at_start_of: str | None
                      ) -> list[Expired]:
        """Running jobs whose lease expired. At the start-up of node ``at_start_of``,
        also every job that node's leases hold: the node lock (:meth:`open`) says no
        live daemon of that name has them. Other nodes' leases are theirs until they
        expire. One statement, which skips the jobs another transaction holds: any
        daemon may run it at any time."""
        everything = at_start_of is not None
        rows = tx.all("reclaim", now=tx.now, max_lost=max_lost,
                      node_prefix=f"{at_start_of}:" if everything else None,
                      cap=None if everything else SWEEP_CAP)
        rows.sort(key=(lambda r: r["job_id"]) if everything
                  else (lambda r: (r["old_expires"], r["job_id"])))
        return [Expired(job_of(r), r["old_owner"], r["lost_out"]) for r in rows]

    def _take_due(self, tx: PgTx) -> list[Job]:
        rows = tx.all("promote_due", now=tx.now, cap=SWEEP_CAP)
        return sorted((row_job(r) for r in rows), key=lambda j: (j.next_attempt_at, j.job_id))

    async def ping(self) -> None:
        """A write round trip: raises StoreUnavailable when the store cannot take writes
        (unreachable, or a standby that is read-only)."""

        def op(tx: PgTx) -> bool:
            row = tx.one("writable")
            return bool(row and row["in_recovery"])

        if await self._write(op):
            raise StoreUnavailable("the job store is read-only (a standby)",
                                   detail={"reason": "read_only"})
        if self._session is not None:
            await self._session.check()

    async def connected_nodes(self) -> list[dict[str, Any]]:
        """The daemons connected to the database now, by their sessions' names."""
        return [dict(r) for r in await self._rows("connected_nodes")]

    async def all_events(self) -> list[dict[str, Any]]:
        """Every event as stored (detail as canonical JSON), in chain order: what
        :func:`casesignd.core.audit.verify_rows` checks (:func:`casesignd.core.audit.verify_postgres`
        streams a large chain instead)."""
        return [dict(r) for r in await self._rows("all_events")]

    async def stats(self) -> dict[str, Any]:
        counts = {r["state"]: int(r["n"]) for r in await self._rows("state_counts")}
        (row,) = await self._rows("oldest_queued")
        now = self.clock() if self.clock is not None else row["now"]
        oldest = row["oldest"]
        return {"states": counts, "oldest_queued_age_s": max(0.0, now - oldest) if oldest else 0.0}
