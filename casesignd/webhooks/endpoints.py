"""Webhooks, the pure parts of sending: which addresses an endpoint may never reach,
its secrets, what a failed attempt decides, and the Standard Webhooks headers.

An endpoint's settings and the events it receives are
:mod:`casesignd.core.webhook_events`' (the config and the store's outbox speak them
too). Deliveries are rows written in the transaction of the state change they report
(:mod:`casesignd.store.outbox`); :mod:`casesignd.webhooks.sender` sends them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from casesignd.core.webhook_events import Webhook

# Addresses an endpoint resolving to them is refused unless its config names them in
# allow_addresses: link-local (169.254.0.0/16 holds the clouds' metadata services,
# fe80::/10) and the other metadata addresses in use (fd00:ec2::254 on AWS,
# 100.100.100.200 on Alibaba, 168.63.129.16 Azure's WireServer, 192.0.0.192 on Oracle).
REFUSED_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::/32", "100.100.100.200/32",
    "168.63.129.16/32", "192.0.0.192/32"))


# IPv6 prefixes whose last 32 bits are an IPv4 address that a gateway or the host's
# own stack reaches: NAT64's well-known prefix (RFC 6052), IPv4-translated (SIIT,
# RFC 2765) and IPv4-compatible (RFC 4291, deprecated) addresses.
_IPV4_IN_LAST_32_BITS = tuple(ipaddress.ip_network(n) for n in (
    "64:ff9b::/96", "::ffff:0:0:0/96", "::/96"))


def refused_address(address: str, allowed: list[str]) -> bool:
    """Whether an endpoint resolving to ``address`` must not be connected to: an IPv6
    address carrying an IPv4 one (mapped, NAT64, 6to4...) is judged by that IPv4."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if address in allowed:
        return False
    return any(a in n for a in (ip, *_embedded_ipv4(ip)) for n in REFUSED_NETWORKS)


def _embedded_ipv4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                   ) -> list[ipaddress.IPv4Address]:
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    out = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    if any(ip in n for n in _IPV4_IN_LAST_32_BITS):
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def secrets_of(path: Path) -> list[str]:
    """The secrets in a secret file, one a line (two while rotating); ValueError when
    it holds none, or one that cannot sign (not base64 after ``whsec_``)."""
    from standardwebhooks.webhooks import Webhook as Signer

    found = [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    if not found:
        raise ValueError("no secret")
    for s in found:
        Signer(s)  # decodes it: binascii.Error, a ValueError, when it is no base64
    return found


# --- what an attempt decides ----------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """After an attempt: ``state`` is delivered, retry (at ``delay_s``) or dead."""

    state: str
    delay_s: float = 0.0


def lease_s(endpoints: Iterable[Webhook]) -> float:
    """How long a sender holds the deliveries it took: twice the longest attempt any
    endpoint allows (``timeout_s``) and ten seconds for the store, so that a sender
    killed mid-send leaves its deliveries to another within that, never sooner than
    its attempts could end (pure)."""
    return 2 * max((w.timeout_s for w in endpoints), default=10.0) + 10.0


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
