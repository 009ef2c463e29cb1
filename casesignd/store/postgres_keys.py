"""Keys locked across the daemons of one PostgreSQL database: what in one daemon is a
lock in its memory.

- A signature key, locked by a job from its look at the recorded signature until its
  own is committed (:func:`casesignd.job_kinds.sign_case.signing_lock`), so that daemons
  working on jobs of one key at the same time never both sign it. A key another daemon
  has locked is tried again until it is free: waits are rare (two jobs of one key at
  once) and never tie up the connection. Once it is locked, the signature recorded for
  it is read in the same round trip, by a statement that starts after the lock is
  taken, so it sees what the last job to lock it committed.
- An idempotency key, locked by a kiosk request that writes its job only when it is
  done (:class:`casesignd.engine.reservations.KeyReservations`); an admission of the key
  on any daemon meets the lock and answers ``in_progress`` (``admit_job`` tries the same
  lock for its transaction), and a kiosk request meets an admission under way the same
  way.

Each locked key is a session-level advisory lock on one connection per daemon, kept for
that: the server frees every lock of the session when it ends, however the daemon
ends. Session locks stack within a session, so two locks of one key in one daemon
would both succeed: the in-process locks come first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from casesignd.store.postgres_writer import unavailable

_FIRST_RETRY_S = 0.01
_MAX_RETRY_S = 0.2
# The statements that take and give back each kind of key (sql/postgres/queries.sql).
_SIGNATURE = ("signature_key_lock", "signature_key_unlock")
_IDEMPOTENCY = ("idem_key_lock", "idem_key_unlock")


class AdvisoryKeyLocks:
    """Keys locked across daemons. ``connect`` opens a connection of this daemon's own."""

    def __init__(self, connect: Callable[[], Awaitable[AsyncConnection[DictRow]]],
                 statements: dict[str, str]) -> None:
        self._connect = connect
        self.q = statements
        self._conn: AsyncConnection[DictRow] | None = None
        self._busy = asyncio.Lock()  # one statement at a time on the connection
        self._returning: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def signature(self, tenant: str, sig_key: str) -> AsyncIterator[dict[str, Any] | None]:
        """Lock ``sig_key`` of ``tenant``, waiting while another daemon has it locked;
        yields the signature recorded for it (None)."""
        params = {"tenant": tenant, "sig_key": sig_key}
        wait_s = _FIRST_RETRY_S
        while True:
            taken, recorded = await self._try(_SIGNATURE, params, read="get_signature")
            if taken:
                break
            await asyncio.sleep(wait_s)
            wait_s = min(_MAX_RETRY_S, wait_s * 2)
        try:
            yield recorded
        finally:
            await asyncio.shield(self._give_back(_SIGNATURE[1], params))

    async def take_idempotency_key(self, tenant: str, idem_key: str) -> bool:
        """Lock ``idem_key`` of ``tenant`` if no daemon has it locked, nor admits it now."""
        taken, _ = await self._try(_IDEMPOTENCY, {"tenant": tenant, "idem_key": idem_key})
        return taken

    def give_back_idempotency_key(self, tenant: str, idem_key: str) -> None:
        """Let go of a key :meth:`take_idempotency_key` took (done in the background)."""
        self._in_background(self._give_back(_IDEMPOTENCY[1],
                                            {"tenant": tenant, "idem_key": idem_key}))

    async def close(self) -> None:
        async with self._busy:
            await self._drop()

    async def _try(self, statements: tuple[str, str], params: dict[str, Any],
                   read: str | None = None) -> tuple[bool, dict[str, Any] | None]:
        """Try the lock once (and read ``read`` after it): whether it was taken."""
        attempt = asyncio.ensure_future(self._take(statements[0], params, read))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The statement goes on: a lock it takes is nobody's, and goes back.
            attempt.add_done_callback(lambda done: self._unused(done, statements[1], params))
            raise

    async def _take(self, lock: str, params: dict[str, Any],
                    read: str | None) -> tuple[bool, dict[str, Any] | None]:
        async with self._busy:
            try:
                conn = await self._connection()
                async with conn.pipeline():
                    taken_cur = await conn.execute(self.q[lock], params)
                    read_cur = await conn.execute(self.q[read], params) if read else None
                taken = await taken_cur.fetchone()
                recorded = await read_cur.fetchone() if read_cur is not None else None
            except psycopg.Error as e:
                await self._drop()
                raise unavailable(e, "the job store cannot be reached") from e
        return bool(taken and taken["taken"]), dict(recorded) if recorded else None

    def _unused(self, attempt: asyncio.Future[Any], unlock: str, params: dict[str, Any]) -> None:
        if attempt.cancelled() or attempt.exception() is not None or not attempt.result()[0]:
            return
        self._in_background(self._give_back(unlock, params))

    def _in_background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    async def _give_back(self, unlock: str, params: dict[str, Any]) -> None:
        async with self._busy:
            if self._conn is None:
                return  # the session ended, and its locks with it
            try:
                await self._conn.execute(self.q[unlock], params)
            except psycopg.Error:
                await self._drop()

    async def _connection(self) -> AsyncConnection[DictRow]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
        return self._conn

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
            self._conn = None
