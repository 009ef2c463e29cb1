"""Pure job decisions, table-driven."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from casesignd.core.errors import (
    EncryptedPdf,
    SourceUnavailable,
    TempQuota,
    TransientJobError,
    ValidationError,
)
from casesignd.engine import jobs


@pytest.mark.parametrize("failures,rand,expected", [
    (1, 0.0, 0.5), (1, 1.0, 1.0),          # step 1 s: between half and all of it
    (2, 0.0, 1.0), (3, 0.0, 2.0), (4, 0.5, 6.0),
    (20, 0.0, 5.0), (20, 1.0, 10.0),       # capped at 10 s
    (0, 0.0, 0.5),                         # never below the first step
])
def test_backoff_grows_is_jittered_and_capped(failures, rand, expected):
    assert jobs.backoff_s(failures, 1.0, 10.0, rand) == pytest.approx(expected)


def test_below_the_cap_delays_never_shrink_from_one_failure_to_the_next():
    for n in range(1, 12):
        assert jobs.backoff_s(n + 1, 1.0, 1e6, 0.0) >= jobs.backoff_s(n, 1.0, 1e6, 1.0)


@pytest.mark.parametrize("failures,error,retry,category,code,counts", [
    (1, EncryptedPdf(), False, "permanent_input", "encrypted_pdf", True),
    (1, SourceUnavailable(), True, "", "source_unavailable", True),
    (4, SourceUnavailable(), True, "", "source_unavailable", True),
    (5, SourceUnavailable(), False, "retries_exhausted", "source_unavailable", True),
    (9, SourceUnavailable(), False, "retries_exhausted", "source_unavailable", True),
    (1, RuntimeError("bug"), False, "internal", "internal_error", True),
    (99, TempQuota(delay_s=5.0), True, "", "temp_quota", False),  # a wait never runs out
])
def test_plan_retry(failures, error, retry, category, code, counts):
    d = jobs.plan_retry(failures, error, max_attempts=5, base_s=1.0, cap_s=60.0, rand=0.5)
    assert (d.retry, d.category, d.code, d.counts) == (retry, category, code, counts)
    if retry:
        assert d.delay_s > 0


def test_a_retry_hint_raises_the_delay_up_to_the_cap():
    hinted = TransientJobError(delay_s=30.0)
    assert jobs.plan_retry(1, hinted, max_attempts=5, base_s=1.0, cap_s=60.0, rand=0).delay_s == 30.0
    assert jobs.plan_retry(1, hinted, max_attempts=5, base_s=1.0, cap_s=10.0, rand=0).delay_s == 10.0


@pytest.mark.parametrize("state,client", [
    ("queued", "queued"), ("retry_wait", "queued"), ("running", "processing"),
    ("succeeded", "ready"), ("failed", "failed"), ("canceled", "canceled"),
])
def test_client_state(state, client):
    assert jobs.client_state(state) == client
    assert state in jobs.engine_states(client)


@pytest.mark.parametrize("key,ok", [
    (None, True), ("a", True), ("k" * 255, True), ("order 42/v1", True),
    ("", False), ("k" * 256, False), ("tab\there", False), ("é", False), ("nl\n", False),
])
def test_idempotency_key_header(key, ok):
    if ok:
        assert jobs.check_idempotency_key(key) == key
    else:
        with pytest.raises(ValidationError) as e:
            jobs.check_idempotency_key(key)
        assert e.value.code == "invalid_idempotency_key" and e.value.field == "Idempotency-Key"


def test_client_keys_and_derived_keys_never_collide_and_derive_stably():
    material = {"case_id": "C", "documents": [["contract", "0" * 64]]}
    derived = jobs.idempotency_key(None, "sign_case", material)
    assert derived == jobs.idempotency_key(None, "sign_case", dict(reversed(material.items())))
    assert derived.startswith("derived:")
    assert jobs.idempotency_key(derived, "sign_case", material) == "key:" + derived
    assert jobs.idempotency_key(None, "render_invoice", material) != derived


@pytest.mark.parametrize("value,ok", [
    ("MKT-2026-00042", True), ("a", True), ("x" * 128, True), ("a.b:c_d-e", True),
    ("", False), ("x" * 129, False), ("a/b", False), ("a b", False), (7, False), (None, False),
])
def test_case_id(value, ok):
    if ok:
        assert jobs.check_case_id(value) == value
    else:
        with pytest.raises(ValidationError):
            jobs.check_case_id(value)


def test_timings_accumulate_the_three_clocks():
    job = SimpleNamespace(state="running", queue_wait_ms=10.0, processing_ms=5.0, queued_since=None,
                          claimed_at=100.0, finished_at=None, created_at=99.0, admission_ms=1.5)
    t = jobs.timings(job, now=100.5)
    assert t == {"admission_ms": 1.5, "queue_wait_ms": 10.0, "processing_ms": 505.0,
                 "total_ms": 1500.0}


@pytest.mark.parametrize("body,priority,not_before", [
    ({}, 0, None),
    ({"priority": 9}, 9, None),
    ({"priority": 0, "not_before": "2026-12-05T09:00:00Z"}, 0, 1796461200.0),
    ({"not_before": "2026-12-05T10:00:00.25+01:00"}, 0, 1796461200.25),
])
def test_a_schedule_is_taken_out_of_the_body(body, priority, not_before):
    got = jobs.schedule(body)
    assert (got.priority, got.not_before) == (priority, not_before)
    assert "priority" not in body and "not_before" not in body  # the kind never sees them


@pytest.mark.parametrize("body,field", [
    ({"priority": 10}, "priority"), ({"priority": -1}, "priority"),
    ({"priority": "1"}, "priority"), ({"priority": True}, "priority"),
    ({"not_before": "2026-12-05T09:00:00"}, "not_before"),  # no offset
    ({"not_before": "2026-12-05"}, "not_before"), ({"not_before": 1796461200}, "not_before"),
    ({"not_before": "2026-02-30T09:00:00Z"}, "not_before"),
    ({"not_before": "9999-12-31T23:59:59-23:59"}, "not_before"),  # past year 9999 in UTC
    ({"not_before": "0001-01-01T00:00:00+00:01"}, "not_before"),  # before year 1 in UTC
])
def test_a_bad_schedule_is_invalid_field(body, field):
    with pytest.raises(ValidationError) as e:
        jobs.schedule(body)
    assert (e.value.code, e.value.field) == ("invalid_field", field)


def test_a_schedule_is_part_of_the_fingerprint_and_its_defaults_are_not():
    from casesignd.engine.kinds import Admission

    admission = Admission(normalized={"x": 1}, version="v1")

    def fingerprint(schedule=None):
        return admission.new_job("test", "t1", idempotency_header="k", created_at=0.0,
                                 correlation_id="c", schedule=schedule).fingerprint

    plain = fingerprint()
    assert fingerprint(jobs.Schedule()) == plain == jobs.fingerprint("test", {"x": 1})
    assert len({plain, fingerprint(jobs.Schedule(priority=1)),
                fingerprint(jobs.Schedule(not_before=1796461200.0)),
                fingerprint(jobs.Schedule(not_before=1796461201.0))}) == 4
