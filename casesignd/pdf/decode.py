"""Bounded decoding of PDF streams (PDF 32000-1 §7.4): how large a stream is once
decoded, and its first bytes, without ever holding more than one window of its Flate
output; a stream past its budget raises :class:`~casesignd.core.errors.LimitExceeded`.

Pure functions of bytes: the checks in :mod:`casesignd.pdf.inspect` call them for every
stream they reach.
"""

from __future__ import annotations

import binascii
import zlib
from collections.abc import Callable, Iterator

from pypdf._configuration import apply_configuration
from pypdf._utils import WHITESPACES_AS_BYTES
from pypdf.errors import LimitReachedError
from pypdf.filters import ASCII85Decode, ASCIIHexDecode, LZWDecode, RunLengthDecode

from casesignd.core.errors import LimitExceeded
from casesignd.core.sealed_view import SealedView

# Zlib output is produced at most this much at a time (zlib max_length).
INFLATE_WINDOW_BYTES = 1 << 16

# --- stream filters (PDF 32000-1 §7.4) --------------------------------------------

FLATE = frozenset({"/FlateDecode", "/Fl"})

_A85_DIGITS = bytes(range(ord("!"), ord("u") + 1))
_A85_VALUES = bytes.maketrans(_A85_DIGITS, bytes(range(85)))


def ascii85(data: bytes) -> bytes:
    """ASCII85Decode (§7.4.3) with pypdf's result (``ASCII85Decode.decode``: white
    space ignored, ``z`` for four zero bytes, ``~>`` ending it, a short last group
    padded with ``u``), computed for many groups at once instead of the standard
    library's character by character. Anything but well-formed data (no ``~>``, a bad
    character, a ``z`` inside a group, a group past 2**32 - 1) is left to pypdf, whose
    warning, repair or error is then exactly its own."""
    d = data.strip(WHITESPACES_AS_BYTES)
    if len(d) > 2 and d.endswith(b">"):
        d = d[:-1].rstrip(WHITESPACES_AS_BYTES) + d[-1:]
    if not d.endswith(b"~>"):
        return ASCII85Decode.decode(data)  # pypdf warns, and decodes without the marker
    body = (d[2:-2] if d.startswith(b"<~") else d[:-2]).translate(None, WHITESPACES_AS_BYTES)
    parts = body.split(b"z")
    if body.translate(None, _A85_DIGITS + b"z") or any(len(p) % 5 for p in parts[:-1]):
        return ASCII85Decode.decode(data)
    decoded = [_a85_groups(p) for p in parts]
    if None in decoded:
        return ASCII85Decode.decode(data)  # a group past 2**32 - 1
    return b"\0\0\0\0".join(decoded)  # type: ignore[arg-type]


_A85_CHUNK_GROUPS = 8192


def _a85_groups(digits: bytes) -> bytes | None:
    """Base-85 digits (``!`` to ``u``) as bytes, every five making four and a short
    last group of n (padded with ``u``) n - 1; None when a group is past 2**32 - 1.

    The groups are computed together: the i-th digits of all groups are the bytes of
    one integer, a group to a 40-bit lane, and the lanes' values are built by Horner's
    rule on those integers. A group's value is below 85**5 < 2**33, so no lane ever
    carries into the next; a lane's top byte says whether its group overflows."""
    short = -len(digits) % 5
    values = (digits + b"u" * short).translate(_A85_VALUES)
    out = bytearray()
    for at in range(0, len(values), 5 * _A85_CHUNK_GROUPS):
        v = values[at:at + 5 * _A85_CHUNK_GROUPS]
        lanes = bytearray(len(v))  # five bytes a group, as many as its digits
        total = 0
        for i in range(5):
            lanes[4::5] = v[i::5]
            total = total * 85 + int.from_bytes(lanes, "big")
        words = total.to_bytes(len(v), "big")
        if words[0::5].strip(b"\0"):
            return None
        chunk = bytearray(len(v) // 5 * 4)
        for k in range(4):
            chunk[k::4] = words[1 + k::5]
        out += chunk
    return bytes(out[:len(out) - short] if short else out)


# Decoded in memory (by pypdf, or as pypdf does) with the output capped at the stream
# budget: name -> function of the data.
BOUNDED_DECODERS: dict[str, Callable[[bytes], bytes]] = {
    "/ASCIIHexDecode": ASCIIHexDecode.decode, "/AHx": ASCIIHexDecode.decode,
    "/ASCII85Decode": ascii85, "/A85": ascii85,
    "/RunLengthDecode": RunLengthDecode.decode, "/RL": RunLengthDecode.decode,
    "/LZWDecode": LZWDecode.decode, "/LZW": LZWDecode.decode,
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


def _chunks(data: bytes | SealedView) -> Iterator[bytes]:
    if isinstance(data, SealedView):  # a large stream of a sealed file, read in windows
        yield from data.chunks(INFLATE_WINDOW_BYTES)
        return
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
                out = BOUNDED_DECODERS[name](data)
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
            reason="decompression_bomb") from None
    except LimitReachedError as e:
        raise LimitExceeded("a stream decompresses to more than the allowed size",
                            detail={"library": str(e), "limit": budget},
                            reason="decompression_bomb") from None
