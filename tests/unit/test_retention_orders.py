"""Every retention area alone and in every order, with a held case and an erased one,
on SQLite and PostgreSQL: after each, store check passes (and a store copy of it
checks out); a backup restores (restore
itself runs store check and the chain's head against the manifest), the restored
chain verifies, and the restored jobs read right: a ready job whose artifact went says
removed_at and has no link, a held case keeps everything."""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from casesignd import config
from casesignd.core import audit
from casesignd.core.outcomes import Artifact, Fail, Finish, Signature
from casesignd.engine.retention import remove_files
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.objects import ObjectStore
from casesignd.http.api import job_resource
from casesignd.ops.backup import backup
from casesignd.ops.restore import restore
from casesignd.ops.store_copy import copy_store
from casesignd.store import SqliteStore
from casesignd.store.postgres import PostgresStore
from casesignd.store.records import AREAS
from casesignd.store.snapshot import open_snapshot
from tests.helpers_stores import SECRET, TENANT, new_job, write_config
from tests.unit.test_store_check import check

CASES = ("OPEN", "HELD", "ERASED")
ORDERS = [(area,) for area in AREAS] + list(itertools.permutations(AREAS))


def _param(kind: str, order: tuple[str, ...]):
    return pytest.param(kind, order, id=f"{kind}-{'-'.join(order)}")


async def _once(data: bytes):
    yield data


async def _run(store, case: str, key: str, obj: tuple[str, int], outcome=None) -> None:
    """A sign_case job of ``case`` naming the object ``obj``, ended with ``outcome``
    (None: left queued)."""
    sha, size = obj
    body = {"items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                       "object_ref": f"sha256:{sha}", "sha256": sha, "size": size}]}
    job, _ = await store.admit(new_job(f"{case}-{key}", kind="sign_case", body=body, case_id=case),
                               actor="api:t1", max_queue_depth=100)
    if outcome is not None:
        claimed = await store.claim_job(job.job_id, "w", 30)
        await store.conclude(claimed.lease, outcome)


async def _populate(store, state: Path) -> None:
    """Each case: an object used by a ready job (its artifact a file), a ready job kept
    in the store, a refused job and a dead letter naming objects; the open case a
    queued job too."""
    artifacts = ArtifactStore(state / "artifacts", SECRET)
    objects = ObjectStore(state / "objects")
    objects.sweep()
    for case in CASES:
        shas = []
        for n in range(4):
            doc = f"%PDF-1.7 {case} document {n}\n".encode() * 20
            sha = hashlib.sha256(doc).hexdigest()
            await objects.put(TENANT, case, sha, _once(doc), 1 << 20, len(doc))
            await store.put_object(TENANT, case, sha, len(doc))
            shas.append((sha, len(doc)))

        def run(key: str, i: int, outcome=None, case: str = case, shas: list = shas):
            return _run(store, case, key, shas[i], outcome)

        aid = artifacts.artifact_id(TENANT, f"{case}-file")
        on_disk, _ = artifacts.publish_bytes([f"%PDF-1.7 {case} signed\n".encode() * 40], aid,
                                             "application/pdf")
        await run("file", 0, Finish(on_disk, {}, Signature(f"{case}-file", on_disk)))
        data = f"%PDF-1.7 {case} kept in the store\n".encode() * 10
        inline = Artifact(artifacts.artifact_id(TENANT, f"{case}-inline"),
                          hashlib.sha256(data).hexdigest(), len(data))
        await run("inline", 1, Finish(inline, {}, Signature(f"{case}-inline", inline, inline=data)))
        await run("refused", 2, Fail("permanent_input", "malformed_pdf"))
        await run("dead", 3, Fail("retries_exhausted", "source_unavailable"))
        if case == "OPEN":
            await run("queued", 3)
    await store.set_hold(TENANT, "HELD", "api:t1", placed=True)


@pytest.mark.parametrize(("kind", "order"), [_param(k, o) for k in ("sqlite", "postgres")
                                             for o in ORDERS])
async def test_every_order_leaves_a_store_that_checks_backs_up_and_restores(
        request, tmp_path, kind, order):
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    (etc / "link.secret").write_bytes(SECRET)
    os.chmod(etc / "link.secret", 0o600)
    if kind == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        cfg = write_config(etc / "config.toml", state, dsn=dsn)
        store = PostgresStore(dsn)
    else:
        cfg = write_config(etc / "config.toml", state, db=tmp_path / "store.db")
        store = SqliteStore(tmp_path / "store.db")
    await store.open()
    objects, artifacts = ObjectStore(state / "objects"), ArtifactStore(state / "artifacts", SECRET)
    try:
        await _populate(store, state)
        erased = await store.erase_case(TENANT, "ERASED", "api:t1")
        remove_files(objects, artifacts, erased.removed)
        await store.scrub()
        future = time.time() + 3600  # everything is past its time
        for area in order:
            removed = await store.expire(area, future, 1000)
            remove_files(objects, artifacts, removed)
            if any(r.inline for r in removed):
                await store.scrub()
    finally:
        await store.close()

    report = check(cfg)
    assert report.ok, report.lines()
    if kind == "sqlite" and (len(order) == 1 or order == AREAS):
        # store copy takes such a store as it is, and its copy checks out too.
        moved = write_config(etc / "moved.toml", tmp_path / "moved",
                             dsn=request.getfixturevalue("postgres_dsn"))
        copy_store(cfg, moved)
        assert check(moved).ok, check(moved).lines()

    made = backup(cfg, etc / "config.toml", tmp_path / "bk")
    if kind == "postgres":
        with request.getfixturevalue("postgres_cluster").fresh_database() as target:
            _restored(made, tmp_path, order, dsn=target)
    else:
        _restored(made, tmp_path, order)


def _restored(made, tmp_path: Path, order: tuple[str, ...], dsn: str | None = None) -> None:
    done = restore(tmp_path / "bk", tmp_path / "new", dsn=dsn)
    assert done.ok, done.check_lines
    assert done.manifest["chain_head"] == made.manifest["chain_head"]
    cfg = config.load(tmp_path / "new" / "config.toml")
    if dsn is not None:
        assert audit.verify_postgres(dsn).ok
    else:
        assert audit.verify_file(tmp_path / "new" / "casesignd.db").ok
    snap = open_snapshot(cfg)
    try:
        artifacts = {r["artifact_id"] for r in snap.stream("artifact_records")}
    finally:
        snap.close()
    services = SimpleNamespace(link=lambda aid, tenant: (f"/v1/artifacts/{aid}?sig=x", 0))
    ready = 0
    for job in _jobs(cfg, dsn):
        out = job_resource(services, job)  # type: ignore[arg-type]
        if out["state"] != "ready":
            continue
        ready += 1
        result = out["result"]
        if job.case_id == "HELD":
            assert "download_url" in result, out
        gone = result["artifact_id"] not in artifacts
        assert gone == ("removed_at" in result) == ("download_url" not in result), (order, out)
        assert result["sha256"] and result["size"] > 0
    # Ready rows stay unless job rows expire; the held case's always do.
    assert ready == (2 if "jobs" in order else 6)


def _jobs(cfg, dsn: str | None) -> list:
    """Every job of the restored store, as the store reads them."""
    from casesignd.store.records import Job, row_job

    fields = ", ".join(Job.__struct_fields__)
    if dsn is not None:
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            return [row_job(r) for r in conn.execute(f"SELECT {fields} FROM jobs")]
    import sqlite3

    conn = sqlite3.connect(cfg.path(cfg.store.path))
    conn.row_factory = sqlite3.Row
    try:
        return [row_job(dict(r)) for r in conn.execute(f"SELECT {fields} FROM jobs")]
    finally:
        conn.close()
