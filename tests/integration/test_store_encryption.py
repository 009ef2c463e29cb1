"""[storage] encrypt: objects and artifacts sealed at rest under data keys of their own,
wrapped by the configured key; what a client sees is unchanged (uploads, HEAD, jobs,
downloads whole and in ranges, links, the kiosk), and no file of the store or of
state_dir holds the plain bytes, even after kill -9 mid-way."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from casesignd.core.sealed import MAGIC
from tests.daemon import Daemon, encrypted_stores, merge, to_toml
from tests.helpers_ops import case_manifest, crash, kiosk_sign
from tests.helpers_pki import reportlab_pdf

MARKER = "SEALSTORE-MARKER-" + "7f3a9c"


def marked_contract(directory: Path, pages: int = 3) -> bytes:
    return reportlab_pdf(directory / "marked.pdf", pages=pages, text=MARKER).read_bytes()


def windows(data: bytes, n: int = 64) -> list[bytes]:
    """Runs of ``n`` bytes of ``data``, a few per 4 KiB, to look for in files: those
    that say something of it (not a run of padding, such as a signature's reserved
    hex zeros, which any file may hold)."""
    step = max(1, min(4096, len(data) // 16))
    runs = (data[i:i + n] for i in range(0, max(1, len(data) - n), step))
    return [w for w in runs if len(w) == n and len(set(w)) >= 16]


def files_under(*roots: Path) -> list[Path]:
    out = []
    for root in roots:
        for d, _dirs, names in os.walk(root):
            out += [Path(d) / n for n in names]
    return out


def holding(paths: list[Path], needles: list[bytes]) -> list[str]:
    """Which files hold any of ``needles``."""
    found = []
    for p in paths:
        try:
            data = p.read_bytes()
        except (FileNotFoundError, PermissionError):
            continue
        found += [f"{p}: {n[:24]!r}" for n in needles if n in data][:1]
    return found


def store_files(d: Daemon) -> list[Path]:
    """The state directory and the SQLite store's files, without the config, keys and
    logs the tests themselves write there (which hold no document)."""
    skip = {"config.toml", "client.env", "storage.key", "storage-2.key"}
    return [p for p in files_under(d.dir) if p.name not in skip and not p.name.endswith(".log")
            and "tmp" not in p.relative_to(d.dir).parts[:1]]


def sealed_daemon(daemon_factory, overrides=None, start=True, **kw) -> Daemon:
    """A daemon whose stores are sealed at rest, whatever the environment says."""
    d = daemon_factory(overrides, start=False, **kw)
    d.config = merge(d.config, encrypted_stores(d.dir, force=True))
    d.config_path.write_text(to_toml(d.config))
    return d.start() if start else d


def test_objects_and_artifacts_are_sealed_and_read_back(daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    contract = marked_contract(tmp_path)
    evidence = (MARKER * 2000).encode()
    r = d.submit(case_manifest(d, "ENC-1", contract, [("note.txt", "text/plain", evidence)]))
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    url = job["result"]["download_url"]
    whole = d.request("GET", url, auth=False)
    assert whole.status == 200 and hashlib.sha256(whole.body).hexdigest() == job["result"]["sha256"]
    part = d.request("GET", url, auth=False, headers={"Range": "bytes=100-4195"})
    assert part.status == 206 and part.body == whole.body[100:4196]
    sha = hashlib.sha256(contract).hexdigest()
    head = d.request("HEAD", f"/v1/cases/ENC-1/objects/{sha}")
    assert head.status == 200 and int(head.headers["Content-Length"]) == len(contract)
    # A lone contract: signed in memory, its result kept in the store, sealed there.
    r2 = d.submit(case_manifest(d, "ENC-2", contract))
    job2 = d.wait_job(r2.json()["job_id"])
    assert job2["state"] == "ready", job2
    got = d.request("GET", job2["result"]["download_url"], auth=False)
    assert hashlib.sha256(got.body).hexdigest() == job2["result"]["sha256"]
    k = kiosk_sign(d, "ENC-3", contract)
    assert k.status == 200 and k.body.startswith(b"%PDF")
    assert d.stop() == 0
    needles = [MARKER.encode(), *windows(contract), *windows(whole.body), *windows(got.body)]
    assert holding(store_files(d), needles) == []
    blobs = files_under(d.dir / "objects" / "blobs") + files_under(d.dir / "artifacts")
    assert blobs and all(p.read_bytes().startswith(MAGIC) for p in blobs)


def _sign_two(d: Daemon, tmp_path: Path, case: str) -> tuple[dict, dict, bytes]:
    """A packet (its result a file) and a lone contract (its result kept in the store)."""
    contract = marked_contract(tmp_path)
    big = d.submit(case_manifest(d, case, contract, [("note.txt", "text/plain",
                                                      (MARKER * 4000).encode())]))
    small = d.submit(case_manifest(d, case + "-S", contract))
    return (d.wait_job(big.json()["job_id"]), d.wait_job(small.json()["job_id"]), contract)


def _download(d: Daemon, job: dict) -> bytes:
    r = d.request("GET", f"/v1/artifacts/{job['result']['artifact_id']}")
    assert r.status == 200, r.body
    assert hashlib.sha256(r.body).hexdigest() == job["result"]["sha256"]
    return r.body


def _key_ids(d: Daemon) -> dict[str, int]:
    with sqlite3.connect(d.db) as conn:
        rows = conn.execute("SELECT key_id, count(*) FROM data_keys GROUP BY key_id UNION ALL "
                            "SELECT key_id, count(*) FROM artifact_data WHERE key_id IS NOT NULL "
                            "GROUP BY key_id").fetchall()
    out: dict[str, int] = {}
    for k, n in rows:
        out[k] = out.get(k, 0) + n
    return out


def test_rotation_rekeys_without_rewriting_and_the_old_key_can_go(daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    big, small, _ = _sign_two(d, tmp_path, "ROT-1")
    assert big["state"] == small["state"] == "ready"
    blobs = {p: p.read_bytes() for p in files_under(d.dir / "objects" / "blobs", d.dir / "artifacts")}
    assert d.stop() == 0
    assert set(_key_ids(d)) == {"test-1"}
    # A new current key, the old one kept for reading until the rekey.
    (d.dir / "storage-2.key").write_text(secrets.token_hex(32) + "\n")
    d.config["storage"].update({"key_file": "storage-2.key", "key_id": "test-2",
                                "old_keys": [{"id": "test-1", "file": "storage.key"}]})
    d.config_path.write_text(to_toml(d.config))
    done = d.cli("store", "rekey", "--config", str(d.config_path))
    assert done.returncode == 0, done.stderr
    assert "nothing is left under an old key" in done.stdout, done.stdout
    assert set(_key_ids(d)) == {"test-2"}
    again = d.cli("store", "rekey", "--config", str(d.config_path))
    assert "rewrapped under test-2: 0" in again.stdout, again.stdout
    # The data was never rewritten: only the wraps changed.
    assert {p: p.read_bytes() for p in blobs} == blobs
    d.config["storage"].pop("old_keys")
    d.config_path.write_text(to_toml(d.config))
    d.start()
    _download(d, big)
    _download(d, small)
    newer, _, _ = _sign_two(d, tmp_path, "ROT-2")
    assert newer["state"] == "ready"
    _download(d, newer)
    assert set(_key_ids(d)) == {"test-2"}
    assert d.stop() == 0
    checked = d.cli("store", "check", "--config", str(d.config_path))
    assert checked.returncode == 0, checked.stdout


def test_a_key_the_store_needs_missing_from_the_config_is_refused_at_start(daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    job, _, _ = _sign_two(d, tmp_path, "MISS-1")
    assert job["state"] == "ready"
    assert d.stop() == 0
    (d.dir / "storage-2.key").write_text(secrets.token_hex(32) + "\n")
    d.config["storage"].update({"key_file": "storage-2.key", "key_id": "test-2"})
    d.config_path.write_text(to_toml(d.config))
    with pytest.raises(RuntimeError, match="test-1"):
        d.start()
    checked = d.cli("store", "check", "--config", str(d.config_path))
    assert checked.returncode == 1 and "storage_key_missing" in checked.stdout


def test_erasure_destroys_the_data_keys_in_the_store_files(daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    big, small, _ = _sign_two(d, tmp_path, "ERASE-1")
    assert big["state"] == small["state"] == "ready"
    with sqlite3.connect(d.db) as conn:
        wraps = [bytes(w) for (w,) in conn.execute(
            "SELECT wrapped FROM data_keys UNION ALL "
            "SELECT wrapped_key FROM artifact_data WHERE key_id IS NOT NULL")]
    assert len(wraps) >= 4  # the contract's, the evidence's, two artifacts'
    for case in ("ERASE-1", "ERASE-1-S"):
        r = d.request("DELETE", f"/v1/cases/{case}")
        assert r.status == 200, r.body
    # The daemon still runs: its WAL was truncated after the erasure.
    paths = [d.db, Path(f"{d.db}-wal"), *store_files(d)]
    assert holding(paths, wraps) == []
    assert d.stop() == 0
    assert holding([d.db, Path(f"{d.db}-wal"), *store_files(d)], wraps) == []


def test_tampering_is_a_store_check_problem_and_never_served(daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    big, small, contract = _sign_two(d, tmp_path, "TAMPER-1")
    assert d.stop() == 0
    art = files_under(d.dir / "artifacts")[0]
    data = bytearray(art.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit mid-file
    art.write_bytes(bytes(data))
    with sqlite3.connect(d.db) as conn:  # an inline artifact's tail cut
        conn.execute("UPDATE artifact_data SET data = substr(data, 1, length(data) - 40)")
    checked = d.cli("store", "check", "--config", str(d.config_path), "--json")
    assert checked.returncode == 1
    kinds = [p["kind"] for p in json.loads(checked.stdout)["problems"]]
    assert kinds.count("sealed_unreadable") == 2, checked.stdout
    # A chunk of the contract's blob swapped for one of another sealed file.
    sha = hashlib.sha256(contract).hexdigest()
    blob = d.dir / "objects" / "blobs" / sha[:2] / sha
    other = next(p for p in files_under(d.dir / "objects" / "blobs") if p.name != sha)
    raw, alien = bytearray(blob.read_bytes()), other.read_bytes()
    raw[28:28 + 64] = alien[28:28 + 64]
    blob.write_bytes(bytes(raw))
    d.start()
    for job in (big, small):
        r = d.request("GET", f"/v1/artifacts/{job['result']['artifact_id']}")
        assert r.status == 503 and r.json()["error"]["code"] == "io_error", r.body
    # The job that reads it is never signed: its attempts end in the retryable io_error.
    head = d.request("HEAD", f"/v1/cases/TAMPER-1-S/objects/{sha}")
    assert head.status == 200 and int(head.headers["Content-Length"]) == len(contract)
    item = {"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
            "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(contract)}
    signers = [{"id": "other-1", "name": "Other Ltd", "role": "buyer"}]
    r = d.submit({"kind": "sign_case", "case_id": "TAMPER-1-S", "items": [item],
                  "signers": signers})
    assert r.status == 202, r.body
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + 30
    codes: list[str] = []
    while time.monotonic() < deadline and "io_error" not in codes:
        codes = [e["detail"].get("code", "") for e in d.events(job_id)
                 if e["type"] in ("retry_scheduled", "failed")]
        time.sleep(0.2)
    assert "io_error" in codes, d.events(job_id)
    assert not any(e["type"] == "signed" for e in d.events(job_id))


def _stalled_upload(d: Daemon, case_id: str, data: bytes, sent: int) -> socket.socket:
    """A PUT of ``data`` that sends its first ``sent`` bytes and holds the rest."""
    sha = hashlib.sha256(data).hexdigest()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall((f"PUT /v1/cases/{case_id}/objects/{sha} HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {d.token}\r\nContent-Type: application/octet-stream\r\n"
               f"Content-Length: {len(data)}\r\n\r\n").encode() + data[:sent])
    return s


def _wait_for(pred, timeout_s: float = 20.0, every_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every_s)
    return False


def test_no_plain_byte_in_state_dir_or_store_after_kill_9_mid_upload_or_publish(
        daemon_factory, tmp_path):
    d = sealed_daemon(daemon_factory)
    contract = marked_contract(tmp_path, pages=5)
    evidence = (f"{MARKER} evidence line, the plain text of a case file\n" * 300_000).encode()
    needles = [MARKER.encode(), *windows(contract), *windows(evidence[:1 << 20])]
    # Mid-upload: half of the evidence streamed into objects/tmp, then kill -9.
    s = _stalled_upload(d, "MARK-1", evidence, len(evidence) // 2)
    parts = d.dir / "objects" / "tmp"
    assert _wait_for(lambda: any(p.stat().st_size > 1 << 20 for p in parts.glob("*.part")))
    crash(d)
    s.close()
    assert holding(store_files(d), needles) == []
    # Mid-publish: a packet whose signed result is large, kill -9 while it is written.
    d.start()
    manifest = case_manifest(d, "MARK-2", contract, [("evidence.txt", "text/plain", evidence)])
    job_id = d.submit(manifest).json()["job_id"]
    art = d.dir / "artifacts"
    _wait_for(lambda: art.is_dir() and any(p.name.endswith(".tmp") for p in art.glob("*/.*")),
              timeout_s=60, every_s=0.002)
    crash(d)
    assert holding(store_files(d), needles) == []
    # After the restart the job completes, and still nothing plain is at rest.
    d.start()
    job = d.wait_job(job_id)
    assert job["state"] == "ready", job
    signed = _download(d, job)
    # The restart swept the killed run's file in flight; the job's own was linked.
    assert [p.name for p in art.glob("*/.*") if p.name.endswith(".tmp")] == []
    assert d.stop() == 0
    assert holding(store_files(d), [*needles, *windows(signed[:1 << 20])]) == []


def test_sealed_stores_on_postgres_rekey_and_erase(daemon_factory, postgres_dsn, tmp_path):
    import psycopg

    d = sealed_daemon(daemon_factory, {"store": {"kind": "postgres", "dsn": postgres_dsn}})
    big, small, _ = _sign_two(d, tmp_path, "PGENC-1")
    assert big["state"] == small["state"] == "ready"
    _download(d, big)
    _download(d, small)
    with psycopg.connect(postgres_dsn) as conn:
        inline = conn.execute("SELECT key_id, substr(data, 1, 8) FROM artifact_data").fetchall()
        keys = conn.execute("SELECT count(*) FROM data_keys").fetchone()
    assert inline == [("test-1", MAGIC)] and keys is not None and keys[0] == 3
    # Rotation beside the running daemon, on PostgreSQL.
    (d.dir / "storage-2.key").write_text(secrets.token_hex(32) + "\n")
    d.config["storage"].update({"key_file": "storage-2.key", "key_id": "test-2",
                                "old_keys": [{"id": "test-1", "file": "storage.key"}]})
    d.config_path.write_text(to_toml(d.config))
    done = d.cli("store", "rekey", "--config", str(d.config_path))
    assert done.returncode == 0 and "rewrapped under test-2: 4" in done.stdout, done.stdout
    for case in ("PGENC-1", "PGENC-1-S"):
        assert d.request("DELETE", f"/v1/cases/{case}").status == 200
    with psycopg.connect(postgres_dsn) as conn:
        left = conn.execute("SELECT (SELECT count(*) FROM data_keys), "
                            "(SELECT count(*) FROM artifact_data)").fetchone()
    assert left == (0, 0)
    assert d.stop() == 0
    checked = d.cli("store", "check", "--config", str(d.config_path))
    assert checked.returncode == 0, checked.stdout


def test_a_key_kept_in_memory_gives_way_to_one_another_process_wrote(daemon_factory, tmp_path):
    """A daemon keeps the data keys it unwrapped; when another process replaces an
    object under a new key (another node's erasure, then a new upload of the digest),
    the attempt that meets the file under its old key fails as io_error, and its
    retry reads the key afresh and signs."""
    from casesignd.core.keyring import Keyring, read_key_file
    from casesignd.core.sealed import SealKey
    from casesignd.files.envelope import reseal

    d = sealed_daemon(daemon_factory)
    contract = marked_contract(tmp_path, pages=1)
    sha = hashlib.sha256(contract).hexdigest()
    first = d.wait_job(d.submit(case_manifest(d, "KEPT-1", contract)).json()["job_id"])
    assert first["state"] == "ready", first
    owner = f"object:{sha}"
    keyring = Keyring(True, "test-1", {"test-1": read_key_file(d.dir / "storage.key", "k")})
    with sqlite3.connect(d.db, timeout=30) as conn:
        (wrapped,) = conn.execute("SELECT wrapped FROM data_keys WHERE owner = ?", (owner,)).fetchone()
        old = SealKey.from_bytes(keyring.unwrap("test-1", bytes(wrapped), owner))
        new = SealKey.generate()
        for p in files_under(d.dir / "objects"):
            if p.name == sha:
                reseal(p, old, new)
        conn.execute("UPDATE data_keys SET wrapped = ? WHERE owner = ?",
                     (keyring.wrap(new.raw(), owner).wrapped, owner))
    item = {"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
            "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(contract)}
    r = d.submit({"kind": "sign_case", "case_id": "KEPT-1", "items": [item],
                  "signers": [{"id": "other-1", "name": "Other Ltd", "role": "buyer"}]})
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    retries = [e["detail"].get("code") for e in d.events(job["job_id"])
               if e["type"] == "retry_scheduled"]
    assert retries == ["io_error"], d.events(job["job_id"])
    got = d.request("GET", job["result"]["download_url"], auth=False)
    assert hashlib.sha256(got.body).hexdigest() == job["result"]["sha256"]
