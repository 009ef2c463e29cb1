"""Readiness covers the kiosk's CPU process: once /readyz says ready, the first kiosk
request does not pay for starting the worker processes and importing the PDF stack
(which alone can take longer than the kiosk deadline on a busy machine)."""

from __future__ import annotations

from tests.helpers_pki import reportlab_pdf
from tests.integration.test_kiosk_http import sign


def test_ready_means_the_cpu_processes_are_warm(daemon_factory, tmp_path):
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    d = daemon_factory({"kiosk": {"deadline_ms": 2000}})  # returns once /readyz says 200
    r = sign(d, doc, case_id="WARM-1")
    assert r.status == 200, r.body[:300]
    ready = d.request("GET", "/readyz", auth=False)
    assert ready.status == 200 and ready.json()["checks"]["cpu"] == {"ok": True}
    d.stop()

