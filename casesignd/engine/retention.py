"""Retention, erasure and the disk they keep bounded: ``[retention]``.

Every ``sweep_interval_s`` (with a little jitter, so that daemons on one store do not
sweep in step) the daemon removes what is past its time, area by area — refused jobs
(``rejected_s``), the other terminal jobs (``jobs_s``), artifacts (``artifacts_s``),
objects (``objects_s``) — in transactions of ``sweep_batch`` rows
(:meth:`Store.expire <casesignd.store.lifecycle.LifecycleVerbs.expire>`), each one
recorded in the audit chain, then the webhook deliveries that ended (``jobs_s``), with a pause between them so that admissions and kiosk
writes go first in the writer's queue. Only after a batch commits are its files
removed, off the event loop. What the store keeps from removal (holds, jobs that may
still run, the objects they use) is :mod:`casesignd.store.lifecycle`'s to decide.

An erasure (``DELETE /v1/cases/{case_id}``) removes files the same way, at once.
After an erasure, and after a sweep that removed bytes the store kept itself, the
store clears what its own files still hold of them (:meth:`Store.scrub
<casesignd.store.records.Store.scrub>`: SQLite's WAL truncated, PostgreSQL's table
vacuumed), so that erased means no byte of it remains in the store's files.
After each sweep the disk use per area is measured for the gauges (from the store's
sizes and ``statvfs``: no walk of the state directory).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from casesignd.config import Config
from casesignd.core.errors import CasesignError
from casesignd.core.keyring import artifact_owner, object_owner
from casesignd.core.logs import log_event
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.objects import ObjectStore
from casesignd.files.temp import TempManager
from casesignd.observability.metrics import Metrics, StateCache
from casesignd.store import Store
from casesignd.store.records import AREAS, Erased, Removed

log = logging.getLogger("casesignd.engine.retention")

# Batches of one area a sweep removes before it moves on (the rest waits for the next
# sweep), and the pause between two batches.
MAX_BATCHES = 50
PAUSE_S = 0.02


class RetentionServices(Protocol):
    """What retention uses of the daemon's services (casesignd.daemon.lifecycle.Services)."""

    config: Config
    store: Store
    objects: ObjectStore
    metrics: Metrics
    state: StateCache
    temp: TempManager

    @property
    def artifacts(self) -> ArtifactStore | None: ...


def remove_files(objects: ObjectStore, artifacts: ArtifactStore | None,
                 removed: Iterable[Removed]) -> int:
    """The files of what the store removed; the bytes freed. Blocking. A file that
    cannot be removed (a permission, a read-only mount) is logged and left: its row is
    gone, so ``store check`` names it, and the sweep and the erasure go on."""
    freed = 0
    for r in removed:
        try:
            if r.what == "object" and r.case_id is not None:
                freed += objects.remove(r.tenant, r.case_id, r.key)
            elif r.what == "artifact" and artifacts is not None:
                freed += artifacts.remove(r.key)
        except OSError as e:
            log_event(log, "retention.file_kept", level=logging.WARNING, kind=r.what,
                      error=f"{type(e).__name__}: {e.strerror or e}")
    return freed


def owners_of(removed: Iterable[Removed]) -> list[str]:
    """The data-key owners of the objects and artifacts among ``removed``."""
    return [object_owner(r.key) if r.what == "object" else artifact_owner(r.key)
            for r in removed if r.what in ("object", "artifact")]


async def _gone(s: RetentionServices, removed: list[Removed], reason: str) -> None:
    # Their data keys leave this process's memory with their rows (an object's key may
    # stand on for another case: it is read from the store again when needed).
    s.objects.envelope.forget(owners_of(removed))
    await asyncio.to_thread(remove_files, s.objects, s.artifacts, removed)
    for what in ("job", "artifact", "object"):
        n = sum(r.what == what for r in removed)
        if n:
            s.metrics.removed(what, reason, n)


async def scrub(s: RetentionServices) -> None:
    """The store's files cleared of what was just removed; a failure is logged (the
    rows are gone either way) and the next removal's scrub covers it too."""
    try:
        await s.store.scrub()
    except CasesignError as e:
        log_event(log, "retention.scrub_failed", level=logging.WARNING, code=e.code,
                  error=e.message)


async def sweep(s: RetentionServices, now: float | None = None) -> dict[str, int]:
    """One sweep of every area that expires; how many things each lost."""
    cfg = s.config.retention
    cutoffs = cfg.cutoffs(time.time() if now is None else now)
    counts: dict[str, Any] = {}  # removed, by area (log fields)
    # Bytes or data keys the store kept went: its files are scrubbed once, at the end.
    inline = False
    for area in AREAS:
        if area not in cutoffs:
            continue
        for batch in range(MAX_BATCHES):
            if batch:
                await asyncio.sleep(PAUSE_S)
            removed = await s.store.expire(area, cutoffs[area], cfg.sweep_batch)
            if removed:
                await _gone(s, removed, "retention")
                counts[area] = counts.get(area, 0) + len(removed)
                inline = inline or any(r.inline or r.keyed for r in removed)
            if len(removed) < cfg.sweep_batch:
                break
    if "jobs" in cutoffs:
        n = await _expire_deliveries(s, cutoffs["jobs"])
        if n:
            counts["deliveries"] = n
    if inline:
        await scrub(s)
    if counts:
        log_event(log, "retention.swept", **counts)
    return counts


async def _expire_deliveries(s: RetentionServices, cutoff: float) -> int:
    """Webhook deliveries that ended before ``cutoff`` (the jobs' window: a delivery
    reports a job and lives as long as a job row does), in batches; how many went.
    They hold ids, the event, the endpoint's name and the last status, nothing of
    the case (the body is made from the job when it is sent), so they need no audit
    event and no scrub."""
    batch_rows = s.config.retention.sweep_batch
    total = 0
    for batch in range(MAX_BATCHES):
        if batch:
            await asyncio.sleep(PAUSE_S)
        n = await s.store.expire_deliveries(cutoff, batch_rows)
        total += n
        if n < batch_rows:
            break
    if total:
        s.metrics.removed("delivery", "retention", total)
    return total


async def erase(s: RetentionServices, tenant: str, case_id: str, actor: str) -> Erased:
    """A case's objects and artifacts removed now, its files with them."""
    erased = await s.store.erase_case(tenant, case_id, actor)
    await _gone(s, erased.removed, "erasure")
    if erased.removed:
        await scrub(s)
    log_event(log, "case.erased", objects=sum(r.what == "object" for r in erased.removed),
              artifacts=sum(r.what == "artifact" for r in erased.removed),
              canceled=len(erased.canceled))
    return erased


def _volume_bytes(path: Path) -> tuple[int, int]:
    """(used, size) of the file system ``path`` is on."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0, 0
    size = st.f_blocks * st.f_frsize
    return size - st.f_bfree * st.f_frsize, size


def measure(cfg: Config, stored: dict[str, int], temp_used: int
            ) -> tuple[dict[str, int], dict[str, int]]:
    """Disk use per area and each area's limit, as the gauges show them: the objects'
    and artifacts' bytes the store names (``stored``; a blob two cases share counts
    twice), the store's files, the temp areas, the volumes. Blocking (stat calls)."""
    state = cfg.path(cfg.storage.state_dir)
    used = {"objects": stored["objects"], "artifacts": stored["artifacts"], "temp": temp_used}
    if cfg.store.kind == "sqlite":
        db = cfg.path(cfg.store.path)
        used["store"] = sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
                            if p.exists())
    used["state_volume"], state_size = _volume_bytes(state)
    used["temp_volume"], temp_size = _volume_bytes(cfg.path(cfg.storage.temp_dir))
    limits = {"temp": cfg.storage.temp_quota_bytes, "state_volume": state_size,
              "temp_volume": temp_size}
    for area in ("objects", "artifacts", "store"):
        if area in used:
            limits[area] = state_size  # they share the state volume
    return used, limits


async def refresh_disk(s: RetentionServices) -> None:
    stored = await s.store.disk_use()
    used, limits = await asyncio.to_thread(measure, s.config, stored, s.temp.usage().used_bytes)
    s.state.update(disk_bytes=used, disk_limit_bytes=limits)


async def keep_sweeping(s: RetentionServices) -> None:
    """The daemon's task: a sweep (when anything expires) and a measure, each interval."""
    interval = s.config.retention.sweep_interval_s
    while True:
        try:
            if s.config.retention.cutoffs(0.0):
                await sweep(s)
        except CasesignError as e:  # the store is down: the next sweep tries again
            log_event(log, "retention.failed", level=logging.WARNING, code=e.code)
        except Exception as e:  # noqa: BLE001 - the task must outlive one bad sweep
            log_event(log, "retention.failed", level=logging.ERROR,
                      error=f"{type(e).__name__}: {e}")
        try:
            await refresh_disk(s)
        except OSError as e:
            log_event(log, "retention.measure_failed", level=logging.WARNING, error=str(e))
        await asyncio.sleep(interval * random.uniform(0.9, 1.1))
