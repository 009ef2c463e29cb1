"""The job-kind interface: how a kind of work plugs into the engine.

A kind has two halves. ``admit`` is pure and cheap: it runs in the HTTP handler,
validates and normalizes the request body, and says what the job will need. ``run``
does the work inside a worker, with a :class:`JobContext` that hands it the
services, a private temp directory, phase timing and the CPU pool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .config import Config


@dataclass(frozen=True)
class Admission:
    """What ``admit`` decided about a request body."""

    normalized: dict[str, Any]  # stored as the job's input; the fingerprint covers it
    version: str  # policy_version (sign_case) or template_version (render_invoice)
    case_id: str | None = None
    declared_bytes: int = 0  # reserved against workers.max_inflight_bytes while running
    # What the derived idempotency key covers when the client sends no key.
    key_material: dict[str, Any] | None = None
    # What makes two requests "the same" for an idempotent replay, when that differs
    # from ``normalized`` (e.g. values the server filled in at admission).
    fingerprint_material: dict[str, Any] | None = None


@dataclass(frozen=True)
class Artifact:
    """A published result: immutable bytes under the artifact store."""

    artifact_id: str
    sha256: str
    size: int
    media_type: str = "application/pdf"


@dataclass
class Outcome:
    """What ``run`` returns on success."""

    artifact: Artifact | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class JobContext(Protocol):
    """What a running job may use. Provided by the worker pool."""

    job_id: str
    tenant: str
    kind: str
    attempt: int
    case_id: str | None
    version: str
    input: dict[str, Any]
    config: Config
    workdir: Path  # private 0700 directory for this attempt, removed afterwards
    services: Any  # casesignd.app.Services

    def phase(self, name: str) -> AbstractAsyncContextManager[None]:
        """Time a phase (fetch, validate, scan, sign, render, publish)."""

    async def cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a picklable top-level function in the CPU process pool."""

    def key_slot(self) -> AbstractAsyncContextManager[None]:
        """Hold one of the batch signing-key slots."""

    async def check_lease(self) -> None:
        """Raise if this attempt no longer holds its lease (do not publish then)."""


class JobKind(Protocol):
    name: str

    def admit(self, body: dict[str, Any], config: Config) -> Admission:
        """Validate and normalize; raise casesignd.errors.ValidationError naming the field."""

    async def run(self, ctx: JobContext) -> Outcome:
        """Do the work; raise CasesignError subclasses (retryable or not)."""


RunFn = Callable[[JobContext], Awaitable[Outcome]]
