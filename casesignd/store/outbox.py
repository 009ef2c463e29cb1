"""The webhook outbox: a delivery row written in the transaction of the state change
it reports, so that a crash never loses a notification nor invents one
(:func:`delivery_row`, called by every writer's ``event``), and the verbs the sender
uses (:class:`OutboxVerbs` for the SQL stores, :class:`MemoryOutbox` in memory).

A delivery is ``pending`` until it is ``delivered`` or ``dead`` (a permanent answer,
or its attempts spent). A sender takes it with a lease, like a claim: the attempt
number bumps, and the outcome is written only while that lease is held, so on
PostgreSQL one daemon sends each delivery at a time and a slow sender's late outcome
is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from casesignd.core.webhook_events import event_of
from casesignd.store.records import Delivery, Subject, new_id
from casesignd.store.tx import Row

# skipped: the endpoint no longer wants the event (its config changed since).
STATES = ("pending", "delivered", "dead", "skipped")


def row_delivery(row: Any) -> Delivery:
    if isinstance(row, dict):
        return Delivery(**row)
    return Delivery(**dict(zip(row.keys(), row, strict=True)))


def webhook_of(job_input: str | None) -> str | None:
    """The endpoint a job's input names, if any (most name none: no decode then)."""
    if not job_input or '"webhook"' not in job_input:
        return None
    try:
        name = msgspec.json.decode(job_input).get("webhook")
    except (msgspec.DecodeError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def delivery_row(job: Subject, type: str, now: float) -> dict[str, Any] | None:
    """The delivery an audit event of ``type`` about ``job`` calls for, or None: one
    when the job names an endpoint and the event is a state change a webhook reports.
    Whether the endpoint wants that event is the sender's to read from the config
    then (a config changed meanwhile is the one that counts)."""
    kind = getattr(job, "kind", None)
    event = event_of(kind, type) if kind else None
    if event is None:
        return None
    endpoint = webhook_of(getattr(job, "input", None))
    if endpoint is None:
        return None
    return {"delivery_id": new_id("msg", now), "tenant": job.tenant, "job_id": job.job_id,
            "event": event, "endpoint": endpoint, "now": now}


class OutboxVerbs:
    """The sender's verbs over a SQL store's writer and readers (see :mod:`.verbs`)."""

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def take_deliveries(self, owner: str, lease_s: float, limit: int, *,
                              per_tenant: int | None = None,
                              rooms: Mapping[str, int] | None = None) -> list[Delivery]:
        """Lease up to ``limit`` due pending deliveries to ``owner``, tenants taking
        turns (each one's oldest first), each attempt number bumped; ones another
        sender holds are skipped. A tenant takes at most its room: ``rooms[tenant]``,
        else ``per_tenant`` (default: no bound but ``limit``)."""
        per = limit if per_tenant is None else per_tenant
        rooms_json = json.dumps(dict(rooms or {}))

        def op(tx: Any) -> list[Delivery]:
            return [row_delivery(r) for r in tx.all(
                "take_deliveries", owner=owner, now=tx.now, lease_s=lease_s, limit=limit,
                per_tenant=per, rooms=rooms_json)]

        return await self._write(op)

    async def settle_delivery(self, d: Delivery, state: str, *, next_at: float = 0.0,
                              status: int | None = None, error: str | None = None) -> bool:
        """Write the outcome of ``d``'s attempt while its lease holds: ``delivered``,
        ``dead``, or ``pending`` again at ``next_at``. False: the lease was lost."""
        return bool(await self._write(lambda tx: tx.run(
            "settle_delivery", delivery_id=d.delivery_id, attempts=d.attempts,
            owner=d.lease_owner, state=state, next_at=next_at, status=status,
            error=error, now=tx.now)))

    async def redeliver(self, tenant: str, delivery_id: str) -> Delivery | None:
        """Send a tenant's delivery again (due now, one more attempt); None: no such
        delivery. A pending one is left as it is."""

        def op(tx: Any) -> Delivery | None:
            row = tx.one("redeliver", tenant=tenant, delivery_id=delivery_id, now=tx.now)
            if row is None:
                row = tx.one("get_delivery", tenant=tenant, delivery_id=delivery_id)
            return row_delivery(row) if row is not None else None

        return await self._write(op)

    async def list_deliveries(self, tenant: str, limit: int,
                              job_id: str | None = None) -> list[Delivery]:
        """A tenant's deliveries, newest first (those of one job with ``job_id``)."""
        if job_id is not None:
            rows = await self._rows("job_deliveries", tenant=tenant, job_id=job_id)
        else:
            rows = await self._rows("list_deliveries", tenant=tenant, limit=limit)
        return [row_delivery(r) for r in rows]

    async def expire_deliveries(self, cutoff: float, limit: int) -> int:
        """Remove up to ``limit`` deliveries that ended (delivered, dead, skipped)
        before ``cutoff``, oldest first; how many. A pending one is kept until it ends."""
        return int(await self._write(lambda tx: tx.run("expire_deliveries", cutoff=cutoff,
                                                       limit=limit)))

    async def delivery_stats(self) -> tuple[dict[str, int], float | None]:
        """Deliveries by state, and when the oldest pending one was written."""
        counts = {s: 0 for s in STATES}
        oldest = None
        for r in await self._rows("delivery_stats"):
            counts[r["state"]] = int(r["n"])
            if r["state"] == "pending":
                oldest = r["oldest"]
        return counts, oldest


class MemoryOutbox:
    """The same verbs in memory (:class:`~.memory.MemoryStore`)."""

    clock: Callable[[], float]
    _deliveries: dict[str, Delivery]

    def _outbox(self, job: Subject, type: str, now: float) -> None:
        row = delivery_row(job, type, now)
        if row is not None:
            now = row.pop("now")
            self._deliveries[row["delivery_id"]] = Delivery(
                **row, state="pending", attempts=0, created_at=now, next_attempt_at=now,
                lease_owner=None, lease_expires=None, last_status=None, last_error=None,
                delivered_at=None, updated_at=now)

    async def take_deliveries(self, owner: str, lease_s: float, limit: int, *,
                              per_tenant: int | None = None,
                              rooms: Mapping[str, int] | None = None) -> list[Delivery]:
        now = self.clock()
        per = limit if per_tenant is None else per_tenant
        rooms = rooms or {}
        due = sorted((d for d in self._deliveries.values()
                      if d.state == "pending" and d.next_attempt_at <= now
                      and (d.lease_expires is None or d.lease_expires <= now)),
                     key=lambda d: (d.next_attempt_at, d.delivery_id))
        # Tenants take turns, as the SQL stores' take_deliveries.
        turns: dict[str, int] = {}
        ranked = []
        for d in due:
            turns[d.tenant] = turns.get(d.tenant, 0) + 1
            if turns[d.tenant] <= rooms.get(d.tenant, per):
                ranked.append((turns[d.tenant], d))
        due = [d for _, d in sorted(ranked, key=lambda r: (r[0], r[1].next_attempt_at,
                                                            r[1].delivery_id))][:limit]
        out = []
        for d in due:
            d = msgspec.structs.replace(d, attempts=d.attempts + 1, lease_owner=owner,
                                        lease_expires=now + lease_s, updated_at=now)
            self._deliveries[d.delivery_id] = d
            out.append(d)
        return out

    async def settle_delivery(self, d: Delivery, state: str, *, next_at: float = 0.0,
                              status: int | None = None, error: str | None = None) -> bool:
        now = self.clock()
        cur = self._deliveries.get(d.delivery_id)
        if (cur is None or cur.state != "pending" or cur.attempts != d.attempts
                or cur.lease_owner != d.lease_owner):
            return False
        self._deliveries[d.delivery_id] = msgspec.structs.replace(
            cur, state=state, next_attempt_at=next_at if state == "pending" else cur.next_attempt_at,
            lease_owner=None, lease_expires=None, last_status=status, last_error=error,
            delivered_at=now if state == "delivered" else None, updated_at=now)
        return True

    async def redeliver(self, tenant: str, delivery_id: str) -> Delivery | None:
        now = self.clock()
        cur = self._deliveries.get(delivery_id)
        if cur is None or cur.tenant != tenant:
            return None
        if cur.state != "pending":
            cur = self._deliveries[delivery_id] = msgspec.structs.replace(
                cur, state="pending", next_attempt_at=now, lease_owner=None,
                lease_expires=None, updated_at=now)
        return cur

    async def list_deliveries(self, tenant: str, limit: int,
                              job_id: str | None = None) -> list[Delivery]:
        mine = [d for d in self._deliveries.values() if d.tenant == tenant
                and (job_id is None or d.job_id == job_id)]
        mine.sort(key=lambda d: d.delivery_id, reverse=True)
        return mine if job_id is not None else mine[:limit]

    async def expire_deliveries(self, cutoff: float, limit: int) -> int:
        ended = sorted((d for d in self._deliveries.values()
                        if d.state != "pending" and d.updated_at < cutoff),
                       key=lambda d: d.updated_at)[:limit]
        for d in ended:
            del self._deliveries[d.delivery_id]
        return len(ended)

    async def delivery_stats(self) -> tuple[dict[str, int], float | None]:
        counts = {s: 0 for s in STATES}
        for d in self._deliveries.values():
            counts[d.state] += 1
        pending = [d.created_at for d in self._deliveries.values() if d.state == "pending"]
        return counts, min(pending) if pending else None
