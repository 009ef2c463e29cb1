"""The data lifecycle's verbs in memory (:class:`MemoryLifecycle`, which
:class:`~.memory.MemoryStore` extends): the same meaning as the SQL stores'
(:mod:`.lifecycle`), over the memory store's dictionaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from casesignd.core import audit
from casesignd.core.hashing import OBJECT_REF_PREFIX
from casesignd.store.lifecycle import case_busy, case_not_found, erased_detail, on_hold
from casesignd.store.records import Area, CaseRef, Delivery, Erased, Job, Removed

_MAY_RUN = ("queued", "running", "retry_wait", "failed")
_TERMINAL = ("succeeded", "failed", "canceled")


def _rejected(job: Job) -> bool:
    return job.state == "failed" and job.error_category == "permanent_input"


class MemoryLifecycle:
    """Holds, objects' lives and removals, in the dictionaries of a MemoryStore."""

    clock: Callable[[], float]
    # MemoryDataKeys': an object's or artifact's data key dropped with it.
    _drop_object_key: Callable[[str], bool]
    _drop_artifact_key: Callable[[str], bool]
    _jobs: dict[str, Job]
    _idem: dict[tuple[str, str], str]
    _signatures: dict[tuple[str, str], dict[str, Any]]
    _artifacts: dict[str, dict[str, Any]]
    _data: dict[str, bytes]
    _event: Callable[..., None]
    _deliveries: dict[str, Delivery]  # the outbox's (a job with one pending stays)

    # (tenant, case) -> placed_at; (tenant, case, sha256) -> [size, used_at]
    _holds: dict[tuple[str, str], float]
    _objects: dict[tuple[str, str, str], list[Any]]

    async def put_object(self, tenant: str, case_id: str, sha256: str, size: int) -> None:
        objects = self._objects
        now = self.clock()
        old = objects.get((tenant, case_id, sha256))
        objects[(tenant, case_id, sha256)] = [size, max(now, old[1]) if old else now]

    async def get_hold(self, tenant: str, case_id: str) -> dict[str, Any] | None:
        holds = self._holds
        at = holds.get((tenant, case_id))
        return None if at is None else {"tenant": tenant, "case_id": case_id, "placed_at": at}

    async def set_hold(self, tenant: str, case_id: str, actor: str,
                       placed: bool) -> dict[str, Any] | None:
        holds = self._holds
        key = (tenant, case_id)
        if placed:
            if key not in holds:
                holds[key] = self.clock()
                self._event(CaseRef(tenant, case_id), "hold_placed", actor, {})
            return await self.get_hold(tenant, case_id)
        if holds.pop(key, None) is not None:
            self._event(CaseRef(tenant, case_id), "hold_lifted", actor, {})
        return None

    def _on_hold(self, tenant: str, case_id: str | None) -> bool:
        holds = self._holds
        return case_id is not None and (tenant, case_id) in holds

    def _uses(self, job: Job, sha256: str) -> bool:
        return sha256 in job.input

    def _remove_object(self, key: tuple[str, str, str], actor: str, reason: str) -> Removed:
        objects = self._objects
        size, _ = objects.pop(key)
        self._event(CaseRef(key[0], key[1]), "object_removed", actor,
                    {"sha256": key[2], "size": size, "reason": reason})
        return Removed("object", key[0], key[1], key[2], size,
                       keyed=self._drop_object_key(key[2]))

    def _remove_artifact(self, artifact_id: str, actor: str, reason: str) -> Removed:
        a = self._artifacts.pop(artifact_id)
        inline = self._data.pop(artifact_id, None) is not None
        now = self.clock()
        for job in list(self._jobs.values()):
            result = job.result_dict() if job.state == "succeeded" else None
            made = (result or {}).get("artifact") or {}
            if made.get("artifact_id") == artifact_id and "removed_at" not in made \
                    and job.tenant == a["tenant"]:
                made["removed_at"] = now
                self._jobs[job.job_id] = msgspec.structs.replace(
                    job, result=audit.canonical(result).decode())
        for k in [k for k, s in self._signatures.items()
                  if k[0] == a["tenant"] and s["artifact_id"] == artifact_id]:
            del self._signatures[k]
        self._event(CaseRef(a["tenant"], a.get("case_id"), job_id=a["job_id"]),
                    "artifact_removed", actor,
                    {"artifact_id": artifact_id, "sha256": a["sha256"], "reason": reason})
        return Removed("artifact", a["tenant"], a.get("case_id"), artifact_id, a["size"],
                       inline=inline, keyed=self._drop_artifact_key(artifact_id))

    async def expire(self, area: Area, cutoff: float, limit: int) -> list[Removed]:
        objects = self._objects
        if area in ("rejected", "jobs"):
            jobs = sorted((j for j in self._jobs.values()
                           if j.state in _TERMINAL and (j.finished_at or 0.0) < cutoff
                           and _rejected(j) == (area == "rejected")
                           and not self._on_hold(j.tenant, j.case_id)
                           and not any(d.job_id == j.job_id and d.state == "pending"
                                       for d in self._deliveries.values())),
                          key=lambda j: j.finished_at or 0.0)[:limit]
            out = []
            for job in jobs:
                del self._jobs[job.job_id]
                self._idem.pop((job.tenant, job.idem_key), None)
                items = msgspec.json.decode(job.input).get("items") if area == "jobs" else None
                for item in items or []:
                    if str(item.get("object_ref", "")).startswith(OBJECT_REF_PREFIX):
                        key = (job.tenant, job.case_id or "", str(item["sha256"]).lower())
                        if key in objects:
                            objects[key][1] = max(objects[key][1], job.finished_at or 0.0)
                self._event(CaseRef(job.tenant, job.case_id, job_id=job.job_id,
                                    attempt=job.attempt, input_digest=job.input_digest,
                                    version=job.version), "job_removed", "system",
                            {"state": job.state, "kind": job.kind, "reason": "retention",
                             "area": area})
                out.append(Removed("job", job.tenant, job.case_id, job.job_id))
            return out
        if area == "artifacts":
            ids = [a["artifact_id"] for a in sorted(self._artifacts.values(),
                                                     key=lambda a: a["created_at"])
                   if a["created_at"] < cutoff and not self._on_hold(a["tenant"], a.get("case_id"))
                   and not any(j.kind == "extend_signature" and j.state in _MAY_RUN[:3]
                               and a["artifact_id"] in j.input for j in self._jobs.values())]
            return [self._remove_artifact(i, "system", "retention") for i in ids[:limit]]
        keys = [k for k, (_, used_at) in sorted(objects.items(), key=lambda kv: kv[1][1])
                if used_at < cutoff and not self._on_hold(k[0], k[1])
                and not any(j.tenant == k[0] and j.case_id == k[1] and self._uses(j, k[2])
                            and (j.state in _MAY_RUN or (j.finished_at or 0.0) >= cutoff)
                            for j in self._jobs.values())]
        return [self._remove_object(k, "system", "retention") for k in keys[:limit]]

    async def erase_case(self, tenant: str, case_id: str, actor: str) -> Erased:
        objects = self._objects
        if self._on_hold(tenant, case_id):
            raise on_hold(case_id)
        jobs = [j for j in self._jobs.values() if j.tenant == tenant and j.case_id == case_id]
        if not jobs and not any(k[:2] == (tenant, case_id) for k in objects) and not any(
                a["tenant"] == tenant and a.get("case_id") == case_id
                for a in self._artifacts.values()):
            raise case_not_found()
        if any(j.state == "running" for j in jobs):
            raise case_busy()
        now = self.clock()
        canceled = []
        for job in jobs:
            if job.state in ("queued", "retry_wait"):
                job = msgspec.structs.replace(
                    job, state="canceled", finished_at=now, updated_at=now, queued_since=None,
                    queue_wait_ms=job.queue_wait_ms
                    + max(0.0, (now - (job.queued_since or now)) * 1000.0))
                self._jobs[job.job_id] = job
                self._event(job, "canceled", actor, {"reason": "erasure"})
                canceled.append(job)
        removed = [self._remove_object(k, actor, "erasure")
                   for k in [k for k in objects if k[:2] == (tenant, case_id)]]
        digests = {i: a["sha256"] for i, a in self._artifacts.items()
                   if a["tenant"] == tenant and a.get("case_id") == case_id}
        removed += [self._remove_artifact(i, actor, "erasure") for i in digests]
        if removed or canceled:
            self._event(CaseRef(tenant, case_id), "case_erased", actor,
                        erased_detail(removed, [j.job_id for j in canceled], digests))
        return Erased(removed, canceled)

    async def scrub(self) -> None:
        """Nothing to clear: removed bytes are gone with their dictionary entries."""

    async def disk_use(self) -> dict[str, int]:
        objects = self._objects
        return {"objects": sum(size for size, _ in objects.values()),
                "artifacts": sum(a["size"] for i, a in self._artifacts.items()
                                 if i not in self._data)}
