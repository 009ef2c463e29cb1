"""The store on PostgreSQL: any number of daemons on one database.

The verbs and their semantics are the SQLite store's (the contract suite,
tests/unit/test_store_contract.py, runs against both); what changes is what holds
them together across daemons:

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
asyncio connections.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from .. import audit
from ..errors import Conflict, NotFound, QueueFull, StoreUnavailable
from ..outcomes import Finish, Outcome, RetryLater
from .postgres_keys import HeldKeys
from .postgres_writer import Op, PgConnection, Step, Tx, Writer, unavailable
from .records import (
    Claimed,
    Flight,
    IdempotencyKeyReused,
    Job,
    Lease,
    NewJob,
    in_progress,
    new_id,
    row_job,
)
from .sqlfiles import load_statements

# Jobs one reclaim or promotion takes at most (the next pass takes the rest).
SWEEP_CAP = 500
_SIG = ("artifact_id", "sha256", "size", "job_id", "created_at")


def _job_of(row: DictRow) -> Job:
    """The job in a row that carries more than the job's columns."""
    return Job(**{k: row[k] for k in Job.__struct_fields__})


class PostgresStore:
    """The store on PostgreSQL; ``dsn`` is a libpq connection string or URI."""

    def __init__(self, dsn: str, *, password: str | None = None, node: str | None = None,
                 clock: Callable[[], float] | None = None, readers: int = 4,
                 connect_timeout_s: float = 10.0) -> None:
        self.dsn = dsn
        # A daemon's node name: held by a lock for its life (:meth:`open`); None for
        # tools (migrate, copy, check) that are no node.
        self.node = node
        # None: the database's clock (every daemon's leases on one clock); tests give one.
        self.clock = clock
        self.q = load_statements("sql/postgres/queries.sql")
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
        self._writer = Writer(self._connect, self.q, clock)
        self._readers = readers
        self._timeout_s = connect_timeout_s
        self._pool: AsyncConnectionPool[AsyncConnection[DictRow]] | None = None
        self._node_lock: AsyncConnection[DictRow] | None = None
        # Signature and idempotency keys held across the daemons (postgres_keys.py).
        self.held_keys = HeldKeys(lambda: AsyncConnection.connect(
            self.dsn, autocommit=True, row_factory=dict_row, **self._kwargs), self.q)
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
        if self.node is not None:
            await self._lock_node(self.node)
        try:
            await self._open_rest()
        except BaseException:
            await self._unlock_node()
            raise

    async def _lock_node(self, node: str) -> None:
        try:
            conn = await AsyncConnection.connect(self.dsn, autocommit=True, row_factory=dict_row,
                                                 **self._kwargs)
        except psycopg.Error as e:
            raise unavailable(e, "the job store cannot be reached") from e
        try:
            row = await (await conn.execute(self.q["node_lock"], {"node": node})).fetchone()
        except psycopg.Error as e:
            await conn.close()
            raise unavailable(e, "the job store cannot be reached") from e
        if not row or not row["taken"]:
            await conn.close()
            raise StoreUnavailable(
                f"another casesignd daemon named {node!r} is running on this database "
                f"(application_name casesignd:{node} in pg_stat_activity); give this one "
                "its own --node", detail={"reason": "node_taken", "node": node})
        self._node_lock = conn

    async def _unlock_node(self) -> None:
        if self._node_lock is not None:
            await self._node_lock.close()  # the session ends, and its lock with it
            self._node_lock = None

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
        await self.held_keys.close()
        await asyncio.to_thread(self._writer.stop)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await self._unlock_node()

    async def migrate(self) -> int:
        """Apply the migrations and stop: the schema version."""
        self.schema_version = await asyncio.to_thread(self._writer.start)
        await asyncio.to_thread(self._writer.stop)
        return self.schema_version

    async def _write(self, op: Op) -> Any:
        return await self._writer.submit(op)

    async def _rows(self, name: str, **params: Any) -> list[DictRow]:
        if self._pool is None:
            raise StoreUnavailable("the job store is closed")
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(self.q[name], params)
                return await cur.fetchall()
        except psycopg.Error as e:
            raise unavailable(e, "the job store cannot be read") from e

    @property
    def commit_batches(self) -> int:
        return self._writer.batches

    @property
    def reruns(self) -> int:
        """Batches run again after a deadlock with another daemon's transaction."""
        return self._writer.reruns

    # --- admission -------------------------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """Store a job durably, or return the job an identical request made before.

        Returns (job, created). Raises IdempotencyKeyReused when the key was used for
        a different request, QueueFull past the queue depth, Conflict ``in_progress``
        while a kiosk request on any daemon holds the key. Two daemons admitting one
        key at once meet at the key's UNIQUE constraint: one inserts, the other waits
        for that commit and finds the row."""

        def first(tx: Tx) -> tuple[str, dict[str, Any]]:
            return "admit_job", {**new.__dict__, "job_id": new_id("job", new.created_at),
                                 "now": tx.now, "max_queue_depth": max_queue_depth,
                                 "waiting_pending": tx.waiting_pending,
                                 "admission_ms": max(0.0, (tx.now - new.created_at) * 1000.0)}

        def then(tx: Tx, rows: list[DictRow]) -> tuple[Job, bool]:
            if rows:
                job = row_job(rows[0])
                tx.event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes})
                return job, True
            row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
            if row is None and tx.one("idem_key_held", tenant=new.tenant, idem_key=new.idem_key)["held"]:
                raise in_progress()  # a kiosk request on some daemon holds the key
            if row is None:
                raise QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})
            job = row_job(row)
            if job.fingerprint != new.fingerprint or job.kind != new.kind:
                raise IdempotencyKeyReused(
                    "this idempotency key was used for a different request",
                    field="Idempotency-Key" if new.idem_key.startswith("key:") else None)
            return job, False

        return await self._write(Step(first, then, admits=True))

    @staticmethod
    def _insert_job(tx: Tx, new: NewJob, actor: str, job_id: str, now: float) -> Job:
        """A kiosk flight's job row, admitted at ``now`` (the flight's clock)."""
        row = tx.one("insert_job", **new.__dict__, job_id=job_id, now=now,
                     admission_ms=max(0.0, (now - new.created_at) * 1000.0))
        if row is None:
            # The flight holds its key (casesignd.holds), so another row with it is an
            # admission under way.
            raise in_progress()
        job = row_job(row)
        tx.event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes})
        return job

    # --- the kiosk path: one write per request --------------------------------------

    async def lookup_key(self, tenant: str, idem_key: str, sig_key: str
                         ) -> tuple[Job | None, dict[str, Any] | None]:
        """One read for a kiosk request: the job ``idem_key`` names, else (None, the
        signature recorded for ``sig_key``, if any)."""
        found = (await self._rows("kiosk_lookup", tenant=tenant, idem_key=idem_key,
                                  sig_key=sig_key))[0]
        if found["job_id"] is not None:
            rows = await self._rows("get_job_any", job_id=found["job_id"])
            return row_job(rows[0]), None
        if found["artifact_id"] is None:
            return None, None
        return None, {k: found[k] for k in ("artifact_id", "sha256", "size")}

    async def record_flight(self, flight: Flight) -> Job | None:
        """Write a kiosk request's whole job in one transaction (see SqliteStore)."""

        def op(tx: Tx) -> Job | None:
            outcome = flight.outcome
            if isinstance(outcome, Finish) and not flight.persisted:
                return self._flight_succeeded(tx, flight, outcome)
            row = tx.one("get_job_any", job_id=flight.job_id) if flight.persisted else None
            job = row_job(row) if row is not None else self._flight_job(tx, flight)
            return self._conclude_op(job.lease, outcome)(tx)

        return await self._write(op)

    async def persist_flight(self, flight: Flight) -> Job:
        """Write a kiosk request's job as running (admitted and claimed)."""

        def op(tx: Tx) -> Job:
            row = tx.one("get_job_any", job_id=flight.job_id)
            return row_job(row) if row is not None else self._flight_job(tx, flight)

        flight.persisted = True  # before the write: see Flight.persisted
        return await self._write(op)

    def _flight_succeeded(self, tx: Tx, flight: Flight, outcome: Finish) -> Job:
        new = flight.new
        result = outcome.result()
        row = tx.one(
            "insert_flight_succeeded", **new.__dict__, job_id=flight.job_id,
            admitted_at=flight.admitted_at, claimed_at=flight.claimed_at, now=tx.now,
            admission_ms=max(0.0, (flight.admitted_at - new.created_at) * 1000.0),
            result=audit.canonical(result).decode())
        if row is None:
            raise in_progress()  # see _insert_job
        job = row_job(row)
        worker = f"worker:{flight.owner}"
        tx.event(job, "admitted", flight.actor,
                 {"kind": job.kind, "declared_bytes": job.declared_bytes}, attempt=0)
        tx.event(job, "claimed", worker, {"series": job.series, "path": "kiosk"})
        if outcome.signature is not None:
            job, outcome = self._sign_record(tx, job, flight.owner, outcome)
            result = outcome.result()
        tx.event(job, "succeeded", worker, {"result": result})
        if outcome.artifact is not None:
            self._put_artifact(tx, job, outcome)
        return job

    def _flight_job(self, tx: Tx, flight: Flight) -> Job:
        # The rows keep the flight's clocks; the events are dated when written.
        job = self._insert_job(tx, flight.new, flight.actor, flight.job_id, flight.admitted_at)
        # The lease runs from now: the claim's own time is the flight's.
        lease_s = flight.lease_s + max(0.0, tx.now - flight.claimed_at)
        row = tx.one("claim_job", job_id=job.job_id, owner=flight.owner,
                     now=flight.claimed_at, lease_s=lease_s)
        assert row is not None
        job = row_job(row)
        tx.event(job, "claimed", f"worker:{flight.owner}", {"series": job.series, "path": "kiosk"})
        return job

    # --- claims and leases --------------------------------------------------------------

    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None:
        """Take the lease of the oldest due queued job that fits the byte budget."""
        claimed = await self.claim_batch(owner, lease_s, budget_bytes, kinds, 1)
        return claimed[0].job if claimed else None

    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int) -> list[Claimed]:
        """Take the leases of up to ``limit`` of the oldest due queued jobs that fit the
        byte budget together, in one statement, each with the signature recorded for
        its signature key."""

        def then(tx: Tx, rows: list[DictRow]) -> list[Claimed]:
            out = []
            for row in rows:
                recorded = None
                if row["sig_artifact_id"] is not None:
                    recorded = {"tenant": row["tenant"], "sig_key": row["sig_key"]} | {
                        k: row[f"sig_{k}"] for k in _SIG}
                job = _job_of(row)
                tx.event(job, "claimed", f"worker:{owner}",
                         {"series": job.series, "queue_wait_ms": round(job.queue_wait_ms, 3)})
                out.append(Claimed(job, recorded))
            return out

        if limit <= 0:
            return []
        return await self._write(Step(lambda tx: ("claim_batch", {
            "owner": owner, "now": tx.now, "lease_s": lease_s, "budget": budget_bytes,
            "kinds": kinds, "limit": limit}), then))

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None:
        """Take the lease of one queued job by id (None when it is not queued)."""

        def op(tx: Tx) -> Job | None:
            row = tx.one("claim_job", job_id=job_id, owner=owner, now=tx.now, lease_s=lease_s)
            if row is None:
                return None
            job = row_job(row)
            tx.event(job, "claimed", f"worker:{owner}", {"series": job.series, "path": "kiosk"})
            return job

        return await self._write(op)

    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]:
        """Extend leases, in one statement; returns the ones that are no longer held."""

        def then(tx: Tx, rows: list[DictRow]) -> list[Lease]:
            held = {(r["job_id"], r["attempt"]) for r in rows}
            return [lease for lease in leases if (lease.job_id, lease.attempt) not in held]

        if not leases:
            return []
        return await self._write(Step(lambda tx: ("renew", {
            "now": tx.now, "lease_s": lease_s, "job_ids": [lease.job_id for lease in leases],
            "attempts": [lease.attempt for lease in leases],
            "owners": [lease.owner for lease in leases]}), then))

    def _fenced(self, name: str, lease: Lease, event: str, detail: dict[str, Any],
                params: Callable[[Tx], dict[str, Any]] = lambda tx: {}) -> Step:
        """The update of a running job that ends its attempt, fenced on its lease."""

        def then(tx: Tx, rows: list[DictRow]) -> Job | None:
            if not rows:
                self._stale(tx, lease, event)
                return None
            job = row_job(rows[0])
            tx.event(job, event, f"worker:{lease.owner}", detail)
            return job

        return Step(lambda tx: (name, {"job_id": lease.job_id, "attempt": lease.attempt,
                                       "owner": lease.owner, "now": tx.now, **params(tx)}), then)

    @staticmethod
    def _stale(tx: Tx, lease: Lease, wanted: str) -> None:
        """A stale worker: its lease expired and the job moved on. The lost attempt is
        recorded against the job, and its result dropped."""
        cur = tx.one("get_job_any", job_id=lease.job_id)
        if cur is not None:
            tx.event(row_job(cur), "stale_result_dropped", f"worker:{lease.owner}",
                     {"wanted": wanted}, attempt=lease.attempt)

    # --- outcomes -------------------------------------------------------------------------

    async def conclude(self, lease: Lease, outcome: Outcome) -> Job | None:
        """End an attempt with ``outcome``, fenced on its lease (see SqliteStore.conclude)."""
        return await self._write(self._conclude_op(lease, outcome))

    def _conclude_op(self, lease: Lease, outcome: Outcome) -> Op:
        if isinstance(outcome, Finish):
            if outcome.signature is not None:
                # It records a signature that a claim later in the batch may read: it
                # runs alone, not sent ahead (Step).
                return lambda tx: self._finish(tx, lease, outcome, None)
            return Step(lambda tx: ("finish", {
                "job_id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner,
                "now": tx.now, "result": audit.canonical(outcome.result()).decode()}),
                lambda tx, rows: self._finish(tx, lease, outcome, rows))
        if isinstance(outcome, RetryLater):
            detail = {**outcome.detail, "code": outcome.code, "delay_s": round(outcome.delay_s, 3)}
            if not outcome.counts:
                detail["waiting"] = True
            retry = outcome
            return self._fenced("retry_later", lease, "retry_scheduled", detail,
                                lambda tx: {"code": retry.code, "next_at": tx.now + retry.delay_s,
                                            "count": 1 if retry.counts else 0})
        failed = outcome
        return self._fenced("fail", lease, "failed",
                            {**outcome.detail, "category": outcome.category, "code": outcome.code},
                            lambda tx: {"category": failed.category, "code": failed.code})

    def _finish(self, tx: Tx, lease: Lease, outcome: Finish, rows: list[DictRow] | None) -> Job | None:
        """running → succeeded (``rows``: the finish statement's, when sent ahead)."""
        result = outcome.result()
        if rows is None:
            row = tx.one("finish", job_id=lease.job_id, attempt=lease.attempt, owner=lease.owner,
                         now=tx.now, result=audit.canonical(result).decode())
        else:
            row = rows[0] if rows else None
        if row is None:
            self._stale(tx, lease, "succeeded")
            return None
        job = row_job(row)
        if outcome.signature is not None:
            job, outcome = self._sign_record(tx, job, lease.owner, outcome)
            result = outcome.result()
        tx.event(job, "succeeded", f"worker:{lease.owner}", {"result": result})
        if outcome.artifact is not None:
            self._put_artifact(tx, job, outcome)
        return job

    def _sign_record(self, tx: Tx, job: Job, owner: str, outcome: Finish) -> tuple[Job, Finish]:
        """Record the signature of ``outcome`` for ``job`` (its bytes first, when kept
        here); the job and the finish, both naming the recorded signature."""
        sig = outcome.signature
        assert sig is not None
        if sig.inline is not None:
            tx.run("put_artifact_data", artifact_id=sig.artifact.artifact_id, data=sig.inline)
        record = self._record_signature(tx, msgspec.structs.replace(job, lease_owner=owner),
                                        sig.sig_key, sig.artifact.record(), sig.signed)
        named = outcome.naming(record)
        if named is None:
            return job, outcome
        # Recorded before: the result names that record.
        row = tx.one("set_result", job_id=job.job_id, result=audit.canonical(named.result()).decode())
        assert row is not None
        return row_job(row), named

    @staticmethod
    def _put_artifact(tx: Tx, job: Job, outcome: Finish) -> None:
        artifact = outcome.artifact
        assert artifact is not None
        tx.run("put_artifact", artifact_id=artifact.artifact_id, sha256=artifact.sha256,
               size=artifact.size, media_type=artifact.media_type, tenant=job.tenant,
               job_id=job.job_id, now=tx.now,
               timestamp_expires_at=artifact.timestamp_expires_at)
        if outcome.renews is not None:
            tx.run("mark_renewed", artifact_id=outcome.renews, tenant=job.tenant,
                   renewed_by=artifact.artifact_id)

    async def due_renewals(self, before: float, limit: int) -> list[tuple[str, str, float]]:
        """(artifact id, tenant, expiry) of B-LTA artifacts not renewed yet whose last
        timestamp's chain expires before ``before``, soonest first."""
        rows = await self._rows("due_renewals", before=before, limit=limit)
        return [(r["artifact_id"], r["tenant"], r["timestamp_expires_at"]) for r in rows]

    async def release(self, lease: Lease) -> Job | None:
        """running → queued at shutdown, so that a restart resumes the job at once."""
        return await self._write(self._fenced("release", lease, "released", {}))

    async def reclaim_expired(self, *, max_lost: int, at_start_of: str | None = None) -> list[Job]:
        """Requeue running jobs whose lease expired. At the start-up of node
        ``at_start_of``, also every job that node's leases hold: the node lock
        (:meth:`open`) says no live daemon of that name has them. Other nodes' leases
        are theirs until they expire. A job that lost ``max_lost`` leases fails as
        ``lost``. One statement, which skips the jobs another transaction holds: any
        daemon may run it at any time."""
        everything = at_start_of is not None
        prefix = f"{at_start_of}:" if everything else None

        def op(tx: Tx) -> list[Job]:
            rows = tx.all("reclaim", now=tx.now, max_lost=max_lost, node_prefix=prefix,
                          cap=None if everything else SWEEP_CAP)
            rows.sort(key=(lambda r: r["job_id"]) if everything
                      else (lambda r: (r["old_expires"], r["job_id"])))
            out = []
            for row in rows:
                job = _job_of(row)
                tx.event(job, "lease_expired", "system",
                         {"owner": row["old_owner"], "lost_leases": job.lost_leases,
                          "at_start": everything}, attempt=job.attempt)
                if row["lost_out"]:
                    tx.event(job, "failed", "system", {"category": "lost", "code": "lease_lost"})
                out.append(job)
            return out

        return await self._write(op)

    async def promote_due(self) -> list[Job]:
        """retry_wait → queued for jobs whose backoff has passed."""

        def op(tx: Tx) -> list[Job]:
            rows = tx.all("promote_due", now=tx.now, cap=SWEEP_CAP)
            jobs = sorted((row_job(r) for r in rows), key=lambda j: (j.next_attempt_at, j.job_id))
            for job in jobs:
                tx.event(job, "requeued", "system", {})
            return jobs

        return await self._write(op)

    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job:
        def op(tx: Tx) -> Job:
            row = tx.one("cancel", job_id=job_id, tenant=tenant, now=tx.now)
            if row is None:
                if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
                    raise NotFound("no such job", code="job_not_found")
                raise Conflict("only a queued job that no worker holds can be canceled",
                               code="not_cancelable")
            job = _job_of(row)
            tx.event(job, "canceled", actor, {})
            return job

        return await self._write(op)

    async def replay(self, tenant: str, job_id: str, actor: str) -> Job:
        def op(tx: Tx) -> Job:
            row = tx.one("replay", job_id=job_id, tenant=tenant, now=tx.now)
            if row is None:
                if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
                    raise NotFound("no such job", code="job_not_found")
                raise Conflict("only a failed job can be retried", code="not_failed")
            job = row_job(row)
            tx.event(job, "replayed", actor, {"series": job.series})
            return job

        return await self._write(op)

    # --- events and signatures --------------------------------------------------------------

    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None:
        """An event that changes no state (e.g. ``signed``), chained like the others."""

        def op(tx: Tx) -> None:
            tx.event(job, type, actor, detail)

        await self._write(op)

    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the signature for ``sig_key`` once, across every daemon; the recorded
        one wins (see SqliteStore.record_signature)."""
        return await self._write(lambda tx: self._record_signature(tx, job, sig_key, artifact, signed))

    @staticmethod
    def _record_signature(tx: Tx, job: Job, sig_key: str, artifact: dict[str, Any],
                                signed: dict[str, Any] | None) -> dict[str, Any]:
        params = {"tenant": job.tenant, "sig_key": sig_key, "artifact_id": artifact["artifact_id"],
                  "sha256": artifact["sha256"], "size": artifact["size"], "job_id": job.job_id,
                  "now": tx.now}
        if not tx.run("put_signature", **params):  # recorded before: that record stands
            row = tx.one("get_signature", tenant=job.tenant, sig_key=sig_key)
            assert row is not None
            return dict(row)
        row = {k: v for k, v in params.items() if k != "now"} | {"created_at": tx.now}
        tx.event(job, "signature_recorded", f"worker:{job.lease_owner}",
                 {"artifact_id": row["artifact_id"], "sha256": row["sha256"],
                  "sig_key": hashlib.sha256(sig_key.encode()).hexdigest()})
        if signed is not None:
            tx.event(job, "signed", f"worker:{job.lease_owner}",
                     {**signed, "artifact_id": row["artifact_id"], "sha256": row["sha256"]})
        return row

    async def ping(self) -> None:
        """A write round trip: raises StoreUnavailable when the store cannot take writes
        (unreachable, or a standby that is read-only)."""

        def op(tx: Tx) -> bool:
            row = tx.one("writable")
            return bool(row and row["in_recovery"])

        if await self._write(op):
            raise StoreUnavailable("the job store is read-only (a standby)",
                                   detail={"reason": "read_only"})
        if self.node is not None and not await self._holds_node():
            # The session that held the node's name ended (the server restarted, the
            # network broke): take the name again, or say that another daemon has it.
            await self._unlock_node()
            await self._lock_node(self.node)

    async def _holds_node(self) -> bool:
        lock = self._node_lock
        if lock is None or lock.closed:
            return False
        try:
            await lock.execute("SELECT 1")  # a session ended by the server shows only in use
        except psycopg.Error:
            return False
        return True

    # --- reads -----------------------------------------------------------------------

    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None:
        rows = await self._rows("get_signature", tenant=tenant, sig_key=sig_key)
        return dict(rows[0]) if rows else None

    async def get_job(self, tenant: str, job_id: str) -> Job | None:
        rows = await self._rows("get_job", tenant=tenant, job_id=job_id)
        return row_job(rows[0]) if rows else None

    async def list_jobs(
        self, tenant: str, states: list[str] | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """Newest first; the cursor is the last job id of the previous page."""
        cursor = cursor or "job_~"  # "~" sorts after every hex digit (byte order below)
        if states:
            rows = await self._rows("list_jobs_state", tenant=tenant, cursor=cursor,
                                    limit=limit + 1, states=states)
        else:
            rows = await self._rows("list_jobs", tenant=tenant, cursor=cursor, limit=limit + 1)
        jobs = [row_job(r) for r in rows[:limit]]
        nxt = jobs[-1].job_id if len(rows) > limit else None
        return jobs, nxt

    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]:
        rows = await self._rows("job_events", tenant=tenant, job_id=job_id)
        out = []
        for r in rows:
            ev = {k: r[k] for k in audit.FIELDS}
            ev["detail"] = msgspec.json.decode(ev["detail"])
            out.append(ev)
        return out

    async def all_events(self) -> list[dict[str, Any]]:
        """Every event as stored (detail as canonical JSON), in chain order: what
        :func:`casesignd.audit.verify_rows` checks (:func:`casesignd.audit.verify_postgres`
        streams a large chain instead)."""
        return [dict(r) for r in await self._rows("all_events")]

    async def artifact_data(self, artifact_id: str) -> bytes | None:
        """The bytes of an artifact kept in the store (None: it is a file, or unknown)."""
        rows = await self._rows("get_artifact_data", artifact_id=artifact_id)
        return bytes(rows[0]["data"]) if rows else None

    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        rows = await self._rows("get_artifact", artifact_id=artifact_id)
        return dict(rows[0]) if rows else None

    async def stats(self) -> dict[str, Any]:
        counts = {r["state"]: int(r["n"]) for r in await self._rows("state_counts")}
        (row,) = await self._rows("oldest_queued")
        now = self.clock() if self.clock is not None else row["now"]
        oldest = row["oldest"]
        return {"states": counts, "oldest_queued_age_s": max(0.0, now - oldest) if oldest else 0.0}
