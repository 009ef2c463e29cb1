"""The audit log's timestamps: RFC 3339 UTC with microseconds, as they always were
written (the chain hashes them as text)."""

from __future__ import annotations

import datetime as dt
import random

from casesignd.core import audit


def test_rfc3339_writes_what_strftime_wrote() -> None:
    rng = random.Random(7)
    for ts in [0.0, 0.5, 1e-6, 86399.999999, 1_700_000_000.0] + [rng.uniform(0, 4e9) for _ in range(5000)]:
        want = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert audit.rfc3339(ts) == want
