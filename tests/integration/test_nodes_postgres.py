"""Three daemons on one PostgreSQL database and one state directory: the same config
file, each its own ``--node`` and port, as CONTRACT.md's "Several daemons on one
PostgreSQL" describes.

The nodes are started once for the module (starting three takes a while on two
cores); a test that kills one restarts it, and each test begins with all three up.
The longer crash loop is test_chaos_nodes.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cryptography import x509

from tests.daemon import Daemon, Response, postgres_nodes, start_all
from tests.helpers_chaos import files_in_flight
from tests.helpers_ops import SIGNERS, case_manifest, kiosk_sign, scrape, upload, value
from tests.helpers_pki import pyhanko_statuses, reportlab_pdf

NAMES = ["node-a", "node-b", "node-c"]
LEASE_S = 6.0
# Every signature takes this long, so that a kill finds jobs in the middle of one and
# racing jobs of one signature key are really at the same time.
SIGN_DELAY_MS = 800
OVERRIDES = {
    # A short lease, so that a dead node's jobs are taken over within seconds; the
    # heartbeat renews it well before it runs out.
    "workers": {"concurrency": 2, "cpu_processes": 1, "lease_s": LEASE_S, "heartbeat_s": 1.0,
                "reclaim_interval_s": 0.5},
    "kiosk": {"cpu_processes": 1, "deadline_ms": 20000},
}
NOTE = ("note.txt", "text/plain", b"delivered on time\n")


@pytest.fixture(scope="module")
def cluster(postgres_cluster, tmp_path_factory) -> Iterator[list[Daemon]]:
    with postgres_nodes(postgres_cluster, tmp_path_factory.mktemp("nodes") / "state", NAMES,
                        OVERRIDES, sign_delay_ms=SIGN_DELAY_MS) as (nodes, _dsn):
        yield nodes


@pytest.fixture
def nodes(cluster) -> list[Daemon]:
    """The three nodes, all running (one a failed test left dead is started again)."""
    start_all([n for n in cluster if n.proc is None or n.proc.poll() is not None])
    return cluster


# --- what the tests read ---------------------------------------------------------------


def node_of(actor: str) -> str:
    """The node of an event's actor, ``worker:NODE:PID:RANDOM``, or of a lease's owner,
    ``NODE:PID:RANDOM``."""
    return actor.removeprefix("worker:").split(":")[0]


def submit_anywhere(nodes: list[Daemon], first: int, body: dict[str, Any],
                    key: str) -> tuple[Daemon, Response]:
    """Submit to ``nodes[first]``, else (it is down) to the next one, as a client with a
    list of nodes does."""
    for i in range(len(nodes)):
        node = nodes[(first + i) % len(nodes)]
        try:
            return node, node.submit(body, key=key)
        except OSError:
            continue
    raise AssertionError("no node answered")


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise TimeoutError(what)


def processing_on(node: Daemon, via: Daemon, kind: str) -> list[str]:
    """The jobs of ``kind`` that ``node`` is working on now (read through ``via``)."""
    jobs = via.request("GET", "/v1/jobs?state=processing&limit=100").json()["jobs"]
    held = []
    for job in (j for j in jobs if j["kind"] == kind):
        claims = [e for e in via.events(job["job_id"]) if e["type"] == "claimed"]
        if claims and node_of(claims[-1]["actor"]) == node.node:
            held.append(job["job_id"])
    return held


def metric(daemon: Daemon, name: str, **labels: str) -> float:
    """``daemon``'s samples of ``name`` that carry ``labels``, summed (0 when none)."""
    return value(scrape(daemon)[1], name, **labels)


def at_once(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(0)`` … ``call(n - 1)`` from ``n`` threads released at the same moment."""
    barrier = threading.Barrier(n)

    def released(i: int) -> Any:
        barrier.wait()
        return call(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(released, range(n)))


def signatures_made(nodes: list[Daemon]) -> float:
    """Uses of the signing key by sign_case work, summed over the nodes."""
    return sum(metric(n, "casesignd_phase_seconds_count", kind="sign_case", phase="sign")
               for n in nodes)


def download(node: Daemon, job: dict[str, Any]) -> bytes:
    got = node.request("GET", job["result"]["download_url"], auth=False)
    assert got.status == 200, got.body[:300]
    return got.body


def assert_signed_by_the_service(pdf: bytes, node: Daemon, tmp_path) -> None:
    path = tmp_path / f"{hashlib.sha256(pdf).hexdigest()[:16]}.pdf"
    path.write_bytes(pdf)
    ca = x509.load_pem_x509_certificate((node.dir / "ca.pem").read_bytes())
    statuses = pyhanko_statuses(path, [ca])
    assert statuses and all(s.intact and s.valid and s.trusted for s in statuses)


# --- the tests ---------------------------------------------------------------------------


def test_a_node_killed_mid_work_loses_no_job_and_its_jobs_are_taken_over(nodes, tmp_path):
    a, b, c = nodes
    contract = reportlab_pdf(tmp_path / "contract.pdf", pages=2, text="kill test").read_bytes()
    work: list[tuple[str, dict[str, Any]]] = []
    for i in range(6):
        # Half signed in memory (one contract), half in a temp area (with evidence).
        evidence = [NOTE] if i % 2 else []
        work.append((f"kill-case-{i}", case_manifest(nodes[i % 3], f"KILL-{i}", contract, evidence)))
    work += [(f"kill-sleep-{i}", {"kind": "test", "tag": f"kill-{i}", "sleep_ms": 2500})
             for i in range(9)]
    acked: dict[str, str] = {}
    for i, (key, body) in enumerate(work[:9]):
        _node, r = submit_anywhere(nodes, i, body, key)
        assert r.status == 202, r.body
        acked[key] = r.json()["job_id"]
    # node-b dies while it signs.
    wait_for(lambda: processing_on(b, a, kind="sign_case"), 60, "node-b never signed")
    b.kill9()
    for i, (key, body) in enumerate(work[9:], start=9):
        _node, r = submit_anywhere(nodes, i, body, key)  # node-b's turns go to the next node
        assert r.status == 202, r.body
        acked[key] = r.json()["job_id"]

    done = {key: a.wait_job(job_id, timeout_s=120) for key, job_id in acked.items()}
    assert {job["state"] for job in done.values()} == {"ready"}
    taken_over = []
    for key, job in done.items():
        events = a.events(job["job_id"])
        types = Counter(e["type"] for e in events)
        expired = [e for e in events if e["type"] == "lease_expired"]
        # Ready exactly once; each lost lease is one more attempt, and only the dead
        # node ever lost one: no live node's lease was taken from it.
        assert types["succeeded"] == 1 and "stale_result_dropped" not in types, (key, types)
        assert job["attempts"] == 1 + len(expired), (key, job["attempts"], types)
        assert {node_of(e["detail"]["owner"]) for e in expired} <= {"node-b"}, expired
        if expired:
            taken_over.append(key)
            finisher = next(e for e in events if e["type"] == "succeeded")
            assert node_of(finisher["actor"]) in ("node-a", "node-c"), finisher
        if job["kind"] == "sign_case":
            assert types["signed"] <= 1, (key, types)
    assert any(key.startswith("kill-case-") for key in taken_over), taken_over
    # Each packet has one signature: one signed event over all its jobs.
    signed = sum(Counter(e["type"] for e in a.events(done[key]["job_id"]))["signed"]
                 for key, _ in work if key.startswith("kill-case-"))
    assert signed == 6
    for key in taken_over:
        if key.startswith("kill-case-"):
            pdf = download(c, done[key])
            assert hashlib.sha256(pdf).hexdigest() == done[key]["result"]["sha256"]
            assert_signed_by_the_service(pdf, c, tmp_path)

    # Started again with its name, node-b sweeps what its death left and works again.
    b.start()
    again = [b.submit({"kind": "test", "tag": f"back-{i}", "sleep_ms": 300}, key=f"back-{i}")
             for i in range(4)]
    finished_by = set()
    for r in again:
        assert r.status == 202, r.body
        job = b.wait_job(r.json()["job_id"])
        assert job["state"] == "ready"
        finished_by |= {node_of(e["actor"]) for e in b.events(job["job_id"])
                        if e["type"] == "succeeded"}
    assert "node-b" in finished_by
    assert [files_in_flight(n) for n in nodes] == [[], [], []]


def test_replays_and_24_identical_submissions_at_once_across_the_nodes_are_one_job(nodes):
    body = {"kind": "test", "tag": "twenty-four", "sleep_ms": 200}

    def submit(i: int, key: str | None) -> Response:
        return nodes[i % 3].submit(body, key=key)

    for key in ("same-24", None):  # a given key, and the key derived from the request
        answers = at_once(24, lambda i, key=key: submit(i, key))
        assert sorted(r.status for r in answers) == [200] * 23 + [202], \
            [(r.status, r.body[:200]) for r in answers if r.status not in (200, 202)]
        job_ids = {r.json()["job_id"] for r in answers}
        assert len(job_ids) == 1
        (job_id,) = job_ids
        done = nodes[0].wait_job(job_id)
        assert done["state"] == "ready" and done["attempts"] == 1
        # After it ran, a replay on every node is still that job, and the key with
        # another request is refused on every node.
        for i in range(3):
            replay = submit(i, key)
            assert replay.status == 200 and replay.json()["job_id"] == job_id
        if key is not None:
            for n in nodes:
                other = n.submit({**body, "tag": "another request"}, key=key)
                assert other.status == 422, other.body
                assert other.json()["error"]["code"] == "idempotency_key_reused"
        types = [e["type"] for e in nodes[1].events(job_id)]
        assert types == ["admitted", "claimed", "succeeded"], types


def test_one_signature_key_is_signed_once_whichever_nodes_its_jobs_reach(nodes, tmp_path):
    contract = reportlab_pdf(tmp_path / "once.pdf", text="signed once").read_bytes()
    packets = {"in memory": case_manifest(nodes[0], "ONCE-1", contract),
               "with evidence": case_manifest(nodes[1], "ONCE-2", contract, [NOTE])}
    before = signatures_made(nodes)
    for name, body in packets.items():
        # Blind retries under new keys, one on each node at the same moment.
        answers = at_once(3, lambda i, body=body, name=name: nodes[i].submit(
            body, key=f"once-{name}-{i}"))
        assert [r.status for r in answers] == [202] * 3
        jobs = [nodes[0].wait_job(r.json()["job_id"]) for r in answers]
        assert {j["state"] for j in jobs} == {"ready"}
        results = {(j["result"]["artifact_id"], j["result"]["sha256"]) for j in jobs}
        assert len(results) == 1, (name, results)
        # Every node serves the same bytes for every one of the jobs.
        served = {hashlib.sha256(download(n, j)).digest() for n in nodes for j in jobs}
        assert served == {bytes.fromhex(jobs[0]["result"]["sha256"])}, name
        signed = [e for j in jobs for e in nodes[2].events(j["job_id"]) if e["type"] == "signed"]
        assert len(signed) == 1, name

    # The kiosk path: the same document at three kiosks on three nodes, three keys.
    doc = reportlab_pdf(tmp_path / "kiosk.pdf", text="one kiosk signature").read_bytes()
    answers = at_once(3, lambda i: kiosk_sign(nodes[i], "ONCE-KIOSK", doc, key=f"once-kiosk-{i}"))
    statuses = [r.status for r in answers]
    assert statuses == [200] * 3, [r.body[:200] for r in answers]
    assert {hashlib.sha256(r.body).hexdigest() for r in answers} == \
        {r.headers["X-Artifact-SHA256"] for r in answers}
    assert len({r.body for r in answers}) == 1
    for r in answers:
        job = nodes[0].job(r.headers["X-Job-Id"])
        assert download(nodes[1], job) == r.body
    assert_signed_by_the_service(answers[0].body, nodes[0], tmp_path)
    # Three signature keys, three uses of the key over all the nodes.
    assert signatures_made(nodes) - before == 3


def test_the_kiosk_answers_on_a_surviving_node_while_another_is_dead(nodes, tmp_path):
    a, b, c = nodes
    doc = reportlab_pdf(tmp_path / "desk.pdf", text="front desk").read_bytes()

    def at_c() -> None:
        with contextlib.suppress(Exception):  # the node dies under it
            kiosk_sign(c, "DESK-1", doc, key="desk-1")

    client = threading.Thread(target=at_c)
    client.start()
    # node-c dies while its kiosk request holds the key.
    wait_for(lambda: metric(c, "casesignd_key_slots_in_use", pool="kiosk") >= 1
             or not client.is_alive(), 30, "node-c's kiosk request never signed")
    c.kill9()
    client.join(30)
    # The kiosk's retry, with the same key, goes to a surviving node.
    retry = kiosk_sign(a, "DESK-1", doc, key="desk-1")
    assert retry.status == 200, retry.body[:300]
    assert retry.headers["Content-Type"] == "application/pdf"
    assert hashlib.sha256(retry.body).hexdigest() == retry.headers["X-Artifact-SHA256"]
    assert_signed_by_the_service(retry.body, a, tmp_path)
    replay = kiosk_sign(b, "DESK-1", doc, key="desk-1")
    assert replay.status == 200 and replay.body == retry.body
    assert replay.headers["X-Job-Id"] == retry.headers["X-Job-Id"]
    types = [e["type"] for e in b.events(retry.headers["X-Job-Id"])]
    assert types.count("signed") == 1 and types.count("succeeded") == 1, types
    c.start()


def test_a_key_a_kiosk_request_holds_on_one_node_is_in_progress_on_the_others(nodes, tmp_path):
    a, b, _c = nodes
    doc = reportlab_pdf(tmp_path / "held.pdf", text="a held key").read_bytes()
    # The kiosk request as a batch job of the same document, under the same key.
    body = {"kind": "sign_case", "case_id": "HELD-1", "signers": SIGNERS,
            "items": [{"role": "contract", "name": "document.pdf",
                       "media_type": "application/pdf", **upload(b, "HELD-1", doc)}]}
    with ThreadPoolExecutor(1) as pool:
        kiosk = pool.submit(kiosk_sign, a, "HELD-1", doc, "held-1")
        wait_for(lambda: metric(a, "casesignd_key_slots_in_use", pool="kiosk") >= 1, 30,
                 "node-a's kiosk request never signed")
        # While node-a signs under the key, its admission on node-b is in progress.
        during = b.submit(body, key="held-1")
        assert during.status == 409 and during.json()["error"]["code"] == "in_progress", \
            during.body
        answer = kiosk.result(timeout=60)
    assert answer.status == 200, answer.body[:300]
    # Once it is written, the key names the kiosk's job on every node.
    after = b.submit(body, key="held-1")
    assert after.status == 200 and after.json()["job_id"] == answer.headers["X-Job-Id"]
    types = [e["type"] for e in b.events(answer.headers["X-Job-Id"])]
    assert types.count("signed") == 1, types


def test_a_second_daemon_with_a_live_nodes_name_is_refused_at_start(nodes):
    a = nodes[0]
    twin = a.sibling("node-a")
    twin.log_path = a.dir / "twin.log"
    twin.start(wait=False)
    assert twin.proc is not None and twin.proc.wait(timeout=60) == 1
    assert "another casesignd daemon named 'node-a' is running" in twin.logs(), twin.logs()[-2000:]
    # The live node-a is untouched: it answers and still runs jobs.
    assert a.request("GET", "/readyz", auth=False).status == 200
    r = a.submit({"kind": "test", "tag": "after the twin"}, key="after-twin")
    assert a.wait_job(r.json()["job_id"])["state"] == "ready"


def test_the_audit_chain_verifies_and_each_node_shows_its_name_and_the_shared_queue(nodes):
    a, b, c = nodes
    # A job that fails for good on node-a: every node's figures count it.
    failed = a.wait_job(a.submit({"kind": "test", "behavior": "fail_permanent"},
                                 key="fails-for-good").json()["job_id"])
    assert failed["state"] == "failed"
    out = b.cli("audit", "verify", "--config", str(b.config_path))
    assert out.returncode == 0 and out.stdout.startswith("audit chain intact: "), \
        out.stdout + out.stderr
    for n in nodes:
        ready = n.request("GET", "/readyz", auth=False)
        assert ready.status == 200 and ready.json()["node"] == n.node, ready.body
        assert metric(n, "casesignd_build_info", node=n.node) == 1

    def figures(n: Daemon) -> tuple[float, ...]:
        return tuple(metric(n, "casesignd_jobs", state=s)
                     for s in ("queued", "running", "succeeded", "failed"))

    def count(state: str) -> int:
        jobs, cursor = [], ""
        while cursor is not None:
            page = a.request("GET", f"/v1/jobs?state={state}&limit=100"
                                    + (f"&cursor={cursor}" if cursor else "")).json()
            jobs += page["jobs"]
            cursor = page["next_cursor"]
        return len(jobs)

    store = (0.0, 0.0, float(count("ready")), float(count("failed")))
    assert store[3] >= 1
    # The gauges are refreshed from the store a few times a second.
    wait_for(lambda: all(figures(n) == store for n in nodes), 10,
             f"the nodes' figures {[figures(n) for n in nodes]} are not the store's {store}")
