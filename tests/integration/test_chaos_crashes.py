"""Crashes: kill -9 the daemon at random and aimed moments under a mixed load.

Afterwards nothing acknowledged is lost, nothing is signed twice, every artifact
validates, the audit chain is intact and the temp directory is empty.
"""

from __future__ import annotations

import hashlib

import pytest

from tests.helpers_chaos import (
    Driver,
    Tally,
    ThreadedSource,
    check_invariants,
    leftover_processes,
    make_workload,
    wait_all_terminal,
)

SIGN_DELAY_MS = 150


def overrides(source: ThreadedSource) -> dict:
    return {
        "sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                     "read_timeout_s": 10.0}],
        "kiosk": {"deadline_ms": 20000},
        "workers": {"concurrency": 4, "lease_s": 10.0, "heartbeat_s": 2.0},
    }


def run_chaos(daemon_factory, tmp_path, n_jobs: int, kills: int, seed: int) -> None:
    with ThreadedSource() as source:
        d = daemon_factory(overrides(source), start=False,
                           sign_delay_ms=SIGN_DELAY_MS)
        plan = make_workload(tmp_path / "work", n_jobs, seed=seed, source=source)
        d.start()
        driver = Driver(d, plan)
        driver.run_with_kills(kills, source=source, seed=seed, sign_delay_s=SIGN_DELAY_MS / 1000)
        driver.join_clients(240)
        assert wait_all_terminal(d, 240) == 0, d.logs()[-3000:]
        tally = driver.tally
        assert not tally.unexpected, tally.unexpected[:5]
        assert sum(tally.kills.values()) == kills, tally.kills
        assert len(tally.acked) == len(plan)
        report = check_invariants(d, tally, tmp_path / "check")
        assert report.ok(), "\n".join(report.problems[:20])
        assert report.jobs_lost == 0 and report.signatures_doubled == 0
        assert report.audit_chain == "intact" and report.temp_files_left == 0
        # A graceful stop after the storm leaves the temp directory empty as well.
        assert d.stop() == 0
        assert list(d.temp_area.iterdir()) == []
        # No process of any killed daemon lives on (CPU workers, their forkserver).
        assert leftover_processes(d) == []


def test_kill9_under_mixed_load_loses_nothing_and_signs_nothing_twice(daemon_factory, tmp_path):
    run_chaos(daemon_factory, tmp_path, n_jobs=160, kills=5, seed=3)


@pytest.mark.slow
def test_kill9_under_mixed_load_at_scale(daemon_factory, tmp_path):
    run_chaos(daemon_factory, tmp_path, n_jobs=600, kills=14, seed=5)


def test_one_packet_under_several_keys_at_once_is_signed_once(daemon_factory, tmp_path):
    """Blind retries under new keys race each other: one signature, one artifact."""
    d = daemon_factory({"workers": {"concurrency": 4}},
                       sign_delay_ms=400)
    plan = [p for p in make_workload(tmp_path / "work", 12, seed=1) if p.kind == "sign_case"][:1]
    packet = plan[0]
    for case, data in packet.uploads:
        sha = hashlib.sha256(data).hexdigest()
        assert d.request("PUT", f"/v1/cases/{case}/objects/{sha}", raw=data).status in (200, 201)
    ids = [d.submit(packet.body, key=f"race-{i}").json()["job_id"] for i in range(4)]
    done = [d.wait_job(j) for j in ids]
    assert {j["state"] for j in done} == {"ready"}
    assert len({j["result"]["artifact_id"] for j in done}) == 1
    signed = sum([e["type"] for e in d.events(j)].count("signed") for j in ids)
    assert signed == 1
    tally = Tally(acked={f"race-{i}": j for i, j in enumerate(ids)})
    report = check_invariants(d, tally, tmp_path / "check", pdfsig_sample=1, cli_sample=0)
    assert report.ok(), report.problems
