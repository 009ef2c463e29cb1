"""backup and restore on a SQLite store with one of everything (tests/helpers_stores.py),
its config elsewhere with absolute paths: the restored setup is self-contained and
checks out, its case links are links again; a file the snapshot names that goes away
starts the backup again on a fresh snapshot, and for good fails it leaving nothing; a
restore refuses a backup missing a file, and a STATE that is not empty."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from casesignd import config
from casesignd.core.errors import CasesignError
from casesignd.files.artifacts import artifact_path
from casesignd.files.objects import owner_dirs
from casesignd.ops import backup as backup_mod
from casesignd.ops.backup import backup
from casesignd.ops.restore import BackupInvalid, restore
from casesignd.store import SqliteStore
from tests.helpers_stores import CASE, SECRET, TENANT, fill, write_config


@pytest.fixture
async def setup(tmp_path):
    etc, state, db = tmp_path / "etc", tmp_path / "state", tmp_path / "store.db"
    etc.mkdir()
    (etc / "link.secret").write_bytes(SECRET)
    os.chmod(etc / "link.secret", 0o600)
    cfg = write_config(etc / "config.toml", state, db=db)
    store = SqliteStore(db)
    await store.open()
    made = await fill(store, state)
    await store.close()
    return cfg, etc / "config.toml", made


def test_a_backup_restores_into_a_self_contained_setup(setup, tmp_path):
    cfg, path, made = setup
    report = backup(cfg, path, tmp_path / "bk")
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert manifest == report.manifest and report.attempts == 1
    assert manifest["counted"] == {"artifact_files": 1, "objects": 1, "case_links": 1,
                                   "config_files": 2}
    assert len(manifest["links"]) == 1
    done = restore(tmp_path / "bk", tmp_path / "new")
    assert done.ok, done.check_lines
    new = config.load(tmp_path / "new" / "config.toml")
    assert (new.store.path, new.storage.state_dir, new.links.secret_file) == \
        ("casesignd.db", ".", "link.secret")
    assert os.stat(tmp_path / "new" / "link.secret").st_mode & 0o777 == 0o600
    t, c = owner_dirs(TENANT, CASE)
    sha = made.object_sha256
    assert os.path.samefile(tmp_path / "new" / "objects" / "cases" / t / c / sha,
                            tmp_path / "new" / "objects" / "blobs" / sha[:2] / sha)


def test_a_named_file_gone_for_good_fails_the_backup_and_leaves_nothing(setup, tmp_path):
    cfg, path, made = setup
    artifact_path(cfg.path(cfg.storage.state_dir) / "artifacts",
                  made.file_artifact.artifact_id).unlink()
    with pytest.raises(CasesignError) as e:
        backup(cfg, path, tmp_path / "bk")
    assert e.value.code == "file_vanished" and made.file_artifact.artifact_id in e.value.message
    assert list((tmp_path / "bk").iterdir()) == []


def test_a_file_removed_after_the_snapshot_starts_again_on_a_fresh_one(setup, tmp_path,
                                                                        monkeypatch):
    cfg, path, made = setup
    aid = made.file_artifact.artifact_id
    first = backup_mod._sqlite_copy
    calls: list[int] = []

    def then_retention(db: Path, out: Path) -> None:
        first(db, out)
        if not calls:  # retention removes the artifact between snapshot and files
            conn = sqlite3.connect(db, isolation_level=None)
            conn.execute("DELETE FROM artifacts WHERE artifact_id = ?", (aid,))
            conn.execute("DELETE FROM signatures WHERE artifact_id = ?", (aid,))
            conn.close()
            artifact_path(cfg.path(cfg.storage.state_dir) / "artifacts", aid).unlink()
        calls.append(1)

    monkeypatch.setattr(backup_mod, "_sqlite_copy", then_retention)
    said: list[str] = []
    report = backup(cfg, path, tmp_path / "bk", say=said.append)
    assert report.attempts == 2 and "went away after the snapshot" in said[0]
    assert not any(aid in f["path"] for f in report.manifest["files"])


def test_restore_refuses_a_backup_missing_a_file_and_a_state_not_empty(setup, tmp_path):
    cfg, path, made = setup
    backup(cfg, path, tmp_path / "bk")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(CasesignError) as e:
        restore(tmp_path / "bk", busy)
    assert e.value.code == "target_not_empty"
    sha = made.object_sha256
    blob = tmp_path / "bk" / "objects" / "blobs" / sha[:2] / sha
    blob.unlink()
    with pytest.raises(BackupInvalid) as invalid:
        restore(tmp_path / "bk", tmp_path / "new")
    assert any(p.startswith(f"missing: objects/blobs/{sha[:2]}/{sha} (") for p in
               invalid.value.problems), invalid.value.problems
    assert not (tmp_path / "new").exists()
