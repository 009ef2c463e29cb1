"""Renewals on a schedule: ``[archive] renew_before_days``.

Every ``renew_interval_s`` the daemon asks the store for B-LTA artifacts whose last
document timestamp's chain expires within ``renew_before_days`` and that no
artifact renewed yet, and admits an ``extend_signature`` job for each, under the
artifact's tenant. It admits through that kind's own admission, found by name as a
client names it (:data:`RENEWS_WITH`): a renewal is checked as a client's request
is, and this scheduler imports no job kind. The job's idempotency key is derived
from the artifact, so a renewal already admitted (queued, running, or failed and
waiting for an operator) is found again, not doubled; the renewed artifact is
marked by the one that renews it, in the job's finishing transaction.

It lives beside the job kinds, not in the engine: what is due is a signing question
(B-LTA, the expiry of a TSA's chain), and the engine knows no signing words.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from casesignd.config import Config
from casesignd.core.errors import CasesignError
from casesignd.core.logs import log_event
from casesignd.engine.kinds import JobKind
from casesignd.engine.reservations import KeyReservations
from casesignd.signing.longterm import LongTerm
from casesignd.store import Store


class _Waker(Protocol):
    def queued(self) -> None: ...


class RenewalServices(Protocol):
    """What renewals use of the daemon's services (casesignd.daemon.lifecycle.Services)."""

    config: Config
    store: Store
    reservations: KeyReservations
    longterm: LongTerm
    kinds: dict[str, JobKind]

    @property
    def pool(self) -> _Waker: ...

log = logging.getLogger("casesignd.job_kinds.renewal")

BATCH = 100
# The job kind that renews an artifact.
RENEWS_WITH = "extend_signature"


async def renew_due(s: RenewalServices, now: float | None = None) -> int:
    """Admit a renewal for every artifact due; how many were new jobs."""
    cfg = s.config
    days = cfg.archive.renew_before_days
    kind = s.kinds.get(RENEWS_WITH)
    if days <= 0 or kind is None:
        return 0
    now = time.time() if now is None else now
    policy = cfg.policy(None)
    if policy is None or not policy.at_least("B-LTA"):
        # Renewals need a B-LTA default policy (its TSA makes the timestamps).
        log_event(log, "renewal.no_policy", level=logging.WARNING)
        return 0
    # A new timestamp helps only when its chain outlives the one it covers: with the
    # TSA's current chain known to expire no later, renewing would repeat itself.
    stamp_expires_at = s.longterm.timestamp_chain_expires_at(policy.tsa_url)
    admitted = 0
    for artifact_id, tenant, expires_at in await s.store.due_renewals(now + days * 86400, BATCH):
        if stamp_expires_at is not None and stamp_expires_at <= expires_at:
            log_event(log, "renewal.tsa_chain_expiring", level=logging.WARNING,
                      artifact_id=artifact_id)
            continue
        admission = kind.admit({"kind": kind.name, "artifact_id": artifact_id}, cfg, tenant)
        new = admission.new_job(kind.name, tenant, idempotency_header=None, created_at=now,
                                correlation_id=f"renewal-{artifact_id}")
        try:
            job, created = await s.reservations.admit(
                new, actor="renewal", max_queue_depth=cfg.workers.max_queue_depth)
        except CasesignError as e:  # a full queue: the next round tries again
            log_event(log, "renewal.deferred", level=logging.WARNING, code=e.code)
            break
        if created:
            admitted += 1
            log_event(log, "renewal.admitted", job_id=job.job_id, artifact_id=artifact_id)
    if admitted:
        s.pool.queued()
    return admitted


async def keep_renewing(s: RenewalServices) -> None:
    """The daemon's task (only with ``renew_before_days`` set)."""
    while True:
        try:
            await renew_due(s)
        except CasesignError as e:
            log_event(log, "renewal.failed", level=logging.WARNING, code=e.code)
        await asyncio.sleep(s.config.archive.renew_interval_s)
