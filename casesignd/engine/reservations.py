"""Idempotency keys reserved by kiosk requests, in front of the store.

A kiosk request writes its job only when it is done (``Store.record_flight``), so
until then no row names its idempotency key. It reserves the key here instead: an
admission of a reserved key is answered ``in_progress``, and a kiosk request meets an
admission of its key under way the same way. Everything here runs on the event loop,
so the checks and the counts need no lock.

That covers one daemon. A store that several daemons share locks the key across them
as well (PostgreSQL's advisory key locks, ``Store.key_locks``: a kiosk request takes
the lock after its reservation here, and the store's admission meets it), so that a
request on one daemon and an admission of its key on another meet the same way.

A kiosk request answered 504 before its job is written names the job in its answer
(``X-Job-Id``): until the row is there, :meth:`KeyReservations.late_job` answers for
it, as the row will read (running), so the id never reads as "no such job" on the
daemon that gave it out.
"""

from __future__ import annotations

from typing import Any

from casesignd.core.tenant_limits import TenantLimits
from casesignd.store import Flight, Job, NewJob, Store, in_progress


class KeyReservations:
    """The store's admissions and kiosk writes, with the keys kiosk requests reserve."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._reserved: dict[tuple[str, str], object] = {}  # key -> the request's token
        # Across the daemons of the store, when it has several (else None), and the
        # keys locked there.
        self._shared = store.key_locks
        self._across: set[tuple[str, str]] = set()
        self._admitting: dict[tuple[str, str], int] = {}  # admissions under way per key
        # Kiosk requests answered late whose row may not be written yet, by job id.
        self._late: dict[str, Flight] = {}

    async def admit(self, new: NewJob, *, actor: str, max_queue_depth: int,
                    limits: TenantLimits | None = None) -> tuple[Job, bool]:
        """``Store.admit`` (within the tenant's ``limits``), or Conflict ``in_progress``
        while a kiosk request reserves the key."""
        key = (new.tenant, new.idem_key)
        if key in self._reserved:
            raise in_progress()
        self._admitting[key] = self._admitting.get(key, 0) + 1
        try:
            return await self.store.admit(new, actor=actor, max_queue_depth=max_queue_depth,
                                         limits=limits)
        finally:
            if self._admitting[key] <= 1:
                del self._admitting[key]
            else:
                self._admitting[key] -= 1

    async def reserve(self, tenant: str, idem_key: str, sig_key: str, token: object
                      ) -> tuple[Job | None, dict[str, Any] | None]:
        """Reserve ``idem_key`` for a kiosk request that writes its job only when done.

        Returns (the job the key already names, None), or (None, the signature recorded
        for ``sig_key`` if any) with the key reserved: until :meth:`record_flight` or
        :meth:`unreserve`, an admission with the key is answered ``in_progress``.

        The key is reserved before the store is read, on the event loop, where every
        admission starts: an admission of the key is then under way (counted, so this
        is ``in_progress``), or committed (its row is read here), or later (and meets
        the reservation)."""
        key = (tenant, idem_key)
        if self._reserved.get(key, token) is not token or key in self._admitting:
            raise in_progress()
        self._reserved[key] = token
        try:
            if self._shared is not None:
                if not await self._shared.take_idempotency_key(tenant, idem_key):
                    raise in_progress()  # a request on another daemon has it, or admits it
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
        if self._reserved.get(key) is token:
            del self._reserved[key]
            if key in self._across:
                self._across.discard(key)
                if self._shared is not None:  # locked across daemons: a shared store's
                    self._shared.give_back_idempotency_key(tenant, idem_key)

    async def record_flight(self, flight: Flight) -> Job | None:
        """``Store.record_flight``; the key is free once it is written (the row answers
        from then on) or has failed."""
        try:
            return await self.store.record_flight(flight)
        finally:
            self.unreserve(flight.new.tenant, flight.new.idem_key, flight.token)

    def answered_late(self, flight: Flight) -> None:
        """``flight`` is answered 504 before its job is written: until :meth:`landed`,
        :meth:`late_job` answers for it."""
        self._late[flight.job_id] = flight

    def landed(self, flight: Flight) -> None:
        """``flight``'s job is written (the store answers for it from now on), or never
        will be (its request ended without a record)."""
        self._late.pop(flight.job_id, None)

    def late_job(self, tenant: str, job_id: str) -> Job | None:
        """The job of ``tenant``'s kiosk request answered late and not written yet, as
        its row will read (:meth:`Flight.running`); None for any other id, and for
        another tenant's."""
        flight = self._late.get(job_id)
        return flight.running() if flight is not None and flight.new.tenant == tenant else None
