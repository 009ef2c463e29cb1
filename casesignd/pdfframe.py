"""The file's frame and its object definitions: where readers of one PDF can part ways.

Readers agree on a PDF only when its frame is whole — the header at the start, one
``startxref`` that names a cross-reference section, ``%%EOF`` at the end and nothing
after it — and when every object the cross-reference names is the one defined last
under that number. Otherwise each reader repairs in its own way: pypdf takes the first
``N 0 obj`` it finds, qpdf and poppler rebuild from the last one; a ZIP or HTML file
around the PDF is a polyglot that other programs open as something else.

:func:`read_frame` and :func:`definition_findings` are pure: they read a buffer (bytes
or an ``mmap``, never copied whole) and return :class:`Finding` values. A finding is
``damage`` (something a reader must repair) or ``ambiguity`` (readers may show
different things); :mod:`casesignd.pipeline` decides what to do with them.
"""

from __future__ import annotations

import contextlib
import mmap
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import MalformedPdf

DAMAGE = "damage"
AMBIGUITY = "ambiguity"

# Readers accept the header within the first 1024 bytes (PDF 32000-1 Annex H).
HEADER_WINDOW_BYTES = 1024
# An xref table entry is exactly 20 bytes (PDF 32000-1 §7.5.4).
XREF_ENTRY_BYTES = 20
# After the last %%EOF, only white space (and NUL padding some producers write).
_TRAILING_OK = b"\x00\t\n\x0c\r "
_TRAILING_SAMPLE_BYTES = 1024

_HEADER = re.compile(rb"%PDF-(\d\.\d)")
_STARTXREF = re.compile(rb"startxref[\x00\t\n\x0c\r ]+(\d+)")
_XREF_TABLE = re.compile(rb"[\x00\t\n\x0c\r ]*xref[\x00\t\n\x0c\r ]+(\d+)[\x00\t\n\x0c\r ]+(\d+)")
_XREF_STREAM = re.compile(rb"[\x00\t\n\x0c\r ]*\d+[\x00\t\n\x0c\r ]+\d+[\x00\t\n\x0c\r ]+obj\b")
# An object definition "N G obj" (§7.3.10), as rebuilding readers look for them.
_OBJ_HEADER = re.compile(
    rb"(?<![0-9])([0-9]{1,10})[\x00\t\n\x0c\r ]+([0-9]{1,5})[\x00\t\n\x0c\r ]+obj(?![A-Za-z0-9])")


@dataclass(frozen=True)
class Finding:
    """One reason readers may need to repair the document (``damage``) or may read it
    differently (``ambiguity``)."""

    kind: str
    reason: str


@dataclass(frozen=True)
class Frame:
    """The header's version and offset, the last ``startxref`` (None when there is
    none to follow), whether it names an xref stream, and what is wrong."""

    version: str
    header_offset: int
    startxref: int | None
    xref_stream: bool
    findings: tuple[Finding, ...]


def read_frame(buf: Any, size: int) -> Frame:
    """Check the header (§7.5.2) and the trailer frame (§7.5.5) of the whole file
    ``buf`` (bytes or mmap). Raises :class:`MalformedPdf` only when there is no PDF
    header at all; anything else becomes a finding."""
    m = _HEADER.search(buf[:HEADER_WINDOW_BYTES])
    if not m:
        raise MalformedPdf("not a PDF: no %PDF- header in the first 1024 bytes")
    found: list[Finding] = []
    if m.start():
        found.append(Finding(AMBIGUITY, f"{m.start()} bytes before the %PDF- header "
                                        "(another file format around the PDF?)"))
    eof = rfind(buf, b"%%EOF", size)
    end = size
    if eof < 0:
        found.append(Finding(DAMAGE, "no %%EOF marker: the file is truncated"))
    else:
        end = eof
        after = size - (eof + 5)
        if after > _TRAILING_SAMPLE_BYTES or \
                buf[eof + 5:size].strip(_TRAILING_OK):
            found.append(Finding(AMBIGUITY, f"{after} bytes after the last %%EOF "
                                            "(an appended file or a polyglot?)"))
    sx = buf.rfind(b"startxref", max(0, end - 4096), end)
    startxref: int | None = None
    xref_stream = False
    if sx < 0:
        found.append(Finding(DAMAGE, "no startxref before the end of the file"))
    else:
        sm = _STARTXREF.match(buf, sx)
        offset = int(sm.group(1)) if sm else -1
        if not 0 <= offset < size:
            found.append(Finding(DAMAGE, "startxref points outside the file"))
        else:
            kind = classify_xref(buf[offset:offset + 64], size - offset)
            if kind is None:
                found.append(Finding(DAMAGE, "startxref does not point at a "
                                             "cross-reference section"))
            elif kind == "claims_too_many":
                found.append(Finding(DAMAGE, "the cross-reference table claims more "
                                             "entries than the file holds"))
            else:
                startxref, xref_stream = offset, kind == "stream"
    return Frame(m.group(1).decode(), m.start(), startxref, xref_stream, tuple(found))


def classify_xref(at: bytes, remaining: int) -> str | None:
    """``"table"`` or ``"stream"`` for the section at a ``startxref`` offset (``at``:
    its first bytes, ``remaining``: the bytes from there on), ``"claims_too_many"``
    for a table larger than the file, None for anything else."""
    m = _XREF_TABLE.match(at)
    if m:
        return "claims_too_many" if int(m.group(2)) * XREF_ENTRY_BYTES > remaining else "table"
    return "stream" if _XREF_STREAM.match(at) else None


# A scan reads this much of an mmap at a time, then lets its pages go: resident memory
# stays bounded however large the file.
SCAN_WINDOW_BYTES = 2 * 1024 * 1024
# A definition header is short; a window reads this far past its end.
_HEADER_OVERLAP = 256


def object_definitions(buf: Any, size: int | None = None) -> dict[int, list[tuple[int, int]]]:
    """Every ``N G obj`` in the file, as a rebuilding reader finds them: object number
    -> [(offset of N, generation)] in file order. Reads ``buf`` (bytes or an mmap) in
    windows, without copying it."""
    size = len(buf) if size is None else size
    out: dict[int, list[tuple[int, int]]] = {}
    for start in range(0, size, SCAN_WINDOW_BYTES):
        end = start + SCAN_WINDOW_BYTES
        for m in _OBJ_HEADER.finditer(buf, start, min(size, end + _HEADER_OVERLAP)):
            if m.start() >= end:
                break
            out.setdefault(int(m.group(1)), []).append((m.start(1), int(m.group(2))))
        release(buf, start, end)
    return out


def release(buf: Any, start: int, end: int) -> None:
    """Let the pages of ``buf[start:end]`` go when ``buf`` is an mmap (a no-op for
    bytes): what a scan has read does not stay in the process's resident memory."""
    if not isinstance(buf, mmap.mmap):
        return
    start -= start % mmap.PAGESIZE
    length = min(end, len(buf)) - start
    if length > 0:
        with contextlib.suppress(OSError, ValueError):
            buf.madvise(mmap.MADV_DONTNEED, start, length)


def rfind(buf: Any, needle: bytes, size: int) -> int:
    """``buf.rfind(needle)``, read backwards in windows (see :func:`release`)."""
    end = size
    while end > 0:
        start = max(0, end - SCAN_WINDOW_BYTES)
        at = buf.rfind(needle, start, end)
        release(buf, start, end)
        if at >= 0:
            return at
        if start == 0:
            return -1
        end = start + len(needle) - 1
    return -1


_HEADER_AT = re.compile(
    rb"[\x00\t\n\x0c\r ]{0,16}([0-9]{1,10})[\x00\t\n\x0c\r ]+([0-9]{1,5})[\x00\t\n\x0c\r ]+obj(?![A-Za-z0-9])")


def definition_findings(
    buf: Any,
    defs: Mapping[int, list[tuple[int, int]]],
    xref: Mapping[int, Mapping[int, int]],
    in_streams: Mapping[int, tuple[int, int]],
    used: Iterable[tuple[int, int]],
) -> list[Finding]:
    """Compare what the cross-reference names with what a rebuild would find, for the
    objects ``used`` (number, generation) that the document reaches.

    ``buf``: the file; ``defs``: :func:`object_definitions` of it; ``xref``:
    generation -> number -> offset (pypdf's ``reader.xref``); ``in_streams``: number
    -> (object stream, index) (``reader.xref_objStm``).
    """
    found: list[Finding] = []
    for num, gen in sorted(used):
        mine = defs.get(num, ())
        if num in in_streams:
            stream_defs = defs.get(in_streams[num][0], ())
            stream_at = stream_defs[-1][0] if stream_defs else -1
            if any(off > stream_at for off, _ in mine):
                found.append(Finding(AMBIGUITY, f"object {num} is defined again after the "
                                                "object stream that holds it"))
        else:
            offset = xref.get(gen, {}).get(num)
            if offset is None:
                continue
            m = _HEADER_AT.match(buf, offset)
            if m is None:
                found.append(Finding(DAMAGE, f"the cross-reference entry of object {num} "
                                             "points at no object"))
            elif (int(m.group(1)), int(m.group(2))) != (num, gen):
                found.append(Finding(AMBIGUITY, f"the cross-reference entry of object {num} "
                                                f"points at object {int(m.group(1))}"))
            elif any(off > m.start(1) for off, g in mine if g == gen):
                found.append(Finding(AMBIGUITY, f"object {num} is defined again after the "
                                                "definition the cross-reference names"))
        if len(found) >= 20:
            break
    return found
