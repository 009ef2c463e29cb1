"""A real daemon on a PostgreSQL store ([store] kind = "postgres"): the queue, the
kiosk path, a kill -9 and a restart, and the audit chain the CLI verifies."""

from __future__ import annotations

import hashlib

from tests.daemon import multipart
from tests.helpers_pki import reportlab_pdf


def test_a_daemon_on_postgres_runs_jobs_signs_and_survives_kill_9(daemon_factory, postgres_dsn,
                                                                  tmp_path):
    d = daemon_factory({"store": {"kind": "postgres", "dsn": postgres_dsn}})
    r = d.submit({"kind": "test", "tag": "pg"}, key="pg-1")
    assert r.status == 202, r.body
    done = d.wait_job(r.json()["job_id"])
    assert done["state"] == "ready" and done["attempts"] == 1
    assert [e["type"] for e in d.events(done["job_id"])] == ["admitted", "claimed", "succeeded"]
    assert d.submit({"kind": "test", "tag": "pg"}, key="pg-1").status == 200

    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    body, ctype = multipart({"case_id": "PG-1", "signers": [
        {"id": "k", "name": "Front Desk", "role": "clerk"}]}, doc)
    signed = d.request("POST", "/v1/sign", raw=body, headers={"Content-Type": ctype,
                                                              "Idempotency-Key": "pg-kiosk"},
                       timeout_s=60)
    assert signed.status == 200, signed.body[:300]
    assert hashlib.sha256(signed.body).hexdigest() == signed.headers["X-Artifact-SHA256"]
    assert [e["type"] for e in d.events(signed.headers["X-Job-Id"])] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]

    # A long job, then kill -9: the restarted daemon takes the job back and runs it.
    slow = d.submit({"kind": "test", "tag": "slow", "sleep_ms": 3000}, key="pg-slow")
    job_id = slow.json()["job_id"]
    d.wait_job(job_id, states=("processing",))
    d.kill9()
    d.start()
    after = d.wait_job(job_id, timeout_s=60)
    assert after["state"] == "ready" and after["attempts"] == 2
    assert "lease_expired" in [e["type"] for e in d.events(job_id)]
    out = d.cli("audit", "verify", "--config", str(d.config_path))
    assert out.returncode == 0 and out.stdout.startswith("audit chain intact: "), out.stdout + out.stderr
    ready = d.request("GET", "/readyz")
    assert ready.status == 200, ready.body
