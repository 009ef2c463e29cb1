"""Priorities and schedules over HTTP, on a real daemon: validated at admission, part
of the idempotency fingerprint, shown on the job, and both kept across ``kill -9``
(columns of the job row). Times are checked against the store's own clock (the
events' ``at``), never against a sleep."""

from __future__ import annotations

import datetime as dt
import time

from tests.daemon import Daemon


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="microseconds")


def at(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def claimed_at(d: Daemon, job_id: str) -> tuple[int, float]:
    """(seq, at) of the job's last ``claimed`` event."""
    ev = [e for e in d.events(job_id) if e["type"] == "claimed"][-1]
    return ev["seq"], at(ev["at"])


def test_bad_priorities_and_times_are_refused_with_the_field(daemon):
    for body, field in [({"priority": 10}, "priority"), ({"priority": "high"}, "priority"),
                        ({"not_before": "2026-12-05T09:00:00"}, "not_before"),
                        ({"not_before": "tomorrow"}, "not_before"),
                        # Valid RFC 3339 whose instant, once in UTC, is outside years
                        # 1-9999: no date can show it, so none is stored.
                        ({"not_before": "9999-12-31T23:59:59-23:59"}, "not_before"),
                        ({"not_before": "0001-01-01T00:00:00+23:59"}, "not_before")]:
        r = daemon.submit({"kind": "test", **body})
        assert r.status == 422, r.body
        assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("invalid_field", field)


def test_a_schedule_is_part_of_the_idempotency_fingerprint(daemon):
    later = rfc3339(time.time() + 3600)
    first = daemon.submit({"kind": "test", "priority": 3, "not_before": later}, key="k1")
    assert first.status == 202
    job = first.json()
    assert job["priority"] == 3 and job["state"] == "queued" and job["paused"] is False
    assert at(job["not_before"]) == at(later)
    assert daemon.submit({"kind": "test", "priority": 3, "not_before": later}, key="k1").status == 200
    for other in ({"priority": 4, "not_before": later}, {"priority": 3}):
        r = daemon.submit({"kind": "test", **other}, key="k1")
        assert (r.status, r.json()["error"]["code"]) == (422, "idempotency_key_reused")
    # The defaults, sent or left out, are the same request.
    assert daemon.submit({"kind": "test"}, key="k2").status == 202
    assert daemon.submit({"kind": "test", "priority": 0}, key="k2").status == 200


def test_priority_and_not_before_survive_kill_9(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 1}})
    # The one worker is busy: everything after waits, queued, through the crash.
    busy = d.submit({"kind": "test", "behavior": "hang", "hang_s": 2}).json()
    d.wait_job(busy["job_id"], states=("processing",))
    low = d.submit({"kind": "test", "priority": 9, "tag": "low"}).json()
    mid = d.submit({"kind": "test", "priority": 5, "tag": "mid"}).json()
    high = d.submit({"kind": "test", "priority": 0, "tag": "high"}).json()
    soon_at = time.time() + 3
    soon = d.submit({"kind": "test", "tag": "soon", "not_before": rfc3339(soon_at)}).json()
    later = d.submit({"kind": "test", "tag": "later",
                      "not_before": rfc3339(time.time() + 3600)}).json()
    d.kill9()
    d.start()
    for job in (low, mid, high, soon):
        assert d.wait_job(job["job_id"], timeout_s=60)["state"] == "ready"
    after = {k: d.job(j["job_id"]) for k, j in
             {"low": low, "mid": mid, "high": high, "later": later}.items()}
    assert [after[k]["priority"] for k in ("low", "mid", "high")] == [9, 5, 0]
    seqs = [claimed_at(d, j["job_id"])[0] for j in (high, mid, low)]
    assert seqs == sorted(seqs), "a tenant's jobs are claimed by priority, 0 first"
    # Claimed no earlier than its time, by the clock the store dates its events with.
    assert claimed_at(d, soon["job_id"])[1] >= at(soon["not_before"])
    assert after["later"]["state"] == "queued" and "not_before" in after["later"]
    assert not [e for e in d.events(later["job_id"]) if e["type"] == "claimed"]
