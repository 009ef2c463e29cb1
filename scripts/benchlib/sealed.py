"""Stores sealed at rest (``[storage] encrypt``) in the sign benchmark: the settings
that turn it on with a fresh key, and a large packet through a real daemon (upload,
signing, download) with and without it, timed, with the daemon's peak memory."""

from __future__ import annotations

import hashlib
import http.client
import secrets
import time
from pathlib import Path
from typing import Any

from benchlib.e2e import own_cpu_s
from tests.daemon import Daemon
from tests.helpers_ops import SIGNERS

CHUNK = 1 << 20


def sealed_settings(workdir: Path) -> dict[str, Any]:
    """Config sections that seal a bench daemon's stores under a fresh key."""
    key = workdir / "bench-storage.key"
    if not key.exists():
        key.write_text(secrets.token_hex(32) + "\n")
        key.chmod(0o600)
    return {"storage": {"encrypt": True, "key_file": str(key), "key_id": "bench"}}


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _put(d: Daemon, path: str, body: Path) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=600)
    conn.putrequest("PUT", path)
    conn.putheader("Authorization", f"Bearer {d.token}")
    conn.putheader("Content-Type", "application/octet-stream")
    conn.putheader("Content-Length", str(body.stat().st_size))
    conn.endheaders()
    with open(body, "rb") as f:
        while chunk := f.read(CHUNK):
            conn.send(chunk)
    r = conn.getresponse()
    r.read()
    assert r.status in (200, 201), r.status


def _get(d: Daemon, path: str) -> tuple[str, int]:
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=600)
    conn.request("GET", path, headers={"Authorization": f"Bearer {d.token}"})
    r = conn.getresponse()
    h, n = hashlib.sha256(), 0
    while chunk := r.read(CHUNK):
        h.update(chunk)
        n += len(chunk)
    assert r.status == 200, r.status
    return h.hexdigest(), n


def _sha256_timed(path: Path) -> tuple[str, float]:
    """The file's SHA-256 and the seconds it took (the yardstick of a large job)."""
    t = time.perf_counter()
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
    return h.hexdigest(), time.perf_counter() - t


def large_packet(workdir: Path, contract: bytes, evidence: Path,
                 settings: dict[str, Any] | None, jobs: int = 3) -> dict[str, Any]:
    """One packet (``contract`` and the large ``evidence`` file) through one daemon:
    the upload's seconds, then ``jobs`` jobs signing it (one for each of as many
    signers, so none is a replay of another), each timed from its submission until a
    client polling every 5 ms sees it ready and against hashing the evidence just
    before it, and the median of those; the download's seconds; and the daemon's main
    process peak RSS and CPU (the upload and download run there)."""
    d = Daemon(workdir, {**(settings or {}), "logging": {"level": "warning"},
                         "server": {"max_object_bytes": evidence.stat().st_size + CHUNK}},
               test_parts=False)
    d.start()
    try:
        assert d.proc is not None
        cpu0 = own_cpu_s(d.proc.pid)
        ev_sha, _ = _sha256_timed(evidence)
        t0 = time.perf_counter()
        _put(d, f"/v1/cases/BIG-1/objects/{ev_sha}", evidence)
        upload_s = time.perf_counter() - t0
        c_sha = hashlib.sha256(contract).hexdigest()
        r = d.request("PUT", f"/v1/cases/BIG-1/objects/{c_sha}", raw=contract,
                      headers={"Content-Type": "application/octet-stream"})
        assert r.status in (200, 201), r.body
        items = [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                  "object_ref": f"sha256:{c_sha}", "sha256": c_sha, "size": len(contract)},
                 {"role": "evidence", "name": "e.txt", "media_type": "text/plain",
                  "object_ref": f"sha256:{ev_sha}", "sha256": ev_sha,
                  "size": evidence.stat().st_size}]
        runs = []
        for i in range(jobs):
            # Hashed right before the job: on a shared machine the two see the same
            # load, so their ratio is fair where the seconds drift.
            _, hash_s = _sha256_timed(evidence)
            signers = [{**SIGNERS[0], "id": f"{SIGNERS[0]['id']}-{i}"}, *SIGNERS[1:]]
            t1 = time.perf_counter()
            job = d.wait_job(d.submit({"kind": "sign_case", "case_id": "BIG-1", "items": items,
                                       "signers": signers}).json()["job_id"],
                             timeout_s=900, poll_s=0.005)
            job_s = time.perf_counter() - t1
            assert job["state"] == "ready", job
            runs.append((hash_s / job_s, job_s, job["timings"]["processing_ms"] / 1000, job))
        ratio, job_s, processing_s, job = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        t2 = time.perf_counter()
        digest, size = _get(d, f"/v1/artifacts/{job['result']['artifact_id']}")
        download_s = time.perf_counter() - t2
        assert digest == job["result"]["sha256"]
        mb = evidence.stat().st_size / CHUNK
        return {"sealed": bool(settings), "mb": round(mb), "upload_s": round(upload_s, 2),
                "upload_mb_s": round(mb / upload_s, 1), "job_s": round(job_s, 2),
                "job_vs_hashing": round(ratio, 2),
                "jobs_vs_hashing": [round(r[0], 2) for r in runs],
                "processing_s": round(processing_s, 3),
                "download_s": round(download_s, 2), "download_mb_s": round(size / CHUNK / download_s, 1),
                "main_peak_rss_mb": round(_vm_hwm_mb(d.proc.pid), 1),
                "main_cpu_s": round(own_cpu_s(d.proc.pid) - cpu0, 2)}
    finally:
        d.stop()
