"""A read-only snapshot of a whole store, for the tools that read one from end to end
(``casesignd store check``, ``casesignd store copy``) rather than serve requests.

SQLite's file is read through :mod:`sqlite3` in one read transaction (WAL lets it run
beside a daemon); PostgreSQL in one read-only REPEATABLE READ transaction. Both answer
the same named statements (``sql/inspect.sql``, ``sql/postgres/inspect.sql``) with
rows as dicts, and :meth:`Snapshot.stream` reads a large answer a batch at a time
(PostgreSQL through a server-side cursor), so a store of millions of events is never
held in memory.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from casesignd.store.sqlfiles import load_statements

if TYPE_CHECKING:
    import psycopg

    from casesignd.config import Config

# A row of a snapshot: column name to value (the columns differ by statement).
Row = dict[str, Any]

# Rows read from the database per round trip of a stream.
BATCH_ROWS = 2000


class Snapshot(Protocol):
    """What the tools read a store through."""

    name: str  # for people: the engine and where

    def stream(self, statement: str, **params: object) -> Iterator[Row]:
        """The rows of a named statement, read a batch at a time."""
        ...

    def one(self, statement: str, **params: object) -> Row | None:
        """The first row of a named statement, or None."""
        ...

    def again(self, statement: str, **params: object) -> Row | None:
        """:meth:`one` outside the snapshot: what is committed now."""
        ...

    def close(self) -> None: ...


def _dict_row(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {d[0]: v for d, v in zip(cur.description, row, strict=True)}


def _open_sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True,
                           isolation_level=None)
    conn.row_factory = _dict_row
    return conn


class SqliteSnapshot:
    """A SQLite store file, read-only, in one read transaction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.name = f"sqlite {self.path}"
        self.q = load_statements("sql/inspect.sql")
        self.conn = _open_sqlite(self.path)
        # Deferred: the first read takes the snapshot that every later one sees.
        self.conn.execute("BEGIN")
        self._fresh: sqlite3.Connection | None = None

    def stream(self, statement: str, **params: object) -> Iterator[Row]:
        cur = self.conn.execute(self.q[statement], params)
        while rows := cur.fetchmany(BATCH_ROWS):
            yield from rows

    def one(self, statement: str, **params: object) -> Row | None:
        row: Row | None = self.conn.execute(self.q[statement], params).fetchone()
        return row

    def again(self, statement: str, **params: object) -> Row | None:
        if self._fresh is None:
            self._fresh = _open_sqlite(self.path)
        row: Row | None = self._fresh.execute(self.q[statement], params).fetchone()
        return row

    def close(self) -> None:
        for conn in (self.conn, self._fresh):
            if conn is not None:
                conn.close()


class PostgresSnapshot:
    """A PostgreSQL store, in one read-only REPEATABLE READ transaction."""

    def __init__(self, dsn: str, *, password: str | None = None) -> None:
        import psycopg  # the PostgreSQL store's driver, loaded only for it
        from psycopg.rows import dict_row

        self.name = f"postgres {dsn}"
        self.q = load_statements("sql/postgres/inspect.sql")
        self._dsn = dsn
        self._kwargs: dict[str, Any] = {"password": password} if password else {}
        self.conn: psycopg.Connection[Row] = psycopg.connect(
            dsn, row_factory=dict_row, application_name="casesignd-tool", **self._kwargs)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self._fresh: psycopg.Connection[Row] | None = None
        self._cursors = itertools.count(1)

    def stream(self, statement: str, **params: object) -> Iterator[Row]:
        with self.conn.cursor(name=f"casesignd_inspect_{next(self._cursors)}") as cur:
            cur.itersize = BATCH_ROWS
            cur.execute(self.q[statement], params)
            yield from cur

    def one(self, statement: str, **params: object) -> Row | None:
        return self.conn.execute(self.q[statement], params).fetchone()

    def again(self, statement: str, **params: object) -> Row | None:
        if self._fresh is None:
            import psycopg
            from psycopg.rows import dict_row

            self._fresh = psycopg.connect(self._dsn, row_factory=dict_row, autocommit=True,
                                          application_name="casesignd-tool", **self._kwargs)
        return self._fresh.execute(self.q[statement], params).fetchone()

    def close(self) -> None:
        for conn in (self.conn, self._fresh):
            if conn is not None:
                conn.close()


def open_snapshot(cfg: Config) -> SqliteSnapshot | PostgresSnapshot:
    """A snapshot of the store ``cfg`` names. Raises the engine's error (sqlite3.Error,
    psycopg.Error) when it cannot be read, FileNotFoundError when a SQLite file is
    missing."""
    if cfg.store.kind == "postgres":
        return PostgresSnapshot(cfg.store.dsn, password=cfg.store_password())
    path = cfg.path(cfg.store.path)
    if not path.is_file():
        raise FileNotFoundError(f"no job store at {path}")
    return SqliteSnapshot(path)
