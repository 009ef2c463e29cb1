"""What the daemon answers before a request reaches the application: the HTTP
parser's refusals, in the contract's error shape, and the ``Server`` header.

aiohttp answers a request it cannot parse (a bad request line, a malformed or folded
header, a line longer than it reads, broken chunked framing) from its connection
handler, below the application and its middlewares, with a text body that quotes
the offending bytes: a folded ``Authorization`` header came back to the client and
went into the log with its token. :class:`Runner` serves the application through
connections whose :meth:`ContractHandler.handle_error` answers
``{"error": {"code", "message", "correlation_id"}}`` with a fixed message per kind
of fault, and logs the kind alone.

aiohttp (pinned in pyproject.toml) has no public hook for this (aio-libs/aiohttp
#3287): the handler class is chosen in ``web.Server.__call__``, so the runner makes
its server as :class:`web.AppRunner` does and hands it to :class:`_Server`, which
builds :class:`ContractHandler` connections with the same arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
)
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from casesignd.core.codes import code_for_status
from casesignd.core.logs import log_event
from casesignd.http.answer_headers import ANSWER_HEADERS
from casesignd.store import random_hex

log = logging.getLogger("casesignd.http.runner")

# Every answer names the service, never the Python and aiohttp versions behind it.
SERVER_HEADER = "casesignd"

# What the client is told, by kind of fault, most specific first: never the bytes
# the parser quotes, which may be a header's value (a token).
_MESSAGES: tuple[tuple[type[BaseException], str], ...] = (
    (LineTooLong, "a request line or header is longer than this server reads"),
    (InvalidHeader, "a header cannot be read"),
    (BadHttpMethod, "the request method cannot be read"),
    (BadStatusLine, "the request line cannot be read"),
    (InvalidURLError, "the request target cannot be read"),
    (PayloadEncodingError, "the request body's framing cannot be read"),
)

Refused = Callable[[str], None]


def parser_message(exc: BaseException | None) -> str:
    """The fixed message for a parser fault ``exc`` (pure)."""
    for kind, message in _MESSAGES:
        if isinstance(exc, kind):
            return message
    return "the request cannot be read"


async def server_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: aiohttp's default names its own and Python's versions."""
    response.headers["Server"] = SERVER_HEADER


class ContractHandler(RequestHandler):
    """A connection whose own error answers have the contract's shape."""

    refused: Refused | None = None

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:
            # Part of an answer is out: the connection is broken (as aiohttp's own).
            raise ConnectionError("an answer is on its way; no error can follow it")
        cid = random_hex(12)
        if status >= 500:
            code, text = "internal_error", "internal error; quote the correlation id"
            log_event(log, "http.internal_error", level=logging.ERROR, correlation_id=cid,
                      status=status, error=type(exc).__name__ if exc else None, exc_info=exc)
        else:
            code, text = code_for_status(status), parser_message(exc)
            # The kind of fault only: the parser's message quotes what it could not read.
            log_event(log, "http.unreadable", correlation_id=cid, status=status,
                      reason=type(exc).__name__ if exc else None)
        if self.refused is not None:
            self.refused(code)
        body = {"error": {"code": code, "message": text, "correlation_id": cid}}
        resp = web.Response(body=msgspec.json.encode(body), status=status,
                            content_type="application/json",
                            headers={"Server": SERVER_HEADER, "X-Correlation-Id": cid,
                                     **ANSWER_HEADERS})
        resp.force_close()
        return resp


class _Server(web.Server):
    """A web.Server whose connections are :class:`ContractHandler`."""

    def __init__(self, made: web.Server, refused: Refused | None) -> None:
        super().__init__(made.request_handler, request_factory=made.request_factory,
                         handler_cancellation=made.handler_cancellation,
                         **made._kwargs)
        self.refused = refused

    def __call__(self) -> RequestHandler:
        handler = ContractHandler(self, loop=self._loop, **self._kwargs)
        handler.refused = self.refused
        return handler


class Runner(web.AppRunner):
    """An AppRunner serving through :class:`ContractHandler` connections; ``refused``
    hears the code of each refusal they answer (metrics)."""

    def __init__(self, app: web.Application, *, refused: Refused | None = None,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._refused = refused

    async def _make_server(self) -> web.Server:
        return _Server(await super()._make_server(), self._refused)
