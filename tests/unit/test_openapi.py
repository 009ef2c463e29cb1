"""The OpenAPI document: valid OpenAPI 3.1, complete against the contract, and its
schemas accept the contract's examples and refuse what the contract forbids."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from casesignd.http.openapi import document

openapi_spec_validator = pytest.importorskip("openapi_spec_validator")
openapi_schema_validator = pytest.importorskip("openapi_schema_validator")

HEX = "a" * 64

SIGN_CASE = {
    "kind": "sign_case", "case_id": "MKT-2026-00042", "policy_version": "contract-v1",
    "items": [
        {"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
         "object_ref": f"sha256:{HEX}", "sha256": HEX, "size": 48213},
        {"role": "evidence", "name": "photo-1.jpg", "media_type": "image/jpeg",
         "object_ref": "archive:2026/photo-1.jpg", "sha256": HEX, "size": 1234},
    ],
    "signers": [{"id": "seller-881", "name": "Acme Ltd", "role": "seller"},
                {"id": "buyer-19", "name": "J. Doe", "role": "buyer"}],
}

RENDER_INVOICE = {
    "kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
    "order": {"order_id": "EDU-1042", "student_name": "Avery Chen", "currency": "USD",
              "items": [{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}]},
}

JOB = {
    "job_id": "j1", "kind": "sign_case", "case_id": "MKT-2026-00042", "state": "ready",
    "attempts": 1, "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:06Z",
    "timings": {"admission_ms": 1.2, "queue_wait_ms": 30.5, "processing_ms": 80.1,
                "total_ms": 111.8},
    "result": {"artifact_id": "a1", "sha256": HEX, "size": 51234,
               "download_url": "/v1/artifacts/a1?expires=1&sig=x",
               "expires_at": "2026-01-02T04:04:06Z"},
}

# (method, path, statuses) from the contract's table.
CONTRACT = [
    ("put", "/v1/cases/{case_id}/objects/{sha256}", {"201", "200", "422", "413"}),
    ("post", "/v1/jobs", {"202", "200", "422", "413", "415", "429", "503"}),
    ("get", "/v1/jobs/{job_id}", {"200", "404"}),
    ("get", "/v1/jobs", {"200"}),
    ("get", "/v1/jobs/{job_id}/events", {"200"}),
    ("post", "/v1/jobs/{job_id}/retry", {"202", "409"}),
    ("post", "/v1/jobs/{job_id}/cancel", {"200", "409"}),
    ("post", "/v1/sign", {"200", "413", "415", "422", "409", "503", "504"}),
    ("post", "/v1/verify", {"200", "413", "415", "422"}),
    ("get", "/v1/artifacts/{artifact_id}", {"200", "403", "404"}),
    ("head", "/v1/artifacts/{artifact_id}", {"200", "403", "404"}),
    ("get", "/healthz", {"200"}),
    ("get", "/readyz", {"200", "503"}),
    ("get", "/metrics", {"200"}),
    ("get", "/v1/openapi.json", {"200"}),
]

# Error codes the contract names, and the (method, path, status) that must mention them.
CODES = [
    ("put", "/v1/cases/{case_id}/objects/{sha256}", "422", "digest_mismatch"),
    ("put", "/v1/cases/{case_id}/objects/{sha256}", "413", "too_large"),
    ("post", "/v1/jobs", "422", "idempotency_key_reused"),
    ("post", "/v1/jobs", "429", "queue_full"),
    ("post", "/v1/jobs", "503", "shutting_down"),
    ("post", "/v1/jobs/{job_id}/retry", "409", "not_failed"),
    ("post", "/v1/jobs/{job_id}/cancel", "409", "not_cancelable"),
    ("post", "/v1/sign", "409", "in_progress"),
    ("post", "/v1/sign", "503", "busy"),
    ("post", "/v1/sign", "504", "deadline_exceeded"),
    ("post", "/v1/verify", "422", "malformed_pdf"),
    ("get", "/v1/artifacts/{artifact_id}", "403", "link_expired"),
    ("get", "/v1/artifacts/{artifact_id}", "403", "link_invalid"),
]


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document()


def validator(doc: dict[str, Any], name: str) -> Any:
    schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return openapi_schema_validator.OAS31Validator(
        schema, format_checker=openapi_schema_validator.OAS31Validator.FORMAT_CHECKER
    )


def test_document_is_valid_openapi_31(doc: dict[str, Any]) -> None:
    assert doc["openapi"].startswith("3.1")
    openapi_spec_validator.validate(doc)
    json.dumps(doc)  # served as JSON: nothing but JSON types


def test_document_is_fresh_on_every_call(doc: dict[str, Any]) -> None:
    other = document()
    other["paths"].clear()
    assert document()["paths"] == doc["paths"]


@pytest.mark.parametrize(("method", "path", "statuses"), CONTRACT)
def test_every_contract_endpoint_and_status(doc, method, path, statuses) -> None:
    op = doc["paths"][path][method]
    assert statuses <= set(op["responses"]), f"{method} {path}"


@pytest.mark.parametrize(("method", "path", "status", "code"), CODES)
def test_error_codes_are_named(doc, method, path, status, code) -> None:
    assert code in doc["paths"][path][method]["responses"][status]["description"]


def test_security_exemptions(doc: dict[str, Any]) -> None:
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # The document itself is public too: it holds nothing a tenant owns.
    # So is the console's page: its sign-in is in the page, and its data come from
    # the API with the token.
    public = ("/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/console",
              "/console/{name}")
    for path in public:
        assert doc["paths"][path]["get"]["security"] == []
    # The artifact link: the owner's token, or nothing but expires+sig.
    art = doc["paths"]["/v1/artifacts/{artifact_id}"]["get"]
    assert {} in art["security"] and {"bearer": []} in art["security"]
    assert {p.get("name") for p in art["parameters"]} >= {"expires", "sig"}
    # The operator's paths take the operator's token alone.
    admin = [op for path, item in doc["paths"].items() if path.startswith("/v1/admin/")
             for op in item.values()]
    assert admin and all(op["security"] == [{"operator": []}] for op in admin)
    # Everything else inherits the bearer requirement.
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method == "parameters" or path in public or path.startswith("/v1/admin/"):
                continue
            if not path.startswith("/v1/artifacts/"):
                assert "security" not in op, f"{method} {path}"


def test_headers(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, resp in op.get("responses", {}).items() if method != "parameters" else ():
                schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
                if schema.get("$ref", "").endswith("/Error"):
                    assert "X-Correlation-Id" in resp["headers"], f"{method} {path} {status}"
    jobs = doc["paths"]["/v1/jobs"]["post"]
    assert jobs["parameters"][0]["$ref"].endswith("/IdempotencyKey")
    assert "Retry-After" in jobs["responses"]["429"]["headers"]
    ok = doc["paths"]["/v1/sign"]["post"]["responses"]["200"]
    assert set(ok["headers"]) == {"X-Job-Id", "X-Artifact-SHA256", "Content-Disposition",
                                  "X-Content-Type-Options"}
    assert "application/pdf" in ok["content"]
    body = doc["paths"]["/v1/sign"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert body["encoding"]["manifest"]["contentType"] == "application/json"
    assert body["encoding"]["document"]["contentType"] == "application/pdf"


@pytest.mark.parametrize("body", [SIGN_CASE, RENDER_INVOICE], ids=["sign_case", "invoice"])
def test_contract_examples_are_accepted(doc, body) -> None:
    validator(doc, "JobRequest").validate(body)


def _set(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    keys = path.split(".")
    target: Any = out
    for k in keys[:-1]:
        target = target[int(k)] if k.isdigit() else target[k]
    last = keys[-1]
    if value is _DROP:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return out


_DROP = object()


@pytest.mark.parametrize(
    ("body", "path", "value"),
    [
        (SIGN_CASE, "case_id", "has space"),
        (SIGN_CASE, "case_id", "x" * 129),
        (SIGN_CASE, "case_id", ""),
        (SIGN_CASE, "items.0.sha256", "A" * 64),
        (SIGN_CASE, "items.0.sha256", "a" * 63),
        (SIGN_CASE, "items.0.size", -1),
        (SIGN_CASE, "items.0.object_ref", "sha256:xyz"),
        (SIGN_CASE, "items.0.object_ref", "no-source-prefix"),
        (SIGN_CASE, "items.1.role", "contract"),  # two contract items
        (SIGN_CASE, "items.0.role", "evidence"),  # no contract item
        (SIGN_CASE, "items.0.extra", 1),
        (SIGN_CASE, "unexpected", 1),
        (SIGN_CASE, "signers.0.id", _DROP),
        (SIGN_CASE, "items", []),
        (RENDER_INVOICE, "order.items.0.quantity", 0),
        (RENDER_INVOICE, "order.items.0.quantity", 1.5),
        (RENDER_INVOICE, "order.items.0.unit_price", "-1"),
        (RENDER_INVOICE, "order.items.0.unit_price", "1e3"),
        (RENDER_INVOICE, "order.items.0.unit_price", 49.0),
        (RENDER_INVOICE, "order.extra", 1),
        (RENDER_INVOICE, "kind", "render_receipt"),
    ],
)
def test_forbidden_bodies_are_refused(doc, body, path, value) -> None:
    bad = _set(body, path, value)
    errors = list(validator(doc, "JobRequest").iter_errors(bad))
    assert errors, f"{path}={value!r} was accepted"


def test_job_resource_schema(doc: dict[str, Any]) -> None:
    v = validator(doc, "Job")
    v.validate(JOB)
    failed = {**{k: JOB[k] for k in JOB if k != "result"}, "state": "failed",
              "error": {"category": "permanent_input", "code": "malformed_pdf",
                        "correlation_id": "c1"}}
    v.validate(failed)
    v.validate({**JOB, "version": "contract-v1", "result": {"detail": {"pages": 1}}})
    assert list(v.iter_errors({**JOB, "result": {"artifact_id": "a1"}}))  # half a result
    assert list(v.iter_errors({**JOB, "state": "dead_letter"}))  # not a client state
    assert list(v.iter_errors({k: JOB[k] for k in JOB if k != "result"}))  # ready needs result
    assert list(v.iter_errors({**failed, "error": {"category": "oops", "code": "x",
                                                   "correlation_id": "c"}}))
    assert doc["components"]["schemas"]["Job"]["properties"]["state"]["enum"] == [
        "queued", "processing", "ready", "failed", "canceled"]


def test_audit_event_and_error_schemas(doc: dict[str, Any]) -> None:
    event = {"event_id": "e1", "seq": 1, "job_id": "j1", "tenant": "default",
             "case_id": "C-1", "type": "job.admitted", "actor": "api",
             "at": "2026-01-02T03:04:05.000001Z", "attempt": 0, "input_digest": HEX,
             "policy_version": "contract-v1", "detail": {"kind": "sign_case"}, "prev_hash": "0" * 64, "hash": HEX}
    validator(doc, "Events").validate({"events": [event]})
    assert set(doc["components"]["schemas"]["AuditEvent"]["required"]) == set(event)
    err = {"error": {"code": "digest_mismatch", "message": "m", "field": "items[0].sha256",
                     "correlation_id": "c"}}
    validator(doc, "Error").validate(err)
    assert list(validator(doc, "Error").iter_errors({"error": {**err["error"],
                                                               "code": "Not-Snake"}}))


def test_kiosk_manifest(doc: dict[str, Any]) -> None:
    v = validator(doc, "KioskManifest")
    v.validate({"case_id": "K-1", "policy_version": "contract-v1",
                "signers": [{"id": "a", "name": "A", "role": "buyer"}], "sha256": HEX})
    assert list(v.iter_errors({"case_id": "K 1", "signers": []}))


def test_verify_report_schema(doc: dict[str, Any]) -> None:
    sig = {"field": "Signature1", "kind": "signature", "intact": True, "valid": True,
           "trusted": True, "revoked": False, "level": "B-T", "modification": "none",
           "signer": "O=casesignd development,CN=casesignd development signer",
           "signing_time": "2026-01-02T03:04:05Z", "timestamp_time": "2026-01-02T03:04:06Z",
           "indication": "TOTAL-PASSED", "sub_indication": None, "problems": []}
    v = validator(doc, "VerifyReport")
    v.validate({"signatures": [sig], "passed": True, "findings": []})
    v.validate({"signatures": [], "passed": False, "findings": []})
    stamp = {**sig, "kind": "document_timestamp", "level": None, "signing_time": None}
    v.validate({"signatures": [sig, stamp], "passed": True, "findings": []})
    # A signature that could not be checked: its checks and modification are null.
    unchecked = {**sig, "intact": None, "valid": None, "trusted": None, "modification": None,
                 "level": None, "indication": "INDETERMINATE", "sub_indication": "FORMAT_FAILURE"}
    v.validate({"signatures": [unchecked], "passed": False, "findings": ["a hybrid file"]})
    assert list(v.iter_errors({"signatures": [{**sig, "indication": "VALID"}], "passed": True,
                               "findings": []}))
    assert list(v.iter_errors({"signatures": [{**sig, "modification": "some"}], "passed": True,
                               "findings": []}))
    assert set(doc["components"]["schemas"]["SignatureReport"]["required"]) == set(sig)
