"""Each tenant's limits over HTTP ([tenants.limits]): past one, 429 with its code and
a Retry-After that a client which waits exactly that long finds true; the running
limit holds on one daemon and across two on PostgreSQL; limits change on SIGHUP.

Windows are a few seconds long here, so that a test waits one out; nothing asserts a
duration: each test waits what the answer says and then looks."""

from __future__ import annotations

import hashlib
import signal
import time
from datetime import datetime
from itertools import count

import pytest

from tests.daemon import Daemon, postgres_nodes, to_toml

OPERATOR_TOKEN = "csd_operator-token-for-tests-0123456789abcdef0123"
_tags = count()


def _limited(d: Daemon, **limits: int) -> Daemon:
    d.config["tenants"][0]["limits"] = limits
    d.config["operator"] = {"token_sha256": hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest()}
    d.config_path.write_text(to_toml(d.config))
    return d


def _job(**extra) -> dict:
    return {"kind": "test", "tag": f"t{next(_tags)}", **extra}


def _until_refused(submit, most: int):
    """Submit until one is refused: (the answers admitted, the refusal)."""
    admitted = []
    for _ in range(most):
        r = submit()
        if r.status != 202:
            return admitted, r
        admitted.append(r)
    raise AssertionError(f"{most} admitted without a refusal")


def _wait(r) -> None:
    """Wait exactly what the refusal's Retry-After says."""
    time.sleep(int(r.headers["Retry-After"]))


def test_past_the_admission_rate_429_rate_limited_and_its_retry_after_holds(daemon_factory):
    d = _limited(daemon_factory(start=False), admit_rate=3, admit_window_s=3).start()
    first = _job()
    assert d.submit(first).status == 202
    admitted, refused = _until_refused(lambda: d.submit(_job()), 7)
    assert len(admitted) >= 2  # a window may have turned over between two of them
    assert refused.status == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused.headers["Retry-After"]) <= 3
    # A replay of an admitted job makes no job: it is answered, whatever the rate.
    assert d.submit(first).status == 200
    _wait(refused)
    assert d.submit(_job()).status == 202


def test_past_the_upload_quota_429_quota_exceeded_and_its_retry_after_holds(daemon_factory):
    d = _limited(daemon_factory(start=False), upload_bytes=1000, upload_window_s=3).start()

    def put(n: int = 400):
        data = f"{next(_tags):08d}".encode() * (n // 8)
        sha = hashlib.sha256(data).hexdigest()
        return d.request("PUT", f"/v1/cases/Q-1/objects/{sha}", raw=data,
                         headers={"Content-Type": "application/octet-stream"})

    admitted, refused = [], None
    for _ in range(7):
        r = put()
        if r.status != 201:
            refused = r
            break
        admitted.append(r)
    assert refused is not None and len(admitted) >= 2
    assert refused.status == 429 and refused.json()["error"]["code"] == "quota_exceeded"
    assert 1 <= int(refused.headers["Retry-After"]) <= 3
    # An object larger than the whole quota can never fit: no Retry-After to promise.
    assert put(1600).status == 413
    _wait(refused)
    assert put().status == 201


def test_past_the_waiting_limit_429_tenant_queue_full_until_a_place_frees(daemon_factory):
    d = _limited(daemon_factory({"workers": {"concurrency": 1}}, start=False),
                 max_queued=2).start()
    running = d.submit(_job(behavior="hang", hang_s=60)).json()["job_id"]
    d.wait_job(running, ("processing",))
    waiting = [d.submit(_job()) for _ in range(2)]
    assert [r.status for r in waiting] == [202, 202]
    refused = d.submit(_job())
    assert refused.status == 429 and refused.json()["error"]["code"] == "tenant_queue_full"
    # No instant frees a place: the answer says come back in a second, and one
    # claimed or canceled job makes room.
    assert refused.headers["Retry-After"] == "1"
    canceled = d.request("POST", f"/v1/jobs/{waiting[0].json()['job_id']}/cancel")
    assert canceled.status == 200
    assert d.submit(_job()).status == 202


def _spans(d: Daemon, job_ids: list[str]) -> list[tuple[datetime, datetime]]:
    """When each job was running: from its claim to its end, by its audit events."""
    out = []
    for jid in job_ids:
        events = d.events(jid)
        start = next(e["at"] for e in events if e["type"] == "claimed")
        end = next(e["at"] for e in events if e["type"] == "succeeded")
        out.append((datetime.fromisoformat(start), datetime.fromisoformat(end)))
    return out


def _most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                   key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_retry_is_held_to_the_waiting_limit_as_an_admission_is(daemon_factory):
    # A failed job retried waits again as surely as a new one: without the limit,
    # a tenant could fill the queue past max_queued by failing jobs and retrying them.
    d = _limited(daemon_factory(start=False), max_queued=2).start()
    failed = [d.submit(_job(behavior="fail_permanent")).json()["job_id"] for _ in range(2)]
    for job_id in failed:
        assert d.wait_job(job_id)["state"] == "failed"
    # The tenant's claims held, so what waits stays waiting.
    r = d.request("POST", "/v1/admin/pause", {"tenant": "default"}, auth=OPERATOR_TOKEN)
    assert r.status == 200, r.body
    assert d.submit(_job()).status == 202
    assert d.request("POST", f"/v1/jobs/{failed[0]}/retry").status == 202  # the second place
    r = d.request("POST", f"/v1/jobs/{failed[1]}/retry")
    assert r.status == 429 and r.json()["error"]["code"] == "tenant_queue_full", r.body
    assert int(r.headers["Retry-After"]) >= 1
    assert d.job(failed[1])["state"] == "failed"
    # The operator's bulk retry is not held to it: the operator decides.
    r = d.request("POST", "/v1/admin/jobs/retry", {"job_ids": [failed[1]]}, auth=OPERATOR_TOKEN)
    assert r.status == 200 and r.json()["done"] == [failed[1]], r.body


def test_the_running_limit_holds_on_one_daemon(daemon_factory):
    d = _limited(daemon_factory({"workers": {"concurrency": 4}}, start=False),
                 max_running=1).start()
    ids = [d.submit(_job(sleep_ms=150)).json()["job_id"] for _ in range(5)]
    for jid in ids:
        assert d.wait_job(jid)["state"] == "ready"
    assert _most_at_once(_spans(d, ids)) == 1


def test_limits_change_on_sighup(daemon_factory):
    d = _limited(daemon_factory(start=False), admit_rate=1, admit_window_s=3600).start()
    assert d.submit(_job()).status == 202
    assert d.submit(_job()).json()["error"]["code"] == "rate_limited"
    _limited(d, admit_rate=100, admit_window_s=3600)
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while d.submit(_job()).status != 202:
        assert time.monotonic() < deadline, d.logs()[-2000:]
        time.sleep(0.1)


@pytest.fixture
def two_pg_nodes(postgres_cluster, tmp_path):
    with postgres_nodes(postgres_cluster, tmp_path / "state", ["node-a", "node-b"], {
            "workers": {"concurrency": 4, "cpu_processes": 1},
            "kiosk": {"cpu_processes": 1}},
            prepare=lambda nodes: _limited(nodes[0], max_running=2)) as (nodes, _dsn):
        yield nodes


def test_the_running_limit_holds_across_two_postgres_nodes(two_pg_nodes):
    a, b = two_pg_nodes
    ids: list[str] = []
    owners: set[str] = set()
    # Which node claims a freed place is a race: the node whose worker just finished
    # often wins it again. Batches go on until each node has claimed some job, and the
    # limit must hold over every batch.
    for _ in range(6):
        batch = [(a if i % 2 else b).submit(_job(sleep_ms=200)).json()["job_id"]
                 for i in range(12)]
        for jid in batch:
            assert a.wait_job(jid, timeout_s=120)["state"] == "ready"
        ids += batch
        owners |= {e["actor"].split(":")[1] for jid in batch for e in a.events(jid)
                   if e["type"] == "claimed"}
        if owners == {"node-a", "node-b"}:
            break
    assert owners == {"node-a", "node-b"}  # both nodes claimed, and together kept to 2
    assert _most_at_once(_spans(a, ids)) == 2
