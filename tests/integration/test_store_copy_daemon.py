"""Moving up: a real daemon on SQLite runs a test job, a signed case packet (its
artifact a file) and a kiosk request (its artifact kept in the store); `casesignd
store copy` refuses while it runs, copies once it is stopped, into PostgreSQL and
another state_dir; the daemon on the copy serves the old jobs, their events and the
same bytes, answers replays with the old jobs, chains new events on, and `audit
verify` and `store check` pass. A second copy onto the store that moved on is refused."""

from __future__ import annotations

import hashlib
import re

from tests.daemon import ENCRYPT_STORES, merge, multipart, to_toml
from tests.helpers_ops import case_manifest
from tests.helpers_pki import reportlab_pdf


def _stable(job: dict) -> dict:
    """A job resource without what is made afresh on every read (the signed link)."""
    out = dict(job)
    if "result" in out:
        out["result"] = {k: v for k, v in out["result"].items()
                         if k not in ("download_url", "expires_at")}
    return out


def test_a_sqlite_daemon_moves_to_postgres_with_its_jobs_files_and_chain(
        daemon_factory, postgres_dsn, tmp_path):
    d = daemon_factory()
    test_job = d.wait_job(d.submit({"kind": "test", "tag": "before"}, key="move-1").json()["job_id"])
    contract = reportlab_pdf(tmp_path / "contract.pdf").read_bytes()
    manifest = case_manifest(d, "MOVE-1", contract, [("note.txt", "text/plain", b"on time\n")])
    case = d.wait_job(d.submit(manifest, key="move-case").json()["job_id"])
    assert case["state"] == "ready", case
    case_bytes = d.request("GET", case["result"]["download_url"], auth=False).body
    artifact = case["result"]["artifact_id"]
    # (Sealed at rest under CASESIGND_TEST_ENCRYPT_STORES: the file holds ciphertext.)
    assert ENCRYPT_STORES or (d.dir / "artifacts" / artifact[4:6] / artifact).read_bytes() == case_bytes
    body, ctype = multipart({"case_id": "MOVE-K", "signers": [
        {"id": "k", "name": "Front Desk", "role": "clerk"}]}, contract)
    kiosk_headers = {"Content-Type": ctype, "Idempotency-Key": "move-kiosk"}
    signed = d.request("POST", "/v1/sign", raw=body, headers=kiosk_headers, timeout_s=60)
    assert signed.status == 200, signed.body[:300]
    kiosk = d.job(signed.headers["X-Job-Id"])
    kiosk_artifact = kiosk["result"]["artifact_id"]
    assert not (d.dir / "artifacts" / kiosk_artifact[4:6] / kiosk_artifact).exists()  # in the store
    jobs = {j["job_id"]: _stable(j) for j in (test_job, case, kiosk)}
    events = {job_id: d.events(job_id) for job_id in jobs}

    sqlite_cfg, pg_cfg = d.dir / "sqlite.toml", d.dir / "postgres.toml"
    sqlite_cfg.write_text(to_toml(d.config))
    pg_config = merge(d.config, {"store": {"kind": "postgres", "dsn": postgres_dsn},
                                 "storage": {"state_dir": "moved"}})
    pg_cfg.write_text(to_toml(pg_config))
    copy = ("store", "copy", "--from", str(sqlite_cfg), "--to", str(pg_cfg))
    running = d.cli(*copy)
    assert running.returncode == 1 and "error: store_unavailable:" in running.stderr, running.stderr
    assert "daemon is running" in running.stderr

    d.stop()
    done = d.cli(*copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("copied sqlite "), done.stdout
    head = re.search(r"head seq (\d+) \(([0-9a-f]{64})\)", done.stdout)
    assert head, done.stdout
    head_seq, head_hash = int(head[1]), head[2]
    assert head_seq == max(e["seq"] for evs in events.values() for e in evs)
    assert ENCRYPT_STORES or \
        (d.dir / "moved" / "artifacts" / artifact[4:6] / artifact).read_bytes() == case_bytes

    d.config_path, d.config = pg_cfg, pg_config
    d.start()
    for job_id, job in jobs.items():
        assert _stable(d.job(job_id)) == job
        assert d.events(job_id) == events[job_id]
    got = d.request("GET", d.job(case["job_id"])["result"]["download_url"], auth=False)
    assert got.status == 200 and got.body == case_bytes
    got = d.request("GET", f"/v1/artifacts/{kiosk_artifact}")
    assert got.status == 200 and got.body == signed.body
    # Replays answer the old jobs, and sign nothing again.
    replay = d.submit({"kind": "test", "tag": "before"}, key="move-1")
    assert replay.status == 200 and replay.json()["job_id"] == test_job["job_id"]
    assert d.submit(manifest, key="move-case").json()["job_id"] == case["job_id"]
    again = d.request("POST", "/v1/sign", raw=body, headers=kiosk_headers, timeout_s=60)
    assert again.status == 200 and again.body == signed.body
    assert again.headers["X-Job-Id"] == kiosk["job_id"]
    assert hashlib.sha256(again.body).hexdigest() == kiosk["result"]["sha256"]
    # A new job chains on after the copied head.
    new = d.wait_job(d.submit({"kind": "test", "tag": "after"}, key="move-2").json()["job_id"])
    first = d.events(new["job_id"])[0]
    assert (first["seq"], first["prev_hash"]) == (head_seq + 1, head_hash)

    verify = d.cli("audit", "verify", "--config", str(pg_cfg))
    assert verify.returncode == 0 and verify.stdout.startswith("audit chain intact: "), verify.stdout
    check = d.cli("store", "check", "--config", str(pg_cfg))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.rstrip().endswith("all well")

    refused = d.cli(*copy)
    assert refused.returncode == 1 and "error: store_not_empty:" in refused.stderr, refused.stderr
