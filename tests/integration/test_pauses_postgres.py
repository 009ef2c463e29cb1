"""Pauses of claims on two daemons sharing one PostgreSQL: a paused tenant, or a paused
kind of a tenant, claims nothing on either node, across a ``kill -9`` and restart;
admission goes on and the job says it is paused (a pause made elsewhere, here by the
test on the database, within the second a daemon keeps the pauses it shows); a resume
is claimed at once; both are events of the audit chain, which verifies.

"Claims nothing" is shown without timing: after the pause, each node claims and
finishes a job that no pause holds (submitted after the paused one), and the paused
job is still queued."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

import psycopg

from casesignd.core import audit
from casesignd.store.postgres import PostgresStore
from tests.daemon import Daemon, postgres_nodes, to_toml

OTHER = "csd_other-tenant-of-the-pause-test"


def store_call(dsn: str, verb: str, *args: Any) -> Any:
    """One store verb, as an operator's tool on the same database runs it."""

    async def run() -> Any:
        store = PostgresStore(dsn)
        await store.open()
        try:
            return await getattr(store, verb)(*args)
        finally:
            await store.close()

    return asyncio.run(run())


def probe(nodes: list[Daemon], token: str | bool = True) -> None:
    """Jobs no pause holds, submitted and finished until each of ``nodes`` has claimed
    one: every node claimed after whatever came before."""
    claimers: set[str] = set()
    for i in range(40):
        node = nodes[i % len(nodes)]
        r = node.request("POST", "/v1/jobs", {"kind": "test", "tag": uuid.uuid4().hex},
                         auth=token)
        assert r.status == 202, r.body  # a new job, not the replay of an earlier one
        job_id = r.json()["job_id"]
        assert settled(node, job_id, token)["state"] == "ready"
        events = node.request("GET", f"/v1/jobs/{job_id}/events", auth=token).json()["events"]
        claimers |= {e["actor"].split(":")[1] for e in events if e["type"] == "claimed"}
        if claimers >= {n.node for n in nodes}:
            return
    raise AssertionError(f"only {claimers} claimed")


def settled(node: Daemon, job_id: str, token: str | bool = True,
            timeout_s: float = 30.0) -> dict[str, Any]:
    """The job once it is no longer queued or processing (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while (job := show(node, job_id, token))["state"] in ("queued", "processing") \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return job


def shown_paused(node: Daemon, job_id: str, token: str | bool = True,
                 timeout_s: float = 5.0) -> dict[str, Any]:
    """The job once it says it is paused (or at the timeout): a daemon shows a pause
    it did not make within the second it keeps the pauses (casesignd.store.claims)."""
    deadline = time.monotonic() + timeout_s
    while not (job := show(node, job_id, token))["paused"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return job


def show(node: Daemon, job_id: str, token: str | bool = True) -> dict[str, Any]:
    r = node.request("GET", f"/v1/jobs/{job_id}", auth=token)
    assert r.status == 200, r.body
    return r.json()


def test_a_pause_holds_on_both_nodes_across_a_restart_and_a_resume_claims_at_once(
        postgres_cluster, tmp_path):
    def with_other(nodes: list[Daemon]) -> None:
        a = nodes[0]
        a.config["tenants"].append({"name": "other",
                                    "token_sha256": hashlib.sha256(OTHER.encode()).hexdigest()})
        a.config_path.write_text(to_toml(a.config))

    with postgres_nodes(postgres_cluster, tmp_path / "state", ["node-a", "node-b"],
                        {"workers": {"concurrency": 2}}, prepare=with_other) as (nodes, dsn):
        a, b = nodes
        # A whole tenant.
        assert store_call(dsn, "pause_claims", None, "other", "operator:ops") is True
        held = a.request("POST", "/v1/jobs", {"kind": "test", "tag": "held"}, auth=OTHER)
        assert held.status == 202
        held_id = held.json()["job_id"]
        assert shown_paused(a, held_id, OTHER)["paused"] is True
        probe(nodes)
        a.kill9()
        a.start()
        probe(nodes)
        assert show(b, held_id, OTHER)["state"] == "queued"
        assert show(b, held_id, OTHER)["paused"] is True
        assert store_call(dsn, "resume_claims", None, "other", "operator:ops") is True
        resumed = settled(b, held_id, OTHER, timeout_s=10)  # claimed at once
        assert resumed["state"] == "ready" and resumed["paused"] is False

        # A kind, of one tenant: the other tenant's jobs of that kind go on.
        assert store_call(dsn, "pause_claims", "test", "default", "operator:ops") is True
        kind_held = shown_paused(a, a.submit({"kind": "test", "tag": "kind-held"}).json()["job_id"])
        assert kind_held["paused"] is True, kind_held
        probe(nodes, OTHER)
        b.kill9()
        b.start()
        probe(nodes, OTHER)
        assert show(a, kind_held["job_id"])["state"] == "queued"
        assert store_call(dsn, "resume_claims", "test", "default", "operator:ops") is True
        assert settled(a, kind_held["job_id"], timeout_s=10)["state"] == "ready"

        assert audit.verify_postgres(dsn).ok
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT type, tenant, actor, detail FROM events "
                "WHERE type IN ('claims_paused', 'claims_resumed') ORDER BY seq").fetchall()
        assert [(t, tenant, actor, json.loads(detail)) for t, tenant, actor, detail in rows] == [
            ("claims_paused", "other", "operator:ops", {"kind": None, "tenant": "other"}),
            ("claims_resumed", "other", "operator:ops", {"kind": None, "tenant": "other"}),
            ("claims_paused", "default", "operator:ops", {"kind": "test", "tenant": "default"}),
            ("claims_resumed", "default", "operator:ops", {"kind": "test", "tenant": "default"}),
        ]
        assert store_call(dsn, "list_pauses") == []
