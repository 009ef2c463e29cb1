"""One attempt of a job (casesignd.engine.attempt), as the pool and the kiosk run it:
its phases, its outcome decided and recorded through its path's writer, its lines."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from functools import partial
from typing import Any

import pytest

from casesignd.config import loads
from casesignd.core import audit
from casesignd.core.errors import PermanentJobError, StoreUnavailable, TransientJobError
from casesignd.core.outcomes import Fail, Finish, Outcome, RetryLater
from casesignd.engine import jobs
from casesignd.engine.attempt import JobAttempt, Traced
from casesignd.engine.recorder import AttemptId, Recorder
from casesignd.observability.metrics import Metrics
from casesignd.observability.tracing import Tracing, tenant_hash
from casesignd.store import Job, NewJob
from casesignd.store.memory import MemoryStore


def new_job(tag: str) -> NewJob:
    body = {"tag": tag}
    return NewJob(tenant="t1", kind="sign_case", case_id="C-1", idem_key=f"key:{tag}",
                  fingerprint=jobs.fingerprint("sign_case", body),
                  input=audit.canonical(body).decode(),
                  input_digest=jobs.sha256_hex(audit.canonical(body)), version="v1",
                  declared_bytes=10, created_at=time.time(), correlation_id="corr-1")


async def claimed(store: MemoryStore, tag: str) -> Job:
    job, _ = await store.admit(new_job(tag), actor="api:t1", max_queue_depth=10)
    got = await store.claim_job(job.job_id, "owner", 30.0)
    assert got is not None
    return got


def recorder() -> Recorder:
    return Recorder(loads("[retry]\nmax_attempts = { sign_case = 3 }\n"), Metrics(strict=True))


def events(caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    return {r.getMessage(): r for r in caplog.records}


async def test_a_claimed_job_s_attempt_records_its_outcome_with_its_phases(caplog):
    caplog.set_level(logging.DEBUG, logger="casesignd.engine.pool")
    store = MemoryStore()
    await store.open()
    job = await claimed(store, "a")
    rec = recorder()
    attempt = JobAttempt.of_claimed(rec, job, partial(store.conclude, job.lease))
    attempt.claimed()
    async with attempt.phase("validate"):
        await asyncio.sleep(0)
    attempt.record_phase("sign", 0.25)
    attempt.record_phase("sign", 0.25)
    done = await attempt.record(Finish(detail={}))
    assert done is not None and done.state == "succeeded"
    lines = events(caplog)
    assert lines["job.claimed"].fields["job_id"] == job.job_id  # type: ignore[attr-defined]
    succeeded = lines["job.succeeded"].fields  # type: ignore[attr-defined]
    assert succeeded["phases_ms"]["sign"] == 500.0 and "validate" in succeeded["phases_ms"]
    assert "pool" not in succeeded  # a batch attempt's lines do not name their pool
    sign = rec.metrics.registry.get_sample_value(
        "casesignd_phase_seconds_sum", {"kind": "sign_case", "phase": "sign"})
    assert sign == 0.5
    await store.close()


@pytest.mark.parametrize(("error", "failures", "expected", "code"), [
    (TransientJobError("later", code="transient_failure"), 0, RetryLater, "transient_failure"),
    (TransientJobError("later", code="transient_failure"), 2, Fail, "transient_failure"),
    (PermanentJobError("never", code="unknown_policy"), 0, Fail, "unknown_policy"),
    (ValueError("a bug"), 0, Fail, "internal_error"),
])
def test_an_error_becomes_the_outcome_the_retry_plan_decides(error, failures, expected, code):
    attempt = JobAttempt(recorder(), AttemptId("job_1", failures + 1, "sign_case", "c"),
                         write=_never, failures=failures)
    outcome = attempt.failed(error)
    assert isinstance(outcome, expected) and outcome.code == code
    assert attempt.error is error


async def _never(outcome: Outcome) -> Job | None:
    raise AssertionError("not written")


async def test_an_outcome_written_only_at_the_end_goes_through_the_path_s_own_writer(caplog):
    """The kiosk's shape: no job in the store until the attempt's outcome is written,
    by its own writer (here: admitted, claimed and concluded in one go)."""
    caplog.set_level(logging.INFO, logger="casesignd.engine.pool")
    store = MemoryStore()
    await store.open()
    written: list[Outcome] = []

    async def write(outcome: Outcome) -> Job | None:
        written.append(outcome)
        job = await claimed(store, "k")
        return await store.conclude(job.lease, outcome)

    attempt = JobAttempt(recorder(), AttemptId("job_k", 1, "sign_case", "c", "kiosk"), write)
    assert not written  # nothing is written before the outcome
    outcome = attempt.failed(PermanentJobError("refused", code="unknown_policy"))
    done = await attempt.record(outcome)
    assert written == [outcome] and done is not None and done.state == "failed"
    failed = events(caplog)["job.failed"].fields  # type: ignore[attr-defined]
    assert failed["pool"] == "kiosk" and failed["code"] == "unknown_policy"
    await store.close()


async def test_a_write_that_fails_raises_and_is_logged_as_not_recorded(caplog):
    async def write(outcome: Outcome) -> Job | None:
        raise StoreUnavailable("the disk is gone")

    attempt = JobAttempt(recorder(), AttemptId("job_x", 1, "sign_case", "c"), write)
    with pytest.raises(StoreUnavailable) as raised:
        await attempt.record(Finish(detail={}))
    attempt.not_recorded(raised.value)
    line = events(caplog)["job.outcome_not_recorded"]
    assert line.levelno == logging.ERROR
    assert line.fields["code"] == raised.value.code  # type: ignore[attr-defined]
    assert "job.succeeded" not in events(caplog)


def test_nothing_is_logged_as_claimed_unless_debug_is_on(caplog):
    caplog.set_level(logging.INFO, logger="casesignd.engine.pool")
    JobAttempt(recorder(), AttemptId("job_q", 1, "sign_case", "c"), _never).claimed()
    assert not caplog.records


# --- spans, with tracing on -------------------------------------------------------------

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"


def traced_recorder() -> tuple[Recorder, Any]:
    """A recorder whose tracer keeps its spans in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracing = Tracing("http://127.0.0.1:9/v1/traces")
    tracing.provider = TracerProvider()
    tracing.provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.tracer = tracing.provider.get_tracer("test")
    rec = recorder()
    return Recorder(rec.config, rec.metrics, tracing), exporter


async def test_a_claimed_attempt_is_a_span_under_its_job_s_trace_with_its_wait_and_phases():
    store = MemoryStore()
    await store.open()
    new = dataclasses.replace(new_job("Jane Doe"), traceparent=f"00-{TID}-{SID}-01")
    job, _ = await store.admit(new, actor="api:t1", max_queue_depth=10)
    job = await store.claim_job(job.job_id, "owner", 30.0)
    assert job is not None and job.traceparent == new.traceparent
    rec, exporter = traced_recorder()
    attempt = JobAttempt.of_claimed(rec, job, partial(store.conclude, job.lease))
    attempt.claimed()
    async with attempt.phase("validate"):
        await asyncio.sleep(0)
    attempt.record_phase("sign", 0.25)
    await attempt.record(attempt.failed(PermanentJobError("no", code="unknown_policy")))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"job sign_case", "queue wait", "phase validate", "phase sign"}
    top = spans["job sign_case"]
    assert f"{top.context.trace_id:032x}" == TID and f"{top.parent.span_id:016x}" == SID
    for name in ("queue wait", "phase validate", "phase sign"):
        assert spans[name].parent.span_id == top.context.span_id
        assert spans[name].context.trace_id == top.context.trace_id
    # The queue wait is the store's clocks: from when the job was due to its claim.
    wait = spans["queue wait"]
    assert wait.start_time == int(job.next_attempt_at * 1e9) == top.start_time
    assert wait.end_time == int(job.claimed_at * 1e9)
    attrs = dict(top.attributes)
    assert attrs["casesignd.job_id"] == job.job_id and attrs["casesignd.attempt"] == 1
    assert attrs["casesignd.outcome"] == "failed" and attrs["error.type"] == "unknown_policy"
    assert attrs["casesignd.tenant_hash"] == tenant_hash("t1")
    for span in spans.values():
        for value in dict(span.attributes).values():
            assert str(value) not in ("t1", "C-1") and "Jane" not in str(value)
    await store.close()


async def test_an_attempt_that_stops_without_an_outcome_ends_its_span_saying_why():
    rec, exporter = traced_recorder()
    attempt = JobAttempt(rec, AttemptId("job_s", 1, "sign_case", "c", "kiosk"), _never)
    now = time.time()
    attempt.claimed(Traced(None, "t1", 5, now - 1, now))
    attempt.stopped("canceled")
    attempt.stopped("canceled")  # once only
    [top] = [s for s in exporter.get_finished_spans() if s.name == "job sign_case"]
    assert top.parent is None  # no trace stored: one of its own
    assert dict(top.attributes)["casesignd.outcome"] == "canceled"
