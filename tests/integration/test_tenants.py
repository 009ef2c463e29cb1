"""Other tenants and outsiders: nobody reaches another tenant's jobs, objects or
artifacts; tokens live only as hashes; links cannot be bent; secrets and working
files are private; personal data stays out of the log and /metrics."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import stat
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.daemon import Daemon, to_toml
from tests.helpers_pki import reportlab_pdf

OTHER_TOKEN = "csd_other-tenant-token-for-tests-0123456789abcdef"
SIGNERS = [{"id": "seller-881", "name": "Quintessa Marlowe", "role": "seller"},
           {"id": "buyer-19", "name": "Bartholomew Oyelaran", "role": "buyer"}]


def _with_other_tenant(d: Daemon) -> Daemon:
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    return d


@pytest.fixture
def two_tenants(daemon_factory) -> Daemon:
    return _with_other_tenant(daemon_factory(start=False)).start()


def upload(d: Daemon, case_id: str, data: bytes, auth: bool | str = True):
    sha = hashlib.sha256(data).hexdigest()
    return d.request("PUT", f"/v1/cases/{case_id}/objects/{sha}", raw=data, auth=auth,
                     headers={"Content-Type": "application/octet-stream"})


def sign_case(case_id: str, data: bytes) -> dict:
    sha = hashlib.sha256(data).hexdigest()
    return {"kind": "sign_case", "case_id": case_id, "signers": SIGNERS,
            "items": [{"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
                       "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(data)}]}


def signed_job(d: Daemon, tmp: Path, case_id: str, text: str) -> dict:
    data = reportlab_pdf(tmp / f"{case_id}.pdf", text=text).read_bytes()
    assert upload(d, case_id, data).status == 201
    r = d.submit(sign_case(case_id, data))
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    return job


def _link(url: str) -> tuple[str, dict[str, str]]:
    u = urlparse(url)
    return u.path, {k: v[0] for k, v in parse_qs(u.query).items()}


# --- another tenant ---------------------------------------------------------------------


def test_another_tenant_gets_404_for_jobs_events_and_artifacts(two_tenants, tmp_path):
    d = two_tenants
    job = signed_job(d, tmp_path, "T-CASE-1", "tenant a")
    art = job["result"]["artifact_id"]
    jid = job["job_id"]
    for method, path in [("GET", f"/v1/jobs/{jid}"), ("GET", f"/v1/jobs/{jid}/events"),
                         ("POST", f"/v1/jobs/{jid}/retry"), ("POST", f"/v1/jobs/{jid}/cancel"),
                         ("GET", f"/v1/artifacts/{art}"), ("HEAD", f"/v1/artifacts/{art}")]:
        r = d.request(method, path, auth=OTHER_TOKEN)
        assert r.status == 404, (method, path, r.status, r.body)
        if method != "HEAD":
            assert r.json()["error"]["code"] in ("job_not_found", "artifact_not_found")
    assert d.request("GET", "/v1/jobs?state=ready", auth=OTHER_TOKEN).json()["jobs"] == []
    # The owner's token does reach it, so the 404 above is about the tenant.
    assert d.request("GET", f"/v1/artifacts/{art}").status == 200
    # An unknown artifact id and another tenant's look the same.
    r = d.request("GET", "/v1/artifacts/" + "a" * len(art), auth=OTHER_TOKEN)
    assert r.status == 404 and r.json()["error"]["code"] == "artifact_not_found"


def test_another_tenants_object_is_neither_revealed_nor_usable(two_tenants, tmp_path):
    d = two_tenants
    data = reportlab_pdf(tmp_path / "a.pdf", text="only for tenant a").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert upload(d, "SHARED-CASE", data).status == 201
    assert upload(d, "SHARED-CASE", data).status == 200  # the owner sees "already there"
    # Without the bytes the other tenant cannot claim the digest: an empty body, a
    # wrong body and a bodiless Content-Length all fail as a mismatch, not "200 there".
    for raw in (b"", b"guess", data[:-1]):
        r = d.request("PUT", f"/v1/cases/SHARED-CASE/objects/{sha}", raw=raw, auth=OTHER_TOKEN,
                      headers={"Content-Type": "application/octet-stream"})
        assert r.status == 422 and r.json()["error"]["code"] == "digest_mismatch", r.body
    # A job of the other tenant naming that object in the same case id fails to find it.
    r = d.request("POST", "/v1/jobs", sign_case("SHARED-CASE", data), auth=OTHER_TOKEN)
    assert r.status == 202, r.body
    jid = r.json()["job_id"]
    deadline = time.monotonic() + 60
    while (job := d.request("GET", f"/v1/jobs/{jid}", auth=OTHER_TOKEN).json())["state"] not in (
            "ready", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    assert job["state"] == "failed" and job["error"]["code"] == "object_not_found", job
    # Having the bytes is having the object: then it is the other tenant's own upload.
    assert upload(d, "SHARED-CASE", data, auth=OTHER_TOKEN).status == 201


# --- links ------------------------------------------------------------------------------


def test_links_cannot_be_altered_reused_or_outlive_their_expiry(two_tenants, tmp_path):
    d = two_tenants
    one = signed_job(d, tmp_path, "LINK-1", "first")["result"]
    two = signed_job(d, tmp_path, "LINK-2", "second")["result"]
    path, q = _link(one["download_url"])
    assert d.request("GET", one["download_url"], auth=False).status == 200
    assert d.request("HEAD", one["download_url"], auth=False).status == 200

    def get(p: str, expires: str, sig: str):
        return d.request("GET", f"{p}?expires={expires}&sig={sig}", auth=False)

    flipped = ("B" if q["sig"][0] != "B" else "C") + q["sig"][1:]
    bad = [
        get(f"/v1/artifacts/{two['artifact_id']}", q["expires"], q["sig"]),  # another artifact
        get(path, str(int(q["expires"]) + 3600), q["sig"]),  # a longer life
        get(path, q["expires"], flipped),
        get(path, q["expires"], q["sig"][:-2]),
        get(path, q["expires"], ""),
        get(path, "", q["sig"]),
        get(path, "12abc", q["sig"]),
        get(path, q["expires"], "%00%ff"),
    ]
    for r in bad:
        assert r.status == 403 and r.json()["error"]["code"] == "link_invalid", r.body
    # A link for an artifact that does not exist, with a signature that is not its own:
    # the same 403, since the signature is checked before anything is looked up.
    r = get("/v1/artifacts/" + "b" * len(one["artifact_id"]), q["expires"], q["sig"])
    assert r.status == 403 and r.json()["error"]["code"] == "link_invalid", r.body
    # A genuine link past its expiry: signed with the daemon's own link key.
    from casesignd.files.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path / "unused", (d.dir / "link.secret").read_bytes())
    past = int(time.time()) - 10
    r = d.request("GET", store.sign_link(one["artifact_id"], "default", past), auth=False)
    assert r.status == 403 and r.json()["error"]["code"] == "link_expired", r.body
    # A genuine link to an artifact that does not exist is 404: only the link key's
    # holder learns it.
    future = int(time.time()) + 600
    r = d.request("GET", store.sign_link("art_" + "b" * 32, "default", future), auth=False)
    assert r.status == 404 and r.json()["error"]["code"] == "artifact_not_found"
    # The same key signing for another tenant does not open tenant "default"'s artifact:
    # that tenant's link answers as its token would, 404; one for no tenant is invalid.
    r = d.request("GET", store.sign_link(one["artifact_id"], "other", future), auth=False)
    assert r.status == 404 and r.json()["error"]["code"] == "artifact_not_found"
    r = d.request("GET", store.sign_link(one["artifact_id"], "nobody", future), auth=False)
    assert r.status == 403 and r.json()["error"]["code"] == "link_invalid"
    assert d.request("GET", store.sign_link(one["artifact_id"], "default", future),
                     auth=False).status == 200


# --- tokens -----------------------------------------------------------------------------


def test_tokens_are_stored_only_as_hashes_and_compared_in_constant_time(two_tenants, tmp_path):
    d = two_tenants
    signed_job(d, tmp_path, "TOKEN-CASE", "tokens")
    assert d.request("GET", "/v1/jobs", auth=OTHER_TOKEN).status == 200
    d.stop()
    for token in (d.token, OTHER_TOKEN):
        secret = token.encode()
        assert secret not in d.config_path.read_bytes()
        for f in d.dir.iterdir():
            if f.is_file() and f.name.startswith(d.db.name):  # the SQLite file, its WAL, journal
                assert secret not in f.read_bytes(), f
        assert secret not in d.log_path.read_bytes()
        assert secret[4:] not in d.log_path.read_bytes()
    from casesignd.http import common as webio

    source = inspect.getsource(webio.authenticate)
    assert "hmac.compare_digest" in source
    # Every tenant is compared (no early exit that times which one matched).
    assert "break" not in source and "return tenant" not in source


# --- files on disk ----------------------------------------------------------------------


def _tree_modes(root: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    bad_dirs, bad_files, files = [], [], 0
    for base, dirs, names in os.walk(root):
        for name in dirs:
            m = stat.S_IMODE(os.lstat(os.path.join(base, name)).st_mode)
            if m != 0o700:
                bad_dirs.append((os.path.join(base, name), oct(m)))
        for name in names:
            p = os.path.join(base, name)
            try:
                m = stat.S_IMODE(os.lstat(p).st_mode)
            except FileNotFoundError:
                continue  # a working file removed between listing and stat
            files += 1
            if m != 0o600:
                bad_files.append((p, oct(m)))
    return bad_dirs, bad_files, files


def test_working_files_and_artifacts_are_private_while_a_slow_job_runs(daemon_factory, tmp_path):
    d = daemon_factory(sign_delay_ms=3000)
    data = reportlab_pdf(tmp_path / "slow.pdf", text="slow").read_bytes()
    assert upload(d, "SLOW-CASE", data).status == 201
    # With evidence, so that the job works in a temp area and its result is a file (a
    # lone stored contract is signed in memory and kept in the database).
    note = b"read aloud to the signer\n"
    assert upload(d, "SLOW-CASE", note).status == 201
    body = sign_case("SLOW-CASE", data)
    body["items"].append({"role": "evidence", "name": "note.txt", "media_type": "text/plain",
                          "object_ref": f"sha256:{hashlib.sha256(note).hexdigest()}",
                          "sha256": hashlib.sha256(note).hexdigest(), "size": len(note)})
    jid = d.submit(body).json()["job_id"]
    d.wait_job(jid, states=("processing",))
    temp_root = d.dir / d.config["storage"]["temp_dir"]
    deadline = time.monotonic() + 30
    seen = 0
    while time.monotonic() < deadline and d.job(jid)["state"] == "processing":
        bad_dirs, bad_files, n = _tree_modes(temp_root)
        assert not bad_dirs and not bad_files, (bad_dirs, bad_files)
        seen = max(seen, n)
        time.sleep(0.1)
    assert seen >= 1, "no working file was ever seen while the job ran"
    assert stat.S_IMODE(temp_root.stat().st_mode) == 0o700
    assert d.wait_job(jid)["state"] == "ready"
    for sub in ("objects", "artifacts"):
        root = d.dir / sub
        bad_dirs, bad_files, n = _tree_modes(root)
        assert n >= 1 and not bad_dirs and not bad_files, (sub, bad_dirs, bad_files)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700


@pytest.mark.parametrize("secret", ["pkcs12_path", "pkcs12_password_file"])
def test_daemon_refuses_to_start_when_a_key_file_is_readable_by_others(daemon_factory, secret):
    d = daemon_factory(start=False)
    path = d.dir / d.config["signing"][secret]
    os.chmod(path, 0o644)
    d.start(wait=False)
    try:
        code = d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        raise
    assert code != 0
    lines = [ln for ln in d.logs().splitlines() if ln.strip()]
    assert lines and f"signing.{secret}" in lines[-1] and "chmod" in lines[-1], lines[-5:]
    assert "Traceback" not in d.logs()


# --- personal data ----------------------------------------------------------------------


def test_no_personal_data_in_logs_or_metrics(daemon, tmp_path):
    d = daemon
    case_id = "PRIVATE-CASE-8841"
    job = signed_job(d, tmp_path, case_id, "private")
    # A failing job and a refused request too: error paths log the most.
    missing = sign_case(case_id, b"never uploaded")
    failed = d.wait_job(d.submit(missing).json()["job_id"])
    assert failed["state"] == "failed"
    bad = sign_case(case_id, b"x")
    bad["signers"] = [{**SIGNERS[0], "name": "Quintessa\u0000Marlowe"}]
    assert d.submit(bad).status == 422
    student = "Leopoldine Vasquez-Thornbury"
    inv = {"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
           "order": {"order_id": "EDU-PRIV-77", "student_name": student, "currency": "USD",
                     "items": [{"description": "Lab course", "quantity": 1,
                                "unit_price": "49.00"}]}}
    r = d.submit(inv)
    assert r.status == 202, r.body
    assert d.wait_job(r.json()["job_id"])["state"] == "ready"
    # The kiosk path, signing and refusing.
    doc = reportlab_pdf(tmp_path / "kiosk.pdf", text="kiosk private").read_bytes()
    for document, status in ((doc, 200), (b"%PDF-1.7 not really", 422)):
        body = (b"--pb\r\nContent-Disposition: form-data; name=\"manifest\"\r\n\r\n"
                + json.dumps({"case_id": "KIOSK-PRIVATE-5521", "signers": SIGNERS}).encode()
                + b"\r\n--pb\r\nContent-Disposition: form-data; name=\"document\"\r\n"
                b"Content-Type: application/pdf\r\n\r\n" + document + b"\r\n--pb--\r\n")
        r = d.request("POST", "/v1/sign", raw=body, timeout_s=60,
                      headers={"Content-Type": "multipart/form-data; boundary=pb"})
        assert r.status in (status, 504), r.body[:300]
    metrics = d.request("GET", "/metrics", auth=False).body.decode()
    assert d.request("GET", f"/v1/jobs/{job['job_id']}").status == 200
    d.stop()
    logs = d.logs()
    assert "job_id" in logs or job["job_id"] in logs  # the log does speak of jobs
    for secret in (case_id, "KIOSK-PRIVATE-5521", "Quintessa", "Marlowe", "Bartholomew", "Oyelaran", student,
                   "Vasquez", "EDU-PRIV-77"):
        assert secret not in logs, secret
        assert secret not in metrics, secret
