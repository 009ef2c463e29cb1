"""`casesignd init`: a working local setup in one directory.

``init_dir(DIR)`` writes, never overwriting anything:

- ``config.toml``: every setting of :mod:`casesignd.config`, each with a comment,
  paths relative to DIR so the directory can be moved as a whole;
- ``ca.pem``: a development CA certificate, the trust anchor for ``casesignd verify``;
- ``signing.p12`` and ``signing.pass``: the service's signing key and certificate
  (issued by that CA, chain included) and its random password, both 0600;
- ``link.secret``: 32 random bytes keying the signed artifact links, 0600;
- ``client.env``: ``CASESIGND_URL`` and the ``default`` tenant's bearer token, 0600;
- ``tmp/``: the per-attempt temp directory.

The tenant token is shown to the config only as its SHA-256 (``token_sha256``): the
hash covers the whole token string, ``csd_`` prefix included, as UTF-8.

The CA's private key is deliberately not kept. The daemon never needs it, and a key
that can mint certificates chaining to the anchor users import into their verifier is
a stronger secret than the signing key itself; leaving it in the daemon's state
directory would widen what a read of that directory gives away. A development setup
that needs a new key runs ``init`` into a fresh directory; production brings its own
PKCS#12 or PKCS#11 key.

``render_config`` is pure (a :class:`~casesignd.config.Config` in, TOML text out) and
walks the config structs, so a setting added to config.py appears in new setups
without a change here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from casesignd import config as cfgmod
from casesignd.core import tenant_limits
from casesignd.core.errors import CasesignError, ConfigError, Conflict
from casesignd.core.hashing import sha256_hex

TOKEN_PREFIX = "csd_"
DEFAULT_TENANT = "default"
CONFIG_NAME = "config.toml"
CLIENT_ENV_NAME = "client.env"
CA_NAME = "ca.pem"
P12_NAME = "signing.p12"
PASS_NAME = "signing.pass"

# Comments written above each setting. A setting missing here still gets written,
# with a pointer to config.py.
DESCRIPTIONS: dict[str, str] = {
    "default_policy": "Policy used when a job leaves policy_version out.",
    "server": "HTTP listener and request limits.",
    "server.listen": "HOST:PORT to listen on (loopback only unless fronted by a proxy).",
    "server.max_json_bytes": "Largest JSON request body, in bytes.",
    "server.max_object_bytes": "Largest object upload (PUT .../objects/{sha256}), in bytes.",
    "server.request_timeout_s": "Seconds a client may take to send its headers and a JSON or kiosk body; for an upload, the longest pause.",
    "server.upload_max_s": "Seconds one object upload's body may take in all (408 request_timeout after).",
    "server.max_uploads": "Object uploads at once; past it 429 too_many_uploads, before the body is read.",
    "server.max_uploads_per_tenant": "Object uploads at once from one tenant; 0: all of max_uploads with one tenant, half of it with several.",
    "server.event_loop": "\"uvloop\" (libuv's event loop, the lighter on CPU) or \"asyncio\" (the standard library's); read at start.",
    "store": "The job store: jobs, their audit chain, signatures.",
    "store.kind": "\"sqlite\" (the embedded file at path, one daemon) or \"postgres\" (the database at dsn, which several daemons may share).",
    "store.path": "SQLite database file (jobs, objects index, audit chain).",
    "store.busy_timeout_ms": "How long a write waits for the SQLite lock.",
    "store.dsn": "PostgreSQL: a libpq connection string or URI, without the password (\"host=/run/postgresql dbname=casesignd\").",
    "store.password_file": "PostgreSQL: file holding the password; a bare name is looked up in $CREDENTIALS_DIRECTORY first. Empty: none.",
    "store.notify": "PostgreSQL: daemons tell each other of queued jobs (a debounced NOTIFY) and claim them at once; false: they poll (workers.poll_interval_ms, with jitter).",
    "storage": "Where objects, artifacts and working files live.",
    "storage.state_dir": "Objects (uploads) and artifacts (signed results) live under here.",
    "storage.temp_dir": "Per-attempt working files; a size-capped tmpfs under systemd.",
    "storage.temp_quota_bytes": "Total size the temp directory may hold, in bytes.",
    "storage.temp_quota_retry_s": "Retry hint for an attempt whose temp space does not fit now.",
    "storage.upload_quota_bytes": "Bytes of object uploads in flight (Content-Length, or what is streamed); past it 503 upload_quota.",
    "workers": "The job worker pool.",
    "workers.concurrency": "Jobs processed at the same time.",
    "workers.max_inflight_bytes": "Sum of declared input sizes of running jobs, in bytes.",
    "workers.lease_s": "A worker's claim on a job; an expired lease lets another worker reclaim it.",
    "workers.heartbeat_s": "How often a running job renews its lease (shorter than lease_s).",
    "workers.reclaim_interval_s": "How often expired leases are looked for.",
    "workers.poll_interval_ms": "How often idle workers look for queued jobs.",
    "workers.max_queue_depth": "Queued jobs beyond which POST /v1/jobs answers 429 queue_full.",
    "workers.ack_pacing_depth": "Acknowledged jobs queued beyond which POST /v1/jobs keeps a new job's acknowledgement waiting until the workers claim a job (at least 2 x concurrency; 0: never).",
    "workers.ack_pacing_max_ms": "The longest an acknowledgement waits so.",
    "workers.shutdown_grace_s": "On SIGTERM, how long running jobs may take to finish.",
    "workers.cpu_processes": "Processes for CPU-heavy steps (PDF parsing, signing, rendering).",
    "retry": "Retries of transient failures (exponential backoff with jitter).",
    "retry.base_delay_s": "Delay before the first retry.",
    "retry.max_delay_s": "Upper bound of a retry delay.",
    "retry.max_attempts": "Attempt budget per job kind.",
    "retry.default_max_attempts": "Attempt budget for kinds not named in max_attempts.",
    "retry.max_lost_leases": "A job whose lease expired this many times fails as 'lost'.",
    "signing": "The service signing key.",
    "signing.pkcs12_path": "PKCS#12 key and certificate; a bare name is looked up in "
    "$CREDENTIALS_DIRECTORY first (systemd LoadCredential).",
    "signing.pkcs12_password_file": "File holding the PKCS#12 password (same lookup).",
    "signing.chain_file": "Extra certificates (PEM) to embed, e.g. intermediates.",
    "signing.key_slots": "Concurrent uses of the key.",
    "signing.signer_name": "Name recorded as the signer in signatures.",
    "signing.pkcs11": "A PKCS#11 token instead of the PKCS#12 file.",
    "signing.pkcs11.module": "Path of the PKCS#11 module.",
    "signing.pkcs11.token_label": "Label of the token.",
    "signing.pkcs11.key_label": "Label of the private key on the token.",
    "signing.pkcs11.pin_file": "File holding the user PIN.",
    "signing.pkcs11.cert_file": "Certificate (PEM); read from the token when empty.",
    "policies": "Versioned signing policies; a job names one by policy_version.",
    "policies.version": "The policy_version jobs refer to.",
    "policies.evidence_media_types": "Media types accepted for evidence items.",
    "policies.max_pages": "Most pages a contract PDF may have.",
    "policies.max_document_bytes": "Largest item, in bytes.",
    "policies.max_items": "Most items in one case.",
    "policies.forbid_active_content": "Refuse PDFs with JavaScript, launch actions or similar.",
    "policies.level": "PAdES baseline level: B-B, B-T, B-LT or B-LTA; empty: B-T with a "
    "tsa_url, else B-B.",
    "policies.tsa_url": "RFC 3161 time-stamping authority; required from B-T up.",
    "policies.tsa_timeout_s": "Timeout of one time-stamp request.",
    "policies.reason": "Reason recorded in the signature.",
    "policies.location": "Location recorded in the signature.",
    "links": "Signed, expiring artifact download links.",
    "links.secret_file": "Key of the link signatures (at least 32 random bytes).",
    "links.ttl_s": "How long a download link stays valid.",
    "tenants": "Callers and the SHA-256 (hex) of their bearer tokens; tokens are never stored.",
    "tenants.name": "Tenant name; every job, object and event belongs to one tenant.",
    "tenants.token_sha256": "SHA-256 (hex) of the tenant's bearer token.",
    "tenants.weight": "Its turns at claims among tenants with due jobs: weight 2 is claimed from "
                      "twice as often as weight 1.",
    "sources": "Where object_ref '<source>:<path>' items are read from.",
    "sources.name": "The <source> prefix of an object_ref.",
    "sources.kind": "'dir' (a directory root) or 'http' (a base URL read with retries).",
    "sources.root": "Root directory of a 'dir' source.",
    "sources.base_url": "Base URL of an 'http' source.",
    "sources.connect_timeout_s": "Connect timeout of an 'http' source.",
    "sources.read_timeout_s": "Read timeout of an 'http' source.",
    "sources.max_attempts": "Attempts per read of an 'http' source.",
    "sources.base_delay_s": "Delay before the first re-read of an 'http' source.",
    "sources.max_delay_s": "Cap of one re-read delay of an 'http' source.",
    "sources.retry_after_cap_s": "Longest Retry-After of an 'http' source that is honoured.",
    "scanner": "Malware scanning of inputs.",
    "scanner.kind": "'none' or 'clamd'.",
    "scanner.socket": "clamd's Unix socket.",
    "scanner.timeout_s": "Timeout of one scan.",
    "kiosk": "The synchronous POST /v1/sign path.",
    "kiosk.deadline_ms": "A kiosk request answers within this, or 504 deadline_exceeded.",
    "kiosk.max_document_bytes": "Largest kiosk document, in bytes.",
    "kiosk.reserved_key_slots": "Key slots kept for the kiosk path (of signing.key_slots).",
    "kiosk.max_concurrent": "Kiosk requests in flight; beyond it, 503 busy.",
    "kiosk.max_concurrent_per_tenant": "Kiosk requests one tenant may have in flight; beyond "
    "it, 503 busy for that tenant (0: all of max_concurrent with one tenant, half with several).",
    "kiosk.cpu_processes_per_tenant": "Kiosk processes one tenant's documents may take at once "
    "(0: all with one tenant, half with several).",
    "kiosk.max_inflated_bytes": "Bytes the checks of one kiosk document may inflate (images "
    "are never inflated); they also stop after the deadline's worth of CPU time.",
    "kiosk.cpu_processes": "Worker processes kept for kiosk requests alone (batch jobs never use them).",
    "kiosk.inline_artifact_max_bytes": "Signed documents up to this size are kept in the store, "
    "committed with their record; larger ones are files under state_dir. 0: always files.",
    "workers.max_run_s": "One attempt running longer than this fails retryably (attempt_timeout).",
    "policies.max_decoded_stream_bytes": "Largest decoded size of one PDF stream (decompression bombs).",
    "policies.max_decoded_document_bytes": "Largest decoded size of all streams of one PDF together.",
    "policies.max_check_cpu_s": "CPU seconds the checks of one PDF may take.",
    "policies.normalize": "Rewrite a PDF whose readers could disagree before signing it: "
    "never, when_needed or always.",
    "policies.allowed_actions": "PDF action types a document may hold; any other is active "
    "content (Named: page navigation only).",
    "policies.max_pdf_objects": "Most objects a PDF may have.",
    "policies.max_pdf_depth": "Deepest nesting of PDF objects and of the page tree.",
    "invoice": "The render_invoice job kind.",
    "invoice.default_template": "Template used when a job leaves template_version out.",
    "invoice.issuer_name": "Issuer printed on invoices.",
    "invoice.issuer_address": "Issuer address lines.",
    "invoice.tax_rate": "Tax as a decimal fraction string ('0.2'); empty for none.",
    "invoice.tax_label": "Label of the tax line.",
    "invoice.issuer_tax_ids": "Lines naming the issuer's tax identifiers (invoice-v4 on).",
    "invoice.logo": "PNG or JPEG printed at the top (invoice-v4 on); empty for none.",
    "invoice.footer": "Lines at the foot of every page (invoice-v4 on).",
    "invoice.locale": "BCP 47 locale of numbers, amounts, dates and direction (invoice-v4 on).",
    "invoice.labels": "Printed words by key (invoice-v4 on): invoice, invoice_no, issue_date, "
    "bill_to, customer_tax_id, number, description, quantity, unit_price, amount, subtotal, "
    "total, page ('Page {page} of {pages}').",
    "invoice.max_items": "Most line items in one invoice.",
    "tenants.webhooks": "An endpoint this tenant's jobs may name by \"webhook\" (never a "
    "URL); its deliveries are sent at least once, signed as Standard Webhooks.",
    "tenants.webhooks.name": "Its name, as a job names it.",
    "tenants.webhooks.url": "https, or http to a loopback address; redirects are not followed.",
    "tenants.webhooks.events": "What it is told: job.ready, job.failed, job.canceled, "
    "signature.extended.",
    "tenants.webhooks.secret_file": "Its secrets (whsec_ and base64), one a line; two while "
    "rotating: each request is signed with both.",
    "tenants.webhooks.timeout_s": "Time one attempt may take.",
    "tenants.webhooks.max_attempts": "Attempts before a delivery is dead (timeouts, connection "
    "errors, 429 and 5xx are retried; other answers are final).",
    "tenants.webhooks.base_delay_s": "First backoff, doubled each attempt, with jitter.",
    "tenants.webhooks.max_delay_s": "Longest backoff.",
    "tenants.webhooks.allow_addresses": "Link-local or metadata addresses it may resolve to "
    "all the same (else refused).",
    "tenants.invoice": "This tenant's own invoice settings; each one left out is [invoice]'s.",
    "tenants.invoice.default_template": "Template of this tenant's invoices that name none "
    "(invoice-v4 when left out: the one that prints these settings).",
    "tenants.invoice.issuer_name": "Issuer printed on this tenant's invoices.",
    "tenants.invoice.issuer_address": "Its address lines.",
    "tenants.invoice.issuer_tax_ids": "Lines naming its tax identifiers.",
    "tenants.invoice.tax_rate": "Its tax as a decimal fraction string ('0.19').",
    "tenants.invoice.tax_label": "Label of its tax line.",
    "tenants.invoice.logo": "Its logo, a PNG or JPEG file.",
    "tenants.invoice.footer": "Its footer lines.",
    "tenants.invoice.locale": "Its BCP 47 locale.",
    "tenants.invoice.labels": "Its printed words, over [invoice]'s, by key.",
    "logging": "Logging.",
    "logging.level": "debug, info, warning or error.",
    "validation": "Trust anchors and revocation data: signing from B-LT up, and verify.",
    "validation.trust_roots": "PEM files of the roots signer and timestamp chains are built to.",
    "validation.fetch": "Revocation data for verify: never (the document's own), missing "
    "(online for what it lacks) or always.",
    "validation.fetch_timeout_s": "One OCSP or CRL fetch.",
    "validation.refresh_ahead_s": "Revocation data kept for signing is fetched again this long "
    "before its nextUpdate.",
    "tracing": "OpenTelemetry traces (casesignd.observability.tracing): every request continues its W3C "
    "traceparent.",
    "tracing.otlp_endpoint": "OTLP/HTTP traces URL (http://collector:4318/v1/traces); empty: "
    "no tracing, at no cost.",
    "archive": "Renewal of B-LTA artifacts (extend_signature).",
    "archive.renew_before_days": "Renew artifacts whose last timestamp's chain expires within "
    "this many days; 0: never.",
    "archive.renew_interval_s": "How often the daemon looks for artifacts to renew.",
    "retention": "How long things live, in seconds; 0 keeps them for ever (docs/operating.md, "
    "\"Retention, legal holds and erasure\").",
    "retention.objects_s": "Uploaded objects, from the end of the last job that uses them.",
    "retention.artifacts_s": "Artifacts (signed results), from when they were made.",
    "retention.jobs_s": "Terminal job rows (ready, canceled, failed), from their end; webhook "
    "deliveries that ended, from theirs.",
    "retention.rejected_s": "Jobs refused for their input (the kiosk's refused documents among "
    "them), from their end.",
    "retention.sweep_interval_s": "How often the daemon removes what is due.",
    "retention.sweep_batch": "How many rows one removal transaction takes.",
    **tenant_limits.DESCRIPTIONS,
}

# Values shown in commented-out examples for settings that have no default.
EXAMPLES: dict[str, Any] = {
    "signing.pkcs11.module": "/usr/lib/softhsm/libsofthsm2.so",
    "signing.pkcs11.token_label": "casesignd",
    "signing.pkcs11.key_label": "signing",
    "signing.pkcs11.pin_file": "pkcs11.pin",
    "sources.name": "archive",
    "sources.kind": "dir",
    "sources.root": "/srv/archive",
    "tenants.name": "another-tenant",
    "tenants.token_sha256": "0" * 64,
    "tenants.invoice.default_template": "invoice-v4",
    "tenants.invoice.issuer_name": "Another School",
    "tenants.invoice.issuer_address": ["Hauptstrasse 1", "10115 Berlin"],
    "tenants.invoice.issuer_tax_ids": ["USt-IdNr. DE123456789"],
    "tenants.invoice.tax_rate": "0.19",
    "tenants.invoice.tax_label": "MwSt.",
    "tenants.invoice.logo": "another-school.png",
    "tenants.invoice.footer": ["Bank: IBAN DE00 0000 0000 0000 0000 00"],
    "tenants.invoice.locale": "de-DE",
    "tenants.invoice.labels": {"invoice": "RECHNUNG", "total": "Gesamt"},
    "tenants.webhooks.name": "erp",
    "tenants.webhooks.url": "https://erp.example/casesignd",
    "tenants.webhooks.secret_file": "erp-webhook.secret",
    "policies.version": "contract-v2",
}

# Set by config.load from the file's location; not a setting of the file.
_NOT_SETTINGS = {"base_dir"}

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class InitResult:
    """What :func:`init_dir` wrote."""

    dir: Path
    config_path: Path
    client_env_path: Path
    ca_cert_path: Path
    url: str
    token: str = field(repr=False)
    created: tuple[Path, ...] = ()


# --- pure parts ---------------------------------------------------------------------


def new_token() -> str:
    """A fresh bearer token: ``csd_`` and 32 random bytes, URL-safe base64."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The ``token_sha256`` the config stores for ``token`` (SHA-256 of its UTF-8)."""
    return sha256_hex(token.encode("utf-8"))


def client_url(listen: str) -> str:
    """The URL a local client uses to reach a daemon listening on ``HOST:PORT``.

    A wildcard host (``0.0.0.0``, ``::``, empty) is reached through loopback.
    """
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "*"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def render_client_env(url: str, token: str) -> str:
    """The text of ``client.env`` (KEY=VALUE lines, also usable with ``set -a; .``)."""
    return (
        "# casesignd client settings, read by the casesignd command line.\n"
        "# Environment variables of the same names take precedence.\n"
        f"CASESIGND_URL={url}\n"
        f"CASESIGND_TOKEN={token}\n"
    )


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    """One TOML value. JSON string escapes are a subset of TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _struct_of(tp: Any) -> type[msgspec.Struct] | None:
    """The Struct class behind ``tp`` (``S`` or ``S | None``), else None."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                return arg
    return None


def _list_struct_of(tp: Any) -> type[msgspec.Struct] | None:
    """The Struct class of ``list[S]``, else None."""
    if typing.get_origin(tp) is list:
        (arg,) = typing.get_args(tp)
        if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
            return arg
    return None


def _example(cls: type[msgspec.Struct], path: str) -> dict[str, Any]:
    """Values for a commented-out example of ``cls``: defaults, else EXAMPLES."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        key = f"{path}.{f.name}"
        if key in EXAMPLES:
            out[f.name] = EXAMPLES[key]
        elif f.default is not msgspec.NODEFAULT:
            out[f.name] = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = ""
    return out


def _comment(lines: list[str], path: str, prefix: str) -> None:
    text = DESCRIPTIONS.get(path, f"See {path} in casesignd/config.py.")
    lines.append(f"{prefix}# {text}")


def _emit_table(
    lines: list[str], header: str, path: str, cls: type[msgspec.Struct], values: Any,
    *, commented: bool = False, array: bool = False,
) -> None:
    """Write one ``[header]`` (or ``[[header]]``) with every field of ``cls``.

    ``values`` is a struct instance or, for commented examples, a dict of values.
    Nested struct fields follow the scalars as sub-tables (TOML requires it).
    """
    prefix = "# " if commented else ""
    get = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
    lines.append("")
    _comment(lines, path, prefix)
    lines.append(f"{prefix}[[{header}]]" if array else f"{prefix}[{header}]")
    nested: list[tuple[str, type[msgspec.Struct], Any]] = []
    arrays: list[tuple[str, type[msgspec.Struct], Any]] = []  # [[tenants.webhooks]]
    for f in msgspec.structs.fields(cls):
        sub = _struct_of(f.type)
        if sub is not None:
            nested.append((f.name, sub, get(f.name)))
            continue
        if (item_cls := _list_struct_of(f.type)) is not None:
            arrays.append((f.name, item_cls, get(f.name)))
            continue
        _comment(lines, f"{path}.{f.name}", prefix)
        value = get(f.name)
        if value is None:  # an optional setting left out: its example, commented out
            example = EXAMPLES.get(f"{path}.{f.name}", "")
            lines.append(f"# {_toml_key(f.name)} = {_toml_value(example)}")
        else:
            lines.append(f"{prefix}{_toml_key(f.name)} = {_toml_value(value)}")
    for name, sub, value in nested:
        sub_path = f"{path}.{name}"
        if value is None:
            _emit_table(lines, f"{header}.{name}", sub_path, sub, _example(sub, sub_path),
                        commented=True)
        else:
            _emit_table(lines, f"{header}.{name}", sub_path, sub, value, commented=commented)
    for name, sub, items in arrays:
        sub_path = f"{path}.{name}"
        for item in items or [_example(sub, sub_path)]:
            _emit_table(lines, f"{header}.{name}", sub_path, sub, item, array=True,
                        commented=commented or not items)


def render_config(cfg: cfgmod.Config, *, title: str = "casesignd configuration") -> str:
    """TOML text for ``cfg``: every setting, each commented; ``load`` gives ``cfg`` back.

    Unset optional sections (``signing.pkcs11``) and empty lists of tables
    (``sources``) are written as commented-out examples.
    """
    lines = [
        f"# {title}.",
        "# Relative paths resolve against the directory of this file, so the whole",
        "# directory can be moved. Units are in the names: _s seconds, _ms milliseconds,",
        "# _bytes bytes.",
    ]
    tables: list[tuple[str, Any]] = []
    for f in msgspec.structs.fields(cfgmod.Config):
        if f.name in _NOT_SETTINGS:
            continue
        if _struct_of(f.type) is not None or _list_struct_of(f.type) is not None:
            tables.append((f.name, f.type))
            continue
        # Top-level keys must precede the first table header.
        lines.append("")
        _comment(lines, f.name, "")
        lines.append(f"{_toml_key(f.name)} = {_toml_value(getattr(cfg, f.name))}")
    for name, tp in tables:
        value = getattr(cfg, name)
        item_cls = _list_struct_of(tp)
        if item_cls is None:
            cls = _struct_of(tp)
            assert cls is not None
            if value is None:
                _emit_table(lines, name, name, cls, _example(cls, name), commented=True)
            else:
                _emit_table(lines, name, name, cls, value)
        elif not value:
            _emit_table(lines, name, name, item_cls, _example(item_cls, name),
                        commented=True, array=True)
        else:
            for item in value:
                _emit_table(lines, name, name, item_cls, item, array=True)
    return "\n".join(lines) + "\n"


def local_config(listen: str, token_sha256: str) -> cfgmod.Config:
    """The settings of a fresh local setup: defaults plus the files init writes."""
    return cfgmod.Config(
        server=cfgmod.Server(listen=listen),
        store=cfgmod.Store(path="casesignd.db"),
        storage=cfgmod.Storage(state_dir=".", temp_dir="tmp"),
        signing=cfgmod.Signing(pkcs12_path=P12_NAME, pkcs12_password_file=PASS_NAME),
        links=cfgmod.Link(secret_file="link.secret"),
        tenants=[cfgmod.Tenant(name=DEFAULT_TENANT, token_sha256=token_sha256)],
        # The development CA: what verify (and POST /v1/verify) trusts out of the box.
        validation=cfgmod.Validation(trust_roots=[CA_NAME]),
    )


# --- I/O ------------------------------------------------------------------------------


def _write_new(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: never overwrite, even when another init races this one.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


KEY_TYPES = ("ec", "rsa")


def init_dir(dir: Path, *, listen: str = "127.0.0.1:8787", key_type: str = "ec") -> InitResult:
    """Write a working local setup into ``dir`` (created 0700 if missing). The
    development CA and signing key are ECDSA P-256 (``key_type`` ``ec``: a signature
    costs a few hundredths of a millisecond) or RSA-2048 (``rsa``: several times that,
    the largest single cost of a one-page kiosk signature).

    Raises :class:`casesignd.core.errors.Conflict` (code ``already_exists``) when
    ``config.toml`` or any other file it would write is already there, leaving
    everything as it was; :class:`casesignd.core.errors.ConfigError` for a bad ``listen`` or
    ``key_type``; :class:`casesignd.core.errors.CasesignError` (code ``init_failed``) when a
    write fails, after removing what this call had written.
    """
    from casesignd.ops import devpki  # cryptography is slow to import; only init needs it here

    dir = Path(dir)
    names = (CA_NAME, P12_NAME, PASS_NAME, "link.secret", CLIENT_ENV_NAME, CONFIG_NAME)
    if (dir / CONFIG_NAME).exists():
        raise Conflict(
            f"{dir / CONFIG_NAME} already exists; init never overwrites (choose another --dir)",
            code="already_exists",
        )
    for name in names:
        if (dir / name).exists() or (dir / name).is_symlink():
            raise Conflict(
                f"{dir / name} already exists; init never overwrites (choose another --dir)",
                code="already_exists",
            )

    token = new_token()
    cfg = local_config(listen, hash_token(token))
    cfgmod.loads(render_config(cfg))  # a bad listen fails here, before anything is written
    url = client_url(listen)
    if key_type not in KEY_TYPES:
        raise ConfigError("key_type", f"must be one of {', '.join(KEY_TYPES)}")
    ca = devpki.make_ca(kind=key_type)
    signer = devpki.issue(ca, "casesignd development signer", kind=key_type)
    password = secrets.token_urlsafe(32).encode("ascii")

    created: list[Path] = []
    made_dirs: list[Path] = []
    try:
        if not dir.exists():
            dir.mkdir(mode=0o700, parents=True)
            made_dirs.append(dir)
        os.chmod(dir, 0o700)
        tmp = dir / cfg.storage.temp_dir
        if not tmp.exists():
            tmp.mkdir(mode=0o700)
            made_dirs.append(tmp)

        def put(name: str, data: bytes, mode: int = 0o600) -> None:
            _write_new(dir / name, data, mode)
            created.append(dir / name)

        put(CA_NAME, devpki.cert_pem(ca.cert), 0o644)
        devpki.write_pkcs12(dir / P12_NAME, signer, password)
        created.append(dir / P12_NAME)
        put(PASS_NAME, password)
        put("link.secret", secrets.token_bytes(32))
        put(CLIENT_ENV_NAME, render_client_env(url, token).encode())
        # Last, so that a config.toml always means a complete setup.
        put(CONFIG_NAME, render_config(cfg, title="casesignd configuration for a local "
                                       "development setup").encode())
    except FileExistsError as e:
        _undo(created, made_dirs)
        raise Conflict(f"{e.filename} already exists; init never overwrites",
                       code="already_exists") from None
    except OSError as e:
        _undo(created, made_dirs)
        raise CasesignError(f"cannot write {e.filename or dir}: {e.strerror}",
                            code="init_failed") from None
    return InitResult(
        dir=dir,
        config_path=dir / CONFIG_NAME,
        client_env_path=dir / CLIENT_ENV_NAME,
        ca_cert_path=dir / CA_NAME,
        url=url,
        token=token,
        created=tuple(created),
    )


def _undo(created: list[Path], made_dirs: list[Path]) -> None:
    for path in reversed(created):
        path.unlink(missing_ok=True)
    for d in reversed(made_dirs):
        with contextlib.suppress(OSError):  # not empty: something else lives there
            d.rmdir()
