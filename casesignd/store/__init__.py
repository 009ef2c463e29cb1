"""The durable store: jobs, their audit events, signatures and artifacts.

- :mod:`.records`: the records and the :class:`Store` protocol (the verbs);
- :mod:`.sqlfiles`: the named statements and numbered migrations under ``sql/``;
- :mod:`.tx`: :class:`~.tx.Tx`, what an operation sees of a writer's transaction;
- :mod:`.groupcommit`: the writers' queue, batches and commits, for both engines;
- :mod:`.verbs`: :class:`~.verbs.SqlStore`, the verbs both SQL stores share, over a Tx;
- :mod:`.sqlite_writer`: SQLite's one writing connection and its group commit;
- :mod:`.sqlite`: :class:`SqliteStore`, the embedded implementation;
- :mod:`.postgres_writer`, :mod:`.postgres`: :class:`~.postgres.PostgresStore`, the
  same verbs on PostgreSQL, for several daemons on one database;
- :mod:`.memory`: :class:`MemoryStore`, the same verbs in memory, for tests and tools.

:func:`make_store` builds the one ``[store] kind`` names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casesignd.store.records import (
    Activity,
    Charge,
    Claimed,
    Flight,
    IdempotencyKeyReused,
    Job,
    Lease,
    NewJob,
    Pause,
    Store,
    in_progress,
    new_id,
    not_cancelable,
    not_failed,
    random_hex,
    row_job,
)
from casesignd.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from casesignd.config import Config
    from casesignd.store.postgres import PostgresStore


def make_store(cfg: Config, node: str | None = None) -> SqliteStore | PostgresStore:
    """The store ``[store] kind`` names, not opened yet; ``node``, a daemon's node name
    (None for a tool that is no daemon)."""
    if cfg.store.kind == "postgres":
        from casesignd.store.postgres import PostgresStore  # psycopg loads only for this store

        return PostgresStore(cfg.store.dsn, password=cfg.store_password(), node=node,
                             notify=cfg.store.notify)
    return SqliteStore(cfg.path(cfg.store.path), busy_timeout_ms=cfg.store.busy_timeout_ms)


__all__ = ["Activity", "Charge", "Claimed", "Flight", "IdempotencyKeyReused", "Job", "Lease", "NewJob", "Pause", "SqliteStore", "Store",
           "in_progress", "make_store", "new_id", "not_cancelable", "not_failed", "random_hex", "row_job"]
