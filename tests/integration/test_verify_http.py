"""POST /v1/verify and casesignd verify against a real daemon: what the daemon signs
validates, what was tampered with after it signed does not, even when the daemon signs
the tampered document again; bad requests answer the usual error shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import Daemon, multipart
from tests.helpers_pki import pki, reportlab_pdf
from tests.helpers_sigcorpus import build_corpus, damage
from tests.helpers_verify import cli_verify, drop_signature_field, pyhanko_sign, rewrite_page

__all__ = ["pki"]  # fixture

MAX_DOCUMENT_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp("verify") / "state", {
        "validation": {"trust_roots": ["ca.pem"], "fetch": "never"},
        "kiosk": {"max_document_bytes": MAX_DOCUMENT_BYTES, "deadline_ms": 20000},
    })
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def kiosk_sign(d: Daemon, document: bytes) -> bytes:
    body, ctype = multipart({"case_id": "V-1", "signers": []}, document)
    r = d.request("POST", "/v1/sign", raw=body, headers={"Content-Type": ctype}, timeout_s=60)
    assert r.status == 200, r.body
    return r.body


def post_verify(d: Daemon, document: bytes, **kw: object) -> object:
    headers = {"Content-Type": "application/pdf", **kw.pop("headers", {})}  # type: ignore[dict-item]
    return d.request("POST", "/v1/verify", raw=document, headers=headers, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def signed(d: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("signed")
    out = tmp / "signed.pdf"
    out.write_bytes(kiosk_sign(d, reportlab_pdf(tmp / "contract.pdf").read_bytes()))
    return out


def test_what_the_daemon_signs_passes(d, signed) -> None:
    r = post_verify(d, signed.read_bytes())
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    report = r.json()
    assert report["passed"] is True, report
    (sig,) = report["signatures"]
    assert sig["indication"] == "TOTAL-PASSED" and sig["level"] == "B-B"
    assert sig["modification"] == "none" and sig["trusted"] and sig["problems"] == []
    # The command line says the same, with the daemon's CA as the anchor.
    rc, cli_report, err = cli_verify(signed, "--trust", str(d.dir / "ca.pem"), "--fetch", "never",
                                     env=d.env, cwd=signed.parent)
    assert rc == 0 and cli_report == report, err


def test_the_config_s_anchors_are_the_only_ones(d, signed, tmp_path) -> None:
    # The CLI without --trust reads the daemon's config for its anchors...
    rc, report, err = cli_verify(signed, "--config", str(d.config_path), env=d.env, cwd=tmp_path)
    assert rc == 0 and report["passed"], err
    # ... and without any config trusts nothing.
    rc, report, err = cli_verify(signed, "--fetch", "never", env=d.env, cwd=tmp_path)
    assert rc == 1 and report["signatures"][0]["sub_indication"] == "NO_CERTIFICATE_CHAIN_FOUND"


def test_a_rewrite_signed_again_by_the_daemon_fails(d, signed, pki, tmp_path) -> None:
    rewritten = rewrite_page(signed, tmp_path / "rewritten.pdf")
    again = kiosk_sign(d, rewritten.read_bytes())
    r = post_verify(d, again)
    assert r.status == 200
    report = r.json()
    assert report["passed"] is False
    first, second = report["signatures"]
    assert first["indication"] == "TOTAL-FAILED" and first["sub_indication"] == "FORMAT_FAILURE"
    assert first["modification"] == "other" and first["intact"] and first["trusted"]
    assert second["indication"] == "TOTAL-PASSED" and second["modification"] == "none"
    (tmp_path / "again.pdf").write_bytes(again)
    rc, cli_report, _ = cli_verify(tmp_path / "again.pdf", "--trust", str(d.dir / "ca.pem"),
                                   "--fetch", "never", env=d.env, cwd=tmp_path)
    assert rc == 1 and _without_problems(cli_report) == _without_problems(report)
    assert any("changes what a reader sees" in p for p in first["problems"])


def _without_problems(report: dict) -> dict:
    # pyHanko's words may name a set of keys, in an order of the process's hash seed.
    return {**report, "signatures": [{k: v for k, v in s.items() if k != "problems"}
                                     for s in report["signatures"]]}


def test_a_dropped_signature_signed_again_by_the_daemon_fails(d, signed, tmp_path) -> None:
    dropped = drop_signature_field(signed, tmp_path / "dropped.pdf", "Signature1")
    report = post_verify(d, kiosk_sign(d, dropped.read_bytes())).json()
    assert report["passed"] is False
    assert [s["indication"] for s in report["signatures"]] == ["TOTAL-FAILED", "TOTAL-PASSED"]
    assert report["signatures"][0]["modification"] == "other"


def test_another_signer_after_the_daemon(d, signed, pki, tmp_path) -> None:
    # pyHanko's signer is of the test PKI, which the daemon's config does not trust:
    # the daemon's signature passes (form filling: a new signature field), the other
    # one is indeterminate, and the document does not pass.
    both = pyhanko_sign(signed, tmp_path / "both.pdf", pki)
    report = post_verify(d, both.read_bytes()).json()
    mine, theirs = report["signatures"]
    assert mine["indication"] == "TOTAL-PASSED" and mine["modification"] == "form_filling"
    assert theirs["indication"] == "INDETERMINATE" and not report["passed"]


def test_a_pdf_without_signatures_is_answered_not_passed(d, tmp_path) -> None:
    r = post_verify(d, reportlab_pdf(tmp_path / "plain.pdf").read_bytes())
    assert r.status == 200 and r.json() == {"signatures": [], "passed": False, "findings": []}


@pytest.mark.parametrize("body", [b"not a pdf", b"%PDF-1.7\ngarbage\n", b""])
def test_what_is_not_a_pdf_is_422(d, body) -> None:
    r = post_verify(d, body)
    assert r.status == 422, r.body
    err = r.json()["error"]
    assert err["code"] == "malformed_pdf" and err["correlation_id"] == r.headers["X-Correlation-Id"]
    assert "Traceback" not in r.body.decode()


def test_requests_it_does_not_take(d, signed) -> None:
    data = signed.read_bytes()
    assert post_verify(d, data, auth=False).status == 401
    assert post_verify(d, data, auth="not-a-token").json()["error"]["code"] == "invalid_token"
    r = d.request("POST", "/v1/verify", raw=data, headers={"Content-Type": "application/json"})
    assert r.status == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = post_verify(d, b"%PDF-1.7\n" + b"0" * MAX_DOCUMENT_BYTES)
    assert r.status == 413 and r.json()["error"]["code"] == "too_large"


def test_the_daemon_logs_no_traceback(d) -> None:
    # pyHanko logs its findings with tracebacks: they become problems, never log lines.
    assert "Traceback" not in d.logs()
    assert json.loads(d.request("GET", "/v1/openapi.json", auth=False).body)["paths"][
        "/v1/verify"]["post"]["operationId"] == "verifyPdf"


def test_trust_roots_the_daemon_cannot_read_stop_it_at_start(daemon_factory) -> None:
    # They are what signing from B-LT up builds chains to: a daemon does not start
    # without them, rather than answering for a setting it cannot use.
    d2 = daemon_factory({"validation": {"trust_roots": ["gone.pem"]}}, start=False)
    d2.start(wait=False)
    assert d2.proc is not None
    assert d2.proc.wait(timeout=30) != 0
    assert "validation.trust_roots" in d2.logs() and "gone.pem" in d2.logs()


def test_every_corpus_file_and_its_damage_is_answered(d, pki, tmp_path) -> None:
    # Issue 41: no exception escapes through the daemon either. The daemon's anchors are
    # not the test PKI's, so only the shape is held here (the verdicts: test_verify_corpus).
    corpus = build_corpus(pki, tmp_path / "corpus")
    seen = []
    for name, (path, expect) in corpus.items():
        data = path.read_bytes()
        for body in (data, data[: len(data) * 2 // 3], damage(data, len(data) // 2)):
            r = post_verify(d, body)
            assert r.status in (200, 422), (name, r.status, r.body[:300])
            assert "Traceback" not in r.body.decode(errors="replace")
            if r.status == 422:
                assert r.json()["error"]["code"] == "malformed_pdf", name
                continue
            for sig in r.json()["signatures"]:
                assert sig["indication"] in ("TOTAL-PASSED", "TOTAL-FAILED", "INDETERMINATE")
                seen.append(sig["sub_indication"])
        report = post_verify(d, data).json()
        first = report["signatures"][0]
        assert (first["intact"], first["valid"]) == (expect.intact, expect.valid), name
    assert "FORMAT_FAILURE" in seen and "NO_SIGNING_CERTIFICATE_FOUND" in seen


def test_the_etsi_report_over_http(d, signed, tmp_path) -> None:
    from tests.helpers_etsi import assert_valid

    r = post_verify(d, signed.read_bytes(), headers={"Accept": "application/xml"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/xml")
    root = assert_valid(r.body)
    assert root.tag == "{http://uri.etsi.org/19102/v1.2.1#}ValidationReport"
    # JSON stays the default, and wins when preferred.
    assert post_verify(d, signed.read_bytes()).json()["passed"] is True
    r = post_verify(d, signed.read_bytes(),
                    headers={"Accept": "application/xml;q=0.5, application/json"})
    assert r.headers["Content-Type"].startswith("application/json")
    # No signature, no ETSI report: the schema wants one.
    r = post_verify(d, reportlab_pdf(tmp_path / "plain.pdf").read_bytes(),
                    headers={"Accept": "application/xml"})
    assert r.status == 422 and r.json()["error"]["code"] == "invalid_input"
