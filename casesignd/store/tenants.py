"""Tenants' limits and the operator's reads, for both SQL stores (:class:`TenantVerbs`,
which :class:`~.verbs.SqlStore` extends): the store is the one truth every daemon
shares, so what a tenant used is counted here.

- A rate (jobs admitted, bytes uploaded) is one row per tenant and measure in
  ``tenant_usage``, charged by one upsert that adds only what fits under the limit
  and starts the count again when a later fixed window begins
  (:mod:`casesignd.core.tenant_limits`). An admission is charged in the transaction
  that inserts its job, so a refused or replayed request costs nothing.
- The jobs a tenant has waiting are counted in the admission's transaction; on
  PostgreSQL one tenant's limited admissions take turns on an advisory lock, so two
  daemons never both see room for the last place.
- The jobs a tenant has running are counted in the claim's transaction, and the claim
  skips the tenants at their limit (:class:`RunningRoom`); on PostgreSQL such claims
  take turns on one advisory lock while any running limit is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from casesignd.core.errors import QuotaExceeded, RateLimited, TenantQueueFull
from casesignd.core.tenant_limits import (
    QUEUE_FULL_RETRY_S,
    TenantLimits,
    retry_after_s,
    window_start,
)
from casesignd.store.records import Charge, Job, row_job
from casesignd.store.tx import Row, Tx

ADMITTED = "admitted"
UPLOAD_BYTES = "upload_bytes"


def charge(tx: Tx, tenant: str, measure: str, amount: int, cap: int,
           window_s: int) -> Charge | None:
    """Take ``amount`` of ``tenant``'s ``measure`` in the window of ``tx.now``, when it
    fits under ``cap``; None when it does not (nothing taken)."""
    start = window_start(tx.now, window_s)
    row = tx.one("charge_usage", tenant=tenant, measure=measure, window_start=start,
                 amount=amount, cap=cap)
    return None if row is None else Charge(tenant, measure, amount, start)


def refund(tx: Tx, taken: Charge) -> None:
    tx.run("refund_usage", tenant=taken.tenant, measure=taken.measure, amount=taken.amount,
           window_start=taken.window_start)


def check_waiting(tx: Tx, tenant: str, max_queued: int) -> None:
    """Refuse one more waiting job of ``tenant`` when it has ``max_queued`` (0: no
    limit): a new job's admission, or a failed job's replay."""
    if max_queued:
        row = tx.one("tenant_waiting", tenant=tenant)
        if row is not None and row["n"] >= max_queued:
            raise TenantQueueFull(
                f"this tenant has {max_queued} jobs waiting, its limit; retry once "
                "one is claimed", headers={"Retry-After": str(QUEUE_FULL_RETRY_S)})


def check_admission(tx: Tx, tenant: str, limits: TenantLimits) -> None:
    """Refuse an admission past ``tenant``'s limits, or charge it to its rate; run in
    the transaction that inserts the job, after its key was looked up."""
    check_waiting(tx, tenant, limits.max_queued)
    if limits.admit_rate and charge(tx, tenant, ADMITTED, 1, limits.admit_rate,
                                    limits.admit_window_s) is None:
        wait = retry_after_s(tx.now, limits.admit_window_s)
        raise RateLimited(
            f"this tenant may admit {limits.admit_rate} jobs per {limits.admit_window_s} s; "
            f"the next window starts in {wait} s", headers={"Retry-After": str(wait)})


def limited(limits: TenantLimits | None) -> bool:
    """An admission under ``limits`` is checked against the store."""
    return limits is not None and bool(limits.admit_rate or limits.max_queued)


class RunningRoom:
    """How many more jobs each tenant with a running limit may start in one claim:
    its limit less the jobs it has running (read in the claim's transaction)."""

    def __init__(self, limits: dict[str, int], running: dict[str, int]) -> None:
        self.left = {t: max(0, n - running.get(t, 0)) for t, n in limits.items() if n > 0}

    @classmethod
    def of(cls, tx: Tx, limits: dict[str, int], tenants: Any) -> RunningRoom:
        """The room left, counted in ``tx``; ``tenants``: the limited tenants' names as
        the engine takes a list parameter."""
        return cls(limits, {r["tenant"]: int(r["n"])
                            for r in tx.all("running_by_tenant", tenants=tenants)})

    def skip(self) -> list[str]:
        """The tenants a claim must pass over: at their limit."""
        return sorted(t for t, n in self.left.items() if n <= 0)

    def most(self, want: int) -> int:
        """Jobs the next claim statement may take without passing any limit."""
        return min([want, *(n for n in self.left.values() if n > 0)])

    def took(self, tenant: str) -> None:
        if tenant in self.left:
            self.left[tenant] -= 1


class TenantVerbs:
    """Tenants' limits and the operator's reads over a store's writer and readers."""

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def _one(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def charge_upload(self, tenant: str, size: int, limits: TenantLimits) -> Charge | None:
        """Take ``size`` bytes of ``tenant``'s upload quota before the body is read;
        QuotaExceeded (its Retry-After the window's end) when they do not fit. None:
        the tenant has no upload quota."""
        if not limits.upload_bytes:
            return None

        def op(tx: Tx) -> Charge:
            taken = charge(tx, tenant, UPLOAD_BYTES, size, limits.upload_bytes,
                           limits.upload_window_s)
            if taken is None:
                wait = retry_after_s(tx.now, limits.upload_window_s)
                raise QuotaExceeded(
                    f"this tenant may upload {limits.upload_bytes} bytes per "
                    f"{limits.upload_window_s} s; the next window starts in {wait} s",
                    headers={"Retry-After": str(wait)})
            return taken

        return await self._write(op)  # type: ignore[no-any-return]

    async def refund(self, taken: Charge) -> None:
        """Give back a charge that stored nothing (a failed or repeated upload)."""
        await self._write(lambda tx: refund(tx, taken))

    async def admin_queues(self) -> list[dict[str, Any]]:
        """Per tenant, kind and state (queued, retry_wait, running, failed): how many
        jobs, and since when the oldest of them waits (Unix seconds)."""
        return [dict(r) for r in await self._rows("admin_queues")]

    async def oldest_queued_by_tenant(self) -> dict[str, float]:
        return {r["tenant"]: float(r["oldest"]) for r in await self._rows("oldest_queued_by_tenant")
                if r["oldest"] is not None}

    async def lease_holders(self) -> list[dict[str, Any]]:
        """Per lease owner (``node:pid:…``): the leases it holds, the soonest and the
        latest of their expiries."""
        return [dict(r) for r in await self._rows("lease_holders")]

    async def connected_nodes(self) -> list[dict[str, Any]]:
        """The daemons connected to the store now (``node``, ``since``): a store of
        one daemon knows only its own, which the caller adds."""
        return []

    async def dead_letter(self, *, tenant: str | None, kind: str | None, code: str | None,
                          limit: int, cursor: str | None, state: str = "failed"
                          ) -> tuple[list[Job], str | None]:
        """Failed jobs (or those of another engine ``state``) of every tenant, newest
        first, narrowed by tenant, kind and error code; the cursor is the last job id
        of the previous page."""
        rows = await self._rows("dead_letter", state=state, tenant=tenant, kind=kind, code=code,
                                cursor=cursor or "job_~", limit=limit + 1)
        jobs = [row_job(r) for r in rows[:limit]]
        return jobs, jobs[-1].job_id if len(rows) > limit else None

    async def find_job(self, job_id: str) -> Job | None:
        """A job of any tenant, by id: the operator's look-up."""
        rows = await self._one("get_job_any", job_id=job_id)
        return row_job(rows[0]) if rows else None
