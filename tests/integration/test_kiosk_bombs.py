"""One tenant's decompression bombs never take the kiosk from the others.

Tenant A floods POST /v1/sign with bombs that pass every per-stream limit (many Flate
streams of zeros, each just under ``max_decoded_stream_bytes``); tenant B's kiosk
keeps signing ordinary documents meanwhile. Everything is asserted by counting
answers, never by the clock: B's are all 200 with a PDF, A's are all refusals
(422 ``limit_exceeded``, 503 ``busy`` from its share, 504 ``deadline_exceeded``),
nothing is a 500, and the daemon is healthy afterwards.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time

import pytest

from tests.daemon import Daemon, multipart, to_toml
from tests.helpers_bombs import many_stream_bomb
from tests.helpers_pki import reportlab_pdf

MiB = 1 << 20
TOKEN_A = "csd_tenant-a-sends-bombs-0123456789abcdef0123456789"
SIGNERS = [{"id": "kiosk-7", "name": "Front Desk", "role": "clerk"}]
A_CLIENTS = 6          # concurrent hostile connections (its share is 1)
B_MIN_REQUESTS = 10    # the honest kiosk's requests, one after another ...
B_OVERLAP = 2          # ... until this many bombs were refused after their check
B_MAX_REQUESTS = 1000  # ... or this many were sent
A_BACKOFF_S = 0.05     # a hostile client barely waits after a 503
A_CODES = {422: "limit_exceeded", 503: "busy", 504: "deadline_exceeded"}


def _with_tenant_a(d: Daemon) -> Daemon:
    d.config["tenants"].append({"name": "tenant-a",
                                "token_sha256": hashlib.sha256(TOKEN_A.encode()).hexdigest()})
    for p in d.config["policies"]:
        p["max_decoded_stream_bytes"] = 16 * MiB
    d.config_path.write_text(to_toml(d.config))
    return d


def sign(d: Daemon, document: bytes, case_id: str, token: str | None = None):
    body, ctype = multipart({"case_id": case_id, "signers": SIGNERS}, document)
    return d.request("POST", "/v1/sign", raw=body, auth=token or True,
                     headers={"Content-Type": ctype}, timeout_s=120)


def _code(r) -> str | None:
    try:
        return r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def _assert_signed(r, what: str) -> None:
    assert r.status == 200, (what, r.status, r.body[:300])
    assert r.headers["Content-Type"] == "application/pdf"
    assert r.body.startswith(b"%PDF-") and b"/ByteRange" in r.body
    assert hashlib.sha256(r.body).hexdigest() == r.headers["X-Artifact-SHA256"]


@pytest.fixture
def shared(daemon_factory) -> Daemon:
    """Tenant B (the daemon's own token) and tenant A (TOKEN_A) on one daemon whose
    kiosk limits are small enough for bombs to be built and refused quickly."""
    d = daemon_factory({"kiosk": {"max_document_bytes": 4 * MiB, "max_concurrent": 4,
                                  "max_concurrent_per_tenant": 1, "cpu_processes": 2}},
                       start=False)
    return _with_tenant_a(d).start()


def test_a_tenants_bombs_leave_the_kiosk_to_the_others(shared, tmp_path):
    d = shared
    bomb, streams = many_stream_bomb(4 * MiB, 16 * MiB)
    assert streams > 100  # gigabytes once inflated, each stream under the limit
    honest = reportlab_pdf(tmp_path / "honest.pdf", text="an ordinary contract").read_bytes()

    a_answers: collections.Counter[tuple[int, str | None]] = collections.Counter()
    a_errors: list[str] = []
    b_done = threading.Event()
    lock = threading.Lock()

    def hostile(i: int) -> None:
        n = 0
        while not b_done.is_set():
            n += 1
            try:
                r = sign(d, bomb, f"BOMB-{i}-{n}", token=TOKEN_A)
            except OSError as e:  # a refused connection would be a failure too
                with lock:
                    a_errors.append(repr(e))
                continue
            with lock:
                a_answers[(r.status, _code(r))] += 1
            if r.status == 503:
                time.sleep(A_BACKOFF_S)

    threads = [threading.Thread(target=hostile, args=(i,), daemon=True) for i in range(A_CLIENTS)]
    for t in threads:
        t.start()
    b_answers = []
    try:
        # B starts once the flood is on: A's clients have had a first answer.
        deadline = time.monotonic() + 120
        while not a_answers and not a_errors:
            assert time.monotonic() < deadline, "tenant A's first bomb was never answered"
            time.sleep(0.01)
        # At least B_MIN_REQUESTS, and on until A has had B_OVERLAP bombs refused after
        # a full check, so B's requests overlap whole bomb checks (counts, not time).
        while len(b_answers) < B_MIN_REQUESTS or (
                _checked(a_answers) < B_OVERLAP and len(b_answers) < B_MAX_REQUESTS):
            b_answers.append(sign(d, honest, f"HONEST-{len(b_answers)}"))
    finally:
        b_done.set()
        for t in threads:
            t.join(180)
    assert not any(t.is_alive() for t in threads), "a hostile request never got an answer"
    print(f"tenant A: {dict(a_answers)}; tenant B: {len(b_answers)} requests")

    for n, r in enumerate(b_answers):
        _assert_signed(r, f"tenant B request {n}")
    assert not a_errors, a_errors[:5]
    assert sum(a_answers.values()) >= A_CLIENTS, a_answers
    unexpected = {k: v for k, v in a_answers.items() if A_CODES.get(k[0]) != k[1]}
    assert not unexpected, f"tenant A's bombs answered {dict(a_answers)}"
    # Its share was enforced (more clients than its share), and bombs reached the check.
    assert a_answers[(503, "busy")] >= 1, a_answers
    assert _checked(a_answers) >= B_OVERLAP, a_answers

    # Healthy afterwards: ready, and B's kiosk still signs.
    ready = d.request("GET", "/readyz", auth=False)
    assert ready.status == 200, ready.body
    _assert_signed(sign(d, honest, "HONEST-after"), "tenant B after the flood")
    assert "http.internal_error" not in d.logs()
    assert _rejections(d, "internal_error") == 0


def test_a_tenant_over_its_share_is_busy_while_another_is_served(daemon_factory, tmp_path):
    # Tenant A's one request holds its share (a slow signer keeps it at the key);
    # A's second is refused at once, B's is signed.
    d = _with_tenant_a(daemon_factory({"kiosk": {"max_concurrent": 2, "deadline_ms": 20000}},
                                      start=False, sign_delay_ms=1500))
    d.start()
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    first: dict[str, object] = {}
    held = threading.Thread(target=lambda: first.setdefault("r", sign(d, doc, "A-1", TOKEN_A)))
    held.start()
    deadline = time.monotonic() + 30
    while _key_slots_in_use(d) < 1:  # A's request is at the key
        assert held.is_alive(), f"tenant A's first request ended early: {first['r'].body[:300]}"
        assert time.monotonic() < deadline, "tenant A's request never reached the key"
        time.sleep(0.02)
    second = sign(d, doc, "A-2", TOKEN_A)
    assert second.status == 503 and _code(second) == "busy", second.body
    assert "tenant" in second.json()["error"]["message"]
    assert int(second.headers["Retry-After"]) >= 1
    _assert_signed(sign(d, doc, "B-1"), "tenant B beside A's share")
    held.join(60)
    _assert_signed(first["r"], "tenant A's first request")
    # Its share is free again once its request has been answered.
    _assert_signed(sign(d, doc, "A-3", TOKEN_A), "tenant A after its first answer")


def _checked(answers: collections.Counter[tuple[int, str | None]]) -> int:
    """Bombs answered after (or while) the PDF checks ran on them, not refused at once."""
    return sum(n for (status, _), n in answers.items() if status != 503)


def _key_slots_in_use(d: Daemon) -> float:
    """Kiosk key slots in use, from /metrics: a request is at the key."""
    total = 0.0
    for line in d.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith("casesignd_key_slots_in_use"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _rejections(d: Daemon, code: str) -> float:
    for line in d.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith("casesignd_rejections_total") and f'code="{code}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_request_past_its_deadline_keeps_its_tenants_share_until_it_ends(daemon_factory,
                                                                           tmp_path):
    # Answered 504, a request's work goes on in a kiosk process: until it ends it still
    # counts against its tenant's share (else a tenant whose documents outlast the
    # deadline would fill every kiosk process), though no longer against max_concurrent.
    d = _with_tenant_a(daemon_factory({"kiosk": {"max_concurrent": 2, "deadline_ms": 1000}},
                                      start=False, sign_delay_ms=3000))
    d.start()
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    late = sign(d, doc, "A-1", TOKEN_A)
    assert late.status == 504 and _code(late) == "deadline_exceeded", late.body
    job_id = late.headers["X-Job-Id"]
    again = sign(d, doc, "A-2", TOKEN_A)
    assert again.status == 503 and _code(again) == "busy", again.body
    assert "tenant" in again.json()["error"]["message"]
    deadline = time.monotonic() + 60
    while (state := d.request("GET", f"/v1/jobs/{job_id}", auth=TOKEN_A).json()["state"]) \
            not in ("ready", "failed"):
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    assert state == "ready"
    # Once its work has ended (and been recorded), the share is free: A is not busy.
    for _ in range(50):
        after = sign(d, doc, "A-3", TOKEN_A)
        if after.status != 503:
            break
        time.sleep(0.05)  # the record is read before its flight's last callback ran
    assert after.status != 503, after.body
