"""The OpenAPI document against the daemon: schemathesis generates requests for every
operation of /v1/openapi.json (as served by a real daemon, without a token) and
sends them with the bearer token. No answer may be a 5xx, every status code must be
one the document lists for the operation, and every body must match its schema."""

from __future__ import annotations

import contextlib
import traceback
from collections import Counter
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.daemon import Daemon

MAX_EXAMPLES = 60  # per operation and generation mode: 30-60 s on two cores
# The three the contract needs (no 5xx, documented status, conforming body), and the
# documented content type and headers (Retry-After, X-Correlation-Id) as well.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance,
          content_type_conformance, response_headers_conformance]
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
# The kiosk's document part is a PDF: send whatever bytes are generated as they are.
schemathesis.serializer.alias("application/pdf", "application/octet-stream")


@pytest.fixture(scope="module")
def api_daemon(tmp_path_factory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("schemathesis") / "state",
               {"server": {"request_timeout_s": 10.0}, "kiosk": {"deadline_ms": 20000}})
    d.start()
    try:
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()


def _run_operation(d: Daemon, operation, mode, session: requests.Session,
                   statuses: Counter) -> list[str]:
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {d.token}"}

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        try:
            response = case.call_and_validate(base_url=d.url, session=session, headers=headers,
                                              checks=CHECKS, timeout=30)
            statuses[(operation.label, response.status_code)] += 1
        except Exception as e:  # noqa: BLE001 - collected, reported together below
            if len(failures) < 3:
                failures.append(f"{operation.label} [{mode.value}]: {type(e).__name__}: "
                                + "".join(traceback.format_exception_only(e))[:1500])

    # Unsatisfiable: nothing to break in this mode (an operation without parameters).
    with contextlib.suppress(Unsatisfiable):
        run()
    return failures


def test_every_operation_answers_as_documented(api_daemon):
    d = api_daemon
    assert d.request("GET", "/v1/openapi.json", auth=False).status == 200
    schema = schemathesis.openapi.from_url(d.url + "/v1/openapi.json", timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12, [op.label for op in operations]
    failures: list[str] = []
    statuses: Counter = Counter()
    with requests.Session() as session:
        for operation in operations:
            for mode in MODES:
                failures += _run_operation(d, operation, mode, session, statuses)
    print("answers by operation and status:", dict(sorted(statuses.items())))
    # The daemon survived it all and still answers ordinary requests.
    assert d.request("GET", "/healthz", auth=False).status == 200
    assert d.request("GET", "/v1/jobs").status == 200
    assert "Traceback" not in d.logs()
    assert not failures, "\n\n".join(failures)
