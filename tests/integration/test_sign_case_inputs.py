"""sign_case inputs from every side, through the daemon: malware in the evidence
(a real clamd), and a directory source that a path or a symlink tries to leave."""

from __future__ import annotations

import hashlib
import os

from tests.helpers_clamd import clamd_socket, eicar_bytes, needs_clamd  # noqa: F401
from tests.helpers_pki import reportlab_pdf
from tests.integration.test_sign_case_http import manifest, upload


@needs_clamd
def test_eicar_in_the_evidence_fails_the_job_and_the_worker_keeps_going(
        daemon_factory, tmp_path, clamd_socket):  # noqa: F811
    d = daemon_factory({"scanner": {"kind": "clamd", "socket": clamd_socket, "timeout_s": 30.0}})
    contract = upload(d, "MAL-1", reportlab_pdf(tmp_path / "c.pdf").read_bytes())
    bad = upload(d, "MAL-1", eicar_bytes())
    job = d.wait_job(d.submit(manifest("MAL-1", contract, [("note.txt", "text/plain", bad)])).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "malware_detected", job
    assert job["attempts"] == 1
    types = [e["type"] for e in d.events(job["job_id"])]
    assert "signed" not in types and "signature_recorded" not in types
    assert list(d.temp_area.iterdir()) == []
    clean = upload(d, "MAL-1", b"a clean note\n")
    ok = d.wait_job(d.submit(manifest("MAL-1", contract, [("note.txt", "text/plain", clean)])).json()["job_id"])
    assert ok["state"] == "ready", ok


def _dir_item(path: str, data: bytes) -> dict:
    sha = hashlib.sha256(data).hexdigest()
    return {"sha256": sha, "size": len(data), "object_ref": f"docs:{path}"}


def test_a_directory_source_cannot_be_left(daemon_factory, tmp_path):
    root = tmp_path / "docs"
    (root / "cases").mkdir(parents=True)
    contract = reportlab_pdf(root / "cases" / "contract.pdf").read_bytes()
    secret = tmp_path / "secret.pdf"
    secret.write_bytes(contract)
    os.symlink(secret, root / "cases" / "escape.pdf")
    d = daemon_factory({"sources": [{"name": "docs", "kind": "dir", "root": str(root)}]})
    # Inside the root: signed.
    ok = d.wait_job(d.submit(manifest("DIR-1", _dir_item("cases/contract.pdf", contract), [])).json()["job_id"])
    assert ok["state"] == "ready", ok
    # ".." and absolute paths are refused at admission, naming the field.
    for path in ("../secret.pdf", "/etc/passwd", "cases/../../secret.pdf"):
        r = d.submit(manifest("DIR-2", _dir_item(path, contract), []))
        assert r.status == 422, (path, r.body)
        assert r.json()["error"]["field"] == "items[0].object_ref"
    # A symlink out of the root is refused when the worker opens it.
    job = d.wait_job(d.submit(manifest("DIR-3", _dir_item("cases/escape.pdf", contract), [])).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "path_outside_source", job


@needs_clamd
def test_the_kiosk_scans_before_its_key_is_used(daemon_factory, tmp_path, clamd_socket):  # noqa: F811
    from tests.integration.test_kiosk_http import sign

    d = daemon_factory({"scanner": {"kind": "clamd", "socket": clamd_socket, "timeout_s": 30.0}})
    r = sign(d, eicar_bytes(), case_id="MAL-K1", key="mal-k1")
    assert r.status == 422 and r.json()["error"]["code"] == "malware_detected", r.body[:300]
    jobs = d.request("GET", "/v1/jobs?state=failed").json()["jobs"]
    assert [j["error"]["code"] for j in jobs] == ["malware_detected"]
    types = [e["type"] for e in d.events(jobs[0]["job_id"])]
    assert "signed" not in types and "signature_recorded" not in types, types
    ok = sign(d, reportlab_pdf(tmp_path / "c.pdf").read_bytes(), case_id="MAL-K1", key="ok-k1")
    assert ok.status == 200, ok.body[:300]
