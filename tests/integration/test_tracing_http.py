"""Traces through a real OTLP/HTTP receiver on loopback (protobufs decoded with
``opentelemetry-proto``): a request continues the client's ``traceparent``, and no
span attribute holds a token or a value a client sent."""

from __future__ import annotations

import pytest

from tests.daemon import to_toml
from tests.helpers_otlp import OtlpReceiver, attributes
from tests.helpers_webhooks import Receiver, endpoint, new_secret

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
    finally:
        rx.close()
