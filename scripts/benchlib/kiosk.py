"""A lean kiosk client (``POST /v1/sign`` over one kept-alive connection) and the
signers it names: scripts/bench_kiosk.py's load and the kiosk runs of the end-to-end
benchmark (:mod:`benchlib.e2e`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

SIGNERS = [{"id": "kiosk-1", "name": "Front Desk", "role": "clerk"}]


class Kiosk:
    """One kiosk's HTTP/1.1 keep-alive connection. A load generator on the machine it
    measures must cost little: this one writes prepared bytes and reads the answer by
    its Content-Length (about a tenth of the CPU of aiohttp's client per request)."""

    def __init__(self, url: str, token: str, document: bytes) -> None:
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.token = token
        self.boundary = uuid.uuid4().hex.encode()
        self.document_part = (b"--" + self.boundary + b'\r\nContent-Disposition: form-data; '
                              b'name="document"; filename="doc.pdf"\r\nContent-Type: '
                              b"application/pdf\r\n\r\n" + document + b"\r\n--" + self.boundary
                              + b"--\r\n")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def sign(self, manifest: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        body = (b"--" + self.boundary + b'\r\nContent-Disposition: form-data; name="manifest"'
                b"\r\nContent-Type: application/json\r\n\r\n" + json.dumps(manifest).encode()
                + b"\r\n" + self.document_part)
        head = (f"POST /v1/sign HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\n"
                f"Content-Type: multipart/form-data; boundary={self.boundary.decode()}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        status_line = await self.reader.readuntil(b"\r\n")
        headers: dict[str, str] = {}
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return int(status_line.split()[1]), headers, payload
