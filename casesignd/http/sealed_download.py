"""An artifact sealed at rest (``[storage] encrypt``), served as its plain bytes: whole,
or one byte range (RFC 9110 §14), decrypted as it streams out.

A result up to :data:`WHOLE_FIRST_BYTES` is read and authenticated before the answer
starts, so a tampered one is answered ``io_error`` (the error shape, no document
bytes). A larger one streams: every chunk is authenticated before it is sent, and a
chunk that fails ends the connection short of its ``Content-Length``, so a client
never takes a partial or altered file for the artifact. Reading happens in threads.
"""

from __future__ import annotations

import asyncio
from typing import BinaryIO

from aiohttp import web

from casesignd.core.sealed import SealBroken
from casesignd.files.envelope import SealedFile, broken

WHOLE_FIRST_BYTES = 16 * 1024 * 1024
_SEND_BYTES = 256 * 1024


def byte_range(request: web.BaseRequest, size: int) -> tuple[int, int] | None:
    """The one range asked for as (start, end) within ``size``, or None for the whole
    file (no Range, or one this server does not serve ranges for: it answers whole).
    ``web.HTTPRequestRangeNotSatisfiable`` for a range past the end."""
    try:
        asked = request.http_range
    except ValueError:
        return None
    start, stop = asked.start, asked.stop
    if start is None and stop is None:
        return None
    if start is not None and start < 0:  # bytes=-N: the last N bytes
        start, stop = max(0, size + start), size
    start = start or 0
    stop = size if stop is None else min(stop, size)
    if start >= stop:
        raise web.HTTPRequestRangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})
    return start, stop


def _read(f: BinaryIO, owner: str, n: int) -> bytes:
    try:
        return f.read(n)
    except SealBroken as e:
        raise broken(owner, e) from None


class SealedFileResponse(web.StreamResponse):
    """A :class:`SealedFile`'s plain bytes (see the module docstring): made by
    :func:`sealed_response`, in the handler."""

    def __init__(self, f: BinaryIO | None, data: bytes | None, size: int, owner: str,
                 headers: dict[str, str]) -> None:
        super().__init__(status=200, headers=headers)
        self._file, self._data, self._size, self._owner = f, data, size, owner

    async def prepare(self, request: web.BaseRequest):  # type: ignore[no-untyped-def]
        try:
            rng = byte_range(request, self._size)
            start, stop = rng if rng is not None else (0, self._size)
            if rng is not None:
                self.set_status(206)
                self.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{self._size}"
            self.headers["Accept-Ranges"] = "bytes"
            self.content_length = stop - start
            writer = await super().prepare(request)
            if request.method == "HEAD":
                return writer
            if self._data is not None:
                await self.write(self._data[start:stop])
            else:
                assert self._file is not None
                await asyncio.to_thread(self._file.seek, start)
                left = stop - start
                while left > 0:
                    chunk = await asyncio.to_thread(_read, self._file, self._owner,
                                                    min(_SEND_BYTES, left))
                    if not chunk:
                        break
                    await self.write(chunk)
                    left -= len(chunk)
            await self.write_eof()
            return writer
        finally:
            if self._file is not None:
                self._file.close()


async def sealed_response(source: SealedFile, headers: dict[str, str]) -> SealedFileResponse:
    """The answer for ``source``, opened (and, up to :data:`WHOLE_FIRST_BYTES`, read and
    authenticated whole) here in the handler, so that what does not read back is the
    ``io_error`` answer rather than a cut connection."""
    f = await asyncio.to_thread(source.open)
    try:
        size = await asyncio.to_thread(f.seek, 0, 2)
        if size > WHOLE_FIRST_BYTES:
            return SealedFileResponse(f, None, size, source.owner, headers)
        await asyncio.to_thread(f.seek, 0)
        data = await asyncio.to_thread(_read, f, source.owner, size)
    except BaseException:
        f.close()
        raise
    f.close()
    return SealedFileResponse(None, data, size, source.owner, headers)
