"""The operator's view over HTTP (/v1/admin) and from the command line: a tenant's
token, or none, finds no admin path; the operator's token reads every tenant's
queues, the nodes and the dead letter, retries and cancels many jobs at once, and
pauses and resumes claims, each change audited; the per-tenant gauges name the
configured tenants and no other."""

from __future__ import annotations

import hashlib
import re
from itertools import count

import pytest

from casesignd.http.admin import ROUTES
from tests.daemon import Daemon, to_toml

OPERATOR_TOKEN = "csd_operator-token-for-tests-0123456789abcdef0123"
OTHER_TOKEN = "csd_other-tenant-token-for-tests-0123456789abcdef"
_tags = count()


def with_operator(d: Daemon) -> Daemon:
    """Two tenants (``default`` and ``other``) and an operator."""
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()})
    d.config["operator"] = {"token_sha256": hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest()}
    d.config_path.write_text(to_toml(d.config))
    return d


@pytest.fixture
def ops(daemon_factory) -> Daemon:
    return with_operator(daemon_factory(start=False)).start()


def admin(d: Daemon, method: str, path: str, body=None):
    return d.request(method, path, body, auth=OPERATOR_TOKEN)


def failed_jobs(d: Daemon, n: int, token: str | bool = True) -> list[str]:
    ids = []
    for _ in range(n):
        r = d.request("POST", "/v1/jobs", {"kind": "test", "behavior": "fail_permanent",
                                           "tag": f"f{next(_tags)}"}, auth=token)
        assert r.status == 202, r.body
        ids.append(r.json()["job_id"])
    for jid in ids:
        d.request("GET", f"/v1/jobs/{jid}", auth=token)
    return ids


def wait_state(d: Daemon, jid: str, state: str, token: str | bool = True) -> dict:
    import time

    deadline = time.monotonic() + 60
    while True:
        job = d.request("GET", f"/v1/jobs/{jid}", auth=token).json()
        if job["state"] == state:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def test_no_token_but_the_operators_reaches_an_admin_path(ops):
    for method, path, _ in ROUTES:
        body = {} if method == "POST" else None
        for auth in (True, OTHER_TOKEN, False, "csd_wrong"):
            r = ops.request(method, path, body, auth=auth)
            assert r.status == 404, (method, path, auth, r.status)
            assert r.json()["error"]["code"] == "not_found"
        assert admin(ops, method, path, body).status != 404, (method, path)
        # Nor does a method the path does not take tell anyone but the operator that
        # it exists.
        other = "DELETE"
        for auth in (True, False):
            assert ops.request(other, path, None, auth=auth).status == 404, (other, path)
        assert admin(ops, other, path, None).status == 405, (other, path)
    assert admin(ops, "GET", "/v1/admin/nothing-here").status == 404
    # ... and the operator is no tenant: its token opens no tenant's path.
    assert admin(ops, "GET", "/v1/jobs").status == 401


def test_the_operator_reads_every_tenants_queue_and_the_nodes(ops):
    for tenant, token in (("default", True), ("other", OTHER_TOKEN)):
        assert admin(ops, "POST", "/v1/admin/pause", {"tenant": tenant}).status == 200
        for _ in range(1 + (tenant == "other")):
            r = ops.request("POST", "/v1/jobs", {"kind": "test", "tag": f"q{next(_tags)}"},
                            auth=token)
            assert r.status == 202
    queues = admin(ops, "GET", "/v1/admin/queues").json()
    by_tenant = {q["tenant"]: q for q in queues["queues"]}
    assert (by_tenant["default"]["queued"], by_tenant["other"]["queued"]) == (1, 2)
    assert by_tenant["default"]["kind"] == "test"
    assert by_tenant["default"]["oldest_wait_s"] is not None
    assert {t["tenant"] for t in queues["tenants"]} == {"default", "other"}
    assert sorted((p["tenant"], p["kind"]) for p in queues["pauses"]) == [
        ("default", None), ("other", None)]
    nodes = admin(ops, "GET", "/v1/admin/nodes").json()["nodes"]
    assert [n["node"] for n in nodes] == [ops.node] and nodes[0]["connected"]


def test_bulk_retry_by_filter_and_cancel_by_id_each_audited(ops):
    mine = failed_jobs(ops, 3)
    theirs = failed_jobs(ops, 1, OTHER_TOKEN)
    for jid in mine:
        wait_state(ops, jid, "failed")
    wait_state(ops, theirs[0], "failed", OTHER_TOKEN)
    dead = admin(ops, "GET", "/v1/admin/dead-letter?tenant=default&code=test_permanent").json()
    assert sorted(j["job_id"] for j in dead["jobs"]) == sorted(mine)
    assert {j["tenant"] for j in dead["jobs"]} == {"default"}
    # Hold the tenant's claims, so the retried jobs stay queued to be canceled.
    assert admin(ops, "POST", "/v1/admin/pause", {"tenant": "default"}).json()["changed"]
    r = admin(ops, "POST", "/v1/admin/jobs/retry", {"tenant": "default", "code": "test_permanent"})
    assert r.status == 200 and sorted(r.json()["done"]) == sorted(mine), r.body
    assert wait_state(ops, theirs[0], "failed", OTHER_TOKEN)  # another tenant's: untouched
    r = admin(ops, "POST", "/v1/admin/jobs/cancel", {"job_ids": [mine[0], "job_" + "0" * 28]})
    assert r.json() == {"done": [mine[0]], "more": False,
                        "refused": [{"job_id": "job_" + "0" * 28, "code": "job_not_found"}]}
    events = ops.events(mine[0])
    assert [(e["type"], e["actor"]) for e in events if e["actor"] == "operator"] == [
        ("replayed", "operator"), ("canceled", "operator")]
    assert admin(ops, "POST", "/v1/admin/resume", {"tenant": "default"}).json()["changed"]
    for jid in mine[1:]:
        wait_state(ops, jid, "failed")  # claimed again at once, and failed again


def test_bad_admin_requests_are_refused_by_field(ops):
    cases = [
        ("/v1/admin/pause", {"tenant": "nobody"}, "invalid_field", "tenant"),
        ("/v1/admin/pause", {"kind": "no_such_kind"}, "unknown_kind", "kind"),
        ("/v1/admin/pause", {"tenants": "default"}, "unknown_field", "tenants"),
        ("/v1/admin/jobs/retry", {}, "missing_field", "tenant"),
        ("/v1/admin/jobs/retry", {"job_ids": ["x"]}, "invalid_field", "job_ids"),
        ("/v1/admin/jobs/cancel", {"tenant": "default", "code": "x"}, "invalid_field", "code"),
    ]
    for path, body, code, field in cases:
        r = admin(ops, "POST", path, body)
        assert r.status == 422, (path, body, r.body)
        assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (code, field)
    r = admin(ops, "GET", "/v1/admin/dead-letter?limit=0")
    assert r.json()["error"]["code"] == "invalid_limit"


def test_per_tenant_queue_age_names_the_configured_tenants_only(ops):
    admin(ops, "POST", "/v1/admin/pause", {"tenant": "other"})
    ops.request("POST", "/v1/jobs", {"kind": "test", "tag": "aged"}, auth=OTHER_TOKEN)
    import time

    deadline = time.monotonic() + 30
    while True:
        text = ops.request("GET", "/metrics", auth=False).body.decode()
        found = dict(re.findall(
            r'^casesignd_tenant_oldest_queued_job_age_seconds\{tenant="([^"]+)"\} (\S+)$',
            text, re.M))
        if float(found.get("other", 0)) > 0:
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    assert set(found) == {"default", "other"}
    assert float(found["default"]) == 0.0


def test_the_admin_verbs_on_the_command_line(ops):
    ids = failed_jobs(ops, 2)
    for jid in ids:
        wait_state(ops, jid, "failed")
    env = {"CASESIGND_OPERATOR_TOKEN": OPERATOR_TOKEN}

    def cli(*args: str):
        import subprocess
        import sys

        return subprocess.run([sys.executable, "-m", "casesignd", "admin", *args],
                              capture_output=True, text=True, timeout=120, cwd=ops.dir,
                              env={**ops.env, "CASESIGND_URL": ops.url, **env})

    r = cli("pause", "--tenant", "default")
    assert r.returncode == 0, r.stderr
    r = cli("queues")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^default\s+test\s+0\s+0\s+0\s+2\b", r.stdout, re.M), r.stdout
    assert "paused: tenant default" in r.stdout
    r = cli("retry", "--failed", "--tenant", "default", "--code", "test_permanent")
    assert r.returncode == 0, r.stderr
    assert all(f"retried {jid}" in r.stdout for jid in ids), r.stdout
    assert all(ops.job(jid)["state"] == "queued" for jid in ids)
    r = cli("resume", "--tenant", "default")
    assert r.returncode == 0, r.stderr
    for jid in ids:
        wait_state(ops, jid, "failed")
    # A tenant's token is no operator's: the verbs say so and exit non-zero.
    env = {"CASESIGND_OPERATOR_TOKEN": ops.token}
    r = cli("queues")
    assert r.returncode != 0 and "operator" in r.stderr
