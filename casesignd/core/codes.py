"""Every error code the service answers or records, in one table.

A code is stable: clients and scripts branch on it. Each row says the HTTP status it
answers with, the failure category a job that fails with it records, whether the job
engine retries it, and what it means. The OpenAPI document's enums and the metrics'
``code`` label set are derived from this table, and the tests hold docs/api.md, the
exception tree (:mod:`casesignd.core.errors`) and every code written in the source to it:
a new code is one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

PERMANENT = "permanent_input"
RETRIES = "retries_exhausted"
INTERNAL = "internal"


@dataclass(frozen=True)
class Code:
    """One error code: its status, the category a failed job records, whether it is
    retried, and its meaning (for people)."""

    name: str
    status: int
    category: str
    retryable: bool
    meaning: str


_ROWS: tuple[tuple[str, int, str, bool, str], ...] = (
    # requests
    ("bad_request", 400, PERMANENT, False, "the request cannot be read"),
    ("malformed_json", 400, PERMANENT, False, "the body is not valid JSON"),
    ("invalid_multipart", 400, PERMANENT, False, "the kiosk's multipart body is malformed"),
    ("unauthorized", 401, PERMANENT, False, "no bearer token"),
    ("invalid_token", 401, PERMANENT, False, "the bearer token is not valid"),
    ("forbidden", 403, PERMANENT, False, "not allowed"),
    ("link_expired", 403, PERMANENT, False, "the download link's time is past"),
    ("link_invalid", 403, PERMANENT, False, "the download link's signature does not match"),
    ("not_found", 404, PERMANENT, False, "no such resource (also another tenant's)"),
    ("job_not_found", 404, PERMANENT, False, "no such job (also another tenant's)"),
    ("delivery_not_found", 404, PERMANENT, False, "no webhook delivery of that id for this tenant"),
    ("artifact_not_found", 404, PERMANENT, False, "no such artifact (also another tenant's)"),
    ("hold_not_found", 404, PERMANENT, False, "the case has no legal hold"),
    ("case_not_found", 404, PERMANENT, False,
     "the tenant has no such case (no job, object or artifact of it)"),
    ("method_not_allowed", 405, PERMANENT, False, "the path takes other methods"),
    ("not_acceptable", 406, PERMANENT, False, "no answer of an acceptable type"),
    ("request_timeout", 408, PERMANENT, False,
     "the request did not arrive within server.request_timeout_s (an upload: server.upload_max_s)"),
    ("length_required", 411, PERMANENT, False, "the body needs a Content-Length"),
    ("conflict", 409, PERMANENT, False, "the resource is in another state"),
    ("not_failed", 409, PERMANENT, False, "only a failed job can be retried"),
    ("not_cancelable", 409, PERMANENT, False, "the job is held by a worker or finished"),
    ("not_ready", 409, PERMANENT, False,
     "the job has no artifact to download: it is not ready (the command line's refusal)"),
    ("in_progress", 409, PERMANENT, False,
     "the first request with this Idempotency-Key is still running"),
    ("job_canceled", 409, PERMANENT, False, "the kiosk request's job was canceled"),
    ("on_hold", 409, PERMANENT, False, "the case is under a legal hold: nothing of it is erased"),
    ("case_busy", 409, PERMANENT, False,
     "a job of the case is running; erase it once it ends (with Retry-After)"),
    ("already_exists", 409, PERMANENT, False, "init does not overwrite an existing file"),
    ("too_large", 413, PERMANENT, False, "a body, object, document or job over its limit"),
    ("uri_too_long", 414, PERMANENT, False, "the request's path and query are too long"),
    ("unsupported_media_type", 415, PERMANENT, False, "a body or part of the wrong type"),
    ("headers_too_large", 431, PERMANENT, False, "the request's headers are too large"),
    ("queue_full", 429, INTERNAL, True, "past workers.max_queue_depth; with Retry-After"),
    ("rate_limited", 429, INTERNAL, True,
     "past the tenant's limits.admit_rate jobs per window; Retry-After: the window's end"),
    ("tenant_queue_full", 429, INTERNAL, True,
     "past the tenant's limits.max_queued waiting jobs; with Retry-After"),
    ("quota_exceeded", 429, INTERNAL, True,
     "past the tenant's limits.upload_bytes per window; Retry-After: the window's end"),
    ("too_many_uploads", 429, INTERNAL, True,
     "past server.max_uploads or server.max_uploads_per_tenant uploads at once; with Retry-After"),
    ("busy", 503, INTERNAL, True, "no capacity now; with Retry-After"),
    ("upload_quota", 503, INTERNAL, True,
     "the uploads in flight fill storage.upload_quota_bytes; with Retry-After"),
    ("shutting_down", 503, INTERNAL, True, "the daemon is stopping; with Retry-After"),
    ("store_unavailable", 503, INTERNAL, True, "the store cannot be written now"),
    ("deadline_exceeded", 504, INTERNAL, True, "the kiosk deadline passed; a replay returns it"),
    ("unavailable", 503, INTERNAL, False, "the daemon cannot start: a part is missing"),
    ("init_failed", 500, INTERNAL, False, "init could not write the setup"),
    ("logo_missing", 500, INTERNAL, False, "the logo an accepted invoice names, or a stamp shows, is not kept"),
    ("store_not_empty", 409, PERMANENT, False,
     "store copy's target holds jobs or events of another store: two chains never mix"),
    ("schema_mismatch", 409, PERMANENT, False,
     "store copy's source is not at this casesignd's schema: migrate it first"),
    ("audit_chain_broken", 500, INTERNAL, False,
     "an audit chain does not verify: store copy copies none of it"),
    ("target_not_empty", 409, PERMANENT, False,
     "backup and restore write only into a new or empty directory or database"),
    ("backup_invalid", 422, PERMANENT, False,
     "a backup without its manifest, or with a file missing, extra or altered"),
    ("file_vanished", 409, PERMANENT, False,
     "files the store names kept going away while backing up: run it again"),
    ("tool_missing", 500, INTERNAL, False, "pg_dump or pg_restore is not installed"),
    ("internal_error", 500, INTERNAL, False, "a fault of the service; quote the correlation id"),
    # validation (422)
    ("invalid_field", 422, PERMANENT, False, "a field has the wrong type or value"),
    ("invalid_body", 422, PERMANENT, False, "the body is not a JSON object"),
    ("missing_field", 422, PERMANENT, False, "a required field is missing"),
    ("unknown_field", 422, PERMANENT, False, "a field the request does not have"),
    ("unknown_kind", 422, PERMANENT, False, "no job kind of that name"),
    ("unknown_webhook", 422, PERMANENT, False, "none of the tenant's webhook endpoints has that name"),
    ("unknown_policy", 422, PERMANENT, False, "no policy of that version"),
    ("unknown_template", 422, PERMANENT, False, "no invoice template of that version"),
    ("invalid_case_id", 422, PERMANENT, False, "a case id of 1-128 [A-Za-z0-9._:-]"),
    ("invalid_sha256", 422, PERMANENT, False, "a digest of 64 hex digits"),
    ("invalid_object_ref", 422, PERMANENT, False, "an object_ref of no known form"),
    ("invalid_idempotency_key", 422, PERMANENT, False, "an Idempotency-Key of 1-255 printable ASCII"),
    ("idempotency_key_reused", 422, PERMANENT, False, "the same key with another request"),
    ("invalid_cursor", 422, PERMANENT, False, "a cursor this service did not give"),
    ("invalid_limit", 422, PERMANENT, False, "a limit outside 1-200"),
    ("invalid_state", 422, PERMANENT, False, "a state filter that is not a client state"),
    ("invalid_amount", 422, PERMANENT, False, "an amount that is not a decimal string, or too precise"),
    ("invalid_quantity", 422, PERMANENT, False, "a quantity that is not a positive integer"),
    ("unsupported_character", 422, PERMANENT, False, "a character the invoice font cannot print"),
    ("unsupported_currency", 422, PERMANENT, False, "a currency the invoices do not know"),
    ("contract_count", 422, PERMANENT, False, "not exactly one contract item"),
    ("duplicate_signer", 422, PERMANENT, False, "signer ids must be unique"),
    ("too_many_items", 422, PERMANENT, False, "more items than the policy or template allows"),
    ("media_type_not_allowed", 422, PERMANENT, False, "a media type the policy does not allow"),
    # documents and inputs (job failures, and 422 on the kiosk)
    ("invalid_input", 422, PERMANENT, False, "the job's input cannot succeed"),
    ("malformed_pdf", 422, PERMANENT, False, "not a PDF, or damage no two readers repair alike"),
    ("ambiguous_pdf", 422, PERMANENT, False,
     "readers could show the PDF differently and it cannot be rewritten into one"),
    ("encrypted_pdf", 422, PERMANENT, False, "an encrypted PDF (any security handler)"),
    ("active_content", 422, PERMANENT, False,
     "actions, scripts, media players or executable files the policy does not allow"),
    ("limit_exceeded", 422, PERMANENT, False, "a page, object, size, decoded-byte or CPU budget"),
    ("scan_limit_exceeded", 422, PERMANENT, False, "larger than the malware scanner examines"),
    ("malware_detected", 422, PERMANENT, False, "the malware scanner found something"),
    ("media_type_mismatch", 422, PERMANENT, False, "the content is not of its declared type"),
    ("digest_mismatch", 422, PERMANENT, False, "the bytes differ from the declared digest"),
    ("size_mismatch", 422, PERMANENT, False, "the bytes differ from the declared size"),
    ("certificate_revoked", 422, PERMANENT, False,
     "the signing certificate is revoked; nothing is signed with it"),
    ("certificate_expired", 422, PERMANENT, False,
     "the signing certificate is not yet or no longer valid, or lacks the key usage"),
    ("certified_no_changes", 422, PERMANENT, False,
     "certified with DocMDP P=1: a further signature would break it"),
    ("certified_pdf", 422, PERMANENT, False, "certified: files cannot be embedded"),
    ("field_exists", 422, PERMANENT, False, "a signature field of that name exists"),
    ("signature_field_not_found", 422, PERMANENT, False,
     "the document has no signature field of the name the request gives"),
    ("signature_field_already_signed", 422, PERMANENT, False,
     "the signature field the request names holds a signature already"),
    ("signature_box_off_page", 422, PERMANENT, False,
     "the signature's box is not on its page (outside the page's crop box)"),
    ("certification_not_first", 422, PERMANENT, False,
     "the policy certifies, and the document carries a signature already"),
    ("object_not_found", 422, PERMANENT, False, "the object_ref names nothing"),
    ("path_outside_source", 422, PERMANENT, False, "a source path leaves its root"),
    ("source_rejected", 422, PERMANENT, False, "the source refused the read for good"),
    ("layout_failed", 422, PERMANENT, False, "the invoice cannot be laid out"),
    ("test_permanent", 422, PERMANENT, False, "the test kind's permanent failure"),
    # transient job failures (retried)
    ("transient_failure", 503, RETRIES, True, "something outside the job failed for now"),
    ("source_unavailable", 503, RETRIES, True, "a source could not be read for now"),
    ("temp_quota", 503, RETRIES, True, "the temp volume is full for now; the job waits"),
    ("io_error", 503, RETRIES, True,
     "a sealed file did not read back whole: a temporary file of the attempt (the job "
     "retries from its source), or a stored object or artifact altered, cut or without its "
     "data key; never signed or served"),
    ("scanner_unavailable", 503, RETRIES, True, "the malware scanner cannot be reached"),
    ("renderer_unavailable", 503, RETRIES, True,
     "a page renderer that checks rewritten documents (pdftoppm, mutool) is not installed"),
    ("tsa_unavailable", 503, RETRIES, True, "the time-stamping authority cannot be reached"),
    ("revocation_unavailable", 503, RETRIES, True,
     "revocation data (OCSP or CRL) for a chain cannot be had for now"),
    ("certificate_untrusted", 503, RETRIES, True,
     "the signing or a TSA's certificate does not chain to [validation] trust_roots"),
    ("signing_failed", 503, RETRIES, True, "the signing key or token failed"),
    ("signing_key_unavailable", 503, RETRIES, True, "no signing key is configured"),
    ("attempt_timeout", 503, RETRIES, True, "an attempt ran past workers.max_run_s"),
    ("worker_lost", 503, RETRIES, True, "a worker process died during the call"),
    ("test_transient", 503, RETRIES, True, "the test kind's transient failure"),
    # the engine's own records
    ("lease_lost", 409, INTERNAL, False, "a worker's lease was taken over"),
    ("stale_result", 409, INTERNAL, False, "a stale worker's result, dropped"),
    ("signature_too_large", 500, INTERNAL, False, "the CMS did not fit its placeholder"),
)

CODES: dict[str, Code] = {row[0]: Code(*row) for row in _ROWS}


def row_of(code: str) -> Code:
    """The table's row of ``code``; an unknown code is answered as ``internal_error``
    (every code the source writes is held to the table by tests/unit/test_codes.py, so
    only a code from outside, a store written by a newer casesignd, can miss)."""
    return CODES.get(code) or CODES["internal_error"]


# The codes an HTTP status gets when the framework answers it (the router's 404 and
# 405, a body aiohttp cannot read): one per status, the status the table's.
_FRAMEWORK_CODES = ("bad_request", "unauthorized", "forbidden", "not_found",
                    "method_not_allowed", "not_acceptable", "request_timeout",
                    "length_required", "too_large", "uri_too_long", "unsupported_media_type",
                    "headers_too_large", "internal_error")
FRAMEWORK_CODES: dict[int, str] = {CODES[name].status: name for name in _FRAMEWORK_CODES}


def code_for_status(status: int) -> str:
    """The code of an answer the framework gives with ``status``: its own where the
    table has one, else ``bad_request`` (4xx) or ``internal_error`` (pure)."""
    return FRAMEWORK_CODES.get(status) or ("bad_request" if status < 500 else "internal_error")


@dataclass(frozen=True)
class Reason:
    """Why a document was refused, finer than its code: the code it is refused with
    and what it means (for people)."""

    name: str
    code: str
    meaning: str


# A refused document's `reason` (with `where`: page, object, attachment or field).
# Stable like the codes: clients and the console branch on them.
_REASON_ROWS: tuple[tuple[str, str, str], ...] = (
    # active content
    ("automatic_action", "active_content",
     "an action that runs without a click (/OpenAction, /AA) leaves the document"),
    ("link_scheme", "active_content",
     "a link or button goes to a target the policy's allowed_link_schemes does not allow "
     "(file:, UNC and SMB paths, javascript:, data:, or no URL at all)"),
    ("forbidden_action", "active_content",
     "an action that starts a program, imports data or is not allowed (Launch, ImportData, "
     "RichMediaExecute, an action type outside the policy's allowed_actions)"),
    ("javascript", "active_content", "a script (JavaScript), anywhere in the document"),
    ("xfa_form", "active_content", "an XFA form, which carries its own scripts"),
    ("active_media", "active_content", "a media player, 3D artwork or rich media"),
    ("executable_attachment", "active_content",
     "an embedded file that runs, mounts or opens with macros (a program, a script, a disk "
     "image, an Office file with macros, an archive holding one)"),
    ("unchecked_attachment", "active_content",
     "an embedded file that cannot be decoded or looked into, so it cannot be checked"),
    # ambiguity and damage
    ("duplicate_key", "ambiguous_pdf", "a dictionary names one key twice"),
    ("xref_conflict", "ambiguous_pdf",
     "the cross-reference and the objects the file defines disagree (an object defined "
     "twice, an entry naming another object, a freed object still read)"),
    ("page_tree_conflict", "ambiguous_pdf",
     "the page tree counts or types its pages in a way readers read differently"),
    ("page_entry_conflict", "ambiguous_pdf",
     "a page's resources, boxes or contents are of a type readers resolve differently"),
    ("data_around_pdf", "ambiguous_pdf",
     "bytes before the header or after the end: another program opens it as something else"),
    ("viewer_drawn_form", "ambiguous_pdf",
     "a form field whose look each viewer draws itself, in a document that cannot be "
     "rewritten (it carries a signature, or the policy never normalises), or that the "
     "rewrite cannot draw (a push button without an appearance, a multiline, comb or "
     "password field's value, a rotated field)"),
    ("readers_disagree", "ambiguous_pdf",
     "no two independent readers (pypdf, qpdf, poppler, MuPDF) agree on what the pages hold"),
    ("pages_render_differently", "ambiguous_pdf",
     "a page of the rewrite looks different from the received page"),
    ("truncated", "malformed_pdf", "the file ends before its end: it was cut off"),
    ("damaged", "malformed_pdf", "damage no two readers repair alike"),
    ("not_a_pdf", "malformed_pdf", "the file is not a PDF, or holds no pages"),
    # encryption
    ("password_encryption", "encrypted_pdf", "encrypted with a password (standard security)"),
    ("public_key_encryption", "encrypted_pdf", "encrypted for recipients' certificates"),
    # certification
    ("certified_no_changes", "certified_no_changes",
     "certified with DocMDP P=1: nothing may be added, not even a signature"),
    # signature placement
    ("signature_field_not_found", "signature_field_not_found",
     "no signature field of the requested name (where: the field)"),
    ("signature_field_already_signed", "signature_field_already_signed",
     "the requested signature field is signed already (where: the field)"),
    ("signature_box_off_page", "signature_box_off_page",
     "the signature's box is not inside its page's crop box, or there is no such page "
     "(where: the page)"),
    ("certification_not_first", "certification_not_first",
     "the policy certifies, and the document carries a signature already"),
    # limits
    ("too_many_pages", "limit_exceeded", "more pages than the policy's max_pages"),
    ("too_many_objects", "limit_exceeded", "more objects than the policy's max_pdf_objects"),
    ("too_large", "limit_exceeded", "larger than the policy's max_document_bytes"),
    ("decompression_bomb", "limit_exceeded",
     "a stream, an image or all streams together decode past the policy's limits"),
    ("check_time", "limit_exceeded", "checking it takes more CPU time than max_check_cpu_s"),
    ("nested_too_deeply", "limit_exceeded", "objects or embedded PDFs nested too deeply"),
    ("too_many_signatures", "limit_exceeded",
     "more signature fields than validation.budget.max_signatures (verify)"),
    ("contents_too_large", "limit_exceeded",
     "a signature's /Contents larger than validation.budget.max_contents_bytes (verify)"),
    ("validation_time", "limit_exceeded",
     "validating its signatures takes more CPU time than validation.budget.max_cpu_s"),
    ("memory_budget", "limit_exceeded",
     "validating its signatures needs more memory than validation.budget.max_memory_bytes"),
)

REASONS: dict[str, Reason] = {row[0]: Reason(*row) for row in _REASON_ROWS}
