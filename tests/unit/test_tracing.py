"""Tracing's pure part (W3C traceparent) and its cost when off: nothing of
OpenTelemetry is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from casesignd.observability.tracing import parse_traceparent

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"


@pytest.mark.parametrize(("header", "parsed"), [
    (f"00-{TID}-{SID}-01", (int(TID, 16), int(SID, 16), 1)),
    (f"00-{TID}-{SID}-00", (int(TID, 16), int(SID, 16), 0)),
    (f" 00-{TID}-{SID}-01 ", (int(TID, 16), int(SID, 16), 1)),
    (f"ff-{TID}-{SID}-01", None),  # version ff is invalid
    (f"00-{'0' * 32}-{SID}-01", None), (f"00-{TID}-{'0' * 16}-01", None),
    (f"00-{TID.upper()}-{SID}-01", None), (f"00-{TID}-{SID}", None), ("", None), (None, None),
])
def test_traceparent(header, parsed):
    assert parse_traceparent(header) == parsed


def test_off_imports_nothing_of_opentelemetry(tmp_path):
    code = ("import sys; from casesignd import config; from casesignd.daemon import lifecycle as app; "
            "from casesignd.http import api; "
            "cfg = config.loads(''); s = app.Services(cfg, node='n'); "
            "assert not s.tracing.enabled; api.middlewares(s); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


ATTEMPT = """
import asyncio, sys, time
from functools import partial
from casesignd import config
from casesignd.core.outcomes import Finish
from casesignd.daemon import lifecycle as app
from casesignd.engine.attempt import JobAttempt
from casesignd.store import NewJob
from casesignd.store.memory import MemoryStore

async def main():
    s = app.Services(config.loads(''), node='n')
    assert s.recorder.tracing is None
    store = MemoryStore()
    await store.open()
    new = NewJob(tenant='t1', kind='test', case_id=None, idem_key='k', fingerprint='f',
                 input='{}', input_digest='d', version='v', declared_bytes=0,
                 created_at=time.time(), correlation_id='c')
    job, _ = await store.admit(new, actor='a', max_queue_depth=10)
    job = await store.claim_job(job.job_id, 'o', 30.0)
    attempt = JobAttempt.of_claimed(s.recorder, job, partial(store.conclude, job.lease))
    attempt.claimed()
    async with attempt.phase('fetch'):
        pass
    attempt.record_phase('sign', 0.1)
    assert (await attempt.record(Finish(detail={}))).state == 'succeeded'
    assert attempt.spans is None

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))
"""


def test_off_an_attempt_imports_nothing_of_opentelemetry(tmp_path):
    out = subprocess.run([sys.executable, "-c", ATTEMPT], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
