"""The verbs both SQL stores share, written once: :class:`SqlStore`, which
:class:`~.sqlite.SqliteStore` and :class:`~.postgres.PostgresStore` extend, and the
transactions it runs, over the :class:`~.tx.Tx` each writer offers. A verb names its
statements; each engine's queries.sql maps a name to its own SQL (a claim that skips
locked rows, a conflict that inserts nothing), with one meaning.

What differs stays with each engine: connections and locks, the admission, the claim
and the renewal (the hot ones, a single pipelined statement on PostgreSQL), which
jobs a sweep takes, ``ping`` and ``stats``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from casesignd.core import audit
from casesignd.core.errors import Conflict, NotFound, QueueFull, TransientJobError
from casesignd.core.hashing import sha256_hex
from casesignd.core.keyring import NO_KEYS, Keyring, KeyUnavailable
from casesignd.core.outcomes import Finish, Outcome, RetryLater
from casesignd.core.sealed import SealBroken
from casesignd.store.claims import ClaimVerbs
from casesignd.store.data_keys import DataKeyVerbs, keep_data_key, seal_inline, unseal_inline
from casesignd.store.lifecycle import LifecycleVerbs
from casesignd.store.outbox import OutboxVerbs
from casesignd.store.records import (
    Activity,
    Claimed,
    Flight,
    IdempotencyKeyReused,
    Job,
    Lease,
    NewJob,
    in_progress,
    not_cancelable,
    not_failed,
    row_job,
)
from casesignd.store.tenants import TenantVerbs, check_waiting
from casesignd.store.tx import Op, Row, Step, Tx

if TYPE_CHECKING:
    from casesignd.store.groupcommit import GroupCommit


def job_of(row: Row) -> Job:
    """The job in a row that carries more than the job's columns."""
    return Job(**{k: row[k] for k in Job.__struct_fields__})


# --- admission ------------------------------------------------------------------------


def same_request(row: Row, new: NewJob) -> tuple[Job, bool]:
    """(the job an earlier request with ``new``'s key made, False); raises
    IdempotencyKeyReused when that request was a different one."""
    job = row_job(row)
    if job.fingerprint != new.fingerprint or job.kind != new.kind:
        raise IdempotencyKeyReused(
            "this idempotency key was used for a different request",
            field="Idempotency-Key" if new.idem_key.startswith("key:") else None)
    return job, False


def queue_full() -> QueueFull:
    return QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})


def admitted(tx: Tx, job: Job, actor: str, attempt: int | None = None) -> Job:
    tx.event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes},
             attempt=attempt)
    return job


def insert_job(tx: Tx, new: NewJob, actor: str, job_id: str, now: float) -> Job:
    """The job row, admitted at ``now`` (the kiosk path gives its own clock). Only a
    kiosk flight inserts without a lookup; its key is held (casesignd.engine.reservations), so
    another row with the key is an admission under way."""
    row = tx.insert("insert_job", **new.__dict__, job_id=job_id, now=now,
                    admission_ms=max(0.0, (now - new.created_at) * 1000.0))
    if row is None:
        raise in_progress()
    return admitted(tx, row_job(row), actor)


# --- the kiosk path: one write per request --------------------------------------------


def record_flight(tx: Tx, flight: Flight) -> Job | None:
    """A kiosk request's whole job, when done (see SqlStore.record_flight)."""
    outcome = flight.outcome
    if isinstance(outcome, Finish) and not flight.persisted:
        return _flight_succeeded(tx, flight, outcome)
    row = tx.one("get_job_any", job_id=flight.job_id) if flight.persisted else None
    job = row_job(row) if row is not None else _flight_job(tx, flight)
    return conclude_op(job.lease, outcome)(tx)


def persist_flight(tx: Tx, flight: Flight) -> Job:
    """A kiosk request's job, written as running (see SqlStore.persist_flight)."""
    row = tx.one("get_job_any", job_id=flight.job_id)
    return row_job(row) if row is not None else _flight_job(tx, flight)


def _flight_succeeded(tx: Tx, flight: Flight, outcome: Finish) -> Job:
    """The common case at once: the row that an admission, a claim and a finish
    leave (insert_job, claim_job, finish), in one statement, and their events."""
    new = flight.new
    result = outcome.result()
    row = tx.insert(
        "insert_flight_succeeded", **new.__dict__, job_id=flight.job_id,
        admitted_at=flight.admitted_at, claimed_at=flight.claimed_at, now=tx.now,
        admission_ms=max(0.0, (flight.admitted_at - new.created_at) * 1000.0),
        result=audit.canonical(result).decode())
    if row is None:
        raise in_progress()  # see insert_job
    job = admitted(tx, row_job(row), flight.actor, attempt=0)
    worker = f"worker:{flight.owner}"
    tx.event(job, "claimed", worker, {"series": job.series, "path": "kiosk"})
    if outcome.signature is not None:
        job, outcome = _sign_record(tx, job, flight.owner, outcome)
        result = outcome.result()
    tx.event(job, "succeeded", worker, {"result": result})
    if outcome.artifact is not None:
        _put_artifact(tx, job, outcome)
    return job


def _flight_job(tx: Tx, flight: Flight) -> Job:
    # The rows keep the flight's clocks; the events are dated when written.
    # The flight holds its key (reserve), so no job row names it: no lookup.
    job = insert_job(tx, flight.new, flight.actor, flight.job_id, flight.admitted_at)
    # The lease runs from now: the claim's own time is the flight's.
    lease_s = flight.lease_s + max(0.0, tx.now - flight.claimed_at)
    claimed = claim_job(tx, job.job_id, flight.owner, lease_s, now=flight.claimed_at)
    assert claimed is not None
    return claimed


# --- claims ---------------------------------------------------------------------------


def claimed(tx: Tx, job: Job, owner: str) -> Job:
    tx.event(job, "claimed", f"worker:{owner}",
             {"series": job.series, "queue_wait_ms": round(job.queue_wait_ms, 3)})
    return job


def claim_job(tx: Tx, job_id: str, owner: str, lease_s: float,
              now: float | None = None) -> Job | None:
    """Take the lease of one queued job by id, at ``now`` (the transaction's unless
    given): None when it is not queued."""
    row = tx.one("claim_job", job_id=job_id, owner=owner,
                 now=tx.now if now is None else now, lease_s=lease_s)
    if row is None:
        return None
    job = row_job(row)
    tx.event(job, "claimed", f"worker:{owner}", {"series": job.series, "path": "kiosk"})
    return job


# --- the end of an attempt ------------------------------------------------------------


def conclude_op(lease: Lease, outcome: Outcome) -> Op:
    """The operation that ends an attempt with ``outcome``, fenced on its lease."""
    if isinstance(outcome, Finish):
        if outcome.signature is not None:
            # It records a signature that a claim later in the batch may read: it
            # runs alone, not sent ahead (Step).
            return lambda tx: _finish(tx, lease, outcome, None)
        return Step(lambda tx: ("finish", {
            "job_id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner,
            "now": tx.now, "result": audit.canonical(outcome.result()).decode()}),
            lambda tx, rows: _finish(tx, lease, outcome, rows))
    if isinstance(outcome, RetryLater):
        detail = {**outcome.detail, "code": outcome.code, "delay_s": round(outcome.delay_s, 3)}
        if not outcome.counts:
            detail["waiting"] = True
        retry = outcome
        return fenced("retry_later", lease, "retry_scheduled", detail,
                      lambda tx: {"code": retry.code, "next_at": tx.now + retry.delay_s,
                                  "count": 1 if retry.counts else 0})
    failed = outcome
    return fenced("fail", lease, "failed",
                  {**outcome.detail, "category": outcome.category, "code": outcome.code},
                  lambda tx: {"category": failed.category, "code": failed.code,
                              "result": failed.result()})


def fenced(name: str, lease: Lease, event: str, detail: dict[str, Any],
           params: Callable[[Tx], dict[str, Any]] = lambda tx: {}) -> Step[Tx]:
    """The update of a running job that ends its attempt, fenced on its lease;
    ``params``, the statement's other parameters, from the transaction."""

    def then(tx: Tx, rows: Sequence[Row]) -> Job | None:
        if not rows:
            _stale(tx, lease, event)
            return None
        job = row_job(rows[0])
        tx.event(job, event, f"worker:{lease.owner}", detail)
        return job

    return Step(lambda tx: (name, {"job_id": lease.job_id, "attempt": lease.attempt,
                                   "owner": lease.owner, "now": tx.now, **params(tx)}), then)


def _stale(tx: Tx, lease: Lease, wanted: str) -> None:
    """A stale worker: its lease expired and the job moved on. The lost attempt is
    recorded against the job, and its result dropped."""
    cur = tx.one("get_job_any", job_id=lease.job_id)
    if cur is not None:
        tx.event(row_job(cur), "stale_result_dropped", f"worker:{lease.owner}",
                 {"wanted": wanted}, attempt=lease.attempt)


def _finish(tx: Tx, lease: Lease, outcome: Finish, rows: Sequence[Row] | None) -> Job | None:
    """running → succeeded (``rows``: the finish statement's, when sent ahead)."""
    result = outcome.result()
    if rows is None:
        row = tx.one("finish", job_id=lease.job_id, attempt=lease.attempt, owner=lease.owner,
                     now=tx.now, result=audit.canonical(result).decode())
    else:
        row = rows[0] if rows else None
    if row is None:
        _stale(tx, lease, "succeeded")
        return None
    job = row_job(row)
    if outcome.signature is not None:
        job, outcome = _sign_record(tx, job, lease.owner, outcome)
        result = outcome.result()
    tx.event(job, "succeeded", f"worker:{lease.owner}", {"result": result})
    if outcome.artifact is not None:
        _put_artifact(tx, job, outcome)
    return job


def _sign_record(tx: Tx, job: Job, owner: str, outcome: Finish) -> tuple[Job, Finish]:
    """Record the signature of ``outcome`` for ``job`` (its bytes first, when kept
    here); the job and the finish, both naming the recorded signature."""
    sig = outcome.signature
    assert sig is not None
    if sig.inline is not None:
        # With the signature, whatever becomes of this attempt: a recorded
        # signature always has its bytes.
        key = sig.inline_key
        tx.run("put_artifact_data", artifact_id=sig.artifact.artifact_id, data=sig.inline,
               key_id=key.key_id if key is not None else None,
               wrapped_key=key.wrapped if key is not None else None)
    record = record_signature(tx, msgspec.structs.replace(job, lease_owner=owner),
                              sig.sig_key, sig.artifact.record(), sig.signed)
    named = outcome.naming(record)
    if named is None:
        return job, outcome
    # Recorded before: the result names that record.
    row = tx.one("set_result", job_id=job.job_id, result=audit.canonical(named.result()).decode())
    assert row is not None
    return row_job(row), named


def _put_artifact(tx: Tx, job: Job, outcome: Finish) -> None:
    artifact = outcome.artifact
    assert artifact is not None
    tx.run("put_artifact", artifact_id=artifact.artifact_id, sha256=artifact.sha256,
           size=artifact.size, media_type=artifact.media_type, tenant=job.tenant,
           case_id=job.case_id, job_id=job.job_id, now=tx.now, timestamp_expires_at=artifact.timestamp_expires_at)
    if artifact.data_key is not None:  # its file's key, with its record (a no-op if it stands)
        keep_data_key(tx, artifact.data_key)
    if outcome.renews is not None:
        tx.run("mark_renewed", artifact_id=outcome.renews, tenant=job.tenant,
               renewed_by=artifact.artifact_id)


def record_signature(tx: Tx, job: Job, sig_key: str, artifact: dict[str, Any],
                     signed: dict[str, Any] | None) -> dict[str, Any]:
    """The signature for ``sig_key``, recorded once (put-once by the key's UNIQUE
    constraint, across every daemon): the record that stands."""
    params = {"tenant": job.tenant, "sig_key": sig_key, "artifact_id": artifact["artifact_id"],
              "sha256": artifact["sha256"], "size": artifact["size"], "job_id": job.job_id,
              "now": tx.now}
    if not tx.run("put_signature", **params):  # recorded before: that record stands
        row = tx.one("get_signature", tenant=job.tenant, sig_key=sig_key)
        assert row is not None
        return dict(row)
    record = {k: v for k, v in params.items() if k != "now"} | {"created_at": tx.now}
    tx.event(job, "signature_recorded", f"worker:{job.lease_owner}",
             {"artifact_id": record["artifact_id"], "sha256": record["sha256"],
              "sig_key": sha256_hex(sig_key.encode())})
    if signed is not None:
        tx.event(job, "signed", f"worker:{job.lease_owner}",
                 {**signed, "artifact_id": record["artifact_id"], "sha256": record["sha256"]})
    return record


# --- sweeps and an operator's changes -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Expired:
    """A running job a reclaim took: as it now is, and what its lease was."""

    job: Job
    old_owner: str | None
    lost_out: bool  # it lost its last lease and failed as lost


def reclaimed(tx: Tx, taken: list[Expired], at_start: bool) -> list[Job]:
    """The events of the jobs a reclaim took, in the order taken."""
    for e in taken:
        tx.event(e.job, "lease_expired", "system",
                 {"owner": e.old_owner, "lost_leases": e.job.lost_leases, "at_start": at_start},
                 attempt=e.job.attempt)
        if e.lost_out:
            tx.event(e.job, "failed", "system", {"category": "lost", "code": "lease_lost"})
    return [e.job for e in taken]


def requeued(tx: Tx, jobs: list[Job]) -> list[Job]:
    """The events of the jobs a promotion took, in the order taken."""
    for job in jobs:
        tx.event(job, "requeued", "system", {})
    return jobs


def _tenant_change(tx: Tx, name: str, tenant: str, job_id: str, refused: Conflict) -> Job:
    """An operator's change of a tenant's job; NotFound, or ``refused`` when the job
    is not in a state the change applies to."""
    row = tx.one(name, job_id=job_id, tenant=tenant, now=tx.now)
    if row is None:
        if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
            raise NotFound("no such job", code="job_not_found")
        raise refused
    return job_of(row)


def cancel(tx: Tx, tenant: str, job_id: str, actor: str) -> Job:
    job = _tenant_change(tx, "cancel", tenant, job_id, not_cancelable())
    tx.event(job, "canceled", actor, {})
    return job


def replay(tx: Tx, tenant: str, job_id: str, actor: str, max_queue_depth: int,
           max_queued: int = 0) -> Job:
    """A failed job queued again, within the queue depth and the tenant's waiting
    limit (``max_queued``) as an admission is: a replay adds a waiting job as surely
    as a new one does."""
    if max_queued:
        found = tx.one("get_job", job_id=job_id, tenant=tenant)
        if found is not None and found["state"] == "failed":  # else refused below
            # In turn with the tenant's admissions on every daemon: the count holds.
            tx.one("admission_lock", tenant=tenant)
            check_waiting(tx, tenant, max_queued)
    row = tx.one("replay", job_id=job_id, tenant=tenant, now=tx.now,
                 max_queue_depth=max_queue_depth, waiting_pending=tx.waiting_pending)
    if row is None:
        found = tx.one("get_job", job_id=job_id, tenant=tenant)
        if found is None:
            raise NotFound("no such job", code="job_not_found")
        if found["state"] != "failed":
            raise not_failed()
        raise queue_full()
    job = job_of(row)
    tx.event(job, "replayed", actor, {"series": job.series})
    return job


# --- the verbs --------------------------------------------------------------------------


class SqlStore(LifecycleVerbs, OutboxVerbs, DataKeyVerbs, ClaimVerbs, TenantVerbs, abc.ABC):
    """The verbs the SQL stores share, over an engine's writer (:meth:`_write`), its
    readers (:meth:`_rows`, :meth:`_one`) and what each engine's sweeps take."""

    _writer: GroupCommit[Any]
    # The storage keys (casesignd.core.keyring): with ``encrypt`` the artifacts the
    # store keeps itself are sealed as they are written; any key in it reads them back.
    keyring: Keyring = NO_KEYS

    @abc.abstractmethod
    async def _write(self, op: Op) -> Any:
        """Run ``op`` in the writer's next transaction; its result."""

    @abc.abstractmethod
    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:
        """Every row of a reading statement."""

    async def _one(self, name: str, **params: Any) -> Sequence[Row]:
        """The rows of a lookup by key, which an engine may read more cheaply."""
        return await self._rows(name, **params)

    @staticmethod
    @abc.abstractmethod
    def _array(values: list[Any]) -> Any:
        """A list of strings or numbers as one statement parameter."""

    @abc.abstractmethod
    def _take_expired(self, tx: Any, max_lost: int, at_start_of: str | None) -> list[Expired]:
        """The running jobs a reclaim takes, requeued or failed as lost."""

    @abc.abstractmethod
    def _take_due(self, tx: Any) -> list[Job]:
        """The retry_wait jobs whose backoff has passed, queued."""

    @property
    def commit_batches(self) -> int:
        return self._writer.batches

    # --- the kiosk path: one write per request ----------------------------------------

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
        flight.outcome = self._sealed(flight.outcome)
        return await self._write(lambda tx: record_flight(tx, flight))

    async def persist_flight(self, flight: Flight) -> Job:
        """Write a kiosk request's job as running (admitted and claimed) so that it
        outlives a crash: the request passed its deadline and its work goes on."""
        flight.persisted = True  # before the write: see Flight.persisted
        return await self._write(lambda tx: persist_flight(tx, flight))

    # --- claims and the ends of attempts ----------------------------------------------

    @abc.abstractmethod
    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int, *, running_limits: dict[str, int] | None = None
                          ) -> list[Claimed]: ...

    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None:
        """Take the lease of the next due queued job that fits the byte budget: the
        tenants take turns (casesignd.store.claims)."""
        claimed = await self.claim_batch(owner, lease_s, budget_bytes, kinds, 1)
        return claimed[0].job if claimed else None

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None:
        """Take the lease of one queued job by id (None when it is not queued)."""
        return await self._write(lambda tx: claim_job(tx, job_id, owner, lease_s))

    async def conclude(self, lease: Lease, outcome: Outcome) -> Job | None:
        """End an attempt with ``outcome``, fenced on its lease: None when the lease was
        no longer held (the attempt is recorded as lost and its result dropped). A
        :class:`Finish` with a signature records the signature, its ``signed`` event
        and the result's bytes in the same transaction; when the signature key was
        recorded before, that record stands and the result names it."""
        return await self._write(conclude_op(lease, self._sealed(outcome)))

    def _sealed(self, outcome: Outcome) -> Outcome:
        """``outcome`` with its inline bytes sealed (storage encryption), else itself."""
        if (isinstance(outcome, Finish) and outcome.signature is not None
                and outcome.signature.inline is not None and self.keyring.encrypt):
            return dataclasses.replace(outcome,
                                       signature=seal_inline(self.keyring, outcome.signature))
        return outcome

    async def release(self, lease: Lease) -> Job | None:
        """running → queued at shutdown, so that a restart resumes the job at once."""
        return await self._write(fenced("release", lease, "released", {}))

    async def reclaim_expired(self, *, max_lost: int, at_start_of: str | None = None) -> list[Job]:
        """Requeue running jobs whose lease expired; at the start-up of node
        ``at_start_of``, also the jobs no live daemon holds (see each engine's
        ``_take_expired``). A job that lost ``max_lost`` leases fails as ``lost``."""
        return await self._write(lambda tx: reclaimed(
            tx, self._take_expired(tx, max_lost, at_start_of), at_start_of is not None))

    async def promote_due(self) -> list[Job]:
        """retry_wait → queued for jobs whose backoff has passed."""
        return await self._write(lambda tx: requeued(tx, self._take_due(tx)))

    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job:
        return await self._write(lambda tx: cancel(tx, tenant, job_id, actor))

    async def replay(self, tenant: str, job_id: str, actor: str, *, max_queue_depth: int,
                     max_queued: int = 0) -> Job:
        return await self._write(lambda tx: replay(tx, tenant, job_id, actor, max_queue_depth,
                                                   max_queued))

    # --- events, signatures, artifacts ------------------------------------------------

    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None:
        """An event that changes no state (e.g. ``signed``), chained like the others."""

        def op(tx: Tx) -> None:
            tx.event(job, type, actor, detail)

        await self._write(op)

    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the signature for ``sig_key`` once, across every daemon; the recorded
        one wins. With ``signed``, the ``signed`` event (that detail) is written in the
        same transaction when this call records the signature: a crash between two
        writes would leave a recorded signature that the audit trail never calls
        signed."""
        return await self._write(lambda tx: record_signature(tx, job, sig_key, artifact, signed))

    async def due_renewals(self, before: float, limit: int) -> list[tuple[str, str, float]]:
        """(artifact id, tenant, expiry) of B-LTA artifacts not renewed yet whose last
        timestamp's chain expires before ``before``, soonest first."""
        rows = await self._rows("due_renewals", before=before, limit=limit)
        return [(r["artifact_id"], r["tenant"], r["timestamp_expires_at"]) for r in rows]

    # --- reads ------------------------------------------------------------------------

    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None:
        rows = await self._one("get_signature", tenant=tenant, sig_key=sig_key)
        return dict(rows[0]) if rows else None

    async def get_job(self, tenant: str, job_id: str) -> Job | None:
        rows = await self._one("get_job", tenant=tenant, job_id=job_id)
        return row_job(rows[0]) if rows else None

    async def list_jobs(
        self, tenant: str, states: list[str] | None, limit: int, cursor: str | None,
        *, kind: str | None = None, case_id: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """Newest first; the cursor is the last job id of the previous page. ``kind``
        and ``case_id`` narrow it to the jobs of that kind, of that case."""
        cursor = cursor or "job_~"  # "~" sorts after every hex digit (in byte order)
        page = {"tenant": tenant, "cursor": cursor, "limit": limit + 1, "kind": kind}
        if case_id is not None:
            rows = await self._rows("list_jobs_case", **page, case_id=case_id,
                                    states=self._array(states) if states else None)
        elif states:
            rows = await self._rows("list_jobs_state", **page, states=self._array(states))
        else:
            rows = await self._rows("list_jobs", **page)
        jobs = [row_job(r) for r in rows[:limit]]
        nxt = jobs[-1].job_id if len(rows) > limit else None
        return jobs, nxt

    async def tenant_activity(self, tenant: str, since: float, bucket_s: float) -> Activity:
        """A tenant's jobs that wait, run or failed, and the clocks of those that
        ended since ``since`` per ``bucket_s`` (what GET /v1/stats answers)."""
        live = await self._rows("tenant_live", tenant=tenant)
        ended = await self._rows("tenant_ended", tenant=tenant, since=since, bucket_s=bucket_s)
        return Activity(
            live={r["state"]: (int(r["n"]), r["oldest"]) for r in live},
            ended=[dict(r) for r in ended])

    async def chain_tail(self, limit: int) -> list[dict[str, Any]]:
        """The chain's last ``limit`` events as stored, oldest first."""
        return [dict(r) for r in reversed(await self._rows("chain_tail", limit=limit))]

    async def tenant_recent_events(self, tenant: str, jobs: int) -> list[dict[str, Any]]:
        """The events of the tenant's ``jobs`` newest jobs as stored, in chain order."""
        return [dict(r) for r in await self._rows("tenant_recent_events", tenant=tenant,
                                                  jobs=jobs)]

    async def event_hashes(self, seqs: list[int]) -> dict[int, str]:
        """The hash of each event of ``seqs`` (those that exist)."""
        if not seqs:
            return {}
        rows = await self._rows("event_hashes", seqs=self._array(seqs))
        return {int(r["seq"]): r["hash"] for r in rows}

    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]:
        rows = await self._rows("job_events", tenant=tenant, job_id=job_id)
        out = []
        for r in rows:
            ev = {k: r[k] for k in audit.FIELDS}
            ev["detail"] = msgspec.json.decode(ev["detail"])
            out.append(ev)
        return out

    async def artifact_data(self, artifact_id: str) -> bytes | None:
        """The bytes of an artifact kept in the store (None: it is a file, or unknown);
        sealed ones unsealed, or ``io_error`` when they do not read back whole."""
        rows = await self._one("get_artifact_data", artifact_id=artifact_id)
        if not rows:
            return None
        try:
            return unseal_inline(self.keyring, artifact_id, rows[0])
        except (KeyUnavailable, SealBroken) as e:
            raise TransientJobError(f"artifact {artifact_id} cannot be read back: {e}",
                                    code="io_error") from None

    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        rows = await self._one("get_artifact", artifact_id=artifact_id)
        return dict(rows[0]) if rows else None
