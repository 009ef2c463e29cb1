"""The durable store: jobs, their audit events, signatures and artifacts.

:class:`Store` names the verbs the engine needs; :class:`SqliteStore` is the embedded
implementation. Every state change and its audit event are one transaction, and
every update of a running job is fenced on (job_id, attempt, lease_owner), so a
stale worker cannot overwrite a newer outcome.

Writes go through one writer thread that owns the only writing connection. It takes
every operation waiting in its queue and runs them in one ``BEGIN IMMEDIATE``
transaction (group commit); an operation that raises is taken out and the others run
again in a fresh transaction, so it leaves nothing behind. While one commit is
syncing, the next batch gathers, so durability (``synchronous=FULL`` in WAL mode:
the WAL is fsynced at every commit, so an acknowledged job survives power loss)
costs one fsync per batch rather than per job. Reads use a separate aiosqlite
connection; WAL lets them run beside the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import queue
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import msgspec

from . import audit
from .errors import CasesignError, Conflict, NotFound, QueueFull, StoreUnavailable


def _load_statements() -> dict[str, str]:
    text = resources.files("casesignd").joinpath("sql/queries.sql").read_text("utf-8")
    out: dict[str, str] = {}
    name = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name: "):
            if name:
                out[name] = "\n".join(lines).strip()
            name, lines = line.removeprefix("-- name: ").strip(), []
        elif name and not line.startswith("--"):
            lines.append(line)
    if name:
        out[name] = "\n".join(lines).strip()
    return out


def _migrations() -> list[tuple[int, str]]:
    files = resources.files("casesignd").joinpath("sql")
    found = []
    for entry in files.iterdir():
        stem = entry.name.split("_", 1)[0]
        if entry.name.endswith(".sql") and stem.isdigit():
            found.append((int(stem), entry.read_text("utf-8")))
    return sorted(found)


class Job(msgspec.Struct, kw_only=True):
    """A job row."""

    job_id: str
    tenant: str
    kind: str
    case_id: str | None
    idem_key: str
    fingerprint: str
    input: str
    input_digest: str
    version: str
    declared_bytes: int
    state: str
    attempt: int
    series: int
    failures: int
    lost_leases: int
    lease_owner: str | None
    lease_expires: float | None
    created_at: float
    admitted_at: float
    admission_ms: float
    queued_since: float | None
    claimed_at: float | None
    first_claimed_at: float | None
    finished_at: float | None
    next_attempt_at: float
    queue_wait_ms: float
    processing_ms: float
    result: str | None
    error_category: str | None
    error_code: str | None
    correlation_id: str
    updated_at: float

    @property
    def lease(self) -> Lease:
        return Lease(self.job_id, self.attempt, self.lease_owner or "")

    def input_dict(self) -> dict[str, Any]:
        return msgspec.json.decode(self.input)

    def result_dict(self) -> dict[str, Any] | None:
        return msgspec.json.decode(self.result) if self.result else None


def _job(row: Any) -> Job:
    return Job(**dict(row))


@dataclass(frozen=True)
class Lease:
    """What fences a running job's updates."""

    job_id: str
    attempt: int
    owner: str


@dataclass(frozen=True)
class NewJob:
    """A validated, normalized job on its way into the store."""

    tenant: str
    kind: str
    case_id: str | None
    idem_key: str
    fingerprint: str
    input: str  # canonical JSON
    input_digest: str
    version: str
    declared_bytes: int
    created_at: float  # when the request arrived
    correlation_id: str


@dataclass
class Flight:
    """A kiosk request on its way into the store in one write (``record_flight``)."""

    new: NewJob
    job_id: str
    actor: str
    owner: str
    lease_s: float
    admitted_at: float
    claimed_at: float
    token: object = field(default_factory=object)
    # (sig_key, artifact, signed event's detail) when the request signed or reused one
    signature: tuple[str, dict[str, Any], dict[str, Any] | None] | None = None
    # ("finish", (result,)), ("retry", (code, delay_s, detail, counts)) or
    # ("fail", (category, code, detail))
    outcome: tuple[str, tuple[Any, ...]] = ("finish", ({},))
    # The result's bytes when they are kept in the store (artifact_data), not as a file
    inline: bytes | None = None
    # persist_flight was asked to write it as running (the request passed its
    # deadline): from then on its record looks for that row, in whatever order the
    # writer takes the two
    persisted: bool = False


def _in_progress() -> Conflict:
    return Conflict("the first request with this key is still running", code="in_progress",
                    headers={"Retry-After": "1"})


class IdempotencyKeyReused(CasesignError):
    code = "idempotency_key_reused"
    status = 422


class Store(Protocol):
    """The verbs the engine needs. Another engine implements the same verbs and runs
    the same contract tests (tests/unit/test_store_contract.py)."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int) -> tuple[Job, bool]: ...
    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None: ...
    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None: ...
    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]: ...
    async def finish(self, lease: Lease, result: dict[str, Any]) -> Job | None: ...
    async def retry_later(self, lease: Lease, code: str, delay_s: float, detail: dict[str, Any],
                          counts: bool = True) -> Job | None: ...
    async def fail(self, lease: Lease, category: str, code: str, detail: dict[str, Any]) -> Job | None: ...
    async def release(self, lease: Lease) -> Job | None: ...
    async def reclaim_expired(self, *, max_lost: int, everything: bool = False) -> list[Job]: ...
    async def promote_due(self) -> list[Job]: ...
    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job: ...
    async def replay(self, tenant: str, job_id: str, actor: str) -> Job: ...
    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None: ...
    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]: ...
    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None: ...
    async def get_job(self, tenant: str, job_id: str) -> Job | None: ...
    async def list_jobs(self, tenant: str, states: list[str] | None, limit: int, cursor: str | None) -> tuple[list[Job], str | None]: ...
    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]: ...
    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None: ...
    async def artifact_data(self, artifact_id: str) -> bytes | None: ...
    # The kiosk path: a request's job written once, when done (see Flight).
    async def reserve(self, tenant: str, idem_key: str, sig_key: str,
                      token: object) -> tuple[Job | None, dict[str, Any] | None]: ...
    def unreserve(self, tenant: str, idem_key: str, token: object) -> None: ...
    async def record_flight(self, flight: Flight) -> Job | None: ...
    async def persist_flight(self, flight: Flight) -> Job: ...
    async def stats(self) -> dict[str, Any]: ...
    async def ping(self) -> None: ...


_id_lock = threading.Lock()
_id_last = [0, 0]
_id_random = random.Random(secrets.token_bytes(32))


def random_hex(n_bytes: int) -> str:
    """Random hex for ids that must not collide but need not be secret (a correlation
    id): no system call, unlike ``secrets``."""
    return f"{_id_random.getrandbits(8 * n_bytes):0{2 * n_bytes}x}"


def new_id(prefix: str, now: float) -> str:
    """A time-ordered id: 12 hex digits of milliseconds and 4 of a counter (so ids made
    in the same millisecond still sort in order), then 12 random hex digits."""
    ms = int(now * 1000)
    with _id_lock:
        if ms <= _id_last[0]:
            ms, seq = _id_last[0], _id_last[1] + 1
        else:
            seq = 0
        _id_last[:] = [ms, seq]
    # Ids need to be unique, not secret (every read is checked against the tenant):
    # a seeded generator saves a system call per id on the writer's hot path.
    return f"{prefix}_{ms:012x}{seq & 0xFFFF:04x}{_id_random.getrandbits(48):012x}"


class _Tx:
    """One operation's view of the writer's transaction, with the audit chain head."""

    def __init__(self, conn: sqlite3.Connection, q: dict[str, str], chain: list[Any], now: float):
        self.conn = conn
        self.q = q
        self.chain = chain  # [seq, hash], shared with the writer
        self.now = now
        # Chained here, inserted together by flush() when the operation ends: each
        # statement hands the GIL back and forth with the event loop.
        self.events: list[dict[str, Any]] = []

    def one(self, name: str, **params: Any) -> sqlite3.Row | None:
        return self.conn.execute(self.q[name], params).fetchone()

    def all(self, name: str, **params: Any) -> list[sqlite3.Row]:
        return self.conn.execute(self.q[name], params).fetchall()

    def event(
        self, job: Job, type: str, actor: str, detail: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> None:
        seq = self.chain[0] + 1
        ev = {
            "event_id": new_id("evt", self.now),
            "seq": seq,
            "job_id": job.job_id,
            "tenant": job.tenant,
            "case_id": job.case_id,
            "type": type,
            "actor": actor,
            "at": audit.rfc3339(self.now),
            "attempt": job.attempt if attempt is None else attempt,
            "input_digest": job.input_digest,
            "policy_version": job.version,
            "detail": audit.canonical(detail or {}).decode(),
            "prev_hash": self.chain[1],
        }
        ev["hash"] = audit.event_hash(ev)
        self.events.append(ev)
        self.chain[0], self.chain[1] = seq, ev["hash"]

    def flush(self) -> None:
        """Insert the operation's events (no statement of an operation reads them)."""
        if self.events:
            self.conn.executemany(self.q["insert_event"], self.events)
            self.events.clear()


Op = Callable[[_Tx], Any]


class _Writer:
    """The one writing connection, on its own thread, committing in groups."""

    MAX_BATCH = 512

    def __init__(self, path: Path, busy_timeout_ms: int, clock: Callable[[], float]):
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.statements = _load_statements()
        self.chain: list[Any] = [0, audit.GENESIS]
        self.batches = 0
        self.thread = threading.Thread(target=self._run, name="casesignd-store-writer", daemon=True)
        self.ready: asyncio.Future[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        self.ready = loop.create_future()
        self.loop = loop
        self.thread.start()
        return self.ready

    def submit(self, op: Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.q.put((op, fut, loop))
        return fut

    def stop(self) -> None:
        self.q.put(None)
        self.thread.join(timeout=30)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: the WAL is fsynced at every commit, so an acknowledged job is on disk.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # The checkpointer copies the WAL into the database from its own thread; the
        # writer checkpoints only if that falls far behind.
        conn.execute(f"PRAGMA wal_autocheckpoint = {_Checkpointer.WRITER_PAGES}")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version, script in _migrations():
            if version > current:
                conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")

    @staticmethod
    def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    @classmethod
    def _resolve_all(cls, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
        for fut, result, error in outcomes:
            cls._resolve(fut, result, error)

    def _run(self) -> None:
        try:
            conn = self._connect()
            self._migrate(conn)
            head = conn.execute(self.statements["chain_head"]).fetchone()
            if head:
                self.chain = [head["seq"], head["hash"]]
        except BaseException as e:  # noqa: BLE001 - handed to the opener
            self.loop.call_soon_threadsafe(self._resolve, self.ready, None, e)
            return
        self.loop.call_soon_threadsafe(self._resolve, self.ready, None, None)
        while True:
            item = self.q.get()
            if item is None:
                break
            batch = [item]
            stop = False
            while len(batch) < self.MAX_BATCH:
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(conn, batch)
            if stop:
                break
        conn.close()

    def _deliver(self, outcomes: list[tuple[Any, Any, BaseException | None]]) -> None:
        # One wake-up of each event loop per batch, not one per operation.
        by_loop: dict[Any, list[Any]] = {}
        for (_op, fut, loop), result, error in outcomes:
            by_loop.setdefault(loop, []).append((fut, result, error))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(self._resolve_all, items)

    def _commit(self, conn: sqlite3.Connection, batch: list[Any]) -> None:
        """Run a batch in one transaction. An operation that raises is taken out and the
        rest run again from a clean transaction: no savepoint per operation on the
        common path, and a failed operation never leaves half its writes behind."""
        done: list[tuple[Any, Any, BaseException | None]] = []
        pending = list(batch)
        while pending:
            start_chain = list(self.chain)
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                err = StoreUnavailable("the job store cannot take writes", detail={"sqlite": str(e)})
                done.extend((item, None, err) for item in pending)
                break
            now = self.clock()
            results: list[Any] = []
            failed: int | None = None
            failure: BaseException | None = None
            for i, (op, _fut, _loop) in enumerate(pending):
                try:
                    tx = _Tx(conn, self.statements, self.chain, now)
                    results.append(op(tx))
                    tx.flush()
                except BaseException as e:  # noqa: BLE001 - each op's failure is its own
                    failed, failure = i, e
                    break
            if failed is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                self.chain[:] = start_chain
                if isinstance(failure, sqlite3.Error):
                    failure = StoreUnavailable("the job store cannot take writes",
                                               detail={"sqlite": str(failure)})
                done.append((pending[failed], None, failure))
                del pending[failed]
                continue
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                self.chain[:] = start_chain
                err = StoreUnavailable("the job store cannot take writes", detail={"sqlite": str(e)})
                done.extend((item, None, err) for item in pending)
                break
            done.extend((item, r, None) for item, r in zip(pending, results, strict=True))
            break
        self.batches += 1
        self._deliver(done)


class _Checkpointer:
    """Copies committed WAL frames into the database file, off the writer's thread.

    SQLite's automatic checkpoint runs inside the commit that crosses the threshold,
    so one commit in a thousand pages would carry the copy and an fsync of the
    database, and every operation queued behind it would wait. A PASSIVE checkpoint
    from another connection runs beside the writer and never blocks it; a page that
    many commits touched is copied once per pass."""

    INTERVAL_S = 0.25
    WRITER_PAGES = 20000  # the writer's own checkpoint, only if this falls behind

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="casesignd-store-checkpoint",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        except sqlite3.Error:
            return  # the writer checkpoints by itself
        with contextlib.closing(conn):
            while not self._stop.wait(self.INTERVAL_S):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


# Below this much free space on the store's file system the store reports itself
# unwritable (readiness): a commit needs room for its WAL frames (4 KiB pages).
MIN_FREE_BYTES = 256 * 1024


class SqliteStore:
    """The embedded store: one SQLite file in WAL mode."""

    def __init__(
        self, path: Path, *, busy_timeout_ms: int = 5000, clock: Callable[[], float] = time.time,
        exclusive: bool = True,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.exclusive = exclusive
        self._writer = _Writer(self.path, busy_timeout_ms, clock)
        self._checkpointer = _Checkpointer(self.path, busy_timeout_ms)
        self._reader: aiosqlite.Connection | None = None
        # Kiosk requests' idempotency keys (key -> token) and the number of admissions
        # under way per key; both touched on the event loop only.
        self._reserved: dict[tuple[str, str], object] = {}
        self._admitting: dict[tuple[str, str], int] = {}
        self._lock_fd: int | None = None
        self.q = self._writer.statements

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Take the store's lock, apply migrations, and open the reader."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.exclusive:
            # One daemon per store: it may then treat every lease it finds at start-up
            # as left behind by a dead process and reclaim it at once.
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreUnavailable(f"another casesignd process is using {self.path}") from None
            self._lock_fd = fd
        await self._writer.start(asyncio.get_running_loop())
        self._checkpointer.start()
        self._reader = await aiosqlite.connect(self.path)
        self._reader.row_factory = aiosqlite.Row
        await self._reader.execute("PRAGMA query_only = 1")

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        if self._writer.thread.is_alive():
            await asyncio.to_thread(self._checkpointer.stop)
            await asyncio.to_thread(self._writer.stop)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _write(self, op: Op) -> Any:
        return await self._writer.submit(op)

    async def _rows(self, name: str, **params: Any) -> list[Any]:
        assert self._reader is not None
        try:
            # One call on the reader's thread that steps the statement to the end and
            # closes it: interleaved open cursors would keep one read transaction open
            # across requests, and with it an old WAL snapshot (a just-acknowledged job
            # would read as missing).
            return list(await self._reader.execute_fetchall(self.q[name], params))
        except sqlite3.Error as e:
            raise StoreUnavailable("the job store cannot be read", detail={"sqlite": str(e)}) from e

    @property
    def commit_batches(self) -> int:
        return self._writer.batches

    # --- writes ----------------------------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """Store a job durably, or return the job an identical request made before.

        Returns (job, created). Raises IdempotencyKeyReused when the key was used for
        a different request, QueueFull past the queue depth, Conflict ``in_progress``
        while a kiosk request holds the key."""

        key = (new.tenant, new.idem_key)
        if key in self._reserved:
            raise _in_progress()
        self._admitting[key] = self._admitting.get(key, 0) + 1
        try:
            return await self._write(lambda tx: self._admit(tx, new, actor, max_queue_depth))
        finally:
            if self._admitting[key] <= 1:
                del self._admitting[key]
            else:
                self._admitting[key] -= 1

    def _admit(self, tx: _Tx, new: NewJob, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """The admission itself."""
        row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
        if row is not None:
            job = _job(row)
            if job.fingerprint != new.fingerprint or job.kind != new.kind:
                raise IdempotencyKeyReused(
                    "this idempotency key was used for a different request",
                    field="Idempotency-Key" if new.idem_key.startswith("key:") else None,
                )
            return job, False
        depth = tx.conn.execute(tx.q["queue_depth"]).fetchone()[0]
        if depth >= max_queue_depth:
            raise QueueFull("the queue is full; retry later", headers={"Retry-After": "5"})
        return self._insert_job(tx, new, actor, new_id("job", new.created_at), tx.now), True

    @staticmethod
    def _insert_job(tx: _Tx, new: NewJob, actor: str, job_id: str, now: float) -> Job:
        """The job row, admitted at ``now`` (the kiosk path gives its own clock)."""
        admission_ms = max(0.0, (now - new.created_at) * 1000.0)
        params = {**new.__dict__, "job_id": job_id, "now": now, "admission_ms": admission_ms}
        try:
            job = _job(tx.one("insert_job", **params))
        except sqlite3.IntegrityError:
            # Only a kiosk flight inserts without a lookup; its key is held, so another
            # row with the key is an admission under way.
            raise _in_progress() from None
        tx.event(job, "admitted", actor, {"kind": job.kind, "declared_bytes": job.declared_bytes})
        return job

    # --- the kiosk path: one write per request --------------------------------------

    async def reserve(self, tenant: str, idem_key: str, sig_key: str, token: object
                      ) -> tuple[Job | None, dict[str, Any] | None]:
        """Hold ``idem_key`` for a kiosk request that writes its job only when done.

        Returns (the job the key already names, None), or (None, the signature recorded
        for ``sig_key`` if any) with the key held: until :meth:`record_flight` or
        :meth:`unreserve`, an admission with the key is answered ``in_progress``.

        The key is held before the store is read, on the event loop, where every
        admission starts: an admission of the key is then under way (counted, so this
        is ``in_progress``), or committed (its row is read here), or later (and meets
        the hold)."""
        key = (tenant, idem_key)
        if self._reserved.get(key, token) is not token or key in self._admitting:
            raise _in_progress()
        self._reserved[key] = token
        try:
            found = (await self._rows("kiosk_lookup", tenant=tenant, idem_key=idem_key,
                                      sig_key=sig_key))[0]
            if found["job_id"] is not None:
                self.unreserve(tenant, idem_key, token)
                rows = await self._rows("get_job_any", job_id=found["job_id"])
                return _job(rows[0]), None
        except BaseException:
            self.unreserve(tenant, idem_key, token)
            raise
        if found["artifact_id"] is None:
            return None, None
        return None, {k: found[k] for k in ("artifact_id", "sha256", "size")}

    def unreserve(self, tenant: str, idem_key: str, token: object) -> None:
        if self._reserved.get((tenant, idem_key)) is token:
            del self._reserved[(tenant, idem_key)]

    async def record_flight(self, flight: Flight) -> Job | None:
        """Write a kiosk request's whole job in one transaction: admitted, claimed, the
        signature (if any) and its outcome, with the same rows and events as a queued
        job and the flight's own clocks. A job :meth:`persist_flight` wrote earlier is
        carried on instead. None when its lease was lost meanwhile."""

        def op(tx: _Tx) -> Job | None:
            kind, args = flight.outcome
            if kind == "finish" and not flight.persisted:
                return self._flight_succeeded(tx, flight, *args)
            row = tx.one("get_job_any", job_id=flight.job_id) if flight.persisted else None
            job = _job(row) if row is not None else self._flight_job(tx, flight)
            self._flight_signature(tx, flight, job)
            return self._outcome_op(kind, job.lease, *args)(tx)

        try:
            return await self._write(op)
        finally:
            # Committed (the row answers from now on) or failed: the key is free.
            self.unreserve(flight.new.tenant, flight.new.idem_key, flight.token)

    async def persist_flight(self, flight: Flight) -> Job:
        """Write a kiosk request's job as running (admitted and claimed) so that it
        outlives a crash: the request passed its deadline and its work goes on."""

        def op(tx: _Tx) -> Job:
            row = tx.one("get_job_any", job_id=flight.job_id)
            return _job(row) if row is not None else self._flight_job(tx, flight)

        flight.persisted = True  # before the write: see Flight.persisted
        return await self._write(op)

    def _flight_succeeded(self, tx: _Tx, flight: Flight, result: dict[str, Any]) -> Job:
        """The common case at once: the row that an admission, a claim and a finish
        leave (insert_job, claim_job, finish), in one statement, and their events."""
        new = flight.new
        try:
            job = _job(tx.one(
                "insert_flight_succeeded", **new.__dict__, job_id=flight.job_id,
                admitted_at=flight.admitted_at, claimed_at=flight.claimed_at, now=tx.now,
                admission_ms=max(0.0, (flight.admitted_at - new.created_at) * 1000.0),
                result=audit.canonical(result).decode()))
        except sqlite3.IntegrityError:
            raise _in_progress() from None  # see _insert_job
        worker = f"worker:{flight.owner}"
        tx.event(job, "admitted", flight.actor,
                 {"kind": job.kind, "declared_bytes": job.declared_bytes}, attempt=0)
        tx.event(job, "claimed", worker, {"series": job.series, "path": "kiosk"})
        self._flight_signature(tx, flight, msgspec.structs.replace(job, lease_owner=flight.owner))
        tx.event(job, "succeeded", worker, {"result": result})
        self._put_artifact(tx, job, result.get("artifact"))
        return job

    def _flight_signature(self, tx: _Tx, flight: Flight, job: Job) -> None:
        if flight.signature is None:
            return
        sig_key, artifact, signed = flight.signature
        if flight.inline is not None:
            # With the signature, whatever becomes of this attempt: a recorded
            # signature always has its bytes.
            tx.conn.execute(tx.q["put_artifact_data"], {
                "artifact_id": artifact["artifact_id"], "data": flight.inline})
        self._record_signature(tx, job, sig_key, artifact, signed)

    def _flight_job(self, tx: _Tx, flight: Flight) -> Job:
        # The rows keep the flight's clocks; the events are dated when written.
        # The flight holds its key (reserve), so no job row names it: no lookup.
        job = self._insert_job(tx, flight.new, flight.actor, flight.job_id, flight.admitted_at)
        # The lease runs from now: the claim's own time is the flight's.
        lease_s = flight.lease_s + max(0.0, tx.now - flight.claimed_at)
        job = _job(tx.one("claim_job", job_id=job.job_id, owner=flight.owner,
                          now=flight.claimed_at, lease_s=lease_s))
        tx.event(job, "claimed", f"worker:{flight.owner}", {"series": job.series, "path": "kiosk"})
        return job

    async def claim(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str]) -> Job | None:
        """Take the lease of the oldest due queued job that fits the byte budget."""
        kinds_json = msgspec.json.encode(kinds).decode()

        def op(tx: _Tx) -> Job | None:
            row = tx.one("claim_one", owner=owner, now=tx.now, lease_s=lease_s,
                         budget=budget_bytes, kinds=kinds_json)
            if row is None:
                return None
            job = _job(row)
            tx.event(job, "claimed", f"worker:{owner}",
                     {"series": job.series, "queue_wait_ms": round(job.queue_wait_ms, 3)})
            return job

        return await self._write(op)

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Job | None:
        """Take the lease of one queued job by id (None when it is not queued)."""

        def op(tx: _Tx) -> Job | None:
            row = tx.one("claim_job", job_id=job_id, owner=owner, now=tx.now, lease_s=lease_s)
            if row is None:
                return None
            job = _job(row)
            tx.event(job, "claimed", f"worker:{owner}", {"series": job.series, "path": "kiosk"})
            return job

        return await self._write(op)

    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]:
        """Extend leases; returns the ones that are no longer held."""

        def op(tx: _Tx) -> list[Lease]:
            lost = []
            for lease in leases:
                cur = tx.conn.execute(tx.q["renew"], {
                    "job_id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner,
                    "now": tx.now, "lease_s": lease_s})
                if cur.rowcount == 0:
                    lost.append(lease)
            return lost

        return await self._write(op) if leases else []

    def _fenced(self, name: str, lease: Lease, event: str, detail: dict[str, Any],
                **params: Any) -> Op:
        def op(tx: _Tx) -> Job | None:
            row = tx.one(name, job_id=lease.job_id, attempt=lease.attempt, owner=lease.owner,
                         now=tx.now, **params)
            if row is None:
                # A stale worker: its lease expired and the job moved on. Record the lost
                # attempt against the job and drop the result.
                cur = tx.one("get_job_any", job_id=lease.job_id)
                if cur is not None:
                    tx.event(_job(cur), "stale_result_dropped", f"worker:{lease.owner}",
                             {"wanted": event}, attempt=lease.attempt)
                return None
            job = _job(row)
            tx.event(job, event, f"worker:{lease.owner}", detail)
            return job
        return op

    async def finish(self, lease: Lease, result: dict[str, Any]) -> Job | None:
        """running → succeeded. None when the lease was no longer held."""
        return await self._write(self._outcome_op("finish", lease, result))

    async def retry_later(self, lease: Lease, code: str, delay_s: float, detail: dict[str, Any],
                          counts: bool = True) -> Job | None:
        """running → retry_wait, due after ``delay_s``. With ``counts`` False (a wait for
        a shared resource) the attempt does not count against the job's budget."""
        return await self._write(self._outcome_op("retry", lease, code, delay_s, detail, counts))

    async def fail(self, lease: Lease, category: str, code: str, detail: dict[str, Any]) -> Job | None:
        """running → failed (the dead letter)."""
        return await self._write(self._outcome_op("fail", lease, category, code, detail))

    def _outcome_op(self, kind: str, lease: Lease, *args: Any) -> Op:
        """The fenced write that ends an attempt: ``finish`` (result), ``retry`` (code,
        delay_s, detail, counts) or ``fail`` (category, code, detail)."""
        if kind == "finish":
            (result,) = args
            artifact = result.get("artifact")

            def finish(tx: _Tx) -> Job | None:
                job = self._fenced("finish", lease, "succeeded", {"result": result},
                                   result=audit.canonical(result).decode())(tx)
                if job is not None:
                    self._put_artifact(tx, job, artifact)
                return job

            return finish
        if kind == "retry":
            code, delay_s, detail, counts = args
            detail = {**detail, "code": code, "delay_s": round(delay_s, 3)}
            if not counts:
                detail["waiting"] = True

            def retry(tx: _Tx) -> Job | None:
                return self._fenced("retry_later", lease, "retry_scheduled", detail, code=code,
                                    next_at=tx.now + delay_s, count=1 if counts else 0)(tx)

            return retry
        category, code, detail = args
        return self._fenced("fail", lease, "failed", {**detail, "category": category, "code": code},
                            category=category, code=code)

    @staticmethod
    def _put_artifact(tx: _Tx, job: Job, artifact: dict[str, Any] | None) -> None:
        if artifact:
            tx.conn.execute(tx.q["put_artifact"], {
                **{k: artifact[k] for k in ("artifact_id", "sha256", "size", "media_type")},
                "tenant": job.tenant, "job_id": job.job_id, "now": tx.now})

    async def release(self, lease: Lease) -> Job | None:
        """running → queued at shutdown, so that a restart resumes the job at once."""
        return await self._write(self._fenced("release", lease, "released", {}))

    async def reclaim_expired(self, *, max_lost: int, everything: bool = False) -> list[Job]:
        """Requeue running jobs whose lease expired (or, at start-up under the store lock,
        every running job). A job that lost ``max_lost`` leases fails as ``lost``."""

        def op(tx: _Tx) -> list[Job]:
            rows = tx.all("all_running") if everything else tx.all("expired_leases", now=tx.now, cap=500)
            out = []
            for row in rows:
                old = _job(row)
                lost_out = old.lost_leases + 1 >= max_lost
                name = "fail_lost" if lost_out else "reclaim"
                new_row = tx.one(name, job_id=old.job_id, attempt=old.attempt, now=tx.now)
                if new_row is None:
                    continue
                job = _job(new_row)
                tx.event(job, "lease_expired", "system",
                         {"owner": old.lease_owner, "lost_leases": job.lost_leases,
                          "at_start": everything}, attempt=old.attempt)
                if lost_out:
                    tx.event(job, "failed", "system", {"category": "lost", "code": "lease_lost"})
                out.append(job)
            return out

        return await self._write(op)

    async def promote_due(self) -> list[Job]:
        """retry_wait → queued for jobs whose backoff has passed."""

        def op(tx: _Tx) -> list[Job]:
            out = []
            for row in tx.all("due_retries", now=tx.now, cap=500):
                new_row = tx.one("requeue", job_id=row["job_id"], now=tx.now)
                if new_row is not None:
                    job = _job(new_row)
                    tx.event(job, "requeued", "system", {})
                    out.append(job)
            return out

        return await self._write(op)

    async def cancel(self, tenant: str, job_id: str, actor: str) -> Job:
        def op(tx: _Tx) -> Job:
            row = tx.one("cancel", job_id=job_id, tenant=tenant, now=tx.now)
            if row is None:
                if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
                    raise NotFound("no such job", code="job_not_found")
                raise Conflict("only a queued job that no worker holds can be canceled",
                               code="not_cancelable")
            job = _job(row)
            tx.event(job, "canceled", actor, {})
            return job

        return await self._write(op)

    async def replay(self, tenant: str, job_id: str, actor: str) -> Job:
        def op(tx: _Tx) -> Job:
            row = tx.one("replay", job_id=job_id, tenant=tenant, now=tx.now)
            if row is None:
                if tx.one("get_job", job_id=job_id, tenant=tenant) is None:
                    raise NotFound("no such job", code="job_not_found")
                raise Conflict("only a failed job can be retried", code="not_failed")
            job = _job(row)
            tx.event(job, "replayed", actor, {"series": job.series})
            return job

        return await self._write(op)

    async def append_event(self, job: Job, type: str, actor: str, detail: dict[str, Any]) -> None:
        """An event that changes no state (e.g. ``signed``), chained like the others."""
        await self._write(lambda tx: tx.event(job, type, actor, detail))

    async def record_signature(self, job: Job, sig_key: str, artifact: dict[str, Any],
                               signed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the signature for ``sig_key`` once; the recorded one wins. With
        ``signed``, the ``signed`` event (that detail) is written in the same
        transaction when this call records the signature: a crash between two writes
        would leave a recorded signature that the audit trail never calls signed."""

        return await self._write(lambda tx: self._record_signature(tx, job, sig_key, artifact, signed))

    @staticmethod
    def _record_signature(tx: _Tx, job: Job, sig_key: str, artifact: dict[str, Any],
                          signed: dict[str, Any] | None) -> dict[str, Any]:
        params = {"tenant": job.tenant, "sig_key": sig_key, "artifact_id": artifact["artifact_id"],
                  "sha256": artifact["sha256"], "size": artifact["size"], "job_id": job.job_id,
                  "now": tx.now}
        inserted = tx.conn.execute(tx.q["put_signature"], params).rowcount
        if not inserted:  # recorded before: that record stands
            return dict(tx.one("get_signature", tenant=job.tenant, sig_key=sig_key))
        row = {k: v for k, v in params.items() if k != "now"} | {"created_at": tx.now}
        tx.event(job, "signature_recorded", f"worker:{job.lease_owner}",
                 {"artifact_id": row["artifact_id"], "sha256": row["sha256"],
                  "sig_key": hashlib.sha256(sig_key.encode()).hexdigest()})
        if signed is not None:
            tx.event(job, "signed", f"worker:{job.lease_owner}",
                     {**signed, "artifact_id": row["artifact_id"], "sha256": row["sha256"]})
        return row

    async def ping(self) -> None:
        """A write round trip: raises StoreUnavailable when the store cannot take writes.

        A transaction that changes nothing writes nothing, so it still succeeds on a
        full disk while every real write fails: the free space of the store's file
        system is checked as well."""
        await self._write(lambda tx: tx.conn.execute("SELECT 1").fetchone())
        st = await asyncio.to_thread(os.statvfs, self.path.parent)
        if st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
            raise StoreUnavailable("the job store's disk is full",
                                   detail={"reason": "disk_full", "path": str(self.path.parent)})

    # --- reads -----------------------------------------------------------------------

    async def get_signature(self, tenant: str, sig_key: str) -> dict[str, Any] | None:
        rows = await self._rows("get_signature", tenant=tenant, sig_key=sig_key)
        return dict(rows[0]) if rows else None

    async def get_job(self, tenant: str, job_id: str) -> Job | None:
        rows = await self._rows("get_job", tenant=tenant, job_id=job_id)
        return _job(rows[0]) if rows else None

    async def list_jobs(
        self, tenant: str, states: list[str] | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """Newest first; the cursor is the last job id of the previous page."""
        cursor = cursor or "job_~"  # "~" sorts after every hex digit
        if states:
            rows = await self._rows("list_jobs_state", tenant=tenant, cursor=cursor, limit=limit + 1,
                                    states=msgspec.json.encode(states).decode())
        else:
            rows = await self._rows("list_jobs", tenant=tenant, cursor=cursor, limit=limit + 1)
        jobs = [_job(r) for r in rows[:limit]]
        nxt = jobs[-1].job_id if len(rows) > limit else None
        return jobs, nxt

    async def events(self, tenant: str, job_id: str) -> list[dict[str, Any]]:
        rows = await self._rows("job_events", tenant=tenant, job_id=job_id)
        out = []
        for r in rows:
            ev = {k: r[k] for k in audit.FIELDS}
            ev["detail"] = msgspec.json.decode(ev["detail"])
            out.append(ev)
        return out

    async def artifact_data(self, artifact_id: str) -> bytes | None:
        """The bytes of an artifact kept in the store (None: it is a file, or unknown)."""
        rows = await self._rows("get_artifact_data", artifact_id=artifact_id)
        return bytes(rows[0]["data"]) if rows else None

    async def get_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        rows = await self._rows("get_artifact", artifact_id=artifact_id)
        return dict(rows[0]) if rows else None

    async def stats(self) -> dict[str, Any]:
        counts = {r["state"]: r["n"] for r in await self._rows("state_counts")}
        oldest = (await self._rows("oldest_queued"))[0][0]
        age = max(0.0, self.clock() - oldest) if oldest else 0.0
        return {"states": counts, "oldest_queued_age_s": age}

