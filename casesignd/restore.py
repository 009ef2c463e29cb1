"""``casesignd restore --from DIR --dir STATE``: a working setup from a backup
(:mod:`casesignd.backup`).

1. The backup is checked against its manifest first: every file there with its size
   and SHA-256, every case link there, nothing else. Any file missing, extra or
   altered is named, and nothing is written.
2. STATE must be new or empty; so must the database a PostgreSQL config names.
3. Everything is written into a directory beside STATE and renamed to STATE at the
   end, so an interrupted restore leaves STATE as it was: the store (the SQLite file,
   or ``pg_restore`` into the config's database in one transaction), the objects with
   their case links, the artifact files, the config's files with their modes, and
   last ``config.toml``: the backed-up config with its paths pointing into STATE
   (relative, so STATE can move as a whole) and every other path made absolute as it
   resolved where the backup was taken.
4. The result is checked like ``store check`` and ``audit verify`` do.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from . import backup_pg, config
from .artifacts import copy_new, hash_file
from .backup import (
    CONFIG_DIR,
    FORMAT,
    MANIFEST,
    PG_DUMP_FILE,
    Say,
    check_empty_dir,
    fsync_tree,
    make_parents,
)
from .bootstrap import render_config
from .errors import CasesignError, ConfigError

# Problems a refusal names at most; the rest are counted.
PROBLEMS_SHOWN = 200


class BackupInvalid(CasesignError):
    """A backup unlike its manifest: ``problems`` names each file (missing, extra,
    altered)."""

    code = "backup_invalid"
    status = 422

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


@dataclass
class RestoreReport:
    """What a restore wrote, and what checking it found."""

    state: Path
    manifest: dict[str, Any]
    check_lines: list[str] = field(default_factory=list)
    ok: bool = True

    def lines(self) -> list[str]:
        m = self.manifest
        return [f"restored the backup of {m['store']['name']} (taken {m['created_at']}) into "
                f"{self.state}: {len(m['files'])} files checked against the manifest",
                f"  config: {self.state / 'config.toml'}", *self.check_lines]


def _safe(rel: str) -> bool:
    p = PurePosixPath(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and rel != MANIFEST


def read_manifest(src: Path) -> dict[str, Any]:
    """The manifest of the backup in ``src``, or BackupInvalid."""
    try:
        manifest: dict[str, Any] = json.loads((src / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupInvalid(f"{src} has no {MANIFEST}: not a backup, or one that did not "
                            "finish", []) from None
    except (OSError, ValueError) as e:
        raise BackupInvalid(f"{src / MANIFEST} cannot be read: {e}", []) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupInvalid(f"{src / MANIFEST} is not a {FORMAT} manifest", [])
    return manifest


def check_backup(src: Path) -> tuple[dict[str, Any], list[str]]:
    """The manifest and every way the backup differs from it (pure reads)."""
    manifest = read_manifest(src)
    files = {str(e["path"]): e for e in manifest.get("files", [])}
    links = {str(e["path"]): str(e["target"]) for e in manifest.get("links", [])}
    problems = [f"bad path: {p!r} leaves the backup" for p in [*files, *links, *links.values()]
                if not _safe(p)]
    if problems:
        return manifest, problems
    found = {Path(d, f).relative_to(src).as_posix()
             for d, _dirs, names in os.walk(src) for f in names} - {MANIFEST}
    for rel in sorted(found - set(files) - set(links)):
        problems.append(f"extra: {rel} is not in the manifest")
    for rel, entry in sorted(files.items()):
        if rel not in found:
            problems.append(f"missing: {rel} ({entry['size']} bytes, SHA-256 {entry['sha256']})")
            continue
        sha, size = hash_file(src / rel)
        if (sha, size) != (entry["sha256"], entry["size"]):
            problems.append(f"altered: {rel} is {size} bytes, SHA-256 {sha}; the manifest "
                            f"says {entry['size']} bytes, SHA-256 {entry['sha256']}")
    for rel, target in sorted(links.items()):
        if rel not in found:
            problems.append(f"missing: {rel} (a case link to {target})")
        elif target not in files:
            problems.append(f"altered: {rel} links to {target}, which the manifest lacks")
        elif not _same(src / rel, src / target) and \
                hash_file(src / rel)[0] != files[target]["sha256"]:
            problems.append(f"altered: {rel} differs from {target}, which it is a link to")
    return manifest, problems


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _placed(rel: str, manifest: dict[str, Any]) -> str:
    """Where a backed-up file goes in STATE: the store at its default name, the
    config's files beside config.toml, objects and artifacts as they were."""
    if rel == manifest["store"]["file"]:
        return "casesignd.db" if manifest["store"]["kind"] == "sqlite" else ""
    if rel.startswith(f"{CONFIG_DIR}/"):
        return "" if rel == manifest["config"]["file"] else rel.removeprefix(f"{CONFIG_DIR}/")
    return rel


def _set(cfg: config.Config, key: str, value: str) -> None:
    """Set ``key`` (``a.b.c`` or ``a.b[i]``) of ``cfg`` to ``value``."""
    *parents, last = key.split(".")
    obj: Any = cfg
    for name in parents:
        if name.endswith("]"):  # tenants[1]
            name, _, index = name[:-1].partition("[")
            obj = getattr(obj, name)[int(index)]
        else:
            obj = getattr(obj, name)
    if last.endswith("]"):
        name, _, index = last[:-1].partition("[")
        getattr(obj, name)[int(index)] = value
    else:
        setattr(obj, last, value)


def restored_config(text: str, manifest: dict[str, Any], state: Path,
                    dsn: str | None = None) -> config.Config:
    """The backed-up config with its paths pointing into ``state`` (and a PostgreSQL
    store at ``dsn``, when given)."""
    old_base = Path(manifest["config"]["base_dir"])
    cfg = config.loads(text, base_dir=str(old_base))
    for source in cfg.sources:  # read where they were: not part of the backup
        if source.root:
            source.root = str(cfg.path(source.root))
    p11 = cfg.signing.pkcs11
    if p11 is not None and "/" in p11.module:  # a bare name is the loader's to find
        p11.module = str(cfg.path(p11.module))
    cfg.storage.state_dir, cfg.storage.temp_dir = ".", "tmp"
    if cfg.store.kind == "sqlite":
        cfg.store.path = "casesignd.db"
    elif dsn:
        cfg.store.dsn = dsn
    for key, rel in manifest["config"]["files"].items():
        _set(cfg, key, rel.removeprefix(f"{CONFIG_DIR}/"))
    cfg.base_dir = str(state)
    return cfg


def restore(src: Path, state: Path, *, dsn: str | None = None,
            say: Say = lambda _l: None) -> RestoreReport:
    """Restore the backup in ``src`` into the new or empty directory ``state`` (a
    PostgreSQL store into the empty database ``dsn``, else the config's). Blocking."""
    manifest, problems = check_backup(src)
    if problems:
        shown = problems[:PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise BackupInvalid(f"{src}: {len(problems)} file{'s' if len(problems) != 1 else ''} "
                            "missing, extra or altered against its manifest; nothing was "
                            "written", shown + ([f"... and {more} more"] if more else []))
    check_empty_dir(state, "--dir")
    text = (src / manifest["config"]["file"]).read_text(encoding="utf-8")
    cfg = restored_config(text, manifest, state, dsn)
    pg = manifest["store"]["kind"] == "postgres"
    if dsn and not pg:
        raise ConfigError("--dsn", "applies only to the backup of a PostgreSQL store")
    if pg:
        backup_pg.check_empty(cfg.store.dsn, cfg.store_password())
    state = state.absolute()
    state.parent.mkdir(parents=True, exist_ok=True)
    staging = state.parent / f".{state.name}.restoring-{secrets.token_hex(4)}"
    staging.mkdir(mode=0o700)
    try:
        _write(src, staging, manifest, say)
        if pg:
            say(f"pg_restore into postgres {cfg.store.dsn}")
            backup_pg.restore(cfg.store.dsn, cfg.store_password(), src / PG_DUMP_FILE)
        rendered = render_config(cfg, title="casesignd configuration, restored from the "
                                 f"backup of {manifest['created_at']}")
        config.loads(rendered, base_dir=str(state))  # it must load where it goes
        with open(staging / "config.toml", "x", encoding="utf-8") as f:
            f.write(rendered)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(staging / "config.toml", 0o600)
        fsync_tree(staging)
        with contextlib.suppress(FileNotFoundError):
            state.rmdir()  # empty (checked above): the staging directory takes its name
        os.rename(staging, state)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    report = RestoreReport(state, manifest)
    _check(report)
    return report


def _write(src: Path, staging: Path, manifest: dict[str, Any], say: Say) -> None:
    say(f"copying {len(manifest['files'])} files into {staging}")
    for entry in manifest["files"]:
        rel = _placed(str(entry["path"]), manifest)
        if not rel:
            continue  # the config (rendered anew) or a dump (restored into the database)
        dst = staging / rel
        make_parents(dst, staging)
        got = copy_new(src / entry["path"], dst)
        if got != (entry["sha256"], entry["size"]):  # changed since it was checked
            raise BackupInvalid(f"{src / entry['path']} changed while it was restored", [])
        os.chmod(dst, int(entry.get("mode", "0600"), 8))
    for link in manifest["links"]:
        dst = staging / link["path"]
        make_parents(dst, staging)
        os.link(staging / link["target"], dst)
    (staging / "tmp").mkdir(mode=0o700, exist_ok=True)


def _check(report: RestoreReport) -> None:
    """``store check`` of the restored setup, as ``casesignd store check`` reads it."""
    from .store.check import check_store
    from .store.snapshot import open_snapshot

    cfg = config.load(report.state / "config.toml")
    snap = open_snapshot(cfg)
    try:
        checked = check_store(snap, cfg.path(cfg.storage.state_dir))
    finally:
        snap.close()
    report.ok = checked.ok
    report.check_lines = [f"  {line}" for line in checked.lines()]
    head = report.manifest["chain_head"]
    if checked.ok and (checked.head_seq, checked.head_hash) != (head["seq"], head["hash"]):
        report.ok = False
        report.check_lines.append(f"  the restored chain ends at seq {checked.head_seq}; the "
                                  f"manifest says {head['seq']}")
