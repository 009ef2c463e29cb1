"""``[tenants.limits]``: what one tenant may admit, queue, upload and run, as settings,
and the pure decisions about their windows.

The numbers are the configuration's; the store counts against them (it is the one
truth every daemon shares) and the HTTP layer answers 429 past them. Both read this
one struct, so the config needs nothing of the store's code.

A rate is counted in fixed windows that start at multiples of their length on the
store's clock (Unix seconds): the window a refusal falls in ends at a known instant,
so its ``Retry-After`` is exact, and a client that waits that long finds a fresh
window.
"""

from __future__ import annotations

import math

import msgspec

MINUTE_S = 60
DAY_S = 86_400


# The largest value a limit may take: the stores count against it in 64-bit integers
# (a count plus what is charged must not overflow one), and clients reading the
# operator's view in JSON read integers exactly up to 2**53 - 1.
LIMIT_MAX = 2**53 - 1


class TenantLimits(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    # Every limit is off at 0. Jobs admitted per window (POST /v1/jobs that made a
    # job; a replay of one makes none): 429 rate_limited past it.
    admit_rate: int = 0
    admit_window_s: int = MINUTE_S
    # Jobs waiting at once (queued or waiting for a retry): 429 tenant_queue_full.
    max_queued: int = 0
    # Bytes of new objects uploaded per window: 429 quota_exceeded.
    upload_bytes: int = 0
    upload_window_s: int = DAY_S
    # Jobs running at once, on every daemon together: a claim skips the tenant at it.
    max_running: int = 0

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each setting out of range."""
        out = []
        for key in ("admit_rate", "max_queued", "upload_bytes", "max_running"):
            if getattr(self, key) < 0:
                out.append((key, "must be 0 (no limit) or positive"))
        for key in ("admit_window_s", "upload_window_s"):
            if getattr(self, key) < 1:
                out.append((key, "must be at least 1"))
        for key in self.__struct_fields__:
            if getattr(self, key) > LIMIT_MAX:
                out.append((key, f"must be at most {LIMIT_MAX}"))
        return out


NO_LIMITS = TenantLimits()


def window_start(now: float, window_s: int) -> float:
    """The start of the fixed window of ``window_s`` seconds that holds ``now``."""
    return math.floor(now / window_s) * window_s


def retry_after_s(now: float, window_s: int) -> int:
    """Whole seconds from ``now`` to the end of its window, rounded up (at least 1):
    after that long the window is a fresh one."""
    end = window_start(now, window_s) + window_s
    return max(1, math.ceil(end - now))


# A tenant's queue frees a place when one of its jobs is claimed, which no clock says;
# a client told to come back in this many seconds polls at about the claims' own rate.
QUEUE_FULL_RETRY_S = 1

# The comments `casesignd init` writes above these settings (casesignd.ops.init).
DESCRIPTIONS: dict[str, str] = {
    "tenants.limits": "What this tenant may admit, queue, upload and run; 0: no limit. Past "
    "one, 429 rate_limited, tenant_queue_full or quota_exceeded with a Retry-After; changed "
    "by SIGHUP.",
    "tenants.limits.admit_rate": "Jobs admitted per admit_window_s (a replay is none).",
    "tenants.limits.admit_window_s": "The rate's window: fixed, from multiples of its length.",
    "tenants.limits.max_queued": "Jobs queued or waiting for a retry at once.",
    "tenants.limits.upload_bytes": "Bytes of new objects uploaded per upload_window_s; its "
    "uploads then need a Content-Length.",
    "tenants.limits.upload_window_s": "The upload quota's window (a day by default).",
    "tenants.limits.max_running": "Jobs running at once, on every daemon together.",
    "operator": "The operator, who reads and changes every tenant's queues under /v1/admin.",
    "operator.token_sha256": "SHA-256 (hex) of the operator's bearer token; empty: no "
    "operator. Never a tenant's.",
}
