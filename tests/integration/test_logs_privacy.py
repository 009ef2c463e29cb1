"""The daemon's log as an operator reads it: one JSON object per line, each job's story
by job id, attempt, correlation id, phase and duration; a failure's detail under the
correlation id the client was given; and no document bytes or personal data."""

from __future__ import annotations

import json

from tests.helpers_ops import (
    BAD_CASE_ID,
    CASE_ID,
    ORDER_IDS,
    PNG,
    STUDENT_NAMES,
    TEST_TAG,
    case_manifest,
    contract_pdf,
    find_personal,
    invoice,
    kiosk_sign,
)

# Document contents that would show if bytes reached the log.
NOTE = b"Evidence note: parcel handed over at the depot, gate 7, by courier Wilhelmina\n"
BAD_PDF = b"%PDF-1.7\nBroken body that names Quentin Abernathy-Sole\n%%EOF\n"


def _lines(text: str) -> list[dict]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        record = json.loads(line)  # every line is one JSON object
        assert isinstance(record, dict), (n, line)
        assert {"ts", "level", "logger", "msg"} <= record.keys(), (n, line)
        out.append(record)
    return out


def test_job_logs_are_json_lines_traceable_and_private(daemon, tmp_path):
    d = daemon
    good = case_manifest(d, CASE_ID, contract_pdf(tmp_path),
                         [("photo-1.png", "image/png", PNG), ("note.txt", "text/plain", NOTE)])
    bad = case_manifest(d, BAD_CASE_ID, BAD_PDF)
    cid = "client-trace-0042-abcdef"
    r_bad = d.request("POST", "/v1/jobs", bad, headers={"X-Correlation-Id": cid})
    assert r_bad.status == 202 and r_bad.headers["X-Correlation-Id"] == cid
    ids = [d.submit(good).json()["job_id"], r_bad.json()["job_id"],
           d.submit(invoice(ORDER_IDS[0], STUDENT_NAMES[0])).json()["job_id"],
           d.submit({"kind": "test", "behavior": "fail_transient", "fail_times": 1,
                     "tag": TEST_TAG}).json()["job_id"]]
    jobs = {job_id: d.wait_job(job_id) for job_id in ids}
    assert [j["state"] for j in jobs.values()] == ["ready", "failed", "ready", "ready"]
    failed = jobs[ids[1]]
    assert failed["error"]["code"] == "malformed_pdf"
    assert failed["error"]["correlation_id"] == cid
    # An answered error carries its correlation id in the body and the header.
    # The kiosk path: the same names and documents, answered synchronously.
    kiosk = kiosk_sign(d, CASE_ID + "-K", contract_pdf(tmp_path, pages=1))
    assert kiosk.status in (200, 503, 504), kiosk.body
    refused = d.submit({"kind": "sign_case", "case_id": "../etc"})
    assert refused.status == 422
    assert refused.json()["error"]["correlation_id"] == refused.headers["X-Correlation-Id"]
    d.stop()

    text = d.logs()
    records = _lines(text)

    # Each attempt's story: one line, its outcome with its phases' durations, under the
    # job id, the attempt and the correlation id of the request that admitted it.
    for job_id, job in jobs.items():
        mine = [r for r in records if r.get("job_id") == job_id]
        assert mine, job_id
        assert all(isinstance(r["attempt"], int) and r["attempt"] >= 1 for r in mine), mine
        assert len({r["correlation_id"] for r in mine}) == 1, mine
        msgs = [r["msg"] for r in mine]
        assert len(msgs) == len({r["attempt"] for r in mine}), msgs  # one line an attempt
        assert msgs[-1] == ("job.failed" if job["state"] == "failed" else "job.succeeded"), msgs
        assert all(isinstance(r["duration_ms"], float) for r in mine), mine
        if job["kind"] == "test":
            continue  # the test kind has no phases
        assert all(isinstance(v, float) for v in mine[-1]["phases_ms"].values()), mine
    sign_phases = set(next(r for r in records if r.get("job_id") == ids[0])["phases_ms"])
    assert sign_phases >= {"fetch", "validate", "scan", "sign", "publish"}
    # The retried job: attempt 1 failed retryably, attempt 2 succeeded.
    retried = [(r["msg"], r["attempt"]) for r in records if r.get("job_id") == ids[3]]
    assert retried == [("job.retry_scheduled", 1), ("job.succeeded", 2)]

    # The failure's detail is findable with the correlation id the client got.
    by_cid = [r for r in records if r.get("correlation_id") == cid and r["msg"] == "job.failed"]
    assert len(by_cid) == 1
    assert by_cid[0]["code"] == "malformed_pdf" and by_cid[0]["category"] == "permanent_input"
    assert by_cid[0]["job_id"] == ids[1] and by_cid[0]["error"] and by_cid[0]["level"] == "warning"

    # Nothing of the documents and nobody's data.
    assert find_personal(text) == []
    for secret in (NOTE.decode().strip(), "Wilhelmina", "Quentin Abernathy-Sole", "%PDF",
                   "Sales contract", PNG[:8].decode("latin-1"), "IHDR", d.token):
        assert secret not in text, secret
    assert not [r for r in records if r.get("dropped_fields")], "a field was dropped"
