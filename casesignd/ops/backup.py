"""``casesignd backup --to DIR``: a consistent copy of a running setup, with a manifest.

1. The store first, as one snapshot: SQLite through its online backup API (one read
   transaction, so WAL writers carry on and the copy is one committed state), or
   ``pg_dump`` of a snapshot exported from a REPEATABLE READ transaction that stays
   open while the files are read.
2. Then the files that snapshot names, read from that same snapshot: every artifact
   file of a record (a file is written before the commit that records it, so it is
   there), the objects with their case links (the links recreated in DIR as links
   between DIR's own copies, and listed), and what jobs that may still run need of
   them. Files written after the snapshot are not needed and are left out (an artifact
   file without a record would read as an orphan). A named file that retention removed
   meanwhile starts the backup again on a fresh snapshot, up to :data:`ATTEMPTS` times.
3. The config file and the files it names (signing key and password, certificates,
   link secret, database password, trust roots) and ``client.env`` beside it, each
   with its mode: the backup holds secrets.
4. ``manifest.json`` last, written under a temp name, fsynced and renamed: a directory
   without one is a backup that did not finish.

Every file is a copy (never a hard link to the source, whose later change would alter
the backup), fsynced, its SHA-256 taken as it is written. Blocking throughout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec

from casesignd import __version__
from casesignd.config import Config
from casesignd.core import audit
from casesignd.core.errors import CasesignError, ConfigError, Conflict, DigestMismatch, NotFound
from casesignd.core.hashing import file_sha256, object_ref_digest
from casesignd.core.keyring import artifact_owner, object_owner
from casesignd.core.sealed import is_sealed
from casesignd.files.artifacts import artifact_path, copy_new
from casesignd.files.envelope import read_head
from casesignd.files.objects import SHA256_PATTERN, fsync_dir, owner_dirs
from casesignd.ops import backup_postgres as backup_pg
from casesignd.ops.state_files import PlainDigests, keys_needed
from casesignd.ops.store_check import removed_object
from casesignd.store.snapshot import PostgresSnapshot, Snapshot, SqliteSnapshot

FORMAT = "casesignd-backup/1"
MANIFEST = "manifest.json"
SQLITE_FILE = "store/casesignd.db"
PG_DUMP_FILE = "store/casesignd.pgdump"
CONFIG_DIR = "config"
CONFIG_FILE = f"{CONFIG_DIR}/config.toml"
CLIENT_ENV = "client.env"
# Names a restored setup gives its own files: a backed-up file never takes one.
RESERVED = frozenset({"config.toml", "casesignd.db", "objects", "artifacts", "branding", "tmp"})
# Snapshots taken before giving up on files that retention keeps removing.
ATTEMPTS = 3

Say = Callable[[str], None]


def vanished(message: str) -> CasesignError:
    return CasesignError(message, code="file_vanished")


class _Gone(Exception):
    """A file the snapshot names went away while it was copied."""


@dataclass
class Written:
    """What a backup holds: files (relative path to size, SHA-256, mode) and links."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # case link -> its blob
    config_files: dict[str, str] = field(default_factory=dict)  # config key -> path
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


@dataclass
class BackupReport:
    """What a backup wrote, for people."""

    dest: Path
    manifest: dict[str, Any]
    attempts: int

    def lines(self) -> list[str]:
        m, c = self.manifest, self.manifest["counted"]
        head = m["chain_head"]
        again = f" (on snapshot {self.attempts}: files went away under the earlier ones)" \
            if self.attempts > 1 else ""
        return [f"backed up {m['store']['name']} into {self.dest}{again}",
                f"  store: {m['store']['file']} (schema version {m['store']['schema_version']})",
                f"  objects {c.get('objects', 0)}, case links {c.get('case_links', 0)}, "
                f"artifact files {c.get('artifact_files', 0)}, logos {c.get('logos', 0)}, "
                f"config files {c.get('config_files', 0)}",
                f"  audit chain head seq {head['seq']} ({head['hash']})",
                f"  manifest: {self.dest / MANIFEST}, {len(m['files'])} files with their "
                "SHA-256",
                "  it holds the signing key and the link secret: keep it where only "
                "operators can read it"]


def make_parents(path: Path, top: Path) -> None:
    """mkdir -p of ``path``'s parent below ``top``, each new directory 0700."""
    missing, d = [], path.parent
    while d != top and not d.is_dir():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)


def _copy(src: Path, dest: Path, rel: str, done: Written, mode: int = 0o600) -> tuple[str, int]:
    """Copy ``src`` to ``dest/rel`` (new, fsynced, ``mode``) and list it: its SHA-256
    and size. FileNotFoundError when ``src`` is not there."""
    dst = dest / rel
    make_parents(dst, dest)
    sha, size = copy_new(src, dst)
    os.chmod(dst, mode)
    done.files[rel] = {"path": rel, "size": size, "sha256": sha, "mode": f"{mode:04o}"}
    return sha, size


def _walk(directory: Path, depth: int) -> Iterator[Path]:
    """Regular files ``depth`` directories below ``directory``, in name order; what
    goes away meanwhile is passed over."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for e in entries:
        if depth == 0:
            if e.is_file(follow_symlinks=False):
                yield Path(e.path)
        elif e.is_dir(follow_symlinks=False):
            yield from _walk(Path(e.path), depth - 1)


def fsync_tree(root: Path) -> None:
    """fsync every directory under ``root`` (its files were fsynced as written)."""
    for d, _dirs, _files in os.walk(root):
        fsync_dir(Path(d))


def check_empty_dir(path: Path, flag: str) -> None:
    """Conflict ``target_not_empty`` when ``path`` exists and is not an empty directory."""
    if path.is_symlink() or (path.exists() and (not path.is_dir() or any(path.iterdir()))):
        raise Conflict(f"{flag} {path} is not empty: it must be a new or empty directory",
                       code="target_not_empty")


# --- the store --------------------------------------------------------------------------


def _sqlite_copy(db: Path, out: Path) -> None:
    """The whole database as of one committed state, into the new file ``out``."""
    if not db.is_file():
        raise NotFound(f"no job store at {db}")
    tmp = out.with_name(out.name + ".part")
    src = sqlite3.connect(f"file:{quote(str(db.resolve()))}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(tmp)
        try:
            # pages=-1: all in one step, so one read transaction: a consistent snapshot
            # however the daemon writes meanwhile (stepwise, each write restarts it).
            src.backup(dst, pages=-1)
            # One self-contained file: no -wal beside it to lose.
            dst.execute("PRAGMA journal_mode = DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.rename(tmp, out)


def _snapshot(cfg: Config, dest: Path, done: Written) -> tuple[Snapshot, dict[str, Any]]:
    """Copy the store into ``dest`` and open what the files are read against: the copy
    itself (SQLite), or the transaction whose snapshot pg_dump dumped (PostgreSQL)."""
    (dest / "store").mkdir(mode=0o700, exist_ok=True)
    snap: Snapshot
    if cfg.store.kind == "postgres":
        password = cfg.store_password()
        snap = pg = PostgresSnapshot(cfg.store.dsn, password=password)
        rel, kind, version_column = PG_DUMP_FILE, "pg_dump-custom", "version"
    else:
        db = cfg.path(cfg.store.path)
        _sqlite_copy(db, dest / SQLITE_FILE)
        snap = SqliteSnapshot(dest / SQLITE_FILE)
        snap.name = f"sqlite {db}"
        rel, kind, version_column = SQLITE_FILE, "sqlite", "user_version"
    try:
        if cfg.store.kind == "postgres":
            # pg_dump reads the very snapshot this transaction goes on reading from.
            row = pg.conn.execute("SELECT pg_export_snapshot() AS id").fetchone()
            assert row is not None
            backup_pg.dump(cfg.store.dsn, password, str(row["id"]), dest / rel)
            with open(dest / rel, "rb+") as f:
                os.fsync(f.fileno())
            os.chmod(dest / rel, 0o600)  # pg_dump leaves it to the umask; it holds everything
        version = int((snap.one("schema_version") or {version_column: 0})[version_column])
        head = snap.one("chain_head") or {"seq": 0, "hash": audit.GENESIS}
        sha, size = file_sha256(dest / rel)
    except BaseException:
        snap.close()
        raise
    done.files[rel] = {"path": rel, "size": size, "sha256": sha, "mode": "0600"}
    store = {"kind": cfg.store.kind, "name": snap.name, "file": rel, "format": kind,
             "schema_version": version, "size": size, "sha256": sha}
    return snap, {"store": store, "chain_head": {"seq": int(head["seq"]),
                                                 "hash": str(head["hash"])}}


# --- the files ----------------------------------------------------------------------------


def _artifacts(snap: Snapshot, root: Path, dest: Path, done: Written,
               plain: PlainDigests) -> None:
    """Every artifact file the snapshot names, checked against its record (a sealed one
    copied as it is, ciphertext, and read back through its data key to check it)."""
    for rec in snap.stream("artifact_records"):
        if rec["inline"]:
            continue  # its bytes are in the store's copy
        artifact_id = str(rec["artifact_id"])
        src = artifact_path(root, artifact_id)
        rel = f"artifacts/{artifact_id[4:6]}/{artifact_id}"
        try:
            got = _copy(src, dest, rel, done)
        except FileNotFoundError:
            raise _Gone(f"{src}, the file of artifact {artifact_id}") from None
        got = _plain(plain, dest / rel, artifact_owner(artifact_id), got)
        want = (str(rec["sha256"]), int(rec["size"]))
        if got != want:
            raise DigestMismatch(f"{src} is {got[1]} bytes, SHA-256 {got[0]}; its record says "
                                 f"{want[1]} bytes, SHA-256 {want[0]}: see `casesignd store "
                                 "check`")
        done.count("artifact_files")


def _plain(plain: PlainDigests, copied: Path, owner: str, got: tuple[str, int]) -> tuple[str, int]:
    """The digest of what ``copied`` holds as its record names it: ``got`` for a plain
    file, the plain bytes' for a sealed one (``backup_invalid`` when they do not read
    back)."""
    if not is_sealed(read_head(copied)):
        return got
    try:
        return plain(copied, owner)
    except CasesignError as e:
        raise CasesignError(f"{e.message}: see `casesignd store check`",
                            code="backup_invalid") from None


def _objects(snap: Snapshot, root: Path, dest: Path, done: Written,
             plain: PlainDigests) -> None:
    """Every blob and case link there is (a blob or link removed meanwhile is passed
    over), then what jobs that may still run name of them must be among them."""
    blobs: dict[str, str] = {}

    def blob(src: Path, sha: str) -> bool:
        rel = f"objects/blobs/{sha[:2]}/{sha}"
        try:
            got = _copy(src, dest, rel, done)
        except FileNotFoundError:
            return False
        got = _plain(plain, dest / rel, object_owner(sha), got)
        if got[0] != sha:
            raise DigestMismatch(f"{src} has SHA-256 {got[0]}, not the one that names it: "
                                 "see `casesignd store check`")
        blobs[sha] = rel
        done.count("objects")
        return True

    for path in _walk(root / "blobs", 1):
        if SHA256_PATTERN.match(path.name):
            blob(path, path.name.lower())
    for ref in _walk(root / "cases", 2):
        sha = ref.name.lower()
        if not SHA256_PATTERN.match(sha) or (sha not in blobs and not blob(ref, sha)):
            continue  # not an object, or gone (a link is the blob's inode: it copies it)
        rel = ref.relative_to(root.parent).as_posix()
        make_parents(dest / rel, dest)
        os.link(dest / blobs[sha], dest / rel)  # within the backup: the layout as it was
        done.links[rel] = blobs[sha]
        done.count("case_links")
    for job in snap.stream("jobs_with_inputs"):
        if job["kind"] != "sign_case":
            continue
        for item in msgspec.json.decode(job["input"]).get("items", []):
            object_ref = str(item.get("object_ref", ""))
            digest = object_ref_digest(object_ref)
            if digest is None:
                continue
            t, c = owner_dirs(str(job["tenant"]), str(job["case_id"] or ""))
            if f"objects/cases/{t}/{c}/{digest}" not in done.links and not removed_object(
                    snap, str(job["tenant"]), job["case_id"], digest):
                raise _Gone(f"object sha256:{digest} of case {job['case_id']}, named by job "
                            f"{job['job_id']} ({job['state']})")


def _logos(root: Path, dest: Path, done: Written) -> None:
    """The logos accepted invoices name (casesignd.invoices.branding): never removed, so all."""
    if not root.is_dir():
        return
    for src in sorted(root.iterdir()):
        if not SHA256_PATTERN.fullmatch(src.name):
            continue  # a write in flight
        got = _copy(src, dest, f"branding/{src.name}", done)
        if got[0] != src.name:
            raise CasesignError(f"{src} does not hold what its name says", code="backup_invalid")
        done.count("logos")


# What the config names that a working setup needs: keys of files to back up.
def config_files(cfg: Config) -> list[tuple[str, str]]:
    """(key, configured value) of every file the config names that a restore needs."""
    s = cfg.signing
    named = [("signing.pkcs12_path", s.pkcs12_path),
             ("signing.pkcs12_password_file", s.pkcs12_password_file),
             ("signing.chain_file", s.chain_file),
             ("links.secret_file", cfg.links.secret_file),
             ("store.password_file", cfg.store.password_file)]
    if s.pkcs11 is not None:
        named += [("signing.pkcs11.pin_file", s.pkcs11.pin_file),
                  ("signing.pkcs11.cert_file", s.pkcs11.cert_file)]
    named += [(f"validation.trust_roots[{i}]", p)
              for i, p in enumerate(cfg.validation.trust_roots)]
    named.append(("invoice.logo", cfg.invoice.logo))
    named += [(f"tenants[{i}].invoice.logo", t.invoice.logo or "")
              for i, t in enumerate(cfg.tenants) if t.invoice is not None]
    return [(key, value) for key, value in named if value]


def _config(cfg: Config, config_path: Path, dest: Path, done: Written) -> None:
    """The config file as it is, the files it names, and client.env beside it."""
    def put(src: Path, rel: str) -> None:
        try:
            mode = os.stat(src).st_mode & 0o777
            _copy(src, dest, rel, done, mode)
        except FileNotFoundError:
            raise NotFound(f"{src} is missing") from None
        done.count("config_files")

    put(config_path, CONFIG_FILE)
    taken = set(RESERVED)
    by_source: dict[Path, str] = {}
    for key, value in config_files(cfg):
        src = cfg.credential(value)
        if src.resolve() in by_source:  # one file under two keys: one copy
            done.config_files[key] = by_source[src.resolve()]
            continue
        name, n = src.name, 1
        while name in taken:
            n += 1
            name = f"{src.stem}-{n}{src.suffix}"
        taken.add(name)
        rel = f"{CONFIG_DIR}/{name}"
        try:
            put(src, rel)
        except NotFound:
            raise NotFound(f"{key} names {src}, which is missing") from None
        by_source[src.resolve()] = done.config_files[key] = rel
    env = config_path.parent / CLIENT_ENV
    if env.is_file() and CLIENT_ENV not in taken:
        put(env, f"{CONFIG_DIR}/{CLIENT_ENV}")


# --- the whole ----------------------------------------------------------------------------


def _once(cfg: Config, config_path: Path, dest: Path) -> dict[str, Any]:
    done = Written()
    snap, about = _snapshot(cfg, dest, done)
    try:
        state_dir = cfg.path(cfg.storage.state_dir)
        # Storage encryption: the backup holds ciphertext and the wrapped data keys,
        # never a storage key; the manifest names the key ids a restore needs.
        keyring = cfg.storage_keyring()
        held, missing = keys_needed(snap, keyring)
        if missing:
            raise ConfigError("storage.old_keys", "the store holds data keys wrapped under "
                              f"key id(s) {', '.join(missing)}, which the configuration does "
                              "not name: a backup checks what it copies with them")
        about["storage_keys"] = {"key_ids": held, "current": keyring.current}
        plain = PlainDigests(snap, keyring)
        _artifacts(snap, state_dir / "artifacts", dest, done, plain)
        _objects(snap, state_dir / "objects", dest, done, plain)
        _logos(state_dir / "branding", dest, done)
    finally:
        snap.close()
    _config(cfg, config_path, dest, done)
    return {"format": FORMAT, "casesignd_version": __version__,
            "created_at": audit.rfc3339(time.time()), **about,
            "config": {"file": CONFIG_FILE, "base_dir": cfg.base_dir,
                       "files": done.config_files},
            "counted": done.counts,
            "files": [done.files[k] for k in sorted(done.files)],
            "links": [{"path": k, "target": done.links[k]} for k in sorted(done.links)]}


def _empty(dest: Path) -> None:
    for entry in dest.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` at ``path`` whole or not at all (temp name, fsync, rename, dir fsync)."""
    tmp = path.with_name(f".{path.name}.part")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fsync_dir(path.parent)


def backup(cfg: Config, config_path: Path, dest: Path, *, say: Say = lambda _l: None
           ) -> BackupReport:
    """Back up the setup of ``cfg`` (read from ``config_path``) into the new or empty
    directory ``dest``. Blocking."""
    check_empty_dir(dest, "--to")
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            manifest = _once(cfg, config_path, dest)
        except _Gone as e:
            with contextlib.suppress(OSError):
                _empty(dest)
            if attempt == ATTEMPTS:
                raise vanished(f"{e} is missing, on {ATTEMPTS} snapshots in a row (removed "
                               "by retention or an erasure as each was read, or lost: see "
                               f"`casesignd store check`); nothing was kept in {dest}"
                               ) from None
            say(f"{e} went away after the snapshot: starting again on a fresh one")
            continue
        except BaseException:
            with contextlib.suppress(OSError):
                _empty(dest)  # half a backup is none: nothing is left to mistake for one
            raise
        fsync_tree(dest)
        write_json_atomic(dest / MANIFEST, manifest)  # last: it says the backup is whole
        return BackupReport(dest, manifest, attempt)
    raise AssertionError("unreachable")
