"""The audit log: an append-only, hash-chained record of every state change.

Each event's ``hash`` is SHA-256 over the canonical JSON of the event (every field
but ``hash`` itself, ``prev_hash`` included), so changing, removing or reordering any
event breaks the chain from that event on. The database refuses UPDATE and DELETE
on the table (triggers in the schema); :func:`verify_file` (SQLite) and
:func:`verify_postgres` catch what a person with write access did anyway.
"""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from casesignd.core.hashing import sha256_hex

GENESIS = "0" * 64

# The fields of an event, in the contract's order; "hash" covers all the others.
FIELDS = (
    "event_id", "seq", "job_id", "tenant", "case_id", "type", "actor", "at", "attempt",
    "input_digest", "policy_version", "detail", "prev_hash", "hash",
)

_encoder = msgspec.json.Encoder(order="sorted")


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no insignificant white space, UTF-8."""
    return _encoder.encode(value)


@functools.lru_cache(maxsize=64)
def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC with microseconds (``2026-12-02T18:07:54.913826Z``;
    what ``strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` writes, at less than two thirds of its
    cost). Cached: every event of one commit carries the same time."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def event_hash(event: dict[str, Any]) -> str:
    """The hash of an event: everything but its own ``hash`` field. ``detail`` is the
    stored JSON text, hashed as text so that verification needs no re-encoding."""
    body = {k: event[k] for k in FIELDS if k != "hash"}
    return sha256_hex(canonical(body))


@dataclass
class AuditReport:
    ok: bool
    checked: int
    first_bad: dict[str, Any] | None = None


def verify_rows(rows: Any) -> AuditReport:
    """Check a chain given its events in ``seq`` order (dict-like rows)."""
    prev = GENESIS
    last_seq = 0
    n = 0
    for row in rows:
        ev = {k: row[k] for k in FIELDS}
        n += 1

        def bad(reason: str, ev: dict[str, Any] = ev, n: int = n) -> AuditReport:
            return AuditReport(
                ok=False, checked=n - 1,
                first_bad={"seq": ev["seq"], "event_id": ev["event_id"],
                           "job_id": ev["job_id"], "reason": reason},
            )

        if ev["seq"] != last_seq + 1:
            return bad(f"sequence gap: expected {last_seq + 1}, found {ev['seq']}")
        if ev["prev_hash"] != prev:
            return bad("prev_hash does not match the previous event's hash")
        if event_hash(ev) != ev["hash"]:
            return bad("hash does not match the event's contents")
        prev = ev["hash"]
        last_seq = ev["seq"]
    return AuditReport(ok=True, checked=n)


def verify_sample(rows: Any, before: dict[int, str]) -> AuditReport:
    """Check some events of a chain, not necessarily adjacent ones, given in ``seq``
    order: each one's hash is recomputed from its fields, and its ``prev_hash`` must be
    the hash of the event just before it in the chain, found among ``rows`` or in
    ``before`` (seq -> hash; the genesis for seq 1). Cheap where :func:`verify_rows`
    reads the whole chain; it says nothing of the events it was not given."""
    known = dict(before)
    n = 0
    for row in rows:
        ev = {k: row[k] for k in FIELDS}
        known[int(ev["seq"])] = ev["hash"]
    for row in rows:
        ev = {k: row[k] for k in FIELDS}
        seq = int(ev["seq"])
        expected = GENESIS if seq == 1 else known.get(seq - 1)
        reason = None
        if expected is None:
            reason = f"no event {seq - 1} before it"
        elif ev["prev_hash"] != expected:
            reason = "prev_hash does not match the previous event's hash"
        elif event_hash(ev) != ev["hash"]:
            reason = "hash does not match the event's contents"
        if reason is not None:
            return AuditReport(ok=False, checked=n, first_bad={
                "seq": seq, "event_id": ev["event_id"], "job_id": ev["job_id"],
                "reason": reason})
        n += 1
    return AuditReport(ok=True, checked=n)


def verify_file(db_path: Path) -> AuditReport:
    """Verify the whole chain in a store file, read-only."""
    uri = f"file:{Path(db_path).resolve()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    conn.row_factory = sqlite3.Row
    try:
        cur = conn.execute("SELECT * FROM events ORDER BY seq")
        return verify_rows(cur)
    finally:
        conn.close()


def verify_postgres(dsn: str, *, password: str | None = None) -> AuditReport:
    """Verify the whole chain in a PostgreSQL store, read-only, streamed in ``seq``
    order through a server-side cursor (a chain of millions of events is not held in
    memory)."""
    import psycopg  # the PostgreSQL store's driver, loaded only here
    from psycopg.rows import dict_row

    extra: dict[str, Any] = {"password": password} if password else {}
    with psycopg.connect(dsn, row_factory=dict_row, **extra) as conn:
        conn.read_only = True
        with conn.cursor(name="casesignd_audit_verify") as cur:
            cur.itersize = 5000
            cur.execute("SELECT * FROM events ORDER BY seq")
            return verify_rows(cur)
