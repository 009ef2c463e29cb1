"""Renewals on a schedule admit through the job kind the daemon runs, found by name:
what a client's request for that kind would be admitted as, and nothing when the
daemon runs no such kind."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from casesignd.engine.kinds import Admission
from casesignd.job_kinds.renewal import RENEWS_WITH, renew_due

ART = "art_" + "1" * 32


class _Kind:
    name = RENEWS_WITH

    def __init__(self) -> None:
        self.asked: list[tuple[dict[str, Any], str]] = []

    def admit(self, body: dict[str, Any], config: Any, tenant: str) -> Admission:
        self.asked.append((body, tenant))
        normalized = {"artifact_id": body["artifact_id"], "policy_version": "lta"}
        return Admission(normalized=normalized, version="lta", key_material=normalized)


class _Store:
    async def due_renewals(self, until: float, limit: int) -> list[tuple[str, str, float]]:
        return [(ART, "acme", until - 1)]


class _Reservations:
    def __init__(self) -> None:
        self.admitted: list[Any] = []

    async def admit(self, new: Any, *, actor: str, max_queue_depth: int) -> tuple[Any, bool]:
        self.admitted.append((new, actor))
        return SimpleNamespace(job_id="job_1"), True


def _services(kinds: dict[str, Any]) -> Any:
    policy = SimpleNamespace(tsa_url="http://tsa", at_least=lambda level: True)
    config = SimpleNamespace(archive=SimpleNamespace(renew_before_days=30),
                             workers=SimpleNamespace(max_queue_depth=100),
                             policy=lambda version: policy)
    woken: list[bool] = []
    return SimpleNamespace(config=config, store=_Store(), reservations=_Reservations(), kinds=kinds,
                           longterm=SimpleNamespace(timestamp_chain_expires_at=lambda url: None),
                           pool=SimpleNamespace(queued=lambda: woken.append(True)), woken=woken)


async def test_a_due_artifact_is_admitted_through_its_kind() -> None:
    kind = _Kind()
    s = _services({RENEWS_WITH: kind})
    assert await renew_due(s, now=1000.0) == 1
    assert kind.asked == [({"kind": RENEWS_WITH, "artifact_id": ART}, "acme")]
    (new, actor), = s.reservations.admitted
    assert (new.kind, new.tenant, actor) == (RENEWS_WITH, "acme", "renewal")
    assert s.woken == [True]


async def test_a_daemon_without_the_kind_renews_nothing() -> None:
    s = _services({})
    assert await renew_due(s, now=1000.0) == 0
    assert s.reservations.admitted == []
