"""Backup and restore of a running daemon: `casesignd backup` while jobs run, `casesignd
restore` into a new directory, and the restored daemon serves the old artifacts (by
the owner's token and by a signed link given out before), its audit chain and files
check out; an altered artifact file is named by `store check`, and a tampered backup
is refused by restore, naming each file. On SQLite, and once on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from tests.daemon import ENCRYPT_STORES, Daemon
from tests.helpers_ops import case_manifest, kiosk_sign
from tests.helpers_pki import reportlab_pdf


def _restored(d: Daemon, state: Path) -> Daemon:
    """A daemon on the restored setup in ``state``, on a port of its own."""
    twin = d.sibling("restored")
    twin.dir, twin.config_path, twin.log_path = state, state / "config.toml", state / "daemon.log"
    return twin


def _signed_case(d: Daemon, tmp_path: Path, case_id: str) -> tuple[dict, bytes]:
    contract = reportlab_pdf(tmp_path / f"{case_id}.pdf").read_bytes()
    manifest = case_manifest(d, case_id, contract, [("note.txt", "text/plain", b"seen\n")])
    job = d.wait_job(d.submit(manifest, key=case_id).json()["job_id"])
    assert job["state"] == "ready", job
    return job, contract


def _serves(d: Daemon, artifact_id: str, body: bytes, link: str | None = None) -> None:
    got = d.request("GET", f"/v1/artifacts/{artifact_id}")
    assert got.status == 200 and got.body == body, got.status
    if link is not None:
        got = d.request("GET", link, auth=False)
        assert got.status == 200 and got.body == body, got.status


def test_a_backup_taken_while_jobs_run_restores_into_a_working_daemon(daemon_factory, tmp_path):
    d = daemon_factory()
    case, contract = _signed_case(d, tmp_path, "BK-1")
    link = case["result"]["download_url"]
    case_bytes = d.request("GET", link, auth=False).body
    kiosk = kiosk_sign(d, "BK-K", contract, key="bk-kiosk")
    assert kiosk.status == 200, kiosk.body[:300]
    kiosk_artifact = d.job(kiosk.headers["X-Job-Id"])["result"]["artifact_id"]
    # Jobs in flight while the backup runs: some finish before its snapshot, some after.
    for i in range(6):
        d.submit({"kind": "test", "sleep_ms": 150 * i, "tag": f"t{i}"}, key=f"bk-t{i}")

    backup = tmp_path / "backup"
    made = d.cli("backup", "--to", str(backup), "--config", str(d.config_path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "artifact files 1" in made.stdout and "keep it where only operators" in made.stdout
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["store"]["kind"] == "sqlite" and manifest["chain_head"]["seq"] > 0
    modes = {e["path"]: e["mode"] for e in manifest["files"]}
    assert modes["config/signing.p12"] == modes["config/link.secret"] == "0600"
    again = d.cli("backup", "--to", str(backup), "--config", str(d.config_path))
    assert again.returncode == 1 and "error: target_not_empty:" in again.stderr, again.stderr

    state = tmp_path / "restored"
    done = d.cli("restore", "--from", str(backup), "--dir", str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("all well"), done.stdout
    r = _restored(d, state).start()
    try:
        _serves(r, case["result"]["artifact_id"], case_bytes, link)
        _serves(r, kiosk_artifact, kiosk.body)
        # Jobs the snapshot caught queued or running finish on the restored daemon.
        for job in r.request("GET", "/v1/jobs?limit=50").json()["jobs"]:
            assert r.wait_job(job["job_id"])["state"] == "ready", job
    finally:
        r.stop()
    verify = d.cli("audit", "verify", "--config", str(state / "config.toml"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    check = d.cli("store", "check", "--config", str(state / "config.toml"))
    assert check.returncode == 0, check.stdout + check.stderr

    artifact = case["result"]["artifact_id"]
    altered = state / "artifacts" / artifact[4:6] / artifact
    altered.write_bytes(altered.read_bytes() + b"%")
    check = d.cli("store", "check", "--config", str(state / "config.toml"))
    assert check.returncode == 1, check.stdout
    # Sealed at rest (CASESIGND_TEST_ENCRYPT_STORES), the change fails authentication.
    problem = f"sealed_unreadable: {altered}: " if ENCRYPT_STORES else \
        f"artifact_file_changed: {altered} is "
    assert problem in check.stdout, check.stdout

    in_backup = f"artifacts/{artifact[4:6]}/{artifact}"
    (backup / in_backup).write_bytes(b"not the signed packet")
    (backup / "config" / "stray.txt").write_text("not backed up\n")
    refused = d.cli("restore", "--from", str(backup), "--dir", str(tmp_path / "again"))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "error: backup_invalid:" in refused.stderr and "nothing was written" in refused.stderr
    assert f"altered: {in_backup} is 21 bytes" in refused.stderr, refused.stderr
    assert "extra: config/stray.txt" in refused.stderr, refused.stderr
    assert not (tmp_path / "again").exists()


def test_a_postgres_store_is_backed_up_with_pg_dump_and_restored_into_an_empty_database(
        daemon_factory, postgres_dsn, postgres_cluster, tmp_path):
    d = daemon_factory({"store": {"kind": "postgres", "dsn": postgres_dsn}})
    case, _ = _signed_case(d, tmp_path, "BK-PG")
    case_bytes = d.request("GET", case["result"]["download_url"], auth=False).body
    backup = tmp_path / "backup"
    made = d.cli("backup", "--to", str(backup), "--config", str(d.config_path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert (backup / "store" / "casesignd.pgdump").is_file()

    state = tmp_path / "restored"
    busy = d.cli("restore", "--from", str(backup), "--dir", str(state))  # the live database
    assert busy.returncode == 1 and "error: target_not_empty:" in busy.stderr, busy.stderr
    assert not state.exists()
    with postgres_cluster.fresh_database() as target:
        done = d.cli("restore", "--from", str(backup), "--dir", str(state), "--dsn", target)
        assert done.returncode == 0, done.stdout + done.stderr
        r = _restored(d, state).start()
        try:
            _serves(r, case["result"]["artifact_id"], case_bytes, case["result"]["download_url"])
        finally:
            r.stop()
        verify = d.cli("audit", "verify", "--config", str(state / "config.toml"))
        assert verify.returncode == 0, verify.stdout + verify.stderr


def test_logos_are_backed_up_and_a_restored_daemon_draws_them(daemon_factory, tmp_path):
    from PIL import Image

    d = daemon_factory({"invoice": {"logo": "school.png", "default_template": "invoice-v4",
                                    "locale": "de-DE"}}, start=False)
    Image.new("RGB", (60, 20), (200, 0, 0)).save(d.dir / "school.png", format="PNG")
    d.start()
    body = {"kind": "render_invoice", "order": {
        "order_id": "BK-INV", "student_name": "Avery Chen", "currency": "EUR",
        "items": [{"description": "Kurs", "quantity": 1, "unit_price": "10.00"}]}}
    assert d.wait_job(d.submit(body).json()["job_id"])["state"] == "ready"
    kept = sorted((d.dir / "branding").iterdir())
    assert len(kept) == 1
    backup = tmp_path / "backup"
    made = d.cli("backup", "--to", str(backup), "--config", str(d.config_path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "logos 1" in made.stdout, made.stdout
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["config"]["files"]["invoice.logo"] == "config/school.png"
    state = tmp_path / "restored"
    done = d.cli("restore", "--from", str(backup), "--dir", str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (state / "branding" / kept[0].name).read_bytes() == kept[0].read_bytes()
    r = _restored(d, state).start()
    try:
        body["order"]["order_id"] = "BK-INV-2"
        job = r.wait_job(r.submit(body).json()["job_id"])
        assert job["state"] == "ready", job
    finally:
        r.stop()
