"""What the store holds and the verbs it offers: the records (:class:`Job`,
:class:`Lease`, :class:`NewJob`, :class:`Flight`), the :class:`Store` protocol that
every implementation follows, and time-ordered ids.

Every state change and its audit event are one transaction, and every update of a
running job is fenced on (job_id, attempt, lease_owner), so a stale worker cannot
overwrite a newer outcome.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from casesignd.core import audit
from casesignd.core.errors import CasesignError, Conflict
from casesignd.core.keyring import WrappedKey
from casesignd.core.outcomes import Finish, Outcome
from casesignd.core.tenant_limits import TenantLimits


class Job(msgspec.Struct, kw_only=True):
    """A job row."""

    job_id: str
    tenant: str
    kind: str
    case_id: str | None
    idem_key: str
    fingerprint: str
    input: str
    input_digest: str
    version: str
    declared_bytes: int
    state: str
    attempt: int
    series: int
    failures: int
    lost_leases: int
    lease_owner: str | None
    lease_expires: float | None
    created_at: float
    admitted_at: float
    admission_ms: float
    queued_since: float | None
    claimed_at: float | None
    first_claimed_at: float | None
    finished_at: float | None
    next_attempt_at: float
    queue_wait_ms: float
    processing_ms: float
    result: str | None
    error_category: str | None
    error_code: str | None
    correlation_id: str
    updated_at: float
    sig_key: str | None = None  # the signature a sign_case job makes
    # The W3C traceparent of the request that admitted it: its attempts' spans continue
    # that trace (casesignd.observability.tracing). Never part of the job resource.
    traceparent: str | None = None
    # 0..9, 0 first: the order of a tenant's own jobs (casesignd.store.claims).
    priority: int = 0
    # No claim before this time (when the job asked for one): shown while queued.
    not_before: float | None = None

    @property
    def lease(self) -> Lease:
        return Lease(self.job_id, self.attempt, self.lease_owner or "")

    def input_dict(self) -> dict[str, Any]:
        return msgspec.json.decode(self.input)

    def result_dict(self) -> dict[str, Any] | None:
        return msgspec.json.decode(self.result) if self.result else None

    def refusal(self) -> dict[str, Any] | None:
        """A failed job's refused document: its reason, where and message."""
        if self.state != "failed" or not self.result:
            return None
        return (self.result_dict() or {}).get("refusal")


class Delivery(msgspec.Struct, kw_only=True):
    """A webhook delivery row (casesignd.store.outbox)."""

    delivery_id: str  # the webhook-id a receiver deduplicates by
    tenant: str
    job_id: str
    event: str
    endpoint: str
    state: str
    attempts: int
    created_at: float
    next_attempt_at: float
    lease_owner: str | None
    lease_expires: float | None
    last_status: int | None
    last_error: str | None
    delivered_at: float | None
    updated_at: float

    def public(self) -> dict[str, Any]:
        """As ``GET /v1/webhooks/deliveries`` lists it."""
        return {"delivery_id": self.delivery_id, "job_id": self.job_id, "event": self.event,
                "endpoint": self.endpoint, "state": self.state, "attempts": self.attempts,
                "created_at": audit.rfc3339(self.created_at),
                "next_attempt_at": (audit.rfc3339(self.next_attempt_at)
                                    if self.state == "pending" else None),
                "last_status": self.last_status, "last_error": self.last_error,
                "delivered_at": (audit.rfc3339(self.delivered_at)
                                 if self.delivered_at is not None else None)}


def row_job(row: Any) -> Job:
    """The job of a row: a mapping (psycopg's dict rows), or a ``sqlite3.Row``, read
    by position (``dict()`` of a Row looks each of its 32 names up among all of them:
    twice the cost of the job itself, at each claim, finish and read)."""
    if isinstance(row, dict):
        return Job(**row)
    return Job(**dict(zip(row.keys(), row, strict=True)))


class Subject(Protocol):
    """What an audit event is about: a job, or a case as a whole
    (:class:`~.lifecycle.CaseRef`, whose ``job_id`` is empty)."""

    @property
    def job_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def case_id(self) -> str | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def input_digest(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...


@dataclass(frozen=True)
class Lease:
    """What fences a running job's updates."""

    job_id: str
    attempt: int
    owner: str


@dataclass(frozen=True)
class NewJob:
    """A validated, normalized job on its way into the store."""

    tenant: str
    kind: str
    case_id: str | None
    idem_key: str
    fingerprint: str
    input: str  # canonical JSON
    input_digest: str
    version: str
    declared_bytes: int
    created_at: float  # when the request arrived
    correlation_id: str
    sig_key: str | None = None  # the signature it makes (sign_case), read with its claim
    traceparent: str | None = None  # the admitting request's span, when tracing is on
    priority: int = 0  # 0..9, 0 first, among its tenant's jobs (casesignd.store.claims)
    not_before: float | None = None  # no claim before this time (the store's clock)


@dataclass(frozen=True)
class Pause:
    """Claims paused by an operator: of ``kind`` (None: every kind), of ``tenant``
    (None: every tenant), since when and by whom. Admission goes on."""

    kind: str | None
    tenant: str | None
    since: float
    actor: str

    def covers(self, kind: str, tenant: str) -> bool:
        """Whether this pause holds the claims of a job of ``kind`` and ``tenant``."""
        return self.kind in (None, kind) and self.tenant in (None, tenant)


@dataclass(frozen=True)
class Claimed:
    """A claimed job and the signature recorded for its signature key, if any."""

    job: Job
    signature: dict[str, Any] | None = None


@dataclass
class Flight:
    """A kiosk request on its way into the store in one write (``record_flight``)."""

    new: NewJob
    job_id: str
    actor: str
    owner: str
    lease_s: float
    admitted_at: float
    claimed_at: float
    token: object = field(default_factory=object)
    # What the request ended in; a signature it made goes with its Finish.
    outcome: Outcome = field(default_factory=Finish)
    # persist_flight was asked to write it as running (the request passed its
    # deadline): from then on its record looks for that row, in whatever order the
    # writer takes the two
    persisted: bool = False

    def running(self) -> Job:
        """The row :meth:`Store.persist_flight` writes for it (admitted at
        ``admitted_at``, claimed at ``claimed_at``), before it is written: what a kiosk
        request answered 504 reads as until then (casesignd.engine.reservations)."""
        new, claimed = self.new, self.claimed_at or self.admitted_at
        return Job(job_id=self.job_id, tenant=new.tenant, kind=new.kind, case_id=new.case_id,
                   idem_key=new.idem_key, fingerprint=new.fingerprint, input=new.input,
                   input_digest=new.input_digest, version=new.version,
                   declared_bytes=new.declared_bytes, state="running", attempt=1, series=1,
                   failures=0, lost_leases=0, lease_owner=self.owner,
                   lease_expires=claimed + self.lease_s, created_at=new.created_at,
                   admitted_at=self.admitted_at,
                   admission_ms=max(0.0, (self.admitted_at - new.created_at) * 1000.0),
                   queued_since=None, claimed_at=claimed, first_claimed_at=claimed,
                   finished_at=None, next_attempt_at=self.admitted_at,
                   queue_wait_ms=max(0.0, (claimed - self.admitted_at) * 1000.0),
                   processing_ms=0.0, result=None, error_category=None, error_code=None,
                   correlation_id=new.correlation_id, updated_at=claimed, sig_key=new.sig_key,
                   traceparent=new.traceparent, priority=new.priority, not_before=new.not_before)


# --- the data lifecycle (casesignd.store.lifecycle) ----------------------------------

# The areas a retention sweep works through, in this order: job rows first, since a
# job's end extends its objects' lives.
Area = Literal["rejected", "jobs", "artifacts", "objects"]
AREAS: tuple[Area, ...] = ("rejected", "jobs", "artifacts", "objects")
# What a removal removed.
What = Literal["job", "artifact", "object"]


@dataclass(frozen=True)
class CaseRef:
    """What an audit event about a case (not a job) names: ``tx.event`` takes it in
    place of a job."""

    tenant: str
    case_id: str | None
    job_id: str = ""
    attempt: int = 0
    input_digest: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class Rewrap:
    """A data key rewrapped (``key``) from under ``old_key_id``, for ``store rekey``;
    ``inline``: the key of an artifact the store keeps itself (``artifact_data``)."""

    owner: str
    old_key_id: str
    key: WrappedKey
    inline: bool = False


@dataclass(frozen=True)
class Removed:
    """One thing a sweep or an erasure removed; ``key`` is a job or artifact id, or an
    object's SHA-256 (the files to remove go by it)."""

    what: What
    tenant: str
    case_id: str | None
    key: str
    size: int = 0
    # An artifact whose bytes the store kept itself (artifact_data): their removal
    # leaves pages to clear in the store's own files (Store.scrub).
    inline: bool = False
    # Its data key (storage encryption) went too: the store's files are scrubbed of it.
    keyed: bool = False


@dataclass(frozen=True)
class Erased:
    """A case's erasure: what it removed, and the jobs it canceled."""

    removed: list[Removed]
    canceled: list[Job]


@dataclass(frozen=True)
class Charge:
    """What a charge took of a tenant's measure (casesignd.store.tenants), and in which
    window: to give it back."""

    tenant: str
    measure: str
    amount: int
    window_start: float


def in_progress() -> Conflict:
    return Conflict("the first request with this key is still running", code="in_progress",
                    headers={"Retry-After": "1"})


def not_cancelable() -> Conflict:
    return Conflict("only a queued job that no worker holds can be canceled",
                    code="not_cancelable")


def not_failed() -> Conflict:
    return Conflict("only a failed job can be retried", code="not_failed")


class IdempotencyKeyReused(CasesignError):
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class Activity:
    """A tenant's jobs for the console: ``live`` maps the engine states queued,
    retry_wait, running and failed to (count, oldest queued_since); ``ended`` has one
    row per (bucket, state) of the jobs that ended in the window: ``bucket`` (its
    index from the window's start), ``state``, ``n``, and ``<clock>_mean`` and
    ``<clock>_max`` for admission, queue_wait, processing and total (ms)."""

    live: dict[str, tuple[int, float | None]]
    ended: list[dict[str, Any]]


class KeyLocks(Protocol):
    """Keys locked across the daemons of one store (PostgreSQL's advisory locks): a
    signature key while a job of it signs, an idempotency key while a kiosk request
    has written no job yet. A store of one daemon has none and needs none."""

    def signature(self, tenant: str, sig_key: str
                  ) -> contextlib.AbstractAsyncContextManager[dict[str, Any] | None]: ...
    async def take_idempotency_key(self, tenant: str, idem_key: str) -> bool: ...
    def give_back_idempotency_key(self, tenant: str, idem_key: str) -> None: ...


class Store(Protocol):
    """The verbs the engine needs. Every implementation runs the same contract tests
    (tests/unit/test_store_contract.py)."""

    # Keys locked across daemons; None for a store of one daemon.
    key_locks: KeyLocks | None

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    # Jobs were queued: tell the other daemons on this store, if any (announce), and
    # the callback for when another one does (on_announce).
    def announce(self) -> None: ...
    def on_announce(self, wake: Callable[[], None]) -> None: ...
    # Past the tenant's ``limits`` (casesignd.store.tenants): TenantQueueFull, RateLimited.
    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int,
                    limits: TenantLimits | None = None) -> tuple[Job, bool]: ...
    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None: ...
    # ``running_limits``: tenant -> jobs it may have running at once, on every daemon.
    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int, *, running_limits: dict[str, int] | None = None
                          ) -> list[Claimed]: ...
    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None: ...
    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]: ...
    async def conclude(self, lease: Lease, outcome: Outcome) -> Job | None: ...
    async def release(self, lease: Lease) -> Job | None: ...
    async def reclaim_expired(self, *, max_lost: int, at_start_of: str | None = None) -> list[Job]: ...
    async def promote_due(self) -> list[Job]: ...
    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job: ...
    # A failed job queued again; QueueFull past max_queue_depth, as admit.
    async def replay(self, tenant: str, job_id: str, actor: str, *, max_queue_depth: int,
                     max_queued: int = 0) -> Job: ...
    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None: ...
    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]: ...
    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None: ...
    async def get_job(self, tenant: str, job_id: str) -> Job | None: ...
    async def list_jobs(self, tenant: str, states: list[str] | None, limit: int, cursor: str | None,
                        *, kind: str | None = None,
                        case_id: str | None = None) -> tuple[list[Job], str | None]: ...
    # The console's reads: a tenant's activity (GET /v1/stats) and samples of the
    # audit chain (GET /v1/audit/head), events as stored (detail as its JSON text).
    async def tenant_activity(self, tenant: str, since: float, bucket_s: float) -> Activity: ...
    async def chain_tail(self, limit: int) -> list[dict[str, Any]]: ...
    async def tenant_recent_events(self, tenant: str, jobs: int) -> list[dict[str, Any]]: ...
    async def event_hashes(self, seqs: list[int]) -> dict[int, str]: ...
    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]: ...
    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None: ...
    async def artifact_data(self, artifact_id: str) -> bytes | None: ...
    # B-LTA artifacts whose last timestamp's chain expires before ``before`` and that
    # no artifact renewed yet: (artifact id, tenant, expiry), soonest first.
    async def due_renewals(self, before: float, limit: int) -> list[tuple[str, str, float]]: ...
    # The kiosk path: a request's job written once, when done (see Flight), its key
    # reserved meanwhile in front of the store (casesignd.engine.reservations).
    async def lookup_key(self, tenant: str, idem_key: str,
                         sig_key: str) -> tuple[Job | None, dict[str, Any] | None]: ...
    async def record_flight(self, flight: Flight) -> Job | None: ...
    async def persist_flight(self, flight: Flight) -> Job: ...
    async def stats(self) -> dict[str, Any]: ...
    async def ping(self) -> None: ...
    # Claims paused by an operator (casesignd.store.claims): of a kind, of a tenant or
    # of both (None: every one), on every daemon of the store, across restarts; each
    # change an audited event. True when it changed something.
    async def pause_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool: ...
    async def resume_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool: ...
    async def list_pauses(self) -> list[Pause]: ...
    # The pauses as a waiting job's resource shows them: kept in memory, this daemon's
    # changes at once, another daemon's within a second (casesignd.store.claims).
    async def shown_pauses(self) -> list[Pause]: ...
    # The tenants' weights in their turns at claims ([[tenants]] weight; any other: 1).
    def weigh_tenants(self, weights: Mapping[str, float]) -> None: ...
    # The data lifecycle (casesignd.store.lifecycle): objects' lives, retention's
    # removals, legal holds, erasure.
    async def put_object(self, tenant: str, case_id: str, sha256: str, size: int) -> None: ...
    async def expire(self, area: Area, cutoff: float, limit: int) -> list[Removed]: ...
    async def get_hold(self, tenant: str, case_id: str) -> dict[str, Any] | None: ...
    async def set_hold(self, tenant: str, case_id: str, actor: str,
                       placed: bool) -> dict[str, Any] | None: ...
    async def erase_case(self, tenant: str, case_id: str, actor: str) -> Erased: ...
    async def scrub(self) -> None: ...
    async def disk_use(self) -> dict[str, int]: ...
    # Storage encryption's wrapped data keys (casesignd.store.data_keys).
    async def put_data_key(self, key: WrappedKey) -> WrappedKey: ...
    async def data_key(self, owner: str) -> WrappedKey | None: ...
    async def data_key_ids(self) -> dict[str, int]: ...
    async def data_keys_to_rewrap(self, current: str, after: str, limit: int,
                                  inline: bool = False) -> list[WrappedKey]: ...
    async def rewrap_data_keys(self, changes: Sequence[Rewrap]) -> int: ...
    async def drop_unrecorded_keys(self, before: float) -> int: ...
    # The webhook outbox (casesignd.store.outbox).
    async def take_deliveries(self, owner: str, lease_s: float, limit: int, *,
                              per_tenant: int | None = None,
                              rooms: Mapping[str, int] | None = None) -> list[Delivery]: ...
    async def settle_delivery(self, d: Delivery, state: str, *, next_at: float = 0.0,
                              status: int | None = None, error: str | None = None) -> bool: ...
    async def list_deliveries(self, tenant: str, limit: int,
                              job_id: str | None = None) -> list[Delivery]: ...
    async def redeliver(self, tenant: str, delivery_id: str) -> Delivery | None: ...
    async def delivery_stats(self) -> tuple[dict[str, int], float | None]: ...
    async def expire_deliveries(self, cutoff: float, limit: int) -> int: ...
    # Tenants' limits and the operator's reads across tenants (casesignd.store.tenants).
    async def charge_upload(self, tenant: str, size: int, limits: TenantLimits) -> Charge | None: ...
    async def refund(self, taken: Charge) -> None: ...
    async def admin_queues(self) -> list[dict[str, Any]]: ...
    async def oldest_queued_by_tenant(self) -> dict[str, float]: ...
    async def lease_holders(self) -> list[dict[str, Any]]: ...
    async def connected_nodes(self) -> list[dict[str, Any]]: ...
    async def dead_letter(self, *, tenant: str | None, kind: str | None, code: str | None,
                          limit: int, cursor: str | None, state: str = "failed"
                          ) -> tuple[list[Job], str | None]: ...
    async def find_job(self, job_id: str) -> Job | None: ...


_id_lock = threading.Lock()
_id_last = [0, 0]
_id_random = random.Random(secrets.token_bytes(32))


def random_hex(n_bytes: int) -> str:
    """Random hex for ids that must not collide but need not be secret (a correlation
    id): no system call, unlike ``secrets``."""
    return f"{_id_random.getrandbits(8 * n_bytes):0{2 * n_bytes}x}"


def new_id(prefix: str, now: float) -> str:
    """A time-ordered id: 12 hex digits of milliseconds and 4 of a counter (so ids made
    in the same millisecond still sort in order), then 12 random hex digits."""
    ms = int(now * 1000)
    with _id_lock:
        if ms <= _id_last[0]:
            ms, seq = _id_last[0], _id_last[1] + 1
        else:
            seq = 0
        _id_last[:] = [ms, seq]
    # Ids need to be unique, not secret (every read is checked against the tenant):
    # a seeded generator saves a system call per id on the writer's hot path.
    return f"{prefix}_{ms:012x}{seq & 0xFFFF:04x}{_id_random.getrandbits(48):012x}"
