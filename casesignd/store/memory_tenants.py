"""Tenants' limits and the operator's reads in memory (:class:`MemoryTenants`, which
:class:`~.memory.MemoryStore` extends): the same meaning as the SQL stores'
(:mod:`.tenants`), over the memory store's dictionaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from casesignd.core.errors import QuotaExceeded, RateLimited, TenantQueueFull
from casesignd.core.tenant_limits import (
    QUEUE_FULL_RETRY_S,
    TenantLimits,
    retry_after_s,
    window_start,
)
from casesignd.store.records import Charge, Job
from casesignd.store.tenants import ADMITTED, UPLOAD_BYTES, RunningRoom


class MemoryTenants:
    """What each tenant used of its limits, and the reads across tenants."""

    clock: Callable[[], float]
    _jobs: dict[str, Job]
    # (tenant, measure) -> [window_start, used]
    _usage: dict[tuple[str, str], list[float]]

    def _charge(self, tenant: str, measure: str, amount: int, cap: int,
                window_s: int) -> Charge | None:
        start = window_start(self.clock(), window_s)
        row = self._usage.setdefault((tenant, measure), [start, 0])
        used = row[1] if row[0] >= start else 0
        if used + amount > cap:
            return None
        self._usage[(tenant, measure)] = [max(row[0], start), used + amount]
        return Charge(tenant, measure, amount, start)

    def _check_waiting(self, tenant: str, max_queued: int) -> None:
        if max_queued:
            waiting = sum(j.tenant == tenant and j.state in ("queued", "retry_wait")
                          for j in self._jobs.values())
            if waiting >= max_queued:
                raise TenantQueueFull("this tenant's waiting jobs are at its limit",
                                      headers={"Retry-After": str(QUEUE_FULL_RETRY_S)})

    def _check_admission(self, tenant: str, limits: TenantLimits) -> None:
        self._check_waiting(tenant, limits.max_queued)
        if limits.admit_rate and self._charge(tenant, ADMITTED, 1, limits.admit_rate,
                                              limits.admit_window_s) is None:
            raise RateLimited("this tenant's admissions are at its rate", headers={
                "Retry-After": str(retry_after_s(self.clock(), limits.admit_window_s))})

    def _running_room(self, limits: dict[str, int] | None) -> RunningRoom | None:
        if not limits:
            return None
        running: dict[str, int] = {}
        for j in self._jobs.values():
            if j.state == "running":
                running[j.tenant] = running.get(j.tenant, 0) + 1
        return RunningRoom(limits, running)

    async def charge_upload(self, tenant: str, size: int, limits: TenantLimits) -> Charge | None:
        if not limits.upload_bytes:
            return None
        taken = self._charge(tenant, UPLOAD_BYTES, size, limits.upload_bytes,
                             limits.upload_window_s)
        if taken is None:
            raise QuotaExceeded("this tenant's uploads are at its quota", headers={
                "Retry-After": str(retry_after_s(self.clock(), limits.upload_window_s))})
        return taken

    async def refund(self, taken: Charge) -> None:
        row = self._usage.get((taken.tenant, taken.measure))
        if row is not None and row[0] == taken.window_start:
            row[1] = max(0, row[1] - taken.amount)

    async def admin_queues(self) -> list[dict[str, Any]]:
        out: dict[tuple[str, str, str], dict[str, Any]] = {}
        for j in self._jobs.values():
            if j.state not in ("queued", "retry_wait", "running", "failed"):
                continue
            since = j.queued_since if j.queued_since is not None else j.next_attempt_at
            row = out.setdefault((j.tenant, j.kind, j.state), {
                "tenant": j.tenant, "kind": j.kind, "state": j.state, "n": 0, "oldest": since})
            row["n"] += 1
            row["oldest"] = min(row["oldest"], since)
        return list(out.values())

    async def oldest_queued_by_tenant(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for j in self._jobs.values():
            if j.state == "queued" and j.queued_since is not None:
                out[j.tenant] = min(out.get(j.tenant, j.queued_since), j.queued_since)
        return out

    async def lease_holders(self) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for j in self._jobs.values():
            if j.state == "running" and j.lease_owner is not None and j.lease_expires is not None:
                row = out.setdefault(j.lease_owner, {"lease_owner": j.lease_owner, "n": 0,
                                                     "soonest": j.lease_expires,
                                                     "latest": j.lease_expires})
                row["n"] += 1
                row["soonest"] = min(row["soonest"], j.lease_expires)
                row["latest"] = max(row["latest"], j.lease_expires)
        return list(out.values())

    async def connected_nodes(self) -> list[dict[str, Any]]:
        return []

    async def dead_letter(self, *, tenant: str | None, kind: str | None, code: str | None,
                          limit: int, cursor: str | None, state: str = "failed"
                          ) -> tuple[list[Job], str | None]:
        found = sorted((j for j in self._jobs.values()
                        if j.state == state and j.job_id < (cursor or "job_~")
                        and tenant in (None, j.tenant) and kind in (None, j.kind)
                        and code in (None, j.error_code)),
                       key=lambda j: j.job_id, reverse=True)
        page = found[:limit]
        return page, page[-1].job_id if len(found) > limit else None

    async def find_job(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)
