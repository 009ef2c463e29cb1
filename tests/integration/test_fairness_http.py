"""Fair claims through real daemons, counting claims, never timing them: tenant a posts
2,000 jobs over HTTP, then tenant b posts 20; each of b's jobs is claimed before more
than b's own jobs and a few claims per worker of a's have gone ahead of it. On one
SQLite daemon, and on two daemons sharing one PostgreSQL.

The count comes from the audit chain: for each of b's jobs, the claims of a's jobs
between its ``admitted`` event and its ``claimed`` event. With first-in-first-out
claims that is the whole backlog a had queued then (hundreds)."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import Daemon, postgres_nodes, to_toml

B_TOKEN = "csd_tenant-b-of-the-fairness-test"
A_JOBS, B_JOBS = 2000, 20
CONCURRENCY = 4  # per daemon
# Each job takes a while, so that a's backlog stands while b posts.
JOB = {"kind": "test", "sleep_ms": 100}
OVERRIDES = {"workers": {"concurrency": CONCURRENCY, "ack_pacing_depth": 0}}

pytestmark = pytest.mark.slow


def with_tenant_b(d: Daemon) -> None:
    d.config["tenants"].append({"name": "b",
                                "token_sha256": hashlib.sha256(B_TOKEN.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))


def post_all(nodes: list[Daemon], n: int, tag: str, token: str | bool = True) -> list[str]:
    def post(i: int) -> str:
        node = nodes[i % len(nodes)]
        r = node.request("POST", "/v1/jobs", {**JOB, "tag": f"{tag}{i}"}, auth=token)
        assert r.status == 202, r.body
        return r.json()["job_id"]

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(post, range(n)))


def wait_claimed(node: Daemon, job_ids: list[str], token: str) -> None:
    """Until each of ``job_ids`` is no longer queued (a claim took it)."""
    deadline = time.monotonic() + 120
    for job_id in job_ids:
        while node.request("GET", f"/v1/jobs/{job_id}", auth=token).json()["state"] == "queued":
            assert time.monotonic() < deadline, f"{job_id} was never claimed"
            time.sleep(0.05)


def claims_ahead(events: list[tuple[int, str, str, str]], b_jobs: list[str]) -> list[int]:
    """For each of b's jobs: a's claims between its admission and its claim."""
    admitted = {j: s for s, j, t, ty in events if ty == "admitted"}
    claimed = {j: s for s, j, t, ty in events if ty == "claimed"}
    a_claims = sorted(s for s, j, t, ty in events if ty == "claimed" and t == "default")
    return [sum(admitted[j] < s < claimed[j] for s in a_claims) for j in b_jobs]


def check(nodes: list[Daemon], events: Any) -> None:
    post_all(nodes, A_JOBS, "a")
    b_jobs = post_all(nodes, B_JOBS, "b", B_TOKEN)
    wait_claimed(nodes[0], b_jobs, B_TOKEN)
    ahead = claims_ahead(events(), b_jobs)
    workers = CONCURRENCY * len(nodes)
    print("a's claims ahead of each of b's jobs:", ahead)
    assert max(ahead) <= B_JOBS + 2 * workers, ahead


def test_a_backlog_holds_another_tenant_back_by_a_few_claims_on_sqlite(daemon_factory):
    d = daemon_factory(OVERRIDES, start=False)
    with_tenant_b(d)
    d.start()

    def events() -> list[tuple[int, str, str, str]]:
        with contextlib.closing(sqlite3.connect(f"file:{Path(d.db)}?mode=ro", uri=True)) as c:
            return c.execute("SELECT seq, job_id, tenant, type FROM events "
                             "WHERE type IN ('admitted', 'claimed') ORDER BY seq").fetchall()

    check([d], events)


@pytest.fixture
def pg_nodes(postgres_cluster, tmp_path) -> Iterator[tuple[list[Daemon], str]]:
    with postgres_nodes(postgres_cluster, tmp_path / "state", ["node-a", "node-b"], OVERRIDES,
                        prepare=lambda nodes: with_tenant_b(nodes[0])) as found:
        yield found


def test_a_backlog_holds_another_tenant_back_by_a_few_claims_on_two_postgres_nodes(pg_nodes):
    import psycopg

    nodes, dsn = pg_nodes

    def events() -> list[tuple[int, str, str, str]]:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT seq, job_id, tenant, type FROM events "
                                "WHERE type IN ('admitted', 'claimed') ORDER BY seq").fetchall()

    check(nodes, events)
