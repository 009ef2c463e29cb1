"""Webhooks, the pure parts: a tenant's endpoints (``[[tenants.webhooks]]``), which
store event each webhook event reports, what a failed attempt decides, the Standard
Webhooks headers, and which addresses an endpoint may never reach.

A job names one of its tenant's endpoints by name (``"webhook": "erp"``), never a
URL: nothing a caller sends can make casesignd connect anywhere the config does not
name. Its deliveries are rows written in the transaction of the state change they
report (:mod:`casesignd.store.outbox`); :mod:`casesignd.webhooks.sender` sends them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

# The webhook events, and the audit event of the state change each reports.
EVENTS = ("job.ready", "job.failed", "job.canceled", "signature.extended")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Addresses an endpoint resolving to them is refused unless its config names them in
# allow_addresses: link-local (169.254.0.0/16 holds the clouds' metadata services,
# fe80::/10) and the other metadata addresses in use (fd00:ec2::254 on AWS).
REFUSED_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::/32", "100.100.100.200/32"))


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
    # (REFUSED_NETWORKS): an operator's explicit choice, never a caller's.
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
        if w.timeout_s <= 0 or w.base_delay_s <= 0 or w.max_delay_s < w.base_delay_s:
            return f"{key}.timeout_s", "timeouts and delays must be positive, max >= base"
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


def refused_address(address: str, allowed: list[str]) -> bool:
    """Whether an endpoint resolving to ``address`` must not be connected to."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if address in allowed:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in n for n in REFUSED_NETWORKS)


def event_of(kind: str, audit_type: str) -> str | None:
    """The webhook event an audit event of a job of ``kind`` reports, or None."""
    if audit_type == "succeeded":
        return "signature.extended" if kind == "extend_signature" else "job.ready"
    return {"failed": "job.failed", "canceled": "job.canceled"}.get(audit_type)


def secrets_of(path: Path) -> list[str]:
    """The secrets in a secret file, one a line (two while rotating)."""
    return [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]


# --- what an attempt decides ----------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """After an attempt: ``state`` is delivered, retry (at ``delay_s``) or dead."""

    state: str
    delay_s: float = 0.0


def decide(status: int | None, attempts: int, w: Webhook, rand: float | None = None) -> Decision:
    """What follows attempt number ``attempts`` that answered ``status`` (None: a
    timeout or a connection error) (pure). 2xx is delivered; 429, 5xx and no answer
    are retried with capped exponential backoff and full jitter, until
    ``max_attempts``; any other answer (a 4xx, a 3xx: redirects are not followed) is
    permanent."""
    if status is not None and 200 <= status < 300:
        return Decision("delivered")
    transient = status is None or status == 429 or status >= 500
    if not transient or attempts >= w.max_attempts:
        return Decision("dead")
    cap = min(w.max_delay_s, w.base_delay_s * 2 ** (attempts - 1))
    r = random.random() if rand is None else rand
    # Jitter over the upper half: receivers coming back are not hit in step, and a
    # retry never comes at once.
    return Decision("retry", cap / 2 + r * cap / 2)


def headers(msg_id: str, at: float, body: bytes, secrets: list[str]) -> dict[str, str]:
    """The Standard Webhooks headers of a request: ``webhook-signature`` holds a
    ``v1,<base64 HMAC-SHA256 of id.timestamp.body>`` for each secret, space-separated
    (the library's own signer, so receivers using it agree)."""
    from standardwebhooks.webhooks import Webhook as Signer

    when = dt.datetime.fromtimestamp(int(at), tz=dt.UTC)
    sigs = " ".join(Signer(s).sign(msg_id, when, body) for s in secrets)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at)), "webhook-signature": sigs,
            "content-type": "application/json"}
