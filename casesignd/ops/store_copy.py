"""``casesignd store copy``: a whole SQLite store into an empty PostgreSQL one, the
audit chain intact, for moving up from one daemon to several.

1. The source's lock (``<db>.lock``, which a daemon on it holds for its life) is taken
   and held to the end: a running source is refused, and none starts meanwhile.
2. The target is migrated. It must hold nothing, or exactly this copy already (the
   command run again after it succeeded): two chains are never mixed.
3. The rows go in one PostgreSQL transaction, the target's tables locked against
   writers: every table streamed from SQLite a batch at a time through ``COPY``, the
   events verified as they pass (a broken source chain is not copied), the chain's
   head set to the last event, the jobs per state counted from the jobs; then the
   target's chain is verified as stored and every table's rows counted.
4. Before that transaction commits, when the two configs name different
   ``storage.state_dir``, the objects and artifact files are copied (:mod:`.files`):
   each placed atomically, as the daemons place them, and checked against the digest
   that names it or the record that describes it. So committed rows always have their
   files. Interrupted anywhere, the target holds no rows of it (files it placed stay,
   and are checked and kept when the copy is run again).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from casesignd.config import Config
from casesignd.core import audit
from casesignd.core.errors import CasesignError, ConfigError, Conflict, NotFound, StoreUnavailable
from casesignd.ops.state_files import (
    ARTIFACTS,
    OBJECTS,
    FilesCopied,
    PlainDigests,
    copy_artifacts,
    copy_objects,
    keys_needed,
    same_dir,
)
from casesignd.store.postgres_writer import migrate
from casesignd.store.snapshot import BATCH_ROWS, Row, SqliteSnapshot
from casesignd.store.sqlfiles import load_statements, migrations

# What is copied, in this order, and the order of each table's rows.
TABLES = {"jobs": "job_id", "events": "seq", "signatures": "tenant, sig_key",
          "artifacts": "artifact_id", "artifact_data": "artifact_id",
          "holds": "tenant, case_id", "objects": "tenant, case_id, sha256",
          "pauses": "tenant, kind", "tenant_usage": "tenant, measure",
          "webhook_deliveries": "delivery_id", "data_keys": "owner"}
# What each store keeps for itself and is not copied: SQLite's trigger counters;
# PostgreSQL's jobs per state (counted from the copied jobs), the chain's head (set to
# the last event) and its schema version (its migrations).
DERIVED = frozenset({"counters", "job_counts", "audit_head", "schema_version"})

Say = Callable[[str], None]


@dataclass(frozen=True)
class Holding:
    """What a store holds, as far as a copy goes."""

    jobs: int
    events: int
    head_seq: int
    head_hash: str
    other_rows: bool  # signatures, artifacts or artifact data

    @classmethod
    def of(cls, row: Row | None) -> Holding:
        assert row is not None
        return cls(int(row["jobs"]), int(row["events"]), int(row["head_seq"] or 0),
                   str(row["head_hash"] or audit.GENESIS), bool(row["other_rows"]))

    @property
    def empty(self) -> bool:
        return not (self.jobs or self.events or self.other_rows or self.head_seq)

    def describe(self) -> str:
        return f"{self.jobs} jobs and {self.events} events (chain head seq {self.head_seq})"


@dataclass
class CopyReport:
    """What a copy did."""

    source: str
    target: str
    rows: dict[str, int]
    head_seq: int
    head_hash: str
    state_dirs: tuple[str, str]
    files: FilesCopied | None = None  # None: one state_dir for both
    already: bool = False  # the target held this copy already
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report for people."""
        rows, files = self.rows, self.files
        if self.already:
            out = [f"{self.target} already holds this copy of {self.source}: "
                   f"{rows['jobs']} jobs, {rows['events']} events"]
        else:
            out = [f"copied {self.source} into {self.target}: "
                   + ", ".join(f"{table} {n}" for table, n in rows.items())]
        if files is None:
            out.append(f"files: {self.state_dirs[1]} is the state_dir of both: nothing to copy")
        else:
            out.append(f"files copied into {self.state_dirs[1]}: objects {files.objects}, "
                       f"artifact files {files.artifacts}, case links {files.case_links} "
                       f"(there already: {files.objects_there + files.artifacts_there}), "
                       "every digest checked")
        out.append(f"audit chain intact: {rows['events']} events, head seq {self.head_seq} "
                   f"({self.head_hash})")
        return out


def chain_broken(message: str) -> CasesignError:
    return CasesignError(message, code="audit_chain_broken")


def schema_mismatch(message: str) -> Conflict:
    return Conflict(message, code="schema_mismatch")


@contextlib.contextmanager
def source_lock(db: Path) -> Iterator[None]:
    """Hold the lock a SQLite daemon holds on ``db`` (SqliteStore.open); refused while
    one runs."""
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreUnavailable(f"a casesignd daemon is running on {db} (it holds "
                                   f"{db}.lock): stop it, then copy") from None
        yield
    finally:
        os.close(fd)


def copy_store(src: Config, dst: Config, *, say: Say = lambda _line: None) -> CopyReport:
    """Copy the SQLite store of ``src`` (and its files) into the empty PostgreSQL store
    of ``dst``; ``say`` gets a line as each step begins. Blocking."""
    if src.store.kind != "sqlite":
        raise ConfigError("store.kind", "--from names a store to copy from: it must be sqlite")
    if dst.store.kind != "postgres":
        raise ConfigError("store.kind", "--to names a store to copy into: it must be postgres")
    db = src.path(src.store.path)
    if not db.is_file():
        raise NotFound(f"no job store at {db}")
    target = f"postgres {dst.store.dsn}"
    with source_lock(db):
        try:
            snap = SqliteSnapshot(db)
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot read sqlite {db}: {e}") from e
        password: dict[str, Any] = {"password": p} if (p := dst.store_password()) else {}
        try:
            with psycopg.connect(dst.store.dsn, autocommit=True, row_factory=dict_row,
                                 application_name="casesignd-store-copy", **password) as conn:
                return _copy(snap, conn, src, dst, say)
        except psycopg.errors.LockNotAvailable as e:
            raise StoreUnavailable(f"{target}: a transaction of a daemon on it held its "
                                   "tables too long; try again") from e
        except psycopg.Error as e:
            raise StoreUnavailable(f"{target}: {str(e).strip()}") from e
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot read {snap.name}: {e}") from e
        finally:
            snap.close()


def _copy(snap: SqliteSnapshot, conn: psycopg.Connection[DictRow], src: Config, dst: Config,
          say: Say) -> CopyReport:
    pg = load_statements("sql/postgres/inspect.sql")
    migrate(conn, load_statements("sql/postgres/queries.sql"))
    columns = _columns(snap, conn, pg)
    source = Holding.of(snap.one("holding"))
    there = Holding.of(conn.execute(pg["holding"]).fetchone())
    report = CopyReport(snap.name, f"postgres {dst.store.dsn}", {}, source.head_seq,
                        source.head_hash, (str(src.path(src.storage.state_dir)),
                                           str(dst.path(dst.storage.state_dir))))
    if not there.empty and there != source:
        raise Conflict(f"the target already holds {there.describe()}; the source holds "
                       f"{source.describe()}. store copy fills an empty database and never "
                       "joins two audit chains", code="store_not_empty")
    # Storage encryption: the copy carries the wrapped data keys; the daemons on the
    # target read them with the keys its configuration names, which must hold them all.
    held, missing = keys_needed(snap, dst.storage_keyring())
    if missing:
        raise ConfigError("storage.old_keys",
                          f"the store holds data keys wrapped under key id(s) "
                          f"{', '.join(missing)}, which --to's configuration does not name "
                          "(storage.key_id, [[storage.old_keys]]): the copy would not read")
    if held:
        report.notes.append("sealed data copied as it is; it needs the key id(s) "
                            f"{', '.join(sorted(held))}")
    if _link_secrets_differ(src, dst):
        report.notes.append("the two configs' link secrets differ: download links given "
                            "out before the copy will not verify")

    def files() -> None:
        report.files = _copy_files(snap, src, dst, say)

    if not there.empty:  # this very copy: its files are checked, its chain again
        files()
        report.already = True
        report.rows = {"jobs": there.jobs, "events": there.events}
        with conn.transaction():
            _verify_copy(conn, pg, report.rows, source)
        return report
    report.rows = _copy_rows(snap, conn, columns, source, say, before_commit=files)
    return report


def _columns(snap: SqliteSnapshot, conn: psycopg.Connection[DictRow],
             pg: dict[str, str]) -> dict[str, list[str]]:
    """The columns of every copied table, the same in both schemas (else refused), at
    the schema versions this casesignd knows."""
    version = int((snap.one("schema_version") or {"user_version": 0})["user_version"])
    latest = migrations("sql")[-1][0]
    if version != latest:
        raise schema_mismatch(f"{snap.name} is at schema version {version}, this casesignd's "
                              f"is {latest}: run `casesignd store migrate` on it first")
    tables = {str(r["name"]) for r in snap.stream("tables")}
    if unknown := tables - DERIVED - set(TABLES):
        raise schema_mismatch(f"{snap.name} has tables store copy does not know: "
                              f"{', '.join(sorted(unknown))}")
    out = {}
    for table in TABLES:
        mine = [str(r["name"]) for r in snap.stream("columns", table=table)]
        theirs = {str(r["name"]) for r in conn.execute(pg["columns"], {"table": table})}
        if set(mine) != theirs:
            raise schema_mismatch(f"table {table} has columns {sorted(mine)} in SQLite and "
                                  f"{sorted(theirs)} in PostgreSQL")
        out[table] = mine
    return out


def _link_secrets_differ(src: Config, dst: Config) -> bool:
    try:
        return (src.credential(src.links.secret_file).read_bytes()
                != dst.credential(dst.links.secret_file).read_bytes())
    except OSError:
        return False


def _copy_files(snap: SqliteSnapshot, src: Config, dst: Config, say: Say) -> FilesCopied | None:
    src_dir, dst_dir = src.path(src.storage.state_dir), dst.path(dst.storage.state_dir)
    if same_dir(src_dir, dst_dir):
        say(f"one state_dir for both ({dst_dir}): no files to copy")
        return None
    dst_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = FilesCopied()
    say(f"copying objects into {dst_dir / OBJECTS}")
    # Sealed files are copied as they are, and checked through the keys the target's
    # configuration names (checked to hold every key id the store needs, before).
    plain = PlainDigests(snap, dst.storage_keyring())
    copy_objects(src_dir / OBJECTS, dst_dir / OBJECTS, done, plain)
    say(f"copying artifact files into {dst_dir / ARTIFACTS}")
    copy_artifacts(src_dir / ARTIFACTS, dst_dir / ARTIFACTS, snap.stream("artifact_records"),
                   done, plain)
    return done


def _source_rows(snap: SqliteSnapshot, table: str, cols: list[str]) -> Iterator[tuple[object, ...]]:
    cur = snap.conn.cursor()
    cur.row_factory = None  # tuples, in the order of cols
    names = ", ".join(f'"{c}"' for c in cols)  # the schema's own names, no input
    cur.execute(f'SELECT {names} FROM "{table}" ORDER BY {TABLES[table]}')
    while batch := cur.fetchmany(BATCH_ROWS):
        yield from batch


def _copy_sql(table: str, cols: list[str]) -> sql.Composed:
    return sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, cols)))


def _copy_rows(snap: SqliteSnapshot, conn: psycopg.Connection[DictRow],
               columns: dict[str, list[str]], source: Holding, say: Say, *,
               before_commit: Callable[[], None]) -> dict[str, int]:
    """Copy every table in one transaction, verified; ``before_commit`` (the files)
    runs once the rows are in and verified: what fails there leaves no rows either."""
    q = load_statements("sql/postgres/copy.sql")
    pg = load_statements("sql/postgres/inspect.sql")
    counts: dict[str, int] = {}
    with conn.transaction():
        conn.execute(q["settings"])
        conn.execute(q["lock_tables"])
        there = Holding.of(conn.execute(pg["holding"]).fetchone())
        if not there.empty:  # a daemon wrote before the lock
            raise Conflict(f"the target now holds {there.describe()}", code="store_not_empty")
        for table, cols in columns.items():
            say(f"copying {table}")
            counts[table] = _copy_table(snap, conn, table, cols)
        conn.execute(q["set_head"], {"seq": source.head_seq, "hash": source.head_hash})
        conn.execute(q["recount_states"])
        say("verifying the copy")
        _verify_copy(conn, pg, counts, source)
        before_commit()
    return counts


def _written(cp: psycopg.Copy, rows: Iterator[tuple[object, ...]]) -> Iterator[tuple[object, ...]]:
    for row in rows:
        cp.write_row(row)
        yield row


def _copy_table(snap: SqliteSnapshot, conn: psycopg.Connection[DictRow], table: str,
                cols: list[str]) -> int:
    """Stream a table through COPY: the rows copied. The events are verified as they
    pass."""
    with conn.cursor().copy(_copy_sql(table, cols)) as cp:
        rows = _written(cp, _source_rows(snap, table, cols))
        if table != "events":
            return sum(1 for _ in rows)
        verified = audit.verify_rows(dict(zip(cols, row, strict=True)) for row in rows)
    if not verified.ok:
        bad = verified.first_bad or {}
        raise chain_broken(f"the source's audit chain is broken at event seq={bad.get('seq')} "
                           f"({bad.get('reason')}): nothing was copied; see `casesignd audit "
                           "verify` on the source")
    return verified.checked


def _verify_copy(conn: psycopg.Connection[DictRow], pg: dict[str, str], counts: dict[str, int],
                 source: Holding) -> None:
    """The chain as the target stores it verifies and ends where the source's does, and
    every table holds the rows copied into it."""
    with conn.cursor(name="casesignd_copy_verify") as cur:
        cur.itersize = BATCH_ROWS
        cur.execute(pg["events"])
        verified = audit.verify_rows(cur)
    there = Holding.of(conn.execute(pg["holding"]).fetchone())
    if not verified.ok or verified.checked != counts["events"] or there.head_seq != source.head_seq \
            or there.head_hash != source.head_hash:
        raise chain_broken(f"the copied chain does not verify ({verified.first_bad or there}); "
                           "nothing was copied")
    for table, n in counts.items():
        row = conn.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(table))
                           ).fetchone()
        if row is None or int(row["n"]) != n:
            raise CasesignError(f"table {table} holds {row and row['n']} rows after copying {n}; "
                                "nothing was copied", code="internal_error")
