"""store copy from SQLite into PostgreSQL: every table and column, row for row; the
audit chain the same and its head set; the jobs per state counted; the files placed
and checked in another state_dir; the copied store serving its old jobs and chaining
new ones; and the refusals: a target with another chain, a running source, a broken
source chain, a file that is not what its record says, each leaving no rows behind."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from casesignd.core import audit
from casesignd.core.errors import CasesignError, DigestMismatch, StoreUnavailable
from casesignd.ops.store_check import check_store
from casesignd.ops.store_copy import DERIVED, TABLES, copy_store
from casesignd.store import SqliteStore
from casesignd.store.postgres import PostgresStore
from casesignd.store.snapshot import open_snapshot
from tests.helpers_stores import TENANT, fill, new_job, write_config


@pytest.fixture
async def source(tmp_path):
    """A filled SQLite store (closed: no daemon on it) and its config."""
    store = SqliteStore(tmp_path / "store.db")
    await store.open()
    made = await fill(store, tmp_path / "state")
    await store.close()
    return write_config(tmp_path / "src.toml", tmp_path / "state", db=tmp_path / "store.db"), made


@pytest.fixture
def target(tmp_path, postgres_dsn):
    """The config of an empty PostgreSQL store with its own state_dir."""
    return write_config(tmp_path / "dst.toml", tmp_path / "moved", dsn=postgres_dsn)


def sqlite_rows(cfg, table: str) -> list[dict]:
    conn = sqlite3.connect(cfg.path(cfg.store.path))
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {TABLES[table]}")]
    conn.close()
    return rows


def pg_rows(cfg, sql: str) -> list[dict]:
    with psycopg.connect(cfg.store.dsn, row_factory=dict_row) as conn:
        return [dict(r) for r in conn.execute(sql)]


def held(cfg) -> int:
    return pg_rows(cfg, "SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM events) "
                        "+ (SELECT count(*) FROM artifacts) AS n")[0]["n"]


def test_every_table_and_column_is_copied_or_kept_by_the_store_itself(source, target):
    src, _ = source
    conn = sqlite3.connect(src.path(src.store.path))
    sqlite_schema = {t: {c[1] for c in conn.execute(f"PRAGMA table_info({t})")}
                     for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    copy_store(src, target)
    pg_schema: dict[str, set[str]] = {}
    for r in pg_rows(target, "SELECT table_name, column_name FROM information_schema.columns "
                             "WHERE table_schema = current_schema()"):
        pg_schema.setdefault(r["table_name"], set()).add(r["column_name"])
    assert set(sqlite_schema) - DERIVED == set(pg_schema) - DERIVED == set(TABLES)
    for table in TABLES:
        assert sqlite_schema[table] == pg_schema[table], table


async def test_a_copy_holds_every_row_the_chain_and_the_files(source, target, tmp_path):
    src, made = source
    report = copy_store(src, target)
    assert not report.already and report.files is not None
    assert report.rows == {"jobs": 5, "events": report.head_seq, "signatures": 2,
                           "artifacts": 2, "artifact_data": 1, "holds": 0, "objects": 0, "pauses": 0,
                           "tenant_usage": 0, "webhook_deliveries": 0, "data_keys": 0}
    for table in TABLES:
        assert pg_rows(target, f"SELECT * FROM {table} ORDER BY {TABLES[table]}") == \
            sqlite_rows(src, table), table
    last = sqlite_rows(src, "events")[-1]
    assert pg_rows(target, "SELECT seq, hash FROM audit_head") == [
        {"seq": last["seq"], "hash": last["hash"]}]
    counts = {r["state"]: r["n"] for r in pg_rows(target, "SELECT state, n FROM job_counts")}
    assert counts == {"queued": 1, "running": 0, "retry_wait": 1, "succeeded": 2, "failed": 1,
                      "canceled": 0}
    # The files, in the new state_dir, the same bytes; nothing left in flight.
    moved = tmp_path / "moved"
    aid = made.file_artifact.artifact_id
    assert (moved / "artifacts" / aid[4:6] / aid).read_bytes() == \
        (tmp_path / "state" / "artifacts" / aid[4:6] / aid).read_bytes()
    case_link = moved / made.object_path.relative_to(tmp_path / "state")
    blob = moved / "objects" / "blobs" / made.object_sha256[:2] / made.object_sha256
    assert case_link.read_bytes() == made.object_path.read_bytes()
    assert case_link.stat().st_ino == blob.stat().st_ino
    assert list((moved / "objects" / "tmp").iterdir()) == []
    assert not [p for p in (moved / "artifacts").rglob(".*")]
    snap = open_snapshot(target)
    try:
        assert check_store(snap, moved).ok
    finally:
        snap.close()

    # The copied store serves the old jobs and chains new ones on.
    store = PostgresStore(target.store.dsn)
    await store.open()
    try:
        old, created = await store.admit(new_job("case", kind="sign_case", body={"items": [
            {"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
             "object_ref": f"sha256:{made.object_sha256}", "sha256": made.object_sha256,
             "size": made.object_path.stat().st_size}]}), actor="api:t1", max_queue_depth=100)
        assert not created and old.job_id == made.queued_job
        assert await store.artifact_data(made.inline_artifact.artifact_id) is not None
        assert (await store.get_artifact(aid))["sha256"] == made.file_artifact.sha256
        assert (await store.get_signature(TENANT, "sig-file"))["artifact_id"] == aid
        await store.admit(new_job("after"), actor="api:t1", max_queue_depth=100)
    finally:
        await store.close()
    verified = audit.verify_postgres(target.store.dsn)
    assert verified.ok and verified.checked == report.head_seq + 1

    # Run again on a target that has moved on: refused, nothing changed.
    before = held(target)
    with pytest.raises(CasesignError) as refused:
        copy_store(src, target)
    assert refused.value.code == "store_not_empty"
    assert "never joins two audit chains" in refused.value.message
    assert held(target) == before


def test_a_copy_run_again_finds_it_done(source, target):
    src, _ = source
    first = copy_store(src, target)
    again = copy_store(src, target)
    assert again.already and again.rows == {"jobs": 5, "events": first.head_seq}
    assert again.files is not None and again.files.artifacts == again.files.objects == 0
    assert again.files.artifacts_there == 1 and again.files.objects_there == 1
    assert held(target) == 5 + first.head_seq + 2


def test_one_state_dir_for_both_copies_no_files(source, tmp_path, postgres_dsn):
    src, _ = source
    dst = write_config(tmp_path / "same.toml", tmp_path / "state", dsn=postgres_dsn)
    report = copy_store(src, dst)
    assert report.files is None
    assert "nothing to copy" in report.lines()[1]
    assert not (tmp_path / "moved").exists()


async def test_a_running_source_is_refused(source, target):
    src, _ = source
    daemon = SqliteStore(src.path(src.store.path))
    await daemon.open()  # takes the lock, as a daemon does
    try:
        with pytest.raises(StoreUnavailable, match="daemon is running"):
            copy_store(src, target)
    finally:
        await daemon.close()
    assert not (Path(target.path(target.storage.state_dir))).exists()


def test_a_broken_source_chain_is_not_copied(source, target):
    src, _ = source
    conn = sqlite3.connect(src.path(src.store.path), isolation_level=None)
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET detail = '{}' WHERE seq = 4")
    conn.close()
    with pytest.raises(CasesignError) as refused:
        copy_store(src, target)
    assert refused.value.code == "audit_chain_broken"
    assert "seq=4" in refused.value.message
    assert held(target) == 0
    assert not (Path(target.path(target.storage.state_dir))).exists()


def test_an_artifact_file_unlike_its_record_is_not_copied(source, target, tmp_path):
    src, made = source
    aid = made.file_artifact.artifact_id
    path = tmp_path / "state" / "artifacts" / aid[4:6] / aid
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DigestMismatch, match=f"the record of {aid} says"):
        copy_store(src, target)
    assert held(target) == 0
    assert not (tmp_path / "moved" / "artifacts" / aid[4:6] / aid).exists()
