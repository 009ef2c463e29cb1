"""Webhooks through a real receiver on loopback that verifies every request with the
``standardwebhooks`` library: each reported state change delivered at least once and
deduplicated by ``webhook-id``, retries by the answer's class, a receiver down and
back, ``kill -9`` between the commit and the delivery, a secret rotation, and what a
caller can never make casesignd connect to."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import time
from collections import Counter

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from casesignd.webhooks.sender import BATCH, PER_TENANT
from tests.daemon import Daemon, kill_all, shared_nodes, start_all, to_toml
from tests.helpers_ops import CASE_ID, case_manifest, contract_pdf, crash, find_personal
from tests.helpers_webhooks import Receiver, endpoint, new_secret
from tests.integration.test_admin_http import OTHER_TOKEN


@pytest.fixture
def secret():
    return new_secret()


@pytest.fixture
def receiver(secret):
    r = Receiver(secret)
    yield r
    r.close()


def hooked(daemon_factory, receiver, secret, *extra, secrets=None, **over) -> Daemon:
    """A daemon whose tenant has the endpoint "erp" (the receiver), and ``extra``."""
    d = daemon_factory({"workers": {"concurrency": 2}}, start=False)
    (d.dir / "hook.secret").write_text("\n".join(secrets or [secret]) + "\n")
    d.config["tenants"][0]["webhooks"] = [
        endpoint("erp", receiver.url, str(d.dir / "hook.secret"), **over), *extra]
    d.config_path.write_text(to_toml(d.config))
    return d.start()


def submit(d: Daemon, key: str, **body) -> str:
    r = d.submit({"kind": "test", "webhook": "erp", **body}, key=key)
    assert r.status == 202, r.body
    return r.json()["job_id"]


def deliveries(d: Daemon, job_id: str | None = None) -> list[dict]:
    r = d.request("GET", "/v1/webhooks/deliveries" + (f"?job_id={job_id}" if job_id else ""))
    assert r.status == 200, r.body
    return r.json()["deliveries"]


def wait_settled(d: Daemon, n: int, timeout_s: float = 60.0) -> list[dict]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = deliveries(d)
        if len(found) >= n and all(x["state"] != "pending" for x in found):
            return found
        time.sleep(0.1)
    raise AssertionError(deliveries(d))


def test_ready_failed_and_canceled_are_delivered_signed_and_once_each(
        daemon_factory, receiver, secret):
    d = hooked(daemon_factory, receiver, secret)
    ready = submit(d, "r", behavior="succeed")
    failed = submit(d, "f", behavior="fail_permanent")
    # Both workers busy, so the next job waits and can be canceled while queued.
    for i in range(2):
        d.submit({"kind": "test", "behavior": "hang", "hang_s": 3, "tag": str(i)}, key=f"h{i}")
    time.sleep(0.5)
    canceled = submit(d, "c", behavior="succeed", tag="c")
    assert d.request("POST", f"/v1/jobs/{canceled}/cancel").status == 200
    got = receiver.wait(3)
    by_job = {body["job_id"]: (msg_id, body) for msg_id, body in got.items()}
    assert set(by_job) == {ready, failed, canceled}
    assert by_job[ready][1]["state"] == "ready" and by_job[failed][1]["state"] == "failed"
    assert by_job[canceled][1]["state"] == "canceled"
    assert by_job[failed][1]["error"]["code"]
    assert {receiver.events[m] for m in got} == {"job.ready", "job.failed", "job.canceled"}
    # The body is the job resource as GET answers it (but for its clocks).
    assert by_job[ready][1]["job_id"] == d.job(ready)["job_id"]
    assert receiver.forged == 0
    listed = wait_settled(d, 3)
    assert {x["state"] for x in listed} == {"delivered"}
    assert {x["delivery_id"] for x in listed} == set(got)
    # The hanging jobs named no endpoint: nothing for them.
    time.sleep(3.5)
    assert len(deliveries(d)) == 3 and len(receiver.attempts) == 3
    metrics = d.request("GET", "/metrics").body.decode()
    assert 'casesignd_webhook_deliveries_total{outcome="delivered"} 3.0' in metrics
    assert "casesignd_webhook_oldest_undelivered_age_seconds 0.0" in metrics


def test_500_and_429_are_retried_410_is_permanent(daemon_factory, receiver, secret):
    d = hooked(daemon_factory, receiver, secret)
    receiver.answer = 500
    first = submit(d, "a")
    while len(receiver.attempts) < 2:
        time.sleep(0.05)
    receiver.answer = 429
    while len(receiver.attempts) < 3:
        time.sleep(0.05)
    receiver.answer = 204
    receiver.wait(1)
    [done] = [x for x in wait_settled(d, 1) if x["job_id"] == first]
    assert done["state"] == "delivered" and done["attempts"] >= 3
    receiver.answer = 410
    gone = submit(d, "b", tag="b")
    d.wait_job(gone)
    end = time.monotonic() + 30
    while time.monotonic() < end and deliveries(d, gone)[0]["state"] != "dead":
        time.sleep(0.1)
    [dead] = deliveries(d, gone)
    assert dead["state"] == "dead" and dead["attempts"] == 1 and dead["last_status"] == 410
    # Sent again on request, to a receiver that now takes it.
    receiver.answer = 204
    r = d.request("POST", f"/v1/webhooks/deliveries/{dead['delivery_id']}/redeliver")
    assert r.status == 202 and r.json()["state"] == "pending"
    assert d.request("POST", "/v1/webhooks/deliveries/msg_nope/redeliver").status == 404
    receiver.wait(2)
    [again] = deliveries(d, gone)
    assert again["state"] == "delivered" and again["attempts"] == 2


def test_a_receiver_down_then_back_gets_every_delivery(daemon_factory, receiver, secret):
    d = hooked(daemon_factory, receiver, secret, max_attempts=100)
    receiver.down()
    jobs = [submit(d, f"k{i}", tag=str(i)) for i in range(6)]
    for j in jobs:
        d.wait_job(j)
    time.sleep(1.0)  # some attempts meet a closed port
    receiver.up()
    got = receiver.wait(6)
    assert {b["job_id"] for b in got.values()} == set(jobs)


def test_kill9_between_commit_and_delivery_loses_and_invents_nothing(
        daemon_factory, receiver, secret):
    d = hooked(daemon_factory, receiver, secret, max_attempts=100)
    receiver.down()
    jobs = [submit(d, f"k{i}", tag=str(i)) for i in range(5)]
    for j in jobs:
        d.wait_job(j)
    d.kill9()
    receiver.up()
    d.start()
    got = receiver.wait(5)
    assert sorted(b["job_id"] for b in got.values()) == sorted(jobs)
    listed = wait_settled(d, 5)
    assert len(listed) == 5 and {x["state"] for x in listed} == {"delivered"}


def test_two_secrets_while_rotating_each_verifies(daemon_factory):
    old, new = new_secret(), new_secret()
    rx = Receiver(old)
    try:
        d = hooked(daemon_factory, rx, old, secrets=[old, new])
        job = submit(d, "k")
        [(msg_id, body)] = rx.wait(1).items()
        headers, raw = rx.raw[-1]
        assert len(headers["webhook-signature"].split(" ")) == 2
        # A receiver that knows only the new secret verifies it as well, and one with
        # a third secret does not.
        assert Webhook(new).verify(raw, headers)["job_id"] == job
        with pytest.raises(WebhookVerificationError):
            Webhook(new_secret()).verify(raw, headers)
    finally:
        rx.close()


def test_a_job_can_name_only_its_own_tenants_endpoints(daemon_factory, receiver, secret):
    d = hooked(daemon_factory, receiver, secret)
    for name in ("nope", receiver.url, "http://169.254.169.254/latest/meta-data", 7):
        r = d.submit({"kind": "test", "webhook": name}, key=f"x{name}")
        assert r.status == 422 and r.json()["error"]["code"] == "unknown_webhook", r.body
    assert d.request("GET", "/v1/webhooks/deliveries").json() == {"deliveries": []}
    assert receiver.attempts == []


def test_redirects_and_metadata_addresses_are_never_fetched(daemon_factory, receiver, secret):
    other = Receiver(secret)
    try:
        receiver.answer = "redirect"
        receiver.redirect_to = other.url
        meta = endpoint("meta", "https://169.254.169.254/hook", "hook.secret")
        # The same address through a NAT64 gateway (RFC 6052's well-known prefix).
        meta6 = endpoint("meta6", "https://[64:ff9b::a9fe:a9fe]/hook", "hook.secret")
        d = hooked(daemon_factory, receiver, secret, meta, meta6)
        (d.dir / "hook.secret").write_text(secret + "\n")
        redirected = submit(d, "r")
        refused = []
        for name in ("meta", "meta6"):
            r = d.submit({"kind": "test", "webhook": name, "tag": name}, key=name)
            assert r.status == 202
            refused.append(r.json()["job_id"])
        listed = wait_settled(d, 3)
        by_job = {x["job_id"]: x for x in listed}
        assert by_job[redirected]["state"] == "dead" and by_job[redirected]["last_status"] == 302
        for job_id in refused:
            row = by_job[job_id]
            assert row["state"] == "dead" and row["last_error"] == "address_refused", row
        assert other.attempts == []
    finally:
        other.close()


def test_an_answers_body_is_not_read_so_an_endless_one_is_delivered_in_bounded_memory(
        daemon_factory, receiver, secret):
    # The status is the answer; a receiver (or whatever sits at its address) that
    # streams a body without end neither holds the attempt until its timeout nor
    # fills the daemon's memory.
    receiver.answer = "endless"
    d = hooked(daemon_factory, receiver, secret, max_attempts=1)
    before = _peak_rss_kib(d)
    job = submit(d, "e")
    [x] = wait_settled(d, 1)
    assert (x["job_id"], x["state"], x["last_status"]) == (job, "delivered", 200), x
    assert _peak_rss_kib(d) - before < 64 * 1024


def test_a_tenants_hanging_receiver_does_not_hold_back_anothers_deliveries(
        daemon_factory, receiver, secret):
    # The default tenant's receiver hangs (its attempts time out only after 20 s) and
    # its deliveries pile up. It holds at most its share of the sender's places, and
    # the other tenant's delivery is sent beside its hanging attempts, not after them.
    fast = Receiver(secret)
    try:
        receiver.delay_s = 60.0
        d = daemon_factory({"workers": {"concurrency": 2}}, start=False)
        (d.dir / "hook.secret").write_text(secret + "\n")
        d.config["tenants"][0]["webhooks"] = [endpoint(
            "erp", receiver.url, str(d.dir / "hook.secret"), timeout_s=20, max_attempts=100)]
        d.config["tenants"].append({
            "name": "other", "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest(),
            "webhooks": [endpoint("erp", fast.url, str(d.dir / "hook.secret"))]})
        d.config_path.write_text(to_toml(d.config))
        d.start()
        jobs = [submit(d, f"a{i}", tag=str(i)) for i in range(2 * BATCH)]
        d.wait_job(jobs[-1])
        while len(receiver.attempts) < PER_TENANT:  # its share of places, all hanging
            time.sleep(0.05)
        r = d.request("POST", "/v1/jobs", {"kind": "test", "webhook": "erp"}, auth=OTHER_TOKEN)
        assert r.status == 202, r.body
        fast.wait(1, timeout_s=15)  # before any hanging attempt has timed out
        assert len(receiver.attempts) == PER_TENANT
    finally:
        fast.close()


def test_a_secret_that_is_no_secret_is_told_and_the_delivery_waits_for_a_good_one(
        daemon_factory, receiver, secret):
    # Not base64 after "whsec_": nothing can be signed with it. The delivery says so
    # and waits; once the file holds a good secret, it is sent.
    d = hooked(daemon_factory, receiver, secret, secrets=["whsec_not*base64!"],
               max_delay_s=0.5)
    job = submit(d, "s")
    d.wait_job(job)
    end = time.monotonic() + 30
    while (x := deliveries(d, job))[0]["last_error"] != "secret_unreadable":
        assert time.monotonic() < end, x
        time.sleep(0.1)
    assert x[0]["state"] == "pending" and receiver.attempts == []
    assert "webhook.turn_failed" not in d.logs()
    (d.dir / "hook.secret").write_text(secret + "\n")
    receiver.wait(1)


def _peak_rss_kib(d: Daemon) -> int:
    assert d.proc is not None
    with open(f"/proc/{d.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_a_first_endpoint_added_by_sighup_starts_the_sender(daemon_factory, receiver, secret):
    d = daemon_factory({"workers": {"concurrency": 2}})
    # No endpoint yet: a job cannot name one, and nothing sends.
    refused = d.submit({"kind": "test", "webhook": "erp"}, key="before")
    assert refused.status == 422, refused.body
    (d.dir / "hook.secret").write_text(secret + "\n")
    d.config["tenants"][0]["webhooks"] = [endpoint("erp", receiver.url, str(d.dir / "hook.secret"))]
    d.config_path.write_text(to_toml(d.config))
    d.signal(signal.SIGHUP)
    end = time.monotonic() + 10
    while (r := d.submit({"kind": "test", "webhook": "erp"}, key="after")).status != 202:
        assert r.status == 422 and time.monotonic() < end, r.body
        time.sleep(0.05)
    got = receiver.wait(1)
    assert [b["job_id"] for b in got.values()] == [r.json()["job_id"]]
    assert [x["state"] for x in wait_settled(d, 1)] == ["delivered"]


def test_deliveries_hold_nothing_of_the_case_and_ended_ones_go_with_jobs_s(
        daemon_factory, receiver, secret, tmp_path):
    d = daemon_factory({"workers": {"concurrency": 2},
                        "retention": {"jobs_s": 2.0, "sweep_interval_s": 0.3}}, start=False)
    (d.dir / "hook.secret").write_text(secret + "\n")
    d.config["tenants"][0]["webhooks"] = [
        endpoint("erp", receiver.url, str(d.dir / "hook.secret"), max_attempts=1000)]
    d.config_path.write_text(to_toml(d.config))
    d.start()
    told = d.submit({**case_manifest(d, CASE_ID, contract_pdf(tmp_path)), "webhook": "erp"},
                    key="told").json()["job_id"]
    receiver.wait(1)
    receiver.down()
    waiting = d.submit({**case_manifest(d, CASE_ID, contract_pdf(tmp_path, pages=3)),
                        "webhook": "erp"}, key="waiting").json()["job_id"]
    d.wait_job(waiting)
    # What a delivery row holds: ids, the event, the endpoint's name, status and code.
    # The body is the job resource, made when it is sent: an erasure has nothing here.
    with sqlite3.connect(d.db) as conn:
        rows = conn.execute("SELECT * FROM webhook_deliveries").fetchall()
    assert len(rows) == 2 and find_personal(*(str(v) for row in rows for v in row)) == []
    assert find_personal(json.dumps(deliveries(d))) == []
    # The delivered one goes jobs_s after it ended; the pending one stays until it ends.
    end = time.monotonic() + 30
    while any(x["job_id"] == told for x in deliveries(d)):
        assert time.monotonic() < end, deliveries(d)
        time.sleep(0.2)
    [left] = deliveries(d)
    assert left["job_id"] == waiting and left["state"] == "pending"
    # Its job stays while it waits (the body is made from it), and is told once back.
    assert d.request("GET", f"/v1/jobs/{told}").status == 404
    assert d.job(waiting)["state"] == "ready"
    receiver.up()
    got = receiver.wait(2)
    assert {b["job_id"] for b in got.values()} == {told, waiting}
    swept = [json.loads(line) for line in d.logs().splitlines() if '"retention.swept"' in line]
    assert sum(x.get("deliveries", 0) for x in swept) >= 1, swept


def _attempted_jobs(node: Daemon) -> list[str]:
    return [json.loads(line)["job_id"] for line in node.logs().splitlines()
            if '"webhook.attempt"' in line]


def test_two_postgres_daemons_send_each_delivery_one_at_a_time_and_lose_none_to_a_kill(
        postgres_dsn, tmp_path, receiver, secret):
    nodes = shared_nodes(tmp_path / "state", ["n1", "n2"], {
        "store": {"kind": "postgres", "dsn": postgres_dsn},
        "workers": {"concurrency": 2, "cpu_processes": 1}})
    first = nodes[0]
    (first.dir / "hook.secret").write_text(secret + "\n")
    # timeout_s 2: a killed sender's lease runs out 14 s later (2 x 2 s + 10 s).
    first.config["tenants"][0]["webhooks"] = [
        endpoint("erp", receiver.url, str(first.dir / "hook.secret"), timeout_s=2.0,
                 max_attempts=100)]
    first.config_path.write_text(to_toml(first.config))
    try:
        start_all(nodes)
        # Each answer takes a while, so that both senders are at work at once.
        receiver.delay_s = 0.3
        jobs = [nodes[i % 2].submit({"kind": "test", "webhook": "erp", "tag": str(i)},
                                    key=f"k{i}").json()["job_id"] for i in range(24)]
        receiver.wait(24)
        receipts = Counter(h["webhook-id"] for h in receiver.attempts)
        assert len(receipts) == 24 and set(receipts.values()) == {1}, receipts
        wait_settled(nodes[1], 24)
        by_node = [_attempted_jobs(n) for n in nodes]
        # Both sent, never the same delivery, and each exactly once.
        assert all(by_node) and not set(by_node[0]) & set(by_node[1]), by_node
        assert sorted(by_node[0] + by_node[1]) == sorted(jobs)

        # n1 killed while answers are slow: what it had taken and not settled is sent
        # again once its lease runs out, by n2 or by n1 restarted; nothing is lost, and
        # only a delivery that had reached the receiver before the kill arrives twice.
        receiver.delay_s = 1.5
        more = [nodes[0].submit({"kind": "test", "webhook": "erp", "tag": f"m{i}"},
                                key=f"m{i}").json()["job_id"] for i in range(8)]
        end = time.monotonic() + 30
        while len({h["webhook-id"] for h in receiver.attempts}) < 24 + 3:
            assert time.monotonic() < end
            time.sleep(0.05)
        crash(nodes[0])
        reached = {h["webhook-id"] for h in receiver.attempts}
        nodes[0].start()
        receiver.delay_s = 0.0
        got = receiver.wait(32, timeout_s=120)
        assert {b["job_id"] for b in got.values()} == set(jobs + more)
        listed = {x["delivery_id"]: x for x in wait_settled(nodes[1], 32, timeout_s=120)}
        assert {x["state"] for x in listed.values()} == {"delivered"}
        receipts = Counter(h["webhook-id"] for h in receiver.attempts)
        assert set(receipts) == set(listed)
        twice = {i for i, n in receipts.items() if n > 1}
        assert twice <= reached, (twice, reached)
        # Every receipt is an attempt the store counted: none sent by two at a time.
        assert all(n <= listed[i]["attempts"] for i, n in receipts.items())
    finally:
        kill_all(nodes)
