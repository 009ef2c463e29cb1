"""store check against SQLite and PostgreSQL: a sound store checks out; a missing or
changed artifact file, changed bytes kept in the store, an orphan file, a missing or
changed object, a broken chain, a head that is not the last event and a counter that
drifted are each named, and the command exits 1 with them."""

from __future__ import annotations

import json
import sqlite3

import pytest

from casesignd.cli import commands as cli
from casesignd.core.outcomes import Fail
from casesignd.engine.retention import remove_files
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.objects import ObjectStore
from casesignd.ops.store_check import CheckReport, check_store
from casesignd.store import SqliteStore
from casesignd.store.postgres import PostgresStore
from casesignd.store.snapshot import open_snapshot
from tests.helpers_stores import CASE, SECRET, TENANT, fill, new_job, write_config


@pytest.fixture(params=["sqlite", "postgres"])
async def filled(request, tmp_path):
    state = tmp_path / "state"
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        store = PostgresStore(dsn)
        cfg = write_config(tmp_path / "config.toml", state, dsn=dsn)
    else:
        store = SqliteStore(tmp_path / "store.db")
        cfg = write_config(tmp_path / "config.toml", state, db=tmp_path / "store.db")
    await store.open()
    made = await fill(store, state)
    await store.close()
    return cfg, made, tmp_path


async def _open(cfg):
    if cfg.store.kind == "postgres":
        store = PostgresStore(cfg.store.dsn)
    else:
        store = SqliteStore(cfg.path(cfg.store.path))
    await store.open()
    return store


def check(cfg) -> CheckReport:
    snap = open_snapshot(cfg)
    try:
        return check_store(snap, cfg.path(cfg.storage.state_dir))
    finally:
        snap.close()


def execute(cfg, *statements: str) -> None:
    """Change the store behind its verbs' back, as a person with write access could."""
    if cfg.store.kind == "postgres":
        import psycopg

        with psycopg.connect(cfg.store.dsn, autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)
        return
    conn = sqlite3.connect(cfg.path(cfg.store.path), isolation_level=None)
    for sql in statements:
        conn.execute(sql)
    conn.close()


def kinds(report: CheckReport) -> list[str]:
    return sorted(p.kind for p in report.problems)


async def test_a_sound_store_checks_out(filled, capsys):
    cfg, made, tmp = filled
    report = check(cfg)
    assert report.ok, report.lines()
    assert report.counted == {"events": report.head_seq, "jobs": 5, "artifact_records": 2,
                              "inline_artifacts": 1, "artifact_files": 1, "objects": 1}
    assert report.head_seq > 10
    assert cli.main(["store", "check", "--config", str(tmp / "config.toml")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("all well")


async def test_a_missing_or_changed_artifact_file_and_an_orphan_are_named(filled, capsys):
    cfg, made, tmp = filled
    artifacts = cfg.path(cfg.storage.state_dir) / "artifacts"
    path = artifacts / made.file_artifact.artifact_id[4:6] / made.file_artifact.artifact_id
    path.write_bytes(path.read_bytes().replace(b"a file", b"A FILE"))  # same size, new bytes
    orphan = artifacts / "ab" / ("art_ab" + "0" * 30)
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"nobody's")
    (artifacts / "stray.txt").write_bytes(b"?")
    report = check(cfg)
    assert kinds(report) == ["artifact_file_changed", "orphan_file", "orphan_file"]
    assert cli.main(["store", "check", "--config", str(tmp / "config.toml"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["problems_total"] == 3
    changed = next(p for p in out["problems"] if p["kind"] == "artifact_file_changed")
    assert changed["artifact_id"] == made.file_artifact.artifact_id
    assert made.file_artifact.sha256 in changed["message"]

    path.unlink()
    report = check(cfg)
    assert kinds(report) == ["artifact_file_missing", "orphan_file", "orphan_file"]
    assert cli.main(["store", "check", "--config", str(tmp / "config.toml")]) == 1
    out = capsys.readouterr().out
    assert "3 problems:" in out and f"artifact_file_missing: {made.file_artifact.artifact_id}" in out


async def test_changed_bytes_kept_in_the_store_are_named(filled):
    cfg, made, _ = filled
    aid = made.inline_artifact.artifact_id
    zero = "x'00'" if cfg.store.kind == "sqlite" else "'\\x00'::bytea"
    execute(cfg, f"UPDATE artifact_data SET data = {zero} WHERE artifact_id = '{aid}'")
    report = check(cfg)
    assert kinds(report) == ["artifact_data_changed"]
    assert report.problems[0].about == {"artifact_id": aid}


async def test_a_missing_or_changed_object_of_a_queued_job_is_named(filled):
    cfg, made, _ = filled
    made.object_path.write_bytes(b"something else")  # every link of the blob changes
    report = check(cfg)
    assert kinds(report) == ["object_changed"]
    assert report.problems[0].about["job_id"] == made.queued_job
    made.object_path.unlink()
    assert kinds(check(cfg)) == ["object_missing"]


async def test_a_broken_chain_is_named_with_its_first_bad_event(filled):
    cfg, _, _ = filled
    if cfg.store.kind == "postgres":
        execute(cfg, "ALTER TABLE events DISABLE TRIGGER events_append_only",
                "UPDATE events SET actor = 'someone' WHERE seq = 3")
    else:
        execute(cfg, "DROP TRIGGER events_append_only_update",
                "UPDATE events SET actor = 'someone' WHERE seq = 3")
    report = check(cfg)
    assert kinds(report) == ["chain_broken"]
    assert report.problems[0].about["seq"] == 3
    assert "hash does not match" in report.problems[0].message


async def test_a_counter_that_drifted_is_named(filled):
    cfg, _, _ = filled
    execute(cfg, "UPDATE counters SET value = value + 1 WHERE name = 'state:succeeded'"
            if cfg.store.kind == "sqlite" else
            "UPDATE job_counts SET n = n + 1 WHERE state = 'succeeded'")
    report = check(cfg)
    assert kinds(report) == ["counter_mismatch"]
    assert report.problems[0].about == {"counter": "state:succeeded"}


async def test_a_postgres_head_that_is_not_the_last_event_is_named(filled):
    cfg, _, _ = filled
    if cfg.store.kind != "postgres":
        pytest.skip("only PostgreSQL keeps a head of its own")
    execute(cfg, "UPDATE audit_head SET seq = seq - 1")
    assert kinds(check(cfg)) == ["chain_head_mismatch"]


def test_a_missing_sqlite_store_is_said(tmp_path, capsys):
    write_config(tmp_path / "config.toml", tmp_path, db=tmp_path / "none.db")
    assert cli.main(["store", "check", "--config", str(tmp_path / "config.toml")]) == 1
    assert "error: no_store:" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


async def test_what_retention_or_an_erasure_removed_is_no_problem(filled):
    """The reported case: artifacts live shorter than the jobs that made them, and a
    failed job's objects go with its erased case; the job rows stay and check out."""
    cfg, made, _ = filled
    state = cfg.path(cfg.storage.state_dir)
    store = await _open(cfg)
    try:
        # A failed sign_case job that names an object of another case, which is erased.
        body = {"items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                           "object_ref": f"sha256:{made.object_sha256}",
                           "sha256": made.object_sha256, "size": made.object_path.stat().st_size}]}
        failed, _ = await store.admit(new_job("gone", kind="sign_case", body=body, case_id=CASE),
                                      actor="api:t1", max_queue_depth=100)
        await store.put_object(TENANT, CASE, made.object_sha256, made.object_path.stat().st_size)
        claimed = await store.claim_job(failed.job_id, "w", 10)
        await store.conclude(claimed.lease, Fail("permanent_input", "malformed_pdf"))
        removed = await store.expire("artifacts", 4e9, 100)
        assert {r.key for r in removed} == {made.file_artifact.artifact_id,
                                            made.inline_artifact.artifact_id}
        objects = ObjectStore(state / "objects")
        artifacts = ArtifactStore(state / "artifacts", SECRET)
        remove_files(objects, artifacts, removed)
        erased = await store.erase_case(TENANT, CASE, "api:t1")
        remove_files(objects, artifacts, erased.removed)
    finally:
        await store.close()
    assert not made.object_path.exists()
    report = check(cfg)
    assert report.ok, report.lines()
    assert "artifact_records" not in report.counted

    # Something nothing removed is still a problem: a job's artifact, gone behind the
    # store's back.
    execute(cfg, "UPDATE jobs SET result = replace(result, 'removed_at', 'was_removed_at')")
    assert kinds(check(cfg)) == ["result_artifact_missing", "result_artifact_missing"]
