"""Outgoing calls as trace spans, the words every layer shares: what a TSA, OCSP, CRL,
source or webhook client is handed to make its call a span and to send that span's
W3C ``traceparent`` with it, without knowing whether tracing is on.

The parent is always passed explicitly, as a ``traceparent`` string (None: the call
starts a trace of its own): a call may run in a thread (urllib), on another event
loop (pyHanko's), or outlive the task that began it (a background refresh), where the
task's current span would be the wrong one or none. A string crosses every one of
those boundaries; the daemon's tracer (:meth:`casesignd.observability.tracing.Tracing.call`)
turns it back into a span context, and is safe to call from any thread.

What a call notes follows the rule of metrics and logs: ids, kinds, codes, sizes and
timings; of a URL its host and port alone (operator configuration, or a CA's), never
its path or query, which may name a file or a person.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Protocol
from urllib.parse import urlsplit

Attribute = str | int | float | bool


class Call(Protocol):
    """One outgoing call while it runs."""

    @property
    def traceparent(self) -> str | None:
        """The value of the ``traceparent`` header the call sends (None: send none)."""

    def note(self, key: str, value: Attribute) -> None:
        """Add an attribute to the call's span (its status, a size)."""


class Calls(Protocol):
    """Makes a span of each outgoing call."""

    def call(self, name: str, parent: str | None,
             attributes: Mapping[str, Attribute]) -> contextlib.AbstractContextManager[Call]:
        """A client span named ``name`` under ``parent`` (a ``traceparent``; None: a
        trace of its own) while the block runs; an exception leaving the block is noted
        by its code (``error.type``), never its message."""

    def current(self) -> str | None:
        """The ``traceparent`` of the span current in this task (a job phase's, a
        request's), to hand on explicitly; None when tracing is off or none is."""


class _NoCall:
    traceparent = None

    def note(self, key: str, value: Attribute) -> None:
        pass


NO_CALL: Call = _NoCall()


class NoCalls:
    """Tracing off: no span, no header, next to no cost."""

    @contextlib.contextmanager
    def call(self, name: str, parent: str | None,
             attributes: Mapping[str, Attribute]) -> Iterator[Call]:
        yield NO_CALL

    def current(self) -> str | None:
        return None


NO_CALLS: Calls = NoCalls()


def server_of(url: str) -> dict[str, Attribute]:
    """What a span may say of ``url``: its host and port, never its path or query (pure)."""
    parts = urlsplit(url)
    out: dict[str, Attribute] = {"server.address": parts.hostname or ""}
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    if port is not None:
        out["server.port"] = port
    return out


def trace_headers(call: Call) -> dict[str, str]:
    """The header that carries ``call``'s span to the server, when there is one."""
    tp = call.traceparent
    return {"traceparent": tp} if tp else {}
