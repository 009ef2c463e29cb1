"""What every HTTP handler uses: the services, the tenant behind a token, bodies read
within their limits and their time, and JSON and artifact answers.

Shared by the API under /v1 (:mod:`casesignd.http.api`) and the kiosk path
(:mod:`casesignd.http.kiosk`).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from casesignd.core.errors import (
    BadRequest,
    NotFound,
    RequestTimeout,
    TooLarge,
    Unauthorized,
    UnsupportedMediaType,
    ValidationError,
)
from casesignd.core.hashing import sha256_hex
from casesignd.files.envelope import SealedFile
from casesignd.http import download_headers as httpsafe
from casesignd.http.sealed_download import sealed_response
from casesignd.http.services import SERVICES, HandlerServices

_json = msgspec.json.Encoder()


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_json.encode(data), status=status, headers=headers,
                        content_type="application/json")


def error_body(code: str, message: str, correlation_id: str, field: str | None = None, *,
               reason: str | None = None, where: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract's error body; a refused document adds its reason and where."""
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    if reason:
        err["reason"] = reason
        if where:
            err["where"] = where
    err["correlation_id"] = correlation_id
    return {"error": err}


def route_name(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


def services_of(request: web.Request) -> HandlerServices:
    return request.app[SERVICES]


def authenticate(request: web.Request) -> str:
    """The tenant behind the bearer token. Tokens are stored only as SHA-256 digests and
    compared in constant time against every tenant."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    digest = sha256_hex(token.strip().encode("utf-8", "surrogateescape"))
    found = None
    for known, tenant in services_of(request).tenants.items():
        if hmac.compare_digest(known, digest):
            found = tenant
    if found is None:
        raise Unauthorized("the bearer token is not valid", code="invalid_token",
                           headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    return found


def authenticate_operator(request: web.Request) -> None:
    """The operator behind the bearer token (``[operator] token_sha256``), compared in
    constant time; anything else, a tenant's token or none, is told the path does not
    exist (404): an admin path says nothing to whoever may not use it."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    known = services_of(request).config.operator.token_sha256
    digest = sha256_hex(token.strip().encode("utf-8", "surrogateescape"))
    if not (known and scheme.lower() == "bearer" and token.strip()
            and hmac.compare_digest(known, digest)):
        raise NotFound("no such resource")


def body_deadline(request: web.Request) -> float:
    """When the request's body must be in: server.request_timeout_s after its arrival
    (event-loop time, for asyncio.timeout_at)."""
    timeout_s = services_of(request).config.server.request_timeout_s
    return asyncio.get_running_loop().time() + timeout_s - (time.time() - request["t0"])


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes, within server.request_timeout_s.

    One ``read`` returns only what has arrived so far, so read until the end: a body
    sent in several segments is still one body.
    """
    buf = bytearray()
    try:
        async with asyncio.timeout_at(body_deadline(request)):
            while chunk := await request.content.read(limit + 1 - len(buf)):
                buf += chunk
                if len(buf) > limit:
                    raise TooLarge(f"the body is larger than {limit} bytes")
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    return bytes(buf)


async def timed_chunks(request: web.Request, chunk_bytes: int) -> AsyncIterator[bytes]:
    """The body in chunks, within its time: a pause longer than
    server.request_timeout_s, or a body still arriving server.upload_max_s after the
    request did, ends it with 408 ``request_timeout``.

    Object uploads may be large, so the pause bound alone would let a client that
    sends a byte now and then hold an upload (and its file) for ever.
    """
    server = services_of(request).config.server
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + server.upload_max_s - (time.time() - request["t0"])
    chunks = request.content.iter_chunked(chunk_bytes).__aiter__()
    while True:
        left = ends_at - loop.time()
        try:
            async with asyncio.timeout(min(server.request_timeout_s, left)):
                chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            if left <= server.request_timeout_s:
                raise RequestTimeout("the upload did not arrive within server.upload_max_s",
                                     detail={"reason": "upload_max_s"}) from None
            raise RequestTimeout("the request body stalled",
                                 detail={"reason": "request_timeout_s"}) from None
        yield chunk


def decode_json(raw: bytes, field: str | None = None) -> Any:
    """``raw`` as JSON, or BadRequest ``malformed_json``.

    msgspec raises more than DecodeError for bytes that are not JSON: RecursionError
    for nesting deeper than it recurses, UnicodeDecodeError for a string that is not
    UTF-8. Each is the client's fault, never a 500.
    """
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        what = "the body" if field is None else f"the {field}"
        raise BadRequest(f"{what} is not valid JSON", code="malformed_json", field=field) from None


async def read_json(request: web.Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object, within ``limit`` bytes."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType("the body must be application/json")
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"the body is larger than {limit} bytes")
    data = decode_json(await read_body(request, limit))
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object", code="invalid_body")
    return data


async def artifact_response(source: bytes | Path | SealedFile, headers: dict[str, str],
                      filename: str | None = None) -> web.StreamResponse:
    """An artifact's bytes as kept in the store, or its file.

    Every download is safe to open: ``nosniff`` (a browser never runs it as something
    else than its Content-Type) and an ``attachment`` disposition (saved, never shown
    inline) under a name built from ``filename`` by
    :func:`casesignd.http.download_headers.download_filename` (``signed`` when none is given)."""
    headers = {**headers, "X-Content-Type-Options": "nosniff"}
    media_type = headers.get("Content-Type", "application/pdf")
    headers["Content-Disposition"] = httpsafe.content_disposition(
        httpsafe.download_filename(filename or "signed", media_type))
    if isinstance(source, bytes):
        return web.Response(body=source, headers=headers)
    if isinstance(source, SealedFile):  # sealed at rest: decrypted as it streams out
        return await sealed_response(source, headers)
    return web.FileResponse(source, headers=headers)
