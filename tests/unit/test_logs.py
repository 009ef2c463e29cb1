"""JSON logs: one object per line, allow-listed fields, tracebacks on one line."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from casesignd.core.errors import MalformedPdf
from casesignd.core.logs import ALLOWED_FIELDS, clean_fields, configure, log_event, rfc3339

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    root, access = logging.getLogger(), logging.getLogger("aiohttp.access")
    before = (list(root.handlers), root.level, access.level)
    configure("debug", stream=buf)
    yield buf
    root.handlers[:] = before[0]
    root.setLevel(before[1])
    access.setLevel(before[2])


def lines(buf: io.StringIO) -> list[dict]:
    text = buf.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_one_object_per_line_with_the_standard_keys(stream: io.StringIO) -> None:
    log = logging.getLogger("casesignd.engine.pool")
    log_event(log, "job.finished", job_id="j1", attempt=2, kind="sign_case", duration_ms=12.5)
    log.info("job.claimed", extra={"fields": {"job_id": "j2", "state": "processing"}})
    first, second = lines(stream)
    assert RFC3339_UTC.match(first["ts"])
    assert first["level"] == "info"
    assert first["logger"] == "casesignd.engine.pool"
    assert first["msg"] == "job.finished"
    assert (first["job_id"], first["attempt"], first["duration_ms"]) == ("j1", 2, 12.5)
    assert second["msg"] == "job.claimed" and second["state"] == "processing"


def test_timings_by_name_stay_an_object_anything_else_a_string(stream: io.StringIO) -> None:
    log = logging.getLogger("casesignd.http.kiosk")
    log_event(log, "job.succeeded", phases_ms={"validate": 1.25, "sign": 0.5})
    log_event(log, "job.succeeded", phases_ms={"validate": "Avery Chen"})
    first, second = lines(stream)
    assert first["phases_ms"] == {"validate": 1.25, "sign": 0.5}
    assert isinstance(second["phases_ms"], str)


def test_personal_fields_are_dropped_by_the_helper_and_by_extra(stream: io.StringIO) -> None:
    log = logging.getLogger("casesignd.job_kinds.render_invoice")
    log_event(
        log, "invoice.rendered", job_id="j1", student_name="Avery Chen",
        case_id="MKT-2026-00042", order_id="EDU-1042", name="J. Doe",
    )  # fmt: skip
    log.warning("invoice.odd", extra={"fields": {"student_name": "Avery Chen", "code": "x"}})
    text = stream.getvalue()
    for value in ("Avery Chen", "MKT-2026-00042", "EDU-1042", "J. Doe"):
        assert value not in text
    first, second = lines(stream)
    assert first["job_id"] == "j1"
    assert first["dropped_fields"] == ["case_id", "name", "order_id", "student_name"]
    assert second["code"] == "x" and second["dropped_fields"] == ["student_name"]


@pytest.mark.parametrize("key", ["student_name", "case_id", "order_id", "name", "signers"])
def test_personal_keys_are_not_in_the_allow_list(key: str) -> None:
    assert key not in ALLOWED_FIELDS
    kept, dropped = clean_fields({key: "x"})
    assert kept == {} and dropped == [key]


def test_exceptions_go_to_one_line_with_class_and_message(stream: io.StringIO) -> None:
    log = logging.getLogger("casesignd.sign")
    try:
        raise MalformedPdf("xref table is broken")
    except MalformedPdf:
        log.exception("job.failed", extra={"fields": {"job_id": "j1", "code": "malformed_pdf"}})
    text = stream.getvalue()
    assert text.count("\n") == 1  # the traceback is escaped inside the one line
    (entry,) = lines(stream)
    assert entry["level"] == "error"
    assert entry["error"] == "MalformedPdf: xref table is broken"
    assert "Traceback (most recent call last)" in entry["exc"]
    assert "\n" in entry["exc"]


def test_error_field_takes_an_exception(stream: io.StringIO) -> None:
    log_event(logging.getLogger("x"), "source.retry", error=TimeoutError("read timed out"))
    (entry,) = lines(stream)
    assert entry["error"] == "TimeoutError: read timed out"


def test_level_filters_and_reconfigure_replaces_the_handler(stream: io.StringIO) -> None:
    other = io.StringIO()
    configure("warning", stream=other)
    log = logging.getLogger("casesignd.t")
    log_event(log, "quiet.info")
    log_event(log, "loud.warning", level=logging.WARNING)
    assert stream.getvalue() == ""  # the first handler was replaced, not doubled
    assert [e["msg"] for e in lines(other)] == ["loud.warning"]


def test_raw_request_paths_from_the_access_log_are_silenced(stream: io.StringIO) -> None:
    logging.getLogger("aiohttp.access").info("GET /v1/cases/MKT-2026-00042/objects/ab 200")
    assert "MKT-2026-00042" not in stream.getvalue()


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError):
        configure("verbose", stream=io.StringIO())


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0.5) == "1970-01-01T00:00:00.500Z"
