"""The operator's part of the OpenAPI document (:mod:`casesignd.http.openapi`): the
paths under ``/v1/admin`` (:mod:`casesignd.http.admin`) and their shapes, under the
``operator`` security scheme. Any token but the operator's gets 404 on every one."""

from __future__ import annotations

from typing import Any

from casesignd.http.openapi_schemas import obj, ref

_NULLABLE_STR = {"type": ["string", "null"]}
_TIME = {"type": ["string", "null"], "format": "date-time"}


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "headers": {"X-Correlation-Id": {"$ref": "#/components/headers/XCorrelationId"}},
            "content": {"application/json": {"schema": ref("Error")}}}


def _ok(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


_NOT_OPERATOR = _error("not_found: any token but the operator's, or none: the path says "
                       "nothing to whoever may not use it.")
_VALIDATION = _error("invalid_field, missing_field, unknown_field, unknown_kind, invalid_body, "
                     "invalid_limit, invalid_cursor: field names what is wrong.")


def _post(operation: str, summary: str, body: str, answer: str, description: str
          ) -> dict[str, Any]:
    return {"post": {
        "operationId": operation, "summary": summary, "description": description,
        "security": [{"operator": []}],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": ref(body)}}},
        "responses": {
            "200": _ok("Done; what each job came to.", answer),
            "400": _error("malformed_json: the body is not valid JSON."),
            "404": _NOT_OPERATOR,
            "413": _error("too_large: over server.max_json_bytes."),
            "415": _error("unsupported_media_type: the body is not application/json."),
            "422": _VALIDATION,
        }}}


def _get(operation: str, summary: str, answer: str, description: str,
         parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    responses = {"200": _ok(summary + ".", answer), "404": _NOT_OPERATOR}
    if parameters:
        responses["422"] = _VALIDATION
    return {"get": {"operationId": operation, "summary": summary, "description": description,
                    "security": [{"operator": []}], "parameters": parameters or [],
                    "responses": responses}}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}


def admin_paths() -> dict[str, Any]:
    """The /v1/admin paths."""
    word = {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"}
    return {
        "/v1/admin/queues": _get(
            "adminQueues", "Queues per tenant and kind", "AdminQueues",
            "Jobs queued, waiting for a retry, running and failed per tenant and kind, and "
            "the longest wait of those waiting; every configured tenant's limits; the "
            "pauses in force."),
        "/v1/admin/nodes": _get(
            "adminNodes", "The daemons on the store", "AdminNodes",
            "Each daemon connected to the store (PostgreSQL's sessions; a SQLite store has "
            "its one daemon) and each that holds leases: how many processes and leases, its "
            "last heartbeat (its latest lease's expiry less workers.lease_s) and its next "
            "lease's expiry."),
        "/v1/admin/dead-letter": _get(
            "adminDeadLetter", "Failed jobs of every tenant", "AdminJobPage",
            "Newest first, narrowed by tenant, kind and error code; a page at a time. "
            "state=queued lists the queued jobs instead (to cancel).",
            [_query("state", "failed (the default) or queued.",
                    {"type": "string", "enum": ["failed", "queued"]}),
             _query("tenant", "A configured tenant.", {"type": "string"}),
             _query("kind", "A job kind.", word), _query("code", "An error code.", word),
             _query("limit", "Jobs per page, 1-200 (50).",
                    {"type": "integer", "minimum": 1, "maximum": 200}),
             _query("cursor", "next_cursor of the page before.", {"type": "string"})]),
        "/v1/admin/jobs/retry": _post(
            "adminRetryJobs", "Retry failed jobs", "AdminSelection", "AdminBulkResult",
            "Each failed job named (job_ids), or up to 500 matching the filter (tenant, and "
            "kind and code), is replayed as POST /v1/jobs/{job_id}/retry replays one, "
            "audited with the actor operator; more says the filter matched more."),
        "/v1/admin/jobs/cancel": _post(
            "adminCancelJobs", "Cancel queued jobs", "AdminSelection", "AdminBulkResult",
            "Each queued job named (job_ids), or up to 500 of a tenant's (and kind's) queued "
            "jobs, is canceled as POST /v1/jobs/{job_id}/cancel cancels one, audited with "
            "the actor operator."),
        "/v1/admin/pause": _post(
            "adminPause", "Pause claims", "AdminPauseRequest", "AdminPauses",
            "Claims of the kind, of the tenant, or of both (neither: everything) stop on "
            "every daemon, across restarts; admission goes on and the jobs show paused. "
            "changed is false when exactly that pause was in force already. Audited."),
        "/v1/admin/resume": _post(
            "adminResume", "Resume claims", "AdminPauseRequest", "AdminPauses",
            "Lifts exactly the pause of that kind and tenant; claims start at once. "
            "Audited."),
    }


def admin_schemas() -> dict[str, Any]:
    """The shapes the /v1/admin paths answer and take."""
    count = {"type": "integer", "minimum": 0}
    pause = obj({"tenant": _NULLABLE_STR, "kind": _NULLABLE_STR,
                 "since": {"type": "string", "format": "date-time"}, "actor": {"type": "string"}},
                required=["tenant", "kind", "since", "actor"])
    limits = obj({k: count for k in ("admit_rate", "admit_window_s", "max_queued",
                                     "upload_bytes", "upload_window_s", "max_running")}, [])
    return {
        "AdminPause": pause,
        "AdminQueues": obj({
            "queues": {"type": "array", "items": obj({
                "tenant": {"type": "string"}, "kind": {"type": "string"},
                "queued": count, "retry_wait": count, "running": count, "failed": count,
                "oldest_wait_s": {"type": ["number", "null"]}},
                required=["tenant", "kind", "queued", "running", "failed"])},
            "tenants": {"type": "array", "items": obj({"tenant": {"type": "string"},
                                                       "limits": limits}, ["tenant", "limits"])},
            "pauses": {"type": "array", "items": ref("AdminPause")}},
            required=["queues", "tenants", "pauses"]),
        "AdminNodes": obj({
            "nodes": {"type": "array", "items": obj({
                "node": {"type": "string"}, "connected": {"type": "boolean"},
                "connected_since": _TIME, "processes": count, "leases": count,
                "last_heartbeat_at": _TIME, "next_lease_expiry_at": _TIME},
                required=["node", "connected", "leases"])},
            "lease_s": {"type": "number"}}, required=["nodes"]),
        "AdminJobPage": obj({
            "jobs": {"type": "array", "items": {"allOf": [
                ref("Job"), obj({"tenant": {"type": "string"}}, required=["tenant"])]}},
            "next_cursor": _NULLABLE_STR}, required=["jobs", "next_cursor"]),
        "AdminSelection": obj({
            "job_ids": {"type": "array", "minItems": 1, "maxItems": 500,
                        "items": {"type": "string", "pattern": "^job_[0-9a-f]{28}$"}},
            "tenant": {"type": "string"}, "kind": {"type": "string"},
            "code": {"type": "string"}}, [], closed=True),
        "AdminBulkResult": obj({
            "done": {"type": "array", "items": {"type": "string"}},
            "refused": {"type": "array", "items": obj({
                "job_id": {"type": "string"}, "code": {"type": "string"}}, ["job_id", "code"])},
            "more": {"type": "boolean"}}, required=["done", "refused", "more"]),
        "AdminPauseRequest": obj({"tenant": _NULLABLE_STR, "kind": _NULLABLE_STR}, [],
                                 closed=True),
        "AdminPauses": obj({"changed": {"type": "boolean"},
                            "pauses": {"type": "array", "items": ref("AdminPause")}},
                           required=["changed", "pauses"]),
    }
