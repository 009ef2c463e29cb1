"""Malware scanning of case documents before they are signed.

One small interface, :class:`Scanner`, with two implementations: :class:`NoopScanner`
(``scanner.kind = "none"``) and :class:`ClamdScanner`, which streams the file to
clamd over its unix socket with the ``INSTREAM`` command. :func:`make_scanner` picks
one from the configuration.

Outcomes, as the job engine sees them:

* clean: ``scan`` returns ``None``;
* ``malware_detected`` (:class:`~casesignd.core.errors.MalwareDetected`, permanent): the
  signature name is in ``detail["signature"]``;
* ``scan_limit_exceeded`` (:class:`~casesignd.core.errors.ScanLimitExceeded`, permanent):
  the file is longer than clamd's ``StreamMaxLength``, so it cannot be declared
  clean; the operator raises that limit (or ``Policy.max_document_bytes`` lowers ours);
* ``scanner_unavailable`` (:class:`~casesignd.core.errors.ScannerUnavailable`, retryable):
  clamd cannot be reached, times out, or answers any other error.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiofiles

from casesignd.core.errors import (
    MalwareDetected,
    ScanLimitExceeded,
    ScannerUnavailable,
    TempBroken,
)
from casesignd.core.sealed import SealBroken, SealedPath

DEFAULT_CHUNK_BYTES = 1 << 20
# clamd replies are one short line; anything longer is not clamd.
MAX_REPLY_BYTES = 4096


class Scanner(Protocol):
    """Scans one file; raises on malware or when it cannot tell."""

    async def scan(self, path: Path | SealedPath | bytes, name_hint: str) -> None:
        """Return when ``path`` (or these bytes) is clean; ``name_hint`` is for messages
        and logs only."""
        ...

    async def ping(self) -> bool:
        """Whether the scanner answers now (for readiness)."""
        ...


class NoopScanner:
    """Scanning switched off: every file is taken as clean."""

    async def scan(self, path: Path | SealedPath | bytes, name_hint: str) -> None:
        return None

    async def ping(self) -> bool:
        return True


@dataclass(frozen=True)
class Verdict:
    """clamd's answer to one stream: ``signature`` is None when clean."""

    signature: str | None


def instream_frames(chunk: bytes | memoryview) -> bytes:
    """One INSTREAM chunk: a 4-byte big-endian length, then the bytes (clamd(8));
    an empty chunk is the terminator."""
    return struct.pack(">I", len(chunk)) + chunk


def parse_reply(reply: bytes) -> Verdict:
    """Decide on clamd's reply to ``zINSTREAM`` (pure).

    ``stream: OK`` is clean, ``stream: <Name> FOUND`` is malware, ``INSTREAM size
    limit exceeded. ERROR`` is ScanLimitExceeded, anything else ScannerUnavailable.
    """
    text = reply.rstrip(b"\0\n").decode("utf-8", "replace").strip()
    if text == "stream: OK":
        return Verdict(None)
    if text.startswith("stream: ") and text.endswith(" FOUND"):
        return Verdict(text[len("stream: "):-len(" FOUND")].strip())
    if "size limit exceeded" in text:
        raise ScanLimitExceeded(
            "the file is larger than the malware scanner accepts",
            detail={"reply": text[:200]})
    raise ScannerUnavailable("the malware scanner answered an error",
                             detail={"reply": text[:200]})


class ClamdScanner:
    """clamd over its unix socket. ``timeout_s`` bounds each step (connecting, sending
    one chunk, waiting for the verdict), so large files are not cut off by it."""

    def __init__(self, socket_path: str, timeout_s: float,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.chunk_bytes = chunk_bytes

    async def _connect(self) -> socket.socket:
        # A plain non-blocking socket rather than asyncio streams: when clamd refuses
        # more data it replies and closes, and that reply must still be readable after
        # our send fails (a stream transport drops it on the write error).
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.get_running_loop().sock_connect(sock, self.socket_path)
        except (OSError, TimeoutError) as e:
            sock.close()
            raise ScannerUnavailable(
                "the malware scanner cannot be reached",
                detail={"socket": self.socket_path, "error": f"{type(e).__name__}: {e}"},
            ) from None
        return sock

    async def _send(self, sock: socket.socket, data: bytes) -> None:
        async with asyncio.timeout(self.timeout_s):
            await asyncio.get_running_loop().sock_sendall(sock, data)

    async def _read_reply(self, sock: socket.socket) -> bytes:
        # z-commands end the reply with NUL (clamd(8)); clamd may also just close.
        loop = asyncio.get_running_loop()
        reply = b""
        async with asyncio.timeout(self.timeout_s):
            while b"\0" not in reply and len(reply) < MAX_REPLY_BYTES:
                data = await loop.sock_recv(sock, MAX_REPLY_BYTES)
                if not data:
                    break
                reply += data
        return reply

    async def scan(self, path: Path | SealedPath | bytes, name_hint: str) -> None:
        """Stream ``path`` (or these bytes) to clamd; raise MalwareDetected, ScanLimitExceeded or
        ScannerUnavailable (see the module docstring)."""
        sock = await self._connect()
        try:
            reply = await self._instream(sock, path)
        except SealBroken as e:
            # The file, not the scanner: the job's retryable io_error.
            raise TempBroken(f"{name_hint}: a temporary file did not read back whole: {e}") from None
        except (OSError, TimeoutError) as e:
            raise ScannerUnavailable(
                "the malware scanner did not answer in time" if isinstance(e, TimeoutError)
                else "the connection to the malware scanner broke",
                detail={"socket": self.socket_path, "error": f"{type(e).__name__}: {e}"},
            ) from None
        finally:
            sock.close()
        verdict = parse_reply(reply)
        if verdict.signature is not None:
            raise MalwareDetected(
                f"{name_hint}: malware found ({verdict.signature})",
                detail={"signature": verdict.signature, "name": name_hint},
            )

    async def _instream(self, sock: socket.socket, path: Path | SealedPath | bytes) -> bytes:
        try:
            await self._send(sock, b"zINSTREAM\0")
            if isinstance(path, bytes):
                view = memoryview(path)
                for at in range(0, len(view), self.chunk_bytes):
                    await self._send(sock, instream_frames(view[at:at + self.chunk_bytes]))
            elif isinstance(path, SealedPath):
                # clamd's INSTREAM takes the plain bytes over its socket: no path needed.
                f = await asyncio.to_thread(path.open)
                try:
                    while chunk := await asyncio.to_thread(f.read, self.chunk_bytes):
                        await self._send(sock, instream_frames(chunk))
                finally:
                    f.close()
            else:
                async with aiofiles.open(path, "rb") as f:
                    while chunk := await f.read(self.chunk_bytes):
                        await self._send(sock, instream_frames(chunk))
            await self._send(sock, instream_frames(b""))
        except (ConnectionResetError, BrokenPipeError):
            # clamd stops reading once StreamMaxLength is passed and says why before
            # closing; that reply decides, not the broken pipe.
            reply = await self._read_reply(sock)
            if reply:
                return reply
            raise
        return await self._read_reply(sock)

    async def ping(self) -> bool:
        """``zPING`` answered by ``PONG``."""
        try:
            sock = await self._connect()
        except ScannerUnavailable:
            return False
        try:
            await self._send(sock, b"zPING\0")
            return (await self._read_reply(sock)).rstrip(b"\0\n") == b"PONG"
        except (OSError, TimeoutError):
            return False
        finally:
            sock.close()


def make_scanner(cfg: Any) -> Scanner:
    """The scanner the configuration asks for (``cfg.scanner``)."""
    section = cfg.scanner
    if section.kind == "clamd":
        return ClamdScanner(section.socket, section.timeout_s)
    return NoopScanner()
