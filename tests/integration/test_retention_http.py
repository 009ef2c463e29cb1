"""Retention, legal holds and erasure on a real daemon, with every retention set to
seconds: what is past its time goes and answers 404, the state directory shrinks, a
held case keeps everything, erasure is 409 under a hold and at once without one,
what a failed or running job uses stays, and the audit chain verifies throughout."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.daemon import ENCRYPT_STORES, Daemon
from tests.helpers_ops import case_manifest, contract_pdf, kiosk_sign, upload

KEEP_S = 2.0


def blob(d: Daemon, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    return d.dir / "objects" / "blobs" / sha[:2] / sha


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def wait_until(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.2)


def backed_up_and_restored(d: Daemon, tmp_path: Path) -> Path:
    """store check of the live setup, a backup of it restored: the restored state."""
    check = d.cli("store", "check", "--config", str(d.config_path))
    assert check.returncode == 0, check.stdout + check.stderr
    backup = tmp_path / "backup"
    made = d.cli("backup", "--to", str(backup), "--config", str(d.config_path))
    assert made.returncode == 0, made.stdout + made.stderr
    state = tmp_path / "restored"
    done = d.cli("restore", "--from", str(backup), "--dir", str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    return state


def signed(d: Daemon, case_id: str, pdf: bytes) -> dict:
    r = d.submit(case_manifest(d, case_id, pdf))
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    return job


@pytest.fixture
def retaining(daemon_factory) -> Daemon:
    return daemon_factory({
        # Job rows outlive the objects and artifacts: a failed job keeps its objects
        # while its row is there.
        "retention": {"objects_s": KEEP_S, "artifacts_s": KEEP_S, "jobs_s": 2 * KEEP_S,
                      "rejected_s": KEEP_S, "sweep_interval_s": 0.3},
        "retry": {"default_max_attempts": 1},
    })


def test_retention_removes_what_is_due_and_keeps_what_is_held_or_needed(retaining, tmp_path):
    d = retaining
    pdfs = [contract_pdf(tmp_path, pages=pages) for pages in (1, 2)]
    gone = signed(d, "GONE-1", pdfs[0])
    held = signed(d, "HELD-1", pdfs[1])
    assert d.request("POST", "/v1/cases/HELD-1/hold").status == 201
    assert d.request("POST", "/v1/cases/HELD-1/hold").status == 200
    assert d.request("GET", "/v1/cases/HELD-1/hold").json()["hold"] is True
    # An upload no job uses; one a failed job names; one a running job names.
    lone, failing, running = b"lone " * 100, b"failing " * 100, b"running " * 100
    upload(d, "LONE-1", lone)
    for case_id, data, body in (
            ("FAIL-1", failing, {"behavior": "fail_transient"}),
            ("RUN-1", running, {"behavior": "hang", "hang_s": 60})):
        sha = upload(d, case_id, data)["sha256"]
        r = d.submit({"kind": "test", "case_id": case_id, "tag": sha, **body})
        assert r.status == 202, r.body
        job_id = r.json()["job_id"]
    d.wait_job(job_id, states=("processing",))
    peak = tree_bytes(d.dir / "objects") + tree_bytes(d.dir / "artifacts")
    link = gone["result"]["download_url"]
    assert d.request("GET", link, auth=False).status == 200

    # The unheld case goes: its object, its artifact (by link and by token), its job row.
    wait_until(lambda: not blob(d, pdfs[0]).exists() and not blob(d, lone).exists())
    wait_until(lambda: d.request("GET", link, auth=False).status == 404)
    # The failed and the running jobs keep their objects.
    assert blob(d, failing).exists() and blob(d, running).exists()
    assert d.request("GET", f"/v1/artifacts/{gone['result']['artifact_id']}").status == 404
    wait_until(lambda: d.request("GET", f"/v1/jobs/{gone['job_id']}").status == 404)
    assert tree_bytes(d.dir / "objects") + tree_bytes(d.dir / "artifacts") < peak
    # The held case keeps everything.
    assert d.job(held["job_id"])["state"] == "ready"
    assert d.request("GET", held["result"]["download_url"], auth=False).status == 200
    assert blob(d, pdfs[1]).exists() and blob(d, running).exists()

    # Erasure: refused under the hold, at once without it.
    r = d.request("DELETE", "/v1/cases/HELD-1")
    assert r.status == 409 and r.json()["error"]["code"] == "on_hold"
    assert d.request("DELETE", "/v1/cases/HELD-1/hold").status == 200
    assert d.request("DELETE", "/v1/cases/HELD-1/hold").json()["error"]["code"] == "hold_not_found"
    r = d.request("DELETE", "/v1/cases/HELD-1")
    assert r.status == 200 and r.json()["objects_removed"] == 1 and r.json()["artifacts_removed"] == 1
    assert not blob(d, pdfs[1]).exists()
    assert d.request("GET", held["result"]["download_url"], auth=False).status == 404
    erased = d.job(held["job_id"])
    assert erased["state"] == "ready" and "removed_at" in erased["result"], erased
    assert "download_url" not in erased["result"]
    assert erased["result"]["sha256"] == held["result"]["sha256"]
    r = d.request("DELETE", "/v1/cases/RUN-1")
    assert r.status == 409 and r.json()["error"]["code"] == "case_busy"

    # Every removal is in the chain, which verifies; the metrics count them.
    assert d.request("GET", f"/v1/jobs/{gone['job_id']}/events").status == 404
    with sqlite3.connect(d.db) as conn:
        removals = conn.execute("SELECT type, detail FROM events WHERE type LIKE '%_removed' "
                                "OR type LIKE 'hold_%' OR type = 'case_erased'").fetchall()
    types = {t for t, _ in removals}
    assert {"job_removed", "object_removed", "artifact_removed", "hold_placed", "hold_lifted",
            "case_erased"} <= types
    # Digests and ids, never a document or a name.
    for _, detail in removals:
        assert set(json.loads(detail)) <= {"state", "kind", "reason", "area", "sha256", "size",
                                           "artifact_id", "objects", "artifacts", "canceled",
                                           "removed"}
    audit = d.cli("audit", "verify", "--config", str(d.config_path))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    text = d.request("GET", "/metrics", auth=False).body.decode()
    assert 'casesignd_removed_total{reason="retention",what="object"}' in text
    assert 'casesignd_removed_total{reason="erasure",what="artifact"} 1.0' in text
    assert 'casesignd_disk_bytes{area="objects"}' in text
    assert os.path.exists(d.db)


def chain_length(d: Daemon) -> int:
    with sqlite3.connect(d.db) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def test_holds_and_erasure_are_per_tenant_and_checked(daemon):
    r = daemon.request("POST", "/v1/cases/..%2F..%2Fetc/hold")
    assert r.status in (400, 404, 422)
    # Erasing a case the tenant does not have: 404, and nothing recorded, however often.
    upload(daemon, "MINE-1", b"mine " * 10)
    before = chain_length(daemon)
    for _ in range(3):
        r = daemon.request("DELETE", "/v1/cases/NONE-1")
        assert r.status == 404 and r.json()["error"]["code"] == "case_not_found", r.body
    r = daemon.request("DELETE", "/v1/cases/MINE-1", auth="other")
    assert r.status in (401, 404)
    assert chain_length(daemon) == before
    r = daemon.request("DELETE", "/v1/cases/MINE-1")
    assert r.status == 200 and r.json()["objects_removed"] == 1
    after = chain_length(daemon)
    # Erased, the case is gone from the tenant: again is 404, and nothing more is recorded.
    r = daemon.request("DELETE", "/v1/cases/MINE-1")
    assert r.status == 404 and r.json()["error"]["code"] == "case_not_found"
    assert chain_length(daemon) == after
    assert daemon.request("POST", "/v1/cases/NONE-1/hold", auth="wrong").status == 401
    assert daemon.request("GET", "/v1/cases/NONE-1/hold").status == 404


def test_the_cli_holds_releases_and_erases_a_case(daemon):
    held = daemon.cli("case", "hold", "CLI-1")
    assert held.returncode == 0 and json.loads(held.stdout)["hold"] is True
    refused = daemon.cli("case", "erase", "CLI-1", "--yes")
    assert refused.returncode == 1 and "on_hold" in refused.stderr
    assert daemon.cli("case", "erase", "CLI-1").returncode == 2  # without --yes
    assert daemon.cli("case", "release", "CLI-1").returncode == 0
    upload(daemon, "CLI-1", b"cli " * 10)
    erased = daemon.cli("case", "erase", "CLI-1", "--yes")
    assert erased.returncode == 0 and json.loads(erased.stdout)["objects_removed"] == 1


def test_kiosk_results_and_refusals_live_their_time(retaining, tmp_path):
    d = retaining
    pdf = contract_pdf(tmp_path, pages=1)
    assert kiosk_sign(d, "KIOSK-1", pdf, key="kiosk-1").status == 200
    refused = kiosk_sign(d, "KIOSK-2", b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n%%EOF\n", key="kiosk-2")
    assert refused.status == 422, refused.body

    def refused_jobs() -> list:
        jobs = d.request("GET", "/v1/jobs?state=failed").json()["jobs"]
        return [j for j in jobs if j["case_id"] == "KIOSK-2"]

    assert refused_jobs()
    wait_until(lambda: not refused_jobs())
    # The artifact goes before its job row: a replay of the request says it is gone,
    # rather than signing again or waiting for ever.
    wait_until(lambda: kiosk_sign(d, "KIOSK-1", pdf, key="kiosk-1").status == 404)
    again = kiosk_sign(d, "KIOSK-1", pdf, key="kiosk-1")
    assert again.status == 404 and again.json()["error"]["code"] == "artifact_not_found"


def test_retention_and_erasure_on_postgres(daemon_factory, postgres_dsn, tmp_path):
    d = daemon_factory({"store": {"kind": "postgres", "dsn": postgres_dsn},
                        "retention": {"objects_s": KEEP_S, "artifacts_s": KEEP_S,
                                      "jobs_s": KEEP_S, "sweep_interval_s": 0.3}})
    pdfs = [contract_pdf(tmp_path, pages=pages) for pages in (1, 2)]
    gone, kept = signed(d, "PG-GONE", pdfs[0]), signed(d, "PG-HELD", pdfs[1])
    assert d.request("POST", "/v1/cases/PG-HELD/hold").status == 201
    wait_until(lambda: d.request("GET", f"/v1/jobs/{gone['job_id']}").status == 404)
    wait_until(lambda: not blob(d, pdfs[0]).exists())
    assert d.request("GET", gone["result"]["download_url"], auth=False).status == 404
    assert d.request("GET", kept["result"]["download_url"], auth=False).status == 200
    assert d.request("DELETE", "/v1/cases/PG-HELD").json()["error"]["code"] == "on_hold"
    assert d.request("DELETE", "/v1/cases/PG-HELD/hold").status == 200
    assert d.request("DELETE", "/v1/cases/PG-HELD").json()["artifacts_removed"] == 1
    assert not blob(d, pdfs[1]).exists()
    out = d.cli("audit", "verify", "--config", str(d.config_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_artifacts_shorter_lived_than_their_jobs_leave_a_sound_store_that_restores(
        daemon_factory, tmp_path):
    """The reported case: artifacts_s short, jobs_s long. The job stays ready, says
    when its artifact went and keeps its digest and size; store check passes and a
    backup restores."""
    d = daemon_factory({"retention": {"artifacts_s": KEEP_S, "jobs_s": 3600,
                                      "sweep_interval_s": 0.3}})
    pdf = contract_pdf(tmp_path, pages=1)
    job = signed(d, "SHORT-1", pdf)
    kiosk = kiosk_sign(d, "SHORT-K", contract_pdf(tmp_path, pages=2), key="short-k")
    assert kiosk.status == 200, kiosk.body[:300]
    link = job["result"]["download_url"]
    wait_until(lambda: d.request("GET", link, auth=False).status == 404)
    for job_id in (job["job_id"], kiosk.headers["X-Job-Id"]):
        wait_until(lambda job_id=job_id: "removed_at" in d.job(job_id).get("result", {}))
        now = d.job(job_id)
        assert now["state"] == "ready"
        assert set(now["result"]) >= {"artifact_id", "sha256", "size", "removed_at"}
        assert "download_url" not in now["result"] and "expires_at" not in now["result"]
        artifact = d.request("GET", f"/v1/artifacts/{now['result']['artifact_id']}")
        assert artifact.status == 404
    assert d.job(job["job_id"])["result"]["sha256"] == job["result"]["sha256"]

    state = backed_up_and_restored(d, tmp_path)
    verify = d.cli("audit", "verify", "--config", str(state / "config.toml"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The restored daemon reads the job as the first did: removed, with its digest.
    twin = d.sibling("restored")
    twin.dir, twin.config_path, twin.log_path = state, state / "config.toml", state / "daemon.log"
    twin.start()
    try:
        again = twin.job(job["job_id"])
        assert again["state"] == "ready" and "removed_at" in again["result"], again
        assert "download_url" not in again["result"]
        assert again["result"]["sha256"] == job["result"]["sha256"]
    finally:
        twin.stop()


def test_a_link_says_nothing_of_an_artifact_to_a_stranger(daemon, tmp_path):
    """Every bad link answers the same, whether its artifact exists or not: the
    signature is checked before anything is looked up."""
    job = signed(daemon, "LINK-1", contract_pdf(tmp_path, pages=1))
    link = job["result"]["download_url"]
    path, _, query = link.partition("?")
    forged = query.rsplit("sig=", 1)[0] + "sig=" + "A" * 43
    absent = "/v1/artifacts/art_" + "0" * 32
    answers = []
    for url in (f"{path}?{forged}", f"{absent}?{forged}", f"{absent}?{query}",
                f"{path}?expires=1&sig=x", f"{absent}?expires=1&sig=x"):
        r = daemon.request("GET", url, auth=False)
        err = r.json()["error"]
        answers.append((r.status, err["code"], err["message"]))
    assert set(answers) == {(403, "link_invalid", "the link is not valid")}, answers
    assert daemon.request("GET", link, auth=False).status == 200


def test_the_outside_check_retention_hold_erasure_backup_restore_and_damage(
        daemon_factory, tmp_path):
    """What the outside check runs: retention in seconds, a hold, an erasure, a backup
    restored into a new directory, store check on both, then a damaged artifact in the
    restored copy, which store check finds."""
    d = daemon_factory({"retention": {"objects_s": KEEP_S, "artifacts_s": KEEP_S,
                                      "jobs_s": 3600, "rejected_s": KEEP_S,
                                      "sweep_interval_s": 0.3}})
    evidence = [("note.txt", "text/plain", b"seen\n")]

    def ready(case_id: str, pages: int) -> dict:
        manifest = case_manifest(d, case_id, contract_pdf(tmp_path, pages=pages), evidence)
        job = d.wait_job(d.submit(manifest).json()["job_id"])
        assert job["state"] == "ready", job
        return job

    gone, held, erased = ready("OUT-GONE", 1), ready("OUT-HELD", 2), ready("OUT-ERASED", 3)
    assert d.request("POST", "/v1/cases/OUT-HELD/hold").status == 201
    assert d.request("DELETE", "/v1/cases/OUT-ERASED").status == 200
    wait_until(lambda: "removed_at" in d.job(gone["job_id"])["result"])
    assert "download_url" in d.job(held["job_id"])["result"]
    assert "removed_at" in d.job(erased["job_id"])["result"]

    state = backed_up_and_restored(d, tmp_path)
    check = d.cli("store", "check", "--config", str(state / "config.toml"))
    assert check.returncode == 0, check.stdout + check.stderr

    artifact = held["result"]["artifact_id"]
    damaged = state / "artifacts" / artifact[4:6] / artifact
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x00")
    check = d.cli("store", "check", "--config", str(state / "config.toml"))
    assert check.returncode == 1, check.stdout
    # Sealed at rest (CASESIGND_TEST_ENCRYPT_STORES), the change fails authentication.
    problem = f"sealed_unreadable: {damaged}: " if ENCRYPT_STORES else \
        f"artifact_file_changed: {damaged} is "
    assert problem in check.stdout, check.stdout
