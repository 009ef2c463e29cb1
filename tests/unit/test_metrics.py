"""Metrics: families, labels from fixed sets, state gauges read from the cache."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from casesignd.core.errors import QueueFull
from casesignd.observability.metrics import (
    ITEMS_BUCKETS,
    LabelNotAllowed,
    Metrics,
    StateCache,
    aiohttp_middleware,
    error_codes,
    items_bucket,
)

PERSONAL = ("Avery Chen", "MKT-2026-00042", "EDU-1042", "seller-881")


def families(m: Metrics) -> dict[str, object]:
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def sample(m: Metrics, name: str, **labels: str) -> float | None:
    body, _ = m.render()
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


@pytest.mark.parametrize(
    ("n", "bucket"),
    [(0, "1"), (1, "1"), (2, "2-10"), (10, "2-10"), (11, "11-100"), (100, "11-100"),
     (101, "101-1000"), (1000, "101-1000"), (1001, ">1000"), (10**6, ">1000")],
)  # fmt: skip
def test_items_bucket(n: int, bucket: str) -> None:
    assert items_bucket(n) == bucket
    assert bucket in ITEMS_BUCKETS


def test_every_family_is_exposed_with_units_in_names() -> None:
    m = Metrics(strict=True)
    m.job_admitted("sign_case", 0.002)
    m.observe_clocks("sign_case", queue_wait_s=0.5, processing_s=2.0, total_s=2.502)
    m.observe_phase("sign_case", "sign", 0.3)
    m.observe_invoice_render("invoice-v3", 42, 0.05)
    m.observe_http("POST", "/v1/jobs", 202, 0.004)
    m.observe_kiosk("succeeded", 0.8)
    m.job_finished("sign_case", "succeeded")
    m.retry("sign_case", "tsa_unavailable")
    m.source_retry("http_5xx")
    m.lease_expired()
    m.lease_reclaimed()
    m.stale_result()
    m.rejection("queue_full")
    m.idempotent_replay("/v1/jobs")
    names = set(families(m))
    expected = {
        "casesignd_admission_seconds", "casesignd_queue_wait_seconds",
        "casesignd_processing_seconds", "casesignd_job_total_seconds",
        "casesignd_phase_seconds", "casesignd_invoice_render_seconds",
        "casesignd_http_request_seconds", "casesignd_kiosk_seconds",
        # The parser names counter families without the _total suffix.
        "casesignd_jobs_finished", "casesignd_job_retries", "casesignd_source_retries",
        "casesignd_leases_expired", "casesignd_leases_reclaimed", "casesignd_stale_results",
        "casesignd_rejections", "casesignd_idempotent_replays", "casesignd_jobs_admitted",
        "casesignd_jobs", "casesignd_oldest_queued_job_age_seconds",
        "casesignd_key_slots_in_use", "casesignd_build_info",
    }  # fmt: skip
    assert expected <= names, expected - names
    assert sample(m, "casesignd_invoice_render_seconds_count", items_bucket="11-100") == 1
    assert sample(m, "casesignd_phase_seconds_count", kind="sign_case", phase="sign") == 1
    assert sample(m, "casesignd_job_retries_total", reason="tsa_unavailable") == 1
    assert sample(m, "casesignd_rejections_total", code="queue_full") == 1
    assert sample(m, "casesignd_build_info", version="0.1.0", node="local") == 1
    assert sample(m, "casesignd_http_request_seconds_count", route="/v1/jobs", status="202") == 1


def test_finished_counters_start_at_zero_for_every_kind_and_outcome() -> None:
    m = Metrics(strict=True)
    for kind in ("sign_case", "render_invoice"):
        for outcome in ("succeeded", "failed", "canceled"):
            assert sample(m, "casesignd_jobs_finished_total", kind=kind, outcome=outcome) == 0


def test_registries_are_independent() -> None:
    a, b = Metrics(strict=True), Metrics(strict=True)
    a.rejection("queue_full")
    assert sample(a, "casesignd_rejections_total", code="queue_full") == 1
    assert sample(b, "casesignd_rejections_total", code="queue_full") is None


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.job_finished("Avery Chen", "succeeded"),
        lambda m: m.job_finished("sign_case", "ok"),
        lambda m: m.observe_phase("sign_case", "MKT-2026-00042", 1.0),
        lambda m: m.observe_http("GET", "/v1/jobs/0190aabbcc", 200, 0.1),
        lambda m: m.observe_http("GET", "/v1/jobs", "2xx", 0.1),
        lambda m: m.rejection("EDU-1042"),
        lambda m: m.retry("sign_case", "seller-881"),
        lambda m: m.observe_invoice_render("Avery Chen", 1, 0.1),
        lambda m: m.idempotent_replay("/v1/cases/MKT-2026-00042/objects/ab"),
        lambda m: m.source_retry("Avery Chen"),
    ],
)
def test_strict_guard_refuses_values_outside_the_sets(call) -> None:
    m = Metrics(strict=True)
    with pytest.raises(LabelNotAllowed):
        call(m)


def test_production_guard_records_other_and_leaks_nothing() -> None:
    m = Metrics(strict=False)
    m.job_finished("Avery Chen", "succeeded")
    m.rejection("MKT-2026-00042")
    m.observe_http("GET", "/v1/jobs/EDU-1042", 200, 0.1)
    m.observe_invoice_render("seller-881", 3, 0.1)
    body, _ = m.render()
    text = body.decode()
    for value in PERSONAL:
        assert value not in text
    assert sample(m, "casesignd_jobs_finished_total", kind="other", outcome="succeeded") == 1
    assert sample(m, "casesignd_rejections_total", code="other") == 1


def test_allow_extends_a_domain_at_startup() -> None:
    m = Metrics(strict=True)
    m.allow("template_version", "invoice-v4")
    m.observe_invoice_render("invoice-v4", 2000, 0.2)
    assert sample(m, "casesignd_invoice_render_seconds_count", items_bucket=">1000") == 1


def test_error_codes_of_the_exception_tree_are_allowed() -> None:
    m = Metrics(strict=True)
    for code in ("malformed_pdf", "source_unavailable", "digest_mismatch", "temp_quota",
                 "idempotency_key_reused", "shutting_down"):  # fmt: skip
        m.rejection(code)


def test_state_gauges_read_the_cache_at_scrape_time() -> None:
    now = [1_000_000.0]
    m = Metrics(strict=True, clock=lambda: now[0])
    cache = StateCache()
    m.add_state_source(cache.snapshot)
    assert sample(m, "casesignd_oldest_queued_job_age_seconds") == 0
    cache.update(
        jobs={"queued": 7, "retry_wait": 1, "running": 2},
        oldest_queued_at_unix=now[0] - 90,
        inflight_bytes=1234,
        temp_used_bytes=10,
        temp_free_bytes=20,
        key_slots_in_use={"batch": 1, "kiosk": 1},
        workers_busy=2,
    )
    assert sample(m, "casesignd_jobs", state="queued") == 7
    assert sample(m, "casesignd_jobs", state="retry_wait") == 1
    assert sample(m, "casesignd_jobs", state="succeeded") == 0
    assert sample(m, "casesignd_oldest_queued_job_age_seconds") == 90
    now[0] += 30  # the age grows between refreshes of the cache
    assert sample(m, "casesignd_oldest_queued_job_age_seconds") == 120
    assert sample(m, "casesignd_inflight_bytes") == 1234
    assert sample(m, "casesignd_temp_free_bytes") == 20
    assert sample(m, "casesignd_key_slots_in_use", pool="kiosk") == 1
    assert sample(m, "casesignd_workers_busy") == 2


def test_state_cache_refuses_unknown_keys() -> None:
    with pytest.raises(KeyError):
        StateCache().update(student_name="Avery Chen")


def test_a_failing_state_source_does_not_break_the_scrape() -> None:
    m = Metrics(strict=False)

    def broken() -> dict:
        raise RuntimeError("store gone")

    m.add_state_source(broken)
    assert sample(m, "casesignd_jobs", state="queued") == 0


async def test_middleware_labels_by_route_template(aiohttp_client) -> None:
    m = Metrics(strict=True)

    async def show(request: web.Request) -> web.Response:
        if request.match_info["job_id"] == "missing":
            raise web.HTTPNotFound()
        if request.match_info["job_id"] == "full":
            raise QueueFull("queue is full")
        return web.json_response({})

    app = web.Application(middlewares=[aiohttp_middleware(m)])
    app.router.add_get("/v1/jobs/{job_id}", show)
    client = await aiohttp_client(app)
    assert (await client.get("/v1/jobs/MKT-2026-00042")).status == 200
    assert (await client.get("/v1/jobs/missing")).status == 404
    assert (await client.get("/v1/cases/EDU-1042/whatever")).status == 404
    await client.get("/v1/jobs/full")  # rendered by an outer middleware in the daemon
    text = m.render()[0].decode()
    assert "MKT-2026-00042" not in text and "EDU-1042" not in text
    assert sample(m, "casesignd_http_request_seconds_count", route="/v1/jobs/{job_id}",
                  status="200") == 1  # fmt: skip
    assert sample(m, "casesignd_http_request_seconds_count", route="/v1/jobs/{job_id}",
                  status="404") == 1  # fmt: skip
    assert sample(m, "casesignd_http_request_seconds_count", route="unmatched",
                  status="404") == 1  # fmt: skip
    assert sample(m, "casesignd_http_request_seconds_count", route="/v1/jobs/{job_id}",
                  status="429") == 1  # fmt: skip


def test_the_codes_of_the_table_are_allowed() -> None:
    assert "invalid_case_id" in error_codes()
    m = Metrics(strict=True)
    m.rejection("invalid_case_id")
    with pytest.raises(LabelNotAllowed):
        m.rejection("mkt_2026_00042")


def test_every_source_retry_reason_of_the_fetcher_is_allowed() -> None:
    from casesignd.files.sources import RETRY_REASONS

    m = Metrics(strict=True)
    for reason in RETRY_REASONS:
        m.source_retry(reason)


# --- docs/alerts.yml ---------------------------------------------------------------

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts.yml"
PROMTOOL = shutil.which("promtool")


def exposed_names() -> set[str]:
    m = Metrics(strict=True)
    cache = StateCache()
    cache.update(inflight_bytes=0, temp_used_bytes=0, temp_free_bytes=1, workers_busy=0,
                 disk_bytes={"temp": 0}, disk_limit_bytes={"temp": 1})
    m.add_state_source(cache.snapshot)
    body, _ = m.render()
    return {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def test_alert_rules_are_yaml_and_name_only_exposed_metrics() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "CasesigndOldestQueuedJobOld", "CasesigndJobFailureRatioHigh",
        "CasesigndLeaseReclaimRatioHigh", "CasesigndTempVolumeFilling",
    } <= names  # fmt: skip
    exposed = exposed_names()
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        for metric in re.findall(r"\bcasesignd_[a-z_]+", rule["expr"]):
            assert metric in exposed, (rule["alert"], metric)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_alert_rules_check_and_fire_under_promtool(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(ALERTS)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    # promtool compares annotations too; this test is about when alerts fire, and
    # `check rules` above already parsed the annotation templates.
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "alerts_test.yml").write_text(PROMTOOL_TESTS)
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# Synthetic series in promtool's notation ('a+bxN': N+1 samples from a, step b).
PROMTOOL_TESTS = """
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'casesignd_oldest_queued_job_age_seconds{instance="h",job="casesignd"}'
        values: '0+60x40'
      - series: 'casesignd_jobs_finished_total{instance="h",job="casesignd",kind="sign_case",outcome="succeeded"}'
        values: '0+9x60'
      - series: 'casesignd_jobs_finished_total{instance="h",job="casesignd",kind="sign_case",outcome="failed"}'
        values: '0+1x60'
      - series: 'casesignd_jobs_finished_total{instance="h",job="casesignd",kind="render_invoice",outcome="succeeded"}'
        values: '0+10x60'
      - series: 'casesignd_jobs_finished_total{instance="h",job="casesignd",kind="render_invoice",outcome="failed"}'
        values: '0x60'
      - series: 'casesignd_leases_reclaimed_total{instance="h",job="casesignd"}'
        values: '0+1x60'
      - series: 'casesignd_temp_used_bytes{instance="h",job="casesignd"}'
        values: '900x30'
      - series: 'casesignd_temp_free_bytes{instance="h",job="casesignd"}'
        values: '100x30'
    alert_rule_test:
      - eval_time: 3m
        alertname: CasesigndOldestQueuedJobOld
        exp_alerts: []
      - eval_time: 12m
        alertname: CasesigndOldestQueuedJobOld
        exp_alerts:
          - exp_labels: {severity: warning, instance: h, job: casesignd}
      - eval_time: 40m
        alertname: CasesigndJobFailureRatioHigh
        exp_alerts:
          - exp_labels: {severity: warning, instance: h, kind: sign_case}
      - eval_time: 40m
        alertname: CasesigndLeaseReclaimRatioHigh
        exp_alerts:
          - exp_labels: {severity: warning, instance: h}
      - eval_time: 20m
        alertname: CasesigndTempVolumeFilling
        exp_alerts:
          - exp_labels: {severity: warning, instance: h, job: casesignd}
      - eval_time: 20m
        alertname: CasesigndTempVolumeFull
        exp_alerts: []
"""
