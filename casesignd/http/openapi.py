"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /v1/openapi.json``.

Built from plain dicts by :func:`document`; the HTTP layer serves it as is. It
follows the outside contract (CONTRACT.md) endpoint by endpoint: where the contract
is silent (the object upload answer, the readiness body, the link parameters'
format) the choice made here is the documented one.

The schemas are in :mod:`casesignd.http.openapi_schemas`; here are the endpoints, their
parameters, headers and answers, each declared once and in the contract's order.
"""

from __future__ import annotations

import copy
from typing import Any

from casesignd import __version__
from casesignd.http.openapi_admin import admin_paths, admin_schemas
from casesignd.http.openapi_schemas import (
    CASE_ID_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    SHA256_PATTERN,
    STATES,
    obj,
    ref,
    schemas,
)

# --- reusable parts -------------------------------------------------------------------


_PARAMETERS: dict[str, Any] = {
    "CaseId": {"name": "case_id", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": CASE_ID_PATTERN}},
    "Sha256": {"name": "sha256", "in": "path", "required": True,
               "description": "SHA-256 (hex) the uploaded body must have.",
               "schema": {"type": "string", "pattern": SHA256_PATTERN}},
    "JobId": {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}},
    "ArtifactId": {"name": "artifact_id", "in": "path", "required": True,
                   "schema": {"type": "string"}},
    "IdempotencyKey": {
        "name": "Idempotency-Key", "in": "header", "required": False,
        "description": "Per tenant. The same key and the same normalized request replays the "
        "original; the same key with another request is 422 idempotency_key_reused. Without "
        "it, a key is derived from the normalized request (for sign_case: case ID, document "
        "digests, signer identities, policy version).",
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
    },
}

_HEADERS: dict[str, Any] = {
    "RetryAfter": {"description": "Seconds to wait before trying again.",
                   "schema": {"type": "integer", "minimum": 0}},
    "XCorrelationId": {"description": "Names the request in the server log; the request's "
                       "own X-Correlation-Id when it sent a valid one.",
                       "schema": {"type": "string"}},
    "XJobId": {"description": "The job of this signature (a 504's: readable at once).",
               "schema": {"type": "string"}},
    "XArtifactSHA256": {"description": "SHA-256 (hex) of the body.",
                        "schema": {"type": "string", "pattern": SHA256_PATTERN}},
    "ContentDisposition": {
        "description": "attachment, with a file name made safe (ASCII letters, digits, "
                       "'.', '_', '-'; at most 100 characters), also as filename*.",
        "schema": {"type": "string", "pattern": "^attachment; filename=\"[A-Za-z0-9._-]+\""}},
    "XContentTypeOptions": {"description": "Always nosniff.",
                            "schema": {"const": "nosniff"}},
    "CacheControl": {"description": "no-store on every answer that does not say its own "
                     "(downloads: private, no-store; the console's files: no-cache).",
                     "schema": {"type": "string"}},
}


def _json(schema: str) -> dict[str, Any]:
    return {"application/json": {"schema": ref(schema)}}


def _error(description: str, *, retry_after: bool = False, job_id: bool = False) -> dict[str, Any]:
    names = ("X-Correlation-Id", "Cache-Control", "X-Content-Type-Options",
             *(("Retry-After",) if retry_after else ()), *(("X-Job-Id",) if job_id else ()))
    headers = {n: {"$ref": "#/components/headers/" + n.replace("-", "")} for n in names}
    return {"description": description, "headers": headers, "content": _json("Error")}


def _job(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("Job")}


def _p(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


_REQUEST_TIMEOUT = _error("request_timeout: the body did not arrive within "
                          "server.request_timeout_s (an upload: paused longer than that, or "
                          "still arriving after server.upload_max_s).")
_UNAUTHORIZED = _error("unauthorized: no bearer token; invalid_token: an unknown token.")
_JOB_NOT_FOUND = _error("job_not_found: no such job for this tenant (another tenant's, too).")
_ARTIFACT_NOT_FOUND = _error("artifact_not_found: no such artifact for this tenant, or the "
                             "link's artifact is gone.")
_BAD_REQUEST = _error("malformed_json: the body is not valid JSON.")
_UNAVAILABLE = _error("shutting_down, store_unavailable: try again after Retry-After.",
                      retry_after=True)

_PAGE_HEADERS = {
    "Content-Security-Policy": {"description": "default-src 'none'; script, style, image "
                                "and connections from this origin only; no inline script; "
                                "frame-ancestors 'none'.", "schema": {"type": "string"}},
    "X-Content-Type-Options": {"$ref": "#/components/headers/XContentTypeOptions"},
    "Referrer-Policy": {"description": "Always no-referrer.", "schema": {"const": "no-referrer"}},
}

_VALIDATION_CODES = (
    "invalid_field (field names the path, e.g. items[0].sha256), invalid_body, missing_field, "
    "unknown_field, unknown_kind, invalid_case_id, invalid_object_ref, invalid_amount, "
    "unsupported_currency, unknown_template, media_type_not_allowed, limit_exceeded, "
    "invalid_idempotency_key, idempotency_key_reused"
)
_DOWNLOAD_HEADERS = {
    "Content-Disposition": {"$ref": "#/components/headers/ContentDisposition"},
    "X-Content-Type-Options": {"$ref": "#/components/headers/XContentTypeOptions"},
}
_DOCUMENT_CODES = "malformed_pdf, ambiguous_pdf, encrypted_pdf, active_content, malware_detected"


# --- paths ----------------------------------------------------------------------------


def _paths() -> dict[str, Any]:
    _hold = {"description": "The case's hold.", "content": _json("Hold")}
    artifact_download: dict[str, Any] = {
        "security": [{"bearer": []}, {}],
        "description": "With the owner's bearer token, or without one by the signed link of "
        "the job's result.download_url (expires and sig together).",
        "parameters": [
            _p("ArtifactId"),
            {"name": "expires", "in": "query", "required": False,
             "description": "As in download_url: when the link stops working.",
             "schema": {"type": "string"}},
            {"name": "sig", "in": "query", "required": False,
             "description": "As in download_url: the link's signature.",
             "schema": {"type": "string"}},
        ],
        "responses": {
            "200": {"description": "The artifact.",
                    "headers": {"X-Artifact-SHA256":
                                {"$ref": "#/components/headers/XArtifactSHA256"},
                                **_DOWNLOAD_HEADERS},
                    "content": {"application/pdf": {"schema": {
                        "type": "string", "contentMediaType": "application/pdf"}}}},
            "401": _UNAUTHORIZED,
            "403": _error("link_expired: the link's time is past; link_invalid: the "
                          "signature does not match."),
            "404": _ARTIFACT_NOT_FOUND,
        },
    }
    head = copy.deepcopy(artifact_download)
    head["operationId"] = "headArtifact"
    head["summary"] = "An artifact's headers, without the body"
    head["responses"]["200"].pop("content")
    for code in ("401", "403", "404"):
        head["responses"][code] = {"description": head["responses"][code]["description"]}
    artifact_download["operationId"] = "getArtifact"
    artifact_download["summary"] = "Download an artifact"

    return {
        "/v1/cases/{case_id}/objects/{sha256}": {
            "parameters": [_p("CaseId"), _p("Sha256")],
            "put": {
                "operationId": "putObject",
                "summary": "Upload an object to a case",
                "description": "Streams the body into the object store; the digest must match.",
                "requestBody": {"required": True, "content": {"application/octet-stream": {
                    "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
                }}},
                "responses": {
                    "200": {"description": "Already there.", "content": _json("StoredObject")},
                    "201": {"description": "Stored.", "content": _json("StoredObject")},
                    "401": _UNAUTHORIZED,
                    "408": _REQUEST_TIMEOUT,
                    "413": _error("too_large: over server.max_object_bytes."),
                    "422": _error("digest_mismatch: the body's SHA-256 is not the path's; "
                                  "invalid_case_id, invalid_sha256: a bad case_id or sha256."),
                    "411": _error("length_required: the tenant has an upload quota, so its "
                                  "uploads say their Content-Length."),
                    "429": _error("too_many_uploads: past server.max_uploads (or the tenant's "
                                  "server.max_uploads_per_tenant) at once; quota_exceeded: past "
                                  "the tenant's limits.upload_bytes in this window, Retry-After "
                                  "its end. Answered before the body is read. Come back after "
                                  "Retry-After.", retry_after=True),
                    "503": _error("upload_quota: the uploads in flight fill "
                                  "storage.upload_quota_bytes (answered before the body is read "
                                  "when Content-Length says so, else when the streamed bytes "
                                  "reach it); shutting_down, store_unavailable. Come back after "
                                  "Retry-After.", retry_after=True),
                },
            },
            "head": {
                "operationId": "headObject",
                "summary": "Whether the case holds an object",
                "description": "For a client that resumes an upload: a PUT of an object "
                "already there still sends and checks its whole body.",
                "responses": {
                    "200": {"description": "The case holds it; Content-Length is its size."},
                    "401": {"description": "unauthorized, invalid_token."},
                    "404": {"description": "not_found: not in this tenant's case."},
                    "422": {"description": "invalid_case_id, invalid_sha256."},
                },
            },
        },
        "/v1/jobs": {
            "post": {
                "operationId": "submitJob",
                "summary": "Submit a job",
                "description": ("Validates cheaply, stores the job durably, then acknowledges. "
                                "While more than workers.ack_pacing_depth acknowledged jobs "
                                "are queued, the acknowledgement of a stored job waits until "
                                "the workers claim one, for at most "
                                "workers.ack_pacing_max_ms."),
                "parameters": [_p("IdempotencyKey")],
                "requestBody": {"required": True, "content": _json("JobRequest")},
                "responses": {
                    "200": _job("An identical replay: the original job."),
                    "202": _job("Accepted: stored durably, queued."),
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "408": _REQUEST_TIMEOUT,
                    "413": _error("too_large: over server.max_json_bytes."),
                    "415": _error("unsupported_media_type: the body is not application/json."),
                    "422": _error(f"Refused by validation: {_VALIDATION_CODES}."),
                    "429": _error("queue_full: past workers.max_queue_depth; rate_limited: past "
                                  "the tenant's limits.admit_rate in this window, Retry-After its "
                                  "end (a client that waits that long finds a fresh window); "
                                  "tenant_queue_full: past the tenant's limits.max_queued, "
                                  "Retry-After 1 (a place frees when one of its jobs is claimed, "
                                  "at no time known). A replay of an admitted job is answered "
                                  "200 whatever the limits.", retry_after=True),
                    "503": _UNAVAILABLE,
                },
            },
            "get": {
                "operationId": "listJobs",
                "summary": "The tenant's jobs, newest first",
                "parameters": [
                    {"name": "state", "in": "query", "required": False,
                     "schema": {"enum": STATES}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                    {"name": "cursor", "in": "query", "required": False,
                     "description": "next_cursor of the previous page (given with the same "
                     "filters).", "schema": {"type": "string"}},
                    {"name": "kind", "in": "query", "required": False,
                     "description": "Only the jobs of this kind.",
                     "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"}},
                    {"name": "case_id", "in": "query", "required": False,
                     "description": "Only the jobs of this case.",
                     "schema": {"type": "string", "pattern": CASE_ID_PATTERN}},
                ],
                "responses": {
                    "200": {"description": "One page.", "content": _json("JobList")},
                    "401": _UNAUTHORIZED,
                    "422": _error("invalid_state, invalid_limit, invalid_cursor; "
                                  "invalid_field: a kind that is no kind's name; "
                                  "invalid_case_id."),
                },
            },
        },
        "/v1/jobs/{job_id}": {
            "parameters": [_p("JobId")],
            "get": {
                "operationId": "getJob",
                "summary": "The job resource",
                "responses": {"200": _job("The job."), "401": _UNAUTHORIZED, "404": _JOB_NOT_FOUND},
            },
        },
        "/v1/webhooks/deliveries": {
            "get": {
                "operationId": "listWebhookDeliveries",
                "summary": "The tenant's webhook deliveries, newest first",
                "description": "Each is sent at least once, signed as Standard Webhooks "
                "(webhook-id, webhook-timestamp, webhook-signature); the body is the job "
                "resource as GET /v1/jobs/{job_id} answers it when sent. No order is "
                "promised: deduplicate by webhook-id and read the job's state.",
                "parameters": [
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                    {"name": "job_id", "in": "query", "required": False,
                     "description": "Only this job's deliveries.",
                     "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "The deliveries.",
                            "content": _json("WebhookDeliveries")},
                    "401": _UNAUTHORIZED,
                    "422": _error("invalid_limit"),
                },
            },
        },
        "/v1/webhooks/deliveries/{delivery_id}/redeliver": {
            "parameters": [{"name": "delivery_id", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "post": {
                "operationId": "redeliverWebhook",
                "summary": "Send a delivery again: due now, one attempt more",
                "responses": {
                    "202": {"description": "Pending again.",
                            "content": _json("WebhookDelivery")},
                    "401": _UNAUTHORIZED,
                    "404": _error("delivery_not_found (also another tenant's)."),
                },
            },
        },
        "/v1/jobs/{job_id}/events": {
            "parameters": [_p("JobId")],
            "get": {
                "operationId": "getJobEvents",
                "summary": "The job's audit events, oldest first",
                "responses": {
                    "200": {"description": "The events.", "content": _json("Events")},
                    "401": _UNAUTHORIZED,
                    "404": _JOB_NOT_FOUND,
                },
            },
        },
        "/v1/jobs/{job_id}/retry": {
            "parameters": [_p("JobId")],
            "post": {
                "operationId": "retryJob",
                "summary": "Replay a failed job as a new attempt series",
                "responses": {
                    "202": _job("Queued again."),
                    "401": _UNAUTHORIZED,
                    "404": _JOB_NOT_FOUND,
                    "409": _error("not_failed: only a failed job can be retried."),
                    "429": _error("queue_full or tenant_queue_full, as an admission; the "
                                  "job stays failed. Come back after Retry-After.",
                                  retry_after=True),
                },
            },
        },
        "/v1/jobs/{job_id}/cancel": {
            "parameters": [_p("JobId")],
            "post": {
                "operationId": "cancelJob",
                "summary": "Cancel a job no worker holds",
                "responses": {
                    "200": _job("Canceled."),
                    "401": _UNAUTHORIZED,
                    "404": _JOB_NOT_FOUND,
                    "409": _error("not_cancelable: a worker holds it, or it has ended."),
                },
            },
        },
        "/v1/stats": {
            "get": {
                "operationId": "getStats",
                "summary": "The tenant's queue now and its jobs' clocks over a window",
                "description": "What the console charts. now: the tenant's jobs queued "
                "(waiting for a retry included), processing and failed (the dead letter) at "
                "this moment; oldest_queued_age_s: the longest current wait among the queued "
                "ones. ended and buckets: the jobs that ended (ready, failed, canceled) since "
                "`since`, the window's start on a bucket boundary; each bucket holds the mean "
                "and longest of each clock over its ready and failed jobs (canceled jobs "
                "never ran, and are only counted). Read from the tenant's job rows: jobs "
                "removed by retention are not in it.",
                "parameters": [
                    {"name": "window_s", "in": "query", "required": False,
                     "description": "Seconds back from now (default 3600). At most 60 "
                     "buckets of whole minutes (bucket_s: 60 for an hour).",
                     "schema": {"type": "integer", "minimum": 60, "maximum": 86400}},
                ],
                "responses": {
                    "200": {"description": "The summary.", "content": _json("Stats")},
                    "401": _UNAUTHORIZED,
                    "422": _error("invalid_field: window_s outside 60-86400."),
                },
            },
        },
        "/v1/audit/head": {
            "get": {
                "operationId": "getAuditHead",
                "summary": "The audit chain's head, and a cheap check of two samples of it",
                "description": "head: the chain's last event (the chain is global: one "
                "sequence for every tenant). tail: the chain's last 256 events, each one's "
                "hash recomputed from its fields and its prev_hash matched to the hash of "
                "the event before it (another tenant's event is named only by its seq). "
                "tenant: the same for every event of the tenant's 20 newest jobs, each "
                "linked to its predecessor in the chain whoever it belongs to. ok: both "
                "samples verify. complete is always false: events outside the samples are "
                "not read; `casesignd audit verify` checks the whole chain.",
                "responses": {
                    "200": {"description": "The head and the samples' verdicts.",
                            "content": _json("AuditHead")},
                    "401": _UNAUTHORIZED,
                },
            },
        },
        "/console": {
            "get": {
                "operationId": "console", "summary": "The console, a web page for people",
                "description": "Sign in with a tenant token (held by the page only while "
                "it is open); it uses only this API. Its assets are under /console/.",
                "security": [],
                "responses": {"200": {"description": "The page.", "headers": _PAGE_HEADERS,
                                      "content": {"text/html": {"schema": {"type": "string"}}}},
                              "304": {"description": "Not modified (If-None-Match)."}},
            },
        },
        "/console/{name}": {
            "get": {
                "operationId": "consoleAsset", "summary": "A file of the console",
                "description": "The page's style sheet and JavaScript modules, as shipped "
                "in the package; revalidated by ETag on every load.",
                "security": [],
                "parameters": [{"name": "name", "in": "path", "required": True,
                                "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "The file.", "headers": _PAGE_HEADERS, "content": {
                        t: {"schema": {"type": "string"}} for t in (
                            "text/html", "text/css", "text/javascript", "image/svg+xml")}},
                    "304": {"description": "Not modified (If-None-Match)."},
                    "404": _error("not_found: no such file."),
                },
            },
        },
        "/v1/cases/{case_id}/hold": {
            "parameters": [_p("CaseId")],
            "get": {"operationId": "getHold", "summary": "Whether a legal hold holds the case",
                    "responses": {"200": _hold, "401": _UNAUTHORIZED,
                                  "404": _error("hold_not_found: the case has no hold."),
                                  "422": _error("invalid_case_id")}},
            "post": {"operationId": "placeHold",
                     "summary": "Place a legal hold: nothing of the case is removed while it holds",
                     "description": "Neither retention nor an erasure removes anything of the "
                     "case until the hold is lifted. Audited (hold_placed).",
                     "responses": {"201": _hold, "200": _hold, "401": _UNAUTHORIZED,
                                   "422": _error("invalid_case_id")}},
            "delete": {"operationId": "liftHold", "summary": "Lift a legal hold (hold_lifted)",
                       "responses": {"200": {"description": "Lifted.",
                                             "content": _json("HoldLifted")},
                                     "401": _UNAUTHORIZED,
                                     "404": _error("hold_not_found: the case has no hold."),
                                     "422": _error("invalid_case_id")}},
        },
        "/v1/cases/{case_id}": {
            "parameters": [_p("CaseId")],
            "delete": {
                "operationId": "eraseCase",
                "summary": "Erase a case's objects and artifacts now",
                "description": "Its waiting jobs are canceled; its job rows stay until "
                "retention.jobs_s (their artifacts answer 404). Each removal is audited "
                "(object_removed, artifact_removed, case_erased).",
                "responses": {
                    "200": {"description": "Erased.", "content": _json("Erased")},
                    "401": _UNAUTHORIZED,
                    "404": _error("case_not_found: the tenant has no job, object or artifact "
                                  "of the case; nothing is recorded."),
                    "409": _error("on_hold: a legal hold holds the case; case_busy: one of "
                                  "its jobs is running (after Retry-After).", retry_after=True),
                    "422": _error("invalid_case_id"),
                },
            },
        },
        "/v1/sign": {
            "post": {
                "operationId": "signNow",
                "summary": "Sign one pre-validated PDF within the deadline",
                "description": "The same manifest validation and audit events as a job; never "
                "answers a partial document.",
                "parameters": [_p("IdempotencyKey")],
                "requestBody": {"required": True, "content": {"multipart/form-data": {
                    "schema": ref("SignRequest"),
                    "encoding": {"manifest": {"contentType": "application/json"},
                                 "document": {"contentType": "application/pdf"}},
                }}},
                "responses": {
                    "200": {
                        "description": "The signed PDF.",
                        "headers": {
                            "X-Job-Id": {"$ref": "#/components/headers/XJobId"},
                            "X-Artifact-SHA256": {"$ref": "#/components/headers/XArtifactSHA256"},
                            **_DOWNLOAD_HEADERS,
                        },
                        "content": {"application/pdf": {"schema": {
                            "type": "string", "contentMediaType": "application/pdf"}}},
                    },
                    "400": _error("bad_request: not multipart, or a part is missing."),
                    "401": _UNAUTHORIZED,
                    "409": _error("in_progress: a request with this Idempotency-Key is still "
                                  "running."),
                    "408": _REQUEST_TIMEOUT,
                    "413": _error("too_large: over kiosk.max_document_bytes."),
                    "415": _error("unsupported_media_type: a part is not of its media type."),
                    "422": _error(f"Refused: {_VALIDATION_CODES}, {_DOCUMENT_CODES}."),
                    "503": _error("busy: no capacity now (all kiosk requests, or this "
                                  "tenant's share of them or of the kiosk's processes); "
                                  "shutting_down.", retry_after=True),
                    "504": _error("deadline_exceeded: not done within kiosk.deadline_ms. The "
                                  "signing goes on as the job X-Job-Id names, readable at once "
                                  "(processing until it ends); a replay with the same "
                                  "Idempotency-Key returns it.", retry_after=True, job_id=True),
                },
            },
        },
        "/v1/verify": {
            "post": {
                "operationId": "verifyPdf",
                "summary": "Validate a PDF's signatures",
                "description": "Each signature's AdES indication, PAdES level and what later "
                "revisions changed, against validation.trust_roots (none: nothing passes); "
                "revocation data from the document first, online as validation.fetch allows.",
                "requestBody": {"required": True, "content": {"application/pdf": {
                    "schema": {"type": "string", "contentMediaType": "application/pdf"}}}},
                "responses": {
                    "200": {"description": "The report, whether or not the signatures pass: "
                            "JSON, or with Accept: application/xml the ETSI TS 119 102-2 "
                            "validation report (a document without signatures has none: "
                            "422 invalid_input).",
                            "content": {**_json("VerifyReport"), "application/xml": {
                                "schema": {"type": "string",
                                           "contentMediaType": "application/xml"}}}},
                    "401": _UNAUTHORIZED,
                    "408": _REQUEST_TIMEOUT,
                    "413": _error("too_large: over kiosk.max_document_bytes."),
                    "415": _error("unsupported_media_type: the body is not application/pdf."),
                    "422": _error("malformed_pdf: the body is not a PDF; encrypted_pdf: it "
                                  "opens only with a password; limit_exceeded: past a "
                                  "validation.budget (its reason says which)."),
                    "503": _error("busy: more than kiosk.max_concurrent verify requests at "
                                  "once, or more than validation.budget.max_inflight_per_tenant "
                                  "of this tenant; worker_lost; unavailable: the trust roots "
                                  "cannot be read.", retry_after=True),
                },
            },
        },
        "/v1/artifacts/{artifact_id}": {"get": artifact_download, "head": head},
        "/healthz": {
            "get": {
                "operationId": "healthz", "summary": "Liveness", "security": [],
                "responses": {"200": {"description": "Alive.",
                                      "content": {"application/json": {"schema": obj(
                                          {"status": {"const": "ok"}}, ["status"])}}}},
            },
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: store writable, temp volume under quota, signing key "
                "usable, workers running",
                "security": [],
                "responses": {
                    "200": {"description": "Ready.", "content": _json("Readiness")},
                    "503": {"description": "Not ready; the failing checks say why.",
                            "content": _json("Readiness")},
                },
            },
        },
        "/metrics": {
            "get": {
                "operationId": "metrics", "summary": "Prometheus text exposition",
                "security": [],
                "responses": {"200": {"description": "Metrics.", "content": {
                    "text/plain": {"schema": {"type": "string"}}}}},
            },
        },
        "/v1/openapi.json": {
            "get": {
                "operationId": "openapi", "summary": "This document", "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1.", "content": {
                    "application/json": {"schema": {"type": "object"}}}}},
            },
        },
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the casesignd HTTP API (a fresh dict on every call)."""
    return copy.deepcopy({
        "openapi": "3.1.0",
        "info": {
            "title": "casesignd",
            "version": __version__,
            "description": "Signing and document rendering with a durable job engine. Every "
            "error answers the Error schema; codes are stable and snake_case.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {**_paths(), **admin_paths()},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A tenant's token; the config keeps its SHA-256."},
                "operator": {"type": "http", "scheme": "bearer",
                             "description": "The operator's token ([operator] token_sha256), "
                             "for /v1/admin alone; any other token gets 404 there."},
            },
            "schemas": {**schemas(), **admin_schemas()},
            "parameters": _PARAMETERS,
            "headers": _HEADERS,
        },
    })
