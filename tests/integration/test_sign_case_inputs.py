"""sign_case inputs from every side, through the daemon: malware in the evidence
(a real clamd), a directory source that a path or a symlink tries to leave, and text
evidence that stops being text past its head."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.helpers_clamd import clamd_socket, eicar_bytes, needs_clamd  # noqa: F401
from tests.helpers_pki import reportlab_pdf
from tests.integration.test_sign_case_http import manifest, upload
from tests.integration.test_store_encryption import sealed_daemon


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


@pytest.mark.parametrize("sealed", [False, True], ids=["plain_stores", "sealed_stores"])
def test_text_evidence_is_checked_to_its_end_before_the_key_is_used(
        daemon_factory, tmp_path, sealed):
    # The head of a text file settles nothing: whether it is text is judged on every
    # chunk as the signing worker embeds (or, in a signed document, hashes) it, and
    # a mismatch anywhere fails the job before the key signs, leaving nothing.
    d = sealed_daemon(daemon_factory) if sealed else daemon_factory()
    contract = upload(d, "TXT-1", reportlab_pdf(tmp_path / "c.pdf").read_bytes())
    good = upload(d, "TXT-1", ("Grüße, 北京\n" * 200_000).encode())
    bad = {
        "late_nul": upload(d, "TXT-1", b"line of a note\n" * 200_000 + b"\x00\n"),
        "left_open": upload(d, "TXT-1", b"a" * ((1 << 20) - 1) + "é".encode() + b"tail\xc3"),
        "bad_byte_across_chunks": upload(d, "TXT-1", b"a" * ((1 << 20) - 1) + b"\xc3(" + b"a" * 99),
    }

    def run(case_id: str, contract: dict, evidence: list) -> dict:
        r = d.submit(manifest(case_id, contract, evidence))
        assert r.status == 202, r.body
        return d.wait_job(r.json()["job_id"])

    def refused(job: dict) -> None:
        assert job["state"] == "failed", job
        assert job["error"]["code"] == "media_type_mismatch", job
        assert job["attempts"] == 1
        types = [e["type"] for e in d.events(job["job_id"])]
        assert "signed" not in types and "signature_recorded" not in types, types
        assert list(d.temp_area.iterdir()) == []
        assert list(d.dir.rglob(".*.tmp")) == []  # no artifact left in flight

    for name, obj in bad.items():
        refused(run("TXT-1", contract, [("good.txt", "text/plain", good),
                                        (f"{name}.txt", "text/plain", obj)]))
    ok = run("TXT-1", contract, [("good.txt", "text/plain", good)])
    assert ok["state"] == "ready", ok
    # A signed document binds its evidence by digest: hashed, and checked the same way.
    signed = d.request("GET", ok["result"]["download_url"], auth=False).body
    again = upload(d, "TXT-2", signed)
    late = upload(d, "TXT-2", b"line of a note\n" * 200_000 + b"\x00\n")
    refused(run("TXT-2", again, [("late.txt", "text/plain", late)]))


def test_a_stored_evidence_file_changed_on_disk_is_refused_before_the_key_is_used(
        daemon_factory, tmp_path):
    # Plain stores: the evidence file is read where it is stored and hashed as it is
    # embedded; bytes that are no longer those of its digest are not signed.
    d = daemon_factory()
    contract = upload(d, "CHG-1", reportlab_pdf(tmp_path / "c.pdf").read_bytes())
    data = b"a note of the case\n" * 100_000
    evidence = upload(d, "CHG-1", data)
    blob = next(p for p in (d.dir).rglob(evidence["sha256"]) if "blobs" in p.parts)
    if blob.read_bytes() != data:
        pytest.skip("the stores are sealed at rest: a change fails authentication instead")
    blob.write_bytes(data[:-2] + b"!\n")  # in place: every link to it sees the change
    r = d.submit(manifest("CHG-1", contract, [("note.txt", "text/plain", evidence)]))
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "digest_mismatch", job
    types = [e["type"] for e in d.events(job["job_id"])]
    assert "signed" not in types and "signature_recorded" not in types, types
    assert list(d.temp_area.iterdir()) == [] and list(d.dir.rglob(".*.tmp")) == []


def test_stored_sealed_evidence_with_a_chunk_moved_is_never_signed_and_leaves_nothing(
        daemon_factory, tmp_path):
    # Stores sealed at rest: the evidence is read in place by the signing worker and
    # bound by its digest, not hashed again. A chunk of its blob replaced by another
    # of the same blob (past the head and the first MiB run, not the last chunk)
    # authenticates under no nonce but its own: every attempt ends in the retryable
    # io_error before the key signs, and leaves no temp file or artifact in flight.
    from casesignd.core.sealed import CHUNK_PLAIN_BYTES, HEADER_BYTES, TAG_BYTES

    d = sealed_daemon(daemon_factory, {"retry": {"base_delay_s": 0.1, "max_delay_s": 0.2,
                                                 "max_attempts": {"sign_case": 2}}})
    contract = upload(d, "MOVE-1", reportlab_pdf(tmp_path / "c.pdf").read_bytes())
    data = b"".join(b"evidence line %07d of the case\n" % i for i in range(180_000))
    evidence = upload(d, "MOVE-1", data)
    blob = next(p for p in d.dir.rglob(evidence["sha256"]) if "blobs" in p.parts)
    stride = CHUNK_PLAIN_BYTES + TAG_BYTES
    raw = bytearray(blob.read_bytes())
    a, b = HEADER_BYTES + 20 * stride, HEADER_BYTES + 3 * stride
    raw[a:a + stride] = raw[b:b + stride]
    blob.write_bytes(bytes(raw))
    r = d.submit(manifest("MOVE-1", contract, [("log.txt", "text/plain", evidence)]))
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "io_error", job
    events = d.events(job["job_id"])
    types = [e["type"] for e in events]
    assert "signed" not in types and "signature_recorded" not in types, types
    assert [e["detail"].get("code") for e in events if e["type"] == "retry_scheduled"] \
        == ["io_error"], events
    assert list(d.temp_area.iterdir()) == [] and list(d.dir.rglob(".*.tmp")) == []
    assert "internal_error" not in d.logs()
