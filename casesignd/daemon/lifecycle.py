"""The daemon's lifecycle: one owner that builds and tears down everything in order.

Start-up, in order: temp volume swept, store opened (migrations, lock), object and
artifact stores, signing key and scanner, job kinds, worker pool; then the HTTP
site. Shutdown runs the same list backwards after the site stops accepting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from casesignd.config import Config
from casesignd.core.calls import Calls
from casesignd.core.errors import ConfigError
from casesignd.core.logs import log_event
from casesignd.core.outcomes import InFlight
from casesignd.core.sealed import SealedPath, guarded
from casesignd.engine.kinds import Artifact, JobContext, JobKind
from casesignd.engine.lanes import Lane
from casesignd.engine.pool import Pool
from casesignd.engine.recorder import Recorder
from casesignd.engine.reservations import KeyReservations
from casesignd.engine.retention import keep_sweeping
from casesignd.files.artifacts import ArtifactStore
from casesignd.files.envelope import Envelope, SealedFile, check_keys_held
from casesignd.files.objects import ObjectStore
from casesignd.files.scanner import Scanner, make_scanner
from casesignd.files.sources import Fetcher
from casesignd.files.temp import TempManager
from casesignd.invoices import branding
from casesignd.invoices.branding import Branding
from casesignd.job_kinds.renewal import keep_renewing
from casesignd.job_kinds.signing import key_settings, longterm_settings, signing_policies
from casesignd.observability import sdnotify
from casesignd.observability.metrics import Metrics, StateCache
from casesignd.observability.tracing import Tracing
from casesignd.signing.keys import FileSlots, KeySigner, KeySlots, ProcessKey
from casesignd.signing.ladder import Ladder
from casesignd.signing.longterm import LongTerm
from casesignd.store import Store, make_store
from casesignd.webhooks.sender import Sender

if TYPE_CHECKING:  # the CMS stack is imported when a key is loaded, not with the app
    from casesignd.signing.cms import SignerInfoTemplate

log = logging.getLogger("casesignd.daemon.lifecycle")


_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# How old an artifact's data key without a record is before the start-up sweep drops it.
UNRECORDED_KEY_AGE_S = 3600.0


def node_name(value: str | None) -> str:
    """A daemon's node name (``serve --node``): the one given, else the host name's
    first label; a name that could not be a directory's is refused."""
    name = value if value else socket.gethostname().split(".")[0]
    if not _NODE.fullmatch(name):
        raise ConfigError("serve --node", f"a node name is 1-63 of A-Z a-z 0-9 . _ -, "
                          f"not starting with . _ or -: {name[:80]!r}")
    return name


@dataclass(frozen=True)
class Extras:
    """What a caller plugs into the daemon beside its own parts, through the interfaces
    those use: more job kinds, a wrapper around the signing key once it is loaded (in
    the daemon, and in its worker processes through ``for_process``), and metric labels
    that raise on a value outside their set instead of recording it as "other".
    ``casesignd serve`` plugs in none; the test suite starts the daemon with its own
    (a job kind told to succeed, fail or hang; a slowed key)."""

    kinds: tuple[JobKind, ...] = ()
    wrap_signer: Callable[[KeySigner], KeySigner] | None = None
    strict_labels: bool = False


class Services:
    """Everything a request handler or a running job may use."""

    def __init__(self, cfg: Config, node: str | None = None, extras: Extras | None = None) -> None:
        self.config = cfg
        # This daemon's name among those on one store: its working files and key-slot
        # locks are its own (storage.temp_dir/NAME), its leases carry the name.
        self.node = node_name(node)
        self.extras = extras or Extras()
        self.metrics = Metrics(node=self.node, strict=self.extras.strict_labels)
        self.state = StateCache()
        self.metrics.add_state_source(self.state.snapshot)
        store = make_store(cfg, self.node)
        # The storage keys, read once at start (casesignd.core.keyring): they seal the
        # store's inline artifacts and the files under state_dir.
        self.keyring = cfg.storage_keyring()
        store.keyring = self.keyring
        self.store: Store = store
        self.webhooks = Sender(self)
        self.tracing = Tracing(cfg.tracing.otlp_endpoint, node=self.node)
        # Outgoing calls (TSA, OCSP, CRL, sources) as spans; no-ops while tracing is off.
        self.calls: Calls = self.tracing
        state_dir = cfg.path(cfg.storage.state_dir)
        temp_root = cfg.path(cfg.storage.temp_dir)
        self.temp = TempManager(temp_root / self.node, cfg.storage.temp_quota_bytes,
                                retry_delay_s=cfg.storage.temp_quota_retry_s)
        self.objects = ObjectStore(state_dir / "objects", self.node)
        self.objects.job_roots = [temp_root]
        # Every upload has its row, which retention counts from (casesignd.engine.retention).
        self.objects.record = self.store.put_object
        self.envelope = Envelope(self.keyring, self.store)
        self.objects.envelope = self.envelope
        # Set by the lifecycle once the store is open (it needs the link secret).
        self.artifacts: ArtifactStore | None = None
        self.fetcher = Fetcher(cfg.sources, self.objects, max_bytes=cfg.server.max_object_bytes,
                               on_retry=lambda _src, reason: self.metrics.source_retry(reason),
                               calls=self.calls)
        # Loaded by the lifecycle, off the event loop (a token may take its time).
        self.signer: KeySigner | None = None
        self.scanner: Scanner | None = None
        # Each tenant's invoice settings; checked and their logos kept at start and on
        # SIGHUP (casesignd.invoices.branding), unchecked until then.
        self.branding = Branding.unchecked(cfg)
        self._mp = get_context("forkserver")
        # The batch key slots are shared with the batch worker processes, which hold
        # the key and take a slot around each key operation only.
        batch_slots = max(1, cfg.signing.key_slots - cfg.kiosk.reserved_key_slots)
        self.key_slots = KeySlots(
            cfg.signing.key_slots, cfg.kiosk.reserved_key_slots,
            # The node's own: beside its working files, out of their sweep.
            shared=FileSlots(temp_root / f"{self.node}.key-slots", batch_slots))
        # Idempotency keys of kiosk requests not yet written (engine/reservations.py).
        self.reservations = KeyReservations(self.store)
        # The signing certificate's checks and, from B-LT up, its chains' revocation
        # data; it learns the certificate when the key is loaded.
        self.longterm = LongTerm(longterm_settings(cfg), signing_policies(cfg), self.calls)
        # Every signature's steps after the checks, for the job kinds and the kiosk.
        self.ladder = Ladder(self)
        # Off, the attempts do not even look for a tracer (no cost).
        self.recorder = Recorder(cfg, self.metrics,
                                 self.tracing if self.tracing.enabled else None)
        # A job that ended names an endpoint: its delivery goes out at once.
        self.recorder.on_end.append(self.webhooks.wake)
        self.kinds: dict[str, JobKind] = job_kinds(self)
        self.tenants: dict[str, str] = {}
        self.shutting_down = False
        self.kiosk_inflight = 0
        # The same, by tenant (kiosk.max_concurrent_per_tenant); a tenant with none
        # in flight has no entry.
        self.kiosk_inflight_by_tenant: dict[str, int] = {}
        # Per tenant: the kiosk processes it may use at once (kiosk.process_share).
        self.kiosk_lane_gates: dict[str, asyncio.Semaphore] = {}
        # Kiosk signatures under way, some past their answer (see casesignd.http.kiosk).
        self.kiosk_flights: set[asyncio.Task[Any]] = set()
        self.started_at = time.time()
        self.notifier = sdnotify.Notifier.from_env()
        self._cpu: Lane | None = None
        self._kiosk_cpu: Lane | None = None
        # Verify requests' own processes (casesignd.verify.budget), and per tenant the
        # ones it may use at once (validation.budget.process_share).
        self._verify_cpu: Lane | None = None
        self.verify_gates: dict[str, asyncio.Semaphore] = {}
        self._lane_key: ProcessKey | None = None
        # Readiness waits for this: the first kiosk request must not pay for starting
        # the worker processes and importing the PDF stack (seconds on a busy host).
        self.cpu_warm = False
        self._cms_template: SignerInfoTemplate | None = None
        self._cms_bytes: int | None = None
        # Built with the rest, started by the lifecycle once the store is open.
        self.pool = Pool(self, self.kinds, self.store, self.recorder)

    # --- tenants ---------------------------------------------------------------------

    def load_tenants(self, cfg: Config) -> None:
        self.tenants = {t.token_sha256: t.name for t in cfg.tenants}
        self.metrics.tenant_queue_ages.configure(t.name for t in cfg.tenants)
        self.store.weigh_tenants({t.name: t.weight for t in cfg.tenants})

    # --- CPU pool ----------------------------------------------------------------------

    def _batch_lane(self) -> Lane:
        if self._cpu is None:
            # forkserver: the daemon has threads (the store writer), and forking a
            # threaded process is unsafe. Batch processes run at a lower priority so
            # that the kiosk's own processes win the CPU when both are busy; they hold
            # the key (a key in memory), so that a job's checks, preparation and
            # signature are one call, and take a batch key slot around its use.
            # A process takes up to its share of the pool's jobs in one hand-off
            # (casesignd.engine.lanes): fewer wake-ups, warm caches.
            template = self.cms_template() if self.signer is not None else None
            workers = self.config.workers
            self._cpu = Lane(workers.cpu_processes, self._mp,
                             initializer=_init_batch_process,
                             initargs=(os.getpid(), template, self.process_key(),
                                       self.key_slots.shared),
                             batch=max(1, workers.concurrency // workers.cpu_processes))
        return self._cpu

    def _lane(self) -> Lane:
        if self._kiosk_cpu is None:
            from casesignd.signing.worker import init_signing_process

            template = self.cms_template() if self.signer is not None else None
            self._lane_key = self.process_key()
            self._kiosk_cpu = Lane(self.config.kiosk.cpu_processes, self._mp,
                                   initializer=init_signing_process, initargs=(template, self._lane_key))
        return self._kiosk_cpu

    def _verify_lane(self) -> Lane:
        if self._verify_cpu is None:
            from casesignd.verify.budget import init_verify_process

            budget = self.config.validation.budget
            self._verify_cpu = Lane(budget.processes, self._mp, initializer=init_verify_process,
                                    initargs=(budget.max_memory_bytes,))
        return self._verify_cpu

    async def run_verify(self, tenant: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Validation in verify's own processes, never the batch or kiosk ones, at most
        the tenant's share of them at once: one tenant's burst waits for its own
        turns, and another tenant's request finds a process free."""
        gate = self.verify_gates.get(tenant)
        if gate is None:
            share = self.config.validation.budget.share(len(self.config.tenants))
            gate = self.verify_gates[tenant] = asyncio.Semaphore(share)
        async with gate:
            return await self._verify_lane().run(fn, *args, timeout_s=self.config.workers.max_run_s)

    @property
    def kiosk_signs_in_lane(self) -> bool:
        """Whether the kiosk's worker processes hold the signing key."""
        self._lane()
        return self._lane_key is not None

    def process_key(self) -> ProcessKey | None:
        """The signing key for the worker processes (kiosk and batch), or None when it
        cannot leave this process (a PKCS#11 token's key: signed here, in a thread)."""
        for_process = getattr(self.signer, "for_process", None)
        return for_process() if for_process is not None else None

    async def run_cpu(self, fn: Callable[..., Any], *args: Any, kiosk: bool = False) -> Any:
        """Run CPU-heavy work in a separate process: pure-Python PDF parsing does not run
        in parallel in threads (the GIL), and it must never block the event loop. The
        kiosk's work goes to processes of its own, called without helper threads."""
        lane = self._lane() if kiosk else self._batch_lane()
        return await lane.run(fn, *args, timeout_s=self.config.workers.max_run_s)

    async def warm_cpu(self) -> None:
        """Start the worker processes and import the PDF stack in them, so the first
        kiosk request does not pay for it; and, in a thread, what invoice admission may
        need (casesignd.text.shaping.warm), so that no request pays for it on the loop."""
        from casesignd.text.shaping import warm

        stamps = any(p.appearance == "visible" for p in self.config.policies)
        with contextlib.suppress(Exception):
            # As many calls as processes at once: each process takes one.
            await asyncio.gather(
                *(self.run_cpu(_warm, stamps, kiosk=True)
                  for _ in range(self.config.kiosk.cpu_processes)),
                *(self.run_cpu(_warm, stamps) for _ in range(self.config.workers.cpu_processes)),
                *(self._verify_lane().run(_warm_verify, timeout_s=self.config.workers.max_run_s)
                  for _ in range(self.config.validation.budget.processes)),
                asyncio.to_thread(warm))
        self.cpu_warm = True  # also after a failure: the pools then start on first use

    def close_cpu(self) -> None:
        if self._cpu is not None:
            self._cpu.close()
        if self._kiosk_cpu is not None:
            self._kiosk_cpu.close()
        if self._verify_cpu is not None:
            self._verify_cpu.close()
        self._cpu = self._kiosk_cpu = self._verify_cpu = None

    # --- what jobs call ----------------------------------------------------------------

    async def publish(self, ctx: JobContext, path: Path | str | SealedPath, media_type: str,
                      sig_key: str | None = None, tail: bytes = b"") -> Artifact:
        """Publish a result durably under a deterministic id: a signature's key, else the
        job's id. A later attempt finds the earlier file and keeps it (the first wins).
        A sealed result (a temp area's) is its plain bytes, then ``tail``, streamed."""
        assert self.artifacts is not None
        key = f"sig:{sig_key}" if sig_key else f"job:{ctx.job_id}"
        artifact_id = self.artifacts.artifact_id(ctx.tenant, key)
        await ctx.check_lease()
        async with ctx.phase("publish"):
            seal_key = await self.artifacts.key_for(artifact_id)
            if isinstance(path, SealedPath):
                artifact, _ours = await asyncio.to_thread(
                    guarded, self.artifacts.publish_bytes, _plain_parts(path, tail),
                    artifact_id, media_type, seal_key)
                return artifact
            assert not tail, "a plain result is whole"
            return await asyncio.to_thread(self.artifacts.publish, Path(path), artifact_id,
                                           media_type, seal_key)

    async def in_flight(self, ctx: JobContext, sig_key: str | None = None) -> InFlight | None:
        """A file in flight for the result a CPU process may write whole itself (its
        artifact's id as :meth:`publish` names it), or None when that artifact's file
        exists already. Publish it with :meth:`publish_written`; remove it when it is
        not published."""
        assert self.artifacts is not None
        artifact_id = self.artifacts.artifact_id(
            ctx.tenant, f"sig:{sig_key}" if sig_key else f"job:{ctx.job_id}")
        seal_key = await self.artifacts.key_for(artifact_id)
        return await asyncio.to_thread(self.artifacts.in_flight, artifact_id, seal_key)

    async def publish_written(self, ctx: JobContext, target: InFlight, written: Artifact
                              ) -> Artifact:
        """:meth:`publish` for a file in flight a CPU process wrote whole and fsynced
        (:meth:`in_flight`; ``written`` what it holds): a hard link, not a copy."""
        assert self.artifacts is not None
        await ctx.check_lease()
        async with ctx.phase("publish"):
            seal_key = await self.artifacts.key_for(target.artifact_id)
            artifact, _ours = await asyncio.to_thread(self.artifacts.publish_written, target,
                                                      written, seal_key)
            return artifact

    async def artifact_source(self, artifact_id: str) -> bytes | Path | SealedFile | None:
        """Where an artifact's bytes are: in the store (bytes), a file (its path, or
        with its data key when sealed), or nowhere (None). The store is asked first: a
        result it holds is the recorded one."""
        assert self.artifacts is not None
        data = await self.store.artifact_data(artifact_id)
        if data is not None:
            return data
        return await self.artifacts.source(artifact_id)

    def cms_template(self) -> SignerInfoTemplate:
        """The signer's CMS template, built once per key (certificates encoded once)."""
        if self._cms_template is None:
            from casesignd.signing import cms

            assert self.signer is not None, "a template is built for a loaded key"
            self._cms_template = cms.template_for(self.signer.cert, tuple(self.signer.chain))
        return self._cms_template

    def contents_bytes(self, timestamped: bool) -> int:
        """Room to reserve in /Contents for this key's CMS: its size with the longest
        signature value any key gives (1 KiB: RSA-8192), or, when a timestamp token
        of a TSA's own size goes in too, the default 16 KiB. A small reservation keeps
        a small document small (32 KiB of hex zeros otherwise)."""
        if timestamped:
            return 16384
        if self._cms_bytes is None:
            from casesignd.signing import cms

            template = self.cms_template()
            attrs = cms.build_signed_attrs(bytes(32), template)
            self._cms_bytes = len(cms.assemble(template, attrs, bytes(1024))) + 256
        return self._cms_bytes

    def link(self, artifact_id: str, tenant: str) -> tuple[str, int]:
        assert self.artifacts is not None
        expires = int(time.time()) + self.config.links.ttl_s
        return self.artifacts.sign_link(artifact_id, tenant, expires), expires

    async def refresh_state(self) -> None:
        """Refresh the cached values the gauges read at scrape time."""
        stats = await self.store.stats()
        self.metrics.tenant_queue_ages.update(await self.store.oldest_queued_by_tenant())
        usage = self.temp.usage()
        oldest = stats["oldest_queued_age_s"]
        pool = self.pool
        self.state.update(
            jobs=stats["states"],
            oldest_queued_at_unix=(time.time() - oldest) if oldest else None,
            inflight_bytes=pool.inflight_bytes,
            temp_used_bytes=usage.used_bytes,
            temp_free_bytes=usage.free_bytes,
            key_slots_in_use=dict(self.key_slots.in_use),
            workers_busy=pool.busy,
            event_loop_tasks=len(asyncio.all_tasks()),
        )
        pool.pacer.observed(stats["states"].get("queued", 0))
        depth = stats["states"].get("queued", 0) + stats["states"].get("retry_wait", 0)
        self.notifier.status(f"queued={depth} running={stats['states'].get('running', 0)}")


SERVICES = web.AppKey("services", Services)


def _init_batch_process(daemon_pid: int, template: SignerInfoTemplate | None,
                        key: ProcessKey | None, slot: FileSlots | None) -> None:
    """The initializer of a batch worker process: a lower priority, an end with the
    daemon's, and the key with its shared slots."""
    from casesignd.signing.worker import init_signing_process

    with contextlib.suppress(OSError):
        os.nice(10)
    _exit_with(daemon_pid)
    init_signing_process(template, key, slot)


def _exit_with(daemon_pid: int) -> None:
    """End this CPU worker when the daemon ends, however it ends. The workers are the
    forkserver's children, not the daemon's, and each holds its own task queue open,
    so after a SIGKILL of the daemon they (and the forkserver, which waits for them)
    would otherwise run on forever, each holding its memory."""
    try:
        fd = os.pidfd_open(daemon_pid)
    except ProcessLookupError:
        os._exit(1)
    except OSError:  # no pidfd (old kernel): poll instead
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while os.getppid() != 1 and _alive(daemon_pid):
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="casesignd-daemon-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _warm(stamps: bool = False) -> None:
    from casesignd.job_kinds import sign_case as signcase  # noqa: F401 - imported for their module state

    if stamps:  # a policy draws visible stamps: their fonts and text stack, loaded now
        # (about 0.4 s a process) rather than by the first signature each process makes
        from casesignd.signing import stamp

        numbers = iter(range(1, 100))
        stamp.form(("Signed by casesignd", "Date 2026-01-01 00:00:00+00:00"), 200.0, 60.0,
                   lambda: next(numbers))


def _warm_verify() -> None:
    from casesignd.verify import document as verify_pdf  # noqa: F401 - pyHanko's validation stack


def _load_signer(cfg: Config, wrap: Callable[[KeySigner], KeySigner] | None) -> KeySigner | None:
    if not cfg.signing.pkcs12_path and cfg.signing.pkcs11 is None:
        return None
    from casesignd.signing.keys import load_signer

    signer = load_signer(key_settings(cfg))
    return wrap(signer) if wrap is not None else signer


def job_kinds(services: Services) -> dict[str, JobKind]:
    """The job kinds this daemon runs, by name: its own and those plugged in
    (:class:`Extras`)."""
    from casesignd.job_kinds.extend_signature import ExtendSignatureKind
    from casesignd.job_kinds.render_invoice import InvoiceKind

    kinds: list[JobKind] = [InvoiceKind(lambda: services.branding, services.ladder),
                            ExtendSignatureKind(services.ladder)]
    try:
        from casesignd.job_kinds.sign_case import SignCaseKind

        kinds.append(SignCaseKind(services.ladder, lambda: services.branding))
    except ImportError:  # pragma: no cover - during partial installs only
        pass
    for kind in services.extras.kinds:
        kinds.append(kind)
        services.metrics.allow("kind", kind.name)
    return {k.name: k for k in kinds}


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    s = app[SERVICES]
    cfg = s.config
    from casesignd.job_kinds.render_invoice import check_config

    await asyncio.to_thread(check_config, cfg)
    s.branding = await asyncio.to_thread(branding.load, cfg, branding.logo_dir_of(cfg))
    swept = await asyncio.to_thread(s.temp.sweep)
    if swept:
        log_event(log, "temp.swept", count=swept)
    # Built off the event loop: the exporter's imports take their time (only when set).
    await asyncio.to_thread(s.tracing.start)
    await s.store.open()
    try:
        s.load_tenants(cfg)
        secret = cfg.credential(cfg.links.secret_file).read_bytes()
        s.artifacts = ArtifactStore(cfg.path(cfg.storage.state_dir) / "artifacts", secret, s.node)
        s.artifacts.envelope = s.envelope
        await check_keys_held(s.store, s.keyring)
        await asyncio.to_thread(s.artifacts.sweep)
        await asyncio.to_thread(s.objects.sweep)
        # Keys of publications a crash cut short of their record; an hour old, so that
        # another node's publication in flight is left alone (it writes its key
        # again with its record in any case).
        dropped = await s.store.drop_unrecorded_keys(time.time() - UNRECORDED_KEY_AGE_S)
        if dropped:
            log_event(log, "storage.unrecorded_keys_dropped", count=dropped)
        s.signer = await asyncio.to_thread(_load_signer, cfg, s.extras.wrap_signer)
        if s.signer is not None:
            s.longterm.use_signer(s.signer.cert, list(s.signer.chain))
        s.scanner = make_scanner(cfg)
        await s.pool.start()
        await s.refresh_state()
        warm = asyncio.create_task(s.warm_cpu(), name="casesignd-warm-cpu")
        # From B-LT up: the signer's chain is checked now (and /readyz waits for it),
        # then its revocation data is kept fresh ahead of its nextUpdate.
        keeper = asyncio.create_task(s.longterm.keep_fresh(), name="casesignd-revocation")
        renewer = asyncio.create_task(keep_renewing(s), name="casesignd-renewal") \
            if cfg.archive.renew_before_days > 0 else None
        sweeper = asyncio.create_task(keep_sweeping(s), name="casesignd-retention")
        # Webhooks: the outbox's rows, sent at least once (casesignd.webhooks.sender),
        # once an endpoint is configured (now, or by a reload).
        s.webhooks.start()
        yield
        sweeper.cancel()
        await s.webhooks.stop()
        warm.cancel()
        keeper.cancel()
        if renewer is not None:
            renewer.cancel()
        await s.longterm.close()
    finally:
        s.shutting_down = True
        if s.kiosk_flights:
            # A flight past its answer records its outcome; one still under way after
            # the grace period is cancelled (a job it wrote is reclaimed at restart).
            _done, left = await asyncio.wait(set(s.kiosk_flights), timeout=cfg.workers.shutdown_grace_s)
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left, timeout=10)
        if s.pool.started:
            await s.pool.stop(cfg.workers.shutdown_grace_s)
        await s.fetcher.close()
        await asyncio.to_thread(s.close_cpu)
        await s.store.close()
        await asyncio.to_thread(s.tracing.stop)


def _plain_parts(sealed: SealedPath, tail: bytes, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The plain bytes of ``sealed`` a chunk at a time, then ``tail`` (read in the
    publishing thread)."""
    with sealed.open() as f:
        while chunk := f.read(chunk_bytes):
            yield chunk
    if tail:
        yield tail
