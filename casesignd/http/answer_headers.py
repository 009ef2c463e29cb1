"""What every answer carries, whoever made it: ``Cache-Control: no-store`` (a job, an
error or a token's answer is never kept by a browser or a proxy) and
``X-Content-Type-Options: nosniff`` (a browser never runs an answer as something other
than its Content-Type).

One middleware, outside the one that turns errors into answers, so the router's 404
and 405 and an error raised anywhere carry them too. An answer that says its own
``Cache-Control`` keeps it (downloads: ``private, no-store``; the console's files:
``no-cache`` with an ETag). The connection's own refusals, below the application
(:mod:`casesignd.http.runner`), add :data:`ANSWER_HEADERS` themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping

from aiohttp import web

ANSWER_HEADERS: dict[str, str] = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_answer_headers(headers: MutableMapping[str, str]) -> None:
    """:data:`ANSWER_HEADERS` into ``headers``, where they do not say their own."""
    for name, value in ANSWER_HEADERS.items():
        headers.setdefault(name, value)


@web.middleware
async def answer_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The aiohttp middleware: :data:`ANSWER_HEADERS` on every answer."""
    resp = await handler(request)
    if not resp.prepared:  # a streamed answer set its headers before it went out
        add_answer_headers(resp.headers)
    return resp
