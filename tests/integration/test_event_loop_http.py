"""server.event_loop: the daemon runs on the loop it names, uvloop or asyncio's own, and
on either it signs, serves an artifact whole and in ranges, and stops cleanly."""

from __future__ import annotations

import hashlib

import pytest

from tests.helpers_ops import case_manifest
from tests.helpers_pki import reportlab_pdf


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_daemon_runs_on_the_configured_loop(daemon_factory, tmp_path, loop):
    d = daemon_factory({"server": {"event_loop": loop}})
    assert f'"event_loop":"{loop}"' in d.logs()
    contract = reportlab_pdf(tmp_path / "contract.pdf", pages=3).read_bytes()
    r = d.submit(case_manifest(d, "LOOP-1", contract, [("note.txt", "text/plain", b"x" * 300_000)]))
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    url = job["result"]["download_url"]
    whole = d.request("GET", url, auth=False)
    assert whole.status == 200, whole.body
    assert hashlib.sha256(whole.body).hexdigest() == job["result"]["sha256"]
    part = d.request("GET", url, auth=False, headers={"Range": "bytes=100-4195"})
    assert part.status == 206 and part.body == whole.body[100:4196]
    assert d.stop() == 0
    assert '"msg":"server.stopped"' in d.logs()
