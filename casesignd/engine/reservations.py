"""Idempotency keys held by kiosk requests, in front of the store.

A kiosk request writes its job only when it is done (``Store.record_flight``), so
until then no row names its idempotency key. It holds the key here instead: an
admission of a held key is answered ``in_progress``, and a kiosk request meets an
admission of its key under way the same way. Everything here runs on the event loop,
so the checks and the counts need no lock.

That covers one daemon. A store that several daemons share holds the key across them
as well (PostgreSQL's ``held_keys``: a kiosk request takes it after its own hold here,
and the store's admission meets it), so that a request on one daemon and an admission
of its key on another meet the same way.
"""

from __future__ import annotations

from typing import Any

from casesignd.store import Flight, Job, NewJob, Store, in_progress


class KeyHolds:
    """The store's admissions and kiosk writes, with the keys kiosk requests hold."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._held: dict[tuple[str, str], object] = {}  # key -> the holder's token
        # Across the daemons of the store, when it has several (else None), and the
        # keys held there.
        self._shared = store.held_keys
        self._across: set[tuple[str, str]] = set()
        self._admitting: dict[tuple[str, str], int] = {}  # admissions under way per key

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int) -> tuple[Job, bool]:
        """``Store.admit``, or Conflict ``in_progress`` while a kiosk request holds the key."""
        key = (new.tenant, new.idem_key)
        if key in self._held:
            raise in_progress()
        self._admitting[key] = self._admitting.get(key, 0) + 1
        try:
            return await self.store.admit(new, actor=actor, max_queue_depth=max_queue_depth)
        finally:
            if self._admitting[key] <= 1:
                del self._admitting[key]
            else:
                self._admitting[key] -= 1

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
        if self._held.get(key, token) is not token or key in self._admitting:
            raise in_progress()
        self._held[key] = token
        try:
            if self._shared is not None:
                if not await self._shared.take_idempotency_key(tenant, idem_key):
                    raise in_progress()  # a request on another daemon holds it, or admits it
                self._across.add(key)
            job, recorded = await self.store.lookup_key(tenant, idem_key, sig_key)
        except BaseException:
            self.unreserve(tenant, idem_key, token)
            raise
        if job is not None:
            self.unreserve(tenant, idem_key, token)
        return job, recorded

    def unreserve(self, tenant: str, idem_key: str, token: object) -> None:
        key = (tenant, idem_key)
        if self._held.get(key) is token:
            del self._held[key]
            if key in self._across:
                self._across.discard(key)
                if self._shared is not None:  # held across daemons: a shared store's
                    self._shared.give_back_idempotency_key(tenant, idem_key)

    async def record_flight(self, flight: Flight) -> Job | None:
        """``Store.record_flight``; the key is free once it is written (the row answers
        from then on) or has failed."""
        try:
            return await self.store.record_flight(flight)
        finally:
            self.unreserve(flight.new.tenant, flight.new.idem_key, flight.token)
