"""A daemon's own session on PostgreSQL: the lock on its node name, and its wake-ups.

One connection per daemon, for the daemon's life:

- it holds a session advisory lock on the node's name (``node_lock``), so a second
  live daemon of the same name is refused, and a node that starts knows that every
  lease of its name was left by its dead predecessor. The server frees the lock when
  the session ends, however it ends; :meth:`NodeSession.check` then takes the name
  again, or reports that another daemon took it;
- with ``[store] notify``, it LISTENs on :data:`CHANNEL`, and a notification wakes
  this node's pool at once instead of at its next poll.

:class:`Announcer` sends that notification after jobs were queued, debounced: NOTIFY
takes a database-wide lock at commit, so a burst of admissions sends one or two, not
one each. It uses a reader connection, never the writer's transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from casesignd.core.errors import StoreUnavailable
from casesignd.core.logs import log_event
from casesignd.store.postgres_writer import unavailable

log = logging.getLogger("casesignd.store")

CHANNEL = "casesignd_jobs"
# How long one wait for a notification lasts before the session is looked at again.
_WAIT_S = 5.0
# A name found taken is tried again this many times, this far apart, before refusal.
_TAKE_TRIES = 20
_TAKE_PAUSE_S = 0.1

Connect = Callable[[], Awaitable[AsyncConnection[DictRow]]]


class NodeSession:
    """The node's name, held for the daemon's life; with ``listen``, its wake-ups."""

    def __init__(self, connect: Connect, node: str, lock_sql: str, *, listen: bool) -> None:
        self._connect = connect
        self.node = node
        self._lock_sql = lock_sql
        self._listen = listen
        self._conn: AsyncConnection[DictRow] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._wake: Callable[[], None] = lambda: None
        self.notifications = 0  # received, for tests and benchmarks

    def on_wake(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    async def take(self) -> None:
        """Take the node's name; StoreUnavailable (``node_taken``) if a live daemon has it."""
        try:
            conn = await self._connect()
        except psycopg.Error as e:
            raise unavailable(e, "the job store cannot be reached") from e
        try:
            row = await (await conn.execute(self._lock_sql, {"node": self.node})).fetchone()
            # A closed session's backend ends, and frees its locks, a moment after the
            # client let go: a daemon restarted at once (or a store closed and opened
            # again) looks a few times before it calls the name another's.
            for _ in range(_TAKE_TRIES):
                if row and row["taken"]:
                    break
                await asyncio.sleep(_TAKE_PAUSE_S)
                row = await (await conn.execute(self._lock_sql, {"node": self.node})).fetchone()
            if row and row["taken"] and self._listen:
                await conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as e:
            await conn.close()
            raise unavailable(e, "the job store cannot be reached") from e
        if not row or not row["taken"]:
            await conn.close()
            raise StoreUnavailable(
                f"another casesignd daemon named {self.node!r} is running on this database "
                f"(application_name casesignd:{self.node} in pg_stat_activity); give this "
                "one its own --node", detail={"reason": "node_taken", "node": self.node})
        self._conn = conn
        self._reader = asyncio.create_task(self._read(conn), name="casesignd-node-session")

    async def _read(self, conn: AsyncConnection[DictRow]) -> None:
        """Wait on the session: notifications wake the pool; an ended session is seen
        here (the socket closes) even when nothing is ever sent on it."""
        try:
            while True:
                async for _ in conn.notifies(timeout=_WAIT_S):
                    self.notifications += 1
                    self._wake()
        except psycopg.Error:
            log_event(log, "store.node_session_lost", level=logging.WARNING, node=self.node)
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed and \
            self._reader is not None and not self._reader.done()

    async def check(self) -> None:
        """If the session ended (the server restarted, the network broke), take the
        name again, or raise StoreUnavailable (``node_taken``) if another daemon has."""
        if not self.held():
            await self.release()
            await self.take()

    async def release(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._conn is not None:
            await self._conn.close()  # the session ends, and its lock with it
            self._conn = None


class Announcer:
    """NOTIFY the other daemons that jobs were queued: at most one in flight, and at
    most one per ``debounce_s``; the calls in between are folded into the next."""

    def __init__(self, send: Callable[[], Awaitable[None]], debounce_s: float = 0.02) -> None:
        self._send = send
        self._debounce_s = debounce_s
        self._due = False
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def announce(self) -> None:
        self._due = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="casesignd-announce")

    async def _run(self) -> None:
        while self._due:
            self._due = False
            try:
                await self._send()
                self.sent += 1
            except (psycopg.Error, StoreUnavailable):
                return  # the others poll anyway; the next queued job tries again
            await asyncio.sleep(self._debounce_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
