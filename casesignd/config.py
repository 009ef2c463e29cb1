"""Configuration: one TOML file decoded into typed settings (msgspec).

A bad configuration stops the daemon before it listens, with one line that names the
key and what is wrong (:class:`casesignd.core.errors.ConfigError`). Relative paths are
resolved against the directory of the config file, so a setup made by
``casesignd init --dir DIR`` can be moved as a whole.

Here are the loading of the file, the top-level :class:`Config`, the sections no one
module owns, and the checks across sections. A section whose settings one part of the
service decides on keeps its struct and its own checks in ``casesignd.core``, beside
that decision: a policy (:mod:`casesignd.core.policy`), the kiosk
(:mod:`casesignd.core.kiosk_limits`), retention (:mod:`casesignd.core.retention_periods`),
sources (:mod:`casesignd.core.source_settings`), a tenant's limits and webhooks, the
storage keys and verify's budget.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec

from casesignd.core import webhook_events as webhooks
from casesignd.core.errors import ConfigError
from casesignd.core.keyring import Keyring, OldKey, check_storage_keys, load_keyring
from casesignd.core.kiosk_limits import Kiosk
from casesignd.core.policy import Policy
from casesignd.core.retention_periods import Retention
from casesignd.core.source_settings import Source
from casesignd.core.tenant_limits import TenantLimits
from casesignd.core.verify_budget import VerifyBudget
from casesignd.core.webhook_events import Webhook

MiB = 1024 * 1024

FETCH_MODES = ("never", "missing", "always")


class Server(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    listen: str = "127.0.0.1:8787"
    # Largest JSON request body; object uploads have their own limit.
    max_json_bytes: int = 1 * MiB
    max_object_bytes: int = 512 * MiB
    # Seconds a client may take to send its headers and a JSON or kiosk body; for an
    # object upload, the longest pause between two pieces of the body.
    request_timeout_s: float = 60.0
    # Seconds one object upload's body may take in all: a client that sends a byte
    # now and then, each within request_timeout_s, still ends (408 request_timeout).
    # An hour moves max_object_bytes at about 150 kB/s.
    upload_max_s: float = 3600.0
    # Object uploads at once, in all and from one tenant; past either the answer is
    # 429 too_many_uploads before the body is read. max_uploads_per_tenant 0: all of
    # max_uploads with one tenant, half of it (at least 1) with several.
    max_uploads: int = 32
    max_uploads_per_tenant: int = 0
    # The event loop the daemon runs on: "uvloop" (libuv, in C) or "asyncio" (the
    # standard library's selector loop).
    event_loop: str = "uvloop"

    def upload_share(self, tenants: int) -> int:
        """Uploads one tenant may have in flight at once, with ``tenants`` configured."""
        if self.max_uploads_per_tenant:
            return min(self.max_uploads_per_tenant, self.max_uploads)
        return self.max_uploads if tenants <= 1 else max(1, self.max_uploads // 2)


STORE_KINDS = ("sqlite", "postgres")
EVENT_LOOPS = ("uvloop", "asyncio")


class Store(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # "sqlite": the embedded file at path, one daemon. "postgres": the database at
    # dsn, which any number of daemons may share.
    kind: str = "sqlite"
    path: str = "casesignd.db"
    busy_timeout_ms: int = 5000
    # A libpq connection string or URI, without the password.
    dsn: str = ""
    # File holding the database password; a bare name is looked up in
    # $CREDENTIALS_DIRECTORY first. Empty: none (peer, trust or certificate login,
    # or a ~/.pgpass).
    password_file: str = ""
    # PostgreSQL: daemons tell each other of queued jobs with a debounced NOTIFY and
    # claim them at once; without it they find them at their next poll (with jitter).
    notify: bool = False


class Storage(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Objects (uploads) and artifacts (signed results) live under state_dir.
    state_dir: str = "."
    # Per-attempt working files; a size-capped tmpfs under systemd.
    temp_dir: str = "tmp"
    temp_quota_bytes: int = 1024 * MiB
    # Retry hint for an attempt whose temp reservation does not fit right now.
    temp_quota_retry_s: float = 5.0
    # Bytes of object uploads in flight (their files under state_dir/objects/tmp, on
    # the state volume, not the temp one): each upload counts its Content-Length, or
    # what it has streamed so far. Past it: 503 upload_quota. At least
    # server.max_object_bytes, so that every object can be uploaded.
    upload_quota_bytes: int = 2048 * MiB
    # Objects and artifacts sealed at rest, each under a data key of its own wrapped by
    # the key in key_file (64 hex digits; a bare name is looked up in
    # $CREDENTIALS_DIRECTORY first), named key_id; old_keys still read what they
    # wrapped until `casesignd store rekey` (casesignd.core.keyring).
    encrypt: bool = False
    key_file: str = ""
    key_id: str = ""
    old_keys: list[OldKey] = msgspec.field(default_factory=list)


class Workers(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    concurrency: int = 4
    max_inflight_bytes: int = 1024 * MiB
    lease_s: float = 30.0
    heartbeat_s: float = 10.0
    reclaim_interval_s: float = 5.0
    poll_interval_ms: float = 200.0
    max_queue_depth: int = 10000
    # Acknowledged jobs queued past which a new job's acknowledgement waits for the
    # workers to claim one (casesignd/engine/pacing.py); at least 2 x concurrency; 0: never.
    ack_pacing_depth: int = 32
    ack_pacing_max_ms: float = 500.0
    shutdown_grace_s: float = 20.0
    # One attempt running longer than this fails retryably (attempt_timeout).
    max_run_s: float = 900.0
    # CPU-heavy steps (PDF parsing, signing, rendering) run in this many processes.
    cpu_processes: int = 2


class Retry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    max_attempts: dict[str, int] = msgspec.field(
        default_factory=lambda: {"sign_case": 6, "render_invoice": 6, "extend_signature": 6}
    )
    default_max_attempts: int = 5
    # A job whose lease expired this many times fails with category "lost".
    max_lost_leases: int = 5


class Pkcs11(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    module: str
    token_label: str
    key_label: str
    pin_file: str
    cert_file: str = ""  # PEM; read from the token when empty


class Signing(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # PKCS#12 file and its password file; a bare name (no slash) is looked up in
    # $CREDENTIALS_DIRECTORY first (systemd LoadCredential).
    pkcs12_path: str = ""
    pkcs12_password_file: str = ""
    pkcs11: Pkcs11 | None = None
    # Extra certificates (PEM) to embed, e.g. intermediates.
    chain_file: str = ""
    # Concurrent uses of the key; the kiosk path reserves kiosk_key_slots of them.
    key_slots: int = 2
    signer_name: str = "casesignd"


class Validation(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # PEM files of trust anchors: the roots signer and timestamp chains are built to,
    # for signing from B-LT up and for verify.
    trust_roots: list[str] = msgspec.field(default_factory=list)
    # Revocation data for verify: "never" (the document's own only), "missing"
    # (online for what the document lacks), "always" (online for every certificate).
    fetch: str = "missing"
    # One OCSP or CRL fetch, and one path's validation with its fetches.
    fetch_timeout_s: float = 5.0
    # Revocation data kept for signing is fetched again this long before its
    # nextUpdate (or after this age, when it has none), so that no signature waits
    # for a fetch while the cached data is good.
    refresh_ahead_s: float = 3600.0
    # What one verify request may cost, and verify's share of the CPU.
    budget: VerifyBudget = msgspec.field(default_factory=VerifyBudget)


class Archive(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # B-LTA artifacts whose last timestamp's chain expires within this many days get
    # an extend_signature job (fresh validation data and a new document timestamp).
    # 0: never scheduled (extend_signature can still be posted).
    renew_before_days: int = 0
    # How often the daemon looks for artifacts to renew.
    renew_interval_s: float = 86400.0


class Tracing(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # OTLP/HTTP traces endpoint (http://collector:4318/v1/traces); empty: no tracing,
    # and nothing of OpenTelemetry is imported (casesignd.observability.tracing).
    otlp_endpoint: str = ""


class Link(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    secret_file: str = "link.secret"
    ttl_s: int = 3600


# The template that prints a tenant's invoice settings (casesignd.invoices.templates).
BRANDED_TEMPLATE = "invoice-v4"


class TenantInvoice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # A tenant's own invoices: each setting left out is the daemon's [invoice] one
    # (but default_template, which is invoice-v4); labels are merged key by key over
    # the daemon's.
    default_template: str | None = None
    issuer_name: str | None = None
    issuer_address: list[str] | None = None
    issuer_tax_ids: list[str] | None = None
    tax_rate: str | None = None
    tax_label: str | None = None
    logo: str | None = None
    footer: list[str] | None = None
    locale: str | None = None
    labels: dict[str, str] | None = None


class Tenant(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    # SHA-256 (hex) of the bearer token; the token itself is never stored.
    token_sha256: str
    invoice: TenantInvoice | None = None
    # Endpoints its jobs may name by name ([[tenants.webhooks]], casesignd.core.webhook_events).
    webhooks: list[Webhook] = msgspec.field(default_factory=list)
    # What it may admit, queue, upload and run ([tenants.limits], casesignd.core.tenant_limits).
    limits: TenantLimits = msgspec.field(default_factory=TenantLimits)

    # Its turns at claims among the tenants with due jobs (casesignd.store.claims): a
    # tenant of weight 2 is claimed from twice as often as one of weight 1.
    weight: float = 1.0


class Operator(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # SHA-256 (hex) of the operator's bearer token, which reads across tenants under
    # /v1/admin; empty: no operator. Never a tenant's token.
    token_sha256: str = ""


class Scanner(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    kind: str = "none"  # "none" or "clamd"
    socket: str = "/run/clamav/clamd.ctl"
    timeout_s: float = 30.0


class Invoice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    default_template: str = "invoice-v3"
    issuer_name: str = "casesignd"
    issuer_address: list[str] = msgspec.field(default_factory=list)
    # Lines under the address naming the issuer's tax identifiers
    # ("USt-IdNr. DE123456789"); invoice-v4 on.
    issuer_tax_ids: list[str] = msgspec.field(default_factory=list)
    # Tax as a decimal fraction string ("0.2"); empty for none.
    tax_rate: str = ""
    tax_label: str = "Tax"
    # A PNG or JPEG printed at the top (invoice-v4 on); empty for none. Checked at
    # start and on SIGHUP (casesignd.invoices.branding); accepted jobs keep the one they had.
    logo: str = ""
    # Lines at the foot of every page (invoice-v4 on).
    footer: list[str] = msgspec.field(default_factory=list)
    # BCP 47 locale of numbers, amounts, dates and direction (invoice-v4 on).
    locale: str = "en-US"
    # The printed words by key (invoice-v4 on), over casesignd.invoices.v4.LABELS.
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    max_items: int = 10000

    def over(self, mine: TenantInvoice | None) -> Invoice:
        """These settings with a tenant's own over them (``mine`` None: these)."""
        if mine is None:
            return self
        changes = {f: getattr(mine, f) for f in mine.__struct_fields__
                   if getattr(mine, f) is not None}
        # A tenant's own settings are what the branded template prints: it is that
        # tenant's default unless it names another.
        changes.setdefault("default_template", BRANDED_TEMPLATE)
        if "labels" in changes:
            changes["labels"] = {**self.labels, **changes["labels"]}
        return msgspec.structs.replace(self, **changes)


class Logging(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    level: str = "info"


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    server: Server = msgspec.field(default_factory=Server)
    store: Store = msgspec.field(default_factory=Store)
    storage: Storage = msgspec.field(default_factory=Storage)
    workers: Workers = msgspec.field(default_factory=Workers)
    retry: Retry = msgspec.field(default_factory=Retry)
    signing: Signing = msgspec.field(default_factory=Signing)
    default_policy: str = "contract-v1"
    policies: list[Policy] = msgspec.field(default_factory=lambda: [Policy(version="contract-v1")])
    links: Link = msgspec.field(default_factory=Link)
    tenants: list[Tenant] = msgspec.field(default_factory=list)
    operator: Operator = msgspec.field(default_factory=Operator)
    sources: list[Source] = msgspec.field(default_factory=list)
    scanner: Scanner = msgspec.field(default_factory=Scanner)
    kiosk: Kiosk = msgspec.field(default_factory=Kiosk)
    invoice: Invoice = msgspec.field(default_factory=Invoice)
    logging: Logging = msgspec.field(default_factory=Logging)
    validation: Validation = msgspec.field(default_factory=Validation)
    archive: Archive = msgspec.field(default_factory=Archive)
    retention: Retention = msgspec.field(default_factory=Retention)
    tracing: Tracing = msgspec.field(default_factory=Tracing)
    # Directory of the config file; relative paths resolve against it.
    base_dir: str = "."

    def path(self, value: str) -> Path:
        """Resolve a configured path against the config file's directory."""
        p = Path(value)
        return p if p.is_absolute() else Path(self.base_dir) / p

    def credential(self, value: str) -> Path:
        """A credential path: a bare name is looked up in $CREDENTIALS_DIRECTORY first."""
        creds = os.environ.get("CREDENTIALS_DIRECTORY")
        if creds and "/" not in value and (Path(creds) / value).exists():
            return Path(creds) / value
        return self.path(value)

    def store_password(self) -> str | None:
        """The PostgreSQL store's password (``store.password_file``), or None."""
        if not self.store.password_file:
            return None
        path = self.credential(self.store.password_file)
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise ConfigError("store.password_file", f"cannot read {path}: {e.strerror}") from None

    def storage_keyring(self) -> Keyring:
        """The storage keys ``[storage]`` names, read from their files or credentials."""
        st = self.storage
        return load_keyring(st.encrypt, self.credential(st.key_file) if st.key_file else None,
                            st.key_id, [(k.id, self.credential(k.file)) for k in st.old_keys])

    def policy(self, version: str | None) -> Policy | None:
        want = version or self.default_policy
        for p in self.policies:
            if p.version == want:
                return p
        return None

    def invoice_for(self, tenant: str) -> Invoice:
        """The invoice settings of ``tenant``: its [tenants.invoice] over [invoice]."""
        for t in self.tenants:
            if t.name == tenant:
                return self.invoice.over(t.invoice)
        return self.invoice

    def webhook(self, tenant: str, name: str) -> Webhook | None:
        """``tenant``'s endpoint ``name``: another tenant's is none."""
        for t in self.tenants:
            if t.name == tenant:
                return next((w for w in t.webhooks if w.name == name), None)
        return None

    def limits_of(self, tenant: str) -> TenantLimits:
        """``tenant``'s [tenants.limits] (none set: no limit)."""
        for t in self.tenants:
            if t.name == tenant:
                return t.limits
        return TenantLimits()

    def source(self, name: str) -> Source | None:
        for s in self.sources:
            if s.name == name:
                return s
        return None


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _check(cfg: Config) -> None:
    """Semantic checks msgspec's types cannot express; raise ConfigError naming the key."""
    check_storage_keys(cfg.storage.encrypt, cfg.storage.key_file, cfg.storage.key_id,
                       cfg.storage.old_keys)
    host, sep, port = cfg.server.listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("server.listen", f"expected HOST:PORT, got {cfg.server.listen!r}")
    if cfg.server.event_loop not in EVENT_LOOPS:
        raise ConfigError("server.event_loop", f"expected one of {', '.join(EVENT_LOOPS)}, "
                                               f"got {cfg.server.event_loop!r}")
    positive = {
        "server.max_json_bytes": cfg.server.max_json_bytes,
        "server.max_object_bytes": cfg.server.max_object_bytes,
        "server.upload_max_s": cfg.server.upload_max_s,
        "server.max_uploads": cfg.server.max_uploads,
        "storage.upload_quota_bytes": cfg.storage.upload_quota_bytes,
        "storage.temp_quota_bytes": cfg.storage.temp_quota_bytes,
        "workers.concurrency": cfg.workers.concurrency,
        "workers.max_inflight_bytes": cfg.workers.max_inflight_bytes,
        "workers.lease_s": cfg.workers.lease_s,
        "workers.heartbeat_s": cfg.workers.heartbeat_s,
        "workers.max_queue_depth": cfg.workers.max_queue_depth,
        "workers.cpu_processes": cfg.workers.cpu_processes,
        "signing.key_slots": cfg.signing.key_slots,
        "kiosk.deadline_ms": cfg.kiosk.deadline_ms,
        "retry.base_delay_s": cfg.retry.base_delay_s,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(key, f"must be positive, got {value}")
    for key, value in {"workers.ack_pacing_depth": cfg.workers.ack_pacing_depth,
                       "workers.ack_pacing_max_ms": cfg.workers.ack_pacing_max_ms}.items():
        if value < 0:
            raise ConfigError(key, f"must be 0 or positive, got {value}")
    if cfg.workers.heartbeat_s >= cfg.workers.lease_s:
        raise ConfigError("workers.heartbeat_s", "must be shorter than workers.lease_s")
    if cfg.kiosk.reserved_key_slots >= cfg.signing.key_slots + 1:
        raise ConfigError("kiosk.reserved_key_slots", "must leave a key slot for batch jobs")
    if cfg.storage.upload_quota_bytes < cfg.server.max_object_bytes:
        raise ConfigError("storage.upload_quota_bytes",
                          "must hold at least one object of server.max_object_bytes")
    if cfg.server.max_uploads_per_tenant < 0:
        raise ConfigError("server.max_uploads_per_tenant",
                          f"must be 0 (half of server.max_uploads) or positive, "
                          f"got {cfg.server.max_uploads_per_tenant}")
    for key, why in cfg.kiosk.problems():
        raise ConfigError(f"kiosk.{key}", why)
    seen: set[str] = set()
    for i, p in enumerate(cfg.policies):
        for key, why in p.problems():
            raise ConfigError(f"policies[{i}].{key}", why)
        if p.at_least("B-LT") and not cfg.validation.trust_roots:
            raise ConfigError("validation.trust_roots",
                              f"policy {p.version!r} at {p.level} needs trust roots")
        if p.version in seen:
            raise ConfigError(f"policies[{i}].version", f"duplicate version {p.version!r}")
        seen.add(p.version)
    if cfg.default_policy not in seen:
        raise ConfigError("default_policy", f"no policy with version {cfg.default_policy!r}")
    names: set[str] = set()
    for i, t in enumerate(cfg.tenants):
        if not _HEX64.match(t.token_sha256):
            raise ConfigError(f"tenants[{i}].token_sha256", "expected 64 lowercase hex digits")
        if t.name in names:
            raise ConfigError(f"tenants[{i}].name", f"duplicate tenant {t.name!r}")
        names.add(t.name)
        if not 0.01 <= t.weight <= 1000:
            raise ConfigError(f"tenants[{i}].weight", "expected a number from 0.01 to 1000")
        problem = webhooks.check(t.webhooks, f"tenants[{i}]")
        if problem:
            raise ConfigError(*problem)
        for key, why in t.limits.problems():
            raise ConfigError(f"tenants[{i}].limits.{key}", why)
    _check_operator(cfg)
    for i, s in enumerate(cfg.sources):
        for key, why in s.problems():
            raise ConfigError(f"sources[{i}].{key}", why)
    for key, why in cfg.validation.budget.problems():
        raise ConfigError(f"validation.budget.{key}", why)
    if cfg.validation.fetch not in FETCH_MODES:
        raise ConfigError("validation.fetch",
                          f"expected one of {', '.join(FETCH_MODES)}, got {cfg.validation.fetch!r}")
    for key, why in cfg.retention.problems():
        raise ConfigError(f"retention.{key}", why)
    if cfg.archive.renew_before_days < 0:
        raise ConfigError("archive.renew_before_days", "must be 0 (never) or positive")
    if cfg.tracing.otlp_endpoint and not cfg.tracing.otlp_endpoint.startswith(
            ("http://", "https://")):
        raise ConfigError("tracing.otlp_endpoint", "expected an http(s) URL or empty")
    _check_store(cfg.store)
    if cfg.scanner.kind not in ("none", "clamd"):
        raise ConfigError("scanner.kind", f"expected 'none' or 'clamd', got {cfg.scanner.kind!r}")


def _check_operator(cfg: Config) -> None:
    digest = cfg.operator.token_sha256
    if not digest:
        return
    if not _HEX64.match(digest):
        raise ConfigError("operator.token_sha256", "expected 64 lowercase hex digits")
    if any(t.token_sha256 == digest for t in cfg.tenants):
        # One token would then be both: a tenant's requests would reach every tenant.
        raise ConfigError("operator.token_sha256", "is a tenant's token; give the operator its own")


def _check_store(store: Store) -> None:
    if store.kind not in STORE_KINDS:
        raise ConfigError("store.kind", f"expected one of {', '.join(STORE_KINDS)}, got {store.kind!r}")
    if store.kind != "postgres":
        for key, value in (("dsn", store.dsn), ("password_file", store.password_file)):
            if value:
                raise ConfigError(f"store.{key}", "applies only with kind = \"postgres\"")
        return
    if not store.dsn:
        raise ConfigError("store.dsn", "kind = \"postgres\" needs a dsn (libpq string or URI)")
    from psycopg.conninfo import conninfo_to_dict  # only for a PostgreSQL store

    try:
        params = conninfo_to_dict(store.dsn)
    except Exception as e:  # psycopg.ProgrammingError; its text never holds the password
        raise ConfigError("store.dsn", f"not a libpq connection string or URI: {e}") from None
    if "password" in params:
        # A config file is read by people and copied around; a password is not kept in it.
        raise ConfigError("store.dsn", "holds a password: put it in store.password_file")


def _key_of(err: msgspec.ValidationError) -> tuple[str, str]:
    # msgspec says "Expected `int`, got `str` - at `$.workers.concurrency`".
    text = str(err)
    msg, _, where = text.partition(" - at `")
    key = where.rstrip("`").removeprefix("$").lstrip(".") or "(root)"
    key = re.sub(r"\.\[", "[", key)
    return key, msg


def loads(text: str, base_dir: str = ".") -> Config:
    """Decode and check a config from TOML text."""
    try:
        cfg = msgspec.toml.decode(text.encode(), type=Config)
    except msgspec.ValidationError as e:
        key, msg = _key_of(e)
        raise ConfigError(key, msg) from None
    except msgspec.DecodeError as e:
        raise ConfigError("(file)", f"not valid TOML: {e}") from None
    cfg.base_dir = base_dir
    _check(cfg)
    return cfg


def load(path: str | os.PathLike[str]) -> Config:
    """Read the config file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("(file)", f"cannot read {p}: {e.strerror}") from None
    return loads(text, base_dir=str(p.resolve().parent))

