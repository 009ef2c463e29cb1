"""[storage] encrypt: objects and artifacts sealed at rest under data keys of their own,
wrapped by the configured key; what a client sees is unchanged (uploads, HEAD, jobs,
downloads whole and in ranges, links, the kiosk), and no file of the store or of
state_dir holds the plain bytes, even after kill -9 mid-way."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from casesignd.core.sealed import MAGIC
from tests.daemon import Daemon, encrypted_stores, merge, to_toml
from tests.helpers_ops import case_manifest, kiosk_sign
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
