"""Acknowledgements paced to the queue, through a real daemon: a job submitted while
the queue stands is stored at once, and its 202 waits for the workers to claim."""

from __future__ import annotations

import threading
import time


def test_a_standing_queue_holds_the_acknowledgement_not_the_job(daemon_factory):
    # One slot; past 2 acknowledged jobs queued (twice the concurrency), a new job's
    # acknowledgement waits for a claim.
    d = daemon_factory({"workers": {"concurrency": 1, "ack_pacing_depth": 1,
                                    "ack_pacing_max_ms": 30000}})
    first = d.submit({"kind": "test", "behavior": "hang", "hang_s": 3, "tag": "a"}).json()
    d.wait_job(first["job_id"], states=("processing",))
    queued = [d.submit({"kind": "test", "tag": t}) for t in ("b", "c")]
    assert [r.status for r in queued] == [202, 202]

    answer = {}
    held = threading.Thread(target=lambda: answer.update(r=d.submit({"kind": "test", "tag": "d"})))
    held.start()
    deadline = time.monotonic() + 10
    while len(d.request("GET", "/v1/jobs?state=queued").json()["jobs"]) < 3:
        assert time.monotonic() < deadline, "the held job was not stored"
        time.sleep(0.02)
    # Stored and queued, its acknowledgement not sent: the hanging job holds the slot.
    assert held.is_alive() and d.job(first["job_id"])["state"] == "processing"

    held.join(30)  # the first job ends, the next is claimed, the acknowledgement goes
    assert not held.is_alive()
    r = answer["r"]
    assert r.status == 202 and r.headers["Location"] == f"/v1/jobs/{r.json()['job_id']}"
    assert d.wait_job(r.json()["job_id"])["state"] == "ready"
    assert 'casesignd_ack_held_seconds_count 1.0' in d.request("GET", "/metrics", auth=False).body.decode()


def test_off_acknowledges_at_once(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 1, "ack_pacing_depth": 0}})
    first = d.submit({"kind": "test", "behavior": "hang", "hang_s": 30, "tag": "a"}).json()
    d.wait_job(first["job_id"], states=("processing",))
    # More than the default depth (32): paced, the 33rd would wait for a claim.
    assert [d.submit({"kind": "test", "tag": str(i)}).status for i in range(40)] == [202] * 40
    assert 'casesignd_ack_held_seconds_count 0.0' in d.request("GET", "/metrics", auth=False).body.decode()
