"""Claims among many tenants: whose turn it is (:class:`Turns`), and the pauses an
operator sets on them.

Among due jobs the tenants take turns, weighted by ``[[tenants]] weight``: start-time
fair queueing, each tenant's next claim tagged with the virtual time it starts at
(the later of the last claim's and the end of its own previous turn, whose length is
1/weight), the smallest tag first. Within a tenant its jobs go by priority (0 first),
then as before (due time, then age). A store keeps its turns in memory, per daemon:
each daemon of a PostgreSQL store takes its own turns fairly, so together they do, and
no claim writes a shared row. A claim reads the tenants with queued jobs and each one's
first jobs through the index ``jobs_fair`` (tenant, priority, next_attempt_at,
job_id): its cost grows with the tenants and priorities in use, not with the backlog.

A pause holds the claims of a job kind, of a tenant, or of both (None: every one);
admission goes on, and the jobs wait queued. Pauses are rows of the store (the
``pauses`` table; ``''`` stands for "every"), so they hold on every daemon of a
PostgreSQL store and across restarts, and each claim reads them in its own
transaction. A job resource's ``paused`` is only shown, so it reads them through
:class:`ShownPauses` instead: this daemon's own pauses and resumes at once, another
daemon's (or a command's) within :data:`PAUSES_SHOWN_S`, and no store read per answer.
Every pause and resume that changes something is an audited event (``claims_paused``,
``claims_resumed``) in the same transaction; the event's subject is the tenant (none:
``''``), its detail the kind and tenant paused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from casesignd.store.records import CaseRef, Pause, Subject
from casesignd.store.tx import Row, Tx

# What a pause row keeps for "every kind", "every tenant".
EVERY = ""

# How old the pauses a job resource shows may be when another daemon of the store (or
# a command) changed them; this daemon's own changes show at once.
PAUSES_SHOWN_S = 1.0

# The priorities a job may have: 0 is claimed first (Oban's order), and the default.
PRIORITY_MIN, PRIORITY_MAX = 0, 9


class Turns:
    """Whose turn it is among tenants: start-time fair queueing. A tenant's next
    claim starts at ``max(virtual, finish[tenant])``; the smallest start goes first
    (a tie: the tenant served least recently); the claim moves ``virtual`` to its start
    and the tenant's finish one stride (1/weight) past it. A tenant that was idle
    comes back at ``virtual``, with no credit saved up; one with a backlog waits one
    turn of each other tenant per turn of its own."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights: dict[str, float] = dict(weights or {})
        self.virtual = 0.0
        self.finish: dict[str, float] = {}
        self.served: dict[str, int] = {}  # tenant -> the count of claims at its last
        self._claims = 0

    def weigh(self, weights: Mapping[str, float]) -> None:
        """New weights (a reload): turns taken so far stand."""
        self.weights = dict(weights)

    def stride(self, tenant: str) -> float:
        return 1.0 / self.weights.get(tenant, 1.0)

    def start(self, tenant: str) -> float:
        return max(self.virtual, self.finish.get(tenant, 0.0))

    def rank(self, tenant: str) -> int:
        """Ties go to the tenant served least recently (-1: never)."""
        return self.served.get(tenant, -1)

    def next(self, tenants: Iterable[str]) -> str | None:
        """The tenant whose turn it is among ``tenants`` (None: none)."""
        return min(tenants, key=lambda t: (self.start(t), self.rank(t), t), default=None)

    def took(self, tenant: str) -> None:
        """A job of ``tenant`` was claimed."""
        start = self.start(tenant)
        self.virtual = start
        self.finish[tenant] = start + self.stride(tenant)
        self._claims += 1
        self.served[tenant] = self._claims

    def known(self) -> dict[str, Any]:
        """Every tenant this knows, as arrays (a statement's parameters): its start,
        stride and rank. Any other tenant starts at ``virtual``, weight 1, rank -1."""
        tenants = sorted(set(self.weights) | set(self.finish))
        return {"tenants": tenants, "starts": [self.start(t) for t in tenants],
                "strides": [self.stride(t) for t in tenants],
                "ranks": [self.rank(t) for t in tenants], "virtual": self.virtual}


# --- claims --------------------------------------------------------------------------


def claimable(pauses: Iterable[Pause], tenants: Iterable[str]) -> list[str]:
    """The ``tenants`` a pause of a whole tenant (or of everything) does not hold;
    a pause of some kinds leaves the rest to each claim's own check."""
    held = {p.tenant for p in pauses if p.kind is None}
    return [] if None in held else [t for t in tenants if t not in held]


def take_turns(turns: Turns, lanes: dict[str, list[int]], limit: int,
               claim_lane: Callable[[str, int], Any]) -> list[Any]:
    """Up to ``limit`` claims, a tenant at a time as ``turns`` says, from ``lanes``
    (tenant -> its priorities with queued jobs, ascending): ``claim_lane(tenant,
    priority)`` claims that lane's first due job, or None. A tenant with nothing to
    claim drops out of this round."""
    out: list[Any] = []
    while len(out) < limit and (tenant := turns.next(lanes)) is not None:
        for priority in lanes[tenant]:
            claimed = claim_lane(tenant, priority)
            if claimed is not None:
                turns.took(tenant)
                out.append(claimed)
                break
        else:
            del lanes[tenant]
    return out


def lanes_of(tx: Tx) -> dict[str, list[int]]:
    """The (tenant, priority) lanes with queued jobs, by a skip scan of jobs_fair, less
    the tenants a pause holds whole."""
    lanes: dict[str, list[int]] = {}
    row = tx.one("first_lane")
    while row is not None:
        lanes.setdefault(row["tenant"], []).append(int(row["priority"]))
        row = tx.one("next_lane", tenant=row["tenant"], priority=row["priority"])
    if not lanes:
        return lanes
    open_ = claimable([row_pause(r) for r in tx.all("list_pauses")], lanes)
    return {t: lanes[t] for t in open_}


# --- pauses ---------------------------------------------------------------------------


class ShownPauses:
    """The pauses as job resources show them, kept in memory: read again when older
    than ``max_age_s`` or after this daemon changed one (:meth:`forget`). A read that
    was under way when a change landed is not kept, so a change never hides behind an
    older read. Claims never use it."""

    def __init__(self, max_age_s: float = PAUSES_SHOWN_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.clock = clock
        self._pauses: list[Pause] | None = None
        self._read_at = 0.0
        self._changes = 0  # this daemon's pauses and resumes, counted

    def current(self) -> list[Pause] | None:
        """The pauses kept, while fresh enough; None: read them (:meth:`read`)."""
        if self._pauses is not None and self.clock() - self._read_at < self.max_age_s:
            return self._pauses
        return None

    async def read(self, list_pauses: Callable[[], Any]) -> list[Pause]:
        """The pauses ``list_pauses()`` reads, kept unless this daemon changed one
        meanwhile."""
        changes, at = self._changes, self.clock()
        pauses: list[Pause] = await list_pauses()
        if changes == self._changes:
            self._pauses, self._read_at = pauses, at
        return pauses

    def forget(self) -> None:
        """This daemon paused or resumed: the next answer reads the store."""
        self._changes += 1
        self._pauses = None



def pause_detail(kind: str | None, tenant: str | None) -> dict[str, Any]:
    """The audit event's detail of a pause or resume of (``kind``, ``tenant``)."""
    return {"kind": kind, "tenant": tenant}


def pause_subject(tenant: str | None) -> CaseRef:
    """What a pause's event is about: the tenant paused (``''``: every tenant)."""
    return CaseRef(tenant or EVERY, None)


def row_pause(row: Row) -> Pause:
    return Pause(kind=row["kind"] or None, tenant=row["tenant"] or None,
                 since=float(row["since"]), actor=row["actor"])


def pause(tx: Tx, kind: str | None, tenant: str | None, actor: str) -> bool:
    """Pause the claims of (``kind``, ``tenant``): False, and no event, when they were
    paused already."""
    if not tx.run("pause_claims", kind=kind or EVERY, tenant=tenant or EVERY, now=tx.now,
                  actor=actor):
        return False
    tx.event(pause_subject(tenant), "claims_paused", actor, pause_detail(kind, tenant))
    return True


def resume(tx: Tx, kind: str | None, tenant: str | None, actor: str) -> bool:
    """Resume the claims of (``kind``, ``tenant``), exactly that pause: False, and no
    event, when there was none."""
    if not tx.run("resume_claims", kind=kind or EVERY, tenant=tenant or EVERY):
        return False
    tx.event(pause_subject(tenant), "claims_resumed", actor, pause_detail(kind, tenant))
    return True


class ClaimVerbs:
    """The turns and pauses of a SQL store's claims, over its writer and readers (see
    :mod:`.verbs`)."""

    turns: Turns
    shown: ShownPauses

    def weigh_tenants(self, weights: Mapping[str, float]) -> None:
        """The tenants' weights in their turns (``[[tenants]] weight``; any other: 1)."""
        self.turns.weigh(weights)

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def pause_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        """Hold the claims of jobs of ``kind`` (None: every kind) of ``tenant`` (None:
        every tenant) on every daemon of the store, until :meth:`resume_claims` of the
        same pair. True when it was not paused before (an audited event)."""
        try:
            return await self._write(lambda tx: pause(tx, kind, tenant, actor))
        finally:
            self.shown.forget()

    async def resume_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        """Lift the pause of exactly (``kind``, ``tenant``): its jobs are claimed at
        once. True when there was one (an audited event)."""
        try:
            return await self._write(lambda tx: resume(tx, kind, tenant, actor))
        finally:
            self.shown.forget()

    async def _one(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def list_pauses(self) -> list[Pause]:
        """Every pause, oldest first. A small table, read as a lookup (SQLite's on the
        event loop)."""
        return [row_pause(r) for r in await self._one("list_pauses")]

    async def shown_pauses(self) -> list[Pause]:
        """The pauses a waiting job's resource shows (:class:`ShownPauses`)."""
        pauses = self.shown.current()
        return pauses if pauses is not None else await self.shown.read(self.list_pauses)


class MemoryClaims:
    """The turns and pauses in the dictionaries of a MemoryStore (the same meaning)."""

    clock: Callable[[], float]
    _event: Callable[..., None]
    _pauses: dict[tuple[str | None, str | None], Pause]
    turns: Turns

    def weigh_tenants(self, weights: Mapping[str, float]) -> None:
        self.turns.weigh(weights)

    def _paused(self, kind: str, tenant: str) -> bool:
        return any(p.covers(kind, tenant) for p in self._pauses.values())

    def _pause_event(self, subject: Subject, type: str, actor: str,
                     kind: str | None, tenant: str | None) -> None:
        self._event(subject, type, actor, pause_detail(kind, tenant))

    async def pause_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        if (kind, tenant) in self._pauses:
            return False
        self._pauses[(kind, tenant)] = Pause(kind, tenant, self.clock(), actor)
        self._pause_event(pause_subject(tenant), "claims_paused", actor, kind, tenant)
        return True

    async def resume_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        if self._pauses.pop((kind, tenant), None) is None:
            return False
        self._pause_event(pause_subject(tenant), "claims_resumed", actor, kind, tenant)
        return True

    async def list_pauses(self) -> list[Pause]:
        return sorted(self._pauses.values(), key=lambda p: p.since)

    async def shown_pauses(self) -> list[Pause]:
        return await self.list_pauses()  # one process: always exact
