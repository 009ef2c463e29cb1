# ruff: noqa: F811 - the backup tests' fixture, imported by name
"""restore against a backup someone changed, manifest and all (the security probe's
cases): modes from the manifest, links to files, folders and devices, a pipe, a file
larger than it says, paths and config entries that leave the new directory, and a
restore that fails its store check half way. Each is refused or made safe, and a
refused restore leaves nothing under the target's name."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from casesignd.core.outcomes import Fail
from casesignd.files.artifacts import artifact_path
from casesignd.ops.backup import backup
from casesignd.ops.restore import BackupInvalid, restore
from casesignd.store import SqliteStore
from tests.helpers_stores import fill, new_job, write_config
from tests.unit.test_backup import setup  # noqa: F401
from tests.unit.test_store_check import check


@pytest.fixture
def bk(setup, tmp_path):
    """A backup of a store with one of everything, its config elsewhere."""
    cfg, path, made = setup
    backup(cfg, path, tmp_path / "bk")
    return tmp_path / "bk", made


def manifest_of(bk: Path) -> dict:
    return json.loads((bk / "manifest.json").read_text())


def rewrite(bk: Path, change) -> None:
    m = manifest_of(bk)
    change(m)
    (bk / "manifest.json").write_text(json.dumps(m))


def entry(m: dict, prefix: str) -> dict:
    return next(e for e in m["files"] if e["path"].startswith(prefix))


def declare(m: dict, rel: str, data: bytes) -> None:
    """The manifest made to agree with ``data`` at ``rel``."""
    e = next(e for e in m["files"] if e["path"] == rel)
    e["sha256"], e["size"] = hashlib.sha256(data).hexdigest(), len(data)


def refused(bk: Path, target: Path) -> list[str]:
    with pytest.raises(BackupInvalid) as e:
        restore(bk, target)
    assert not target.exists()
    return e.value.problems


def finishes(fn) -> object:
    """``fn()`` in a thread that must end: a restore that reads a device or waits on a
    pipe for ever is the failure (a guard, not a measure of time)."""
    out: list[object] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)
        else:
            out.append(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the restore did not end"
    return out[0]


def test_modes_are_the_projects_own_whatever_the_manifest_says(bk, tmp_path):
    src, made = bk

    def loosen(m: dict) -> None:
        for e in m["files"]:
            e["mode"] = "4755" if e["path"].startswith("artifacts/") else "0777"
        entry(m, "config/link.secret")["mode"] = "0644"

    rewrite(src, loosen)
    done = restore(src, tmp_path / "new")
    assert done.ok, done.check_lines
    for d, dirs, names in os.walk(tmp_path / "new"):
        for name in names:
            mode = os.lstat(Path(d, name)).st_mode
            assert stat.S_IMODE(mode) == 0o600, (Path(d, name), oct(mode))
        for name in dirs:
            assert stat.S_IMODE(os.lstat(Path(d, name)).st_mode) == 0o700, Path(d, name)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_a_link_to_a_file_outside_the_backup_is_refused(bk, tmp_path):
    src, made = bk
    aid = made.file_artifact.artifact_id
    rel = f"artifacts/{aid[4:6]}/{aid}"
    outside = tmp_path / "system-file"
    outside.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    (src / rel).unlink()
    (src / rel).symlink_to(outside)
    rewrite(src, lambda m: declare(m, rel, outside.read_bytes()))
    problems = refused(src, tmp_path / "new")
    assert any(p.startswith(f"not a plain file: {rel}") for p in problems), problems


def test_a_link_to_a_folder_is_refused(bk, tmp_path):
    src, made = bk
    aid = made.file_artifact.artifact_id
    folder = src / "artifacts" / aid[4:6]
    os.rename(folder, tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    problems = refused(src, tmp_path / "new")
    assert any(p.startswith(f"not a plain file: artifacts/{aid[4:6]}") for p in problems), problems


@pytest.mark.parametrize("what", ["dev_zero", "fifo"])
def test_a_device_or_a_pipe_where_a_file_should_be_is_refused_without_hanging(bk, tmp_path, what):
    src, made = bk
    aid = made.file_artifact.artifact_id
    rel = f"artifacts/{aid[4:6]}/{aid}"
    (src / rel).unlink()
    if what == "fifo":
        os.mkfifo(src / rel)
    else:
        (src / rel).symlink_to("/dev/zero")
    err = finishes(lambda: restore(src, tmp_path / "new"))
    assert isinstance(err, BackupInvalid), err
    assert any(p.startswith(f"not a plain file: {rel}") for p in err.problems), err.problems
    assert not (tmp_path / "new").exists()


def test_a_file_larger_than_it_says_is_refused_before_it_is_read(bk, tmp_path):
    src, made = bk
    aid = made.file_artifact.artifact_id
    rel = f"artifacts/{aid[4:6]}/{aid}"
    with open(src / rel, "r+b") as f:
        f.truncate(1 << 34)  # 16 GiB, sparse: read whole, it would take a while
    problems = refused(src, tmp_path / "new")
    assert f"altered: {rel} is {1 << 34} bytes; the manifest says " \
        f"{made.file_artifact.size} bytes, SHA-256 {made.file_artifact.sha256}" in problems


def test_paths_and_config_entries_that_leave_the_new_directory_are_refused(bk, tmp_path):
    src, _ = bk
    # A config entry the manifest places outside config/.
    rewrite(src, lambda m: m["config"]["files"].update({"links.secret_file": "../../x"}))
    problems = refused(src, tmp_path / "new")
    assert any("links.secret_file" in p and "bad path" in p for p in problems), problems
    rewrite(src, lambda m: m["config"]["files"].update({"links.secret_file": "config/link.secret"}))

    # A backed-up config naming a file the backup does not hold: it would be read
    # from outside the new directory.
    config = src / "config" / "config.toml"
    text = config.read_text() + '[signing]\nchain_file = "/etc/hostname"\n'
    config.write_text(text)
    rewrite(src, lambda m: declare(m, "config/config.toml", text.encode()))
    problems = refused(src, tmp_path / "new")
    assert any(p.startswith("bad path: signing.chain_file names '/etc/hostname'")
               for p in problems), problems


def test_a_restore_that_fails_its_store_check_leaves_nothing_behind(bk, tmp_path):
    src, made = bk
    aid = made.file_artifact.artifact_id
    rel = f"artifacts/{aid[4:6]}/{aid}"
    data = (src / rel).read_bytes().replace(b"a file", b"A FILE")
    (src / rel).write_bytes(data)
    rewrite(src, lambda m: declare(m, rel, data))  # the manifest agrees; the store does not
    problems = refused(src, tmp_path / "new")
    assert any(p.startswith("artifact_file_changed:") for p in problems), problems
    assert not list(tmp_path.glob(".new.restoring-*"))


async def test_an_extend_of_an_artifact_that_never_existed_is_the_jobs_own_failure(tmp_path):
    state, db = tmp_path / "state", tmp_path / "store.db"
    cfg = write_config(tmp_path / "config.toml", state, db=db)
    store = SqliteStore(db)
    await store.open()
    await fill(store, state)
    body = {"kind": "extend_signature", "artifact_id": "art_" + "f" * 32}
    job, _ = await store.admit(new_job("extend", kind="extend_signature", body=body, case_id=None),
                               actor="api:t1", max_queue_depth=100)
    claimed = await store.claim_job(job.job_id, "w", 10)
    await store.conclude(claimed.lease, Fail("permanent_input", "artifact_not_found"))
    await store.close()
    report = check(cfg)
    assert report.ok, report.lines()
    assert artifact_path(state / "artifacts", "art_" + "f" * 32).exists() is False
