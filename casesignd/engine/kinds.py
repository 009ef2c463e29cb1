"""The job-kind interface: how a kind of work plugs into the engine.

A kind has two halves. ``admit`` is pure and cheap: it runs in the HTTP handler,
validates and normalizes the request body, and says what the job will need. ``run``
does the work inside a worker, with a :class:`JobContext` that hands it the
services, a private temp directory, phase timing and the CPU pool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from casesignd.config import Config
from casesignd.core import audit
from casesignd.core.errors import ValidationError
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, Finish, InFlight
from casesignd.core.policy import Policy
from casesignd.core.sealed import SealedPath
from casesignd.engine import jobs
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.envelope import SealedFile
from casesignd.files.scanner import Scanner
from casesignd.files.sources import Fetcher
from casesignd.observability.metrics import Metrics
from casesignd.store import Job, NewJob, Store

if TYPE_CHECKING:
    from casesignd.files.temp import Area

T = TypeVar("T")

__all__ = ["Admission", "Artifact", "Finish", "JobContext", "JobKind", "JobServices", "RunFn"]


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
    # The signature the job makes (sign_case): the store reads its record with the claim.
    sig_key: str | None = None

    def new_job(self, kind: str, tenant: str, *, idempotency_header: str | None,
                created_at: float, correlation_id: str,
                traceparent: str | None = None,
                schedule: jobs.Schedule | None = None) -> NewJob:
        """The job to store for this admission: its idempotency key (the client's, or
        derived from ``key_material``), its fingerprint and its canonical input;
        ``traceparent``: the admitting request's span, which its attempts continue;
        ``schedule``: its priority and not_before, which the fingerprint covers."""
        normalized = audit.canonical(self.normalized)
        material = self.key_material if self.key_material is not None else self.normalized
        schedule = schedule or jobs.Schedule()
        same = self.fingerprint_material if self.fingerprint_material is not None \
            else self.normalized
        if asked := schedule.fingerprint():
            # Beside the input, not in it (an input may have fields of those names);
            # a job without either keeps the fingerprint it always had.
            same = {"input": same, "schedule": asked}
        return NewJob(
            tenant=tenant, kind=kind, case_id=self.case_id,
            idem_key=jobs.idempotency_key(idempotency_header, kind, material),
            fingerprint=jobs.fingerprint(kind, same),
            input=normalized.decode(), input_digest=sha256_hex(normalized),
            version=self.version, declared_bytes=self.declared_bytes,
            created_at=created_at, correlation_id=correlation_id, sig_key=self.sig_key,
            traceparent=traceparent, priority=schedule.priority,
            not_before=schedule.not_before)


class JobServices(Protocol):
    """What a running job may use of the daemon's services (casesignd.daemon.lifecycle.Services).
    A kind that needs more (the signing ladder) is given it when it is built."""

    config: Config
    metrics: Metrics
    store: Store
    scanner: Scanner | None  # None: no scanner configured
    fetcher: Fetcher
    artifacts: ArtifactStore | None  # set once the store is open

    async def publish(self, ctx: JobContext, path: Path | str | SealedPath, media_type: str,
                      sig_key: str | None = None, tail: bytes = b"") -> Artifact: ...
    async def in_flight(self, ctx: JobContext, sig_key: str | None = None) -> InFlight | None: ...
    async def publish_written(self, ctx: JobContext, target: InFlight, written: Artifact
                              ) -> Artifact: ...
    async def artifact_source(self, artifact_id: str) -> bytes | Path | SealedFile | None: ...


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
    job: Job  # the job's row as it was claimed
    area: Area | None  # the attempt's temp area, for a kind that needs one
    recorded_signature: dict[str, Any] | None  # read with the claim, for its signature key

    @property
    def services(self) -> JobServices: ...

    @property
    def workdir(self) -> Path:
        """The attempt's private 0700 directory (needs_area), removed afterwards."""

    @property
    def kiosk(self) -> bool:
        """Run by the kiosk path (its CPU processes and key slots)."""

    def phase(self, name: str) -> AbstractAsyncContextManager[None]:
        """Time a phase (fetch, validate, scan, sign, render, publish)."""

    def record_phase(self, name: str, took: float) -> None:
        """A phase timed elsewhere (in a worker process): ``took`` seconds."""

    async def cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a picklable top-level function in the CPU process pool."""

    def key_slot(self) -> AbstractAsyncContextManager[None]:
        """Hold one of the batch signing-key slots."""

    async def check_lease(self) -> None:
        """Raise if this attempt no longer holds its lease (do not publish then)."""

    async def keep_until_recorded(self, cm: AbstractAsyncContextManager[T]) -> T:
        """Enter ``cm`` until this attempt's outcome is recorded (or dropped), beyond
        the end of ``run``; what it yields."""


class JobKind(Protocol):
    name: str

    def admit(self, body: dict[str, Any], config: Config, tenant: str) -> Admission:
        """Validate and normalize a request of ``tenant``; raise
        casesignd.core.errors.ValidationError naming the field."""

    def needs_area(self, input: dict[str, Any], config: Config) -> bool:
        """Whether an attempt at a job of this ``input`` needs a private temp
        directory (``ctx.workdir``); an attempt that works in memory goes without."""

    async def run(self, ctx: JobContext) -> Finish:
        """Do the work; raise CasesignError subclasses (retryable or not)."""


RunFn = Callable[[JobContext], Awaitable[Finish]]


def admit_policy(body: dict[str, Any], config: Config) -> Policy:
    """The policy a request names in ``policy_version`` (the default when it names none)."""
    version = body.get("policy_version", config.default_policy)
    if not isinstance(version, str):
        raise ValidationError("policy_version must be a string", code="invalid_field",
                              field="policy_version")
    policy = config.policy(version)
    if policy is None:
        raise ValidationError(f"no policy with version {version!r}", code="unknown_policy",
                              field="policy_version")
    return policy
