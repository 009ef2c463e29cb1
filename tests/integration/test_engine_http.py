"""The job engine end to end: a real daemon on loopback with the test job kind."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sqlite3
import subprocess
import threading
import time

import pytest


def test_job_is_acknowledged_runs_once_and_explains_itself(daemon):
    r = daemon.submit({"kind": "test", "tag": "hello"})
    assert r.status == 202, r.body
    job = r.json()
    assert job["state"] in ("queued", "processing", "ready")
    assert r.headers["Location"] == f"/v1/jobs/{job['job_id']}"
    done = daemon.wait_job(job["job_id"])
    assert done["state"] == "ready" and done["attempts"] == 1
    assert set(done["timings"]) == {"admission_ms", "queue_wait_ms", "processing_ms", "total_ms"}
    events = daemon.events(job["job_id"])
    assert [e["type"] for e in events] == ["admitted", "claimed", "succeeded"]
    for e in events:
        assert e["input_digest"] and e["policy_version"] == "test-v1" and e["actor"]
    assert events[0]["actor"] == "api:default" and events[1]["actor"].startswith("worker:")
    assert all(b["prev_hash"] == a["hash"] for a, b in zip(events, events[1:], strict=False))
    out = daemon.cli("audit", "verify", "--config", str(daemon.config_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_idempotency_same_key_same_job_different_body_refused(daemon):
    first = daemon.submit({"kind": "test", "tag": "a"}, key="order-1")
    again = daemon.submit({"kind": "test", "tag": "a"}, key="order-1")
    assert (first.status, again.status) == (202, 200)
    assert first.json()["job_id"] == again.json()["job_id"]
    other = daemon.submit({"kind": "test", "tag": "b"}, key="order-1")
    assert other.status == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    # Without a key the key is derived from the request: a blind retry is the same job.
    blind1 = daemon.submit({"kind": "test", "tag": "blind"})
    blind2 = daemon.submit({"kind": "test", "tag": "blind"})
    assert (blind1.status, blind2.status) == (202, 200)
    assert blind1.json()["job_id"] == blind2.json()["job_id"]


def test_fifty_concurrent_identical_submissions_make_one_job(daemon):
    results = []
    lock = threading.Lock()

    def go():
        r = daemon.submit({"kind": "test", "tag": "burst"}, key="burst-key")
        with lock:
            results.append((r.status, r.json()["job_id"]))

    threads = [threading.Thread(target=go) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 50
    assert len({job_id for _, job_id in results}) == 1
    assert sorted(s for s, _ in results).count(202) == 1
    listed = daemon.request("GET", "/v1/jobs?limit=200").json()["jobs"]
    assert len(listed) == 1


def test_transient_failures_retry_with_growing_jittered_delays_then_fail(daemon_factory):
    d = daemon_factory({"retry": {"max_attempts": {"test": 4}, "base_delay_s": 0.1}})
    job = d.submit({"kind": "test", "behavior": "fail_transient"}).json()
    done = d.wait_job(job["job_id"])
    assert done["state"] == "failed" and done["attempts"] == 4
    assert done["error"]["category"] == "retries_exhausted"
    assert done["error"]["code"] == "test_transient" and done["error"]["correlation_id"]
    delays = [e["detail"]["delay_s"] for e in d.events(job["job_id"]) if e["type"] == "retry_scheduled"]
    assert len(delays) == 3
    steps = [0.1, 0.2, 0.4]
    assert all(s / 2 <= d_ <= s for d_, s in zip(delays, steps, strict=False)), delays
    assert delays == sorted(delays)


def test_transient_then_success(daemon):
    job = daemon.submit({"kind": "test", "behavior": "fail_transient", "fail_times": 2}).json()
    done = daemon.wait_job(job["job_id"])
    assert done["state"] == "ready" and done["attempts"] == 3


def test_permanent_failure_never_retries_and_replays_on_request(daemon):
    job = daemon.submit({"kind": "test", "behavior": "fail_permanent"}).json()
    done = daemon.wait_job(job["job_id"])
    assert done["state"] == "failed" and done["attempts"] == 1
    assert done["error"] == {"category": "permanent_input", "code": "test_permanent",
                             "correlation_id": done["error"]["correlation_id"]}
    r = daemon.request("POST", f"/v1/jobs/{job['job_id']}/retry")
    assert r.status == 202 and r.json()["state"] in ("queued", "processing", "failed")
    again = daemon.wait_job(job["job_id"], timeout_s=30)
    types = [e["type"] for e in daemon.events(job["job_id"])]
    assert types.count("replayed") == 1 and types.count("failed") == 2
    assert again["attempts"] == 2
    ready = daemon.submit({"kind": "test", "tag": "fine"}).json()
    daemon.wait_job(ready["job_id"])
    r = daemon.request("POST", f"/v1/jobs/{ready['job_id']}/retry")
    assert r.status == 409 and r.json()["error"]["code"] == "not_failed"


def test_cancel_queued_but_not_running(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 1}})
    running = d.submit({"kind": "test", "behavior": "hang", "hang_s": 30}).json()
    d.wait_job(running["job_id"], states=("processing",))
    queued = d.submit({"kind": "test", "tag": "behind"}).json()
    r = d.request("POST", f"/v1/jobs/{running['job_id']}/cancel")
    assert r.status == 409 and r.json()["error"]["code"] == "not_cancelable"
    r = d.request("POST", f"/v1/jobs/{queued['job_id']}/cancel")
    assert r.status == 200 and r.json()["state"] == "canceled"
    assert [e["type"] for e in d.events(queued["job_id"])] == ["admitted", "canceled"]
    r = d.request("POST", f"/v1/jobs/{queued['job_id']}/cancel")
    assert r.status == 409


def test_queue_full_answers_429_with_retry_after(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 1, "max_queue_depth": 2}})
    d.submit({"kind": "test", "behavior": "hang", "tag": "0"})
    d.wait_job(d.request("GET", "/v1/jobs").json()["jobs"][0]["job_id"], states=("processing",))
    assert d.submit({"kind": "test", "tag": "1"}).status == 202
    assert d.submit({"kind": "test", "tag": "2"}).status == 202
    r = d.submit({"kind": "test", "tag": "3"})
    assert r.status == 429 and r.json()["error"]["code"] == "queue_full"
    assert int(r.headers["Retry-After"]) > 0


def test_job_larger_than_the_byte_budget_is_refused_at_admission(daemon_factory):
    d = daemon_factory({"workers": {"max_inflight_bytes": 1000}})
    r = d.submit({"kind": "test", "size": 1001})
    assert r.status == 413 and r.json()["error"]["code"] == "too_large"
    assert d.request("GET", "/v1/jobs").json()["jobs"] == []


def test_byte_budget_bounds_jobs_in_flight(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 4, "max_inflight_bytes": 1000}})
    a = d.submit({"kind": "test", "behavior": "hang", "hang_s": 2, "size": 600}).json()
    b = d.submit({"kind": "test", "behavior": "hang", "hang_s": 2, "size": 600, "tag": "b"}).json()
    d.wait_job(a["job_id"], states=("processing",))
    time.sleep(0.3)
    assert d.job(b["job_id"])["state"] == "queued"
    assert d.wait_job(b["job_id"])["state"] == "ready"


def test_sigterm_releases_leases_and_a_restart_resumes_at_once(daemon_factory):
    d = daemon_factory({"workers": {"shutdown_grace_s": 0.5, "lease_s": 300.0, "heartbeat_s": 100.0}})
    job = d.submit({"kind": "test", "behavior": "hang", "hang_s": 3}).json()
    d.wait_job(job["job_id"], states=("processing",))
    assert d.stop() == 0
    d.start()
    done = d.wait_job(job["job_id"], timeout_s=30)
    assert done["state"] == "ready" and done["attempts"] == 2
    types = [e["type"] for e in d.events(job["job_id"])]
    assert types == ["admitted", "claimed", "released", "claimed", "succeeded"]


def test_kill9_at_random_moments_loses_nothing_and_runs_each_job_once(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 4}})
    ids = []
    for round_ in range(3):
        for i in range(15):
            r = d.submit({"kind": "test", "sleep_ms": 40, "tag": f"{round_}-{i}"})
            assert r.status == 202
            ids.append(r.json()["job_id"])
        time.sleep(0.05 + 0.1 * round_)
        d.kill9()
        d.start()
    for job_id in ids:
        assert d.wait_job(job_id, timeout_s=60)["state"] == "ready"
        types = [e["type"] for e in d.events(job_id)]
        assert types.count("succeeded") == 1 and types[0] == "admitted"
    d.stop()
    out = d.cli("audit", "verify", "--config", str(d.config_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(d.temp_area.iterdir()) == []


def test_changing_one_audit_row_is_found_and_named(daemon):
    ids = [daemon.submit({"kind": "test", "tag": str(i)}).json()["job_id"] for i in range(3)]
    for job_id in ids:
        daemon.wait_job(job_id)
    daemon.stop()
    victim = 4
    subprocess.run(["sqlite3", str(daemon.db),
                    "DROP TRIGGER events_append_only_update;"
                    f"UPDATE events SET actor = 'api:mallory' WHERE seq = {victim};"],
                   check=True, timeout=30)
    out = daemon.cli("audit", "verify", "--config", str(daemon.config_path))
    assert out.returncode == 1
    assert f"seq={victim}" in out.stdout + out.stderr


def test_the_database_refuses_to_rewrite_the_audit_log(daemon):
    daemon.wait_job(daemon.submit({"kind": "test"}).json()["job_id"])
    conn = sqlite3.connect(daemon.db)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("DELETE FROM events")
    conn.close()


OTHER_TOKEN = "csd_other-tenant-test-token"


@pytest.fixture
def two_tenants(daemon_factory):
    d = daemon_factory(start=False)
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()})
    from tests.daemon import to_toml
    d.config_path.write_text(to_toml(d.config))
    return d.start()


BAD = [
    ("malformed json", {"raw": b"{not json", "ctype": "application/json"}, 400, "malformed_json"),
    ("array body", {"raw": b"[1,2]", "ctype": "application/json"}, 422, "invalid_body"),
    ("wrong content type", {"raw": b"{}", "ctype": "text/plain"}, 415, "unsupported_media_type"),
    ("missing kind", {"json": {"tag": "x"}}, 422, "missing_field"),
    ("unknown kind", {"json": {"kind": "bake_cake"}}, 422, "unknown_kind"),
    ("kind of wrong type", {"json": {"kind": 7}}, 422, "unknown_kind"),
    ("unknown field", {"json": {"kind": "test", "colour": "red"}}, 422, "unknown_field"),
    ("wrong type", {"json": {"kind": "test", "sleep_ms": "10"}}, 422, "invalid_field"),
    ("bool for int", {"json": {"kind": "test", "sleep_ms": True}}, 422, "invalid_field"),
    ("oversized body", {"raw": b'{"kind": "test", "tag": "' + b"x" * 2_000_000 + b'"}',
                        "ctype": "application/json"}, 413, "too_large"),
    ("long idempotency key", {"json": {"kind": "test"}, "key": "k" * 256}, 422, "invalid_idempotency_key"),
    ("control char key", {"json": {"kind": "test"}, "key": "a\tb"}, 422, "invalid_idempotency_key"),
    ("no token", {"json": {"kind": "test"}, "auth": False}, 401, "unauthorized"),
    ("wrong token", {"json": {"kind": "test"}, "auth": "csd_wrong"}, 401, "invalid_token"),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_stable_code_and_stores_nothing(daemon, case):
    _, req, status, code = case
    headers = {}
    if "key" in req:
        headers["Idempotency-Key"] = req["key"]
    if "ctype" in req:
        headers["Content-Type"] = req["ctype"]
    r = daemon.request("POST", "/v1/jobs", req.get("json"), raw=req.get("raw"),
                       headers=headers, auth=req.get("auth", True))
    assert r.status == status, r.body[:300]
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and err["correlation_id"]
    assert b"Traceback" not in r.body
    assert daemon.request("GET", "/v1/jobs").json()["jobs"] == []


def test_another_tenants_job_is_404_everywhere(two_tenants):
    d = two_tenants
    job = d.submit({"kind": "test", "behavior": "fail_permanent"}).json()
    d.wait_job(job["job_id"])
    for method, path in [("GET", ""), ("GET", "/events"), ("POST", "/retry"), ("POST", "/cancel")]:
        r = d.request(method, f"/v1/jobs/{job['job_id']}{path}", auth=OTHER_TOKEN)
        assert r.status == 404 and r.json()["error"]["code"] == "job_not_found", (method, path)
    assert d.request("GET", "/v1/jobs", auth=OTHER_TOKEN).json()["jobs"] == []
    r = d.request("GET", "/v1/jobs/job_nonsense")
    assert r.status == 404


def test_listing_filters_and_pages(daemon):
    ids = [daemon.submit({"kind": "test", "tag": str(i)}).json()["job_id"] for i in range(5)]
    for job_id in ids:
        daemon.wait_job(job_id)
    page = daemon.request("GET", "/v1/jobs?limit=2").json()
    assert [j["job_id"] for j in page["jobs"]] == ids[::-1][:2]
    rest = daemon.request("GET", f"/v1/jobs?limit=10&state=ready&cursor={page['next_cursor']}").json()
    assert [j["job_id"] for j in rest["jobs"]] == ids[::-1][2:] and rest["next_cursor"] is None
    for bad in ("state=running", "limit=0", "limit=x", "cursor=../../etc"):
        r = daemon.request("GET", f"/v1/jobs?{bad}")
        assert r.status == 422, bad


def test_unknown_routes_and_methods_use_the_error_shape(daemon):
    r = daemon.request("GET", "/v1/nothing-here")
    assert r.status == 404 and r.json()["error"]["code"] == "not_found"
    r = daemon.request("DELETE", "/v1/jobs")
    assert r.status == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_health_readiness_and_openapi(daemon):
    assert daemon.request("GET", "/healthz", auth=False).status == 200
    ready = daemon.request("GET", "/readyz", auth=False).json()
    assert ready["ready"] and set(ready["checks"]) >= {"store", "temp", "signing_key", "workers",
                                                       "renderers"}
    doc = daemon.request("GET", "/v1/openapi.json", auth=False).json()
    assert doc["openapi"].startswith("3.1")


def test_sighup_adds_a_tenant_without_dropping_jobs(daemon):
    running = daemon.submit({"kind": "test", "behavior": "hang", "hang_s": 2}).json()
    daemon.wait_job(running["job_id"], states=("processing",))
    token = "csd_added-by-reload-test-token"
    assert daemon.request("GET", "/v1/jobs", auth=token).status == 401
    daemon.config["tenants"].append({"name": "added",
                                     "token_sha256": hashlib.sha256(token.encode()).hexdigest()})
    from tests.daemon import to_toml
    daemon.config_path.write_text(to_toml(daemon.config))
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while daemon.request("GET", "/v1/jobs", auth=token).status != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert daemon.wait_job(running["job_id"])["state"] == "ready"


async def test_an_acknowledged_job_is_readable_at_once_under_concurrency(daemon):
    import aiohttp

    missing = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {daemon.token}"}) as s:
        async def one(i: int) -> None:
            async with s.post(f"{daemon.url}/v1/jobs", json={"kind": "test", "tag": f"r{i}"}) as r:
                job = await r.json()
                assert r.status == 202, job
            async with s.get(f"{daemon.url}/v1/jobs/{job['job_id']}") as r:
                if r.status != 200:
                    missing.append(job["job_id"])

        await asyncio.gather(*(one(i) for i in range(300)))
    assert missing == []
