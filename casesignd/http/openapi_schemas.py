"""The schemas of the OpenAPI document (:mod:`casesignd.http.openapi`): the request, job,
error and listing shapes of the outside contract (CONTRACT.md), each declared once,
in JSON Schema 2020-12, which OpenAPI 3.1 embeds; and the patterns the paths share
with them.

Constraints the contract states in words are machine-checkable here: "exactly one
contract item" is ``contains`` with ``minContains``/``maxContains`` 1, and
"``result`` is present when ready" is an ``if``/``then``.
"""

from __future__ import annotations

from typing import Any

from casesignd.core.codes import CODES, REASONS

CASE_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# An object of the tenant's case ("sha256:<hex>") or "<source>:<path>" of a
# configured source.
OBJECT_REF_PATTERN = r"^(sha256:[0-9a-f]{64}|(?!sha256:)[A-Za-z0-9._-]{1,64}:\S.*)$"
VERSION_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"
AMOUNT_PATTERN = r"^\d+(\.\d+)?$"
ERROR_CODE_PATTERN = r"^[a-z][a-z0-9_]*$"
# Every code of the service (casesignd.core.codes): an answer's, or a failed job's.
ERROR_CODES = sorted(CODES)
REASON_WORDS = sorted(REASONS)
# A refused document's reason and where (the same in an error body and a failed job).
_REFUSAL = {
    "reason": {"type": "string", "enum": REASON_WORDS,
               "description": "A refused document's reason, finer than its code; each "
                              "goes with one code (docs/api.md's table of reasons)."},
    "where": {
        "type": "object",
        "description": "Where in the refused document: its page (from 1), object number, "
                       "attachment or form field name. Never its text or URLs.",
        "properties": {"page": {"type": "integer", "minimum": 1},
                       "object": {"type": "integer", "minimum": 0},
                       "attachment": {"type": "string"}, "field": {"type": "string"}},
    },
}
IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7e]{1,255}$"
MEDIA_TYPE_PATTERN = r"^[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+$"

STATES = ["queued", "processing", "ready", "failed", "canceled"]
CATEGORIES = ["permanent_input", "retries_exhausted", "internal", "lost"]


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], required: list[str], *, closed: bool = False,
        description: str | None = None) -> dict[str, Any]:
    """An object schema; ``closed``: no other properties."""
    out: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if closed:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


def _str(min_len: int = 1, max_len: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "string", "minLength": min_len}
    if max_len is not None:
        out["maxLength"] = max_len
    out.update(extra)
    return out


# --- schemas --------------------------------------------------------------------------


def schemas() -> dict[str, Any]:
    """Every schema of the document, by name (``#/components/schemas/<name>``)."""
    nullable_str = {"type": ["string", "null"]}
    return {
        "Hold": obj({"case_id": {"type": "string"}, "hold": {"const": True},
                      "placed_at": {"type": "string", "format": "date-time"}},
                     ["case_id", "hold", "placed_at"]),
        "HoldLifted": obj({"case_id": {"type": "string"}, "hold": {"const": False}},
                           ["case_id", "hold"]),
        "Erased": obj({"case_id": {"type": "string"},
                        "objects_removed": {"type": "integer", "minimum": 0},
                        "artifacts_removed": {"type": "integer", "minimum": 0},
                        "jobs_canceled": {"type": "array", "items": {"type": "string"}}},
                       ["case_id", "objects_removed", "artifacts_removed", "jobs_canceled"]),
        "Error": obj(
            {"error": obj(
                {
                    "code": {"type": "string", "enum": ERROR_CODES,
                             "description": "Stable snake_case code; see each response."},
                    "message": {"type": "string", "description": "For people; may change."},
                    "field": {"type": "string",
                              "description": "The one field at fault, e.g. items[0].sha256."},
                    "correlation_id": {"type": "string",
                                       "description": "Names the request in the server log."},
                    **_REFUSAL,
                },
                ["code", "message", "correlation_id"],
            )},
            ["error"],
            description="Every 4xx and 5xx answer; never a stack trace.",
        ),
        "Signer": obj(
            {"id": _str(1, 128), "name": _str(1, 256), "role": _str(1, 64)},
            ["id", "name", "role"], closed=True,
        ),
        "SignCaseItem": obj(
            {
                "role": {"enum": ["contract", "evidence"]},
                "name": _str(1, 255),
                "media_type": _str(3, 255, pattern=MEDIA_TYPE_PATTERN),
                "object_ref": {"type": "string", "pattern": OBJECT_REF_PATTERN,
                               "description": "sha256:<hex> of an object of this tenant's "
                               "case, or <source>:<path> of a configured source."},
                "sha256": {"type": "string", "pattern": SHA256_PATTERN},
                "size": {"type": "integer", "minimum": 0},
            },
            ["role", "name", "media_type", "object_ref", "sha256", "size"], closed=True,
        ),
        "SignCaseJob": obj(
            {
                "kind": {"const": "sign_case"},
                "case_id": {"type": "string", "pattern": CASE_ID_PATTERN},
                "policy_version": {"type": "string", "pattern": VERSION_PATTERN,
                                   "description": "Left out: the config's default policy; "
                                   "the job records the version it used."},
                "items": {
                    "type": "array", "minItems": 1, "items": ref("SignCaseItem"),
                    "contains": {"type": "object", "properties": {"role": {"const": "contract"}},
                                 "required": ["role"]},
                    "minContains": 1, "maxContains": 1,
                    "description": "Exactly one contract item (a PDF); evidence items of the "
                    "policy's media types.",
                },
                "signers": {"type": "array", "items": ref("Signer")},
                "webhook": ref("WebhookName"),
                "priority": ref("Priority"),
                "not_before": ref("NotBefore"),
                "signature": ref("SignaturePlacement"),
            },
            ["kind", "case_id", "items", "signers"], closed=True,
        ),
        "SignaturePlacement": {
            "description": "Where the signature goes, within what the policy allows: the "
            "document's own empty signature field (refused signature_field_not_found or "
            "signature_field_already_signed), or under a visible policy a stamp on a page "
            "(1 the first, -1 the last) in a box [x1, y1, x2, y2] in points (refused "
            "signature_box_off_page outside the page's crop box), or {\"visible\": true}: "
            "seen where a visible policy puts it (refused under an invisible one). Left out: "
            "the policy's appearance, page, box or field.",
            "oneOf": [
                obj({"field": _str(1, 255)}, ["field"], closed=True),
                obj({"page": {"type": "integer", "not": {"const": 0}},
                     "box": {"type": "array", "items": {"type": "number"},
                             "minItems": 4, "maxItems": 4}}, ["box"], closed=True),
                obj({"visible": {"const": True}}, ["visible"], closed=True),
            ],
        },
        "InvoiceItem": obj(
            {
                "description": _str(1, 1000),
                "quantity": {"type": "integer", "minimum": 1},
                "unit_price": {"type": "string", "pattern": AMOUNT_PATTERN,
                               "description": "Decimal string, ≥ 0, whole minor units."},
            },
            ["description", "quantity", "unit_price"], closed=True,
        ),
        "Order": obj(
            {
                "order_id": _str(1, 128),
                "student_name": _str(1, 256),
                "currency": {"type": "string", "pattern": "^[A-Za-z]{3}$",
                             "description": "ISO 4217 code."},
                "issued_on": {"type": "string", "format": "date",
                              "description": "Issue date; the day of rendering when left out."},
                "items": {"type": "array", "minItems": 1, "items": ref("InvoiceItem")},
                "customer_tax_id": {**_str(1, 64), "description":
                                    "The customer's tax identifier, printed by invoice-v4 "
                                    "(invoice-v3 refuses it: invalid_field)."},
            },
            ["order_id", "student_name", "currency", "items"], closed=True,
        ),
        "RenderInvoiceJob": obj(
            {
                "kind": {"const": "render_invoice"},
                "template_version": {"type": "string", "pattern": VERSION_PATTERN,
                                     "description": "invoice-v3 or invoice-v4 (the tenant's "
                                     "locale, logo, tax identifiers, labels and footer); left "
                                     "out: the tenant's default template."},
                "sign": {"type": "boolean", "default": False},
                "order": ref("Order"),
                "webhook": ref("WebhookName"),
                "priority": ref("Priority"),
                "not_before": ref("NotBefore"),
            },
            ["kind", "order"], closed=True,
        ),
        "ExtendSignatureJob": obj(
            {
                "kind": {"const": "extend_signature"},
                "artifact_id": {"type": "string", "pattern": "^art_[0-9a-f]{32}$",
                                "description": "A B-LTA artifact of this tenant; it is kept, "
                                "and the renewed document is a new artifact."},
                "policy_version": {"type": "string", "pattern": VERSION_PATTERN,
                                   "description": "A B-LTA policy (its TSA); left out: the "
                                   "default policy."},
                "webhook": ref("WebhookName"),
                "priority": ref("Priority"),
                "not_before": ref("NotBefore"),
            },
            ["kind", "artifact_id"], closed=True,
        ),
        "Priority": {
            "type": "integer", "minimum": 0, "maximum": 9, "default": 0,
            "description": "Its place among its tenant's own waiting jobs: 0 is claimed "
            "first (as in Oban), 9 last; within one priority, the oldest due job first. It "
            "never moves a job ahead of another tenant's turn (tenants take turns, "
            "weighted by [[tenants]] weight). Out of range: 422 invalid_field.",
        },
        "NotBefore": {
            "type": "string", "format": "date-time",
            "description": "No claim before this time (RFC 3339 with an offset: "
            "2026-12-05T09:00:00Z; without one, 422 invalid_field), by the store's clock. "
            "The job is queued meanwhile and shows it. With priority, part of the "
            "idempotency fingerprint.",
        },
        "WebhookName": {
            "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$",
            "description": "One of the tenant's [[tenants.webhooks]] endpoints, by name, "
            "never a URL (unknown: 422 unknown_webhook). Its deliveries report the job's "
            "end: job.ready, job.failed, job.canceled, or signature.extended.",
        },
        "WebhookDelivery": obj(
            {
                "delivery_id": {"type": "string", "description": "The webhook-id header."},
                "job_id": {"type": "string"},
                "event": {"enum": ["job.ready", "job.failed", "job.canceled",
                                   "signature.extended"]},
                "endpoint": {"type": "string"},
                "state": {"enum": ["pending", "delivered", "dead", "skipped"]},
                "attempts": {"type": "integer", "minimum": 0},
                "created_at": {"type": "string", "format": "date-time"},
                "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
                "last_status": {"type": ["integer", "null"]},
                "last_error": {"type": ["string", "null"]},
                "delivered_at": {"type": ["string", "null"], "format": "date-time"},
            },
            ["delivery_id", "job_id", "event", "endpoint", "state", "attempts", "created_at"],
        ),
        "WebhookDeliveries": obj(
            {"deliveries": {"type": "array", "items": ref("WebhookDelivery")}}, ["deliveries"]),
        "JobRequest": {
            "oneOf": [ref("SignCaseJob"), ref("RenderInvoiceJob"), ref("ExtendSignatureJob")],
            "discriminator": {
                "propertyName": "kind",
                "mapping": {
                    "sign_case": "#/components/schemas/SignCaseJob",
                    "render_invoice": "#/components/schemas/RenderInvoiceJob",
                    "extend_signature": "#/components/schemas/ExtendSignatureJob",
                },
            },
        },
        "Timings": obj(
            {k: {"type": ["number", "null"], "minimum": 0}
             for k in ("admission_ms", "queue_wait_ms", "processing_ms", "total_ms")},
            [],
        ),
        "JobResult": {
            **obj(
                {
                    "artifact_id": _str(),
                    "sha256": {"type": "string", "pattern": SHA256_PATTERN},
                    "size": {"type": "integer", "minimum": 0},
                    "media_type": {"type": "string"},
                    "download_url": {"type": "string", "description":
                                     "/v1/artifacts/{artifact_id}?expires=...&sig=..., "
                                     "a signed link that needs no token until expires_at."},
                    "expires_at": {"type": "string", "format": "date-time"},
                    "removed_at": {"type": "string", "format": "date-time", "description":
                                   "When retention or an erasure removed the artifact: the "
                                   "result keeps its digest and size, and has no link."},
                    "detail": {"type": "object",
                               "description": "For a job that publishes no artifact."},
                },
                [],
            ),
            "anyOf": [
                {"required": ["artifact_id", "sha256", "size", "download_url", "expires_at"]},
                {"required": ["artifact_id", "sha256", "size", "removed_at"]},
                {"required": ["detail"]},
            ],
        },
        "JobError": obj(
            {
                "category": {"enum": CATEGORIES},
                "code": {"type": "string", "enum": ERROR_CODES,
                         "description": "Why the job failed; see the error table in docs/api.md."},
                "correlation_id": {"type": "string"},
                "message": {"type": "string",
                            "description": "A refused document's reason, in words."},
                **_REFUSAL,
            },
            ["category", "code", "correlation_id"],
        ),
        "Job": {
            **obj(
                {
                    "job_id": _str(),
                    "kind": {"enum": ["sign_case", "render_invoice", "extend_signature"]},
                    "case_id": nullable_str,
                    "state": {"enum": STATES,
                              "description": "The only states a client sees."},
                    "attempts": {"type": "integer", "minimum": 0},
                    "priority": ref("Priority"),
                    "not_before": {"type": "string", "format": "date-time",
                                   "description": "While it waits: no claim before then."},
                    "paused": {"type": "boolean", "description": "It waits, and an "
                               "operator paused the claims of its kind or tenant."},
                    "version": {"type": "string", "description": "The policy_version "
                                "(sign_case) or template_version (render_invoice) it uses."},
                    "created_at": {"type": "string", "format": "date-time"},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "timings": ref("Timings"),
                    "result": ref("JobResult"),
                    "error": ref("JobError"),
                },
                ["job_id", "kind", "state", "attempts", "created_at", "updated_at"],
            ),
            "allOf": [
                {"if": {"properties": {"state": {"const": "ready"}}},
                 "then": {"required": ["result"]}},
                {"if": {"properties": {"state": {"const": "failed"}}},
                 "then": {"required": ["error"]}},
            ],
        },
        "JobList": obj(
            {"jobs": {"type": "array", "items": ref("Job")},
             "next_cursor": {"type": ["string", "null"],
                             "description": "Pass as cursor for the next page; null at the end."}},
            ["jobs", "next_cursor"],
        ),
        "AuditEvent": obj(
            {
                "event_id": _str(),
                "seq": {"type": "integer", "minimum": 1},
                "job_id": {"type": "string"},
                "tenant": {"type": "string"},
                "case_id": nullable_str,
                "type": {"type": "string"},
                "actor": {"type": "string"},
                "at": {"type": "string", "format": "date-time"},
                "attempt": {"type": "integer", "minimum": 0},
                "input_digest": nullable_str,
                "policy_version": nullable_str,
                "detail": {"type": "object",
                           "description": "Event-specific facts. The hash covers their "
                           "canonical JSON text (sorted keys, no white space)."},
                "prev_hash": {"type": "string", "pattern": SHA256_PATTERN},
                "hash": {"type": "string", "pattern": SHA256_PATTERN,
                         "description": "SHA-256 of the event's canonical JSON (sorted keys, "
                         "no white space) without hash, prev_hash included."},
            },
            ["event_id", "seq", "job_id", "tenant", "case_id", "type", "actor", "at",
             "attempt", "input_digest", "policy_version", "detail", "prev_hash", "hash"],
        ),
        "Events": obj({"events": {"type": "array", "items": ref("AuditEvent")}}, ["events"]),
        "KioskManifest": obj(
            {
                "case_id": {"type": "string", "pattern": CASE_ID_PATTERN},
                "policy_version": {"type": "string", "pattern": VERSION_PATTERN},
                "signers": {"type": "array", "items": ref("Signer")},
                "sha256": {"type": "string", "pattern": SHA256_PATTERN,
                           "description": "Of the document part; checked when given."},
                "signature": ref("SignaturePlacement"),
            },
            ["case_id", "signers"], closed=True,
        ),
        "SignRequest": obj(
            {"manifest": ref("KioskManifest"),
             "document": {"type": "string", "contentMediaType": "application/pdf"}},
            ["manifest", "document"], closed=True,
        ),
        "StoredObject": obj(
            {
                "case_id": {"type": "string", "pattern": CASE_ID_PATTERN},
                "sha256": {"type": "string", "pattern": SHA256_PATTERN},
                "size": {"type": "integer", "minimum": 0},
                "object_ref": {"type": "string", "pattern": OBJECT_REF_PATTERN},
            },
            ["sha256", "size"],
        ),
        "SignatureReport": obj(
            {
                "field": {"type": "string", "description": "The signature field's name."},
                "kind": {"enum": ["signature", "document_timestamp"]},
                "intact": {"type": ["boolean", "null"], "description": "The signed bytes "
                           "hash to the signed digest; null when it could not be checked."},
                "valid": {"type": ["boolean", "null"], "description": "The signature value "
                          "verifies; null when it could not be checked."},
                "trusted": {"type": ["boolean", "null"], "description": "The signer chains "
                            "to a trust anchor (validation.trust_roots); null when the "
                            "signature could not be checked."},
                "revoked": {"type": "boolean"},
                "level": {"enum": ["B-B", "B-T", "B-LT", "B-LTA", None], "description":
                          "The highest PAdES baseline level met; null for a document "
                          "timestamp or a signature that is not PAdES or not intact."},
                "modification": {"enum": ["none", "lta_updates", "form_filling",
                                          "annotations", "other", None],
                                 "description": "What later revisions changed; other "
                                 "(a change to what a reader sees) fails the signature; "
                                 "null when they could not be compared with it."},
                "signer": {"type": "string", "description": "The certificate's subject "
                           "(RFC 4514)."},
                "signing_time": {"type": ["string", "null"], "format": "date-time",
                                 "description": "Claimed by the signer."},
                "timestamp_time": {"type": ["string", "null"], "format": "date-time",
                                   "description": "Of the timestamp, when it validates."},
                "indication": {"enum": ["TOTAL-PASSED", "TOTAL-FAILED", "INDETERMINATE"]},
                "sub_indication": {"type": ["string", "null"], "description":
                                   "ETSI TS 119 102-1, e.g. NO_CERTIFICATE_CHAIN_FOUND, "
                                   "FORMAT_FAILURE, HASH_FAILURE; null when passed."},
                "problems": {"type": "array", "items": {"type": "string"},
                             "description": "Why it did not pass, for people."},
            },
            ["field", "kind", "intact", "valid", "trusted", "revoked", "level",
             "modification", "signer", "signing_time", "timestamp_time", "indication",
             "sub_indication", "problems"],
        ),
        "VerifyReport": obj(
            {"signatures": {"type": "array", "items": ref("SignatureReport"),
                            "description": "In signing order, document timestamps included."},
             "passed": {"type": "boolean", "description": "There is at least one signature "
                        "and every one is TOTAL-PASSED."},
             "findings": {"type": "array", "items": {"type": "string"}, "description":
                          "What a strict reader would refuse and was read as other "
                          "readers do (a hybrid-reference file, /Encrypt null, a damaged "
                          "document security store entry)."}},
            ["signatures", "passed", "findings"],
        ),
        "Stats": obj(
            {
                "at": {"type": "string", "format": "date-time"},
                "window_s": {"type": "integer"},
                "bucket_s": {"type": "integer"},
                "since": {"type": "string", "format": "date-time",
                          "description": "The first bucket's start."},
                "now": obj({s: {"type": "integer", "minimum": 0}
                             for s in ("queued", "processing", "failed")},
                            ["queued", "processing", "failed"]),
                "oldest_queued_age_s": {"type": ["number", "null"], "minimum": 0},
                "ended": obj({s: {"type": "integer", "minimum": 0}
                               for s in ("ready", "failed", "canceled")},
                              ["ready", "failed", "canceled"]),
                "buckets": {"type": "array", "items": ref("StatsBucket"),
                            "description": "Oldest first; only buckets in which jobs ended."},
            },
            ["at", "window_s", "bucket_s", "since", "now", "oldest_queued_age_s", "ended",
             "buckets"],
        ),
        "StatsBucket": obj(
            {
                "start": {"type": "string", "format": "date-time"},
                **{s: {"type": "integer", "minimum": 0} for s in ("ready", "failed", "canceled")},
                **{f"{c}_ms": obj({"mean": {"type": "number", "minimum": 0},
                                    "max": {"type": "number", "minimum": 0}}, ["mean", "max"])
                   for c in ("admission", "queue_wait", "processing", "total")},
            },
            ["start", "ready", "failed", "canceled", "admission_ms", "queue_wait_ms",
             "processing_ms", "total_ms"],
        ),
        "AuditSample": obj(
            {"events": {"type": "integer", "minimum": 0},
             "ok": {"type": "boolean"},
             "from_seq": {"type": "integer"}, "to_seq": {"type": "integer"},
             "jobs": {"type": "integer", "description": "The tenant's newest jobs sampled."},
             "first_bad": obj({"seq": {"type": "integer"}, "reason": {"type": "string"},
                                "event_id": {"type": "string"}, "job_id": {"type": "string"}},
                               ["seq", "reason"])},
            ["events", "ok"],
        ),
        "AuditHead": obj(
            {"head": {"oneOf": [{"type": "null"}, obj(
                {"seq": {"type": "integer", "minimum": 1},
                 "hash": {"type": "string", "pattern": SHA256_PATTERN},
                 "at": {"type": "string"}}, ["seq", "hash", "at"])]},
             "tail": ref("AuditSample"), "tenant": ref("AuditSample"),
             "ok": {"type": "boolean"}, "complete": {"const": False}},
            ["head", "tail", "tenant", "ok", "complete"],
        ),
        "Readiness": obj(
            {"ready": {"type": "boolean"},
             "checks": {"type": "object", "description": "Each check by name.",
                        "additionalProperties": {"type": "object",
                                                 "properties": {"ok": {"type": "boolean"}},
                                                 "required": ["ok"]}}},
            ["ready", "checks"],
        ),
    }
