"""Traces through a real OTLP/HTTP receiver on loopback (protobufs decoded with
``opentelemetry-proto``): a request continues the client's ``traceparent``, a job's
attempts continue the trace of the request that admitted it (after a ``kill -9`` too),
and no span attribute holds a token or a value a client sent."""

from __future__ import annotations

import time

import pytest

from tests.daemon import to_toml
from tests.helpers_ltv import LtvPki, ltv_pki
from tests.helpers_ops import CASE_ID, case_manifest, contract_pdf, crash, find_personal, kiosk_sign
from tests.helpers_otlp import OtlpReceiver, attributes
from tests.helpers_webhooks import Receiver, endpoint, new_secret

__all__ = ["ltv_pki"]  # fixture

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"


@pytest.fixture
def otlp():
    r = OtlpReceiver()
    yield r
    r.close()


def test_a_request_continues_the_callers_trace(daemon_factory, otlp):
    d = daemon_factory({"tracing": {"otlp_endpoint": otlp.url}})
    r = d.request("POST", "/v1/jobs", {"kind": "test", "tag": "Jane Doe secret"},
                  headers={"traceparent": f"00-{TID}-{SID}-01", "Idempotency-Key": "k1"})
    assert r.status == 202, r.body
    assert r.headers["traceresponse"].startswith(f"00-{TID}-")
    [span] = otlp.wait(lambda s: s.name == "POST /v1/jobs")
    assert span.trace_id.hex() == TID and span.parent_span_id.hex() == SID
    attrs = attributes(span)
    assert attrs["http.route"] == "/v1/jobs" and attrs["http.response.status_code"] == 202
    # A request without one starts a trace of its own.
    assert d.request("GET", "/v1/jobs").status == 200
    [own] = otlp.wait(lambda s: s.name == "GET /v1/jobs")
    assert own.trace_id.hex() != TID and not own.parent_span_id
    for s in otlp.spans:
        for value in attributes(s).values():
            assert d.token not in str(value) and "Jane" not in str(value)


def test_a_webhook_call_carries_its_span_as_traceparent(daemon_factory, otlp, tmp_path):
    secret = new_secret()
    rx = Receiver(secret)
    try:
        d = daemon_factory({"tracing": {"otlp_endpoint": otlp.url}}, start=False)
        (d.dir / "hook.secret").write_text(secret + "\n")
        d.config["tenants"][0]["webhooks"] = [endpoint("erp", rx.url, "hook.secret")]
        d.config_path.write_text(to_toml(d.config))
        d.start()
        assert d.submit({"kind": "test", "webhook": "erp"}, key="k").status == 202
        rx.wait(1)
        sent = rx.attempts[-1]["traceparent"]
        [span] = otlp.wait(lambda s: s.name == "webhook.deliver")
        # Sampled (01), and the SDK's random trace id flag (02, Trace Context Level 2).
        assert sent.rsplit("-", 1)[0] == f"00-{span.trace_id.hex()}-{span.span_id.hex()}"
        assert int(sent.rsplit("-", 1)[1], 16) & 1
        assert attributes(span)["http.response.status_code"] == 204
        # In the trace of the request that admitted the job, beside its attempt.
        [admission] = otlp.wait(lambda s: s.name == "POST /v1/jobs")
        assert span.trace_id == admission.trace_id
    finally:
        rx.close()


# What a span may say of a URL: its host and port, never the whole, its path or query.
URL_PARTS = {"url.full", "url.path", "url.query", "http.url", "http.target"}


def _no_personal_values(d, otlp) -> None:
    values = [str(v) for s in otlp.spans for v in attributes(s).values()]
    assert find_personal(*values) == []
    assert not [v for v in values if d.token in v]
    # No file name (the items' names) and no URL with a path.
    assert not [v for v in values if ".pdf" in v or ".txt" in v or "/" in v.strip("/")
                and "://" in v]
    assert not {k for s in otlp.spans for k in attributes(s)} & URL_PARTS
    logs = d.logs()
    # Each phase's span was current in its own task, and left it as it found it.
    assert "Failed to detach context" not in logs
    # The stored trace is the store's: never on a log line.
    assert TID not in logs


def test_a_sign_case_job_s_spans_sit_under_the_request_that_admitted_it(daemon_factory, otlp,
                                                                        tmp_path):
    d = daemon_factory({"tracing": {"otlp_endpoint": otlp.url}})
    # With evidence: the path that fetches each item into the attempt's area.
    body = case_manifest(d, CASE_ID, contract_pdf(tmp_path),
                         [("note.txt", "text/plain", b"delivered on time\n")])
    r = d.request("POST", "/v1/jobs", body, headers={"traceparent": f"00-{TID}-{SID}-01",
                                                     "Idempotency-Key": "traced-1"})
    assert r.status == 202, r.body
    assert d.wait_job(r.json()["job_id"])["state"] == "ready"
    [admission] = otlp.wait(lambda s: s.name == "POST /v1/jobs")
    [job] = otlp.wait(lambda s: s.name == "job sign_case")
    assert job.trace_id.hex() == TID and job.parent_span_id == admission.span_id
    attrs = attributes(job)
    assert attrs["casesignd.job_id"] == r.json()["job_id"] and attrs["casesignd.attempt"] == 1
    assert attrs["casesignd.outcome"] == "succeeded" and attrs["casesignd.result_bytes"] > 0
    otlp.wait(lambda s: s.parent_span_id == job.span_id and s.name == "phase publish")
    children = [s for s in otlp.spans if s.parent_span_id == job.span_id]
    names = {s.name for s in children}
    assert {"queue wait", "phase fetch", "phase validate", "phase sign", "phase publish"} <= names
    assert all(s.trace_id.hex() == TID for s in children)
    # The queue wait runs from the admission's clock to the claim's, inside the job's span.
    [wait] = [s for s in children if s.name == "queue wait"]
    assert job.start_time_unix_nano == wait.start_time_unix_nano <= wait.end_time_unix_nano
    _no_personal_values(d, otlp)
    # Not part of the job resource.
    assert "traceparent" not in d.job(r.json()["job_id"])


def test_a_kiosk_signature_s_attempt_sits_under_its_request(daemon_factory, otlp, tmp_path):
    d = daemon_factory({"tracing": {"otlp_endpoint": otlp.url}})
    r = kiosk_sign(d, CASE_ID, contract_pdf(tmp_path))
    assert r.status == 200, r.body
    [request] = otlp.wait(lambda s: s.name == "POST /v1/sign")
    [job] = otlp.wait(lambda s: s.name == "job sign_case")
    assert job.trace_id == request.trace_id and job.parent_span_id == request.span_id
    assert attributes(job)["casesignd.pool"] == "kiosk"
    otlp.wait(lambda s: s.parent_span_id == job.span_id and s.name == "phase publish")
    _no_personal_values(d, otlp)


def test_a_job_continues_its_trace_after_a_kill_9(daemon_factory, otlp):
    d = daemon_factory({"tracing": {"otlp_endpoint": otlp.url}})
    r = d.request("POST", "/v1/jobs", {"kind": "test", "sleep_ms": 3000},
                  headers={"traceparent": f"00-{TID}-{SID}-01", "Idempotency-Key": "k9"})
    assert r.status == 202, r.body
    job_id = r.json()["job_id"]
    [admission] = otlp.wait(lambda s: s.name == "POST /v1/jobs")
    deadline = time.monotonic() + 30
    while "claimed" not in [e["type"] for e in d.events(job_id)]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    crash(d)
    d.start()
    assert d.wait_job(job_id)["state"] == "ready"
    [job] = otlp.wait(lambda s: s.name == "job test" and attributes(s)["casesignd.attempt"] == 2)
    assert job.trace_id.hex() == TID and job.parent_span_id == admission.span_id
    assert attributes(job)["casesignd.outcome"] == "succeeded"


def test_a_b_lta_job_s_tsa_and_ocsp_calls_sit_under_its_phases(daemon_factory, otlp,
                                                               ltv_pki: LtvPki, tmp_path):
    d = daemon_factory({**ltv_pki.casesignd_config("signer", level="B-LTA"),
                        "tracing": {"otlp_endpoint": otlp.url}})
    received = ltv_pki.switchboard.traceparents
    seen = len(received)
    r = d.request("POST", "/v1/jobs", case_manifest(d, CASE_ID, contract_pdf(tmp_path)),
                  headers={"traceparent": f"00-{TID}-{SID}-01", "Idempotency-Key": "lta-1"})
    assert r.status == 202, r.body
    assert d.wait_job(r.json()["job_id"], timeout_s=60)["state"] == "ready"
    [admission] = otlp.wait(lambda s: s.name == "POST /v1/jobs")
    [job] = otlp.wait(lambda s: s.name == "job sign_case")
    assert job.trace_id.hex() == TID and job.parent_span_id == admission.span_id
    otlp.wait(lambda s: s.parent_span_id == job.span_id and s.name == "phase publish")
    phases = {s.span_id: s.name for s in otlp.spans if s.parent_span_id == job.span_id}
    # The in-memory path's rungs, each a phase of its own.
    assert {"phase validate", "phase sign", "phase timestamp", "phase ltv"} <= set(phases.values())
    tsa = [s for s in otlp.spans if s.name == "tsa.timestamp" and s.trace_id.hex() == TID]
    ocsp = [s for s in otlp.spans if s.name == "ocsp.fetch" and s.trace_id.hex() == TID]
    # The signature's timestamp, then the document timestamp over the /DSS (pyHanko's,
    # in a thread on its own event loop); the TSA's chain's OCSP responses, fetched
    # for this first signature with that TSA.
    assert sorted(phases[s.parent_span_id] for s in tsa) == ["phase ltv", "phase timestamp"]
    assert ocsp and {phases[s.parent_span_id] for s in ocsp} == {"phase ltv"}
    for span in tsa + ocsp:
        attrs = attributes(span)
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["http.response.status_code"] == 200
        assert attrs["casesignd.call"] in ("tsa", "ocsp")
    # Each responder got the traceparent of the span of its request.
    sent = {tp for _service, tp in received[seen:]}
    for span in tsa + ocsp:
        assert f"00-{TID}-{span.span_id.hex()}-01" in sent
    assert {service for service, tp in received[seen:] if tp and TID in tp} == {"tsa", "ocsp"}
    _no_personal_values(d, otlp)
