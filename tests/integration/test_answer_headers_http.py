"""What every answer carries (casesignd.http.answer_headers): ``Cache-Control:
no-store`` and ``X-Content-Type-Options: nosniff`` on JSON answers and on errors,
the router's 404 and 405 among them; and a refused unknown field is counted, never
echoed, in the answer and in the log."""

from __future__ import annotations

import pytest

from tests.helpers_pki import reportlab_pdf
from tests.integration.test_kiosk_http import sign

# Keys a client may send by mistake or on purpose: markup, and a token in the wrong place.
HOSTILE_KEYS = ("<script>alert(1)</script>", "tok_4f9c2e77d1a0b3c5e6f8")


def _assert_carries(r) -> None:
    assert r.headers["Cache-Control"] == "no-store", (r.status, dict(r.headers))
    assert r.headers["X-Content-Type-Options"] == "nosniff", (r.status, dict(r.headers))


@pytest.mark.parametrize("method,path,auth,status", [
    ("GET", "/healthz", False, 200),
    ("GET", "/v1/jobs", True, 200),
    ("GET", "/v1/openapi.json", False, 200),
    ("GET", "/v1/jobs", False, 401),  # an error raised by a handler
    ("GET", "/v1/jobs/job_" + "0" * 28, True, 404),
    ("GET", "/v1/no/such/path", True, 404),  # the router's
    ("DELETE", "/v1/jobs", True, 405),  # the router's
    ("POST", "/v1/jobs", True, 400),  # a body that is not JSON
])
def test_every_answer_carries_no_store_and_nosniff(daemon, method, path, auth, status):
    r = daemon.request(method, path, auth=auth, raw=b"{" if method == "POST" else None,
                       headers={"Content-Type": "application/json"} if method == "POST" else None)
    assert r.status == status, r.body[:300]
    _assert_carries(r)
    if status >= 400:
        assert r.json()["error"]["code"]


def test_a_download_keeps_its_own_cache_control(daemon, tmp_path):
    r = sign(daemon, reportlab_pdf(tmp_path / "doc.pdf").read_bytes(), key="headers-1")
    assert r.status == 200, r.body[:300]
    assert r.headers["Cache-Control"] == "private, no-store"
    assert r.headers["X-Content-Type-Options"] == "nosniff"


def test_an_unknown_field_is_not_echoed(daemon, tmp_path):
    body = {"kind": "sign_case", "case_id": "C-1", **dict.fromkeys(HOSTILE_KEYS, 1)}
    r = daemon.submit(body)
    assert r.status == 422, r.body[:300]
    _assert_carries(r)
    err = r.json()["error"]
    assert err["code"] == "unknown_field" and "field" not in err
    assert err["message"].startswith("the body has 2 unknown fields; it allows ")
    # The kiosk's manifest, and a part of its own name.
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    kiosk = sign(daemon, doc, **dict.fromkeys(HOSTILE_KEYS, 1))
    assert kiosk.status == 422 and kiosk.json()["error"]["field"] == "manifest"
    _assert_carries(kiosk)
    answers = [r.body, kiosk.body]
    logs = daemon.logs()
    for key in HOSTILE_KEYS:
        for text in (*answers, logs.encode()):
            assert key.encode() not in text
