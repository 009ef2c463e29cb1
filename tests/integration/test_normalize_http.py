"""Normalisation through the daemon: a document whose readers could disagree is signed
only as its clean rewrite, on the batch and the kiosk path alike, and the audit trail
records both digests; with ``normalize = "never"`` it is refused."""

from __future__ import annotations

import hashlib
import subprocess

from tests.helpers_ops import upload
from tests.helpers_pki import reportlab_pdf
from tests.integration.test_kiosk_http import sign
from tests.integration.test_sign_case_http import assert_valid, manifest

# An HTML page before the header: a polyglot that a browser shows as a page.
PREFIX = b"<html><body>Pay to account 666</body></html>\n"


def _signed_event(d, job_id: str) -> dict:
    return next(e for e in d.events(job_id) if e["type"] == "signed")


def _agree(path, tmp_path) -> None:
    """qpdf finds nothing to repair and poppler reads the page text."""
    subprocess.run(["qpdf", "--check", str(path)], check=True, capture_output=True, timeout=60)
    text = subprocess.run(["pdftotext", str(path), "-"], check=True, capture_output=True,
                          timeout=60).stdout
    assert b"casesignd test" in text


def test_a_polyglot_is_signed_as_its_rewrite_on_both_paths(daemon, tmp_path):
    d = daemon
    doc = PREFIX + reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    received = hashlib.sha256(doc).hexdigest()
    # Batch.
    job = d.wait_job(d.submit(manifest("NORM-1", upload(d, "NORM-1", doc), [])).json()["job_id"])
    assert job["state"] == "ready", job
    r = d.request("GET", job["result"]["download_url"], auth=False)
    out = tmp_path / "batch.pdf"
    out.write_bytes(r.body)
    assert r.body.startswith(b"%PDF-") and PREFIX not in r.body
    assert_valid(out, d, tmp_path)
    _agree(out, tmp_path)
    detail = _signed_event(d, job["job_id"])["detail"]
    assert detail["normalized"] is True and detail["received_sha256"] == received
    assert detail["source_sha256"] != received and detail["normalize_reasons"]
    assert r.body.startswith(b"%PDF-")
    # Kiosk: the same decision, the same trail.
    k = sign(d, doc, case_id="NORM-2")
    assert k.status == 200, k.body[:300]
    assert k.body.startswith(b"%PDF-") and PREFIX not in k.body
    kout = tmp_path / "kiosk.pdf"
    kout.write_bytes(k.body)
    assert_valid(kout, d, tmp_path)
    _agree(kout, tmp_path)
    kdetail = _signed_event(d, k.headers["X-Job-Id"])["detail"]
    assert kdetail["normalized"] is True and kdetail["received_sha256"] == received
    # One rewrite for one input: both paths signed the same document.
    assert kdetail["source_sha256"] == detail["source_sha256"]


def test_a_clean_document_is_signed_as_it_is(daemon, tmp_path):
    doc = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    k = sign(daemon, doc, case_id="NORM-3")
    assert k.status == 200 and k.body.startswith(doc)
    detail = _signed_event(daemon, k.headers["X-Job-Id"])["detail"]
    assert detail == {**detail, "normalized": False,
                      "received_sha256": hashlib.sha256(doc).hexdigest()}
    assert "source_sha256" not in detail


def test_never_refuses_what_when_needed_would_rewrite(daemon_factory, tmp_path):
    d = daemon_factory({"policies": [{"version": "contract-v1", "normalize": "never"}]})
    doc = PREFIX + reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    k = sign(d, doc, case_id="NORM-4")
    assert k.status == 422 and k.json()["error"]["code"] == "ambiguous_pdf", k.body[:300]
    damaged = reportlab_pdf(tmp_path / "d.pdf").read_bytes().replace(b"%%EOF", b"")
    k = sign(d, damaged, case_id="NORM-5")
    assert k.status == 422 and k.json()["error"]["code"] == "malformed_pdf", k.body[:300]
    job = d.wait_job(d.submit(manifest("NORM-6", upload(d, "NORM-6", doc), [])).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "ambiguous_pdf", job
    assert "signed" not in [e["type"] for e in d.events(job["job_id"])]


def test_a_document_only_pypdf_reads_otherwise_is_signed_as_the_viewers_show_it(daemon, tmp_path):
    """A page with two /Contents: pypdf takes the first, qpdf, poppler and MuPDF the
    second. Signed as its rewrite, drawn by both engines as the received document;
    a page the viewers never showed (a /Count below the pages) is refused."""
    from casesignd.signing.pipeline import PYPDF_ALONE
    from tests.helpers_hostile import _count_mismatch, _dup_key_contents, assert_drawn_alike

    doc = _dup_key_contents()
    k = sign(daemon, doc, case_id="NORM-7")
    assert k.status == 200, k.body[:300]
    received, signed = tmp_path / "received.pdf", tmp_path / "signed.pdf"
    received.write_bytes(doc)
    signed.write_bytes(k.body)
    assert_valid(signed, daemon, tmp_path)
    assert_drawn_alike(received, signed)
    detail = _signed_event(daemon, k.headers["X-Job-Id"])["detail"]
    assert detail["normalized"] is True and PYPDF_ALONE in detail["normalize_reasons"]
    k = sign(daemon, _count_mismatch(), case_id="NORM-8")
    assert k.status == 422 and k.json()["error"]["code"] == "ambiguous_pdf", k.body[:300]
