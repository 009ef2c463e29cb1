"""A store with one of everything, made through the store's own verbs and the file
stores the daemon uses: a succeeded job whose artifact is a file, a signed one whose
artifact is kept in the store, a queued sign_case job naming an uploaded object, a
failed job and one waiting for a retry. For store check and store copy."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from casesignd.config import Config, load
from casesignd.core import audit
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, Fail, Finish, RetryLater, Signature
from casesignd.engine import jobs
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.objects import ObjectStore
from casesignd.store import NewJob, Store

SECRET = b"k" * 32
TENANT = "t1"
CASE = "CASE-1"


@dataclass
class Filled:
    file_artifact: Artifact
    inline_artifact: Artifact
    object_sha256: str
    object_path: Path
    queued_job: str


def new_job(key: str, *, kind: str = "test", body: dict | None = None,
            case_id: str | None = CASE) -> NewJob:
    body = body or {"key": key}
    raw = audit.canonical(body)
    return NewJob(tenant=TENANT, kind=kind, case_id=case_id, idem_key="key:" + key,
                  fingerprint=jobs.fingerprint(kind, body), input=raw.decode(),
                  input_digest=sha256_hex(raw), version="v1", declared_bytes=0,
                  created_at=time.time(), correlation_id="corr", sig_key=None)


async def _once(data: bytes):
    yield data


async def fill(store: Store, state_dir: Path) -> Filled:
    """Fill ``store`` and ``state_dir`` with one of everything."""
    artifacts = ArtifactStore(state_dir / "artifacts", SECRET)
    objects = ObjectStore(state_dir / "objects")
    objects.sweep()

    async def run(key: str) -> object:
        await store.admit(new_job(key), actor="api:t1", max_queue_depth=100)
        claimed = await store.claim("w1", 30, 1 << 30, ["test"])
        assert claimed is not None
        return claimed

    # A result written as a file, and its signature.
    claimed = await run("file")
    aid = artifacts.artifact_id(TENANT, "sig-file")
    on_disk, _ = artifacts.publish_bytes([b"%PDF-1.7 a file artifact\n" * 50], aid, "application/pdf")
    await store.conclude(claimed.lease, Finish(on_disk, {"n": 1}, Signature("sig-file", on_disk)))
    # A result kept in the store.
    claimed = await run("inline")
    data = b"%PDF-1.7 an inline artifact\n" * 20
    inline = Artifact(artifacts.artifact_id(TENANT, "sig-inline"), hashlib.sha256(data).hexdigest(),
                      len(data))
    await store.conclude(claimed.lease, Finish(inline, {"n": 2},
                                               Signature("sig-inline", inline, inline=data)))
    # A failed job and one waiting for its retry.
    await store.conclude((await run("failed")).lease, Fail("permanent_input", "test_permanent"))
    await store.conclude((await run("retry")).lease, RetryLater("test_transient", 3600.0))
    # A queued sign_case job naming an uploaded object.
    doc = b"%PDF-1.7 the contract\n" * 10
    sha = hashlib.sha256(doc).hexdigest()
    await objects.put(TENANT, CASE, sha, _once(doc), 1 << 20, len(doc))
    body = {"items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                       "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(doc)}]}
    queued, _ = await store.admit(new_job("case", kind="sign_case", body=body),
                                  actor="api:t1", max_queue_depth=100)
    path = objects.path(TENANT, CASE, sha)
    assert path is not None
    return Filled(on_disk, inline, sha, path, queued.job_id)


def write_config(path: Path, state_dir: Path, *, db: Path | None = None,
                 dsn: str | None = None) -> Config:
    """A config file at ``path`` for a SQLite store at ``db`` or a PostgreSQL one at
    ``dsn``, with its files under ``state_dir``; loaded."""
    store = f'kind = "sqlite"\npath = "{db}"' if db is not None else \
        f'kind = "postgres"\ndsn = "{dsn}"'
    path.write_text(f'[store]\n{store}\n[storage]\nstate_dir = "{state_dir}"\n')
    return load(path)
