"""The data lifecycle's verbs, for both SQL stores: what ``[retention]`` removes, legal
holds, and a case's erasure (:class:`LifecycleVerbs`, which :class:`~.verbs.SqlStore`
extends). Each verb is one transaction of the writer, with its audit events: a row
goes exactly when its removal is recorded. The files go after the commit
(casesignd.engine.retention), so a crash between leaves a file without a row — which
``store check`` names — never a row without its file.

What a removal keeps:

- a case under a legal hold keeps everything;
- an object stays while a job of its case that may still run (queued, running,
  waiting for a retry, failed and so retryable) names its digest, and for
  ``objects_s`` after the last such job ended (a removed job's end is folded into the
  object's ``used_at``, so the count survives the job's row);
- an artifact stays while an ``extend_signature`` job that may run names it; when it
  goes, the succeeded jobs that name it keep their rows, and their results keep its
  digest and size and gain ``removed_at`` (one meaning of "removed" for the job
  resource, ``store check``, backup and restore);
- audit events are never removed, and removal events hold digests and ids only.

"Rejected" jobs (failed for their input: refused documents, the kiosk's among them)
live ``rejected_s``, the other terminal jobs ``jobs_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from casesignd.core.errors import Conflict, NotFound
from casesignd.core.hashing import OBJECT_REF_PREFIX
from casesignd.core.keyring import artifact_owner
from casesignd.store.records import Area, CaseRef, Erased, Job, Removed, row_job
from casesignd.store.tx import Row, Tx


def on_hold(case_id: str) -> Conflict:
    return Conflict(f"case {case_id} is under a legal hold", code="on_hold")


def case_not_found() -> NotFound:
    return NotFound("the tenant has no such case", code="case_not_found")


def case_busy() -> Conflict:
    return Conflict("a job of this case is running; erase the case once it ends",
                    code="case_busy", headers={"Retry-After": "5"})


def _object_digests(job_input: str) -> list[str]:
    """The digests of the stored objects a job's input names."""
    try:
        items = msgspec.json.decode(job_input).get("items") or []
    except (msgspec.DecodeError, AttributeError):
        return []
    return [str(i["sha256"]).lower() for i in items
            if isinstance(i, dict) and str(i.get("object_ref", "")).startswith(OBJECT_REF_PREFIX)
            and isinstance(i.get("sha256"), str)]


def _object_removed(tx: Tx, row: Row, actor: str, reason: str) -> Removed:
    # Its data key (storage encryption) goes with the last case that holds the blob.
    keyed = bool(tx.run("drop_object_key", sha256=row["sha256"]))
    tx.event(CaseRef(row["tenant"], row["case_id"]), "object_removed", actor,
             {"sha256": row["sha256"], "size": row["size"], "reason": reason})
    return Removed("object", row["tenant"], row["case_id"], row["sha256"], row["size"],
                   keyed=keyed)


def _artifact_removed(tx: Tx, row: Row, actor: str, reason: str) -> Removed:
    inline = bool(tx.run("drop_artifact_bytes", artifact_id=row["artifact_id"]))
    keyed = bool(tx.run("drop_data_key", owner=artifact_owner(row["artifact_id"])))
    # The jobs that made it keep their rows, and say so: removed, not lost.
    tx.run("mark_result_removed", tenant=row["tenant"], job_id=row["job_id"],
           case_id=row["case_id"], artifact_id=row["artifact_id"], now=tx.now)
    # The signature key's record goes with its bytes: a later request for it signs anew
    # rather than naming an artifact that is gone.
    tx.run("drop_artifact_signatures", tenant=row["tenant"], artifact_id=row["artifact_id"])
    tx.event(CaseRef(row["tenant"], row["case_id"], job_id=row["job_id"]), "artifact_removed",
             actor, {"artifact_id": row["artifact_id"], "sha256": row["sha256"],
                     "reason": reason})
    return Removed("artifact", row["tenant"], row["case_id"], row["artifact_id"], row["size"],
                   inline=inline, keyed=keyed)


def erased_detail(removed: list[Removed], canceled: list[str],
                  digests: dict[str, str]) -> dict[str, Any]:
    """The ``case_erased`` event's detail: what went and where, by digest (an
    artifact's from ``digests``), never a name or a document."""
    return {"objects": sum(r.what == "object" for r in removed),
            "artifacts": sum(r.what == "artifact" for r in removed),
            "canceled": canceled,
            "removed": [{"what": "object", "sha256": r.key, "size": r.size, "where": "objects"}
                        if r.what == "object" else
                        {"what": "artifact", "artifact_id": r.key, "sha256": digests[r.key],
                         "size": r.size, "where": "store" if r.inline else "artifacts"}
                        for r in removed]}


def expire(tx: Tx, area: Area, cutoff: float, limit: int) -> list[Removed]:
    """One batch of ``area``'s things past ``cutoff`` removed, with their events."""
    actor, reason = "system", "retention"
    if area in ("rejected", "jobs"):
        out = []
        for row in tx.all("expire_jobs", cutoff=cutoff, limit=limit, rejected=area == "rejected"):
            # A refused job's documents live no longer than it does: its end does not
            # extend them (they count from their upload).
            if row["case_id"] is not None and area == "jobs":
                for sha256 in _object_digests(row["input"]):
                    tx.run("used_until", tenant=row["tenant"], case_id=row["case_id"],
                           sha256=sha256, finished_at=row["finished_at"])
            tx.event(CaseRef(row["tenant"], row["case_id"], job_id=row["job_id"],
                             attempt=row["attempt"], input_digest=row["input_digest"],
                             version=row["version"]),
                     "job_removed", actor, {"state": row["state"], "kind": row["kind"],
                                            "reason": reason, "area": area})
            out.append(Removed("job", row["tenant"], row["case_id"], row["job_id"]))
        return out
    if area == "artifacts":
        return [_artifact_removed(tx, row, actor, reason)
                for row in tx.all("expire_artifacts", cutoff=cutoff, limit=limit)]
    return [_object_removed(tx, row, actor, reason)
            for row in tx.all("expire_objects", cutoff=cutoff, limit=limit)]


def put_object(tx: Tx, tenant: str, case_id: str, sha256: str, size: int) -> None:
    tx.run("put_object", tenant=tenant, case_id=case_id, sha256=sha256, size=size, now=tx.now)


def hold(tx: Tx, tenant: str, case_id: str, actor: str, placed: bool) -> dict[str, Any] | None:
    """Place (``placed``) or lift a case's hold; the hold as it now is (None: none).
    Placing one twice, or lifting one that is not there, changes nothing and writes no
    event."""
    ref = CaseRef(tenant, case_id)
    if placed:
        if tx.run("place_hold", tenant=tenant, case_id=case_id, now=tx.now):
            tx.event(ref, "hold_placed", actor, {})
        row = tx.one("get_hold", tenant=tenant, case_id=case_id)
        return dict(row) if row is not None else None
    if tx.run("lift_hold", tenant=tenant, case_id=case_id):
        tx.event(ref, "hold_lifted", actor, {})
    return None


def erase(tx: Tx, tenant: str, case_id: str, actor: str) -> Erased:
    """A case's objects and artifacts removed now, its waiting jobs canceled; refused
    under a hold (``on_hold``), while one of its jobs runs (``case_busy``), and for a
    case the tenant does not have (``case_not_found``). Nothing for nothing: only an
    erasure that removed or canceled something is recorded, so that requests alone
    cannot grow the audit chain."""
    if tx.one("get_hold", tenant=tenant, case_id=case_id) is not None:
        raise on_hold(case_id)
    known = tx.one("case_known", tenant=tenant, case_id=case_id)
    if known is None or not known["known"]:
        raise case_not_found()
    busy = tx.one("case_running", tenant=tenant, case_id=case_id)
    if busy is not None and busy["n"]:
        raise case_busy()
    canceled = []
    for row in tx.all("erase_cancel", tenant=tenant, case_id=case_id, now=tx.now):
        job = row_job({k: row[k] for k in Job.__struct_fields__})
        tx.event(job, "canceled", actor, {"reason": "erasure"})
        canceled.append(job)
    removed = [_object_removed(tx, row, actor, "erasure")
               for row in tx.all("erase_objects", tenant=tenant, case_id=case_id)]
    digests = {}
    for row in tx.all("erase_artifacts", tenant=tenant, case_id=case_id):
        digests[row["artifact_id"]] = row["sha256"]
        removed.append(_artifact_removed(tx, row, actor, "erasure"))
    if removed or canceled:
        tx.event(CaseRef(tenant, case_id), "case_erased", actor,
                 erased_detail(removed, [j.job_id for j in canceled], digests))
    return Erased(removed, canceled)


def disk_use(rows: Sequence[Row]) -> dict[str, int]:
    row = rows[0]
    return {"objects": int(row["objects"]), "artifacts": int(row["artifacts"])}


class LifecycleVerbs:
    """The lifecycle's verbs over a store's writer and readers (see :mod:`.verbs`)."""

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def put_object(self, tenant: str, case_id: str, sha256: str, size: int) -> None:
        """An object uploaded to a case (again): its life counts from now."""
        await self._write(lambda tx: put_object(tx, tenant, case_id, sha256, size))

    async def expire(self, area: Area, cutoff: float, limit: int) -> list[Removed]:
        """Remove one batch (at most ``limit``) of ``area``'s things older than
        ``cutoff`` that nothing keeps; what went, recorded."""
        return await self._write(lambda tx: expire(tx, area, cutoff, limit))

    async def get_hold(self, tenant: str, case_id: str) -> dict[str, Any] | None:
        rows = await self._rows("get_hold", tenant=tenant, case_id=case_id)
        return dict(rows[0]) if rows else None

    async def set_hold(self, tenant: str, case_id: str, actor: str,
                       placed: bool) -> dict[str, Any] | None:
        """Place or lift a case's legal hold; the hold as it now is."""
        return await self._write(lambda tx: hold(tx, tenant, case_id, actor, placed))

    async def erase_case(self, tenant: str, case_id: str, actor: str) -> Erased:
        """Erase a case's objects and artifacts now (see :func:`erase`)."""
        return await self._write(lambda tx: erase(tx, tenant, case_id, actor))

    async def disk_use(self) -> dict[str, int]:
        """Bytes of the objects the store names, and of its artifacts kept as files
        (those it keeps itself are the store's own bytes)."""
        return disk_use(await self._rows("disk_use"))
