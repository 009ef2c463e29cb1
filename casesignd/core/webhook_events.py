"""Webhooks, the words every layer shares (pure): the events a tenant's endpoint may
receive and the audit event each reports, which the store's outbox writes a delivery
for; and an endpoint's settings (``[[tenants.webhooks]]``) with their checks, which
the config reads.

A job names one of its tenant's endpoints by name (``"webhook": "erp"``), never a
URL: nothing a caller sends can make casesignd connect anywhere the config does not
name. Sending is :mod:`casesignd.webhooks`'.
"""

from __future__ import annotations

import ipaddress
import math
import re
from urllib.parse import urlsplit

import msgspec

# The webhook events, and the audit event of the state change each reports.
EVENTS = ("job.ready", "job.failed", "job.canceled", "signature.extended")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class Webhook(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One of a tenant's endpoints."""

    name: str
    url: str
    events: list[str] = msgspec.field(default_factory=lambda: list(EVENTS[:3]))
    # One secret per line, "whsec_" + base64 as Standard Webhooks writes it; two lines
    # while a secret is rotated: each request is signed with both, so a receiver that
    # knows either verifies it.
    secret_file: str
    timeout_s: float = 10.0
    max_attempts: int = 12
    base_delay_s: float = 2.0
    max_delay_s: float = 600.0
    # Addresses this endpoint may resolve to although they are link-local or metadata
    # (casesignd.webhooks.endpoints.REFUSED_NETWORKS): an operator's explicit choice, never a caller's.
    allow_addresses: list[str] = msgspec.field(default_factory=list)


def check(webhooks: list[Webhook], where: str) -> tuple[str, str] | None:
    """The first problem of a tenant's endpoints as (key, why), or None (pure)."""
    seen: set[str] = set()
    for i, w in enumerate(webhooks):
        key = f"{where}.webhooks[{i}]"
        if not _NAME.match(w.name):
            return f"{key}.name", f"expected letters, digits and ._- (1-64), got {w.name!r}"
        if w.name in seen:
            return f"{key}.name", f"duplicate endpoint {w.name!r}"
        seen.add(w.name)
        why = url_problem(w.url)
        if why:
            return f"{key}.url", why
        for e in w.events:
            if e not in EVENTS:
                return f"{key}.events", f"{e!r} is not one of {', '.join(EVENTS)}"
        if not w.secret_file:
            return f"{key}.secret_file", "an endpoint needs a secret"
        timings = (w.timeout_s, w.base_delay_s, w.max_delay_s)
        if (not all(map(math.isfinite, timings)) or w.timeout_s <= 0 or w.base_delay_s <= 0
                or w.max_delay_s < w.base_delay_s):
            return f"{key}.timeout_s", "timeouts and delays must be finite and positive, max >= base"
        if w.max_attempts < 1:
            return f"{key}.max_attempts", "must be at least 1"
        for a in w.allow_addresses:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                return f"{key}.allow_addresses", f"{a!r} is not an IP address"
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint, or None: HTTPS, or HTTP to a loopback
    address (tests, a receiver beside the daemon); no credentials in it."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"expected an https URL, got {url!r}"
    if parts.username or parts.password:
        return "holds credentials; the signature authenticates the sender"
    if parts.scheme == "http":
        try:
            loopback = ipaddress.ip_address(parts.hostname).is_loopback
        except ValueError:
            loopback = parts.hostname == "localhost"
        if not loopback:
            return "plain http only to a loopback address; use https"
    return None


def event_of(kind: str, audit_type: str) -> str | None:
    """The webhook event an audit event of a job of ``kind`` reports, or None."""
    if audit_type == "succeeded":
        return "signature.extended" if kind == "extend_signature" else "job.ready"
    return {"failed": "job.failed", "canceled": "job.canceled"}.get(audit_type)
