"""A job read from a row: the same job from a ``sqlite3.Row`` (read by position) as
from a mapping (psycopg's dict rows), every field in its place."""

from __future__ import annotations

import sqlite3

from casesignd.store.records import Job, row_job


def _values() -> dict[str, object]:
    ints = {"declared_bytes", "attempt", "series", "failures", "lost_leases"}
    return {name: i if name in ints else (float(i) + 0.5 if name.endswith(
        ("_at", "_ms", "expires", "since")) else f"v{i}")
        for i, name in enumerate(Job.__struct_fields__)}


def test_a_sqlite_row_and_a_mapping_give_the_same_job() -> None:
    values = _values()
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    # Columns in another order than the job's fields: the names decide, not the order.
    names = list(reversed(Job.__struct_fields__))
    conn.execute(f"CREATE TABLE jobs ({', '.join(names)})")
    conn.execute(f"INSERT INTO jobs VALUES ({', '.join('?' * len(names))})",
                 [values[n] for n in names])
    row = conn.execute("SELECT * FROM jobs").fetchone()
    job = row_job(row)
    assert job == row_job(dict(values)) == Job(**values)
    assert {n: getattr(job, n) for n in Job.__struct_fields__} == values
