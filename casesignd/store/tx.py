"""The seam between the verbs and the writers: :class:`Tx`, one operation's view of a
writer's open transaction, and the forms an operation takes (:data:`Op`,
:class:`Step`).

Both SQL writers offer a Tx (:class:`~.sqlite_writer.SqliteTx`,
:class:`~.postgres_writer.PgTx`); the verbs (:mod:`.verbs`) are written over it once,
and name their statements, which each engine's queries.sql maps to its own SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from casesignd.core import audit
from casesignd.store.records import Subject, new_id


class Row(Protocol):
    """A result row, read by column name (``sqlite3.Row``, psycopg's ``DictRow``)."""

    def __getitem__(self, key: str, /) -> Any: ...
    def keys(self) -> Iterable[str]: ...


class Tx(Protocol):
    """One operation's view of a writer's transaction; ``name`` is a statement of the
    engine's queries.sql. Every statement of one writer's batch runs in one
    transaction, whose ``now`` every statement and event of it is given."""

    now: float

    @property
    def waiting_pending(self) -> int:
        """Waiting jobs (queued, retry_wait) this transaction added that the store's
        queue-depth count does not show yet: a depth check adds them."""
        ...

    def one(self, name: str, **params: Any) -> Row | None:
        """The first row of a statement, or None."""
        ...

    def all(self, name: str, **params: Any) -> Sequence[Row]:
        """Every row of a statement."""
        ...

    def run(self, name: str, **params: Any) -> int:
        """Execute a statement that returns no rows; how many rows it changed."""
        ...

    def insert(self, name: str, **params: Any) -> Row | None:
        """An ``INSERT ... RETURNING``: its row, or None when a unique key is taken
        (PostgreSQL's statements say ON CONFLICT DO NOTHING; SQLite's raise, and the
        statement alone is undone)."""
        ...

    def event(self, job: Subject, type: str, actor: str, detail: dict[str, Any] | None = None,
              attempt: int | None = None) -> None:
        """An audit event about ``job``, chained and written with this transaction."""
        ...


def event_row(job: Subject, type: str, actor: str, detail: dict[str, Any] | None,
              attempt: int | None, now: float) -> dict[str, Any]:
    """An event's columns but its place in the chain (seq, prev_hash, hash), which each
    writer gives it: SQLite's at once, PostgreSQL's under the head's lock at commit."""
    return {
        "event_id": new_id("evt", now),
        "job_id": job.job_id,
        "tenant": job.tenant,
        "case_id": job.case_id,
        "type": type,
        "actor": actor,
        "at": audit.rfc3339(now),
        "attempt": job.attempt if attempt is None else attempt,
        "input_digest": job.input_digest,
        "policy_version": job.version,
        "detail": audit.canonical(detail or {}).decode(),
    }


TxT = TypeVar("TxT", bound=Tx)

# An operation: what runs in a writer's transaction, and its result for the caller.
Op = Callable[[Any], Any]


class Step(Generic[TxT]):
    """An operation whose first statement is known before it runs (the hot ones: an
    admission, a claim, a renewal, a fenced end of an attempt without a signature).

    The PostgreSQL writer sends the first statements of consecutive steps of a batch
    together, in pipeline mode, one round trip for all of them, and then runs each
    step's ``then`` with its statement's rows, in order. The statements still run in
    the batch's order; what moves is a step's further statements (reads, and artifact
    rows nothing else in a batch reads), which now run after the next steps' first
    ones. An admission's queue-depth check counts, before it knows, every admission
    ahead of it in the run as inserted: near the limit it may refuse a little early.
    Called as a plain operation (SQLite's writer, a step inside another operation), a
    step runs its statement and then ``then``."""

    __slots__ = ("first", "then", "admits")

    def __init__(self, first: Callable[[TxT], tuple[str, dict[str, Any]]],
                 then: Callable[[TxT, Sequence[Row]], Any], *, admits: bool = False) -> None:
        self.first = first  # (statement name, parameters), from tx.now (and PgTx.waiting_pending)
        self.then = then
        self.admits = admits  # it may add a queued job (see above)

    def __call__(self, tx: TxT) -> Any:
        name, params = self.first(tx)
        return self.then(tx, tx.all(name, **params))
