"""``casesignd restore --from DIR --dir STATE``: a working setup from a backup
(:mod:`casesignd.ops.backup`).

It trusts nothing it reads: a backup is files anyone with access to its folder may
have changed, manifest and all.

1. The backup is checked against its manifest first: every file there with its size
   and SHA-256, every case link there, nothing else. Every file is opened without
   following a link, in any component of its path (``O_NOFOLLOW``), and must be a
   regular file of its declared size before a byte of it is read; a link, a folder,
   a device or a pipe where a file should be is named, as is any file missing, extra
   or altered, and nothing is written.
2. STATE must be new or empty; so must the database a PostgreSQL config names. No
   path of the manifest and no file the restored config names may leave STATE.
3. Everything is written into a directory beside STATE: the store (the SQLite file,
   or ``pg_restore`` into the config's database in one transaction), the objects with
   their case links, the artifact files, the config's files, and last
   ``config.toml``: the backed-up config with its paths pointing into STATE
   (relative, so STATE can move as a whole) and every other path made absolute as it
   resolved where the backup was taken. Modes are the project's own, never the
   manifest's: 0600 for files, 0700 for folders.
4. That directory is checked like ``store check`` and ``audit verify`` do, and renamed
   to STATE only when it passes: a failed restore leaves nothing under STATE's name
   (a PostgreSQL database it restored into stays, and is named).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from casesignd import config
from casesignd.core.errors import CasesignError, ConfigError
from casesignd.ops import backup_postgres as backup_pg
from casesignd.ops.backup import (
    CONFIG_DIR,
    FORMAT,
    MANIFEST,
    PG_DUMP_FILE,
    RESERVED,
    Say,
    check_empty_dir,
    config_files,
    fsync_tree,
    make_parents,
)
from casesignd.ops.init import render_config

# Problems a refusal names at most; the rest are counted.
PROBLEMS_SHOWN = 200


class BackupInvalid(CasesignError):
    """A backup unlike its manifest: ``problems`` names each file (missing, extra,
    altered)."""

    code = "backup_invalid"

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


# Bytes read at a time from a backed-up file.
CHUNK_BYTES = 1 << 20


def _safe(rel: str) -> bool:
    p = PurePosixPath(rel)
    return (bool(rel) and not p.is_absolute() and ".." not in p.parts and "." not in p.parts
            and "" not in rel.split("/") and rel != MANIFEST)


class NotPlain(OSError):
    """Where a file should be, something else: a link, a folder, a device, a pipe."""


def open_plain(root: Path, rel: str) -> tuple[int, int]:
    """(an open descriptor, its size) of the regular file ``rel`` below ``root``, no
    component of ``rel`` followed if it is a link; NotPlain (an OSError) for anything
    but a regular file. Opened non-blocking, so a pipe cannot hang it, and only
    fstat'ed: nothing is read."""
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        *folders, name = PurePosixPath(rel).parts
        for folder in folders:
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=dir_fd)
            except NotADirectoryError:
                raise NotPlain(f"{folder} is not a folder") from None
            os.close(dir_fd)
            dir_fd = fd
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotPlain("not a regular file")
    return fd, st.st_size


def read_checked(root: Path, rel: str, sha256: str, size: int,
                 sink: BinaryIO | None = None) -> str | None:
    """Read the backed-up file ``rel`` (see :func:`open_plain`) and hold it to its
    declared ``size`` and ``sha256``, writing it to ``sink`` as it goes when given;
    None when it matches, else what is wrong. Its size is checked before a byte is
    read, and no more than ``size`` bytes are ever read: a file that grows, or a
    device, cannot make it read on."""
    try:
        fd, found = open_plain(root, rel)
    except FileNotFoundError:
        return f"missing: {rel} ({size} bytes, SHA-256 {sha256})"
    except OSError as e:  # ELOOP: a link; NotPlain: a folder, a device, a pipe
        what = "a link" if e.errno == errno.ELOOP else e.strerror or str(e)
        return f"not a plain file: {rel} ({what}); restore reads regular files only"
    with os.fdopen(fd, "rb") as f:
        if found != size:
            return (f"altered: {rel} is {found} bytes; the manifest says {size} bytes, "
                    f"SHA-256 {sha256}")
        h, left = hashlib.sha256(), size
        while left and (chunk := f.read(min(CHUNK_BYTES, left))):
            h.update(chunk)
            left -= len(chunk)
            if sink is not None:
                sink.write(chunk)
        got = h.hexdigest()
        if left or f.read(1) or got != sha256:
            return (f"altered: {rel} is not what the manifest says ({size} bytes, SHA-256 "
                    f"{sha256}); read: SHA-256 {got}")
    return None


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
    try:
        files = {str(e["path"]): e for e in manifest["files"]
                 if isinstance(e.get("size"), int) and e["size"] >= 0
                 and isinstance(e.get("sha256"), str)}
        links = {str(e["path"]): str(e["target"]) for e in manifest["links"]}
        named = {str(k): str(v) for k, v in manifest["config"]["files"].items()}
        kept = [manifest["config"]["file"], manifest["store"]["file"]]
    except (KeyError, TypeError, AttributeError):
        raise BackupInvalid(f"{src / MANIFEST} is not a {FORMAT} manifest", []) from None
    if len(files) != len(manifest["files"]):
        return manifest, ["bad entry: a file of the manifest has no size or SHA-256"]
    problems = [f"bad path: {p!r} leaves the backup" for p in [*files, *links, *links.values()]
                if not _safe(p)]
    problems += [f"bad path: {key} names {rel!r}, not a file of the backup's config/"
                 for key, rel in named.items()
                 if rel not in files or not rel.startswith(f"{CONFIG_DIR}/") or "/" in
                 rel.removeprefix(f"{CONFIG_DIR}/") or rel.removeprefix(f"{CONFIG_DIR}/") in RESERVED]
    problems += [f"bad path: {rel!r} is not a file of the backup" for rel in kept
                 if rel and rel not in files]
    if problems:
        return manifest, problems
    found, odd = _found(src)
    problems += odd
    for rel in sorted(found - set(files) - set(links)):
        problems.append(f"extra: {rel} is not in the manifest")
    for rel, entry in sorted(files.items()):
        wrong = read_checked(src, rel, entry["sha256"], entry["size"])
        if wrong:
            problems.append(wrong)
    for rel, target in sorted(links.items()):
        if target not in files:
            problems.append(f"altered: {rel} links to {target}, which the manifest lacks")
            continue
        wrong = read_checked(src, rel, files[target]["sha256"], files[target]["size"])
        if wrong and wrong.startswith("missing"):
            problems.append(f"missing: {rel} (a case link to {target})")
        elif wrong and wrong.startswith("altered"):
            problems.append(f"altered: {rel} differs from {target}, which it is a link to")
        elif wrong:
            problems.append(wrong)
    return manifest, problems


def _found(src: Path) -> tuple[set[str], list[str]]:
    """The regular files below ``src`` (but the manifest), and a problem for anything
    else there (a link, a device, a pipe): none is followed."""
    found, odd = set(), []
    for d, dirs, names in os.walk(src):
        for name in [*dirs, *names]:
            path = Path(d, name)
            rel = path.relative_to(src).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                odd.append(f"not a plain file: {rel} (a link); restore follows none")
            elif name in names and not stat.S_ISREG(mode):
                odd.append(f"not a plain file: {rel} (a device, a pipe or a socket)")
            elif name in names:
                found.add(rel)
    return found - {MANIFEST}, odd


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
    # Storage keys are never in a backup: they are read where the operator keeps them
    # (a credential by its bare name, else the path as the backed-up config meant it).
    st = cfg.storage
    if st.key_file:
        st.key_file = _kept_where_it_was(cfg, st.key_file)
    for old in st.old_keys:
        old.file = _kept_where_it_was(cfg, old.file)
    cfg.base_dir = str(state)
    # Every file the daemon will read as its own is one the restore wrote into STATE:
    # a config entry the manifest does not place there would name a file elsewhere.
    leaving = [f"bad path: {key} names {value!r}, outside {state}"
               for key, value in config_files(cfg) if not _inside(value)]
    if leaving:
        raise BackupInvalid("the backed-up config names files outside the restored "
                            "directory; nothing was written", leaving)
    return cfg


def _kept_where_it_was(cfg: config.Config, value: str) -> str:
    if "/" not in value and os.environ.get("CREDENTIALS_DIRECTORY"):
        return value
    return str(cfg.path(value).absolute())


def check_storage_keys(cfg: config.Config, manifest: dict[str, Any]) -> None:
    """Refuse, before anything is written, a restore whose configuration cannot read
    what the backup holds sealed: the key ids its data keys are wrapped under
    (``storage_keys`` in the manifest) must all be configured and readable."""
    needed = (manifest.get("storage_keys") or {}).get("key_ids") or {}
    if not needed:
        return
    try:
        have = cfg.storage_keyring().ids
    except ConfigError as e:
        raise ConfigError(e.key, f"the backup holds data sealed under key id(s) "
                                 f"{', '.join(sorted(needed))}, and {e.message}; a backup "
                                 "never holds a storage key: put each where the restored "
                                 "configuration names it") from None
    missing = sorted(set(needed) - have)
    if missing:
        raise ConfigError("storage.old_keys",
                          f"the backup holds data sealed under key id(s) {', '.join(missing)}, "
                          "which the restored configuration does not name: add them as "
                          "storage.key_id or [[storage.old_keys]] before restoring")


def _inside(value: str) -> bool:
    """Whether a configured path stays below the directory it is relative to."""
    p = PurePosixPath(value)
    return not p.is_absolute() and ".." not in p.parts and bool(p.parts)


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
    check_storage_keys(cfg, manifest)
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
        fd = os.open(staging / "config.toml", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(rendered)
            f.flush()
            os.fsync(f.fileno())
        fsync_tree(staging)
        # Checked where it was built: only a setup that passes takes STATE's name.
        report = RestoreReport(state, manifest)
        _check(report, staging)
        if not report.ok:
            where = f"; the database {cfg.store.dsn} holds what was restored" if pg else ""
            raise BackupInvalid(f"the restored copy does not pass store check: nothing was "
                                f"written under {state}{where}",
                                [line.strip() for line in report.check_lines])
        with contextlib.suppress(FileNotFoundError):
            state.rmdir()  # empty (checked above): the staging directory takes its name
        os.rename(staging, state)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


def _write(src: Path, staging: Path, manifest: dict[str, Any], say: Say) -> None:
    say(f"copying {len(manifest['files'])} files into {staging}")
    for entry in manifest["files"]:
        rel = _placed(str(entry["path"]), manifest)
        if not rel:
            continue  # the config (rendered anew) or a dump (restored into the database)
        dst = staging / rel
        make_parents(dst, staging)
        # 0600 whatever the manifest says: a key, a secret or an artifact is the
        # daemon's alone, and never executable.
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as out:
            wrong = read_checked(src, str(entry["path"]), entry["sha256"], entry["size"], out)
            out.flush()
            os.fsync(out.fileno())
        if wrong:  # changed since it was checked
            raise BackupInvalid(f"{src / entry['path']} changed while it was restored", [wrong])
        os.chmod(dst, 0o600)  # whatever the umask made of it
    for link in manifest["links"]:
        dst = staging / link["path"]
        make_parents(dst, staging)
        os.link(staging / link["target"], dst)
    (staging / "tmp").mkdir(mode=0o700, exist_ok=True)


def _check(report: RestoreReport, built: Path) -> None:
    """``store check`` of the restored setup where it was ``built``, as ``casesignd
    store check`` reads it."""
    from casesignd.ops.store_check import check_store
    from casesignd.store.snapshot import open_snapshot

    cfg = config.load(built / "config.toml")
    snap = open_snapshot(cfg)
    try:
        checked = check_store(snap, cfg.path(cfg.storage.state_dir), cfg.storage_keyring())
    finally:
        snap.close()
    report.ok = checked.ok
    report.check_lines = [f"  {line}" for line in checked.lines()]
    head = report.manifest["chain_head"]
    if checked.ok and (checked.head_seq, checked.head_hash) != (head["seq"], head["hash"]):
        report.ok = False
        report.check_lines.append(f"  the restored chain ends at seq {checked.head_seq}; the "
                                  f"manifest says {head['seq']}")
