"""Crashes of several daemons on one PostgreSQL: the crash loop of test_chaos_crashes.py
over three nodes sharing one database, one config file and one state directory.

Afterwards nothing acknowledged is lost, nothing is signed twice, every artifact
matches its job, the audit chain is intact and nothing is left in flight.
"""

from __future__ import annotations

import pytest

from tests.daemon import kill_all, shared_nodes, start_all
from tests.helpers_chaos import (
    Driver,
    ThreadedSource,
    check_invariants,
    files_in_flight,
    leftover_processes,
    make_workload,
    wait_all_terminal,
)

LEASE_S = 6.0


@pytest.mark.slow
def test_kill9_of_each_node_in_turn_under_mixed_load_loses_nothing_and_signs_nothing_twice(
        postgres_dsn, tmp_path):
    """Batch packets (some read from a slow HTTP source), invoices and kiosk requests
    from clients that go to the next node when one is down, while each node in turn is
    killed -9 (mid-download, mid-signature, at random) and started again, sometimes
    before its lease runs out (it takes its jobs back at once), sometimes after (the
    others have taken them over)."""
    with ThreadedSource() as source:
        overrides = {
            "store": {"kind": "postgres", "dsn": postgres_dsn},
            "sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                         "read_timeout_s": 10.0}],
            "workers": {"concurrency": 2, "cpu_processes": 1, "lease_s": LEASE_S,
                        "heartbeat_s": 1.0},
            "kiosk": {"cpu_processes": 1, "deadline_ms": 20000},
        }
        nodes = shared_nodes(tmp_path / "state", ["node-a", "node-b", "node-c"], overrides,
                             sign_delay_ms=300)
        try:
            plan = make_workload(tmp_path / "work", 600, seed=13, source=source)
            start_all(nodes)
            driver = Driver(nodes, plan)
            # Each node twice; down for up to one and a half leases.
            driver.run_with_kills(6, source=source, seed=13, sign_delay_s=0.3,
                                  down_s=(0.0, 1.5 * LEASE_S))
            driver.join_clients(300)
            assert wait_all_terminal(nodes[0], 300) == 0
            tally = driver.tally
            assert not tally.unexpected, tally.unexpected[:5]
            assert sum(tally.kills.values()) == 6, tally.kills
            assert len(tally.acked) == len(plan)
            report = check_invariants(nodes[0], tally, tmp_path / "check", validate_all=False,
                                      nodes=nodes)
            assert report.ok(), "\n".join(report.problems[:20])
            assert report.jobs_lost == 0 and report.signatures_doubled == 0
            assert report.audit_chain == "intact" and report.temp_files_left == 0
            assert [n.stop() for n in nodes] == [0, 0, 0]
            assert [files_in_flight(n) for n in nodes] == [[], [], []]
            assert leftover_processes(nodes[0]) == []
        finally:
            kill_all(nodes)
