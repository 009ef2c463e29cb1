"""The embedded store: one SQLite file in WAL mode.

The verbs are the SQL stores' (:class:`~.verbs.SqlStore`); what is SQLite's own is
here: the store's file lock (one daemon per store), the admission, the claim, the
renewal and which jobs a sweep takes, over one writer. Writes go through the writer
thread (:mod:`casesignd.store.sqlite_writer`, group commit); reads use a separate
aiosqlite connection, which WAL lets run beside it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from casesignd.core.errors import StoreUnavailable
from casesignd.core.tenant_limits import TenantLimits
from casesignd.store.claims import ShownPauses, Turns, lanes_of, take_turns
from casesignd.store.records import Claimed, Job, KeyLocks, Lease, NewJob, new_id, row_job
from casesignd.store.sqlite_writer import Checkpointer, SqliteTx, Writer, truncate_wal
from casesignd.store.tenants import RunningRoom, check_admission
from casesignd.store.tx import Op
from casesignd.store.verbs import Expired, SqlStore, claimed, insert_job, queue_full, same_request

# Below this much free space on the store's file system the store reports itself
# unwritable (readiness): a commit needs room for its WAL frames (4 KiB pages).
MIN_FREE_BYTES = 256 * 1024
# How long a lookup on the event loop may wait for a lock (WAL readers take none but
# in a recovery); then it goes to the reader's thread.
POINT_BUSY_MS = 20


class SqliteStore(SqlStore):
    """The embedded store: one SQLite file in WAL mode."""

    def __init__(
        self, path: Path, *, busy_timeout_ms: int = 5000, clock: Callable[[], float] = time.time,
        exclusive: bool = True,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.turns = Turns()  # whose turn it is among the tenants (casesignd.store.claims)
        self.shown = ShownPauses()  # the pauses job resources show (casesignd.store.claims)
        self.exclusive = exclusive
        self._writer: Writer = Writer(self.path, busy_timeout_ms, clock)
        self._checkpointer = Checkpointer(self.path, busy_timeout_ms)
        self._busy_timeout_ms = busy_timeout_ms
        self._reader: aiosqlite.Connection | None = None
        self._point: sqlite3.Connection | None = None
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
        self._point = sqlite3.connect(self.path, isolation_level=None)
        self._point.row_factory = sqlite3.Row
        self._point.execute("PRAGMA query_only = 1")
        self._point.execute(f"PRAGMA busy_timeout = {POINT_BUSY_MS}")

    async def close(self) -> None:
        if self._point is not None:
            self._point.close()
            self._point = None
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        if self._writer.thread.is_alive():
            await asyncio.to_thread(self._checkpointer.stop)
            await asyncio.to_thread(self._writer.stop)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def migrate(self) -> int:
        """Apply the migrations and stop: the schema version. Refused while a daemon
        holds the store."""
        await self.open()
        try:
            return int((await self._rows("schema_version"))[0][0])
        finally:
            await self.close()

    async def _write(self, op: Op) -> Any:
        return await self._writer.submit(op)

    async def scrub(self) -> None:
        """After an erasure, or a sweep that removed bytes the store kept: the WAL
        copied into the database and truncated, so that the removed rows' old page
        images are gone from it (``secure_delete`` zeroed them in the database)."""
        if not await asyncio.to_thread(truncate_wal, self.path, self._busy_timeout_ms):
            raise StoreUnavailable("the job store's WAL could not be truncated: a reader "
                                   "held it; the next sweep tries again")

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

    async def _one(self, name: str, **params: Any) -> list[Any]:
        """A lookup by key (a job, a signature, an artifact), read on the event loop:
        one indexed statement in WAL mode, which never waits for the writer, costs
        less than the two thread hand-offs of the reader. Stepped to its end, so no
        read transaction (and no old snapshot) outlives it. Anything unusual (the
        database busy in a recovery) goes to the reader instead."""
        if self._point is not None:
            try:
                return self._point.execute(self.q[name], params).fetchall()
            except sqlite3.Error:
                pass
        return await self._rows(name, **params)

    @staticmethod
    def _array(values: list[Any]) -> str:
        return msgspec.json.encode(values).decode()  # read by json_each

    # --- what is SQLite's own -------------------------------------------------------

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int,
                    limits: TenantLimits | None = None) -> tuple[Job, bool]:
        """Store a job durably, or return the job an identical request made before.

        Returns (job, created). Raises IdempotencyKeyReused when the key was used for
        a different request, QueueFull past the queue depth, and past the tenant's
        ``limits`` TenantQueueFull or RateLimited (casesignd.store.tenants)."""
        return await self._write(lambda tx: self._admit(tx, new, actor, max_queue_depth, limits))

    @staticmethod
    def _admit(tx: SqliteTx, new: NewJob, actor: str, max_queue_depth: int,
               limits: TenantLimits | None) -> tuple[Job, bool]:
        """The admission itself. Engine-specific: under the one writer the key is looked
        up first (PostgreSQL inserts first, in one pipelined statement)."""
        row = tx.one("find_idem", tenant=new.tenant, idem_key=new.idem_key)
        if row is not None:
            return same_request(row, new)
        depth = tx.one("queue_depth")
        if depth is None or depth[0] >= max_queue_depth:  # a count: one row, always
            raise queue_full()
        if limits is not None:
            check_admission(tx, new.tenant, limits)
        return insert_job(tx, new, actor, new_id("job", new.created_at), tx.now), True

    async def claim_batch(self, owner: str, lease_s: float, budget_bytes: int, kinds: list[str],
                          limit: int, *, running_limits: dict[str, int] | None = None
                          ) -> list[Claimed]:
        """Take the leases of up to ``limit`` due queued jobs that fit the byte budget
        together, the tenants taking turns (casesignd.store.claims), in one transaction,
        each with the signature recorded for its signature key; a tenant at its
        ``running_limits`` entry, counted in this transaction, is passed over
        (casesignd.store.tenants). Engine-specific: one statement per job, after a skip
        scan of the tenants (PostgreSQL's one statement does both and locks the jobs it
        takes)."""
        kinds_json = self._array(kinds)

        def op(tx: SqliteTx) -> list[Claimed]:
            budget = [budget_bytes]
            room = (RunningRoom.of(tx, running_limits, self._array(sorted(running_limits)))
                    if running_limits else None)

            def claim_lane(tenant: str, priority: int) -> Claimed | None:
                if room is not None and tenant in room.skip():
                    return None  # at its running limit: it drops out of this claim
                row = tx.one("claim_lane", owner=owner, now=tx.now, lease_s=lease_s,
                             budget=budget[0], kinds=kinds_json, tenant=tenant,
                             priority=priority)
                if row is None:
                    return None
                job = claimed(tx, row_job(row), owner)
                if room is not None:
                    room.took(job.tenant)
                budget[0] -= job.declared_bytes
                recorded = None
                if job.sig_key is not None:
                    sig = tx.one("get_signature", tenant=job.tenant, sig_key=job.sig_key)
                    recorded = dict(sig) if sig is not None else None
                return Claimed(job, recorded)

            return take_turns(self.turns, lanes_of(tx), limit, claim_lane)

        return await self._write(op)

    async def renew(self, leases: list[Lease], lease_s: float) -> list[Lease]:
        """Extend leases; returns the ones that are no longer held. Engine-specific: a
        statement per lease (PostgreSQL's one statement takes them all)."""

        def op(tx: SqliteTx) -> list[Lease]:
            return [lease for lease in leases
                    if not tx.run("renew", job_id=lease.job_id, attempt=lease.attempt,
                                  owner=lease.owner, now=tx.now, lease_s=lease_s)]

        return await self._write(op) if leases else []

    def _take_expired(self, tx: SqliteTx, max_lost: int, at_start_of: str | None
                      ) -> list[Expired]:
        """Running jobs whose lease expired, or at start-up every running job: under
        the store lock no other daemon runs."""
        if at_start_of is not None:
            rows = tx.all("all_running")
        else:
            rows = tx.all("expired_leases", now=tx.now, cap=500)
        out = []
        for row in rows:
            old = row_job(row)
            lost_out = old.lost_leases + 1 >= max_lost
            new_row = tx.one("fail_lost" if lost_out else "reclaim", job_id=old.job_id,
                             attempt=old.attempt, now=tx.now)
            if new_row is not None:
                out.append(Expired(row_job(new_row), old.lease_owner, lost_out))
        return out

    def _take_due(self, tx: SqliteTx) -> list[Job]:
        out = []
        for row in tx.all("due_retries", now=tx.now, cap=500):
            new_row = tx.one("requeue", job_id=row["job_id"], now=tx.now)
            if new_row is not None:
                out.append(row_job(new_row))
        return out

    # One daemon per store: no key needs holding across daemons.
    key_locks: KeyLocks | None = None

    def announce(self) -> None:
        """One daemon per store: its own pool is woken in-process."""

    def on_announce(self, wake: Callable[[], None]) -> None:
        """One daemon per store: nobody else announces."""

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

    async def stats(self) -> dict[str, Any]:
        counts = {r["state"]: r["n"] for r in await self._rows("state_counts")}
        oldest = (await self._rows("oldest_queued"))[0][0]
        age = max(0.0, self.clock() - oldest) if oldest else 0.0
        return {"states": counts, "oldest_queued_age_s": age}
