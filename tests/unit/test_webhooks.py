"""The pure parts of webhooks: which endpoints a config may name, what an attempt's
answer decides, which addresses are refused, and the Standard Webhooks headers as
the reference library verifies them."""

from __future__ import annotations

import asyncio
import time

import pytest
from standardwebhooks.webhooks import Webhook as Verifier

from casesignd.core import webhook_events
from casesignd.core.errors import ConfigError
from casesignd.core.webhook_events import Webhook
from casesignd.webhooks import endpoints as webhooks
from casesignd.webhooks.endpoints import decide
from casesignd.webhooks.sender import AddressRefused, CheckingResolver
from tests.helpers_webhooks import new_secret

HOOK = Webhook(name="erp", url="https://erp.example/hook", secret_file="s", max_attempts=5,
               base_delay_s=1.0, max_delay_s=8.0)


@pytest.mark.parametrize(("status", "attempts", "state"), [
    (200, 1, "delivered"), (204, 5, "delivered"),
    (500, 1, "retry"), (503, 4, "retry"), (429, 1, "retry"), (None, 2, "retry"),
    (500, 5, "dead"), (None, 5, "dead"),  # attempts spent
    (410, 1, "dead"), (400, 1, "dead"), (404, 1, "dead"),  # permanent
    (302, 1, "dead"), (301, 1, "dead"),  # redirects are not followed
])
def test_what_an_answer_decides(status, attempts, state):
    assert decide(status, attempts, HOOK, rand=0.5).state == state


@pytest.mark.parametrize(("attempts", "rand", "delay_s"), [
    (1, 0.0, 0.5), (1, 1.0, 1.0), (2, 0.0, 1.0), (3, 1.0, 4.0), (4, 1.0, 8.0), (4, 0.0, 4.0),
])
def test_backoff_is_exponential_capped_and_jittered(attempts, rand, delay_s):
    assert decide(500, attempts, HOOK, rand=rand).delay_s == pytest.approx(delay_s)


@pytest.mark.parametrize(("url", "ok"), [
    ("https://erp.example/hook", True), ("http://127.0.0.1:8080/h", True),
    ("http://localhost/h", True), ("http://[::1]/h", True),
    ("http://erp.example/hook", False), ("ftp://erp.example/", False),
    ("https://user:pw@erp.example/", False), ("https:///nohost", False),
])
def test_endpoint_urls(url, ok):
    assert (webhook_events.url_problem(url) is None) == ok


@pytest.mark.parametrize(("address", "allowed", "refused"), [
    ("169.254.169.254", [], True), ("169.254.1.1", [], True), ("fe80::1", [], True),
    ("::ffff:169.254.169.254", [], True), ("fd00:ec2::254", [], True),
    ("169.254.169.254", ["169.254.169.254"], False),
    ("127.0.0.1", [], False), ("93.184.216.34", [], False), ("10.0.0.5", [], False),
    # IPv6 forms that carry an IPv4 address a gateway reaches: NAT64 (RFC 6052),
    # 6to4 (RFC 3056), IPv4-compatible and IPv4-translated (SIIT).
    ("64:ff9b::a9fe:a9fe", [], True), ("64:ff9b::169.254.169.254", [], True),
    ("2002:a9fe:a9fe::1", [], True), ("::169.254.169.254", [], True),
    ("::ffff:0:a9fe:a9fe", [], True),
    # Other clouds' metadata and platform addresses: Azure's WireServer, Oracle's.
    ("168.63.129.16", [], True), ("192.0.0.192", [], True),
    ("64:ff9b::5db8:d822", [], False), ("2002:5db8:d822::1", [], False), ("::1", [], False),
])
def test_refused_addresses(address, allowed, refused):
    assert webhooks.refused_address(address, allowed) == refused


def test_a_name_resolving_to_a_metadata_address_is_refused():
    class Fake:
        def __init__(self, host):
            self.host = host

        async def resolve(self, host, port=0, family=0):
            return [{"hostname": host, "host": self.host, "port": port, "family": 2,
                     "proto": 0, "flags": 0}]

        async def close(self):
            pass

    r = CheckingResolver({"ok.example": ["169.254.169.254"]}, Fake("169.254.169.254"))
    with pytest.raises(AddressRefused):
        asyncio.run(r.resolve("evil.example", 443))
    assert asyncio.run(r.resolve("ok.example", 443))[0]["host"] == "169.254.169.254"
    r.inner = Fake("127.0.0.1")
    assert asyncio.run(r.resolve("evil.example", 443))


def test_headers_verify_with_each_secret():
    one, two = new_secret(), new_secret()
    body = b'{"job_id":"job_1"}'
    h = webhooks.headers("msg_1", time.time(), body, [one, two])
    assert h["webhook-id"] == "msg_1" and h["webhook-signature"].startswith("v1,")
    for s in (one, two):
        assert Verifier(s).verify(body, h) == {"job_id": "job_1"}


@pytest.mark.parametrize(("kind", "audit_type", "event"), [
    ("sign_case", "succeeded", "job.ready"), ("test", "failed", "job.failed"),
    ("render_invoice", "canceled", "job.canceled"),
    ("extend_signature", "succeeded", "signature.extended"),
    ("sign_case", "claimed", None), ("sign_case", "retry_scheduled", None),
])
def test_which_state_changes_are_reported(kind, audit_type, event):
    assert webhook_events.event_of(kind, audit_type) == event


@pytest.mark.parametrize(("entry", "key"), [
    ({"name": "a b"}, "name"), ({"url": "http://erp.example/"}, "url"),
    ({"events": ["job.done"]}, "events"), ({"max_attempts": 0}, "max_attempts"),
    ({"allow_addresses": ["nope"]}, "allow_addresses"),
    # Not numbers a lease or a backoff can be made of.
    ({"timeout_s": float("nan")}, "timeout_s"), ({"timeout_s": float("inf")}, "timeout_s"),
    ({"base_delay_s": float("nan")}, "timeout_s"), ({"max_delay_s": float("inf")}, "timeout_s"),
])
def test_config_names_a_bad_endpoint(entry, key):
    from casesignd import config

    hook = {"name": "erp", "url": "https://erp.example/h", "secret_file": "s", **entry}
    lines = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in hook.items())
    with pytest.raises(ConfigError) as e:
        config.loads(f'[[tenants]]\nname = "t"\ntoken_sha256 = "{"a" * 64}"\n'
                     f"[[tenants.webhooks]]\n{lines}\n")
    assert e.value.key == f"tenants[0].webhooks[0].{key}"


@pytest.mark.parametrize(("timeouts", "lease"), [((), 30.0), ((2.0,), 14.0), ((2.0, 10.0), 30.0)])
def test_a_sender_s_lease_outlasts_the_longest_attempt(timeouts, lease):
    hooks = [Webhook(name=f"w{i}", url="https://erp.example/hook", secret_file="s",
                     timeout_s=t) for i, t in enumerate(timeouts)]
    assert webhooks.lease_s(hooks) == lease


def test_a_job_that_names_an_endpoint_wakes_the_sender_when_it_ends():
    from types import SimpleNamespace

    from casesignd.observability.metrics import Metrics
    from casesignd.webhooks.sender import Sender

    sender = Sender(SimpleNamespace(metrics=Metrics(node="n"), node="n"))  # type: ignore[arg-type]
    sender.wake(SimpleNamespace(input='{"tag": "x"}'))  # type: ignore[arg-type]
    assert not sender.due.is_set()
    sender.wake(SimpleNamespace(input='{"tag": "x", "webhook": "erp"}'))  # type: ignore[arg-type]
    assert sender.due.is_set()
