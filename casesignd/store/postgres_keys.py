"""Signature keys held across the daemons of one PostgreSQL database.

A job holds its signature key from its look at the recorded signature until its own
is committed (:func:`casesignd.signcase.signing_lock`), so that daemons working on
jobs of one key at the same time never both sign it. A held key is a session-level
advisory lock on one connection per daemon, kept for that: the server frees every
lock of the session when it ends, however the daemon ends. A key that another daemon
holds is tried again until it is free; waits are rare (two jobs of one key at once)
and never tie up the connection. Once the key is held, the signature recorded for it
is read in the same round trip, by a statement that starts after the lock is taken,
so it sees what the last holder committed.

Session locks stack within a session: two holds of one key in one daemon would both
succeed. The in-process lock of :func:`~casesignd.signcase.signing_lock` comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .postgres_writer import unavailable

_FIRST_RETRY_S = 0.01
_MAX_RETRY_S = 0.2


class SignatureKeys:
    """Hold signature keys across daemons: ``async with keys.hold(tenant, sig_key) as
    recorded``. ``connect`` opens a connection of this daemon's own."""

    def __init__(self, connect: Callable[[], Awaitable[AsyncConnection[DictRow]]],
                 statements: dict[str, str]) -> None:
        self._connect = connect
        self.q = statements
        self._conn: AsyncConnection[DictRow] | None = None
        self._busy = asyncio.Lock()  # one statement at a time on the connection
        self._returning: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str, sig_key: str) -> AsyncIterator[dict[str, Any] | None]:
        """Hold ``sig_key`` of ``tenant``; yields the signature recorded for it (None)."""
        params = {"tenant": tenant, "sig_key": sig_key}
        wait_s = _FIRST_RETRY_S
        while True:
            attempt = asyncio.ensure_future(self._take(params))
            try:
                taken, recorded = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                # The statement goes on: a lock it takes is nobody's, and goes back.
                attempt.add_done_callback(lambda done: self._give_back_unused(done, params))
                raise
            if taken:
                break
            await asyncio.sleep(wait_s)
            wait_s = min(_MAX_RETRY_S, wait_s * 2)
        try:
            yield recorded
        finally:
            await asyncio.shield(self._give_back(params))

    async def close(self) -> None:
        async with self._busy:
            await self._drop()

    async def _take(self, params: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        async with self._busy:
            try:
                conn = await self._connection()
                async with conn.pipeline():
                    lock = await conn.execute(self.q["signature_key_lock"], params)
                    read = await conn.execute(self.q["get_signature"], params)
                taken = await lock.fetchone()
                recorded = await read.fetchone()
            except psycopg.Error as e:
                await self._drop()
                raise unavailable(e, "the job store cannot be reached") from e
        return bool(taken and taken["taken"]), dict(recorded) if recorded else None

    def _give_back_unused(self, attempt: asyncio.Future[Any], params: dict[str, Any]) -> None:
        if attempt.cancelled() or attempt.exception() is not None or not attempt.result()[0]:
            return
        task = asyncio.ensure_future(self._give_back(params))
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    async def _give_back(self, params: dict[str, Any]) -> None:
        async with self._busy:
            if self._conn is None:
                return  # the session ended, and its locks with it
            try:
                await self._conn.execute(self.q["signature_key_unlock"], params)
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
