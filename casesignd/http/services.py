"""What the HTTP handlers use of the daemon's services, as a protocol: the handlers are
written against it, and the daemon's :class:`casesignd.daemon.lifecycle.Services` meets
it (the type check in ``tests/unit/test_typed_seams.py`` holds it), so nothing under
``casesignd.http`` imports the daemon that builds them.

A handler admits jobs into the engine and reads them back, stores uploads, validates
documents, and on the kiosk path runs one ``sign_case`` job's steps itself: it may
use whatever a running job may (:class:`casesignd.engine.kinds.JobServices`), and
what answering requests takes besides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from casesignd.engine.kinds import JobKind, JobServices
from casesignd.engine.pool import Pool
from casesignd.engine.recorder import Recorder
from casesignd.engine.reservations import KeyReservations
from casesignd.files.objects import ObjectStore
from casesignd.files.temp import TempManager
from casesignd.job_kinds.signing import Logos
from casesignd.observability.metrics import StateCache
from casesignd.observability.tracing import Tracing

if TYPE_CHECKING:
    from casesignd.signing.keys import KeySigner, KeySlots
    from casesignd.signing.ladder import Ladder
    from casesignd.signing.longterm import LongTerm


class HandlerServices(JobServices, Protocol):
    """Everything a request handler may use."""

    node: str
    # Each tenant's name by the SHA-256 of its bearer token.
    tenants: dict[str, str]
    tracing: Tracing
    state: StateCache
    objects: ObjectStore
    temp: TempManager
    reservations: KeyReservations
    pool: Pool
    recorder: Recorder
    kinds: dict[str, JobKind]
    shutting_down: bool
    # Readiness waits for the worker processes to be started and warm.
    cpu_warm: bool
    # Kiosk requests in flight, in all and by tenant; each tenant's share of the
    # kiosk processes; the signatures under way, some past their answer.
    kiosk_inflight: int
    kiosk_inflight_by_tenant: dict[str, int]
    kiosk_lane_gates: dict[str, asyncio.Semaphore]
    kiosk_flights: set[asyncio.Task[Any]]
    # The kiosk signs within its deadline through the one signing ladder, under the
    # key slots it shares with the pool; readiness reports the key and its certificate.
    ladder: Ladder
    key_slots: KeySlots
    signer: KeySigner | None
    longterm: LongTerm

    @property
    def branding(self) -> Logos:
        """The tenants' invoice branding, whose logos a visible stamp may show (read
        only here: a reload replaces it)."""

    @property
    def kiosk_signs_in_lane(self) -> bool: ...

    def link(self, artifact_id: str, tenant: str) -> tuple[str, int]: ...
    async def run_cpu(self, fn: Callable[..., Any], *args: Any, kiosk: bool = False) -> Any: ...
    async def run_verify(self, tenant: str, fn: Callable[..., Any], *args: Any) -> Any: ...


# Where the application keeps them (set by casesignd.daemon.server.build_app).
SERVICES: web.AppKey[HandlerServices] = web.AppKey("handler_services")
