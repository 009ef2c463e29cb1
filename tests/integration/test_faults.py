"""Faults around the daemon: a flaky source, a TSA that is down, clamd down, a full
temp volume and a full store disk. Each is retried or refused with its stable code,
never produces a wrong result, and the job succeeds once the fault is gone."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from cryptography import x509

from tests.helpers_chaos import (
    SIGNERS,
    Tally,
    ThreadedSource,
    check_invariants,
    db_rows,
    db_scalar,
    wait_all_terminal,
)
from tests.helpers_clamd import CLAMD, start_clamd
from tests.helpers_http_source import Body, Hang, Status, Trickle
from tests.helpers_ops import upload
from tests.helpers_pki import pki, pyhanko_statuses, reportlab_pdf  # noqa: F401 - fixture
from tests.helpers_tsa import LocalTsa


def packet(case_id: str, contract: dict, evidence: dict | None = None) -> dict:
    items = [{"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
              **contract}]
    if evidence is not None:
        items.append({"role": "evidence", "name": "note.txt", "media_type": "text/plain",
                      **evidence})
    return {"kind": "sign_case", "case_id": case_id, "signers": SIGNERS, "items": items}


def remote(data: bytes, path: str) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "object_ref": f"remote:{path}"}


def metric(d, name: str, **labels: str) -> float:
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in d.request("GET", "/metrics", auth=False).body.decode().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


def event_codes(d, job_id: str, type_: str = "retry_scheduled") -> list[str]:
    return [e["detail"].get("code") for e in d.events(job_id) if e["type"] == type_]


def wait_until(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def wait_alive(d, timeout_s: float = 30.0) -> None:
    """Up and answering, whatever readiness says (a fault may make it not ready)."""
    def up() -> bool:
        assert d.proc.poll() is None, d.logs()[-3000:]
        with contextlib.suppress(OSError):
            return d.request("GET", "/healthz", auth=False).status == 200
        return False
    wait_until(up, timeout_s, "daemon did not come up")


def assert_invariants(d, job_ids: list[str], tmp: Path, **kw) -> None:
    assert wait_all_terminal(d, 60) == 0
    tally = Tally(acked={f"k{i}": j for i, j in enumerate(job_ids)})
    report = check_invariants(d, tally, tmp / "check", pdfsig_sample=1, cli_sample=0, **kw)
    assert report.ok(), report.problems


# --- the HTTP source ------------------------------------------------------------------------


def test_a_source_that_times_out_and_answers_5xx_in_bursts_is_retried_then_read(
        daemon_factory, tmp_path):
    data = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    with ThreadedSource() as source:
        # One attempt reads at most three times: the first attempt meets three 5xx
        # and gives up retryably; the next meets a stall (read timeout), then the bytes.
        source.script("/c.pdf", [Status(503), Status(502), Status(500), Hang(5), Body(data)])
        d = daemon_factory({"sources": [{"name": "remote", "kind": "http",
                                         "base_url": source.base_url, "read_timeout_s": 0.5,
                                         "max_attempts": 3, "base_delay_s": 0.05,
                                         "max_delay_s": 0.1}]})
        r = d.submit(packet("SRC-1", remote(data, "c.pdf")))
        assert r.status == 202, r.body
        job = d.wait_job(r.json()["job_id"], timeout_s=60)
        assert job["state"] == "ready", job
        assert source.hits("/c.pdf") == 5
        assert metric(d, "casesignd_source_retries_total", reason="http_5xx") == 2
        assert metric(d, "casesignd_source_retries_total", reason="timeout") == 1
        retries = [e["detail"] for e in d.events(job["job_id"]) if e["type"] == "retry_scheduled"]
        assert [(x["code"], x.get("reason")) for x in retries] == [("source_unavailable", "http_5xx")]
        assert job["attempts"] == 2
        assert_invariants(d, [job["job_id"]], tmp_path)


# --- the TSA --------------------------------------------------------------------------------


def test_a_tsa_that_is_down_delays_the_signature_and_never_drops_the_timestamp(
        daemon_factory, tmp_path, pki):  # noqa: F811 - the fixture
    with LocalTsa(pki.tsa) as tsa:
        tsa.mode = "503"
        d = daemon_factory({"policies": [{"version": "contract-v1", "tsa_url": tsa.url,
                                          "tsa_timeout_s": 2.0}],
                            "retry": {"base_delay_s": 0.3, "max_delay_s": 1.0}})
        contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
        job_id = d.submit(packet("TSA-1", upload(d, "TSA-1", contract))).json()["job_id"]
        wait_until(lambda: len(event_codes(d, job_id)) >= 2, 30, "no retries")
        assert set(event_codes(d, job_id)) == {"tsa_unavailable"}
        # Nothing was published or recorded without the timestamp.
        assert d.job(job_id)["state"] in ("queued", "processing")
        assert "signed" not in [e["type"] for e in d.events(job_id)]
        assert db_scalar(d.db, "SELECT count(*) FROM signatures") == 0
        assert not [f for f in (d.dir / "artifacts").rglob("art_*") if f.is_file()]
        tsa.mode = "ok"
        job = d.wait_job(job_id, timeout_s=60)
        assert job["state"] == "ready", job
        signed = [e["detail"] for e in d.events(job_id) if e["type"] == "signed"]
        assert len(signed) == 1 and signed[0]["timestamped"] is True
        out = tmp_path / "signed.pdf"
        out.write_bytes(d.request("GET", job["result"]["download_url"], auth=False).body)
        ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
        (status,) = pyhanko_statuses(out, [ca, pki.ca.cert])
        assert status.intact and status.valid and status.trusted
        ts = status.timestamp_validity
        assert ts is not None and ts.intact and ts.valid and ts.trusted  # PAdES B-T
        assert_invariants(d, [job_id], tmp_path, trust_extra=[pki.ca.cert])


def test_a_kiosk_signature_under_a_tsa_policy_is_timestamped(daemon_factory, tmp_path, pki):  # noqa: F811
    from tests.integration.test_kiosk_http import sign

    with LocalTsa(pki.tsa) as tsa:
        d = daemon_factory({"policies": [{"version": "contract-v1", "tsa_url": tsa.url,
                                          "tsa_timeout_s": 2.0}]})
        r = sign(d, reportlab_pdf(tmp_path / "c.pdf").read_bytes(), case_id="TSA-K1")
        assert r.status == 200, r.body[:300]
        signed = [e["detail"] for e in d.events(r.headers["X-Job-Id"]) if e["type"] == "signed"]
        assert len(signed) == 1 and signed[0]["timestamped"] is True
        out = tmp_path / "signed.pdf"
        out.write_bytes(r.body)
        ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
        (status,) = pyhanko_statuses(out, [ca, pki.ca.cert])
        assert status.intact and status.valid and status.trusted
        ts = status.timestamp_validity
        assert ts is not None and ts.intact and ts.valid and ts.trusted


# --- the malware scanner --------------------------------------------------------------------


@pytest.mark.skipif(not Path(CLAMD).exists(), reason=f"{CLAMD} is not installed")
def test_clamd_down_is_retried_as_scanner_unavailable_then_the_job_succeeds(daemon_factory, tmp_path):
    # A unix socket path must fit in 108 bytes: stay directly under /tmp.
    work = Path(tempfile.mkdtemp(prefix="clamd-"))
    clamd = None
    try:
        d = daemon_factory({"scanner": {"kind": "clamd", "socket": str(work / "clamd.sock"),
                                        "timeout_s": 5.0},
                            "retry": {"base_delay_s": 0.5, "max_delay_s": 2.0},
                            "workers": {"shutdown_grace_s": 5.0}}, start=False)
        d.start(wait=False)
        wait_alive(d)
        ready = d.request("GET", "/readyz", auth=False)
        assert ready.status == 503 and ready.json()["checks"]["scanner"]["ok"] is False
        contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
        job_id = d.submit(packet("AV-1", upload(d, "AV-1", contract))).json()["job_id"]
        wait_until(lambda: len(event_codes(d, job_id)) >= 1, 30, "no retry")
        assert set(event_codes(d, job_id)) == {"scanner_unavailable"}
        assert "signed" not in [e["type"] for e in d.events(job_id)]
        clamd = start_clamd(work)
        job = d.wait_job(job_id, timeout_s=90)
        assert job["state"] == "ready", job
        # The scanner's readiness is probed on its own schedule: it turns within seconds.
        wait_until(lambda: d.request("GET", "/readyz", auth=False).status == 200, 30,
                   "readyz stayed 503 with clamd up")
        assert_invariants(d, [job_id], tmp_path)
    finally:
        if clamd is not None:
            clamd.stop()
        shutil.rmtree(work, ignore_errors=True)


# --- the temp volume ------------------------------------------------------------------------


def test_a_full_temp_volume_makes_jobs_wait_and_a_job_larger_than_it_fails(daemon_factory, tmp_path):
    mib = 1024 * 1024
    big = reportlab_pdf(tmp_path / "a.pdf", pages=400, text="x" * 60).read_bytes()
    assert 150_000 < len(big) < 500_000  # two reservations (2 x size + 1 MiB) exceed 2 MiB
    with ThreadedSource() as source:
        source.script("/a.pdf", [Trickle(big, chunk_bytes=len(big) // 20, delay_s=0.1)])
        d = daemon_factory({"storage": {"temp_quota_bytes": 2 * mib, "temp_quota_retry_s": 0.3},
                            "sources": [{"name": "remote", "kind": "http",
                                         "base_url": source.base_url}],
                            # Two attempts: waits for temp space must not use them up.
                            "retry": {"base_delay_s": 0.3, "max_delay_s": 1.0,
                                      "max_attempts": {"sign_case": 2}}})
        slow = d.submit(packet("TQ-1", remote(big, "a.pdf"))).json()["job_id"]
        wait_until(lambda: source.inflight > 0, 20, "the slow download did not start")
        local = reportlab_pdf(tmp_path / "b.pdf", pages=400, text="y" * 60).read_bytes()
        # With evidence, so that it is fetched into a temp area (a lone contract that
        # is stored already is signed in memory, without one).
        note = b"checked at the counter\n"
        waiting = d.submit(packet("TQ-2", upload(d, "TQ-2", local),
                                  upload(d, "TQ-2", note))).json()["job_id"]
        huge = b"%PDF-1.7\n" + b"0" * (2 * mib)
        too_big = d.submit(packet("TQ-3", upload(d, "TQ-3", huge))).json()["job_id"]
        failed = d.wait_job(too_big, timeout_s=30)
        assert failed["state"] == "failed" and failed["error"]["code"] == "limit_exceeded", failed
        assert failed["attempts"] == 1
        wait_until(lambda: "temp_quota" in event_codes(d, waiting), 20, "no temp_quota retry")
        for job_id in (slow, waiting):
            job = d.wait_job(job_id, timeout_s=60)
            assert job["state"] == "ready", job
        waits = [e for e in d.events(waiting) if e["type"] == "retry_scheduled"]
        assert waits and all(e["detail"].get("waiting") for e in waits)
        assert_invariants(d, [slow, waiting], tmp_path, expect_all_succeeded=False)


# --- the store's disk -----------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the store (needs root): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(path: Path) -> Path:
    """Write zeros into ``path`` until the file system is full."""
    filler = path / "filler"
    # Unbuffered: a buffered file would try to flush its last block again when it is
    # closed, and raise ENOSPC from the with statement itself.
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_store_disk_refuses_admissions_and_recovers_with_nothing_lost(
        daemon_factory, tmp_path):
    # Large enough that the WAL of a busy run (it may outgrow the 1,000-page
    # auto-checkpoint while a reader holds a snapshot) cannot fill it before fill().
    with small_tmpfs(tmp_path / "storefs", "32m") as fs:
        (fs / "filler").touch()
        d = daemon_factory({"store": {"path": str(fs / "casesignd.db")},
                            "workers": {"lease_s": 3.0, "heartbeat_s": 1.0}})
        before = []
        for i in range(5):
            r = d.submit({"kind": "test", "behavior": "succeed", "sleep_ms": 1500, "tag": f"b{i}"})
            assert r.status == 202, r.body
            before.append(r.json()["job_id"])
        filler = fill(fs)
        # Admissions now fail; the WAL may still have room for a few, which then count
        # as acknowledged like the others.
        refused = None
        for i in range(400):
            r = d.submit({"kind": "test", "behavior": "succeed", "tag": f"f{i}"})
            if r.status == 202:
                before.append(r.json()["job_id"])
                continue
            refused = r
            break
        assert refused is not None and refused.status == 503, refused and refused.body
        assert refused.json()["error"]["code"] == "store_unavailable"
        ready = d.request("GET", "/readyz", auth=False)
        assert ready.status == 503 and ready.json()["checks"]["store"]["ok"] is False
        time.sleep(2.0)  # the workers meet the full disk too
        assert d.proc.poll() is None, d.logs()[-3000:]
        assert d.request("GET", "/healthz", auth=False).status == 200
        filler.unlink()
        wait_until(lambda: d.request("GET", "/readyz", auth=False).status == 200, 30,
                   "the store did not recover")
        after = d.submit({"kind": "test", "behavior": "succeed", "tag": "after"})
        assert after.status == 202, after.body
        for job_id in [*before, after.json()["job_id"]]:
            assert d.wait_job(job_id, timeout_s=60)["state"] == "ready"
        assert wait_all_terminal(d, 30) == 0
        states = {r["state"] for r in db_rows(d.db, "SELECT state FROM jobs")}
        assert states == {"succeeded"}
        audit = d.cli("audit", "verify", "--config", str(d.config_path))
        assert audit.returncode == 0, audit.stdout + audit.stderr
        d.stop()
