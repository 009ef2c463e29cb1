"""The embedded store: one SQLite file in WAL mode.

Writes go through the writer thread (:mod:`casesignd.store.sqlite_writer`, group
commit); reads use a separate aiosqlite connection, which WAL lets run beside it.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from .. import audit
from ..errors import Conflict, NotFound, QueueFull, StoreUnavailable
from ..outcomes import Finish, Outcome, RetryLater
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
from .sqlite_writer import Checkpointer, Op, Tx, Writer

# Below this much free space on the store's file system the store reports itself
# unwritable (readiness): a commit needs room for its WAL frames (4 KiB pages).
MIN_FREE_BYTES = 256 * 1024
# How long a lookup on the event loop may wait for a lock (WAL readers take none but
# in a recovery); then it goes to the reader's thread.
POINT_BUSY_MS = 20


class SqliteStore:
    """The embedded store: one SQLite file in WAL mode."""

    def __init__(
        self, path: Path, *, busy_timeout_ms: int = 5000, clock: Callable[[], float] = time.time,
        exclusive: bool = True,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.exclusive = exclusive
        self._writer = Writer(self.path, busy_timeout_ms, clock)
        self._checkpointer = Checkpointer(self.path, busy_timeout_ms)
        self._reader: aiosqlite.Connection | None = None
        self._point: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self.q = self._writer.statements

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Take the store's lock, apply migrations, and open the reader."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.exclusive:
            # One daemon per store: it may then treat every lease it finds at start-up
            # as left behind by a dead process and reclaim it at once.
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreUnavailable(f"another casesignd process is using {self.path}") from None
            self._lock_fd = fd
        await self._writer.start(asyncio.get_running_loop())
        self._checkpointer.start()
        self._reader = await aiosqlite.connect(self.path)
        self._reader.row_factory = aiosqlite.Row
        await self._reader.execute("PRAGMA query_only = 1")
        self._point = sqlite3.connect(self.path, isolation_level=None)
        self._point.row_factory = sqlite3.Row
        self._point.execute("PRAGMA query_only = 1")
        self._point.execute(f"PRAGMA busy_timeout = {POINT_BUSY_MS}")

    async def close(self) -> None:
        if self._point is not None:
            self._point.close()
            self._point = None
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        if self._writer.thread.is_alive():
            await asyncio.to_thread(self._checkpointer.stop)
            await asyncio.to_thread(self._writer.stop)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def migrate(self) -> int:
        """Apply the migrations and stop: the schema version. Refused while a daemon
        holds the store."""
        await self.open()
        try:
            return int((await self._rows("schema_version"))[0][0])
        finally:
            await self.close()

    async def _write(self, op: Op) -> Any:
        return await self._writer.submit(op)

    async def _rows(self, name: str, **params: Any) -> list[Any]:
        assert self._reader is not None
        try:
            # One call on the reader's thread that steps the statement to the end and
            # closes it: interleaved open cursors would keep one read transaction open
            # across requests, and with it an old WAL snapshot (a just-acknowledged job
            # would read as missing).
            return list(await self._reader.execute_fetchall(self.q[name], params))
        except sqlite3.Error as e:
            raise StoreUnavailable("the job store cannot be read", detail={"sqlite": str(e)}) from e

    async def _one(self, name: str, **params: Any) -> list[Any]:
        """A lookup by key (a job, a signature, an artifact), read on the event loop:
        one indexed statement in WAL mode, which never waits for the writer, costs
        less than the two thread hand-offs of the reader. Stepped to its end, so no
        read transaction (and no old snapshot) outlives it. Anything unusual (the
        database busy in a recovery) goes to the reader instead."""
        if self._point is not None:
            try:
                return self._point.execute(self.q[name], params).fetchall()
            except sqlite3.Error:
                pass
        return await self._rows(name, **params)

    @property
    def commit_batches(self) -> int:
        return self._writer.batches

    # --- writes ----------------------------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """Store a job durably, or return the job an identical request made before.

        Returns (job, created). Raises IdempotencyKeyReused when the key was used for
        a different request, QueueFull past the queue depth."""
        return await self._write(lambda tx: self._admit(tx, new, actor, max_queue_depth))

    def _admit(self, tx: Tx, new: NewJob, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """The admission itself."""
        row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
        if row is not None:
            job = row_job(row)
            if job.fingerprint != new.fingerprint or job.kind != new.kind:
                raise IdempotencyKeyReused(
                    "this idempotency key was used for a different request",
                    field="Idempotency-Key" if new.idem_key.startswith("key:") else None,
                )
            return job, False
        depth = tx.conn.execute(tx.q["queue_depth"]).fetchone()[0]
        if depth >= max_queue_depth:
            raise QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})
        return self._insert_job(tx, new, actor, new_id("job", new.created_at), tx.now), True

    @staticmethod
    def _insert_job(tx: Tx, new: NewJob, actor: str, job_id: str, now: float) -> Job:
        """The job row, admitted at ``now`` (the kiosk path gives its own clock)."""
        admission_ms = max(0.0, (now - new.created_at) * 1000.0)
        params = {**new.__dict__, "job_id": job_id, "now": now, "admission_ms": admission_ms}
        try:
            job = row_job(tx.one("insert_job", **params))
        except sqlite3.IntegrityError:
            # Only a kiosk flight inserts without a lookup; its key is held, so another
            # row with the key is an admission under way.
            raise in_progress() from None
        tx.event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes})
        return job

    # --- the kiosk path: one write per request --------------------------------------

    async def lookup_key(self, tenant: str, idem_key: str, sig_key: str
                         ) -> tuple[Job | None, dict[str, Any] | None]:
        """One read for a kiosk request: the job ``idem_key`` names, else (None, the
        signature recorded for ``sig_key``, if any)."""
        found = (await self._one("kiosk_lookup", tenant=tenant, idem_key=idem_key,
                                 sig_key=sig_key))[0]
        if found["job_id"] is not None:
            rows = await self._one("get_job_any", job_id=found["job_id"])
            return row_job(rows[0]), None
        if found["artifact_id"] is None:
            return None, None
        return None, {k: found[k] for k in ("artifact_id", "sha256", "size")}

    async def record_flight(self, flight: Flight) -> Job | None:
        """Write a kiosk request's whole job in one transaction: admitted, claimed, the
        signature (if any) and its outcome, with the same rows and events as a queued
        job and the flight's own clocks. A job :meth:`persist_flight` wrote earlier is
        carried on instead. None when its lease was lost meanwhile."""

        def op(tx: Tx) -> Job | None:
            outcome = flight.outcome
            if isinstance(outcome, Finish) and not flight.persisted:
                return self._flight_succeeded(tx, flight, outcome)
            row = tx.one("get_job_any", job_id=flight.job_id) if flight.persisted else None
            job = row_job(row) if row is not None else self._flight_job(tx, flight)
            return self._conclude_op(job.lease, outcome)(tx)

        return await self._write(op)

    async def persist_flight(self, flight: Flight) -> Job:
        """Write a kiosk request's job as running (admitted and claimed) so that it
        outlives a crash: the request passed its deadline and its work goes on."""

        def op(tx: Tx) -> Job:
            row = tx.one("get_job_any", job_id=flight.job_id)
            return row_job(row) if row is not None else self._flight_job(tx, flight)

        flight.persisted = True  # before the write: see Flight.persisted
        return await self._write(op)

    def _flight_succeeded(self, tx: Tx, flight: Flight, outcome: Finish) -> Job:
        """The common case at once: the row that an admission, a claim and a finish
        leave (insert_job, claim_job, finish), in one statement, and their events."""
        new = flight.new
        result = outcome.result()
        try:
            job = row_job(tx.one(
                "insert_flight_succeeded", **new.__dict__, job_id=flight.job_id,
                admitted_at=flight.admitted_at, claimed_at=flight.claimed_at, now=tx.now,
                admission_ms=max(0.0, (flight.admitted_at - new.created_at) * 1000.0),
                result=audit.canonical(result).decode()))
        except sqlite3.IntegrityError:
            raise in_progress() from None  # see _insert_job
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
        # The flight holds its key (reserve), so no job row names it: no lookup.
        job = self._insert_job(tx, flight.new, flight.actor, flight.job_id, flight.admitted_at)
        # The lease runs from now: the claim's own time is the flight's.
        lease_s = flight.lease_s + max(0.0, tx.now - flight.claimed_at)
        job = row_job(tx.one("claim_job", job_id=job.job_id, owner=flight.owner,
                          now=flight.claimed_at, lease_s=lease_s))
        tx.event(job, "claimed", f"worker:{flight.owner}", {"series": job.series, "path": "kiosk"})
        return job

    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None:
        """Take the lease of the oldest due queued job that fits the byte budget."""
        claimed = await self.claim_batch(owner, lease_s, budget_bytes, kinds, 1)
        return claimed[0].job if claimed else None

    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int) -> list[Claimed]:
        """Take the leases of up to ``limit`` of the oldest due queued jobs that fit the
        byte budget together, in one transaction, each with the signature recorded for
        its signature key."""
        kinds_json = msgspec.json.encode(kinds).decode()

        def op(tx: Tx) -> list[Claimed]:
            out: list[Claimed] = []
            budget = budget_bytes
            while len(out) < limit:
                row = tx.one("claim_one", owner=owner, now=tx.now, lease_s=lease_s,
                             budget=budget, kinds=kinds_json)
                if row is None:
                    break
                job = row_job(row)
                budget -= job.declared_bytes
                tx.event(job, "claimed", f"worker:{owner}",
                         {"series": job.series, "queue_wait_ms": round(job.queue_wait_ms, 3)})
                recorded = None
                if job.sig_key is not None:
                    sig = tx.one("get_signature", tenant=job.tenant, sig_key=job.sig_key)
                    recorded = dict(sig) if sig is not None else None
                out.append(Claimed(job, recorded))
            return out

        return await self._write(op)

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
        """Extend leases; returns the ones that are no longer held."""

        def op(tx: Tx) -> list[Lease]:
            lost = []
            for lease in leases:
                cur = tx.conn.execute(tx.q["renew"], {
                    "job_id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner,
                    "now": tx.now, "lease_s": lease_s})
                if cur.rowcount == 0:
                    lost.append(lease)
            return lost

        return await self._write(op) if leases else []

    def _fenced(self, name: str, lease: Lease, event: str, detail: dict[str, Any],
                **params: Any) -> Op:
        def op(tx: Tx) -> Job | None:
            row = tx.one(name, job_id=lease.job_id, attempt=lease.attempt, owner=lease.owner,
                         now=tx.now, **params)
            if row is None:
                self._stale(tx, lease, event)
                return None
            job = row_job(row)
            tx.event(job, event, f"worker:{lease.owner}", detail)
            return job
        return op

    @staticmethod
    def _stale(tx: Tx, lease: Lease, wanted: str) -> None:
        """A stale worker: its lease expired and the job moved on. The lost attempt is
        recorded against the job, and its result dropped."""
        cur = tx.one("get_job_any", job_id=lease.job_id)
        if cur is not None:
            tx.event(row_job(cur), "stale_result_dropped", f"worker:{lease.owner}",
                     {"wanted": wanted}, attempt=lease.attempt)

    async def conclude(self, lease: Lease, outcome: Outcome) -> Job | None:
        """End an attempt with ``outcome``, fenced on its lease: None when the lease was
        no longer held (the attempt is recorded as lost and its result dropped). A
        :class:`Finish` with a signature records the signature, its ``signed`` event
        and the result's bytes in the same transaction; when the signature key was
        recorded before, that record stands and the result names it."""
        return await self._write(self._conclude_op(lease, outcome))

    def _conclude_op(self, lease: Lease, outcome: Outcome) -> Op:
        if isinstance(outcome, Finish):
            return lambda tx: self._finish(tx, lease, outcome)
        if isinstance(outcome, RetryLater):
            detail = {**outcome.detail, "code": outcome.code, "delay_s": round(outcome.delay_s, 3)}
            if not outcome.counts:
                detail["waiting"] = True

            def retry(tx: Tx) -> Job | None:
                return self._fenced("retry_later", lease, "retry_scheduled", detail,
                                    code=outcome.code, next_at=tx.now + outcome.delay_s,
                                    count=1 if outcome.counts else 0)(tx)

            return retry
        return self._fenced("fail", lease, "failed",
                            {**outcome.detail, "category": outcome.category, "code": outcome.code},
                            category=outcome.category, code=outcome.code)

    def _finish(self, tx: Tx, lease: Lease, outcome: Finish) -> Job | None:
        result = outcome.result()
        row = tx.one("finish", job_id=lease.job_id, attempt=lease.attempt, owner=lease.owner,
                     now=tx.now, result=audit.canonical(result).decode())
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
            # With the signature, whatever becomes of this attempt: a recorded
            # signature always has its bytes.
            tx.conn.execute(tx.q["put_artifact_data"], {
                "artifact_id": sig.artifact.artifact_id, "data": sig.inline})
        record = self._record_signature(tx, msgspec.structs.replace(job, lease_owner=owner),
                                        sig.sig_key, sig.artifact.record(), sig.signed)
        named = outcome.naming(record)
        if named is None:
            return job, outcome
        # Recorded before: the result names that record.
        job = row_job(tx.one("set_result", job_id=job.job_id,
                             result=audit.canonical(named.result()).decode()))
        return job, named

    @staticmethod
    def _put_artifact(tx: Tx, job: Job, outcome: Finish) -> None:
        artifact = outcome.artifact
        assert artifact is not None
        tx.conn.execute(tx.q["put_artifact"], {
            "artifact_id": artifact.artifact_id, "sha256": artifact.sha256, "size": artifact.size,
            "media_type": artifact.media_type, "tenant": job.tenant, "job_id": job.job_id,
            "now": tx.now, "timestamp_expires_at": artifact.timestamp_expires_at})
        if outcome.renews is not None:
            tx.conn.execute(tx.q["mark_renewed"], {
                "artifact_id": outcome.renews, "tenant": job.tenant,
                "renewed_by": artifact.artifact_id})

    async def due_renewals(self, before: float, limit: int) -> list[tuple[str, str, float]]:
        """(artifact id, tenant, expiry) of B-LTA artifacts not renewed yet whose last
        timestamp's chain expires before ``before``, soonest first."""
        rows = await self._rows("due_renewals", before=before, limit=limit)
        return [(r["artifact_id"], r["tenant"], r["timestamp_expires_at"]) for r in rows]

    async def release(self, lease: Lease) -> Job | None:
        """running → queued at shutdown, so that a restart resumes the job at once."""
        return await self._write(self._fenced("release", lease, "released", {}))

    async def reclaim_expired(self, *, max_lost: int, at_start_of: str | None = None) -> list[Job]:
        """Requeue running jobs whose lease expired (or, at the start-up of node
        ``at_start_of``, every running job: under the store lock no other daemon runs).
        A job that lost ``max_lost`` leases fails as ``lost``."""
        everything = at_start_of is not None

        def op(tx: Tx) -> list[Job]:
            rows = tx.all("all_running") if everything else tx.all("expired_leases", now=tx.now, cap=500)
            out = []
            for row in rows:
                old = row_job(row)
                lost_out = old.lost_leases + 1 >= max_lost
                name = "fail_lost" if lost_out else "reclaim"
                new_row = tx.one(name, job_id=old.job_id, attempt=old.attempt, now=tx.now)
                if new_row is None:
                    continue
                job = row_job(new_row)
                tx.event(job, "lease_expired", "system",
                         {"owner": old.lease_owner, "lost_leases": job.lost_leases,
                          "at_start": everything}, attempt=old.attempt)
                if lost_out:
                    tx.event(job, "failed", "system", {"category": "lost", "code": "lease_lost"})
                out.append(job)
            return out

        return await self._write(op)

    async def promote_due(self) -> list[Job]:
        """retry_wait → queued for jobs whose backoff has passed."""

        def op(tx: Tx) -> list[Job]:
            out = []
            for row in tx.all("due_retries", now=tx.now, cap=500):
                new_row = tx.one("requeue", job_id=row["job_id"], now=tx.now)
                if new_row is not None:
                    job = row_job(new_row)
                    tx.event(job, "requeued", "system", {})
                    out.append(job)
            return out

        return await self._write(op)

    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job:
        def op(tx: Tx) -> Job:
            row = tx.one("cancel", job_id=job_id, tenant=tenant, now=tx.now)
            if row is None:
                if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
                    raise NotFound("no such job", code="job_not_found")
                raise Conflict("only a queued job that no worker holds can be canceled",
                               code="not_cancelable")
            job = row_job(row)
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

    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None:
        """An event that changes no state (e.g. ``signed``), chained like the others."""
        await self._write(lambda tx: tx.event(job, type, actor, detail))

    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the signature for ``sig_key`` once; the recorded one wins. With
        ``signed``, the ``signed`` event (that detail) is written in the same
        transaction when this call records the signature: a crash between two writes
        would leave a recorded signature that the audit trail never calls signed."""

        return await self._write(lambda tx: self._record_signature(tx, job, sig_key, artifact, signed))

    @staticmethod
    def _record_signature(tx: Tx, job: Job, sig_key: str, artifact: dict[str, Any],
                          signed: dict[str, Any] | None) -> dict[str, Any]:
        params = {"tenant": job.tenant, "sig_key": sig_key, "artifact_id": artifact["artifact_id"],
                  "sha256": artifact["sha256"], "size": artifact["size"], "job_id": job.job_id,
                  "now": tx.now}
        inserted = tx.conn.execute(tx.q["put_signature"], params).rowcount
        if not inserted:  # recorded before: that record stands
            return dict(tx.one("get_signature", tenant=job.tenant, sig_key=sig_key))
        row = {k: v for k, v in params.items() if k != "now"} | {"created_at": tx.now}
        tx.event(job, "signature_recorded", f"worker:{job.lease_owner}",
                 {"artifact_id": row["artifact_id"], "sha256": row["sha256"],
                  "sig_key": hashlib.sha256(sig_key.encode()).hexdigest()})
        if signed is not None:
            tx.event(job, "signed", f"worker:{job.lease_owner}",
                     {**signed, "artifact_id": row["artifact_id"], "sha256": row["sha256"]})
        return row

    async def ping(self) -> None:
        """A write round trip: raises StoreUnavailable when the store cannot take writes.

        A transaction that changes nothing writes nothing, so it still succeeds on a
        full disk while every real write fails: the free space of the store's file
        system is checked as well."""
        await self._write(lambda tx: tx.conn.execute("SELECT 1").fetchone())
        st = await asyncio.to_thread(os.statvfs, self.path.parent)
        if st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
            raise StoreUnavailable("the job store's disk is full",
                                   detail={"reason": "disk_full", "path": str(self.path.parent)})

    # --- reads -----------------------------------------------------------------------

    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None:
        rows = await self._one("get_signature", tenant=tenant, sig_key=sig_key)
        return dict(rows[0]) if rows else None

    async def get_job(self, tenant: str, job_id: str) -> Job | None:
        rows = await self._one("get_job", tenant=tenant, job_id=job_id)
        return row_job(rows[0]) if rows else None

    async def list_jobs(
        self, tenant: str, states: list[str] | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """Newest first; the cursor is the last job id of the previous page."""
        cursor = cursor or "job_~"  # "~" sorts after every hex digit
        if states:
            rows = await self._rows("list_jobs_state", tenant=tenant, cursor=cursor, limit=limit + 1,
                                    states=msgspec.json.encode(states).decode())
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

    async def artifact_data(self, artifact_id: str) -> bytes | None:
        """The bytes of an artifact kept in the store (None: it is a file, or unknown)."""
        rows = await self._one("get_artifact_data", artifact_id=artifact_id)
        return bytes(rows[0]["data"]) if rows else None

    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        rows = await self._one("get_artifact", artifact_id=artifact_id)
        return dict(rows[0]) if rows else None

    async def stats(self) -> dict[str, Any]:
        counts = {r["state"]: r["n"] for r in await self._rows("state_counts")}
        oldest = (await self._rows("oldest_queued"))[0][0]
        age = max(0.0, self.clock() - oldest) if oldest else 0.0
        return {"states": counts, "oldest_queued_age_s": age}

