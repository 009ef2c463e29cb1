"""The durable store: jobs, their audit events, signatures and artifacts.

- :mod:`.records`: the records and the :class:`Store` protocol (the verbs);
- :mod:`.sqlite_writer`: SQLite's one writing connection and its group commit;
- :mod:`.sqlite`: :class:`SqliteStore`, the embedded implementation;
- :mod:`.memory`: :class:`MemoryStore`, the same verbs in memory, for tests and tools.
"""

from .records import (
    Claimed,
    Flight,
    IdempotencyKeyReused,
    Job,
    Lease,
    NewJob,
    Store,
    in_progress,
    new_id,
    random_hex,
    row_job,
)
from .sqlite import SqliteStore

__all__ = ["Claimed", "Flight", "IdempotencyKeyReused", "Job", "Lease", "NewJob", "SqliteStore", "Store",
           "in_progress", "new_id", "random_hex", "row_job"]
