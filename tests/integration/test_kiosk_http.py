"""The kiosk path end to end: POST /v1/sign on a real daemon."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from casesignd.files.objects import owner_dirs
from tests.daemon import multipart, to_toml
from tests.helpers_chaos import db_scalar
from tests.helpers_pki import nss_db, pdfsig, pyhanko_statuses, reportlab_pdf

SIGNERS = [{"id": "kiosk-7", "name": "Front Desk", "role": "clerk"}]
OTHER_TOKEN = "csd_other-tenant-token-for-kiosk-tests-0123456789"


def sign(d, document: bytes, case_id: str = "KIOSK-1", key: str | None = None, **manifest):
    body, ctype = multipart({"case_id": case_id, "signers": SIGNERS, **manifest}, document)
    headers = {"Content-Type": ctype}
    if key:
        headers["Idempotency-Key"] = key
    return d.request("POST", "/v1/sign", raw=body, headers=headers, timeout_s=60)


def assert_valid(path: Path, d, tmp: Path) -> None:
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    statuses = pyhanko_statuses(path, [ca])
    assert statuses and all(s.intact and s.valid and s.trusted for s in statuses)
    assert "Signature is Valid" in pdfsig(path, nss_db(tmp, ca))


def test_kiosk_signs_within_the_deadline_with_the_same_audit_trail(daemon, tmp_path):
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    r = sign(daemon, doc, key="kiosk-a")
    assert r.status == 200, r.body[:300]
    assert r.headers["Content-Type"] == "application/pdf"
    assert hashlib.sha256(r.body).hexdigest() == r.headers["X-Artifact-SHA256"]
    out = tmp_path / "signed.pdf"
    out.write_bytes(r.body)
    assert_valid(out, daemon, tmp_path)
    job_id = r.headers["X-Job-Id"]
    job = daemon.job(job_id)
    assert job["state"] == "ready" and job["kind"] == "sign_case"
    assert [e["type"] for e in daemon.events(job_id)] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]
    # A replay returns the identical bytes and signs nothing.
    again = sign(daemon, doc, key="kiosk-a")
    assert again.status == 200 and again.body == r.body
    assert again.headers["X-Job-Id"] == job_id
    assert [e["type"] for e in daemon.events(job_id)].count("signed") == 1
    # The same key with another document is refused.
    other = sign(daemon, reportlab_pdf(tmp_path / "o.pdf", text="other").read_bytes(), key="kiosk-a")
    assert other.status == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    # Its one log line: succeeded, with the phases' times.
    mine = [json.loads(line) for line in daemon.logs().splitlines()
            if line.startswith("{") and job_id in line]
    assert [r["msg"] for r in mine] == ["job.succeeded"]
    phases = mine[-1]["phases_ms"]
    assert {"validate", "sign", "publish"} <= set(phases)
    assert all(isinstance(v, float) and v >= 0 for v in phases.values())


def _answered_504(daemon_factory, tmp_path, delay_ms: int, key: str):
    """A daemon whose signer takes ``delay_ms``, past its 1 s deadline, and a kiosk
    request it answered 504: (the daemon, the document, the 504's job id)."""
    d = daemon_factory({"kiosk": {"deadline_ms": 1000}},
                       sign_delay_ms=delay_ms)
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    r = sign(d, doc, key=key)
    assert r.status == 504, r.body[:300]
    assert r.json()["error"]["code"] == "deadline_exceeded"
    return d, doc, r.headers["X-Job-Id"]


def test_a_slow_signer_gets_504_and_a_replay_returns_the_recorded_signature(daemon_factory, tmp_path):
    d, doc, job_id = _answered_504(daemon_factory, tmp_path, 1500, "slow-1")
    # In flight: the replay says so instead of signing again.
    inflight = sign(d, doc, key="slow-1")
    assert inflight.status in (409, 200)
    if inflight.status == 409:
        assert inflight.json()["error"]["code"] == "in_progress"
    d.wait_job(job_id)
    replay = sign(d, doc, key="slow-1")
    assert replay.status == 200 and replay.headers["X-Job-Id"] == job_id
    out = tmp_path / "signed.pdf"
    out.write_bytes(replay.body)
    assert_valid(out, d, tmp_path)
    assert [e["type"] for e in d.events(job_id)].count("signed") == 1


def test_when_the_reserved_capacity_is_taken_the_kiosk_answers_busy_at_once(daemon_factory, tmp_path):
    d = daemon_factory({"signing": {"key_slots": 2}, "kiosk": {"reserved_key_slots": 1,
                                                               "max_concurrent": 2,
                                                               "deadline_ms": 10000}},
                       sign_delay_ms=2000)
    docs = [reportlab_pdf(tmp_path / f"d{i}.pdf", text=f"doc {i}").read_bytes() for i in range(3)]
    results: dict[int, int] = {}

    def go(i: int) -> None:
        results[i] = sign(d, docs[i], case_id=f"K-{i}").status

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    r = sign(d, docs[2], case_id="K-2")
    assert r.status == 503 and r.json()["error"]["code"] == "busy"
    assert int(r.headers["Retry-After"]) >= 1
    for t in threads:
        t.join(30)
    assert results == {0: 200, 1: 200}


def test_kiosks_share_the_reserved_slot_around_the_key_operation(daemon_factory, tmp_path):
    # One reserved slot and no free batch slot: concurrent kiosks take turns on the
    # key (a short wait) instead of being refused.
    d = daemon_factory({"signing": {"key_slots": 2}, "kiosk": {"reserved_key_slots": 1,
                                                               "deadline_ms": 20000}},
                       sign_delay_ms=300)
    docs = [reportlab_pdf(tmp_path / f"s{i}.pdf", text=f"share {i}").read_bytes() for i in range(4)]
    results: dict[int, int] = {}

    def go(i: int) -> None:
        results[i] = sign(d, docs[i], case_id=f"S-{i}").status

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: 200, 1: 200, 2: 200, 3: 200}


def _artifact_files(d) -> list[Path]:
    return [f for f in (d.dir / "artifacts").rglob("*") if f.is_file()]


def test_kill9_during_a_kiosk_request_leaves_nothing_half_done(daemon_factory, tmp_path):
    # Within its deadline a kiosk request writes its job once, when it is done: a crash
    # before that leaves no job, no artifact and no working file, and the kiosk's retry
    # signs afresh.
    d = daemon_factory({"kiosk": {"deadline_ms": 20000}},
                       sign_delay_ms=3000)
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()

    def doomed() -> None:
        with contextlib.suppress(OSError):  # the daemon dies under the request
            sign(d, doc, key="crash-1")

    t = threading.Thread(target=doomed, daemon=True)
    t.start()
    deadline = time.monotonic() + 15
    while "casesignd_key_slots_in_use" not in _busy_slots(d):
        assert time.monotonic() < deadline, "the request never reached the key"
        time.sleep(0.05)
    d.kill9()
    t.join(10)
    d.start()
    assert d.request("GET", "/v1/jobs").json()["jobs"] == []
    assert _artifact_files(d) == []
    assert db_scalar(d.db, "SELECT count(*) FROM artifact_data") == 0
    replay = sign(d, doc, key="crash-1")
    assert replay.status == 200, replay.body[:300]
    out = tmp_path / "signed.pdf"
    out.write_bytes(replay.body)
    assert_valid(out, d, tmp_path)
    assert [e["type"] for e in d.events(replay.headers["X-Job-Id"])].count("signed") == 1
    assert list(d.temp_area.iterdir()) == []


def _busy_slots(d) -> str:
    """The metric lines of key slots in use, when one is (the kiosk is at its key)."""
    text = d.request("GET", "/metrics").body.decode()
    return "\n".join(line for line in text.splitlines()
                     if line.startswith("casesignd_key_slots_in_use") and not line.endswith(" 0.0"))


def test_kill9_after_a_504_the_job_survives_and_a_replay_returns_it(daemon_factory, tmp_path):
    # Past its deadline the request's job is written down (with its document) before
    # the 504 goes out: a crash then loses nothing, and the job finishes after restart.
    d, doc, job_id = _answered_504(daemon_factory, tmp_path, 4000, "late-1")
    assert d.job(job_id)["state"] == "processing"
    d.kill9()
    d.start()
    done = d.wait_job(job_id, timeout_s=60)
    assert done["state"] == "ready", done
    replay = sign(d, doc, key="late-1")
    assert replay.status == 200 and replay.headers["X-Job-Id"] == job_id
    out = tmp_path / "signed.pdf"
    out.write_bytes(replay.body)
    assert_valid(out, d, tmp_path)
    assert [e["type"] for e in d.events(job_id)].count("signed") == 1
    for f in _artifact_files(d):
        assert f.read_bytes().rstrip().endswith(b"%%EOF"), f


@pytest.mark.parametrize("row", ["written when late", "written only at its end"])
def test_a_504s_job_id_reads_as_its_job_at_once_and_only_to_its_tenant(daemon_factory, tmp_path,
                                                                       row):
    # The job a 504 names may not be written yet when the answer goes out (a loaded
    # store; or its write failed, and the row comes with its outcome): it reads as a
    # processing job all the same, never as "no such job", and to another tenant as
    # one that does not exist.
    d = daemon_factory({"kiosk": {"deadline_ms": 1000}}, start=False, sign_delay_ms=4000)
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    if row == "written only at its end":
        # Its document cannot be kept as an object (its case's directory is a file), so
        # the write when it is late fails: its row is written with its outcome alone.
        blocked = d.dir.joinpath("objects", "cases", *owner_dirs("default", "KIOSK-1"))
        blocked.parent.mkdir(parents=True)
        blocked.write_bytes(b"")
    d.start()
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    r = sign(d, doc, key="late-read")
    assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded"
    assert r.headers["Retry-After"]
    job_id = r.headers["X-Job-Id"]
    job = d.job(job_id)  # 200, at once
    assert (job["job_id"], job["state"], job["kind"], job["case_id"], job["attempts"]) == (
        job_id, "processing", "sign_case", "KIOSK-1", 1)
    if row == "written only at its end":
        assert db_scalar(d.db, "SELECT count(*) FROM jobs WHERE job_id = ?", job_id) == 0
        assert d.events(job_id) == []  # nothing recorded yet
        assert "kiosk.persist_failed" in d.logs()
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events"):
        theirs = d.request("GET", path, auth=OTHER_TOKEN)
        assert theirs.status == 404 and theirs.json()["error"]["code"] == "job_not_found"
    for verb, code in (("cancel", "not_cancelable"), ("retry", "not_failed")):
        refused = d.request("POST", f"/v1/jobs/{job_id}/{verb}")
        assert refused.status == 409 and refused.json()["error"]["code"] == code, refused.body
        theirs = d.request("POST", f"/v1/jobs/{job_id}/{verb}", auth=OTHER_TOKEN)
        assert theirs.status == 404 and theirs.json()["error"]["code"] == "job_not_found"
    # Read over and over until it ends: each read a job (d.job asserts 200), never 404.
    done = d.wait_job(job_id, timeout_s=60, poll_s=0.02)
    assert done["state"] == "ready", done
    assert [e["type"] for e in d.events(job_id)].count("succeeded") == 1
    assert d.request("GET", f"/v1/jobs/{job_id}", auth=OTHER_TOKEN).status == 404
    replay = sign(d, doc, key="late-read")
    assert replay.status == 200 and replay.headers["X-Job-Id"] == job_id


@pytest.mark.parametrize("inline_max", [0, 1 << 20])
def test_the_signed_document_downloads_the_same_from_the_store_or_a_file(daemon_factory, tmp_path,
                                                                          inline_max):
    d = daemon_factory({"kiosk": {"inline_artifact_max_bytes": inline_max}})
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    r = sign(d, doc, key=f"dl-{inline_max}")
    assert r.status == 200, r.body[:300]
    job = d.job(r.headers["X-Job-Id"])
    link = job["result"]["download_url"]
    got = d.request("GET", link, auth=False)
    assert got.status == 200 and got.body == r.body
    assert got.headers["X-Artifact-SHA256"] == hashlib.sha256(r.body).hexdigest()
    kept_inline = db_scalar(d.db, "SELECT count(*) FROM artifact_data")
    assert (kept_inline == 1) == (inline_max > 0)
    assert (len(_artifact_files(d)) == 1) == (inline_max == 0)


@pytest.mark.parametrize("case,status,code,field", [
    ("not multipart", 415, "unsupported_media_type", None),
    ("bad case id", 422, "invalid_case_id", "case_id"),
    ("signers not a list", 422, "invalid_field", "signers"),
    ("digest differs", 422, "digest_mismatch", "sha256"),
    ("unknown field", 422, "unknown_field", "manifest"),
    ("too large", 413, "too_large", None),
])
def test_kiosk_refusals(daemon_factory, tmp_path, case, status, code, field):
    d = daemon_factory({"kiosk": {"max_document_bytes": 200_000}})
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    if case == "not multipart":
        r = d.request("POST", "/v1/sign", raw=doc, headers={"Content-Type": "application/pdf"})
    elif case == "bad case id":
        r = sign(d, doc, case_id="../x")
    elif case == "signers not a list":
        body, ctype = multipart({"case_id": "K-9", "signers": "everyone"}, doc)
        r = d.request("POST", "/v1/sign", raw=body, headers={"Content-Type": ctype})
    elif case == "digest differs":
        r = sign(d, doc, sha256="0" * 64)
    elif case == "unknown field":
        r = sign(d, doc, colour="red")
    else:
        r = sign(d, doc + b"\0" * 250_000)
    assert r.status == status, r.body[:300]
    err = r.json()["error"]
    assert err["code"] == code
    if field:
        assert err["field"] == field
    assert d.request("GET", "/v1/jobs").json()["jobs"] == []


def test_a_bad_document_is_refused_with_its_code(daemon, tmp_path):
    src = reportlab_pdf(tmp_path / "doc.pdf")
    subprocess.run(["qpdf", "--encrypt", "u", "o", "256", "--", str(src), str(tmp_path / "e.pdf")],
                   check=True, timeout=30)
    r = sign(daemon, (tmp_path / "e.pdf").read_bytes())
    assert r.status == 422 and r.json()["error"]["code"] == "encrypted_pdf"


def test_cli_sign(daemon, tmp_path):
    src = reportlab_pdf(tmp_path / "doc.pdf")
    out = tmp_path / "doc.signed.pdf"
    proc = daemon.cli("sign", str(src), "--case", "CLI-1", "--signer", "a-1:Ann:buyer", "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_valid(out, daemon, tmp_path)
    bad = daemon.cli("sign", str(tmp_path / "missing.pdf"), "--case", "CLI-1")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
