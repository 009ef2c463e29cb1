"""Downloads are safe to open: every artifact answer (GET and HEAD /v1/artifacts/{id},
by token or by signed link, and the kiosk's signed answer) is ``nosniff`` and an
attachment under a plain ASCII name the daemon builds."""

from __future__ import annotations

import re

import pytest

from tests.helpers_pki import reportlab_pdf
from tests.integration.test_kiosk_http import sign

_DISPOSITION = re.compile(r'attachment; filename="([A-Za-z0-9_-][A-Za-z0-9._-]{0,99})"; '
                          r"filename\*=UTF-8''([A-Za-z0-9._-]+)")


def _assert_safe_download(r, name: str) -> None:
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    m = _DISPOSITION.fullmatch(r.headers["Content-Disposition"])
    assert m, r.headers["Content-Disposition"]
    assert m.group(1) == m.group(2) == name


@pytest.mark.parametrize("inline_max", [0, 1 << 20])  # the store's bytes, or a file
def test_kiosk_answer_and_artifact_downloads_are_safe_attachments(daemon_factory, tmp_path,
                                                                   inline_max):
    d = daemon_factory({"kiosk": {"inline_artifact_max_bytes": inline_max}})
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    r = sign(d, doc, case_id="KIOSK:2024.7", key=f"dl-{inline_max}")
    assert r.status == 200, r.body[:300]
    _assert_safe_download(r, "KIOSK_2024.7-signed.pdf")
    # A replay answers the same way.
    again = sign(d, doc, case_id="KIOSK:2024.7", key=f"dl-{inline_max}")
    assert again.status == 200 and again.body == r.body
    _assert_safe_download(again, "KIOSK_2024.7-signed.pdf")

    result = d.job(r.headers["X-Job-Id"])["result"]
    artifact_id = result["artifact_id"]
    for method in ("GET", "HEAD"):
        by_token = d.request(method, f"/v1/artifacts/{artifact_id}")
        assert by_token.status == 200, by_token.body[:300]
        _assert_safe_download(by_token, f"{artifact_id}.pdf")
        assert by_token.headers["Content-Type"] == "application/pdf"
        by_link = d.request(method, result["download_url"], auth=False)
        assert by_link.status == 200
        _assert_safe_download(by_link, f"{artifact_id}.pdf")
        assert (by_token.body == r.body) == (method == "GET")


def test_error_answers_are_not_attachments(daemon):
    r = daemon.request("GET", "/v1/artifacts/art_nothing_here")
    assert r.status == 404
    assert "Content-Disposition" not in r.headers
