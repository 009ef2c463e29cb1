"""/metrics on a real daemon under a realistic mix: every family an operator relies on
is exposed, moves when its event happens, and carries no personal data.

The mix: a kiosk signature and its replay, signed case packets (one valid, one malformed, one fetched from an HTTP
source that stalls half way so the temp bytes in use can be seen), invoices with student names
(signed and unsigned, 1 and 30 lines), test-kind jobs that fail transiently and
permanently, a dead-letter replay, a cancel, rejected requests (bad token, bad JSON,
queue_full), an idempotent replay, a lease that expires under a running attempt, and
a ``kill -9`` whose lease the restarted daemon reclaims.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from casesignd.observability.metrics import KINDS
from tests.helpers_ops import (
    BAD_CASE_ID,
    CASE_ID,
    ORDER_IDS,
    PNG,
    SIGNERS,
    STUDENT_NAMES,
    TEST_TAG,
    StallingSource,
    case_manifest,
    contract_pdf,
    crash,
    find_personal,
    invoice,
    kiosk_sign,
    label_values,
    scrape,
    value,
    wait_metric,
)
from tests.helpers_pki import big_pdf

CLOCKS = ("casesignd_admission_seconds", "casesignd_queue_wait_seconds",
          "casesignd_processing_seconds", "casesignd_job_total_seconds")
PHASES = {"sign_case": ("fetch", "validate", "scan", "sign", "publish"),
          "render_invoice": ("render", "sign", "publish")}
FAMILIES = {
    *CLOCKS,
    "casesignd_phase_seconds", "casesignd_invoice_render_seconds",
    "casesignd_http_request_seconds", "casesignd_kiosk_seconds",
    "casesignd_jobs_admitted", "casesignd_jobs_finished", "casesignd_job_retries",
    "casesignd_source_retries", "casesignd_leases_expired", "casesignd_leases_reclaimed",
    "casesignd_stale_results", "casesignd_rejections", "casesignd_idempotent_replays",
    "casesignd_jobs", "casesignd_oldest_queued_job_age_seconds", "casesignd_inflight_bytes",
    "casesignd_temp_used_bytes", "casesignd_temp_free_bytes", "casesignd_key_slots_in_use",
    "casesignd_workers_busy", "casesignd_build_info",
}  # the parser names counter families without their "_total"


def _hang(d, n: int, hang_s: int = 3):
    r = d.submit({"kind": "test", "behavior": "hang", "hang_s": hang_s, "size": 4096,
                  "tag": f"{TEST_TAG}-{n}"})
    assert r.status == 202, r.body
    return r.json()["job_id"]


def test_metrics_move_with_a_realistic_mix_and_leak_nothing(daemon_factory, tmp_path):
    with StallingSource(big_pdf(tmp_path / "remote.pdf", 1 << 20).read_bytes(),
                        stall_after=768 * 1024) as remote:
        _run_mix(daemon_factory, tmp_path, remote)


def _run_mix(daemon_factory, tmp_path, remote: StallingSource) -> None:
    d = daemon_factory({"workers": {"concurrency": 2, "max_queue_depth": 8, "lease_s": 30.0,
                                    "heartbeat_s": 20.0},
                        # Room for a loaded test machine: this test is not about deadlines.
                        "kiosk": {"deadline_ms": 30000},
                        "sources": [{"name": "remote", "kind": "http",
                                     "base_url": remote.base_url}]})
    texts = []
    text, before, families = scrape(d)
    texts.append(text)
    assert families >= FAMILIES, sorted(FAMILIES - families)

    # --- a contract fetched from an HTTP source, caught half way: temp bytes in use ------
    data = remote.data
    fetched = d.submit({"kind": "sign_case", "case_id": CASE_ID + "-R", "signers": SIGNERS,
                        "items": [{"role": "contract", "name": "remote.pdf",
                                   "media_type": "application/pdf",
                                   "object_ref": "remote:contracts/remote.pdf",
                                   "sha256": hashlib.sha256(data).hexdigest(),
                                   "size": len(data)}]})
    assert fetched.status == 202, fetched.body
    assert remote.stalled.wait(timeout=30)
    fetching = wait_metric(d, lambda s: value(s, "casesignd_temp_used_bytes") >= 256 * 1024)
    texts.append(scrape(d)[0])
    remote.release()
    assert d.wait_job(fetched.json()["job_id"])["state"] == "ready"

    # --- work that finishes: signing, invoices, retries, a replay -----------------------
    good = case_manifest(d, CASE_ID, contract_pdf(tmp_path),
                         [("photo-1.png", "image/png", PNG)])
    bad = case_manifest(d, BAD_CASE_ID, b"%PDF-1.7\nthis is not really a PDF\n%%EOF\n")
    submitted = [d.submit(good), d.submit(bad)]
    for i, (order_id, student) in enumerate(zip(ORDER_IDS, STUDENT_NAMES, strict=True)):
        submitted.append(d.submit(invoice(order_id, student, lines=30 if i == 2 else 1,
                                          sign=i != 1)))
    submitted.append(d.submit({"kind": "test", "behavior": "fail_transient", "fail_times": 1,
                               "tag": TEST_TAG}))
    permanent = d.submit({"kind": "test", "behavior": "fail_permanent", "tag": TEST_TAG})
    submitted.append(permanent)
    assert [r.status for r in submitted] == [202] * len(submitted), [r.body for r in submitted]
    done = {r.json()["job_id"]: d.wait_job(r.json()["job_id"]) for r in submitted}
    states = [j["state"] for j in done.values()]
    assert states == ["ready", "failed", "ready", "ready", "ready", "ready", "failed"], states
    dead = permanent.json()["job_id"]
    assert d.request("POST", f"/v1/jobs/{dead}/retry").status == 202
    assert d.wait_job(dead)["state"] == "failed"
    replay = d.submit(good)
    assert replay.status == 200 and replay.json()["job_id"] == submitted[0].json()["job_id"]
    kiosk_pdf = contract_pdf(tmp_path, pages=1)
    signed = kiosk_sign(d, CASE_ID + "-K", kiosk_pdf, key="kiosk-1")
    assert signed.status == 200 and signed.headers["Content-Type"] == "application/pdf", signed.body
    again = kiosk_sign(d, CASE_ID + "-K", kiosk_pdf, key="kiosk-1")
    assert again.status == 200 and again.body == signed.body

    # --- rejected requests --------------------------------------------------------------
    assert d.request("GET", "/v1/jobs", auth="not-a-token").status == 401
    r = d.request("POST", "/v1/jobs", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json()["error"]["code"] == "malformed_json"

    # --- a saturated pool: gauges during the run, queue_full, a cancel ---------------------
    # Long enough to submit up to queue_full on a busy machine before a worker frees up.
    hangs = [_hang(d, 0, hang_s=6), _hang(d, 1, hang_s=6)]
    for job_id in hangs:
        d.wait_job(job_id, states=("processing",))
    queued = [d.submit({"kind": "test", "tag": f"{TEST_TAG}-q{i}"}).json()["job_id"]
              for i in range(8)]
    full = d.submit({"kind": "test", "tag": f"{TEST_TAG}-overflow"})
    assert full.status == 429 and full.json()["error"]["code"] == "queue_full"
    during = wait_metric(d, lambda s: (
        value(s, "casesignd_jobs", state="running") >= 2
        and value(s, "casesignd_jobs", state="queued") >= 8
        and value(s, "casesignd_oldest_queued_job_age_seconds") > 0
        and value(s, "casesignd_workers_busy") >= 2
        and value(s, "casesignd_inflight_bytes") >= 2 * 4096
        and value(s, "casesignd_temp_free_bytes") < value(before, "casesignd_temp_free_bytes")))
    texts.append(scrape(d)[0])
    assert d.request("POST", f"/v1/jobs/{queued[0]}/cancel").status == 200

    # A stalled worker, as the store sees it: the lease runs out under a running attempt.
    with sqlite3.connect(d.db, timeout=10) as db:
        db.execute("UPDATE jobs SET lease_expires = 0 WHERE job_id = ?", (hangs[0],))
    wait_metric(d, lambda s: value(s, "casesignd_leases_expired_total") >= 1
                and value(s, "casesignd_leases_reclaimed_total") >= 1)
    for job_id in hangs + queued[1:]:
        assert d.wait_job(job_id, timeout_s=60)["state"] == "ready"
    after = wait_metric(d, lambda s: value(s, "casesignd_stale_results_total") >= 1
                        and value(s, "casesignd_jobs", state="running") == 0)
    text, after, _ = scrape(d)
    texts.append(text)

    # --- what moved ---------------------------------------------------------------------
    def moved(name: str, samples=after, **labels: str) -> bool:
        return value(samples, name, **labels) > value(before, name, **labels)

    for kind in ("sign_case", "render_invoice"):
        for clock in CLOCKS:
            assert moved(f"{clock}_count", kind=kind), (clock, kind)
            assert moved(f"{clock}_sum", kind=kind), (clock, kind)
        for phase in PHASES[kind]:
            assert moved("casesignd_phase_seconds_count", kind=kind, phase=phase), (kind, phase)
        assert moved("casesignd_jobs_admitted_total", kind=kind)
        assert moved("casesignd_jobs_finished_total", kind=kind, outcome="succeeded")
    assert moved("casesignd_jobs_finished_total", kind="sign_case", outcome="failed")
    assert moved("casesignd_jobs_finished_total", kind="test", outcome="failed")
    assert moved("casesignd_jobs_finished_total", kind="test", outcome="canceled")
    assert moved("casesignd_job_retries_total", kind="test", reason="test_transient")
    assert moved("casesignd_leases_expired_total") and moved("casesignd_leases_reclaimed_total")
    assert moved("casesignd_stale_results_total")
    for code in ("invalid_token", "malformed_json", "queue_full"):
        assert moved("casesignd_rejections_total", code=code), code
    assert moved("casesignd_idempotent_replays_total", path="/v1/jobs")
    assert moved("casesignd_idempotent_replays_total", path="/v1/sign")
    assert moved("casesignd_kiosk_seconds_count", outcome="succeeded")
    assert moved("casesignd_kiosk_seconds_count", outcome="replayed")
    assert moved("casesignd_http_request_seconds_count", method="POST", route="/v1/jobs",
                 status="202")
    # Gauges: up while the pool was saturated, down again after.
    for gauge, labels in (("casesignd_jobs", {"state": "running"}),
                          ("casesignd_jobs", {"state": "queued"}),
                          ("casesignd_oldest_queued_job_age_seconds", {}),
                          ("casesignd_workers_busy", {}), ("casesignd_inflight_bytes", {})):
        assert moved(gauge, during, **labels), gauge
        assert value(after, gauge, **labels) < value(during, gauge, **labels), gauge
    assert moved("casesignd_jobs", state="succeeded") and moved("casesignd_jobs", state="failed")
    assert moved("casesignd_jobs", state="canceled")
    assert value(after, "casesignd_temp_free_bytes") == value(before, "casesignd_temp_free_bytes")
    assert moved("casesignd_temp_used_bytes", fetching)
    assert value(after, "casesignd_temp_used_bytes") == 0
    # Key slots are held only around the key operation (milliseconds): both pools are
    # exposed and back at zero once no signing runs.
    assert label_values(after, "casesignd_key_slots_in_use", "pool") == {"batch", "kiosk"}
    assert value(after, "casesignd_key_slots_in_use") == 0
    # Labels take only values of their fixed sets.
    assert label_values(after, "casesignd_jobs_finished_total", "kind") <= {*KINDS, "test"}
    assert "other" not in text

    # --- kill -9 while an attempt runs; the restarted daemon reclaims its lease -----------
    orphan = _hang(d, 9, hang_s=1)
    d.wait_job(orphan, states=("processing",))
    crash(d)
    d.start()
    text, restarted, _ = scrape(d)
    texts.append(text)
    assert value(restarted, "casesignd_leases_reclaimed_total") >= 1
    assert d.wait_job(orphan, timeout_s=60)["state"] == "ready"
    restarted = wait_metric(d, lambda s: value(s, "casesignd_jobs_finished_total",
                                               kind="test", outcome="succeeded") >= 1)
    texts.append(scrape(d)[0])

    # --- no personal data, in the exposition or in the log ---------------------------------
    log = d.logs()
    assert "job.succeeded" in log
    assert find_personal(*texts) == []
    assert find_personal(log) == []

    assert label_values(after, "casesignd_invoice_render_seconds_count", "items_bucket") >= {
        "1", "11-100"}
    assert moved("casesignd_invoice_render_seconds_count", template_version="invoice-v3")
    assert d.stop() == 0

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts.yml"
PROMTOOL = shutil.which("promtool")
# promtool's series notation: 'a+bxN' is N+1 samples from a, growing by b per minute.
KIOSK_ALERT_TESTS = """
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'casesignd_kiosk_seconds_count{instance="h",job="casesignd",outcome="succeeded"}'
        values: '0+8x60'
      - series: 'casesignd_kiosk_seconds_count{instance="h",job="casesignd",outcome="busy"}'
        values: '0+0x20 0+2x40'
      - series: 'casesignd_kiosk_seconds_count{instance="h",job="casesignd",outcome="deadline_exceeded"}'
        values: '0x60'
    alert_rule_test:
      - eval_time: 15m
        alertname: CasesigndKioskRefusing
        exp_alerts: []
      - eval_time: 50m
        alertname: CasesigndKioskRefusing
        exp_alerts:
          - exp_labels: {severity: warning, instance: h}
"""


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_kiosk_refusal_alert_fires_on_busy_answers(tmp_path):
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)  # checked by `promtool check rules` elsewhere
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kiosk_test.yml").write_text(KIOSK_ALERT_TESTS)
    result = subprocess.run([PROMTOOL, "test", "rules", "kiosk_test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _lease_expires(db_path, job_id: str) -> float | None:
    with sqlite3.connect(db_path, timeout=10) as db:
        row = db.execute("SELECT lease_expires FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return row[0] if row else None


def test_one_expired_lease_is_counted_once_and_the_job_still_succeeds(daemon_factory):
    d = daemon_factory({"workers": {"concurrency": 2, "lease_s": 4.0, "heartbeat_s": 3.5}})
    job_id = _hang(d, 0, hang_s=8)
    d.wait_job(job_id, states=("processing",))
    # Right after a heartbeat renewed the lease, the next one is 3.5 s away: the
    # maintenance loop (every 0.5 s) finds the expired lease first.
    first = _lease_expires(d.db, job_id)
    deadline = time.monotonic() + 10
    while _lease_expires(d.db, job_id) == first and time.monotonic() < deadline:
        time.sleep(0.02)
    with sqlite3.connect(d.db, timeout=10) as db:
        db.execute("UPDATE jobs SET lease_expires = 0 WHERE job_id = ?", (job_id,))
    done = d.wait_job(job_id, timeout_s=60)
    types = [e["type"] for e in d.events(job_id)]
    assert done["state"] == "ready", (done, types)
    assert types.count("lease_expired") == 1, types
    _, samples, _ = scrape(d)
    assert value(samples, "casesignd_leases_expired_total") == 1
    assert value(samples, "casesignd_leases_reclaimed_total") == 1
    assert d.stop() == 0
