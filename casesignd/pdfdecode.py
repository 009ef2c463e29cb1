"""Bounded decoding of PDF streams (PDF 32000-1 §7.4): how large a stream is once
decoded, and its first bytes, without ever holding more than one window of its Flate
output; a stream past its budget raises :class:`~casesignd.errors.LimitExceeded`.

Pure functions of bytes: the checks in :mod:`casesignd.pdfcheck` call them for every
stream they reach.
"""

from __future__ import annotations

import binascii
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from pypdf._configuration import apply_configuration
from pypdf.errors import LimitReachedError
from pypdf.filters import ASCII85Decode, ASCIIHexDecode, LZWDecode, RunLengthDecode

from .errors import LimitExceeded

# Zlib output is produced at most this much at a time (zlib max_length).
INFLATE_WINDOW_BYTES = 1 << 16

# --- stream filters (PDF 32000-1 §7.4) --------------------------------------------

FLATE = frozenset({"/FlateDecode", "/Fl"})
# Decoded in memory by pypdf with its output capped at the stream budget.
BOUNDED_DECODERS: dict[str, Any] = {
    "/ASCIIHexDecode": ASCIIHexDecode, "/AHx": ASCIIHexDecode,
    "/ASCII85Decode": ASCII85Decode, "/A85": ASCII85Decode,
    "/RunLengthDecode": RunLengthDecode, "/RL": RunLengthDecode,
    "/LZWDecode": LZWDecode, "/LZW": LZWDecode,
}
# Image codecs end the chain: their size is judged from /Width, /Height and friends.
IMAGE_CODECS = frozenset({"/DCTDecode", "/DCT", "/JPXDecode", "/CCITTFaxDecode", "/CCF",
                          "/JBIG2Decode"})
COLOR_COMPONENTS = {"/DeviceGray": 1, "/G": 1, "/DeviceRGB": 3, "/RGB": 3,
                    "/DeviceCMYK": 4, "/CMYK": 4, "/Indexed": 1, "/I": 1}


class _TooBig(Exception):
    def __init__(self, produced: int) -> None:
        self.produced = produced


def _inflate(chunks: Iterator[bytes], budget: int,
             tick: Callable[[], None] | None = None) -> Iterator[bytes]:
    """Inflate a chunk stream in windows; raise _TooBig past ``budget`` output bytes."""
    d = zlib.decompressobj()
    produced = 0
    for chunk in chunks:
        buf = chunk
        while True:
            out = d.decompress(buf, INFLATE_WINDOW_BYTES)
            buf = d.unconsumed_tail
            if out:
                produced += len(out)
                if produced > budget:
                    raise _TooBig(produced)
                if tick is not None and not produced % (INFLATE_WINDOW_BYTES * 64):
                    tick()
                yield out
            if d.eof:
                return
            if not out and not buf:
                break


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(view), INFLATE_WINDOW_BYTES):
        yield bytes(view[i:i + INFLATE_WINDOW_BYTES])


HEX = frozenset({"/ASCIIHexDecode", "/AHx"})
RUN_LENGTH = frozenset({"/RunLengthDecode", "/RL"})
_WHITE = b"\x00\t\n\x0c\r "


def _hex(chunks: Iterator[bytes], budget: int,
         tick: Callable[[], None] | None) -> Iterator[bytes]:
    """ASCIIHexDecode (§7.4.2) in windows: white space skipped, ``>`` ends it, an odd
    last digit is followed by 0. pypdf's decoder takes tens of times its output in
    memory; this one a window. Bad digits raise zlib.error (damaged data)."""
    pending, produced = b"", 0
    for chunk in chunks:
        end = chunk.find(b">")
        digits = pending + chunk[: end if end >= 0 else len(chunk)].translate(None, _WHITE)
        pending, digits = (digits[-1:], digits[:-1]) if len(digits) % 2 else (b"", digits)
        try:
            out = binascii.unhexlify(digits)
        except binascii.Error:
            raise zlib.error("invalid hexadecimal data") from None
        produced += len(out)
        if produced > budget:
            raise _TooBig(produced)
        if tick is not None:
            tick()
        yield out
        if end >= 0:
            break
    if pending:
        try:
            yield binascii.unhexlify(pending + b"0")
        except binascii.Error:
            raise zlib.error("invalid hexadecimal data") from None


def _run_length(chunks: Iterator[bytes], budget: int,
                tick: Callable[[], None] | None) -> Iterator[bytes]:
    """RunLengthDecode (§7.4.5) in windows: a length byte 0-127 copies that many + 1
    bytes, 129-255 repeats the next byte 257 - length times, 128 ends the data."""
    buf, produced = b"", 0
    for chunk in chunks:
        buf += chunk
        out = bytearray()
        i, n = 0, len(buf)
        while i < n:
            length = buf[i]
            if length == 128:
                produced += len(out)
                if produced > budget:
                    raise _TooBig(produced)
                yield bytes(out)
                return
            if length < 128:
                if i + length + 2 > n:
                    break
                out += buf[i + 1:i + length + 2]
                i += length + 2
            else:
                if i + 2 > n:
                    break
                out += buf[i + 1:i + 2] * (257 - length)
                i += 2
            if len(out) >= INFLATE_WINDOW_BYTES:
                produced += len(out)
                if produced > budget:
                    raise _TooBig(produced)
                if tick is not None:
                    tick()
                yield bytes(out)
                out = bytearray()
        buf = buf[i:]
        produced += len(out)
        if produced > budget:
            raise _TooBig(produced)
        yield bytes(out)


def _decoded(raw: bytes, filters: list[str], budget: int,
             tick: Callable[[], None] | None) -> Iterator[bytes]:
    stream: Iterator[bytes] = _chunks(raw)
    for name in filters:
        if name in FLATE:
            stream = _inflate(stream, budget, tick)
        elif name in HEX:
            stream = _hex(stream, budget, tick)
        elif name in RUN_LENGTH:
            stream = _run_length(stream, budget, tick)
        elif name in BOUNDED_DECODERS:
            data = b"".join(stream)
            with apply_configuration(lzw_maximum_output_length=budget,
                                     run_length_maximum_output_length=budget):
                out = BOUNDED_DECODERS[name].decode(data)
            if len(out) > budget:
                raise _TooBig(len(out))
            stream = iter([out])
        else:  # image codecs, /Crypt, unknown: the chain ends here
            break
    return stream


def measure_decoded(raw: bytes, filters: list[str], budget: int, head_bytes: int = 4096, *,
                    keep: bool = False, tick: Callable[[], None] | None = None
                    ) -> tuple[int, bytes]:
    """Decoded size and first ``head_bytes`` of a stream (with ``keep``, all of it),
    otherwise never holding more than one window of Flate output; raises
    :class:`LimitExceeded` when the size passes ``budget``."""
    try:
        total, head, kept = 0, b"", []
        for chunk in _decoded(raw, filters, budget, tick):
            total += len(chunk)
            if total > budget:
                raise _TooBig(total)
            if keep:
                kept.append(chunk)
            elif len(head) < head_bytes:
                head += chunk[: head_bytes - len(head)]
        return total, (b"".join(kept) if keep else head)
    except _TooBig as e:
        raise LimitExceeded(
            "a stream decompresses to more than the allowed size (a decompression bomb?)",
            detail={"decoded_at_least": e.produced, "limit": budget, "filters": filters},
        ) from None
    except LimitReachedError as e:
        raise LimitExceeded("a stream decompresses to more than the allowed size",
                            detail={"library": str(e), "limit": budget}) from None
