"""Structured logs: one JSON object per line on stdout, for journald and ``jq``.

Each line carries ``ts`` (RFC 3339, UTC), ``level``, ``logger``, ``msg`` (an event
name such as ``job.finished``) and the structured fields of the event. Fields pass an
allow-list (:data:`ALLOWED_FIELDS`): a key outside it is dropped and only its name is
reported in ``dropped_fields``, so a student's name, a case ID or an order ID cannot
reach the journal by accident. Tracebacks go into ``exc`` as one escaped line; they
never reach a client.

Usage::

    log = logging.getLogger(__name__)
    log_event(log, "job.finished", job_id=job.id, kind=job.kind, duration_ms=12.5)
    log.info("job.claimed", extra={"fields": {"job_id": job.id, "attempt": 2}})
"""

from __future__ import annotations

import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import IO, Any

import msgspec

# Reviewed field names: identifiers, timings and codes, never personal or case data.
# Add a name here only after checking that no value of it can identify a person,
# a case or an order.
ALLOWED_FIELDS = frozenset({
    "job_id", "attempt", "correlation_id", "kind", "phase", "duration_ms", "state",
    "code", "category", "tenant_hash", "error", "route", "status", "method",
    "reason", "delay_ms", "bytes", "count", "version", "listen", "signal",
    "policy_version", "template_version", "source", "pool", "workers", "phases_ms",
    # a daemon's name (serve --node) and the event loop it runs on, revocation data
    # counts and freshness, and the keyed, unguessable id of an artifact a renewal is for
    "node", "event_loop", "ocsps", "crls", "good_until", "artifact_id",
    # how many things of each area a retention sweep or an erasure removed (counts)
    "rejected", "jobs", "artifacts", "objects", "canceled", "deliveries",
})  # fmt: skip

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# Loggers whose lines would carry raw request paths (which contain case IDs): the
# HTTP layer logs "http.request" with the route template instead.
_QUIET = ("aiohttp.access",)


def error_text(exc: BaseException) -> str:
    """``ClassName: message`` of an exception, for the ``error`` field."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def clean_fields(fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split ``fields`` into the allowed ones (JSON-ready) and the names dropped."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in fields.items():
        if key not in ALLOWED_FIELDS:
            dropped.append(key)
            continue
        if isinstance(value, BaseException):
            value = error_text(value)
        elif isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, int | float) for k, v in value.items()):
            pass  # timings by name (phases_ms)
        elif not isinstance(value, str | int | float | bool | type(None)):
            value = str(value)
        kept[key] = value
    return kept, sorted(dropped)


# The formatted second of the last line: lines come many to a second.
_SECOND: tuple[int, str] = (-1, "")


def rfc3339(epoch_s: float) -> str:
    """``2026-11-29T09:55:17.123Z`` for a UNIX time."""
    global _SECOND
    ms = int(epoch_s * 1000)
    second, prefix = _SECOND
    if ms // 1000 != second:
        second = ms // 1000
        prefix = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        _SECOND = (second, prefix)
    return f"{prefix}{ms % 1000:03d}Z"


# A field value of another type is logged as its str() (json.dumps' default=str).
_ENCODER = msgspec.json.Encoder(enc_hook=str)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            kept, dropped = clean_fields(fields)
            for key, value in kept.items():
                out.setdefault(key, value)
            if dropped:
                out["dropped_fields"] = dropped
        if record.exc_info and record.exc_info[0] is not None:
            exc = record.exc_info[1]
            if exc is not None and "error" not in out:
                out["error"] = error_text(exc)
            out["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.stack_info:
            out["stack"] = record.stack_info
        # The exception text escapes its newlines: the traceback stays on this one line.
        return _ENCODER.encode(out).decode()


class _MalformedRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse at error level, with a traceback and the
    first 100 bytes of the offending line, which may be a header holding a bearer
    token or a path holding a case ID. The client is at fault: keep a warning that
    names the error class and status only."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args, record.exc_info, record.exc_text = (
                "http.malformed_request", (), None, None)
            record.fields = {"error": type(exc).__name__, "status": exc.code}
        return True


_MALFORMED = _MalformedRequestFilter()


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler :func:`configure` owns, so a second call replaces it."""


def configure(level: str, stream: IO[str] | None = None) -> None:
    """Route all logging to ``stream`` (stdout by default) as JSON lines at ``level``.

    Calling it again (SIGHUP reload, tests) replaces the previous handler.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {sorted(LEVELS)}")
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _Handler):
            root.removeHandler(h)
    # No line names its source file and line: records need not walk up the stack for
    # them (the logging HOWTO's "Optimization" switch). Records keep their thread:
    # pdfcheck sorts pypdf's warnings by it.
    logging._srcfile = None
    handler = _Handler(stream if stream is not None else sys.stdout)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(LEVELS[level.lower()])
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if _MALFORMED not in server.filters:
        server.addFilter(_MALFORMED)


def log_event(
    logger: logging.Logger,
    event: str,
    *,
    level: int = logging.INFO,
    exc_info: BaseException | bool | None = None,
    **fields: Any,
) -> None:
    """Log ``event`` with structured ``fields``; keys outside the allow-list are dropped."""
    if logger.isEnabledFor(level):
        logger.log(level, event, exc_info=exc_info, extra={"fields": fields}, stacklevel=2)
