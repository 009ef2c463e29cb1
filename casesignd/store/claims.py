"""Claims among many tenants: the pauses an operator sets on them.

A pause holds the claims of a job kind, of a tenant, or of both (None: every one);
admission goes on, and the jobs wait queued. Pauses are rows of the store (the
``pauses`` table; ``''`` stands for "every"), so they hold on every daemon of a
PostgreSQL store and across restarts, and each claim reads them. Every pause and
resume that changes something is an audited event (``claims_paused``,
``claims_resumed``) in the same transaction; the event's subject is the tenant (none:
``''``), its detail the kind and tenant paused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from casesignd.store.records import CaseRef, Pause, Subject
from casesignd.store.tx import Row, Tx

# What a pause row keeps for "every kind", "every tenant".
EVERY = ""


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


class PauseVerbs:
    """The pause verbs over a SQL store's writer and readers (see :mod:`.verbs`)."""

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def pause_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        """Hold the claims of jobs of ``kind`` (None: every kind) of ``tenant`` (None:
        every tenant) on every daemon of the store, until :meth:`resume_claims` of the
        same pair. True when it was not paused before (an audited event)."""
        return await self._write(lambda tx: pause(tx, kind, tenant, actor))

    async def resume_claims(self, kind: str | None, tenant: str | None, actor: str) -> bool:
        """Lift the pause of exactly (``kind``, ``tenant``): its jobs are claimed at
        once. True when there was one (an audited event)."""
        return await self._write(lambda tx: resume(tx, kind, tenant, actor))

    async def list_pauses(self) -> list[Pause]:
        """Every pause, oldest first."""
        return [row_pause(r) for r in await self._rows("list_pauses")]


class MemoryPauses:
    """The pause verbs in the dictionaries of a MemoryStore (the same meaning)."""

    clock: Callable[[], float]
    _event: Callable[..., None]
    _pauses: dict[tuple[str | None, str | None], Pause]

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
