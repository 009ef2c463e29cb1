"""The store's verbs in memory: a second implementation of :class:`Store`.

It runs the same contract tests as :class:`casesignd.store.SqliteStore`
(tests/unit/test_store_contract.py), so the protocol says what the engine relies on
rather than what one engine happens to do; tools and tests that need a store but no
file use it. Nothing survives the process.

Every verb runs to its end without awaiting, so on the event loop it is one
transaction; a verb that refuses (a reused key, a full queue) checks before it
changes anything. The audit events are chained and hashed as the SQLite store's are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from casesignd.core import audit
from casesignd.core.errors import NotFound, QueueFull
from casesignd.core.hashing import sha256_hex
from casesignd.core.keyring import WrappedKey
from casesignd.core.outcomes import Finish, Outcome, RetryLater, Signature
from casesignd.core.tenant_limits import TenantLimits
from casesignd.store.claims import MemoryClaims, Turns, claimable, take_turns
from casesignd.store.data_keys import MemoryDataKeys
from casesignd.store.memory_lifecycle import MemoryLifecycle
from casesignd.store.memory_tenants import MemoryTenants
from casesignd.store.outbox import Delivery, MemoryOutbox
from casesignd.store.records import (
    Activity,
    Claimed,
    Flight,
    IdempotencyKeyReused,
    Job,
    KeyLocks,
    Lease,
    NewJob,
    Pause,
    Subject,
    in_progress,
    new_id,
    not_cancelable,
    not_failed,
)

_WAITING = ("queued", "retry_wait")
_replace = msgspec.structs.replace


class MemoryStore(MemoryLifecycle, MemoryOutbox, MemoryDataKeys, MemoryClaims, MemoryTenants):
    """Jobs, events, signatures and artifacts in dictionaries."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._jobs: dict[str, Job] = {}
        self._idem: dict[tuple[str, str], str] = {}
        self._events: list[dict[str, Any]] = []
        self._chain: list[Any] = [0, audit.GENESIS]
        self._signatures: dict[tuple[str, str], dict[str, Any]] = {}
        self._artifacts: dict[str, dict[str, Any]] = {}
        self._data: dict[str, bytes] = {}
        self._keys: dict[str, WrappedKey] = {}
        self._key_written: dict[str, float] = {}
        self._holds: dict[tuple[str, str], float] = {}
        self._objects: dict[tuple[str, str, str], list[Any]] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._usage: dict[tuple[str, str], list[float]] = {}
        self._pauses: dict[tuple[str | None, str | None], Pause] = {}
        self.turns = Turns()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    # One daemon per store: no key needs holding across daemons.
    key_locks: KeyLocks | None = None

    def announce(self) -> None:
        """One daemon per store: its own pool is woken in-process."""

    def on_announce(self, wake: Callable[[], None]) -> None:
        """One daemon per store: nobody else announces."""

    async def ping(self) -> None:
        pass

    # --- the pieces every verb uses ---------------------------------------------------

    def _event(self, job: Subject, type: str, actor: str, detail: dict[str, Any] | None = None,
               attempt: int | None = None, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        seq = self._chain[0] + 1
        ev = {"event_id": new_id("evt", now), "seq": seq, "job_id": job.job_id,
              "tenant": job.tenant, "case_id": job.case_id, "type": type, "actor": actor,
              "at": audit.rfc3339(now), "attempt": job.attempt if attempt is None else attempt,
              "input_digest": job.input_digest, "policy_version": job.version,
              "detail": audit.canonical(detail or {}).decode(), "prev_hash": self._chain[1]}
        ev["hash"] = audit.event_hash(ev)
        self._events.append(ev)
        self._chain[:] = [seq, ev["hash"]]
        self._outbox(job, type, now)  # the webhook outbox: with the state change

    def _put(self, job: Job) -> Job:
        self._jobs[job.job_id] = job
        return job

    @staticmethod
    def _processing(job: Job, now: float) -> float:
        return job.processing_ms + max(0.0, (now - (job.claimed_at or now)) * 1000.0)

    def _held(self, lease: Lease) -> Job | None:
        job = self._jobs.get(lease.job_id)
        if job is None or job.state != "running" or job.attempt != lease.attempt \
                or job.lease_owner != lease.owner:
            return None
        return job

    def _stale(self, lease: Lease, wanted: str) -> None:
        job = self._jobs.get(lease.job_id)
        if job is not None:
            self._event(job, "stale_result_dropped", f"worker:{lease.owner}", {"wanted": wanted},
                        attempt=lease.attempt)

    # --- admission ----------------------------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int,
                    limits: TenantLimits | None = None) -> tuple[Job, bool]:
        found = self._idem.get((new.tenant, new.idem_key))
        if found is not None:
            job = self._jobs[found]
            if job.fingerprint != new.fingerprint or job.kind != new.kind:
                raise IdempotencyKeyReused(
                    "this idempotency key was used for a different request",
                    field="Idempotency-Key" if new.idem_key.startswith("key:") else None)
            return job, False
        if sum(j.state in _WAITING for j in self._jobs.values()) >= max_queue_depth:
            raise QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})
        if limits is not None:
            self._check_admission(new.tenant, limits)
        now = self.clock()
        return self._insert(new, actor, new_id("job", new.created_at), now), True

    def _insert(self, new: NewJob, actor: str, job_id: str, now: float) -> Job:
        if (new.tenant, new.idem_key) in self._idem:
            raise in_progress()
        due = max(now, new.not_before or now)  # a scheduled job: queued from then on
        job = Job(job_id=job_id, tenant=new.tenant, kind=new.kind, case_id=new.case_id,
                  idem_key=new.idem_key, fingerprint=new.fingerprint, input=new.input,
                  input_digest=new.input_digest, version=new.version,
                  declared_bytes=new.declared_bytes, state="queued", attempt=0, series=1,
                  failures=0, lost_leases=0, lease_owner=None, lease_expires=None,
                  created_at=new.created_at, admitted_at=now,
                  admission_ms=max(0.0, (now - new.created_at) * 1000.0), queued_since=due,
                  claimed_at=None, first_claimed_at=None, finished_at=None, next_attempt_at=due,
                  queue_wait_ms=0.0, processing_ms=0.0, result=None, error_category=None,
                  error_code=None, correlation_id=new.correlation_id, updated_at=now,
                  sig_key=new.sig_key, traceparent=new.traceparent, priority=new.priority,
                  not_before=new.not_before)
        self._idem[(new.tenant, new.idem_key)] = job_id
        self._event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes})
        return self._put(job)

    # --- claims and leases --------------------------------------------------------------

    def _claim(self, job: Job, owner: str, now: float, lease_s: float) -> Job:
        return self._put(_replace(
            job, state="running", attempt=job.attempt + 1, lease_owner=owner,
            lease_expires=now + lease_s, claimed_at=now,
            first_claimed_at=job.first_claimed_at if job.first_claimed_at is not None else now,
            queue_wait_ms=job.queue_wait_ms + max(0.0, (now - (job.queued_since or now)) * 1000.0),
            queued_since=None, updated_at=now))

    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None:
        claimed = await self.claim_batch(owner, lease_s, budget_bytes, kinds, 1)
        return claimed[0].job if claimed else None

    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int, *, running_limits: dict[str, int] | None = None
                          ) -> list[Claimed]:
        now = self.clock()
        queued = [j for j in self._jobs.values() if j.state == "queued"]
        lanes: dict[str, list[int]] = {}
        for j in sorted(queued, key=lambda j: (j.tenant, j.priority)):
            if lanes.get(j.tenant, [None])[-1] != j.priority:
                lanes.setdefault(j.tenant, []).append(j.priority)
        lanes = {t: lanes[t] for t in claimable(self._pauses.values(), lanes)}
        budget = [budget_bytes]
        room = self._running_room(running_limits)

        def claim_lane(tenant: str, priority: int) -> Claimed | None:
            if room is not None and tenant in room.skip():
                return None  # at its running limit: it drops out of this claim
            due = [j for j in queued if j.tenant == tenant and j.priority == priority
                   and self._jobs[j.job_id].state == "queued" and j.next_attempt_at <= now
                   and j.kind in kinds
                   and j.declared_bytes <= budget[0] and not self._paused(j.kind, j.tenant)]
            if not due:
                return None
            job = min(due, key=lambda j: (j.next_attempt_at, j.job_id))
            budget[0] -= job.declared_bytes
            if room is not None:
                room.took(job.tenant)
            job = self._claim(job, owner, now, lease_s)
            self._event(job, "claimed", f"worker:{owner}",
                        {"series": job.series, "queue_wait_ms": round(job.queue_wait_ms, 3)})
            sig = self._signatures.get((job.tenant, job.sig_key)) if job.sig_key else None
            return Claimed(job, dict(sig) if sig is not None else None)

        return take_turns(self.turns, lanes, limit, claim_lane)

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state != "queued":
            return None
        job = self._claim(job, owner, self.clock(), lease_s)
        self._event(job, "claimed", f"worker:{owner}", {"series": job.series, "path": "kiosk"})
        return job

    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]:
        now, lost = self.clock(), []
        for lease in leases:
            job = self._held(lease)
            if job is None:
                lost.append(lease)
            else:
                self._put(_replace(job, lease_expires=now + lease_s, updated_at=now))
        return lost

    # --- outcomes -------------------------------------------------------------------------

    async def conclude(self, lease: Lease, outcome: Outcome) -> Job | None:
        return self._conclude(lease, outcome, self.clock())

    def _conclude(self, lease: Lease, outcome: Outcome, now: float) -> Job | None:
        name = {Finish: "succeeded", RetryLater: "retry_scheduled"}.get(type(outcome), "failed")
        job = self._held(lease)
        if job is None:
            self._stale(lease, name)
            return None
        ended = {"processing_ms": self._processing(job, now), "lease_owner": None,
                 "lease_expires": None, "updated_at": now}
        actor = f"worker:{lease.owner}"
        if isinstance(outcome, Finish):
            if outcome.signature is not None:
                outcome = self._sign_record(job, outcome, outcome.signature, now)
            result = outcome.result()
            job = self._put(_replace(job, state="succeeded", finished_at=now,
                                     result=audit.canonical(result).decode(), **ended))
            self._event(job, "succeeded", actor, {"result": result}, now=now)
            if outcome.artifact is not None:
                self._put_artifact(job, outcome, now)
            return job
        if isinstance(outcome, RetryLater):
            detail = {**outcome.detail, "code": outcome.code, "delay_s": round(outcome.delay_s, 3)}
            if not outcome.counts:
                detail["waiting"] = True
            job = self._put(_replace(job, state="retry_wait", next_attempt_at=now + outcome.delay_s,
                                     failures=job.failures + (1 if outcome.counts else 0),
                                     error_code=outcome.code, error_category=None, **ended))
            self._event(job, "retry_scheduled", actor, detail, now=now)
            return job
        job = self._put(_replace(job, state="failed", failures=job.failures + 1,
                                 error_category=outcome.category, error_code=outcome.code,
                                 result=outcome.result(), finished_at=now, **ended))
        self._event(job, "failed", actor,
                    {**outcome.detail, "category": outcome.category, "code": outcome.code}, now=now)
        return job

    def _sign_record(self, job: Job, outcome: Finish, sig: Signature, now: float) -> Finish:
        if sig.inline is not None:
            self._data.setdefault(sig.artifact.artifact_id, sig.inline)
        record = self._record(job, sig.sig_key, sig.artifact.record(), sig.signed, now)
        return outcome.naming(record) or outcome

    def _put_artifact(self, job: Job, outcome: Finish, now: float) -> None:
        artifact = outcome.artifact
        assert artifact is not None
        self._artifacts.setdefault(artifact.artifact_id, {
            "artifact_id": artifact.artifact_id, "tenant": job.tenant, "case_id": job.case_id,
            "job_id": job.job_id,
            "sha256": artifact.sha256, "size": artifact.size, "media_type": artifact.media_type,
            "created_at": now, "timestamp_expires_at": artifact.timestamp_expires_at,
            "renewed_by": None})
        if artifact.data_key is not None:
            self._keys.setdefault(artifact.data_key.owner, artifact.data_key)
        renewed = self._artifacts.get(outcome.renews) if outcome.renews is not None else None
        if renewed is not None and renewed["tenant"] == job.tenant and renewed["renewed_by"] is None:
            renewed["renewed_by"] = artifact.artifact_id

    async def due_renewals(self, before: float, limit: int) -> list[tuple[str, str, float]]:
        due = sorted((a for a in self._artifacts.values()
                      if a["timestamp_expires_at"] is not None and a["renewed_by"] is None
                      and a["timestamp_expires_at"] <= before),
                     key=lambda a: a["timestamp_expires_at"])
        return [(a["artifact_id"], a["tenant"], a["timestamp_expires_at"]) for a in due[:limit]]

    async def release(self, lease: Lease) -> Job | None:
        now = self.clock()
        job = self._held(lease)
        if job is None:
            self._stale(lease, "released")
            return None
        job = self._put(_replace(job, state="queued", next_attempt_at=now, queued_since=now,
                                 processing_ms=self._processing(job, now), lease_owner=None,
                                 lease_expires=None, updated_at=now))
        self._event(job, "released", f"worker:{lease.owner}", {})
        return job

    async def reclaim_expired(self, *, max_lost: int, at_start_of: str | None = None) -> list[Job]:
        now = self.clock()
        everything = at_start_of is not None  # one process holds a memory store
        running = [j for j in self._jobs.values() if j.state == "running"]
        if everything:
            running.sort(key=lambda j: j.job_id)
        else:
            running = sorted((j for j in running if (j.lease_expires or 0) < now),
                             key=lambda j: j.lease_expires or 0)[:500]
        out = []
        for old in running:
            lost_out = old.lost_leases + 1 >= max_lost
            common = {"lost_leases": old.lost_leases + 1, "lease_owner": None,
                      "lease_expires": None, "updated_at": now,
                      "processing_ms": self._processing(old, now)}
            if lost_out:
                job = _replace(old, state="failed", error_category="lost", error_code="lease_lost",
                               finished_at=now, **common)
            else:
                job = _replace(old, state="queued", next_attempt_at=now, queued_since=now, **common)
            self._put(job)
            self._event(job, "lease_expired", "system",
                        {"owner": old.lease_owner, "lost_leases": job.lost_leases,
                         "at_start": everything}, attempt=old.attempt)
            if lost_out:
                self._event(job, "failed", "system", {"category": "lost", "code": "lease_lost"})
            out.append(job)
        return out

    async def promote_due(self) -> list[Job]:
        now = self.clock()
        due = sorted((j for j in self._jobs.values()
                      if j.state == "retry_wait" and j.next_attempt_at <= now),
                     key=lambda j: j.next_attempt_at)[:500]
        out = []
        for job in due:
            job = self._put(_replace(job, state="queued", queued_since=now, updated_at=now))
            self._event(job, "requeued", "system", {})
            out.append(job)
        return out

    def _tenant_job(self, tenant: str, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None or job.tenant != tenant:
            raise NotFound("no such job", code="job_not_found")
        return job

    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job:
        job = self._tenant_job(tenant, job_id)
        if job.state not in _WAITING:
            raise not_cancelable()
        now = self.clock()
        job = self._put(_replace(
            job, state="canceled", finished_at=now, updated_at=now, queued_since=None,
            queue_wait_ms=job.queue_wait_ms + max(0.0, (now - (job.queued_since or now)) * 1000.0)))
        self._event(job, "canceled", actor, {})
        return job

    async def replay(self, tenant: str, job_id: str, actor: str, *, max_queue_depth: int,
                     max_queued: int = 0) -> Job:
        job = self._tenant_job(tenant, job_id)
        if job.state != "failed":
            raise not_failed()
        self._check_waiting(tenant, max_queued)
        if sum(j.state in _WAITING for j in self._jobs.values()) >= max_queue_depth:
            raise QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})
        now = self.clock()
        job = self._put(_replace(job, state="queued", series=job.series + 1, failures=0,
                                 lost_leases=0, error_category=None, error_code=None,
                                 result=None, finished_at=None, next_attempt_at=now,
                                 queued_since=now,
                                 updated_at=now))
        self._event(job, "replayed", actor, {"series": job.series})
        return job

    # --- events and signatures --------------------------------------------------------------

    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None:
        self._event(job, type, actor, detail)

    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._record(job, sig_key, artifact, signed, self.clock())

    def _record(self, job: Job, sig_key: str, artifact: dict[str, Any],
                signed: dict[str, Any] | None, now: float) -> dict[str, Any]:
        key = (job.tenant, sig_key)
        if key in self._signatures:
            return dict(self._signatures[key])
        row = {"tenant": job.tenant, "sig_key": sig_key, "artifact_id": artifact["artifact_id"],
               "sha256": artifact["sha256"], "size": artifact["size"], "job_id": job.job_id,
               "created_at": now}
        self._signatures[key] = row
        actor = f"worker:{job.lease_owner}"
        self._event(job, "signature_recorded", actor,
                    {"artifact_id": row["artifact_id"], "sha256": row["sha256"],
                     "sig_key": sha256_hex(sig_key.encode())}, now=now)
        if signed is not None:
            self._event(job, "signed", actor,
                        {**signed, "artifact_id": row["artifact_id"], "sha256": row["sha256"]},
                        now=now)
        return dict(row)

    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None:
        row = self._signatures.get((tenant, sig_key))
        return dict(row) if row is not None else None

    # --- the kiosk path -----------------------------------------------------------------

    async def lookup_key(self, tenant: str, idem_key: str, sig_key: str
                         ) -> tuple[Job | None, dict[str, Any] | None]:
        found = self._idem.get((tenant, idem_key))
        if found is not None:
            return self._jobs[found], None
        sig = self._signatures.get((tenant, sig_key))
        if sig is None:
            return None, None
        return None, {k: sig[k] for k in ("artifact_id", "sha256", "size")}

    async def record_flight(self, flight: Flight) -> Job | None:
        now = self.clock()
        outcome = flight.outcome
        if isinstance(outcome, Finish) and not flight.persisted:
            return self._flight_succeeded(flight, outcome, now)
        job = self._jobs.get(flight.job_id) if flight.persisted else None
        if job is None:
            job = self._flight_job(flight, now)
        return self._conclude(job.lease, outcome, now)

    async def persist_flight(self, flight: Flight) -> Job:
        flight.persisted = True
        job = self._jobs.get(flight.job_id)
        return job if job is not None else self._flight_job(flight, self.clock())

    def _flight_job(self, flight: Flight, now: float) -> Job:
        job = self._insert(flight.new, flight.actor, flight.job_id, flight.admitted_at)
        job = self._claim(job, flight.owner, flight.claimed_at,
                          flight.lease_s + max(0.0, now - flight.claimed_at))
        self._event(job, "claimed", f"worker:{flight.owner}", {"series": job.series, "path": "kiosk"})
        return job

    def _flight_succeeded(self, flight: Flight, outcome: Finish, now: float) -> Job:
        new = flight.new
        if (new.tenant, new.idem_key) in self._idem:
            raise in_progress()
        result = outcome.result()
        # The row it would have read as while running, finished now in one go.
        job = _replace(flight.running(), state="succeeded", lease_owner=None,
                       lease_expires=None, finished_at=now, updated_at=now,
                       processing_ms=max(0.0, (now - flight.claimed_at) * 1000.0),
                       result=audit.canonical(result).decode())
        self._idem[(new.tenant, new.idem_key)] = job.job_id
        self._put(job)
        worker = f"worker:{flight.owner}"
        self._event(job, "admitted", flight.actor,
                    {"kind": job.kind, "declared_bytes": job.declared_bytes}, attempt=0, now=now)
        self._event(job, "claimed", worker, {"series": job.series, "path": "kiosk"}, now=now)
        if outcome.signature is not None:
            named = self._sign_record(_replace(job, lease_owner=flight.owner), outcome,
                                      outcome.signature, now)
            if named is not outcome:  # recorded before: the result names that record
                outcome, result = named, named.result()
                job = self._put(_replace(job, result=audit.canonical(result).decode()))
        self._event(job, "succeeded", worker, {"result": result}, now=now)
        if outcome.artifact is not None:
            self._put_artifact(job, outcome, now)
        return job

    # --- reads ----------------------------------------------------------------------------

    async def get_job(self, tenant: str, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.tenant == tenant else None

    async def list_jobs(self, tenant: str, states: list[str] | None, limit: int,
                        cursor: str | None, *, kind: str | None = None,
                        case_id: str | None = None) -> tuple[list[Job], str | None]:
        cursor = cursor or "job_~"
        mine = sorted((j for j in self._jobs.values() if j.tenant == tenant and j.job_id < cursor
                       and (not states or j.state in states)
                       and (kind is None or j.kind == kind)
                       and (case_id is None or j.case_id == case_id)),
                      key=lambda j: j.job_id, reverse=True)
        jobs = mine[:limit]
        return jobs, (jobs[-1].job_id if len(mine) > limit else None)

    async def tenant_activity(self, tenant: str, since: float, bucket_s: float) -> Activity:
        live: dict[str, tuple[int, float | None]] = {}
        groups: dict[tuple[int, str], list[Job]] = {}
        for j in self._jobs.values():
            if j.tenant != tenant:
                continue
            if j.state in ("queued", "retry_wait", "running", "failed"):
                n, oldest = live.get(j.state, (0, None))
                waits = [t for t in (oldest, j.queued_since) if t is not None]
                live[j.state] = (n + 1, min(waits) if waits else None)
            if j.state in ("succeeded", "failed", "canceled") and j.finished_at is not None \
                    and j.finished_at >= since:
                groups.setdefault((int((j.finished_at - since) // bucket_s), j.state), []).append(j)
        ended = []
        for (bucket, state), js in groups.items():
            row: dict[str, Any] = {"bucket": bucket, "state": state, "n": len(js)}
            for clock, values in (
                    ("admission", [j.admission_ms for j in js]),
                    ("queue_wait", [j.queue_wait_ms for j in js]),
                    ("processing", [j.processing_ms for j in js]),
                    ("total", [((j.finished_at or 0.0) - j.created_at) * 1000.0 for j in js])):
                row[f"{clock}_mean"] = sum(values) / len(values)
                row[f"{clock}_max"] = max(values)
            ended.append(row)
        return Activity(live=live, ended=ended)

    async def chain_tail(self, limit: int) -> list[dict[str, Any]]:
        return [dict(ev) for ev in self._events[-limit:]] if limit > 0 else []

    async def tenant_recent_events(self, tenant: str, jobs: int) -> list[dict[str, Any]]:
        newest = set(sorted((j.job_id for j in self._jobs.values() if j.tenant == tenant),
                            reverse=True)[:jobs])
        return [dict(ev) for ev in self._events
                if ev["tenant"] == tenant and ev["job_id"] in newest]

    async def event_hashes(self, seqs: list[int]) -> dict[int, str]:
        wanted = set(seqs)
        return {ev["seq"]: ev["hash"] for ev in self._events if ev["seq"] in wanted}

    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]:
        out = []
        for ev in self._events:
            if ev["job_id"] == job_id and ev["tenant"] == tenant:
                row = {k: ev[k] for k in audit.FIELDS}
                row["detail"] = msgspec.json.decode(row["detail"])
                out.append(row)
        return out

    def all_events(self) -> list[dict[str, Any]]:
        """Every event as stored (detail as canonical JSON), in chain order: what
        :func:`casesignd.core.audit.verify_rows` checks."""
        return [dict(ev) for ev in self._events]

    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        row = self._artifacts.get(artifact_id)
        return dict(row) if row is not None else None

    async def artifact_data(self, artifact_id: str) -> bytes | None:
        return self._data.get(artifact_id)

    async def stats(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for job in self._jobs.values():
            counts[job.state] = counts.get(job.state, 0) + 1
        queued = [j.queued_since for j in self._jobs.values() if j.state == "queued" and j.queued_since]
        oldest = min(queued) if queued else None
        return {"states": counts,
                "oldest_queued_age_s": max(0.0, self.clock() - oldest) if oldest else 0.0}
