"""Debian's Chromium driven by Playwright, for the console's browser tests and its
README screenshot; and a daemon's worth of jobs to show.

No browser is downloaded: Playwright launches /usr/bin/chromium (Debian's package,
installed by ``scripts/setup --system``). The machine's network is closed, and
Chromium's own background connections (updates, sync, field trials, QUIC probes)
would only wait and fail, so they are switched off.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.daemon import Daemon
from tests.helpers_ops import case_manifest
from tests.helpers_pki import reportlab_pdf

CHROMIUM = Path(os.environ.get("CASESIGND_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]


def launch(playwright: Any) -> Any:
    """A headless Chromium browser (Debian's)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                      headless=True)


def seed(d: Daemon, work: Path) -> dict[str, Any]:
    """Jobs of every kind of ending on ``d``: a signed case packet (with a download),
    test jobs that succeed and one that fails for good, one that runs for a while.
    Returns them by name, each as it ended (the running one as admitted)."""
    contract = reportlab_pdf(work / "contract.pdf", pages=1).read_bytes()
    made: dict[str, Any] = {}
    signed = d.submit(case_manifest(d, "MKT-2026-00042", contract))
    assert signed.status == 202, signed.body
    for i in range(4):
        r = d.submit({"kind": "test", "behavior": "succeed", "case_id": f"EDU-{1040 + i}",
                      "tag": f"ok{i}"})
        assert r.status == 202, r.body
        made[f"ok{i}"] = r.json()["job_id"]
    r = d.submit({"kind": "test", "behavior": "fail_permanent", "case_id": "MKT-2026-00051",
                  "tag": "bad"})
    assert r.status == 202, r.body
    failed = r.json()["job_id"]
    out = {name: d.wait_job(job_id) for name, job_id in made.items()}
    out["signed"] = d.wait_job(signed.json()["job_id"])
    out["failed"] = d.wait_job(failed)
    r = d.submit({"kind": "test", "behavior": "hang", "hang_s": 120, "case_id": "MKT-2026-00060",
                  "tag": "slow"})
    assert r.status == 202, r.body
    out["running"] = r.json()
    return out
